//! Citus (opt-in): every write path, reads, the COPY check and the change
//! feed's refusal on a Citus coordinator. Runs when `FEATUREPIPE_TEST_CITUS`
//! names a coordinator's database (`postgres://postgres@127.0.0.1:9700/citus`)
//! that has the `citus` and `postgis` extensions and workers added; each
//! test makes a schema of its own there and drops it. Without the variable
//! each test says it is skipped and passes: `make test` has no Citus.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use featurepipe::geometry::{encode_ewkb, GeometryColumn};
use serde_json::{json, Value};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use featurepipe_proxy::Proxy;

use crate::support::{config, connect, point, via_proxy, TestApp, TestDb};

const VARIABLE: &str = "FEATUREPIPE_TEST_CITUS";

/// `sites`, distributed by its `bigserial` key; `zones`, a reference table;
/// `team_sites`, distributed by a tenant column with a composite key.
const SETUP: &str = "
    CREATE TABLE sites (id bigserial PRIMARY KEY, name text NOT NULL DEFAULT 'unnamed',
                        kind text DEFAULT 'other', height float8 CHECK (height >= 0),
                        geom geometry(Point, 4326),
                        CONSTRAINT kind_allowed CHECK (kind IS DISTINCT FROM 'forbidden'));
    SELECT create_distributed_table('sites', 'id');
    CREATE TABLE zones (id serial PRIMARY KEY, name text, geom geometry(Polygon, 4326));
    SELECT create_reference_table('zones');
    CREATE TABLE team_sites (team text NOT NULL, id bigserial, name text, geom geometry(Point, 4326),
                             PRIMARY KEY (team, id));
    SELECT create_distributed_table('team_sites', 'team');
";

/// The app on a schema of its own on the Citus coordinator (with `changes =
/// true` for `sites`), and the schema; `None`, said, without
/// `FEATUREPIPE_TEST_CITUS`.
async fn citus_app(test: &str) -> Option<(TestApp, String)> {
    citus_app_at(test, None)
        .await
        .map(|(app, schema, _)| (app, schema))
}

/// [`citus_app`], the service `one_way` from the coordinator when given
/// (through the latency proxy, which it answers with).
async fn citus_app_at(
    test: &str,
    one_way: Option<Duration>,
) -> Option<(TestApp, String, Option<Proxy>)> {
    let Ok(base) = std::env::var(VARIABLE) else {
        eprintln!("citus::{test}: skipped: {VARIABLE} does not name a Citus coordinator");
        return None;
    };
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let schema = format!(
        "fp_citus_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let client = connect(&base).await;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema}, public; {SETUP}"
        ))
        .await
        .expect("set-up SQL on the coordinator");
    let settings = std::env::temp_dir().join(format!("{schema}.toml"));
    std::fs::write(&settings, "[collections.sites]\nchanges = true\n").unwrap();
    // Through the proxy in plain text, which it can read (and count the
    // round trips of): Citus turns TLS on with a certificate of its own.
    let url = match one_way {
        Some(_) if !base.contains("sslmode") => {
            let glue = if base.contains('?') { '&' } else { '?' };
            format!("{base}{glue}sslmode=disable")
        }
        _ => base.clone(),
    };
    let db = TestDb { url, client };
    let (proxy, mut config) = match one_way {
        Some(one_way) => {
            let (proxy, config) = via_proxy(&db, one_way).await;
            (Some(proxy), config)
        }
        None => (None, config(&base)),
    };
    config.schemas = vec![schema.clone()];
    config.settings = Some(settings);
    // Strategies by the measured costs, as in production; far from the
    // coordinator, INSERT (what is measured there).
    config.copy_threshold = None;
    if one_way.is_some() {
        config.write_strategy = featurepipe::write::Strategy::Insert;
    }
    let app = TestApp::on(db, config).await;
    app.db
        .client
        .batch_execute(&format!("SET search_path = {schema}, public"))
        .await
        .unwrap();
    Some((app, schema, proxy))
}

