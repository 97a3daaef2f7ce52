//! What a change feed must hold against what else runs in the database:
//! only the table's own triggers write its feed, keys read back the same
//! whatever the writer's session settings, a trigger switched off for
//! ordinary writes is put back, and what the log holds never makes the
//! service panic or blame the client.

use std::time::Duration;

use serde_json::{json, Value};

use crate::changes::{
    cursor_now, download, execute, feeds_on, follow_past, fresh_xid, relid, until, with_feeds,
    Copy, PLACES,
};
use crate::support::{config, connect, create_role, point, via_proxy, OwnCluster, TestApp, TestDb};

/// `sql` as `role` (a LOGIN role of the cluster), its error if it fails.
async fn as_role(app: &TestApp, role: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    let url = app.db.url.replacen("postgres@", &format!("{role}@"), 1);
    connect(&url).await.batch_execute(sql).await
}

/// The SQLSTATE and message of a failed statement.
fn refusal(result: Result<(), tokio_postgres::Error>) -> (String, String) {
    let e = result.expect_err("refused");
    let db = e.as_db_error().expect("a database error");
    (db.code().code().to_owned(), db.message().to_owned())
}

/// A role with USAGE on the schema featurepipe, as docs/security.md has
/// `set_role` deployments grant their callers.
async fn intruder(app: &TestApp) -> &'static str {
    let role = "fp_test_feed_intruder";
    let database = app.db.url.rsplit('/').next().unwrap();
    execute(
        app,
        &format!(
            "{}
             GRANT USAGE ON SCHEMA featurepipe TO {role};
             GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {role};",
            create_role(role, "LOGIN")
        ),
    )
    .await;
    role
}

#[tokio::test]
async fn no_other_role_or_table_can_write_or_restart_a_feed() {
    let app = with_feeds(PLACES, &["places"]).await;
    let oid = relid(&app, "places");
    let role = intruder(&app).await;
    let function = format!("featurepipe.changes_{oid}()");
    for f in [function.as_str(), "featurepipe.changes_truncated()"] {
        let may = format!("SELECT has_function_privilege('{role}', '{f}', 'EXECUTE')::text");
        assert_eq!(app.db.text(&may).await.as_deref(), Some("false"), "{f}");
    }
    // Every SECURITY DEFINER function of the service's schema is the service's alone.
    let public = app
        .db
        .int(
            "SELECT count(*) FROM pg_proc p
              WHERE p.pronamespace = 'featurepipe'::regnamespace AND p.prosecdef
                AND has_function_privilege('public', p.oid, 'EXECUTE')",
        )
        .await;
    assert_eq!(public, 0);
    let cursor = cursor_now(&app, "places").await;
    // The attacks of the review, as the role: refused for want of EXECUTE.
    let attacks = [
        format!(
            "CREATE TEMP TABLE inj (id text);
             CREATE TRIGGER inj AFTER INSERT ON inj FOR EACH ROW EXECUTE FUNCTION {function};
             INSERT INTO inj VALUES ('not-a-key'), ('+1');"
        ),
        format!(
            "CREATE TEMP TABLE inj (id text);
             CREATE TRIGGER inj AFTER INSERT ON inj REFERENCING NEW TABLE AS new_rows
                 FOR EACH STATEMENT EXECUTE FUNCTION {function};
             INSERT INTO inj VALUES ('not-a-key');"
        ),
        format!(
            "CREATE TEMP TABLE inj (id text);
             CREATE TRIGGER inj AFTER TRUNCATE ON inj
                 FOR EACH STATEMENT EXECUTE FUNCTION featurepipe.changes_truncated('{oid}');
             TRUNCATE inj;"
        ),
    ];
    for attack in &attacks {
        let (code, message) = refusal(as_role(&app, role, attack).await);
        assert_eq!(code, "42501", "{message}");
        assert!(
            message.contains("permission denied for function"),
            "{message}"
        );
    }
    // Even a role that may run them (the owner) cannot log for another
    // table: the table's function logs nothing there (a partition since
    // detached keeps its triggers, and must stay writable) ...
    execute(&app, "CREATE TABLE other (id text PRIMARY KEY)").await;
    let entries = format!("SELECT count(*) FROM featurepipe.changes WHERE relid = {oid}");
    let logged = app.db.int(&entries).await;
    for trigger in [
        format!(
            "CREATE TRIGGER inj AFTER INSERT ON other FOR EACH ROW EXECUTE FUNCTION {function}"
        ),
        format!(
            "CREATE TRIGGER inj AFTER INSERT ON other REFERENCING NEW TABLE AS new_rows
                 FOR EACH STATEMENT EXECUTE FUNCTION {function}"
        ),
    ] {
        execute(
            &app,
            &format!(
                "DROP TRIGGER IF EXISTS inj ON other; {trigger};
                 INSERT INTO other VALUES ('not-a-key'); TRUNCATE other;"
            ),
        )
        .await;
    }
    assert_eq!(
        app.db.int(&entries).await,
        logged,
        "nothing logged for 'other'"
    );
    // ... and the first version's TRUNCATE function refuses (42501).
    let attack = format!(
        "DROP TRIGGER IF EXISTS inj ON other;
         CREATE TRIGGER inj AFTER TRUNCATE ON other
             FOR EACH STATEMENT EXECUTE FUNCTION featurepipe.changes_truncated('{oid}');
         TRUNCATE other;"
    );
    let (code, message) = refusal(app.db.client.batch_execute(&attack).await);
    assert_eq!(code, "42501", "{attack}: {message}");
    assert!(message.contains("change feed of"), "{message}");
    // The feed goes on, with nothing made up in it and no new epoch.
    execute(&app, "UPDATE places SET name = 'real' WHERE id = 1").await;
    let mut copy = download(&app, "places").await;
    let past = fresh_xid(&app).await;
    let (applied, _) = follow_past(&app, ("places", 100), &mut copy, cursor, past).await;
    let ids: Vec<&Value> = applied.iter().map(|c| &c["id"]).collect();
    assert_eq!(ids, [&json!(1)], "{applied:?}");
}

