//! What the database's work costs, measured as the service runs: the round
//! trip, and the time per row of a pipelined INSERT, of a COPY and of
//! reading back the keys a COPY drew, for small and large writes apart;
//! each an exponentially weighted moving average of what writes observed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How much a new observation weighs against the average so far.
const WEIGHT: f64 = 0.2;

/// The fewest rows whose time says what a row costs.
const MIN_ROWS: usize = 50;

/// Writes of this many rows or more are large: their costs are learned
/// apart from small ones'. In a small write the request's own costs
/// (waiting for locks and for other sessions, its statements' start) weigh
/// on each row: with 32 clients writing 100 points each, COPY's rows looked
/// dearer than INSERT's, and a 102,400-point request learned from them went
/// by INSERT at a third of COPY's speed.
const LARGE_ROWS: usize = 1000;

/// The averages so far, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    /// One round trip to the database.
    pub round_trip: f64,
    /// The database's (and the service's) time per row of pipelined INSERTs.
    pub insert_row: f64,
    /// The same for binary COPY.
    pub copy_row: f64,
    /// The time per key of reading back the keys COPY drew from a
    /// sequence (`featurepipe.copied_keys`), which grows when other
    /// sessions' rows lie between a request's.
    pub read_back_row: f64,
}

impl Default for Observed {
    /// Before anything has been observed: a database next to the service
    /// (0.5 ms), and what `make bench` measures per row of a GIST-indexed
    /// points table (INSERT about 40 µs, COPY about 10 µs, reading a key
    /// back about 1.2 µs).
    fn default() -> Self {
        Observed {
            round_trip: 0.5e-3,
            insert_row: 40e-6,
            copy_row: 10e-6,
            read_back_row: 1.2e-6,
        }
    }
}

/// The costs observed on one database, shared by its pool's users: for
/// small writes and for large ones ([`LARGE_ROWS`]), the round trip shared.
///
/// Only writes that ran alone are observed, but for reading keys back.
/// With other writes at once, each answer also waits for theirs (for the
/// CPU, locks, the disk): a write's own costs are lost in the noise, and a
/// cost measured for one strategy while the other is no longer tried never
/// catches up: 32 clients sent to INSERT by a few contended COPYs stayed
/// there (70,000 features/s against 115,000 by COPY). Under load the costs
/// learned in quieter moments decide. Reading keys back is the exception:
/// other writers make it dearer by themselves (32 clients reading back
/// their keys wrote 28,000 features/s, PostgreSQL busy 6 ms a request),
/// so it is learned under load too.
#[derive(Debug, Default)]
pub struct Costs {
    small: Mutex<Observed>,
    large: Mutex<Observed>,
    /// Writes under way (see [`Costs::writing`]).
    writes: AtomicUsize,
}

/// A write under way, counted until dropped.
#[derive(Debug)]
pub struct Writing(Arc<Costs>);

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.writes.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What an observation is of.
#[derive(Debug, Clone, Copy)]
pub enum Cost {
    /// A round trip.
    RoundTrip,
    /// The time per row of pipelined INSERTs.
    InsertRow,
    /// The time per row of a COPY.
    CopyRow,
    /// The time per key read back after a COPY.
    ReadBackRow,
}

impl Costs {
    /// Count a write as under way while the guard lives.
    pub fn writing(self: &Arc<Self>) -> Writing {
        self.writes.fetch_add(1, Ordering::Relaxed);
        Writing(self.clone())
    }

    /// The averages now, for a write of `rows` rows.
    pub fn observed(&self, rows: usize) -> Observed {
        *self.class(rows).lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The averages of writes of `rows` rows.
    fn class(&self, rows: usize) -> &Mutex<Observed> {
        match rows >= LARGE_ROWS {
            true => &self.large,
            false => &self.small,
        }
    }

    /// Add an observation of `cost` in a write of `rows` rows (a round
    /// trip counts for every write).
    pub fn observe(&self, cost: Cost, rows: usize, took: Duration) {
        // Reading keys back is dearer the more writers there are (their rows
        // lie between a request's, and are scanned past): learned under load too.
        let own = matches!(cost, Cost::ReadBackRow);
        if !own && self.writes.load(Ordering::Relaxed) > 1 {
            return;
        }
        let took = took.as_secs_f64();
        let update = |average: &mut f64| *average += WEIGHT * (took - *average);
        if let Cost::RoundTrip = cost {
            for class in [&self.small, &self.large] {
                update(&mut class.lock().unwrap_or_else(|e| e.into_inner()).round_trip);
            }
            return;
        }
        let mut observed = self.class(rows).lock().unwrap_or_else(|e| e.into_inner());
        update(match cost {
            Cost::RoundTrip => unreachable!("handled above"),
            Cost::InsertRow => &mut observed.insert_row,
            Cost::CopyRow => &mut observed.copy_row,
            Cost::ReadBackRow => &mut observed.read_back_row,
        });
    }

    /// Observe the time per row of `rows` rows that took `took`, one round
    /// trip included: only runs of enough rows to say something.
    pub fn observe_rows(&self, cost: Cost, rows: usize, took: Duration) {
        if rows < MIN_ROWS {
            return;
        }
        let round_trip = self.observed(rows).round_trip;
        let work = (took.as_secs_f64() - round_trip).max(0.0);
        self.observe(cost, rows, Duration::from_secs_f64(work / rows as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_follow_what_is_observed() {
        let costs = Costs::default();
        for _ in 0..50 {
            costs.observe(Cost::RoundTrip, 0, Duration::from_millis(50));
        }
        let rt = costs.observed(10).round_trip;
        assert_eq!(costs.observed(10_000).round_trip, rt, "shared");
        assert!((rt - 0.05).abs() < 1e-4, "{rt}");
        // 1000 rows in one round trip and 30 ms of work: 30 µs a row.
        costs.observe_rows(Cost::InsertRow, 1000, Duration::from_millis(80));
        let before = Observed::default().insert_row;
        let now = costs.observed(1000).insert_row;
        assert_eq!(costs.observed(999).insert_row, before, "learned apart");
        assert!(
            (now - (before + WEIGHT * (30e-6 - before))).abs() < 1e-7,
            "{now}"
        );
        // A handful of rows says nothing.
        costs.observe_rows(Cost::CopyRow, 3, Duration::from_secs(1));
        assert_eq!(costs.observed(3).copy_row, Observed::default().copy_row);
    }

    #[test]
    fn only_writes_that_ran_alone_are_observed() {
        let costs = Arc::new(Costs::default());
        let alone = costs.writing();
        costs.observe(Cost::RoundTrip, 0, Duration::from_millis(50));
        let rt = costs.observed(10).round_trip;
        let other = costs.writing();
        costs.observe(Cost::RoundTrip, 0, Duration::from_secs(1));
        costs.observe_rows(Cost::CopyRow, 100, Duration::from_secs(1));
        assert_eq!(
            costs.observed(10).round_trip,
            rt,
            "with another write at once"
        );
        assert_eq!(costs.observed(100).copy_row, Observed::default().copy_row);
        costs.observe(Cost::ReadBackRow, 100, Duration::from_millis(1));
        let read_back = costs.observed(100).read_back_row;
        assert!(
            read_back > Observed::default().read_back_row,
            "learned under load"
        );
        drop(other);
        costs.observe(Cost::RoundTrip, 0, Duration::from_secs(1));
        assert!(costs.observed(10).round_trip > rt, "alone again");
        drop(alone);
    }
}
