//! `make soak`: many clients for a bounded time against one service over
//! real TCP, mixing good and bad requests while database backends are
//! killed now and then. Afterwards: no 5xx but the 503s (and 502s of an
//! unknown outcome) of those faults,
//! every id the service acknowledged is in the table exactly once, and no
//! row exists that was not acknowledged. Ignored by `make test` (it runs
//! for a minute); `make soak` runs it, with FEATUREPIPE_SOAK_CLIENTS
//! (default 32), FEATUREPIPE_SOAK_SECS (default 60) and
//! FEATUREPIPE_SOAK_FAULTS (`off`: no backends are killed, and then no 503
//! is acceptable either).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::support::{collection, point, Served, TestApp};

const SETUP: &str = "
    CREATE TABLE soak (id serial PRIMARY KEY, client int NOT NULL, seq int NOT NULL,
                       name text, geom geometry(Point, 4326) NOT NULL,
                       UNIQUE (client, seq));
    CREATE INDEX soak_geom ON soak USING gist (geom);
";

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// What the clients saw, put together at the end.
#[derive(Default)]
struct Tally {
    by_status: BTreeMap<u16, u64>,
    /// Acknowledged id → (client, seq).
    acknowledged: HashMap<i64, (i64, i64)>,
    /// 5xx other than a fault's 503 or 502, with what was sent.
    unexpected: Vec<String>,
    retries: u64,
    /// Backends are being killed: 503s and broken connections are expected.
    faults: bool,
}

impl Tally {
    /// An answer a killed backend explains: a broken connection, a 503
    /// (nothing written), or a 502 whose outcome is unknown (the connection
    /// was lost after COMMIT went out; a keyed retry tells what happened).
    fn is_fault(&self, status: u16, reply: &Value) -> bool {
        let unknown = status == 502 && reply["type"] == "urn:featurepipe:problem:outcome-unknown";
        self.faults && (status == 0 || status == 503 || unknown)
    }
}

/// A small deterministic generator per client (no dependency needed).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn send(
    http: &Http,
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, Value) {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("{url}{path}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(Bytes::from(body))).unwrap();
    match http.request(req).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }
        // The connection broke: the client cannot know what happened.
        Err(_) => (0, Value::Null),
    }
}

const GEOJSON: (&str, &str) = ("content-type", "application/geo+json");

/// One client's loop until `until`.
async fn client(n: i64, url: String, until: Instant, tally: Arc<Mutex<Tally>>) {
    let http: Http = Client::builder(TokioExecutor::new()).build_http();
    let mut dice = Dice(0x9E37_79B9_7F4A_7C15 ^ ((n as u64 + 1) * 0x1000_0001));
    let mut seq = 0i64;
    let mut written: Vec<i64> = Vec::new();
    let mut attempt = 0u64;
    while Instant::now() < until {
        let roll = dice.below(100);
        let (method, path, headers, body, expect): (
            _,
            String,
            Vec<(&str, String)>,
            String,
            &[u16],
        ) = match roll {
            // A good collection under an Idempotency-Key, retried until answered.
            0..=44 => {
                let count = 1 + dice.below(40) as i64;
                let features = (0..count)
                    .map(|i| {
                        let x = (n * 7 + seq + i) as f64 % 360.0 - 180.0;
                        point(x, 45.0, json!({"client": n, "seq": seq + i, "name": "ok"}))
                    })
                    .collect();
                let body = collection(features).to_string();
                let first = seq;
                seq += count;
                attempt += 1;
                let key = format!("soak-{n}-{attempt}");
                let ids = keyed_post(&http, &url, &key, body, &tally).await;
                let mut t = tally.lock().unwrap();
                for (i, id) in ids.iter().enumerate() {
                    let previous = t.acknowledged.insert(*id, (n, first + i as i64));
                    assert!(previous.is_none(), "id {id} acknowledged twice");
                }
                written.extend(ids);
                continue;
            }
            // Invalid: an unknown property, a wrong type, broken JSON, a bad geometry.
            45..=54 => {
                let body = match dice.below(4) {
                    0 => collection(vec![point(
                        0.0,
                        0.0,
                        json!({"client": n, "seq": -1, "nope": 1}),
                    )])
                    .to_string(),
                    1 => collection(vec![point(0.0, 0.0, json!({"client": "x", "seq": -1}))])
                        .to_string(),
                    2 => "{\"type\":\"FeatureCollection\",\"features\":[".to_owned(),
                    _ => {
                        json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1]},
                                    "properties": {"client": n, "seq": -1}})
                        .to_string()
                    }
                };
                (
                    "POST",
                    "/collections/soak/items".into(),
                    vec![],
                    body,
                    &[400, 422][..],
                )
            }
            // A duplicate of something written: the unique constraint refuses it.
            55..=59 if seq > 0 => {
                let body =
                    collection(vec![point(0.0, 0.0, json!({"client": n, "seq": 0}))]).to_string();
                (
                    "POST",
                    "/collections/soak/items".into(),
                    vec![],
                    body,
                    &[409][..],
                )
            }
            // An update of one of this client's features.
            60..=69 if !written.is_empty() => {
                let id = written[dice.below(written.len() as u64) as usize];
                let body = json!({"properties": {"name": format!("patched {roll}")}}).to_string();
                (
                    "PATCH",
                    format!("/collections/soak/items/{id}"),
                    vec![("content-type", "application/merge-patch+json".to_owned())],
                    body,
                    &[204][..],
                )
            }
            // Reads.
            70..=89 => (
                "GET",
                format!(
                    "/collections/soak/items?limit=50&offset={}",
                    dice.below(500)
                ),
                vec![],
                String::new(),
                &[200][..],
            ),
            _ => (
                "GET",
                "/collections/soak/items/0".into(),
                vec![],
                String::new(),
                &[404][..],
            ),
        };
        let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if method == "POST" {
            all.push(GEOJSON);
        }
        let (status, reply) = send(&http, &url, method, &path, &all, body.clone()).await;
        record(&tally, status, &reply, expect, &format!("{method} {path}"));
    }
}

