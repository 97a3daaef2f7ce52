//! Tables whose primary key has several columns (a tenant and an id, as
//! Citus needs of a table distributed by its tenant) are writable: a
//! feature's id is the key's values joined by `,` (`~` and `,` in a value
//! escaped), and every write path finds the feature by all of them.

use serde_json::{json, Value};

use crate::sessions::session;
use crate::support::{collection, point, settings_file, TestApp};

const SETUP: &str = "
    CREATE TABLE sites (team text NOT NULL, id bigserial, name text,
                        geom geometry(Point, 4326), PRIMARY KEY (team, id));
    CREATE TABLE plots (plot int, team text, name text,
                        geom geometry(Point, 4326), PRIMARY KEY (team, plot));
    -- Counts the statements that change `sites` (a statement trigger: a row
    -- trigger would have each change made alone).
    CREATE TABLE statements (n int);
    CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO statements VALUES (1); RETURN NULL; END $$;
    CREATE TRIGGER counted AFTER UPDATE OR DELETE ON sites
      FOR EACH STATEMENT EXECUTE FUNCTION count_statement();
";

const GEOJSON: (&str, &str) = ("content-type", "application/geo+json");

fn site(team: &str, name: &str) -> Value {
    point(1.0, 2.0, json!({"team": team, "name": name}))
}

/// The URL of the feature `id` of `sites`, its id percent-encoded as a client does.
fn item(id: &str) -> String {
    format!(
        "/collections/sites/items/{}",
        id.replace('%', "%25").replace(',', "%2C")
    )
}

async fn etag(app: &TestApp, id: &str) -> String {
    let r = app.get(&item(id)).await;
    assert_eq!(r.status, 200, "{id}: {r:?}");
    r.headers["etag"].to_str().unwrap().to_owned()
}

async fn rows(app: &TestApp) -> String {
    let sql =
        "SELECT string_agg(concat_ws(' ', team, id, name), '; ' ORDER BY team, id) FROM sites";
    app.db.text(sql).await.unwrap_or_default()
}

