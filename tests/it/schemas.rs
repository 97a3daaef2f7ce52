//! OGC API - Features Part 5 / Common Part 3, returnables and receivables:
//! the schema derived from the catalog, validation that enforces what it
//! publishes, and `Prefer: handling` (Part 4).

use serde_json::{json, Value};

use crate::support::{
    collection, point, run, settings_file, start_up_error, Served, TestApp, TestResponse,
};
use featurepipe::write::Strategy;

const SITES: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE DOMAIN percent AS numeric CHECK (VALUE BETWEEN 0 AND 100);
    CREATE TABLE sites (
        id serial PRIMARY KEY,
        name varchar(20) NOT NULL,
        kind text NOT NULL CHECK (kind IN ('well', 'spring', 'pond')),
        level smallint CHECK (level BETWEEN 1 AND 5),
        depth float8 CHECK (depth > 0),
        share percent,
        feeling mood,
        code uuid,
        surveyed date,
        seen timestamptz,
        checked_by text,
        doubled int GENERATED ALWAYS AS (level * 2) STORED,
        serial_no int GENERATED ALWAYS AS IDENTITY,
        updated_at timestamptz DEFAULT now(),
        note text CHECK (note <> '' OR note IS NULL),
        attrs jsonb,
        geom geometry(Point, 4326) NOT NULL,
        outline geometry(Polygon, 4326));
    COMMENT ON TABLE sites IS 'Water sites';
    CREATE TABLE bare (id serial PRIMARY KEY, geom geometry);
";

const SETTINGS: &str = "[collections.sites]\nread_only_properties = [\"checked_by\"]\n";

async fn sites() -> TestApp {
    let path = settings_file("schemas", SETTINGS);
    TestApp::with_config(SITES, |c| c.settings = Some(path.clone())).await
}

const GEOJSON: (&str, &str) = ("content-type", "application/geo+json");
const MERGE: (&str, &str) = ("content-type", "application/merge-patch+json");

fn site(properties: Value) -> Value {
    let mut p = json!({"name": "spring 1", "kind": "spring"});
    p.as_object_mut()
        .unwrap()
        .extend(properties.as_object().unwrap().clone());
    point(1.0, 2.0, p)
}

/// Every JSON null in `v`, by pointer.
fn nulls(v: &Value, at: &str, found: &mut Vec<String>) {
    match v {
        Value::Null => found.push(at.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, item)| nulls(item, &format!("{at}/{i}"), found)),
        Value::Object(members) => members
            .iter()
            .for_each(|(k, item)| nulls(item, &format!("{at}/{k}"), found)),
        _ => {}
    }
}

/// The (pointer, code) of each error, sorted (properties are read in body order).
fn codes(r: &TestResponse) -> Vec<(String, String)> {
    let mut codes: Vec<(String, String)> = r.body["errors"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|e| {
            let at = |k: &str| e[k].as_str().unwrap().to_owned();
            (at("pointer"), at("code"))
        })
        .collect();
    codes.sort();
    codes
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = expected
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect();
    pairs.sort();
    pairs
}