/// Points named `{tag}{i}`.
fn points(tag: &str, n: usize) -> Value {
    let features: Vec<Value> = (0..n)
        .map(|i| {
            point(
                i as f64 * 1e-4,
                1.0,
                json!({"name": format!("{tag}{i}"), "height": 1.5}),
            )
        })
        .collect();
    json!({"type": "FeatureCollection", "features": features})
}

/// A distributed table of the tests, the text of a row's key values in
/// SQL, and its features.
struct Table {
    name: &'static str,
    key: &'static str,
    points: fn(&str, usize) -> Value,
}

/// `sites`, distributed by its key.
const SITES: Table = Table {
    name: "sites",
    key: "ARRAY[id::text]",
    points,
};

/// `team_sites`, distributed by its team and keyed by it and its id.
const TEAM_SITES: Table = Table {
    name: "team_sites",
    key: "ARRAY[team, id::text]",
    points: team_points,
};

/// Whether each id of the answer `r` names the row of `table` of the
/// feature at its place (named `{tag}{i}`).
async fn ids_in_feature_order(app: &TestApp, table: &Table, r: &Value, tag: &str) -> bool {
    let sql = format!("SELECT {}, name FROM {}", table.key, table.name);
    let rows = app.db.client.query(&sql, &[]).await.unwrap();
    let by_key: HashMap<Vec<String>, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let ids = r["ids"].as_array().unwrap();
    !ids.is_empty()
        && ids.iter().enumerate().all(|(i, id)| {
            let id = match id {
                Value::String(id) => id.clone(),
                number => number.to_string(),
            };
            by_key.get(&featurepipe::catalog::key::parts(&id)) == Some(&format!("{tag}{i}"))
        })
}

/// The bulk POST into `table` by each strategy, ids in feature order, and
/// in modes batch and skip.
async fn posted_every_way(app: &TestApp, table: &Table) {
    for (n, strategy) in [(10, "insert"), (1000, "copy"), (20000, "copy")] {
        let tag = format!("bulk{n}-");
        let r = app.post(table.name, &(table.points)(&tag, n)).await;
        assert_eq!(r.status, 201, "{n}: {r:?}");
        assert_eq!(r.body["strategy"], strategy, "{n}");
        assert!(
            ids_in_feature_order(app, table, &r.body, &tag).await,
            "{n}: ids out of order: {r:?}"
        );
    }
    for mode in ["batch", "skip"] {
        let r = app
            .post_raw(
                &format!("/collections/{}/items?mode={mode}", table.name),
                Some("application/geo+json"),
                (table.points)(&format!("{mode}-"), 20).to_string(),
            )
            .await;
        assert_eq!(
            (r.status.as_u16(), &r.body["written"]),
            (200, &json!(20)),
            "{mode}: {r:?}"
        );
    }
}

/// A PATCH of `item` under `etag`, then again under the same, now stale.
async fn patched_under(app: &TestApp, item: &str, etag: &str) {
    for (name, status) in [("patched", 204), ("stale", 412)] {
        let headers = [
            ("content-type", "application/merge-patch+json"),
            ("if-match", etag),
        ];
        let body = json!({"properties": {"name": name}}).to_string();
        let r = app.send("PATCH", item, &headers, Some(body)).await;
        assert_eq!(r.status, status, "{name}: {r:?}");
    }
}

/// A POST of 30 points into `table` under the Idempotency-Key `key`, sent
/// twice: written once, answered the same again. A key of the run's own:
/// the coordinator keeps keys for a day.
async fn keyed_post_written_once(app: &TestApp, table: &Table, key: &str) {
    let headers = [
        ("content-type", "application/geo+json"),
        ("idempotency-key", key),
    ];
    let keyed = (table.points)("keyed-", 30).to_string();
    let path = format!("/collections/{}/items", table.name);
    let first = app.send("POST", &path, &headers, Some(keyed.clone())).await;
    let again = app.send("POST", &path, &headers, Some(keyed)).await;
    assert_eq!(
        (first.status.as_u16(), again.status),
        (201, first.status),
        "{again:?}"
    );
    assert_eq!(first.body["ids"], again.body["ids"]);
    let count = format!(
        "SELECT count(*) FROM {} WHERE name LIKE 'keyed-%'",
        table.name
    );
    assert_eq!(app.db.int(&count).await, 30);
}

