//! `make bench`: the ways of writing features to PostGIS, side by side, in one run.
//!
//! Strategies: (1) one INSERT per feature, waiting for each answer (what GIS
//! clients do); (2) featurepipe over HTTP, pipelined INSERTs; (3) featurepipe
//! over HTTP, COPY; (4) binary COPY straight into the table, no ids (the
//! ceiling); (5) `ogr2ogr` loading the same GeoJSON, when GDAL is installed.
//! The database sits behind the project's latency proxy, which adds the RTT
//! and counts round trips. The service runs as its own process (the release
//! binary), as deployed. Run by `scripts/bench.sh` on a throwaway cluster.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use featurepipe::geometry::{encode_ewkb, GeometryColumn};
use featurepipe_proxy::Proxy;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls};

/// A run longer than this is extrapolated from a smaller measured size.
const RUN_BUDGET: Duration = Duration::from_secs(12);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Strategy {
    OneAtATime,
    HttpInsert,
    HttpCopy,
    HttpCopyWhole,
    RawCopy,
    Ogr2ogr,
}

impl Strategy {
    const ALL: [Strategy; 6] = [
        Strategy::OneAtATime,
        Strategy::HttpInsert,
        Strategy::HttpCopy,
        Strategy::HttpCopyWhole,
        Strategy::RawCopy,
        Strategy::Ogr2ogr,
    ];

    fn label(self) -> &'static str {
        match self {
            Strategy::OneAtATime => "1 one INSERT at a time",
            Strategy::HttpInsert => "2 featurepipe, pipelined INSERT",
            Strategy::HttpCopy => "3 featurepipe, COPY",
            Strategy::HttpCopyWhole => "3w featurepipe, COPY, body read whole",
            Strategy::RawCopy => "4 binary COPY, no ids",
            Strategy::Ogr2ogr => "5 ogr2ogr",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            Strategy::OneAtATime => "#d62728",
            Strategy::HttpInsert => "#1f77b4",
            Strategy::HttpCopy => "#2ca02c",
            Strategy::HttpCopyWhole => "#98df8a",
            Strategy::RawCopy => "#7f7f7f",
            Strategy::Ogr2ogr => "#ff7f0e",
        }
    }
}

/// Features to write, as GeoJSON and as rows for the direct strategies.
struct Dataset {
    name: String,
    table: &'static str,
    geojson: Vec<u8>,
    file: PathBuf,
    rows: Vec<(String, i32, Vec<u8>)>,
}

impl Dataset {
    fn len(&self) -> usize {
        self.rows.len()
    }
}

fn points(n: usize, dir: &Path) -> Dataset {
    let features = (0..n)
        .map(|i| {
            let (x, y) = (
                -10.0 + (i % 1000) as f64 * 0.04,
                35.0 + (i / 1000) as f64 * 0.002,
            );
            json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [x, y]},
                   "properties": {"name": format!("p{i}"), "seq": i}})
        })
        .collect();
    dataset(format!("{n} points"), "points", features, dir)
}

/// The GeoJSON of [`points`] alone, written straight as text: a body of
/// millions of features without a tree of values in the bench process.
fn points_body(n: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(n * 130);
    body.extend_from_slice(b"{\"type\":\"FeatureCollection\",\"features\":[");
    for i in 0..n {
        let (x, y) = (
            -10.0 + (i % 1000) as f64 * 0.04,
            35.0 + (i / 1000) as f64 * 0.002,
        );
        let comma = if i > 0 { "," } else { "" };
        write!(
            body,
            "{comma}{{\"type\":\"Feature\",\"geometry\":{{\"type\":\"Point\",\"coordinates\":[{x},{y}]}},\"properties\":{{\"name\":\"p{i}\",\"seq\":{i}}}}}"
        )
        .unwrap();
    }
    body.extend_from_slice(b"]}");
    body
}

fn polygons(dir: &Path) -> Dataset {
    let features = (0..64)
        .map(|i| {
            let (cx, cy) = (i as f64 * 0.5, 45.0);
            let mut ring: Vec<Value> = (0..999)
                .map(|k| {
                    let a = k as f64 / 999.0 * std::f64::consts::TAU;
                    json!([cx + 0.2 * a.cos(), cy + 0.2 * a.sin()])
                })
                .collect();
            ring.push(ring[0].clone());
            json!({"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [ring]},
                   "properties": {"name": format!("poly{i}"), "seq": i}})
        })
        .collect();
    dataset("64 polygons × 1000 vertices".into(), "polys", features, dir)
}

fn dataset(name: String, table: &'static str, features: Vec<Value>, dir: &Path) -> Dataset {
    let any = GeometryColumn::from_typmod(-1, false);
    let rows = features
        .iter()
        .map(|f| {
            let p = &f["properties"];
            let ewkb = encode_ewkb(&f["geometry"].to_string(), &any).expect("valid geometry");
            (
                p["name"].as_str().unwrap().to_owned(),
                p["seq"].as_i64().unwrap() as i32,
                ewkb,
            )
        })
        .collect();
    // "type" first, as clients write it (serde_json would sort it last): a
    // body that does not name its type before its features is read whole.
    let mut geojson = br#"{"type":"FeatureCollection","features":"#.to_vec();
    serde_json::to_writer(&mut geojson, &features).unwrap();
    geojson.push(b'}');
    let file = dir.join(format!("{table}-{}.geojson", features.len()));
    std::fs::write(&file, &geojson).expect("write dataset file");
    Dataset {
        name,
        table,
        geojson,
        file,
        rows,
    }
}

