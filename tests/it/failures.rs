//! Database failures: nothing written, and a report that says exactly what happened.

use serde_json::json;

use crate::support::{collection, point, TestApp};

const TABLE: &str = "CREATE TABLE f (
    id serial PRIMARY KEY,
    code text UNIQUE,
    n integer CHECK (abs(n) = n), -- a CHECK only the database reads
    parent integer REFERENCES f (id),
    geom geometry(Point, 4326)
)";

fn thousand_with(bad: usize, bad_props: serde_json::Value) -> serde_json::Value {
    collection(
        (0..1000)
            .map(|i| {
                let props = if i == bad {
                    bad_props.clone()
                } else {
                    json!({"code": format!("c{i}"), "n": i})
                };
                point(0.0, 0.0, props)
            })
            .collect(),
    )
}

#[tokio::test]
async fn failure_at_feature_700_of_1000_leaves_the_table_unchanged() {
    let app = TestApp::with_config(TABLE, |c| c.batch_size = 250).await;
    app.db
        .client
        .batch_execute("INSERT INTO f (code) VALUES ('existing')")
        .await
        .unwrap();
    let r = app
        .post("f", &thousand_with(700, json!({"code": "c1"})))
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(
        app.db.int("SELECT count(*) FROM f").await,
        1,
        "nothing written"
    );
    let e = &r.body["errors"][0];
    assert_eq!(e["feature"], 700);
    assert_eq!(e["code"], "unique_violation");
    assert_eq!(e["sqlstate"], "23505");
    assert_eq!(e["constraint"], "f_code_key");
    assert!(e["detail"].as_str().unwrap().contains("(code)=(c1)"), "{e}");
    assert_eq!(
        r.body["total_errors"], 1,
        "features after 700 are not errors"
    );
    let batches = r.body["batches"].as_array().unwrap();
    assert_eq!(
        r.batch_statuses(),
        ["rolled_back", "rolled_back", "rolled_back", "not_attempted"]
    );
    assert_eq!(batches[2]["failed_feature"], 700);
    assert_eq!(
        batches[2]["not_written"],
        json!({"first": 701, "count": 49})
    );
    assert!(batches[0].get("failed_feature").is_none());

    // The connection went back to the pool clean: the next request succeeds.
    let r = app
        .post(
            "f",
            &collection(vec![point(0.0, 0.0, json!({"code": "after"}))]),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn constraint_errors_map_to_statuses() {
    let app = TestApp::new(TABLE).await;
    let r = app.post("f", &thousand_with(3, json!({"n": -1}))).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "check_violation");
    assert_eq!(r.body["errors"][0]["constraint"], "f_n_check");
    let r = app
        .post("f", &thousand_with(5, json!({"parent": 123456})))
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "foreign_key_violation");
    assert_eq!(r.body["errors"][0]["feature"], 5);
    assert_eq!(app.db.int("SELECT count(*) FROM f").await, 0);
}

#[tokio::test]
async fn not_null_from_a_trigger_names_the_column() {
    let app = TestApp::new(
        "CREATE TABLE t (id serial PRIMARY KEY, name text NOT NULL, geom geometry);
         CREATE FUNCTION blank() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.name = 'drop' THEN NEW.name := NULL; END IF; RETURN NEW; END $$;
         CREATE TRIGGER blank BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION blank();",
    )
    .await;
    let r = app
        .post(
            "t",
            &collection(vec![
                point(0.0, 0.0, json!({"name": "a"})),
                point(0.0, 0.0, json!({"name": "drop"})),
            ]),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    let e = &r.body["errors"][0];
    assert_eq!(e["code"], "not_null_violation");
    assert_eq!(e["column"], "name");
    assert_eq!(e["pointer"], "/features/1/properties/name");
    assert_eq!(app.db.int("SELECT count(*) FROM t").await, 0);
}

#[tokio::test]
async fn deferred_constraint_failing_at_commit_is_not_a_success() {
    let app = TestApp::new(
        "CREATE TABLE t (id serial PRIMARY KEY, code text, geom geometry,
             CONSTRAINT code_unique UNIQUE (code) DEFERRABLE INITIALLY DEFERRED)",
    )
    .await;
    let r = app
        .post(
            "t",
            &collection(vec![
                point(0.0, 0.0, json!({"code": "a"})),
                point(0.0, 0.0, json!({"code": "a"})),
            ]),
        )
        .await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["constraint"], "code_unique");
    assert_eq!(r.body["batches"][0]["status"], "rolled_back");
    assert_eq!(app.db.int("SELECT count(*) FROM t").await, 0);
}

#[tokio::test]
async fn a_row_skipped_by_a_trigger_fails_the_request() {
    let app = TestApp::new(
        "CREATE TABLE t (id serial PRIMARY KEY, name text, geom geometry);
         CREATE FUNCTION skip() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.name = 'skip' THEN RETURN NULL; END IF; RETURN NEW; END $$;
         CREATE TRIGGER skip BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION skip();",
    )
    .await;
    let names = ["a", "skip", "c"];
    let body = collection(
        names
            .iter()
            .map(|n| point(0.0, 0.0, json!({ "name": n })))
            .collect(),
    );
    let r = app.post("t", &body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 1);
    assert_eq!(r.body["errors"][0]["code"], "skipped_by_trigger");
    assert_eq!(
        app.db.int("SELECT count(*) FROM t").await,
        0,
        "nothing written"
    );
    let ok = collection(vec![point(0.0, 0.0, json!({"name": "a"}))]);
    assert_eq!(app.post("t", &ok).await.status, 201);
}
