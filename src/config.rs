//! Configuration: every setting is an environment variable and a flag.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::db::Pooler;
use crate::units::{parse_bytes, parse_switch};
use crate::write::{BatchLimits, Strategy, WriteOptions};

/// How to reach the database.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection string, e.g. postgres://user:pass@host/db?sslmode=verify-full
    /// (libpq's sslmode, sslrootcert, sslcert and sslkey are understood).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// How long start-up keeps retrying an unreachable database.
    #[arg(long, env = "FEATUREPIPE_STARTUP_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub startup_timeout: Duration,
    /// What sits between the service and PostgreSQL: `none`, `session`
    /// (a pooler in session mode) or `transaction` (in transaction mode:
    /// statements are sent unnamed, COPY and set_role are off).
    #[arg(long, env = "FEATUREPIPE_POOLER", default_value = "none", value_parser = |s: &str| named(&Pooler::ALL, s))]
    pub pooler: Pooler,
}

/// Settings of `featurepipe serve`.
#[derive(Debug, Clone, Args)]
pub struct Config {
    #[command(flatten)]
    /// Database connection.
    pub db: DatabaseArgs,
    /// Address to listen on.
    #[arg(long, env = "FEATUREPIPE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve `/metrics` on this address of its own (the operators'
    /// network), and not on the API's; unset: on the API's, open.
    #[arg(long, env = "FEATUREPIPE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Comma-separated schemas whose tables are published; the first one's tables need no prefix.
    #[arg(
        long,
        env = "FEATUREPIPE_SCHEMAS",
        default_value = "public",
        value_delimiter = ','
    )]
    pub schemas: Vec<String>,
    /// Features per pipelined batch.
    #[arg(long, env = "FEATUREPIPE_BATCH_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Parameter bytes per batch (suffixes KiB, MiB, GiB allowed).
    #[arg(long, env = "FEATUREPIPE_BATCH_BYTES", default_value = "8MiB", value_parser = parse_bytes)]
    pub batch_bytes: usize,
    /// Maximum database connections.
    #[arg(long, env = "FEATUREPIPE_POOL_SIZE", default_value_t = 16)]
    pub pool_size: usize,
    /// How long a request waits for a free connection before a 503.
    #[arg(long, env = "FEATUREPIPE_POOL_WAIT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub pool_wait: Duration,
    /// Pipelining: `on` sends a whole request before reading answers; `off`
    /// writes one statement at a time (for proxies that mishandle pipelining).
    #[arg(long, env = "FEATUREPIPE_PIPELINE", default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    pub pipeline: bool,
    /// How features are written: `auto` (COPY from the threshold on, where
    /// possible), `insert` or `copy`.
    #[arg(
        long,
        env = "FEATUREPIPE_WRITE_STRATEGY",
        default_value = "auto",
        value_parser = |s: &str| named(&Strategy::ALL, s)
    )]
    pub write_strategy: Strategy,
    /// Features per request from which `auto` writes with COPY; unset: the
    /// faster of the two, from the round trip and per-row costs measured as
    /// the service runs.
    #[arg(long, env = "FEATUREPIPE_COPY_THRESHOLD")]
    pub copy_threshold: Option<usize>,
    /// Largest accepted request body (suffixes KiB, MiB, GiB allowed).
    #[arg(long, env = "FEATUREPIPE_MAX_BODY", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_body: usize,
    /// Memory for the bodies of all requests at once (decompressed, until
    /// parsed); a request waits up to FEATUREPIPE_POOL_WAIT for room, then 503.
    #[arg(long, env = "FEATUREPIPE_BODY_MEMORY", default_value = "512MiB", value_parser = parse_bytes)]
    pub body_memory: usize,
    /// Bodies up to this size are read whole before they are parsed; a
    /// larger FeatureCollection (atomic mode) is parsed, validated and
    /// written batch by batch as it arrives.
    #[arg(long, env = "FEATUREPIPE_STREAM_AFTER", default_value = "8MiB", value_parser = parse_bytes)]
    pub stream_after: usize,
    /// The URL clients reach the service at (e.g. behind a proxy), used in
    /// links; by default `http://` and the request's Host header.
    #[arg(long, env = "FEATUREPIPE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Tiles drawn under the features of the web pages: an XYZ template such
    /// as `https://tile.example.org/{z}/{x}/{y}.png`; none by default (a plain
    /// background, and the pages load nothing from elsewhere).
    #[arg(long, env = "FEATUREPIPE_BASEMAP_URL", value_parser = parse_basemap)]
    pub basemap_url: Option<String>,
    /// Origins whose web pages may call the API (CORS): a comma-separated
    /// list such as `https://map.example.org,http://localhost:5173`, or `*`
    /// for any; empty (the default): none.
    #[arg(long, env = "FEATUREPIPE_CORS_ORIGINS", default_value = "", value_parser = parse_origins)]
    pub cors_origins: CorsOrigins,
    /// Longest any one database statement may run (0: no limit); a request
    /// whose statement runs longer fails with 503 and writes nothing.
    #[arg(long, env = "FEATUREPIPE_STATEMENT_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub statement_timeout: Duration,
    /// How long a request body may take to arrive (408 beyond).
    #[arg(long, env = "FEATUREPIPE_UPLOAD_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub upload_timeout: Duration,
    /// How long a client may take to send a request's headers; a connection
    /// that has not sent them all by then is closed.
    #[arg(long, env = "FEATUREPIPE_HEADER_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub header_timeout: Duration,
    /// Longest a request may take from its first byte to its answer (504
    /// beyond; a transaction still open is cancelled and rolled back). 0: no limit.
    #[arg(long, env = "FEATUREPIPE_REQUEST_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Most features one request may carry (413 beyond).
    #[arg(long, env = "FEATUREPIPE_MAX_FEATURES", default_value_t = 1_000_000)]
    pub max_features: usize,
    /// Most positions one geometry may have (422 beyond).
    #[arg(long, env = "FEATUREPIPE_MAX_POSITIONS", default_value_t = 1_000_000)]
    pub max_positions: usize,
    /// Most properties one feature may have (422 beyond).
    #[arg(long, env = "FEATUREPIPE_MAX_PROPERTIES", default_value_t = 1_000)]
    pub max_properties: usize,
    /// Longest string property value (suffixes KiB, MiB; 422 beyond).
    #[arg(long, env = "FEATUREPIPE_MAX_STRING", default_value = "1MiB", value_parser = parse_bytes)]
    pub max_string: usize,
    /// On SIGTERM, how long requests in flight may take to finish before the process exits.
    #[arg(long, env = "FEATUREPIPE_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
    /// How many times a write the database rolled back because of a deadlock
    /// or a serialization failure is run again, where that is safe (0: never).
    #[arg(long, env = "FEATUREPIPE_RETRIES", default_value_t = 3)]
    pub retries: u32,
    /// How long an Idempotency-Key and its response are remembered.
    #[arg(long, env = "FEATUREPIPE_IDEMPOTENCY_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub idempotency_ttl: Duration,
    /// Whether writes and reads need credentials (`off`: anyone may do anything).
    #[arg(long, env = "FEATUREPIPE_AUTH", default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    pub auth: bool,
    /// Shared secret of HS256 bearer tokens.
    #[arg(long, env = "FEATUREPIPE_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// PEM file of the RSA public key of RS256 bearer tokens.
    #[arg(long, env = "FEATUREPIPE_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<std::path::PathBuf>,
    /// How often the service checks whether the published tables' definitions
    /// changed, and reads the catalog again when they did (0: never).
    #[arg(long, env = "FEATUREPIPE_CATALOG_POLL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub catalog_poll: Duration,
    /// Read the catalog again at once on `NOTIFY featurepipe_reload` (a
    /// connection of its own LISTENs; not behind FEATUREPIPE_POOLER=transaction).
    #[arg(long, env = "FEATUREPIPE_CATALOG_LISTEN", default_value = "on", value_parser = parse_switch)]
    pub catalog_listen: bool,
    /// How long the change feeds keep their history (`changes = true`); a
    /// cursor older than that gets 410 Gone. Pruned in the background.
    #[arg(long, env = "FEATUREPIPE_CHANGES_RETENTION", default_value = "30d", value_parser = humantime::parse_duration)]
    pub changes_retention: Duration,
    /// TOML file of per-collection settings (title, last-modified column,
    /// preconditions, extra CRSs, read-only); optional.
    #[arg(long = "config", env = "FEATUREPIPE_CONFIG")]
    pub settings: Option<std::path::PathBuf>,
}

