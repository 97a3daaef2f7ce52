//! Authentication and authorisation: API keys and JWTs granting read and/or
//! write per collection; 401 without or with bad credentials, 403 without
//! the right; OPTIONS and Allow follow the caller's rights.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::support::{collection, create_role, point, settings_file, start_up_error, TestApp};

const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
    CREATE TABLE other (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
    INSERT INTO other (name, geom) VALUES ('kept', 'SRID=4326;POINT(1 2)');
";

/// SHA-256 hex of a key, as `featurepipe api-key` writes it.
pub fn sha256(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const EDITOR: &str = "fp_editor_key_for_tests";
const READER: &str = "fp_reader_key_for_tests";
const WRITER: &str = "fp_write_only_key_for_tests";
const SECRET: &str = "a shared secret of the tests, long enough for HS256";

async fn app(tweak: impl FnOnce(&mut featurepipe::config::Config)) -> TestApp {
    let settings = format!(
        "[api_keys.editor]\nsha256 = \"{}\"\nscope = \"read:* write:pts\"\n\
         [api_keys.reader]\nsha256 = \"{}\"\nscope = \"read:pts\"\n\
         [api_keys.writer]\nsha256 = \"{}\"\nscope = \"write:pts\"\n",
        sha256(EDITOR),
        sha256(READER),
        sha256(WRITER)
    );
    let path = settings_file("keys", &settings);
    TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
        tweak(c);
    })
    .await
}

fn bearer(credential: &str) -> String {
    format!("Bearer {credential}")
}

async fn post_as(app: &TestApp, auth: &[(&str, &str)], coll: &str) -> crate::support::TestResponse {
    let mut headers = vec![("content-type", "application/geo+json")];
    headers.extend_from_slice(auth);
    let body = collection(vec![point(1.0, 2.0, json!({"name": "new"}))]);
    app.send(
        "POST",
        &format!("/collections/{coll}/items"),
        &headers,
        Some(body.to_string()),
    )
    .await
}

async fn session_as(
    app: &TestApp,
    auth: (&str, &str),
    session: &Value,
) -> crate::support::TestResponse {
    let headers = [auth, ("content-type", "application/json")];
    app.send("POST", "/transactions", &headers, Some(session.to_string()))
        .await
}

