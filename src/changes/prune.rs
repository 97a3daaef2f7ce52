//! Keeping the change log to `FEATUREPIPE_CHANGES_RETENTION`: a task
//! prunes it now and then (`featurepipe.changes_prune`, migration 7), one
//! short statement each time.

use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::task::AbortOnDropHandle;

use crate::db::Database;
use crate::error::Error;

/// How often the log is pruned for `retention`: a tenth of it, between a
/// second and an hour. Changes are kept at most this much longer.
pub fn interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Delete the changes older than `retention` (and mark the horizon now,
/// for later runs); how many were deleted.
pub async fn prune(db: &Database, retention: Duration) -> Result<i64, Error> {
    let client = db.connection().await?;
    crate::db::round_trips::round_trip();
    let row = client
        .query_typed_one(
            "SELECT featurepipe.changes_prune($1)",
            &[(
                &retention.as_secs_f64(),
                tokio_postgres::types::Type::FLOAT8,
            )],
        )
        .await
        .map_err(|e| Error::database("pruning the change log", &e))?;
    Ok(row.get(0))
}

/// Prune every [`interval`] until dropped; `db` runs as the service's role.
pub fn every_interval(db: Database, retention: Duration) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        // The first after one interval: start-up has enough to do.
        let every = interval(retention);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match prune(&db, retention).await {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "change log pruned"),
                Err(e) => {
                    tracing::warn!(error = %e, "pruning the change log failed; trying again later")
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_runs_a_tenth_of_the_retention_apart_within_bounds() {
        let day = Duration::from_secs(86_400);
        assert_eq!(interval(30 * day), Duration::from_secs(3600));
        assert_eq!(interval(Duration::from_secs(60)), Duration::from_secs(6));
        assert_eq!(interval(Duration::ZERO), Duration::from_secs(1));
    }
}
