//! Deadlocks and serialization failures, provoked for real between
//! concurrent requests: a write PostgreSQL rolled back whole is run again
//! (FEATUREPIPE_RETRIES) and commits once; when retries run out, or when
//! running it again is not safe, the conflict is reported.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{connect, point, TestApp, TestDb, TestResponse};

/// Two rows that sessions change in opposite orders, and two groups that
/// inserts count in opposite orders. Every change of a row or a count passes
/// a gate after taking its row lock: an advisory lock the test holds until
/// both requests wait there, so that each then needs the lock the other
/// holds, a deadlock every time. `changes` (a sequence: never rolled back)
/// counts every change made, committed or not.
const SETUP: &str = "
    CREATE TABLE pts (id int PRIMARY KEY, a text, b text, geom geometry(Point, 4326));
    INSERT INTO pts (id, geom) VALUES (1, 'SRID=4326;POINT(0 0)'), (2, 'SRID=4326;POINT(1 1)');
    CREATE TABLE log (id serial PRIMARY KEY, pt int, a text, b text);
    CREATE TABLE visits (id serial PRIMARY KEY, grp int, geom geometry(Point, 4326));
    CREATE TABLE tally (grp int PRIMARY KEY, n int);
    INSERT INTO tally VALUES (1, 0), (2, 0);
    CREATE SEQUENCE changes;
    CREATE FUNCTION pass_gate() RETURNS void LANGUAGE sql AS $$
      SELECT nextval('changes'); SELECT pg_advisory_xact_lock_shared(7);
    $$;
    CREATE FUNCTION log_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO log (pt, a, b) VALUES (NEW.id, NEW.a, NEW.b);
        PERFORM pass_gate();
        RETURN NULL;
      END $$;
    CREATE TRIGGER log_change AFTER UPDATE ON pts FOR EACH ROW EXECUTE FUNCTION log_change();
    CREATE FUNCTION count_visit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE tally SET n = n + 1 WHERE grp = NEW.grp;
        PERFORM pass_gate();
        RETURN NULL;
      END $$;
    CREATE TRIGGER count_visit AFTER INSERT ON visits FOR EACH ROW EXECUTE FUNCTION count_visit();
";

/// Close the gate: changes wait at it until [`open_when_waiting`].
async fn close_gate(db: &TestDb) {
    db.client
        .execute("SELECT pg_advisory_lock(7)", &[])
        .await
        .unwrap();
}

/// Open the gate once `n` transactions wait at it.
async fn open_when_waiting(db: &TestDb, n: i64) {
    wait_for_waiters(db, "advisory", n).await;
    db.client
        .execute("SELECT pg_advisory_unlock(7)", &[])
        .await
        .unwrap();
}

/// Wait until `n` backends of the test's database wait for a lock of this kind.
async fn wait_for_waiters(db: &TestDb, wait_event: &str, n: i64) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
           AND wait_event_type = 'Lock' AND wait_event = '{wait_event}'"
    );
    for _ in 0..2000 {
        if db.int(&sql).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} transaction(s) never waited for a {wait_event} lock");
}

/// A session setting `column` of rows `ids`, in that order, with an optional key.
async fn session(
    app: &TestApp,
    mode: &str,
    key: Option<&str>,
    column: &str,
    ids: [i32; 2],
) -> TestResponse {
    // The first also writes its point as it is, so that the two are two
    // statements: a run of the same change is one, whose row locks are all
    // taken before an AFTER trigger reaches the gate.
    let operations: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let mut patch = json!({"properties": {column: format!("{column}{id}")}});
            if k == 0 {
                let at = f64::from(id - 1);
                patch["geometry"] = json!({"type": "Point", "coordinates": [at, at]});
            }
            json!({"op": "update", "collection": "pts", "id": id, "patch": patch})
        })
        .collect();
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(key.map(|key| ("idempotency-key", key)));
    let body = json!({ "operations": operations }).to_string();
    app.send(
        "POST",
        &format!("/transactions?mode={mode}"),
        &headers,
        Some(body),
    )
    .await
}

/// Changes committed (`log`), changes made at all (`changes`), and keys kept.
async fn counts(db: &TestDb) -> [i64; 3] {
    [
        db.int("SELECT count(*) FROM log").await,
        db.int("SELECT last_value FROM changes").await,
        db.int("SELECT count(*) FROM featurepipe.idempotency").await,
    ]
}

/// A conflict reported: 503 with Retry-After, the detail saying `what`, the
/// first error the database's `code`.
fn assert_reported(r: &TestResponse, what: &str, code: &str) {
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(detail.contains(what), "{detail}");
    assert_eq!(r.body["errors"][0]["code"], code);
}