impl Config {
    /// A configuration with every default, for `url` (used by tests and embedders).
    pub fn for_database(url: &str) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            config: Config,
        }
        let mut config = Wrapper::parse_from(["featurepipe"]).config;
        config.db.database_url = Some(url.to_owned());
        config
    }

    /// Limits on what one request body may hold.
    pub fn input_limits(&self) -> crate::feature::InputLimits {
        crate::feature::InputLimits {
            features: self.max_features,
            positions: self.max_positions,
            properties: self.max_properties,
            string_bytes: self.max_string,
        }
    }

    /// How writes are carried out.
    pub fn write_options(&self) -> WriteOptions {
        WriteOptions {
            limits: BatchLimits {
                max_features: self.batch_size as usize,
                max_bytes: self.batch_bytes,
            },
            pipeline: self.pipeline,
            strategy: self.write_strategy,
            copy_threshold: self.copy_threshold,
        }
    }
}

/// Which web origins may call the API from a browser.
#[derive(Debug, Clone, PartialEq)]
pub enum CorsOrigins {
    /// None: no CORS header is sent.
    None,
    /// Any origin (`*`).
    Any,
    /// These origins, as browsers send them (`scheme://host[:port]`).
    List(Vec<String>),
}

/// Parse `FEATUREPIPE_CORS_ORIGINS`: `*`, or origins separated by commas.
fn parse_origins(s: &str) -> Result<CorsOrigins, String> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .collect();
    if items.is_empty() {
        return Ok(CorsOrigins::None);
    }
    if items == ["*"] {
        return Ok(CorsOrigins::Any);
    }
    items
        .into_iter()
        .map(origin)
        .collect::<Result<_, _>>()
        .map(CorsOrigins::List)
}