#[tokio::test]
async fn every_write_path_works_on_a_distributed_table() {
    let Some((app, schema)) = citus_app("every_write_path_works_on_a_distributed_table").await
    else {
        return;
    };
    // The bulk POST, each strategy: ids in feature order (Citus answers a
    // multi-row INSERT's keys shard by shard, so none is sent there).
    posted_every_way(&app, &SITES).await;
    // Skip mode sets a refused feature aside and writes the rest.
    let mut mixed = points("mixed-", 3);
    mixed["features"][1]["properties"]["height"] = json!(-1.0);
    let r = app
        .post_raw(
            "/collections/sites/items?mode=skip",
            Some("application/geo+json"),
            mixed.to_string(),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.body["written"]),
        (200, &json!(2)),
        "{r:?}"
    );
    // A column's default, as on one server.
    let r = app
        .post("sites", &json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1, 2]}, "properties": {}}))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["ids"][0].as_i64().unwrap();
    let item = format!("/collections/sites/items/{id}");
    let got = app.get(&item).await;
    assert_eq!(got.body["properties"]["name"], "unnamed", "{got:?}");
    let etag = got.headers["etag"].to_str().unwrap().to_owned();
    // PATCH with its precondition (was a 500: a stable function in RETURNING).
    patched_under(&app, &item, &etag).await;
    let put = app
        .send(
            "PUT",
            &item,
            &[("content-type", "application/geo+json")],
            Some(point(3.0, 4.0, json!({"name": "put", "height": 2.0})).to_string()),
        )
        .await;
    assert_eq!(put.status, 204, "{put:?}");
    let stale_delete = app
        .send("DELETE", &item, &[("if-match", &etag)], None)
        .await;
    assert_eq!(stale_delete.status, 412, "{stale_delete:?}");
    // An edit session and a Part 11 transaction.
    let session = json!({"operations": [
        {"op": "update", "collection": "sites", "id": id, "patch": {"properties": {"kind": "session"}}},
        {"op": "insert", "collection": "sites", "features": points("session-", 3)},
    ]});
    let r = app
        .post_raw(
            "/transactions",
            Some("application/json"),
            session.to_string(),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.body["written"]),
        (200, &json!(2)),
        "{r:?}"
    );
    let ogc = json!({"semantic": "atomic", "transaction": [
        {"action": "delete", "collection": "sites", "filter": {"op": "in", "args": [{"property": "id"}, [id]]}},
    ]});
    let r = app
        .post_raw(
            "/transactions",
            Some("application/ogc-tx+json"),
            ogc.to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        app.db
            .int(&format!("SELECT count(*) FROM sites WHERE id = {id}"))
            .await,
        0
    );
    // An Idempotency-Key: written once, answered again.
    keyed_post_written_once(&app, &SITES, &format!("{schema}-key")).await;
    drop_schema(&app, &schema).await;
}

