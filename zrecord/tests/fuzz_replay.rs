//! T7 on stable, inside `cargo test`: replays the committed fuzz corpus and regression inputs
//! (`fuzz/corpus/<target>/*`, `fuzz/regressions/<target>/*`) through the same harness the
//! cargo-fuzz targets use (`fuzz/src/lib.rs`), then runs a small deterministic mutation loop over
//! every seed (`ZR_FUZZ_MUTATIONS` per seed, CI 300). Any panic fails the test and names the input.

#[path = "../../fuzz/src/lib.rs"]
mod harness;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

type Target = fn(&[u8]) -> bool;

const TARGETS: [(&str, Target); 4] = [
    ("open_container", harness::open_container),
    ("index_decode", harness::index_decode),
    ("record_decode", harness::record_decode),
    ("version_manifest", harness::version_manifest),
];

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut v = Vec::new();
    for sub in ["corpus", "regressions"] {
        if let Ok(rd) = std::fs::read_dir(root.join(sub).join(target)) {
            v.extend(rd.map(|e| e.unwrap().path()));
        }
    }
    v.sort();
    v
}

/// Runs one input; returns whether a container opened.
fn run(target: &str, f: Target, data: &[u8], what: &str) -> bool {
    let r = catch_unwind(AssertUnwindSafe(|| f(data)));
    if r.is_err() {
        let dir = std::env::temp_dir()
            .join("zrecord-fuzz-failures")
            .join(target);
        let _ = std::fs::create_dir_all(&dir);
        let out = dir.join(format!("crash-{:016x}", fxhash(data)));
        let _ = std::fs::write(&out, data);
        panic!(
            "{target}: panic on {what} (input saved to {}; copy it to fuzz/regressions/{target}/)",
            out.display()
        );
    }
    r.unwrap_or(false)
}

fn fxhash(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn fuzz_corpus_and_regressions_replay_without_a_panic() {
    let mut total = 0;
    for (name, f) in TARGETS {
        let files = inputs(name);
        assert!(!files.is_empty(), "no corpus for {name}");
        for p in &files {
            let opened = run(
                name,
                f,
                &std::fs::read(p).unwrap(),
                &p.display().to_string(),
            );
            // The committed seeds describe valid containers: the harness must get them open,
            // else fuzzing would never get past the checksums.
            if p.parent().unwrap().parent().unwrap().ends_with("corpus") {
                assert!(opened, "seed {} does not open", p.display());
            }
        }
        total += files.len();
    }
    println!("RELIABILITY T7-replay inputs={total} crashes=0");
}

#[test]
fn mutated_fuzz_seeds_never_panic() {
    let per_seed = std::env::var("ZR_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300u64);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut total = 0u64;
    for (name, f) in TARGETS {
        for p in inputs(name) {
            let seed = std::fs::read(&p).unwrap();
            for _ in 0..per_seed {
                let mut d = seed.clone();
                for _ in 0..1 + next() % 4 {
                    if d.is_empty() {
                        d.push(next() as u8);
                    }
                    let pos = (next() % d.len() as u64) as usize;
                    match next() % 6 {
                        0 => d[pos] ^= 1 << (next() % 8),
                        1 => d[pos] = next() as u8,
                        2 => d.truncate(pos),
                        3 => d.insert(pos, next() as u8),
                        4 => {
                            let v = [0u8, 0xff, 0x7f, 0x80][(next() % 4) as usize];
                            for b in d.iter_mut().skip(pos).take(8) {
                                *b = v;
                            }
                        }
                        _ => {
                            d.remove(pos);
                        }
                    }
                }
                let _ = run(name, f, &d, &format!("a mutation of {}", p.display()));
                total += 1;
            }
        }
    }
    println!("RELIABILITY T7-mutations inputs={total} crashes=0");
}
