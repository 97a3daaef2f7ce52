//! JSON-FG (OGC Features and Geometries JSON 1.0): the specification's
//! examples written through the service and read back as JSON-FG and
//! GeoJSON, checked in the table; `place` in projected CRSs; what featurepipe
//! refuses (with pointers); content negotiation on reads and on the answers
//! of writes; `time` stored in the temporal columns the settings name, and
//! `featureType` as they name it; and what it serves validated by
//! python-jsonschema against the specification's schemas.

use serde_json::{json, Value};

use crate::sessions::session;
use crate::support::{run, settings_file, start_up_error, Served, TestApp, TestResponse};

const SETUP: &str = r#"
    CREATE TABLE "Airport" (id int PRIMARY KEY, name text, geom geometry(Point, 27700));
    CREATE TABLE parcels (gid serial PRIMARY KEY, name text, geom geometry(Geometry, 25832));
    CREATE TABLE places (id serial PRIMARY KEY, name text NOT NULL, geom geometry(Point, 4326));
    INSERT INTO places (name, geom) VALUES ('bonn', 'SRID=4326;POINT(7.1 50.7)');
    CREATE TABLE sightings (id serial PRIMARY KEY, name text, observed timestamptz,
                            geom geometry(Point, 4326));
    CREATE TABLE events (id serial PRIMARY KEY, name text, starts date, ends date DEFAULT '2100-01-01',
                         geom geometry(Point, 4326));
    CREATE TABLE uk_airports (id int PRIMARY KEY, name text, geom geometry(Point, 27700));
    -- Reads must say UTC whatever the session's time zone.
    DO $$ BEGIN
      EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'Asia/Kolkata');
    END $$;
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

/// The settings of [`SETUP`]'s collections: `places` offers UTM zone 32
/// too, `sightings` and `events` store `time`, `uk_airports` holds Airports.
const SETTINGS: &str = r#"
    [collections.places]
    crs = ["http://www.opengis.net/def/crs/EPSG/0/25832"]
    [collections.sightings]
    time = "observed"
    [collections.events]
    time = ["starts", "ends"]
    [collections.uk_airports]
    feature_type = "Airport"
"#;