/// Tables keyed by a timestamptz and by a date, with one feature each.
const TIMED: &str = "
    CREATE TABLE visits (id timestamptz PRIMARY KEY, name text, geom geometry(Point, 4326));
    CREATE TABLE days (id date PRIMARY KEY, name text, geom geometry(Point, 4326));
    INSERT INTO days VALUES ('2024-02-01', 'first of February', NULL),
                            ('2024-02-25', 'late February', NULL);";

/// The changes after `cursor` up to now, and the copy they make of `copy`.
async fn changes_since(
    app: &TestApp,
    collection: &str,
    copy: &mut Copy,
    cursor: String,
) -> (Vec<Value>, String) {
    let past = fresh_xid(app).await;
    follow_past(app, (collection, 100), copy, cursor, past).await
}

#[tokio::test]
async fn a_key_reads_back_the_same_whatever_the_writers_settings() {
    let app = with_feeds(TIMED, &["visits", "days"]).await;
    let visits = cursor_now(&app, "visits").await;
    let mut copy = download(&app, "visits").await;
    let feature = point(1.0, 2.0, json!({"name": "new year"})).to_string();
    let headers = [("content-type", "application/geo+json")];
    let path = "/collections/visits/items/2024-01-01T00:00:00Z";
    let r = app.send("PUT", path, &headers, Some(feature)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let (applied, visits) = changes_since(&app, "visits", &mut copy, visits).await;
    let item = app.get(path).await;
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0]["id"], item.body["id"], "{applied:?}");
    assert_eq!(copy, download(&app, "visits").await);
    // Deleted in another TimeZone: the same id, so the copy loses it.
    execute(
        &app,
        "SET TimeZone = 'Asia/Tokyo'; SET DateStyle = 'German';
         DELETE FROM visits; RESET TimeZone; RESET DateStyle;",
    )
    .await;
    let (applied, _) = changes_since(&app, "visits", &mut copy, visits).await;
    assert_eq!(applied[0]["op"], "delete", "{applied:?}");
    assert_eq!(applied[0]["id"], item.body["id"], "{applied:?}");
    assert!(copy.0.is_empty(), "{copy:?}");
    // Dates written with DateStyle SQL, DMY: 1 February is not 2 January,
    // and 25 February is no month 25.
    let days = cursor_now(&app, "days").await;
    let mut copy = download(&app, "days").await;
    execute(
        &app,
        "SET DateStyle = 'SQL, DMY';
         UPDATE days SET name = 'changed' WHERE id = '2024-02-01' OR id = '2024-02-25';
         RESET DateStyle;",
    )
    .await;
    let (applied, _) = changes_since(&app, "days", &mut copy, days).await;
    let ids: Vec<&Value> = applied.iter().map(|c| &c["id"]).collect();
    assert_eq!(ids.len(), 2, "{applied:?}");
    for id in ["2024-02-01", "2024-02-25"] {
        assert!(ids.contains(&&json!(id)), "{id}: {applied:?}");
    }
    assert_eq!(copy, download(&app, "days").await);
}

