//! The progress bar every table's run loop draws. A leaf module.

use indicatif::{ProgressBar, ProgressStyle};

pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:>14} [{elapsed_precise}] {wide_bar} {pos}/{len} {prefix}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}
