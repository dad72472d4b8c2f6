//! README's headline table cites runs under `results/`: each cited run must exist, must not be
//! marked unpublishable (a run from a dirty tree or across commits says so in its receipt), and
//! the row must quote the run's own machine (its CPU maker and last-level cache, as the run's
//! `results.json` read them from the machine). Every link into `results/` resolves, every run
//! folder is cited, and a run folder holds data, tables and at most a few headline plots.

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
    let root = root();
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

/// The workspace root.
fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files that publish figures: README.md, `docs/*.md` and every run's README.
fn published_docs() -> Vec<std::path::PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "results"] {
        for e in std::fs::read_dir(root.join(dir)).expect("list") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            } else if p.join("README.md").is_file() {
                files.push(p.join("README.md"));
            }
        }
    }
    files
}

/// The relative link targets of a Markdown text (`[..](target)`; anchors cut, URLs left out).
fn relative_links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', ' ']).next())
        .map(|t| t.split('#').next().unwrap_or(""))
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// `a/b/../c/./d` as `a/c/d`, without touching the file system.
fn normalize(p: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The run folders (`results/<run>`, the gate's baselines apart) a file's links point into.
fn linked_runs(file: &Path, text: &str) -> Vec<String> {
    let results = normalize(&root().join("results"));
    relative_links(text)
        .into_iter()
        .filter_map(|t| {
            let target = normalize(&file.parent()?.join(t));
            let rest = target.strip_prefix(&results).ok()?;
            let run = rest.components().next()?.as_os_str().to_string_lossy();
            (run != "gate").then(|| run.into_owned())
        })
        .collect()
}

/// Every link from README.md, `docs/` and a run's README into `results/` resolves.
#[test]
fn every_link_into_results_resolves() {
    let results = normalize(&root().join("results"));
    let mut links = 0;
    for file in published_docs() {
        let text = std::fs::read_to_string(&file).expect("read");
        for t in relative_links(&text) {
            let target = normalize(&file.parent().expect("a folder").join(t));
            if target.starts_with(&results) {
                assert!(
                    target.exists(),
                    "{}: link to {t}, which does not exist",
                    file.display()
                );
                links += 1;
            }
        }
    }
    assert!(links > 20, "only {links} links into results/");
}

/// A run folder stays only while a published figure cites it: a link from README.md or `docs/`,
/// from the README of a run so cited, or a gate baseline built from it (`results/gate/*.json`
/// name their runs' `results.json`). Older runs live in git history.
#[test]
fn every_committed_run_is_cited() {
    let root = root();
    let mut cited = std::collections::BTreeSet::new();
    let mut todo = Vec::new();
    for file in published_docs()
        .into_iter()
        .filter(|f| !f.starts_with(root.join("results")))
    {
        let text = std::fs::read_to_string(&file).expect("read");
        todo.extend(linked_runs(&file, &text));
    }
    for e in std::fs::read_dir(root.join("results/gate")).expect("results/gate") {
        let text = std::fs::read_to_string(e.expect("entry").path()).expect("read a baseline");
        for part in text.split("\"results/").skip(1) {
            todo.extend(part.split('/').next().map(str::to_string));
        }
    }
    while let Some(run) = todo.pop() {
        if cited.insert(run.clone()) {
            let readme = root.join("results").join(&run).join("README.md");
            if let Ok(text) = std::fs::read_to_string(&readme) {
                todo.extend(linked_runs(&readme, &text));
            }
        }
    }
    for e in std::fs::read_dir(root.join("results")).expect("results/") {
        let run = e.expect("entry").file_name().to_string_lossy().into_owned();
        assert!(
            run == "gate" || cited.contains(&run),
            "results/{run} is cited by no published figure: remove it (git history keeps it)"
        );
    }
}

/// A run folder holds its data (`results.json`, `cold.json`, `receipt.json`), its tables, its
/// README and at most three headline plots (PNG); `harness render` draws every other figure.
#[test]
fn a_run_folder_holds_data_tables_and_a_few_headline_plots() {
    const FILES: [&str; 6] = [
        "results.json",
        "cold.json",
        "receipt.json",
        "tables.md",
        "cold.md",
        "README.md",
    ];
    for e in std::fs::read_dir(root().join("results")).expect("results/") {
        let dir = e.expect("entry").path();
        if dir.file_name().is_some_and(|n| n == "gate") {
            continue;
        }
        assert!(
            dir.join("README.md").is_file(),
            "{}: no README",
            dir.display()
        );
        for f in std::fs::read_dir(&dir).expect("a run") {
            let name = f.expect("entry").file_name().to_string_lossy().into_owned();
            assert!(
                FILES.contains(&name.as_str()) || name == "plots",
                "{}: {name} is not a run's file",
                dir.display()
            );
        }
        let Ok(plots) = std::fs::read_dir(dir.join("plots")) else {
            continue;
        };
        let plots: Vec<String> = plots
            .map(|f| f.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            plots.len() <= 3 && plots.iter().all(|p| p.ends_with(".png")),
            "{}: {plots:?}: at most three headline PNGs",
            dir.display()
        );
    }
}
