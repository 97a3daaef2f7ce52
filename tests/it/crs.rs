//! OGC API - Features Part 2: reading and writing in other CRSs, with the
//! axis order each CRS defines (EPSG:4326 is lat/lon, CRS84 lon/lat).

use serde_json::json;

use crate::support::{collection, point, TestApp};

const SETUP: &str = "
    CREATE TABLE places (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
    INSERT INTO places (name, geom) VALUES ('bonn', 'SRID=4326;POINT(7.1 50.7)');
    CREATE TABLE parcels (gid serial PRIMARY KEY, geom geometry(Point, 25832));
    INSERT INTO parcels (geom) VALUES ('SRID=25832;POINT(500000 5500000)');
";

const CRS84: &str = "http://www.opengis.net/def/crs/OGC/1.3/CRS84";
const EPSG4326: &str = "http://www.opengis.net/def/crs/EPSG/0/4326";
const UTM32: &str = "http://www.opengis.net/def/crs/EPSG/0/25832";

fn q(uri: &str) -> String {
    uri.replace(':', "%3A").replace('/', "%2F")
}

#[tokio::test]
async fn collections_list_their_crs() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/parcels").await;
    assert_eq!(r.body["crs"], json!([CRS84, EPSG4326, UTM32]));
    assert_eq!(r.body["storageCrs"], UTM32);
    let r = app.get("/collections/places").await;
    assert_eq!(r.body["crs"], json!([CRS84, EPSG4326]));
    assert_eq!(r.body["storageCrs"], EPSG4326);
}