#[tokio::test]
async fn reads_and_reference_tables_answer_as_on_one_server() {
    let Some((app, schema)) = citus_app("reads_and_reference_tables_answer_as_on_one_server").await
    else {
        return;
    };
    let r = app.post("sites", &points("read-", 50)).await;
    assert_eq!(r.status, 201, "{r:?}");
    // A page (was a 500: to_json in the FROM-less subquery of the properties).
    let page = app
        .get("/collections/sites/items?limit=10&sortby=name")
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.body["numberMatched"], 50);
    assert_eq!(page.body["features"][0]["properties"]["height"], 1.5);
    let boxed = app.get("/collections/sites/items?bbox=0,0,0.00205,2").await;
    assert_eq!(boxed.body["numberMatched"], 21, "{boxed:?}");
    let filtered = app
        .get("/collections/sites/items?filter=name%20LIKE%20%27read-1%25%27")
        .await;
    assert_eq!(filtered.body["numberMatched"], 11, "{filtered:?}");
    let described = app.get("/collections/sites/schema").await;
    let props = &described.body["properties"];
    assert_eq!(props["id"]["readOnly"], true, "{described:?}");
    assert_eq!(props["height"]["minimum"], 0, "{described:?}");
    // A reference table: written by COPY past the threshold, read back.
    let zone = json!({"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]}, "properties": {"name": "z"}});
    let zones = json!({"type": "FeatureCollection", "features": vec![zone; 500]});
    let r = app.post("zones", &zones).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ids"].as_array().unwrap().len(), 500);
    assert_eq!(
        app.get("/collections/zones/items?limit=1").await.body["numberMatched"],
        500
    );
    drop_schema(&app, &schema).await;
}

/// Teams, one with characters an id escapes (`a~2Cb~20c`).
const TEAMS: [&str; 3] = ["north", "a,b c", "south"];

/// `n` points of `team_sites` named `{tag}{i}`, across the three teams.
fn team_points(tag: &str, n: usize) -> Value {
    let mut body = points(tag, n);
    for (i, f) in body["features"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        f["properties"] = json!({"team": TEAMS[i % 3], "name": format!("{tag}{i}")});
    }
    body
}

#[tokio::test]
async fn a_table_distributed_by_its_tenant_takes_every_write() {
    const TEST: &str = "a_table_distributed_by_its_tenant_takes_every_write";
    let Some((app, schema)) = citus_app(TEST).await else {
        return;
    };
    // Its id is the key's two values, `team,id`: ids in feature order, by
    // each strategy (COPY draws the ids, the features give the teams).
    posted_every_way(&app, &TEAM_SITES).await;
    let r = app.post("team_sites", &team_points("one-", 1)).await;
    let id = r.body["ids"][0].as_str().unwrap().to_owned();
    assert!(id.starts_with("north,"), "{id}");
    let item = format!("/collections/team_sites/items/{id}");
    let got = app.get(&item).await;
    assert_eq!(
        (got.status.as_u16(), &got.body["id"]),
        (200, &json!(id)),
        "{got:?}"
    );
    let etag = got.headers["etag"].to_str().unwrap().to_owned();
    // PATCH, PUT and DELETE find it by both values, with their preconditions.
    patched_under(&app, &item, &etag).await;
    let put = point(3.0, 4.0, json!({"team": "north", "name": "put"})).to_string();
    let r = app
        .send(
            "PUT",
            &item,
            &[("content-type", "application/geo+json")],
            Some(put),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = app
        .send("DELETE", &item, &[("if-match", &etag)], None)
        .await;
    assert_eq!(r.status, 412, "{r:?}");
    // An edit session: an update, inserts and a delete under an ETag.
    let etag = app.get(&item).await.headers["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let session = json!({"operations": [
        {"op": "update", "collection": "team_sites", "id": id, "patch": {"properties": {"name": "session"}}},
        {"op": "insert", "collection": "team_sites", "features": team_points("session-", 3)},
    ]});
    let r = app
        .post_raw(
            "/transactions",
            Some("application/json"),
            session.to_string(),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), &r.body["written"]),
        (200, &json!(2)),
        "{r:?}"
    );
    // The inserts are one statement, their ids drawn and answered in order.
    let inserted = json!({"ids": r.body["results"][1]["ids"]});
    assert!(
        ids_in_feature_order(&app, &TEAM_SITES, &inserted, "session-").await,
        "{r:?}"
    );
    // A run of updates and a run of deletes: a statement each.
    let r = app.post("team_sites", &team_points("run-", 6)).await;
    let run: Vec<Value> = r.body["ids"].as_array().unwrap().clone();
    let mut ops: Vec<Value> = (0..3)
        .map(|i| {
            json!({"op": "update", "collection": "team_sites", "id": run[i],
                        "patch": {"properties": {"name": format!("ran-{i}")}}})
        })
        .collect();
    ops.push(json!({"op": "delete", "collection": "team_sites", "ids": &run[3..]}));
    let body = json!({ "operations": ops }).to_string();
    let r = app
        .post_raw("/transactions", Some("application/json"), body)
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let ran = "SELECT string_agg(team || ':' || name, ' ' ORDER BY name) FROM team_sites \
               WHERE name LIKE 'ran-%' OR name LIKE 'run-%'";
    assert_eq!(
        app.db.text(ran).await.as_deref(),
        Some("north:ran-0 a,b c:ran-1 south:ran-2")
    );
    let stale = json!({"operations": [
        {"op": "delete", "collection": "team_sites", "id": id, "if_match": etag},
    ]});
    let r = app
        .post_raw("/transactions", Some("application/json"), stale.to_string())
        .await;
    assert_eq!(r.status, 412, "{r:?}");
    let ogc = json!({"semantic": "atomic", "transaction": [
        {"action": "insert", "collection": "team_sites", "items": team_points("ogc-", 2)["features"]},
        {"action": "update", "collection": "team_sites",
         "filter": {"op": "=", "args": [{"property": "id"}, id]},
         "properties": {"modify": [{"name": "name", "value": "ogc"}]}},
    ]});
    let r = app
        .post_raw(
            "/transactions",
            Some("application/ogc-tx+json"),
            ogc.to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(app.get(&item).await.body["properties"]["name"], "ogc");
    let r = app.send("DELETE", &item, &[], None).await;
    assert_eq!(r.status, 204, "{r:?}");
    let count =
        "SELECT count(*) FROM team_sites WHERE name IN ('session', 'put', 'patched', 'ogc')";
    assert_eq!(app.db.int(count).await, 0);
    // An Idempotency-Key: written once, answered again.
    keyed_post_written_once(&app, &TEAM_SITES, &format!("{schema}-team-key")).await;
    drop_schema(&app, &schema).await;
}