async fn count(app: &TestApp, table: &str) -> i64 {
    app.db
        .client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn api_keys_grant_read_and_write_per_collection() {
    let app = app(|_| {}).await;
    let editor = bearer(EDITOR);
    let reader = bearer(READER);

    // No credentials: the open documents answer, the data asks for them.
    for path in ["/", "/conformance", "/api"] {
        assert_eq!(app.get(path).await.status, 200, "{path}");
    }
    for path in ["/collections", "/collections/pts", "/collections/pts/items"] {
        let r = app.get(path).await;
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert_eq!(
            r.headers["www-authenticate"],
            "Bearer realm=\"featurepipe\""
        );
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    let r = post_as(&app, &[], "pts").await;
    assert_eq!(r.status, 401, "{r:?}");

    // Bad credentials are a 401, whatever the endpoint needs.
    for auth in [
        ("authorization", bearer("fp_wrong").as_str()),
        ("authorization", "Basic ZWRpdG9yOnNlY3JldA=="),
        ("x-api-key", "fp_wrong"),
    ] {
        let r = post_as(&app, &[auth], "pts").await;
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
        let r = app
            .send("GET", "/collections/pts/items", &[auth], None)
            .await;
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
    }

    // The reader reads pts, and nothing else; writing is a 403.
    let as_reader = [("authorization", reader.as_str())];
    let r = app.send("GET", "/collections", &as_reader, None).await;
    assert_eq!(r.status, 200);
    let ids: Vec<&str> = r.body["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pts"]);
    let r = app
        .send("GET", "/collections/other/items", &as_reader, None)
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body["detail"]
        .as_str()
        .unwrap()
        .contains("'reader' may not read 'other'"));
    let r = post_as(&app, &as_reader, "pts").await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = app
        .send("DELETE", "/collections/other/items/1", &as_reader, None)
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = app
        .send("OPTIONS", "/collections/pts/items", &as_reader, None)
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    assert!(!r.headers.contains_key("accept-post"));
    let r = app
        .send("OPTIONS", "/collections/pts/items/1", &[], None)
        .await;
    assert_eq!(r.status, 401, "anonymous may do nothing: {r:?}");
    let r = app
        .send("OPTIONS", "/collections/nope/items", &[], None)
        .await;
    assert_eq!(r.status, 401, "and learns nothing of what exists: {r:?}");

    // The editor writes pts (Authorization or X-API-Key) but only reads other.
    let r = post_as(&app, &[("authorization", editor.as_str())], "pts").await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = post_as(&app, &[("x-api-key", EDITOR)], "pts").await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["ids"][0].to_string();
    let as_editor = [("authorization", editor.as_str())];
    let r = app
        .send(
            "PATCH",
            &format!("/collections/pts/items/{id}"),
            &[
                as_editor[0],
                ("content-type", "application/merge-patch+json"),
            ],
            Some(json!({"properties": {"name": "patched"}}).to_string()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = app
        .send(
            "DELETE",
            &format!("/collections/pts/items/{id}"),
            &as_editor,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = app
        .send("OPTIONS", "/collections/pts/items/1", &as_editor, None)
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, PUT, PATCH, DELETE, OPTIONS");
    assert_eq!(
        r.headers["accept-patch"],
        "application/merge-patch+json, application/fg+json"
    );
    let r = app
        .send("OPTIONS", "/collections/other/items", &as_editor, None)
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    let r = post_as(&app, &as_editor, "other").await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = app
        .send("GET", "/collections/other/items/1", &as_editor, None)
        .await;
    assert_eq!(r.status, 200, "{r:?}");

    // An edit session is refused whole when one operation is not allowed.
    let session = json!({"operations": [
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"name": "s"}))},
        {"op": "delete", "collection": "other", "id": 1},
    ]});
    let r = session_as(&app, as_editor[0], &session).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.body["errors"][0]["pointer"], "/operations/1/collection");
    assert_eq!(r.body["errors"][0]["operation"], 1);

    // Refused before the body is looked at: no word about its columns.
    let nosy = json!({"operations": [
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"nmae": 1}))},
    ]});
    let r = session_as(&app, ("x-api-key", "fp_wrong"), &nosy).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = session_as(&app, as_reader[0], &nosy).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(!r.body.to_string().contains("nmae"), "{r:?}");
    let other = json!({"operations": [
        {"op": "insert", "collection": "other", "feature": point(0.0, 0.0, json!({"nmae": 1}))},
    ]});
    let r = session_as(&app, as_editor[0], &other).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(!r.body.to_string().contains("nmae"), "{r:?}");

    // A write-only key writes, but is not answered with the feature.
    let mut headers = vec![
        ("content-type", "application/geo+json"),
        ("prefer", "return=representation"),
        ("x-api-key", WRITER),
    ];
    let one = point(3.0, 3.0, json!({"name": "w"})).to_string();
    let r = app
        .send("POST", "/collections/pts/items", &headers, Some(one))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["type"], Value::Null, "no feature: {r:?}");
    let location = r.headers["location"].to_str().unwrap();
    let item = format!(
        "/collections/pts/items/{}",
        location.rsplit('/').next().unwrap()
    );
    headers[0] = ("content-type", "application/merge-patch+json");
    let r = app.send("PATCH", &item, &headers, Some("{}".into())).await;
    assert_eq!(r.status, 204, "{r:?}");
    let r = app
        .send("DELETE", &item, &[("x-api-key", WRITER)], None)
        .await;
    assert_eq!(r.status, 204, "{r:?}");

    // Idempotency-Keys are each caller's own: the same key is not a replay for another.
    let body = collection(vec![point(1.0, 2.0, json!({"name": "k"}))]).to_string();
    for key in [EDITOR, WRITER] {
        let headers = [
            ("content-type", "application/geo+json"),
            ("idempotency-key", "shared-key"),
            ("x-api-key", key),
        ];
        let r = app
            .send(
                "POST",
                "/collections/pts/items",
                &headers,
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        assert!(!r.headers.contains_key("idempotent-replayed"), "{r:?}");
    }
    let stored = "DELETE FROM pts WHERE name = 'k'";
    app.db.client.batch_execute(stored).await.unwrap();

    // What was refused changed nothing: one insert kept out of the three.
    assert_eq!(count(&app, "pts").await, 1);
    assert_eq!(count(&app, "other").await, 1);
}

