//! Bodies written as they arrive (issue 18): large FeatureCollections are
//! parsed, validated and written batch by batch, and (atomic and skip mode)
//! committed only once the whole body has been read and found good; batch
//! mode commits each batch as it comes, and its answers are compared with
//! those of the same bodies read whole.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use bytes::Bytes;
use featurepipe::config::Config;
use flate2::write::GzEncoder;
use flate2::Compression;
use futures_util::stream;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    http, peak_kib, via_proxy, Served, ServiceProcess, TestApp, TestDb, TestResponse,
};

const TABLE: &str = "CREATE TABLE pts (
    id serial PRIMARY KEY,
    name text,
    n integer NOT NULL,
    geom geometry(Point, 4326)
);
CREATE INDEX ON pts USING gist (geom);";

/// Settings that stream every body past 64 KiB, in batches of 500.
fn streaming(config: &mut Config) {
    config.stream_after = 64 << 10;
    config.batch_size = 500;
}

/// Feature `i` of the generated bodies; `bad` ones give `n` as a word.
fn feature(i: usize, bad: bool) -> String {
    let n = if bad {
        "\"many\"".to_owned()
    } else {
        i.to_string()
    };
    format!(
        r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":[{},{}]}},"properties":{{"name":"p{i}","n":{n}}}}}"#,
        (i % 360) as f64 - 180.0 + 0.5,
        (i % 170) as f64 - 85.0 + 0.25
    )
}

/// A FeatureCollection of `n` features made as it is sent, `chunk` features
/// at a time, the features of `bad` invalid.
fn body_of(n: usize, chunk: usize, bad: &'static [usize]) -> impl Iterator<Item = Bytes> {
    let head = std::iter::once(Bytes::from_static(
        b"{\"type\":\"FeatureCollection\",\"features\":[\n",
    ));
    let features = (0..n).step_by(chunk).map(move |start| {
        let mut text = String::new();
        for i in start..(start + chunk).min(n) {
            if i > 0 {
                text.push_str(",\n");
            }
            text.push_str(&feature(i, bad.contains(&i)));
        }
        Bytes::from(text)
    });
    head.chain(features)
        .chain(std::iter::once(Bytes::from_static(b"]}\n")))
}

/// The chunks of `plain` gzipped as they come (the encoder flushed every chunk).
fn gzipped(plain: impl Iterator<Item = Bytes>) -> impl Iterator<Item = Bytes> {
    let mut encoder = Some(GzEncoder::new(Vec::new(), Compression::fast()));
    plain
        .map(Some)
        .chain(std::iter::once(None))
        .map(move |chunk| {
            let Some(e) = encoder.as_mut() else {
                return Bytes::new();
            };
            match chunk {
                Some(chunk) => {
                    e.write_all(&chunk).unwrap();
                    e.flush().unwrap();
                    Bytes::from(std::mem::take(e.get_mut()))
                }
                None => Bytes::from(encoder.take().unwrap().finish().unwrap()),
            }
        })
}

/// POST `chunks` (of unknown length: chunked) to the points.
async fn post_stream(
    app: &TestApp,
    chunks: impl Iterator<Item = Bytes> + Send + 'static,
    headers: &[(&str, &str)],
) -> TestResponse {
    post_to(app, "/collections/pts/items", chunks, headers).await
}

