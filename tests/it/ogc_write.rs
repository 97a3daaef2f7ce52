//! OGC API - Features Part 4: replace, update, delete, optimistic locking,
//! `Prefer`, OPTIONS and content types.

use serde_json::{json, Value};

use crate::support::{point, TestApp};

const SETUP: &str = "
    CREATE TABLE sites (id serial PRIMARY KEY, name text NOT NULL, height float8,
                        note text DEFAULT 'none', updated_at timestamptz DEFAULT now(),
                        geom geometry(Point, 4326));
    INSERT INTO sites (name, height, geom) VALUES ('a', 1.5, 'SRID=4326;POINT(1 2)'),
                                                  ('b', 2.5, 'SRID=4326;POINT(3 4)');
    CREATE TABLE codes (code text PRIMARY KEY, label text, geom geometry(Point, 4326));
    CREATE TABLE frozen (name text, geom geometry(Point, 4326));
";

const GEOJSON: (&str, &str) = ("content-type", "application/geo+json");
const MERGE: (&str, &str) = ("content-type", "application/merge-patch+json");

fn body(v: Value) -> Option<String> {
    Some(v.to_string())
}

#[tokio::test]
async fn put_replaces_the_whole_feature() {
    let app = TestApp::new(SETUP).await;
    let f = point(10.0, 20.0, json!({"name": "A", "height": 9}));
    let r = app
        .send("PUT", "/collections/sites/items/1", &[GEOJSON], body(f))
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.headers.contains_key("etag"));
    assert!(r.headers.contains_key("last-modified"));
    let row = app
        .db
        .text("SELECT concat_ws(' ', name, height, note, ST_AsText(geom)) FROM sites WHERE id = 1")
        .await;
    // `note` was left out: it takes its default, as in a fresh insert.
    assert_eq!(row.as_deref(), Some("A 9 none POINT(10 20)"));
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 2);
    let r = app
        .send(
            "PUT",
            "/collections/sites/items/77",
            &[GEOJSON],
            body(point(0.0, 0.0, json!({"name": "x"}))),
        )
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    // The body's id must be the URL's.
    let mut f = point(0.0, 0.0, json!({"name": "x"}));
    f["id"] = json!(2);
    let r = app
        .send(
            "PUT",
            "/collections/sites/items/1",
            &[GEOJSON],
            body(f.clone()),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/id");
    f["id"] = json!(1);
    let r = app
        .send("PUT", "/collections/sites/items/1", &[GEOJSON], body(f))
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    // Validation as for a create: NOT NULL without default is required.
    let r = app
        .send(
            "PUT",
            "/collections/sites/items/1",
            &[GEOJSON],
            body(point(0.0, 0.0, json!({}))),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "required");
}

#[tokio::test]
async fn put_creates_where_clients_choose_keys() {
    let app = TestApp::new(SETUP).await;
    let f = point(1.0, 1.0, json!({"label": "first"}));
    let r = app
        .send(
            "PUT",
            "/collections/codes/items/A%2F1",
            &[GEOJSON, ("prefer", "return=representation")],
            body(f),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.headers["location"], "/collections/codes/items/A%2F1");
    assert_eq!(r.body["id"], "A/1");
    assert_eq!(r.headers["preference-applied"], "return=representation");
    let r = app
        .send(
            "PUT",
            "/collections/codes/items/A%2F1",
            &[GEOJSON],
            body(point(2.0, 2.0, json!({"label": "second"}))),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db.text("SELECT label FROM codes").await.as_deref(),
        Some("second")
    );
}

#[tokio::test]
async fn patch_merges() {
    let app = TestApp::new(SETUP).await;
    let patch = json!({"properties": {"height": null, "note": "checked"}});
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/2",
            &[MERGE, ("prefer", "return=representation")],
            body(patch),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["properties"]["name"], "b");
    assert_eq!(r.body["properties"]["height"], Value::Null);
    assert_eq!(r.body["properties"]["note"], "checked");
    assert_eq!(r.body["geometry"]["coordinates"], json!([3, 4]));
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/2",
            &[MERGE],
            body(json!({"geometry": {"type": "Point", "coordinates": [5, 6]}})),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT ST_AsText(geom) || ' ' || name FROM sites WHERE id = 2")
            .await
            .as_deref(),
        Some("POINT(5 6) b")
    );
    // Changing the id is refused; so is NULL in a NOT NULL column.
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/2",
            &[MERGE],
            body(json!({"id": 3})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/2",
            &[MERGE],
            body(json!({"properties": {"name": null}})),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/properties/name");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/2",
            &[MERGE],
            body(json!({"properties": {"colour": 1}})),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/9",
            &[MERGE],
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 404, "{r:?}");
}

