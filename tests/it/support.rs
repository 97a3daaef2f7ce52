//! Test support: a fresh database per test on the throwaway cluster that
//! `make test` starts, and an app wired to it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use featurepipe::config::Config;
use featurepipe::AppState;
use featurepipe_proxy::Proxy;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio_postgres::{Client, NoTls};
use tower::ServiceExt;

/// `postgres://user@host:port` of the throwaway cluster (no database name).
pub fn cluster_url() -> String {
    std::env::var("FEATUREPIPE_TEST_PG").expect(
        "FEATUREPIPE_TEST_PG is not set: run the tests with `make test`, \
         which starts a throwaway PostGIS cluster and sets it",
    )
}

/// Connect and drive the connection in the background.
pub async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// A database of its own, created from the PostGIS template.
pub struct TestDb {
    /// Connection string of this database.
    pub url: String,
    /// A connection for set-up and checks.
    pub client: Client,
}

impl TestDb {
    /// The server's address, from the `postgres://user@host:port/db` URL.
    pub fn addr(&self) -> SocketAddr {
        let host_port = self.url.rsplit('@').next().unwrap().split('/').next();
        host_port.unwrap().parse().unwrap()
    }

    /// Create a database and run `setup` in it.
    pub async fn new(setup: &str) -> TestDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let admin = connect(&format!("{}/postgres", cluster_url())).await;
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {name} TEMPLATE featurepipe_template"
            ))
            .await
            .expect("create test database");
        let url = format!("{}/{name}", cluster_url());
        let client = connect(&url).await;
        client.batch_execute(setup).await.expect("set-up SQL");
        TestDb { url, client }
    }

    /// One value of a query as text (`NULL` → None).
    pub async fn text(&self, sql: &str) -> Option<String> {
        self.client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// A count or other integer.
    pub async fn int(&self, sql: &str) -> i64 {
        self.client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// [`TestDb::int`] once it is `expected`, polled for up to 10 s (a
    /// COMMIT whose answer was lost may still be finishing): its last value.
    pub async fn int_once(&self, sql: &str, expected: i64) -> i64 {
        let mut value = self.int(sql).await;
        for _ in 0..1000 {
            if value == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            value = self.int(sql).await;
        }
        value
    }
}

/// SQL that creates the role `role` (with `options`: LOGIN, NOLOGIN) unless
/// it exists. Roles are the cluster's: tests running at once may create the
/// same one, and the loser of that race sees a unique violation, not
/// duplicate_object.
pub fn create_role(role: &str, options: &str) -> String {
    format!(
        "DO $$ BEGIN CREATE ROLE {role} {options}; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;"
    )
}

/// A response, read whole.
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl TestResponse {
    /// The `status` of every batch in the report.
    pub fn batch_statuses(&self) -> Vec<&str> {
        self.body["batches"]
            .as_array()
            .map(|b| {
                b.iter()
                    .map(|b| b["status"].as_str().unwrap_or(""))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for TestResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.body)
    }
}

/// The service on a test database, called in-process.
pub struct TestApp {
    pub db: TestDb,
    pub state: AppState,
    pub router: Router,
}

impl TestApp {
    /// Set up a database with `setup` and start the app on it with default settings.
    pub async fn new(setup: &str) -> TestApp {
        Self::with_config(setup, |_| {}).await
    }

    /// Like [`TestApp::new`], with settings changed by `tweak`.
    pub async fn with_config(setup: &str, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let db = TestDb::new(setup).await;
        let mut config = config(&db.url);
        tweak(&mut config);
        Self::on(db, config).await
    }

    /// Start the app on an existing database with `config`.
    pub async fn on(db: TestDb, config: Config) -> TestApp {
        let state = AppState::start(&config).await.expect("app starts");
        let router = featurepipe::router(state.clone());
        TestApp { db, state, router }
    }

    /// Send a request.
    pub async fn request(&self, request: Request<Body>) -> TestResponse {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        TestResponse {
            status,
            headers,
            body,
        }
    }

    /// POST raw bytes with a content type.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> TestResponse {
        let mut req = Request::post(path);
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        self.request(req.body(body.into()).unwrap()).await
    }

    /// POST GeoJSON to a collection's items.
    pub async fn post(&self, collection: &str, body: &Value) -> TestResponse {
        self.post_raw(
            &format!("/collections/{collection}/items"),
            Some("application/geo+json"),
            body.to_string(),
        )
        .await
    }

    /// Send `method` to `path` with headers and a body (empty when `None`).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> TestResponse {
        let mut req = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.request(req.body(body.map(Body::from).unwrap_or_default()).unwrap())
            .await
    }

    /// GET a path.
    pub async fn get(&self, path: &str) -> TestResponse {
        self.request(Request::get(path).body(Body::empty()).unwrap())
            .await
    }
}

