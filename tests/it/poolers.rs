//! Behind PgBouncer (Debian's package), in session mode and in transaction
//! mode (`FEATUREPIPE_POOLER`): the whole API works, with more service
//! connections than server connections so that transactions of different
//! requests share them.

use std::time::Duration;

use featurepipe::db::Pooler;
use serde_json::json;

use crate::support::{collection, config, free_port, point, scratch_dir, TestApp, TestDb};

const SETUP: &str = "
    CREATE TABLE pts (id serial PRIMARY KEY, name text, n int, tags text[], meta jsonb,
                      geom geometry(Point, 4326));
";

/// A PgBouncer in front of the test cluster, stopped when dropped.
pub struct Bouncer {
    port: u16,
    dir: std::path::PathBuf,
    _process: tokio::process::Child,
}

impl Bouncer {
    /// A bouncer in `mode` in front of `db`'s cluster, and `db`'s URL through it.
    async fn in_front_of(db: &TestDb, mode: &str) -> (Bouncer, String) {
        Self::with_settings(db, mode, "").await
    }

    /// Like [`Bouncer::in_front_of`], with more `[pgbouncer]` settings (ini lines).
    pub async fn with_settings(db: &TestDb, mode: &str, settings: &str) -> (Bouncer, String) {
        let pg_port = db.addr().port();
        let bouncer = Bouncer::start(pg_port, mode, settings).await;
        let url = db
            .url
            .replace(&format!(":{pg_port}/"), &format!(":{}/", bouncer.port));
        (bouncer, url)
    }

    async fn start(pg_port: u16, mode: &str, settings: &str) -> Bouncer {
        // As root, PgBouncer runs as `postgres` (it refuses root), which must write here.
        let dir = scratch_dir(&format!("pgbouncer-{mode}"), 0o777);
        let port = free_port();
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host=127.0.0.1 port={pg_port}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {users}\n\
                 pool_mode = {mode}\ndefault_pool_size = {size}\nmax_client_conn = 100\n\
                 logfile = {log}\npidfile = {pid}\n{settings}",
                // Session mode holds a server connection per client connection;
                // in transaction mode, 8 service connections share 2.
                size = if mode == "session" { 20 } else { 2 },
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
                pid = dir.join("pgbouncer.pid").display(),
            ),
        )
        .unwrap();
        let mut command = tokio::process::Command::new("/usr/sbin/pgbouncer");
        if is_root() {
            command.args(["-u", "postgres"]);
        }
        let process = command
            .arg("-q")
            .arg(&ini)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("pgbouncer runs (`make test` installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Bouncer {
            port,
            dir,
            _process: process,
        }
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Whether this process runs as root (PgBouncer must then be told whom to run as).
fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