/// POST `chunks` (of unknown length: chunked) to `path`.
async fn post_to(
    app: &TestApp,
    path: &str,
    chunks: impl Iterator<Item = Bytes> + Send + 'static,
    headers: &[(&str, &str)],
) -> TestResponse {
    let mut req = Request::post(path).header("content-type", "application/geo+json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let body = Body::from_stream(stream::iter(chunks.map(Ok::<_, std::io::Error>)));
    app.request(req.body(body).unwrap()).await
}

async fn count(app: &TestApp) -> i64 {
    app.db.int("SELECT count(*) FROM pts").await
}

/// Every id answered, in feature order, is a row holding that feature.
async fn assert_written(app: &TestApp, r: &TestResponse, n: usize) {
    assert_eq!(r.status, 201, "{r:?}");
    let ids = r.body["ids"].as_array().expect("ids");
    assert_eq!(ids.len(), n);
    assert_eq!(count(app).await, n as i64);
    let in_order = app
        .db
        .int("SELECT count(*) FROM pts WHERE id - (SELECT min(id) FROM pts) = n")
        .await;
    assert_eq!(in_order, n as i64, "ids follow the features");
    let first = ids[0].as_i64().unwrap();
    let last = ids[n - 1].as_i64().unwrap();
    assert_eq!(last - first, n as i64 - 1);
}

#[tokio::test]
async fn a_large_gzip_stream_is_written_as_it_arrives() {
    let app = TestApp::with_config(TABLE, streaming).await;
    let n = 20_000;
    let r = post_stream(
        &app,
        gzipped(body_of(n, 250, &[])),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_written(&app, &r, n).await;
    assert_eq!(r.body["batches"].as_array().unwrap().len(), n / 500);
}

/// 500 MB of GeoJSON, gzipped as it is sent; `make test-huge` (34 s in a release
/// build here; several minutes in a debug build).
#[tokio::test]
#[ignore]
async fn a_500_mb_gzip_stream_is_written_in_one_request() {
    let app = TestApp::with_config(TABLE, |c| {
        c.max_body = 1 << 30;
        c.max_features = 10_000_000;
    })
    .await;
    // About 122 bytes a feature.
    let n = 4_200_000;
    let r = post_stream(
        &app,
        gzipped(body_of(n, 2000, &[])),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_written(&app, &r, n).await;
}

#[tokio::test]
async fn invalid_features_near_the_end_are_all_listed_and_nothing_is_written() {
    let app = TestApp::with_config(TABLE, streaming).await;
    let r = post_stream(&app, body_of(30_000, 250, &[29_990, 29_997]), &[]).await;
    assert_eq!(r.status, 422, "{r:?}");
    let errors = r.body["errors"].as_array().unwrap();
    let pointers: Vec<&str> = errors
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        [
            "/features/29990/properties/n",
            "/features/29997/properties/n"
        ]
    );
    assert_eq!(count(&app).await, 0);
    // Broken JSON past the first batches: the line and column in the whole body.
    let broken = body_of(30_000, 250, &[]).map(|chunk| {
        Bytes::from(
            String::from_utf8(chunk.to_vec())
                .unwrap()
                .replace("\"p29000\"", "\"p29000"),
        )
    });
    let r = post_stream(&app, broken, &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(detail.contains("at line 29002 column"), "{detail}");
    assert_eq!(count(&app).await, 0);
    // The same body, good, is written whole.
    let r = post_stream(&app, body_of(30_000, 250, &[]), &[]).await;
    assert_written(&app, &r, 30_000).await;
}

#[tokio::test]
async fn a_conflict_mid_stream_is_answered_as_a_whole_body_would_be() {
    let app = TestApp::with_config(
        "CREATE TABLE pts (id serial PRIMARY KEY, name text, n integer NOT NULL UNIQUE, geom geometry(Point, 4326))",
        streaming,
    )
    .await;
    app.db
        .client
        .batch_execute("INSERT INTO pts (n) VALUES (12345)")
        .await
        .unwrap();
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 12_345);
    assert_eq!(count(&app).await, 1);
}

#[tokio::test]
async fn a_keyed_stream_is_replayed_and_a_different_body_refused() {
    let app = TestApp::with_config(TABLE, streaming).await;
    let key = [("idempotency-key", "stream-1")];
    let first = post_stream(&app, body_of(5_000, 250, &[]), &key).await;
    assert_written(&app, &first, 5_000).await;
    let again = post_stream(&app, body_of(5_000, 250, &[]), &key).await;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.body, first.body);
    let other = post_stream(&app, body_of(5_001, 250, &[]), &key).await;
    assert_eq!(other.status, 422, "{other:?}");
    assert_eq!(count(&app).await, 5_000);
}

#[tokio::test]
async fn a_features_member_given_twice_is_refused_streamed_or_whole() {
    let app = TestApp::with_config(TABLE, streaming).await;
    // JSON leaves repeated names to the reader; a second `features` would
    // number its features from 0 again, so that pointers and ids could not
    // say which feature they mean.
    for n in [20_000, 3] {
        let first = body_text(n);
        let first = first.trim_end().strip_suffix('}').unwrap();
        let again = body_text(3);
        let again = again
            .trim_end()
            .strip_prefix("{\"type\":\"FeatureCollection\"")
            .unwrap();
        let body = [Bytes::from(first.to_owned()), Bytes::from(again.to_owned())];
        let r = post_stream(&app, body.into_iter(), &[]).await;
        // Not `{r:?}`: an answer of 20,000 ids would drown the message.
        assert_eq!(r.status, 400, "{n}: {}", r.body["detail"]);
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(r.body["errors"][0]["pointer"], "/features", "{n}: {r:?}");
        assert_eq!(count(&app).await, 0, "{n}");
    }
}

/// The head of a request for `len` bytes of GeoJSON to `path` on `addr`.
fn request_head_to(addr: &str, path: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/geo+json\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n"
    )
}

