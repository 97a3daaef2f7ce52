//! Idempotency-Key: a retry returns the first response and writes nothing,
//! even when the first response was lost on the way.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use tokio_postgres::error::SqlState;

use crate::support::{
    collection, config, connect, create_role, point, Served, TestApp, TestDb, TestResponse,
};

const SETUP: &str = "CREATE TABLE pts (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))";

fn body(n: usize) -> String {
    collection((0..n).map(|i| point(0.0, 0.0, json!({"n": i}))).collect()).to_string()
}

async fn post(app: &TestApp, key: &str, body: &str) -> TestResponse {
    app.send(
        "POST",
        "/collections/pts/items",
        &[
            ("content-type", "application/geo+json"),
            ("idempotency-key", key),
        ],
        Some(body.to_owned()),
    )
    .await
}

#[tokio::test]
async fn a_retry_returns_the_first_response_and_writes_nothing() {
    let app = TestApp::new(SETUP).await;
    // Pipelined INSERTs (3 features) and COPY (150 features) alike.
    for (key, n) in [("k-insert", 3), ("k-copy", 150)] {
        let first = post(&app, key, &body(n)).await;
        assert_eq!(first.status, 201, "{first:?}");
        let before = app.db.int("SELECT count(*) FROM pts").await;
        let again = post(&app, key, &body(n)).await;
        assert_eq!(again.status, 201, "{again:?}");
        assert_eq!(again.body, first.body);
        assert_eq!(again.headers["idempotent-replayed"], "true");
        assert_eq!(app.db.int("SELECT count(*) FROM pts").await, before);
    }
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 153);
    // The same key for another request is refused.
    let r = post(&app, "k-insert", &body(4)).await;
    assert_eq!(r.status, 422, "{r:?}");
    // A single feature: its Location comes back too.
    let one = point(1.0, 1.0, json!({"n": 777})).to_string();
    let first = post(&app, "k-one", &one).await;
    let again = post(&app, "k-one", &one).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(again.status, 201, "{again:?} {:?}", again.headers);
    assert_eq!(again.headers["location"], first.headers["location"]);
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts WHERE n = 777").await,
        1
    );
    // A request that failed wrote nothing and kept no key: a fixed retry goes through.
    app.db
        .client
        .batch_execute("ALTER TABLE pts ADD CHECK (n < 1000)")
        .await
        .unwrap();
    let bad = point(0.0, 0.0, json!({"n": 5000})).to_string();
    assert_eq!(post(&app, "k-bad", &bad).await.status, 422);
    assert_eq!(post(&app, "k-bad", &one).await.status, 201);
}

