//! The gate's bite: a scratch copy of the working tree whose zrecord gather (then, in a second
//! copy, whose loader's batch assembly) does 25 % more work fails `harness gate` against the
//! unmodified tree. Ignored by default (it builds the release harness twice more and runs the
//! gate twice, ~15 minutes on a 2-core machine): `bash scripts/gate_bite.sh` runs it (in release,
//! so the reference is a release build) and keeps its summary under `results/gate/`.
//!
//! The slowdown is injected into the source, never switched on in the product: after the first
//! line of each patched function, a guard whose drop spins for a quarter of the time the function
//! took, so every call costs 1.25x its own time.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const EXE: &str = env!("CARGO_BIN_EXE_harness");

/// Statements inserted after the opening line of a patched function.
const SPIN: &str = "        struct GateBiteSpin(std::time::Instant);
        impl Drop for GateBiteSpin {
            fn drop(&mut self) {
                let took = self.0.elapsed();
                while self.0.elapsed() < took + took / 4 {
                    std::hint::spin_loop();
                }
            }
        }
        let _gate_bite_spin = GateBiteSpin(std::time::Instant::now());
";

/// One injected slowdown: the file, the opening line of each function it slows, and the gate's
/// paths that must fail.
struct Slowdown {
    name: &'static str,
    file: &'static str,
    opening: &'static str,
    must_fail: &'static [&'static str],
}

const SLOWDOWNS: [Slowdown; 2] = [
    Slowdown {
        name: "zrecord gather (Dense and Ragged views) 25 % more work",
        file: "zrecord/src/read/view.rs",
        opening: "    pub fn gather(&self, idx: &[u64]) -> Result<",
        must_fail: &["gather-dense-vision", "gather-ragged-tokens"],
    },
    Slowdown {
        name: "loader batch assembly (a worker's draw and gather of one step) 25 % more work",
        file: "loaderx/src/loader/source.rs",
        opening: "    pub(super) fn produce(&mut self)",
        must_fail: &["loader-ragged-tokens"],
    },
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace root")
}

/// Copies the tree's tracked and untracked (not ignored) files that a harness build reads into
/// `dst`: the working tree as it is, uncommitted changes included.
fn copy_tree(src: &Path, dst: &Path) {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(src)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let mut copied = 0;
    for rel in out.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let rel = Path::new(std::str::from_utf8(rel).expect("a UTF-8 path"));
        let top = rel.components().next().expect("a component");
        if ["results", "docs", "fuzz"]
            .iter()
            .any(|d| top.as_os_str() == *d)
        {
            continue;
        }
        let from = src.join(rel);
        if !from.is_file() {
            continue; // deleted in the working tree
        }
        let to = dst.join(rel);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        copied += 1;
    }
    assert!(copied > 100, "only {copied} files copied");
}

/// Inserts [`SPIN`] after every line of `file` that starts with `opening`; returns how many.
fn patch(tree: &Path, s: &Slowdown) -> usize {
    let path = tree.join(s.file);
    let text = std::fs::read_to_string(&path).expect("read the file to patch");
    let mut out = String::with_capacity(text.len() + 1024);
    let mut n = 0;
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        if line.starts_with(s.opening) {
            assert!(
                line.trim_end().ends_with('{'),
                "one-line opening expected: {line}"
            );
            out.push_str(SPIN);
            n += 1;
        }
    }
    std::fs::write(&path, out).expect("write the patched file");
    n
}

/// Builds `tree`'s release harness into the shared target directory and copies it to `out`.
fn build(tree: &Path, target: &Path, out: &Path) {
    let status = Command::new("bash")
        .arg(root().join("scripts/gate_build.sh"))
        .arg(tree)
        .arg(out)
        .env("CARGO_TARGET_DIR", target)
        .status()
        .expect("run gate_build.sh");
    assert!(status.success(), "building {} failed", tree.display());
}

/// The gate's arguments for the shared corpora, when present.
fn corpora_args() -> Vec<String> {
    let dir = std::env::var_os("LOADERX_CORPORA")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/corpora"));
    let mut v = Vec::new();
    for (flag, sub) in [("--pets", "oxford-pet"), ("--text", "text")] {
        if dir.join(sub).is_dir() {
            v.extend([flag.to_string(), dir.join(sub).display().to_string()]);
        }
    }
    v
}