#[tokio::test]
async fn the_schema_is_derived_from_the_catalog() {
    let app = sites().await;
    let r = app.get("/collections/sites/schema").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/schema+json");
    let s = &r.body;
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(s["$id"], "/collections/sites/schema");
    assert_eq!(
        (&s["type"], &s["description"]),
        (&json!("object"), &json!("Water sites"))
    );
    assert_eq!(s["required"], json!(["name", "kind", "geom"]));
    let p = &s["properties"];
    // The key: an integer the database assigns.
    assert_eq!(p["id"]["x-ogc-role"], "id");
    assert_eq!(
        (&p["id"]["type"], &p["id"]["readOnly"]),
        (&json!("integer"), &json!(true))
    );
    // Bounds and lists from CHECK constraints, domains and enum types.
    assert_eq!(
        (&p["name"]["type"], &p["name"]["maxLength"]),
        (&json!("string"), &json!(20))
    );
    assert_eq!(p["kind"]["enum"], json!(["well", "spring", "pond"]));
    // One type as a string (QGIS reads no other form), NULL said apart.
    assert_eq!(
        (&p["level"]["type"], &p["level"]["nullable"]),
        (&json!("integer"), &json!(true))
    );
    assert!(p["name"].get("nullable").is_none(), "{}", p["name"]);
    assert_eq!(
        (&p["level"]["minimum"], &p["level"]["maximum"]),
        (&json!(1), &json!(5))
    );
    assert_eq!(p["depth"]["exclusiveMinimum"], 0);
    assert!(p["depth"].get("minimum").is_none(), "{}", p["depth"]);
    assert_eq!(
        (&p["share"]["minimum"], &p["share"]["maximum"]),
        (&json!(0), &json!(100))
    );
    // NULL passes a CHECK: said by `nullable`, not among the values.
    assert_eq!(
        (&p["feeling"]["type"], &p["feeling"]["nullable"]),
        (&json!("string"), &json!(true))
    );
    assert_eq!(p["feeling"]["enum"], json!(["sad", "ok", "happy"]));
    assert!(
        p["note"].get("enum").is_none(),
        "an OR is the database's: {}",
        p["note"]
    );
    // Formats, and the geometries' roles.
    assert_eq!(p["code"]["format"], "uuid");
    assert_eq!(p["surveyed"]["format"], "date");
    assert_eq!(p["seen"]["format"], "date-time");
    assert_eq!(p["geom"]["format"], "geometry-point");
    assert_eq!(p["geom"]["x-ogc-role"], "primary-geometry");
    assert!(p["geom"].get("type").is_none());
    assert_eq!(p["outline"]["format"], "geometry-polygon");
    assert!(p["attrs"]["type"]
        .as_array()
        .unwrap()
        .contains(&json!("object")));
    // What clients cannot write.
    for name in [
        "id",
        "checked_by",
        "doubled",
        "serial_no",
        "updated_at",
        "outline",
    ] {
        assert_eq!(p[name]["readOnly"], true, "{name}");
    }
    for name in ["name", "kind", "level", "feeling", "attrs", "geom"] {
        assert!(p[name].get("readOnly").is_none(), "{name}");
    }
    // No null anywhere: a table without a comment has no description at all.
    let bare = app.get("/collections/bare/schema").await.body;
    assert!(bare.get("description").is_none(), "{bare}");
    let mut found = Vec::new();
    nulls(s, "", &mut found);
    nulls(&bare, "", &mut found);
    assert!(found.is_empty(), "{found:?}");
}

