//! The Rust loader cell (`harness loader-cell KIND STORE CORPUS ARM BATCHES`, one fresh process per
//! timed repeat of a Rust row of the loader tables): the `memcpy-limit` reference, the
//! `bare-gather` loop and the `loaderx-w{n}[-completion]` loaders over one zrecord store, timed in
//! blocks the way the Python arms are (`harness/python/loaders/common.py`) and verified against the
//! corpus's source arrays after each block's timer. `loader` runs the cells and builds the
//! tables from their JSON lines.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loaderx::{IndexSampler, Loader, LoaderOptions, Mode, PooledAllocator, Sampler};
use serde_json::json;
use zrecord::Allocator;

use crate::cell_args::LoaderCellArgs;
use crate::corpus::Loaded;
use crate::corrupt;
use crate::error::{HarnessError, Result};
use crate::loader::arms::{self, BATCH, BUDGET_S, DRAIN, WARMUP};
use crate::loader::limit::CopyLimit;
use crate::loader::matching::{Delivered, Steps};
use crate::loader::pair::BarePair;
use crate::loader::store::open_view;
use crate::table::{BARE_ROW, LIMIT_ROW, Layout};

/// `loader-cell KIND STORE CORPUS ARM BATCHES` → prints one JSON line. The draws are
/// `IndexSampler(n, 256, Iid, seed 7)`'s, the ones `arms::write_draws` writes for the
/// Python arms, and the timing is theirs too (`harness/python/loaders/common.py`): warm-up
/// batches, then blocks of timed batches (`arms::block_from_env`) held until the block's
/// timer stops, every block after [`DRAIN`] untimed batches. Warm-up and timed batches are
/// compared in full with the batch the corpus's source arrays give for their step's indices
/// (never with a zrecord gather); a drained batch is only matched to its step by its probe
/// records and is neither timed nor counted: comparing 32 drained batches in full lets a
/// prefetching loader refill its whole window meanwhile, and the timed block then times batches
/// made before its timer started.
pub fn cell_main(args: &LoaderCellArgs) -> Result<ExitCode> {
    let (kind, store, arm, batches) = (&args.kind, &args.store, &args.arm, args.batches);
    let layout = kind.layout().ok_or_else(|| HarnessError::Unknown {
        what: "table",
        name: kind.name().to_string(),
    })?;
    let loaded = Loaded::open(*kind, &args.corpus)?;
    let source = loaded.source();
    let alloc: Arc<dyn Allocator> = Arc::new(PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE));
    let (view, n) = open_view(store, layout == Layout::Dense, Default::default(), alloc)?;
    if n != source.len() {
        return mismatch(format!(
            "{arm}: the store {} holds {n} records, the source {}",
            store.display(),
            source.len()
        ));
    }
    let sampler = || {
        IndexSampler::new(n, BATCH, Mode::Iid, 7)
            .map(|s| Box::new(s) as Box<dyn Sampler>)
            .map_err(HarnessError::from)
    };
    // The draws, for the source batches; a batch belongs to the earliest pending step whose
    // probe records it holds (several workers deliver in completion order, as documented).
    let mut reference = sampler()?;
    let mut steps = Steps::default();
    let mut draw = move || -> Result<Vec<u64>> { Ok(reference.next()?.to_vec()) };
    // The limit row's copy, for its note (`None` for every other arm).
    let mut limit_note = None;
    let mut deliver: Box<dyn FnMut() -> Result<Delivered>> = if arm == BARE_ROW {
        let mut s = sampler()?;
        let view = view.clone();
        Box::new(move || {
            let idx = s.next()?.to_vec();
            Ok(Delivered::Loader(vec![view.gather(&idx)?]))
        })
    } else if arm == LIMIT_ROW {
        let limit = CopyLimit::load(&view, n, BATCH)?;
        limit_note = Some(limit.describe());
        // One copying thread per core, batches ahead as a loaderx row with 4 workers and
        // prefetch 4 holds them.
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let rx = Arc::new(limit).pipeline(IndexSampler::new(n, BATCH, Mode::Iid, 7)?, threads, 4);
        Box::new(move || {
            rx.recv()
                .map(Delivered::Copy)
                .map_err(|_| HarnessError::LoaderEnded { delivered: None })
        })
    } else {
        // `loaderx-w{n}` delivers in step order (as every peer row does); `loaderx-w{n}-completion`
        // in completion order.
        let (spec, ordered) = match arm.strip_suffix("-completion") {
            Some(spec) => (spec, false),
            None => (arm.as_str(), true),
        };
        let workers: usize = spec
            .strip_prefix("loaderx-w")
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| HarnessError::Unknown {
                what: "arm",
                name: arm.clone(),
            })?;
        let opts = LoaderOptions::new(workers, 4).ordered(ordered);
        let mut loader = Loader::new(vec![("data", vec![view.clone()])], sampler()?, opts)?;
        Box::new(move || {
            let shards = loader
                .next()
                .ok_or(HarnessError::LoaderEnded { delivered: None })??;
            Ok(Delivered::Loader(
                shards
                    .into_iter()
                    .flat_map(|s| s.into_pairs().into_iter().map(|(_, b)| b))
                    .collect(),
            ))
        })
    };
    // The test-only switch (`corrupt::ENV`): one received batch gets a flipped byte.
    let mut corrupt = corrupt::Counter::from_env();
    let mut next = move || -> Result<Delivered> {
        let b = deliver()?;
        Ok(match corrupt.hit().then(|| b.corrupted()).flatten() {
            Some(c) => c,
            None => b,
        })
    };
    // `full`: compare with the source batch (warm-up and timed batches); else only match the
    // batch to its step (drained batches).
    let mut verify = |got: &Delivered, full: bool| -> Result<bool> {
        // The limit row is a reference: its bytes are a span of the store, not the batch's
        // records, so there is nothing to compare (its row says `verified: null`).
        if matches!(got, Delivered::Copy(_)) {
            return Ok(true);
        }
        let Some(idx) = steps.take(got, &source, &mut draw)? else {
            return Ok(false);
        };
        Ok(!full || got.same_as_source(&idx, &source))
    };
    let mut step = 0usize;
    for _ in 0..WARMUP {
        if !verify(&next()?, true)? {
            return mismatch(format!(
                "{arm}: warm-up batch {step} differs from every pending step's source records"
            ));
        }
        step += 1;
    }
    // The sampled peak-RAM run holds one batch at a time and drains nothing (as the Python arms).
    let (block, drain) = if std::env::var("LOADERX_LOADER_MEMORY_PASS").as_deref() == Ok("1") {
        (1, 0)
    } else {
        (arms::block_from_env()?, DRAIN)
    };
    // An inline row times the bare gather beside it (`loader::pair`), before its block in every
    // other block and after it in the rest (not in the peak-RAM run, which times nothing).
    let mut pair = if block > 1 {
        BarePair::of(arm, &view, n)?
    } else {
        None
    };
    let mut pair_block = |m: usize, blocks: usize, first: bool| -> Result<bool> {
        match pair.as_mut() {
            Some(p) if (blocks % 2 == 1) == first => p.block(m, &source),
            _ => Ok(true),
        }
    };
    let mut blocks = 0usize;
    let mut verified = 0usize;
    let mut spent = Duration::ZERO;
    while verified < batches && (verified == 0 || spent.as_secs_f64() < BUDGET_S) {
        for _ in 0..drain {
            // Matched to its step by its probe records only (see above).
            if !verify(&next()?, false)? {
                return mismatch(format!(
                    "{arm}: drained batch {step} holds no pending step's source records"
                ));
            }
            step += 1;
        }
        let m = block.min(batches - verified);
        if !pair_block(m, blocks, true)? {
            return mismatch(format!(
                "{arm}: a bare gather beside block {blocks} differs from its source records"
            ));
        }
        let t = Instant::now();
        let held = (0..m).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        spent += t.elapsed();
        for b in &held {
            if !verify(b, true)? {
                return mismatch(format!(
                    "{arm}: timed batch {step} differs from every pending step's source records"
                ));
            }
            verified += 1;
            step += 1;
        }
        drop(held);
        if !pair_block(m, blocks, false)? {
            return mismatch(format!(
                "{arm}: a bare gather beside block {blocks} differs from its source records"
            ));
        }
        blocks += 1;
    }
    drop(next);
    // This process's peak resident set, a floor for runs too short for the PSS sampler.
    let peak = crate::child::proc_bytes("/proc/self/status", "VmHWM:").unwrap_or(0);
    let mut line = json!({
        "per_batch_s": spent.as_secs_f64() / verified.max(1) as f64,
        "verified": verified > 0,
        "verified_batches": verified,
        "peak_rss_bytes": peak,
    });
    if let Some(p) = pair.as_ref().and_then(BarePair::per_batch_s) {
        line["bare_per_batch_s"] = json!(p);
    }
    if let Some(how) = limit_note {
        line["config"] = json!(format!(
            "the store's {n} records held in memory; per batch as many bytes as its records hold \
             copied as one contiguous span into a recycled buffer ({how}, the faster of memcpy \
             and the gather's stores measured before the timed loop), by one copying thread per \
             core ({} here) with up to 4 batches done ahead, in completion order; no loader, no \
             file, no checksum, no per-record work, no order to keep: every row moves at least \
             these bytes with at least this work; a reference, not compared",
            std::thread::available_parallelism().map_or(1, |t| t.get())
        ));
        line["reference"] = json!(true);
    }
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

/// A batch differed from the source: the cell's JSON line says so (`mismatch`), and the row is
/// `verified: false`.
fn mismatch(msg: String) -> Result<ExitCode> {
    println!(
        "{}",
        json!({"per_batch_s": null, "verified": false, "mismatch": true, "error": msg})
    );
    Ok(ExitCode::SUCCESS)
}
