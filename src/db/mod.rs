//! Connection pool, start-up checks and migrations.

pub mod costs;
pub mod environment;
pub mod listen;
pub mod migrate;
pub mod round_trips;
pub mod said;
pub mod statement;
pub mod tls;

use std::str::FromStr;
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
    Timeouts,
};
use statement::Naming;
use std::sync::Arc;

use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Why a request could not use the database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection became free within the pool's wait.
    #[error("no database connection became free within {0:?}; retry later")]
    Busy(Duration),
    /// No connection could be made.
    #[error("the database is unreachable: {}", said::pool_said(.0))]
    Unreachable(PoolError),
    /// A connection was taken but did not answer.
    #[error("the database does not answer: {}", said::said(.0))]
    NoAnswer(tokio_postgres::Error),
    /// The credential's database role cannot be used.
    #[error("the credential's database role '{role}' cannot be used: {message}")]
    RoleRefused {
        /// The role.
        role: String,
        /// The database's reason.
        message: String,
    },
    /// The connection's role was not chosen for this request (the service's fault).
    #[error("the request's database role was not chosen")]
    RoleUnbound,
    /// A statement failed while `doing`.
    #[error("database error while {doing}: {}", said::said(source))]
    Query {
        /// What the statement was for.
        doing: &'static str,
        /// The error.
        source: tokio_postgres::Error,
    },
}

/// Why the service cannot start against this database.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// No database configured.
    #[error("DATABASE_URL is not set, nor libpq's PGHOST, PGPORT, PGDATABASE or PGUSER (`make run` starts a local PostGIS and sets DATABASE_URL for you)")]
    NoUrl,
    /// `DATABASE_URL` does not parse.
    #[error("DATABASE_URL is not a valid PostgreSQL connection string: {0}")]
    BadUrl(tokio_postgres::Error),
    /// No connection within the start-up timeout.
    #[error(
        "cannot reach the database after {waited:?}: {}",
        said::pool_said(source)
    )]
    Unreachable {
        /// How long we tried.
        waited: Duration,
        /// The last error.
        source: PoolError,
    },
    /// The PostGIS extension is missing.
    #[error(
        "PostGIS is not installed in this database: run `CREATE EXTENSION postgis;` as a superuser"
    )]
    NoPostgis,
    /// The settings file is unreadable or names what is not there.
    #[error("settings (FEATUREPIPE_CONFIG): {0}")]
    Settings(String),
    /// A connection pooler refused the connection's startup parameters.
    #[error(
        "the database refused the connection ({0}): behind a connection pooler such as PgBouncer, \
         set FEATUREPIPE_POOLER=session or FEATUREPIPE_POOLER=transaction"
    )]
    Pooler(String),
    /// TLS to the database is misconfigured, or the server's certificate is refused.
    #[error("TLS to the database: {0}")]
    Tls(#[from] tls::TlsError),
    /// Credentials are misconfigured.
    #[error("authentication: {0}")]
    Auth(String),
    /// The service's login may not run its own idempotency functions.
    #[error(
        "the database role '{role}' may not run featurepipe's idempotency functions (migration \
         6 keeps them to the role that ran the migrations): GRANT EXECUTE ON FUNCTION \
         {functions} TO \"{role}\""
    )]
    Bookkeeping {
        /// The service's login.
        role: String,
        /// The functions it may not run, comma-separated.
        functions: String,
    },
    /// A query at start-up failed.
    #[error("database error while {doing}: {}", said::said(source))]
    Query {
        /// What we were doing.
        doing: &'static str,
        /// The error.
        source: tokio_postgres::Error,
    },
}

/// The connection string to use: `DATABASE_URL`, else (when libpq's
/// environment names a database, [`environment`]) an empty one.
pub fn url_or_environment(url: Option<&str>) -> Result<&str, StartupError> {
    match url {
        Some(url) => Ok(url),
        None if environment::Environment::of_process().names_a_database() => Ok(""),
        None => Err(StartupError::NoUrl),
    }
}