fn token(claims: &Value, alg: Algorithm, key: &EncodingKey) -> String {
    encode(&Header::new(alg), claims, key).unwrap()
}

fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

#[tokio::test]
async fn jwt_hs256_and_rs256_tokens_carry_scopes() {
    let dir = std::env::temp_dir().join(format!("featurepipe-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let private = dir.join("private.pem");
    let public = dir.join("public.pem");
    let status = std::process::Command::new("openssl")
        .args(["genrsa", "-out", private.to_str().unwrap(), "2048"])
        .output()
        .expect("openssl runs");
    assert!(status.status.success(), "{status:?}");
    let status = std::process::Command::new("openssl")
        .args([
            "rsa",
            "-in",
            private.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ])
        .output()
        .expect("openssl runs");
    assert!(status.status.success(), "{status:?}");
    let public_path = public.clone();
    let app = app(move |c| {
        c.jwt_secret = Some(SECRET.into());
        c.jwt_public_key = Some(public_path);
    })
    .await;
    let hs = EncodingKey::from_secret(SECRET.as_bytes());
    let rs = EncodingKey::from_rsa_pem(&std::fs::read(&private).unwrap()).unwrap();
    let writer = json!({"sub": "surveyor", "exp": in_an_hour(), "scope": "read:pts write:pts"});

    for (alg, key) in [(Algorithm::HS256, &hs), (Algorithm::RS256, &rs)] {
        let t = bearer(&token(&writer, alg, key));
        let r = post_as(&app, &[("authorization", t.as_str())], "pts").await;
        assert_eq!(r.status, 201, "{alg:?}: {r:?}");
        let r = post_as(&app, &[("authorization", t.as_str())], "other").await;
        assert_eq!(r.status, 403, "{alg:?}: {r:?}");
        assert!(r.body["detail"].as_str().unwrap().contains("'surveyor'"));
    }
    // A list of scope entries works too.
    let listed = json!({"sub": "lister", "exp": in_an_hour(), "scope": ["read:other"]});
    let t = bearer(&token(&listed, Algorithm::HS256, &hs));
    let r = app
        .send(
            "GET",
            "/collections/other/items",
            &[("authorization", t.as_str())],
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");

    let public_pem = std::fs::read(&public).unwrap();
    let refused = [
        (
            "expired",
            token(
                &json!({"sub": "x", "exp": 1_000_000, "scope": "write:pts"}),
                Algorithm::HS256,
                &hs,
            ),
        ),
        (
            "no exp",
            token(
                &json!({"sub": "x", "scope": "write:pts"}),
                Algorithm::HS256,
                &hs,
            ),
        ),
        (
            "wrong secret",
            token(
                &writer,
                Algorithm::HS256,
                &EncodingKey::from_secret(b"not the secret"),
            ),
        ),
        // The RSA public key used as an HMAC secret: the classic confusion attack.
        (
            "alg confusion",
            token(
                &writer,
                Algorithm::HS256,
                &EncodingKey::from_secret(&public_pem),
            ),
        ),
        ("unsigned", {
            let t = token(&writer, Algorithm::HS256, &hs);
            let mut parts: Vec<&str> = t.split('.').collect();
            parts[0] = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"; // {"alg":"none","typ":"JWT"}
            format!("{}.{}.", parts[0], parts[1])
        }),
        (
            "bad scope",
            token(
                &json!({"sub": "x", "exp": in_an_hour(), "scope": "admin"}),
                Algorithm::HS256,
                &hs,
            ),
        ),
    ];
    for (what, t) in refused {
        let t = bearer(&t);
        let r = post_as(&app, &[("authorization", t.as_str())], "pts").await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    assert_eq!(count(&app, "pts").await, 2);
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_configured_audience_must_be_in_the_token() {
    let path = settings_file(
        "aud",
        "[auth]\naudience = \"featurepipe\"\nissuer = \"https://idp\"\n",
    );
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
        c.jwt_secret = Some(SECRET.into());
    })
    .await;
    let hs = EncodingKey::from_secret(SECRET.as_bytes());
    let claims = |extra: Value| {
        let mut c = json!({"sub": "s", "exp": in_an_hour(), "scope": "write:pts"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        bearer(&token(&c, Algorithm::HS256, &hs))
    };
    for (what, extra, status) in [
        ("neither", json!({}), 401),
        ("no iss", json!({"aud": "featurepipe"}), 401),
        (
            "another aud",
            json!({"aud": "other", "iss": "https://idp"}),
            401,
        ),
        (
            "not yet valid",
            json!({"aud": "featurepipe", "iss": "https://idp", "nbf": in_an_hour()}),
            401,
        ),
        (
            "both",
            json!({"aud": "featurepipe", "iss": "https://idp"}),
            201,
        ),
    ] {
        let t = claims(extra);
        let r = post_as(&app, &[("authorization", t.as_str())], "pts").await;
        assert_eq!(r.status, status, "{what}: {r:?}");
    }
}

#[tokio::test]
async fn anonymous_rights_and_refused_configurations() {
    // Public reading, keyed writing.
    let path = settings_file(
        "anon",
        &format!(
            "[auth]\nanonymous = \"read:*\"\n[api_keys.editor]\nsha256 = \"{}\"\nscope = \"write:pts\"\n",
            sha256(EDITOR)
        ),
    );
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    assert_eq!(app.get("/collections/other/items").await.status, 200);
    assert_eq!(post_as(&app, &[], "pts").await.status, 401);
    let r = post_as(&app, &[("x-api-key", EDITOR)], "pts").await;
    assert_eq!(r.status, 201, "{r:?}");
    // A key's rights include what anyone may do.
    let r = app
        .send(
            "OPTIONS",
            "/collections/pts/items",
            &[("x-api-key", EDITOR)],
            None,
        )
        .await;
    assert_eq!(r.headers["allow"], "GET, HEAD, POST, OPTIONS");

    // Authentication on with no way in refuses to start; so do bad settings.
    for (text, expected) in [
        ("", "nobody could do anything"),
        (
            "[api_keys.a]\nsha256 = \"abc\"\nscope = \"read:*\"",
            "64 hex digits",
        ),
        (
            "[api_keys.a]\nsha256 = \"{HASH}\"\nscope = \"admin:*\"",
            "not a scope entry",
        ),
        ("[auth]\nanonymous = \"read\"", "auth.anonymous"),
        (
            "[auth]\nanonymous = \"read:*\"\nset_role = true",
            "anonymous_role",
        ),
    ] {
        let path = settings_file("bad", &text.replace("{HASH}", &sha256("k")));
        let message = start_up_error(SETUP, path, true).await;
        assert!(message.contains(expected), "{text}: {message}");
    }
}

#[tokio::test]
async fn the_api_key_command_makes_a_key_that_works() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"))
        .args(["api-key", "field-app", "--scope", "read:pts write:pts"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let key = text
        .lines()
        .find(|l| l.starts_with("fp_"))
        .expect("a key")
        .to_owned();
    let toml = &text[text.find("[api_keys.field-app]").expect("settings lines")..];
    assert!(
        !toml.contains(&key),
        "only the hash is for the settings file"
    );
    let path = settings_file("made", toml);
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    let r = post_as(&app, &[("x-api-key", key.as_str())], "pts").await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = post_as(&app, &[("x-api-key", key.as_str())], "other").await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("'field-app'"));

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"))
        .args(["api-key", "x", "--scope", "everything"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// Two roles, and a table each sees only its own rows of.
pub fn rls_setup() -> String {
    let roles =
        create_role("fp_test_field_a", "NOLOGIN") + &create_role("fp_test_field_b", "NOLOGIN");
    format!("{roles}{RLS_TABLE}")
}

const RLS_TABLE: &str = "
    CREATE TABLE notes (id serial PRIMARY KEY, owner text NOT NULL DEFAULT current_user,
                        name text, geom geometry(Point, 4326));
    ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
    CREATE POLICY own ON notes USING (owner = current_user) WITH CHECK (owner = current_user);
    GRANT SELECT, INSERT, UPDATE, DELETE ON notes TO fp_test_field_a, fp_test_field_b;
    GRANT USAGE ON SEQUENCE notes_id_seq TO fp_test_field_a, fp_test_field_b;
";

#[tokio::test]
async fn set_role_runs_each_request_as_the_credentials_role_under_row_level_security() {
    let keys = [
        ("a", "fp_key_a", "fp_test_field_a"),
        ("b", "fp_key_b", "fp_test_field_b"),
        ("c", "fp_key_c", "fp_test_no_such_role"),
    ];
    let mut settings = String::from("[auth]\nset_role = true\n");
    for (name, key, role) in keys {
        settings.push_str(&format!(
            "[api_keys.{name}]\nsha256 = \"{}\"\nscope = \"read:notes write:notes\"\nrole = \"{role}\"\n",
            sha256(key)
        ));
    }
    let path = settings_file("roles", &settings);
    let app = TestApp::with_config(&rls_setup(), |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    // The service's own schema (idempotency keys, featurepipe.fail) is the roles' too.
    app.db
        .client
        .batch_execute("GRANT USAGE ON SCHEMA featurepipe TO fp_test_field_a, fp_test_field_b")
        .await
        .unwrap();
    let a = [("x-api-key", "fp_key_a")];
    let b = [("x-api-key", "fp_key_b")];

    let r = post_as(&app, &a, "notes").await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["ids"][0].to_string();
    let owner: String = app
        .db
        .client
        .query_one("SELECT owner FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, "fp_test_field_a", "written as the key's role");

    // b cannot see, change or delete a's feature: PostgreSQL's policy decides.
    let r = app.send("GET", "/collections/notes/items", &b, None).await;
    assert_eq!(r.body["numberMatched"], 0, "{r:?}");
    let item = format!("/collections/notes/items/{id}");
    assert_eq!(app.send("GET", &item, &b, None).await.status, 404);
    assert_eq!(app.send("DELETE", &item, &b, None).await.status, 404);
    let r = app.send("GET", &item, &a, None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = app
        .send(
            "PATCH",
            &item,
            &[a[0], ("content-type", "application/merge-patch+json")],
            Some(json!({"properties": {"name": "mine"}}).to_string()),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    // Writing a row the policy refuses is a 403; nothing is written.
    let mut headers = vec![("content-type", "application/geo+json")];
    headers.extend_from_slice(&a);
    let forged = collection(vec![point(0.0, 0.0, json!({"owner": "fp_test_field_b"}))]);
    let r = app
        .send(
            "POST",
            "/collections/notes/items",
            &headers,
            Some(forged.to_string()),
        )
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    // An edit session runs as the role too.
    let session = json!({"operations": [
        {"op": "insert", "collection": "notes", "feature": point(0.0, 0.0, json!({"name": "s"}))},
    ]});
    let r = session_as(&app, b[0], &session).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = app.send("GET", "/collections", &b, None).await;
    assert_eq!(r.status, 200, "{r:?}");
    // A role that cannot be assumed is a 403, not the service's own rights.
    let r = post_as(&app, &[("x-api-key", "fp_key_c")], "notes").await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("fp_test_no_such_role"),
        "{r:?}"
    );

    let owners: Vec<String> = app
        .db
        .client
        .query(
            "SELECT owner || ':' || coalesce(name, '') FROM notes ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, ["fp_test_field_a:mine", "fp_test_field_b:s"]);
}

#[tokio::test]
async fn set_role_keyed_writes_run_the_bookkeeping_as_the_service() {
    let mut settings = String::from("[auth]\nset_role = true\n");
    settings.push_str(&format!(
        "[api_keys.a]\nsha256 = \"{}\"\nscope = \"read:* write:*\"\nrole = \"fp_test_field_a\"\n",
        sha256("fp_key_a")
    ));
    let path = settings_file("keyed-roles", &settings);
    // A table the role may insert into but not read (but for the key RETURNING needs).
    let setup = format!(
        "{}
         CREATE TABLE drop_box (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));
         GRANT INSERT, SELECT (id) ON drop_box TO fp_test_field_a;
         GRANT USAGE ON SEQUENCE drop_box_id_seq TO fp_test_field_a;",
        rls_setup()
    );
    let app = TestApp::with_config(&setup, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    app.db
        .client
        .batch_execute("GRANT USAGE ON SCHEMA featurepipe TO fp_test_field_a")
        .await
        .unwrap();
    // The caller's role may not run the idempotency functions itself.
    let may = "SELECT has_function_privilege('fp_test_field_a', \
               'featurepipe.idempotency_claim(text, text)', 'EXECUTE')::text";
    assert_eq!(app.db.text(may).await.as_deref(), Some("false"));
    let keyed = [("x-api-key", "fp_key_a"), ("idempotency-key", "role-key")];
    let first = post_as(&app, &keyed, "notes").await;
    assert_eq!(first.status, 201, "{first:?}");
    let again = post_as(&app, &keyed, "notes").await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.body, first.body);
    // An edit session and a PATCH under keys, as the role, too.
    let session = json!({"operations": [
        {"op": "insert", "collection": "notes", "feature": point(0.0, 0.0, json!({"name": "s"}))},
    ]});
    let headers = [
        keyed[0],
        ("idempotency-key", "role-session"),
        ("content-type", "application/json"),
    ];
    for _ in 0..2 {
        let r = app
            .send("POST", "/transactions", &headers, Some(session.to_string()))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let item = format!("/collections/notes/items/{}", first.body["ids"][0]);
    let headers = [
        keyed[0],
        ("idempotency-key", "role-patch"),
        ("content-type", "application/merge-patch+json"),
    ];
    for _ in 0..2 {
        let patch = json!({"properties": {"name": "patched"}}).to_string();
        let r = app.send("PATCH", &item, &headers, Some(patch)).await;
        assert_eq!(r.status, 204, "{r:?}");
    }
    let owners: Vec<String> = app
        .db
        .client
        .query("SELECT owner || ':' || name FROM notes ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, ["fp_test_field_a:patched", "fp_test_field_a:s"]);
    // The feature cannot be shown to a role that may not read it: the
    // answer is the 201 report (never an error after the write), and so is its replay.
    let headers = [
        keyed[0],
        ("idempotency-key", "role-drop"),
        ("content-type", "application/geo+json"),
        ("prefer", "return=representation"),
    ];
    let one = point(1.0, 2.0, json!({"name": "dropped"})).to_string();
    let first = app
        .send(
            "POST",
            "/collections/drop_box/items",
            &headers,
            Some(one.clone()),
        )
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(first.body["ids"], json!([1]), "{first:?}");
    assert!(first.headers["location"]
        .to_str()
        .unwrap()
        .ends_with("/items/1"));
    assert!(!first.headers.contains_key("preference-applied"));
    let again = app
        .send("POST", "/collections/drop_box/items", &headers, Some(one))
        .await;
    assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(app.db.int("SELECT count(*) FROM drop_box").await, 1);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM featurepipe.idempotency WHERE status IS NOT NULL")
            .await,
        4
    );
}

#[tokio::test]
async fn a_token_is_taken_only_a_few_seconds_past_its_exp_or_before_its_nbf() {
    let now = chrono::Utc::now().timestamp();
    let hs = EncodingKey::from_secret(SECRET.as_bytes());
    let with = |exp: i64, nbf: Option<i64>| {
        let mut c = json!({"sub": "s", "exp": exp, "scope": "read:pts"});
        if let Some(nbf) = nbf {
            c["nbf"] = json!(nbf);
        }
        bearer(&token(&c, Algorithm::HS256, &hs))
    };
    // The default: 5 s (the library's own would be 60 s).
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.jwt_secret = Some(SECRET.into());
    })
    .await;
    for (what, credential, status) in [
        ("expired 20 s ago", with(now - 20, None), 401),
        ("expired 1 s ago", with(now - 1, None), 200),
        ("valid from 20 s on", with(now + 3600, Some(now + 20)), 401),
        ("valid from 1 s on", with(now + 3600, Some(now + 1)), 200),
    ] {
        let r = app
            .send(
                "GET",
                "/collections/pts/items",
                &[("authorization", &credential)],
                None,
            )
            .await;
        assert_eq!(r.status, status, "{what}: {r:?}");
    }
    // Set to 0: not a second past exp.
    let path = settings_file("leeway", "[auth]\njwt_leeway = 0\n");
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
        c.jwt_secret = Some(SECRET.into());
    })
    .await;
    let late = with(now - 2, None);
    let r = app
        .send(
            "GET",
            "/collections/pts/items",
            &[("authorization", &late)],
            None,
        )
        .await;
    assert_eq!(r.status, 401, "{r:?}");
}
