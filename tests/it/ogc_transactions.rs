//! `POST /transactions` with an OGC API - Features Part 11 (draft) body,
//! `application/ogc-tx+json`: the draft's and ldproxy's examples, atomic
//! and batch semantics against real PostGIS, pointers into the OGC body,
//! and the same round trips as featurepipe's own format for the same work.

use std::time::Duration;

use serde_json::{json, Value};

use crate::sessions::session;
use crate::support::{point, via_proxy, TestApp, TestDb, TestResponse};

const OGC: &str = "application/ogc-tx+json";

// `abs(n) = n`, not `n >= 0`: validation catches the simple form before the
// database does, and these tests are about what the database refuses.
const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name text NOT NULL, n int CHECK (abs(n) = n),
                      geom geometry(Point, 4326));
    CREATE TABLE roads (gid serial PRIMARY KEY, name text UNIQUE,
                        geom geometry(LineString, 4326));
    INSERT INTO pts (name, n, geom) SELECT 'p' || i, i, ST_MakePoint(i, 0)::geometry(Point, 4326)
      FROM generate_series(1, 40) AS i;
    INSERT INTO roads (name, geom) VALUES ('first', 'SRID=4326;LINESTRING(0 0,1 1)');
";

async fn ogc(app: &TestApp, body: &Value) -> TestResponse {
    ogc_with(app, "/transactions", &[], body).await
}

