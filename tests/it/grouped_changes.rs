//! An atomic edit session changes a run of features of one collection that
//! write the same columns in one statement; a failure in such a run is still
//! named at its operation and field, and nothing is written.

use serde_json::{json, Value};

use crate::sessions::session;
use crate::support::{point, TestApp, TestResponse};

// A statement-level trigger counts the statements that change `pts` (a row
// trigger would have each change made alone: see the last test).
const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name text NOT NULL, n int CHECK (abs(n) = n),
                      note text DEFAULT 'fresh', geom geometry(Point, 4326));
    CREATE TABLE statements (n int);
    CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO statements VALUES (1); RETURN NULL; END $$;
    CREATE TRIGGER counted AFTER UPDATE OR DELETE ON pts
      FOR EACH STATEMENT EXECUTE FUNCTION count_statement();
    INSERT INTO pts (name, n, geom) SELECT 'p' || i, i, ST_MakePoint(i, 0)::geometry(Point, 4326)
      FROM generate_series(1, 300) AS i;
";

/// The ETag of feature `id`, as the service answers it.
async fn etag(app: &TestApp, id: i64) -> String {
    let r = app.get(&format!("/collections/pts/items/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.headers["etag"]
        .to_str()
        .unwrap()
        .trim_matches('"')
        .to_owned()
}

fn update(id: i64, n: i64) -> Value {
    json!({"op": "update", "collection": "pts", "id": id, "patch": {"properties": {"n": n}}})
}

/// Statements that changed `pts` so far.
async fn statements(app: &TestApp) -> i64 {
    app.db.int("SELECT count(*) FROM statements").await
}

/// What `pts` holds, to compare before and after a refused session.
async fn state(app: &TestApp) -> Option<String> {
    app.db
        .text("SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM pts AS t")
        .await
}

fn first_error(r: &TestResponse) -> &Value {
    &r.body["errors"][0]
}

#[tokio::test]
async fn runs_of_changes_are_one_statement_each() {
    let app = TestApp::new(SETUP).await;
    let mut ops = Vec::new();
    // Updates, every other one under its ETag.
    for id in 1..=100 {
        let mut op = update(id, 1000 + id);
        if id % 2 == 0 {
            op["if_match"] = json!(etag(&app, id).await);
        }
        ops.push(op);
    }
    for id in 101..=150 {
        ops.push(json!({"op": "replace", "collection": "pts", "id": id,
                        "feature": point(5.0, 5.0, json!({"name": format!("r{id}")}))}));
    }
    // Deletes, in one operation and one a feature: one run.
    ops.push(json!({"op": "delete", "collection": "pts", "ids": (151..=200).collect::<Vec<_>>()}));
    for id in 201..=210 {
        ops.push(json!({"op": "delete", "collection": "pts", "id": id}));
    }
    let r = session(&app, "atomic", ops).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["written"], 161);
    assert_eq!(statements(&app).await, 3, "updates, replaces, deletes");
    let results = r.body["results"].as_array().unwrap();
    for (k, id) in [(0, 1), (1, 2), (99, 100), (100, 101), (149, 150)] {
        assert_eq!(results[k]["etag"].as_str().unwrap(), etag(&app, id).await);
    }
    assert_eq!(results[150]["deleted"], 50);
    let rows = app
        .db
        .text("SELECT string_agg(concat_ws(':', id, name, n, note), ' ' ORDER BY id) FROM pts WHERE id IN (2, 101)")
        .await;
    assert_eq!(rows.as_deref(), Some("2:p2:1002:fresh 101:r101:fresh"));
    assert_eq!(
        app.db
            .text("SELECT ST_AsText(geom) FROM pts WHERE id = 150")
            .await
            .as_deref(),
        Some("POINT(5 5)")
    );
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE id BETWEEN 151 AND 210")
            .await,
        0
    );

    // A feature changed twice: the second change sees the first.
    let r = session(
        &app,
        "atomic",
        vec![update(1, 7), update(2, 7), update(1, 8)],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 1").await, 8);
    let third = r.body["results"][2]["etag"].as_str().unwrap();
    assert_eq!(third, etag(&app, 1).await);
}

#[tokio::test]
async fn a_failure_in_a_run_is_named_and_nothing_is_written() {
    let app = TestApp::new(SETUP).await;
    let before = state(&app).await;
    let run = |bad: usize, op: Value| -> Vec<Value> {
        (0..6)
            .map(|k| match k == bad {
                true => op.clone(),
                false => update(k as i64 + 1, 50),
            })
            .collect()
    };
    let stale = json!({"op": "update", "collection": "pts", "id": 3, "if_match": "0123456789abcdef0123456789abcdef",
                       "patch": {"properties": {"n": 50}}});
    let r = session(&app, "atomic", run(2, stale)).await;
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 2);
    assert_eq!(first_error(&r)["code"], "precondition_failed");
    // The feature as it is now, to merge with.
    assert_eq!(r.body["feature"]["id"], 3, "{r:?}");

    let r = session(&app, "atomic", run(4, update(9999, 50))).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 4);

    let r = session(&app, "atomic", run(1, update(2, -5))).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 1);
    assert_eq!(first_error(&r)["constraint"], "pts_n_check");

    let deletes = vec![
        json!({"op": "delete", "collection": "pts", "ids": [7, 8, 99999, 9]}),
        json!({"op": "delete", "collection": "pts", "id": 10}),
    ];
    let r = session(&app, "atomic", deletes).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(first_error(&r)["pointer"], "/operations/0/ids/2");
    assert_eq!(state(&app).await, before, "nothing was written");
}

