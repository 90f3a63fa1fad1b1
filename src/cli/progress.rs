//! Progress bars for commands that walk many files (`check --all`, `gc`,
//! `list --all`): drawn on stderr with `indicatif`, and only when stderr
//! is a terminal, so that pipes and logs never see them.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar, or nothing when stderr is not a terminal.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar labelled `what` (e.g. "checking").
    pub(crate) fn new(what: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    /// Sets the position and the total.
    pub(crate) fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
            if bar.length() != Some(total) {
                bar.set_length(total);
            }
            bar.set_position(done);
        }
    }

    /// A callback for the engine's walks.
    pub(crate) fn callback(&self) -> impl Fn(u64, u64) + '_ {
        move |done, total| self.update(done, total)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