#[tokio::test]
async fn a_change_feed_on_a_distributed_table_is_declined_not_fatal() {
    let Some((app, schema)) =
        citus_app("a_change_feed_on_a_distributed_table_is_declined_not_fatal").await
    else {
        return;
    };
    // The service started (it used to stop); the feed answers 503, the rest works.
    let feed = app.get("/collections/sites/changes").await;
    assert_eq!(feed.status, 503, "{feed:?}");
    assert!(
        feed.body["type"]
            .as_str()
            .unwrap()
            .ends_with("change-feed-not-installed"),
        "{feed:?}"
    );
    assert_eq!(app.post("sites", &points("fed-", 5)).await.status, 201);
    drop_schema(&app, &schema).await;
}

#[tokio::test]
async fn copy_of_20000_points_beside_raw_binary_copy() {
    let Some((app, schema)) = citus_app("copy_of_20000_points_beside_raw_binary_copy").await else {
        return;
    };
    // Measured, not asserted (the machine is shared): printed for the docs.
    let body = points("speed-", 20_000);
    let any = GeometryColumn::from_typmod(-1, false);
    let rows: Vec<(String, f64, Vec<u8>)> = body["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let ewkb = encode_ewkb(&f["geometry"].to_string(), &any).unwrap();
            (
                f["properties"]["name"].as_str().unwrap().to_owned(),
                1.5,
                ewkb,
            )
        })
        .collect();
    let text = body.to_string();
    let (mut http, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let started = Instant::now();
        let r = app
            .post_raw(
                "/collections/sites/items",
                Some("application/geo+json"),
                text.clone(),
            )
            .await;
        http.push(started.elapsed());
        assert_eq!(
            (r.status.as_u16(), &r.body["strategy"]),
            (201, &json!("copy")),
            "{r:?}"
        );
        let copy = app
            .db
            .client
            .prepare("COPY sites (name, height, geom) FROM STDIN (FORMAT binary)")
            .await
            .unwrap();
        let started = Instant::now();
        let sink = app.db.client.copy_in(&copy).await.unwrap();
        let mut writer = Box::pin(BinaryCopyInWriter::new(
            sink,
            &[Type::TEXT, Type::FLOAT8, Type::BYTEA],
        ));
        for (name, height, ewkb) in &rows {
            let row: [&(dyn ToSql + Sync); 3] = [name, height, ewkb];
            writer.as_mut().write(&row).await.unwrap();
        }
        writer.as_mut().finish().await.unwrap();
        raw.push(started.elapsed());
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (http, raw) = (median(http), median(raw));
    eprintln!(
        "citus: 20,000 points: featurepipe POST {:.3} s ({:.0} rows/s), raw binary COPY {:.3} s ({:.0} rows/s): {:.0}%",
        http.as_secs_f64(),
        20_000.0 / http.as_secs_f64(),
        raw.as_secs_f64(),
        20_000.0 / raw.as_secs_f64(),
        100.0 * raw.as_secs_f64() / http.as_secs_f64()
    );
    drop_schema(&app, &schema).await;
}

