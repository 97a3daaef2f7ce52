//! One watcher of the snapshot horizon for every long poll whose changes
//! are held back by an older open transaction. Such a transaction's end
//! notifies nobody, so someone must look; one task looks for all of them,
//! backing off while the horizon stands still, so that a thousand waiters
//! cost the database what one does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::task::AbortOnDropHandle;

use crate::db::Database;

/// How soon the horizon is read again after it moved.
pub const FIRST_LOOK: Duration = Duration::from_millis(500);
/// The longest wait between two looks, while the horizon stands still.
pub const LAST_LOOK: Duration = Duration::from_secs(2);

/// The horizon, as last read, for whoever waits for it to pass a transaction.
pub struct HorizonWatch {
    sender: Arc<watch::Sender<u64>>,
    wanted: Arc<Notify>,
    _task: AbortOnDropHandle<()>,
}

impl HorizonWatch {
    /// Watch the horizon on `db`'s connections while anyone waits.
    pub fn start(db: &Database) -> HorizonWatch {
        let sender = Arc::new(watch::Sender::new(0));
        let wanted = Arc::new(Notify::new());
        let task = tokio::spawn(watch(db.clone(), sender.clone(), wanted.clone()));
        HorizonWatch {
            sender,
            wanted,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// Until the horizon is past transaction `tx`: every change `tx` logged
    /// can be read then.
    pub async fn past(&self, tx: u64) {
        let mut horizon = self.sender.subscribe();
        self.wanted.notify_one();
        // The watcher is stopped only with the service.
        let _ = horizon.wait_for(|&h| h > tx).await;
    }
}

/// Read the horizon while someone waits for it: at once when asked, then
/// ever less often while it does not move.
async fn watch(db: Database, sender: Arc<watch::Sender<u64>>, wanted: Arc<Notify>) {
    let mut pause = FIRST_LOOK;
    loop {
        if sender.receiver_count() == 0 {
            wanted.notified().await;
            pause = FIRST_LOOK;
            continue;
        }
        match read(&db).await {
            Ok(horizon) => {
                let moved = sender.send_if_modified(|seen| {
                    let moved = horizon > *seen;
                    *seen = (*seen).max(horizon);
                    moved
                });
                pause = match moved {
                    true => FIRST_LOOK,
                    false => (pause * 2).min(LAST_LOOK),
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the snapshot horizon for long polls");
                pause = LAST_LOOK;
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// The horizon now: every transaction below it has ended.
async fn read(db: &Database) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let client = db.connection().await?;
    // Unnamed, in one round trip: fine behind a transaction-mode pooler.
    let row = client
        .query_typed_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
        .await?;
    Ok(row.get::<_, String>(0).parse()?)
}
