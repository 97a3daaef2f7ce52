//! `make bench-concurrency` (also part of `make bench`): 32 clients posting
//! 100-point FeatureCollections at once, against one request carrying the same
//! features, into the same empty table of the same running service.
//!
//! Both sides are measured the same way, in pairs, interleaved (A B, B A, …):
//! a slow minute of a shared machine then falls on both, not on one. Before
//! each side the table is emptied and a CHECKPOINT taken, so both write into
//! the same state and neither pays for the other's dirty pages. The first
//! pair warms the service (pool, statement caches, the measured costs behind
//! `auto`) and is not counted. The clients are this process: hyper HTTP/1.1
//! connections kept alive, each sending a body built once; the CPU time of
//! this process, of the service and of PostgreSQL is read from /proc for each
//! side, to show what the load generator takes from the machine it measures.
//! Run by `scripts/concurrency-bench.sh`, which starts the cluster and the service.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_postgres::{Client, NoTls};

/// A side counts as measured on a quiet machine when the rest of the
/// machine (other sessions' builds, say) used at most this share of its CPU
/// time: with more, the scheduler's fairness between threads favours the 32
/// clients' many busy threads over the one request's two, and flatters them.
const QUIET: f64 = 0.15;
/// Longest wait for a quiet machine before a pair (then it runs anyway, and
/// its sides are judged by what they measured).
const QUIET_WAIT: Duration = Duration::from_secs(3);

/// Kernel clock ticks per second of the times in /proc/<pid>/stat (USER_HZ,
/// fixed at 100 in Linux's interface whatever the kernel's own tick).
const TICKS_PER_SECOND: f64 = 100.0;

/// What a run measures, from the environment that scripts/concurrency-bench.sh sets.
struct Setup {
    /// The service's `host:port`.
    service: String,
    /// The service's process id, for its CPU time.
    service_pid: u32,
    /// The postmaster's process id: its children are the backends.
    postmaster_pid: u32,
    /// The block device of the cluster's data directory, as `major:minor`.
    disk: (u64, u64),
    /// Concurrent clients (32).
    clients: usize,
    /// Requests each client sends, one after another.
    requests: usize,
    /// Points in each small request (100).
    points: usize,
    /// Measured pairs after the warm-up.
    pairs: usize,
    /// The machine's cores.
    cores: usize,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

fn env_required(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run scripts/concurrency-bench.sh"))
}

/// `n` points as a FeatureCollection, numbered from `first` (the shape of
/// benches/matrix.rs's points: a name and a sequence number each).
fn points_body(first: usize, n: usize) -> Bytes {
    let mut body = String::with_capacity(n * 130);
    body.push_str("{\"type\":\"FeatureCollection\",\"features\":[");
    for i in first..first + n {
        let (x, y) = (
            -10.0 + (i % 1000) as f64 * 0.04,
            35.0 + (i / 1000) as f64 * 0.002,
        );
        if i > first {
            body.push(',');
        }
        write!(
            body,
            "{{\"type\":\"Feature\",\"geometry\":{{\"type\":\"Point\",\"coordinates\":[{x},{y}]}},\"properties\":{{\"name\":\"p{i}\",\"seq\":{i}}}}}"
        )
        .unwrap();
    }
    body.push_str("]}");
    Bytes::from(body)
}

/// What a client's answers were.
#[derive(Default)]
struct Answers {
    /// Answers other than 201 Created.
    failures: usize,
    /// Features written by COPY, as the answers' `strategy` says (the
    /// rest by INSERT): `auto` chooses per request.
    by_copy: usize,
}

/// One client: a kept-alive connection posting `bodies` one after another.
async fn client(service: String, bodies: Vec<Bytes>) -> Answers {
    let stream = TcpStream::connect(&service)
        .await
        .expect("connect to the service");
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let mut answers = Answers::default();
    for body in bodies {
        let request = Request::post(format!("http://{service}/collections/points/items"))
            .header("content-type", "application/geo+json")
            .body(Full::new(body))
            .unwrap();
        let answer = sender.send_request(request).await.expect("an answer");
        let created = answer.status() == 201;
        let body = answer
            .into_body()
            .collect()
            .await
            .expect("the answer's body");
        let body = body.to_bytes();
        if !created {
            answers.failures += 1;
            if answers.failures == 1 {
                eprintln!("not created: {}", String::from_utf8_lossy(&body));
            }
            continue;
        }
        let report: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if report["strategy"] == "copy" {
            answers.by_copy += report["ids"].as_array().map_or(0, Vec::len);
        }
    }
    answers
}

/// CPU seconds (user + system) a process has used, and its finished children's.
fn cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let tick = |i: usize| fields[i].parse::<f64>().unwrap_or(0.0) / TICKS_PER_SECOND;
    // After ')': state ppid … utime(11) stime(12) cutime(13) cstime(14).
    Some((tick(11) + tick(12), tick(13) + tick(14)))
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds of PostgreSQL: the postmaster, its live children (backends,
/// checkpointer, WAL writer…) and the children that have ended.
fn postgres_cpu(postmaster: u32) -> f64 {
    let (own, ended) = cpu_seconds(postmaster).unwrap_or((0.0, 0.0));
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_of(pid) == Some(postmaster))
        .filter_map(|pid| cpu_seconds(pid).map(|(own, _)| own))
        .sum();
    own + ended + children
}

/// CPU seconds the whole machine spent busy (all cores, every process).
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …: idle, waiting for the
    // disk and time taken by the hypervisor are not this machine's work.
    let busy: f64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    busy / TICKS_PER_SECOND
}

