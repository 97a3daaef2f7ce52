//! Through the project's proxy: round trips counted (not timed), and outages.

use std::time::Duration;

use serde_json::json;

use crate::support::{collection, point, settings_file, via_proxy, TestApp, TestDb};

#[tokio::test]
async fn a_whole_request_costs_one_round_trip() {
    one_round_trip_per_request(false).await;
}

#[tokio::test]
async fn a_change_feed_costs_no_round_trip() {
    // Its trigger runs inside the same statements.
    one_round_trip_per_request(true).await;
}

/// 1000 features cost one round trip warm (two cold), on a table with a
/// change feed (`feed`) or without.
async fn one_round_trip_per_request(feed: bool) {
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
    config.write_strategy = featurepipe::write::Strategy::Insert;
    if feed {
        config.settings = Some(settings_file(
            "round-trips",
            "[collections.r]\nchanges = true\n",
        ));
    }
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
    assert!(warm <= 10 + 3, "the core bound is batches + 3; here {warm}");
    assert_eq!(
        warm, 1,
        "BEGIN, 10 batches of INSERTs and COMMIT in one flight"
    );
    assert_eq!(cold, 2, "the first request on a connection also prepares");
    assert_eq!(app.db.int("SELECT count(DISTINCT uid) FROM r").await, 2000);
    let logged = app
        .db
        .int("SELECT coalesce(sum(cardinality(keys)), 0) FROM featurepipe.changes")
        .await;
    assert_eq!(logged, if feed { 2000 } else { 0 });
}

#[tokio::test]
async fn a_database_that_goes_away_is_a_503() {
    let db = TestDb::new("CREATE TABLE r (id serial PRIMARY KEY, geom geometry)").await;
    let (proxy, config) = via_proxy(&db, Duration::ZERO).await;
    let app = TestApp::on(db, config).await;
    let one = || point(0.0, 0.0, json!({}));
    assert_eq!(app.post("r", &one()).await.status, 201);
    proxy.sever();
    // Once a query has found the pooled connection closed, it is not handed
    // out again. (A write sent on it before that is an unknown outcome, 502:
    // its COMMIT left with the flight.)
    assert_eq!(app.get("/readyz").await.status, 503);
    let r = app.post("r", &one()).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(
        app.get("/healthz").await.status,
        200,
        "alive, though not ready"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM r").await, 1);
}

#[tokio::test]
async fn pipelining_off_writes_one_statement_at_a_time() {
    let db =
        TestDb::new("CREATE TABLE r (id serial PRIMARY KEY, n int UNIQUE, geom geometry)").await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(1)).await;
    config.pool_size = 1;
    config.pipeline = false;
    config.batch_size = 4;
    let app = TestApp::on(db, config).await;
    let body = |ns: &[i32]| {
        collection(
            ns.iter()
                .map(|n| point(0.0, 0.0, json!({"n": n})))
                .collect(),
        )
    };
    assert_eq!(app.post("r", &body(&[0])).await.status, 201); // warm up: prepare
    let before = proxy.round_trips();
    let r = app.post("r", &body(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        12,
        "BEGIN, 10 INSERTs, COMMIT"
    );
    assert_eq!(r.body["ids"].as_array().unwrap().len(), 10);

    // A failure stops the sending: statements after it never reach the server.
    let before = proxy.round_trips();
    let r = app
        .post("r", &body(&[11, 12, 1, 13, 14, 15, 16, 17, 18, 19]))
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        5,
        "BEGIN, 3 INSERTs, ROLLBACK"
    );
    assert_eq!(r.body["errors"][0]["feature"], 2);
    assert_eq!(
        r.batch_statuses(),
        ["rolled_back", "not_attempted", "not_attempted"]
    );
    assert_eq!(
        r.body["batches"][0]["not_written"],
        json!({"first": 3, "count": 1})
    );
    assert_eq!(app.db.int("SELECT count(*) FROM r").await, 11);
}

#[tokio::test]
async fn auto_learns_that_a_far_database_makes_one_flight_the_fastest() {
    let db = TestDb::new(
        "CREATE TABLE r (id serial PRIMARY KEY, seq integer, geom geometry(Point, 4326));
         CREATE TABLE u (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), seq integer,
                         geom geometry(Point, 4326));",
    )
    .await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(25)).await;
    config.pool_size = 1;
    config.write_strategy = featurepipe::write::Strategy::Auto;
    config.copy_threshold = None; // measured
    let app = TestApp::on(db, config).await;
    let body = collection(
        (0..1000)
            .map(|i| point(0.0, 0.0, json!({"seq": i})))
            .collect(),
    );
    // Keys drawn by a defaults query cost COPY a round trip of its own.
    // Before anything is measured the database is taken to be next door: COPY.
    let first = app.post("u", &body).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(first.body["strategy"], "copy");
    // Each write measures the 50 ms round trip: the defaults query's stops paying.
    let mut strategies = Vec::new();
    for _ in 0..8 {
        let r = app.post("u", &body).await;
        assert_eq!(r.status, 201, "{r:?}");
        strategies.push(r.body["strategy"].as_str().unwrap().to_owned());
    }
    assert_eq!(strategies.last().unwrap(), "insert", "{strategies:?}");
    let before = proxy.round_trips();
    let r = app.post("u", &body).await;
    assert_eq!(r.body["strategy"], "insert");
    assert_eq!(proxy.round_trips() - before, 1);
    assert_eq!(app.db.int("SELECT count(*) FROM u").await, 10_000);
    // Keys COPY draws itself from the sequence cost nothing more: whichever
    // auto takes (COPY, or the INSERT of many rows a statement, which it
    // may find as cheap), a write is one flight, far away as well as near.
    assert_eq!(app.post("r", &body).await.status, 201);
    let before = proxy.round_trips();
    let r = app.post("r", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(proxy.round_trips() - before, 1, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM r").await, 2_000);
}