/// POST under `key` until the service gives an answer that is not a fault
/// (what a careful client does); the acknowledged ids, if it was written.
async fn keyed_post(
    http: &Http,
    url: &str,
    key: &str,
    body: String,
    tally: &Mutex<Tally>,
) -> Vec<i64> {
    loop {
        let headers = [GEOJSON, ("idempotency-key", key)];
        let (status, reply) = send(
            http,
            url,
            "POST",
            "/collections/soak/items",
            &headers,
            body.clone(),
        )
        .await;
        record(tally, status, &reply, &[201], &format!("POST keyed {key}"));
        if status == 201 {
            return reply["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|id| id.as_i64().expect("integer ids"))
                .collect();
        }
        // A fault, or the first attempt still running: retry under the key.
        let fault = tally.lock().unwrap().is_fault(status, &reply);
        assert!(
            fault || status == 409,
            "a valid keyed POST answered {status}: {reply}"
        );
        tally.lock().unwrap().retries += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn record(tally: &Mutex<Tally>, status: u16, reply: &Value, expect: &[u16], what: &str) {
    let mut t = tally.lock().unwrap();
    *t.by_status.entry(status).or_default() += 1;
    let fault = t.is_fault(status, reply);
    if !fault && (!expect.contains(&status) || status >= 500) {
        t.unexpected.push(format!("{what}: {status} {reply}"));
    }
}

#[tokio::test]
#[ignore = "runs for a minute: make soak"]
async fn soak() {
    let clients: i64 = std::env::var("FEATUREPIPE_SOAK_CLIENTS").map_or(32, |v| v.parse().unwrap());
    let secs: u64 = std::env::var("FEATUREPIPE_SOAK_SECS").map_or(60, |v| v.parse().unwrap());
    let app = TestApp::new(SETUP).await;
    let served = Served::start(&app).await;
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let faults = std::env::var("FEATUREPIPE_SOAK_FAULTS").map_or(true, |v| v != "off");
    let tally = Arc::new(Mutex::new(Tally {
        faults,
        ..Tally::default()
    }));

    // Faults: every two seconds, kill the service's database backends.
    let killer_url = app.db.url.clone();
    let faults = tokio::spawn(async move {
        let (killer, conn) = tokio_postgres::connect(&killer_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut killed = 0u64;
        while faults && Instant::now() + Duration::from_secs(2) < until {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let rows = killer
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                      WHERE datname = current_database() AND pid <> pg_backend_pid() \
                        AND application_name = 'featurepipe'",
                    &[],
                )
                .await
                .unwrap();
            killed += rows.len() as u64;
        }
        killed
    });
    let tasks: Vec<_> = (0..clients)
        .map(|n| tokio::spawn(client(n, served.url.clone(), until, tally.clone())))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let killed = faults.await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();

    let rows = app
        .db
        .client
        .query("SELECT id::int8, client::int8, seq::int8 FROM soak", &[])
        .await
        .unwrap();
    let t = tally.lock().unwrap();
    let in_table: HashMap<i64, (i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let requests: u64 = t.by_status.values().sum();
    println!(
        "soak: {clients} clients, {elapsed:.0} s, {requests} requests ({:.0}/s), by status {:?}; \
         {} features acknowledged ({:.0}/s), {} backends killed, {} keyed retries",
        requests as f64 / elapsed,
        t.by_status,
        t.acknowledged.len(),
        t.acknowledged.len() as f64 / elapsed,
        killed,
        t.retries
    );
    assert!(
        t.unexpected.is_empty(),
        "unexpected answers: {:#?}",
        &t.unexpected[..t.unexpected.len().min(20)]
    );
    let missing: Vec<_> = t
        .acknowledged
        .keys()
        .filter(|id| !in_table.contains_key(id))
        .collect();
    let unacknowledged: Vec<_> = in_table
        .keys()
        .filter(|id| !t.acknowledged.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not in the table: {missing:?}"
    );
    assert!(
        unacknowledged.is_empty(),
        "in the table but never acknowledged: {unacknowledged:?}"
    );
    for (id, at) in &t.acknowledged {
        assert_eq!(
            in_table[id], *at,
            "feature {id} is not the one acknowledged"
        );
    }
    assert!(
        t.acknowledged.len() > 100,
        "the soak wrote too little to mean anything"
    );
}
