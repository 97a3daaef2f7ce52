//! Filtered sync: `/changes?filter=…` follows only the features that match
//! the filter. One that stops matching arrives as a delete, one that
//! starts matching as an upsert, and the cursor is bound to the filter.

use featurepipe::read::params::percent_encode;
use serde_json::json;

use crate::changes::{execute, follow_past_as, fresh_xid, with_feeds, Copy};
use crate::support::{point, TestApp};

const TASKS: &str = "CREATE TABLE tasks (id serial PRIMARY KEY, crew text, geom geometry(Point, 4326));
                     INSERT INTO tasks (crew, geom)
                         SELECT CASE WHEN n % 2 = 0 THEN 'north' ELSE 'south' END, ST_MakePoint(n, n)
                           FROM generate_series(1, 6) AS n;";

/// The cursor for now of the feed filtered by `filter`.
async fn cursor_now(app: &TestApp, filter: &str) -> String {
    let r = app
        .get(&format!("/collections/tasks/changes?{filter}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["cursor"].as_str().unwrap().to_owned()
}

/// The ids of the features of `copy`, sorted.
fn ids(copy: &Copy) -> Vec<i64> {
    let mut ids: Vec<i64> = copy.0.keys().map(|k| k.parse().unwrap()).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn a_field_app_follows_only_its_own_crews_tasks() {
    let app = with_feeds(TASKS, &["tasks"]).await;
    let filter = format!("filter={}", percent_encode("crew = 'north'"));
    let cursor = cursor_now(&app, &filter).await;
    // The app downloads its tasks with the same filter.
    let r = app.get(&format!("/collections/tasks/items?{filter}")).await;
    let mut copy = Copy::default();
    for f in r.body["features"].as_array().unwrap() {
        copy.0.insert(f["id"].to_string(), f.clone());
    }
    assert_eq!(ids(&copy), [2, 4, 6]);

    // A new task of each crew; one north task moves south, one south task north.
    for crew in ["north", "south"] {
        let r = app
            .post("tasks", &point(9.0, 9.0, json!({"crew": crew})))
            .await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let patch = |crew: &str| Some(json!({"properties": {"crew": crew}}).to_string());
    let headers = [("content-type", "application/merge-patch+json")];
    let r = app
        .send(
            "PATCH",
            "/collections/tasks/items/2",
            &headers,
            patch("south"),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    execute(&app, "UPDATE tasks SET crew = 'north' WHERE id = 3").await;

    let past = fresh_xid(&app).await;
    let feed = format!("tasks&{filter}");
    let (applied, cursor) = follow_past_as(&app, &[], (&feed, 100), &mut copy, cursor, past).await;
    assert_eq!(ids(&copy), [3, 4, 6, 7], "{applied:?}");
    // What is upserted matches; nothing of the south crew's is sent but its keys.
    for change in &applied {
        if change["op"] == "upsert" {
            assert_eq!(change["feature"]["properties"]["crew"], "north", "{change}");
        } else {
            assert!(change.get("feature").is_none(), "{change}");
        }
    }

    // The cursor is bound to its filter.
    for other in [
        String::new(),
        format!("filter={}", percent_encode("crew = 'south'")),
    ] {
        let r = app
            .get(&format!(
                "/collections/tasks/changes?since={cursor}&{other}"
            ))
            .await;
        assert_eq!(r.status, 400, "{other}: {r:?}");
        assert!(
            r.body["type"].as_str().unwrap().ends_with("invalid-cursor"),
            "{r:?}"
        );
    }
    // A filter that cannot run is a 400 here too.
    let r = app
        .get(&format!(
            "/collections/tasks/changes?filter={}",
            percent_encode("nosuch = 1")
        ))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
}
