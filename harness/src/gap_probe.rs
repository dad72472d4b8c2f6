//! `harness gap-probe`: where a store row's gap to a peer comes from, measured in one process with
//! the arms interleaved (hidden subcommand; method notes in `docs/benchmarks.md`, "Probes and cells").
//!
//! A store table runs every backend in its own process, one after another, so two rows of one
//! repeat are minutes apart and this machine's drift (neighbours, the balloon) lands between them.
//! This probe writes the stores of one table once, then times them in rounds: every round draws
//! the same batches for every arm, runs the arms in a rotated order, and checks each timed batch
//! against the source after its timer stops (the cell protocol). Ratios are taken per round, so
//! the drift of one round cancels.
//!
//! Arms beside the named table rows (`npy-crc-limit` among them: npy's gather plus a CRC32C pass
//! over every record, the verified-copy reference):
//! * `zrecord-raw-noverify`: the zrecord-raw store opened with `verify: false` (the CRC32C's
//!   share of the row);
//! * `npy-4k`: the npy file rewritten with a 4 KiB header and its payload written in 4 MiB
//!   `pwrite`s from there, as a zrecord shard's records are (the page-cache layout's share: such
//!   a file is only about half mapped in 2 MiB pages);
//!
//! and, after the rounds, each mapped file's `Rss` and `FilePmdMapped` from `/proc/self/smaps`.
//! The stores are flushed (`sync -f`) after they are written, as a cell's are before its gathers.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use benchkit::rng::uniform_batch;
use benchkit::stats::median;
use competitors::{Batch, Reader, Source, Stored};
use datasets::npy::{NpyFile, header};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::cell_args::GapProbeArgs;
use crate::corpus::Loaded;
use crate::error::{HarnessError, Result};
use crate::store::BATCH;

/// One timed arm: gathers a batch, returns it for checking.
type Gather<'a> = Box<dyn FnMut(&[u64]) -> Result<Batch> + 'a>;

pub fn main(args: &GapProbeArgs) -> Result<ExitCode> {
    let GapProbeArgs {
        table,
        corpus,
        work,
        rounds,
        batches,
        arms,
    } = args;
    let (table, rounds, batches) = (*table, *rounds, *batches);
    let arms: Vec<&str> = arms.iter().map(String::as_str).collect();
    let work = work.clone();
    let loaded = Loaded::open(table, Path::new(corpus))?;
    let source = loaded.source();
    let mut gathers: Vec<(String, Gather<'_>)> = Vec::new();
    let mut keep: Vec<Stored> = Vec::new();
    for &arm in &arms {
        let base = arm.strip_suffix("-noverify").unwrap_or(arm);
        let base = if base == "npy-4k" {
            "npy-mmap-raw"
        } else {
            base
        };
        let mut b = base.parse::<competitors::Backend>()?.competitor();
        b.prepare(&source)
            .map_err(HarnessError::backend(arm, "prepare"))?;
        let dir = work.join(arm);
        let _ = std::fs::remove_dir_all(&dir);
        let stored = b
            .write(&source, &dir)
            .map_err(HarnessError::backend(arm, "write"))?;
        if arm == "npy-4k" {
            rewrite_npy_4k(&stored.dir.join("data.npy"))?;
        }
        let g: Gather<'_> = if arm == "zrecord-raw-noverify" {
            zrecord_unverified(&stored.dir.join("store.zr"), &source)?
        } else {
            reader_arm(
                b.open(&stored)
                    .map_err(HarnessError::backend(arm, "open"))?,
            )
        };
        keep.push(stored);
        gathers.push((arm.to_string(), g));
    }
    // As in a cell, the stores are written back before they are read (a cell's write-limit run
    // flushes the file system after the store's last write).
    crate::store::flush(&work)?;
    let n = source.len();
    let mut rng = SmallRng::seed_from_u64(7);
    // secs[arm][round]
    let mut secs = vec![Vec::new(); gathers.len()];
    let mut bytes = 0usize;
    for round in 0..rounds {
        let idx: Vec<Vec<u64>> = (0..batches)
            .map(|_| uniform_batch(&mut rng, n, BATCH))
            .collect();
        let k = gathers.len();
        for step in 0..k {
            let a = (step + round) % k;
            let (name, g) = &mut gathers[a];
            let mut total = 0.0;
            let mut got_bytes = 0;
            for ix in &idx {
                let t = Instant::now();
                let got = g(ix)?;
                total += t.elapsed().as_secs_f64();
                got_bytes += got.payload_bytes();
                source
                    .check(ix, &got)
                    .map_err(HarnessError::differs(format!("a batch of {name}")))?;
            }
            bytes = got_bytes;
            secs[a].push(total);
        }
    }
    let mib = bytes as f64 / f64::from(1 << 20);
    println!(
        "{} rounds x {batches} batches of {BATCH}, {mib:.1} MiB per arm per round",
        rounds
    );
    println!(
        "{:<24} {:>10}  per-round ratio to {}",
        "arm", "MiB/s", arms[0]
    );
    for (a, (name, _)) in gathers.iter().enumerate() {
        let ratios: Vec<f64> = secs[0].iter().zip(&secs[a]).map(|(r, s)| r / s).collect();
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{name:<24} {:>10.0}  median {:.3}  [{}]",
            mib / median(&secs[a]),
            median(&ratios),
            list.join(" ")
        );
    }
    print_mappings(&work)?;
    drop(gathers);
    for s in keep {
        let _ = std::fs::remove_dir_all(&s.dir);
    }
    Ok(ExitCode::SUCCESS)
}

