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

fn cpu_model() -> Option<String> {
    let info = read("/proc/cpuinfo")?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
}

fn caches() -> Value {
    benchkit::cache::levels()
        .into_iter()
        .map(|c| json!({"level": c.level, "type": c.kind, "size": c.size}))
        .collect()
}

pub fn receipts() -> Value {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    sys.refresh_cpu_all();
    json!({
        "cpu": cpu_model(),
        "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "physical_cores": sysinfo::System::physical_core_count(),
        "caches": caches(),
        "memory_bytes": sys.total_memory(),
        "cgroup_memory_max": read("/sys/fs/cgroup/memory.max"),
        "cgroup_cpu_max": read("/sys/fs/cgroup/cpu.max"),
        "os": sysinfo::System::long_os_version(),
        "kernel": sysinfo::System::kernel_version(),
        "hostname": sysinfo::System::host_name(),
        "rayon_threads": rayon::current_num_threads(),
    })
}

fn python_versions() -> Value {
    let Some(py) = config::python() else {
        return json!(null);
    };
    let script = "import json,sys\nv={'python': sys.version.split()[0]}\nfor m in ['numpy','array_record','torch','ml_dtypes','loaderx','pyarrow']:\n    try:\n        import importlib.metadata as md; v[m]=md.version(m.replace('_','-') if m=='array_record' else m)\n    except Exception:\n        v[m]=None\nprint(json.dumps(v))";
    cmd(&py, &["-c", script])
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(json!(null))
}

pub fn source_info() -> Value {
    let r = config::workspace_root().display().to_string();
    let commit = cmd("git", &["-C", &r, "rev-parse", "HEAD"]);
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
    const WANT: &[&str] = &[
        "hdf5-metno",
        "hdf5-metno-sys",
        "heed",
        "lmdb-master-sys",
        "arrow-ipc",
        "arrow-array",
        "parquet",
        "zstd",
        "zstd-sys",
        "crc32c",
        "memmap2",
        "rayon",
        "tiktoken-rs",
        "zune-jpeg",
        "fast_image_resize",
        "pyo3",
    ];
    let mut map = serde_json::Map::new();
    let mut name: Option<&str> = None;
    for line in LOCK.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name) {
            if WANT.contains(&n) {
                map.insert(
                    n.to_string(),
                    Value::String(v.trim_matches('"').to_string()),
                );
            }
            name = None;
        }
    }
    Value::Object(map)
}