/// Every row of `pts` as (id, a, b).
async fn rows(db: &TestDb) -> Vec<(i32, Option<String>, Option<String>)> {
    db.client
        .query("SELECT id, a, b FROM pts ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn both_columns_set() -> Vec<(i32, Option<String>, Option<String>)> {
    [1, 2]
        .map(|id| (id, Some(format!("a{id}")), Some(format!("b{id}"))))
        .to_vec()
}

#[tokio::test]
async fn deadlocked_sessions_are_run_again_and_both_commit_once() {
    let app = TestApp::new(SETUP).await;
    close_gate(&app.db).await;
    let (one, other, ()) = tokio::join!(
        session(&app, "atomic", Some("s-a"), "a", [1, 2]),
        session(&app, "atomic", Some("s-b"), "b", [2, 1]),
        open_when_waiting(&app.db, 2),
    );
    assert_eq!(one.status, 200, "{one:?}");
    assert_eq!(other.status, 200, "{other:?}");
    assert_eq!(rows(&app.db).await, both_columns_set());
    // Four changes committed; the deadlock's loser had made one before it was
    // rolled back and run again. Each key was claimed once.
    assert_eq!(counts(&app.db).await, [4, 5, 2]);
    // Each key holds its session's response.
    for (key, first, column) in [("s-a", &one, "a"), ("s-b", &other, "b")] {
        let ids = if column == "a" { [1, 2] } else { [2, 1] };
        let again = session(&app, "atomic", Some(key), column, ids).await;
        assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
        assert_eq!(again.body, first.body);
    }
    assert_eq!(counts(&app.db).await, [4, 5, 2]);
}

#[tokio::test]
async fn deadlocked_inserts_are_run_again_and_both_commit_once() {
    let app = TestApp::new(SETUP).await;
    let visits = |key: &'static str, groups: [i32; 2]| {
        let app = &app;
        let features: Vec<Value> = groups
            .iter()
            .map(|g| point(0.0, 0.0, json!({ "grp": g })))
            .collect();
        let body = crate::support::collection(features).to_string();
        async move {
            app.send(
                "POST",
                "/collections/visits/items",
                &[
                    ("content-type", "application/geo+json"),
                    ("idempotency-key", key),
                ],
                Some(body),
            )
            .await
        }
    };
    close_gate(&app.db).await;
    let (one, other, ()) = tokio::join!(
        visits("v-a", [1, 2]),
        visits("v-b", [2, 1]),
        open_when_waiting(&app.db, 2),
    );
    assert_eq!(one.status, 201, "{one:?}");
    assert_eq!(other.status, 201, "{other:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM visits").await, 4);
    assert_eq!(
        app.db.int("SELECT count(*) FROM tally WHERE n = 2").await,
        2
    );
    assert_eq!(app.db.int("SELECT last_value FROM changes").await, 5);
    // The ids answered are the rows written; the keys replay them.
    let ids: Vec<i64> = [&one, &other]
        .iter()
        .flat_map(|r| r.body["ids"].as_array().unwrap().iter())
        .map(|id| id.as_i64().unwrap())
        .collect();
    let stored = app
        .db
        .int(&format!(
            "SELECT count(*) FROM visits WHERE id IN ({})",
            ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
        ))
        .await;
    assert_eq!(stored, 4);
    let again = visits("v-a", [1, 2]).await;
    assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
    assert_eq!(again.body, one.body);
    assert_eq!(app.db.int("SELECT count(*) FROM visits").await, 4);
}

#[tokio::test]
async fn a_deadlock_is_reported_when_retries_run_out() {
    let app = TestApp::with_config(SETUP, |c| c.retries = 0).await;
    close_gate(&app.db).await;
    let (one, other, ()) = tokio::join!(
        session(&app, "atomic", Some("s-a"), "a", [1, 2]),
        session(&app, "atomic", Some("s-b"), "b", [2, 1]),
        open_when_waiting(&app.db, 2),
    );
    let (won, lost) = if one.status == 200 {
        (one, other)
    } else {
        (other, one)
    };
    assert_eq!(won.status, 200, "{won:?}");
    assert_reported(
        &lost,
        "deadlock with another transaction (SQLSTATE 40P01) after 1 attempt (FEATUREPIPE_RETRIES=0)",
        "deadlock_detected",
    );
    assert_eq!(lost.body["errors"][0]["sqlstate"], "40P01");
    // Only the winner's two changes, and only its key.
    assert_eq!(counts(&app.db).await, [2, 3, 1]);
}

