//! Memory shared by every request (`FEATUREPIPE_BODY_MEMORY`): bodies as
//! they arrive, and what a request builds from one that outweighs it (an
//! edit session's operations and report), so that large requests at once
//! wait for each other instead of together exhausting memory.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The memory of all requests, counted in KiB.
#[derive(Clone)]
pub struct Budget {
    room: Arc<Semaphore>,
    /// All of it, in KiB (one body larger than that takes it all).
    kib: u32,
    /// How long a request waits for room before it is refused.
    wait: Duration,
}

/// Room held by one request, given back when dropped.
#[derive(Default)]
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
    kib: u32,
}

/// Others held the room for longer than the wait (this long).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy(pub Duration);

/// Why more room could not be had ([`Budget::hold_more`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// Others held it for longer than the wait.
    Busy(Busy),
    /// The request alone would need more than all of it.
    Beyond,
}

impl Budget {
    /// `bytes` of memory; a request waits at most `wait` for its share.
    pub fn new(bytes: usize, wait: Duration) -> Self {
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX >> 3);
        Budget {
            room: Arc::new(Semaphore::new(kib as usize)),
            kib,
            wait,
        }
    }

    /// Grow `held` to room for `bytes`, waiting for others to give some
    /// back; more than the whole budget takes all of it (a body larger
    /// than the budget is read alone).
    pub async fn hold(&self, held: &mut Held, bytes: usize) -> Result<(), Busy> {
        let want = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.kib);
        self.grow(held, want).await
    }

    /// Grow `held` by room for `bytes` more, refused at once when that
    /// would be more than the whole budget (what this request holds would
    /// never be given back while it waits).
    pub async fn hold_more(&self, held: &mut Held, bytes: usize) -> Result<(), Exhausted> {
        let more = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        match held.kib.checked_add(more) {
            Some(want) if want <= self.kib => self.grow(held, want).await.map_err(Exhausted::Busy),
            _ => Err(Exhausted::Beyond),
        }
    }

    async fn grow(&self, held: &mut Held, want: u32) -> Result<(), Busy> {
        if want <= held.kib {
            return Ok(());
        }
        let more = tokio::time::timeout(
            self.wait,
            self.room.clone().acquire_many_owned(want - held.kib),
        )
        .await;
        let Ok(Ok(more)) = more else {
            return Err(Busy(self.wait));
        };
        held.kib = want;
        match &mut held.permit {
            Some(permit) => permit.merge(more),
            None => held.permit = Some(more),
        }
        Ok(())
    }
}