#[test]
#[ignore = "builds the harness twice more and runs the gate twice: scripts/gate_bite.sh"]
fn a_25_percent_slower_gather_or_loader_fails_the_gate() {
    let exe = Path::new(EXE);
    assert!(
        exe.parent().and_then(Path::file_name) == Some("release".as_ref()),
        "run in release (scripts/gate_bite.sh): the reference must be a release build"
    );
    let target = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target directory");
    let out_dir = std::env::var_os("LOADERX_GATE_BITE_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("cache/gate-bite"));
    std::fs::create_dir_all(&out_dir).expect("out dir");
    // The reference is this test's own harness (the unmodified tree); a scratch build replaces
    // the executable in the shared target directory, so it is copied away first and put back.
    let reference = out_dir.join("harness-reference");
    std::fs::copy(exe, &reference).expect("copy the reference harness");
    let pairs = std::env::var("LOADERX_GATE_PAIRS").unwrap_or_else(|_| "12".into());
    let mut summary = Vec::new();
    // `LOADERX_GATE_BITE_ONLY=K` runs only slowdown K (0: the gather, 1: the loader).
    let only: Option<usize> = std::env::var("LOADERX_GATE_BITE_ONLY").ok().map(|k| {
        k.parse()
            .expect("LOADERX_GATE_BITE_ONLY: a slowdown's index")
    });
    for (k, s) in SLOWDOWNS.iter().enumerate() {
        if only.is_some_and(|o| o != k) {
            continue;
        }
        let scratch = tempfile::tempdir().expect("scratch dir");
        copy_tree(&root(), scratch.path());
        let n = patch(scratch.path(), s);
        assert!(n >= 1, "{}: no line starts with {:?}", s.file, s.opening);
        let slowed = out_dir.join(format!("harness-slowed-{k}"));
        build(scratch.path(), target, &slowed);
        std::fs::copy(&reference, exe).expect("put the reference harness back");
        let gate_out = out_dir.join(format!("slowdown-{k}"));
        let o = Command::new(&reference)
            .arg("gate")
            .arg(&reference)
            .arg(&slowed)
            .args(["--pairs", &pairs, "--seed", &(k + 1).to_string()])
            .arg("--out")
            .arg(&gate_out)
            .args(["--label-baseline", "unmodified tree"])
            .args(["--label-candidate", s.name])
            .args(corpora_args())
            .output()
            .expect("run the gate");
        let log = String::from_utf8_lossy(&o.stdout).to_string();
        println!("{}: {log}", s.name);
        let decision: Value = serde_json::from_slice(
            &std::fs::read(gate_out.join("decision.json")).expect("decision.json"),
        )
        .expect("decision JSON");
        assert_eq!(decision["fact"], Value::Null, "no cell may fail: {log}");
        assert_eq!(o.status.code(), Some(1), "the gate must fail: {log}");
        assert_eq!(decision["pass"], json!(false), "{log}");
        let verdicts = decision["verdicts"].as_array().expect("verdicts");
        for path in s.must_fail {
            let of_path: Vec<&Value> = verdicts.iter().filter(|v| v["path"] == *path).collect();
            assert!(!of_path.is_empty(), "no verdict on {path}: {log}");
            assert!(
                of_path
                    .iter()
                    .any(|v| v["pass"] == json!(false) && v["deciding"] != json!(false)),
                "{path} must fail a deciding verdict: {log}"
            );
        }
        summary.push(json!({
            "slowdown": s.name,
            "patched": {"file": s.file, "functions": n},
            "must_fail": s.must_fail,
            "pass": decision["pass"],
            "verdicts": decision["verdicts"],
            "seconds": decision["seconds"],
        }));
    }
    let doc = json!({
        "schema": "loaderx-gate-bite/1",
        "command": "bash scripts/gate_bite.sh",
        "pairs": pairs,
        "slowdowns": summary,
    });
    let path = out_dir.join("bite.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("write");
    assert!(!summary.is_empty(), "no slowdown ran");
    println!(
        "gate bite: every slowdown run failed the gate ({})",
        path.display()
    );
}
