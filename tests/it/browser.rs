//! The web pages in a real browser: headless Chromium driven by Playwright
//! (tests/clients/browser.py), against the service on a TCP port. The script
//! reports what the page showed; the database says what was written.

use serde_json::Value;

use crate::auth::sha256;
use crate::support::{run, settings_file, Served, TestApp};

const EDITOR_KEY: &str = "fp_browser_editor_key";

/// `ogc_read`'s tables, with anonymous readers and one key that may write
/// `places` and `parcels`.
async fn app() -> TestApp {
    let settings = format!(
        "[auth]\nanonymous = \"read:*\"\n\
         [api_keys.editor]\nsha256 = \"{}\"\nscope = \"read:* write:places write:parcels\"\n",
        sha256(EDITOR_KEY)
    );
    let path = settings_file("browser", &settings);
    TestApp::with_config(crate::ogc_read::SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await
}

/// Run a command of tests/clients/browser.py; what it saw, as JSON.
async fn browse(args: &[&str]) -> Value {
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    let mut all = vec!["tests/clients/browser.py"];
    all.extend_from_slice(args);
    let out = run(&python, &all).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn the_items_page_draws_the_features_and_selects_them_both_ways() {
    let app = app().await;
    let served = Served::start(&app).await;
    let seen = browse(&["items", &format!("{}/collections/places/items", served.url)]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["count"], "10", "a page of 10 on the map: {seen}");
    assert_eq!(seen["rows"], 10, "{seen}");
    assert_eq!(
        seen["headers"],
        serde_json::json!(["id", "name", "kind", "pop"])
    );
    // Ten points of radius 6 in the features' colour, drawn on the canvas.
    let blue = seen["blue_pixels"].as_i64().unwrap();
    assert!(blue > 10 * 50, "{seen}");
    // Anonymous callers may only read: no edit controls.
    assert_eq!(seen["editor_hidden"], true, "{seen}");
    // The click on the topmost feature (the north-easternmost point, 10 of
    // this page) selected its row; the click on row 3 selected feature 3.
    assert_eq!(seen["clicked_feature_row"], "10", "{seen}");
    assert_eq!(seen["selected_row"], "3", "{seen}");
    assert_eq!(seen["entered_row"], "5", "{seen}");
    assert!(seen["orange_pixels"].as_i64().unwrap() > 50, "{seen}");
}

#[tokio::test]
async fn the_editor_creates_moves_edits_deletes_and_handles_a_conflict() {
    let app = app().await;
    // Watch the table from the database side while the page works.
    app.db
        .client
        .batch_execute(
            "CREATE TABLE seen (at serial, op text, name text, pop int4, x float8);
             CREATE FUNCTION log() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF TG_OP = 'DELETE' THEN INSERT INTO seen (op, name) VALUES (TG_OP, OLD.name);
               ELSE INSERT INTO seen (op, name, pop, x) VALUES (TG_OP, NEW.name, NEW.pop, ST_X(NEW.geom));
               END IF;
               RETURN NULL;
             END $$;
             CREATE TRIGGER log AFTER INSERT OR UPDATE OR DELETE ON places
               FOR EACH ROW EXECUTE FUNCTION log();",
        )
        .await
        .unwrap();
    let served = Served::start(&app).await;
    let url = format!("{}/collections/places/items", served.url);
    let seen = browse(&["editor", &url, EDITOR_KEY]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["read_only_editor_hidden"], true, "{seen}");
    assert_eq!(seen["created"], "26", "{seen}");
    assert_eq!(seen["created_row"], "made in a browser", "{seen}");
    // The 422 is shown at its field.
    assert!(
        seen["pop_error"].as_str().unwrap().contains("integer"),
        "{seen}"
    );
    assert_eq!(seen["edited_row"], "edited once", "{seen}");
    assert_eq!(seen["second_client"], 204, "{seen}");
    assert!(
        seen["conflict_status"]
            .as_str()
            .unwrap()
            .contains("someone else changed feature 26"),
        "{seen}"
    );
    let versions = &seen["versions"];
    assert!(
        versions.as_array().unwrap().contains(&serde_json::json!([
            "name",
            "edited twice",
            "changed by someone else"
        ])),
        "both versions shown: {seen}"
    );
    assert_eq!(seen["reloaded_name"], "changed by someone else", "{seen}");
    assert_eq!(seen["reloaded_row"], "changed by someone else", "{seen}");
    assert_eq!(seen["rows_with_id"], 0, "{seen}");

    // What reached the table, in order: the 422 and the 412 wrote nothing.
    let log = app
        .db
        .text("SELECT string_agg(concat_ws(' ', op, name, pop), '; ' ORDER BY at) FROM seen")
        .await;
    assert_eq!(
        log.as_deref(),
        Some(
            "INSERT made in a browser 42; UPDATE made in a browser 42; \
             UPDATE edited once 43; UPDATE changed by someone else 43; \
             DELETE changed by someone else"
        )
    );
    // The move went east.
    let moved = app
        .db
        .int("SELECT count(*) FROM seen a JOIN seen b ON a.at = 1 AND b.at = 2 WHERE b.x > a.x")
        .await;
    assert_eq!(moved, 1);
    assert_eq!(app.db.int("SELECT count(*) FROM places").await, 25);
}

#[tokio::test]
async fn the_editor_draws_a_polygon_where_clients_choose_keys() {
    let app = app().await;
    let served = Served::start(&app).await;
    let url = format!("{}/collections/parcels/items", served.url);
    let seen = browse(&["polygon", &url, EDITOR_KEY]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["fields"], serde_json::json!(["gid"]), "{seen}");
    assert_eq!(seen["rows"], serde_json::json!(["1", "2"]), "{seen}");
    let drawn = app
        .db
        .text("SELECT concat_ws(' ', ST_GeometryType(geom), ST_NPoints(geom), ST_SRID(geom)) FROM parcels WHERE gid = 2")
        .await;
    assert_eq!(drawn.as_deref(), Some("ST_Polygon 4 25832"));
}

#[tokio::test]
async fn a_hostile_property_value_stays_text() {
    let app = app().await;
    let hostile = r#"<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"#;
    app.db
        .client
        .execute("UPDATE places SET name = $1 WHERE id = 2", &[&hostile])
        .await
        .unwrap();
    let served = Served::start(&app).await;
    let url = format!("{}/collections/places/items", served.url);
    let seen = browse(&["hostile", &url, "2", EDITOR_KEY]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
    for page in ["items", "feature"] {
        assert_eq!(seen[page]["text"], hostile, "{page}: {seen}");
        assert_eq!(seen[page]["elements_in_cell"], 0, "{page}: {seen}");
        assert_eq!(seen[page]["pwned"], Value::Null, "{page}: {seen}");
    }
    assert_eq!(seen["input"], hostile, "{seen}");
    assert_eq!(seen["text_after_edit"], hostile, "{seen}");
    assert_eq!(seen["pwned_after_edit"], Value::Null, "{seen}");
}

/// `make screenshots`: the pictures of docs/browser.md, taken of the same
/// pages the tests drive.
#[tokio::test]
#[ignore = "writes docs/img; run with make screenshots"]
async fn screenshots() {
    let app = app().await;
    let served = Served::start(&app).await;
    let url = format!("{}/collections/places/items", served.url);
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/img");
    let seen = browse(&["shots", &url, EDITOR_KEY, folder]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
}

#[tokio::test]
async fn the_api_documentation_renders_under_its_content_security_policy() {
    let app = app().await;
    let served = Served::start(&app).await;
    let seen = browse(&["apidocs", &format!("{}/api.html", served.url)]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen}");
    assert!(
        seen["title"].as_str().unwrap().starts_with("featurepipe"),
        "{seen}"
    );
    assert!(seen["operations"].as_i64().unwrap() > 10, "{seen}");
}
