//! The progress bar on stderr (records, records per second, ETA, failures),
//! drawn only where asked (a terminal, no `--quiet`).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Records done, shown or not.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    done: u64,
    failures: u64,
}

impl Progress {
    pub fn new(total: u64, done: u64, failures: u64, shown: bool) -> Progress {
        let bar = shown.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {human_pos}/{human_len} records, {rate}, ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            })
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_position(done);
            bar.reset_eta();
            bar
        });
        let progress = Progress {
            bar,
            done,
            failures,
        };
        progress.show_failures();
        progress
    }

    pub fn record(&mut self, failed: bool) {
        self.done += 1;
        if failed {
            self.failures += 1;
            self.show_failures();
        }
        if let Some(bar) = &self.bar
            && self.done.is_multiple_of(64)
        {
            bar.set_position(self.done);
        }
    }

    fn show_failures(&self) {
        if let Some(bar) = &self.bar
            && self.failures > 0
        {
            bar.set_message(format!("({} failed)", self.failures));
        }
    }

    pub fn done(&self) -> u64 {
        self.done
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Takes the bar off the terminal.
    pub fn close(&self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
            bar.finish_and_clear();
        }
    }
}
