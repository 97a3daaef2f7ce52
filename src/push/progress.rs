//! The progress bar on stderr: features sent, features per second, and how
//! far through the input (with an ETA) when its size is known. Drawn only
//! when stderr is a terminal. Batches sent in parallel are answered in any
//! order: the bar shows the input up to the last batch answered with all
//! those before it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar over the input's bytes.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    frontier: Frontier,
}

impl Progress {
    /// A bar for an input of `size` bytes, or a counter when the size is unknown (a pipe).
    pub fn new(size: Option<u64>) -> Self {
        let (bar, template) = match size {
            Some(size) => (
                ProgressBar::with_draw_target(Some(size), ProgressDrawTarget::stderr()),
                "{bar:30} {percent:>3}%  {msg}  ETA {eta}",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                "{spinner} {msg}  {elapsed}",
            ),
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar,
            started: Instant::now(),
            frontier: Frontier::default(),
        }
    }

    /// Batch `index`, which ends at byte `end` of the input, was answered;
    /// `features` have been answered in all.
    pub fn update(&mut self, index: u64, end: u64, features: u64) {
        let rate = features as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        self.bar.set_position(self.frontier.answered(index, end));
        self.bar
            .set_message(format!("{features} features sent, {rate:.0}/s"));
    }

    /// Clear the bar, for the summary.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// How far into the input every batch has been answered.
#[derive(Debug, Default)]
struct Frontier {
    /// The first batch not answered yet.
    next: u64,
    /// Where the batch before it ends.
    position: u64,
    /// Batches answered before one ahead of them: their index and end.
    early: BTreeMap<u64, u64>,
}

impl Frontier {
    /// Batch `index`, which ends at byte `end`, was answered: the bytes
    /// answered now, with every batch before them.
    fn answered(&mut self, index: u64, end: u64) -> u64 {
        self.early.insert(index, end);
        while let Some(end) = self.early.remove(&self.next) {
            self.position = end;
            self.next += 1;
        }
        self.position
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_waits_for_the_batches_before() {
        let mut f = Frontier::default();
        assert_eq!(f.answered(1, 200), 0);
        assert_eq!(f.answered(3, 400), 0);
        assert_eq!(f.answered(0, 100), 200);
        assert_eq!(f.answered(2, 300), 400);
        assert_eq!(f.answered(4, 500), 500);
        assert!(f.early.is_empty());
    }
}
