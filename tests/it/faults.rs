//! Database faults in the middle of a write: a clear 503, nothing half
//! written, and the next request succeeds; a database restart needs no
//! restart of the service.

use std::time::Duration;

use serde_json::json;

use crate::support::{
    collection, config, connect, http, point, via_proxy, OwnCluster, ServiceProcess, TestApp,
    TestDb,
};

#[tokio::test]
async fn backend_terminated_mid_request() {
    for strategy in [
        featurepipe::write::Strategy::Insert,
        featurepipe::write::Strategy::Copy,
    ] {
        let app = TestApp::with_config(
            "CREATE TABLE big (id serial PRIMARY KEY, n int, geom geometry(Point, 4326));
             CREATE INDEX ON big USING gist (geom);",
            |c| c.write_strategy = strategy,
        )
        .await;
        let body = collection(
            (0..50_000)
                .map(|i| point(i as f64 * 0.001, 45.0, json!({"n": i})))
                .collect(),
        );
        let killer = async {
            // Terminate the service's backend once it is writing into `big`
            // (active: an idle connection's last query may be such a write too,
            // and killing it would fail the next request, not this one).
            for _ in 0..2000 {
                let killed = app
                    .db
                    .client
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                          WHERE datname = current_database() AND pid <> pg_backend_pid() \
                            AND state = 'active' \
                            AND (query LIKE '%INSERT INTO%big%' OR query LIKE 'COPY%big%')",
                        &[],
                    )
                    .await
                    .unwrap();
                if !killed.is_empty() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        };
        let (r, killed) = tokio::join!(app.post("big", &body), killer);
        assert!(killed, "{strategy:?}: the write was never seen running");
        // Pipelined INSERTs, and a COPY, send COMMIT with the rows: unless
        // the server's own error arrived first (503, nothing was written),
        // the service cannot know whether it committed (502).
        if r.status == 502 {
            assert_eq!(r.body["type"], "urn:featurepipe:problem:outcome-unknown");
        } else {
            assert_eq!(r.status, 503, "{strategy:?}: {r:?}");
        }
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(
            app.db.int("SELECT count(*) FROM big").await,
            0,
            "{strategy:?}"
        );
        // The pool drops the dead connection: the next request succeeds.
        let r = app.post("big", &point(0.0, 0.0, json!({"n": 1}))).await;
        assert_eq!(r.status, 201, "{strategy:?}: {r:?}");
    }
}

#[tokio::test]
async fn sigterm_lets_requests_in_flight_finish() {
    let app =
        TestApp::new("CREATE TABLE big (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))")
            .await;
    let service =
        ServiceProcess::start(&app.db.url, &[("FEATUREPIPE_WRITE_STRATEGY", "insert")]).await;
    let (addr, mut child) = (service.addr.clone(), service.child);
    let body = collection(
        (0..20_000)
            .map(|i| point(0.0, 0.0, json!({"n": i})))
            .collect(),
    )
    .to_string();
    let request = tokio::spawn({
        let addr = addr.clone();
        async move { http(&addr, "POST", "/collections/big/items", &body).await }
    });
    // Once the write is running, ask the service to stop.
    let mut seen = false;
    for _ in 0..2000 {
        let running = app
            .db
            .client
            .query(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() \
                   AND pid <> pg_backend_pid() AND query LIKE '%INSERT INTO%big%'",
                &[],
            )
            .await
            .unwrap();
        if !running.is_empty() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen, "the write was never seen running");
    let pid = child.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let (status, response) = request.await.unwrap().unwrap();
    assert_eq!(status, 201, "{}", &response[..response.len().min(300)]);
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM big").await, 20_000);
}

