//! Every geometry type, 3D, Multi promotion, SRID transform, geography.

use serde_json::{json, Value};

use crate::support::TestApp;

fn feature(geometry: Value) -> Value {
    json!({"type": "Feature", "geometry": geometry, "properties": {}})
}

const TABLES: &str = "
    CREATE TABLE g_point (id serial PRIMARY KEY, geom geometry(Point, 4326));
    CREATE TABLE g_line (id serial PRIMARY KEY, geom geometry(LineString, 4326));
    CREATE TABLE g_poly (id serial PRIMARY KEY, geom geometry(Polygon, 4326));
    CREATE TABLE g_mpoint (id serial PRIMARY KEY, geom geometry(MultiPoint, 4326));
    CREATE TABLE g_mline (id serial PRIMARY KEY, geom geometry(MultiLineString, 4326));
    CREATE TABLE g_mpoly (id serial PRIMARY KEY, geom geometry(MultiPolygon, 4326));
    CREATE TABLE g_coll (id serial PRIMARY KEY, geom geometry(GeometryCollection, 4326));
    CREATE TABLE g_pointz (id serial PRIMARY KEY, geom geometry(PointZ, 4326));
    CREATE TABLE g_mpolyz (id serial PRIMARY KEY, geom geometry(MultiPolygonZ, 4326));
    CREATE TABLE g_any (id serial PRIMARY KEY, geom geometry);
    CREATE TABLE g_geog (id serial PRIMARY KEY, geog geography(Point, 4326));
    CREATE TABLE g_merc (id serial PRIMARY KEY, geom geometry(Point, 3857));
";

async fn write_and_read(app: &TestApp, table: &str, geometry: Value, column: &str) -> String {
    let r = app.post(table, &feature(geometry)).await;
    assert_eq!(r.status, 201, "{table}: {r:?}");
    let id = &r.body["ids"][0];
    app.db
        .text(&format!(
            "SELECT ST_AsEWKT({column}::geometry) FROM {table} WHERE id = {id}"
        ))
        .await
        .unwrap()
}

#[tokio::test]
async fn every_geometry_type_lands_as_written() {
    let app = TestApp::new(TABLES).await;
    let square = json!([[[0, 0], [1, 0], [1, 1], [0, 0]]]);
    let cases = [
        (
            "g_point",
            json!({"type": "Point", "coordinates": [1.5, 2]}),
            "SRID=4326;POINT(1.5 2)",
        ),
        (
            "g_line",
            json!({"type": "LineString", "coordinates": [[0, 0], [1, 1]]}),
            "SRID=4326;LINESTRING(0 0,1 1)",
        ),
        (
            "g_poly",
            json!({"type": "Polygon", "coordinates": square}),
            "SRID=4326;POLYGON((0 0,1 0,1 1,0 0))",
        ),
        (
            "g_mpoint",
            json!({"type": "MultiPoint", "coordinates": [[0, 0], [1, 1]]}),
            "SRID=4326;MULTIPOINT(0 0,1 1)",
        ),
        (
            "g_mline",
            json!({"type": "MultiLineString", "coordinates": [[[0, 0], [1, 1]], [[2, 2], [3, 3]]]}),
            "SRID=4326;MULTILINESTRING((0 0,1 1),(2 2,3 3))",
        ),
        (
            "g_mpoly",
            json!({"type": "MultiPolygon", "coordinates": [square]}),
            "SRID=4326;MULTIPOLYGON(((0 0,1 0,1 1,0 0)))",
        ),
        (
            "g_coll",
            json!({"type": "GeometryCollection", "geometries": [
                {"type": "Point", "coordinates": [0, 0]},
                {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}
            ]}),
            "SRID=4326;GEOMETRYCOLLECTION(POINT(0 0),LINESTRING(0 0,1 1))",
        ),
        (
            "g_pointz",
            json!({"type": "Point", "coordinates": [1, 2, 3]}),
            "SRID=4326;POINT(1 2 3)",
        ),
        (
            "g_mpolyz",
            json!({"type": "Polygon", "coordinates": [[[0, 0, 5], [1, 0, 5], [1, 1, 5], [0, 0, 5]]]}),
            "SRID=4326;MULTIPOLYGON(((0 0 5,1 0 5,1 1 5,0 0 5)))",
        ),
        // Promotion of a single geometry to the column's Multi type.
        (
            "g_mpoint",
            json!({"type": "Point", "coordinates": [4, 5]}),
            "SRID=4326;MULTIPOINT(4 5)",
        ),
        (
            "g_mline",
            json!({"type": "LineString", "coordinates": [[0, 0], [1, 1]]}),
            "SRID=4326;MULTILINESTRING((0 0,1 1))",
        ),
        // An unconstrained column takes anything, 2D or 3D.
        (
            "g_any",
            json!({"type": "LineString", "coordinates": [[0, 0, 1], [1, 1, 2]]}),
            "SRID=4326;LINESTRING(0 0 1,1 1 2)",
        ),
        (
            "g_any",
            json!({"type": "Point", "coordinates": []}),
            "SRID=4326;POINT EMPTY",
        ),
    ];
    for (table, geometry, expected) in cases {
        let column = "geom";
        assert_eq!(
            write_and_read(&app, table, geometry, column).await,
            expected,
            "{table}"
        );
    }
    assert_eq!(
        write_and_read(
            &app,
            "g_geog",
            json!({"type": "Point", "coordinates": [10, 50]}),
            "geog"
        )
        .await,
        "SRID=4326;POINT(10 50)"
    );
}

#[tokio::test]
async fn input_is_transformed_to_the_column_srid() {
    let app = TestApp::new(TABLES).await;
    let r = app
        .post(
            "g_merc",
            &feature(json!({"type": "Point", "coordinates": [10, 50]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let row = app
        .db
        .client
        .query_one(
            "SELECT ST_SRID(geom), ST_X(geom), ST_Y(geom) FROM g_merc",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 3857);
    assert!((row.get::<_, f64>(1) - 1_113_194.907_932_735_7).abs() < 0.01);
    assert!((row.get::<_, f64>(2) - 6_446_275.841_017_161).abs() < 0.01);
}

#[tokio::test]
async fn null_geometry_is_null() {
    let app = TestApp::new(TABLES).await;
    let r = app.post("g_point", &feature(Value::Null)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM g_point WHERE geom IS NULL")
            .await,
        1
    );
}
