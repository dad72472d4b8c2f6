//! T11 (reliability plan): loader fault matrix with timing and resource checks.
//!
//! `tests/loader.rs` already checks the delivery order for transform errors, out-of-range gathers and
//! panics. This binary adds what that matrix does not measure:
//!
//! * failures injected in the transform, in the gather (an out-of-range index drawn at step `k`, or
//!   the store closed mid-run by the sampler at step `k`) and in the sampler itself, at
//!   `k ∈ {0, 1, 5, 13, 19}` × workers `{0, 1, 2, 4}` × prefetch `{1, 2, 8}`;
//! * **time-to-error**: the failing code records an `Instant`; the consumer drains continuously and
//!   the error must come out of `next()` at most 1 s later (queued batches are drained first);
//! * **0 hangs**: every case runs under a 10 s watchdog;
//! * **threads back to baseline** after `close()` (the `loaderx-*` threads of `/proc/self/task`, settle ≤ 1 s), also
//!   after an early exit and after closing workers blocked on a full queue (close ≤ 1 s).
//!
//! Two tiers. The default one checks everything but the wall-clock bounds, waiting on conditions
//! with generous deadlines (threads settle within 10 s). The timing tier (`#[ignore]`d: run it with
//! `cargo test -p loaderx --test reliability_faults -- --ignored`, on an otherwise idle machine)
//! runs the same cases and adds the 1 s bounds on time-to-error, close and thread settling.
//!
//! The tests of this binary share one lock so that thread counts are not disturbed by each other.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::loader::{Boom, Hooked, N, counting_loader, sys, wait_until};
use loaderx::{Error, IndexSampler, Loader, LoaderOptions, Mode, Shard, StreamView};
use zrecord::DenseStore;

const B: usize = 4;
const KS: [u64; 5] = [0, 1, 5, 13, 19];
const WORKERS: [usize; 4] = [0, 1, 2, 4];
const PREFETCH: [usize; 3] = [1, 2, 8];
/// Pass criterion: error delivered at most this long after it happened.
const MAX_ERROR_LATENCY: Duration = Duration::from_secs(1);
/// Pass criterion: each case finishes within this.
const WATCHDOG_SECS: u64 = 10;
/// Timing tier: threads are back to baseline this long after close.
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Default tier: how long threads may take to settle before the count is checked anyway.
const SETTLE_DEADLINE: Duration = Duration::from_secs(10);

/// Which checks a run makes: the default tier leaves out the wall-clock bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Default,
    Timing,
}

impl Tier {
    /// How long to wait for threads to settle before counting them.
    fn settle(self) -> Duration {
        match self {
            Tier::Default => SETTLE_DEADLINE,
            Tier::Timing => MAX_SETTLE,
        }
    }
}

/// The two tests of check `$run`: `$default` runs the default tier, `$timing` (ignored by default)
/// the timing tier.
macro_rules! tiers {
    ($run:ident: $default:ident, $timing:ident) => {
        #[test]
        fn $default() {
            $run(Tier::Default);
        }

        #[test]
        #[ignore = "timing tier: run with --ignored"]
        fn $timing() {
            $run(Tier::Timing);
        }
    };
}

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The loader threads alive in this process (every loader thread is named `loaderx-*`). Counting
/// only those keeps the test harness's own threads, which start and end as other tests do, and
/// zrecord's gather pool out of the count.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("loaderx"))
        .count()
}

/// Waits up to `within` for the thread count to drop to `baseline`; returns the last count seen.
fn settle_threads(baseline: usize, within: Duration) -> usize {
    let t = Instant::now();
    loop {
        let n = threads();
        if n <= baseline || t.elapsed() > within {
            return n;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `f` on a thread; fails the test if it does not finish within `secs` and re-raises its panic.
fn watchdog<R: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => {
            let _ = h.join();
            r
        }
        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
            panic!("{what}: hung for {secs} s")
        }
        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => panic!("{what}: case thread ended without a result"),
        },
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    dense: PathBuf,
}

fn fixture() -> Arc<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let dense = common::dense_index_store(dir.path(), "dense", N, 0);
    Arc::new(Fixture { dense, _dir: dir })
}

