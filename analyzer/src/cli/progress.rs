//! Progress bars on a terminal, through the library's `Progress` trait.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use vramtrace::progress::{Meter, Progress, ProgressUnit, Work};

/// Progress bars on stderr when it is a terminal (hidden in pipes, CI logs
/// and tests); passes running side by side get a bar each.
pub struct Bars {
    multi: MultiProgress,
}

impl Bars {
    /// Bars drawn on stderr, if it is a terminal.
    pub fn new() -> Self {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Bars {
            multi: MultiProgress::with_draw_target(target),
        }
    }
}

impl Progress for Bars {
    fn begin(&self, work: Work) -> Box<dyn Meter + '_> {
        let template = match (work.unit, work.total.is_some()) {
            (ProgressUnit::Bytes, true) => {
                "{msg:>10} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
            }
            (ProgressUnit::Bytes, false) => "{msg:>10} {spinner} {bytes} ({bytes_per_sec})",
            (ProgressUnit::Events, true) => "{msg:>10} [{bar:30}] {human_pos}/{human_len} events",
            (ProgressUnit::Events, false) => "{msg:>10} {spinner} {human_pos} events",
            (ProgressUnit::Iterations, true) => {
                "{msg:>10} [{bar:30}] {human_pos}/{human_len} iterations ({eta})"
            }
            (ProgressUnit::Iterations, false) => "{msg:>10} {spinner} {human_pos} iterations",
        };
        let bar = ProgressBar::with_draw_target(work.total, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_message(work.label);
        Box::new(Bar(self.multi.add(bar)))
    }
}

/// One bar, cleared when its work ends.
struct Bar(ProgressBar);

impl Meter for Bar {
    fn update(&self, done: u64) {
        self.0.set_position(done);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