#[tokio::test]
async fn pipelined_inserts_far_from_the_coordinator_take_one_flight() {
    const TEST: &str = "pipelined_inserts_far_from_the_coordinator_take_one_flight";
    let Some((app, schema, Some(proxy))) =
        citus_app_at(TEST, Some(Duration::from_millis(25))).await
    else {
        return;
    };
    // 50 ms a round trip: one a row would be 50 s for 1,000 points. The
    // first POST prepares the statements; the second is measured.
    let mut counted = Vec::new();
    for tag in ["cold-", "warm-"] {
        let (before, started) = (proxy.round_trips(), Instant::now());
        let r = app
            .post_raw(
                "/collections/sites/items",
                Some("application/geo+json"),
                points(tag, 1000).to_string(),
            )
            .await;
        let took = started.elapsed();
        assert_eq!(
            (r.status.as_u16(), &r.body["strategy"]),
            (201, &json!("insert")),
            "{tag}: {r:?}"
        );
        assert!(
            ids_in_feature_order(&app, &SITES, &r.body, tag).await,
            "{tag}: ids out of order"
        );
        counted.push((proxy.round_trips() - before, took));
    }
    eprintln!(
        "citus: 1,000 points by INSERT, 25 ms each way from the coordinator: \
         cold {} round trips in {:.3} s, warm {} in {:.3} s",
        counted[0].0,
        counted[0].1.as_secs_f64(),
        counted[1].0,
        counted[1].1.as_secs_f64()
    );
    // As on one server: BEGIN, the INSERTs and COMMIT in one flight once
    // warm (the key column's defaults drawn with them).
    assert!(counted[1].0 <= 2, "warm: {counted:?}");
    drop_schema(&app, &schema).await;
}

