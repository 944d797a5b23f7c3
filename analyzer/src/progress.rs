//! Progress bars for long work, shown only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A byte-based progress bar over reading an input of `total` bytes; hidden
/// when stderr is not a terminal (pipes, CI logs, tests).
pub fn bytes_bar(total: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), draw_target());
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
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
