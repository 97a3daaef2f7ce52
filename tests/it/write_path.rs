//! The core write path: ids in feature order, single Features, batching.

use serde_json::json;

use crate::support::{collection, point, TestApp};

const POINTS: &str = "CREATE TABLE pts (
    id serial PRIMARY KEY,
    seq integer NOT NULL,
    name text,
    geom geometry(Point, 4326) NOT NULL
)";

#[tokio::test]
async fn thousand_points_ids_map_back_to_their_features() {
    let app = TestApp::with_config(POINTS, |c| c.batch_size = 128).await;
    // Make the serial start somewhere other than 1 so a positional mix-up shows.
    app.db
        .client
        .batch_execute("SELECT setval('pts_id_seq', 4000)")
        .await
        .unwrap();
    let features = (0..1000)
        .map(|i| {
            point(
                i as f64 / 10.0,
                45.0,
                json!({"seq": i, "name": format!("p{i}")}),
            )
        })
        .collect();
    let r = app.post("pts", &collection(features)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let ids = r.body["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 1000);
    for (i, id) in ids.iter().enumerate() {
        assert!(id.is_i64(), "integer keys are JSON numbers: {id}");
        let seq = app
            .db
            .int(&format!("SELECT seq::int8 FROM pts WHERE id = {id}"))
            .await;
        assert_eq!(seq, i as i64, "id {id} belongs to feature {i}");
    }
    let x = app
        .db
        .text("SELECT ST_X(geom)::text FROM pts WHERE seq = 999")
        .await;
    assert_eq!(x.as_deref(), Some("99.9"));
    let batches = r.body["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 8, "1000 features in batches of 128");
    assert!(batches.iter().all(|b| b["status"] == "committed"));
    assert_eq!(batches[7]["first_feature"], 896);
    assert_eq!(batches[7]["count"], 104);
}

#[tokio::test]
async fn single_feature_returns_location() {
    let app = TestApp::new(POINTS).await;
    let r = app.post("pts", &point(1.0, 2.0, json!({"seq": 1}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["ids"][0].as_i64().unwrap();
    assert_eq!(
        r.headers["location"],
        format!("/collections/pts/items/{id}").as_str()
    );
}

#[tokio::test]
async fn empty_collection_is_a_no_op() {
    let app = TestApp::new(POINTS).await;
    let r = app.post("pts", &collection(vec![])).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ids"], json!([]));
}

#[tokio::test]
async fn batches_are_also_cut_by_bytes() {
    let app = TestApp::with_config(POINTS, |c| c.batch_bytes = 1000).await;
    let long = "x".repeat(400);
    let features = (0..10)
        .map(|i| point(0.0, 0.0, json!({"seq": i, "name": long})))
        .collect();
    let r = app.post("pts", &collection(features)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let counts: Vec<_> = r.body["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].clone())
        .collect();
    assert_eq!(counts, vec![json!(2); 5]);
}

#[tokio::test]
async fn health_and_readiness() {
    let app = TestApp::new(POINTS).await;
    assert_eq!(app.get("/healthz").await.status, 200);
    let r = app.get("/readyz").await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn no_free_connection_is_a_503_with_retry_after() {
    let app = TestApp::with_config(POINTS, |c| {
        c.pool_size = 1;
        c.pool_wait = std::time::Duration::from_millis(100);
    })
    .await;
    let held = app.state.db.connection().await.unwrap();
    let r = app.post("pts", &point(0.0, 0.0, json!({"seq": 1}))).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    drop(held);
    let r = app.post("pts", &point(0.0, 0.0, json!({"seq": 1}))).await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn features_that_write_other_columns_share_a_statement_with_their_run() {
    // Every third feature leaves `name` out: runs of one shape, each one
    // INSERT of many rows within its batch. The feed logs one entry per
    // statement, which counts them.
    let path = crate::changes::feeds_on("shapes", &["pts"]);
    let app = TestApp::with_config(POINTS, |c| {
        c.batch_size = 128;
        c.settings = Some(path);
        c.write_strategy = featurepipe::write::Strategy::Insert;
    })
    .await;
    let features: Vec<_> = (0..300)
        .map(|i| {
            let props = match i % 3 {
                2 => json!({"seq": i}),
                _ => json!({"seq": i, "name": format!("p{i}")}),
            };
            point(i as f64 / 10.0, 45.0, props)
        })
        .collect();
    let r = app.post("pts", &collection(features)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let ids = r.body["ids"].as_array().unwrap();
    for (i, id) in ids.iter().enumerate() {
        let row =
            format!("SELECT seq::int8 FROM pts WHERE id = {id} AND (name IS NULL) = ({i} % 3 = 2)");
        assert_eq!(
            app.db.int(&row).await,
            i as i64,
            "id {id} belongs to feature {i}"
        );
    }
    // Runs of 2 and 1 alternate: 200 + 100 statements, less the runs the
    // batch boundaries (128, 256) join or cut.
    let statements = app.db.int("SELECT count(*) FROM featurepipe.changes").await;
    let runs = |range: std::ops::Range<i64>| {
        let shapes: Vec<bool> = range.map(|i| i % 3 == 2).collect();
        1 + shapes.windows(2).filter(|w| w[0] != w[1]).count() as i64
    };
    assert_eq!(statements, runs(0..128) + runs(128..256) + runs(256..300));
    let keys = "SELECT sum(cardinality(keys)) FROM featurepipe.changes";
    assert_eq!(app.db.int(keys).await, 300);
    // Runs of one shape are one statement a batch.
    let same: Vec<_> = (0..300)
        .map(|i| point(0.0, 0.0, json!({"seq": i, "name": "same"})))
        .collect();
    app.db
        .client
        .batch_execute("TRUNCATE featurepipe.changes")
        .await
        .unwrap();
    assert_eq!(app.post("pts", &collection(same)).await.status, 201);
    assert_eq!(
        app.db.int("SELECT count(*) FROM featurepipe.changes").await,
        3
    );
}
