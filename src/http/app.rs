//! Shared state and router assembly.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Uri};
use axum::routing::get;
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use super::cors::{self, Cors};
use super::problem::{ApiError, StaleCatalog, Wrong};
use super::settings_file::{LiveAuth, SettingsFile};
use super::{encoding, item};
use crate::auth::{Auth, Caller, JwtChecks, JwtKeys};
use crate::catalog::live::{Follow, LiveCatalog, Observer, Reload};
use crate::catalog::settings::Settings;
use crate::catalog::{Catalog, Collection};
use crate::changes::Feeds;
use crate::config::Config;
use crate::db::{migrate, Database, Pooler, StartupError};
use crate::error::Error;
use crate::feature::InputLimits;
use crate::read::extent::ExtentCache;
use crate::write::WriteOptions;

/// Everything a request handler needs.
#[derive(Clone)]
pub struct AppState {
    /// The connection pool.
    pub db: Database,
    /// Published collections, read again when the tables change
    /// ([`AppState::catalog`] is the snapshot a request works with).
    pub live_catalog: Arc<LiveCatalog>,
    /// How writes are carried out.
    pub write: WriteOptions,
    /// Largest accepted request body, in bytes.
    pub max_body: usize,
    /// Memory shared by the bodies of all requests.
    pub body_room: super::body::BodyRoom,
    /// Bodies larger than this are written as they arrive (atomic mode).
    pub stream_after: usize,
    /// The URL clients reach the service at, for links; else taken from `Host`.
    pub public_url: Option<String>,
    /// How long Idempotency-Keys are remembered.
    pub idempotency_ttl: std::time::Duration,
    /// Limits on what one request body may hold.
    pub input_limits: InputLimits,
    /// How long a request body may take to arrive.
    pub upload_timeout: std::time::Duration,
    /// How long a client may take to send a request's headers.
    pub header_timeout: std::time::Duration,
    /// Longest a request may take (zero: no limit).
    pub request_timeout: std::time::Duration,
    /// `/metrics` is on an address of its own, not the API's.
    pub metrics_apart: bool,
    /// Who may do what (replaced when the settings file is read again).
    pub auth: Arc<LiveAuth>,
    /// The settings file, read again on SIGHUP and when it changes.
    pub settings_file: Option<Arc<SettingsFile>>,
    /// Collection extents, computed at most once per refresh interval.
    pub extents: Arc<ExtentCache>,
    /// The XYZ template of the web pages' basemap (none: a plain background).
    pub basemap_url: Option<String>,
    /// Cross-origin requests from these web origins (none: no CORS).
    pub cors: Option<Arc<Cors>>,
    /// The wake-ups and pruning of the change feeds.
    pub changes: Arc<Feeds>,
}