/// A point Feature with these properties.
pub fn point(x: f64, y: f64, properties: Value) -> Value {
    serde_json::json!({
        "type": "Feature",
        "geometry": {"type": "Point", "coordinates": [x, y]},
        "properties": properties,
    })
}

/// A FeatureCollection of these features.
pub fn collection(features: Vec<Value>) -> Value {
    serde_json::json!({"type": "FeatureCollection", "features": features})
}

/// Start a proxy in front of `db` and return it with a configuration that goes through it.
pub async fn via_proxy(db: &TestDb, one_way: Duration) -> (Proxy, Config) {
    let pg = db.addr();
    let proxy = Proxy::start(pg, one_way).await.unwrap();
    let url = db
        .url
        .replace(&pg.to_string(), &proxy.local_addr().to_string());
    (proxy, config(&url))
}

/// Write a settings file (FEATUREPIPE_CONFIG) for a test; `name` keeps tests apart.
pub fn settings_file(name: &str, text: &str) -> std::path::PathBuf {
    // A file of each call's own: services watch their settings file, and
    // one that tests running at once wrote again (the same text) made
    // every other test's service read its catalog again, in the midst of
    // what those tests count (copy_flight's round trips, twice in a run).
    static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "featurepipe-settings-{}-{name}-{n}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// Why the service refuses to start on a database set up with `setup`,
/// with the settings file at `settings` and authentication `auth`.
pub async fn start_up_error(setup: &str, settings: std::path::PathBuf, auth: bool) -> String {
    let db = TestDb::new(setup).await;
    let mut config = config(&db.url);
    config.auth = auth;
    config.settings = Some(settings);
    match AppState::start(&config).await {
        Ok(_) => panic!("start-up should fail"),
        Err(e) => e.to_string(),
    }
}

/// Default settings for the database at `url`, with authentication off:
/// tests of anything else call as if the service were open. The catalog is
/// not followed (no poll, no LISTEN): that would add round trips and
/// connections to what tests count; tests of reloading turn it on.
pub fn config(url: &str) -> Config {
    let mut config = Config::for_database(url);
    config.auth = false;
    config.catalog_poll = Duration::ZERO;
    config.catalog_listen = false;
    // Strategies as tests expect them, not as the costs measured so far decide.
    config.copy_threshold = Some(100);
    config
}

/// A PostgreSQL + PostGIS cluster of one test's own, which the test may
/// stop and start again: the shared cluster serves every other test at the
/// same time. Started with the same shell functions as `make test`'s
/// (`scripts/pg.sh`); stopped and removed when dropped.
/// A port on 127.0.0.1 free now, for a server started next to take.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A new directory of its own under the temp dir, with `mode` (servers run
/// as `postgres` under root and must reach or write it).
pub fn scratch_dir(what: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "featurepipe-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

pub struct OwnCluster {
    dir: std::path::PathBuf,
    port: u16,
    /// `fast` (no fsync, asynchronous commit) or `durable`.
    mode: &'static str,
}

impl OwnCluster {
    /// initdb into a new temp dir and start on a free port, durability off.
    pub async fn start() -> OwnCluster {
        Self::start_as("fast").await
    }

    /// Like [`OwnCluster::start`], durable: a commit waits for its WAL (and
    /// for a synchronous standby, once there is one).
    pub async fn start_durable() -> OwnCluster {
        Self::start_as("durable").await
    }

    async fn start_as(mode: &'static str) -> OwnCluster {
        // As root, the server runs as `postgres`, which must reach the data dir.
        let dir = scratch_dir("own", 0o755);
        let port = free_port();
        let cluster = OwnCluster { dir, port, mode };
        cluster.start_again().await;
        cluster
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), durable, on a
    /// free port of its own.
    pub async fn standby_of(primary: &OwnCluster) -> OwnCluster {
        let dir = scratch_dir("standby", 0o755);
        let port = free_port();
        let standby = OwnCluster {
            dir,
            port,
            mode: "durable",
        };
        let data = standby.data();
        standby
            .pg_sh(&format!(
                "mkdir -m 700 '{data}' && {{ [ \"$(id -u)\" -ne 0 ] || chown postgres: '{data}'; }} && \
                 as_pg_user \"$(pg_bindir)/pg_basebackup\" -h 127.0.0.1 -p {} -U postgres -D '{data}' -R -X stream -c fast",
                primary.port
            ))
            .await;
        standby.start_again().await;
        standby
    }

    /// Promote a standby to a primary (`pg_ctl promote`, waiting until it is one).
    pub async fn promote(&self) {
        self.pg_sh(&format!(
            "as_pg_user \"$(pg_bindir)/pg_ctl\" -D '{}' -w promote >/dev/null",
            self.data()
        ))
        .await;
    }

    /// Stop the server as a crash would (`pg_ctl stop -m immediate`).
    pub async fn kill(&self) {
        self.pg_sh(&format!(
            "as_pg_user \"$(pg_bindir)/pg_ctl\" -D '{}' -m immediate -w stop >/dev/null",
            self.data()
        ))
        .await;
    }

    /// `postgres://postgres@127.0.0.1:port/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Start the server on the same data dir and port (pg_ctl start, waiting until it accepts).
    pub async fn start_again(&self) {
        self.pg_sh(&format!(
            "start_cluster '{}' {} {}",
            self.data(),
            self.port,
            self.mode
        ))
        .await;
    }

    /// Stop the server (pg_ctl stop -m fast: every connection is terminated).
    pub async fn stop(&self) {
        self.pg_sh(&format!("stop_cluster '{}'", self.data())).await;
    }

    /// The data directory.
    pub fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Run `script` after sourcing `scripts/pg.sh`; panics when it fails.
    async fn pg_sh(&self, script: &str) {
        let out = tokio::process::Command::from(pg_sh(script))
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = pg_sh(&format!("stop_cluster '{}'", self.data())).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `bash -c` running `script` with the functions of `scripts/pg.sh`.
fn pg_sh(script: &str) -> std::process::Command {
    let pg_sh = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh");
    let mut command = std::process::Command::new("bash");
    command.args(["-c", &format!(". '{pg_sh}' && {script}")]);
    command
}

/// The app on a real TCP port, for clients nobody here wrote (GDAL, OWSLib).
pub struct Served {
    /// `http://127.0.0.1:port`
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    /// Serve `app`'s state on a free port until dropped.
    pub async fn start(app: &TestApp) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(app, listener)
    }

    /// Serve `app`'s state on `listener` until dropped.
    pub fn on(app: &TestApp, listener: tokio::net::TcpListener) -> Served {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(featurepipe::serve(listener, app.state.clone(), async {
            let _ = stopped.await;
        }));
        Served {
            url,
            stop: Some(stop),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Run a program to completion without blocking the runtime; panics when it cannot start.
pub async fn run(program: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program} cannot be run ({e}); `make test` installs it"))
}

/// One HTTP/1.1 exchange over a fresh connection: (status, body).
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    http_as(addr, method, path, "application/geo+json", body).await
}

/// [`http`] with a body of `content_type`.
pub async fn http_as(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut response = String::new();
    s.read_to_string(&mut response).await?;
    let status = response
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, response))
}

/// The process's peak resident memory so far (VmHWM), in KiB.
pub fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The service's binary on a free port, on the database at `db_url`, with
/// authentication off and `env` set; killed when dropped.
pub struct ServiceProcess {
    /// `127.0.0.1:port`
    pub addr: String,
    /// The process (its stdout is piped, for tests of what it logs).
    pub child: tokio::process::Child,
}

impl ServiceProcess {
    /// Start it and wait until it answers `/readyz`.
    pub async fn start(db_url: &str, env: &[(&str, &str)]) -> ServiceProcess {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_featurepipe"))
            .arg("serve")
            .env("DATABASE_URL", db_url)
            .env("FEATUREPIPE_LISTEN", &addr)
            .env("FEATUREPIPE_AUTH", "off")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if let Ok((200, _)) = http(&addr, "GET", "/readyz", "").await {
                return ServiceProcess { addr, child };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the service did not start");
    }
}
