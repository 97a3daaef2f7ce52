//! Every validation error: status, problem+json, pointer — and nothing written.

use serde_json::{json, Value};

use crate::support::{collection, point, TestApp, TestResponse};

const TABLE: &str = "CREATE TABLE v (
    id serial PRIMARY KEY,
    name varchar(5) NOT NULL,
    n smallint,
    when_ts timestamptz,
    tags text[],
    twice integer GENERATED ALWAYS AS (n * 2) STORED,
    geom geometry(Polygon, 4326) NOT NULL
)";

fn square() -> Value {
    json!({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]})
}

fn feature(geometry: Value, properties: Value) -> Value {
    json!({"type": "Feature", "geometry": geometry, "properties": properties})
}

async fn assert_nothing_written(app: &TestApp) {
    assert_eq!(app.db.int("SELECT count(*) FROM v").await, 0);
}

fn first_error(r: &TestResponse) -> (&str, &str) {
    let e = &r.body["errors"][0];
    (e["pointer"].as_str().unwrap(), e["code"].as_str().unwrap())
}

#[tokio::test]
async fn property_errors_name_feature_and_field() {
    let app = TestApp::new(TABLE).await;
    let ok = || json!({"name": "ok"});
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"name": "ok", "colour": "red"}),
            "/features/1/properties/colour",
            "unknown_property",
        ),
        (
            json!({"name": "toolong"}),
            "/features/1/properties/name",
            "too_long",
        ),
        (
            json!({"name": 5}),
            "/features/1/properties/name",
            "invalid_type",
        ),
        (
            json!({"name": "ok", "n": 40000}),
            "/features/1/properties/n",
            "out_of_range",
        ),
        (
            json!({"name": "ok", "n": 1.5}),
            "/features/1/properties/n",
            "invalid_type",
        ),
        (
            json!({"name": "ok", "when_ts": "yesterday"}),
            "/features/1/properties/when_ts",
            "invalid_timestamp",
        ),
        (
            json!({"name": "ok", "tags": ["a", 1]}),
            "/features/1/properties/tags/1",
            "invalid_type",
        ),
        (
            json!({"name": null}),
            "/features/1/properties/name",
            "not_nullable",
        ),
        (json!({}), "/features/1/properties/name", "required"),
        (
            json!({"name": "ok", "twice": 4}),
            "/features/1/properties/twice",
            "read_only",
        ),
        (
            json!({"name": "ok", "geom": "x"}),
            "/features/1/properties/geom",
            "read_only",
        ),
        (
            json!({"name": "ok", "geom": null}),
            "/features/1/properties/geom",
            "read_only",
        ),
    ];
    for (props, pointer, code) in cases {
        let body = collection(vec![
            feature(square(), ok()),
            feature(square(), props.clone()),
        ]);
        let r = app.post("v", &body).await;
        assert_eq!(r.status, 422, "{props}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(first_error(&r), (pointer, code), "{props}");
        assert_eq!(r.body["errors"][0]["feature"], 1);
        assert_eq!(r.body["total_errors"], 1);
    }
    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn geometry_errors_point_into_the_coordinates() {
    let app = TestApp::new(TABLE).await;
    let name = || json!({"name": "ok"});
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!({"type": "Point", "coordinates": [0, 0]}),
            422,
            "/features/0/geometry",
            "geometry_type_mismatch",
        ),
        (
            json!({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]}),
            422,
            "/features/0/geometry/coordinates/0",
            "unclosed_ring",
        ),
        (
            json!({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [0, 0]]]}),
            422,
            "/features/0/geometry/coordinates/0",
            "too_few_positions",
        ),
        (
            json!({"type": "Polygon", "coordinates": [[[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]]]}),
            422,
            "/features/0/geometry",
            "dimension_mismatch",
        ),
        (
            json!({"type": "Polygon", "coordinates": [[[0, 0], [1, "0"], [1, 1], [0, 0]]]}),
            400,
            "/features/0/geometry/coordinates/0/1/1",
            "invalid_geojson",
        ),
        (
            json!({"type": "Blob", "coordinates": []}),
            400,
            "/features/0/geometry",
            "invalid_geojson",
        ),
        (Value::Null, 422, "/features/0/geometry", "not_nullable"),
    ];
    for (geometry, status, pointer, code) in cases {
        let r = app
            .post("v", &collection(vec![feature(geometry.clone(), name())]))
            .await;
        assert_eq!(r.status, status, "{geometry}: {r:?}");
        assert_eq!(first_error(&r), (pointer, code), "{geometry}");
    }
    let huge = r#"{"type":"Feature","properties":{"name":"ok"},"geometry":
        {"type":"Polygon","coordinates":[[[0,0],[1e999,0],[1,1],[0,0]]]}}"#;
    let r = app
        .post_raw("/collections/v/items", Some("application/geo+json"), huge)
        .await;
    assert_eq!(
        r.status, 400,
        "numbers beyond f64 are not coordinates: {r:?}"
    );
    let detail = r.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("out of range") && detail.contains("line 2 column"),
        "{detail}"
    );
    assert_nothing_written(&app).await;
}

