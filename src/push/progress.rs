//! The progress bar on stderr: features sent, features per second, and how
//! far through the input (with an ETA) when its size is known. Drawn only
//! when stderr is a terminal.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar over the input's bytes.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
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
        }
    }

    /// `bytes` of the input and `features` have been dealt with.
    pub fn update(&self, bytes: u64, features: u64) {
        let rate = features as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        self.bar.set_position(bytes);
        self.bar
            .set_message(format!("{features} features sent, {rate:.0}/s"));
    }

    /// Clear the bar, for the summary.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