#[tokio::test]
async fn stalled_and_abandoned_uploads_write_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::with_config(
        "CREATE TABLE up (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))",
        |c| c.upload_timeout = Duration::from_millis(300),
    )
    .await;
    let served = crate::support::Served::start(&app).await;
    let addr = served.url.trim_start_matches("http://").to_owned();
    let body = collection((0..100).map(|i| point(0.0, 0.0, json!({"n": i}))).collect()).to_string();
    let head = format!(
        "POST /collections/up/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/geo+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // Half a body, then nothing: 408.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    // Half a body, then the client goes away.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    drop(s);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(app.db.int("SELECT count(*) FROM up").await, 0);
    // Still serving.
    let (status, _) = http(&addr, "POST", "/collections/up/items", &body)
        .await
        .unwrap();
    assert_eq!(status, 201);
    assert_eq!(app.db.int("SELECT count(*) FROM up").await, 100);
}

#[tokio::test]
async fn the_pool_recovers_when_the_database_restarts() {
    let cluster = OwnCluster::start().await;
    let url = cluster.url();
    let client = connect(&url).await;
    client
        .batch_execute(
            "CREATE EXTENSION postgis;
             CREATE TABLE r (id serial PRIMARY KEY, n int, geom geometry(Point, 4326));",
        )
        .await
        .unwrap();
    let mut config = config(&url);
    config.pool_size = 3;
    config.pool_wait = Duration::from_secs(2);
    let app = TestApp::on(TestDb { url, client }, config.clone()).await;
    let write = |n: i32| {
        let app = &app;
        async move { app.post("r", &point(0.0, 0.0, json!({ "n": n }))).await }
    };
    assert_eq!(write(1).await.status, 201);

    // Every pooled connection in use once, then idle: the pool holds three.
    let held = futures_util::future::try_join_all((0..3).map(|_| app.state.db.connection()))
        .await
        .unwrap();
    drop(held);
    let backends = "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()";
    assert_eq!(app.db.int(backends).await, 3);

    // A restart with no request in between: every pooled connection is a dead one.
    cluster.stop().await;
    cluster.start_again().await;
    let r = app.get("/collections/r/items").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["numberMatched"], 1);
    // More requests than connections: none meets a dead connection.
    for n in 2..6 {
        let r = write(n).await;
        assert_eq!(r.status, 201, "{r:?}");
    }

    // During an outage: a 503 with Retry-After, at once, for writes, reads and /readyz.
    cluster.stop().await;
    let bound = config.pool_wait + Duration::from_secs(3);
    for r in [
        tokio::time::timeout(bound, write(6)).await,
        tokio::time::timeout(bound, app.get("/collections/r/items")).await,
        tokio::time::timeout(bound, app.get("/readyz")).await,
    ] {
        let r = r.expect("no answer within the pool wait");
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.headers["retry-after"], "1");
        assert_eq!(r.headers["content-type"], "application/problem+json");
    }
    cluster.start_again().await;
    let r = write(7).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(app.get("/readyz").await.status, 200);
    let check = connect(&cluster.url()).await;
    let ns: Vec<i32> = check
        .query("SELECT n FROM r ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ns, [1, 2, 3, 4, 5, 7]);
}

#[tokio::test]
async fn a_connection_lost_after_commit_was_sent_is_an_unknown_outcome() {
    // Pipelined INSERTs and a COPY without an Idempotency-Key send COMMIT
    // with the rows.
    for strategy in [
        featurepipe::write::Strategy::Insert,
        featurepipe::write::Strategy::Copy,
    ] {
        let db = TestDb::new(
            "CREATE TABLE lost (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))",
        )
        .await;
        let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
        config.pool_size = 1;
        config.write_strategy = strategy;
        let app = TestApp::on(db, config).await;
        let body = collection((0..3).map(|i| point(0.0, 0.0, json!({"n": i}))).collect());
        // The server gets the COMMIT; the service never gets its answer.
        proxy.cut_after_next_commit();
        let r = app.post("lost", &body).await;
        assert_eq!(r.status, 502, "{strategy:?}: {r:?}");
        assert_eq!(r.body["type"], "urn:featurepipe:problem:outcome-unknown");
        let detail = r.body["detail"].as_str().unwrap();
        assert!(detail.contains("unknown"), "{detail}");
        assert!(detail.contains("Idempotency-Key"), "{detail}");
        assert!(!detail.contains("nothing was written"), "{detail}");
        assert!(r.headers.get("retry-after").is_none(), "{strategy:?}");
        assert_eq!(r.batch_statuses(), ["unknown"], "{strategy:?}: {r:?}");
        // The server did commit (it may still be finishing when the answer
        // is out): the answer did not say otherwise.
        let count = app.db.int_once("SELECT count(*) FROM lost", 3).await;
        assert_eq!(count, 3, "{strategy:?}");
        // The cut connection is not reused.
        let r = app.post("lost", &body).await;
        assert_eq!(r.status, 201, "{strategy:?}: {r:?}");
    }
}

