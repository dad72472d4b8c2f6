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

/// Where a run's wall time went, printed to stderr when a phase ends, so a CI log says which
/// table (and which of its rows) spent the budget. Rows are wall seconds of each unit of work,
/// summed over repeats.
#[derive(Default)]
pub struct Ledger {
    rows: Vec<(String, f64)>,
}

impl Ledger {
    /// Adds `secs` to the row named `what` (a new row on first use).
    pub fn add(&mut self, what: &str, secs: f64) {
        match self.rows.iter_mut().find(|(w, _)| w == what) {
            Some((_, s)) => *s += secs,
            None => self.rows.push((what.to_string(), secs)),
        }
    }

    /// Times `f` into the row `what`.
    pub fn time<T>(&mut self, what: &str, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        self.add(what, t.elapsed().as_secs_f64());
        out
    }

    /// One line: the phase's total and its `slowest` rows, slowest first.
    pub fn summary(&self, phase: &str, slowest: usize) -> String {
        let total: f64 = self.rows.iter().map(|(_, s)| s).sum();
        let mut rows: Vec<&(String, f64)> = self.rows.iter().collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = rows
            .iter()
            .take(slowest)
            .map(|(w, s)| format!("{w} {s:.0} s"))
            .collect();
        format!(
            "harness: {phase} took {total:.0} s (slowest: {})",
            top.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Ledger;

    #[test]
    fn the_ledger_sums_rows_and_lists_the_slowest_first() {
        let mut l = Ledger::default();
        l.add("a", 1.0);
        l.add("b", 5.0);
        l.add("a", 3.0);
        l.add("c", 2.0);
        assert_eq!(
            l.summary("store cells", 2),
            "harness: store cells took 11 s (slowest: b 5 s, a 4 s)"
        );
    }
}
