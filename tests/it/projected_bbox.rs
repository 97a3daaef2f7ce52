//! A `bbox` in another CRS than a projected column's is compared in its own
//! CRS, whatever its size: the world on UTM or Lambert-93, a box past the
//! CRS's domain, one across the antimeridian. Each answer is checked against
//! the rows' own coordinates in longitude and latitude.

use crate::support::TestApp;

// A grid of points, 0.5° apart, around each CRS's area, with their lon/lat.
const SETUP: &str = "
    CREATE TABLE utm (id serial PRIMARY KEY, lon float8, lat float8, geom geometry(Point, 32633));
    INSERT INTO utm (lon, lat, geom)
      SELECT lon, lat, ST_Transform(ST_SetSRID(ST_MakePoint(lon, lat), 4326), 32633)
        FROM (SELECT 10.25 + (i % 20) * 0.5 AS lon, 36.25 + (i / 20) * 0.5 AS lat
                FROM generate_series(0, 399) AS i) AS g;
    CREATE INDEX ON utm USING gist (geom);
    CREATE TABLE l93 (id serial PRIMARY KEY, lon float8, lat float8, geom geometry(Point, 2154));
    INSERT INTO l93 (lon, lat, geom)
      SELECT lon, lat, ST_Transform(ST_SetSRID(ST_MakePoint(lon, lat), 4326), 2154)
        FROM (SELECT -4.75 + (i % 20) * 0.5 AS lon, 41.25 + (i / 20) * 0.5 AS lat
                FROM generate_series(0, 399) AS i) AS g;
    CREATE INDEX ON l93 USING gist (geom);
";

/// How many features the service finds in `bbox` (lon/lat), and how many rows
/// of `table` lie in it by their own coordinates.
async fn found_and_there(app: &TestApp, table: &str, bbox: [f64; 4]) -> (i64, i64) {
    let [w, s, e, n] = bbox;
    let r = app
        .get(&format!(
            "/collections/{table}/items?bbox={w},{s},{e},{n}&limit=1"
        ))
        .await;
    assert_eq!(r.status, 200, "{table} {bbox:?}: {r:?}");
    let found = r.body["numberMatched"].as_i64().unwrap();
    let lon = match w <= e {
        true => format!("lon BETWEEN {w} AND {e}"),
        false => format!("(lon >= {w} OR lon <= {e})"),
    };
    let there = app
        .db
        .int(&format!(
            "SELECT count(*) FROM {table} WHERE {lon} AND lat BETWEEN {s} AND {n}"
        ))
        .await;
    (found, there)
}

#[tokio::test]
async fn boxes_of_any_size_are_compared_in_their_own_crs() {
    let app = TestApp::new(SETUP).await;
    let boxes = [
        // The world, whose corners land on the central meridian on UTM and
        // outside Lambert-93's domain.
        [-180.0, -90.0, 180.0, 90.0],
        // A hemisphere, a band of longitudes, the poles' caps.
        [-180.0, 0.0, 180.0, 90.0],
        [0.0, -90.0, 14.0, 90.0],
        [-180.0, 40.0, 180.0, 90.0],
        // Within each CRS's area: the index narrows the rows.
        [12.0, 38.0, 15.0, 41.0],
        [-3.0, 43.0, 2.0, 46.0],
        // Across the antimeridian, and nowhere near.
        [170.0, -10.0, -170.0, 10.0],
        [100.0, -60.0, 120.0, -40.0],
    ];
    for table in ["utm", "l93"] {
        for bbox in boxes {
            let (found, there) = found_and_there(&app, table, bbox).await;
            assert_eq!(found, there, "{table} {bbox:?}");
        }
    }
    assert_eq!(found_and_there(&app, "utm", boxes[0]).await.0, 400);
    assert_eq!(found_and_there(&app, "l93", boxes[0]).await.0, 400);
    assert!(found_and_there(&app, "utm", boxes[4]).await.0 > 0);
    assert!(found_and_there(&app, "l93", boxes[5]).await.0 > 0);
}

#[tokio::test]
async fn a_box_in_epsg_4326_is_latitude_first() {
    let app = TestApp::new(SETUP).await;
    let epsg4326 = "http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FEPSG%2F0%2F4326";
    for (bbox, lonlat) in [
        ("-90,-180,90,180", [-180.0, -90.0, 180.0, 90.0]),
        ("38,12,41,15", [12.0, 38.0, 15.0, 41.0]),
    ] {
        let r = app
            .get(&format!(
                "/collections/utm/items?bbox={bbox}&bbox-crs={epsg4326}&limit=1"
            ))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        let (_, there) = found_and_there(&app, "utm", lonlat).await;
        assert_eq!(r.body["numberMatched"].as_i64(), Some(there), "{bbox}");
    }
}

#[tokio::test]
async fn a_line_meets_the_box_along_its_own_straight_edges() {
    // A Lambert-93 line along y = 6,600,000, which crosses 3°E at 46.5°N
    // and is straight in Lambert-93 (its ends lie further south in lon/lat).
    let app = TestApp::new(
        "CREATE TABLE roads (id serial PRIMARY KEY, geom geometry(LineString, 2154));
         INSERT INTO roads (geom) VALUES ('SRID=2154;LINESTRING(150000 6600000, 1250000 6600000)');
         CREATE INDEX ON roads USING gist (geom);",
    )
    .await;
    let found = |bbox: &'static str| {
        let app = &app;
        async move {
            let r = app
                .get(&format!("/collections/roads/items?bbox={bbox}"))
                .await;
            assert_eq!(r.status, 200, "{r:?}");
            r.body["numberMatched"].as_i64().unwrap()
        }
    };
    assert_eq!(found("2.9,46.45,3.1,46.55").await, 1, "where the line is");
    assert_eq!(found("2.9,46.2,3.1,46.45").await, 0, "south of it");
    assert_eq!(found("-180,-90,180,90").await, 1, "the world");
}