#[tokio::test]
async fn reads_in_the_asked_crs_and_axis_order() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places/items").await;
    assert_eq!(r.headers["content-crs"], format!("<{CRS84}>"));
    assert_eq!(
        r.body["features"][0]["geometry"]["coordinates"],
        json!([7.1, 50.7])
    );
    let r = app
        .get(&format!("/collections/places/items?crs={}", q(EPSG4326)))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-crs"], format!("<{EPSG4326}>"));
    assert_eq!(
        r.body["features"][0]["geometry"]["coordinates"],
        json!([50.7, 7.1])
    );
    let r = app
        .get(&format!("/collections/parcels/items/1?crs={}", q(UTM32)))
        .await;
    assert_eq!(r.body["geometry"]["coordinates"], json!([500000, 5500000]));
    assert_eq!(r.headers["content-crs"], format!("<{UTM32}>"));
    // bbox-crs: the box in EPSG:4326 is latitude first.
    let r = app
        .get(&format!(
            "/collections/places/items?bbox=50,7,51,8&bbox-crs={}",
            q(EPSG4326)
        ))
        .await;
    assert_eq!(r.body["numberMatched"], 1, "{r:?}");
    let r = app.get("/collections/places/items?bbox=50,7,51,8").await;
    assert_eq!(r.body["numberMatched"], 0, "CRS84 is longitude first");
    let r = app
        .get(&format!(
            "/collections/parcels/items?bbox=499000,5499000,501000,5501000&bbox-crs={}",
            q(UTM32)
        ))
        .await;
    assert_eq!(r.body["numberMatched"], 1, "{r:?}");
    for bad in [
        "crs=EPSG%3A3857",
        "crs=nonsense",
        "bbox-crs=http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FEPSG%2F0%2F4326",
    ] {
        let r = app.get(&format!("/collections/places/items?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
}

#[tokio::test]
async fn writes_honour_content_crs() {
    let app = TestApp::new(SETUP).await;
    let send = |coll: &'static str, crs: &'static str, body: serde_json::Value| {
        let app = &app;
        async move {
            app.send(
                "POST",
                &format!("/collections/{coll}/items"),
                &[
                    ("content-type", "application/geo+json"),
                    ("content-crs", crs),
                ],
                Some(body.to_string()),
            )
            .await
        }
    };
    // Lat/lon in EPSG:4326, with and without angle brackets.
    let r = send(
        "places",
        "<http://www.opengis.net/def/crs/EPSG/0/4326>",
        point(48.1, 11.6, json!({"name": "munich"})),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = send(
        "places",
        EPSG4326,
        point(53.6, 10.0, json!({"name": "hamburg"})),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT string_agg(ST_AsText(geom), ' ' ORDER BY id) FROM places WHERE id > 1")
            .await
            .as_deref(),
        Some("POINT(11.6 48.1) POINT(10 53.6)")
    );
    // UTM coordinates into a UTM table land unchanged, through INSERT and through COPY.
    let r = send("parcels", UTM32, point(600000.5, 5600000.25, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let many: Vec<_> = (0..150)
        .map(|i| point(400000.0 + i as f64, 5400000.0, json!({})))
        .collect();
    let r = send("parcels", UTM32, collection(many)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["strategy"], "copy");
    // Lat/lon in bulk into a lon/lat table: COPY, axes swapped by the encoder.
    let many: Vec<_> = (0..150)
        .map(|i| point(40.0, i as f64 * 0.1, json!({"name": "bulk"})))
        .collect();
    let r = send("places", EPSG4326, collection(many)).await;
    assert_eq!(r.body["strategy"], "copy", "{r:?}");
    assert_eq!(
        app.db.text("SELECT ST_AsText(geom) FROM places WHERE name = 'bulk' ORDER BY id OFFSET 10 LIMIT 1").await.as_deref(),
        Some("POINT(1 40)")
    );
    assert_eq!(
        app.db
            .text("SELECT ST_AsText(geom) FROM parcels WHERE gid = 2")
            .await
            .as_deref(),
        Some("POINT(600000.5 5600000.25)")
    );
    // CRS84 into the UTM table is transformed by PostGIS.
    let r = send("parcels", CRS84, point(9.0, 49.65, json!({}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let x = app
        .db
        .text("SELECT round(ST_X(geom))::text FROM parcels ORDER BY gid DESC LIMIT 1")
        .await;
    assert_eq!(x.as_deref(), Some("500000"));
    // PUT in UTM, answered in UTM.
    let r = app
        .send(
            "PUT",
            "/collections/parcels/items/1",
            &[
                ("content-type", "application/geo+json"),
                ("content-crs", UTM32),
                ("prefer", "return=representation"),
            ],
            Some(point(1.0, 2.0, json!({})).to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["geometry"]["coordinates"], json!([1, 2]));
    assert_eq!(r.headers["content-crs"], format!("<{UTM32}>"));
    let r = send(
        "places",
        "http://www.opengis.net/def/crs/EPSG/0/3857",
        point(0.0, 0.0, json!({})),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:unsupported-crs");
}

/// A coordinate no CRS of the collection can express (far outside the
/// projection's domain) is a client's mistake, not a fault: a 422 at the
/// feature's geometry whichever CRS it was sent in, and nothing written.
/// One stored by plain SQL does not take the collection list down with it.
#[tokio::test]
async fn coordinates_outside_a_projection_are_refused_and_do_not_poison_reads() {
    let app = TestApp::new(SETUP).await;
    let absurd = || point(1e308, -1e308, json!({}));
    for (crs, body) in [
        (UTM32, absurd()),
        (CRS84, absurd()),
        (UTM32, collection((0..150).map(|_| absurd()).collect())),
    ] {
        let r = app
            .send(
                "POST",
                "/collections/parcels/items",
                &[
                    ("content-type", "application/geo+json"),
                    ("content-crs", crs),
                ],
                Some(body.to_string()),
            )
            .await;
        assert_eq!(r.status, 422, "{crs}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        let pointer = r.body["errors"][0]["pointer"].as_str().unwrap_or_default();
        assert!(pointer.contains("/geometry"), "{r:?}");
        assert_eq!(r.body["errors"][0]["code"], "invalid_coordinates");
    }
    assert_eq!(app.db.int("SELECT count(*) FROM parcels").await, 1);
    // Stored behind the service's back: the list still answers, without
    // that collection's extent; its features are a database error, not a
    // failed write.
    app.db
        .client
        .batch_execute(
            "INSERT INTO parcels (geom) VALUES ('SRID=25832;POINT(1e308 -1e308)'); ANALYZE parcels",
        )
        .await
        .unwrap();
    let r = app.get("/collections").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = app.get("/collections/parcels/items").await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:database-error");
}
