//! Progress of long silent phases (finishing a recording's trace, analyzing a big
//! one), drawn on stderr only when it is a terminal and only once the phase has
//! lasted [`SHOW_AFTER`]: a quick run, a pipe or a log file get nothing.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a phase runs silently before its bar appears.
pub const SHOW_AFTER: Duration = Duration::from_millis(700);

/// A progress bar over bytes, hidden until [`SHOW_AFTER`] has passed and never
/// drawn when stderr is not a terminal. Cleared when dropped.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    terminal: bool,
}

impl Progress {
    /// A bar saying `what` is being done, in a few words ("analyzing": the line
    /// must fit a narrow terminal).
    pub fn bytes(what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("ordo: {msg} {bar:20} {bytes}/{total_bytes} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(what.to_string());
        Progress {
            bar,
            started: Instant::now(),
            terminal: console::Term::stderr().is_term(),
        }
    }

    /// `done` of `total` bytes are done.
    pub fn set(&self, done: u64, total: u64) {
        self.bar.set_length(total.max(done));
        self.bar.set_position(done);
        self.show_when_due();
    }

    /// Changes what the bar says is being done.
    pub fn say(&self, what: &str) {
        self.bar.set_message(what.to_string());
        self.show_when_due();
    }

    fn show_when_due(&self) {
        if self.terminal && self.bar.is_hidden() && self.started.elapsed() >= SHOW_AFTER {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
        }
    }

    /// Whether the bar is drawn (stderr is a terminal and the phase is long).
    pub fn shown(&self) -> bool {
        !self.bar.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