#[tokio::test]
async fn a_key_the_database_assigns_is_read_only_and_never_required() {
    let setup = "
        CREATE SEQUENCE b_seq;
        CREATE TABLE b (id text PRIMARY KEY, name text NOT NULL, geom geometry(Point, 4326));
        CREATE FUNCTION b_key() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.id := 'B.' || nextval('b_seq'); RETURN NEW; END $$;
        CREATE TRIGGER b_key BEFORE INSERT ON b FOR EACH ROW EXECUTE FUNCTION b_key();
        CREATE TABLE i (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, geom geometry);
        CREATE TABLE k (code text PRIMARY KEY, geom geometry(Point, 4326) NOT NULL);";
    let app = TestApp::new(setup).await;
    // A trigger may fill any column: nothing is required, the key is read-only.
    let b = app.get("/collections/b/schema").await.body;
    assert_eq!(b["required"], json!([]), "{b}");
    assert_eq!(b["properties"]["id"]["readOnly"], true);
    let i = app.get("/collections/i/schema").await.body;
    assert_eq!(
        (&i["required"], &i["properties"]["id"]["readOnly"]),
        (&json!([]), &json!(true))
    );
    // Clients choose k's keys: required, writable; and the collection says so.
    let k = app.get("/collections/k/schema").await.body;
    assert_eq!(k["required"], json!(["code", "geom"]), "{k}");
    assert!(k["properties"]["code"].get("readOnly").is_none());
    let coll = app.get("/collections/k").await.body;
    assert_eq!(coll["supportsNonAutogeneratedResourceIds"], true);
    // A key the database assigns is not written by a property (the
    // identity could be, with OVERRIDING SYSTEM VALUE, where the settings
    // say clients choose keys).
    let r = app.post("i", &point(0.0, 0.0, json!({"id": 77}))).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(codes(&r), pairs(&[("/properties/id", "read_only")]));
    let path = settings_file("identity-keys", "[collections.i]\nclient_keys = true\n");
    let app = TestApp::with_config(setup, |c| c.settings = Some(path.clone())).await;
    let i = app.get("/collections/i/schema").await.body;
    assert!(i["properties"]["id"].get("readOnly").is_none(), "{i}");
    let r = app.post("i", &point(0.0, 0.0, json!({"id": 77}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["ids"], json!([77]));
    // With client keys, the trigger no longer makes b's key optional.
    let path = settings_file("trigger-keys", "[collections.b]\nclient_keys = true\n");
    let app = TestApp::with_config(setup, |c| c.settings = Some(path.clone())).await;
    let b = app.get("/collections/b/schema").await.body;
    assert_eq!(b["required"], json!(["id"]), "{b}");
}

#[tokio::test]
async fn every_violation_of_every_feature_is_told_before_any_database_work() {
    let app = sites().await;
    let body = collection(vec![
        site(json!({"kind": "lake", "name": "a name far too long for it"})),
        site(json!({})),
        site(json!({"level": 9, "depth": 0, "share": 100.5, "feeling": "angry"})),
        site(
            json!({"checked_by": "me", "doubled": 4, "serial_no": 3, "updated_at": "2024-01-01T00:00:00Z"}),
        ),
        site(json!({"outline": null, "id": 5, "level": 0})),
    ]);
    let r = app.post("sites", &body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.headers["db-round-trips"], "0");
    assert_eq!(
        codes(&r),
        pairs(&[
            ("/features/0/properties/name", "too_long"),
            ("/features/0/properties/kind", "not_in_enum"),
            ("/features/2/properties/level", "out_of_range"),
            ("/features/2/properties/depth", "out_of_range"),
            ("/features/2/properties/share", "out_of_range"),
            ("/features/2/properties/feeling", "not_in_enum"),
            ("/features/3/properties/checked_by", "read_only"),
            ("/features/3/properties/doubled", "read_only"),
            ("/features/3/properties/serial_no", "read_only"),
            ("/features/3/properties/updated_at", "read_only"),
            ("/features/4/properties/outline", "unsupported_type"),
            ("/features/4/properties/id", "read_only"),
            ("/features/4/properties/level", "out_of_range"),
        ])
    );
    assert_eq!(r.body["total_errors"], 13);
    let messages: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        messages.contains(&"'kind': 'lake' is not one of 'well', 'spring', 'pond'"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"'depth': 0 is out of range: it must be greater than 0"),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("read_only_properties")),
        "{messages:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 0);
    // What the schema allows is written, on every path: INSERT, COPY, UPDATE.
    let good =
        site(json!({"level": 5, "depth": 0.5, "share": 100, "feeling": "happy", "kind": "well"}));
    let r = app.post("sites", &good).await;
    assert_eq!(r.status, 201, "{r:?}");
    let feeling = |f: &str| json!({"properties": {"feeling": f}});
    let r = write(&app, PATCH_1, "", feeling("ok")).await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = write(&app, PATCH_1, "", feeling("meh")).await;
    assert_eq!(codes(&r), pairs(&[("/properties/feeling", "not_in_enum")]));
    let r = app.get("/collections/sites/items?feeling=ok").await;
    assert_eq!(r.body["numberMatched"], 1, "{r:?}");
    let path = settings_file("schemas-copy", SETTINGS);
    let copy = TestApp::with_config(SITES, |c| {
        c.settings = Some(path.clone());
        c.write_strategy = Strategy::Copy;
    })
    .await;
    let many = (0..50)
        .map(|_| site(json!({"feeling": "sad", "level": 2})))
        .collect();
    let r = copy.post("sites", &collection(many)).await;
    assert_eq!(
        (r.status.as_u16(), &r.body["strategy"]),
        (201, &json!("copy")),
        "{r:?}"
    );
    assert_eq!(
        copy.db
            .int("SELECT count(*) FROM sites WHERE feeling = 'sad' AND doubled = 4")
            .await,
        50
    );
}

const POST: (&str, &str) = ("POST", "/collections/sites/items");
const PUT_1: (&str, &str) = ("PUT", "/collections/sites/items/1");
const PATCH_1: (&str, &str) = ("PATCH", "/collections/sites/items/1");

/// Send `body` as `method` to `path` (a merge patch for PATCH, else
/// GeoJSON), with the `Prefer` header `prefer` unless it is empty.
async fn write(
    app: &TestApp,
    (method, path): (&str, &str),
    prefer: &str,
    body: Value,
) -> TestResponse {
    let content_type = if method == "PATCH" { MERGE } else { GEOJSON };
    let mut headers = vec![content_type];
    if !prefer.is_empty() {
        headers.push(("prefer", prefer));
    }
    app.send(method, path, &headers, Some(body.to_string()))
        .await
}

#[tokio::test]
async fn prefer_handling_strict_and_lenient() {
    let app = sites().await;
    let extra = || site(json!({"colour": "blue", "checked_by": "me", "doubled": 1}));
    // Without a preference, and strictly: unknown and read-only refused.
    let expected = pairs(&[
        ("/properties/colour", "unknown_property"),
        ("/properties/checked_by", "read_only"),
        ("/properties/doubled", "read_only"),
    ]);
    let r = write(&app, POST, "", extra()).await;
    assert_eq!((r.status.as_u16(), codes(&r)), (422, expected.clone()));
    assert!(!r.headers.contains_key("preference-applied"), "{r:?}");
    let r = write(&app, POST, "handling=strict", extra()).await;
    assert_eq!((r.status.as_u16(), codes(&r)), (422, expected));
    assert_eq!(r.headers["preference-applied"], "handling=strict");
    // Lenient: both ignored; the read-only column keeps its default.
    let r = write(&app, POST, "handling=lenient", extra()).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.headers["preference-applied"], "handling=lenient");
    let stored = "SELECT concat_ws(',', name, checked_by, doubled) FROM sites";
    assert_eq!(app.db.text(stored).await.as_deref(), Some("spring 1"));
    // Values the columns do not take are refused however the body is read.
    let r = write(
        &app,
        POST,
        "handling=lenient",
        site(json!({"kind": "lake"})),
    )
    .await;
    assert_eq!(codes(&r), pairs(&[("/properties/kind", "not_in_enum")]));
    assert_eq!(r.headers["preference-applied"], "handling=lenient");
    // PUT and PATCH take a feature as it was read: its read-only properties
    // are left as they are, except when strict.
    let audited = "UPDATE sites SET checked_by = 'auditor'";
    app.db.client.batch_execute(audited).await.unwrap();
    let mut read = app.get("/collections/sites/items/1").await.body;
    read["properties"]["name"] = json!("renamed");
    let r = write(&app, PUT_1, "", read.clone()).await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = write(&app, PUT_1, "handling=strict", read).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.headers["preference-applied"], "handling=strict");
    let checked_by = ("/properties/checked_by".into(), "read_only".into());
    assert!(codes(&r).contains(&checked_by), "{r:?}");
    let patch = json!({"properties": {"checked_by": "me", "name": "patched"}});
    let r = write(&app, PATCH_1, "handling=strict", patch.clone()).await;
    assert_eq!(codes(&r), [checked_by]);
    let r = write(&app, PATCH_1, "handling=lenient", patch).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(r.headers["preference-applied"], "handling=lenient");
    let stored = "SELECT name || ' ' || checked_by FROM sites WHERE id = 1";
    assert_eq!(
        app.db.text(stored).await.as_deref(),
        Some("patched auditor")
    );
    // A refusal by the database (a CHECK it alone reads) says how the body
    // was read too, and so does a 404.
    let r = write(&app, PUT_1, "handling=lenient", site(json!({"note": ""}))).await;
    let refused = (r.status.as_u16(), &r.body["errors"][0]["sqlstate"]);
    assert_eq!(refused, (422, &json!("23514")), "{r:?}");
    assert_eq!(r.headers["preference-applied"], "handling=lenient");
    let missing = ("PUT", "/collections/sites/items/99");
    let r = write(&app, missing, "handling=strict", site(json!({}))).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.headers["preference-applied"], "handling=strict");
}

