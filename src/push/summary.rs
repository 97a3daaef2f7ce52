//! The account of a push: what was read, written, replayed and not written,
//! and why, printed when it ends. Batches sent in parallel are answered in
//! any order; the account is the same whatever that order.

use std::fmt::Write;
use std::time::Duration;

use super::answer::{FeatureError, Outcome};
use super::batches::Batch;

/// How many failed batches the summary describes one by one.
const DESCRIBED_FAILURES: usize = 10;

/// Counts and failures so far.
#[derive(Debug, Default)]
pub struct Tally {
    /// Batches answered or refused.
    batches: u64,
    /// Batches whose answer was a replay.
    replayed_batches: u64,
    /// Batches with features not written.
    failed_batches: u64,
    /// Features read from the input (in whole batches).
    read: u64,
    written: u64,
    replayed: u64,
    failed: u64,
    /// Bytes of GeoJSON the service answered for.
    geojson_bytes: u64,
    /// Bytes of request bodies as they were sent (compressed or not).
    sent_bytes: u64,
    /// The failed batches with the lowest numbers, described, in order.
    failures: Vec<(u64, String)>,
    /// Why the push ended before the end of the input.
    stopped: Option<String>,
}

impl Tally {
    /// Count a batch and what the service made of it.
    pub fn add(&mut self, batch: &Batch, outcome: &Outcome) {
        self.batches += 1;
        self.read += batch.count as u64;
        self.written += outcome.written as u64;
        self.replayed += outcome.replayed as u64;
        self.failed += outcome.failed as u64;
        self.geojson_bytes += outcome.geojson_bytes as u64;
        self.sent_bytes += outcome.sent_bytes as u64;
        if outcome.replayed > 0 {
            self.replayed_batches += 1;
        }
        if outcome.failed == 0 {
            return;
        }
        self.failed_batches += 1;
        let problem = outcome.problem.as_deref().unwrap_or("not written");
        let extra = outcome.total_errors.saturating_sub(outcome.errors.len());
        let described = describe(batch, problem, &outcome.errors, extra);
        self.failures.push((batch.index, described));
        self.failures.sort_unstable_by_key(|(index, _)| *index);
        self.failures.truncate(DESCRIBED_FAILURES);
    }

    /// The push ends here, before the end of the input, because of `why`
    /// (the first reason given is kept: later ones follow from it).
    pub fn stop(&mut self, why: String) {
        self.stopped.get_or_insert(why);
    }

    /// Whether it is stopping.
    pub fn stopping(&self) -> bool {
        self.stopped.is_some()
    }

    /// Features the service has answered for (written, replayed or not).
    pub fn answered(&self) -> u64 {
        self.written + self.replayed + self.failed
    }

    /// Whether every feature of the input was written (now or by an earlier run).
    pub fn complete(&self) -> bool {
        self.failed == 0 && self.stopped.is_none()
    }

    /// Whether the whole input was read and every feature was replayed:
    /// an earlier push with the same keys wrote them all, and this one nothing.
    pub fn all_replayed(&self) -> bool {
        self.complete() && self.read > 0 && self.replayed == self.read
    }

    /// The summary: counts, bytes sent (`encoding` says how), rate, the
    /// failed batches, why the push stopped, and what to do when all of it
    /// was replayed (`run`: the `--run` given, if any).
    pub fn render(
        &self,
        target: &str,
        run: Option<&str>,
        encoding: &str,
        elapsed: Duration,
    ) -> String {
        let mut s = String::new();
        let secs = elapsed.as_secs_f64();
        let rate = self.answered() as f64 / secs.max(1e-3);
        let _ = writeln!(s, "featurepipe push to {target}");
        if let Some(run) = run {
            let _ = writeln!(s, "  run:      {run}");
        }
        let _ = writeln!(
            s,
            "  batches:  {} ({} replayed, {} with features not written)",
            self.batches, self.replayed_batches, self.failed_batches
        );
        let _ = writeln!(
            s,
            "  features: {} read, {} written, {} replayed, {} not written",
            self.read, self.written, self.replayed, self.failed
        );
        if self.geojson_bytes > 0 {
            let _ = writeln!(
                s,
                "  sent:     {} of GeoJSON as {} ({encoding})",
                size(self.geojson_bytes),
                size(self.sent_bytes)
            );
        }
        let _ = writeln!(s, "  time:     {secs:.1} s, {rate:.0} features sent/s");
        for (_, failure) in &self.failures {
            s.push_str(failure);
        }
        if self.failed_batches as usize > self.failures.len() {
            let more = self.failed_batches as usize - self.failures.len();
            let _ = writeln!(s, "  … and {more} more batches with features not written");
        }
        if let Some(why) = &self.stopped {
            let _ = writeln!(s, "  stopped:  {why}");
        }
        if self.all_replayed() {
            s.push_str(&all_replayed(run));
        }
        s
    }
}