fn reader_arm<'a>(mut r: Box<dyn Reader>) -> Gather<'a> {
    Box::new(move |ix| Ok(r.gather(ix)?))
}

/// The zrecord-raw store read without checksum verification, through the same pooled allocator
/// the row uses.
fn zrecord_unverified<'a>(path: &Path, source: &Source<'_>) -> Result<Gather<'a>> {
    let store_error = |source| HarnessError::Store {
        path: path.to_path_buf(),
        source,
    };
    let opts = zrecord::OpenOptions {
        verify: false,
        ..Default::default()
    };
    let alloc: Arc<dyn zrecord::Allocator> =
        Arc::new(loaderx::PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE));
    match source {
        Source::Dense(_) => {
            let view = zrecord::DenseStore::open_with(path, opts)
                .map_err(store_error)?
                .bind(alloc);
            Ok(Box::new(move |ix| {
                let b = view.gather(ix)?;
                Ok(competitors::zrecord_dense_batch(b))
            }))
        }
        Source::Ragged(_) => {
            let view = zrecord::RaggedStore::open_with(path, opts)
                .map_err(store_error)?
                .bind(alloc);
            Ok(Box::new(move |ix| {
                let b = view.gather(ix)?;
                Ok(competitors::zrecord_ragged_batch(b))
            }))
        }
    }
}

/// Rewrites an npy file in place of itself with a 4 KiB header (the same header dict, padded with
/// spaces, as the format allows) and the payload written in 4 MiB pieces from offset 4096.
fn rewrite_npy_4k(path: &Path) -> Result<()> {
    let (head, data) = {
        let old = NpyFile::open(path).map_err(|source| HarnessError::Datasets {
            what: "npy-4k: reading the npy-mmap-raw file",
            source,
        })?;
        (header(old.descr(), old.shape(), 4096), old.data().to_vec())
    };
    let at = head.len() as u64;
    std::fs::remove_file(path).map_err(HarnessError::io("remove", path))?;
    let f = std::fs::File::create(path).map_err(HarnessError::io("create", path))?;
    f.write_all_at(&head, 0)
        .map_err(HarnessError::io("write", path))?;
    for (k, piece) in data.chunks(4 << 20).enumerate() {
        f.write_all_at(piece, at + (k as u64) * (4 << 20))
            .map_err(HarnessError::io("write", path))?;
    }
    Ok(())
}

/// Prints `Rss` and `FilePmdMapped` of every mapping of a file under `work`.
fn print_mappings(work: &Path) -> Result<()> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")
        .map_err(HarnessError::io("read", "/proc/self/smaps"))?;
    let prefix = work.display().to_string();
    let mut current: Option<String> = None;
    let (mut rss, mut pmd) = (0u64, 0u64);
    let flush = |name: &Option<String>, rss: u64, pmd: u64| {
        if let Some(n) = name {
            println!("mapping {n}: Rss {rss} kB, FilePmdMapped {pmd} kB");
        }
    };
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            flush(&current, rss, pmd);
            current = fields
                .last()
                .filter(|p| p.starts_with(&prefix))
                .map(|p| p.to_string());
            (rss, pmd) = (0, 0);
        } else if current.is_some() {
            let kb = || {
                fields
                    .get(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            match fields.first() {
                Some(&"Rss:") => rss = kb(),
                Some(&"FilePmdMapped:") => pmd = kb(),
                _ => {}
            }
        }
    }
    flush(&current, rss, pmd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rewrite_npy_4k;

    #[test]
    fn the_4k_npy_holds_the_same_array_after_a_4096_byte_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let data: Vec<u8> = (0..3 * 4096 + 40).map(|k| (k * 7 % 251) as u8).collect();
        let shape = [(data.len() / 4) as u64];
        datasets::npy::write_npy(&path, "<i4", &shape, &data).unwrap();
        rewrite_npy_4k(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 4096 + data.len());
        assert_eq!(&bytes[4096..], &data[..]);
        let map = datasets::npy::NpyFile::open(&path).unwrap();
        assert_eq!(map.shape(), &shape);
        assert_eq!(map.descr(), "<i4");
        assert_eq!(map.data(), &data[..]);
    }
}
