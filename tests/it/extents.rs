//! A collection's extent is computed at most once per refresh interval:
//! without statistics (always for geography) it is a scan of the table.

use std::time::Duration;

use serde_json::json;

use crate::support::{via_proxy, TestApp, TestDb};

#[tokio::test]
async fn extents_without_statistics_are_not_computed_per_request() {
    let db = TestDb::new(
        "CREATE TABLE geo (id serial PRIMARY KEY, geog geography(Point, 4326));
         INSERT INTO geo (geog) VALUES ('SRID=4326;POINT(1 2)'), ('SRID=4326;POINT(3 4)');",
    )
    .await;
    let (proxy, config) = via_proxy(&db, Duration::ZERO).await;
    let app = TestApp::on(db, config).await;
    let extent = json!([1.0, 2.0, 3.0, 4.0]);
    let r = app.get("/collections/geo").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["extent"]["spatial"]["bbox"][0], extent);
    let after_first = proxy.round_trips();
    for _ in 0..3 {
        let r = app.get("/collections/geo").await;
        assert_eq!(r.body["extent"]["spatial"]["bbox"][0], extent, "{r:?}");
        let r = app.get("/collections").await;
        assert_eq!(
            r.body["collections"][0]["extent"]["spatial"]["bbox"][0], extent,
            "{r:?}"
        );
    }
    // Not one more statement reached the database.
    assert_eq!(proxy.round_trips(), after_first);
}

#[tokio::test]
async fn writes_through_the_service_leave_no_wrong_extent_behind() {
    // Statistics from ANALYZE: the estimate knows only the first points,
    // and knows nothing of rows written after it until the next ANALYZE.
    let app = TestApp::new(
        "CREATE TABLE pts (id serial PRIMARY KEY, geom geometry(Point, 4326));
         INSERT INTO pts (geom) SELECT ST_SetSRID(ST_MakePoint(i % 10, i % 10), 4326)
           FROM generate_series(1, 1000) AS i;
         ANALYZE pts;",
    )
    .await;
    let bbox = |r: &crate::support::TestResponse| r.body["extent"]["spatial"]["bbox"][0].clone();
    let before = bbox(&app.get("/collections/pts").await);
    assert!(before[2].as_f64().unwrap() < 10.0, "{before}");
    let far = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [50.0, 40.0]},
                     "properties": {}});
    let r = app.post("pts", &far).await;
    assert_eq!(r.status, 201, "{r:?}");
    let after = bbox(&app.get("/collections/pts").await);
    assert_eq!(
        (after[2].as_f64(), after[3].as_f64()),
        (Some(50.0), Some(40.0)),
        "{after}"
    );
    // An edit session too.
    let session = json!({"operations": [{"op": "insert", "collection": "pts",
        "feature": {"type": "Feature", "geometry": {"type": "Point", "coordinates": [-60.0, -30.0]},
                    "properties": {}}}]});
    let r = app
        .send(
            "POST",
            "/transactions",
            &[("content-type", "application/json")],
            Some(session.to_string()),
        )
        .await;
    assert!(r.status.is_success(), "{r:?}");
    let list = app.get("/collections").await;
    let last = list.body["collections"][0]["extent"]["spatial"]["bbox"][0].clone();
    assert_eq!(
        (last[0].as_f64(), last[1].as_f64()),
        (Some(-60.0), Some(-30.0)),
        "{last}"
    );
}