/// The device (major, minor) a path is on.
fn device_of(path: &str) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .dev();
    // Linux's encoding of dev_t (glibc's gnu_dev_major and gnu_dev_minor).
    (
        ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff),
        ((dev >> 12) & 0xffff_ff00) | (dev & 0xff),
    )
}

/// Milliseconds the device has spent with I/O in flight (io_ticks of
/// /proc/diskstats): the disk's busy time, whoever keeps it busy. Commits
/// wait for it (the cluster is durable), so a neighbour's heavy writing
/// shows here as a side that stalled.
fn disk_busy_ms((major, minor): (u64, u64)) -> f64 {
    let stats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    stats
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 12 && f[0] == major.to_string() && f[1] == minor.to_string())
        .and_then(|f| f[12].parse().ok())
        .unwrap_or(0.0)
}

/// CPU seconds used so far by: this process, the service, PostgreSQL, the machine.
#[derive(Clone, Copy, Default)]
struct Cpu {
    generator: f64,
    service: f64,
    postgres: f64,
    machine: f64,
}

impl Cpu {
    fn now(setup: &Setup) -> Cpu {
        let own = |pid| cpu_seconds(pid).map_or(0.0, |(own, _)| own);
        Cpu {
            generator: own(std::process::id()),
            service: own(setup.service_pid),
            postgres: postgres_cpu(setup.postmaster_pid),
            machine: machine_busy(),
        }
    }

    /// What the rest of the machine used: processes that are not part of the measurement.
    fn others(&self) -> f64 {
        (self.machine - self.service - self.postgres - self.generator).max(0.0)
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            generator: self.generator - before.generator,
            service: self.service - before.service,
            postgres: self.postgres - before.postgres,
            machine: self.machine - before.machine,
        }
    }
}

/// One measured side: its wall time, the CPU it took, the disk's busy time.
struct Side {
    wall: Duration,
    cpu: Cpu,
    disk_ms: f64,
    /// The share of the features written by COPY.
    by_copy: f64,
}

impl Side {
    /// The share of the machine's CPU time the neighbours took meanwhile.
    fn neighbours(&self, cores: usize) -> f64 {
        self.cpu.others() / (cores as f64 * self.wall.as_secs_f64())
    }

    /// The share of the time the disk was busy.
    fn disk_busy(&self) -> f64 {
        self.disk_ms / 1000.0 / self.wall.as_secs_f64()
    }
}

