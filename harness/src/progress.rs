//! Progress display: indicatif bars and spinners on a terminal, nothing at all otherwise
//! (CI logs stay clean).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether progress should be drawn (stderr is a terminal).
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar of `len` units (bytes when `bytes`), hidden when not on a terminal.
pub fn bar(len: u64, msg: &str, bytes: bool) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let template = if bytes {
        "{msg:24} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg:24} [{bar:40}] {pos}/{len} eta {eta}"
    };
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_owned());
    pb
}

/// A spinner with a message, hidden when not on a terminal.
pub fn spinner(msg: &str) -> ProgressBar {
    if !enabled() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_message(msg.to_owned());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
