//! The catalog that requests see, kept current while the service runs: it
//! is read again when the published tables' definitions change (a
//! fingerprint polled), on `NOTIFY featurepipe_reload`, and when asked
//! ([`LiveCatalog::reload_now`], which SIGHUP calls).
//!
//! A reload replaces the whole catalog at once: a request holds the
//! snapshot it started with to its end, the next one sees the new catalog.
//! A reload that fails leaves the catalog in use as it is. New collection
//! settings ([`LiveCatalog::try_settings`]) are taken only with a catalog
//! read with them; else the settings in force stay.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use deadpool_postgres::ClientWrapper;
use tokio::sync::{oneshot, Notify};
use tokio::time::{Interval, MissedTickBehavior};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, IsolationLevel};
use tokio_util::task::AbortOnDropHandle;

use super::settings::Settings;
use super::Catalog;
use crate::db::listen::{self, Heard, Listening};
use crate::db::{Database, DbError, StartupError};

/// The channel whose notifications reload the catalog at once.
pub const RELOAD_CHANNEL: &str = "featurepipe_reload";

/// The least time between two reloads that were asked for: any role may
/// `NOTIFY featurepipe_reload`, and a burst of them is one reload (the
/// asks that come meanwhile are folded into the next).
pub const RELOAD_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// How the catalog follows the database.
pub struct Follow {
    /// The database, with SQL run as the service's own role.
    pub db: Database,
    /// The published schemas.
    pub schemas: Vec<String>,
    /// The settings file, as read at start-up (then [`LiveCatalog::try_settings`]).
    pub settings: Settings,
    /// How often the fingerprint is compared (zero: never).
    pub poll: Duration,
    /// Whether to `LISTEN` on [`RELOAD_CHANNEL`].
    pub listen: bool,
}

/// What came of one reload, for whoever counts and caches per collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload<'a> {
    /// A new catalog is in use; these collections changed, appeared or went.
    Changed(&'a [String]),
    /// The catalog read was the same as the one in use.
    Unchanged,
    /// The reload failed; the catalog in use stays.
    Failed,
}