#[tokio::test]
async fn delete_then_404() {
    let app = TestApp::new(SETUP).await;
    // A 204 has no representation: Preference-Applied must not claim one.
    let rep = ("prefer", "return=representation");
    let r = app
        .send("DELETE", "/collections/sites/items/1", &[rep], None)
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(!r.headers.contains_key("preference-applied"), "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 1);
    let r = app
        .send("DELETE", "/collections/sites/items/1", &[], None)
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = app
        .send("DELETE", "/collections/sites/items/x", &[], None)
        .await;
    assert_eq!(r.status, 404, "{r:?}");
}

#[tokio::test]
async fn etags_guard_against_lost_updates() {
    let app = TestApp::new(SETUP).await;
    let read = app.get("/collections/sites/items/1").await;
    let etag = read.headers["etag"].to_str().unwrap().to_owned();
    let patch = |v: Value| body(json!({"properties": v}));
    // Someone else changes it first.
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE],
            patch(json!({"note": "theirs"})),
        )
        .await;
    assert_eq!(r.status, 204);
    let theirs = r.headers["etag"].to_str().unwrap().to_owned();
    assert_ne!(theirs, etag, "any change changes the ETag");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE, ("if-match", &etag)],
            patch(json!({"note": "mine"})),
        )
        .await;
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT note FROM sites WHERE id = 1")
            .await
            .as_deref(),
        Some("theirs")
    );
    let r = app
        .send(
            "DELETE",
            "/collections/sites/items/1",
            &[("if-match", &etag)],
            None,
        )
        .await;
    assert_eq!(r.status, 412);
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE, ("if-match", &theirs)],
            patch(json!({"note": "mine"})),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.get("/collections/sites/items/1").await.headers["etag"],
        r.headers["etag"],
        "the ETag after a write is the one a read gives"
    );
    let r = app
        .send(
            "DELETE",
            "/collections/sites/items/1",
            &[("if-match", "*")],
            None,
        )
        .await;
    assert_eq!(r.status, 204);
}

#[tokio::test]
async fn last_modified_guards_too() {
    let app = TestApp::new(SETUP).await;
    app.db
        .client
        .batch_execute("UPDATE sites SET updated_at = '2020-01-01 12:00:00+00'")
        .await
        .unwrap();
    let r = app.get("/collections/sites/items/1").await;
    assert_eq!(r.headers["last-modified"], "Wed, 01 Jan 2020 12:00:00 GMT");
    let old = ("if-unmodified-since", "Tue, 31 Dec 2019 00:00:00 GMT");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE, old],
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 412, "{r:?}");
    let same = ("if-unmodified-since", "Wed, 01 Jan 2020 12:00:00 GMT");
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE, same],
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    // The write moved the last-modified time on.
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[MERGE, same],
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 412, "{r:?}");
}

#[tokio::test]
async fn options_and_media_types() {
    let app = TestApp::new(SETUP).await;
    let r = app
        .send("OPTIONS", "/collections/sites/items", &[], None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["allow"], "GET, HEAD, POST, OPTIONS");
    assert!(r.headers["accept-post"]
        .to_str()
        .unwrap()
        .contains("application/geo+json"));
    let r = app
        .send("OPTIONS", "/collections/sites/items/1", &[], None)
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, PUT, PATCH, DELETE, OPTIONS");
    assert_eq!(
        r.headers["accept-patch"],
        "application/merge-patch+json, application/fg+json"
    );
    let r = app
        .send("OPTIONS", "/collections/frozen/items/1", &[], None)
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    let r = app
        .send("DELETE", "/collections/frozen/items/1", &[], None)
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    let f = body(point(0.0, 0.0, json!({"name": "x"})));
    let r = app
        .send("PUT", "/collections/sites/items/1", &[], f.clone())
        .await;
    assert_eq!(r.status, 400, "no Content-Type: {r:?}");
    let r = app
        .send(
            "PUT",
            "/collections/sites/items/1",
            &[("content-type", "text/csv")],
            f.clone(),
        )
        .await;
    assert_eq!(r.status, 415);
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[("content-type", "text/plain")],
            f,
        )
        .await;
    assert_eq!(r.status, 415);
}