#[tokio::test]
async fn every_write_path_finds_a_feature_by_all_its_key() {
    let app = TestApp::new(SETUP).await;
    let r = app.get("/collections").await;
    let sites = (r.body["collections"].as_array().unwrap().iter())
        .find(|c| c["id"] == "sites")
        .unwrap();
    assert_eq!(sites["writable"], true, "{sites}");

    // A bulk POST answers each feature's id, in feature order.
    let body = collection(vec![site("acme", "a"), site("a,b", "b"), site("100%", "c")]);
    let r = app.post("sites", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ids"], json!(["acme,1", "a~2Cb,2", "100~25,3"]));
    // One feature: its Location finds it.
    let r = app.post("sites", &site("acme", "d")).await;
    assert_eq!(r.status, 201, "{r:?}");
    let location = r.headers["location"].to_str().unwrap();
    assert!(
        location.ends_with("/collections/sites/items/acme,4"),
        "{location}"
    );

    // Reads show the same ids, and find each feature by its.
    let r = app.get("/collections/sites/items").await;
    let ids: Vec<&Value> = (r.body["features"].as_array().unwrap().iter())
        .map(|f| &f["id"])
        .collect();
    assert_eq!(
        ids,
        [
            &json!("100~25,3"),
            &json!("a~2Cb,2"),
            &json!("acme,1"),
            &json!("acme,4")
        ]
    );
    for (id, team) in [("a~2Cb,2", "a,b"), ("100~25,3", "100%"), ("acme,1", "acme")] {
        let r = app.get(&item(id)).await;
        assert_eq!(r.status, 200, "{id}: {r:?}");
        assert_eq!(
            (&r.body["id"], &r.body["properties"]["team"]),
            (&json!(id), &json!(team))
        );
        {
            // As QGIS sends it: the id in the URL as it is, not percent-encoded.
            let r = app.get(&format!("/collections/sites/items/{id}")).await;
            assert_eq!(r.status, 200, "{id} unencoded: {r:?}");
        }
    }
    // With its ETag, a feature carries its id as a property too (for QGIS's plugin).
    let r = app.get("/collections/sites/items?with-etags=true").await;
    for f in r.body["features"].as_array().unwrap() {
        assert_eq!(f["properties"]["featurepipe:id"], f["id"], "{f}");
    }
    // Ids of the wrong shape, or of another type, name no feature.
    let many_parts = ",".repeat(10_000);
    for id in [
        "acme",
        "acme,1,1",
        "acme,x",
        "acme,",
        ",1",
        "other,1",
        &many_parts,
    ] {
        let r = app.get(&item(id)).await;
        assert_eq!(r.status, 404, "GET {id}: {r:?}");
        let r = app.send("DELETE", &item(id), &[], None).await;
        assert_eq!(r.status, 404, "DELETE {id}: {r:?}");
        let patch = Some(json!({"properties": {"name": "no"}}).to_string());
        let r = app.send("PATCH", &item(id), &[GEOJSON], patch).await;
        assert_eq!(r.status, 404, "PATCH {id}: {r:?}");
        // Clients choose no key here: a PUT does not create.
        let put = Some(site("other", "new").to_string());
        let r = app.send("PUT", &item(id), &[GEOJSON], put).await;
        assert_eq!(r.status, 404, "PUT {id}: {r:?}");
    }

    // PATCH and PUT change the feature their id names, with preconditions;
    // the key's columns stay as they are (they make the id), whatever the body says.
    let tag = etag(&app, "acme,1").await;
    let patch = json!({"properties": {"name": "a2", "team": "other"}}).to_string();
    let r = app
        .send(
            "PATCH",
            &item("acme,1"),
            &[GEOJSON, ("if-match", &tag)],
            Some(patch.clone()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = app
        .send(
            "PATCH",
            &item("acme,1"),
            &[GEOJSON, ("if-match", &tag)],
            Some(patch),
        )
        .await;
    assert_eq!(r.status, 412, "a stale ETag: {r:?}");
    let replace = point(3.0, 4.0, json!({"name": "c2"})).to_string();
    let r = app
        .send("PUT", &item("100~25,3"), &[GEOJSON], Some(replace))
        .await;
    assert!(
        r.status.is_success(),
        "PUT without the key's columns: {r:?}"
    );
    let r = app.send("DELETE", &item("a~2Cb,2"), &[], None).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(rows(&app).await, "100% 3 c2; acme 1 a2; acme 4 d");

    // An edit session names features the same way.
    let tag = etag(&app, "acme,4").await;
    let r = session(
        &app,
        "atomic",
        vec![
            json!({"op": "insert", "collection": "sites", "feature": site("acme", "e")}),
            json!({"op": "update", "collection": "sites", "id": "acme,4", "if_match": tag,
                   "patch": {"properties": {"name": "d2"}}}),
            json!({"op": "replace", "collection": "sites", "id": "acme,1", "feature": site("acme", "a3")}),
            json!({"op": "delete", "collection": "sites", "ids": ["100~25,3"]}),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["results"][0]["ids"], json!(["acme,5"]), "{r:?}");
    assert_eq!(rows(&app).await, "acme 1 a3; acme 4 d2; acme 5 e");
    let r = session(
        &app,
        "atomic",
        vec![json!({"op": "delete", "collection": "sites", "id": "acme,99"})],
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(rows(&app).await, "acme 1 a3; acme 4 d2; acme 5 e");
    // A Part 11 transaction: `id` names the whole id, though a column of the key is called so.
    let by_id = |ids: Value| json!({"op": "in", "args": [{"property": "id"}, ids]});
    let ogc = json!({"semantic": "atomic", "transaction": [
        {"action": "update", "collection": "sites", "filter": by_id(json!(["acme,4", "acme,5"])),
         "properties": {"modify": [{"name": "name", "value": "ogc"}]}},
        {"action": "delete", "collection": "sites", "filter": {"ids": ["acme,1"]}},
    ]});
    let r = app
        .send(
            "POST",
            "/transactions",
            &[("content-type", "application/ogc-tx+json")],
            Some(ogc.to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(rows(&app).await, "acme 4 ogc; acme 5 ogc");
}

#[tokio::test]
async fn keys_clients_give_are_taken_from_the_properties() {
    let app = TestApp::new(SETUP).await;
    // Every column of the key is required of a new feature.
    let r = app
        .post("plots", &point(0.0, 0.0, json!({"plot": 7})))
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/properties/team", "{r:?}");
    let body = collection(vec![
        point(0.0, 0.0, json!({"plot": 7, "team": "acme"})),
        point(0.0, 0.0, json!({"plot": 7, "team": "other"})),
    ]);
    let r = app.post("plots", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    // The id's parts are in the key's order, not the table's.
    assert_eq!(r.body["ids"], json!(["acme,7", "other,7"]));
    // A second feature under a key taken: a 409 or 422 naming the constraint, nothing written.
    let r = app
        .post(
            "plots",
            &point(0.0, 0.0, json!({"plot": 7, "team": "acme"})),
        )
        .await;
    assert!(r.status == 409 || r.status == 422, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM plots").await, 2);
    let r = app.get("/collections/plots/items/other%2C7").await;
    assert_eq!(
        (r.status.as_u16(), &r.body["properties"]["team"]),
        (200, &json!("other"))
    );
}

#[tokio::test]
async fn a_change_feed_is_declined_for_a_composite_key_not_fatal() {
    let settings = settings_file("composite-feed", "[collections.sites]\nchanges = true\n");
    let app = TestApp::with_config(SETUP, |c| c.settings = Some(settings)).await;
    // The feed logs single-column keys: it answers 503 (the log says why); writes go on.
    let r = app.get("/collections/sites/changes").await;
    assert_eq!(r.status, 503, "{r:?}");
    let kind = r.body["type"].as_str().unwrap_or_default();
    assert!(kind.ends_with("change-feed-not-installed"), "{r:?}");
    assert_eq!(app.post("sites", &site("acme", "fed")).await.status, 201);
}

#[tokio::test]
async fn copy_makes_the_same_ids_as_the_database() {
    let app = TestApp::with_config(SETUP, |c| {
        c.write_strategy = featurepipe::write::Strategy::Copy;
    })
    .await;
    // The id column drawn before the rows, the team given by each feature.
    let teams = ["acme", "a,b", "100%", "~2C", "a b/c?d#e"];
    let features = (0..5000)
        .map(|i| site(teams[i % teams.len()], &format!("s{i}")))
        .collect();
    let r = app.post("sites", &collection(features)).await;
    assert_eq!(
        (r.status.as_u16(), &r.body["strategy"]),
        (201, &json!("copy")),
        "{r:?}"
    );
    let ids = r.body["ids"].as_array().unwrap();
    // The ids the reads show, which PostgreSQL makes, by name.
    let mut shown = std::collections::HashMap::new();
    for offset in (0..5000).step_by(1000) {
        let page = app
            .get(&format!(
                "/collections/sites/items?limit=1000&offset={offset}"
            ))
            .await;
        for f in page.body["features"].as_array().unwrap() {
            shown.insert(
                f["properties"]["name"].as_str().unwrap().to_owned(),
                f["id"].clone(),
            );
        }
    }
    let expected: Vec<&Value> = (0..5000).map(|i| &shown[&format!("s{i}")]).collect();
    let ids: Vec<&Value> = ids.iter().collect();
    assert_eq!(
        ids, expected,
        "ids in feature order, as the database makes them"
    );
    assert_eq!(ids[1], "a~2Cb,2");
    assert_eq!(ids[4], "a~20b~2Fc~3Fd~23e,5");
    for id in [ids[2], ids[3], ids[4]] {
        let r = app.get(&item(id.as_str().unwrap())).await;
        assert_eq!((r.status.as_u16(), &r.body["id"]), (200, id), "{r:?}");
    }
    // Every column of the key given.
    let body = collection(vec![
        point(0.0, 0.0, json!({"plot": 7, "team": "x,y"})),
        point(0.0, 0.0, json!({"plot": 8, "team": "x,y"})),
    ]);
    let r = app.post("plots", &body).await;
    assert_eq!(
        (r.status.as_u16(), &r.body["strategy"]),
        (201, &json!("copy")),
        "{r:?}"
    );
    assert_eq!(r.body["ids"], json!(["x~2Cy,7", "x~2Cy,8"]));
}

#[tokio::test]
async fn a_session_changes_a_run_of_them_in_one_statement() {
    let app = TestApp::new(SETUP).await;
    let teams = ["acme", "a,b", "100%"];
    let features = (0..6)
        .map(|i| site(teams[i % 3], &format!("s{i}")))
        .collect();
    let r = app.post("sites", &collection(features)).await;
    let ids: Vec<String> = (r.body["ids"].as_array().unwrap().iter())
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    let update = |id: &str, name: &str| {
        json!({"op": "update", "collection": "sites", "id": id,
               "patch": {"properties": {"name": name}}})
    };
    let mut ops: Vec<Value> = (0..3).map(|i| update(&ids[i], &format!("u{i}"))).collect();
    ops[1]["if_match"] = json!(etag(&app, &ids[1]).await.trim_matches('"'));
    ops.push(json!({"op": "delete", "collection": "sites", "ids": &ids[3..]}));
    let r = session(&app, "atomic", ops.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let counted = "SELECT count(*) FROM statements";
    assert_eq!(
        app.db.int(counted).await,
        2,
        "the updates, then the deletes"
    );
    assert_eq!(rows(&app).await, "100% 3 u2; a,b 2 u1; acme 1 u0");
    for (k, id) in ids[..3].iter().enumerate() {
        let tag = etag(&app, id).await;
        assert_eq!(
            json!(tag.trim_matches('"')),
            r.body["results"][k]["etag"],
            "{id}"
        );
    }
    // The same ids written another way (`01`) are one feature: two statements.
    let again = vec![update("acme,1", "x"), update("acme,01", "y")];
    let r = session(&app, "atomic", again).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(app.db.int(counted).await, 4);
    assert_eq!(rows(&app).await, "100% 3 u2; a,b 2 u1; acme 1 y");
    // A stale tag in a run: 412 at its operation, nothing written.
    let mut stale: Vec<Value> = (0..3).map(|i| update(&ids[i], "stale")).collect();
    stale[2]["if_match"] = ops[1]["if_match"].clone();
    let r = session(&app, "atomic", stale).await;
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(r.body["errors"][0]["operation"], 2, "{r:?}");
    assert_eq!(rows(&app).await, "100% 3 u2; a,b 2 u1; acme 1 y");
}