/// The whole body of `n` features as text.
fn body_text(n: usize) -> String {
    body_of(n, 500, &[])
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_database_lost_mid_stream_writes_nothing() {
    let db = TestDb::new(TABLE).await;
    let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
    streaming(&mut config);
    let app = TestApp::on(db, config).await;
    let proxy = Arc::new(proxy);
    // The connection is cut while the body is still arriving.
    let cut = proxy.clone();
    let chunks = body_of(40_000, 250, &[])
        .enumerate()
        .map(move |(k, chunk)| {
            if k == 100 {
                cut.sever();
            }
            chunk
        });
    let r = post_stream(&app, chunks, &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(
        r.body["type"],
        Value::from("urn:featurepipe:problem:database-unavailable"),
        "{r:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 0);
}

#[tokio::test]
async fn a_copy_that_fails_at_its_start_fails_cleanly_and_leaves_the_connection_usable() {
    let other = "CREATE TABLE other (id serial PRIMARY KEY, name text, n integer NOT NULL, geom geometry(Point, 4326))";
    let db = TestDb::new(&format!("{TABLE}; {other}")).await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(1)).await;
    streaming(&mut config);
    config.pool_size = 1;
    config.write_strategy = featurepipe::write::Strategy::Copy;
    let app = TestApp::on(db, config).await;
    // The table goes while the catalog still has it: the COPY fails at its start.
    app.db.client.batch_execute("DROP TABLE pts").await.unwrap();
    let before = proxy.round_trips();
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.headers["retry-after"], "1");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("nothing was written") || detail.contains("pts"),
        "{detail}"
    );
    assert!(
        proxy.round_trips() - before <= 4,
        "no row follows the failed start: {} round trips",
        proxy.round_trips() - before
    );
    // The pool's one connection serves the next streamed COPY.
    let req =
        Request::post("/collections/other/items").header("content-type", "application/geo+json");
    let body = Body::from_stream(stream::iter(
        body_of(20_000, 250, &[]).map(Ok::<_, std::io::Error>),
    ));
    let r = app.request(req.body(body).unwrap()).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["strategy"], "copy");
    assert_eq!(r.body["ids"].as_array().unwrap().len(), 20_000);
    assert_eq!(app.db.int("SELECT count(*) FROM other").await, 20_000);
}

#[tokio::test]
async fn with_pipelining_off_a_large_body_is_read_whole_and_written_a_statement_at_a_time() {
    let db = TestDb::new(TABLE).await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(1)).await;
    streaming(&mut config);
    config.pool_size = 1;
    config.pipeline = false;
    config.write_strategy = featurepipe::write::Strategy::Insert;
    let app = TestApp::on(db, config).await;
    let warm = post_stream(&app, body_of(1, 1, &[]), &[]).await; // prepares the INSERT
    assert_eq!(warm.status, 201, "{warm:?}");
    let before = proxy.round_trips();
    let r = post_stream(&app, body_of(600, 100, &[]), &[]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        602,
        "BEGIN, 600 INSERTs, COMMIT"
    );
    assert_eq!(count(&app).await, 601);
}

/// The same table, unique on `n`, with the feature 1234 stored already: a
/// body of every `n` conflicts there.
const UNIQUE: &str = "CREATE TABLE pts (id serial PRIMARY KEY, name text, n integer NOT NULL UNIQUE, geom geometry(Point, 4326));
     INSERT INTO pts (id, n) VALUES (100000, 1234)";

/// Two services on databases set up alike: one that streams every body past
/// 64 KiB, one that reads every body whole; batches of 500 both.
async fn streamed_and_whole(setup: &str) -> (TestApp, TestApp) {
    let streamed = TestApp::with_config(setup, streaming).await;
    let whole = TestApp::with_config(setup, |c| {
        c.batch_size = 500;
        c.stream_after = 64 << 20;
    })
    .await;
    (streamed, whole)
}

