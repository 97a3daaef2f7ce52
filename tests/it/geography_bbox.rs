//! `bbox` on a geography column means the longitude/latitude box, as on a
//! geometry column: not a polygon with great-circle edges. The spatial
//! index of the column still serves.

use serde_json::Value;

use featurepipe::read::cover::covering_points;
use featurepipe::read::sql::bbox_intersects;

use crate::support::TestApp;

const SETUP: &str = "
    CREATE TABLE geo (id serial PRIMARY KEY, name text, geog geography(Point, 4326));
    CREATE INDEX geo_geog_idx ON geo USING gist (geog);
    INSERT INTO geo (name, geog) VALUES
        -- Inside the box; the box's southern edge as a great circle bulges
        -- north to 65.8 degrees at longitude 0 and left it out.
        ('in_south', 'SRID=4326;POINT(0 56)'),
        ('in_corner', 'SRID=4326;POINT(49.9 60.4)'),
        -- North of the box, yet inside the great-circle polygon (65.8 to 70).
        ('out_north', 'SRID=4326;POINT(0 67)'),
        ('out_east', 'SRID=4326;POINT(50.1 58)'),
        ('south_pole', 'SRID=4326;POINT(0 -90)');
";

const BOX: [f64; 4] = [-50.0, 55.0, 50.0, 60.5];

fn names(r: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = r["features"]
        .as_array()
        .unwrap_or_else(|| panic!("no features: {r}"))
        .iter()
        .map(|f| f["properties"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn a_geography_bbox_is_the_longitude_latitude_box() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections/geo/items?bbox=-50,55,50,60.5").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(names(&r.body), ["in_corner", "in_south"]);
    // The whole world: every feature, no "antipodal edge" error.
    let r = app.get("/collections/geo/items?bbox=-180,-90,180,90").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["numberMatched"], 5, "{r:?}");
    // Across the antimeridian, and a box around a pole.
    let r = app.get("/collections/geo/items?bbox=170,50,-170,70").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["numberMatched"], 0, "{r:?}");
    let r = app
        .get("/collections/geo/items?bbox=-180,-90,180,-89")
        .await;
    assert_eq!(names(&r.body), ["south_pole"]);
}

#[tokio::test]
async fn a_geography_bbox_uses_the_spatial_index() {
    let app = TestApp::new(SETUP).await;
    let coll = app
        .state
        .catalog()
        .get("geo")
        .cloned()
        .expect("geo is a collection");
    let (condition, covered) = bbox_intersects(&coll, 1, 4326, false);
    assert!(covered, "{condition}");
    let sql = format!("EXPLAIN SELECT count(*) FROM public.geo AS t WHERE {condition}");
    let client = &app.db.client;
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .unwrap();
    let [x0, y0, x1, y1] = BOX;
    let points = covering_points(BOX);
    let plan: Vec<String> = client
        .query(&sql, &[&x0, &y0, &x1, &y1, &points])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("geo_geog_idx"), "{plan}");
    // The condition as planned finds what the service answers.
    let count = format!("SELECT count(*) FROM public.geo AS t WHERE {condition}");
    let row = client
        .query_one(&count, &[&x0, &y0, &x1, &y1, &points])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
}

#[tokio::test]
async fn a_geography_line_along_a_parallel_is_in_a_box_on_it() {
    let app = TestApp::new(
        "CREATE TABLE routes (id serial PRIMARY KEY, name text, geog geography(LineString, 4326));
         CREATE INDEX routes_geog_idx ON routes USING gist (geog);
         INSERT INTO routes (name, geog) VALUES
             ('along_60', 'SRID=4326;LINESTRING(-50 60, 50 60)'),
             ('along_50', 'SRID=4326;LINESTRING(-50 50, 50 50)');",
    )
    .await;
    // In degrees the first line runs along latitude 60; as a great circle it
    // would pass longitude 0 near latitude 66, and an index box built from
    // that arc misses this box: such columns are filtered without the index.
    let r = app
        .get("/collections/routes/items?bbox=-1,59.9,1,60.1")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(names(&r.body), ["along_60"]);
}
