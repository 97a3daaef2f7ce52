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