async fn ogc_with(
    app: &TestApp,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> TestResponse {
    let mut all = vec![("content-type", OGC)];
    all.extend_from_slice(headers);
    app.send("POST", path, &all, Some(body.to_string())).await
}

/// A CQL2 JSON filter selecting features by `property` = `id`, or in `ids`.
fn by_id(property: &str, id: Value) -> Value {
    match id {
        Value::Array(_) => json!({"op": "in", "args": [{"property": property}, id]}),
        _ => json!({"op": "=", "args": [{"property": property}, id]}),
    }
}

fn pointers(r: &TestResponse) -> Vec<String> {
    r.body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors: {r:?}"))
        .iter()
        .map(|e| e["pointer"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_drafts_example() {
    let app = TestApp::new(
        r#"CREATE TABLE "CABLE_SEGMENTS" (id serial PRIMARY KEY, "segmentId" text,
               manufacturer text, "all-dielectric" text, armored text, fibre_count int,
               fibre_type text, rodent_protected text, "USDPSC_code" int,
               geom geometry(LineString, 4326));
           CREATE TABLE "POLES" (id text PRIMARY KEY, updated date, geom geometry(Point, 4326));
           INSERT INTO "POLES" VALUES ('347901', '2019-01-01', 'SRID=4326;POINT(43 -79)');"#,
    )
    .await;
    // The example of the draft (examples/json/tx_example.adoc), made valid
    // JSON: its missing commas and quotes added, and the Point's coordinates
    // one position instead of an array of one.
    let body = json!({
      "semantic": "atomic",
      "transaction": [
        {
          "action": "insert",
          "collection": "CABLE_SEGMENTS",
          "description": "add a new fibre segment",
          "items": [
            {
              "type": "Feature",
              "geometry": {
                "type": "LineString",
                "coordinates": [[43.735915, -79.298053], [43.735839, -79.298026]]
              },
              "properties": {
                "segmentId": "SEG237",
                "manufacturer": "Corning",
                "all-dielectric": "yes",
                "armored": "yes",
                "fibre_count": 12,
                "fibre_type": "OM3 LAZER-OPTIMIZED 50μ",
                "rodent_protected": "yes",
                "USDPSC_code": 26126170
              }
            }
          ]
        },
        {
          "action": "update",
          "collection": "POLES",
          "description": "move pole",
          "properties": {
            "modify": [
              {"name": "geometry", "value": {"type": "Point", "coordinates": [43.735915, -79.298053]}},
              {"name": "updated", "value": "2019-05-28"}
            ]
          },
          "filter": {"ids": ["347901"]}
        }
      ]
    });
    let r = ogc(&app, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/json");
    // The draft's response, with the other kinds' empty lists.
    assert_eq!(
        r.body,
        json!({
            "semantic": "atomic",
            "summary": {"totalInserted": 1, "totalReplaced": 0, "totalUpdated": 1, "totalDeleted": 0},
            "insertResults": ["/collections/CABLE_SEGMENTS/items/1"],
            "replaceResults": [],
            "updateResults": ["/collections/POLES/items/347901"],
            "deleteResults": []
        })
    );
    let row = app
        .db
        .text(
            r#"SELECT concat_ws(' ', "segmentId", fibre_count, "USDPSC_code", ST_NPoints(geom))
               FROM "CABLE_SEGMENTS""#,
        )
        .await;
    assert_eq!(row.as_deref(), Some("SEG237 12 26126170 2"));
    let pole = app
        .db
        .text(r#"SELECT updated || ' ' || ST_AsText(geom) FROM "POLES""#)
        .await;
    assert_eq!(
        pole.as_deref(),
        Some("2019-05-28 POINT(43.735915 -79.298053)")
    );
    // A link of the response is the feature.
    let read = app.get("/collections/CABLE_SEGMENTS/items/1").await;
    assert_eq!(read.body["properties"]["segmentId"], "SEG237", "{read:?}");
}

#[tokio::test]
async fn ldproxys_examples() {
    let app = TestApp::new(
        "CREATE TABLE buildings (id int PRIMARY KEY, name text, owner text, height float8,
                                 legacy_id text, geom geometry(Point, 4326));
         INSERT INTO buildings VALUES (9, 'nine', NULL, 3, 'L9', NULL),
                                      (42, 'old', NULL, 5, 'L42', 'SRID=4326;POINT(1 1)');",
    )
    .await;
    // The actions of ldproxy's JsonTransactionParserSpec, in one batch.
    let body = json!({
      "semantic": "batch",
      "transaction": [
        {"action": "replace", "collection": "buildings",
         "feature": {"type": "Feature", "id": "42", "properties": {"name": "X"}, "geometry": null}},
        {"action": "update", "collection": "buildings",
         "filter": {"op": "=", "args": [{"property": "id"}, "42"]},
         "properties": {
           "add": [{"name": "owner", "value": "Alice"}],
           "modify": [{"name": "height", "value": 12.5}],
           "delete": ["legacy_id"]
         }},
        {"action": "delete", "collection": "buildings", "id": "a1",
         "filter": {"op": "=", "args": [{"property": "id"}, "9"]}},
        {"action": "insert", "collection": "buildings",
         "items": [{"type": "Feature", "id": 7, "properties": {"id": 7, "name": "new"}, "geometry": null}]}
      ]
    });
    let r = ogc(&app, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["semantic"], "batch");
    assert_eq!(
        r.body["summary"],
        json!({"totalInserted": 1, "totalReplaced": 1, "totalUpdated": 1, "totalDeleted": 1})
    );
    assert_eq!(
        r.body["replaceResults"],
        json!(["/collections/buildings/items/42"])
    );
    assert_eq!(
        r.body["deleteResults"],
        json!(["/collections/buildings/items/9"])
    );
    assert_eq!(
        r.body["insertResults"],
        json!(["/collections/buildings/items/7"])
    );
    assert!(r.body.get("exceptions").is_none(), "{r:?}");
    let rows = app
        .db
        .text(
            "SELECT string_agg(concat_ws(':', id, name, owner, height, coalesce(legacy_id, '-')), ' '
                    ORDER BY id) FROM buildings",
        )
        .await;
    assert_eq!(rows.as_deref(), Some("7:new:- 42:X:Alice:12.5:-"));
}

#[tokio::test]
async fn atomic_is_all_or_nothing() {
    let app = TestApp::new(SETUP).await;
    let before = app
        .db
        .text("SELECT string_agg(concat_ws(':', id, name, n), ' ' ORDER BY id) FROM pts")
        .await;
    // The second item of the third action breaks the CHECK constraint.
    let body = json!({
      "transaction": [
        {"action": "update", "collection": "pts", "filter": by_id("id", json!(1)),
         "properties": {"modify": [{"name": "n", "value": 100}]}},
        {"action": "delete", "collection": "pts", "filter": by_id("id", json!([2, 3]))},
        {"action": "insert", "collection": "pts", "id": "the bad one",
         "items": [point(0.0, 0.0, json!({"name": "ok"})), point(0.0, 0.0, json!({"name": "bad", "n": -1}))]}
      ]
    });
    let r = ogc(&app, &body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["constraint"], "pts_n_check");
    assert_eq!(r.body["errors"][0]["pointer"], "/transaction/2/items/1");
    assert_eq!(r.body["errors"][0]["operation"], 2);
    // The report attached is the OGC response: nothing written, the failure.
    let report = &r.body["report"];
    assert_eq!(report["semantic"], "atomic");
    assert_eq!(
        report["summary"],
        json!({"totalInserted": 0, "totalReplaced": 0, "totalUpdated": 0, "totalDeleted": 0})
    );
    assert_eq!(
        report["exceptions"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    let exception = &report["exceptions"][0];
    assert_eq!(exception["code"], "check_violation");
    assert_eq!(exception["operation"], 2);
    assert_eq!(exception["actionId"], "the bad one");
    assert_eq!(exception["pointer"], "/transaction/2/items/1");
    assert_eq!(exception["constraint"], "pts_n_check");
    let after = app
        .db
        .text("SELECT string_agg(concat_ws(':', id, name, n), ' ' ORDER BY id) FROM pts")
        .await;
    assert_eq!(before, after, "rolled back: nothing changed");

    // A feature the filter names that does not exist: 404, nothing written.
    let body = json!({
      "semantic": "atomic",
      "transaction": [
        {"action": "insert", "collection": "pts", "items": [point(0.0, 0.0, json!({"name": "lost"}))]},
        {"action": "update", "collection": "pts", "filter": by_id("id", json!([4, 99])),
         "properties": {"modify": [{"name": "n", "value": 5}]}}
      ]
    });
    let r = ogc(&app, &body).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "not_found");
    assert_eq!(
        r.body["errors"][0]["pointer"],
        "/transaction/1/filter/args/1/1"
    );
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name = 'lost'")
            .await,
        0
    );
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 4").await, 4);
}

#[tokio::test]
async fn batch_reports_failed_actions_and_writes_the_rest() {
    let app = TestApp::new(SETUP).await;
    let body = json!({
      "semantic": "batch",
      "transaction": [
        {"action": "insert", "collection": "pts", "items": [point(0.0, 0.0, json!({"name": "b0"}))]},
        // Refused by the database (CHECK): skipped, reported.
        {"action": "update", "collection": "pts", "id": "neg", "filter": by_id("id", json!(5)),
         "properties": {"modify": [{"name": "n", "value": -5}]}},
        // Does not fit the table: set aside before any work, reported.
        {"action": "insert", "collection": "pts",
         "items": [point(0.0, 0.0, json!({"name": "b2", "colour": "red"}))]},
        // Unique violation.
        {"action": "insert", "collection": "roads",
         "items": [{"type": "Feature", "properties": {"name": "first"}, "geometry": null}]},
        {"action": "delete", "collection": "pts", "filter": {"ids": [6]}},
        {"action": "replace", "collection": "roads", "filter": by_id("gid", json!(1)),
         "feature": {"type": "Feature", "properties": {"name": "renamed"},
                     "geometry": {"type": "LineString", "coordinates": [[0, 0], [2, 2]]}}},
        // A filter that cannot run: this action alone is refused.
        {"action": "delete", "collection": "pts",
         "filter": {"op": "s_intersects", "args": [{"property": "nosuch"}, {"bbox": [0, 0, 1, 1]}]}}
      ]
    });
    let r = ogc(&app, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["semantic"], "batch");
    assert_eq!(
        r.body["summary"],
        json!({"totalInserted": 1, "totalReplaced": 1, "totalUpdated": 0, "totalDeleted": 1})
    );
    let exceptions = r.body["exceptions"].as_array().unwrap();
    let said: Vec<_> = exceptions
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                e["operation"],
                e["code"],
                e["pointer"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            "1 \"check_violation\" /transaction/1/properties",
            "2 \"unknown_property\" /transaction/2/items/0/properties/colour",
            "3 \"unique_violation\" /transaction/3/items/0",
            "6 \"invalid_filter\" /transaction/6/filter",
        ]
    );
    assert_eq!(exceptions[0]["actionId"], "neg");
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name LIKE 'b%'")
            .await,
        1
    );
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 5").await, 5);
    assert_eq!(app.db.int("SELECT count(*) FROM pts WHERE id = 6").await, 0);
    assert_eq!(
        app.db
            .text("SELECT name FROM roads WHERE gid = 1")
            .await
            .as_deref(),
        Some("renamed")
    );
}

#[tokio::test]
async fn problems_point_into_the_ogc_body() {
    let app = TestApp::new(SETUP).await;
    let count = || async { app.db.int("SELECT count(*) FROM pts").await };
    // Features and values that do not fit: 422, every problem listed.
    let r = ogc(
        &app,
        &json!({"transaction": [
            {"action": "insert", "collection": "pts",
             "items": [point(0.0, 0.0, json!({"name": "a"})), point(0.0, 0.0, json!({"name": "b", "colour": "red"}))]},
            {"action": "update", "collection": "pts", "filter": by_id("id", json!(1)),
             "properties": {"add": [{"name": "name", "value": "ok"}], "modify": [{"name": "n", "value": "many"}]}},
            {"action": "delete", "collection": "nope", "filter": by_id("id", json!(1))},
            {"action": "delete", "collection": "pts", "filter": by_id("nosuch", json!("p1"))},
            {"action": "update", "collection": "pts", "filter": {"op": "s_frobnicates", "args": [{"property": "geom"}, {"bbox": [0, 0, 1, 1]}]},
             "properties": {"delete": ["n"]}},
            {"action": "update", "collection": "roads", "filter": by_id("gid", json!(1)),
             "properties": {"modify": [{"name": "geometry", "value": {"type": "Point", "coordinates": [0, 0]}}]}}
        ]}),
    )
    .await;
    assert_eq!(r.status, 422, "{r:?}");
    let mut listed = pointers(&r);
    listed.sort();
    assert_eq!(
        listed,
        [
            "/transaction/0/items/1/properties/colour",
            "/transaction/1/properties/modify/0/value",
            "/transaction/2/collection",
            "/transaction/3/filter",
            "/transaction/4/filter",
            "/transaction/5/properties/modify/0/value",
        ]
    );
    assert!(r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["pointer"]
            .as_str()
            .unwrap()
            .starts_with(&format!("/transaction/{}", e["operation"]))));
    assert_eq!(count().await, 40);

    // Actions that are not actions: 400.
    let cases = [
        (
            json!({"action": "upsert", "collection": "pts"}),
            "/transaction/0/action",
        ),
        (
            json!({"action": "delete", "collection": "pts"}),
            "/transaction/0",
        ),
        (
            json!({"action": "delete", "collection": "pts", "items": []}),
            "/transaction/0/items",
        ),
        (
            json!({"action": "insert", "collection": "pts", "item": []}),
            "/transaction/0",
        ),
        (
            json!({"action": "insert", "collection": "pts", "items": point(0.0, 0.0, json!({}))}),
            "/transaction/0/items",
        ),
        (
            json!({"action": "update", "collection": "pts", "filter": by_id("id", json!(1)), "properties": {}}),
            "/transaction/0/properties",
        ),
        (
            json!({"action": "update", "collection": "pts", "filter": by_id("id", json!(1)),
                "properties": {"modify": [{"name": "n", "value": 1}], "delete": ["n"]}}),
            "/transaction/0/properties/delete/0",
        ),
        (
            json!({"action": "update", "collection": "pts", "filter": by_id("id", json!(1)),
                "properties": {"modify": [{"name": "n"}]}}),
            "/transaction/0/properties/modify/0",
        ),
        (
            json!({"action": "replace", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "x"}))}),
            "/transaction/0",
        ),
        (
            json!({"action": "replace", "collection": "pts", "filter": by_id("id", json!(2)),
                "feature": {"type": "Feature", "id": 3, "properties": {"name": "x"}, "geometry": null}}),
            "/transaction/0/feature/id",
        ),
        (
            json!({"action": "delete", "collection": "pts", "filter": by_id("id", json!({"x": 1}))}),
            "/transaction/0/filter/args/1",
        ),
    ];
    for (action, pointer) in cases {
        let r = ogc(&app, &json!({"transaction": [action]})).await;
        assert_eq!(r.status, 400, "{action}: {r:?}");
        assert_eq!(pointers(&r), [pointer], "{action}: {r:?}");
    }
    // Filters that cannot run, and a replace of more than one feature: 422.
    let cases = [
        (
            json!({"action": "delete", "collection": "pts", "filter": "nosuch = 1"}),
            "/transaction/0/filter",
            "invalid_filter",
        ),
        (
            json!({"action": "delete", "collection": "pts", "filter": by_id("name", json!("p1")), "filter-lang": "cql2-text"}),
            "/transaction/0/filter-lang",
            "invalid_filter",
        ),
        (
            json!({"action": "delete", "collection": "pts", "filter": by_id("name", json!([]))}),
            "/transaction/0/filter",
            "invalid_filter",
        ),
        (
            json!({"action": "delete", "collection": "pts", "filter": 5}),
            "/transaction/0/filter",
            "invalid_filter",
        ),
        (
            json!({"action": "replace", "collection": "pts", "filter": by_id("id", json!([1, 2])), "feature": point(0.0, 0.0, json!({"name": "x"}))}),
            "/transaction/0/filter/args/1",
            "unsupported_filter",
        ),
    ];
    for (action, pointer, code) in cases {
        let r = ogc(&app, &json!({"transaction": [action]})).await;
        assert_eq!(r.status, 422, "{action}: {r:?}");
        assert_eq!(r.body["errors"][0]["code"], code, "{action}: {r:?}");
        assert_eq!(pointers(&r), [pointer], "{action}: {r:?}");
    }
    // Bodies that are not OGC transactions, and the mode parameter.
    for body in [
        json!({"semantic": "snapshot", "transaction": []}),
        json!({"semantics": "batch", "transaction": []}),
        json!({"semantic": "atomic"}),
        json!([]),
    ] {
        let r = ogc(&app, &body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert_eq!(r.body["type"], "urn:featurepipe:problem:invalid-json");
    }
    let r = ogc_with(
        &app,
        "/transactions?mode=skip",
        &[],
        &json!({"transaction": []}),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("semantic"));
    assert_eq!(count().await, 40);
    // An empty transaction does nothing, and says so.
    let r = ogc(&app, &json!({"transaction": []})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["summary"]["totalInserted"], 0);
}

