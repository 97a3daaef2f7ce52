//! `featurepipe push`: the binary loads files and standard input into a
//! service on a real port, in keyed batches, so that a rerun after a failure
//! writes each feature exactly once.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::support::{point, settings_file, Served, TestApp};

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

/// `FILE -c pts --url URL --batch N`.
fn to_pts<'a>(file: &'a std::path::Path, url: &'a str, batch: &'a str) -> Vec<&'a str> {
    let file = file.to_str().unwrap();
    vec![file, "-c", "pts", "--url", url, "--batch", batch]
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

/// Run `featurepipe push` with `args` and `env`, `stdin` written to it.
fn push(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<Vec<u8>>,
) -> impl std::future::Future<Output = Pushed> + 'static {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"));
    command
        .arg("push")
        .args(args)
        .env_remove("FEATUREPIPE_URL")
        .env_remove("FEATUREPIPE_API_KEY")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    // The batch of feature 1234 is refused whole; the others are written.
    push(&args, &[], None).await.says(
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
    let args = to_pts(&file, &served.url, "10");
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