/// What `url` connects to, what it leaves unsaid taken from libpq's
/// environment ([`environment`]), its TLS options, and the connector they
/// ask for.
pub fn connection_config(
    url: &str,
) -> Result<(tokio_postgres::Config, tls::TlsOptions, MakeRustlsConnect), StartupError> {
    let env = environment::Environment::of_process();
    // tokio-postgres knows only some of libpq's TLS parameters: ours go first.
    let (rest, options) = tls::split_in(url, &env)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(StartupError::BadUrl)?;
    env.complete(&mut config, &rest);
    config.ssl_mode(options.mode.wire());
    let connector = tls::connector(&options)?;
    Ok((config, options, connector))
}

/// One connection a worker for Citus's multi-shard commands (a COPY into a
/// distributed table, a change of many features in one statement), unless
/// the role, the database or the URL's options chose otherwise; nothing
/// where Citus is not loaded. Citus opens up to 16 a worker for such a
/// command and keeps one after the transaction, so every write paid for
/// setting up the others: 20,000 points by COPY took 0.48 s, with one
/// connection a worker 0.075 s, and 100 points 0.39 s against 0.01 s.
const CITUS_POOL: &str = "SELECT set_config(name, '1', false) FROM pg_catalog.pg_settings \
     WHERE name = 'citus.max_adaptive_executor_pool_size' AND source = 'default'";

/// The pool, how long a request may wait for a connection, the database
/// role its SQL runs as, and how often a transaction rolled back by a
/// conflict is run again.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    wait: Duration,
    role: RoleUse,
    retries: u32,
    pooler: Pooler,
    tls: Arc<tls::TlsOptions>,
    connector: MakeRustlsConnect,
    /// Where the pool's connections go, for connections of their own (LISTEN).
    config: Arc<tokio_postgres::Config>,
    /// What writes have been observed to cost on this database.
    costs: Arc<costs::Costs>,
}

/// What sits between the service and PostgreSQL (`FEATUREPIPE_POOLER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing: PostgreSQL itself.
    None,
    /// A pooler in session mode (PgBouncer `pool_mode = session`): one
    /// server connection per client connection, so everything works, but
    /// it takes no startup options.
    Session,
    /// A pooler in transaction mode: each transaction may run on another
    /// server connection, so no statement is named and nothing is set for
    /// the session.
    Transaction,
}

