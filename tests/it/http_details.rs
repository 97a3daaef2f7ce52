//! HTTP details: weak If-None-Match comparison, GeoJSON without a `crs`
//! member, and 503s that do not echo connection errors.

use std::time::Duration;

use serde_json::json;

use crate::support::{http, point, via_proxy, Served, TestApp, TestDb};

const SETUP: &str = "
    CREATE TABLE places (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
    INSERT INTO places (name, geom) VALUES ('bonn', 'SRID=4326;POINT(7.1 50.7)');
    CREATE TABLE parcels (gid serial PRIMARY KEY, geom geometry(Point, 25832));
    INSERT INTO parcels (geom) VALUES ('SRID=25832;POINT(500000 5500000)');
";

#[tokio::test]
async fn if_none_match_compares_weakly() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places/items/1").await;
    let etag = r.headers["etag"].to_str().unwrap().to_owned();
    let weak = format!("W/{etag}");
    let listed = format!("\"other\", {weak}");
    for (if_none_match, status) in [
        (etag.as_str(), 304),
        (weak.as_str(), 304),
        (listed.as_str(), 304),
        ("*", 304),
        ("W/\"other\"", 200),
    ] {
        let headers = [("if-none-match", if_none_match)];
        let r = app
            .send("GET", "/collections/places/items/1", &headers, None)
            .await;
        assert_eq!(r.status, status, "If-None-Match: {if_none_match}");
    }
}

#[tokio::test]
async fn geometries_in_other_crss_have_no_crs_member() {
    let app = TestApp::new(SETUP).await;
    let utm = "http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FEPSG%2F0%2F25832";
    for path in [
        format!("/collections/parcels/items/1?crs={utm}"),
        "/collections/parcels/items/1".to_owned(),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status, 200, "{r:?}");
        let geometry = r.body["geometry"].as_object().unwrap();
        assert_eq!(geometry["type"], "Point");
        assert!(!geometry.contains_key("crs"), "{path}: {r:?}");
    }
    let r = app
        .get(&format!("/collections/parcels/items?crs={utm}"))
        .await;
    let geometry = r.body["features"][0]["geometry"].as_object().unwrap();
    assert_eq!(geometry["coordinates"][0], 500000.0);
    assert!(!geometry.contains_key("crs"), "{r:?}");
}

#[tokio::test]
async fn unavailable_answers_do_not_echo_connection_errors() {
    let db = TestDb::new(SETUP).await;
    let (proxy, config) = via_proxy(&db, Duration::ZERO).await;
    let port = proxy.local_addr().port().to_string();
    let app = TestApp::on(db, config).await;
    assert_eq!(app.get("/readyz").await.status, 200);
    proxy.sever();
    let write = point(1.0, 2.0, json!({"name": "x"}));
    for path in ["/readyz", "/collections/places/items", "POST", "/readyz"] {
        let r = match path {
            "POST" => app.post("places", &write).await,
            path => app.get(path).await,
        };
        assert_eq!(r.status, 503, "{path}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        let detail = r.body["detail"].as_str().unwrap();
        assert!(detail.contains("database"), "{path}: {detail}");
        let body = r.body.to_string();
        for leak in [
            "os error",
            "refused",
            "connecting",
            "127.0.0.1",
            port.as_str(),
        ] {
            assert!(!body.contains(leak), "{path} echoes {leak:?}: {body}");
        }
    }
}

#[tokio::test]
async fn header_names_go_out_capitalised_as_http_1_1_clients_read_them() {
    let app =
        TestApp::new("CREATE TABLE pts (id serial PRIMARY KEY, geom geometry(Point, 4326))").await;
    let served = Served::start(&app).await;
    let addr = served.url.trim_start_matches("http://");
    let feature = point(1.0, 2.0, json!({})).to_string();
    let (status, raw) = http(addr, "POST", "/collections/pts/items", &feature)
        .await
        .unwrap();
    assert_eq!(status, 201, "{raw}");
    // The bytes on the wire: QGIS 3.40 finds the new feature's id only
    // under `Location`, matched case-sensitively.
    let head = raw.split("\r\n\r\n").next().unwrap();
    let names: Vec<&str> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split(':').next())
        .collect();
    for name in ["Location", "Content-Type", "Content-Length"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(
        names.iter().all(|n| n
            .split('-')
            .all(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))),
        "{names:?}"
    );
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("Location: "))
        .unwrap();
    assert!(location.ends_with("/collections/pts/items/1"), "{location}");
}
