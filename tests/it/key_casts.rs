//! Ids are compared exactly: an id longer than a `varchar(n)`/`char(n)` key,
//! or a number a `numeric(p,s)` key would round, names no feature, on read,
//! change and delete, in property filters and in edit sessions; creating a
//! feature under such an id is a 422.

use serde_json::json;

use crate::support::{point, TestApp};

const SETUP: &str = "
    CREATE TABLE vc (code varchar(10) PRIMARY KEY, n int, geom geometry(Point, 4326));
    CREATE TABLE ch (code char(10) PRIMARY KEY, n int, geom geometry(Point, 4326));
    CREATE TABLE nu (code numeric(5,2) PRIMARY KEY, n int, geom geometry(Point, 4326));
    INSERT INTO vc VALUES ('abcdefghij', 1, 'SRID=4326;POINT(1 1)');
    INSERT INTO ch VALUES ('abcdefghij', 1, 'SRID=4326;POINT(1 1)');
    INSERT INTO nu VALUES (1.23, 1, 'SRID=4326;POINT(1 1)');
    CREATE TABLE byprop (id serial PRIMARY KEY, code varchar(10), amount numeric(5,2),
                         geom geometry(Point, 4326));
    INSERT INTO byprop (code, amount, geom) VALUES ('abcdefghij', 1.23, 'SRID=4326;POINT(1 1)');
";

const GEOJSON: (&str, &str) = ("content-type", "application/geo+json");

/// Each keyed table, its stored id, and an id a cast to the key's type turns into it.
const CASES: [(&str, &str, &str); 3] = [
    ("vc", "abcdefghij", "abcdefghij-not-this-one"),
    ("ch", "abcdefghij", "abcdefghijXYZ"),
    ("nu", "1.23", "1.234"),
];

#[tokio::test]
async fn ids_a_cast_would_change_name_no_feature() {
    let app = TestApp::new(SETUP).await;
    for (table, stored, other) in CASES {
        let path = |id: &str| format!("/collections/{table}/items/{id}");
        assert_eq!(app.get(&path(stored)).await.status, 200, "{table}");
        for method in ["GET", "HEAD", "DELETE"] {
            let r = app.send(method, &path(other), &[], None).await;
            assert_eq!(r.status, 404, "{method} {table}/{other}: {r:?}");
        }
        let patch = Some(json!({"properties": {"n": 2}}).to_string());
        let r = app.send("PATCH", &path(other), &[GEOJSON], patch).await;
        assert_eq!(r.status, 404, "PATCH {table}/{other}: {r:?}");
        // Replacing (If-Match: no create) what is not there fails its precondition.
        let f = Some(point(5.0, 5.0, json!({"n": 3})).to_string());
        let headers = [GEOJSON, ("if-match", "*")];
        let r = app.send("PUT", &path(other), &headers, f).await;
        assert_eq!(r.status, 412, "PUT {table}/{other}: {r:?}");
        let row = format!("SELECT concat(code, ' ', n, ' ', ST_AsText(geom)) FROM {table}");
        let expected = format!("{stored} 1 POINT(1 1)");
        assert_eq!(app.db.text(&row).await.unwrap(), expected, "{table}");
        assert_eq!(
            app.db.int(&format!("SELECT count(*) FROM {table}")).await,
            1
        );
    }
}

#[tokio::test]
async fn creating_under_an_id_a_cast_would_change_is_refused() {
    let app = TestApp::new(SETUP).await;
    for (table, _, other) in CASES {
        let f = Some(point(5.0, 5.0, json!({"n": 3})).to_string());
        let path = format!("/collections/{table}/items/{other}");
        let r = app.send("PUT", &path, &[GEOJSON], f).await;
        assert_eq!(r.status, 422, "PUT {table}/{other}: {r:?}");
        assert_eq!(
            r.headers["content-type"], "application/problem+json",
            "{r:?}"
        );
        assert!(r.body.to_string().contains(other), "names the id: {r:?}");
        assert_eq!(
            app.db.int(&format!("SELECT count(*) FROM {table}")).await,
            1,
            "{table}: nothing stored"
        );
    }
    // POST with such an id in the Feature: refused before any write.
    let mut f = point(5.0, 5.0, json!({"n": 3}));
    f["id"] = json!(1.234);
    let r = app.post("nu", &f).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/id", "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "too_precise", "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM nu").await, 1);
    // An id that fits is created under its own name.
    let f = Some(point(5.0, 5.0, json!({"n": 3})).to_string());
    let r = app
        .send("PUT", "/collections/nu/items/4.5", &[GEOJSON], f)
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        app.db.int("SELECT count(*) FROM nu WHERE code = 4.5").await,
        1
    );
}