#[tokio::test]
async fn an_edit_session_whose_commit_is_lost_is_an_unknown_outcome() {
    for mode in ["atomic", "batch", "skip"] {
        let db = TestDb::new(
            "CREATE TABLE lost (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))",
        )
        .await;
        let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
        config.pool_size = 1;
        let app = TestApp::on(db, config).await;
        let operations: Vec<_> = (0..3)
            .map(|i| json!({"op": "insert", "collection": "lost", "feature": point(0.0, 0.0, json!({"n": i}))}))
            .collect();
        let body = json!({ "operations": operations }).to_string();
        let headers = [("content-type", "application/json")];
        let path = format!("/transactions?mode={mode}");
        // The server gets the COMMIT; the service never gets its answer.
        proxy.cut_after_next_commit();
        let r = app.send("POST", &path, &headers, Some(body.clone())).await;
        assert_eq!(r.status, 502, "{mode}: {r:?}");
        assert_eq!(r.body["type"], "urn:featurepipe:problem:outcome-unknown");
        let detail = r.body["detail"].as_str().unwrap();
        assert!(!detail.contains("nothing was written"), "{detail}");
        let report = &r.body["report"];
        assert_eq!(report["batches"][0]["status"], "unknown", "{mode}: {r:?}");
        for result in report["results"].as_array().unwrap() {
            assert_eq!(result["status"], "unknown", "{mode}: {r:?}");
        }
        let count = app.db.int_once("SELECT count(*) FROM lost", 3).await;
        assert_eq!(count, 3, "{mode}: the server did commit");
        let r = app.send("POST", &path, &headers, Some(body)).await;
        assert_eq!(r.status, 200, "{mode}: {r:?}");
    }
}

#[tokio::test]
async fn a_keyed_change_whose_commit_is_lost_is_an_unknown_outcome() {
    let db = TestDb::new(
        "CREATE TABLE lost (id serial PRIMARY KEY, n int, geom geometry(Point, 4326));
         INSERT INTO lost (n, geom) VALUES (0, 'SRID=4326;POINT(0 0)');",
    )
    .await;
    let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
    config.pool_size = 1;
    let app = TestApp::on(db, config).await;
    let headers = [
        ("content-type", "application/merge-patch+json"),
        ("idempotency-key", "lost-patch-1"),
    ];
    let patch = Some(json!({"properties": {"n": 7}}).to_string());
    // The server gets the COMMIT; the service never gets its answer.
    proxy.cut_after_next_commit();
    let r = app
        .send(
            "PATCH",
            "/collections/lost/items/1",
            &headers,
            patch.clone(),
        )
        .await;
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.body["type"], "urn:featurepipe:problem:outcome-unknown");
    assert!(r.headers.get("retry-after").is_none());
    let n = app
        .db
        .int_once("SELECT n::int8 FROM lost WHERE id = 1", 7)
        .await;
    assert_eq!(n, 7, "the server did commit");
    // The retry with the same key is answered from what was stored.
    let r = app
        .send("PATCH", "/collections/lost/items/1", &headers, patch)
        .await;
    assert!(r.status.is_success(), "{r:?}");
    assert_eq!(
        r.headers
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true"),
        "{r:?}"
    );
}
