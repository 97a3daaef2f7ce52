//! Edit sessions (`POST /transactions`) and commit modes, through the proxy
//! where round trips matter.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{collection, point, via_proxy, TestApp, TestDb, TestResponse};

const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name text NOT NULL, n int CHECK (abs(n) = n),
                      note text DEFAULT 'fresh', updated_at timestamptz,
                      geom geometry(Point, 4326));
    CREATE TABLE roads (gid serial PRIMARY KEY, name text UNIQUE,
                        geom geometry(LineString, 4326));
    CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN NEW.note := coalesce(NEW.note, '') || '+t'; RETURN NEW; END $$;
    CREATE TRIGGER stamp BEFORE UPDATE ON pts FOR EACH ROW EXECUTE FUNCTION stamp();
    INSERT INTO pts (name, n, geom) SELECT 'p' || i, i, ST_MakePoint(i, 0)::geometry(Point, 4326)
      FROM generate_series(1, 10) AS i;
";

/// `operations` as an edit session in `mode`.
pub async fn session(app: &TestApp, mode: &str, operations: Vec<Value>) -> TestResponse {
    app.send(
        "POST",
        &format!("/transactions?mode={mode}"),
        &[("content-type", "application/json")],
        Some(json!({ "operations": operations }).to_string()),
    )
    .await
}

fn line(name: &str) -> Value {
    json!({"type": "Feature", "properties": {"name": name},
           "geometry": {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}})
}

fn statuses(r: &TestResponse) -> Vec<String> {
    let results = r.body["results"]
        .as_array()
        .or_else(|| r.body["report"]["results"].as_array())
        .unwrap_or_else(|| panic!("no results: {r:?}"));
    results
        .iter()
        .map(|x| x["status"].as_str().unwrap().to_owned())
        .collect()
}

/// Status and errors, without a 3000-result report.
fn brief(r: &TestResponse) -> String {
    format!("{} {}", r.status, r.body["errors"])
}

/// `n` operations across two collections, every kind; names start with `tag`.
fn mixed(tag: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| match i % 6 {
            0 => json!({"op": "insert", "collection": "pts", "feature": point(i as f64, 1.0, json!({"name": format!("{tag}new{i}"), "n": i}))}),
            1 => json!({"op": "insert", "collection": "roads", "feature": line(&format!("{tag}road{i}"))}),
            2 => json!({"op": "update", "collection": "pts", "id": 1 + i % 10, "patch": {"properties": {"n": i}}}),
            3 => json!({"op": "replace", "collection": "pts", "id": 1 + i % 10, "feature": point(2.0, 2.0, json!({"name": format!("r{i}")}))}),
            4 => json!({"op": "insert", "collection": "pts", "features": collection(vec![
                    point(0.0, 0.0, json!({"name": format!("fc{i}a")})),
                    point(0.0, 0.0, json!({"name": format!("fc{i}b")}))])}),
            _ => json!({"op": "update", "collection": "roads", "id": 1, "patch": {"properties": {"name": format!("{tag}renamed{i}")}}}),
        })
        .collect()
}

#[tokio::test]
async fn three_thousand_operations_in_one_round_trip() {
    let db = TestDb::new(SETUP).await;
    db.client
        .batch_execute(
            "INSERT INTO roads (name, geom) VALUES ('first', 'SRID=4326;LINESTRING(0 0,1 1)')",
        )
        .await
        .unwrap();
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(2)).await;
    config.pool_size = 1;
    config.batch_size = 500;
    let app = TestApp::on(db, config).await;
    let before = proxy.round_trips();
    let r = session(&app, "atomic", mixed("warm", 60)).await;
    assert_eq!(r.status, 200, "{}", brief(&r));
    let cold = proxy.round_trips() - before;
    assert_eq!(cold, 2, "prepare every distinct statement, then one flight");
    let before = proxy.round_trips();
    let r = session(&app, "atomic", mixed("a", 3000)).await;
    assert_eq!(r.status, 200, "{}", brief(&r));
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "warm: BEGIN, 3000 operations, COMMIT in one flight"
    );
    assert_eq!(r.body["written"], 3000);
    assert_eq!(r.body["batches"].as_array().unwrap().len(), 8);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results[0]["ids"].as_array().unwrap().len(), 1);
    assert_eq!(results[4]["ids"].as_array().unwrap().len(), 2);
    assert!(results[2]["etag"].as_str().unwrap().len() == 32);
    // Request order is kept: the last update of road 1 wins.
    assert_eq!(
        app.db
            .text("SELECT name FROM roads WHERE gid = 1")
            .await
            .as_deref(),
        Some("arenamed2999")
    );
    assert_eq!(
        app.db.int("SELECT count(*) FROM roads").await,
        1 + 60 / 6 + 3000 / 6
    );
    // Batch mode: one transaction per batch, still one flight.
    let before = proxy.round_trips();
    let r = session(&app, "batch", mixed("b", 3000)).await;
    assert_eq!(r.status, 200, "{}", brief(&r));
    assert_eq!(proxy.round_trips() - before, 1);
    let batches = r.body["batches"].as_array().unwrap();
    assert!(
        batches.iter().all(|b| b["status"] == "committed"),
        "{batches:?}"
    );
}

