//! A corpus of hostile and broken requests: each gets its documented 4xx with
//! a problem+json body, the database is unchanged, and the service keeps serving.

use serde_json::json;

use crate::support::{point, TestApp};

const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name varchar(20), n int, price numeric(6,2),
                      day date, tags text[], geom geometry(Point, 4326));
    CREATE TABLE polys (id serial PRIMARY KEY, geom geometry(Polygon, 4326) NOT NULL);
    CREATE TABLE keyed (code text PRIMARY KEY, geom geometry(Point, 4326));
    INSERT INTO pts (name, n, geom) VALUES ('seed', 1, 'SRID=4326;POINT(1 1)');
";

const GEOJSON: &str = "application/geo+json";

fn feature(props: &str) -> String {
    format!(
        r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":[1,2]}},"properties":{props}}}"#
    )
}

fn with_geometry(geometry: &str) -> String {
    format!(r#"{{"type":"Feature","geometry":{geometry},"properties":{{}}}}"#)
}

#[tokio::test]
async fn hostile_requests_get_clear_4xx_and_change_nothing() {
    let app = TestApp::new(SETUP).await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let deep_coords = format!(
        r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":{}1{}}},"properties":{{}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let items = "/collections/pts/items";
    let cases: Vec<(&str, String, Option<&str>, String, u16)> = vec![
        // Syntax.
        ("POST", items.into(), Some(GEOJSON), "".into(), 400),
        ("POST", items.into(), Some(GEOJSON), "{".into(), 400),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"Feature","#.into(),
            400,
        ),
        ("POST", items.into(), Some(GEOJSON), "nul".into(), 400),
        ("POST", items.into(), Some(GEOJSON), "[]".into(), 400),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            "\"Feature\"".into(),
            400,
        ),
        ("POST", items.into(), Some(GEOJSON), "{} {}".into(), 400),
        ("POST", items.into(), Some(GEOJSON), deep.clone(), 400),
        ("POST", items.into(), Some(GEOJSON), deep_coords, 400),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": NaN}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": Infinity}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": 1,}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature("{'n': 1}"),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            "\u{feff}{}".into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            String::from_utf8_lossy(&[0xff, 0xfe, b'{', b'}']).into_owned(),
            400,
        ),
        // Not GeoJSON.
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"Feature"}"#.into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"FeatureCollection"}"#.into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"FeatureCollection","features":{}}"#.into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"FeatureCollection","features":[1, "x", null]}"#.into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"Topology"}"#.into(),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            r#"{"type":"Feature","geometry":null,"properties":[]}"#.into(),
            400,
        ),
        // Geometries.
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point","coordinates":[1]}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point","coordinates":[1,2,3,4]}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point","coordinates":["1","2"]}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point","coordinates":[1e400,2]}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point"}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Circle","coordinates":[1,2]}"#),
            400,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"LineString","coordinates":[[1,2]]}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Point","coordinates":[1,2],"crs":{"type":"name"}}"#),
            201,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            with_geometry(r#""POINT(1 2)""#),
            400,
        ),
        (
            "POST",
            "/collections/polys/items".into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}"#),
            422,
        ),
        (
            "POST",
            "/collections/polys/items".into(),
            Some(GEOJSON),
            with_geometry("null"),
            422,
        ),
        (
            "POST",
            "/collections/polys/items".into(),
            Some(GEOJSON),
            with_geometry(r#"{"type":"Polygon","coordinates":[]}"#),
            201,
        ),
        // Properties.
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": 1e10}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": 99999999999999999999999}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": "5"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"n": 1.5}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"price": 123456.789}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "x", "name": "y"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "this name is far longer than twenty"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "nul\u0000byte"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "\ud800"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"day": "2024-02-30"}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"tags": [[1]]}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            // The key the database assigns is read-only.
            feature(r#"{"id": 1000}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"\"; DROP TABLE pts; --": 1}"#),
            422,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "'); DROP TABLE pts--"}"#),
            201,
        ),
        (
            "POST",
            items.into(),
            Some(GEOJSON),
            feature(r#"{"name": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ \\u202e"}"#),
            201,
        ),
        // Content types and methods.
        ("POST", items.into(), None, feature("{}"), 400),
        ("POST", items.into(), Some("text/plain"), feature("{}"), 415),
        (
            "POST",
            items.into(),
            Some("application/x-www-form-urlencoded"),
            "a=b".into(),
            415,
        ),
        ("PUT", items.into(), Some(GEOJSON), feature("{}"), 405),
        ("DELETE", "/collections/pts".into(), None, "".into(), 405),
        // Names that are not collections, ids that are not keys.
        (
            "POST",
            "/collections/pts%22%3B%20DROP%20TABLE%20pts%3B--/items".into(),
            Some(GEOJSON),
            feature("{}"),
            404,
        ),
        (
            "GET",
            "/collections/..%2F..%2Fetc%2Fpasswd".into(),
            None,
            "".into(),
            404,
        ),
        (
            "GET",
            "/collections/pts/items/1%20OR%201%3D1".into(),
            None,
            "".into(),
            404,
        ),
        (
            "DELETE",
            "/collections/pts/items/1%3B%20DELETE%20FROM%20pts".into(),
            None,
            "".into(),
            404,
        ),
        (
            "GET",
            "/collections/keyed/items/%27%20OR%20%27%27%3D%27".into(),
            None,
            "".into(),
            404,
        ),
        (
            "GET",
            "/collections/pts/items?n=1%20OR%201%3D1".into(),
            None,
            "".into(),
            400,
        ),
        (
            "GET",
            "/collections/pts/items?name=%27%3B%20DROP%20TABLE%20pts%3B--".into(),
            None,
            "".into(),
            200,
        ),
        (
            "GET",
            "/collections/pts/items?limit=99999999999999999999".into(),
            None,
            "".into(),
            400,
        ),
        (
            "GET",
            "/collections/pts/items?bbox=NaN,0,1,1".into(),
            None,
            "".into(),
            400,
        ),
        (
            "GET",
            "/collections/pts/items?bbox=inf,0,1,1".into(),
            None,
            "".into(),
            400,
        ),
        (
            "GET",
            "/collections/pts/items?%zz=1".into(),
            None,
            "".into(),
            400,
        ),
        (
            "PATCH",
            "/collections/pts/items/1".into(),
            Some("application/merge-patch+json"),
            "[]".into(),
            400,
        ),
        (
            "PATCH",
            "/collections/pts/items/1".into(),
            Some("application/merge-patch+json"),
            r#"{"geometry": 5}"#.into(),
            400,
        ),
        // Sessions.
        (
            "POST",
            "/transactions".into(),
            Some("application/json"),
            "{}".into(),
            400,
        ),
        (
            "POST",
            "/transactions".into(),
            Some("application/json"),
            r#"{"operations": {}}"#.into(),
            400,
        ),
        (
            "POST",
            "/transactions".into(),
            Some("application/json"),
            r#"{"operations": [{"op": "drop", "collection": "pts"}]}"#.into(),
            400,
        ),
        (
            "POST",
            "/transactions".into(),
            Some("application/json"),
            r#"{"operations": [{"op": "delete", "collection": "pts", "id": {"$ne": 0}}]}"#.into(),
            400,
        ),
        (
            "POST",
            "/transactions".into(),
            Some("application/json"),
            r#"{"operations": [{"op": "delete", "collection": "pts; DROP TABLE pts", "id": 1}]}"#
                .into(),
            422,
        ),
    ];
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let rows = || async { app.db.int("SELECT count(*) FROM pts").await };
    for (method, path, content_type, body, want) in &cases {
        let before = rows().await;
        let headers: Vec<(&str, &str)> = content_type
            .iter()
            .map(|ct| ("content-type", *ct))
            .collect();
        let r = app.send(method, path, &headers, Some(body.clone())).await;
        let shown: String = body.chars().take(80).collect();
        assert_eq!(r.status.as_u16(), *want, "{method} {path} {shown}: {r:?}");
        if *want >= 400 {
            assert_eq!(
                r.headers["content-type"], "application/problem+json",
                "{method} {path} {shown}"
            );
            assert!(
                r.body["detail"].is_string(),
                "{method} {path} {shown}: {r:?}"
            );
            assert_eq!(
                rows().await,
                before,
                "{method} {path} {shown} changed the table"
            );
        }
    }
    // Still serving, and still all there.
    let r = app
        .post("pts", &point(0.0, 0.0, json!({"name": "after"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT name FROM pts WHERE id = 1")
            .await
            .as_deref(),
        Some("seed")
    );
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

async fn post_encoded(
    app: &TestApp,
    encoding: &str,
    body: Vec<u8>,
) -> crate::support::TestResponse {
    use axum::body::Body;
    use axum::http::Request;
    app.request(
        Request::post("/collections/pts/items")
            .header("content-type", GEOJSON)
            .header("content-encoding", encoding)
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn gzip_bodies_are_limited_after_decompression() {
    let app = TestApp::with_config(SETUP, |c| c.max_body = 1 << 20).await;
    let fc =
        crate::support::collection((0..100).map(|i| point(0.0, 0.0, json!({"n": i}))).collect());
    let r = post_encoded(&app, "gzip", gzip(fc.to_string().as_bytes())).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 101);
    // 64 MiB of JSON whitespace around a Feature: about 64 KiB compressed.
    let mut bomb = vec![b' '; 64 << 20];
    bomb.extend_from_slice(feature("{}").as_bytes());
    let bomb = gzip(&bomb);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let r = post_encoded(&app, "gzip", bomb).await;
    assert_eq!(r.status, 413, "{r:?}");
    let r = post_encoded(&app, "gzip", b"not gzip at all".to_vec()).await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = post_encoded(&app, "compress", feature("{}").into_bytes()).await;
    assert_eq!(r.status, 415, "{r:?}");
    assert_eq!(r.headers["accept-encoding"], "gzip, deflate, br, zstd");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 101);
}

#[tokio::test]
async fn statement_timeout_bounds_database_work() {
    let app = TestApp::with_config(
        "CREATE TABLE s (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
         CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN IF NEW.name = 'slow' THEN PERFORM pg_sleep(2); END IF; RETURN NEW; END $$;
         CREATE TRIGGER slow BEFORE INSERT ON s FOR EACH ROW EXECUTE FUNCTION slow();",
        // Well above what any other statement of the test takes on a busy
        // machine (start-up's catalog queries run under it too), well below the 2 s.
        |c| c.statement_timeout = std::time::Duration::from_millis(1000),
    )
    .await;
    let r = app
        .post("s", &point(0.0, 0.0, json!({"name": "slow"})))
        .await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(
        r.body["errors"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("statement timeout"),
        "{r:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM s").await, 0);
    let r = app
        .post("s", &point(0.0, 0.0, json!({"name": "quick"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn limits_are_clear_4xx() {
    let app = TestApp::with_config(
        "CREATE TABLE l (id serial PRIMARY KEY, a text, b text, c text, geom geometry)",
        |c| {
            c.max_features = 10;
            c.max_positions = 5;
            c.max_properties = 2;
            c.max_string = 8;
        },
    )
    .await;
    let many = crate::support::collection((0..11).map(|_| point(0.0, 0.0, json!({}))).collect());
    let r = app.post("l", &many).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:too-many-features");
    let line = |n: usize| {
        json!({"type": "Feature", "properties": {},
               "geometry": {"type": "LineString", "coordinates": (0..n).map(|i| [i, i]).collect::<Vec<_>>()}})
    };
    assert_eq!(app.post("l", &line(5)).await.status, 201);
    let r = app.post("l", &line(6)).await;
    assert_eq!(
        (r.status.as_u16(), r.body["errors"][0]["code"].as_str()),
        (422, Some("too_many_positions")),
        "{r:?}"
    );
    let r = app
        .post("l", &point(0.0, 0.0, json!({"a": "x", "b": "y", "c": "z"})))
        .await;
    assert_eq!(r.body["errors"][0]["code"], "too_many_properties", "{r:?}");
    let r = app
        .post("l", &point(0.0, 0.0, json!({"a": "123456789"})))
        .await;
    assert_eq!(r.body["errors"][0]["code"], "too_long", "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/properties/a");
    assert_eq!(
        app.post("l", &point(0.0, 0.0, json!({"a": "12345678"})))
            .await
            .status,
        201
    );
    assert_eq!(app.db.int("SELECT count(*) FROM l").await, 2);
}