/// The app on [`SETUP`] with [`SETTINGS`].
async fn app() -> TestApp {
    let path = settings_file("jsonfg", SETTINGS);
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
        // Clients choose this table's keys: the key is a property too.
        let mut properties = read["properties"].clone();
        assert_eq!(properties["id"], given["id"], "{read}");
        properties.as_object_mut().unwrap().remove("id");
        assert_eq!(properties, given["properties"]);
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
    // A merge patch that says JSON-FG by its profile is read as JSON-FG, not
    // as GeoJSON that ignores `place` (and says 204, having done nothing).
    let profiled =
        "application/merge-patch+json; profile=\"http://www.opengis.net/def/profile/OGC/0/jsonfg\"";
    let place =
        json!({"coordRefSys": BNG, "place": {"type": "Point", "coordinates": [132001, 651001]}});
    let r = app
        .send(
            "PATCH",
            "/collections/Airport/items/13",
            &[("content-type", profiled)],
            Some(place.to_string()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db.text(at).await.as_deref(),
        Some("POINT(132001 651001) Islay")
    );
    // So is GeoJSON with the profile (the media type was lowercased before
    // the profile's URI, with its "OGC", was compared).
    let mut put = islay.clone();
    put["place"]["coordinates"] = json!([132002, 651002]);
    let geojson = profiled.replace("merge-patch", "geo");
    let r = app
        .send(
            "PUT",
            "/collections/Airport/items/13",
            &[("content-type", geojson.as_str())],
            Some(put.to_string()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db.text(at).await.as_deref(),
        Some("POINT(132002 651002) Islay Airport")
    );
    // OPTIONS names both patch formats.
    let r = app
        .send("OPTIONS", "/collections/Airport/items/13", &[], None)
        .await;
    assert_eq!(
        r.headers["accept-patch"],
        "application/merge-patch+json, application/fg+json"
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
        (
            json!({"measures": "yes"}),
            400,
            "/measures",
            "invalid_geojson",
        ),
        (
            json!({"measures": {"enabled": "true"}}),
            400,
            "/measures/enabled",
            "invalid_geojson",
        ),
        // Year 0000 is 1 BC to PostgreSQL, which no RFC 3339 text reads back as.
        (
            json!({"time": {"timestamp": "0000-01-01T00:00:00Z"}}),
            422,
            "/time/timestamp",
            "invalid_time",
        ),
        (
            json!({"time": {"interval": ["0000-12-31", ".."]}}),
            422,
            "/time/interval/0",
            "invalid_time",
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
    assert_eq!(
        others, 4,
        "only Core, Feature Types, Web APIs and profiles are declared"
    );
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
    for (collection, time) in [
        ("sightings", json!({"timestamp": "2024-05-01T12:30:00.25Z"})),
        ("sightings", json!(null)),
        ("events", json!({"interval": ["2024-01-01", ".."]})),
        ("events", json!({"date": "2024-03-01"})),
    ] {
        let feature = json!({"type": "Feature", "conformsTo": [CORE], "time": time,
            "geometry": {"type": "Point", "coordinates": [7.1, 50.7]}, "properties": {}});
        let path = format!("/collections/{collection}/items");
        let r = write(&app, "POST", &path, &feature).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
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
        "/collections/sightings/items",
        "/collections/events/items",
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

/// `member` of each feature of the FeatureCollection `body`.
fn each<'a>(body: &'a Value, member: &str) -> Vec<&'a Value> {
    let features = body["features"].as_array().expect("features");
    features.iter().map(|f| &f[member]).collect()
}

/// A JSON-FG feature of `sightings` or `events` at Bonn.
fn timed(time: Value, properties: Value) -> Value {
    json!({"type": "Feature", "conformsTo": [CORE], "time": time,
           "geometry": {"type": "Point", "coordinates": [7.1, 50.7]}, "properties": properties})
}

#[tokio::test]
async fn time_is_stored_in_the_temporal_columns_and_read_back() {
    let app = app().await;
    let observed = "SELECT string_agg(id || ' ' || coalesce((observed AT TIME ZONE 'UTC')::text, 'null'), ', ' ORDER BY id) FROM sightings";
    for time in [
        json!({"timestamp": "2024-05-01T12:30:00.25Z"}),
        // The date a timestamp falls on may be given with it.
        json!({"timestamp": "2024-05-02T00:00:00Z", "date": "2024-05-02"}),
        json!(null),
    ] {
        let r = write(
            &app,
            "POST",
            "/collections/sightings/items",
            &timed(time, json!({"name": "s"})),
        )
        .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // Under Prefer: handling=lenient, what the columns cannot hold is ignored.
    let r = app
        .send(
            "POST",
            "/collections/sightings/items",
            &[("content-type", FG), ("prefer", "handling=lenient")],
            Some(
                timed(
                    json!({"interval": ["2024-01-01T00:00:00Z", ".."]}),
                    json!({}),
                )
                .to_string(),
            ),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    // GeoJSON writes the column as a property, in any offset.
    let geojson = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [7.1, 50.7]},
                         "properties": {"observed": "2024-05-03T12:00:00+02:00"}});
    assert_eq!(app.post("sightings", &geojson).await.status, 201);
    assert_eq!(
        app.db.text(observed).await.as_deref(),
        Some("1 2024-05-01 12:30:00.25, 2 2024-05-02 00:00:00, 3 null, 4 null, 5 2024-05-03 10:00:00")
    );

    // JSON-FG reads them as `time`, in UTC, and not as properties; GeoJSON
    // as properties (it has no `time`).
    let r = read_fg(&app, "/collections/sightings/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        each(&r.body, "time"),
        [
            &json!({"timestamp": "2024-05-01T12:30:00.25Z"}),
            &json!({"timestamp": "2024-05-02T00:00:00Z"}),
            &json!(null),
            &json!(null),
            &json!({"timestamp": "2024-05-03T10:00:00Z"}),
        ]
    );
    assert_eq!(r.body["features"][0]["properties"], json!({"name": "s"}));
    let r = app.get("/collections/sightings/items/1").await;
    assert!(r.body["properties"]["observed"].is_string(), "{r:?}");

    // An interval: `..` is NULL and back; an instant fills both ends.
    let dates = "SELECT string_agg(id || ' ' || coalesce(starts::text, 'null') || ' ' || coalesce(ends::text, 'null'), ', ' ORDER BY id) FROM events";
    for time in [
        json!({"interval": ["2024-01-01", ".."]}),
        json!({"interval": ["..", "2024-02-01"]}),
        json!({"date": "2024-03-01"}),
    ] {
        let r = write(
            &app,
            "POST",
            "/collections/events/items",
            &timed(time, json!({})),
        )
        .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // `"time": null` is NULL; without `time` the columns take their defaults.
    let r = write(
        &app,
        "POST",
        "/collections/events/items",
        &timed(Value::Null, json!({})),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let mut untimed = timed(Value::Null, json!({}));
    untimed.as_object_mut().unwrap().remove("time");
    let r = write(&app, "POST", "/collections/events/items", &untimed).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        app.db.text(dates).await.as_deref(),
        Some("1 2024-01-01 null, 2 null 2024-02-01, 3 2024-03-01 2024-03-01, 4 null null, 5 null 2100-01-01")
    );
    let r = read_fg(&app, "/collections/events/items").await;
    assert_eq!(
        each(&r.body, "time"),
        [
            &json!({"interval": ["2024-01-01", ".."]}),
            &json!({"interval": ["..", "2024-02-01"]}),
            &json!({"interval": ["2024-03-01", "2024-03-01"]}),
            &json!(null),
            &json!({"interval": ["..", "2100-01-01"]}),
        ]
    );

    // A merge patch changes the time only when it gives one.
    let r = write(
        &app,
        "PATCH",
        "/collections/events/items/3",
        &json!({"time": {"interval": ["2024-03-01", "2024-03-05"]}}),
    )
    .await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = write(
        &app,
        "PATCH",
        "/collections/events/items/3",
        &json!({"conformsTo": [CORE], "properties": {"name": "fair"}}),
    )
    .await;
    assert_eq!(r.status, 204, "{r:?}");
    let three = "SELECT name || ' ' || starts || ' ' || ends FROM events WHERE id = 3";
    assert_eq!(
        app.db.text(three).await.as_deref(),
        Some("fair 2024-03-01 2024-03-05")
    );

    // `datetime` selects by the temporal columns (a date is its day; open
    // ends are open; no time matches nothing).
    for (query, ids) in [
        (
            "/collections/sightings/items?datetime=2024-05-01",
            json!([1]),
        ),
        (
            "/collections/sightings/items?datetime=2024-05-02T00:00:00Z/..",
            json!([2, 5]),
        ),
        (
            "/collections/sightings/items?datetime=../2024-05-02T07:00:00%2B07:00",
            json!([1, 2]),
        ),
        (
            "/collections/events/items?datetime=2024-03-03",
            json!([1, 3, 5]),
        ),
        (
            "/collections/events/items?datetime=2023-12-01/2024-01-15",
            json!([1, 2, 5]),
        ),
        // No temporal property: every feature.
        ("/collections/places/items?datetime=1999-01-01", json!([1])),
    ] {
        let r = app.get(query).await;
        assert_eq!(r.status, 200, "{query}: {r:?}");
        assert_eq!(json!(each(&r.body, "id")), ids, "{query}");
        assert_eq!(
            r.body["numberMatched"],
            json!(ids.as_array().unwrap().len()),
            "{query}"
        );
    }
    // The schema says which columns hold the time.
    let r = app.get("/collections/events/schema").await;
    assert_eq!(
        r.body["properties"]["starts"]["x-ogc-role"], "primary-interval-start",
        "{r:?}"
    );
    assert_eq!(
        r.body["properties"]["ends"]["x-ogc-role"],
        "primary-interval-end"
    );
    let r = app.get("/collections/sightings/schema").await;
    assert_eq!(
        r.body["properties"]["observed"]["x-ogc-role"],
        "primary-instant"
    );
}

#[tokio::test]
async fn times_no_rfc_3339_text_can_say_are_read_as_unknown() {
    let app = app().await;
    // Written by plain SQL: before year 1, or past year 9999.
    app.db
        .client
        .batch_execute(
            "INSERT INTO sightings (observed, geom) VALUES
               ('0001-01-01 00:00:00+00 BC', 'SRID=4326;POINT(7 50)'),
               ('10000-01-01 00:00:00+00', 'SRID=4326;POINT(7 50)');
             INSERT INTO events (starts, ends, geom) VALUES
               ('0044-03-15 BC', '2024-01-01', 'SRID=4326;POINT(7 50)'),
               ('2024-01-01', '12024-01-01', 'SRID=4326;POINT(7 50)')",
        )
        .await
        .unwrap();
    let r = read_fg(&app, "/collections/sightings/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(each(&r.body, "time"), [&json!(null), &json!(null)]);
    let r = read_fg(&app, "/collections/events/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        each(&r.body, "time"),
        [
            &json!({"interval": ["..", "2024-01-01"]}),
            &json!({"interval": ["2024-01-01", ".."]}),
        ]
    );
}

#[tokio::test]
async fn a_time_the_columns_cannot_hold_is_a_422_at_its_member() {
    let app = app().await;
    for (collection, time, properties, pointer, code) in [
        (
            "sightings",
            json!({"date": "2024-05-01"}),
            json!({}),
            "/time/date",
            "unstorable_time",
        ),
        (
            "sightings",
            json!({"interval": ["2024-05-01T00:00:00Z", ".."]}),
            json!({}),
            "/time/interval",
            "unstorable_time",
        ),
        (
            "events",
            json!({"interval": ["2024-05-01T00:00:00Z", ".."]}),
            json!({}),
            "/time/interval/0",
            "unstorable_time",
        ),
        (
            "events",
            json!({"timestamp": "2024-05-01T00:00:00Z"}),
            json!({}),
            "/time/timestamp",
            "unstorable_time",
        ),
        // The same column given twice.
        (
            "sightings",
            json!({"timestamp": "2024-05-01T00:00:00Z"}),
            json!({"observed": "2024-05-01T00:00:00Z"}),
            "/properties/observed",
            "time_conflict",
        ),
        (
            "sightings",
            json!(null),
            json!({"observed": "2024-05-01T00:00:00Z"}),
            "/properties/observed",
            "time_conflict",
        ),
    ] {
        let path = format!("/collections/{collection}/items");
        let r = write(&app, "POST", &path, &timed(time.clone(), properties)).await;
        assert_eq!(r.status, 422, "{time}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{time}: {r:?}");
        assert_eq!(r.body["errors"][0]["code"], code, "{time}: {r:?}");
    }
    // In a collection, the pointer names the feature.
    let body = json!({"type": "FeatureCollection", "conformsTo": [CORE], "features": [
        timed(json!({"timestamp": "2024-05-01T00:00:00Z"}), json!({})),
        timed(json!({"date": "2024-05-01"}), json!({}))]});
    let r = write(&app, "POST", "/collections/sightings/items", &body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/features/1/time/date");
    assert_eq!(app.db.int("SELECT count(*) FROM sightings").await, 0);
    assert_eq!(app.db.int("SELECT count(*) FROM events").await, 0);
}

#[tokio::test]
async fn time_settings_the_tables_cannot_honour_stop_start_up() {
    for (time, expected) in [
        (
            "\"nope\"",
            "'sightings': time names 'nope', which is not a column",
        ),
        (
            "\"name\"",
            "which is of type text, not date, timestamp or timestamptz",
        ),
        (
            "[\"observed\", \"observed\"]",
            "as both the start and the end",
        ),
        ("[\"observed\", \"id\"]", "'id', which is of type integer"),
        (
            "42",
            "time is a column name, or the [start, end] column names",
        ),
    ] {
        let text = format!("[collections.sightings]\ntime = {time}\n");
        let path = settings_file(&format!("time-{}", time.len()), &text);
        let message = start_up_error(SETUP, path.clone(), false).await;
        assert!(message.contains(expected), "{time}: {message}");
        std::fs::remove_file(path).ok();
    }
    let text = "[collections.sightings]\ntime = [\"day\", \"observed\"]\n";
    let path = settings_file("time-kinds", text);
    let setup = format!("{SETUP} ALTER TABLE sightings ADD day date;");
    let message = start_up_error(&setup, path.clone(), false).await;
    assert!(
        message.contains("must both be dates or both timestamps"),
        "{message}"
    );
    std::fs::remove_file(path).ok();
}

#[tokio::test]
async fn writes_answer_json_fg_as_accept_or_the_body_says() {
    let app = app().await;
    let (islay, islay_wgs84) = islay();
    let representation = [("content-type", FG), ("prefer", "return=representation")];
    let r = app
        .send(
            "POST",
            "/collections/Airport/items",
            &representation,
            Some(islay.to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.headers["content-crs"], format!("<{BNG}>"));
    assert_eq!(r.headers["preference-applied"], "return=representation");
    assert_eq!(r.body["conformsTo"], json!([CORE, TYPES]));
    assert_eq!(r.body["coordRefSys"], BNG);
    assert_eq!(r.body["featureType"], "Airport");
    assert_eq!(r.body["id"], 13);
    assert_eq!(r.body["place"], islay["place"]);
    assert!(
        close(&r.body["geometry"]["coordinates"], &islay_wgs84, 1e-4),
        "{r:?}"
    );
    assert!(r.headers.contains_key("etag"));

    // Accept asks for GeoJSON: GeoJSON, in the CRS the body was sent in.
    let mut replaced = islay.clone();
    replaced["properties"]["name"] = json!("Islay");
    let geojson_please = [
        ("content-type", FG),
        ("prefer", "return=representation"),
        ("accept", "application/geo+json"),
    ];
    let r = app
        .send(
            "PUT",
            "/collections/Airport/items/13",
            &geojson_please,
            Some(replaced.to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/geo+json");
    assert_eq!(r.headers["content-crs"], format!("<{BNG}>"));
    assert_eq!(r.body["geometry"], islay["place"]);
    assert!(r.body.get("place").is_none(), "{r:?}");

    // PATCH and PUT of JSON-FG answer JSON-FG.
    let patch =
        json!({"conformsTo": [CORE], "coordRefSys": BNG, "properties": {"name": "Port Ellen"}});
    let r = app
        .send(
            "PATCH",
            "/collections/Airport/items/13",
            &representation,
            Some(patch.to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.body["properties"]["name"], "Port Ellen");
    assert_eq!(r.body["place"], islay["place"]);
    let mut fourteen = islay.clone();
    fourteen["id"] = json!(14);
    let r = app
        .send(
            "PUT",
            "/collections/Airport/items/14",
            &representation,
            Some(fourteen.to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.body["place"], islay["place"]);

    // GeoJSON sent, JSON-FG accepted: in CRS84 `place` is null.
    let feature = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [7.0, 50.0]}, "properties": {"name": "x"}});
    let fg_please = [
        ("content-type", "application/geo+json"),
        ("prefer", "return=representation"),
        ("accept", FG),
    ];
    let r = app
        .send(
            "POST",
            "/collections/places/items",
            &fg_please,
            Some(feature.to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.headers["content-type"], FG);
    assert_eq!(r.body["coordRefSys"], CRS84);
    assert_eq!(r.body["place"], Value::Null);
    assert_eq!(r.body["geometry"]["coordinates"], json!([7, 50]));

    // Under an Idempotency-Key the answer is made in the write's
    // transaction and replayed as it was: JSON-FG, with the time.
    let keyed = [
        ("content-type", FG),
        ("prefer", "return=representation"),
        ("idempotency-key", "sighting-1"),
    ];
    let body = timed(
        json!({"timestamp": "2024-05-01T12:30:00Z"}),
        json!({"name": "owl"}),
    )
    .to_string();
    let first = app
        .send(
            "POST",
            "/collections/sightings/items",
            &keyed,
            Some(body.clone()),
        )
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(first.headers["content-type"], FG);
    assert_eq!(
        first.body["time"],
        json!({"timestamp": "2024-05-01T12:30:00Z"})
    );
    assert_eq!(first.body["properties"], json!({"name": "owl"}));
    let again = app
        .send("POST", "/collections/sightings/items", &keyed, Some(body))
        .await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.headers["content-type"], FG);
    assert_eq!(again.body, first.body);
    assert_eq!(app.db.int("SELECT count(*) FROM sightings").await, 1);
}

#[tokio::test]
async fn the_feature_type_setting_names_the_type() {
    let app = app().await;
    // The specification's airports are Airports: uk_airports holds them.
    let r = app.post("uk_airports", &example("airports")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let mut own_id = example("airports");
    own_id["featureType"] = json!("uk_airports");
    let r = app.post("uk_airports", &own_id).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "feature_type_mismatch");
    assert!(
        r.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("type 'Airport'"),
        "{r:?}"
    );
    let r = read_fg(&app, "/collections/uk_airports/items").await;
    assert_eq!(r.body["featureType"], "Airport");
    let r = read_fg(&app, "/collections/uk_airports/items/46").await;
    assert_eq!(r.body["featureType"], "Airport");
    // Without the setting, the type is the collection's id.
    let r = read_fg(&app, "/collections/places/items").await;
    assert_eq!(r.body["featureType"], "places");
}

/// The `Link` header that names profile `token`.
fn profile_link(token: &str) -> String {
    format!("<http://www.opengis.net/def/profile/OGC/0/{token}>; rel=\"profile\"")
}

#[tokio::test]
async fn json_fg_in_web_apis_the_profile_parameter_and_profile_links() {
    let app = app().await;
    // A feature without conformsTo: only the Link header says it is JSON-FG.
    let mut islay = islay().0;
    islay.as_object_mut().unwrap().remove("conformsTo");
    let declared = profile_link("jsonfg");
    let headers = [
        ("content-type", "application/geo+json"),
        ("link", declared.as_str()),
        ("prefer", "return=representation"),
    ];
    let r = app
        .send(
            "POST",
            "/collections/uk_airports/items",
            &headers,
            Some(islay.to_string()),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        r.headers["link"], declared,
        "a write answers in its body's profile"
    );
    let stored = app
        .db
        .text("SELECT ST_AsText(geom) FROM uk_airports WHERE id = 13")
        .await;
    assert_eq!(stored.as_deref(), Some("POINT(132440.63 651435.92)"));

    let geojson = [("accept", "application/geo+json")];
    let get = |path: String| {
        let app = &app;
        async move { app.send("GET", &path, &geojson, None).await }
    };
    for (query, token) in [
        ("profile=jsonfg", "jsonfg"),
        ("profile=jsonfg-plus", "jsonfg-plus"),
        (
            "profile=http%3A%2F%2Fwww.opengis.net%2Fdef%2Fprofile%2FOGC%2F0%2Fjsonfg",
            "jsonfg",
        ),
    ] {
        for path in [
            format!("/collections/uk_airports/items?{query}"),
            format!("/collections/uk_airports/items/13?{query}"),
        ] {
            let r = get(path.clone()).await;
            assert_eq!(r.status, 200, "{path}: {r:?}");
            // JSON-FG 1.0 is GeoJSON's media type with a profile.
            assert_eq!(r.headers["content-type"], "application/geo+json", "{path}");
            assert_eq!(r.headers["link"], profile_link(token), "{path}");
            assert!(
                r.body["conformsTo"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(CORE)),
                "{path}"
            );
            let features = match r.body["features"].as_array() {
                Some(features) => features.clone(),
                None => vec![r.body.clone()],
            };
            for f in &features {
                // jsonfg-plus: a place always has a geometry beside it.
                assert!(
                    !f["place"].is_null() && !f["geometry"].is_null(),
                    "{path}: {f}"
                );
            }
        }
    }
    // A page says its profile in its links too, and its pages keep it.
    let r = get("/collections/uk_airports/items?profile=jsonfg&limit=1".into()).await;
    let links = r.body["links"].as_array().unwrap();
    let profile = links.iter().find(|l| l["rel"] == "profile").unwrap();
    assert_eq!(
        profile["href"],
        "http://www.opengis.net/def/profile/OGC/0/jsonfg"
    );
    // Plain GeoJSON, asked or by default: no place, no JSON-FG conformsTo.
    for path in [
        "/collections/uk_airports/items?profile=rfc7946",
        "/collections/uk_airports/items",
        "/collections/uk_airports/items/13",
    ] {
        let r = get(path.into()).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/geo+json");
        assert_eq!(r.headers["link"], profile_link("rfc7946"), "{path}");
        assert!(r.body.get("conformsTo").is_none(), "{path}");
        assert!(!r.body.to_string().contains("\"place\""), "{path}: {r:?}");
    }
    let r = app
        .send(
            "HEAD",
            "/collections/uk_airports/items?profile=jsonfg",
            &geojson,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["link"], profile_link("jsonfg"));
    for bad in [
        "profile=geojson",
        "profile=jsonfg,rfc7946",
        "f=jsonfg&profile=rfc7946",
    ] {
        let r = get(format!("/collections/uk_airports/items?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(
            r.body["detail"].as_str().unwrap().contains("profile"),
            "{bad}: {r:?}"
        );
    }
    let r = app.get("/conformance").await;
    let classes = r.body["conformsTo"].as_array().unwrap();
    for class in [
        "http://www.opengis.net/spec/json-fg-1/1.0/conf/api",
        "http://www.opengis.net/spec/json-fg-1/1.0/conf/profiles",
    ] {
        assert!(classes.contains(&json!(class)), "{class}");
    }
}
