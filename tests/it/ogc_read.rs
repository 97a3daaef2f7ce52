//! OGC API - Features Part 1 (core, GeoJSON): landing page, conformance,
//! collections, paging, bbox and property filters, single features.

use serde_json::{json, Value};

use crate::support::TestApp;

/// Points `places` 1..25 (name p<i>, kind odd/even, pop i, at (i, i/2)),
/// a UTM polygon table and a table without a key.
pub const SETUP: &str = "
    CREATE TABLE places (id serial PRIMARY KEY, name text, kind text, pop int4,
                         geom geometry(Point, 4326));
    INSERT INTO places (name, kind, pop, geom)
         SELECT 'p' || i, CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, i,
                ST_SetSRID(ST_MakePoint(i, i / 2.0), 4326)
           FROM generate_series(1, 25) AS i;
    CREATE TABLE parcels (gid int PRIMARY KEY, geom geometry(Polygon, 25832));
    INSERT INTO parcels VALUES (1, ST_GeomFromText('POLYGON((500000 5500000, 500100 5500000, 500100 5500100, 500000 5500000))', 25832));
    CREATE TABLE view_only (name text, geom geometry(Point, 4326));
";

fn hrefs<'a>(links: &'a Value, rel: &str) -> Vec<&'a str> {
    links
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rel"] == rel)
        .map(|l| l["href"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn landing_page_and_conformance() {
    let app = TestApp::new(SETUP).await;
    let r = app
        .send("GET", "/", &[("host", "example.org:8080")], None)
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    for rel in ["self", "service-desc", "service-doc", "conformance", "data"] {
        assert_eq!(hrefs(&r.body["links"], rel).len(), 1, "{rel}: {r:?}");
    }
    assert_eq!(
        hrefs(&r.body["links"], "data"),
        ["http://example.org:8080/collections"]
    );
    let r = app.get("/conformance").await;
    let classes = r.body["conformsTo"].as_array().unwrap();
    assert!(classes.contains(&json!(
        "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core"
    )));
    for class in [
        "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
        "http://www.opengis.net/spec/ogcapi-features-2/1.0/conf/crs",
        "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/create-replace-delete",
        "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/optimistic-locking-etags",
    ] {
        assert!(classes.contains(&json!(class)), "{class}");
    }
    assert_eq!(app.get("/conformance?f=json").await.status, 200);
    assert_eq!(app.get("/conformance?f=xml").await.status, 400);
    assert_eq!(app.get("/conformance?foo=1").await.status, 400);
}

#[tokio::test]
async fn collection_has_extent_in_crs84_and_storage_crs() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["itemType"], "feature");
    assert_eq!(
        r.body["storageCrs"],
        "http://www.opengis.net/def/crs/EPSG/0/4326"
    );
    assert_eq!(
        r.body["crs"][0],
        "http://www.opengis.net/def/crs/OGC/1.3/CRS84"
    );
    assert_eq!(
        r.body["extent"]["spatial"]["bbox"][0],
        json!([1.0, 0.5, 25.0, 12.5])
    );
    // Stored in UTM 32N; the extent is given in longitude/latitude.
    let r = app.get("/collections/parcels").await;
    let b = &r.body["extent"]["spatial"]["bbox"][0];
    assert!((b[0].as_f64().unwrap() - 9.0).abs() < 0.01, "{b}");
    assert!((b[1].as_f64().unwrap() - 49.65).abs() < 0.05, "{b}");
    assert_eq!(app.get("/collections/nope").await.status, 404);
    let r = app.get("/collections").await;
    assert_eq!(r.body["collections"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn items_page_with_counts_and_links() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/geo+json");
    assert_eq!(r.body["type"], "FeatureCollection");
    assert_eq!(r.body["numberMatched"], 25);
    assert_eq!(r.body["numberReturned"], 10);
    let f = &r.body["features"][0];
    assert_eq!(f["id"], 1);
    assert_eq!(
        f["geometry"],
        json!({"type": "Point", "coordinates": [1, 0.5]})
    );
    assert_eq!(
        f["properties"],
        json!({"name": "p1", "kind": "odd", "pop": 1})
    );
    let next = hrefs(&r.body["links"], "next")[0].to_owned();
    assert_eq!(next, "/collections/places/items?limit=10&offset=10");
    // Following next links visits every feature once.
    let mut seen = 10;
    let mut next = Some(next);
    while let Some(link) = next {
        let r = app.get(&link).await;
        seen += r.body["numberReturned"].as_u64().unwrap();
        next = hrefs(&r.body["links"], "next")
            .first()
            .map(|s| s.to_string());
    }
    assert_eq!(seen, 25);
    let r = app.get("/collections/places/items?limit=100000").await;
    assert_eq!(
        r.body["numberReturned"], 25,
        "a limit above the maximum is lowered, not refused"
    );
    let r = app.get("/collections/places/items?offset=30").await;
    assert_eq!(r.body["numberReturned"], 0);
}

#[tokio::test]
async fn bbox_and_property_filters() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places/items?bbox=2.5,0,5.5,10").await;
    let ids: Vec<_> = r.body["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].clone())
        .collect();
    assert_eq!(ids, [json!(3), json!(4), json!(5)]);
    assert_eq!(r.body["numberMatched"], 3);
    let r = app
        .get("/collections/places/items?bbox=2.5,0,0,5.5,10,100")
        .await;
    assert_eq!(r.body["numberMatched"], 3, "6-number bbox: {r:?}");
    let r = app
        .get("/collections/places/items?kind=even&limit=100")
        .await;
    assert_eq!(r.body["numberMatched"], 12);
    let r = app.get("/collections/places/items?kind=even&pop=4").await;
    assert_eq!(r.body["numberMatched"], 1);
    // Stored in UTM: the box is in longitude/latitude.
    let r = app
        .get("/collections/parcels/items?bbox=8.9,49.6,9.1,49.7")
        .await;
    assert_eq!(r.body["numberMatched"], 1, "{r:?}");
    let r = app
        .get("/collections/parcels/items?bbox=10,49.6,11,49.7")
        .await;
    assert_eq!(r.body["numberMatched"], 0);
    let g = &app.get("/collections/parcels/items").await.body["features"][0]["geometry"];
    assert!(
        (g["coordinates"][0][0][0].as_f64().unwrap() - 9.0).abs() < 0.01,
        "{g}"
    );
}

#[tokio::test]
async fn bad_queries_are_400_with_the_parameter_named() {
    let app = TestApp::new(SETUP).await;
    for query in [
        "unknown=1",
        "limit=0",
        "limit=ten",
        "offset=-1",
        "bbox=1,2,3",
        "bbox=1,2,3,x",
        "bbox=0,10,1,5",
        "pop=notanumber",
        "geom=1",
        "limit=1&limit=2",
        "f=xml",
        "f=html&f=json",
    ] {
        let r = app.get(&format!("/collections/places/items?{query}")).await;
        assert_eq!(r.status, 400, "{query}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    let r = app.get("/collections/places/items?colour=red").await;
    assert!(
        r.body["detail"].as_str().unwrap().contains("'colour'"),
        "{r:?}"
    );
}

#[tokio::test]
async fn one_feature_with_etag_and_links() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/places/items/7").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/geo+json");
    assert_eq!(r.body["id"], 7);
    assert_eq!(r.body["properties"]["name"], "p7");
    assert_eq!(
        hrefs(&r.body["links"], "self"),
        ["/collections/places/items/7"]
    );
    let etag = r.headers["etag"].to_str().unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.len() == 34, "{etag}");
    let r = app
        .send(
            "GET",
            "/collections/places/items/7",
            &[("if-none-match", &etag)],
            None,
        )
        .await;
    assert_eq!(r.status, 304);
    assert_eq!(app.get("/collections/places/items/999").await.status, 404);
    // Not even of the key's type: still simply not there.
    let r = app.get("/collections/places/items/abc").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    // A table without a key is readable, but its features have no address.
    let r = app.get("/collections/view_only/items").await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn schema_describes_the_properties() {
    let app = TestApp::new(
        "CREATE TABLE trees (id serial PRIMARY KEY, species varchar(40) NOT NULL, height real,
                             planted date, tags text[], area float8 GENERATED ALWAYS AS (height * 2) STORED,
                             geom geometry(Point, 4326))",
    )
    .await;
    let r = app.get("/collections/trees/schema").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/schema+json");
    let p = &r.body["properties"];
    assert_eq!(p["id"]["x-ogc-role"], "id");
    assert_eq!(p["id"]["readOnly"], true);
    assert_eq!(p["species"]["maxLength"], 40);
    assert_eq!(p["height"]["type"], "number");
    assert_eq!(p["height"]["nullable"], true);
    assert_eq!(p["planted"]["format"], "date");
    assert_eq!(p["tags"]["items"]["type"], "string");
    assert_eq!(p["area"]["readOnly"], true);
    assert_eq!(p["geom"]["x-ogc-role"], "primary-geometry");
    assert_eq!(p["geom"]["format"], "geometry-point");
    assert_eq!(r.body["required"], json!(["species"]));
    assert_eq!(r.body["additionalProperties"], false);
}

#[tokio::test]
async fn paging_keeps_the_query_and_bbox_tests_geometries() {
    let app = TestApp::new(SETUP).await;
    let epsg4326 = "http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FEPSG%2F0%2F4326";
    // Latitude first in EPSG:4326: the box holds points 3..=9.
    let first = app
        .get(&format!("/collections/places/items?limit=2&bbox=1.4,2.5,4.6,9.5&bbox-crs={epsg4326}&datetime=2024-01-01T00:00:00Z/.."))
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body["numberMatched"], 7);
    let mut seen = 0;
    let mut next = Some(hrefs(&first.body["links"], "self")[0].to_owned());
    while let Some(link) = next {
        let r = app.get(&link).await;
        assert_eq!(r.body["numberMatched"], 7, "{link}: {r:?}");
        seen += r.body["numberReturned"].as_u64().unwrap();
        next = hrefs(&r.body["links"], "next")
            .first()
            .map(|s| s.to_string());
    }
    assert_eq!(seen, 7);
    assert_eq!(
        app.get("/collections/places/items?datetime=yesterday")
            .await
            .status,
        400
    );
    // A line whose box overlaps the query box but which does not enter it.
    let app = TestApp::new(
        "CREATE TABLE l (id serial PRIMARY KEY, attrs json, geom geometry(LineString, 4326));
         INSERT INTO l (geom) VALUES ('SRID=4326;LINESTRING(0 0, 10 0, 10 10)');",
    )
    .await;
    let r = app.get("/collections/l/items?bbox=1,5,4,9").await;
    assert_eq!(r.body["numberMatched"], 0, "{r:?}");
    let r = app.get("/collections/l/items?bbox=9,5,11,9").await;
    assert_eq!(r.body["numberMatched"], 1, "{r:?}");
    let r = app.get("/collections/l/items?attrs=1").await;
    assert_eq!(r.status, 400, "json columns cannot be compared: {r:?}");
}

