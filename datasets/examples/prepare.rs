//! Prepare benchmark inputs from the command line and report the wall time.
//!
//! ```text
//! cargo run --release -p datasets --example prepare -- vision <source_dir> <out_dir> <n>
//! cargo run --release -p datasets --example prepare -- tokens <out_dir> <dense> <ragged> <source>...
//! cargo run --release -p datasets --features https --example prepare -- download <cache_dir>
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn run(args: &[String]) -> Result<(), String> {
    let num = |s: &String| {
        s.parse::<usize>()
            .map_err(|_| format!("expected a number, found {s:?}"))
    };
    let t = Instant::now();
    match args {
        [cmd, src, out, n] if cmd == "vision" => {
            let m = datasets::vision::prepare(src, out, num(n)?, true).map_err(|e| e.to_string())?;
            println!(
                "vision: {} records ({} unique, cycled {}), ragged {:.1} MiB, dense sha256 {}, ragged sha256 {}",
                m.records,
                m.unique_records,
                m.cycled,
                m.ragged.logical_bytes as f64 / (1 << 20) as f64,
                m.dense.logical_sha256,
                m.ragged.logical_sha256
            );
        }
        [cmd, out, dense, ragged, sources @ ..] if cmd == "tokens" && !sources.is_empty() => {
            let sources: Vec<PathBuf> = sources.iter().map(PathBuf::from).collect();
            let m = datasets::tokens::prepare(&sources, out, num(dense)?, num(ragged)?, true)
                .map_err(|e| e.to_string())?;
            let l = m.ragged.lengths;
            println!(
                "tokens: stream {} tokens; ragged {} records (unique {}, cycles {}) p10 {} median {} mean {:.1} p90 {}; dense {} blocks (cycles {})",
                m.stream_tokens,
                m.ragged.records,
                m.ragged.unique_records,
                m.ragged.cycles,
                l.p10,
                l.median,
                l.mean,
                l.p90,
                m.dense.records,
                m.dense.cycles
            );
        }
        [cmd, cache] if cmd == "download" => {
            let sources = datasets::download::FullDatasetSources::public();
            let got = datasets::download::fetch_full_datasets(cache.as_ref(), &sources, true)
                .map_err(|e| e.to_string())?;
            for (name, sha, verified) in &got.digests {
                println!("{sha}  {name}  ({})", if *verified { "verified" } else { "UNPINNED" });
            }
            println!("pets: {}\nwikitext: {}", got.pets_dir.display(), got.wikitext_train.display());
        }
        _ => return Err("usage: prepare vision <src> <out> <n> | tokens <out> <dense> <ragged> <source>... | download <cache>".into()),
    }
    eprintln!("elapsed: {:.2} s", t.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