#[tokio::test]
async fn a_failure_in_the_middle_in_each_mode() {
    let db = TestDb::new(SETUP).await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(1)).await;
    config.pool_size = 1;
    config.batch_size = 4;
    let app = TestApp::on(db, config).await;
    // Ten inserts; the fifth breaks the CHECK constraint.
    let ops = || -> Vec<Value> {
        (0..10)
            .map(|i| {
                let n = if i == 4 { -1 } else { i };
                json!({"op": "insert", "collection": "pts",
                       "feature": point(0.0, 0.0, json!({"name": format!("m{i}"), "n": n}))})
            })
            .collect()
    };
    let count = || async {
        app.db
            .int("SELECT count(*) FROM pts WHERE name LIKE 'm%'")
            .await
    };

    let r = session(&app, "atomic", ops()).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["operation"], 4);
    assert_eq!(r.body["errors"][0]["constraint"], "pts_n_check");
    assert_eq!(r.body["errors"][0]["pointer"], "/operations/4/feature");
    assert_eq!(
        statuses(&r),
        [
            "rolled_back",
            "rolled_back",
            "rolled_back",
            "rolled_back",
            "failed",
            "not_written",
            "not_written",
            "not_written",
            "not_written",
            "not_written"
        ]
    );
    assert_eq!(count().await, 0);

    // Batches of 4: the second batch (4..8) rolls back, the others commit.
    let r = session(&app, "batch", ops()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let batches: Vec<_> = r.body["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["status"].clone())
        .collect();
    assert_eq!(
        batches,
        [json!("committed"), json!("rolled_back"), json!("committed")]
    );
    assert_eq!(
        statuses(&r),
        [
            "written",
            "written",
            "written",
            "written",
            "failed",
            "not_written",
            "not_written",
            "not_written",
            "written",
            "written"
        ]
    );
    assert_eq!(count().await, 6);
    app.db
        .client
        .batch_execute("DELETE FROM pts WHERE name LIKE 'm%'")
        .await
        .unwrap();

    // Skip: everything but the failing one, in 2 + 1 round trips.
    let before = proxy.round_trips();
    let r = session(&app, "skip", ops()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        5,
        "windows of 4 operations (0-3, 4 fails, 5-8, 9), then COMMIT"
    );
    assert_eq!(r.body["written"], 9);
    assert_eq!(r.body["results"][4]["status"], "failed");
    assert_eq!(r.body["results"][4]["error"]["code"], "check_violation");
    assert_eq!(count().await, 9);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name = 'm4'")
            .await,
        0
    );

    // The items endpoint takes the same modes for a FeatureCollection.
    app.db
        .client
        .batch_execute("DELETE FROM pts WHERE name LIKE 'm%'")
        .await
        .unwrap();
    let fc = collection(
        (0..10)
            .map(|i| {
                point(
                    0.0,
                    0.0,
                    json!({"name": format!("m{i}"), "n": if i == 7 { -1 } else { i }}),
                )
            })
            .collect(),
    );
    let r = app
        .send(
            "POST",
            "/collections/pts/items?mode=skip",
            &[("content-type", "application/geo+json")],
            Some(fc.to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["results"][7]["error"]["pointer"], "/features/7");
    assert_eq!(count().await, 9);
    let r = app
        .send(
            "POST",
            "/collections/pts/items?mode=sometimes",
            &[("content-type", "application/geo+json")],
            Some(fc.to_string()),
        )
        .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn missing_features_and_if_match() {
    let app = TestApp::new(SETUP).await;
    let etag = app.get("/collections/pts/items/1").await.headers["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let r = session(
        &app,
        "atomic",
        vec![
            json!({"op": "update", "collection": "pts", "id": 1, "if_match": etag, "patch": {"properties": {"n": 100}}}),
            json!({"op": "delete", "collection": "pts", "ids": [2, 99]}),
        ],
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/operations/1/ids/1");
    assert_eq!(r.body["errors"][0]["code"], "not_found");
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 1").await, 1);
    assert_eq!(app.db.int("SELECT count(*) FROM pts WHERE id = 2").await, 1);
    // The first operation changed the feature: its old ETag no longer matches.
    let first = json!({"op": "update", "collection": "pts", "id": 1, "if_match": etag, "patch": {"properties": {"n": 100}}});
    let r = session(&app, "skip", vec![first.clone(), first]).await;
    assert_eq!(statuses(&r), ["written", "failed"]);
    assert_eq!(r.body["results"][1]["error"]["code"], "precondition_failed");
    let new_etag = r.body["results"][0]["etag"].as_str().unwrap();
    assert_eq!(
        app.get("/collections/pts/items/1").await.headers["etag"]
            .to_str()
            .unwrap(),
        format!("\"{new_etag}\"")
    );
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "delete", "collection": "pts", "id": 1, "if_match": "nope"})],
    )
    .await;
    assert_eq!(r.status, 412, "{r:?}");
}