#[tokio::test]
async fn a_session_changes_many_features_in_one_statement() {
    const TEST: &str = "a_session_changes_many_features_in_one_statement";
    let Some((app, schema)) = citus_app(TEST).await else {
        return;
    };
    let send =
        |body: Value| app.post_raw("/transactions", Some("application/json"), body.to_string());
    // Inserts: one statement, the keys drawn in the features' order.
    let inserts = |tag: &str| -> Value {
        let ops: Vec<Value> = points(tag, 1000)["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| json!({"op": "insert", "collection": "sites", "feature": f}))
            .collect();
        json!({ "operations": ops })
    };
    // A row the database refuses (a check the service does not read):
    // the run fails, and one statement a feature names it.
    let mut refused = inserts("refused-");
    refused["operations"][600]["feature"]["properties"]["kind"] = json!("forbidden");
    let r = send(refused).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["operation"], 600, "{r:?}");
    // Citus passes on the worker's message alone, which names the
    // constraint (and the shard): read from there.
    let error = &r.body["errors"][0];
    assert_eq!(
        (&error["code"], &error["constraint"]),
        (&json!("check_violation"), &json!("kind_allowed")),
        "{error:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 0);
    let started = Instant::now();
    let r = send(inserts("many-")).await;
    let inserted = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    let results = r.body["results"].as_array().unwrap();
    let ids: Vec<i64> = results
        .iter()
        .map(|r| r["ids"][0].as_i64().unwrap())
        .collect();
    assert!(
        ids_in_feature_order(&app, &SITES, &json!({ "ids": ids }), "many-").await,
        "ids out of order"
    );
    // Each under its ETag, as the QGIS plugin sends them.
    let tags = tags_of(&app, &ids).await;
    let updates = |stale: Option<usize>, tags: &HashMap<i64, String>| -> Value {
        let ops: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let tag = match stale == Some(i) {
                    true => "0123456789abcdef0123456789abcdef".to_owned(),
                    false => tags[id].clone(),
                };
                json!({"op": "update", "collection": "sites", "id": id, "if_match": tag,
                       "patch": {"properties": {"kind": format!("changed-{i}")}}})
            })
            .collect();
        json!({ "operations": ops })
    };
    // A stale tag: named at its operation, nothing written.
    let r = send(updates(Some(700), &tags)).await;
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(r.body["errors"][0]["operation"], 700, "{r:?}");
    let changed = "SELECT count(*) FROM sites WHERE kind LIKE 'changed-%'";
    assert_eq!(app.db.int(changed).await, 0);
    // Another writer changes one after its tag was read, and commits while
    // the run waits for its row: the run changes only rows still as they
    // were read, so it fails, and one statement a feature names it.
    let theirs = format!(
        "BEGIN; UPDATE sites SET kind = 'theirs' WHERE id = {}",
        ids[500]
    );
    app.db.client.batch_execute(&theirs).await.unwrap();
    let other = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.db.client.batch_execute("COMMIT").await.unwrap();
    };
    let (r, ()) = tokio::join!(send(updates(None, &tags)), other);
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(r.body["errors"][0]["operation"], 500, "{r:?}");
    assert_eq!(app.db.int(changed).await, 0);
    let kept = format!(
        "SELECT count(*) FROM sites WHERE kind = 'theirs' AND id = {}",
        ids[500]
    );
    assert_eq!(app.db.int(&kept).await, 1);
    let tags = tags_of(&app, &ids).await;
    let started = Instant::now();
    let r = send(updates(None, &tags)).await;
    let updated = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    // Each feature its own value.
    let own = app
        .db
        .client
        .query_one(
            "SELECT count(*) FROM sites AS t JOIN unnest($1::int8[]) WITH ORDINALITY AS u(id, n) \
             ON t.id = u.id WHERE t.kind = 'changed-' || (u.n - 1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(own.get::<_, i64>(0), 1000);
    // The new ETags, as a GET answers them.
    let got = app
        .get(&format!("/collections/sites/items/{}", ids[3]))
        .await;
    let etag = got.headers["etag"]
        .to_str()
        .unwrap()
        .trim_matches('"')
        .to_owned();
    assert_eq!(
        r.body["results"][3]["etag"],
        json!(etag),
        "{:?}",
        r.body["results"][3]
    );
    let deletes: Vec<Value> = ids
        .iter()
        .map(|id| json!({"op": "delete", "collection": "sites", "id": id}))
        .collect();
    let started = Instant::now();
    let r = send(json!({ "operations": deletes })).await;
    let deleted = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 0);
    eprintln!(
        "citus: a session of 1,000 inserts {:.3} s, of 1,000 updates under their ETags {:.3} s, of 1,000 deletes {:.3} s",
        inserted.as_secs_f64(),
        updated.as_secs_f64(),
        deleted.as_secs_f64()
    );
    drop_schema(&app, &schema).await;
}

/// The ETags of features `ids`, as the service makes them.
async fn tags_of(app: &TestApp, ids: &[i64]) -> HashMap<i64, String> {
    let sql = "SELECT id, md5(t::text) FROM sites AS t WHERE id = ANY($1)";
    let rows = app.db.client.query(sql, &[&ids]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Drop the test's schema (and its distributed tables) on the coordinator.
async fn drop_schema(app: &TestApp, schema: &str) {
    app.db
        .client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}
