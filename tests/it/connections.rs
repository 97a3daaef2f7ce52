//! Connections and requests have an end, and their last answer arrives:
//! header timeout, panics, the request deadline, the lingering close.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

use crate::support::{point, run, Served, TestApp};

#[tokio::test]
async fn a_connection_that_stops_sending_its_headers_is_closed() {
    let app = TestApp::with_config(
        "CREATE TABLE t (id serial PRIMARY KEY, geom geometry)",
        |c| {
            c.header_timeout = Duration::from_millis(300);
        },
    )
    .await;
    let served = Served::start(&app).await;
    let addr = served.url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /collections HTTP/1.1\r\nHost: x\r\nAccept: appl")
        .await
        .unwrap();
    // The service closes it (EOF, or a reset); without a header timeout
    // this read would wait for ever.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "the connection is still open 30 s after its headers stopped"
    );
}

#[tokio::test]
async fn a_handler_panic_is_a_problem_500() {
    async fn boom() -> &'static str {
        panic!("a bug")
    }
    // A route of the test's own: the service has no handler that panics.
    let routes = Router::new().route("/boom", get(boom));
    let response = featurepipe::http::app::guarded(routes, Duration::ZERO)
        .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["type"], "urn:featurepipe:problem:internal", "{body}");
    assert_eq!(body["status"], 500);
    // The panic's own text stays in the log.
    assert!(!body.to_string().contains("a bug"), "{body}");
}

#[tokio::test]
async fn a_request_past_its_deadline_is_a_504_and_its_write_is_rolled_back() {
    let app = TestApp::with_config(
        "CREATE TABLE slow (id serial PRIMARY KEY, name text, geom geometry);
         CREATE FUNCTION dawdle() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$;
         CREATE TRIGGER dawdle BEFORE INSERT ON slow FOR EACH ROW EXECUTE FUNCTION dawdle();",
        |c| c.request_timeout = Duration::from_millis(500),
    )
    .await;
    let r = app
        .post(
            "slow",
            &point(1.0, 2.0, serde_json::json!({"name": "late"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{r:?}");
    assert_eq!(
        r.body["type"], "urn:featurepipe:problem:deadline-exceeded",
        "{r:?}"
    );
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("FEATUREPIPE_REQUEST_TIMEOUT"),
        "{r:?}"
    );
    // Wait until the service's sessions on this database are gone or idle:
    // a transaction left to run would commit when its pg_sleep ends.
    let busy = "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND state <> 'idle'";
    for _ in 0..600 {
        if app.db.int(busy).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        app.db.int(busy).await,
        0,
        "the service's statement still runs"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM slow").await, 0);
    // The pool still works.
    app.db
        .client
        .batch_execute("DROP TRIGGER dawdle ON slow")
        .await
        .unwrap();
    let r = app
        .post("slow", &point(1.0, 2.0, serde_json::json!({"name": "now"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

#[tokio::test]
async fn a_client_that_sends_its_whole_body_first_reads_the_413() {
    let app = TestApp::with_config(
        "CREATE TABLE big (id serial PRIMARY KEY, geom geometry)",
        |c| {
            c.max_body = 1 << 20;
        },
    )
    .await;
    let served = Served::start(&app).await;
    let url = format!("{}/collections/big/items", served.url);
    // Python's urllib writes the whole body (32 MiB, far more than the
    // socket buffers hold) before it reads the answer. (requests, through
    // urllib3 2, swallows the broken pipe and reads on; urllib does not.)
    let script = "import json, sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], data=b' ' * (32 << 20), method='POST',
                                 headers={'Content-Type': 'application/geo+json'})
try:
    urllib.request.urlopen(request)
except urllib.error.HTTPError as e:
    print(e.code, e.headers['Content-Type'], json.load(e)['type'])";
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    let out = run(&python, &["-c", script, &url]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "413 application/problem+json urn:featurepipe:problem:body-too-large"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM big").await, 0);
}

#[tokio::test]
async fn without_database_url_libpq_s_environment_says_where_to_connect() {
    let db = crate::support::TestDb::new(
        "CREATE TABLE pts (id serial PRIMARY KEY, geom geometry(Point, 4326))",
    )
    .await;
    let config: tokio_postgres::Config = db.url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let addr = format!("127.0.0.1:{}", crate::support::free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env("PGHOST", &host)
        .env("PGPORT", config.get_ports()[0].to_string())
        .env("PGUSER", config.get_user().unwrap())
        .env("PGDATABASE", config.get_dbname().unwrap())
        .env("PGAPPNAME", "from-the-environment")
        .env("FEATUREPIPE_LISTEN", &addr)
        .env("FEATUREPIPE_AUTH", "off")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ready = false;
    for _ in 0..200 {
        if let Ok((200, _)) = crate::support::http(&addr, "GET", "/readyz", "").await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ready,
        "the service did not start from PGHOST, PGPORT, PGUSER and PGDATABASE"
    );
    let (status, body) = crate::support::http(&addr, "GET", "/collections/pts", "")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let named =
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'from-the-environment'";
    assert!(
        db.client
            .query_one(named, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    );
    child.kill().await.unwrap();

    // Neither: a message that says what to set.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .env_remove("PGUSER")
        .env_remove("PGDATABASE")
        .env("FEATUREPIPE_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DATABASE_URL is not set, nor libpq's PGHOST"),
        "{stderr}"
    );
}