#[tokio::test]
async fn what_the_log_holds_never_panics_and_is_no_client_mistake() {
    let app = with_feeds(PLACES, &["places"]).await;
    let oid = relid(&app, "places");
    let cursor = cursor_now(&app, "places").await;
    // Entries no trigger of ours writes (a superuser's, or from before the
    // functions were the service's alone).
    execute(
        &app,
        &format!("INSERT INTO featurepipe.changes (relid, keys) VALUES ({oid}, '{{+1}}')"),
    )
    .await;
    let past = fresh_xid(&app).await;
    let mut copy = download(&app, "places").await;
    let (applied, _) = follow_past(&app, ("places", 10), &mut copy, cursor.clone(), past).await;
    assert_eq!(applied[0]["id"], json!(1), "'+1' is the key 1: {applied:?}");
    execute(
        &app,
        &format!("INSERT INTO featurepipe.changes (relid, keys) VALUES ({oid}, '{{not-a-key}}')"),
    )
    .await;
    let mut status = 200;
    for _ in 0..200 {
        let r = app
            .get(&format!("/collections/places/changes?since={cursor}"))
            .await;
        status = r.status.as_u16();
        if status != 200 {
            assert_eq!(status, 500, "{r:?}");
            assert_eq!(r.body["type"], "urn:featurepipe:problem:database-error");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 500);
}

/// The app on a database set up with `setup`, with a feed on `collection`,
/// reading its catalog again when the tables change (polled every 100 ms).
async fn polling(setup: &str, collection: &str) -> TestApp {
    let db = TestDb::new(setup).await;
    let mut config = config(&db.url);
    config.settings = Some(feeds_on(&format!("polled-{collection}"), &[collection]));
    config.catalog_poll = Duration::from_millis(100);
    TestApp::on(db, config).await
}

#[tokio::test]
async fn a_trigger_that_fires_only_for_replicas_is_installed_again() {
    let app = polling(PLACES, "places").await;
    let before = cursor_now(&app, "places").await;
    execute(
        &app,
        "ALTER TABLE places ENABLE REPLICA TRIGGER featurepipe_changes_update",
    )
    .await;
    let enabled = "SELECT tgenabled::text FROM pg_trigger
                    WHERE tgname = 'featurepipe_changes_update' AND tgrelid = 'places'::regclass";
    until("the trigger made again", || async {
        app.db.text(enabled).await.as_deref() == Some("O")
    })
    .await;
    // Changes may have gone unlogged meanwhile: a new epoch.
    let r = app
        .get(&format!("/collections/places/changes?since={before}"))
        .await;
    assert_eq!(r.status, 410, "{r:?}");
    let cursor = cursor_now(&app, "places").await;
    let mut copy = download(&app, "places").await;
    execute(&app, "UPDATE places SET name = 'seen' WHERE id = 2").await;
    let (applied, _) = changes_since(&app, "places", &mut copy, cursor).await;
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(copy, download(&app, "places").await);
}

#[tokio::test]
async fn writes_straight_into_partitions_and_statements_of_many_rows_are_logged() {
    let app = with_feeds(
        "CREATE TABLE parts (id int PRIMARY KEY, name text, geom geometry(Point, 4326))
             PARTITION BY RANGE (id);
         CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (MINVALUE) TO (3000);
         CREATE TABLE parts_high PARTITION OF parts FOR VALUES FROM (3000) TO (MAXVALUE);",
        &["parts"],
    )
    .await;
    let cursor = cursor_now(&app, "parts").await;
    let mut copy = download(&app, "parts").await;
    // More keys than one log entry holds, in one statement each.
    execute(
        &app,
        "INSERT INTO parts_low (id, name) SELECT g, 'low' FROM generate_series(1, 2500) AS g;
         INSERT INTO parts (id, name) SELECT g, 'high' FROM generate_series(3000, 5499) AS g;
         UPDATE parts SET id = id + 10000 WHERE id % 7 = 0;
         DELETE FROM parts_high WHERE id % 5 = 0;",
    )
    .await;
    let past = fresh_xid(&app).await;
    follow_past(&app, ("parts", 777), &mut copy, cursor, past).await;
    let table = download(&app, "parts").await;
    assert_eq!(copy.0.len(), table.0.len());
    assert_eq!(copy, table);
}

#[tokio::test]
async fn the_feed_answers_json_fg_too() {
    let app = with_feeds(PLACES, &["places"]).await;
    let cursor = cursor_now(&app, "places").await;
    execute(&app, "UPDATE places SET name = 'fg' WHERE id = 3").await;
    // A long poll of a second: another test's open transaction may hold the change back.
    let page = |query: String, accept: &'static str| {
        let app = &app;
        async move {
            let path = format!("/collections/places/changes?{query}&wait=1");
            for _ in 0..30 {
                let r = app.send("GET", &path, &[("accept", accept)], None).await;
                if r.status != 200 || r.body["changes"] != json!([]) {
                    return r;
                }
            }
            panic!("no change in 30 s");
        }
    };
    for (query, accept) in [
        (format!("since={cursor}&f=jsonfg"), "*/*"),
        (format!("since={cursor}"), "application/fg+json"),
    ] {
        let r = page(query, accept).await;
        assert_eq!(r.status, 200, "{r:?}");
        let feature = &r.body["changes"][0]["feature"];
        assert_eq!(feature["id"], 3, "{r:?}");
        assert!(feature.get("place").is_some(), "{feature}");
        assert!(feature.get("time").is_some(), "{feature}");
    }
    let geojson = page(format!("since={cursor}"), "application/geo+json").await;
    assert!(geojson.body["changes"][0]["feature"].get("place").is_none());
}

