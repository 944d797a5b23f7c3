//! Progress bars for long work, shown only when stderr is a terminal.

use crate::input::Input;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;

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

/// A progress bar over replaying `input`, read from the file at `path`: in bytes
/// of a trace file, or in events of a snapshot (the pickle's entry count is their
/// total, near enough). Hidden when stderr is not a terminal.
pub fn replay_bar(input: &Input, path: &Path) -> ProgressBar {
    match input {
        Input::Trace(_) => bytes_bar(std::fs::metadata(path).ok().map(|m| m.len()), "replaying"),
        Input::Snapshot(rx) => {
            let total = rx
                .header()
                .metadata
                .get("torch.trace_entries")
                .and_then(|n| n.parse().ok());
            let bar = ProgressBar::with_draw_target(total, draw_target());
            bar.set_style(
                ProgressStyle::with_template("{msg:>10} [{bar:30}] {human_pos}/{human_len} events")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.set_message("replaying");
            bar
        }
    }
}

fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
