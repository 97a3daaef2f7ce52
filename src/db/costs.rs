//! What the database's work costs, measured as the service runs: the round
//! trip, and the time per row of a pipelined INSERT, of a COPY and of
//! reading back the keys a COPY drew, for small and large writes apart;
//! each the median of the last observations (a guess before them).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many of the latest observations of a cost its median is taken of.
///
/// A median, not a moving average: a write slowed by something else (a
/// checkpoint's full-page writes, a neighbour's burst) is an outlier that
/// must not decide. One COPY of 100 rows that took 4.5 ms alone, against
/// 0.1–0.7 ms for the others, moved an average of COPY's row cost (weight
/// 0.2) past INSERT's, and 32 clients wrote by INSERT at 40% of COPY's
/// speed until another write ran alone.
const WINDOW: usize = 15;

/// The fewest rows whose time says what a row costs.
const MIN_ROWS: usize = 50;

/// Writes of this many rows or more are large: their costs are learned
/// apart from small ones'. In a small write the request's own costs
/// (waiting for locks and for other sessions, its statements' start) weigh
/// on each row: with 32 clients writing 100 points each, COPY's rows looked
/// dearer than INSERT's, and a 102,400-point request learned from them went
/// by INSERT at a third of COPY's speed.
const LARGE_ROWS: usize = 1000;

/// The costs now, in seconds.
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

/// How many observations the guess ([`Observed::default`]) counts as, until
/// real ones push it out: a single first write (a cold connection loading
/// PostGIS, a fresh table growing) does not replace it alone.
const GUESSED: usize = 3;

/// The latest observations of one cost, in seconds.
#[derive(Debug)]
struct Window {
    seen: Vec<f64>,
    /// Where the next observation goes once the window is full.
    next: usize,
}

impl Window {
    /// A window holding only the guess.
    fn guessed(guess: f64) -> Window {
        Window {
            seen: vec![guess; GUESSED],
            next: GUESSED,
        }
    }

    fn add(&mut self, took: f64) {
        if self.seen.len() < WINDOW {
            self.seen.push(took);
        } else {
            self.seen[self.next] = took;
        }
        self.next = (self.next + 1) % WINDOW;
    }

    /// The median (the lower of the middle two), sorted on the stack: it
    /// is asked for on every write.
    fn median(&self) -> f64 {
        let mut sorted = [0.0; WINDOW];
        let sorted = &mut sorted[..self.seen.len()];
        sorted.copy_from_slice(&self.seen);
        sorted.sort_unstable_by(f64::total_cmp);
        sorted[(sorted.len() - 1) / 2]
    }
}

/// The per-row costs of one class of writes (small or large).
#[derive(Debug)]
struct RowCosts {
    insert_row: Window,
    copy_row: Window,
    read_back_row: Window,
}

impl RowCosts {
    fn guessed(guess: &Observed) -> RowCosts {
        RowCosts {
            insert_row: Window::guessed(guess.insert_row),
            copy_row: Window::guessed(guess.copy_row),
            read_back_row: Window::guessed(guess.read_back_row),
        }
    }
}

/// All that was observed.
#[derive(Debug)]
struct Learned {
    round_trip: Window,
    small: RowCosts,
    large: RowCosts,
}