impl Pooler {
    /// Every pooler, by the name `FEATUREPIPE_POOLER` gives it.
    pub const ALL: [(&'static str, Pooler); 3] = [
        ("none", Pooler::None),
        ("session", Pooler::Session),
        ("transaction", Pooler::Transaction),
    ];
}

/// Which database role a handle's connections run as (`[auth] set_role`).
#[derive(Clone, Debug)]
enum RoleUse {
    /// Roles are off: always the service's own.
    Off,
    /// Roles are on but this handle was not bound to a caller: a bug, refused
    /// rather than run with the service's rights.
    Unbound,
    /// This role, or the service's own (`None`).
    As(Option<Arc<str>>),
}

impl Database {
    /// Build a pool of at most `size` connections; requests wait at most `wait` for one.
    /// Each statement may run at most `statement_timeout` (zero: no limit).
    pub fn new(
        url: &str,
        size: usize,
        wait: Duration,
        statement_timeout: Duration,
        pooler: Pooler,
    ) -> Result<Self, StartupError> {
        let (mut config, tls_options, connector) = connection_config(url)?;
        if config.get_application_name().is_none() {
            // So that operators see the service's sessions in pg_stat_activity.
            config.application_name("featurepipe");
        }
        let timeout_ms = statement_timeout.as_millis();
        if !statement_timeout.is_zero() && pooler == Pooler::None {
            // Added to the URL's own options, not in place of them.
            let options = format!(
                "{} -c statement_timeout={}",
                config.get_options().unwrap_or_default(),
                statement_timeout.as_millis()
            );
            config.options(options.trim());
        }
        let manager = Manager::from_connect(
            config.clone(),
            tls::LibpqConnect {
                connector: connector.clone(),
            },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let mut builder = Pool::builder(manager);
        if pooler != Pooler::Transaction {
            // Poolers refuse startup options; in session mode the server
            // connection is this one's for good, so a SET lasts as long.
            // Behind a pooler in transaction mode a session's settings
            // would reach other clients: none is made there.
            let timeout = (pooler == Pooler::Session && !statement_timeout.is_zero())
                .then(|| format!("SET statement_timeout = {timeout_ms}"));
            builder = builder.post_create(Hook::async_fn(move |client, _| {
                let timeout = timeout.clone();
                Box::pin(async move {
                    if let Some(sql) = timeout {
                        client
                            .batch_execute(&sql)
                            .await
                            .map_err(HookError::Backend)?;
                    }
                    // A server without `pg_settings` (not PostgreSQL) is
                    // used as it is.
                    if let Err(e) = client.batch_execute(CITUS_POOL).await {
                        tracing::debug!(error = %e, "the Citus connection setting was not made");
                    }
                    Ok(())
                })
            }));
        }
        let pool = builder
            .max_size(size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(wait))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .expect("a runtime is configured, so building cannot fail");
        Ok(Database {
            pool,
            wait,
            role: RoleUse::Off,
            retries: 0,
            pooler,
            tls: Arc::new(tls_options),
            connector,
            config: Arc::new(config),
            costs: Arc::default(),
        })
    }

    /// Forget every statement prepared and cached on the pool's connections,
    /// for when tables changed: a statement prepared before may no longer
    /// answer what it did. Requests holding one finish with it.
    pub fn clear_statement_caches(&self) {
        self.pool.manager().statement_caches.clear();
    }

    /// The TLS connector of this database's connections, for cancel requests.
    pub fn connector(&self) -> MakeRustlsConnect {
        self.connector.clone()
    }

    /// How this database's statements are prepared: cached on the
    /// connection, unless a transaction-mode pooler forbids naming them.
    pub fn naming(&self) -> Naming {
        match self.pooler {
            Pooler::Transaction => Naming::Unnamed,
            Pooler::None | Pooler::Session => Naming::Cached,
        }
    }

    /// What writes have been observed to cost on this database.
    pub fn costs(&self) -> &Arc<costs::Costs> {
        &self.costs
    }

    /// Run every request's SQL as a role chosen per request ([`Database::as_role`]).
    pub fn with_roles(mut self) -> Self {
        self.role = RoleUse::Unbound;
        self
    }

    /// A handle whose connections run as `role` (`None`: the service's own),
    /// when roles are on.
    pub fn as_role(&self, role: Option<&str>) -> Self {
        let mut db = self.clone();
        if !matches!(self.role, RoleUse::Off) {
            db.role = RoleUse::As(role.map(Arc::from));
        }
        db
    }

    /// The database role SQL runs as, when it is not the service's own.
    pub fn role(&self) -> Option<&str> {
        match &self.role {
            RoleUse::As(Some(role)) => Some(role),
            _ => None,
        }
    }

    /// Run transactions rolled back by a deadlock or a serialization failure
    /// again, at most `retries` times (where the caller says it is safe).
    pub fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// How often a transaction rolled back by a conflict is run again.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The pool's connections: how many, how many are free, how many wait.
    pub fn pool_status(&self) -> deadpool_postgres::Status {
        self.pool.status()
    }

    /// Take a connection, waiting at most the configured time.
    pub async fn connection(&self) -> Result<Object, DbError> {
        let client = self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(_) => DbError::Busy(self.wait),
            e => DbError::Unreachable(e),
        })?;
        self.assume_role(&client).await?;
        Ok(client)
    }