#[tokio::test]
async fn with_etags_gives_each_feature_its_key_and_etag_as_properties() {
    let app = TestApp::new(SETUP).await;
    // The QGIS plugin's layers: the service's URL carries with-etags=true,
    // which QGIS takes to /, /api, the collection and every items page.
    for path in [
        "/?with-etags=true",
        "/api?with-etags=true",
        "/collections/places?with-etags=true",
    ] {
        assert_eq!(app.get(path).await.status, 200, "{path}");
    }
    let page = app
        .get("/collections/places/items?limit=10&with-etags=true&kind=odd")
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    let first = &page.body["features"][0];
    let id = first["id"].as_i64().unwrap();
    assert_eq!(first["properties"]["id"], id, "{first}");
    let item = app.get(&format!("/collections/places/items/{id}")).await;
    let etag = item.headers["etag"].to_str().unwrap().trim_matches('"');
    assert_eq!(first["properties"]["featurepipe:etag"], etag, "{first}");
    // The next page keeps it.
    let next = hrefs(&page.body["links"], "next")[0];
    assert!(next.contains("with-etags=true"), "{next}");
    // Without it, neither is a property.
    let plain = app.get("/collections/places/items?limit=1").await;
    let props = plain.body["features"][0]["properties"].as_object().unwrap();
    assert!(
        !props.contains_key("id") && !props.contains_key("featurepipe:etag"),
        "{props:?}"
    );
    // A single feature takes it (its ETag is its header); a bad value is a 400.
    let single = app
        .get(&format!("/collections/places/items/{id}?with-etags=true"))
        .await;
    assert_eq!(single.status, 200, "{single:?}");
    let bad = app.get("/collections/places/items?with-etags=yes").await;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(
        bad.body["detail"].as_str().unwrap().contains("with-etags"),
        "{bad:?}"
    );
}