#[tokio::test]
async fn filters_name_the_key_column_or_id() {
    let app = TestApp::new(SETUP).await;
    let r = ogc(
        &app,
        &json!({"transaction": [
            {"action": "update", "collection": "roads", "filter": by_id("gid", json!(1)),
             "properties": {"modify": [{"name": "name", "value": "by gid"}]}},
            {"action": "update", "collection": "roads", "filter": by_id("id", json!("1")),
             "properties": {"modify": [{"name": "geometry", "value": {"type": "LineString", "coordinates": [[5, 5], [6, 6]]}}]}},
            {"action": "replace", "collection": "pts", "properties": {"feature": point(9.0, 9.0, json!({"name": "draft form"}))},
             "filter": by_id("id", json!([8]))},
            {"action": "replace", "collection": "pts", "feature": {"type": "Feature", "id": 9, "properties": {"name": "by its id"}, "geometry": null}}
        ]}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["updateResults"],
        json!(["/collections/roads/items/1", "/collections/roads/items/1"])
    );
    assert_eq!(
        app.db
            .text("SELECT name || ' ' || ST_AsText(geom) FROM roads")
            .await
            .as_deref(),
        Some("by gid LINESTRING(5 5,6 6)")
    );
    assert_eq!(
        app.db
            .text("SELECT string_agg(name, ',' ORDER BY id) FROM pts WHERE id IN (8, 9)")
            .await
            .as_deref(),
        Some("draft form,by its id")
    );
}

/// Work on features from `base` on, in featurepipe's format: two inserts, a
/// replace (which fails with `n` -1), two updates and two deletes.
fn own_work(base: i64, n: i64) -> Vec<Value> {
    let new = || point(0.0, 0.0, json!({"name": format!("new{base}")}));
    let replaced = point(1.0, 1.0, json!({"name": "replaced", "n": n}));
    vec![
        json!({"op": "insert", "collection": "pts", "features": {"type": "FeatureCollection", "features": [new(), new()]}}),
        json!({"op": "replace", "collection": "pts", "id": base, "feature": replaced}),
        json!({"op": "update", "collection": "pts", "id": base + 1, "patch": {"properties": {"n": 7}}}),
        json!({"op": "update", "collection": "pts", "id": base + 2, "patch": {"properties": {"n": 7}}}),
        json!({"op": "delete", "collection": "pts", "ids": [base + 3, base + 4]}),
    ]
}

/// The same work as [`own_work`], as an OGC transaction.
fn ogc_work(base: i64, n: i64, semantic: &str) -> Value {
    let new = || point(0.0, 0.0, json!({"name": format!("new{base}")}));
    json!({"semantic": semantic, "transaction": [
        {"action": "insert", "collection": "pts", "items": [new(), new()]},
        {"action": "replace", "collection": "pts", "filter": by_id("id", json!(base)),
         "feature": point(1.0, 1.0, json!({"name": "replaced", "n": n}))},
        {"action": "update", "collection": "pts", "filter": by_id("id", json!([base + 1, base + 2])),
         "properties": {"modify": [{"name": "n", "value": 7}]}},
        {"action": "delete", "collection": "pts", "filter": by_id("id", json!([base + 3, base + 4]))}
    ]})
}

#[tokio::test]
async fn same_round_trips_and_report_as_featurepipes_format() {
    let db = TestDb::new(SETUP).await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(1)).await;
    config.pool_size = 1;
    config.batch_size = 100;
    let app = TestApp::on(db, config).await;
    // The first request on the connection prepares the statements both use.
    let r = session(&app, "atomic", own_work(1, 1)).await;
    assert_eq!(r.status, 200, "{r:?}");

    let before = proxy.round_trips();
    let r = session(&app, "atomic", own_work(6, 1)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let own_trips = proxy.round_trips() - before;
    let own_report = r.body;
    let before = proxy.round_trips();
    let r = ogc(&app, &ogc_work(11, 1, "atomic")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(proxy.round_trips() - before, own_trips);
    assert_eq!(
        own_trips, 1,
        "BEGIN, every statement and COMMIT in one flight"
    );
    // The same report, told the OGC way.
    let inserted: Vec<_> = r.body["insertResults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l.as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        })
        .collect();
    let own_inserted = own_report["results"][0]["ids"].as_array().unwrap();
    assert_eq!(inserted.len(), own_inserted.len());
    assert_eq!(
        inserted[0],
        own_inserted[0].as_i64().unwrap() + 2,
        "the next two keys"
    );
    assert_eq!(
        r.body["summary"],
        json!({"totalInserted": 2, "totalReplaced": 1, "totalUpdated": 2, "totalDeleted": 2})
    );
    assert_eq!(own_report["written"], 5);
    assert_eq!(
        r.body["deleteResults"],
        json!(["/collections/pts/items/14", "/collections/pts/items/15"])
    );

    // A failing action: batch is skip, with its round trips (the failed
    // window, the one after it, COMMIT).
    let before = proxy.round_trips();
    let r = session(&app, "skip", own_work(16, -1)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let own_trips = proxy.round_trips() - before;
    assert_eq!(r.body["results"][1]["status"], "failed");
    let before = proxy.round_trips();
    let r = ogc(&app, &ogc_work(21, -1, "batch")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(proxy.round_trips() - before, own_trips);
    assert_eq!(own_trips, 3);
    assert_eq!(r.body["exceptions"][0]["operation"], 1);
    assert_eq!(r.body["exceptions"][0]["pointer"], "/transaction/1/feature");
    assert_eq!(r.body["summary"]["totalUpdated"], 2);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE id IN (21, 16) AND name = 'replaced'")
            .await,
        0
    );
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE id IN (17, 18, 22, 23) AND n = 7")
            .await,
        4
    );
}

#[tokio::test]
async fn a_retry_with_the_same_key_gets_the_ogc_response() {
    let app = TestApp::new(SETUP).await;
    let body = json!({"transaction": [
        {"action": "insert", "collection": "pts", "items": [point(0.0, 0.0, json!({"name": "once"}))]}
    ]});
    let key = [("idempotency-key", "ogc-1")];
    let first = ogc_with(&app, "/transactions", &key, &body).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body["summary"]["totalInserted"], 1);
    let again = ogc_with(&app, "/transactions", &key, &body).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.body, first.body);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name = 'once'")
            .await,
        1
    );
}

