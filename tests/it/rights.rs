//! What a caller learns from a write it was allowed to make: a write-only
//! credential is never answered with a feature (whatever the spelling of
//! `Prefer`) nor with the database's DETAIL; and a POST answered with the
//! feature never reports an error once its row is committed.

use serde_json::{json, Value};

use crate::auth::sha256;
use crate::support::{create_role, point, settings_file, TestApp, TestResponse};

const SETUP: &str = "
    CREATE TABLE parcels (id serial PRIMARY KEY, name text, secret text,
                          area int CONSTRAINT positive_area CHECK (sign(area) = 1),
                          code text UNIQUE, geom geometry(Point, 4326));
    INSERT INTO parcels (name, secret, area, code, geom)
        VALUES ('first', 'TOPSECRET', 5, 'c1', 'SRID=4326;POINT(1 2)');
";

const WRITER: &str = "fp_rights_write_only_key";
const EDITOR: &str = "fp_rights_read_write_key";

/// The app with a write-only key and a key that may read and write.
async fn app() -> TestApp {
    let settings = format!(
        "[api_keys.writer]\nsha256 = \"{}\"\nscope = \"write:*\"\n\
         [api_keys.editor]\nsha256 = \"{}\"\nscope = \"read:* write:*\"\n",
        sha256(WRITER),
        sha256(EDITOR)
    );
    let path = settings_file("rights", &settings);
    TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await
}

/// Send `body` with `method` to `path` as `key`, with `Prefer: prefer`.
async fn send_as(
    app: &TestApp,
    key: &str,
    (method, path): (&str, &str),
    prefer: &str,
    body: &Value,
) -> TestResponse {
    let content_type = match method {
        "PATCH" => "application/merge-patch+json",
        "POST" if path.starts_with("/transactions") => "application/json",
        _ => "application/geo+json",
    };
    let headers = [
        ("x-api-key", key),
        ("content-type", content_type),
        ("prefer", prefer),
    ];
    app.send(method, path, &headers, Some(body.to_string()))
        .await
}

/// The stored row of feature 1, as text.
async fn first_row(app: &TestApp) -> String {
    app.db
        .text("SELECT row_to_json(p)::text FROM parcels p WHERE id = 1")
        .await
        .expect("feature 1 exists")
}

#[tokio::test]
async fn a_write_only_key_gets_no_feature_however_prefer_is_spelled() {
    let app = app().await;
    let spellings = [
        "Return=Representation",
        "return = representation",
        "RETURN=\"representation\"",
        "return=representation; x=\"a, b\"",
        "handling=lenient, Return=Representation",
    ];
    let first = "/collections/parcels/items/1";
    let created = point(3.0, 4.0, json!({"name": "posted", "area": 2}));
    let replaced = point(
        1.0,
        2.0,
        json!({"name": "first", "secret": "TOPSECRET", "area": 5, "code": "c1"}),
    );
    for prefer in spellings {
        let before = first_row(&app).await;
        for (method, path, body, status) in [
            ("PATCH", first, json!({}), 204),
            ("PUT", first, replaced.clone(), 204),
            ("POST", "/collections/parcels/items", created.clone(), 201),
        ] {
            let r = send_as(&app, WRITER, (method, path), prefer, &body).await;
            assert_eq!(r.status, status, "{method} {prefer}: {r:?}");
            assert_eq!(r.body, Value::Null, "{method} {prefer}: no body: {r:?}");
            assert!(r.headers.get("content-crs").is_none(), "{method} {prefer}");
            let applied = r.headers.get("preference-applied");
            let applied = applied.map(|v| v.to_str().unwrap().to_ascii_lowercase());
            assert!(
                !applied.unwrap_or_default().contains("representation"),
                "{method} {prefer}: representation was not applied"
            );
        }
        // The PATCH and the PUT wrote what the feature was: unchanged.
        assert_eq!(first_row(&app).await, before, "{prefer}");
    }
    let posted = app
        .db
        .int("SELECT count(*) FROM parcels WHERE name = 'posted'")
        .await;
    assert_eq!(posted, spellings.len() as i64);

    // A key that may read is still answered with the feature.
    for prefer in spellings {
        let r = send_as(&app, EDITOR, ("PATCH", first), prefer, &json!({})).await;
        assert_eq!(r.status, 200, "{prefer}: {r:?}");
        assert_eq!(
            r.body["properties"]["secret"], "TOPSECRET",
            "{prefer}: {r:?}"
        );
        let applied = r.headers["preference-applied"].to_str().unwrap();
        assert!(
            applied.contains("return=representation"),
            "{prefer}: {applied}"
        );
    }
    let r = send_as(
        &app,
        EDITOR,
        ("POST", "/collections/parcels/items"),
        "return=\"representation\"",
        &created,
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["properties"]["name"], "posted", "{r:?}");
}