#[tokio::test]
async fn the_first_response_lost_on_the_way() {
    let app = TestApp::new(SETUP).await;
    let served = Served::start(&app).await;
    let payload = body(200);
    // Send the request; once it has committed, hang up without reading the answer.
    let mut stream = tokio::net::TcpStream::connect(served.url.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST /collections/pts/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/geo+json\r\n\
         Idempotency-Key: lost-1\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(payload.as_bytes()).await.unwrap();
    let stored =
        "SELECT count(*) FROM featurepipe.idempotency WHERE key = 'lost-1' AND status IS NOT NULL";
    // Polled, not timed: hanging up before the response is stored would
    // test something else (a retry while the first request still runs).
    let mut committed = false;
    for _ in 0..1200 {
        if app.db.int(stored).await == 1 {
            committed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(committed, "the first request never stored its response");
    drop(stream);
    let retry = post(&app, "lost-1", &payload).await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    let ids: Vec<i64> = retry.body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 200);
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts").await,
        200,
        "no duplicates"
    );
    assert_eq!(app.db.int("SELECT min(id)::int8 FROM pts").await, ids[0]);
}

#[tokio::test]
async fn concurrent_requests_with_one_key_write_once() {
    let app = TestApp::new(SETUP).await;
    let payload = body(50);
    let (a, b) = tokio::join!(post(&app, "same", &payload), post(&app, "same", &payload));
    let statuses = [a.status.as_u16(), b.status.as_u16()];
    assert!(statuses.contains(&201), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [201, 409].contains(s)),
        "{a:?} {b:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 50);
    let r = post(&app, "same", &payload).await;
    assert_eq!(r.status, 201);
    let first = if a.status == 201 { &a.body } else { &b.body };
    assert_eq!(&r.body, first as &Value);
}

#[tokio::test]
async fn keys_expire() {
    let app = TestApp::with_config(SETUP, |c| c.idempotency_ttl = Duration::from_secs(120)).await;
    assert_eq!(post(&app, "short", &body(1)).await.status, 201);
    // Time passes in the table, not on the clock: no sleep to race.
    let age = |by: &str| {
        format!("UPDATE featurepipe.idempotency SET created = created - interval '{by}'")
    };
    app.db.client.batch_execute(&age("100 s")).await.unwrap();
    let r = post(&app, "short", &body(1)).await;
    assert_eq!(r.headers["idempotent-replayed"], "true", "within the TTL");
    app.db.client.batch_execute(&age("30 s")).await.unwrap();
    let r = post(&app, "short", &body(1)).await;
    assert_eq!(r.status, 201);
    assert!(!r.headers.contains_key("idempotent-replayed"));
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 2);
    let r = app
        .send(
            "POST",
            "/collections/pts/items",
            &[
                ("content-type", "application/geo+json"),
                ("idempotency-key", ""),
            ],
            Some(body(1)),
        )
        .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn edit_sessions_take_keys_too() {
    let app = TestApp::new(SETUP).await;
    let ops = json!({"operations": [
        {"op": "insert", "collection": "pts", "features": serde_json::from_str::<Value>(&body(3)).unwrap()},
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"n": 9}))},
    ]})
    .to_string();
    let send = |key: &'static str, body: String| {
        let app = &app;
        async move {
            app.send(
                "POST",
                "/transactions",
                &[
                    ("content-type", "application/json"),
                    ("idempotency-key", key),
                ],
                Some(body),
            )
            .await
        }
    };
    let first = send("s-1", ops.clone()).await;
    assert_eq!(first.status, 200, "{first:?}");
    let again = send("s-1", ops.clone()).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 4);
    assert_eq!(send("s-1", ops.replace("9", "10")).await.status, 422);
    // A failed session keeps no key.
    let bad = json!({"operations": [{"op": "delete", "collection": "pts", "id": 999}]}).to_string();
    assert_eq!(send("s-2", bad).await.status, 404);
    assert_eq!(send("s-2", ops).await.status, 200);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 8);
}

const CHANGES: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, n int, geom geometry(Point, 4326));
    CREATE TABLE sites (code text PRIMARY KEY, n int, geom geometry(Point, 4326));
    CREATE TABLE changes (n int);
    CREATE FUNCTION count_change() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN INSERT INTO changes VALUES (1); RETURN COALESCE(NEW, OLD); END $$;
    CREATE TRIGGER counted BEFORE UPDATE OR DELETE ON pts FOR EACH ROW EXECUTE FUNCTION count_change();
    INSERT INTO pts (n, geom) VALUES (1, 'SRID=4326;POINT(0 0)'), (2, 'SRID=4326;POINT(1 1)');
";

async fn keyed(
    app: &TestApp,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    key: &str,
    body: Option<String>,
) -> TestResponse {
    let mut headers = vec![("idempotency-key", key)];
    if body.is_some() {
        headers.push(("content-type", "application/geo+json"));
    }
    headers.extend_from_slice(extra);
    app.send(method, path, &headers, body).await
}