#[tokio::test]
async fn replace_and_update_keep_triggers_and_defaults() {
    let app = TestApp::new(SETUP).await;
    let r = session(
        &app,
        "atomic",
        vec![
            json!({"op": "replace", "collection": "pts", "id": 3, "feature": point(5.0, 5.0, json!({"name": "three"}))}),
            json!({"op": "update", "collection": "pts", "id": 4, "patch": {"properties": {"note": "kept"}}}),
            json!({"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "new"}))}),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let rows = app
        .db
        .text("SELECT string_agg(concat_ws(':', id, name, n, note), ' ' ORDER BY id) FROM pts WHERE id IN (3, 4, 11)")
        .await;
    // Replace: n back to its default (NULL), note to its default then the trigger's mark.
    assert_eq!(
        rows.as_deref(),
        Some("3:three:fresh+t 4:p4:4:kept+t 11:new:fresh")
    );
}

#[tokio::test]
async fn invalid_operations_are_reported_before_any_work() {
    let app = TestApp::new(SETUP).await;
    let r = session(
        &app,
        "atomic",
        vec![
            json!({"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "ok"}))}),
            json!({"op": "insert", "collection": "nope", "feature": point(0.0, 0.0, json!({}))}),
            json!({"op": "update", "collection": "pts", "id": 1, "patch": {"properties": {"colour": "red"}}}),
            json!({"op": "upsert", "collection": "pts"}),
            json!({"op": "delete", "collection": "pts"}),
            json!({"op": "replace", "collection": "pts", "id": 2, "feature": point(0.0, 0.0, json!({"name": "x", "id": 3}))}),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    let pointers: Vec<_> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        pointers,
        [
            "/operations/1/collection",
            "/operations/2/patch/properties/colour",
            "/operations/3/op",
            "/operations/4",
            "/operations/5/feature/properties/id",
        ]
    );
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 10);
}

#[tokio::test]
async fn skip_mode_sets_invalid_operations_aside() {
    let app = TestApp::new(SETUP).await;
    let ops = vec![
        json!({"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "good"}))}),
        json!({"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "bad", "colour": "red"}))}),
        json!({"op": "update", "collection": "nope", "id": 1, "patch": {}}),
        json!({"op": "update", "collection": "pts", "id": 1, "patch": {"properties": {"n": 42}}}),
    ];
    let r = session(&app, "atomic", ops.clone()).await;
    assert_eq!(r.status, 422, "validation refuses an atomic session: {r:?}");
    let r = session(&app, "skip", ops).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(statuses(&r), ["written", "failed", "failed", "written"]);
    assert_eq!(
        r.body["results"][1]["error"]["pointer"],
        "/operations/1/feature/properties/colour"
    );
    assert_eq!(r.body["results"][2]["error"]["code"], "unknown_collection");
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name IN ('good', 'bad')")
            .await,
        1
    );
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 1").await, 42);
    // The items endpoint: the invalid feature is reported, the others written.
    let fc = collection(
        (0..5)
            .map(|i| point(0.0, 0.0, json!({"name": format!("s{i}"), "n": if i == 3 { json!("many") } else { json!(i) }})))
            .collect(),
    );
    let r = app
        .send(
            "POST",
            "/collections/pts/items?mode=skip",
            &[("content-type", "application/geo+json")],
            Some(fc.to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        statuses(&r),
        ["written", "written", "written", "failed", "written"]
    );
    assert_eq!(
        r.body["results"][3]["error"]["pointer"],
        "/features/3/properties/n"
    );
    assert_eq!(r.body["results"][4]["ids"], json!([15]));
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name LIKE 's%'")
            .await,
        4
    );
}

#[tokio::test]
async fn edge_cases_fail_cleanly() {
    let app = TestApp::new(&format!(
        "{SETUP}
         CREATE TABLE parent (id int PRIMARY KEY, name text, geom geometry(Point, 4326));
         CREATE TABLE child () INHERITS (parent);
         INSERT INTO parent VALUES (1, 'p', NULL);
         INSERT INTO child VALUES (1, 'c', NULL);
         CREATE TABLE owner (id int PRIMARY KEY);
         CREATE TABLE owned (id serial PRIMARY KEY,
                             owner int REFERENCES owner DEFERRABLE INITIALLY DEFERRED,
                             geom geometry(Point, 4326));
         CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
         CREATE TABLE frozen (id int PRIMARY KEY, name text, geom geometry(Point, 4326));
         INSERT INTO frozen VALUES (1, 'ice', NULL);
         CREATE TRIGGER keep BEFORE UPDATE ON frozen FOR EACH ROW EXECUTE FUNCTION keep();"
    ))
    .await;
    let merge = ("content-type", "application/merge-patch+json");
    // A key shared with a child table: refused, nothing changed.
    let r = app
        .send(
            "PATCH",
            "/collections/parent/items/1",
            &[merge],
            Some(json!({"properties": {"name": "x"}}).to_string()),
        )
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    let r = session(&app, "atomic", vec![json!({"op": "update", "collection": "parent", "id": 1, "patch": {"properties": {"name": "x"}}})]).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "more_than_one_feature");
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM parent WHERE name = 'x'")
            .await,
        0
    );
    // A trigger that skips the update is not a failed precondition.
    let r = app
        .send(
            "PATCH",
            "/collections/frozen/items/1",
            &[merge],
            Some(json!({"properties": {"name": "x"}}).to_string()),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "update", "collection": "frozen", "id": 1, "patch": {"properties": {"name": "x"}}})],
    )
    .await;
    assert_eq!(r.body["errors"][0]["code"], "skipped_by_trigger", "{r:?}");
    // A deferred foreign key fails its own operation in skip mode.
    let ops = vec![
        json!({"op": "insert", "collection": "owned", "feature": point(0.0, 0.0, json!({"owner": 7}))}),
        json!({"op": "insert", "collection": "owned", "feature": point(0.0, 0.0, json!({}))}),
    ];
    let r = session(&app, "skip", ops.clone()).await;
    assert_eq!(statuses(&r), ["failed", "written"], "{r:?}");
    assert_eq!(
        r.body["results"][0]["error"]["code"],
        "foreign_key_violation"
    );
    // Atomic: it fails at COMMIT, blamed on no operation.
    let r = session(&app, "atomic", ops).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(
        r.body["report"]["errors"][0]["code"],
        "foreign_key_violation"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM owned").await, 1);
    // An id that cannot be a key is a missing feature; one if_match cannot cover several ids.
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "delete", "collection": "pts", "id": "abc"})],
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "delete", "collection": "pts", "ids": [1, 2], "if_match": "x"})],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    // POST items still takes f=json.
    let r = app
        .send(
            "POST",
            "/collections/pts/items?f=json",
            &[("content-type", "application/geo+json")],
            Some(point(0.0, 0.0, json!({"name": "f"})).to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}
