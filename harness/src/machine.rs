//! Receipts: what machine, toolchain, libraries and source commit a run used (`machine` and
//! `source` of `results.json`).

use std::process::Command;

use serde_json::{Value, json};

use crate::config;

fn cmd(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn receipts() -> Value {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    sys.refresh_cpu_all();
    let cpu = read("/proc/cpuinfo").and_then(|info| {
        let line = info.lines().find(|l| l.starts_with("model name"))?;
        Some(line.split(':').nth(1)?.trim().to_string())
    });
    let caches = benchkit::cache::levels().into_iter();
    json!({
        "cpu": cpu,
        "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "physical_cores": sysinfo::System::physical_core_count(),
        "caches": caches.map(|c| json!({"level": c.level, "type": c.kind, "size": c.size})).collect::<Vec<_>>(),
        "memory_bytes": sys.total_memory(),
        "cgroup_memory_max": read("/sys/fs/cgroup/memory.max"),
        "cgroup_cpu_max": read("/sys/fs/cgroup/cpu.max"),
        "os": sysinfo::System::long_os_version(),
        "kernel": sysinfo::System::kernel_version(),
        "hostname": sysinfo::System::host_name(),
        "rayon_threads": rayon::current_num_threads(),
    })
}

/// The machine in one line, read from the receipts: CPU model, logical CPUs and physical cores,
/// and the last-level cache (README quotes each run's own).
pub fn machine_line(m: &Value) -> String {
    let mut line = m["cpu"].as_str().unwrap_or("unknown CPU").to_string();
    if let Some(l) = m["logical_cpus"].as_u64() {
        line += &format!(", {l} logical CPUs");
    }
    if let Some(c) = m["physical_cores"].as_u64() {
        line += &format!(" ({c} cores)");
    }
    let caches = m["caches"].as_array().into_iter().flatten();
    let level = |c: &&Value| c["level"].as_str().and_then(|l| l.parse::<u32>().ok());
    if let Some(c) = caches
        .filter(|c| c["type"] != "Instruction")
        .max_by_key(level)
    {
        let field = |k: &str| c[k].as_str().unwrap_or("?").to_string();
        line += &format!(", L{} {}", field("level"), field("size"));
    }
    line
}

/// Whether a run may be published: the tree was clean when it started and when it ended, at the
/// same commit. Writes `publishable` (and `unpublishable_because` when not) into `end`, the
/// receipt the run keeps.
pub fn seal(start: &Value, end: &mut Value) {
    let (c0, c1) = (start["git_commit"].as_str(), end["git_commit"].as_str());
    let clean = |v: &Value| v["git_dirty"].as_bool() == Some(false);
    let why = match (c0, c1) {
        (None, _) | (_, None) => Some("no git commit could be read".to_string()),
        (Some(a), Some(b)) if a != b => {
            Some(format!("the commit changed during the run ({a} -> {b})"))
        }
        _ if !clean(start) => Some("the tree had uncommitted changes when the run started".into()),
        _ if !clean(end) => Some("the tree had uncommitted changes when the run ended".into()),
        _ => None,
    };
    end["publishable"] = Value::Bool(why.is_none());
    if let Some(w) = why {
        end["unpublishable_because"] = Value::String(w);
    }
}

fn python_versions() -> Value {
    let script = "import json,sys\nv={'python': sys.version.split()[0]}\nfor m in ['numpy','array_record','torch','ml_dtypes','loaderx','pyarrow']:\n    try:\n        import importlib.metadata as md; v[m]=md.version(m.replace('_','-') if m=='array_record' else m)\n    except Exception:\n        v[m]=None\nprint(json.dumps(v))";
    let out = config::python().and_then(|py| cmd(&py, &["-c", script]));
    out.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

pub fn source_info() -> Value {
    let r = config::workspace_root().display().to_string();
    let commit = cmd("git", &["-C", &r, "rev-parse", "HEAD"]);
    // Untracked files count: a new source file changes what is built. `cache/` and `target/`
    // are ignored by .gitignore, and a run writes its own output only after this is read.
    let dirty = cmd("git", &["-C", &r, "status", "--porcelain"]).map(|s| !s.is_empty());
    json!({
        "git_commit": commit,
        "git_dirty": dirty,
        "command_line": std::env::args().collect::<Vec<_>>(),
        "rustc": cmd("rustc", &["--version"]),
        "crates": locked_versions(),
        "libhdf5": cmd("pkg-config", &["--modversion", "hdf5"]),
        "python": python_versions(),
    })
}

/// Versions of the storage and codec crates this binary was built with (from Cargo.lock).
fn locked_versions() -> Value {
    const LOCK: &str = include_str!("../../Cargo.lock");
    const WANT: &str = "hdf5-metno hdf5-metno-sys heed lmdb-master-sys arrow-ipc arrow-array \
        parquet zstd zstd-sys crc32c memmap2 rayon tiktoken-rs zune-jpeg fast_image_resize pyo3";
    let mut map = serde_json::Map::new();
    let mut name: Option<&str> = None;
    for line in LOCK.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let Some(v) = line.strip_prefix("version = ")
            && let Some(n) = name.take()
            && WANT.split_whitespace().any(|w| w == n)
        {
            map.insert(n.to_string(), json!(v.trim_matches('"')));
        }
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_publishable_only_from_a_clean_tree_at_one_commit() {
        let clean = json!({"git_commit": "abc", "git_dirty": false});
        let mut end = clean.clone();
        seal(&clean, &mut end);
        assert_eq!(end["publishable"], json!(true));
        assert!(end.get("unpublishable_because").is_none());
        let dirty = json!({"git_commit": "abc", "git_dirty": true});
        let moved = json!({"git_commit": "def", "git_dirty": false});
        let unknown = json!({"git_commit": null, "git_dirty": null});
        for (start, end) in [
            (&dirty, &clean),
            (&clean, &dirty),
            (&clean, &moved),
            (&unknown, &clean),
        ] {
            let mut e = end.clone();
            seal(start, &mut e);
            assert_eq!(e["publishable"], json!(false), "{start} -> {end}");
            assert!(e["unpublishable_because"].is_string());
        }
    }

    #[test]
    fn the_machine_line_names_cpu_cores_and_last_level_cache() {
        let m = json!({"cpu": "AMD EPYC", "logical_cpus": 2, "physical_cores": 2, "caches": [
            {"level": "1", "type": "Data", "size": "48K"},
            {"level": "1", "type": "Instruction", "size": "32K"},
            {"level": "3", "type": "Unified", "size": "32768K"},
            {"level": "2", "type": "Unified", "size": "1024K"}]});
        assert_eq!(
            machine_line(&m),
            "AMD EPYC, 2 logical CPUs (2 cores), L3 32768K"
        );
        assert_eq!(machine_line(&json!({})), "unknown CPU");
    }
}
