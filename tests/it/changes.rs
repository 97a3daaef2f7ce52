//! The change feed (`GET /collections/{id}/changes`): a client that takes a
//! cursor, downloads the collection and applies the feed in order ends with
//! exactly the table, whoever wrote it and in whatever order transactions
//! committed; long polls wake on commits; cursors are checked.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use featurepipe::catalog::ChangeFeed;
use featurepipe::changes::cursor::collection_hash;
use featurepipe::changes::Cursor;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::auth::{rls_setup, sha256};
use crate::support::{
    config, connect, create_role, point, settings_file, OwnCluster, TestApp, TestDb, TestResponse,
};

/// The settings file that turns the feed on for `collections`.
pub(crate) fn feeds_on(name: &str, collections: &[&str]) -> std::path::PathBuf {
    let text: String = collections
        .iter()
        .map(|c| format!("[collections.\"{c}\"]\nchanges = true\n"))
        .collect();
    settings_file(name, &text)
}

/// The app on a database set up with `setup`, with feeds on `collections`.
pub(crate) async fn with_feeds(setup: &str, collections: &[&str]) -> TestApp {
    let path = feeds_on(&collections.join("-"), collections);
    TestApp::with_config(setup, |c| c.settings = Some(path)).await
}

/// A client's copy of a collection: features by id, as the API gives them.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Copy(pub(crate) BTreeMap<String, Value>);

impl Copy {
    /// Apply one answer of the feed; its cursor and `more`.
    pub(crate) fn apply(&mut self, page: &TestResponse) -> (String, bool) {
        assert_eq!(page.status, 200, "{page:?}");
        for change in page.body["changes"].as_array().unwrap() {
            let id = change["id"].to_string();
            match change["op"].as_str().unwrap() {
                "upsert" => {
                    assert_eq!(change["feature"]["id"], change["id"], "{change}");
                    assert!(change["etag"].is_string(), "{change}");
                    self.0.insert(id, change["feature"].clone())
                }
                "delete" => self.0.remove(&id),
                other => panic!("op {other}"),
            };
        }
        let cursor = page.body["cursor"].as_str().unwrap().to_owned();
        (cursor, page.body["more"].as_bool().unwrap())
    }
}

/// The cursor for now.
pub(crate) async fn cursor_now(app: &TestApp, collection: &str) -> String {
    let r = app.get(&format!("/collections/{collection}/changes")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["changes"], json!([]), "{r:?}");
    r.body["cursor"].as_str().unwrap().to_owned()
}

/// The collection's features, downloaded page by page. The first page,
/// one query, is one snapshot: pages by offset can skip a feature when one
/// before it is deleted meanwhile.
pub(crate) async fn download(app: &TestApp, collection: &str) -> Copy {
    let mut copy = Copy::default();
    let mut offset = 0;
    loop {
        let page = app
            .get(&format!(
                "/collections/{collection}/items?limit=10000&offset={offset}"
            ))
            .await;
        assert_eq!(page.status, 200, "{page:?}");
        let features = page.body["features"].as_array().unwrap();
        for f in features {
            copy.0.insert(f["id"].to_string(), f.clone());
        }
        if features.is_empty() {
            return copy;
        }
        offset += features.len();
    }
}

/// A transaction id taken now: every transaction committed before has a
/// lower one (transaction ids are cluster-wide).
pub(crate) async fn fresh_xid(app: &TestApp) -> u64 {
    let text = app.db.text("SELECT pg_current_xact_id()::text").await;
    text.unwrap().parse().unwrap()
}

/// The position a cursor stands for.
fn position(cursor: &str) -> (u64, i64) {
    let cursor = featurepipe::changes::Cursor::decode(cursor).unwrap();
    (cursor.tx, cursor.seq)
}

/// Follow the feed from `cursor`, `limit` at a time, applying it to `copy`,
/// until it is past transaction `past` (see [`fresh_xid`]): then every
/// change committed before is applied. Transactions other tests leave open
/// hold the feed back for a while: an empty page waits for a change (a
/// long poll of a second). The changes applied, in order, and the cursor.
pub(crate) async fn follow_past(
    app: &TestApp,
    feed: (&str, usize),
    copy: &mut Copy,
    cursor: String,
    past: u64,
) -> (Vec<Value>, String) {
    follow_past_as(app, &[], feed, copy, cursor, past).await
}

/// [`follow_past`] with `headers` (a credential); `collection` may end in
/// more of the query (`places&filter=…`).
pub(crate) async fn follow_past_as(
    app: &TestApp,
    headers: &[(&str, &str)],
    (collection, limit): (&str, usize),
    copy: &mut Copy,
    mut cursor: String,
    past: u64,
) -> (Vec<Value>, String) {
    let mut applied = Vec::new();
    let mut wait = 0;
    while position(&cursor) < (past, 0) {
        let (collection, query) = collection.split_once('&').unwrap_or((collection, ""));
        let path = format!(
            "/collections/{collection}/changes?since={cursor}&limit={limit}&wait={wait}&{query}"
        );
        let page = app.send("GET", &path, headers, None).await;
        let (next, more) = copy.apply(&page);
        let changes = page.body["changes"].as_array().unwrap();
        wait = u8::from(changes.is_empty() && !more);
        applied.extend(changes.iter().cloned());
        cursor = next;
    }
    (applied, cursor)
}