/// One measured (or extrapolated) cell of the matrix.
#[derive(Clone)]
struct Cell {
    dataset: String,
    n: usize,
    rtt_ms: u64,
    strategy: Strategy,
    wall: Duration,
    round_trips: u64,
    extrapolated: bool,
}

struct Bench {
    pg: String,
    db_url: String,
    admin: Client,
    bin: PathBuf,
    runs: usize,
    ogr2ogr: bool,
    cells: Vec<Cell>,
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// The featurepipe release binary, running on its own port.
struct Service {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl Service {
    async fn start(bin: &Path, database_url: &str, env: &[(&str, &str)]) -> Service {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("serve")
            .env("DATABASE_URL", database_url)
            .env("FEATUREPIPE_AUTH", "off")
            .env("FEATUREPIPE_LISTEN", addr.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .expect("start featurepipe (build it with cargo build --release)");
        for _ in 0..200 {
            if let Ok((200, _)) = http(addr, "GET", "/readyz", &[]).await {
                return Service { child, addr };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("featurepipe did not become ready on {addr}");
    }

    /// Peak resident memory of the service process (VmHWM), in bytes.
    fn peak_rss(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

/// A minimal HTTP/1.1 exchange of GeoJSON (one request per connection).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    http_as(addr, method, path, "application/geo+json", body).await
}

/// A minimal HTTP/1.1 exchange with a body of `content_type`.
async fn http_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut response = Vec::new();
    s.read_to_end(&mut response).await?;
    let status = std::str::from_utf8(&response[..response.len().min(12)])
        .ok()
        .and_then(|l| l.get(9..12))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body_at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(response.len(), |p| p + 4);
    Ok((status, response[body_at..].to_vec()))
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

impl Bench {
    /// A proxy adding 50 ms of round trip, and the database's URL through it.
    async fn far(&self) -> (Proxy, String) {
        let proxy = Proxy::start(self.pg.parse().unwrap(), Duration::from_millis(25))
            .await
            .unwrap();
        let via = self
            .db_url
            .replace(&self.pg, &proxy.local_addr().to_string());
        (proxy, via)
    }

    /// Load `data` with `ogr2ogr` into the database on `port` (127.0.0.1).
    async fn ogr2ogr(&self, port: u16, data: &Dataset) {
        let db = self.db_url.rsplit('/').next().unwrap();
        // PG_USE_COPY: ogr2ogr's fast mode (without it, -append inserts row by row).
        let status = tokio::process::Command::new("ogr2ogr")
            .args(["--config", "PG_USE_COPY", "YES"])
            .args([
                "-f",
                "PostgreSQL",
                &format!("PG:host=127.0.0.1 port={port} dbname={db} user=postgres"),
            ])
            .arg(&data.file)
            .args(["-nln", data.table, "-append"])
            .stdout(Stdio::null())
            .status()
            .await
            .expect("run ogr2ogr");
        assert!(status.success(), "ogr2ogr failed");
    }

    /// Empty `table` and checkpoint, so that every write of a round starts alike.
    async fn empty(&self, table: &str) {
        self.truncate(table).await;
        self.admin
            .batch_execute("CHECKPOINT")
            .await
            .expect("checkpoint");
    }

    async fn truncate(&self, table: &str) {
        self.admin
            .batch_execute(&format!("TRUNCATE {table} RESTART IDENTITY"))
            .await
            .expect("truncate");
    }

    /// Write `data` once with `strategy`; returns wall time and round trips,
    /// both from the moment the client is connected and its statement prepared.
    async fn write_once(
        &self,
        strategy: Strategy,
        data: &Dataset,
        proxy: &Proxy,
        services: &[Service; 3],
    ) -> (Duration, u64) {
        let via = self
            .db_url
            .replace(&self.pg, &proxy.local_addr().to_string());
        let before = std::cell::Cell::new(proxy.round_trips());
        let start = || {
            before.set(proxy.round_trips());
            Instant::now()
        };
        let wall = match strategy {
            Strategy::OneAtATime => {
                let client = connect(&via).await;
                let insert = client
                    .prepare(&format!(
                        "INSERT INTO {} (name, seq, geom) VALUES ($1, $2, ST_GeomFromEWKB($3)) RETURNING id",
                        data.table
                    ))
                    .await
                    .unwrap();
                let started = start();
                client.batch_execute("BEGIN").await.unwrap();
                for (name, seq, ewkb) in &data.rows {
                    client.query_one(&insert, &[name, seq, ewkb]).await.unwrap();
                }
                client.batch_execute("COMMIT").await.unwrap();
                started.elapsed()
            }
            Strategy::HttpInsert | Strategy::HttpCopy | Strategy::HttpCopyWhole => {
                let service = match strategy {
                    Strategy::HttpInsert => &services[0],
                    Strategy::HttpCopy => &services[1],
                    _ => &services[2],
                };
                let path = format!("/collections/{}/items", data.table);
                let started = start();
                let (status, body) = http(service.addr, "POST", &path, &data.geojson)
                    .await
                    .unwrap();
                let wall = started.elapsed();
                let report: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
                assert_eq!(report["ids"].as_array().map(Vec::len), Some(data.len()));
                wall
            }
            Strategy::RawCopy => {
                let client = connect(&via).await;
                let sql = format!(
                    "COPY {} (name, seq, geom) FROM STDIN (FORMAT binary)",
                    data.table
                );
                let copy = client.prepare(&sql).await.unwrap();
                let started = start();
                let sink = client.copy_in(&copy).await.unwrap();
                let mut writer = Box::pin(BinaryCopyInWriter::new(
                    sink,
                    &[Type::TEXT, Type::INT4, Type::BYTEA],
                ));
                for (name, seq, ewkb) in &data.rows {
                    let row: [&(dyn ToSql + Sync); 3] = [name, seq, ewkb];
                    writer.as_mut().write(&row).await.unwrap();
                }
                writer.as_mut().finish().await.unwrap();
                started.elapsed()
            }
            Strategy::Ogr2ogr => {
                // A whole ogr2ogr run, connection and metadata queries included: that is its cost.
                let started = start();
                self.ogr2ogr(proxy.local_addr().port(), data).await;
                started.elapsed()
            }
        };
        (wall, proxy.round_trips() - before.get())
    }

    async fn cell(
        &mut self,
        strategy: Strategy,
        data: &Dataset,
        rtt_ms: u64,
        proxy: &Proxy,
        services: &[Service; 3],
    ) {
        // One INSERT at a time costs a round trip per feature: it is extrapolated from the
        // largest smaller size measured at this RTT when the runs would blow the time budget.
        let per_feature = strategy == Strategy::OneAtATime;
        let smaller = self
            .cells
            .iter()
            .filter(|c| per_feature && c.strategy == strategy && c.rtt_ms == rtt_ms)
            .filter(|c| {
                !c.extrapolated
                    && c.n < data.len()
                    && data.table == "points"
                    && c.dataset.ends_with("points")
            })
            .max_by_key(|c| c.n)
            .cloned();
        if let Some(base) =
            smaller.filter(|b| b.wall.mul_f64(data.len() as f64 / b.n as f64) > RUN_BUDGET)
        {
            let scale = data.len() as f64 / base.n as f64;
            self.cells.push(Cell {
                dataset: data.name.clone(),
                n: data.len(),
                rtt_ms,
                strategy,
                wall: base.wall.mul_f64(scale),
                round_trips: (base.round_trips as f64 * scale).round() as u64,
                extrapolated: true,
            });
            return;
        }
        let mut walls = Vec::new();
        let mut trips = Vec::new();
        for _ in 0..self.runs {
            self.truncate(data.table).await;
            let (wall, round_trips) = self.write_once(strategy, data, proxy, services).await;
            walls.push(wall);
            trips.push(round_trips);
        }
        trips.sort();
        let cell = Cell {
            dataset: data.name.clone(),
            n: data.len(),
            rtt_ms,
            strategy,
            wall: median(walls),
            round_trips: trips[trips.len() / 2],
            extrapolated: false,
        };
        eprintln!(
            "{:>28} | {:>4} ms | {:<32} | {:>9.3} s | {:>6} round trips",
            cell.dataset,
            rtt_ms,
            strategy.label(),
            cell.wall.as_secs_f64(),
            cell.round_trips
        );
        self.cells.push(cell);
    }
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` runs bench binaries without --bench: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    // Only the target of streaming: 100,000 points at RTT 0 against raw COPY.
    let copy_only = std::env::args().any(|a| a == "--copy-ratio");
    // Only `featurepipe push` against the server's COPY and ogr2ogr.
    let push_only = std::env::args().any(|a| a == "--push");
    let copy_only = copy_only || push_only;
    let out =
        PathBuf::from(std::env::var("FEATUREPIPE_BENCH_OUT").unwrap_or_else(|_| "bench".into()));
    let pg_base =
        std::env::var("FEATUREPIPE_BENCH_PG").expect("run by scripts/bench.sh (make bench)");
    let bin = PathBuf::from(
        std::env::var("FEATUREPIPE_BIN").unwrap_or_else(|_| "target/release/featurepipe".into()),
    );
    let pg = pg_base.rsplit('@').next().unwrap().to_owned();
    let db_url = format!("{pg_base}/bench");
    let admin = connect(&db_url).await;
    let ogr2ogr = std::process::Command::new("ogr2ogr")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let sizes: &[usize] = if copy_only {
        &[]
    } else if quick {
        &[10, 1_000, 10_000]
    } else {
        &[10, 100, 1_000, 10_000, 100_000]
    };
    let rtts: &[u64] = match (copy_only, quick) {
        (true, _) => &[],
        (false, true) => &[0, 50],
        (false, false) => &[0, 10, 50],
    };
    let dir = std::env::temp_dir().join(format!("featurepipe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut datasets: Vec<Dataset> = sizes.iter().map(|&n| points(n, &dir)).collect();
    if !quick {
        datasets.push(polygons(&dir));
    }
    let mut bench = Bench {
        pg: pg.clone(),
        db_url: db_url.clone(),
        admin,
        bin,
        runs: 3,
        ogr2ogr,
        cells: Vec::new(),
    };
    let started = Instant::now();
    for &rtt in rtts {
        let proxy = Proxy::start(pg.parse().unwrap(), Duration::from_millis(rtt) / 2)
            .await
            .unwrap();
        let via = db_url.replace(&pg, &proxy.local_addr().to_string());
        let services = [
            Service::start(
                &bench.bin,
                &via,
                &[("FEATUREPIPE_WRITE_STRATEGY", "insert")],
            )
            .await,
            Service::start(&bench.bin, &via, &[("FEATUREPIPE_WRITE_STRATEGY", "copy")]).await,
            // The same, without streaming: every body read whole first.
            Service::start(
                &bench.bin,
                &via,
                &[
                    ("FEATUREPIPE_WRITE_STRATEGY", "copy"),
                    ("FEATUREPIPE_STREAM_AFTER", "1GiB"),
                ],
            )
            .await,
        ];
        for data in &datasets {
            for strategy in Strategy::ALL {
                if strategy == Strategy::Ogr2ogr && !bench.ogr2ogr {
                    continue;
                }
                // Bodies up to 8 MiB are read whole anyway: only larger ones differ.
                if strategy == Strategy::HttpCopyWhole && data.geojson.len() <= 8 << 20 {
                    continue;
                }
                bench.cell(strategy, data, rtt, &proxy, &services).await;
            }
        }
    }
    if push_only {
        let runs = std::env::var("RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(5);
        let markdown = push_vs(&bench, &dir, runs).await;
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("push.md"), &markdown).unwrap();
        println!("{markdown}");
        return;
    }
    if copy_only {
        copy_ratio(&bench, &dir, 15).await;
        return;
    }
    let mut extra = edit_session(&bench).await;
    extra.push_str(&auto_far(&bench, &dir).await);
    if !quick {
        extra.push_str(&copy_ratio(&bench, &dir, 9).await);
        extra.push_str(&memory(&bench).await);
    }

    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&out).unwrap();
    let name = if quick { "results-quick" } else { "results" };
    let markdown = report(&bench, rtts, started.elapsed(), &extra, name);
    std::fs::write(out.join(format!("{name}.md")), &markdown).unwrap();
    std::fs::write(out.join(format!("{name}.svg")), plot(&bench.cells, rtts)).unwrap();
    println!("{markdown}");
}

/// 1,000 points at +50 ms with the default strategy (`auto`, measured):
/// ten requests to learn the round trip, then the median of five more.
async fn auto_far(bench: &Bench, dir: &Path) -> String {
    let (proxy, via) = bench.far().await;
    let service = Service::start(&bench.bin, &via, &[]).await;
    let data = points(1000, dir);
    let mut walls = Vec::new();
    let mut trips = Vec::new();
    let mut strategy = Value::Null;
    for run in 0..15 {
        bench.truncate("points").await;
        let before = proxy.round_trips();
        let started = Instant::now();
        let (status, body) = http(
            service.addr,
            "POST",
            "/collections/points/items",
            &data.geojson,
        )
        .await
        .unwrap();
        let wall = started.elapsed();
        assert_eq!(status, 201);
        if run >= 10 {
            walls.push(wall);
            trips.push(proxy.round_trips() - before);
            strategy = serde_json::from_slice::<Value>(&body).unwrap()["strategy"].clone();
        }
    }
    trips.sort();
    format!(
        "- **1,000 points at +50 ms, `auto` (measured)**: after ten requests, median of five: \
         {:.3} s, {} database round trip(s), strategy {strategy}.\n",
        median(walls).as_secs_f64(),
        trips[trips.len() / 2]
    )
}

/// 100,000 points loaded from a file, `runs` rounds of every way in turn
/// (medians): PostgreSQL's own `COPY … FROM 'file'`, `ogr2ogr` (COPY mode)
/// and `featurepipe push` with its defaults and with the old ones, at RTT 0
/// and with 50 ms between the loader and what it talks to (the database
/// for ogr2ogr, the service for push, which sits next to its database).
async fn push_vs(bench: &Bench, dir: &Path, runs: usize) -> String {
    let data = points(100_000, dir);
    // The server reads the file itself: as text, the geometry as hex EWKB.
    let csv = dir.join("points.csv");
    let mut text = String::new();
    for (name, seq, ewkb) in &data.rows {
        let hex: String = ewkb.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(text, "{name},{seq},{hex}").unwrap();
    }
    std::fs::write(&csv, text).unwrap();
    let pg_port: u16 = bench.pg.rsplit(':').next().unwrap().parse().unwrap();
    let far_db = Proxy::start(bench.pg.parse().unwrap(), Duration::from_millis(25))
        .await
        .unwrap();
    let service = Service::start(&bench.bin, &bench.db_url, &[]).await;
    let far_service = Proxy::start(service.addr, Duration::from_millis(25))
        .await
        .unwrap();
    let old_defaults = [
        "--batch",
        "1000",
        "--jobs",
        "1",
        "--gzip",
        "on",
        "--batch-bytes",
        "16MiB",
    ];
    let ways: [(&str, &str); 7] = [
        ("PostgreSQL's own `COPY … FROM 'file'` (the limit)", "0"),
        (
            "`ogr2ogr` (GeoJSON, `PG_USE_COPY=YES`, straight to the database)",
            "0",
        ),
        ("`featurepipe push`, defaults", "0"),
        (
            "`featurepipe push`, the old defaults (`--batch 1000 --jobs 1 --gzip on`)",
            "0",
        ),
        ("`ogr2ogr`, the database 50 ms away", "50"),
        ("`featurepipe push`, defaults, the service 50 ms away", "50"),
        (
            "`featurepipe push`, the old defaults, the service 50 ms away",
            "50",
        ),
    ];
    let mut walls: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    // One round to warm the service, the cache and the table's pages.
    for round in 0..=runs {
        for (k, (label, _)) in ways.iter().enumerate() {
            bench.empty(data.table).await;
            let push = |url: String, extra: &[&str]| {
                let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
                let run = format!("bench-{round}-{k}");
                let file = data.file.clone();
                let bin = bench.bin.clone();
                async move {
                    let out = tokio::process::Command::new(bin)
                        .arg("push")
                        .arg(file)
                        .args(["--collection", "points", "--url", &url, "--run", &run])
                        .args(extra)
                        .output()
                        .await
                        .expect("run featurepipe push");
                    assert!(
                        out.status.success(),
                        "push failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            };
            let near = format!("http://{}", service.addr);
            let far = format!("http://{}", far_service.local_addr());
            let started = Instant::now();
            match k {
                0 => {
                    let sql = format!(
                        "COPY {} (name, seq, geom) FROM '{}' (FORMAT csv)",
                        data.table,
                        csv.display()
                    );
                    bench
                        .admin
                        .batch_execute(&sql)
                        .await
                        .expect("COPY FROM file");
                }
                1 => bench.ogr2ogr(pg_port, &data).await,
                2 => push(near, &[]).await,
                3 => push(near, &old_defaults).await,
                4 => bench.ogr2ogr(far_db.local_addr().port(), &data).await,
                5 => push(far, &[]).await,
                _ => push(far, &old_defaults).await,
            }
            let wall = started.elapsed();
            let count = bench
                .admin
                .query_one(&format!("SELECT count(*) FROM {}", data.table), &[])
                .await
                .unwrap()
                .get::<_, i64>(0);
            assert_eq!(count, data.len() as i64, "{label}");
            if round > 0 {
                eprintln!(
                    "round {round:>2} | {label:<70} | {:>7.3} s",
                    wall.as_secs_f64()
                );
                walls[k].push(wall);
            }
        }
    }
    let medians: Vec<Duration> = walls.into_iter().map(median).collect();
    let mut md = format!(
        "| 100,000 points, medians of {runs} rounds | RTT | time | against the server's COPY |\n|---|--:|--:|--:|\n"
    );
    for ((label, rtt), wall) in ways.iter().zip(&medians) {
        let ratio = wall.as_secs_f64() / medians[0].as_secs_f64();
        writeln!(
            md,
            "| {label} | {rtt} ms | {:.2} s | {ratio:.2}× |",
            wall.as_secs_f64()
        )
        .unwrap();
    }
    writeln!(
        md,
        "\nAt +50 ms, push's defaults are {:.1}× as fast as ogr2ogr.",
        medians[4].as_secs_f64() / medians[5].as_secs_f64()
    )
    .unwrap();
    md
}

/// 100,000 points at RTT 0, streamed and read whole, against raw binary
/// COPY: `runs` rounds of the three in turn (so that checkpoints and
/// neighbours weigh on all alike), with the ratio of the medians and the
/// spread of the ratios within rounds.
async fn copy_ratio(bench: &Bench, dir: &Path, runs: usize) -> String {
    let proxy = Proxy::start(bench.pg.parse().unwrap(), Duration::ZERO)
        .await
        .unwrap();
    let via = bench
        .db_url
        .replace(&bench.pg, &proxy.local_addr().to_string());
    let copy = [("FEATUREPIPE_WRITE_STRATEGY", "copy")];
    let whole = [copy[0], ("FEATUREPIPE_STREAM_AFTER", "1GiB")];
    let insert = [("FEATUREPIPE_WRITE_STRATEGY", "insert")];
    let services = [
        Service::start(&bench.bin, &via, &insert).await,
        Service::start(&bench.bin, &via, &copy).await,
        Service::start(&bench.bin, &via, &whole).await,
    ];
    let data = points(100_000, dir);
    let strategies = [
        Strategy::HttpCopy,
        Strategy::HttpCopyWhole,
        Strategy::RawCopy,
    ];
    let mut walls: [Vec<Duration>; 3] = Default::default();
    // One round to warm the services and the table's pages.
    for round in 0..=runs {
        for (k, &strategy) in strategies.iter().enumerate() {
            bench.empty(data.table).await;
            let (wall, _) = bench.write_once(strategy, &data, &proxy, &services).await;
            if round > 0 {
                eprintln!(
                    "{:>28} | round {round:>2} | {:<38} | {:>9.3} s",
                    data.name,
                    strategy.label(),
                    wall.as_secs_f64()
                );
                walls[k].push(wall);
            }
        }
    }
    let ratios = |k: usize| {
        let mut r: Vec<f64> = (0..runs)
            .map(|i| walls[2][i].as_secs_f64() / walls[k][i].as_secs_f64())
            .collect();
        r.sort_by(f64::total_cmp);
        (r[runs / 4], r[runs / 2], r[runs * 3 / 4])
    };
    let ((s25, s50, s75), (w25, w50, w75)) = (ratios(0), ratios(1));
    let [streamed, read_whole, raw] = walls.map(median);
    let share = |d: Duration| raw.as_secs_f64() / d.as_secs_f64() * 100.0;
    let md = format!(
        "- **100,000 points at RTT 0, share of raw binary COPY's speed** ({runs} rounds of the \
         three in turn, table emptied and checkpointed before each write): streamed \
         {:.3} s, **{:.0}%** of raw COPY's {:.3} s (within rounds {:.0}%, p25–p75 {:.0}–{:.0}%); \
         read whole {:.3} s, {:.0}% (within rounds {:.0}%, {:.0}–{:.0}%).\n",
        streamed.as_secs_f64(),
        share(streamed),
        raw.as_secs_f64(),
        s50 * 100.0,
        s25 * 100.0,
        s75 * 100.0,
        read_whole.as_secs_f64(),
        share(read_whole),
        w50 * 100.0,
        w25 * 100.0,
        w75 * 100.0,
    );
    eprint!("{md}");
    md
}

/// An edit session of 1000 mixed operations at +50 ms: featurepipe's
/// `POST /transactions` against one statement at a time in a transaction
/// (extrapolated from the first 40 operations: the full run takes ~50 s).
async fn edit_session(bench: &Bench) -> String {
    const N: usize = 1000;
    const MEASURED: usize = 40;
    let (proxy, via) = bench.far().await;
    let reseed = || async {
        bench.truncate("points").await;
        bench
            .admin
            .batch_execute(&format!(
                "INSERT INTO points (name, seq, geom) SELECT 'p' || i, i, \
                 ST_SetSRID(ST_MakePoint(i * 0.001, 45), 4326) FROM generate_series(1, {N}) AS i"
            ))
            .await
            .expect("seed");
    };
    let point = |i: usize| {
        json!({"type": "Feature", "properties": {"name": format!("e{i}"), "seq": i},
                                  "geometry": {"type": "Point", "coordinates": [i as f64 * 0.001, 46.0]}})
    };
    let operations: Vec<Value> = (0..N)
        .map(|i| match i % 4 {
            0 => json!({"op": "insert", "collection": "points", "feature": point(i)}),
            1 => json!({"op": "replace", "collection": "points", "id": i + 1, "feature": point(i)}),
            2 => json!({"op": "update", "collection": "points", "id": i + 1, "patch": {"properties": {"seq": -1}}}),
            _ => json!({"op": "delete", "collection": "points", "id": i + 1}),
        })
        .collect();
    let body = serde_json::to_vec(&json!({ "operations": operations })).unwrap();
    let service = Service::start(&bench.bin, &via, &[]).await;
    let mut walls = Vec::new();
    let mut trips = Vec::new();
    for _ in 0..bench.runs {
        reseed().await;
        let before = proxy.round_trips();
        let started = Instant::now();
        let (status, answer) = http_as(
            service.addr,
            "POST",
            "/transactions",
            "application/json",
            &body,
        )
        .await
        .unwrap();
        walls.push(started.elapsed());
        trips.push(proxy.round_trips() - before);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    trips.sort();
    let ours = median(walls);
    let our_trips = trips[trips.len() / 2];

    // What a desktop client does: one statement at a time, waiting for each.
    reseed().await;
    let client = connect(&via).await;
    let insert = client
        .prepare("INSERT INTO points (name, seq, geom) VALUES ($1, $2, ST_GeomFromEWKB($3)) RETURNING id")
        .await
        .unwrap();
    let replace = client
        .prepare("UPDATE points SET name = $1, seq = $2, geom = ST_GeomFromEWKB($3) WHERE id = $4")
        .await
        .unwrap();
    let update = client
        .prepare("UPDATE points SET seq = -1 WHERE id = $1")
        .await
        .unwrap();
    let delete = client
        .prepare("DELETE FROM points WHERE id = $1")
        .await
        .unwrap();
    let any = GeometryColumn::from_typmod(-1, false);
    let before = proxy.round_trips();
    let started = Instant::now();
    client.batch_execute("BEGIN").await.unwrap();
    for i in 0..MEASURED {
        let id = i as i32 + 1;
        let (name, seq) = (format!("e{i}"), i as i32);
        let ewkb = encode_ewkb(&point(i)["geometry"].to_string(), &any).unwrap();
        match i % 4 {
            0 => drop(
                client
                    .query_one(&insert, &[&name, &seq, &ewkb])
                    .await
                    .unwrap(),
            ),
            1 => drop(
                client
                    .execute(&replace, &[&name, &seq, &ewkb, &id])
                    .await
                    .unwrap(),
            ),
            2 => drop(client.execute(&update, &[&id]).await.unwrap()),
            _ => drop(client.execute(&delete, &[&id]).await.unwrap()),
        }
    }
    let per_op = started.elapsed() / MEASURED as u32;
    let per_op_trips = (proxy.round_trips() - before) as f64 / MEASURED as f64;
    client.batch_execute("COMMIT").await.unwrap();
    let theirs = per_op * N as u32;
    let their_trips = (per_op_trips * N as f64).round() as u64 + 2;
    let mut md = String::new();
    writeln!(
        md,
        "- **Edit session**: {N} mixed operations (insert, replace, update, delete, 250 each) on \
         `points`, service↔database +50 ms: featurepipe `POST /transactions` (atomic) {:.3} s, \
         {our_trips} database round trips (median of {}); one statement at a time in a transaction \
         ≈{:.1} s, ≈{their_trips} round trips (extrapolated from the first {MEASURED} operations) — \
         {:.0}× faster.",
        ours.as_secs_f64(),
        bench.runs,
        theirs.as_secs_f64(),
        theirs.as_secs_f64() / ours.as_secs_f64()
    )
    .unwrap();
    eprint!("{md}");
    md
}

/// Memory for one 64 MiB body, streamed and read whole (in atomic and in
/// batch mode), and for 512 MiB streamed.
async fn memory(bench: &Bench) -> String {
    let mut md = String::new();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    // 64 MiB of points (about 532,000 features), streamed and read whole,
    // in atomic and in batch mode (an edit-session report, one result per
    // feature); then 512 MiB (about 4.2 million), streamed. Each on a
    // service of its own, so that its peak RSS is the request's.
    let cases: [(usize, &str, &str, &str); 5] = [
        (532_000, "streamed", "8MiB", ""),
        (532_000, "read whole", "1GiB", ""),
        (532_000, "streamed, mode=batch", "8MiB", "?mode=batch"),
        (532_000, "read whole, mode=batch", "1GiB", "?mode=batch"),
        (4_260_000, "streamed", "8MiB", ""),
    ];
    for (n, how, stream_after, mode) in cases {
        let body = points_body(n);
        bench.truncate("points").await;
        let service = Service::start(
            &bench.bin,
            &bench.db_url,
            &[
                ("FEATUREPIPE_MAX_BODY", "1GiB"),
                ("FEATUREPIPE_MAX_FEATURES", "10000000"),
                ("FEATUREPIPE_STREAM_AFTER", stream_after),
            ],
        )
        .await;
        let idle = service.peak_rss();
        let started = Instant::now();
        let path = format!("/collections/points/items{mode}");
        let (status, answer) = http(service.addr, "POST", &path, &body).await.unwrap();
        let wall = started.elapsed();
        let (created, listed) = match mode {
            "" => (201, "ids"),
            _ => (200, "results"),
        };
        assert_eq!(
            status,
            created,
            "{}",
            String::from_utf8_lossy(&answer[..answer.len().min(2000)])
        );
        let report: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(report[listed].as_array().map(Vec::len), Some(n));
        let peak = service.peak_rss();
        writeln!(
            md,
            "- **Memory, {:.0} MiB body, {how}**: one FeatureCollection of {n} points, {:.1} MiB, \
             FEATUREPIPE_MAX_BODY=1GiB, otherwise default settings (auto → COPY in atomic mode): peak RSS {:.1} MiB \
             ({:.2}× the body; {:.1} MiB before the request); every id returned; written in {:.2} s, \
             {:.0} features/s.",
            mib(body.len() as u64).round(),
            mib(body.len() as u64),
            mib(peak),
            peak as f64 / body.len() as f64,
            mib(idle),
            wall.as_secs_f64(),
            n as f64 / wall.as_secs_f64()
        )
        .unwrap();
    }
    md
}

fn report(bench: &Bench, rtts: &[u64], took: Duration, extra: &str, name: &str) -> String {
    let mut md = String::new();
    writeln!(md, "# featurepipe benchmark\n").unwrap();
    writeln!(
        md,
        "Generated by `make bench{}` ({} s). Each cell: median of {} runs, wall time of the whole write \
         (for featurepipe: HTTP request in, ids out), database round trips counted by the latency proxy. \
         ≈ marks a cell extrapolated from the largest smaller measured size (it would take minutes). \
         \"vs 1\" is the speed-up over one INSERT at a time; \"of 4\" is the share of raw COPY's speed. \
         ogr2ogr {}.\n",
        if name.ends_with("quick") { "-quick" } else { "" },
        took.as_secs(),
        bench.runs,
        if bench.ogr2ogr { "included" } else { "not installed: column 5 skipped" }
    )
    .unwrap();
    writeln!(md, "![features per second](./{name}.svg)\n").unwrap();
    let mut datasets: Vec<&str> = Vec::new();
    for c in &bench.cells {
        if !datasets.contains(&c.dataset.as_str()) {
            datasets.push(&c.dataset);
        }
    }
    for &rtt in rtts {
        writeln!(md, "## RTT {rtt} ms\n").unwrap();
        writeln!(
            md,
            "| data | strategy | wall | features/s | round trips | vs 1 | of 4 |"
        )
        .unwrap();
        writeln!(md, "|---|---|--:|--:|--:|--:|--:|").unwrap();
        for dataset in &datasets {
            let row = |s: Strategy| {
                bench
                    .cells
                    .iter()
                    .find(|c| c.dataset == *dataset && c.rtt_ms == rtt && c.strategy == s)
            };
            let (one, raw) = (row(Strategy::OneAtATime), row(Strategy::RawCopy));
            for s in Strategy::ALL {
                let Some(c) = row(s) else { continue };
                let mark = if c.extrapolated { "≈ " } else { "" };
                let ratio = |base: Option<&Cell>| {
                    base.map_or("".into(), |b| {
                        format!("{:.1}×", b.wall.as_secs_f64() / c.wall.as_secs_f64())
                    })
                };
                let share = raw.map_or("".into(), |r| {
                    format!(
                        "{:.0}%",
                        100.0 * r.wall.as_secs_f64() / c.wall.as_secs_f64()
                    )
                });
                writeln!(
                    md,
                    "| {} | {} | {mark}{:.3} s | {mark}{:.0} | {mark}{} | {} | {} |",
                    dataset,
                    s.label(),
                    c.wall.as_secs_f64(),
                    c.n as f64 / c.wall.as_secs_f64(),
                    c.round_trips,
                    ratio(one),
                    share
                )
                .unwrap();
            }
        }
        writeln!(md).unwrap();
    }
    writeln!(md, "## Edit session and load\n\n{extra}").unwrap();
    md
}

/// Features/s against N (log-log), one panel per RTT, one line per strategy.
fn plot(cells: &[Cell], rtts: &[u64]) -> String {
    let (pw, ph, margin) = (360.0, 300.0, 55.0);
    let width = margin + rtts.len() as f64 * (pw + margin);
    let height = ph + 2.0 * margin + 60.0;
    let points: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.dataset.ends_with("points"))
        .collect();
    let (nmin, nmax) = (
        10f64.log10(),
        100_000f64.log10().max(
            points
                .iter()
                .map(|c| (c.n as f64).log10())
                .fold(0.0, f64::max),
        ),
    );
    let rates: Vec<f64> = points
        .iter()
        .map(|c| (c.n as f64 / c.wall.as_secs_f64()).log10())
        .collect();
    let (rmin, rmax) = (
        rates.iter().cloned().fold(f64::MAX, f64::min).floor(),
        rates.iter().cloned().fold(f64::MIN, f64::max).ceil(),
    );
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='11'>\
         <rect width='100%' height='100%' fill='white'/>"
    );
    for (p, &rtt) in rtts.iter().enumerate() {
        let x0 = margin + p as f64 * (pw + margin);
        let y0 = margin;
        let sx = |n: f64| x0 + (n.log10() - nmin) / (nmax - nmin) * pw;
        let sy = |r: f64| y0 + ph - (r.log10() - rmin) / (rmax - rmin).max(1.0) * ph;
        write!(
            svg,
            "<rect x='{x0}' y='{y0}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>"
        )
        .unwrap();
        write!(
            svg,
            "<text x='{}' y='{}' text-anchor='middle' font-size='13'>RTT {rtt} ms</text>",
            x0 + pw / 2.0,
            y0 - 10.0
        )
        .unwrap();
        let mut decade = rmin;
        while decade <= rmax {
            let y = sy(10f64.powf(decade));
            write!(svg, "<line x1='{x0}' x2='{}' y1='{y}' y2='{y}' stroke='#eee'/><text x='{}' y='{}' text-anchor='end'>1e{decade}</text>", x0 + pw, x0 - 4.0, y + 4.0).unwrap();
            decade += 1.0;
        }
        for n in [10.0, 100.0, 1_000.0, 10_000.0, 100_000.0] {
            write!(
                svg,
                "<text x='{}' y='{}' text-anchor='middle'>{n}</text>",
                sx(n),
                y0 + ph + 14.0
            )
            .unwrap();
        }
        write!(
            svg,
            "<text x='{}' y='{}' text-anchor='middle'>points per request</text>",
            x0 + pw / 2.0,
            y0 + ph + 30.0
        )
        .unwrap();
        for s in Strategy::ALL {
            let line: Vec<String> = points
                .iter()
                .filter(|c| c.rtt_ms == rtt && c.strategy == s)
                .map(|c| {
                    format!(
                        "{:.1},{:.1}",
                        sx(c.n as f64),
                        sy(c.n as f64 / c.wall.as_secs_f64())
                    )
                })
                .collect();
            if !line.is_empty() {
                write!(
                    svg,
                    "<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>",
                    s.colour(),
                    line.join(" ")
                )
                .unwrap();
            }
        }
    }
    write!(
        svg,
        "<text x='12' y='{}' transform='rotate(-90 12 {})'>features per second</text>",
        margin + ph / 2.0,
        margin + ph / 2.0
    )
    .unwrap();
    for (i, s) in Strategy::ALL.iter().enumerate() {
        let (x, y) = (
            margin + (i % 3) as f64 * 230.0,
            height - 40.0 + (i / 3) as f64 * 16.0,
        );
        write!(
            svg,
            "<rect x='{x}' y='{}' width='14' height='4' fill='{}'/><text x='{}' y='{}'>{}</text>",
            y - 4.0,
            s.colour(),
            x + 18.0,
            y,
            s.label()
        )
        .unwrap();
    }
    svg.push_str("</svg>\n");
    svg
}
