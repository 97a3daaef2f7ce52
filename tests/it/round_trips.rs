//! Round trips counted by the project's proxy, not timed.

use std::time::Duration;

use serde_json::json;

use crate::support::{collection, point, TestApp, TestDb};
use featurepipe::config::Config;
use featurepipe::proxy::Proxy;

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
    let pg: std::net::SocketAddr = db
        .url
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // A little latency keeps answers from overtaking the client's own pipelined sends.
    let proxy = Proxy::start(pg, Duration::from_millis(2)).await.unwrap();
    let mut config = Config::for_database(
        &db.url
            .replace(&pg.to_string(), &proxy.local_addr().to_string()),
    );
    config.pool_size = 1;
    config.batch_size = 100;
    let app = TestApp::on(db, config).await;

    let body = |n: usize| collection((0..n).map(|i| point(0.0, 0.0, json!({"seq": i}))).collect());
    // Cold connection: connect, prepare once.
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
    assert!(
        cold <= warm + 3,
        "cold adds connection and prepare only: {cold}"
    );
    assert_eq!(app.db.int("SELECT count(DISTINCT uid) FROM r").await, 2000);
}