#[tokio::test]
async fn put_patch_and_delete_take_keys() {
    const ONE: &str = "/collections/pts/items/1";
    const TWO: &str = "/collections/pts/items/2";
    const SITE: &str = "/collections/sites/items/a1";
    let app = TestApp::new(CHANGES).await;
    let changes = || app.db.int("SELECT count(*) FROM changes");
    let feature = |n: i32| Some(point(5.0, 5.0, json!({"n": n})).to_string());
    let rep = [("prefer", "return=representation")];

    // PUT: the replay has the first answer's status, body and ETag, and changes nothing.
    let first = keyed(&app, "PUT", ONE, &rep, "put-1", feature(10)).await;
    assert_eq!(first.status, 200, "{first:?}");
    let again = keyed(&app, "PUT", ONE, &rep, "put-1", feature(10)).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.headers["etag"], first.headers["etag"]);
    assert_eq!(again.headers["content-type"], "application/geo+json");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(changes().await, 1);
    // The same key on another feature or with another body is refused.
    let r = keyed(&app, "PUT", TWO, &rep, "put-1", feature(10)).await;
    assert_eq!(r.status, 422, "{r:?}");
    let r = keyed(&app, "PUT", ONE, &rep, "put-1", feature(11)).await;
    assert_eq!(r.status, 422, "{r:?}");

    // PATCH: a failed precondition keeps no key; the corrected retry writes once.
    let patch = || Some(json!({"properties": {"n": 20}}).to_string());
    let stale = [("if-match", "\"not-the-etag\"")];
    let r = keyed(&app, "PATCH", TWO, &stale, "patch-1", patch()).await;
    assert_eq!(r.status, 412, "{r:?}");
    let first = keyed(&app, "PATCH", TWO, &[], "patch-1", patch()).await;
    assert_eq!(first.status, 204, "{first:?}");
    let again = keyed(&app, "PATCH", TWO, &[], "patch-1", patch()).await;
    assert_eq!(again.status, 204, "{again:?}");
    assert_eq!(again.headers["etag"], first.headers["etag"]);
    assert_eq!(changes().await, 2);
    assert_eq!(app.db.int("SELECT n::int8 FROM pts WHERE id = 2").await, 20);

    // DELETE: the retry of a delete whose answer was lost is a 204, not a 404.
    let first = keyed(&app, "DELETE", TWO, &[], "del-1", None).await;
    assert_eq!(first.status, 204, "{first:?}");
    let again = keyed(&app, "DELETE", TWO, &[], "del-1", None).await;
    assert_eq!(again.status, 204, "{again:?}");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(app.send("DELETE", TWO, &[], None).await.status, 404);
    assert_eq!(changes().await, 3);

    // PUT creating where clients choose keys: one row, and the replay has its Location.
    let first = keyed(&app, "PUT", SITE, &[], "create-1", feature(1)).await;
    assert_eq!(first.status, 201, "{first:?}");
    let again = keyed(&app, "PUT", SITE, &[], "create-1", feature(1)).await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.headers["location"], first.headers["location"]);
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 1);
}

#[tokio::test]
async fn skip_mode_takes_keys_and_batch_mode_says_why_not() {
    let app = TestApp::new(SETUP).await;
    app.db
        .client
        .batch_execute("ALTER TABLE pts ADD CONSTRAINT small CHECK (n < 100)")
        .await
        .unwrap();
    let ops = json!({"operations": [
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"n": 1}))},
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"n": 500}))},
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"n": 2}))},
    ]})
    .to_string();
    let send = |path: &'static str, key: &'static str, body: String| {
        let app = &app;
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ];
            app.send("POST", path, &headers, Some(body)).await
        }
    };
    let first = send("/transactions?mode=skip", "skip-1", ops.clone()).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body["results"][1]["status"], "failed");
    let again = send("/transactions?mode=skip", "skip-1", ops.clone()).await;
    assert_eq!(again.body, first.body);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 2);
    // A FeatureCollection in skip mode too.
    let features = collection(vec![
        point(0.0, 0.0, json!({"n": 3})),
        point(0.0, 0.0, json!({"n": 300})),
    ])
    .to_string();
    let items = |key: &'static str| {
        let app = &app;
        let features = features.clone();
        async move {
            let headers = [
                ("content-type", "application/geo+json"),
                ("idempotency-key", key),
            ];
            app.send(
                "POST",
                "/collections/pts/items?mode=skip",
                &headers,
                Some(features),
            )
            .await
        }
    };
    let first = items("skip-2").await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(items("skip-2").await.body, first.body);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 3);
    // Batch mode commits batch by batch: a key could not make a retry all or nothing.
    let r = send("/transactions?mode=batch", "batch-1", ops).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body["detail"].as_str().unwrap().contains("mode=batch"));
}

/// A login role of the cluster with `USAGE` on the service's schema: all it
/// lacks to call the idempotency functions is the right to run them.
async fn outsider(app: &TestApp) -> tokio_postgres::Client {
    app.db
        .client
        .batch_execute(&format!(
            "{} GRANT USAGE ON SCHEMA featurepipe TO fp_test_outsider",
            create_role("fp_test_outsider", "LOGIN")
        ))
        .await
        .unwrap();
    let url = app
        .db
        .url
        .replacen("://postgres@", "://fp_test_outsider@", 1);
    connect(&url).await
}

