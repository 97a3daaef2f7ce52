//! The catalog: what is published, under which id, and what is writable.

use serde_json::json;

use crate::support::{config, point, TestApp, TestDb};

#[tokio::test]
async fn collections_are_tables_with_geometry() {
    let app = TestApp::with_config(
        "CREATE SCHEMA extra;
         CREATE TABLE roads (gid int PRIMARY KEY, geom geometry(LineString, 4326));
         CREATE TABLE no_key (name text, geom geometry);
         CREATE TABLE two_keys (a int, b int, geom geometry, PRIMARY KEY (a, b));
         CREATE TABLE plain (id int PRIMARY KEY, name text);
         CREATE TABLE extra.trees (id serial PRIMARY KEY, geom geometry(Point, 4326));
         COMMENT ON TABLE roads IS 'Road centre lines';",
        |c| c.schemas = vec!["public".into(), "extra".into()],
    )
    .await;
    let r = app.get("/collections").await;
    assert_eq!(r.status, 200);
    let ids: Vec<_> = r.body["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            json!("extra.trees"),
            json!("no_key"),
            json!("roads"),
            json!("two_keys")
        ]
    );
    let roads = &r.body["collections"][2];
    assert_eq!(roads["description"], "Road centre lines");
    assert_eq!(roads["writable"], true);
    assert_eq!(r.body["collections"][1]["writable"], false);
    // A composite key names features too (tests/it/composite_keys.rs).
    assert_eq!(r.body["collections"][3]["writable"], true);

    // Tables without a key are read-only.
    let r = app
        .post("no_key", &point(0.0, 0.0, json!({"name": "x"})))
        .await;
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    // Tables outside the first schema are addressed as schema.table.
    let r = app.post("extra.trees", &point(0.0, 0.0, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM extra.trees").await, 1);
}

#[tokio::test]
async fn start_up_fails_clearly_without_postgis() {
    let db = TestDb::new("DROP EXTENSION postgis").await;
    let config = config(&db.url);
    let err = featurepipe::AppState::start(&config)
        .await
        .err()
        .expect("must fail");
    assert!(
        err.to_string().contains("PostGIS is not installed"),
        "{err}"
    );
}

#[tokio::test]
async fn start_up_gives_up_on_an_unreachable_database() {
    let mut config = config("postgres://postgres@127.0.0.1:1/none");
    config.db.startup_timeout = std::time::Duration::from_millis(200);
    let err = featurepipe::AppState::start(&config)
        .await
        .err()
        .expect("must fail");
    assert!(
        err.to_string().contains("cannot reach the database"),
        "{err}"
    );
}

#[tokio::test]
async fn migrations_are_recorded_once() {
    let app = TestApp::new("CREATE TABLE t (id serial PRIMARY KEY, geom geometry)").await;
    // A second start (another replica) applies nothing new.
    let again = config(&app.db.url);
    featurepipe::AppState::start(&again).await.unwrap();
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM featurepipe.schema_migrations")
            .await,
        9
    );
}

#[tokio::test]
async fn a_refused_start_up_says_what_postgresql_said() {
    let db = TestDb::new("").await;
    // A login that may not create the service's schema: its migration fails.
    db.client
        .batch_execute(&crate::support::create_role("fp_test_no_create", "LOGIN"))
        .await
        .unwrap();
    let url = db.url.replacen("postgres@", "fp_test_no_create@", 1);
    let err = featurepipe::AppState::start(&config(&url))
        .await
        .err()
        .expect("must fail")
        .to_string();
    // Not "db error": the server's message, severity and SQLSTATE.
    assert!(!err.ends_with("db error"), "{err}");
    assert!(err.contains("ERROR: permission denied"), "{err}");
    assert!(err.contains("(SQLSTATE 42501)"), "{err}");
    // Detail and hint, where the server gives them.
    let raised = db
        .client
        .batch_execute(
            "DO $$ BEGIN RAISE EXCEPTION 'refused' USING DETAIL = 'the detail', \
             HINT = 'the hint', ERRCODE = 'P0001'; END $$",
        )
        .await
        .unwrap_err();
    assert_eq!(
        featurepipe::db::said::said(&raised),
        "ERROR: refused (SQLSTATE P0001); DETAIL: the detail; HINT: the hint"
    );
}