/// An edit-session report without its timings, to compare.
fn untimed(mut report: Value) -> Value {
    for batch in report["batches"].as_array_mut().into_iter().flatten() {
        batch.as_object_mut().unwrap().remove("db_ms");
    }
    report
}

/// POST the body of `n` features (`bad` invalid) in `mode` to both
/// services: the streamed answer, after checking it is the whole one.
async fn same_answer(
    apps: &(TestApp, TestApp),
    mode: &str,
    n: usize,
    bad: &'static [usize],
) -> TestResponse {
    let path = format!("/collections/pts/items?mode={mode}");
    let streamed = post_to(&apps.0, &path, body_of(n, 250, bad), &[]).await;
    let whole = post_to(&apps.1, &path, body_of(n, 250, bad), &[]).await;
    assert_eq!(
        streamed.status, whole.status,
        "{mode}: {}",
        streamed.body["detail"]
    );
    assert!(
        untimed(streamed.body.clone()) == untimed(whole.body.clone()),
        "{mode}: the answers differ"
    );
    assert_eq!(count(&apps.0).await, count(&apps.1).await, "{mode}");
    streamed
}

/// Statuses of a session report's results, counted.
fn tally(r: &TestResponse) -> std::collections::BTreeMap<String, usize> {
    let mut tally = std::collections::BTreeMap::new();
    for result in r.body["results"].as_array().unwrap() {
        *tally
            .entry(result["status"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    tally
}

#[tokio::test]
async fn batch_and_skip_modes_stream_and_answer_as_a_body_read_whole() {
    let apps = streamed_and_whole(UNIQUE).await;
    // Batch mode: the batch holding the conflict rolls back, the others commit.
    let r = same_answer(&apps, "batch", 5_000, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["written"], 4_500);
    let batches = r.body["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 10);
    assert_eq!(batches[2]["status"], "rolled_back");
    assert_eq!(
        r.body["results"][1234]["error"]["pointer"],
        "/features/1234"
    );
    assert_eq!(count(&apps.0).await, 4_501);
    for app in [&apps.0, &apps.1] {
        app.db
            .client
            .batch_execute("DELETE FROM pts WHERE id <> 100000")
            .await
            .unwrap();
    }
    // Skip mode: invalid features late in the body and the conflict are
    // skipped and reported, every other feature written, ids in feature order.
    let r = same_answer(&apps, "skip", 5_000, &[4_990, 4_997]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["written"], 4_997);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 5_000);
    assert_eq!(
        results[4_990]["error"]["pointer"],
        "/features/4990/properties/n"
    );
    assert_eq!(
        results[1234]["error"]["code"], "unique_violation",
        "{}",
        results[1234]
    );
    assert_eq!(results[1235]["status"], "written");
    assert_eq!(count(&apps.0).await, 4_998);
    let in_order = apps
        .0
        .db
        .int("SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM pts WHERE id <> 100000) t WHERE prev IS NULL OR id > prev")
        .await;
    assert_eq!(in_order, 4_997, "ids follow the features");
    apps.0
        .db
        .client
        .batch_execute("DELETE FROM pts WHERE id <> 100000")
        .await
        .unwrap();
    // A body refused whole in skip mode (not JSON at the end) writes nothing.
    let broken = body_of(5_000, 250, &[]).map(|chunk| {
        Bytes::from(
            String::from_utf8(chunk.to_vec())
                .unwrap()
                .replace("]}\n", "]"),
        )
    });
    let path = "/collections/pts/items?mode=skip";
    let r = post_to(&apps.0, path, broken, &[]).await;
    assert_eq!(r.status, 400, "{}", r.body["detail"]);
    assert_eq!(count(&apps.0).await, 1);
    // Gzip, chunked: the same.
    let r = post_to(
        &apps.0,
        "/collections/pts/items?mode=batch",
        gzipped(body_of(3_000, 250, &[])),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body["detail"]);
    assert_eq!(
        tally(&r).get("written"),
        Some(&2_500),
        "the batch holding 1234 conflicts"
    );
}

#[tokio::test]
async fn a_streamed_batch_body_refused_late_keeps_and_reports_the_batches_committed() {
    let apps = streamed_and_whole(TABLE).await;
    let path = "/collections/pts/items?mode=batch";
    // An invalid feature in the ninth batch: read whole, nothing is written;
    // streamed, the eight batches before it were committed, and stay.
    let whole = post_to(&apps.1, path, body_of(5_000, 250, &[4_321]), &[]).await;
    assert_eq!(whole.status, 422, "{whole:?}");
    assert_eq!(count(&apps.1).await, 0);
    let r = post_to(&apps.0, path, body_of(5_000, 250, &[4_321]), &[]).await;
    assert_eq!(r.status, 422, "{}", r.body["detail"]);
    assert_eq!(r.body["errors"], whole.body["errors"]);
    let detail = r.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("4000 feature(s) in 8 batch(es) were committed"),
        "{detail}"
    );
    let report = &r.body["report"];
    assert_eq!(report["written"], 4_000);
    assert_eq!(report["results"].as_array().unwrap().len(), 4_000);
    assert_eq!(report["batches"][7]["status"], "committed");
    assert_eq!(count(&apps.0).await, 4_000);
    // An Idempotency-Key is refused in batch mode, streamed as read whole.
    let keyed = post_to(
        &apps.0,
        path,
        body_of(5_000, 250, &[]),
        &[("idempotency-key", "b-1")],
    )
    .await;
    assert_eq!(keyed.status, 400, "{keyed:?}");
    assert!(keyed.body["detail"]
        .as_str()
        .unwrap()
        .contains("mode=batch"));
    assert_eq!(count(&apps.0).await, 4_000);
}

#[tokio::test]
async fn a_keyed_skip_stream_is_replayed_and_a_different_body_refused() {
    let app = TestApp::with_config(TABLE, streaming).await;
    let path = "/collections/pts/items?mode=skip";
    let key = [("idempotency-key", "skip-stream-1")];
    let first = post_to(&app, path, body_of(5_000, 250, &[17]), &key).await;
    assert_eq!(first.status, 200, "{}", first.body["detail"]);
    assert_eq!(first.body["written"], 4_999);
    let again = post_to(&app, path, body_of(5_000, 250, &[17]), &key).await;
    assert_eq!(again.status, 200, "{}", again.body["detail"]);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.body, first.body);
    let other = post_to(&app, path, body_of(5_000, 250, &[]), &key).await;
    assert_eq!(other.status, 422, "{other:?}");
    assert_eq!(count(&app).await, 4_999);
}

#[tokio::test]
async fn a_client_that_stops_halfway_gets_what_its_mode_promises() {
    let app = TestApp::with_config(TABLE, |c| {
        streaming(c);
        c.upload_timeout = Duration::from_millis(1500);
    })
    .await;
    let served = Served::start(&app).await;
    let addr = served.url.trim_start_matches("http://").to_owned();
    let body = body_text(20_000);
    let half = &body.as_bytes()[..body.len() / 2];
    let send = |path: &'static str, close: bool| {
        let addr = addr.clone();
        let len = body.len();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(request_head_to(&addr, path, len).as_bytes())
                .await
                .unwrap();
            s.write_all(half).await.unwrap();
            if close {
                s.shutdown().await.unwrap();
            }
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            answer
        }
    };
    // Atomic and skip mode are one transaction: half the body, then the end
    // of what the client sends (cut short, 400) or silence (the upload times
    // out, 408), and nothing is written.
    for path in ["/collections/pts/items", "/collections/pts/items?mode=skip"] {
        for (close, status) in [(true, "HTTP/1.1 400"), (false, "HTTP/1.1 408")] {
            let answer = send(path, close).await;
            assert!(answer.starts_with(status), "{path}: {answer}");
            if !close {
                assert!(answer.contains("FEATUREPIPE_UPLOAD_TIMEOUT"), "{answer}");
            }
            assert_eq!(count(&app).await, 0, "{path}");
        }
    }
    // Batch mode: the batches that had come whole are committed, and the
    // refusal says which.
    for (close, status) in [(true, "HTTP/1.1 400"), (false, "HTTP/1.1 408")] {
        let before = count(&app).await;
        let answer = send("/collections/pts/items?mode=batch", close).await;
        assert!(
            answer.starts_with(status),
            "{}",
            &answer[..200.min(answer.len())]
        );
        let problem: Value =
            serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        let written = problem["report"]["written"].as_i64().unwrap();
        assert!(written > 0 && written % 500 == 0, "{written}");
        assert_eq!(count(&app).await - before, written);
    }
}

