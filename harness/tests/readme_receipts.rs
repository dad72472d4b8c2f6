//! README's headline table cites runs under `results/`: each cited run must exist, must not be
//! marked unpublishable (a run from a dirty tree or across commits says so in its receipt), and
//! the row must quote the run's own machine (its CPU maker and last-level cache, as the run's
//! `results.json` read them from the machine).

use std::path::Path;

use serde_json::Value;

/// The `results/<run>/` links of one Markdown line.
fn cited_runs(line: &str) -> Vec<String> {
    line.split("](results/")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|r| r.trim_end_matches('/').to_string())
        .collect()
}

/// The last-level cache of a run's receipt in MiB, as sysfs gave it (`32768K` -> 32).
fn llc_mib(machine: &Value) -> Option<u64> {
    machine
        .get("caches")?
        .as_array()?
        .iter()
        .filter(|c| c.get("type").and_then(Value::as_str) != Some("Instruction"))
        .max_by_key(|c| c.get("level").and_then(Value::as_str).map(str::to_string))?
        .get("size")?
        .as_str()?
        .strip_suffix('K')?
        .parse::<u64>()
        .ok()
        .map(|k| k / 1024)
}

#[test]
fn readme_cites_publishable_runs_with_their_own_machine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut checked = 0;
    for line in readme.lines().filter(|l| l.starts_with('|')) {
        for run in cited_runs(line) {
            let dir = root.join("results").join(&run);
            assert!(
                dir.is_dir(),
                "README cites {run}, which is not under results/"
            );
            // A cold-table run keeps its cells in cold.json and its receipt in receipt.json
            // (runs from before receipts: in their README only).
            let bytes = match std::fs::read(dir.join("results.json")) {
                Ok(b) => b,
                Err(_) => match std::fs::read(dir.join("receipt.json")) {
                    Ok(b) => b,
                    Err(_) => {
                        assert!(dir.join("cold.json").is_file(), "{run}: no results");
                        continue;
                    }
                },
            };
            let doc: Value = serde_json::from_slice(&bytes).expect("results or receipt JSON");
            assert_ne!(
                doc["source"]["publishable"],
                Value::Bool(false),
                "README cites {run}, whose receipt says it is unpublishable: {}",
                doc["source"]["unpublishable_because"]
            );
            let cpu = doc["machine"]["cpu"].as_str().unwrap_or("");
            for maker in ["EPYC", "Xeon"] {
                if cpu.contains(maker) {
                    assert!(
                        line.contains(maker),
                        "README's row citing {run} does not name its machine ({cpu}): {line}"
                    );
                }
            }
            if let Some(mib) = llc_mib(&doc["machine"]) {
                assert!(
                    line.contains(&format!("{mib} MiB L3")),
                    "README's row citing {run} does not give its L3 ({mib} MiB): {line}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "README cites no run");
}
