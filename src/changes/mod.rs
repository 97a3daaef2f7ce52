//! Change feeds: what changed in a collection since a client's cursor, for
//! clients that keep a copy (offline field apps, live maps). The triggers
//! that log every change are installed with the catalog
//! ([`crate::catalog::feed`]); this reads the log, waits for changes, and
//! prunes it. docs/offline-sync.md explains why the cursor is safe.

pub mod cursor;
mod horizon;
mod page;
pub mod prune;
pub mod wakeups;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::catalog::{ChangeFeed, Collection};
use crate::db::Database;
use crate::error::{Error, ErrorKind};
use crate::geometry::Crs;
use crate::read::filter::Filter;
use crate::read::{Encoding, StoredFeature};
pub use cursor::Cursor;
use horizon::HorizonWatch;
pub use page::check_cursor;
use wakeups::{Wakeups, RECHECK};

/// The longest a long poll waits (`wait`).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// One feature that changed: as it is now, or gone.
#[derive(Debug)]
pub struct Change {
    /// Its id, as JSON, as items answer it (a number for integer keys).
    pub id: String,
    /// The feature now; `None` when it is deleted (or the caller's role may
    /// not see it any more).
    pub feature: Option<StoredFeature>,
}

/// The changes after a cursor.
#[derive(Debug)]
pub struct Page {
    /// Each changed feature once, in the order of its last change here.
    pub changes: Vec<Change>,
    /// Where the next page starts.
    pub cursor: Cursor,
    /// The limit cut the page short: ask again at once.
    pub more: bool,
}

/// The most long polls that wait at once: past it, a long poll is a 503
/// (each holds a request open, and the wake-up of all of them at once
/// reads the database once each).
pub const MAX_LONG_POLLS: usize = 4096;

/// What the service keeps running for its change feeds: the wake-ups of
/// long polls, one watcher of the horizon for those held back, and the
/// pruning of the log.
pub struct Feeds {
    wakeups: Wakeups,
    horizon: HorizonWatch,
    long_polls: Arc<Semaphore>,
    _pruning: Option<AbortOnDropHandle<()>>,
}

impl Feeds {
    /// Start them for `db` (run as the service's role), when any collection
    /// may have a feed (`any`): `LISTEN` when `listen`, and prune to `retention`.
    pub async fn start(db: &Database, any: bool, listen: bool, retention: Duration) -> Feeds {
        Feeds {
            wakeups: Wakeups::start(db, any && listen).await,
            horizon: HorizonWatch::start(db),
            long_polls: Arc::new(Semaphore::new(MAX_LONG_POLLS)),
            _pruning: any.then(|| prune::every_interval(db.clone(), retention)),
        }
    }
}

impl Feeds {
    /// How many requests wait for changes now (long polls, or reads about to).
    pub fn waiting(&self) -> usize {
        self.wakeups.waiting()
    }

    /// How many long polls wait now, found no change and hold a place.
    pub fn long_polls(&self) -> usize {
        MAX_LONG_POLLS - self.long_polls.available_permits()
    }
}

/// The table whose log holds the feed of `coll`: 404 for a collection
/// without a feed, 503 for one whose feed could not be installed.
pub fn relid(coll: &Collection) -> Result<u32, Error> {
    match &coll.changes {
        ChangeFeed::On { relid } => Ok(*relid),
        ChangeFeed::Off => Err(Error::new(
            ErrorKind::NoChangeFeed,
            format!(
                "collection '{}' publishes no change feed (changes = true in its settings)",
                coll.id
            ),
        )),
        ChangeFeed::NotInstalled(_) => Err(Error::new(
            ErrorKind::FeedNotInstalled,
            format!(
                "the change feed of '{}' is not installed; the service's log says what to run",
                coll.id
            ),
        )),
    }
}

/// The cursor for "now" of the feed of `coll` (of its features that match
/// `filter`, if given): a new client takes it, then downloads them.
pub async fn now(
    db: &Database,
    coll: &Collection,
    filter: Option<&Filter>,
) -> Result<Cursor, Error> {
    page::now(db, coll, filter, relid(coll)?).await
}

/// What to read: the collection, the position, how much, in which CRS.
#[derive(Debug, Clone, Copy)]
pub struct Follow<'a> {
    /// The collection.
    pub coll: &'a Collection,
    /// Where the client is.
    pub cursor: Cursor,
    /// Most log entries per page.
    pub limit: i64,
    /// The CRS of the features' geometries.
    pub crs: &'a Crs,
    /// GeoJSON or JSON-FG features.
    pub encoding: Encoding,
    /// Only the features that match it: a changed feature that does not
    /// (any more) is a delete. The cursor is bound to it.
    pub filter: Option<&'a Filter>,
}

/// The changes after `follow.cursor`; when there are none yet, wait up to
/// `wait` for one to be committed.
pub async fn changes(
    db: &Database,
    feeds: &Feeds,
    follow: Follow<'_>,
    wait: Duration,
) -> Result<Page, Error> {
    let relid = relid(follow.coll)?;
    check_cursor(&follow.cursor, follow.coll, follow.filter, relid)?;
    let deadline = Instant::now() + wait.min(MAX_WAIT);
    let mut cursor = follow.cursor;
    let mut waiting = None;
    loop {
        // Before reading: a commit from now on wakes this waiter.
        let mut wakeup = feeds.wakeups.subscribe(relid);
        let (page, held_back) = page::since(db, follow, relid, cursor).await?;
        if !page.changes.is_empty() || Instant::now() >= deadline {
            return Ok(page);
        }
        if waiting.is_none() {
            waiting = Some(feeds.long_polls.clone().try_acquire_owned().map_err(|_| {
                Error::new(
                    ErrorKind::TooManyLongPolls,
                    format!(
                        "{MAX_LONG_POLLS} long polls wait already: ask again later, or without wait"
                    ),
                )
            })?);
        }
        cursor = page.cursor;
        // Without LISTEN no notification comes: look again soon.
        let recheck = match wakeup.listening() {
            true => deadline,
            false => Instant::now() + RECHECK,
        };
        // Held back changes come out when an older transaction ends, which
        // notifies nobody: the horizon's watcher says when.
        let released = async {
            match held_back {
                Some(tx) => feeds.horizon.past(tx).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = wakeup.changed() => {}
            () = released => {}
            () = tokio::time::sleep_until(recheck.min(deadline)) => {}
        }
    }
}
