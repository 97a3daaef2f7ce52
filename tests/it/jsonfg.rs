//! JSON-FG (OGC Features and Geometries JSON 1.0): the specification's
//! examples written through the service and read back as JSON-FG and
//! GeoJSON, checked in the table; `place` in projected CRSs; what featurepipe
//! refuses (with pointers); content negotiation on reads; and what it serves
//! validated by python-jsonschema against the specification's schemas.

use serde_json::{json, Value};

use crate::sessions::session;
use crate::support::{run, settings_file, Served, TestApp, TestResponse};

const SETUP: &str = r#"
    CREATE TABLE "Airport" (id int PRIMARY KEY, name text, geom geometry(Point, 27700));
    CREATE TABLE parcels (gid serial PRIMARY KEY, name text, geom geometry(Geometry, 25832));
    CREATE TABLE places (id serial PRIMARY KEY, name text NOT NULL, geom geometry(Point, 4326));
    INSERT INTO places (name, geom) VALUES ('bonn', 'SRID=4326;POINT(7.1 50.7)');
"#;

const FG: &str = "application/fg+json";
const CORE: &str = "http://www.opengis.net/spec/json-fg-1/1.0/conf/core";
const TYPES: &str = "http://www.opengis.net/spec/json-fg-1/1.0/conf/types-schemas";
const BNG: &str = "http://www.opengis.net/def/crs/EPSG/0/27700";
const UTM32: &str = "http://www.opengis.net/def/crs/EPSG/0/25832";
const EPSG4326: &str = "http://www.opengis.net/def/crs/EPSG/0/4326";
const CRS84: &str = "http://www.opengis.net/def/crs/OGC/1.3/CRS84";

fn example(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("tests/jsonfg/{name}.json")).expect("example");
    serde_json::from_str(&text).expect("example is JSON")
}

/// The app on [`SETUP`], `places` offering UTM zone 32 too.
async fn app() -> TestApp {
    let settings = format!("[collections.places]\ncrs = [\"{UTM32}\"]\n");
    let path = settings_file("jsonfg", &settings);
    TestApp::with_config(SETUP, |c| c.settings = Some(path.clone())).await
}

async fn write(app: &TestApp, method: &str, path: &str, body: &Value) -> TestResponse {
    let headers = [("content-type", FG)];
    app.send(method, path, &headers, Some(body.to_string()))
        .await
}

async fn read_fg(app: &TestApp, path: &str) -> TestResponse {
    app.send("GET", path, &[("accept", FG)], None).await
}

/// `a` and `b` are the same positions within `tolerance`.
fn close(a: &Value, b: &Value, tolerance: f64) -> bool {
    match (a, b) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| close(a, b, tolerance))
        }
        (a, b) => (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= tolerance,
    }
}

/// The specification's feature of the clause on GeoJSON profiles: Islay
/// Airport in EPSG:27700, with its WGS 84 position of the jsonfg-plus profile.
fn islay() -> (Value, Value) {
    let feature = json!({
        "type": "Feature",
        "featureType": "Airport",
        "coordRefSys": BNG,
        "conformsTo": [CORE, TYPES],
        "id": 13,
        "geometry": null,
        "properties": {"name": "Islay Airport"},
        "place": {"type": "Point", "coordinates": [132440.63, 651435.92]}
    });
    (feature, json!([-6.2580609, 55.6824121]))
}

