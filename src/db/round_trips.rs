//! The database round trips of the current request, counted where the
//! statements are sent; the HTTP layer opens the count and reports it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tracing::Instrument;

/// A request's count of round trips, shared by the tasks working for it.
#[derive(Clone, Default)]
pub struct RoundTrips(Arc<AtomicU64>);

tokio::task_local! {
    static COUNT: RoundTrips;
}

impl RoundTrips {
    /// Run `future` with its round trips counted here.
    pub async fn count<F: Future>(&self, future: F) -> F::Output {
        COUNT.scope(self.clone(), future).await
    }

    /// How many round trips so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Count one round trip of the current request (none outside a request).
pub fn round_trip() {
    let _ = COUNT.try_with(|c| c.0.fetch_add(1, Ordering::Relaxed));
}

/// `future`, run in another task, still counting for the current request
/// and logging in its span.
pub fn carried<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let span = tracing::Span::current();
    let count = COUNT.try_with(Clone::clone).ok();
    async move {
        match count {
            Some(count) => count.count(future.instrument(span)).await,
            None => future.instrument(span).await,
        }
    }
}