impl Default for Learned {
    fn default() -> Self {
        let guess = Observed::default();
        Learned {
            round_trip: Window::guessed(guess.round_trip),
            small: RowCosts::guessed(&guess),
            large: RowCosts::guessed(&guess),
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
    learned: Mutex<Learned>,
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

impl Learned {
    /// The per-row costs of writes of `rows` rows.
    fn class(&mut self, rows: usize) -> &mut RowCosts {
        match rows >= LARGE_ROWS {
            true => &mut self.large,
            false => &mut self.small,
        }
    }
}

impl Costs {
    /// Count a write as under way while the guard lives.
    pub fn writing(self: &Arc<Self>) -> Writing {
        self.writes.fetch_add(1, Ordering::Relaxed);
        Writing(self.clone())
    }

    /// What was observed, even if a writer panicked holding it.
    fn lock(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The costs now, for a write of `rows` rows.
    pub fn observed(&self, rows: usize) -> Observed {
        let mut learned = self.lock();
        let round_trip = learned.round_trip.median();
        let class = learned.class(rows);
        Observed {
            round_trip,
            insert_row: class.insert_row.median(),
            copy_row: class.copy_row.median(),
            read_back_row: class.read_back_row.median(),
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
        let mut learned = self.lock();
        let window = match cost {
            Cost::RoundTrip => &mut learned.round_trip,
            Cost::InsertRow => &mut learned.class(rows).insert_row,
            Cost::CopyRow => &mut learned.class(rows).copy_row,
            Cost::ReadBackRow => &mut learned.class(rows).read_back_row,
        };
        window.add(took);
    }

    /// Observe the time per row of `rows` rows that took `took`, one round
    /// trip included: only runs of enough rows to say something.
    pub fn observe_rows(&self, cost: Cost, rows: usize, took: Duration) {
        if rows < MIN_ROWS {
            return;
        }
        let round_trip = self.lock().round_trip.median();
        let work = (took.as_secs_f64() - round_trip).max(0.0);
        self.observe(cost, rows, Duration::from_secs_f64(work / rows as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_the_median_of_the_latest_observations() {
        let costs = Costs::default();
        assert_eq!(
            costs.observed(10),
            Observed::default(),
            "a guess before any"
        );
        for _ in 0..50 {
            costs.observe(Cost::RoundTrip, 0, Duration::from_millis(50));
        }
        let rt = costs.observed(10).round_trip;
        assert_eq!(costs.observed(10_000).round_trip, rt, "shared");
        assert!((rt - 0.05).abs() < 1e-9, "{rt}");
        // One first write, slow (a cold connection), does not replace the
        // guess; then 1000 rows in one round trip and 30 ms of work, four
        // times: 30 µs a row.
        let per_row = |ms| Duration::from_secs_f64(0.05 + ms / 1e3);
        let row = |costs: &Costs| costs.observed(1000).insert_row;
        costs.observe_rows(Cost::InsertRow, 1000, per_row(100.0));
        assert_eq!(row(&costs), Observed::default().insert_row);
        for _ in 0..4 {
            costs.observe_rows(Cost::InsertRow, 1000, per_row(30.0));
        }
        assert!((row(&costs) - 30e-6).abs() < 1e-9, "{}", row(&costs));
        assert_eq!(
            costs.observed(999).insert_row,
            Observed::default().insert_row,
            "learned apart"
        );
        // A write slowed by something else does not decide, however slow.
        costs.observe_rows(Cost::InsertRow, 1000, per_row(4_000.0));
        costs.observe_rows(Cost::InsertRow, 1000, per_row(31.0));
        assert!((row(&costs) - 31e-6).abs() < 1e-9, "{}", row(&costs));
        // A lasting change does, once it is most of what is seen.
        for _ in 0..WINDOW / 2 + 1 {
            costs.observe_rows(Cost::InsertRow, 1000, per_row(60.0));
        }
        assert!((row(&costs) - 60e-6).abs() < 1e-9, "{}", row(&costs));
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
        for _ in 0..GUESSED + 1 {
            costs.observe(Cost::ReadBackRow, 100, Duration::from_millis(1));
        }
        let read_back = costs.observed(100).read_back_row;
        assert!(
            read_back > Observed::default().read_back_row,
            "learned under load"
        );
        drop(other);
        for _ in 0..GUESSED + 1 {
            costs.observe(Cost::RoundTrip, 0, Duration::from_secs(1));
        }
        assert!(costs.observed(10).round_trip > rt, "alone again");
        drop(alone);
    }
}
