//! `featurepipe push`: the binary loads files and standard input into a
//! service on a real port, in keyed batches, so that a rerun after a failure
//! writes each feature exactly once.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{header, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::support::{point, settings_file, Served, TestApp};
use crate::tls::Ca;

/// `id` has no default: each feature's `id` member is its key.
const KEYED: &str = "CREATE TABLE pts (id int PRIMARY KEY, n int, geom geometry(Point, 4326))";
const SERIAL: &str = "CREATE TABLE pts (id serial PRIMARY KEY, n int, geom geometry(Point, 4326))";

/// A point with `n` = `i` (and `id` = `i` where `with_id`).
fn feature(i: usize, with_id: bool) -> String {
    let mut f = point(i as f64 / 100.0, 1.0, json!({"n": i}));
    if with_id {
        f["id"] = json!(i);
    }
    f.to_string()
}

/// A FeatureCollection file of `n` points, one per line, with a foreign member before `features`.
fn collection_file(name: &str, n: usize, with_id: bool) -> PathBuf {
    let features: Vec<String> = (0..n).map(|i| feature(i, with_id)).collect();
    let text = format!(
        "{{\"type\": \"FeatureCollection\", \"name\": \"{name}\", \"features\": [\n{}\n]}}\n",
        features.join(",\n")
    );
    let path = std::env::temp_dir().join(format!(
        "featurepipe-push-{}-{name}.geojson",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// `FILE -c pts --url URL --batch N --gzip on`: compressed, as `auto` does
/// only for a distant service (these are all on 127.0.0.1).
fn to_pts<'a>(file: &'a std::path::Path, url: &'a str, batch: &'a str) -> Vec<&'a str> {
    let file = file.to_str().unwrap();
    vec![
        file, "-c", "pts", "--url", url, "--batch", batch, "--gzip", "on",
    ]
}

/// What a run of `featurepipe push` did.
struct Pushed {
    success: bool,
    stderr: String,
}

impl Pushed {
    /// Check that the push succeeded or not, and that its stderr says each of `texts`.
    #[track_caller]
    fn says(&self, success: bool, texts: &[&str]) {
        assert_eq!(self.success, success, "{self:?}");
        for text in texts {
            assert!(self.stderr.contains(text), "{text:?} is missing: {self:?}");
        }
    }
}

impl std::fmt::Debug for Pushed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "success: {}\n{}", self.success, self.stderr)
    }
}