async fn the_api_works_behind(mode: &str, pooler: Pooler) {
    let db = TestDb::new(SETUP).await;
    let (bouncer, url) = Bouncer::in_front_of(&db, mode).await;
    let mut config = config(&url);
    config.db.pooler = pooler;
    config.pool_size = 8;
    let app = TestApp::on(db, config).await;

    // Bulk creates, from several requests at once (INSERT and, where allowed, COPY).
    let bodies: Vec<String> = (0..6)
        .map(|r| {
            let n = if r == 0 { 150 } else { 20 };
            collection(
                (0..n)
                    .map(|i| {
                        // The large one only with columns COPY can take.
                        let properties = match r {
                            0 => json!({"name": "r0", "n": i}),
                            _ => json!({"name": format!("r{r}"), "n": i, "tags": ["a", "b"], "meta": {"r": r}}),
                        };
                        point(i as f64 * 0.01, r as f64, properties)
                    })
                    .collect(),
            )
            .to_string()
        })
        .collect();
    let posts = bodies.iter().map(|body| {
        app.send(
            "POST",
            "/collections/pts/items",
            &[("content-type", "application/geo+json")],
            Some(body.clone()),
        )
    });
    let answers = futures_util::future::join_all(posts).await;
    for r in &answers {
        assert_eq!(r.status, 201, "{mode}: {r:?}");
    }
    // COPY needs a named statement: in transaction mode the large request is INSERTs.
    let strategy = if pooler == Pooler::Transaction {
        "insert"
    } else {
        "copy"
    };
    assert_eq!(answers[0].body["strategy"], strategy, "{mode}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 250);

    // Reads: a filtered, boxed page with its count, one feature, the collections.
    let r = app
        .get("/collections/pts/items?name=r1&bbox=0,0.5,0.1,1.5&limit=5&offset=2")
        .await;
    assert_eq!(r.status, 200, "{mode}: {r:?}");
    assert_eq!(r.body["numberMatched"], 11);
    assert_eq!(r.body["numberReturned"], 5);
    let r = app.get("/collections/pts/items/1").await;
    assert_eq!(r.status, 200, "{mode}: {r:?}");
    let etag = r.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(app.get("/collections").await.status, 200);

    // Single-feature changes with preconditions and keys.
    let patch = json!({"properties": {"n": 1000, "tags": ["z"]}}).to_string();
    let r = app
        .send(
            "PATCH",
            "/collections/pts/items/1",
            &[
                ("content-type", "application/merge-patch+json"),
                ("if-match", &etag),
                ("idempotency-key", &format!("{mode}-patch")),
            ],
            Some(patch),
        )
        .await;
    assert_eq!(r.status, 204, "{mode}: {r:?}");
    let feature = point(9.0, 9.0, json!({"name": "put", "n": 1})).to_string();
    let r = app
        .send(
            "PUT",
            "/collections/pts/items/2",
            &[("content-type", "application/geo+json")],
            Some(feature),
        )
        .await;
    assert_eq!(r.status, 204, "{mode}: {r:?}");
    let r = app
        .send("DELETE", "/collections/pts/items/3", &[], None)
        .await;
    assert_eq!(r.status, 204, "{mode}: {r:?}");

    // A keyed bulk create and its replay.
    let keyed = [
        ("content-type", "application/geo+json"),
        ("idempotency-key", "bulk"),
    ];
    let post = || {
        app.send(
            "POST",
            "/collections/pts/items",
            &keyed,
            Some(bodies[1].clone()),
        )
    };
    let first = post().await;
    assert_eq!(first.status, 201, "{mode}: {first:?}");
    let again = post().await;
    assert_eq!(again.body, first.body, "{mode}");

    // Edit sessions, atomic and skip.
    let session = json!({"operations": [
        {"op": "insert", "collection": "pts", "feature": point(0.0, 0.0, json!({"n": 1}))},
        {"op": "update", "collection": "pts", "id": 4, "patch": {"properties": {"n": 4000}}},
        {"op": "delete", "collection": "pts", "ids": [5, 6]},
    ]});
    for path in ["/transactions", "/transactions?mode=skip"] {
        let r = app
            .send(
                "POST",
                path,
                &[("content-type", "application/json")],
                Some(session.to_string()),
            )
            .await;
        assert_eq!(r.status, 200, "{mode} {path}: {r:?}");
    }
    // 250 + 20 (keyed) + 2 (sessions) - 1 (DELETE) - 2 (sessions' deletes; the second finds none)
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 269, "{mode}");
    assert_eq!(
        app.db
            .int("SELECT count(*) FROM pts WHERE n IN (1000, 4000)")
            .await,
        2,
        "{mode}"
    );
    drop(bouncer);
}

#[tokio::test]
async fn without_the_setting_start_up_says_what_to_set() {
    let db = TestDb::new(SETUP).await;
    let (_bouncer, url) = Bouncer::in_front_of(&db, "transaction").await;
    let err = featurepipe::AppState::start(&config(&url))
        .await
        .err()
        .expect("start-up fails");
    assert!(err.to_string().contains("FEATUREPIPE_POOLER"), "{err}");
}

#[tokio::test]
async fn the_api_works_behind_pgbouncer_in_session_mode() {
    the_api_works_behind("session", Pooler::Session).await;
}

#[tokio::test]
async fn the_api_works_behind_pgbouncer_in_transaction_mode() {
    the_api_works_behind("transaction", Pooler::Transaction).await;
}
