//! Request ids, the database round trips each request reports, and the
//! Prometheus metrics at /metrics.

use std::time::Duration;

use serde_json::json;

use crate::support::{collection, http, point, via_proxy, ServiceProcess, TestApp, TestDb};

const SETUP: &str =
    "CREATE TABLE telemetry_pts (id serial PRIMARY KEY, name text, geom geometry(Point, 4326))";

#[tokio::test]
async fn requests_carry_ids_and_their_round_trips() {
    let db = TestDb::new(SETUP).await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(2)).await;
    config.pool_size = 1;
    let app = TestApp::on(db, config).await;

    // A client's id is kept; otherwise one is made; problems name it too.
    let r = app
        .send(
            "GET",
            "/collections/nope",
            &[("x-request-id", "client-id-42")],
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.headers["x-request-id"], "client-id-42");
    assert_eq!(r.body["request_id"], "client-id-42");
    let r = app.get("/collections/nope").await;
    let made = r.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made.len(), 32, "{made}");
    assert_eq!(r.body["request_id"], made.as_str());

    // The round trips a request reports are those the proxy counted.
    let body = |n: usize| {
        collection(
            (0..n)
                .map(|i| point(0.0, 0.0, json!({"name": i.to_string()})))
                .collect(),
        )
    };
    let requests: [(&str, &str, Option<String>); 5] = [
        (
            "POST",
            "/collections/telemetry_pts/items",
            Some(body(3).to_string()),
        ),
        (
            "POST",
            "/collections/telemetry_pts/items",
            Some(body(3).to_string()),
        ),
        (
            "POST",
            "/collections/telemetry_pts/items",
            Some(body(500).to_string()),
        ),
        ("GET", "/collections/telemetry_pts/items?limit=5", None),
        ("GET", "/collections/telemetry_pts/items/1", None),
    ];
    for (method, path, body) in requests {
        let before = proxy.round_trips();
        let headers = [("content-type", "application/geo+json")];
        let r = app.send(method, path, &headers, body).await;
        assert!(r.status.is_success(), "{method} {path}: {r:?}");
        let counted = proxy.round_trips() - before;
        let reported: u64 = r.headers["db-round-trips"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(reported, counted, "{method} {path}");
        assert!(reported >= 1, "{method} {path}");
    }
}

#[tokio::test]
async fn metrics_count_requests_features_and_problems() {
    let app = TestApp::new(SETUP).await;
    let good = collection(vec![
        point(0.0, 0.0, json!({"name": "a"})),
        point(1.0, 1.0, json!({})),
    ]);
    assert_eq!(app.post("telemetry_pts", &good).await.status, 201);
    let bad = collection(vec![point(0.0, 0.0, json!({"no_such_column": 1}))]);
    assert_eq!(app.post("telemetry_pts", &bad).await.status, 422);
    assert_eq!(
        app.get("/collections/telemetry_pts/items").await.status,
        200
    );

    let r = app.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = r.body.as_str().expect("text");
    // The recorder is the process's: other tests count too, so look for lines, not totals.
    for expected in [
        "featurepipe_http_requests_total{route=\"/collections/{collectionId}/items\",method=\"POST\",status=\"201\"}",
        "featurepipe_http_requests_total{route=\"/collections/{collectionId}/items\",method=\"POST\",status=\"422\"}",
        "featurepipe_http_request_duration_seconds_bucket{route=\"/collections/{collectionId}/items\",method=\"GET\",le=\"0.005\"}",
        "featurepipe_db_round_trips_bucket{",
        "featurepipe_features_written_total{collection=\"telemetry_pts\"} 2",
        "featurepipe_batches_total{collection=\"telemetry_pts\",status=\"committed\"} 1",
        "featurepipe_validation_errors_total{code=\"unknown_property\"}",
        "featurepipe_db_pool_connections ",
        "featurepipe_db_pool_in_use ",
        "featurepipe_db_pool_waiting ",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
}

/// Start the service with `env`, ask it for a collection that does not
/// exist and stop it: the request's id, and all the service wrote to its
/// stdout (a pipe, as under a log collector).
async fn log_of_a_404(env: &[(&str, &str)]) -> (String, String) {
    use tokio::io::AsyncReadExt;
    let app = TestApp::new(SETUP).await;
    let mut service = ServiceProcess::start(&app.db.url, env).await;
    let (status, response) = http(&service.addr, "GET", "/collections/nope", "")
        .await
        .unwrap();
    assert_eq!(status, 404);
    let id = response
        .lines()
        .find_map(|l| l.strip_prefix("X-Request-Id: "))
        .expect("an id")
        .trim()
        .to_owned();
    service.child.kill().await.unwrap();
    let mut out = String::new();
    service
        .child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    (id, out)
}

#[tokio::test]
async fn json_logs_carry_the_request_id() {
    let env = [
        ("FEATUREPIPE_LOG_FORMAT", "json"),
        ("RUST_LOG", "featurepipe=info"),
    ];
    let (id, out) = log_of_a_404(&env).await;
    let line = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "answered" && v["span"]["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no JSON line for the request in:\n{out}"));
    assert_eq!(
        line["span"]["route"], "/collections/{collectionId}",
        "{line}"
    );
    assert_eq!(line["fields"]["status"], 404, "{line}");
}

#[tokio::test]
async fn text_logs_to_a_pipe_have_no_colours() {
    // Terminal colours in a log file or a journal are escape codes around
    // every field name, which the file keeps and greps trip over.
    let (id, out) = log_of_a_404(&[("RUST_LOG", "featurepipe=info")]).await;
    assert!(!out.contains('\x1b'), "escape codes in:\n{out}");
    let line = out
        .lines()
        .find(|l| l.contains(&id) && l.contains("answered"))
        .unwrap_or_else(|| panic!("no line for the request in:\n{out}"));
    assert!(line.contains("status=404"), "{line}");
}

#[tokio::test]
async fn metrics_can_have_an_address_of_their_own() {
    let app = TestApp::new(SETUP).await;
    let metrics = format!("127.0.0.1:{}", crate::support::free_port());
    let service =
        ServiceProcess::start(&app.db.url, &[("FEATUREPIPE_METRICS_LISTEN", &metrics)]).await;
    // Not on the API's address any more ...
    let (status, _) = http(&service.addr, "GET", "/metrics", "").await.unwrap();
    assert_eq!(status, 404);
    // ... but on its own, and nothing else there.
    let (status, body) = http(&metrics, "GET", "/metrics", "").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("featurepipe_db_pool_max"), "{body}");
    let (status, _) = http(&metrics, "GET", "/collections", "").await.unwrap();
    assert_eq!(status, 404);
}