#[tokio::test]
async fn a_batch_body_streamed_holds_its_batches_and_report_not_its_body() {
    let db = TestDb::new(TABLE).await;
    let body = body_text(160_000);
    let path = "/collections/pts/items?mode=batch";
    // Each on a service of its own, so that its peak memory is this request's.
    let mut grown = Vec::new();
    for stream_after in ["64KiB", "1GiB"] {
        let env = [
            ("FEATUREPIPE_STREAM_AFTER", stream_after),
            ("FEATUREPIPE_MAX_BODY", "1GiB"),
        ];
        let service = ServiceProcess::start(&db.url, &env).await;
        let pid = service.child.id().unwrap();
        let before = peak_kib(pid);
        let (status, response) = http(&service.addr, "POST", path, &body).await.unwrap();
        assert_eq!(status, 200, "{}", &response[..response.len().min(500)]);
        grown.push(peak_kib(pid).saturating_sub(before));
        db.client.batch_execute("TRUNCATE pts").await.unwrap();
    }
    let body_kib = body.len() as u64 / 1024;
    let [streamed, whole] = grown[..] else {
        unreachable!()
    };
    eprintln!("body {body_kib} KiB: peak grew {streamed} KiB streamed, {whole} KiB read whole");
    // Read whole, the body, its rows and the session's statements are held
    // at once; streamed, the batches in flight and the per-feature report
    // (its results, then the answer's JSON: about 475 bytes a feature here).
    assert!(
        streamed * 3 < whole,
        "streamed {streamed} KiB, read whole {whole} KiB"
    );
    let per_feature = streamed * 1024 / 160_000;
    assert!(
        per_feature < 640,
        "streamed {streamed} KiB ({per_feature} bytes a feature) for a body of {body_kib} KiB"
    );
}