/// Whether `role` may run each of the idempotency functions.
async fn may_run(app: &TestApp, role: &str) -> Vec<bool> {
    let sql = "SELECT has_function_privilege($1, f, 'EXECUTE') FROM unnest(ARRAY[
                 'featurepipe.idempotency_expire(float8)',
                 'featurepipe.idempotency_claim(text, text)',
                 'featurepipe.idempotency_store(text, int4, bytea, text, jsonb)',
                 'featurepipe.idempotency_lookup(text, float8)']) AS f";
    let rows = app.db.client.query(sql, &[&role]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn other_roles_cannot_run_the_idempotency_functions() {
    let app = TestApp::new(SETUP).await;
    let one = body(1);
    let first = post(&app, "mine", &one).await;
    assert_eq!(first.status, 201, "{first:?}");
    let other = outsider(&app).await;
    for sql in [
        "SELECT featurepipe.idempotency_expire(0)",
        "SELECT featurepipe.idempotency_claim('forged', 'x')",
        "SELECT featurepipe.idempotency_store('mine', 200, '\\x7b7d', NULL, NULL)",
        "SELECT * FROM featurepipe.idempotency_lookup('mine', 1e9)",
    ] {
        let err = other.batch_execute(sql).await.expect_err(sql);
        assert_eq!(
            err.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {err:?}"
        );
    }
    // Not even the service can expire every key at once: a TTL of zero,
    // below zero or NaN is clamped (to at least a minute).
    for ttl in ["0", "-1e9", "'NaN'", "'-Infinity'"] {
        let sql = format!("SELECT featurepipe.idempotency_expire({ttl})");
        app.db.client.batch_execute(&sql).await.unwrap();
    }
    let again = post(&app, "mine", &one).await;
    assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 1);
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM featurepipe.idempotency WHERE key = 'forged'")
            .await,
        0
    );
}

#[tokio::test]
async fn migrating_a_database_of_migration_5_takes_the_functions_back() {
    let db = TestDb::new(SETUP).await;
    // The service's schema as migrations 1 to 5 left it.
    db.client
        .batch_execute(
            "CREATE SCHEMA featurepipe;
             CREATE TABLE featurepipe.schema_migrations (
                 version integer PRIMARY KEY, name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now());",
        )
        .await
        .unwrap();
    let old = [
        include_str!("../../migrations/0001_featurepipe_schema.sql"),
        include_str!("../../migrations/0002_fail_function.sql"),
        include_str!("../../migrations/0003_idempotency.sql"),
        include_str!("../../migrations/0004_idempotency_headers.sql"),
        include_str!("../../migrations/0005_idempotency_functions.sql"),
    ];
    for (version, sql) in (1..).zip(old) {
        db.client.batch_execute(sql).await.unwrap();
        db.client
            .execute(
                "INSERT INTO featurepipe.schema_migrations VALUES ($1, 'old')",
                &[&version],
            )
            .await
            .unwrap();
    }
    let url = db.url.clone();
    let app = TestApp::on(db, config(&url)).await;
    let other = outsider(&app).await;
    assert_eq!(may_run(&app, "fp_test_outsider").await, [false; 4]);
    let err = other
        .batch_execute("SELECT featurepipe.idempotency_expire(0)")
        .await
        .expect_err("refused");
    assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    // The service still has them.
    let one = body(1);
    assert_eq!(post(&app, "after", &one).await.status, 201);
    let again = post(&app, "after", &one).await;
    assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 1);
}

