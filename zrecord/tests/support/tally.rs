//! Tallies a reliability test prints when it ends (the long-tier script collects these
//! `RELIABILITY <item> key=value ...` lines).

use std::collections::HashMap;

/// A tally printed at the end of a test (the long-tier script greps these lines).
pub fn report(test: &str, fields: &[(&str, String)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("RELIABILITY {test} {}", body.join(" "));
}

/// Collects a `HashMap` count.
pub fn bump(m: &mut HashMap<String, u64>, k: impl Into<String>) {
    *m.entry(k.into()).or_default() += 1;
}
