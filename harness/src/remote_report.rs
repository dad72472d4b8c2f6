//! `tables.md` of a `harness remote` run, from its `results.json` (always built, so that
//! `harness render` and the committed-tables test read a remote run without the `remote` feature;
//! the run itself is `remote_table`).

use serde_json::Value;

/// The remote tables as markdown.
pub fn render(report: &Value) -> String {
    let mut s = format!(
        "Run at commit `{}` on {}.\n\n",
        report["source"]["git_commit"].as_str().unwrap_or("unknown"),
        crate::machine::machine_line(&report["machine"])
    );
    for t in report["tables"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "### {}\n\n{} records, IID batches of {}, {} timed batches per repeat, {} repeats (median; sd over repeats). \
             SeaweedFS on loopback, one `weed server`. Peers as their docs read S3 (notes below), each repeat \
             in a fresh process with an empty local cache: up to {} timed batches in blocks of 8, each block after 32 drained \
             ones (the loader tables' protocol; the drains fetch too).\n\n| row | MiB/s | sd | batches/s | × GET limit | × local warm | × best peer | verified |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
            t["name"].as_str().unwrap_or(""),
            t["records"],
            t["batch"],
            t["timed batches per repeat"],
            t["repeats"],
            t["peer timed batches per repeat"],
        ));
        let num =
            |v: &Value, d: usize| v.as_f64().map_or("–".to_string(), |x| format!("{x:.d$}"));
        for r in t["rows"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r["row"].as_str().unwrap_or(""),
                num(&r["MiB/s"], 0),
                num(&r["MiB/s sd"], 0),
                num(&r["batches/s"], 1),
                num(&r["x GET limit"], 2),
                num(&r["x local warm"], 2),
                num(&r["x best peer"], 2),
                match (r["verified"].as_bool(), r["row"].as_str()) {
                    (Some(true), _) => "yes",
                    (Some(false), _) => "**NO**",
                    (None, Some("get-limit")) => "reference",
                    (None, _) => "not measured",
                }
            ));
        }
        s.push('\n');
        for r in t["rows"].as_array().into_iter().flatten() {
            if let Some(note) = r["note"].as_str() {
                s.push_str(&format!(
                    "- `{}`: {note}\n",
                    r["row"].as_str().unwrap_or("")
                ));
            }
        }
        s.push('\n');
        for g in t["goals"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "Goal: {}: {}.\n",
                g["goal"].as_str().unwrap_or(""),
                match (g["ratio"].as_f64(), g["met"].as_bool()) {
                    (Some(x), Some(true)) => format!("{x:.2}x, met"),
                    (Some(x), _) => format!("{x:.2}x, **MISSED**"),
                    _ => "not measured".to_string(),
                }
            ));
        }
        s.push('\n');
    }
    s
}
