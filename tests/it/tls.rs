//! TLS to the database with libpq's `sslmode`, `sslrootcert`, `sslcert` and
//! `sslkey`: against a cluster of the test's own with `ssl = on` and only
//! `hostssl` lines in pg_hba.conf, with a CA and certificates the test makes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use featurepipe::db::{connection_config, Pooler};
use featurepipe::AppState;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::json;
use tokio_postgres::Client;

use crate::poolers::Bouncer;
use crate::support::{config, connect, point, scratch_dir, OwnCluster, TestApp, TestDb};

const SETUP: &str =
    "CREATE TABLE pts (id serial PRIMARY KEY, name text, geom geometry(Point, 4326));";

/// A certificate authority made for the test.
pub struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    /// A self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    /// A certificate for common name `cn` and the host names `names`: (certificate, key), PEM.
    pub fn sign(&self, cn: &str, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Its own certificate, PEM.
    pub fn pem(&self) -> String {
        self.0.pem()
    }
}

/// Write `text` to `path` with `mode`, owned like `owner` (the server, running
/// as `postgres` under root, must own its key and read its certificates).
fn write_owned(path: &Path, text: &str, mode: u32, owner: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::write(path, text).unwrap();
    let meta = std::fs::metadata(owner).unwrap();
    std::os::unix::fs::chown(path, Some(meta.uid()), Some(meta.gid())).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A PostGIS cluster that takes TLS connections only; its certificate names
/// `localhost` alone and is signed by `ca.pem`. The role `certuser` logs in
/// with a client certificate only.
struct TlsServer {
    cluster: OwnCluster,
    /// ca.pem, other-ca.pem (a CA that signed nothing here), client.crt, client.key.
    files: Scratch,
}

impl TlsServer {
    async fn start() -> TlsServer {
        let cluster = OwnCluster::start().await;
        let admin = connect(&cluster.url()).await;
        admin
            .batch_execute(&format!(
                "CREATE EXTENSION postgis; CREATE ROLE certuser LOGIN SUPERUSER; {SETUP}"
            ))
            .await
            .unwrap();
        let ca = Ca::new("featurepipe test CA");
        let data = PathBuf::from(cluster.data());
        write_owned(&data.join("ca.crt"), &ca.pem(), 0o644, &data);
        let server = ca.sign("localhost", &["localhost"]);
        let hba = "hostssl all certuser 127.0.0.1/32 cert\nhostssl all all 127.0.0.1/32 trust\n";
        tls_only(&cluster, server, "ssl_ca_file = 'ca.crt'\n", hba).await;

        let files = Scratch(scratch_dir("tls", 0o700));
        let other = Ca::new("a CA nobody here uses");
        let (cert, key) = ca.sign("certuser", &[]);
        for (name, text) in [
            ("ca.pem", ca.pem()),
            ("other-ca.pem", other.pem()),
            ("client.crt", cert),
            ("client.key", key),
        ] {
            std::fs::write(files.0.join(name), text).unwrap();
        }
        TlsServer { cluster, files }
    }

    /// A file of `files`, as a URL parameter value.
    fn file(&self, name: &str) -> String {
        self.files.file(name)
    }

    /// `postgres://user@host:port/postgres?params`.
    fn url(&self, user: &str, host: &str, params: &str) -> String {
        let port = self.cluster.port();
        format!("postgres://{user}@{host}:{port}/postgres?{params}")
    }

    /// `verify-full` to `localhost` with the right CA.
    fn verified_url(&self, user: &str) -> String {
        let ca = self.file("ca.pem");
        self.url(
            user,
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        )
    }
}

/// A scratch directory, removed when dropped (a failed test too).
struct Scratch(PathBuf);

impl Scratch {
    /// The path of `name` in it, as a URL parameter value.
    fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// A connection made the way the service makes its own.
async fn tls_connect(url: &str) -> Client {
    let (config, _, connector) = connection_config(url).unwrap();
    let (client, conn) = config.connect(connector).await.unwrap();
    tokio::spawn(conn);
    client
}

/// The service started on `url`, or why it refuses to start.
async fn start(url: &str) -> Result<AppState, String> {
    let mut config = config(url);
    // Long enough that a refusal that were retried would show as a timeout
    // message, not as the one asserted.
    config.db.startup_timeout = Duration::from_secs(5);
    AppState::start(&config).await.map_err(|e| e.to_string())
}

/// The start-up error for `url`, which `what` says must be refused.
async fn refused(url: &str, what: &str) -> String {
    match start(url).await {
        Ok(_) => panic!("{what}: start-up succeeded"),
        Err(e) => e,
    }
}

/// Whether the connection that `state` hands out is encrypted, and as whom it logged in.
async fn session_of(state: &AppState) -> (bool, Option<String>, String) {
    let client = state.db.connection().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl, client_dn, current_user::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// A feature written and read back through `app`.
async fn write_and_read(app: &TestApp, name: &str) {
    let r = app
        .post("pts", &point(1.0, 2.0, json!({ "name": name })))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["ids"][0].clone();
    let r = app.get(&format!("/collections/pts/items/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["properties"]["name"], name);
    let sql = format!("SELECT count(*) FROM pts WHERE name = '{name}'");
    assert_eq!(app.db.int(&sql).await, 1);
}

#[tokio::test]
async fn a_tls_only_server_takes_verified_connections_and_client_certificates() {
    let server = TlsServer::start().await;

    // verify-full: the right CA and the host name the certificate names.
    let url = server.verified_url("postgres");
    let app = TestApp::on(
        TestDb {
            client: tls_connect(&url).await,
            url: url.clone(),
        },
        config(&url),
    )
    .await;
    write_and_read(&app, "verify-full").await;
    assert_eq!(
        session_of(&app.state).await,
        (true, None, "postgres".into())
    );
    // Every session of the service's is encrypted.
    let plain = "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
                 WHERE application_name = 'featurepipe' AND NOT ssl";
    assert_eq!(app.db.int(plain).await, 0);

    // require: encrypted, the certificate not checked (the host name does
    // not match, and no CA is given).
    let state = start(&server.url("postgres", "127.0.0.1", "sslmode=require"))
        .await
        .unwrap();
    assert!(session_of(&state).await.0);
    // verify-ca: the CA is checked, the host name (127.0.0.1) is not.
    let ca = server.file("ca.pem");
    let url = server.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    assert!(session_of(&start(&url).await.unwrap()).await.0);

    // A client certificate (pg_hba: `hostssl … cert`), in the key-value form.
    let url = format!(
        "host=localhost port={} user=certuser dbname=postgres sslmode=verify-full \
         sslrootcert='{ca}' sslcert='{}' sslkey='{}'",
        server.cluster.port(),
        server.file("client.crt"),
        server.file("client.key"),
    );
    let app = TestApp::on(
        TestDb {
            client: tls_connect(&url).await,
            url: url.clone(),
        },
        config(&url),
    )
    .await;
    write_and_read(&app, "client-cert").await;
    assert_eq!(
        session_of(&app.state).await,
        (true, Some("/CN=certuser".into()), "certuser".into())
    );
}

#[tokio::test]
async fn start_up_refuses_what_tls_forbids_and_says_what_to_set() {
    let server = TlsServer::start().await;

    // The certificate names localhost, not 127.0.0.1.
    let ca = server.file("ca.pem");
    let url = server.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let e = refused(&url, "wrong host name refused").await;
    assert!(
        e.contains("certificate is not valid for host 127.0.0.1 (it names localhost)")
            && e.contains("sslmode=verify-ca"),
        "{e}"
    );

    // A CA that did not sign the server's certificate, with both verify modes.
    let other = server.file("other-ca.pem");
    for mode in ["verify-full", "verify-ca"] {
        let url = server.url(
            "postgres",
            "localhost",
            &format!("sslmode={mode}&sslrootcert={other}"),
        );
        let e = refused(&url, "unknown CA refused").await;
        assert!(
            e.contains(&format!(
                "certificate is not signed by a CA in sslrootcert={other} (sslmode={mode})"
            )) && e.contains("set sslrootcert"),
            "{e}"
        );
    }

    // No sslrootcert: the system's roots, which do not hold the test's CA.
    let e = refused(
        &server.url("postgres", "localhost", "sslmode=verify-full"),
        "a CA the system does not trust refused",
    )
    .await;
    assert!(
        e.contains("the system's root certificates") && e.contains("set sslrootcert"),
        "{e}"
    );

    // Unencrypted: pg_hba.conf has only hostssl lines.
    let e = refused(
        &server.url("postgres", "localhost", "sslmode=disable"),
        "plain refused",
    )
    .await;
    assert!(
        e.contains("no encryption") && e.contains("set sslmode=verify-full (or require)"),
        "{e}"
    );

    // certuser without its client certificate.
    let e = refused(
        &server.verified_url("certuser"),
        "no client certificate refused",
    )
    .await;
    assert!(e.contains("set sslcert and sslkey"), "{e}");
}

#[tokio::test]
async fn prefer_connects_unencrypted_to_a_server_without_tls() {
    // The shared test cluster runs without ssl.
    let db = TestDb::new(SETUP).await;
    let url = format!("{}?sslmode=prefer", db.url);
    let app = TestApp::on(db, config(&url)).await;
    write_and_read(&app, "prefer").await;
    assert!(!session_of(&app.state).await.0);

    // require, though, is refused at once with what to do.
    let e = refused(&url.replace("prefer", "require"), "require refused").await;
    assert!(
        e.contains("does not accept TLS, and sslmode=require needs it"),
        "{e}"
    );
}

#[tokio::test]
async fn pgbouncer_takes_tls_with_the_same_parameters() {
    let db = TestDb::new(SETUP).await;
    // PgBouncer runs as `postgres` under root and must read these.
    let dir = Scratch(scratch_dir("tls-bouncer", 0o755));
    let ca = Ca::new("featurepipe test CA");
    let (cert, key) = ca.sign("localhost", &["localhost"]);
    for (name, text) in [
        ("ca.pem", ca.pem()),
        ("server.crt", cert),
        ("server.key", key),
    ] {
        write_owned(&dir.0.join(name), &text, 0o644, &dir.0);
    }
    let file = |name: &str| dir.file(name);
    let settings = format!(
        "client_tls_sslmode = require\nclient_tls_cert_file = {}\nclient_tls_key_file = {}\n",
        file("server.crt"),
        file("server.key")
    );
    let (_bouncer, url) = Bouncer::with_settings(&db, "session", &settings).await;
    let url = url.replace("@127.0.0.1:", "@localhost:");
    let params = |mode: &str| format!("{url}?sslmode={mode}&sslrootcert={}", file("ca.pem"));

    // Plain is refused by PgBouncer, so a connection that works is encrypted.
    let e = refused(&params("disable"), "plain refused").await;
    assert!(
        e.contains("SSL required") && e.contains("set sslmode=verify-full"),
        "{e}"
    );
    let e = refused(
        &params("verify-full").replace("@localhost:", "@127.0.0.1:"),
        "wrong host name refused",
    )
    .await;
    assert!(e.contains("not valid for host 127.0.0.1"), "{e}");

    let mut config = config(&params("verify-full"));
    config.db.pooler = Pooler::Session;
    let app = TestApp::on(db, config).await;
    write_and_read(&app, "through-pgbouncer").await;
}

/// Restart `cluster` taking TLS with `cert` and `key` (PEM), the settings
/// `more` besides, and `hba` as its pg_hba.conf.
async fn tls_only(cluster: &OwnCluster, (cert, key): (String, String), more: &str, hba: &str) {
    let data = PathBuf::from(cluster.data());
    write_owned(&data.join("server.crt"), &cert, 0o644, &data);
    write_owned(&data.join("server.key"), &key, 0o600, &data);
    let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
    conf.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    conf.push_str(more);
    write_owned(&data.join("postgresql.conf"), &conf, 0o600, &data);
    write_owned(&data.join("pg_hba.conf"), hba, 0o600, &data);
    cluster.stop().await;
    cluster.start_again().await;
}

/// A cluster that takes TLS connections only, with `cert` and `key` (PEM)
/// as its certificate and key, and no client certificates.
async fn tls_only_with(cert: String, key: String) -> OwnCluster {
    let cluster = OwnCluster::start().await;
    let hba = "hostssl all all 127.0.0.1/32 trust\n";
    tls_only(&cluster, (cert, key), "", hba).await;
    let admin = connect_tls_admin(&cluster).await;
    admin
        .batch_execute(&format!("CREATE EXTENSION postgis; {SETUP}"))
        .await
        .unwrap();
    cluster
}

/// The superuser's connection to `cluster`, over TLS (it takes nothing else).
async fn connect_tls_admin(cluster: &OwnCluster) -> Client {
    let port = cluster.port();
    tls_connect(&format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require"
    ))
    .await
}

/// An X.509 version 1 certificate for localhost and its key, as `openssl
/// x509 -req -signkey` makes it (Citus generates such a certificate).
async fn version_1_certificate() -> (String, String) {
    let dir = Scratch(scratch_dir("v1-cert", 0o700));
    let (key, csr, crt) = (dir.file("v1.key"), dir.file("v1.csr"), dir.file("v1.crt"));
    let steps: [&[&str]; 2] = [
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-subj",
            "/CN=localhost",
            "-out",
            &csr,
        ],
        &[
            "x509", "-req", "-in", &csr, "-signkey", &key, "-days", "2", "-out", &crt,
        ],
    ];
    for args in steps {
        let out = crate::support::run("openssl", args).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = crate::support::run("openssl", &["x509", "-in", &crt, "-noout", "-text"]).await;
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "not a version 1 certificate"
    );
    (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    )
}

#[tokio::test]
async fn prefer_and_require_encrypt_without_checking_the_certificate_as_libpq_does() {
    let v1 = version_1_certificate().await;
    let self_signed = {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    };
    for (what, (cert, key)) in [("X.509 v1", v1), ("self-signed v3", self_signed)] {
        let cluster = tls_only_with(cert, key).await;
        let port = cluster.port();
        for mode in ["prefer", "require"] {
            let url = format!("postgres://postgres@localhost:{port}/postgres?sslmode={mode}");
            let state = start(&url)
                .await
                .unwrap_or_else(|e| panic!("{what}, sslmode={mode}: {e}"));
            let (ssl, _, user) = session_of(&state).await;
            assert!(ssl, "{what}, sslmode={mode}: encrypted");
            assert_eq!(user, "postgres");
        }
        // verify-full still checks: this certificate is signed by no CA it knows.
        let url = format!("postgres://postgres@localhost:{port}/postgres?sslmode=verify-full");
        let e = refused(&url, what).await;
        assert!(e.contains("certificate"), "{what}: {e}");
    }
}

#[tokio::test]
async fn prefer_connects_unencrypted_when_no_tls_can_be_agreed_as_libpq_does() {
    // The server takes TLS 1.2 with one cipher rustls does not have (RSA key
    // exchange, CBC), and unencrypted connections too.
    let key = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256)
        .unwrap_or_else(|_| KeyPair::generate().unwrap());
    let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = (params.self_signed(&key).unwrap().pem(), key.serialize_pem());
    let cluster = OwnCluster::start().await;
    let more = "ssl_ciphers = 'AES128-SHA'\nssl_max_protocol_version = 'TLSv1.2'\n";
    tls_only(&cluster, cert, more, "host all all 127.0.0.1/32 trust\n").await;
    let port = cluster.port();
    let url = |mode: &str| format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode={mode}");
    tls_connect(&url("disable"))
        .await
        .batch_execute("CREATE EXTENSION postgis")
        .await
        .unwrap();
    let state = start(&url("prefer")).await.expect("prefer falls back");
    let (ssl, _, user) = session_of(&state).await;
    assert!(!ssl, "unencrypted, as libpq connects");
    assert_eq!(user, "postgres");
    // The change feed's LISTEN connects the same way.
    state
        .db
        .listen("featurepipe_test")
        .await
        .expect("LISTEN falls back too");
    // require does not fall back: it says why TLS failed.
    let e = refused(&url("require"), "no TLS in common").await;
    assert!(
        e.contains("TLS handshake") || e.contains("handshake"),
        "{e}"
    );
}