impl AppState {
    /// Connect (retrying), check PostGIS, migrate, and load the catalog.
    pub async fn start(config: &Config) -> Result<Self, StartupError> {
        let url = crate::db::url_or_environment(config.db.database_url.as_deref())?;
        let db = Database::new(
            url,
            config.pool_size,
            config.pool_wait,
            config.statement_timeout,
            config.db.pooler,
        )?
        .with_retries(config.retries);
        let mut client = db.wait_until_ready(config.db.startup_timeout).await?;
        migrate::run(&mut client).await?;
        migrate::check_bookkeeping_rights(&client).await?;
        let settings = match &config.settings {
            Some(path) => Settings::load(path).map_err(StartupError::Settings)?,
            None => Settings::default(),
        };
        let auth = Arc::new(LiveAuth::new(
            auth(config, &settings).map_err(StartupError::Auth)?,
        ));
        if !config.auth {
            tracing::warn!("FEATUREPIPE_AUTH=off: anyone who can reach the service may read and write every collection");
        }
        let settings_file = SettingsFile::of(config, &settings);
        if settings.auth.set_role && config.auth && config.db.pooler == Pooler::Transaction {
            return Err(StartupError::Auth(
                "[auth] set_role needs a session of its own, which a transaction-mode pooler \
                 (FEATUREPIPE_POOLER=transaction) does not give"
                    .into(),
            ));
        }
        let db = if settings.auth.set_role && config.auth {
            db.with_roles()
        } else {
            db
        };
        let extents = Arc::<ExtentCache>::default();
        let feeds = settings.collections.values().any(|c| c.changes);
        let follow = Follow {
            // The catalog is what the service's own role may see.
            db: db.as_role(None),
            schemas: config.schemas.clone(),
            settings,
            poll: config.catalog_poll,
            // A transaction-mode pooler hands each transaction another server
            // connection, where nobody listens: only polling works there.
            listen: config.catalog_listen && config.db.pooler != Pooler::Transaction,
        };
        let live_catalog =
            Arc::new(LiveCatalog::start(&mut client, follow, observer(extents.clone())).await?);
        if let Some(file) = &settings_file {
            file.clone()
                .watch(auth.clone(), live_catalog.clone(), SETTINGS_POLL);
        }
        // Transaction-mode poolers: no LISTEN, so long polls look again now and then.
        let listen = config.db.pooler != Pooler::Transaction;
        let service = db.as_role(None);
        let changes = Feeds::start(&service, feeds, listen, config.changes_retention).await;
        tracing::info!(
            collections = live_catalog.current().collections().count(),
            schemas = ?config.schemas,
            "catalog loaded"
        );
        Ok(AppState {
            db,
            live_catalog,
            write: config.write_options(),
            max_body: config.max_body,
            body_room: super::body::BodyRoom::new(config.body_memory, config.pool_wait),
            stream_after: config.stream_after,
            public_url: config.public_url.clone(),
            idempotency_ttl: config.idempotency_ttl,
            input_limits: config.input_limits(),
            upload_timeout: config.upload_timeout,
            header_timeout: config.header_timeout,
            request_timeout: config.request_timeout,
            metrics_apart: config.metrics_listen.is_some(),
            auth,
            settings_file,
            extents,
            basemap_url: config.basemap_url.clone(),
            cors: Cors::new(&config.cors_origins),
            changes: Arc::new(changes),
        })
    }

    /// The catalog as it is now: a request that takes it keeps it to its end.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.live_catalog.current()
    }

    /// Read the catalog again now (its settings as in force).
    pub fn reload_catalog(&self) {
        self.live_catalog.reload_now();
    }

    /// Read the settings file and the catalog again now (SIGHUP); the
    /// settings in force stay when the file's cannot be taken.
    pub async fn reload(&self) {
        match &self.settings_file {
            Some(file) => {
                file.reload_and_log("SIGHUP", &self.auth, &self.live_catalog)
                    .await
            }
            None => self.reload_catalog(),
        }
    }

    /// This state with SQL run as `caller`'s database role (`[auth] set_role`).
    pub fn for_caller(&self, caller: &Caller) -> AppState {
        let mut state = self.clone();
        state.db = self.db.as_role(caller.role.as_deref());
        state
    }

    /// The collection with this id if `caller` may read it: else 401/403, or 404.
    pub fn to_read(&self, caller: &Caller, id: &str) -> Result<Arc<Collection>, ApiError> {
        // Rights first, so that the answer says nothing of what exists.
        caller.check_read(id)?;
        self.collection(id)
    }

    /// The collection with this id if `caller` may write it: else 401/403, or 404.
    pub fn to_write(&self, caller: &Caller, id: &str) -> Result<Arc<Collection>, ApiError> {
        caller.check_write(id)?;
        self.collection(id)
    }

    /// The collection with this id if `caller` may read or write it (for
    /// OPTIONS): else 401/403, or 404.
    pub fn to_see(&self, caller: &Caller, id: &str) -> Result<Arc<Collection>, ApiError> {
        if !caller.can_write(id) {
            caller.check_read(id)?;
        }
        self.collection(id)
    }

    /// The collection with this id, or a 404.
    pub fn collection(&self, id: &str) -> Result<Arc<Collection>, ApiError> {
        self.catalog()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::unknown_collection(id).into())
    }
}

/// What a reload changes besides the catalog: its count in the metrics,
/// and the extents of the collections that changed.
fn observer(extents: Arc<ExtentCache>) -> Observer {
    Box::new(move |reload| {
        crate::http::telemetry::count_catalog_reload(reload);
        if let Reload::Changed(changed) = reload {
            extents.forget(changed);
        }
    })
}