    /// A connection only if one can be had without waiting for another
    /// request to give one back (a new one may be opened), and another
    /// would still be left for the next request: for work that helps a
    /// request but that it can do without.
    pub async fn free_connection(&self) -> Option<Object> {
        let status = self.pool.status();
        if status.max_size - status.size + status.available < 2 {
            return None;
        }
        let now = Timeouts {
            wait: Some(Duration::ZERO),
            ..self.pool.timeouts()
        };
        let client = self.pool.timeout_get(&now).await.ok()?;
        self.assume_role(&client).await.ok()?;
        Some(client)
    }

    /// Set the connection's role for this request. Every checkout sets it
    /// (or resets it), so no role outlives the request that chose it.
    async fn assume_role(&self, client: &Object) -> Result<(), DbError> {
        let role = match &self.role {
            RoleUse::Off => return Ok(()),
            RoleUse::Unbound => return Err(DbError::RoleUnbound),
            RoleUse::As(role) => role,
        };
        // The name comes from a verified credential; quoting keeps it a name.
        let sql = match role {
            Some(role) => format!("SET ROLE {}", quote_ident(role)),
            None => "RESET ROLE".to_owned(),
        };
        round_trips::round_trip();
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| match e.code() {
                Some(code)
                    if *code == SqlState::INVALID_PARAMETER_VALUE
                        || *code == SqlState::UNDEFINED_OBJECT
                        || *code == SqlState::INSUFFICIENT_PRIVILEGE =>
                {
                    DbError::RoleRefused {
                        role: role.as_deref().unwrap_or_default().to_owned(),
                        message: e.as_db_error().map_or("", |d| d.message()).to_owned(),
                    }
                }
                _ => DbError::Query {
                    doing: "choosing the database role",
                    source: e,
                },
            })
    }

    /// Wait until the database answers (retrying for `timeout`), then check PostGIS.
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<Object, StartupError> {
        let started = Instant::now();
        let client = loop {
            let quick = Timeouts {
                wait: Some(Duration::from_secs(5)),
                create: Some(Duration::from_secs(5)),
                recycle: Some(Duration::from_secs(5)),
            };
            let error = match self.pool.timeout_get(&quick).await {
                Ok(client) => break client,
                Err(error) => error,
            };
            // A certificate refused stays refused: say why now, not after the timeout.
            if let PoolError::Backend(e) = &error {
                if let Some(tls) = tls::explain(e, &self.tls) {
                    return Err(tls.into());
                }
            }
            match error {
                // PgBouncer refuses the startup options a direct connection takes.
                PoolError::Backend(e)
                    if e.as_db_error()
                        .is_some_and(|d| d.message().contains("unsupported startup parameter")) =>
                {
                    let message = e.as_db_error().map_or("", |d| d.message()).to_owned();
                    return Err(StartupError::Pooler(message));
                }
                e if started.elapsed() >= timeout => {
                    return Err(StartupError::Unreachable {
                        waited: started.elapsed(),
                        source: e,
                    })
                }
                e => {
                    let e = said::pool_said(&e);
                    tracing::warn!("database not reachable yet ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        // Unnamed, as a transaction-mode pooler needs.
        let postgis = client
            .query_typed_opt(
                "SELECT extversion FROM pg_extension WHERE extname = 'postgis'",
                &[],
            )
            .await
            .map_err(|source| StartupError::Query {
                doing: "checking for PostGIS",
                source,
            })?;
        match postgis {
            Some(row) => tracing::info!(postgis = row.get::<_, String>(0), "database ready"),
            None => return Err(StartupError::NoPostgis),
        }
        Ok(client)
    }

    /// Whether a connection can be taken and answers a query now.
    pub async fn is_ready(&self) -> Result<(), DbError> {
        let client = self.connection().await?;
        round_trips::round_trip();
        client
            .simple_query("SELECT 1")
            .await
            .map(|_| ())
            .map_err(DbError::NoAnswer)
    }
}

/// Quote an identifier taken from the catalog (never from a request).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