/// A response as it went over the wire: status, headers, body bytes.
struct Wire {
    status: u16,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

/// POST one Feature to `pts` with `headers`, read back byte for byte.
async fn post_wire(app: &TestApp, headers: &[(&str, &str)], body: &str) -> Wire {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut request = axum::http::Request::post("/collections/pts/items");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Wire {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

#[tokio::test]
async fn a_replay_is_the_first_answer_byte_for_byte() {
    let app = TestApp::new(SETUP).await;
    let one = point(7.0, 50.0, json!({"n": 1})).to_string();
    let cases = [
        ("k-representation", Some("return=representation"), 201),
        ("k-minimal", Some("return=minimal"), 201),
        ("k-lenient", Some("handling=lenient"), 201),
        ("k-none", None, 201),
    ];
    for (key, prefer, status) in cases {
        let mut headers = vec![
            ("content-type", "application/geo+json"),
            (
                "content-crs",
                "<http://www.opengis.net/def/crs/EPSG/0/4326>",
            ),
            ("idempotency-key", key),
        ];
        headers.extend(prefer.map(|p| ("prefer", p)));
        let first = post_wire(&app, &headers, &one).await;
        assert_eq!(first.status, status, "{key}: {:?}", first.headers);
        let again = post_wire(&app, &headers, &one).await;
        assert_eq!(again.headers["idempotent-replayed"], "true", "{key}");
        assert_eq!(again.status, first.status, "{key}");
        assert_eq!(
            String::from_utf8_lossy(&again.body),
            String::from_utf8_lossy(&first.body),
            "{key}"
        );
        for name in [
            "content-type",
            "etag",
            "location",
            "last-modified",
            "content-crs",
            "preference-applied",
        ] {
            assert_eq!(
                again.headers.get(name),
                first.headers.get(name),
                "{key}: {name}"
            );
        }
    }
    // What each answer was: the feature, no body, the report.
    let shown = post_wire(
        &app,
        &[
            ("content-type", "application/geo+json"),
            (
                "content-crs",
                "<http://www.opengis.net/def/crs/EPSG/0/4326>",
            ),
            ("idempotency-key", "k-representation"),
            ("prefer", "return=representation"),
        ],
        &one,
    )
    .await;
    assert_eq!(shown.headers["content-type"], "application/geo+json");
    assert!(shown.headers.contains_key("etag"));
    let feature: Value = serde_json::from_slice(&shown.body).unwrap();
    assert_eq!(feature["type"], "Feature");
    // In EPSG:4326's axis order, as sent.
    let coordinates = feature["geometry"]["coordinates"].as_array().unwrap();
    let coordinates: Vec<f64> = coordinates.iter().map(|c| c.as_f64().unwrap()).collect();
    assert_eq!(coordinates, [7.0, 50.0]);
    assert_eq!(
        app.db.int("SELECT count(*) FROM pts").await,
        4,
        "one row per key"
    );
}

#[tokio::test]
async fn a_key_reused_with_other_headers_is_refused() {
    let app = TestApp::new(SETUP).await;
    let one = point(7.0, 50.0, json!({"n": 1})).to_string();
    let epsg = (
        "content-crs",
        "<http://www.opengis.net/def/crs/EPSG/0/4326>",
    );
    let base = [
        ("content-type", "application/geo+json"),
        ("idempotency-key", "k-crs"),
    ];
    let first = post_wire(&app, &[base[0], base[1], epsg], &one).await;
    assert_eq!(first.status, 201);
    // The same body read in another CRS, or answered otherwise, is another request.
    for other in [
        vec![base[0], base[1]],
        vec![
            base[0],
            base[1],
            (
                "content-crs",
                "<http://www.opengis.net/def/crs/OGC/1.3/CRS84>",
            ),
        ],
        vec![("content-type", "application/json"), base[1], epsg],
        vec![base[0], base[1], epsg, ("prefer", "return=representation")],
    ] {
        let r = post_wire(&app, &other, &one).await;
        assert_eq!(r.status, 422, "{other:?}");
        let problem: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            problem["type"], "urn:featurepipe:problem:idempotency-key-reused",
            "{other:?}"
        );
    }
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 1);
}

#[tokio::test]
async fn a_service_logging_in_as_another_role_is_told_the_grant_it_needs() {
    let app = TestApp::new(SETUP).await;
    let database = app.db.url.rsplit('/').next().unwrap();
    // A login of its own that may do all else: migrations (none left), the table.
    app.db
        .client
        .batch_execute(&format!(
            "{}
             GRANT CREATE ON DATABASE {database} TO fp_test_server;
             GRANT USAGE, CREATE ON SCHEMA featurepipe TO fp_test_server;
             GRANT SELECT, INSERT ON featurepipe.schema_migrations TO fp_test_server;
             GRANT ALL ON pts TO fp_test_server;
             GRANT USAGE ON SEQUENCE pts_id_seq TO fp_test_server;",
            create_role("fp_test_server", "LOGIN")
        ))
        .await
        .unwrap();
    let url = app.db.url.replacen("://postgres@", "://fp_test_server@", 1);
    let refused = featurepipe::AppState::start(&config(&url))
        .await
        .err()
        .expect("start-up is refused")
        .to_string();
    assert!(
        refused.contains(
            "GRANT EXECUTE ON FUNCTION featurepipe.idempotency_expire(float8), \
             featurepipe.idempotency_claim(text, text)"
        ),
        "{refused}"
    );
    app.db
        .client
        .batch_execute(
            "GRANT EXECUTE ON FUNCTION featurepipe.idempotency_expire(float8),
               featurepipe.idempotency_claim(text, text),
               featurepipe.idempotency_store(text, int4, bytea, text, jsonb),
               featurepipe.idempotency_lookup(text, float8) TO fp_test_server",
        )
        .await
        .unwrap();
    let checks = TestDb {
        url: url.clone(),
        client: connect(&app.db.url).await,
    };
    let server = TestApp::on(checks, config(&url)).await;
    let one = body(1);
    assert_eq!(post(&server, "as-server", &one).await.status, 201);
    let again = post(&server, "as-server", &one).await;
    assert_eq!(again.headers["idempotent-replayed"], "true", "{again:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 1);
}
