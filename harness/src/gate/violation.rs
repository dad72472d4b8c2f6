//! A gate violation: what CI prints, and which tables a rerun measures.

/// One gate violation: the table it is in, whether it is a speed rule (confirmed by a rerun) or
/// a fact (never retried), and the sentence CI prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub table: String,
    pub speed: bool,
    pub msg: String,
    /// The figure (`table/row/metric`) a speed violation put below its floor; `None` for a fact
    /// and for a figure measured only while the cores sat far apart.
    pub below: Option<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

pub(super) fn fact(table: &str, msg: String) -> Violation {
    Violation {
        table: table.to_string(),
        speed: false,
        msg,
        below: None,
    }
}

/// The tables a rerun should measure again: those with speed violations, or none at all when a
/// fact (a wrong, failed or missing row) makes the verdict final.
pub fn retry_tables(violations: &[Violation]) -> Vec<String> {
    if violations.iter().any(|v| !v.speed) {
        return Vec::new();
    }
    let mut t: Vec<String> = violations.iter().map(|v| v.table.clone()).collect();
    t.sort();
    t.dedup();
    t
}