#[tokio::test]
async fn a_deadlocked_batch_is_reported_not_run_again() {
    // Other batches of a session may have committed after the failed one:
    // running it again would reorder the writes.
    let app = TestApp::new(SETUP).await;
    close_gate(&app.db).await;
    let (one, other, ()) = tokio::join!(
        session(&app, "batch", None, "a", [1, 2]),
        session(&app, "batch", None, "b", [2, 1]),
        open_when_waiting(&app.db, 2),
    );
    assert_eq!(one.status, 200, "{one:?}");
    assert_eq!(other.status, 200, "{other:?}");
    let batch_statuses: Vec<&Value> = [&one, &other]
        .iter()
        .map(|r| &r.body["batches"][0]["status"])
        .collect();
    assert!(
        batch_statuses.contains(&&json!("committed")),
        "{batch_statuses:?}"
    );
    assert!(
        batch_statuses.contains(&&json!("rolled_back")),
        "{batch_statuses:?}"
    );
    let lost = if one.body["written"] == 0 {
        &one
    } else {
        &other
    };
    let errors: Vec<&Value> = lost.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.get("error"))
        .collect();
    assert_eq!(errors.len(), 1, "{lost:?}");
    assert_eq!(errors[0]["code"], "deadlock_detected");
    assert_eq!(counts(&app.db).await, [2, 3, 0]);
}

#[tokio::test]
async fn a_serialization_failure_is_run_again() {
    // Under REPEATABLE READ a statement that finds its row changed by a
    // transaction that committed after its snapshot fails with 40001.
    let setup = "
        CREATE TABLE pts (id int PRIMARY KEY, name text, note text, geom geometry(Point, 4326));
        INSERT INTO pts (id, geom) VALUES (1, 'SRID=4326;POINT(0 0)');
        DO $$ BEGIN
          EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L',
                         current_database(), 'repeatable read');
        END $$;
    ";
    for retries in [0, 3] {
        let app = TestApp::with_config(setup, |c| c.retries = retries).await;
        let holder = connect(&app.db.url).await;
        holder
            .batch_execute("BEGIN; UPDATE pts SET note = 'held' WHERE id = 1")
            .await
            .unwrap();
        let patch = app.send(
            "PATCH",
            "/collections/pts/items/1",
            &[("content-type", "application/merge-patch+json")],
            Some(json!({"properties": {"name": "patched"}}).to_string()),
        );
        let commit = async {
            wait_for_waiters(&app.db, "transactionid", 1).await;
            holder.batch_execute("COMMIT").await.unwrap();
        };
        let (r, ()) = tokio::join!(patch, commit);
        let name = app.db.text("SELECT name FROM pts WHERE id = 1").await;
        assert_eq!(
            app.db
                .text("SELECT note FROM pts WHERE id = 1")
                .await
                .as_deref(),
            Some("held")
        );
        if retries == 0 {
            assert_reported(
                &r,
                "serialization failure (SQLSTATE 40001) after 1 attempt",
                "serialization_failure",
            );
            assert_eq!(name, None);
        } else {
            assert!(r.status.is_success(), "{r:?}");
            assert_eq!(name.as_deref(), Some("patched"));
        }
    }
}

#[tokio::test]
async fn retries_are_bounded_and_leave_the_key_unclaimed() {
    // A trigger that fails every attempt as a serialization failure.
    let setup = "
        CREATE TABLE pts (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
        CREATE SEQUENCE attempts;
        CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM nextval('attempts');
            RAISE EXCEPTION 'always in conflict' USING ERRCODE = 'serialization_failure';
          END $$;
        CREATE TRIGGER refuse BEFORE INSERT ON pts FOR EACH ROW EXECUTE FUNCTION refuse();
    ";
    let app = TestApp::with_config(setup, |c| c.retries = 2).await;
    let post = || {
        app.send(
            "POST",
            "/collections/pts/items",
            &[
                ("content-type", "application/geo+json"),
                ("idempotency-key", "k-bounded"),
            ],
            Some(point(0.0, 0.0, json!({"name": "x"})).to_string()),
        )
    };
    let r = post().await;
    assert_reported(
        &r,
        "after 3 attempts, each rolled back (FEATUREPIPE_RETRIES=2)",
        "serialization_failure",
    );
    assert_eq!(app.db.int("SELECT last_value FROM attempts").await, 3);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 0);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM featurepipe.idempotency")
            .await,
        0
    );
    // The key was never kept: once the conflict is gone, the same request writes.
    app.db
        .client
        .batch_execute("DROP TRIGGER refuse ON pts")
        .await
        .unwrap();
    let r = post().await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 1);
}
