//! Running a transaction again after PostgreSQL rolled it back because of a
//! deadlock or a serialization failure: the same request a moment later
//! usually succeeds, so the client need not see the conflict at all.

use std::future::Future;
use std::time::Duration;

use crate::db::Database;
use crate::error::Error;

/// How many times a conflicted transaction is run again.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Runs after the first (0: none).
    pub retries: u32,
}

/// The pause before run `attempt + 1`: random, so that the two sides of a
/// deadlock do not meet again in step, and doubling up to a quarter second.
fn backoff(attempt: u32) -> Duration {
    let ceiling_ms = (10u64 << attempt.min(5)).min(250);
    Duration::from_millis(rand::random_range(ceiling_ms / 2..=ceiling_ms))
}

impl Retry {
    /// As often as `db` is configured to (`FEATUREPIPE_RETRIES`).
    pub fn of(db: &Database) -> Retry {
        Retry {
            retries: db.retries(),
        }
    }

    /// Run `attempt` until it succeeds, fails for another reason, or has
    /// been run `1 + retries` times.
    ///
    /// Only for work that is one transaction PostgreSQL rolls back whole on
    /// a conflict (nothing of it can have been committed), so that running it
    /// again cannot write anything twice.
    pub async fn run<T, F, Fut>(self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut attempts = 1;
        loop {
            let error = match attempt().await {
                Ok(done) => return Ok(done),
                Err(error) => error,
            };
            let Some(conflict) = error.conflict() else {
                return Err(error);
            };
            if attempts > self.retries {
                let tried = match attempts {
                    1 => "1 attempt".to_owned(),
                    n => format!("{n} attempts, each rolled back"),
                };
                let detail = format!(
                    "the database rolled the transaction back because of {} after {tried} \
                     (FEATUREPIPE_RETRIES={}); nothing was written",
                    conflict.describe(),
                    self.retries
                );
                return Err(error.with_detail(detail));
            }
            tracing::info!(
                ?conflict,
                attempts,
                "transaction rolled back; running it again"
            );
            tokio::time::sleep(backoff(attempts)).await;
            attempts += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_short_random_and_grows() {
        let quarter = Duration::from_millis(250);
        for attempt in 1..40 {
            let pause = backoff(attempt);
            assert!(pause >= Duration::from_millis(10) && pause <= quarter);
        }
        assert!(backoff(1) <= Duration::from_millis(20));
        assert!(backoff(9) >= quarter / 2);
    }
}