/// A lone surrogate is valid JSON but no text: the value (or, in `type`,
/// the feature) is at fault, and the body is still JSON.
#[tokio::test]
async fn text_that_is_no_text_names_its_place() {
    let app = TestApp::new(TABLE).await;
    let cases = [
        (
            r#"{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]},
            "properties":{"name":"\ud800"}}"#,
            422,
            ("/properties/name", "invalid_text"),
        ),
        (
            r#"{"type":"FeatureCollection","features":[{"type":"\ud800","geometry":null,"properties":{}}]}"#,
            400,
            ("/features/0", "invalid_geojson"),
        ),
    ];
    for (body, status, error) in cases {
        let r = app
            .post_raw("/collections/v/items", Some("application/geo+json"), body)
            .await;
        assert_eq!(r.status, status, "{r:?}");
        assert_eq!(first_error(&r), error);
    }
    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn malformed_documents_are_400() {
    let app = TestApp::new(TABLE).await;
    let r = app
        .post_raw(
            "/collections/v/items",
            Some("application/geo+json"),
            "{\"type\":\n \"Feature\",,}",
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.body["detail"].as_str().unwrap().contains("line 2 column"),
        "{r:?}"
    );
    for (body, pointer) in [
        (json!({"type": "Topology"}), "/type"),
        (json!({"type": "FeatureCollection"}), "/features"),
        (
            json!({"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {}}]}),
            "/features/0/geometry",
        ),
        (
            json!({"type": "FeatureCollection", "features": [{"type": "Feature", "geometry": null, "properties": 3}]}),
            "/features/0/properties",
        ),
        (
            json!({"type": "FeatureCollection", "features": [{"type": "Feature", "geometry": null, "properties": null, "id": [1]}]}),
            "/features/0/id",
        ),
        (
            json!({"type": "FeatureCollection", "features": [7]}),
            "/features/0",
        ),
    ] {
        let r = app.post("v", &body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        let pointers: Vec<_> = r.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].clone())
            .collect();
        assert!(pointers.contains(&json!(pointer)), "{body}: {r:?}");
    }
    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn all_problems_are_collected_and_the_first_hundred_listed() {
    let app = TestApp::new(TABLE).await;
    let features = (0..150)
        .map(|_| feature(square(), json!({"name": "much too long", "n": "x"})))
        .collect();
    let r = app.post("v", &collection(features)).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["total_errors"], 300);
    assert_eq!(r.body["errors"].as_array().unwrap().len(), 100);
    assert_eq!(r.body["errors"][99]["feature"], 49);
    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn http_level_errors() {
    let app = TestApp::with_config(TABLE, |c| c.max_body = 1024).await;
    let body = collection(vec![feature(square(), json!({"name": "ok"}))]).to_string();
    let r = app
        .post_raw("/collections/v/items", Some("text/csv"), body.clone())
        .await;
    assert_eq!(r.status, 415, "{r:?}");
    let r = app
        .post_raw("/collections/v/items", None, body.clone())
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = app
        .post_raw(
            "/collections/v/items",
            Some("application/json; charset=utf-8"),
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = app
        .post_raw(
            "/collections/nope/items",
            Some("application/geo+json"),
            body,
        )
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    let big = collection(
        (0..40)
            .map(|_| point(0.0, 0.0, json!({"name": "ok"})))
            .collect(),
    );
    let r = app.post("v", &big).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(app.db.int("SELECT count(*) FROM v").await, 1);
}