fn step_of(shards: &[Shard]) -> u64 {
    let b = shards[0].get("x").unwrap().as_dense().unwrap();
    common::dense_ids(b.bytes(), 8)[0] / B as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The transform returns an error at step `k`.
    Transform,
    /// The sampler draws an index past the end at step `k`: the gather fails.
    GatherOutOfRange,
    /// The sampler closes the store at step `k`: this and every later gather fail.
    StoreClosed,
    /// The sampler itself returns an error at step `k`.
    SamplerError,
}

const FAULTS: [Fault; 4] = [
    Fault::Transform,
    Fault::GatherOutOfRange,
    Fault::StoreClosed,
    Fault::SamplerError,
];

type Stamp = Arc<Mutex<Option<Instant>>>;

fn stamp(s: &Stamp) {
    let mut g = s.lock().unwrap();
    if g.is_none() {
        *g = Some(Instant::now());
    }
}

struct Outcome {
    steps: Vec<u64>,
    error: Error,
    latency: Duration,
    baseline: usize,
    during: usize,
    after: usize,
}

fn run_case(
    fx: &Fixture,
    fault: Fault,
    k: u64,
    workers: usize,
    prefetch: usize,
    tier: Tier,
) -> Outcome {
    let baseline = threads();
    let failed_at: Stamp = Arc::new(Mutex::new(None));
    // Own store handle per case: the StoreClosed fault closes it.
    let store = DenseStore::open(&fx.dense).unwrap();
    let view: StreamView = store.bind(sys()).into();
    // Sequential (step `s` draws `4s..4s+4`), injecting `fault` at step `k`.
    let (closing, sampler_stamp) = (store.clone(), failed_at.clone());
    let sampler = Box::new(Hooked::new(B, move |step, batch: &mut [u64]| {
        if step != k {
            return Ok(());
        }
        match fault {
            Fault::GatherOutOfRange => {
                stamp(&sampler_stamp);
                batch[B - 1] = N + k;
            }
            Fault::StoreClosed => {
                stamp(&sampler_stamp);
                closing.close();
            }
            Fault::SamplerError => {
                stamp(&sampler_stamp);
                return Err(Error::Sampler(format!("injected at step {step}")));
            }
            Fault::Transform => {}
        }
        Ok(())
    }));
    let t_stamp = failed_at.clone();
    let transform = move |shards: Vec<Shard>| {
        let step = step_of(&shards);
        if fault == Fault::Transform && step == k {
            stamp(&t_stamp);
            return Err(Error::transform(Boom(k)));
        }
        Ok(step)
    };
    let mut loader = Loader::with_transform(
        [("x", vec![view])],
        sampler,
        LoaderOptions::new(workers, prefetch),
        transform,
    )
    .unwrap();
    let during = threads();
    let mut steps = Vec::new();
    // Continuous drain: no work between calls.
    let (error, latency) = loop {
        match loader.next() {
            Some(Ok(s)) => steps.push(s),
            Some(Err(e)) => {
                let now = Instant::now();
                let at = failed_at
                    .lock()
                    .unwrap()
                    .expect("an error arrived before the fault was injected");
                break (e, now.saturating_duration_since(at));
            }
            None => panic!("the loader ended without delivering the error"),
        }
    };
    assert!(loader.next().is_none(), "a batch or error after the error");
    assert!(loader.is_done());
    loader.close();
    loader.close(); // idempotent
    drop(loader);
    let after = settle_threads(baseline, tier.settle());
    Outcome {
        steps,
        error,
        latency,
        baseline,
        during,
        after,
    }
}