#[tokio::test]
async fn streamed_batch_and_skip_modes_cost_no_more_round_trips_than_read_whole() {
    // Two services, one streaming every body past 64 KiB, one reading every
    // body whole, each through a proxy 50 ms away that counts round trips
    // (far enough that the parser keeps ahead of the answers).
    let mut services = Vec::new();
    for stream_after in [64 << 10, 64 << 20] {
        let db = TestDb::new(TABLE).await;
        let (proxy, mut config) = via_proxy(&db, Duration::from_millis(50)).await;
        config.batch_size = 500;
        config.stream_after = stream_after;
        config.pool_size = 1;
        services.push((TestApp::on(db, config).await, proxy));
    }
    for mode in ["batch", "skip"] {
        let path = format!("/collections/pts/items?mode={mode}");
        let mut trips = Vec::new();
        for (app, proxy) in &services {
            // Warm: the connection and its prepared INSERT.
            let warm = post_to(app, &path, body_of(1, 1, &[]), &[]).await;
            assert_eq!(warm.status, 200, "{warm:?}");
            let before = proxy.round_trips();
            let r = post_to(app, &path, body_of(3_000, 250, &[]), &[]).await;
            assert_eq!(r.status, 200, "{}", r.body["detail"]);
            assert_eq!(r.body["written"], 3_000);
            trips.push(proxy.round_trips() - before);
        }
        eprintln!(
            "{mode}: {} round trips streamed, {} read whole",
            trips[0], trips[1]
        );
        assert!(trips[0] <= trips[1], "{mode}: {trips:?}");
    }
}

#[tokio::test]
async fn far_from_the_database_a_stream_goes_in_one_copy_after_its_first_segment() {
    let db = TestDb::new(&format!(
        "{TABLE}; CREATE TABLE uniq (id serial PRIMARY KEY, name text, n integer NOT NULL UNIQUE,
                                     geom geometry(Point, 4326))"
    ))
    .await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(10)).await;
    streaming(&mut config);
    config.pool_size = 1;
    config.write_strategy = featurepipe::write::Strategy::Copy;
    let app = TestApp::on(db, config).await;
    // Small writes measure the 20 ms round trip: keys are then read back
    // after the rows rather than drawn in a flight before each segment.
    for _ in 0..6 {
        let r = post_stream(&app, body_of(1, 1, &[]), &[]).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    app.db.client.batch_execute("TRUNCATE pts").await.unwrap();
    let before = proxy.round_trips();
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_written(&app, &r, 20_000).await;
    assert_eq!(r.body["strategy"], "copy");
    let trips = proxy.round_trips() - before;
    // The first segment; the rest in one COPY; its keys read back; COMMIT
    // (and a prepare or two): not a flight per segment of 2,000 features.
    assert!(trips <= 6, "{trips} round trips");
    conflict_deep_in_the_copy(&app).await;
    // An invalid feature late: 422 at its pointer, nothing written, and the
    // connection serves the next stream.
    let r = post_stream(&app, body_of(20_000, 250, &[19_000]), &[]).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(
        r.body["errors"][0]["pointer"],
        "/features/19000/properties/n"
    );
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(count(&app).await, 40_000);
}