#[tokio::test]
async fn the_specifications_airports_are_written_and_read_back() {
    let app = app().await;
    let airports = example("airports");
    // GeoJSON's media type: the root's conformsTo says it is JSON-FG.
    let r = app.post("Airport", &airports).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ids"], json!([1, 2, 46]));
    let stored = app
        .db
        .text(r#"SELECT string_agg(id || ' ' || ST_AsText(geom) || ' ' || ST_SRID(geom), ', ' ORDER BY id) FROM "Airport""#)
        .await;
    assert_eq!(
        stored.as_deref(),
        Some("1 POINT(417057.93 1159772.2) 27700, 2 POINT(439723.69 1110559.95) 27700, 46 POINT(606468.75 121465.11) 27700")
    );
    let (islay, islay_wgs84) = islay();
    let r = write(&app, "POST", "/collections/Airport/items", &islay).await;
    assert_eq!(r.status, 201, "{r:?}");
    let stored = app
        .db
        .text(r#"SELECT ST_AsText(geom) FROM "Airport" WHERE id = 13"#)
        .await;
    assert_eq!(stored.as_deref(), Some("POINT(132440.63 651435.92)"));

    // Read back as JSON-FG: place in the storage CRS, geometry in WGS 84.
    let r = read_fg(&app, "/collections/Airport/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.headers["content-crs"], format!("<{BNG}>"));
    assert_eq!(r.body["conformsTo"], json!([CORE, TYPES]));
    assert_eq!(r.body["coordRefSys"], BNG);
    assert_eq!(r.body["featureType"], "Airport");
    let features = r.body["features"].as_array().unwrap();
    let ids: Vec<&Value> = features.iter().map(|f| &f["id"]).collect();
    assert_eq!(ids, [1, 2, 13, 46]);
    for given in airports["features"].as_array().unwrap() {
        let read = features.iter().find(|f| f["id"] == given["id"]).unwrap();
        assert_eq!(read["place"], given["place"], "{read}");
        assert_eq!(read["properties"], given["properties"]);
        assert_eq!(read["time"], Value::Null);
        // The example's WGS 84 positions were computed elsewhere, with
        // another datum shift: they agree within about ten metres.
        let (a, b) = (
            &read["geometry"]["coordinates"],
            &given["geometry"]["coordinates"],
        );
        assert!(close(a, b, 1e-4), "{a} / {b}");
    }
    let r = app.get("/collections/Airport/items/13?f=jsonfg").await;
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.body["conformsTo"], json!([CORE, TYPES]));
    assert_eq!(r.body["featureType"], "Airport");
    assert_eq!(r.body["place"], islay["place"]);
    let a = &r.body["geometry"]["coordinates"];
    assert!(close(a, &islay_wgs84, 1e-4), "{a}");

    // And as GeoJSON: the WGS 84 geometry only, no JSON-FG members.
    let r = app.get("/collections/Airport/items/13").await;
    assert_eq!(r.headers["content-type"], "application/geo+json");
    assert!(close(
        &r.body["geometry"]["coordinates"],
        &islay_wgs84,
        1e-4
    ));
    for member in ["place", "time", "conformsTo", "featureType", "coordRefSys"] {
        assert!(r.body.get(member).is_none(), "{member}: {}", r.body);
    }
    // In CRS84 JSON-FG has no place: the geometry is `geometry`'s.
    let r = read_fg(&app, &format!("/collections/Airport/items/13?crs={CRS84}")).await;
    assert_eq!(r.body["coordRefSys"], CRS84);
    assert_eq!(r.body["place"], Value::Null);
    assert!(close(
        &r.body["geometry"]["coordinates"],
        &islay_wgs84,
        1e-4
    ));
}

#[tokio::test]
async fn place_in_projected_crss_and_geometry_in_wgs84() {
    let app = app().await;
    let line = json!({"type": "LineString", "coordinates": [[500000, 5500000], [500100, 5500100]]});
    let polygon = json!({"type": "Polygon", "coordinates": [[[0, 0], [10, 0], [10, 10], [0, 0]]]});
    let multi_polygon = json!({"type": "MultiPolygon", "coordinates": [[[[0, 0], [10, 0], [10, 10], [0, 0]]], [[[20, 20], [30, 20], [30, 30], [20, 20]]]]});
    let multi_point = json!({"type": "MultiPoint", "coordinates": [[1, 2], [3, 4]]});
    let multi_line =
        json!({"type": "MultiLineString", "coordinates": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]});
    let feature = |name: &str, place: &Value, geometry: Value| json!({"type": "Feature", "place": place, "geometry": geometry, "properties": {"name": name}});
    let body = json!({
        "type": "FeatureCollection",
        "conformsTo": [CORE],
        "coordRefSys": {"type": "Reference", "href": UTM32},
        "features": [
            feature("line", &line, json!(null)),
            feature("polygon", &polygon, json!(null)),
            feature("multipolygon", &multi_polygon, json!(null)),
            feature("multipoint", &multi_point, json!({"type": "Point", "coordinates": [0, 0]})),
            feature("multiline", &multi_line, json!(null)),
            // No place: the geometry, in WGS 84, is the feature's.
            feature("wgs84", &Value::Null, json!({"type": "Point", "coordinates": [7.1, 50.7]})),
        ]
    });
    let r = write(&app, "POST", "/collections/parcels/items", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    let stored = app
        .db
        .text("SELECT string_agg(name || ' ' || ST_AsText(geom) || ' ' || ST_SRID(geom), '; ' ORDER BY gid) FROM parcels WHERE name <> 'wgs84'")
        .await;
    assert_eq!(
        stored.as_deref(),
        Some(
            "line LINESTRING(500000 5500000,500100 5500100) 25832; \
             polygon POLYGON((0 0,10 0,10 10,0 0)) 25832; \
             multipolygon MULTIPOLYGON(((0 0,10 0,10 10,0 0)),((20 20,30 20,30 30,20 20))) 25832; \
             multipoint MULTIPOINT((1 2),(3 4)) 25832; \
             multiline MULTILINESTRING((1 2,3 4),(5 6,7 8)) 25832"
        )
    );
    let wgs84 = "SELECT ST_AsText(ST_SnapToGrid(ST_Transform(geom, 4326), 1e-9)) || ' ' || ST_SRID(geom) FROM parcels WHERE name = $$wgs84$$";
    assert_eq!(
        app.db.text(wgs84).await.as_deref(),
        Some("POINT(7.1 50.7) 25832")
    );

    // Without coordRefSys, place is in Content-Crs (EPSG:4326: latitude
    // first), else in the storage CRS.
    let lat_lon = json!({"type": "Feature", "conformsTo": [CORE], "geometry": null,
        "place": {"type": "Point", "coordinates": [50.7, 7.1]}, "properties": {"name": "by header"}});
    let headers = [
        ("content-type", FG),
        ("content-crs", &*format!("<{EPSG4326}>")),
    ];
    let r = app
        .send(
            "POST",
            "/collections/parcels/items",
            &headers,
            Some(lat_lon.to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let by_header = "SELECT ST_AsText(ST_SnapToGrid(ST_Transform(geom, 4326), 1e-9)) FROM parcels WHERE name = $$by header$$";
    assert_eq!(
        app.db.text(by_header).await.as_deref(),
        Some("POINT(7.1 50.7)")
    );
    let stored_crs = json!({"type": "Feature", "geometry": null, "properties": {"name": "storage"},
        "place": {"type": "Point", "coordinates": [500000, 5500000]}});
    let r = write(&app, "POST", "/collections/parcels/items", &stored_crs).await;
    assert_eq!(r.status, 201, "{r:?}");
    let storage = "SELECT ST_AsText(geom) FROM parcels WHERE name = $$storage$$";
    assert_eq!(
        app.db.text(storage).await.as_deref(),
        Some("POINT(500000 5500000)")
    );

    // Into a WGS 84 table from a projected CRS: transformed on the way in.
    let r = write(
        &app,
        "POST",
        "/collections/places/items",
        &json!({"type": "Feature", "coordRefSys": UTM32, "geometry": null,
                "place": {"type": "Point", "coordinates": [500000, 5500000]},
                "properties": {"name": "from utm"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let from_utm = "SELECT ST_AsText(geom, 6) FROM places WHERE name = 'from utm'";
    assert_eq!(
        app.db.text(from_utm).await.as_deref(),
        Some("POINT(9 49.652543)")
    );

    // Read in a projected CRS of the client's choice.
    let r = read_fg(&app, &format!("/collections/places/items/1?crs={UTM32}")).await;
    assert_eq!(r.body["coordRefSys"], UTM32);
    assert_eq!(r.headers["content-crs"], format!("<{UTM32}>"));
    assert!(
        r.body["place"]["coordinates"][0].as_f64().unwrap() > 100_000.0,
        "{r:?}"
    );
    assert_eq!(r.body["geometry"]["coordinates"], json!([7.1, 50.7]));
}

#[tokio::test]
async fn put_patch_and_transactions_take_json_fg() {
    let app = app().await;
    let (islay, _) = islay();
    let r = write(&app, "PUT", "/collections/Airport/items/13", &islay).await;
    assert_eq!(r.status, 201, "{r:?}");
    let moved = json!({"conformsTo": [CORE], "coordRefSys": BNG,
                       "place": {"type": "Point", "coordinates": [132000, 651000]}});
    let r = write(&app, "PATCH", "/collections/Airport/items/13", &moved).await;
    assert_eq!(r.status, 204, "{r:?}");
    let at = r#"SELECT ST_AsText(geom) || ' ' || name FROM "Airport" WHERE id = 13"#;
    assert_eq!(
        app.db.text(at).await.as_deref(),
        Some("POINT(132000 651000) Islay Airport")
    );
    // A merge patch that drops place (and leaves geometry) changes nothing.
    let dropped = json!({"conformsTo": [CORE], "place": null, "properties": {"name": "Islay"}});
    let r = write(&app, "PATCH", "/collections/Airport/items/13", &dropped).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db.text(at).await.as_deref(),
        Some("POINT(132000 651000) Islay")
    );
    // A replacement given in WGS 84 only.
    let mut wgs84 = islay.clone();
    wgs84["place"] = Value::Null;
    wgs84["geometry"] = json!({"type": "Point", "coordinates": [-6.2580609, 55.6824121]});
    let r = write(&app, "PUT", "/collections/Airport/items/13", &wgs84).await;
    assert_eq!(r.status, 204, "{r:?}");
    let near = r#"SELECT ST_DWithin(geom, 'SRID=27700;POINT(132440.63 651435.92)', 10)::text FROM "Airport" WHERE id = 13"#;
    assert_eq!(app.db.text(near).await.as_deref(), Some("true"));

    // featurepipe's transactions: each feature is a JSON-FG document.
    let mut one = islay.clone();
    one["id"] = json!(14);
    let mut feature_collection = example("airports");
    for (f, id) in feature_collection["features"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip([21, 22, 23])
    {
        f["id"] = json!(id);
    }
    let r = session(
        &app,
        "atomic",
        vec![
            json!({"op": "insert", "collection": "Airport", "feature": one}),
            json!({"op": "insert", "collection": "Airport", "features": feature_collection}),
            json!({"op": "replace", "collection": "Airport", "id": 13, "feature": islay}),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let ids = r#"SELECT string_agg(id || ' ' || ST_AsText(geom), ', ' ORDER BY id) FROM "Airport" WHERE id IN (13, 14, 21)"#;
    assert_eq!(
        app.db.text(ids).await.as_deref(),
        Some("13 POINT(132440.63 651435.92), 14 POINT(132440.63 651435.92), 21 POINT(417057.93 1159772.2)")
    );
    // The OGC Part 11 draft: its items are JSON-FG documents each.
    let mut item = islay.clone();
    item["id"] = json!(15);
    let body = json!({"semantic": "atomic", "transaction": [
        {"action": "insert", "collection": "Airport", "items": [item]}]});
    let r = app
        .send(
            "POST",
            "/transactions",
            &[("content-type", "application/ogc-tx+json")],
            Some(body.to_string()),
        )
        .await;
    assert!(r.status.is_success(), "{r:?}");
    let fifteen = r#"SELECT ST_AsText(geom) FROM "Airport" WHERE id = 15"#;
    assert_eq!(
        app.db.text(fifteen).await.as_deref(),
        Some("POINT(132440.63 651435.92)")
    );
    // A problem in a transaction's JSON-FG points into the transaction.
    let mut wrong = islay.clone();
    wrong["id"] = json!(16);
    wrong["featureType"] = json!("Heliport");
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "insert", "collection": "Airport", "feature": wrong})],
    )
    .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/operations/0/feature/featureType",
        "{r:?}"
    );
}

#[tokio::test]
async fn a_feature_type_mismatch_is_a_422_naming_the_feature() {
    let app = app().await;
    let mut airports = example("airports");
    airports["featureType"] = json!("Heliport");
    let r = app.post("Airport", &airports).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/featureType");
    assert_eq!(r.body["errors"][0]["code"], "feature_type_mismatch");
    let mut airports = example("airports");
    airports.as_object_mut().unwrap().remove("featureType");
    airports["features"][1]["featureType"] = json!("Airport");
    airports["features"][2]["featureType"] = json!("Heliport");
    let r = app.post("Airport", &airports).await;
    assert_eq!(r.status, 422, "{r:?}");
    let errors = r.body["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{r:?}");
    assert_eq!(errors[0]["feature"], 2);
    assert_eq!(errors[0]["pointer"], "/features/2/featureType");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("'Airport'"),
        "{r:?}"
    );
    assert_eq!(app.db.int(r#"SELECT count(*) FROM "Airport""#).await, 0);
}

#[tokio::test]
async fn what_featurepipe_cannot_take_is_told_with_pointers() {
    let app = app().await;
    let post = |body: Value| {
        let app = &app;
        async move { write(app, "POST", "/collections/parcels/items", &body).await }
    };
    let feature = |members: Value| {
        let mut f = json!({"type": "Feature", "conformsTo": [CORE], "geometry": null,
                           "place": {"type": "Point", "coordinates": [500000, 5500000]},
                           "properties": {"name": "x"}});
        f.as_object_mut()
            .unwrap()
            .extend(members.as_object().unwrap().clone());
        f
    };
    for (members, status, pointer, code) in [
        (
            json!({"place": {"type": "Point", "coordinates": [1, "2"]}}),
            400,
            "/place/coordinates/1",
            "invalid_geojson",
        ),
        (
            json!({"place": {"type": "LineString", "coordinates": [[1, 2]]}}),
            422,
            "/place/coordinates",
            "too_few_positions",
        ),
        (
            json!({"coordRefSys": "http://www.opengis.net/def/crs/EPSG/0/3857"}),
            422,
            "/coordRefSys",
            "unsupported_crs",
        ),
        (
            json!({"coordRefSys": [UTM32, "http://www.opengis.net/def/crs/EPSG/0/5783"]}),
            422,
            "/coordRefSys",
            "unsupported_crs",
        ),
        (
            json!({"coordRefSys": {"type": "Reference", "href": UTM32, "epoch": 2020.5}}),
            422,
            "/coordRefSys/epoch",
            "unsupported_crs",
        ),
        (
            json!({"time": {"interval": ["2024-01-02", "x"]}}),
            422,
            "/time/interval/1",
            "invalid_time",
        ),
        (
            json!({"time": {"timestamp": "2024-01-02T10:00:00+01:00"}}),
            422,
            "/time/timestamp",
            "invalid_time",
        ),
        (
            json!({"time": {"date": "2024-01-03", "interval": ["2024-01-01", "2024-01-02"]}}),
            422,
            "/time",
            "inconsistent_time",
        ),
        (json!({"time": "2024"}), 400, "/time", "invalid_geojson"),
        (
            json!({"time": {"date": "2024-01-02"}}),
            422,
            "/time",
            "no_temporal_property",
        ),
        (
            json!({"featureType": ["parcels"]}),
            400,
            "/featureType",
            "invalid_geojson",
        ),
        (
            json!({"measures": {"enabled": true}}),
            422,
            "/measures",
            "unsupported_measures",
        ),
    ] {
        let r = post(feature(members.clone())).await;
        assert_eq!(r.status, status, "{members}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{members}: {r:?}");
        assert_eq!(r.body["errors"][0]["code"], code, "{members}: {r:?}");
    }
    // A time is ignored when asked to be lenient, and null is no time.
    let r = app
        .send(
            "POST",
            "/collections/parcels/items",
            &[("content-type", FG), ("prefer", "handling=lenient")],
            Some(feature(json!({"time": {"date": "2024-01-02"}})).to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(post(feature(json!({"time": null}))).await.status, 201);
    // Only the root names the CRS (JSON-FG /req/core/same-crs).
    let body = json!({"type": "FeatureCollection", "conformsTo": [CORE], "coordRefSys": UTM32,
                      "features": [feature(json!({"coordRefSys": EPSG4326}))]});
    let r = post(body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/features/0/coordRefSys");

    // The specification's examples of what PostGIS (or featurepipe) does
    // not store: a Polyhedron, a Prism, measures. Their CRSs (EPSG:5555,
    // EPSG:7415) are refused first; in one the collection offers, their
    // geometries and measures are.
    let r = app.post("parcels", &example("building")).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/coordRefSys");
    for (name, pointer, code) in [
        ("building", "/place/type", "unsupported_geometry_type"),
        ("pylon", "/place/type", "unsupported_geometry_type"),
        ("road-segment", "/measures", "unsupported_measures"),
    ] {
        let mut example = example(name);
        example["coordRefSys"] = json!(UTM32);
        let r = app.post("parcels", &example).await;
        assert_eq!(r.status, 422, "{name}: {r:?}");
        let pointers: Vec<&Value> = r.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["pointer"])
            .collect();
        let codes: Vec<&Value> = r.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["code"])
            .collect();
        assert!(pointers.contains(&&json!(pointer)), "{name}: {r:?}");
        assert!(codes.contains(&&json!(code)), "{name}: {r:?}");
    }
    assert_eq!(app.db.int("SELECT count(*) FROM parcels").await, 2);
}

#[tokio::test]
async fn reads_negotiate_json_fg() {
    let app = app().await;
    let accept = |value: &'static str| [("accept", value)];
    for (path, headers, expected) in [
        ("/collections/places/items", &accept(FG)[..], FG),
        (
            "/collections/places/items?f=jsonfg",
            &accept("text/html")[..],
            FG,
        ),
        ("/collections/places/items/1?f=jsonfg", &[][..], FG),
        (
            "/collections/places/items/1",
            &accept("application/fg+json, application/geo+json;q=0.9")[..],
            FG,
        ),
        (
            "/collections/places/items",
            &accept("*/*")[..],
            "application/geo+json",
        ),
        (
            "/collections/places/items",
            &accept("application/geo+json, application/fg+json;q=0.5")[..],
            "application/geo+json",
        ),
        (
            "/collections/places/items",
            &accept("text/html")[..],
            "text/html; charset=utf-8",
        ),
    ] {
        let r = app.send("GET", path, headers, None).await;
        assert_eq!(r.status, 200, "{path} {headers:?}: {r:?}");
        assert_eq!(r.headers["content-type"], expected, "{path} {headers:?}");
        assert!(
            r.headers["vary"].to_str().unwrap().contains("accept"),
            "{path}"
        );
    }
    for path in [
        "/collections/places/items?f=jsonfg&f=json",
        "/collections?f=jsonfg",
        "/collections/places?f=jsonfg",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status, 400, "{path}: {r:?}");
    }
    // Links between the formats, and JSON-FG's pages stay JSON-FG.
    let r = app.get("/collections/places/items?limit=1").await;
    let fg_link = r.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["type"] == FG)
        .cloned();
    assert_eq!(
        fg_link.as_ref().map(|l| &l["rel"]),
        Some(&json!("alternate")),
        "{r:?}"
    );
    let r = app
        .post("places", &json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1, 2]}, "properties": {"name": "two"}}))
        .await;
    assert_eq!(r.status, 201);
    let r = read_fg(&app, "/collections/places/items?limit=1").await;
    let links = r.body["links"].as_array().unwrap();
    let link = |rel: &str, media_type: &str| {
        links
            .iter()
            .find(|l| l["rel"] == rel && l["type"] == media_type)
            .map(|l| l["href"].as_str().unwrap().to_owned())
    };
    assert!(link("self", FG).unwrap().contains("f=jsonfg"), "{links:?}");
    assert!(link("next", FG).unwrap().contains("f=jsonfg"), "{links:?}");
    assert!(
        link("alternate", "application/geo+json").is_some(),
        "{links:?}"
    );
    assert!(link("alternate", "text/html").is_some(), "{links:?}");
    // EPSG:4326 is the storage CRS: latitude first.
    assert_eq!(r.body["coordRefSys"], EPSG4326);
    assert_eq!(
        r.body["features"][0]["place"]["coordinates"],
        json!([50.7, 7.1])
    );
    assert_eq!(
        r.body["features"][0]["geometry"]["coordinates"],
        json!([7.1, 50.7])
    );
    let r = app.get("/collections/places").await;
    let items = r.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["rel"] == "items" && l["type"] == FG);
    assert!(items, "{r:?}");
    let r = app.get("/conformance").await;
    let classes = r.body["conformsTo"].as_array().unwrap();
    assert!(
        classes.contains(&json!(CORE)) && classes.contains(&json!(TYPES)),
        "{r:?}"
    );
    let others = classes
        .iter()
        .filter(|c| c.as_str().unwrap().contains("json-fg"))
        .count();
    assert_eq!(others, 2, "only Core and Feature Types are declared");
}