fn check(
    o: &Outcome,
    fault: Fault,
    k: u64,
    (workers, prefetch): (usize, usize),
    case: &str,
    tier: Tier,
) {
    assert!(
        !o.steps.contains(&k),
        "{case}: the failing batch was delivered"
    );
    if workers <= 1 {
        assert_eq!(o.steps, (0..k).collect::<Vec<_>>(), "{case}");
    } else {
        let set: BTreeSet<u64> = o.steps.iter().copied().collect();
        assert_eq!(set.len(), o.steps.len(), "{case}: duplicates");
        assert!(
            (0..k).all(|s| set.contains(&s)),
            "{case}: a batch before the failure is missing: {:?}",
            o.steps
        );
        // Ahead-of-error batches are bounded by the delivery window: in completion order at
        // most workers + prefetch steps are delivered past the first undelivered one (k).
        let ahead = o.steps.iter().filter(|&&s| s > k).count();
        assert!(
            ahead <= workers + prefetch,
            "{case}: {ahead} batches after k arrived"
        );
    }
    match (fault, &o.error) {
        (Fault::Transform, Error::Transform(e)) => {
            assert_eq!(e.to_string(), format!("boom at step {k}"), "{case}")
        }
        (Fault::GatherOutOfRange, Error::Store(zrecord::Error::IndexOutOfRange { index, .. })) => {
            assert_eq!(*index, N + k, "{case}")
        }
        (Fault::StoreClosed, Error::Store(zrecord::Error::Closed(_))) => {}
        (Fault::SamplerError, Error::Sampler(m)) => {
            assert_eq!(m, &format!("injected at step {k}"), "{case}")
        }
        (_, e) => panic!("{case}: unexpected error {e}"),
    }
    if tier == Tier::Timing {
        assert!(
            o.latency <= MAX_ERROR_LATENCY,
            "{case}: error reached the consumer {:?} after it happened",
            o.latency
        );
    }
    // Workers may already have exited after the fault; never more than the documented count.
    let limit = LoaderOptions::new(workers, 1).threads();
    assert!(
        o.during <= o.baseline + limit,
        "{case}: {} threads, baseline {}, limit {limit}",
        o.during,
        o.baseline
    );
    assert!(
        o.after <= o.baseline,
        "{case}: {} threads after close, baseline {}",
        o.after,
        o.baseline
    );
}

tiers!(fault_matrix: fault_matrix_errors_and_threads, fault_matrix_time_to_error_and_threads);

