//! The optional per-collection settings file (FEATUREPIPE_CONFIG).

use serde_json::json;

use crate::support::{point, settings_file, start_up_error, TestApp};

const SETUP: &str = "
    CREATE TABLE sites (id serial PRIMARY KEY, name text, changed timestamptz DEFAULT now(),
                        updated_at timestamptz, geom geometry(Point, 4326));
    INSERT INTO sites (name, changed, geom) VALUES ('a', '2021-05-06 07:08:09+00', 'SRID=4326;POINT(1 2)');
    CREATE TABLE plain (id serial PRIMARY KEY, updated_at timestamptz DEFAULT now(),
                        geom geometry(Point, 4326));
    INSERT INTO plain (geom) VALUES ('SRID=4326;POINT(1 2)');
    CREATE TABLE archive (id serial PRIMARY KEY, geom geometry(Point, 4326));
";

const SETTINGS: &str = r#"
[collections.sites]
title = "Survey sites"
description = "Where we measured"
last_modified = "changed"
precondition_required = true
crs = ["http://www.opengis.net/def/crs/EPSG/0/3857"]

[collections.plain]
last_modified = false

[collections.archive]
read_only = true
"#;

#[tokio::test]
async fn settings_shape_collections() {
    let path = settings_file("s", SETTINGS);
    let app = TestApp::with_config(SETUP, |c| c.settings = Some(path.clone())).await;
    let r = app.get("/collections/sites").await;
    assert_eq!(r.body["title"], "Survey sites");
    assert_eq!(r.body["description"], "Where we measured");
    assert!(r.body["crs"]
        .as_array()
        .unwrap()
        .contains(&json!("http://www.opengis.net/def/crs/EPSG/0/3857")));
    let r = app
        .get("/collections/sites/items/1?crs=http%3A%2F%2Fwww.opengis.net%2Fdef%2Fcrs%2FEPSG%2F0%2F3857")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let x = r.body["geometry"]["coordinates"][0].as_f64().unwrap();
    assert!((x - 111319.49).abs() < 0.1, "{x}");
    // The named column gives Last-Modified; convention is switched off for `plain`.
    assert_eq!(r.headers["last-modified"], "Thu, 06 May 2021 07:08:09 GMT");
    let r = app.get("/collections/plain/items/1").await;
    assert!(!r.headers.contains_key("last-modified"), "{:?}", r.headers);

    // Preconditions are required on `sites`.
    let merge = ("content-type", "application/merge-patch+json");
    let patch = Some(json!({"properties": {"name": "b"}}).to_string());
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[merge],
            patch.clone(),
        )
        .await;
    assert_eq!(r.status, 428, "{r:?}");
    let r = app
        .send("DELETE", "/collections/sites/items/1", &[], None)
        .await;
    assert_eq!(r.status, 428, "{r:?}");
    let etag = app.get("/collections/sites/items/1").await.headers["etag"].clone();
    let if_match = ("if-match", etag.to_str().unwrap());
    let r = app
        .send(
            "PATCH",
            "/collections/sites/items/1",
            &[merge, if_match],
            patch,
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        app.db
            .text("SELECT (changed > now() - interval '1 minute')::text FROM sites")
            .await
            .as_deref(),
        Some("true"),
        "the last-modified column moves on with each write"
    );

    // Edit sessions honour it too.
    let r = app
        .send(
            "POST",
            "/transactions",
            &[("content-type", "application/json")],
            Some(
                json!({"operations": [{"op": "delete", "collection": "sites", "id": 1}]})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "precondition_required");
    // `archive` is read-only by configuration.
    let r = app.post("archive", &point(0.0, 0.0, json!({}))).await;
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    assert_eq!(
        app.get("/collections/archive").await.body["writable"],
        false
    );
    std::fs::remove_file(path).ok();
}

#[tokio::test]
async fn bad_settings_stop_start_up_with_a_clear_message() {
    for (text, expected) in [
        (
            "[collections.nope]\ntitle = \"x\"",
            "'nope', which is not published",
        ),
        (
            "[collections.sites]\nlast_modified = \"name\"",
            "not a timestamptz column",
        ),
        (
            "[collections.sites]\ncrs = [\"EPSG:999999\"]",
            "spatial_ref_sys",
        ),
        ("[collections.sites]\ntitel = \"typo\"", "unknown field"),
    ] {
        let path = settings_file("bad", text);
        let message = start_up_error(SETUP, path.clone(), false).await;
        assert!(message.contains(expected), "{text}: {message}");
        assert!(message.contains("FEATUREPIPE_CONFIG"), "{message}");
        std::fs::remove_file(path).ok();
    }
}

/// Text keys without a default; `stamped` has a BEFORE INSERT trigger that
/// only keeps a timestamp, `keyed` one whose key has a default.
const KEYS: &str = "
    CREATE TABLE stamped (code text PRIMARY KEY, seen timestamptz, geom geometry(Point, 4326));
    CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN NEW.seen := now(); RETURN NEW; END $$;
    CREATE TRIGGER stamp BEFORE INSERT ON stamped FOR EACH ROW EXECUTE FUNCTION stamp();
    CREATE TABLE open (code text PRIMARY KEY, geom geometry(Point, 4326));
    CREATE TABLE keyless (geom geometry(Point, 4326));
";

async fn put_new(app: &TestApp, collection: &str) -> u16 {
    let feature = point(1.0, 2.0, json!({})).to_string();
    let headers = [("content-type", "application/geo+json")];
    let path = format!("/collections/{collection}/items/new-1");
    app.send("PUT", &path, &headers, Some(feature))
        .await
        .status
        .as_u16()
}

async fn says_client_keys(app: &TestApp, collection: &str) -> bool {
    let r = app.get(&format!("/collections/{collection}")).await;
    r.body["supportsNonAutogeneratedResourceIds"] == json!(true)
}

#[tokio::test]
async fn client_keys_are_inferred_unless_the_settings_say() {
    // Inferred: any BEFORE INSERT trigger may set the key, so no client keys.
    let app = TestApp::new(KEYS).await;
    assert!(!says_client_keys(&app, "stamped").await);
    assert_eq!(put_new(&app, "stamped").await, 404);
    assert!(says_client_keys(&app, "open").await);
    // The settings override the inference, both ways.
    let path = settings_file(
        "client-keys",
        "[collections.stamped]\nclient_keys = true\n[collections.open]\nclient_keys = false\n",
    );
    let app = TestApp::with_config(KEYS, |c| c.settings = Some(path.clone())).await;
    assert!(says_client_keys(&app, "stamped").await);
    assert_eq!(put_new(&app, "stamped").await, 201);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM stamped WHERE code = 'new-1' AND seen IS NOT NULL")
            .await,
        1
    );
    assert!(!says_client_keys(&app, "open").await);
    assert_eq!(put_new(&app, "open").await, 404);
    // A table without a key cannot take them.
    let path = settings_file("keyless", "[collections.keyless]\nclient_keys = true\n");
    let error = start_up_error(KEYS, path, false).await;
    assert!(error.contains("client_keys"), "{error}");
}