#[tokio::test]
async fn a_keyed_run_that_fails_leaves_its_key_free() {
    let app = TestApp::new(SETUP).await;
    let keyed = |ops: Vec<Value>| {
        let app = &app;
        async move {
            app.send(
                "POST",
                "/transactions?mode=atomic",
                &[
                    ("content-type", "application/json"),
                    ("idempotency-key", "grouped-1"),
                ],
                Some(json!({ "operations": ops }).to_string()),
            )
            .await
        }
    };
    let r = keyed(vec![update(1, 6000), update(9999, 6000), update(3, 6000)]).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 1);
    let good = vec![update(1, 6000), update(2, 6000), update(3, 6000)];
    let r = keyed(good.clone()).await;
    assert_eq!(r.status, 200, "the key was not taken by the failure: {r:?}");
    let written = statements(&app).await;
    let again = keyed(good).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body["results"], r.body["results"], "replayed");
    assert_eq!(statements(&app).await, written, "and not written again");
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts WHERE n = 6000").await,
        3
    );
}

#[tokio::test]
async fn one_key_written_two_ways_is_changed_twice_in_order() {
    let app = TestApp::new(SETUP).await;
    let ops = vec![
        update(1, 5),
        json!({"op": "update", "collection": "pts", "id": "01",
                                         "patch": {"properties": {"n": 6}}}),
    ];
    let r = session(&app, "atomic", ops).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(statements(&app).await, 2, "two statements: one feature");
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 1").await, 6);
}

#[tokio::test]
async fn row_triggers_and_keys_to_the_table_itself_have_each_change_made_alone() {
    let app = TestApp::new(
        "CREATE TABLE nodes (id int PRIMARY KEY, parent int REFERENCES nodes,
                             geom geometry(Point, 4326));
         INSERT INTO nodes VALUES (1, NULL, 'SRID=4326;POINT(0 0)'), (2, 1, 'SRID=4326;POINT(1 1)');
         CREATE TABLE stamped (id int PRIMARY KEY, n int, is_default bool, geom geometry(Point, 4326));
         INSERT INTO stamped SELECT i, i, false, 'SRID=4326;POINT(0 0)' FROM generate_series(1, 3) AS i;
         -- The feature made the default last is the only default.
         CREATE FUNCTION one_default() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.is_default THEN UPDATE stamped SET is_default = false WHERE id <> NEW.id; END IF;
             RETURN NULL;
           END $$;
         CREATE TRIGGER one_default AFTER UPDATE ON stamped FOR EACH ROW
           WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION one_default();",
    )
    .await;
    // Deleting the parent first breaks the key at once, as a statement alone would.
    let ops = vec![
        json!({"op": "delete", "collection": "nodes", "id": 1}),
        json!({"op": "delete", "collection": "nodes", "id": 2}),
    ];
    let r = session(&app, "atomic", ops).await;
    assert_eq!(first_error(&r)["operation"], 0, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM nodes").await, 2);
    let default = |id: i64| {
        json!({"op": "update", "collection": "stamped", "id": id,
                                    "patch": {"properties": {"is_default": true}}})
    };
    let r = session(&app, "atomic", vec![default(1), default(2)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT string_agg(id::text, ',') FROM stamped WHERE is_default")
            .await
            .as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn a_failure_before_a_run_is_named_without_sending_the_session_again() {
    let db = crate::support::TestDb::new(SETUP).await;
    let (proxy, mut config) =
        crate::support::via_proxy(&db, std::time::Duration::from_millis(1)).await;
    config.pool_size = 1;
    let app = TestApp::on(db, config).await;
    let bad_insert = json!({"op": "insert", "collection": "pts",
                            "feature": point(0.0, 0.0, json!({"name": "x", "n": -1}))});
    let ops = || vec![bad_insert.clone(), update(1, 7000), update(2, 7000)];
    // Warm: the statements prepared.
    let r = session(&app, "atomic", ops()).await;
    assert_eq!(r.status, 422, "{r:?}");
    let before = proxy.round_trips();
    let r = session(&app, "atomic", ops()).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 0);
    assert_eq!(first_error(&r)["constraint"], "pts_n_check");
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "one flight, not sent again"
    );
    let statuses: Vec<_> = r.body["report"]["results"]
        .as_array()
        .or_else(|| r.body["results"].as_array())
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["failed", "not_written", "not_written"]);
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts WHERE n = 7000").await,
        0
    );
}

#[tokio::test]
async fn a_change_made_meanwhile_by_another_is_not_overwritten() {
    let app = TestApp::new(SETUP).await;
    let mut ops = Vec::new();
    for id in 1..=8 {
        let mut op = update(id, 700 + id);
        op["if_match"] = json!(etag(&app, id).await);
        ops.push(op);
    }
    // Another writer changes feature 5 after its tag was read, and commits
    // while the run waits for its row: the run changes only rows still as
    // they were read, so it fails, and one statement a feature names it.
    app.db
        .client
        .batch_execute("BEGIN; UPDATE pts SET note = 'theirs' WHERE id = 5")
        .await
        .unwrap();
    let other = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        app.db.client.batch_execute("COMMIT").await.unwrap();
    };
    let (r, ()) = tokio::join!(session(&app, "atomic", ops), other);
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(first_error(&r)["operation"], 4, "{r:?}");
    let kept = app.db.text("SELECT note FROM pts WHERE id = 5").await;
    assert_eq!(kept.as_deref(), Some("theirs"));
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts WHERE n > 700").await,
        0
    );
}