fn fault_matrix(tier: Tier) {
    let _g = serial();
    let fx = fixture();
    let mut cases = 0;
    let mut max_latency = Duration::ZERO;
    let mut max_case = String::new();
    let mut max_wall = Duration::ZERO;
    let (mut max_during, mut max_after_excess) = (0i64, i64::MIN);
    let t_all = Instant::now();
    for fault in FAULTS {
        for workers in WORKERS {
            for prefetch in PREFETCH {
                for k in KS {
                    let case = format!("{fault:?} k {k} workers {workers} prefetch {prefetch}");
                    let fx = fx.clone();
                    let t = Instant::now();
                    let o = watchdog(WATCHDOG_SECS, &case, move || {
                        run_case(&fx, fault, k, workers, prefetch, tier)
                    });
                    max_wall = max_wall.max(t.elapsed());
                    check(&o, fault, k, (workers, prefetch), &case, tier);
                    max_during = max_during.max(o.during as i64 - o.baseline as i64);
                    max_after_excess = max_after_excess.max(o.after as i64 - o.baseline as i64);
                    if o.latency > max_latency {
                        max_latency = o.latency;
                        max_case = case;
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 4 * 4 * 3 * 5);
    eprintln!(
        "T11 fault matrix ({tier:?} tier): {cases} cases in {:?}; max time-to-error {max_latency:?} ({max_case}); \
         slowest case {max_wall:?}; threads above baseline: max {max_during} while running, \
         max {max_after_excess} after close",
        t_all.elapsed()
    );
}

tiers!(
    error_behind_a_full_queue: error_behind_a_full_queue_arrives_once_drained,
    error_behind_a_full_queue_arrives_within_a_second_of_the_drain
);

/// With a slow consumer the queue is full when the fault happens: the error then waits behind the
/// queued batches by design. Once the consumer drains, it gets every batch drawn before the fault
/// and then the error; in the timing tier, ≤ 1 s after the last queued batch was taken and ≤ 1 s
/// after the fault plus the time the consumer spent away.
fn error_behind_a_full_queue(tier: Tier) {
    let _g = serial();
    let fx = fixture();
    for (workers, prefetch) in [(1usize, 8usize), (2, 8), (4, 3)] {
        let case = format!("full queue workers {workers} prefetch {prefetch}");
        let fx = fx.clone();
        let c2 = case.clone();
        let ((latency, drained), away) = watchdog(WATCHDOG_SECS, &case, move || {
            // Fails while the consumer is away: k < the pipeline's capacity, which with these
            // instant transforms (paced: one worker runs) is prefetch + 1.
            let k = 3u64;
            let failed_at: Stamp = Arc::new(Mutex::new(None));
            let t_stamp = failed_at.clone();
            let store = DenseStore::open(&fx.dense).unwrap();
            let mut loader = Loader::with_transform(
                [("x", vec![StreamView::from(store.bind(sys()))])],
                Box::new(IndexSampler::new(N, B, Mode::Sequential, 0).unwrap()),
                LoaderOptions::new(workers, prefetch),
                move |shards: Vec<Shard>| {
                    let step = step_of(&shards);
                    if step == k {
                        stamp(&t_stamp);
                        return Err(Error::transform(Boom(k)));
                    }
                    Ok(step)
                },
            )
            .unwrap();
            // Consumer away: the pipeline fills up and the fault happens meanwhile.
            let away = Instant::now();
            while failed_at.lock().unwrap().is_none() && away.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                failed_at.lock().unwrap().is_some(),
                "{c2}: fault not reached"
            );
            if tier == Tier::Timing {
                // The consumer stays away a while longer (the scenario, not a synchronization:
                // the bounds below allow for however long it was away).
                std::thread::sleep(Duration::from_millis(100));
            }
            let away = away.elapsed();
            let drain = Instant::now();
            let mut got = Vec::new();
            let latency = loop {
                match loader.next() {
                    Some(Ok(s)) => got.push(s),
                    Some(Err(Error::Transform(e))) => {
                        assert_eq!(e.to_string(), format!("boom at step {k}"));
                        break (
                            failed_at.lock().unwrap().unwrap().elapsed(),
                            drain.elapsed(),
                        );
                    }
                    other => panic!("{c2}: unexpected {other:?}"),
                }
            };
            if workers == 1 {
                assert_eq!(got, (0..k).collect::<Vec<_>>(), "{c2}");
            } else {
                assert!((0..k).all(|s| got.contains(&s)), "{c2}: {got:?}");
            }
            (latency, away)
        });
        eprintln!(
            "T11 {case}: error {drained:?} after the drain started ({latency:?} after the fault)"
        );
        if tier == Tier::Timing {
            assert!(
                drained <= MAX_ERROR_LATENCY,
                "{case}: draining the queue to the error took {drained:?}"
            );
            assert!(
                latency <= away + MAX_ERROR_LATENCY,
                "{case}: error {latency:?} after the fault, consumer away {away:?}"
            );
        }
    }
}

tiers!(
    early_exit_and_blocked_close: threads_return_to_baseline_after_early_exit_and_blocked_close,
    blocked_close_takes_under_a_second_and_threads_settle_within_one
);

fn early_exit_and_blocked_close(tier: Tier) {
    let _g = serial();
    let fx = fixture();
    let mut max_close = Duration::ZERO;
    for workers in [1usize, 2, 4] {
        for prefetch in [1usize, 2, 8] {
            for consumed in [0usize, 1, 7] {
                let case =
                    format!("early exit workers {workers} prefetch {prefetch} after {consumed}");
                let fx = fx.clone();
                let c2 = case.clone();
                let close_took = watchdog(WATCHDOG_SECS, &case, move || {
                    let baseline = threads();
                    let (mut loader, produced) = counting_loader(&fx.dense, workers, prefetch);
                    // Every thread exists, under its name, when the constructor returns (it waits
                    // until each has started).
                    assert_eq!(
                        threads(),
                        baseline + LoaderOptions::new(workers, prefetch).threads(),
                        "{c2}"
                    );
                    for _ in 0..consumed {
                        loader.next().unwrap().unwrap();
                    }
                    // Wait (up to 5 s) until every worker is blocked on the full queue, or at
                    // the window's edge: in completion order a worker draws at most
                    // `workers + prefetch` steps past the first undelivered one, so each step
                    // delivered ahead of it beyond the first leaves one batch fewer to draw.
                    let ahead = loader.state_dict().delivered_ahead.len();
                    let want = consumed + (prefetch + workers).min(prefetch + workers + 1 - ahead);
                    wait_until(5, &c2, || produced.load(Ordering::SeqCst) >= want);
                    let at = produced.load(Ordering::SeqCst);
                    assert_eq!(at, want, "{c2}: not at the bound");
                    let t = Instant::now();
                    loader.close();
                    let took = t.elapsed();
                    assert!(loader.next().is_none(), "{c2}");
                    let after = settle_threads(baseline, tier.settle());
                    assert!(
                        after <= baseline,
                        "{c2}: {after} threads, baseline {baseline}"
                    );
                    took
                });
                if tier == Tier::Timing {
                    assert!(
                        close_took < Duration::from_secs(1),
                        "{case}: close took {close_took:?}"
                    );
                }
                max_close = max_close.max(close_took);
            }
        }
    }
    eprintln!("T11 blocked close ({tier:?} tier): 27 cases, slowest close {max_close:?}");
}
