//! The catalog follows DDL while the service runs: polled, on NOTIFY and on
//! SIGHUP; a reload is atomic, drops what was kept for the old tables, and
//! one that fails keeps the catalog in use.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use featurepipe::catalog::{Catalog, ColumnType, ScalarType};
use featurepipe::config::Config;
use featurepipe::db::Pooler;
use serde_json::{json, Value};

use crate::support::{collection, http, point, settings_file, ServiceProcess, TestApp, TestDb};

/// A poll interval short enough to keep the tests quick.
const FAST: Duration = Duration::from_millis(100);

/// How long a test waits for what should happen at once (a NOTIFY, a SIGHUP,
/// a poll of [`FAST`]).
const PROMPTLY: Duration = Duration::from_secs(3);

/// The app on a database set up with `setup`, following its catalog: polled
/// every `poll` (zero: not), and on NOTIFY when `listen`.
async fn following(setup: &str, poll: Duration, listen: bool) -> TestApp {
    following_with(setup, |c| {
        c.catalog_poll = poll;
        c.catalog_listen = listen;
    })
    .await
}

async fn following_with(setup: &str, tweak: impl FnOnce(&mut Config)) -> TestApp {
    TestApp::with_config(setup, |c| {
        c.catalog_poll = FAST;
        tweak(c);
    })
    .await
}

/// Poll `check` until it holds; panics naming `what` after `deadline`.
async fn until<F: Future<Output = bool>>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Run `sql` (DDL, mostly) on the test's own connection.
async fn execute(app: &TestApp, sql: &str) {
    app.db.client.batch_execute(sql).await.unwrap();
}

/// Wait until collection `id` is published.
async fn until_published(app: &TestApp, id: &str) {
    let path = format!("/collections/{id}");
    until(&format!("{id} published"), PROMPTLY, || async {
        app.get(&path).await.status == 200
    })
    .await;
}

/// Wait until the catalog in use is another than `before`.
async fn until_replaced(app: &TestApp, before: &Arc<Catalog>) {
    until("the catalog replaced", PROMPTLY, || async {
        !Arc::ptr_eq(before, &app.state.catalog())
    })
    .await;
}

/// Create a table and `NOTIFY featurepipe_reload` in one transaction: with
/// polling off, the table can only be published through the notification.
async fn create_and_notify(app: &TestApp) {
    execute(
        app,
        "CREATE TABLE told (id serial PRIMARY KEY, geom geometry(Point, 4326));
         NOTIFY featurepipe_reload;",
    )
    .await;
    until_published(app, "told").await;
}

/// Whether the collection `id` has a column `name` in the catalog in use.
fn has_column(app: &TestApp, id: &str, name: &str) -> bool {
    app.state
        .catalog()
        .get(id)
        .is_some_and(|c| c.column_index(name).is_some())
}

/// The column `name` of collection `id` in the catalog in use.
fn column(app: &TestApp, id: &str, name: &str) -> featurepipe::catalog::Column {
    let catalog = app.state.catalog();
    let coll = catalog.get(id).expect("the collection");
    coll.columns[coll.column_index(name).expect("the column")].clone()
}