/// Told of every reload.
pub type Observer = Box<dyn Fn(Reload<'_>) + Send + Sync>;

/// Why a reload failed.
#[derive(Debug, thiserror::Error)]
enum ReloadError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Load(#[from] StartupError),
}

/// The catalog in use, and the task that keeps it current (stopped when
/// this is dropped).
pub struct LiveCatalog {
    shared: Arc<Shared>,
    _follower: AbortOnDropHandle<()>,
}

struct Shared {
    current: RwLock<Arc<Catalog>>,
    reload_now: Notify,
    /// The settings the catalog is read with.
    settings: RwLock<Arc<Settings>>,
    /// Settings to try at the next reload, and who waits to hear how it went.
    candidate: Mutex<Option<Candidate>>,
}

/// Settings offered to the catalog, taken only if it can be read with them.
struct Candidate {
    settings: Settings,
    answer: oneshot::Sender<Result<(), String>>,
}

impl Shared {
    fn current(&self) -> Arc<Catalog> {
        self.current.read().expect("no panics while locked").clone()
    }
}

impl LiveCatalog {
    /// Read the catalog on `client`, then keep it current as `follow` says,
    /// telling `observe` of each reload. The `LISTEN` is in place before
    /// this returns (when it can be: else it is tried again in the background).
    pub async fn start(
        client: &mut ClientWrapper,
        mut follow: Follow,
        observe: Observer,
    ) -> Result<Self, StartupError> {
        let reading = read(client, &follow.schemas, &follow.settings).await?;
        let (fingerprint, catalog) = (reading.fingerprint, reading.catalog?);
        let shared = Arc::new(Shared {
            current: RwLock::new(Arc::new(catalog)),
            reload_now: Notify::new(),
            settings: RwLock::new(Arc::new(std::mem::take(&mut follow.settings))),
            candidate: Mutex::new(None),
        });
        let listening = match follow.listen {
            true => follow.db.listen_or_warn(RELOAD_CHANNEL).await,
            false => None,
        };
        let follower = Follower {
            shared: shared.clone(),
            follow,
            observe,
            seen: Some(fingerprint),
        };
        Ok(LiveCatalog {
            shared,
            _follower: AbortOnDropHandle::new(tokio::spawn(follower.run(listening))),
        })
    }

    /// The catalog in use now: a request keeps this snapshot to its end.
    pub fn current(&self) -> Arc<Catalog> {
        self.shared.current()
    }

    /// Read the catalog again now, changed or not.
    pub fn reload_now(&self) {
        self.shared.reload_now.notify_one();
    }

    /// Read the catalog again now with `settings`, and keep them if it can
    /// be read with them; else say why, and keep the settings in force.
    pub async fn try_settings(&self, settings: Settings) -> Result<(), String> {
        let (answer, answered) = oneshot::channel();
        let candidate = Candidate { settings, answer };
        // A candidate not yet tried gives way to the newer one.
        *self
            .shared
            .candidate
            .lock()
            .expect("no panics while locked") = Some(candidate);
        self.reload_now();
        answered
            .await
            .unwrap_or_else(|_| Err("newer settings were offered meanwhile".into()))
    }
}

/// What one reading of the catalog found.
struct Reading {
    /// The fingerprint of the definitions read.
    fingerprint: String,
    /// The catalog read from them, or why it could not be.
    catalog: Result<Catalog, StartupError>,
}

/// Read the fingerprint and the catalog in one snapshot (an error: not even
/// the fingerprint could be read).
async fn read(
    client: &mut ClientWrapper,
    schemas: &[String],
    settings: &Settings,
) -> Result<Reading, StartupError> {
    let failed = |source| StartupError::Query {
        doing: "loading the catalog",
        source,
    };
    // One snapshot for both, the fingerprint first: a change made after it
    // shows in the next fingerprint. And one transaction, because behind a
    // transaction-mode pooler a statement and its execution must reach the
    // same server connection.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await
        .map_err(failed)?;
    let mut fingerprint = fingerprint(&*tx, schemas).await.map_err(failed)?;
    let mut catalog = Catalog::load(&*tx, schemas, settings).await;
    if let Ok(loaded) = &mut catalog {
        let installing = loaded.install_feeds(&*tx).await?;
        // The triggers of change feeds change the fingerprint: read again,
        // the same snapshot with this transaction's own DDL, so that they
        // do not look like a change of the tables.
        if installing.made {
            fingerprint = self::fingerprint(&*tx, schemas).await.map_err(failed)?;
        }
        // A feed whose table was busy: the next poll sees another
        // fingerprint, and reads (and installs) again.
        if installing.again {
            fingerprint.push_str(" and a change feed to install");
        }
        tx.commit().await.map_err(failed)?;
    }
    Ok(Reading {
        fingerprint,
        catalog,
    })
}

/// The fingerprint of the published tables' definitions (`fingerprint.sql`).
async fn fingerprint(
    client: &impl GenericClient,
    schemas: &[String],
) -> Result<String, tokio_postgres::Error> {
    // Unnamed: one round trip, and nothing left prepared on the connection.
    let row = client
        .query_typed_one(
            include_str!("fingerprint.sql"),
            &[(&schemas, Type::TEXT_ARRAY)],
        )
        .await?;
    let fingerprint: String = row.get(0);
    // A table distributed since the catalog was read is read again: its
    // writes change (src/catalog/citus.rs).
    match row.get::<_, bool>(1) {
        true => Ok(fingerprint + &super::citus::fingerprint(client).await?),
        false => Ok(fingerprint),
    }
}

/// The task that keeps the catalog current.
struct Follower {
    shared: Arc<Shared>,
    follow: Follow,
    observe: Observer,
    /// The fingerprint last acted on: of the catalog in use, or of
    /// definitions the settings do not fit (not read again until they
    /// change); `None` after any other failure, so the next poll reads again.
    seen: Option<String>,
}

impl Follower {
    async fn run(mut self, listening: Option<Listening>) {
        let relay = match self.follow.listen {
            true => Some(relay(
                self.follow.db.clone(),
                self.shared.clone(),
                listening,
            )),
            false => None,
        };
        let follow = async {
            let mut ticks = (!self.follow.poll.is_zero()).then(|| {
                let poll = self.follow.poll;
                let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
                ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
                ticks
            });
            let mut last_asked: Option<tokio::time::Instant> = None;
            loop {
                let asked = tokio::select! {
                    () = self.shared.reload_now.notified() => true,
                    () = tick(&mut ticks) => false,
                };
                if asked {
                    // Notify keeps one permit: asks during the wait are this reload.
                    if let Some(last) = last_asked {
                        tokio::time::sleep_until(last + RELOAD_AT_MOST_EVERY).await;
                    }
                    last_asked = Some(tokio::time::Instant::now());
                }
                if asked || self.definitions_changed().await {
                    self.reload().await;
                }
            }
        };
        match relay {
            Some(relay) => tokio::join!(follow, relay).0,
            None => follow.await,
        }
    }

    /// Whether the fingerprint differs from the one last acted on (a
    /// fingerprint that cannot be read is logged, and taken as no change).
    async fn definitions_changed(&mut self) -> bool {
        let read = async {
            let client = self.follow.db.connection().await?;
            fingerprint(&**client, &self.follow.schemas)
                .await
                .map_err(|source| DbError::Query {
                    doing: "reading the catalog's fingerprint",
                    source,
                })
        };
        match read.await {
            Ok(fingerprint) => self.seen.as_ref() != Some(&fingerprint),
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether the tables changed");
                false
            }
        }
    }

    /// Read the catalog and put it in use; on failure keep the one in use.
    /// With settings offered, read with them, and take them only if that
    /// succeeds.
    async fn reload(&mut self) {
        let candidate = self
            .shared
            .candidate
            .lock()
            .expect("no panics while locked")
            .take();
        if let Some(Candidate { settings, answer }) = candidate {
            let settings = Arc::new(settings);
            let tried = self.reload_with(&settings).await;
            if tried.is_ok() {
                *self
                    .shared
                    .settings
                    .write()
                    .expect("no panics while locked") = settings;
            }
            let _ = answer.send(tried);
            return;
        }
        let settings = self
            .shared
            .settings
            .read()
            .expect("no panics while locked")
            .clone();
        let _ = self.reload_with(&settings).await;
    }

    /// Read the catalog with `settings` and put it in use; on failure keep
    /// the one in use, and say why.
    async fn reload_with(&mut self, settings: &Settings) -> Result<(), String> {
        let reading = async {
            let mut client = self.follow.db.connection().await?;
            Ok::<_, ReloadError>(read(&mut client, &self.follow.schemas, settings).await?)
        };
        let failure = match reading.await {
            Ok(Reading {
                fingerprint,
                catalog: Ok(catalog),
            }) => {
                self.seen = Some(fingerprint);
                self.put_in_use(catalog);
                return Ok(());
            }
            Ok(Reading {
                fingerprint,
                catalog: Err(e),
            }) => {
                // Definitions the settings do not fit are read again only
                // once they change; after a fault of the database, at the
                // next poll.
                self.seen = matches!(e, StartupError::Settings(_)).then_some(fingerprint);
                ReloadError::Load(e)
            }
            Err(e) => {
                self.seen = None;
                e
            }
        };
        tracing::error!(error = %failure, "reloading the catalog failed; the catalog in use stays");
        (self.observe)(Reload::Failed);
        Err(failure.to_string())
    }

    /// Use `catalog` from the next request on, unless it is the same.
    fn put_in_use(&self, catalog: Catalog) {
        let (catalog, changed) = catalog.keeping_unchanged(&self.shared.current());
        if changed.is_empty() {
            (self.observe)(Reload::Unchanged);
            return;
        }
        let collections = catalog.collections().count();
        *self.shared.current.write().expect("no panics while locked") = Arc::new(catalog);
        // After the swap: a statement cached from now on is prepared on the
        // tables as they are, whichever catalog its request holds.
        self.follow.db.clear_statement_caches();
        tracing::info!(?changed, collections, "catalog reloaded");
        (self.observe)(Reload::Changed(&changed));
    }
}

/// The next poll, or never when polling is off.
async fn tick(ticks: &mut Option<Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Turn each notification on [`RELOAD_CHANNEL`] into a reload; when the
/// connection is made again after a loss, reload too, for the notifications
/// missed meanwhile.
async fn relay(db: Database, shared: Arc<Shared>, listening: Option<Listening>) {
    listen::relay(db, RELOAD_CHANNEL, listening, |heard| {
        if heard != Heard::Lost {
            shared.reload_now.notify_one();
        }
    })
    .await
}
