//! Collection extents, computed at most once per collection, role and
//! [`EXTENT_REFRESH`]: where PostgreSQL has no estimate (geography columns,
//! tables never analyzed) the extent is a scan of the whole table, and
//! `GET /collections` would otherwise run one per collection per request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::catalog::Collection;
use crate::db::Database;
use crate::error::{Error, ErrorKind, Refusal};

/// How long an extent is served before it is computed again.
pub const EXTENT_REFRESH: Duration = Duration::from_secs(300);

/// An extent in CRS84, `None` for an empty table.
type Bbox = Option<[f64; 4]>;

/// The last extent of one collection as one role sees it, and when it was taken.
type Slot = Arc<tokio::sync::Mutex<Option<(Instant, Bbox)>>>;

/// Extents by collection id and database role (row security may hide rows
/// from some roles, so one role's extent is not shown to another).
#[derive(Default, Debug)]
pub struct ExtentCache {
    slots: Mutex<HashMap<(String, Option<String>), Slot>>,
    /// Collections the service has written since it started (`true`:
    /// every one, after an edit session): their statistics may not know
    /// the new rows (autovacuum analyzes later), so their extents are
    /// computed rather than estimated.
    written: Mutex<(HashSet<String>, bool)>,
}

impl ExtentCache {
    /// The collection's extent: from the cache while fresh, else computed.
    /// Requests that find it stale at once wait for one computation.
    pub async fn extent(&self, db: &Database, coll: &Collection) -> Result<Bbox, Error> {
        let key = (coll.id.clone(), db.role().map(str::to_owned));
        let slot = self
            .slots
            .lock()
            .expect("no panics while locked")
            .entry(key)
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        if let Some((at, bbox)) = *last {
            if at.elapsed() < EXTENT_REFRESH {
                return Ok(bbox);
            }
        }
        let exact = {
            let (ids, every) = &*self.written.lock().expect("no panics while locked");
            *every || ids.contains(&coll.id)
        };
        let bbox = match super::extent(db, coll, exact).await {
            Ok(bbox) => bbox,
            // A row no CRS84 box can hold (stored by another program far
            // outside its CRS) must not take the collection list down:
            // served without an extent, which is optional, until the next try.
            Err(e) if matches!(e.kind(), ErrorKind::Refused(r) if r != Refusal::Busy) => {
                tracing::warn!(collection = %coll.id, error = %e, "the extent cannot be computed; served without one");
                None
            }
            Err(e) => return Err(e),
        };
        *last = Some((Instant::now(), bbox));
        Ok(bbox)
    }

    /// The service has written `collection` (`None`: any, by an edit
    /// session): its extent is computed again, exactly, when next asked for.
    pub fn written(&self, collection: Option<&str>) {
        let mut slots = self.slots.lock().expect("no panics while locked");
        let (ids, every) = &mut *self.written.lock().expect("no panics while locked");
        match collection {
            Some(id) => {
                ids.insert(id.to_owned());
                slots.retain(|(slot, _), _| slot != id);
            }
            None => {
                *every = true;
                slots.clear();
            }
        }
    }

    /// Drop the extents of these collections (their tables changed), for
    /// every role; a computation under way finishes into a slot no longer kept.
    pub fn forget(&self, collections: &[String]) {
        self.slots
            .lock()
            .expect("no panics while locked")
            .retain(|(id, _), _| !collections.contains(id));
    }
}