#[tokio::test]
async fn a_thousand_long_polls_held_back_cost_the_database_a_few_queries_a_second() {
    // A cluster of its own: another test's open transaction would hold the
    // horizon too, and its end would release the waiters early.
    let cluster = OwnCluster::start().await;
    let url = cluster.url();
    let client = connect(&url).await;
    client
        .batch_execute(&format!("CREATE EXTENSION postgis; {PLACES}"))
        .await
        .unwrap();
    let db = TestDb { url, client };
    let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
    config.settings = Some(feeds_on("held-back", &["places"]));
    let app = TestApp::on(db, config).await;
    let cursor = cursor_now(&app, "places").await;
    // An older transaction holds the horizon back; a change commits after it.
    let holder = connect(&cluster.url()).await;
    holder
        .batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .unwrap();
    execute(&app, "UPDATE places SET name = 'held' WHERE id = 1").await;
    // Its notification wakes whoever waits when it comes: let it come first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    const WAITERS: usize = 1000;
    let path = format!("/collections/places/changes?since={cursor}&wait=20");
    let polls = futures_util::future::join_all((0..WAITERS).map(|_| app.get(&path)));
    let watch = async {
        until("every poll waits", || async {
            app.state.changes.long_polls() == WAITERS
        })
        .await;
        let before = proxy.round_trips();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let queries = proxy.round_trips() - before;
        holder.batch_execute("COMMIT").await.unwrap();
        queries
    };
    let (pages, queries) = tokio::join!(polls, watch);
    println!("{WAITERS} long polls held back: {queries} round trips in 3 s");
    assert!(queries <= 15, "{queries} round trips in 3 s");
    for page in pages {
        assert_eq!(page.status, 200, "{page:?}");
        assert_eq!(page.body["changes"][0]["id"], 1, "{page:?}");
    }
}

#[tokio::test]
async fn a_partition_attached_later_gets_its_triggers_and_a_new_epoch() {
    let app = polling(
        "CREATE TABLE parts (id int PRIMARY KEY, name text, geom geometry(Point, 4326))
             PARTITION BY RANGE (id);
         CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (MINVALUE) TO (100);",
        "parts",
    )
    .await;
    let before = cursor_now(&app, "parts").await;
    execute(
        &app,
        "CREATE TABLE parts_new PARTITION OF parts FOR VALUES FROM (100) TO (200)",
    )
    .await;
    let triggers = "SELECT count(*) FROM pg_trigger
                     WHERE tgrelid = 'parts_new'::regclass AND tgname LIKE 'featurepipe_changes_%'";
    until("the new partition's triggers", || async {
        app.db.int(triggers).await == 4
    })
    .await;
    let r = app
        .get(&format!("/collections/parts/changes?since={before}"))
        .await;
    assert_eq!(r.status, 410, "{r:?}");
    let cursor = cursor_now(&app, "parts").await;
    let mut copy = download(&app, "parts").await;
    execute(
        &app,
        "INSERT INTO parts_new (id, name) VALUES (150, 'straight in')",
    )
    .await;
    let (applied, _) = changes_since(&app, "parts", &mut copy, cursor).await;
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0]["id"], 150, "{applied:?}");
}

#[tokio::test]
async fn another_start_of_the_service_keeps_the_feed_and_its_cursors() {
    let app = with_feeds(TIMED, &["visits", "days"]).await;
    let cursor = cursor_now(&app, "days").await;
    let epochs = "SELECT string_agg(epoch::text, ',' ORDER BY relid) FROM featurepipe.change_feeds";
    let before = app.db.text(epochs).await;
    // A replica, or the same service after a restart, reads the catalog
    // again: what is installed is found current, nothing is made again.
    let mut config = config(&app.db.url);
    config.settings = Some(feeds_on("visits-days", &["visits", "days"]));
    featurepipe::AppState::start(&config).await.unwrap();
    app.state.reload_catalog();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.db.text(epochs).await, before);
    execute(
        &app,
        "UPDATE days SET name = 'again' WHERE id = '2024-02-01'",
    )
    .await;
    let mut copy = download(&app, "days").await;
    let (applied, _) = changes_since(&app, "days", &mut copy, cursor).await;
    assert_eq!(applied.len(), 1, "{applied:?}");
}