/// `sql` on the test's own connection.
pub(crate) async fn execute(app: &TestApp, sql: &str) {
    app.db
        .client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e} {:?}", e.as_db_error()));
}

pub(crate) const PLACES: &str = "CREATE TABLE places (id serial PRIMARY KEY, name text,
                                             geom geometry(Point, 4326));
                      INSERT INTO places (name, geom)
                          SELECT 'p' || n, ST_MakePoint(n, n) FROM generate_series(1, 5) AS n;";

#[tokio::test]
async fn a_new_client_takes_a_cursor_downloads_and_follows_every_kind_of_change() {
    let app = with_feeds(PLACES, &["places"]).await;
    let cursor = cursor_now(&app, "places").await;
    let mut copy = download(&app, "places").await;
    assert_eq!(copy.0.len(), 5);

    // Through the service and through plain SQL: insert, update, delete, a key change.
    let r = app
        .post("places", &point(7.0, 8.0, json!({"name": "posted"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let patch = json!({"properties": {"name": "patched"}}).to_string();
    let headers = [("content-type", "application/merge-patch+json")];
    let r = app
        .send(
            "PATCH",
            "/collections/places/items/1",
            &headers,
            Some(patch),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    execute(
        &app,
        "UPDATE places SET name = 'by sql' WHERE id = 2;
         DELETE FROM places WHERE id = 3;
         UPDATE places SET id = 40 WHERE id = 4;",
    )
    .await;
    let r = app
        .send("DELETE", "/collections/places/items/5", &[], None)
        .await;
    assert_eq!(r.status, 204, "{r:?}");

    let page = app
        .get(&format!("/collections/places/changes?since={cursor}"))
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.headers["cache-control"], "no-store");
    let past = fresh_xid(&app).await;
    let (applied, cursor) = follow_past(&app, ("places", 100), &mut copy, cursor, past).await;
    let ops: Vec<(String, &str)> = applied
        .iter()
        .map(|c| (c["id"].to_string(), c["op"].as_str().unwrap()))
        .collect();
    // Each feature once, at its last change; a key change is a delete and an upsert.
    let expected = [
        ("6", "upsert"),
        ("1", "upsert"),
        ("2", "upsert"),
        ("3", "delete"),
        ("4", "delete"),
        ("40", "upsert"),
        ("5", "delete"),
    ];
    let expected: Vec<(String, &str)> = expected
        .iter()
        .map(|(id, op)| (id.to_string(), *op))
        .collect();
    assert_eq!(ops, expected);
    assert_eq!(copy, download(&app, "places").await);
    // The upsert carries the feature's ETag, as GET of the item gives it.
    let item = app.get("/collections/places/items/40").await;
    let change = &applied[5];
    assert_eq!(
        item.headers["etag"].to_str().unwrap(),
        format!("\"{}\"", change["etag"].as_str().unwrap())
    );

    // Nothing new: no changes, and a cursor that still works.
    let page = app
        .get(&format!("/collections/places/changes?since={cursor}"))
        .await;
    assert_eq!(page.body["changes"], json!([]), "{page:?}");
    assert_eq!(page.body["more"], false);
}

#[tokio::test]
async fn a_limit_cuts_pages_and_replays_are_harmless() {
    let app = with_feeds(PLACES, &["places"]).await;
    let start = cursor_now(&app, "places").await;
    let mut copy = download(&app, "places").await;
    execute(
        &app,
        "INSERT INTO places (name, geom)
             SELECT 'q' || n, ST_MakePoint(n, 0) FROM generate_series(1, 25) AS n;
         UPDATE places SET name = 'again' WHERE id % 3 = 0;
         DELETE FROM places WHERE id % 7 = 0;",
    )
    .await;
    let past = fresh_xid(&app).await;
    let (applied, _) = follow_past(&app, ("places", 4), &mut copy, start.clone(), past).await;
    // 25 inserted, 11 updated, 4 deleted: 40 entries; fewer features, each
    // at most once a page (of at most 4 entries).
    assert!(
        applied.len() >= 40 / 4 && applied.len() <= 40,
        "{applied:?}"
    );
    let table = download(&app, "places").await;
    assert_eq!(copy, table);
    // Every change is below the horizon now: the limit cuts the first page.
    let first = app
        .get(&format!(
            "/collections/places/changes?since={start}&limit=4"
        ))
        .await;
    assert_eq!(first.body["more"], true, "{first:?}");
    // Following the same cursor again, over a copy that has it all: no harm.
    follow_past(&app, ("places", 1000), &mut copy, start, past).await;
    assert_eq!(copy, table);
}

#[tokio::test]
async fn crs_and_content_crs_are_as_for_items() {
    let app = with_feeds(PLACES, &["places"]).await;
    let cursor = cursor_now(&app, "places").await;
    execute(&app, "UPDATE places SET name = 'x' WHERE id = 1").await;
    let epsg4326 = "http://www.opengis.net/def/crs/EPSG/0/4326";
    let page = app
        .get(&format!(
            "/collections/places/changes?since={cursor}&crs={epsg4326}&wait=10"
        ))
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.headers["content-crs"], format!("<{epsg4326}>"));
    let item = app
        .get(&format!("/collections/places/items/1?crs={epsg4326}"))
        .await;
    assert_eq!(
        page.body["changes"][0]["feature"],
        without_links(&item.body)
    );
}

/// A feature as GET of the item answers it, without its links.
fn without_links(feature: &Value) -> Value {
    let mut feature = feature.clone();
    feature.as_object_mut().unwrap().remove("links");
    feature
}

#[tokio::test]
async fn bad_parameters_and_collections_without_a_feed() {
    let app = with_feeds(
        &format!("{PLACES} CREATE TABLE plain (id serial PRIMARY KEY, geom geometry);"),
        &["places"],
    )
    .await;
    let r = app.get("/collections/plain/changes").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:no-change-feed");
    let cursor = cursor_now(&app, "places").await;
    for (query, status) in [
        (format!("since={cursor}&limit=0"), 400),
        (format!("since={cursor}&wait=61"), 400),
        (format!("since={cursor}&wait=soon"), 400),
        (format!("since={cursor}&since={cursor}"), 400),
        (format!("since={cursor}&crs=EPSG:1"), 400),
        (format!("since={cursor}&bbox=0,0,1,1"), 400),
        ("wait=5".to_owned(), 400),
        (format!("since={cursor}&limit=100000&f=json"), 200),
    ] {
        let r = app
            .get(&format!("/collections/places/changes?{query}"))
            .await;
        assert_eq!(r.status, status, "{query}: {r:?}");
    }
}

/// The oid of the table behind the feed of `collection`.
pub(crate) fn relid(app: &TestApp, collection: &str) -> u32 {
    match app.state.catalog().get(collection).unwrap().changes {
        ChangeFeed::On { relid } => relid,
        ref other => panic!("the feed of {collection} is {other:?}"),
    }
}

#[tokio::test]
async fn a_cursor_that_is_not_one_is_a_400() {
    let app = with_feeds(
        &format!("{PLACES} CREATE TABLE other (id serial PRIMARY KEY, geom geometry);"),
        &["places", "other"],
    )
    .await;
    let cursor = cursor_now(&app, "places").await;
    let mut tampered = cursor.clone().into_bytes();
    tampered[12] = if tampered[12] == b'x' { b'y' } else { b'x' };
    let from_the_future = Cursor {
        collection: collection_hash("places"),
        relid: relid(&app, "places"),
        epoch: 1,
        tx: 1 << 60,
        seq: 0,
        at: 0,
    };
    for forged in [
        "not-a-cursor".to_owned(),
        String::from_utf8(tampered).unwrap(),
        cursor_now(&app, "other").await,
        from_the_future.encode(),
    ] {
        let r = app
            .get(&format!("/collections/places/changes?since={forged}"))
            .await;
        assert_eq!(r.status, 400, "{forged}: {r:?}");
        assert_eq!(r.body["type"], "urn:featurepipe:problem:invalid-cursor");
    }
    let r = app
        .get(&format!("/collections/places/changes?since={cursor}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn a_cursor_older_than_the_history_or_its_epoch_is_a_410() {
    let app = with_feeds(PLACES, &["places"]).await;
    let old = cursor_now(&app, "places").await;
    let mut copy = download(&app, "places").await;
    execute(&app, "UPDATE places SET name = 'changed' WHERE id < 3").await;
    let past = fresh_xid(&app).await;
    follow_past(&app, ("places", 100), &mut copy, old.clone(), past).await;

    // A retention cut: everything the horizon has passed is forgotten.
    let deleted = featurepipe::changes::prune::prune(&app.state.db, Duration::ZERO)
        .await
        .unwrap();
    // One entry: the UPDATE logged its two keys together.
    assert!(deleted >= 1, "{deleted}");
    let r = app
        .get(&format!("/collections/places/changes?since={old}"))
        .await;
    assert_eq!(r.status, 410, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:cursor-expired");
    // Downloading again with a new cursor goes on from there.
    let fresh = cursor_now(&app, "places").await;
    let r = app
        .get(&format!("/collections/places/changes?since={fresh}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");

    // TRUNCATE logs no rows: it starts the feed again, and every cursor is gone.
    execute(&app, "TRUNCATE places").await;
    let r = app
        .get(&format!("/collections/places/changes?since={fresh}"))
        .await;
    assert_eq!(r.status, 410, "{r:?}");
    let after = cursor_now(&app, "places").await;
    execute(&app, "INSERT INTO places (name) VALUES ('after')").await;
    let past = fresh_xid(&app).await;
    let mut copy = download(&app, "places").await;
    follow_past(&app, ("places", 100), &mut copy, after, past).await;
    assert_eq!(copy, download(&app, "places").await);
}

#[tokio::test]
async fn partitioned_tables_and_client_keys() {
    let app = with_feeds(
        "CREATE TABLE parts (id int PRIMARY KEY, name text, geom geometry(Point, 4326))
             PARTITION BY RANGE (id);
         CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (MINVALUE) TO (100);
         CREATE TABLE parts_high PARTITION OF parts FOR VALUES FROM (100) TO (MAXVALUE);",
        &["parts"],
    )
    .await;
    let cursor = cursor_now(&app, "parts").await;
    let mut copy = download(&app, "parts").await;
    let put = point(1.0, 1.0, json!({"name": "put"})).to_string();
    let headers = [("content-type", "application/geo+json")];
    for id in [5, 6] {
        let r = app
            .send(
                "PUT",
                &format!("/collections/parts/items/{id}"),
                &headers,
                Some(put.clone()),
            )
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // Straight into a partition, a key moved across partitions, a delete.
    execute(
        &app,
        "INSERT INTO parts_high (id, name) VALUES (150, 'direct');
         UPDATE parts SET id = 120 WHERE id = 5;
         DELETE FROM parts_low WHERE id = 6;
         INSERT INTO parts (id, name) VALUES (6, 'again');",
    )
    .await;
    let past = fresh_xid(&app).await;
    let (applied, _) = follow_past(&app, ("parts", 100), &mut copy, cursor, past).await;
    assert_eq!(copy, download(&app, "parts").await);
    let ids: Vec<String> = copy.0.keys().cloned().collect();
    assert_eq!(ids, ["120", "150", "6"]);
    assert!(
        applied.iter().any(|c| c["id"] == 5 && c["op"] == "delete"),
        "{applied:?}"
    );
}

/// A PostGIS cluster of the test's own: transaction ids are the cluster's,
/// so another test's open transaction would hold its feeds back.
async fn own_cluster_app(setup: &str, collections: &[&str]) -> (OwnCluster, TestApp) {
    let cluster = OwnCluster::start().await;
    let url = cluster.url();
    let client = connect(&url).await;
    client
        .batch_execute(&format!("CREATE EXTENSION postgis; {setup}"))
        .await
        .unwrap();
    let mut config = config(&url);
    config.settings = Some(feeds_on(
        &format!("own-{}", collections.join("-")),
        collections,
    ));
    let app = TestApp::on(TestDb { url, client }, config).await;
    (cluster, app)
}

#[tokio::test]
async fn a_long_poll_wakes_within_a_second_of_a_commit() {
    let (_cluster, app) = own_cluster_app(PLACES, &["places"]).await;
    let mut cursor = cursor_now(&app, "places").await;
    let mut slowest = Duration::ZERO;
    for n in 0..5 {
        let poll = async {
            let r = app
                .get(&format!(
                    "/collections/places/changes?since={cursor}&wait=30"
                ))
                .await;
            (r, Instant::now())
        };
        let commit = async {
            // Once the poll waits (it subscribed before reading the feed).
            while app.state.changes.waiting() == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            execute(
                &app,
                &format!("UPDATE places SET name = 'n{n}' WHERE id = 1"),
            )
            .await;
            Instant::now()
        };
        let ((page, answered), committed) = tokio::join!(poll, commit);
        assert_eq!(page.status, 200, "{page:?}");
        assert_eq!(
            page.body["changes"][0]["feature"]["properties"]["name"],
            format!("n{n}")
        );
        slowest = slowest.max(answered.duration_since(committed));
        cursor = page.body["cursor"].as_str().unwrap().to_owned();
    }
    println!("slowest wake of 5 after a commit: {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");

    // Nothing committed: the poll answers after its wait, with no changes.
    let started = Instant::now();
    let r = app
        .get(&format!(
            "/collections/places/changes?since={cursor}&wait=1"
        ))
        .await;
    assert_eq!(r.body["changes"], json!([]), "{r:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

/// The API key named `name` in [`a_caller_gets_only_what_it_may_read`].
fn key_of(name: &str) -> String {
    format!("fp_feed_key_{name}")
}

/// GET `path` with the API key named `name`.
async fn get_as(app: &TestApp, name: &str, path: &str) -> TestResponse {
    let key = key_of(name);
    app.send("GET", path, &[("x-api-key", &key)], None).await
}

#[tokio::test]
async fn a_caller_gets_only_what_it_may_read() {
    let keys = [
        ("a", "read:notes write:notes", "fp_test_field_a"),
        ("b", "read:notes write:notes", "fp_test_field_b"),
        ("none", "read:notes", "fp_test_feed_none"),
        ("outsider", "read:other", "fp_test_field_a"),
    ];
    let mut settings =
        String::from("[auth]\nset_role = true\n[collections.notes]\nchanges = true\n");
    // The table each of two roles sees only its own rows of, and a role
    // that may not read it.
    let setup = rls_setup() + &create_role("fp_test_feed_none", "NOLOGIN");
    for (name, scope, role) in keys {
        settings.push_str(&format!(
            "[api_keys.{name}]\nsha256 = \"{}\"\nscope = \"{scope}\"\nrole = \"{role}\"\n",
            sha256(&key_of(name))
        ));
    }
    let path = settings_file("feed-rights", &settings);
    let app = TestApp::with_config(&setup, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    // The service's schema is the roles' too (as for edit sessions).
    execute(
        &app,
        "GRANT USAGE ON SCHEMA featurepipe TO fp_test_field_a, fp_test_field_b, fp_test_feed_none",
    )
    .await;
    let r = get_as(&app, "a", "/collections/notes/changes").await;
    assert_eq!(r.status, 200, "{r:?}");
    let cursor = r.body["cursor"].as_str().unwrap().to_owned();

    for (key, name) in [("a", "mine"), ("b", "theirs: TOPSECRET")] {
        let key = key_of(key);
        let headers = [
            ("content-type", "application/geo+json"),
            ("x-api-key", &key),
        ];
        let body = point(0.0, 0.0, json!({"name": name})).to_string();
        let r = app
            .send("POST", "/collections/notes/items", &headers, Some(body))
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    execute(
        &app,
        "INSERT INTO notes (owner, name) VALUES ('fp_test_field_b', 'by sql: TOPSECRET')",
    )
    .await;

    // a sees its own feature; b's only as keys to remove, never their content.
    let past = fresh_xid(&app).await;
    let mut copy = Copy::default();
    let a = key_of("a");
    let a_headers = [("x-api-key", a.as_str())];
    let (applied, _) = follow_past_as(
        &app,
        &a_headers,
        ("notes", 100),
        &mut copy,
        cursor.clone(),
        past,
    )
    .await;
    let ops: Vec<String> = applied
        .iter()
        .map(|c| format!("{} {}", c["op"].as_str().unwrap(), c["id"]))
        .collect();
    assert_eq!(ops, ["upsert 1", "delete 2", "delete 3"]);
    assert!(!Value::from(applied).to_string().contains("TOPSECRET"));
    assert_eq!(copy.0.len(), 1);

    // A role that may not read the table, and a key that may not read the
    // collection, get nothing: as for its items.
    for (who, status) in [("none", 403), ("outsider", 403)] {
        for path in [
            "/collections/notes/changes".to_owned(),
            format!("/collections/notes/changes?since={cursor}"),
            "/collections/notes/items".to_owned(),
        ] {
            let r = get_as(&app, who, &path).await;
            assert_eq!(r.status, status, "{who} {path}: {r:?}");
            assert!(r.body.get("changes").is_none(), "{who} {path}: {r:?}");
        }
    }
}

/// Until `check` holds, for at most 10 s.
pub(crate) async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Why the feed of `collection` is not installed, as the catalog says.
pub(crate) fn not_installed(app: &TestApp, collection: &str) -> Option<String> {
    match &app.state.catalog().get(collection).unwrap().changes {
        ChangeFeed::NotInstalled(why) => Some(why.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn a_role_that_may_not_install_a_feed_is_told_what_to_run_and_the_rest_is_served() {
    let owner = TestApp::new(PLACES).await;
    let database = owner.db.url.rsplit('/').next().unwrap();
    // The service's own login: migrations are done, it may do all but the feed.
    execute(
        &owner,
        &format!(
            "{}
             GRANT CREATE ON DATABASE {database} TO fp_test_feed_server;
             GRANT USAGE, CREATE ON SCHEMA featurepipe TO fp_test_feed_server;
             GRANT SELECT, INSERT ON featurepipe.schema_migrations TO fp_test_feed_server;
             GRANT EXECUTE ON FUNCTION featurepipe.idempotency_expire(float8),
               featurepipe.idempotency_claim(text, text),
               featurepipe.idempotency_store(text, int4, bytea, text, jsonb),
               featurepipe.idempotency_lookup(text, float8) TO fp_test_feed_server;
             GRANT SELECT, INSERT, UPDATE, DELETE ON places TO fp_test_feed_server;
             GRANT USAGE ON SEQUENCE places_id_seq TO fp_test_feed_server;",
            create_role("fp_test_feed_server", "LOGIN")
        ),
    )
    .await;
    let url = owner
        .db
        .url
        .replacen("://postgres@", "://fp_test_feed_server@", 1);
    let mut config = config(&url);
    config.settings = Some(feeds_on("not-installed", &["places"]));
    let checks = TestDb {
        url: url.clone(),
        client: connect(&owner.db.url).await,
    };
    let app = TestApp::on(checks, config).await;

    // Served, but for the feed, which says why in the log.
    assert_eq!(app.get("/collections/places/items").await.status, 200);
    let r = app.get("/collections/places/changes").await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(
        r.body["type"],
        "urn:featurepipe:problem:change-feed-not-installed"
    );
    let why = not_installed(&app, "places").unwrap();
    assert!(
        why.contains("As 'postgres', run: GRANT INSERT ON featurepipe.changes TO \"fp_test_feed_server\"; GRANT SELECT, INSERT, UPDATE ON featurepipe.change_feeds TO \"fp_test_feed_server\""),
        "{why}"
    );
    execute(
        &owner,
        "GRANT INSERT ON featurepipe.changes TO fp_test_feed_server;
         GRANT SELECT, INSERT, UPDATE ON featurepipe.change_feeds TO fp_test_feed_server",
    )
    .await;
    app.state.reload_catalog();
    until("the next statement asked for", || async {
        not_installed(&app, "places").is_some_and(|why| why.contains("TRIGGER"))
    })
    .await;
    let why = not_installed(&app, "places").unwrap();
    assert!(
        why.contains(
            "As 'postgres', run: GRANT TRIGGER ON \"public\".\"places\" TO \"fp_test_feed_server\""
        ),
        "{why}"
    );
    execute(&owner, "GRANT TRIGGER ON places TO fp_test_feed_server").await;
    app.state.reload_catalog();
    until("the feed installed", || async {
        not_installed(&app, "places").is_none()
    })
    .await;

    // Installed by the service's role, it logs what any role writes.
    let cursor = cursor_now(&app, "places").await;
    let mut copy = download(&app, "places").await;
    execute(
        &owner,
        "UPDATE places SET name = 'by the owner' WHERE id = 1",
    )
    .await;
    let past = fresh_xid(&owner).await;
    follow_past(&app, ("places", 100), &mut copy, cursor, past).await;
    assert_eq!(copy, download(&app, "places").await);
    assert_eq!(copy.0["1"]["properties"]["name"], "by the owner");
}

/// Commits made by the writers of one run, for a transaction held open
/// until later ones have committed.
#[derive(Default)]
struct Commits {
    count: AtomicUsize,
    made: Notify,
}

impl Commits {
    fn made(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.made.notify_waiters();
    }

    fn seen(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Until `n` commits have been made, or `within` has passed (the other
    /// writers may be waiting for a row this transaction holds).
    async fn until(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let made = self.made.notified();
            if self.seen() >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, made).await.is_err() {
                return;
            }
        }
    }
}

/// Keys the writers pick from: many collide, deleted ones come back.
const KEYS: u32 = 60;

/// The key types of the property test: each seed's table has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Serial,
    Bigint,
    Text,
    Uuid,
    Numeric,
    Date,
    Timestamptz,
}

impl KeyKind {
    const ALL: [KeyKind; 7] = [
        KeyKind::Serial,
        KeyKind::Bigint,
        KeyKind::Text,
        KeyKind::Uuid,
        KeyKind::Numeric,
        KeyKind::Date,
        KeyKind::Timestamptz,
    ];

    /// The kind of seed `seed`'s table.
    fn of(seed: u64) -> KeyKind {
        Self::ALL[usize::try_from(seed).unwrap() % Self::ALL.len()]
    }

    /// The key column's definition.
    fn column(self) -> &'static str {
        match self {
            KeyKind::Serial => "id serial PRIMARY KEY",
            KeyKind::Bigint => "id bigint PRIMARY KEY",
            KeyKind::Text => "id text PRIMARY KEY",
            KeyKind::Uuid => "id uuid PRIMARY KEY",
            KeyKind::Numeric => "id numeric PRIMARY KEY",
            KeyKind::Date => "id date PRIMARY KEY",
            KeyKind::Timestamptz => "id timestamptz PRIMARY KEY",
        }
    }

    /// Key number `n` as text that any session reads as the same value
    /// (ISO dates, explicit offsets), whatever its DateStyle and TimeZone.
    fn key(self, n: u32) -> String {
        match self {
            KeyKind::Serial => n.to_string(),
            KeyKind::Bigint => (u64::from(n) + (1 << 40)).to_string(),
            KeyKind::Text => format!("k '{n}' /x"),
            KeyKind::Uuid => format!("00000000-0000-4000-8000-{n:012}"),
            KeyKind::Numeric => format!("{n}.25"),
            KeyKind::Date => format!("2024-{:02}-{:02}", 1 + n / 28, 1 + n % 28),
            KeyKind::Timestamptz => format!("2024-01-{:02}T{:02}:30:00+05:30", 1 + n / 24, n % 24),
        }
    }

    /// Key number `n` as an SQL literal.
    fn literal(self, n: u32) -> String {
        format!("'{}'", self.key(n).replace('\'', "''"))
    }

    /// The item path of key number `n` in `table`.
    fn item(self, table: &str, n: u32) -> String {
        let id = featurepipe::read::params::percent_encode(&self.key(n));
        format!("/collections/{table}/items/{id}")
    }

    /// The SQL that makes table `t` with 20 features.
    fn setup(self, t: &str) -> String {
        let keys: Vec<String> = (1..=20).map(|n| self.literal(n)).collect();
        format!(
            "CREATE TABLE {t} ({}, n int NOT NULL DEFAULT 0, label text,
                               geom geometry(Point, 4326));
             INSERT INTO {t} (id, label, geom)
                 SELECT k, 'start', ST_MakePoint(1, 1) FROM unnest(ARRAY[{}]::{}[]) AS k;",
            self.column(),
            keys.join(", "),
            self.column()
                .split(' ')
                .nth(1)
                .unwrap()
                .replace("serial", "int"),
        )
    }
}

/// Writes through the service: POST (PUT for keys the client gives),
/// PATCH, DELETE and edit sessions.
async fn service_writer(
    app: &TestApp,
    (table, kind): (&str, KeyKind),
    seed: u64,
    ops: u64,
    commits: &Commits,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..ops {
        let id = rng.random_range(1..KEYS);
        let n = rng.random_range(0..1000);
        let feature = point(f64::from(id), 2.0, json!({"n": n, "label": "service"}));
        let item = kind.item(table, id);
        let patch = [("content-type", "application/merge-patch+json")];
        let geojson = [("content-type", "application/geo+json")];
        let r = match rng.random_range(0..4) {
            0 if kind == KeyKind::Serial => {
                let features = vec![feature.clone(); rng.random_range(1..4)];
                app.post(
                    table,
                    &json!({"type": "FeatureCollection", "features": features}),
                )
                .await
            }
            0 => {
                app.send("PUT", &item, &geojson, Some(feature.to_string()))
                    .await
            }
            1 => {
                let body = json!({"properties": {"n": n}}).to_string();
                app.send("PATCH", &item, &patch, Some(body)).await
            }
            2 => app.send("DELETE", &item, &[], None).await,
            _ => {
                let other = rng.random_range(1..KEYS);
                let key = |n: u32| match kind {
                    KeyKind::Serial => json!(n),
                    _ => json!(kind.key(n)),
                };
                let mut operations = vec![
                    json!({"op": "update", "collection": table, "id": key(id), "patch": {"properties": {"n": n}}}),
                    json!({"op": "delete", "collection": table, "id": key(other)}),
                ];
                if kind == KeyKind::Serial {
                    operations
                        .push(json!({"op": "insert", "collection": table, "feature": feature}));
                }
                let session = json!({ "operations": operations });
                let json = [("content-type", "application/json")];
                app.send("POST", "/transactions", &json, Some(session.to_string()))
                    .await
            }
        };
        // Missing features (404) and conflicts are the writers' lot; a
        // refused body or a fault of the service is not.
        assert!(
            ![400, 422, 500].contains(&r.status.as_u16()),
            "seed {seed}: {r:?}"
        );
        if r.status.is_success() {
            commits.made();
        }
    }
}

/// The session settings of the SQL writers: other than the service's, so
/// that a key logged in the writer's settings would read back otherwise.
const WRITER_SETTINGS: [&str; 2] = [
    "SET DateStyle = 'SQL, DMY'; SET TimeZone = 'Asia/Tokyo'; SET extra_float_digits = 0",
    "SET DateStyle = 'German'; SET TimeZone = 'America/St_Johns'; SET extra_float_digits = -3; \
     SET IntervalStyle = 'sql_standard'",
];

/// Writes in plain SQL: explicit keys that bring deleted features back, key
/// changes, updates, deletes; with `holds`, some transactions take their id
/// first and commit only after later ones did.
async fn sql_writer(
    app: &TestApp,
    (table, kind): (&str, KeyKind),
    (seed, holds): (u64, bool),
    ops: u64,
    commits: &Commits,
) {
    let client = connect(&app.db.url).await;
    client
        .batch_execute(WRITER_SETTINGS[usize::from(holds)])
        .await
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..ops {
        let n = rng.random_range(0..1000);
        let number = rng.random_range(1..KEYS);
        let id = kind.literal(number);
        let statement = match rng.random_range(0..6) {
            0 => format!(
                "INSERT INTO {table} (id, n, label, geom) VALUES ({id}, {n}, 'sql', ST_MakePoint({number}, 1))
                 ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n"
            ),
            1 => format!("UPDATE {table} SET n = n + 1, label = 'sql' WHERE id = {id}"),
            2 => format!("DELETE FROM {table} WHERE id = {id}"),
            3 if kind == KeyKind::Serial => {
                format!("UPDATE {table} SET id = nextval('{table}_id_seq') WHERE id = {id}")
            }
            3 => {
                let other = kind.literal(rng.random_range(1..KEYS));
                format!("UPDATE {table} SET id = {other} WHERE id = {id}")
            }
            // Many rows in one statement.
            4 => format!("UPDATE {table} SET n = n + 1 WHERE n % 3 = {}", n % 3),
            _ if kind == KeyKind::Serial => {
                format!("INSERT INTO {table} (n, geom) VALUES ({n}, ST_MakePoint(0, 0))")
            }
            _ => format!(
                "INSERT INTO {table} (id, n) VALUES ({id}, {n}) ON CONFLICT (id) DO NOTHING"
            ),
        };
        let done = if holds && rng.random_bool(0.4) {
            client
                .batch_execute("BEGIN; SELECT pg_current_xact_id()")
                .await
                .unwrap();
            let seen = commits.seen();
            let written = client.batch_execute(&statement).await;
            commits.until(seen + 3, Duration::from_millis(300)).await;
            let end = if written.is_ok() {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            client.batch_execute(end).await.unwrap();
            written
        } else {
            client.batch_execute(&statement).await
        };
        // Keys taken (an explicit key the sequence handed out too, a key
        // changed to one in use) and deadlocks are refused by the database:
        // nothing is written.
        if done.is_ok() {
            commits.made();
        }
    }
}

/// What one run of [`a_follower_ends_equal_to_the_table_whatever_the_writers_do`] did.
#[derive(Debug, Default)]
struct Run {
    rows: usize,
    changes: i64,
    pages: usize,
}

/// One seed: four writers on table `f{seed}` while a new client takes a
/// cursor, downloads the table and follows the feed in pages of random
/// sizes; when they are done and it has caught up, its copy is the table.
async fn run_seed(app: &TestApp, seed: u64, ops: u64) -> Run {
    let name = format!("f{seed}");
    let table = (name.as_str(), KeyKind::of(seed));
    let commits = Commits::default();
    let writing = AtomicBool::new(true);
    let writers = async {
        tokio::join!(
            service_writer(app, table, seed * 10 + 1, ops, &commits),
            service_writer(app, table, seed * 10 + 2, ops, &commits),
            sql_writer(app, table, (seed * 10 + 3, false), ops, &commits),
            sql_writer(app, table, (seed * 10 + 4, true), ops, &commits),
        );
        writing.store(false, Ordering::SeqCst);
    };
    let follower = async {
        // The writers are at it already: changes between the cursor and
        // the download come again.
        let mut cursor = cursor_now(app, table.0).await;
        let mut copy = download(app, table.0).await;
        let mut rng = SmallRng::seed_from_u64(seed);
        let (mut pages, mut wait) = (0, 0);
        while writing.load(Ordering::SeqCst) {
            let limit = rng.random_range(1..30);
            let page = app
                .get(&format!(
                    "/collections/{}/changes?since={cursor}&limit={limit}&wait={wait}",
                    table.0
                ))
                .await;
            let (next, more) = copy.apply(&page);
            wait = u8::from(!more && page.body["changes"] == json!([]));
            cursor = next;
            pages += 1;
        }
        (copy, cursor, pages)
    };
    let ((), (mut copy, cursor, pages)) = tokio::join!(writers, follower);
    let past = fresh_xid(app).await;
    let limit = SmallRng::seed_from_u64(seed).random_range(1..30);
    follow_past(app, (table.0, limit), &mut copy, cursor, past).await;
    let now = download(app, table.0).await;
    assert_eq!(copy, now, "seed {seed}, keys {:?}", table.1);
    let relid = relid(app, table.0);
    let changes = app
        .db
        .int(&format!(
            "SELECT coalesce(sum(cardinality(keys)), 0) FROM featurepipe.changes WHERE relid = {relid}"
        ))
        .await;
    Run {
        rows: now.0.len(),
        changes,
        pages,
    }
}

/// A knob of [`a_follower_ends_equal_to_the_table_whatever_the_writers_do`], for longer runs by hand.
fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

#[tokio::test]
async fn a_follower_ends_equal_to_the_table_whatever_the_writers_do() {
    let seeds = knob("FEATUREPIPE_FEED_SEEDS", 12);
    let ops = knob("FEATUREPIPE_FEED_OPS", 25);
    let tables: Vec<String> = (0..seeds).map(|s| format!("f{s}")).collect();
    let setup: String = (0..seeds)
        .map(|seed| KeyKind::of(seed).setup(&format!("f{seed}")))
        .collect();
    let names: Vec<&str> = tables.iter().map(String::as_str).collect();
    let app = with_feeds(&setup, &names).await;
    let started = Instant::now();
    let mut total = Run::default();
    let all: Vec<u64> = (0..seeds).collect();
    for group in all.chunks(4) {
        let runs = group.iter().map(|&seed| run_seed(&app, seed, ops));
        for run in futures_util::future::join_all(runs).await {
            total.rows += run.rows;
            total.changes += run.changes;
            total.pages += run.pages;
        }
    }
    println!(
        "{seeds} seeds (keys of {} types), 4 writers of {ops} operations each: {} rows, {} changes logged, \
         {} pages followed while writing, in {:?}",
        KeyKind::ALL.len().min(usize::try_from(seeds).unwrap()),
        total.rows,
        total.changes,
        total.pages,
        started.elapsed()
    );
}

#[tokio::test]
async fn a_feed_whose_table_is_busy_is_installed_once_it_is_not() {
    let db = TestDb::new(PLACES).await;
    // CREATE TRIGGER waits for every transaction that wrote the table.
    let writer = connect(&db.url).await;
    writer
        .batch_execute("BEGIN; UPDATE places SET name = 'held' WHERE id = 1")
        .await
        .unwrap();
    let mut config = config(&db.url);
    config.settings = Some(feeds_on("busy", &["places"]));
    config.catalog_poll = Duration::from_millis(100);
    let app = TestApp::on(db, config).await;
    let why = not_installed(&app, "places").expect("not installed while held");
    assert!(why.contains("writers held it"), "{why}");
    assert_eq!(app.get("/collections/places/items").await.status, 200);
    writer.batch_execute("COMMIT").await.unwrap();
    until("the feed installed at a poll", || async {
        not_installed(&app, "places").is_none()
    })
    .await;
    let cursor = cursor_now(&app, "places").await;
    let r = app
        .get(&format!("/collections/places/changes?since={cursor}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}