/// What a push that wrote nothing, every batch replayed, means, and how to
/// load the same input again (`run`: the `--run` of this push, if any).
fn all_replayed(run: Option<&str>) -> String {
    let keys = match run {
        Some(run) => format!("with --run {run} "),
        None => String::new(),
    };
    format!(
        "  replayed: nothing was written: an earlier push of this input {keys}wrote every batch \
         (the service remembers a batch's key for FEATUREPIPE_IDEMPOTENCY_TTL, 24 h by default).\n\
         \x20           To load it again (into a table emptied since, say), give a name not used \
         before: --run NAME; the same --run NAME again resumes that load.\n"
    )
}

/// `bytes` in KiB or MiB, to one decimal.
fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// One failed batch: which features, why, and its first feature problems.
fn describe(batch: &Batch, problem: &str, errors: &[FeatureError], extra: usize) -> String {
    let last = batch.first_feature + batch.count as u64 - 1;
    let mut s = format!(
        "  batch {} (features {}–{last}): {problem}\n",
        batch.index, batch.first_feature
    );
    for e in errors {
        let _ = writeln!(s, "    {e}");
    }
    if extra > 0 {
        let _ = writeln!(s, "    … and {extra} more problems");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(index: u64) -> Batch {
        Batch {
            index,
            first_feature: index * 10,
            count: 10,
            body: Vec::new(),
            gzip: None,
            key: String::new(),
            end: 0,
            broken: Vec::new(),
        }
    }

    fn refused(index: u64) -> Outcome {
        Outcome {
            failed: 10,
            problem: Some(format!("refused {index}")),
            ..Outcome::default()
        }
    }

    #[test]
    fn batches_answered_out_of_order_are_told_in_order() {
        let mut tally = Tally::default();
        // Fourteen failed batches answered backwards, and one written.
        for index in (1..15).rev() {
            tally.add(&batch(index), &refused(index));
        }
        let written = Outcome {
            written: 10,
            ..Outcome::default()
        };
        tally.add(&batch(0), &written);
        let text = tally.render("t", None, "gzip", Duration::from_secs(1));
        assert!(text.contains("features: 150 read, 10 written, 0 replayed, 140 not written"));
        let told: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("  batch ")?.split(' ').next())
            .collect();
        assert_eq!(told, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]);
        assert!(text.contains("… and 4 more batches"));
        assert!(!tally.all_replayed());
    }

    #[test]
    fn a_push_is_all_replayed_only_when_nothing_else_happened() {
        let replayed = Outcome {
            replayed: 10,
            ..Outcome::default()
        };
        let mut tally = Tally::default();
        assert!(!tally.all_replayed());
        tally.add(&batch(1), &replayed);
        tally.add(&batch(0), &replayed);
        assert!(tally.all_replayed());
        let text = tally.render("t", Some("first"), "gzip", Duration::from_secs(1));
        assert!(text.contains("  run:      first\n"), "{text}");
        assert!(text.contains("push of this input with --run first wrote every batch"));
        assert!(text.contains("--run NAME"), "{text}");
        tally.stop("reading the input: cut short".into());
        assert!(!tally.all_replayed());
    }
}
