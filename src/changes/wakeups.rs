//! What wakes a long poll (`wait=`): the triggers' `NOTIFY
//! featurepipe_changes` (payload: the table's oid), relayed from one
//! connection that LISTENs to every waiting request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use crate::catalog::feed::CHANNEL;
use crate::db::listen::{self, Heard, Listening};
use crate::db::Database;

/// Wakes every waiter: notifications may have been missed.
const EVERY_FEED: u32 = 0;

/// How often a waiter looks again when no notification can come (no
/// `LISTEN` connection). Changes held back by an older open transaction,
/// whose end notifies nobody, are watched for all waiters at once
/// (`horizon.rs`).
pub const RECHECK: Duration = Duration::from_millis(500);

/// The notifications of change feeds, for whoever waits.
pub struct Wakeups {
    sender: broadcast::Sender<u32>,
    listening: Arc<AtomicBool>,
    _relay: Option<AbortOnDropHandle<()>>,
}

/// One waiter's view of the notifications of one feed.
pub struct Wakeup {
    relid: u32,
    receiver: broadcast::Receiver<u32>,
    listening: bool,
}

impl Wakeups {
    /// Relay the notifications on a connection of its own when `listen`
    /// (the `LISTEN` is in place before this returns, when it can be; else
    /// it is tried again in the background). Without, waiters look again
    /// every [`RECHECK`].
    pub async fn start(db: &Database, listen: bool) -> Wakeups {
        let (sender, _) = broadcast::channel(1024);
        let first = match listen {
            true => db.listen_or_warn(CHANNEL).await,
            false => None,
        };
        let listening = Arc::new(AtomicBool::new(first.is_some()));
        let relay = listen.then(|| {
            let relay = relay(db.clone(), sender.clone(), listening.clone(), first);
            AbortOnDropHandle::new(tokio::spawn(relay))
        });
        Wakeups {
            sender,
            listening,
            _relay: relay,
        }
    }

    /// How many requests wait for changes now.
    pub fn waiting(&self) -> usize {
        self.sender.receiver_count()
    }

    /// Notifications for the table `relid` from now on: subscribe before
    /// reading the feed, so that a change committed meanwhile wakes.
    pub fn subscribe(&self, relid: u32) -> Wakeup {
        Wakeup {
            relid,
            receiver: self.sender.subscribe(),
            listening: self.listening.load(Ordering::Acquire),
        }
    }
}

impl Wakeup {
    /// Whether notifications come: else the waiter must look again itself.
    pub fn listening(&self) -> bool {
        self.listening
    }

    /// Until a change of the feed may have been committed (never, when
    /// nothing listens).
    pub async fn changed(&mut self) {
        loop {
            match self.receiver.recv().await {
                Ok(relid) if relid == self.relid || relid == EVERY_FEED => return,
                Ok(_) => {}
                // Notifications were dropped: this feed's may be among them.
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// Relay each notification's table oid, and whether the connection is up;
/// when it is made again after a loss, wake every waiter, for the
/// notifications missed meanwhile.
async fn relay(
    db: Database,
    sender: broadcast::Sender<u32>,
    listening: Arc<AtomicBool>,
    connection: Option<Listening>,
) {
    listen::relay(db, CHANNEL, connection, |heard| {
        let relid = match heard {
            Heard::Notification(payload) => payload.parse().ok(),
            Heard::Lost => {
                listening.store(false, Ordering::Release);
                None
            }
            Heard::Back => {
                listening.store(true, Ordering::Release);
                Some(EVERY_FEED)
            }
        };
        // No receiver: nobody waits; that is fine.
        if let Some(relid) = relid {
            let _ = sender.send(relid);
        }
    })
    .await
}