/// One origin, as a browser sends it in `Origin`: lower case, no path.
fn origin(text: &str) -> Result<String, String> {
    let wrong = |why: &str| {
        format!("'{text}' is not an origin ({why}), such as https://map.example.org or http://localhost:5173")
    };
    let (scheme, rest) = text.split_once("://").ok_or_else(|| wrong("no scheme"))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(wrong("only http and https"));
    }
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.is_empty() || host.contains(['/', '?', '#', '@', ' ', ',']) {
        return Err(wrong(
            "an origin is a host and a port, with no user, path or query",
        ));
    }
    let port = host
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|p| !p.ends_with(']'));
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(wrong("the port is not a number"));
    }
    Ok(format!("{scheme}://{}", host.to_ascii_lowercase()))
}

/// An XYZ tile template: http(s), with `{z}`, `{x}` and `{y}`, and nothing
/// that could end the Content-Security-Policy it is named in.
fn parse_basemap(s: &str) -> Result<String, String> {
    let web = s.starts_with("https://") || s.starts_with("http://");
    let placeholders = ["{z}", "{x}", "{y}"].iter().all(|p| s.contains(p));
    let quiet = !s.contains(|c: char| c.is_whitespace() || "'\";,".contains(c));
    if web && placeholders && quiet {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "'{s}' is not an XYZ template: http(s)://host/…{{z}}/{{x}}/{{y}}…, without spaces, quotes, ';' or ','"
        ))
    }
}

/// The value named `s` among `all` (a setting's values, by name).
fn named<T: Copy>(all: &[(&'static str, T)], s: &str) -> Result<T, String> {
    let names: Vec<_> = all.iter().map(|(name, _)| *name).collect();
    all.iter()
        .find(|(name, _)| *name == s)
        .map(|&(_, value)| value)
        .ok_or_else(|| format!("'{s}' is not one of {}", names.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_origins() {
        assert_eq!(parse_origins(""), Ok(CorsOrigins::None));
        assert_eq!(parse_origins(" * "), Ok(CorsOrigins::Any));
        let list = parse_origins("https://Map.Example.org, http://localhost:5173/").unwrap();
        let expected = ["https://map.example.org", "http://localhost:5173"].map(String::from);
        assert_eq!(list, CorsOrigins::List(expected.to_vec()));
        for wrong in [
            "map.example.org",
            "ftp://x.org",
            "https://x.org/app",
            "*,https://x.org",
        ] {
            assert!(parse_origins(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn defaults_match_the_readme() {
        let c = Config::for_database("postgres://localhost/x");
        assert_eq!(c.batch_size, 500);
        assert_eq!(c.batch_bytes, 8 << 20);
        assert_eq!(c.max_body, 64 << 20);
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.schemas, vec!["public".to_string()]);
        assert_eq!(c.retries, 3);
        assert_eq!(c.header_timeout, Duration::from_secs(30));
        assert_eq!(c.request_timeout, Duration::from_secs(300));
        assert_eq!(c.basemap_url, None);
        assert!(c.auth && c.pipeline);
        assert_eq!(c.catalog_poll, Duration::from_secs(2));
        assert!(c.catalog_listen);
        assert_eq!(c.changes_retention, Duration::from_secs(30 * 86_400));
    }

    #[test]
    fn a_basemap_is_an_xyz_template() {
        let osm = "https://{a-c}.tile.example.org/{z}/{x}/{y}.png";
        assert_eq!(parse_basemap(osm).as_deref(), Ok(osm));
        for bad in [
            "ftp://x/{z}/{x}/{y}",
            "https://x/{z}/{x}",
            "https://x/{z}/{x}/{y}; script-src *",
            "https://x/{z}/{x}/{y}'",
        ] {
            assert!(parse_basemap(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn switches_take_on_and_off_as_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            config: Config,
        }
        let c = Wrapper::parse_from(["featurepipe", "--auth", "off", "--pipeline", "off"]).config;
        assert!(!c.auth && !c.pipeline);
        let c = Wrapper::parse_from(["featurepipe", "--auth", "on"]).config;
        assert!(c.auth);
        let c = Wrapper::parse_from(["featurepipe", "--catalog-poll", "0"]).config;
        assert_eq!(c.catalog_poll, Duration::ZERO);
    }
}