#[tokio::test]
async fn alter_table_under_a_stream_of_writes() {
    let app = Arc::new(
        following(
            "CREATE TABLE t (id serial PRIMARY KEY, name text, n int, spare text, \
                             geom geometry(Point, 4326))",
            FAST,
            false,
        )
        .await,
    );
    // Three writers post two features at a time until told to stop.
    let (stop, written) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (app, stop, written) = (app.clone(), stop.clone(), written.clone());
            tokio::spawn(async move {
                let mut failed = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = collection(vec![
                        point(w as f64, i as f64, json!({"name": format!("w{w}"), "n": i})),
                        point(w as f64, i as f64, json!({"n": i})),
                    ]);
                    let r = app.post("t", &body).await;
                    if r.status == 201 {
                        written.fetch_add(2, Ordering::Relaxed);
                    } else {
                        failed.push(r);
                    }
                    i += 1;
                }
                failed
            })
        })
        .collect();
    let streamed = |at_least: usize| {
        let written = written.clone();
        async move {
            let from = written.load(Ordering::Relaxed);
            until("writes go on", Duration::from_secs(5), || {
                let written = written.clone();
                async move { written.load(Ordering::Relaxed) >= from + at_least }
            })
            .await;
        }
    };
    streamed(6).await;
    // A new column: written as soon as the catalog has it.
    execute(&app, "ALTER TABLE t ADD COLUMN note text DEFAULT 'none'").await;
    until("note in the catalog", PROMPTLY, || async {
        has_column(&app, "t", "note")
    })
    .await;
    let r = app
        .post("t", &point(0.0, 0.0, json!({"note": "hello"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    streamed(6).await;

    // A changed type: int to numeric, which now takes fractions.
    execute(&app, "ALTER TABLE t ALTER COLUMN n TYPE numeric(10, 2)").await;
    until("n is numeric", PROMPTLY, || async {
        column(&app, "t", "n").ty == ColumnType::Scalar(ScalarType::Numeric)
    })
    .await;
    let r = app.post("t", &point(0.0, 0.0, json!({"n": 2.5}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM t WHERE n = 2.5").await, 1);
    streamed(6).await;

    // A new default.
    execute(
        &app,
        "ALTER TABLE t ALTER COLUMN name SET DEFAULT 'unnamed'",
    )
    .await;
    until("name's default", PROMPTLY, || async {
        column(&app, "t", "name").default.as_deref() == Some("'unnamed'::text")
    })
    .await;
    streamed(6).await;

    // A dropped column: writing it fails, and nothing else does.
    execute(&app, "ALTER TABLE t DROP COLUMN spare").await;
    let r = app.post("t", &point(0.0, 0.0, json!({"spare": "x"}))).await;
    assert!(
        [422, 503].contains(&r.status.as_u16()),
        "a write of the dropped column fails clearly, as a 503 until the catalog follows: {r:?}"
    );
    until("spare gone from the catalog", PROMPTLY, || async {
        !has_column(&app, "t", "spare")
    })
    .await;
    let r = app.post("t", &point(0.0, 0.0, json!({"spare": "x"}))).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "unknown_property", "{r:?}");
    streamed(6).await;

    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let failed = writer.await.unwrap();
        assert!(failed.is_empty(), "writes failed under the DDL: {failed:?}");
    }
    let streamed = written.load(Ordering::Relaxed) as i64;
    // Every acknowledged feature is there, with the defaults of its time.
    assert_eq!(app.db.int("SELECT count(*) FROM t").await, streamed + 2);
    assert!(
        app.db
            .int("SELECT count(*) FROM t WHERE name = 'unnamed'")
            .await
            > 0
    );
    assert!(
        app.db
            .int("SELECT count(*) FROM t WHERE note = 'none'")
            .await
            > 0
    );
}

#[tokio::test]
async fn a_new_table_appears_within_five_seconds_and_is_writable() {
    let app = following_with("", |c| {
        c.catalog_poll = Config::for_database("postgres://x/y").catalog_poll;
    })
    .await;
    assert_eq!(app.get("/collections/fresh").await.status, 404);
    execute(
        &app,
        "CREATE TABLE fresh (id serial PRIMARY KEY, geom geometry(Point, 4326))",
    )
    .await;
    let created = Instant::now();
    until("fresh in /collections", Duration::from_secs(5), || async {
        let r = app.get("/collections").await;
        r.body["collections"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["id"] == "fresh"))
    })
    .await;
    assert!(created.elapsed() < Duration::from_secs(5));
    let r = app.post("fresh", &point(1.0, 2.0, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = app.get("/collections/fresh/items").await;
    assert_eq!(
        r.body["features"].as_array().map(Vec::len),
        Some(1),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_dropped_table_answers_404() {
    let app = following(
        "CREATE TABLE doomed (id serial PRIMARY KEY, geom geometry(Point, 4326));
         CREATE TABLE kept (id serial PRIMARY KEY, geom geometry(Point, 4326));",
        FAST,
        false,
    )
    .await;
    let r = app.post("doomed", &point(1.0, 2.0, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let kept = app.state.catalog().get("kept").cloned().unwrap();
    execute(&app, "DROP TABLE doomed").await;
    until("doomed gone", PROMPTLY, || async {
        app.get("/collections/doomed").await.status == 404
    })
    .await;
    for path in ["/collections/doomed/items", "/collections/doomed/items/1"] {
        let r = app.get(path).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    let r = app.post("doomed", &point(1.0, 2.0, json!({}))).await;
    assert_eq!(r.status, 404, "{r:?}");
    // The collection that did not change is the very same.
    assert!(Arc::ptr_eq(&kept, app.state.catalog().get("kept").unwrap()));
}

#[tokio::test]
async fn a_renamed_table_and_column_follow() {
    let app = following(
        "CREATE TABLE old_name (id serial PRIMARY KEY, label text, geom geometry(Point, 4326))",
        FAST,
        false,
    )
    .await;
    execute(&app, "ALTER TABLE old_name RENAME TO new_name").await;
    until_published(&app, "new_name").await;
    assert_eq!(app.get("/collections/old_name").await.status, 404);
    execute(&app, "ALTER TABLE new_name RENAME COLUMN label TO title").await;
    until("title in the catalog", PROMPTLY, || async {
        has_column(&app, "new_name", "title")
    })
    .await;
    let r = app
        .post("new_name", &point(0.0, 0.0, json!({"title": "t"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = app
        .post("new_name", &point(0.0, 0.0, json!({"label": "l"})))
        .await;
    assert_eq!(r.status, 422, "{r:?}");
}

#[tokio::test]
async fn notify_reloads_at_once() {
    let app = following("", Duration::ZERO, true).await;
    create_and_notify(&app).await;
}

#[tokio::test]
async fn an_event_trigger_notifies_each_ddl() {
    // The event trigger of docs/api.md (it needs a superuser to create).
    let app = following(
        "CREATE FUNCTION featurepipe_reload() RETURNS event_trigger LANGUAGE plpgsql AS
           $$ BEGIN NOTIFY featurepipe_reload; END $$;
         CREATE EVENT TRIGGER featurepipe_reload ON ddl_command_end
           EXECUTE FUNCTION featurepipe_reload();",
        Duration::ZERO,
        true,
    )
    .await;
    execute(
        &app,
        "CREATE TABLE triggered (id serial PRIMARY KEY, geom geometry(Point, 4326))",
    )
    .await;
    until_published(&app, "triggered").await;
    execute(&app, "ALTER TABLE triggered ADD COLUMN kind text").await;
    until("kind in the catalog", PROMPTLY, || async {
        has_column(&app, "triggered", "kind")
    })
    .await;
}

#[tokio::test]
async fn sighup_reloads_at_once() {
    let db = TestDb::new("").await;
    let service = ServiceProcess::start(
        &db.url,
        &[
            ("FEATUREPIPE_CATALOG_POLL", "0"),
            ("FEATUREPIPE_CATALOG_LISTEN", "off"),
        ],
    )
    .await;
    db.client
        .batch_execute("CREATE TABLE hup (id serial PRIMARY KEY, geom geometry(Point, 4326))")
        .await
        .unwrap();
    let pid = service.child.id().expect("running").to_string();
    let killed = crate::support::run("kill", &["-HUP", &pid]).await;
    assert!(killed.status.success(), "{killed:?}");
    until("hup published", PROMPTLY, || async {
        matches!(
            http(&service.addr, "GET", "/collections/hup", "").await,
            Ok((200, _))
        )
    })
    .await;
    let r = http(
        &service.addr,
        "POST",
        "/collections/hup/items",
        &point(0.0, 0.0, json!({})).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.0, 201, "{}", r.1);
}

/// `featurepipe_catalog_reloads_total{outcome}` as the app's /metrics says
/// (the recorder is the process's: other tests count too).
async fn reloads(app: &TestApp, outcome: &str) -> u64 {
    let r = app.get("/metrics").await;
    let prefix = format!("featurepipe_catalog_reloads_total{{outcome=\"{outcome}\"}} ");
    r.body
        .as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn a_failed_reload_keeps_the_catalog_in_use() {
    let settings = settings_file(
        "reload-failed",
        "[collections.stamped]\nlast_modified = \"changed_at\"\n",
    );
    let app = following_with(
        "CREATE TABLE stamped (id serial PRIMARY KEY, changed_at timestamptz, \
                               geom geometry(Point, 4326))",
        |c| c.settings = Some(settings),
    )
    .await;
    let failed = reloads(&app, "failed").await;
    let in_use = app.state.catalog();
    // The settings name the column dropped: the catalog cannot be read with them.
    execute(&app, "ALTER TABLE stamped DROP COLUMN changed_at").await;
    until("a failed reload counted", PROMPTLY, || async {
        reloads(&app, "failed").await > failed
    })
    .await;
    assert!(
        Arc::ptr_eq(&in_use, &app.state.catalog()),
        "the catalog in use stays"
    );
    assert_eq!(app.get("/collections/stamped").await.status, 200);
    // Once the tables fit the settings again, the next reload succeeds.
    execute(
        &app,
        "ALTER TABLE stamped ADD COLUMN changed_at timestamptz",
    )
    .await;
    until_replaced(&app, &in_use).await;
    let r = app.post("stamped", &point(0.0, 0.0, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert!(reloads(&app, "changed").await > 0);
}

/// The bbox `GET /collections/{id}` shows.
async fn bbox(app: &TestApp, id: &str) -> Value {
    let r = app.get(&format!("/collections/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["extent"]["spatial"]["bbox"][0].clone()
}

#[tokio::test]
async fn a_changed_table_has_its_extent_computed_again() {
    // Geography has no extent estimate: it is a scan, cached.
    let app = following(
        "CREATE TABLE a (id serial PRIMARY KEY, g geography(Point, 4326));
         CREATE TABLE b (id serial PRIMARY KEY, g geography(Point, 4326));
         INSERT INTO a (g) VALUES ('SRID=4326;POINT(1 1)');
         INSERT INTO b (g) VALUES ('SRID=4326;POINT(5 5)');",
        FAST,
        false,
    )
    .await;
    assert_eq!(bbox(&app, "a").await, json!([1.0, 1.0, 1.0, 1.0]));
    assert_eq!(bbox(&app, "b").await, json!([5.0, 5.0, 5.0, 5.0]));
    execute(
        &app,
        "INSERT INTO a (g) VALUES ('SRID=4326;POINT(9 9)');
         INSERT INTO b (g) VALUES ('SRID=4326;POINT(9 9)');",
    )
    .await;
    assert_eq!(bbox(&app, "a").await, json!([1.0, 1.0, 1.0, 1.0]), "cached");
    execute(&app, "COMMENT ON TABLE a IS 'changed'").await;
    until("a's new description", PROMPTLY, || async {
        app.state.catalog().get("a").unwrap().description.as_deref() == Some("changed")
    })
    .await;
    assert_eq!(bbox(&app, "a").await, json!([1.0, 1.0, 9.0, 9.0]));
    assert_eq!(
        bbox(&app, "b").await,
        json!([5.0, 5.0, 5.0, 5.0]),
        "b did not change"
    );
}

#[tokio::test]
async fn a_reload_drops_the_statements_prepared_before() {
    // One connection, so that each checkout finds the statement it cached.
    let app = following_with(
        "CREATE TABLE typed (id serial PRIMARY KEY, n int, geom geometry(Point, 4326));
         INSERT INTO typed (n) VALUES (7);",
        |c| {
            c.pool_size = 1;
            c.catalog_poll = Duration::ZERO;
        },
    )
    .await;
    let sql = "SELECT n FROM typed";
    let n = |client: deadpool_postgres::Object| async move {
        let statement = client.prepare_cached(sql).await?;
        client.query_one(&statement, &[]).await
    };
    let cached = n(app.state.db.connection().await.unwrap()).await.unwrap();
    assert_eq!(cached.get::<_, i32>(0), 7);
    execute(&app, "ALTER TABLE typed ALTER COLUMN n TYPE text").await;
    // The statement cached before the change no longer answers.
    let stale = n(app.state.db.connection().await.unwrap())
        .await
        .unwrap_err();
    let message = stale.as_db_error().map(|e| e.message());
    assert_eq!(
        message,
        Some("cached plan must not change result type"),
        "{stale:?}"
    );
    let before = app.state.catalog();
    app.state.reload_catalog();
    until_replaced(&app, &before).await;
    let fresh = n(app.state.db.connection().await.unwrap()).await.unwrap();
    assert_eq!(fresh.get::<_, String>(0), "7");
}

#[tokio::test]
async fn nothing_changed_nothing_reloaded() {
    let app = following(
        "CREATE TABLE calm (id serial PRIMARY KEY, geom geometry(Point, 4326))",
        Duration::ZERO,
        false,
    )
    .await;
    let before = app.state.catalog();
    let unchanged = reloads(&app, "unchanged").await;
    app.state.reload_catalog();
    until("a reload counted", PROMPTLY, || async {
        reloads(&app, "unchanged").await > unchanged
    })
    .await;
    assert!(Arc::ptr_eq(&before, &app.state.catalog()));
}

/// The app behind a PgBouncer in `mode`, following its catalog as `tweak` says.
async fn behind_pgbouncer(
    mode: &str,
    pooler: Pooler,
    tweak: impl FnOnce(&mut Config),
) -> (crate::poolers::Bouncer, TestApp) {
    let db = TestDb::new("").await;
    let (bouncer, url) = crate::poolers::Bouncer::with_settings(&db, mode, "").await;
    let mut config = crate::support::config(&url);
    config.db.pooler = pooler;
    tweak(&mut config);
    (bouncer, TestApp::on(db, config).await)
}

#[tokio::test]
async fn behind_a_transaction_pooler_the_catalog_is_polled() {
    // LISTEN cannot work there (it is asked for, and not made): polling does.
    let (_bouncer, app) = behind_pgbouncer("transaction", Pooler::Transaction, |c| {
        c.catalog_poll = FAST;
        c.catalog_listen = true;
    })
    .await;
    execute(
        &app,
        "CREATE TABLE pooled (id serial PRIMARY KEY, geom geometry(Point, 4326))",
    )
    .await;
    until_published(&app, "pooled").await;
    let r = app.post("pooled", &point(0.0, 0.0, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn behind_a_session_pooler_notify_reloads_at_once() {
    let (_bouncer, app) = behind_pgbouncer("session", Pooler::Session, |c| {
        c.catalog_poll = Duration::ZERO;
        c.catalog_listen = true;
    })
    .await;
    create_and_notify(&app).await;
}

#[tokio::test]
async fn until_the_reload_a_dropped_column_answers_503() {
    // No polling: the catalog in use still has the column.
    let app = following(
        "CREATE TABLE lagging (id serial PRIMARY KEY, gone text, geom geometry(Point, 4326));
         INSERT INTO lagging (gone, geom) VALUES ('x', 'SRID=4326;POINT(1 2)');",
        Duration::ZERO,
        false,
    )
    .await;
    execute(&app, "ALTER TABLE lagging DROP COLUMN gone").await;
    let put = || {
        app.send(
            "PUT",
            "/collections/lagging/items/1",
            &[("content-type", "application/geo+json")],
            Some(point(3.0, 4.0, json!({})).to_string()),
        )
    };
    for r in [app.get("/collections/lagging/items").await, put().await] {
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.headers["retry-after"], "1");
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    let before = app.state.catalog();
    app.state.reload_catalog();
    until_replaced(&app, &before).await;
    let r = app.get("/collections/lagging/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = put().await;
    assert!(r.status.is_success(), "{r:?}");
}

#[tokio::test]
async fn a_burst_of_notifications_is_a_reload_a_second_at_most() {
    let app = following("", Duration::ZERO, true).await;
    create_and_notify(&app).await;
    // Reloads of the process's other apps count too: the bound is loose,
    // the burst (200 in 2 s) would make about 150 without coalescing.
    let before = reloads(&app, "unchanged").await + reloads(&app, "changed").await;
    let started = Instant::now();
    for n in 0..200 {
        execute(&app, &format!("NOTIFY featurepipe_reload, '{n}'")).await;
        let next = started + Duration::from_millis(10 * (n + 1));
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = reloads(&app, "unchanged").await + reloads(&app, "changed").await;
    let seconds = started.elapsed().as_secs();
    println!(
        "200 notifications in 2 s: {} reloads in {seconds} s",
        after - before
    );
    assert!(after - before <= seconds + 10, "{} reloads", after - before);
}

#[tokio::test]
async fn a_write_right_after_a_column_is_retyped_is_a_503_and_reads_the_catalog_again() {
    // No polling, no LISTEN: only the refused write can make it read again.
    let app = following(
        "CREATE TABLE retyped (id serial PRIMARY KEY, val text, geom geometry(Point, 4326));",
        Duration::ZERO,
        false,
    )
    .await;
    let hello = point(0.0, 0.0, json!({"val": "hello"}));
    assert_eq!(app.post("retyped", &hello).await.status, 201);
    execute(
        &app,
        "ALTER TABLE retyped ALTER COLUMN val TYPE int USING 0",
    )
    .await;
    let r = app.post("retyped", &hello).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    until("the catalog read again", PROMPTLY, || async {
        app.state.catalog().get("retyped").unwrap().columns[1].exact_type_sql == "integer"
    })
    .await;
    let r = app.post("retyped", &hello).await;
    assert_eq!(r.status, 422, "{r:?}");
    let pointer = r.body["errors"][0]["pointer"].as_str().unwrap_or_default();
    assert!(pointer.ends_with("/properties/val"), "{r:?}");
    let r = app
        .post("retyped", &point(0.0, 0.0, json!({"val": 7})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM retyped").await, 2);
}

/// Replace the file at `path` with `text` at once (written aside, renamed).
fn rewrite(path: &std::path::Path, text: &str) {
    let aside = path.with_extension("toml.next");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

#[tokio::test]
async fn a_key_rotation_takes_effect_at_once_and_a_bad_settings_file_changes_nothing() {
    use crate::auth::sha256;
    let (old, new) = ("fp_rotated_out_key", "fp_rotated_in_key");
    let with_key = |key: &str, title: &str| {
        format!(
            "[api_keys.field]\nsha256 = \"{}\"\nscope = \"read:* write:*\"\n\
             [collections.sites]\ntitle = \"{title}\"\n",
            sha256(key)
        )
    };
    let path =
        std::env::temp_dir().join(format!("featurepipe-rotation-{}.toml", std::process::id()));
    rewrite(&path, &with_key(old, "Sites"));
    let setup = "CREATE TABLE sites (id serial PRIMARY KEY, name text, seen date, geom geometry(Point, 4326))";
    let app = TestApp::with_config(setup, |c| {
        c.auth = true;
        c.settings = Some(path.clone());
    })
    .await;
    let status = |key: &'static str| {
        let app = &app;
        async move {
            let auth = format!("Bearer {key}");
            app.send(
                "GET",
                "/collections/sites",
                &[("authorization", auth.as_str())],
                None,
            )
            .await
        }
    };
    assert_eq!(status(old).await.status, 200);
    assert_eq!(status(new).await.status, 401);

    // The new key works at once, the old one is refused at once, and the
    // collections' settings come with them.
    rewrite(&path, &with_key(new, "Rotated sites"));
    until("the new key taken", PROMPTLY, || async {
        status(new).await.status == 200
    })
    .await;
    assert_eq!(status(old).await.status, 401);
    assert_eq!(status(new).await.body["title"], "Rotated sites");

    // A file that does not parse, one whose credentials do not build, and
    // one whose collection settings the tables do not fit: each is refused
    // whole, and the settings in force stay.
    for bad in [
        "[api_keys.field\nsha256 = ".to_owned(),
        format!("[api_keys.field]\nsha256 = \"{}\"\nscope = \"admin:*\"\n", sha256(old)),
        format!(
            "[api_keys.field]\nsha256 = \"{}\"\nscope = \"read:*\"\n[collections.sites]\ntime = \"nosuch\"\n",
            sha256(old)
        ),
    ] {
        rewrite(&path, &bad);
        // The watcher looks every second; a reload waits at most a second more.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(status(old).await.status, 401, "{bad}");
        let kept = status(new).await;
        assert_eq!(kept.status, 200, "{bad}");
        assert_eq!(kept.body["title"], "Rotated sites", "{bad}");
    }
    let _ = std::fs::remove_file(&path);
}