/// How often the settings file is looked at for changes.
const SETTINGS_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The credentials of `config` and the settings file.
pub(super) fn auth(config: &Config, settings: &Settings) -> Result<Auth, String> {
    let pem = match &config.jwt_public_key {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| format!("FEATUREPIPE_JWT_PUBLIC_KEY {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let jwt = JwtKeys::new(
        config.jwt_secret.as_deref(),
        pem.as_deref(),
        JwtChecks {
            audience: settings.auth.audience.clone(),
            issuer: settings.auth.issuer.clone(),
            leeway: settings.auth.jwt_leeway,
        },
    )?;
    Auth::new(config.auth, settings, jwt)
}

/// The HTTP API.
pub fn router(state: AppState) -> Router {
    crate::http::telemetry::recorder();
    let (routes, _) = super::openapi::routes().split_for_parts();
    let deadline = state.request_timeout;
    let routes = match state.metrics_apart {
        true => routes,
        false => routes.route("/metrics", get(crate::http::telemetry::metrics)),
    };
    let routes = routes
        // The documentation page's vendored assets (not API operations).
        .route("/api/swagger-ui-bundle.js", get(super::openapi::swagger_js))
        .route("/api/swagger-ui.css", get(super::openapi::swagger_css))
        .route("/api/swagger-init.js", get(super::openapi::swagger_init))
        // The web pages' script and style files.
        .route("/assets/{name}", get(super::html::assets::asset))
        // Ids with `/` as clients such as QGIS put them in the URL, raw
        // (`items/A/1`); percent-encoded ones (`items/A%2F1`) match the
        // documented route already.
        .route(
            item::RAW_SLASHES,
            get(item::get)
                .put(item::put)
                .patch(item::patch)
                .delete(item::delete)
                .options(item::options),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    let routes = guarded(routes, deadline)
        .layer(encoding::decompression())
        .layer(encoding::compression())
        .layer(axum::middleware::from_fn(encoding::tag_codings));
    let routes = match state.cors.clone() {
        Some(cors) => routes.layer(axum::middleware::from_fn_with_state(cors, cors::handle)),
        None => routes,
    };
    let stale = axum::middleware::from_fn_with_state(state.clone(), reload_when_stale);
    let written = axum::middleware::from_fn_with_state(state.clone(), extents_after_writes);
    // No answer is to be sniffed into another type (a JSON body into HTML).
    let nosniff = SetResponseHeaderLayer::if_not_present(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    routes
        .layer(written)
        .layer(stale)
        .layer(axum::middleware::from_fn(crate::http::telemetry::observe))
        .layer(nosniff)
        .with_state(state)
}

/// `/metrics` alone, for `FEATUREPIPE_METRICS_LISTEN`.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(crate::http::telemetry::metrics))
        .with_state(state)
}

/// After a write (that may have committed), the extent of the collection it wrote
/// (of every collection, after an edit session) is computed again before
/// it is next shown: clients such as QGIS check the features they read
/// against it.
async fn extents_after_writes(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let writes = !request.method().is_safe();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    // Whatever the answer: a write may have committed and still end in an
    // error (a trigger skipped a row after COMMIT, an outcome unknown).
    if writes {
        let mut parts = path.trim_start_matches('/').split('/');
        match (parts.next(), parts.next()) {
            (Some("collections"), Some(id)) => {
                let id = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
                state.extents.written(Some(&id));
            }
            (Some("transactions"), _) => state.extents.written(None),
            _ => {}
        }
    }
    response
}

/// Read the catalog again at once when an answer says it is older than the
/// tables (a column retyped, a table dropped): the client was told 503 with
/// Retry-After, and its retry meets the new catalog.
async fn reload_when_stale(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    if response.extensions().get::<StaleCatalog>().is_some() {
        state.reload_catalog();
    }
    response
}

/// `routes` with every request bounded by `deadline` (zero: none) and a
/// handler's panic answered as a 500; [`router`] serves the API this way.
pub fn guarded<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    deadline: std::time::Duration,
) -> Router<S> {
    routes
        .layer(CatchPanicLayer::custom(super::guard::panicked))
        .layer(axum::middleware::from_fn(
            move |request, next: axum::middleware::Next| {
                super::guard::deadline(deadline, request, next)
            },
        ))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(Wrong::NotFound, format!("no resource at {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        Wrong::MethodNotAllowed,
        format!("{method} is not supported on {}", uri.path()),
    )
}
