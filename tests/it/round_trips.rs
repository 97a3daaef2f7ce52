//! Through the project's proxy: round trips counted (not timed), and outages.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;

use crate::support::{collection, point, TestApp, TestDb};
use featurepipe::config::Config;
use featurepipe::proxy::Proxy;

/// Start a proxy in front of `db` and return it with a configuration that goes through it.
async fn via_proxy(db: &TestDb, one_way: Duration) -> (Proxy, Config) {
    let pg: SocketAddr = db
        .url
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = Proxy::start(pg, one_way).await.unwrap();
    let url = db
        .url
        .replace(&pg.to_string(), &proxy.local_addr().to_string());
    (proxy, Config::for_database(&url))
}

#[tokio::test]
async fn a_request_costs_at_most_batches_plus_three_round_trips() {
    let db = TestDb::new(
        "CREATE TABLE r (
            id serial PRIMARY KEY,
            uid uuid DEFAULT gen_random_uuid(),
            created timestamptz DEFAULT clock_timestamp(),
            label text DEFAULT 'x',
            n integer DEFAULT 7,
            seq integer,
            geom geometry(Point, 4326)
         )",
    )
    .await;
    // A little latency keeps answers from overtaking the client's own pipelined sends.
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(2)).await;
    config.pool_size = 1;
    config.batch_size = 100;
    let app = TestApp::on(db, config).await;

    let body = |n: usize| collection((0..n).map(|i| point(0.0, 0.0, json!({"seq": i}))).collect());
    // First request on the connection: the statement is prepared once.
    let before = proxy.round_trips();
    let r = app.post("r", &body(1000)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let cold = proxy.round_trips() - before;
    // Warm: the statement is cached on the connection.
    let before = proxy.round_trips();
    let r = app.post("r", &body(1000)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let warm = proxy.round_trips() - before;
    assert!(warm <= 10 + 3, "warm: {warm} round trips for 10 batches");
    assert_eq!(
        warm, 11,
        "BEGIN rides with batch 1; then 9 batches; then COMMIT"
    );
    assert_eq!(cold, warm + 1, "the first request also prepares");
    assert_eq!(app.db.int("SELECT count(DISTINCT uid) FROM r").await, 2000);
}

#[tokio::test]
async fn a_database_that_goes_away_is_a_503() {
    let db = TestDb::new("CREATE TABLE r (id serial PRIMARY KEY, geom geometry)").await;
    let (proxy, config) = via_proxy(&db, Duration::ZERO).await;
    let app = TestApp::on(db, config).await;
    let one = || point(0.0, 0.0, json!({}));
    assert_eq!(app.post("r", &one()).await.status, 201);
    proxy.sever();
    let r = app.post("r", &one()).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(app.get("/readyz").await.status, 503);
    assert_eq!(
        app.get("/healthz").await.status,
        200,
        "alive, though not ready"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM r").await, 1);
}