#[tokio::test]
async fn next_to_the_database_a_stream_draws_its_keys_ahead_on_a_second_connection() {
    // A second connection only while a third is left for other requests.
    for (pool_size, used) in [(3, 2), (2, 1)] {
        stream_keys(pool_size, used).await;
    }
}

/// A conflict deep in the one COPY of a stream into `uniq` names its
/// feature; nothing is written.
async fn conflict_deep_in_the_copy(app: &TestApp) {
    app.db
        .client
        .batch_execute("INSERT INTO uniq (n) VALUES (17345)")
        .await
        .unwrap();
    let body = body_of(20_000, 250, &[]);
    let r = post_to(app, "/collections/uniq/items", body, &[]).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 17_345, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM uniq").await, 1);
}

/// A stream of 20,000 features next to the database (through the proxy, to
/// count connections) on a pool of `pool_size`, which takes `used`
/// connections: keys drawn ahead on a second connection when there is one
/// to spare, a segment at a time when not; either way every id in feature
/// order, and a conflict deep in the COPY named.
async fn stream_keys(pool_size: usize, used: u64) {
    let db = TestDb::new(&format!(
        "{TABLE}; CREATE TABLE uniq (id serial PRIMARY KEY, name text, n integer NOT NULL UNIQUE,
                                     geom geometry(Point, 4326))"
    ))
    .await;
    let (proxy, mut config) = via_proxy(&db, Duration::ZERO).await;
    streaming(&mut config);
    config.pool_size = pool_size;
    config.write_strategy = featurepipe::write::Strategy::Copy;
    let app = TestApp::on(db, config).await;
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_written(&app, &r, 20_000).await;
    assert_eq!(r.body["strategy"], "copy");
    // Keys drawn ahead need a second connection; none is waited for.
    assert_eq!(proxy.connections(), used, "pool of {pool_size}");
    // Keys drawn ahead and not used are skipped, as after a rollback:
    // fewer than two blocks of 4 batches.
    let drawn = app.db.int("SELECT last_value FROM pts_id_seq").await;
    assert!((20_000..=24_000).contains(&drawn), "{drawn} keys drawn");
    conflict_deep_in_the_copy(&app).await;
    // The next stream writes as the first did.
    app.db.client.batch_execute("TRUNCATE pts").await.unwrap();
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_written(&app, &r, 20_000).await;
}

#[tokio::test]
async fn a_sequence_that_runs_out_while_keys_are_drawn_ahead_writes_nothing() {
    let db = TestDb::new(&format!(
        "{TABLE}; CREATE SEQUENCE lim_seq MAXVALUE 12000;
         CREATE TABLE lim (id integer PRIMARY KEY DEFAULT nextval('lim_seq'), name text,
                           n integer NOT NULL, geom geometry(Point, 4326))"
    ))
    .await;
    let mut config = crate::support::config(&db.url);
    streaming(&mut config);
    config.write_strategy = featurepipe::write::Strategy::Copy;
    let app = TestApp::on(db, config).await;
    // The first segment (16 batches at most) fits; a later block drawn
    // ahead does not.
    let r = post_to(
        &app,
        "/collections/lim/items",
        body_of(20_000, 250, &[]),
        &[],
    )
    .await;
    assert_eq!(r.status, 422, "{r:?}");
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("drawing keys ahead") && detail.contains("lim_seq"),
        "{r:?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM lim").await, 0);
    // The service writes the next stream.
    let r = post_stream(&app, body_of(20_000, 250, &[]), &[]).await;
    assert_written(&app, &r, 20_000).await;
}