#[tokio::test]
async fn what_is_served_is_valid_json_fg_by_its_schemas() {
    let app = app().await;
    assert_eq!(app.post("Airport", &example("airports")).await.status, 201);
    let shapes = json!({"type": "FeatureCollection", "conformsTo": [CORE], "coordRefSys": UTM32,
        "features": [
            {"type": "Feature", "geometry": null, "properties": {"name": "l"},
             "place": {"type": "LineString", "coordinates": [[500000, 5500000], [500100, 5500100]]}},
            {"type": "Feature", "geometry": null, "properties": null,
             "place": {"type": "MultiPolygon", "coordinates": [[[[500000, 5500000], [500010, 5500000], [500010, 5500010], [500000, 5500000]]]]}},
            {"type": "Feature", "geometry": null, "place": null, "properties": {"name": "none"}}]});
    let r = write(&app, "POST", "/collections/parcels/items", &shapes).await;
    assert_eq!(r.status, 201, "{r:?}");
    let served = Served::start(&app).await;
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    let urls: Vec<String> = [
        "/collections/Airport/items",
        "/collections/Airport/items/46",
        "/collections/Airport/items?crs=http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FOGC%2F1.3%2FCRS84",
        "/collections/parcels/items",
        "/collections/parcels/items/1",
        "/collections/places/items",
    ]
    .iter()
    .map(|path| format!("{}{path}", served.url))
    .collect();
    let mut args = vec!["tests/clients/jsonfg_check.py", "tests/jsonfg"];
    args.extend(urls.iter().map(String::as_str));
    let out = run(&python, &args).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), urls.len().to_string());
}