/// Wait until the machine has been quiet for a quarter of a second (its CPUs
/// busy at most [`QUIET`]), for at most [`QUIET_WAIT`].
async fn quiet_machine(cores: usize) {
    let window = Duration::from_millis(250);
    let started = Instant::now();
    while started.elapsed() < QUIET_WAIT {
        let before = machine_busy();
        tokio::time::sleep(window).await;
        if (machine_busy() - before) / (cores as f64 * window.as_secs_f64()) <= QUIET {
            return;
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// One request of every feature.
    Single,
    /// The same features, `clients` × `requests` requests of `points`.
    Concurrent,
}

struct Bench {
    setup: Setup,
    admin: Client,
    /// The one large body.
    single: Bytes,
    /// Each client's bodies.
    bodies: Vec<Vec<Bytes>>,
    total: usize,
}

impl Bench {
    /// An empty table, and nothing of the last side left to write out.
    async fn reset(&self) {
        self.admin
            .batch_execute("TRUNCATE points RESTART IDENTITY; CHECKPOINT")
            .await
            .expect("empty the table");
    }

    async fn measure(&self, load: Load) -> Side {
        self.reset().await;
        let before = Cpu::now(&self.setup);
        let disk_before = disk_busy_ms(self.setup.disk);
        let started = Instant::now();
        let answers = match load {
            Load::Single => client(self.setup.service.clone(), vec![self.single.clone()]).await,
            Load::Concurrent => {
                let tasks: Vec<_> = self
                    .bodies
                    .iter()
                    .map(|bodies| tokio::spawn(client(self.setup.service.clone(), bodies.clone())))
                    .collect();
                let mut answers = Answers::default();
                for task in tasks {
                    let client = task.await.expect("a client");
                    answers.failures += client.failures;
                    answers.by_copy += client.by_copy;
                }
                answers
            }
        };
        let wall = started.elapsed();
        let cpu = Cpu::now(&self.setup).since(before);
        let disk_ms = disk_busy_ms(self.setup.disk) - disk_before;
        assert_eq!(answers.failures, 0, "requests that were not created");
        let rows: i64 = self
            .admin
            .query_one("SELECT count(*) FROM points", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows as usize, self.total, "rows written");
        let by_copy = answers.by_copy as f64 / self.total as f64;
        Side {
            wall,
            cpu,
            disk_ms,
            by_copy,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = p * (sorted.len() - 1) as f64;
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}

/// "median (p25–p75, min–max)" of `xs`, each printed by `show`.
fn spread(xs: &[f64], show: impl Fn(f64) -> String) -> String {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "{} ({}–{}, min–max {}–{})",
        show(percentile(&sorted, 0.5)),
        show(percentile(&sorted, 0.25)),
        show(percentile(&sorted, 0.75)),
        show(sorted[0]),
        show(sorted[sorted.len() - 1])
    )
}

fn median(xs: &[f64]) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, 0.5)
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` runs bench binaries without --bench: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let setup = Setup {
        service: env_required("FEATUREPIPE_BENCH_SERVICE"),
        service_pid: env_required("FEATUREPIPE_BENCH_SERVICE_PID")
            .parse()
            .unwrap(),
        postmaster_pid: env_required("FEATUREPIPE_BENCH_POSTMASTER_PID")
            .parse()
            .unwrap(),
        disk: device_of(&env_required("FEATUREPIPE_BENCH_DATA_DIR")),
        clients: env_or("CLIENTS", 32),
        requests: env_or("REQUESTS", 32),
        points: env_or("POINTS", 100),
        pairs: env_or("PAIRS", 15),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let (admin, connection) = tokio_postgres::connect(&env_required("FEATUREPIPE_BENCH_PG"), NoTls)
        .await
        .expect("connect to the bench database");
    tokio::spawn(connection);
    let per_client = setup.requests * setup.points;
    let total = setup.clients * per_client;
    let bodies = (0..setup.clients)
        .map(|c| {
            (0..setup.requests)
                .map(|r| points_body(c * per_client + r * setup.points, setup.points))
                .collect()
        })
        .collect();
    let bench = Bench {
        single: points_body(0, total),
        bodies,
        total,
        admin,
        setup,
    };
    let s = &bench.setup;
    eprintln!(
        "{} features: 1 request of {:.1} MiB, and {} clients × {} requests × {} points; \
         a warm-up pair, then {} pairs",
        total,
        bench.single.len() as f64 / (1 << 20) as f64,
        s.clients,
        s.requests,
        s.points,
        s.pairs
    );
    let started = Instant::now();
    let mut measured: Vec<[Side; 2]> = Vec::new();
    for pair in 0..=s.pairs {
        quiet_machine(s.cores).await;
        // A B, then B A: neither side always runs first after the other.
        let (single, concurrent) = if pair % 2 == 0 {
            let single = bench.measure(Load::Single).await;
            (single, bench.measure(Load::Concurrent).await)
        } else {
            let concurrent = bench.measure(Load::Concurrent).await;
            (bench.measure(Load::Single).await, concurrent)
        };
        let rate = |side: &Side| total as f64 / side.wall.as_secs_f64();
        eprintln!(
            "{} one request {:>7.0}/s  clients {:>7.0}/s  ratio {:>4.0}%  \
             (neighbours {:.0}%, {:.0}%; disk busy {:.0}%, {:.0}%; by COPY {:.0}%, {:.0}%)",
            if pair == 0 { "warm-up" } else { "pair   " },
            rate(&single),
            rate(&concurrent),
            100.0 * rate(&concurrent) / rate(&single),
            100.0 * single.neighbours(s.cores),
            100.0 * concurrent.neighbours(s.cores),
            100.0 * single.disk_busy(),
            100.0 * concurrent.disk_busy(),
            100.0 * single.by_copy,
            100.0 * concurrent.by_copy
        );
        if pair > 0 {
            measured.push([single, concurrent]);
        }
    }
    let md = report(&bench, &measured, started.elapsed());
    print!("{md}");
    if let Ok(out) = std::env::var("FEATUREPIPE_BENCH_OUT") {
        std::fs::write(&out, &md).unwrap_or_else(|e| panic!("write {out}: {e}"));
    }
}

/// The figure in Markdown: medians and spreads over the quiet pairs and over
/// all, the CPU each part took, every pair.
fn report(bench: &Bench, measured: &[[Side; 2]], took: Duration) -> String {
    let (s, total) = (&bench.setup, bench.total as f64);
    let rate = |side: &Side| total / side.wall.as_secs_f64();
    let quiet = |pair: &[Side; 2]| pair.iter().all(|side| side.neighbours(s.cores) <= QUIET);
    let mut md = String::new();
    writeln!(
        md,
        "# featurepipe: concurrent clients against one request\n\n\
         Generated by `make bench-concurrency` (part of `make bench`; {} s of measuring). \
         {} points written as one request ({:.1} MiB, streamed) and as {} clients × {} requests \
         × {} points on kept-alive connections, into the same emptied table, by one release \
         build of the service with its default settings, next to the database (RTT 0). \
         {} interleaved pairs after a warm-up pair. A pair is quiet when, during each of its \
         sides, the machine's other processes used at most {:.0}% of its CPU time.\n\n\
         Features/s, median (p25–p75, min–max):\n\n\
         | pairs | one request | {} clients | ratio within each pair | ratio of the medians |\n\
         |---|--:|--:|--:|--:|",
        took.as_secs(),
        bench.total,
        bench.single.len() as f64 / (1 << 20) as f64,
        s.clients,
        s.requests,
        s.points,
        s.pairs,
        100.0 * QUIET,
        s.clients
    )
    .unwrap();
    let quiet_pairs: Vec<&[Side; 2]> = measured.iter().filter(|p| quiet(p)).collect();
    let all_pairs: Vec<&[Side; 2]> = measured.iter().collect();
    for (name, pairs) in [
        (
            format!("quiet: {} of {}", quiet_pairs.len(), measured.len()),
            &quiet_pairs,
        ),
        (format!("all {}", measured.len()), &all_pairs),
    ] {
        if pairs.is_empty() {
            writeln!(md, "| {name} | | | | |").unwrap();
            continue;
        }
        let single: Vec<f64> = pairs.iter().map(|p| rate(&p[0])).collect();
        let concurrent: Vec<f64> = pairs.iter().map(|p| rate(&p[1])).collect();
        let ratios: Vec<f64> = pairs
            .iter()
            .map(|p| 100.0 * rate(&p[1]) / rate(&p[0]))
            .collect();
        writeln!(
            md,
            "| {name} | {} | {} | {} | {:.0}% |",
            spread(&single, |v| format!("{v:.0}")),
            spread(&concurrent, |v| format!("{v:.0}")),
            spread(&ratios, |v| format!("{v:.0}%")),
            100.0 * median(&concurrent) / median(&single)
        )
        .unwrap();
    }
    writeln!(
        md,
        "\nCPU seconds per side, medians of all pairs ({} cores; neighbours: every other \
         process of the machine, and the kernel's threads), and the share of the time the \
         cluster's disk was busy (by anyone):\n\n\
         | side | wall s | service | PostgreSQL | load generator | neighbours | disk busy |\n\
         |---|--:|--:|--:|--:|--:|--:|",
        s.cores
    )
    .unwrap();
    for (name, side) in [("one request", 0), ("clients", 1)] {
        let med = |part: fn(&Side) -> f64| {
            median(&measured.iter().map(|p| part(&p[side])).collect::<Vec<_>>())
        };
        writeln!(
            md,
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0}% |",
            med(|side| side.wall.as_secs_f64()),
            med(|side| side.cpu.service),
            med(|side| side.cpu.postgres),
            med(|side| side.cpu.generator),
            med(|side| side.cpu.others()),
            100.0 * med(Side::disk_busy)
        )
        .unwrap();
    }
    writeln!(
        md,
        "\nEvery pair, in the order run (odd pairs ran the clients first):\n\n\
         | pair | one request /s | clients /s | ratio | neighbours' share of the CPU | disk busy | features by COPY | quiet |\n\
         |--:|--:|--:|--:|--:|--:|--:|---|"
    )
    .unwrap();
    for (i, pair) in measured.iter().enumerate() {
        let [one, clients] = pair;
        writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0}% | {:.0}%, {:.0}% | {:.0}%, {:.0}% | {:.0}%, {:.0}% | {} |",
            i + 1,
            rate(one),
            rate(clients),
            100.0 * rate(clients) / rate(one),
            100.0 * one.neighbours(s.cores),
            100.0 * clients.neighbours(s.cores),
            100.0 * one.disk_busy(),
            100.0 * clients.disk_busy(),
            100.0 * one.by_copy,
            100.0 * clients.by_copy,
            if quiet(pair) { "yes" } else { "no" }
        )
        .unwrap();
    }
    md
}
