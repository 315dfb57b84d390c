//! One progress bar for the long commands (eval, its bootstraps, export of many runs, `data
//! bpe`, `store verify`): drawn on stderr when stderr is a terminal (and TERM is not `dumb`),
//! nothing at all otherwise, so pipes, files and CI logs get only the command's output.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar that may be absent: every call on an absent one does nothing. It is drawn from its
/// first [`Progress::at`] on (a bar drawn at creation showed an empty `0/0`).
pub struct Progress(Option<ProgressBar>, std::cell::Cell<bool>);

/// Whether a bar would be drawn here: stderr is a terminal that draws.
pub fn drawn() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

impl Progress {
    /// A bar for `what` (its label), or none where [`drawn`] says no.
    pub fn new(what: &str) -> Self {
        if !drawn() {
            return Self(None, std::cell::Cell::new(false));
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} {bar:30} {human_pos}/{human_len} · {elapsed} · eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(what.to_string());
        Self(Some(bar), std::cell::Cell::new(false))
    }

    /// Where the work is: `done` of `total`, under the label `what`.
    pub fn at(&self, what: &str, done: u64, total: u64) {
        if let Some(bar) = &self.0 {
            if bar.message() != what {
                bar.set_message(what.to_string());
            }
            bar.set_length(total);
            bar.set_position(done);
            if !self.1.replace(true) {
                bar.set_draw_target(ProgressDrawTarget::stderr());
            }
        }
    }

    /// Runs `f` (which prints) with the bar off the screen, then draws it again.
    pub fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// A step that has no count: the label alone, the bar empty.
    pub fn step(&self, what: &str) {
        self.at(what, 0, 1);
    }
}

impl Drop for Progress {
    /// The bar goes when the work does, whichever way: the command's output follows on a clean
    /// line.
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
