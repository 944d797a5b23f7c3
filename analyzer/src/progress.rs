//! Progress bars for long work, shown only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A byte-based progress bar over reading an input of `total` bytes (unknown
/// for a compressed input); hidden when stderr is not a terminal (pipes, CI
/// logs, tests).
pub fn bytes_bar(total: Option<u64>, message: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, draw_target());
    let template = if total.is_some() {
        "{msg:>10} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
    } else {
        "{msg:>10} {spinner} {bytes} ({bytes_per_sec})"
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