#[tokio::test]
async fn post_single_feature_honours_prefer() {
    let app = TestApp::new(SETUP).await;
    let f = body(point(7.0, 8.0, json!({"name": "new"})));
    let r = app
        .send(
            "POST",
            "/collections/sites/items",
            &[GEOJSON, ("prefer", "return=representation")],
            f.clone(),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["id"], 3);
    assert_eq!(
        r.body["properties"]["note"], "none",
        "defaults are in the representation"
    );
    assert!(r.headers.contains_key("etag"));
    let r = app
        .send(
            "POST",
            "/collections/sites/items",
            &[GEOJSON, ("prefer", "return=minimal")],
            f,
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body, Value::Null);
    assert_eq!(r.headers["location"], "/collections/sites/items/4");
}

#[tokio::test]
async fn prefer_handling_strict_or_lenient() {
    let app = TestApp::new(SETUP).await;
    let f = body(point(1.0, 1.0, json!({"name": "x", "colour": "red"})));
    let strict = ("prefer", "handling=strict");
    let r = app
        .send(
            "POST",
            "/collections/sites/items",
            &[GEOJSON, strict],
            f.clone(),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "unknown_property");
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 2);
    let lenient = ("prefer", "handling=lenient, return=minimal");
    let r = app
        .send("POST", "/collections/sites/items", &[GEOJSON, lenient], f)
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        r.headers["preference-applied"],
        "handling=lenient, return=minimal"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 3);
    // Lenient still refuses what cannot be stored.
    let bad = body(point(1.0, 1.0, json!({"name": "x", "height": "tall"})));
    let r = app
        .send("POST", "/collections/sites/items", &[GEOJSON, lenient], bad)
        .await;
    assert_eq!(r.status, 422, "{r:?}");
}

#[tokio::test]
async fn what_was_read_can_be_written_back() {
    let app = TestApp::new(
        "CREATE TABLE roads (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text,
                             length float8 GENERATED ALWAYS AS (ST_Length(geom)) STORED,
                             price numeric(5,2), outline geometry(Polygon, 4326),
                             updated timestamptz, geom geometry(LineString, 4326));
         INSERT INTO roads (name, outline, geom) VALUES
           ('a', 'SRID=4326;POLYGON((0 0,1 0,1 1,0 0))', 'SRID=4326;LINESTRING(0 0,3 4)');",
    )
    .await;
    let read = app.get("/collections/roads/items/1").await;
    let mut f = read.body.clone();
    f["properties"]["name"] = json!("b");
    // The key, generated and other geometry columns and the last-modified
    // time come back as read: accepted, and left as they are.
    f["properties"]["id"] = json!(1);
    let r = app
        .send(
            "PUT",
            "/collections/roads/items/1",
            &[GEOJSON],
            body(f.clone()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT concat_ws(' ', id, name, length, ST_AsText(outline), updated IS NOT NULL) FROM roads")
            .await
            .as_deref(),
        Some("1 b 5 POLYGON((0 0,1 0,1 1,0 0)) t")
    );
    f["properties"]["id"] = json!(2);
    let r = app
        .send("PUT", "/collections/roads/items/1", &[GEOJSON], body(f))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/properties/id");
    // An empty patch on an identity-keyed table changes nothing.
    let r = app
        .send(
            "PATCH",
            "/collections/roads/items/1",
            &[MERGE],
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    // A value the column cannot hold is the body's fault, not a missing feature.
    let r = app
        .send(
            "PATCH",
            "/collections/roads/items/1",
            &[MERGE],
            body(json!({"properties": {"price": 12345.67}})),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["sqlstate"], "22003");
}

#[tokio::test]
async fn preconditions_follow_rfc_9110() {
    let app = TestApp::new(SETUP).await;
    let etag = app.get("/collections/sites/items/1").await.headers["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    // If-Match wins over an If-Unmodified-Since that would fail.
    let both = [
        MERGE,
        ("if-match", etag.as_str()),
        ("if-unmodified-since", "Mon, 01 Jan 2001 00:00:00 GMT"),
    ];
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &both,
            body(json!({})),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    // If-Match on a feature that does not exist: 404, since preconditions
    // are looked at only when the request would otherwise succeed (13.2.1).
    let r = app
        .send(
            "DELETE",
            "/collections/sites/items/99",
            &[("if-match", "*")],
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    // If-None-Match: * creates only.
    let create_only = [GEOJSON, ("if-none-match", "*")];
    let f = body(point(1.0, 1.0, json!({"label": "x"})));
    let r = app
        .send(
            "PUT",
            "/collections/codes/items/N1",
            &create_only,
            f.clone(),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = app
        .send("PUT", "/collections/codes/items/N1", &create_only, f)
        .await;
    assert_eq!(r.status, 412, "{r:?}");
}
