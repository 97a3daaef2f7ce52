//! What wakes a long poll (`wait=`): the triggers' `NOTIFY
//! featurepipe_changes` (payload: the table's oid), relayed from one
//! connection that LISTENs to every waiting request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use crate::catalog::feed::CHANNEL;
use crate::db::listen::Listening;
use crate::db::Database;

/// Wakes every waiter: notifications may have been missed.
const EVERY_FEED: u32 = 0;

/// How long a lost `LISTEN` connection waits before it is made again.
const RELISTEN_WAIT: Duration = Duration::from_secs(5);

/// How often a waiter looks again when no notification can come (no
/// `LISTEN` connection) or none will (changes held back by an older open
/// transaction, whose end notifies nobody).
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
            true => connect(db).await,
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

/// `LISTEN` on a connection of its own, or `None` (logged) when it cannot.
async fn connect(db: &Database) -> Option<Listening> {
    match db.listen(CHANNEL).await {
        Ok(listening) => Some(listening),
        Err(e) => {
            tracing::warn!(error = %e, "cannot LISTEN {CHANNEL}; long polls look again every {RECHECK:?}");
            None
        }
    }
}

/// Relay each notification's table oid; when the connection is lost, make
/// it again and then wake every waiter, for the notifications missed.
async fn relay(
    db: Database,
    sender: broadcast::Sender<u32>,
    listening: Arc<AtomicBool>,
    mut connection: Option<Listening>,
) {
    loop {
        if let Some(mut open) = connection.take() {
            listening.store(true, Ordering::Release);
            while let Some(payload) = open.next().await {
                if let Ok(relid) = payload.parse::<u32>() {
                    // No receiver: nobody waits; that is fine.
                    let _ = sender.send(relid);
                }
            }
            listening.store(false, Ordering::Release);
            tracing::warn!("the LISTEN {CHANNEL} connection was lost; making it again");
        }
        while connection.is_none() {
            tokio::time::sleep(RELISTEN_WAIT).await;
            connection = connect(&db).await;
        }
        let _ = sender.send(EVERY_FEED);
    }
}