#[tokio::test]
async fn the_api_description_offers_both_formats() {
    let app = TestApp::new(SETUP).await;
    let doc = app.get("/api").await.body;
    let content = &doc["paths"]["/transactions"]["post"]["requestBody"]["content"];
    assert!(content.get("application/json").is_some(), "{content}");
    assert!(content.get(OGC).is_some(), "{content}");
}

#[tokio::test]
async fn updates_and_deletes_select_features_by_a_cql2_filter() {
    let app = TestApp::new(SETUP).await;
    let r = ogc(
        &app,
        &json!({"transaction": [
            // cql2-text: a property other than the key.
            {"action": "update", "collection": "pts", "filter": "n BETWEEN 10 AND 12",
             "properties": {"modify": [{"name": "name", "value": "teen"}]}},
            // cql2-json, spatial, in a filter-crs whose axes are latitude first.
            {"action": "delete", "collection": "pts", "filter-crs": "http://www.opengis.net/def/crs/EPSG/0/4326",
             "filter": {"op": "s_intersects", "args": [{"property": "geom"}, {"bbox": [-1, 30.5, 1, 32.5]}]}},
            {"action": "update", "collection": "pts", "filter": "name = 'nobody'",
             "properties": {"modify": [{"name": "n", "value": 1}]}}
        ]}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["summary"],
        json!({"totalInserted": 0, "totalReplaced": 0, "totalUpdated": 3, "totalDeleted": 2})
    );
    assert_eq!(
        r.body["updateResults"],
        json!([
            "/collections/pts/items/10",
            "/collections/pts/items/11",
            "/collections/pts/items/12"
        ])
    );
    assert_eq!(
        r.body["deleteResults"],
        json!(["/collections/pts/items/31", "/collections/pts/items/32"])
    );
    let teen = app
        .db
        .text("SELECT string_agg(id::text, ',' ORDER BY id) FROM pts WHERE name = 'teen'")
        .await;
    assert_eq!(teen.as_deref(), Some("10,11,12"));
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 38);

    // featurepipe's own format takes a filter too, and reports the count.
    let own = vec![
        json!({"op": "update", "collection": "pts", "filter": {"op": "<", "args": [{"property": "n"}, 3]},
               "patch": {"properties": {"name": "small"}}}),
        json!({"op": "delete", "collection": "pts", "filter": "name = 'teen'"}),
    ];
    let r = session(&app, "atomic", own).await;
    assert_eq!(r.status, 200, "{r:?}");
    let results = &r.body["results"];
    assert_eq!(
        (&results[0]["updated"], &results[0]["ids"]),
        (&json!(2), &json!([1, 2])),
        "{r:?}"
    );
    assert_eq!(
        (&results[1]["deleted"], &results[1]["ids"]),
        (&json!(3), &json!([10, 11, 12])),
        "{r:?}"
    );
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE name = 'small'")
            .await,
        2
    );

    // Atomic: a filter edit the database refuses undoes the whole session.
    let r = ogc(
        &app,
        &json!({"transaction": [
            {"action": "delete", "collection": "pts", "filter": "n > 35"},
            {"action": "update", "collection": "pts", "filter": "n > 20",
             "properties": {"modify": [{"name": "n", "value": -1}]}}
        ]}),
    )
    .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts WHERE n > 35").await, 5);

    // Bound, never written: a filter's literal is no SQL.
    let r = ogc(
        &app,
        &json!({"transaction": [{"action": "delete", "collection": "pts", "filter": "name = 'x''; DROP TABLE pts; --'"}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["summary"]["totalDeleted"], 0);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 35);

    // An edit by filter cannot carry one if_match, nor set every feature's key.
    let bad = vec![
        json!({"op": "delete", "collection": "pts", "filter": "n > 1", "if_match": "\"x\""}),
        json!({"op": "update", "collection": "pts", "filter": "n > 1", "patch": {"id": 3, "properties": {}}}),
    ];
    let r = session(&app, "atomic", bad).await;
    assert_eq!(r.status, 400, "{r:?}");
    let said: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(said, ["/operations/0/if_match", "/operations/1/patch/id"]);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 35);
}