/// `featurepipe push` with `args` and `env` (and none of the test's own
/// settings of push), its output piped, killed if dropped.
fn push_command(args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"));
    command
        .arg("push")
        .args(args)
        .env_remove("FEATUREPIPE_URL")
        .env_remove("FEATUREPIPE_API_KEY")
        .env_remove("FEATUREPIPE_CA_FILE")
        .env_remove("SSL_CERT_DIR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Run `featurepipe push` with `args` and `env`, `stdin` written to it.
fn push(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<Vec<u8>>,
) -> impl std::future::Future<Output = Pushed> + 'static {
    let mut command = push_command(args, env);
    if stdin.is_some() {
        command.stdin(Stdio::piped());
    }
    async move {
        let mut child = command.spawn().expect("featurepipe runs");
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            tokio::spawn(async move {
                pipe.write_all(&bytes).await.unwrap();
            });
        }
        let out = child.wait_with_output().await.unwrap();
        Pushed {
            success: out.status.success(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.db.int(sql).await
}

#[tokio::test]
async fn a_feature_collection_file_loads_completely() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    let file = collection_file("complete", 3000, true);
    let args = to_pts(&file, &served.url, "700");
    push(&args, &[], None).await.says(
        true,
        &[
            "batches:  5 (0 replayed, 0 with features not written)",
            "features: 3000 read, 3000 written, 0 replayed, 0 not written",
        ],
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM pts WHERE id = n").await,
        3000
    );
    assert_eq!(count(&app, "SELECT max(id)::int8 FROM pts").await, 2999);
    // Running it again writes nothing: every batch is a replay.
    push(&args, &[], None)
        .await
        .says(true, &["3000 read, 0 written, 3000 replayed"]);
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 3000);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn a_text_sequence_from_standard_input() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    // RFC 8142 records, then plain newline-delimited features.
    let mut input = Vec::new();
    for i in 0..400 {
        if i < 250 {
            input.push(0x1e);
        }
        input.extend_from_slice(feature(i, true).as_bytes());
        input.push(b'\n');
    }
    let env = [("FEATUREPIPE_URL", served.url.as_str())];
    push(&["-", "-c", "pts", "--batch", "100"], &env, Some(input))
        .await
        .says(true, &["400 read, 400 written"]);
    let sql = "SELECT count(DISTINCT id) FROM pts WHERE id = n";
    assert_eq!(count(&app, sql).await, 400);
}

#[tokio::test]
async fn a_rerun_after_a_partial_failure_writes_each_feature_once() {
    let setup = format!("{SERIAL}; ALTER TABLE pts ADD CONSTRAINT not_1234 CHECK (n <> 1234)");
    let app = TestApp::new(&setup).await;
    let served = Served::start(&app).await;
    let file = collection_file("rerun", 3000, false);
    let args = to_pts(&file, &served.url, "500");
    // The batch of feature 1234 is refused whole; the others are written,
    // four at a time, and told in the order of the input. (The rerun, one
    // at a time, has the same keys: they do not depend on --jobs.)
    let parallel = [args.as_slice(), &["--jobs", "4"]].concat();
    push(&parallel, &[], None).await.says(
        false,
        &[
            "3000 read, 2500 written, 0 replayed, 500 not written",
            "batch 2 (features 1000–1499): 422",
            "feature 1234 ",
            "not_1234",
            "run the same command again",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 2500);

    app.db
        .client
        .batch_execute("ALTER TABLE pts DROP CONSTRAINT not_1234")
        .await
        .unwrap();
    push(&args, &[], None).await.says(
        true,
        &["3000 read, 500 written, 2500 replayed, 0 not written"],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 3000);
    assert_eq!(count(&app, "SELECT count(DISTINCT n) FROM pts").await, 3000);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn bad_features_fail_the_push_and_are_named() {
    let app = TestApp::new(SERIAL).await;
    let served = Served::start(&app).await;
    let mut lines: Vec<String> = (0..300).map(|i| feature(i, false)).collect();
    lines[77] = point(0.0, 0.0, json!({"n": "seventy-seven"})).to_string();
    lines[250] = r#"{"type": "Feature", "properties": {"n": }, "geometry": null}"#.into();
    let input = lines.join("\n").into_bytes();
    let args = to_pts(std::path::Path::new("-"), &served.url, "100");
    push(&args, &[], Some(input.clone())).await.says(
        false,
        &[
            "300 read, 100 written, 0 replayed, 200 not written",
            // The service's problem, told by the feature's index in the input.
            "batch 0 (features 0–99): 422",
            "feature 77 /properties/n: invalid_type: ",
            // A feature that is not JSON: its batch is not sent.
            "batch 2 (features 200–299): not sent",
            "feature 250 (byte ",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 100);

    // In skip mode the service writes every feature it can.
    let skip = [args.as_slice(), &["--mode", "skip"]].concat();
    push(&skip, &[], Some(input)).await.says(
        false,
        &[
            "300 read, 199 written, 0 replayed, 101 not written",
            "batch 0 (features 0–99): 1 of 100 features not written",
            "feature 77 /properties/n: invalid_type",
            "replays those batches",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 299);
}

#[tokio::test]
async fn with_authentication_on_the_key_is_sent() {
    const KEY: &str = "fp_push_key_for_tests";
    let hash: String = {
        use sha2::Digest;
        sha2::Sha256::digest(KEY.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let settings = settings_file(
        "push",
        &format!("[api_keys.loader]\nsha256 = \"{hash}\"\nscope = \"write:pts\"\n"),
    );
    let app = TestApp::with_config(SERIAL, |c| {
        c.auth = true;
        c.settings = Some(settings);
    })
    .await;
    let served = Served::start(&app).await;
    let file = collection_file("auth", 50, false);
    // One batch at a time: the first refusal stops the push before another goes out.
    let args = [
        to_pts(&file, &served.url, "10").as_slice(),
        &["--jobs", "1"],
    ]
    .concat();
    // Without the key: the first batch is refused and the push stops there.
    push(&args, &[], None).await.says(
        false,
        &[
            "401 Unauthorized",
            "stopped:  after batch 0",
            "10 read, 0 written",
        ],
    );
    // With it, from the flag or the environment.
    let with_flag = [args.as_slice(), &["--api-key", KEY]].concat();
    push(&with_flag, &[], None)
        .await
        .says(true, &["50 written"]);
    push(&args, &[("FEATUREPIPE_API_KEY", KEY)], None)
        .await
        .says(true, &["0 written, 50 replayed"]);
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 50);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn an_unreachable_service_is_retried_then_named() {
    let app = TestApp::new(KEYED).await;
    // A port nobody listens on yet, held (bound, not listening: connections
    // are refused) so that no other test's socket can take it meanwhile.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let url = format!("http://{addr}");
    let file = collection_file("unreachable", 20, true);
    let args = to_pts(&file, &url, "1000");
    let no_retries = [args.as_slice(), &["--retries", "0"]].concat();
    push(&no_retries, &[], None).await.says(
        false,
        &[&format!("cannot reach {url}/"), "onnection refused"],
    );
    // With retries (pauses of 0.5, 1, 2 … s), a service that comes up meanwhile gets the batch.
    let pushing = tokio::spawn(push(&args, &[], None));
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let listener = socket.listen(1024).unwrap();
    let _served = Served::on(&app, listener);
    pushing.await.unwrap().says(true, &["20 written"]);
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 20);
    std::fs::remove_file(file).unwrap();
}

/// A front for the service at `target` that passes requests on but hangs up
/// on the first connection as soon as its answer begins: the first answer is lost.
async fn losing_the_first_answer(target: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut client, _)) = listener.accept().await {
            let mut server = tokio::net::TcpStream::connect(&target).await.unwrap();
            if !std::mem::take(&mut first) {
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                continue;
            }
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let (mut from_client, _to_client) = client.split();
                let (mut from_server, mut to_server) = server.split();
                let mut answer = [0u8; 1];
                tokio::select! {
                    _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                    _ = from_server.read(&mut answer) => {}
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn a_lost_answer_is_sent_again_with_the_same_key_and_written_once() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    let front = losing_the_first_answer(served.url.trim_start_matches("http://").into()).await;
    let file = collection_file("lost", 300, true);
    // The first batch was written but its answer lost: sent again, it is a replay.
    push(&to_pts(&file, &front, "100"), &[], None).await.says(
        true,
        &["300 read, 200 written, 100 replayed, 0 not written"],
    );
    assert_eq!(count(&app, "SELECT count(DISTINCT id) FROM pts").await, 300);
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 300);
    std::fs::remove_file(file).unwrap();
}

/// A front for a service, as deployments have one: it terminates TLS when
/// given a certificate, passes each request on and notes its
/// `Content-Encoding`, and does what its [`Conduct`] says besides.
struct Front {
    /// `https://localhost:port` with TLS, `http://127.0.0.1:port` without.
    url: String,
    /// The `Content-Encoding` of each request it got, in order ("" for none).
    encodings: Arc<Mutex<Vec<String>>>,
    /// How many answers it holds back (see [`Conduct::HoldsAfter`]).
    held: watch::Receiver<usize>,
}

/// What a front does besides passing requests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conduct {
    /// Nothing.
    Plain,
    /// It answers a gzip body 415, as a service that takes no gzip does,
    /// and writes nothing for it.
    RefusesGzip,
    /// It passes the service's first N answers on, and holds back every
    /// later one: the service wrote the batch, the client never hears so.
    HoldsAfter(usize),
}

/// The certificate (chain) and key a TLS front presents, PEM.
type Presented = (String, String);

impl Front {
    async fn start(service: &Served, tls: Option<Presented>, conduct: Conduct) -> Front {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = match tls {
            Some(_) => format!("https://localhost:{port}"),
            None => format!("http://127.0.0.1:{port}"),
        };
        let acceptor = tls.map(|(cert, key)| {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let encodings = Arc::new(Mutex::new(Vec::new()));
        let (holding, held) = watch::channel(0);
        let pass = Pass {
            upstream: service.url.clone(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            encodings: encodings.clone(),
            conduct,
            answered: Arc::new(AtomicUsize::new(0)),
            holding: Arc::new(holding),
        };
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, pass) = (acceptor.clone(), pass.clone());
                tokio::spawn(async move {
                    let serve = hyper::server::conn::http1::Builder::new();
                    let service = service_fn(move |request| pass.clone().on(request));
                    // A client that refuses the certificate hangs up during the handshake.
                    let _ = match acceptor {
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(tls) => serve.serve_connection(TokioIo::new(tls), service).await,
                            Err(_) => return,
                        },
                        None => serve.serve_connection(TokioIo::new(tcp), service).await,
                    };
                });
            }
        });
        Front {
            url,
            encodings,
            held,
        }
    }

    /// The `Content-Encoding` of each request so far.
    fn encodings(&self) -> Vec<String> {
        self.encodings.lock().unwrap().clone()
    }
}

/// What a front does with one request.
#[derive(Clone)]
struct Pass {
    /// `http://127.0.0.1:port` of the service.
    upstream: String,
    client: Client<HttpConnector, Incoming>,
    encodings: Arc<Mutex<Vec<String>>>,
    conduct: Conduct,
    /// The service's answers so far.
    answered: Arc<AtomicUsize>,
    /// The count of answers held back.
    holding: Arc<watch::Sender<usize>>,
}

impl Pass {
    async fn on(self, mut request: Request<Incoming>) -> Result<Response<Full<Bytes>>, String> {
        let encoding = request
            .headers()
            .get(header::CONTENT_ENCODING)
            .map_or("", |v| v.to_str().unwrap())
            .to_owned();
        self.encodings.lock().unwrap().push(encoding.clone());
        if self.conduct == Conduct::RefusesGzip && encoding == "gzip" {
            let problem = json!({
                "type": "urn:featurepipe:problem:unsupported-encoding",
                "status": 415,
                "detail": "Content-Encoding 'gzip' is not accepted: send the body uncompressed",
            });
            let response = Response::builder()
                .status(415)
                .header(header::CONTENT_TYPE, "application/problem+json")
                .body(Full::new(Bytes::from(problem.to_string())));
            return response.map_err(|e| e.to_string());
        }
        let target = request.uri().path_and_query().unwrap().as_str();
        *request.uri_mut() = format!("{}{target}", self.upstream).parse().unwrap();
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?;
        if let Conduct::HoldsAfter(passed) = self.conduct {
            if self.answered.fetch_add(1, Ordering::SeqCst) >= passed {
                self.holding.send_modify(|held| *held += 1);
                std::future::pending::<()>().await;
            }
        }
        Ok(Response::from_parts(parts, Full::new(body.to_bytes())))
    }
}

/// A scratch file holding `text`, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("featurepipe-push-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

#[tokio::test]
async fn over_https_with_the_ca_file_every_feature_lands_gzip_compressed() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    let ca = Ca::new("featurepipe push test CA");
    let tls = Some(ca.sign("localhost", &["localhost"]));
    let front = Front::start(&served, tls, Conduct::Plain).await;
    let ca_file = TempFile::new("ca.pem", &ca.pem());
    // What the system trusts here: a CA that signed nothing of this test.
    let other_ca = TempFile::new("other-ca.pem", &Ca::new("someone else's CA").pem());
    let system = [("SSL_CERT_FILE", other_ca.path())];
    let file = collection_file("https", 1000, true);
    // One batch at a time: a refused certificate stops the push at its first batch.
    let args = [
        to_pts(&file, &front.url, "250").as_slice(),
        &["--jobs", "1"],
    ]
    .concat();

    // The system's roots do not trust the front's certificate: refused at
    // once (not retried), nothing sent, nothing written.
    let items = format!("{}/collections/pts/items?mode=atomic", front.url);
    push(&args, &system, None).await.says(
        false,
        &[
            &format!("cannot reach {items}: the certificate it presents is not trusted"),
            "no CA in the system's root certificates signed it",
            "--ca-file (or FEATUREPIPE_CA_FILE)",
            "stopped:  after batch 0",
        ],
    );
    // Another CA file than the one that signed it is no better.
    let with_other = [args.as_slice(), &["--ca-file", other_ca.path()]].concat();
    push(&with_other, &[], None).await.says(
        false,
        &[&format!(
            "not trusted: no CA in --ca-file {} signed it",
            other_ca.path()
        )],
    );
    assert!(front.encodings().is_empty());
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 0);

    // With the CA that signed it: every batch over TLS, gzip-compressed.
    let with_ca = [args.as_slice(), &["--ca-file", ca_file.path()]].concat();
    push(&with_ca, &system, None).await.says(
        true,
        &[
            "1000 read, 1000 written, 0 replayed, 0 not written",
            "(gzip, --gzip on)",
        ],
    );
    assert_eq!(front.encodings(), ["gzip"; 4]);
    let sql = "SELECT count(DISTINCT id) FROM pts WHERE id = n AND ST_X(geom) = n / 100.0";
    assert_eq!(count(&app, sql).await, 1000);

    // The same batches uncompressed (the CA from the environment) are
    // replays: the service keys them by their body decompressed.
    let mut plain = args.clone();
    let gzip = plain.iter().position(|a| *a == "--gzip").unwrap();
    plain[gzip + 1] = "off";
    push(&plain, &[("FEATUREPIPE_CA_FILE", ca_file.path())], None)
        .await
        .says(true, &["1000 read, 0 written, 1000 replayed", "--gzip off"]);
    assert_eq!(front.encodings()[4..], [""; 4]);
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 1000);

    // A host name the certificate does not name.
    let by_address = front.url.replace("localhost", "127.0.0.1");
    let elsewhere = to_pts(&file, &by_address, "250");
    let elsewhere = [elsewhere.as_slice(), &["--ca-file", ca_file.path()]].concat();
    push(&elsewhere, &[], None).await.says(
        false,
        &["not valid for 127.0.0.1 (it names localhost): use a --url with a host name"],
    );
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn a_ca_file_that_cannot_be_used_stops_push_before_it_sends() {
    let empty = TempFile::new("empty-ca.pem", "");
    let file = collection_file("unusable-ca", 10, true);
    let args = to_pts(&file, "https://localhost:1", "250");
    let missing = "/nonexistent/featurepipe-ca.pem";
    for (ca_file, says) in [
        (missing, format!("--ca-file {missing}: cannot read it: ")),
        (
            empty.path(),
            format!("--ca-file {}: no PEM certificate in it", empty.path()),
        ),
    ] {
        let args = [args.as_slice(), &["--ca-file", ca_file]].concat();
        push(&args, &[], None).await.says(false, &[&says]);
    }
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn a_service_that_refuses_gzip_gets_every_batch_once_uncompressed() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    let front = Front::start(&served, None, Conduct::RefusesGzip).await;
    let file = collection_file("no-gzip", 1000, true);
    // One batch at a time, so that one gzip body goes out before the refusal.
    let args = [
        to_pts(&file, &front.url, "250").as_slice(),
        &["--jobs", "1"],
    ]
    .concat();
    push(&args, &[], None).await.says(
        true,
        &[
            "batches:  4 (0 replayed, 0 with features not written)",
            "1000 read, 1000 written, 0 replayed, 0 not written",
            "(uncompressed: the service refused gzip with 415)",
        ],
    );
    // The first batch gzip (refused), then it again and every other one plain.
    assert_eq!(front.encodings(), ["gzip", "", "", "", ""]);
    assert_eq!(
        count(&app, "SELECT count(DISTINCT id) FROM pts").await,
        1000
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 1000);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn four_jobs_write_every_feature_once_each_batch_in_order() {
    let app = TestApp::new(SERIAL).await;
    let served = Served::start(&app).await;
    let file = collection_file("jobs", 3000, false);
    let args = to_pts(&file, &served.url, "100");
    let parallel = [args.as_slice(), &["--jobs", "4"]].concat();
    push(&parallel, &[], None).await.says(
        true,
        &[
            "batches:  30 (0 replayed, 0 with features not written)",
            "features: 3000 read, 3000 written, 0 replayed, 0 not written",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 3000);
    assert_eq!(count(&app, "SELECT count(DISTINCT n) FROM pts").await, 3000);
    // Within a batch the service numbers features in input order; batches
    // sent at once take their numbers as the service writes them.
    let out_of_order = "SELECT count(*) FROM (
        SELECT id, lag(id) OVER (PARTITION BY n / 100 ORDER BY n) AS before FROM pts
    ) AS batch WHERE id <= before";
    assert_eq!(count(&app, out_of_order).await, 0);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn a_parallel_push_killed_with_batches_in_flight_resumes_exactly() {
    let app = TestApp::new(SERIAL).await;
    let served = Served::start(&app).await;
    // Three answers reach push; the service writes four more batches whose
    // answers never do: then push is killed.
    let front = Front::start(&served, None, Conduct::HoldsAfter(3)).await;
    let file = collection_file("killed", 2000, false);
    let args = to_pts(&file, &front.url, "100");
    let parallel = [args.as_slice(), &["--jobs", "4"]].concat();
    let mut pushing = push_command(&parallel, &[]).spawn().unwrap();
    let mut held = front.held.clone();
    // Four answers held at once: four batches were in flight together.
    let in_flight = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        held.wait_for(|held| *held == 4),
    );
    assert!(
        in_flight.await.is_ok(),
        "push never had four batches in flight"
    );
    pushing.kill().await.unwrap();
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 700);

    // Run again (straight to the service): the seven batches written are
    // replayed, whether their answers came or not; the others are written.
    let resumed = [
        to_pts(&file, &served.url, "100").as_slice(),
        &["--jobs", "4"],
    ]
    .concat();
    push(&resumed, &[], None).await.says(
        true,
        &[
            "batches:  20 (7 replayed, 0 with features not written)",
            "features: 2000 read, 1300 written, 700 replayed, 0 not written",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 2000);
    assert_eq!(count(&app, "SELECT count(DISTINCT n) FROM pts").await, 2000);
    std::fs::remove_file(file).unwrap();
}

#[tokio::test]
async fn a_reload_after_truncate_is_replayed_until_a_new_run_is_named() {
    let app = TestApp::new(KEYED).await;
    let served = Served::start(&app).await;
    let file = collection_file("reload", 2000, true);
    let args = to_pts(&file, &served.url, "500");
    push(&args, &[], None)
        .await
        .says(true, &["2000 read, 2000 written, 0 replayed"]);
    let truncate = app.db.client.batch_execute("TRUNCATE pts");
    truncate.await.unwrap();

    // The same push again: the service remembers every batch's key, so it
    // writes nothing, and push says so, with the way out. Everything it
    // was given is loaded as far as the service knows: it succeeds.
    let replayed = push(&args, &[], None).await;
    replayed.says(
        true,
        &[
            "2000 read, 0 written, 2000 replayed",
            "replayed: nothing was written: an earlier push of this input wrote every batch",
            "FEATUREPIPE_IDEMPOTENCY_TTL",
            "give a name not used before: --run NAME",
        ],
    );
    assert!(!replayed.stderr.contains("run:  "), "{replayed:?}");
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 0);

    // A named run is a new load; the same name again resumes it.
    let second = [args.as_slice(), &["--run", "second"]].concat();
    let written = push(&second, &[], None).await;
    written.says(
        true,
        &["run:      second", "2000 read, 2000 written, 0 replayed"],
    );
    assert!(
        !written.stderr.contains("nothing was written"),
        "{written:?}"
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM pts WHERE id = n").await,
        2000
    );
    push(&second, &[], None).await.says(
        true,
        &[
            "2000 read, 0 written, 2000 replayed",
            "an earlier push of this input with --run second wrote every batch",
        ],
    );
    assert_eq!(count(&app, "SELECT count(*) FROM pts").await, 2000);
    std::fs::remove_file(file).unwrap();
}