#[tokio::test]
async fn returnables_and_receivables_are_declared_and_linked() {
    let app = sites().await;
    let classes = app.get("/conformance").await.body["conformsTo"].clone();
    for family in ["ogcapi-features-5", "ogcapi-common-3"] {
        for class in ["schemas", "returnables-and-receivables"] {
            let uri = format!("http://www.opengis.net/spec/{family}/1.0/conf/{class}");
            assert!(classes.as_array().unwrap().contains(&json!(uri)), "{uri}");
        }
    }
    let r = app.get("/collections/sites").await;
    let links = r.body["links"].as_array().unwrap();
    let schema = links
        .iter()
        .find(|l| l["rel"] == "http://www.opengis.net/def/rel/ogc/1.0/schema")
        .unwrap_or_else(|| panic!("{links:?}"));
    assert_eq!(schema["href"], "/collections/sites/schema");
    assert_eq!(schema["type"], "application/schema+json");
}

#[tokio::test]
async fn read_only_properties_must_name_columns_a_feature_can_do_without() {
    for (settings, expected) in [
        (
            "read_only_properties = [\"nope\"]",
            "'nope', which is not a column",
        ),
        (
            "read_only_properties = [\"name\"]",
            "'name', which is NOT NULL without a default",
        ),
        (
            "read_only_properties = [\"geom\"]",
            "the feature geometry 'geom'",
        ),
    ] {
        let path = settings_file(
            "read-only-properties",
            &format!("[collections.sites]\n{settings}\n"),
        );
        let error = start_up_error(SITES, path, false).await;
        assert!(error.contains(expected), "{settings}: {error}");
    }
}

#[tokio::test]
async fn a_json_schema_validator_takes_the_schema_and_every_feature_read() {
    let app = sites().await;
    let features = vec![
        site(json!({})),
        site(
            json!({"level": 3, "depth": 2.5, "share": 12.5, "feeling": "ok",
                    "code": "67e55044-10b1-426f-9247-bb680e5fe0c8", "surveyed": "2024-05-01",
                    "seen": "2024-05-01T12:00:00Z", "attrs": {"a": [1, null]}, "note": "n"}),
        ),
    ];
    let r = app.post("sites", &collection(features)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let served = Served::start(&app).await;
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    for collection in ["sites", "bare"] {
        let out = run(
            &python,
            &["tests/clients/schema_check.py", &served.url, collection],
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = if collection == "sites" { "2" } else { "0" };
        assert_eq!(stdout.trim(), expected, "{collection}");
    }
}