#[tokio::test]
async fn database_details_reach_only_callers_who_may_read() {
    let app = app().await;
    let before = first_row(&app).await;
    let first = "/collections/parcels/items/1";
    let negative = json!({"properties": {"area": -1}});
    let session = json!({"operations": [
        {"op": "update", "collection": "parcels", "id": 1, "patch": negative},
    ]});
    for key in [WRITER, EDITOR] {
        // A CHECK names its constraint; the failing row (all its columns) is never told.
        let r = send_as(&app, key, ("PATCH", first), "", &negative).await;
        assert_eq!(r.status, 422, "{r:?}");
        assert_eq!(r.body["errors"][0]["constraint"], "positive_area", "{r:?}");
        assert_eq!(r.body["errors"][0]["detail"], Value::Null, "{r:?}");
        assert!(!r.body.to_string().contains("TOPSECRET"), "{r:?}");
        for (mode, status) in [("", 422), ("?mode=skip", 200)] {
            let path = format!("/transactions{mode}");
            let r = send_as(&app, key, ("POST", &path), "", &session).await;
            assert_eq!(r.status, status, "{mode}: {r:?}");
            let text = r.body.to_string();
            assert!(text.contains("positive_area"), "{mode}: {r:?}");
            assert!(!text.contains("TOPSECRET"), "{mode}: {r:?}");
            assert!(!text.contains("Failing row"), "{mode}: {r:?}");
        }
    }
    assert_eq!(first_row(&app).await, before, "nothing was changed");

    // Other details (a unique key's value) are for callers who may read.
    let taken = point(0.0, 0.0, json!({"code": "c1"}));
    let items = "/collections/parcels/items";
    let r = send_as(&app, EDITOR, ("POST", items), "", &taken).await;
    assert_eq!(r.status, 409, "{r:?}");
    let detail = r.body["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("(code)=(c1)"), "{r:?}");
    let r = send_as(&app, WRITER, ("POST", items), "", &taken).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["detail"], Value::Null, "{r:?}");
    assert_eq!(
        r.body["errors"][0]["constraint"], "parcels_code_key",
        "{r:?}"
    );
    let insert = json!({"operations": [
        {"op": "insert", "collection": "parcels", "feature": taken},
    ]});
    let r = send_as(
        &app,
        WRITER,
        ("POST", "/transactions?mode=batch"),
        "",
        &insert,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.to_string().contains("parcels_code_key"), "{r:?}");
    assert!(!r.body.to_string().contains("(code)=(c1)"), "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM parcels").await, 1);
}

const INSERT_ONLY_TABLE: &str = "
    CREATE TABLE drops (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
    GRANT INSERT, SELECT (id) ON drops TO fp_test_insert_only;
    GRANT USAGE ON SEQUENCE drops_id_seq TO fp_test_insert_only;
";

#[tokio::test]
async fn a_post_answered_with_the_feature_reports_its_commit_even_when_it_cannot_be_read() {
    let key = "fp_rights_insert_only_key";
    let settings = format!(
        "[auth]\nset_role = true\n[api_keys.dropbox]\nsha256 = \"{}\"\n\
         scope = \"read:* write:*\"\nrole = \"fp_test_insert_only\"\n",
        sha256(key)
    );
    let path = settings_file("insert-only", &settings);
    let setup = create_role("fp_test_insert_only", "NOLOGIN") + INSERT_ONLY_TABLE;
    let app = TestApp::with_config(&setup, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    let feature = point(1.0, 2.0, json!({"name": "dropped"}));
    let items = ("POST", "/collections/drops/items");
    let r = send_as(&app, key, items, "return=representation", &feature).await;
    // The row is committed: the answer says so, with where it is.
    assert_eq!(r.status, 201, "{r:?}");
    let id = app.db.int("SELECT id::bigint FROM drops").await;
    assert_eq!(r.body["ids"], json!([id]), "{r:?}");
    let location = r.headers["location"].to_str().unwrap();
    assert!(location.ends_with(&format!("/collections/drops/items/{id}")));
    assert!(r.headers.get("preference-applied").is_none(), "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM drops").await, 1);
}