#[tokio::test]
async fn property_filters_compare_exactly() {
    let app = TestApp::new(SETUP).await;
    for (query, matched) in [
        ("code=abcdefghij", 1),
        ("code=abcdefghijXYZ", 0),
        ("amount=1.23", 1),
        ("amount=1.234", 0),
    ] {
        let r = app.get(&format!("/collections/byprop/items?{query}")).await;
        assert_eq!(r.status, 200, "{query}: {r:?}");
        assert_eq!(r.body["numberMatched"], matched, "{query}: {r:?}");
        assert_eq!(
            r.body["features"].as_array().unwrap().len(),
            matched,
            "{query}"
        );
    }
}

#[tokio::test]
async fn edit_sessions_compare_ids_exactly() {
    let app = TestApp::new(SETUP).await;
    for (table, _, other) in CASES {
        let r = app
            .send(
                "POST",
                "/transactions?mode=atomic",
                &[("content-type", "application/json")],
                Some(
                    json!({"operations": [
                        {"op": "update", "collection": table, "id": other,
                         "patch": {"properties": {"n": 7}}},
                        {"op": "delete", "collection": table, "id": other}
                    ]})
                    .to_string(),
                ),
            )
            .await;
        assert_eq!(r.status, 404, "{table}/{other}: {r:?}");
        assert_eq!(r.body["errors"][0]["code"], "not_found", "{r:?}");
        let row = format!("SELECT concat(count(*), ' ', max(n)) FROM {table}");
        assert_eq!(app.db.text(&row).await.unwrap(), "1 1", "{table}");
    }
}

#[tokio::test]
async fn ids_with_slashes_work_raw_and_percent_encoded() {
    let app = TestApp::new(
        "CREATE TABLE plots (code text PRIMARY KEY, owner text, geom geometry(Point, 4326));",
    )
    .await;
    let geojson = [("content-type", "application/geo+json")];
    let patch = [("content-type", "application/merge-patch+json")];
    let feature = point(1.0, 2.0, json!({"owner": "a"})).to_string();
    // Created percent-encoded, then read, changed and deleted raw, as QGIS
    // 3.40 sends them.
    let r = app
        .send(
            "PUT",
            "/collections/plots/items/A%2F1",
            &geojson,
            Some(feature.clone()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = app
        .send(
            "PUT",
            "/collections/plots/items/B/2/3",
            &geojson,
            Some(feature),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    for (raw, encoded, id) in [
        (
            "/collections/plots/items/A/1",
            "/collections/plots/items/A%2F1",
            "A/1",
        ),
        (
            "/collections/plots/items/B/2/3",
            "/collections/plots/items/B%2F2%2F3",
            "B/2/3",
        ),
    ] {
        for path in [raw, encoded] {
            let r = app.get(path).await;
            assert_eq!(r.status, 200, "{path}: {r:?}");
            assert_eq!(r.body["id"], id, "{path}");
        }
        let body = json!({"properties": {"owner": "b"}}).to_string();
        let r = app.send("PATCH", raw, &patch, Some(body)).await;
        assert!(r.status.is_success(), "{raw}: {r:?}");
        let r = app.send("OPTIONS", raw, &[], None).await;
        assert!(r.status.is_success(), "{raw}: {r:?}");
        let r = app.send("DELETE", raw, &[], None).await;
        assert_eq!(r.status, 204, "{raw}: {r:?}");
        assert_eq!(app.get(encoded).await.status, 404);
    }
    // Nothing else under a collection answers by accident.
    assert_eq!(app.get("/collections/plots/items/").await.status, 404);
}
