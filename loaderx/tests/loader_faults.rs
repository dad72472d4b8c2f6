//! The loader's fault matrix: a transform error, a gather error or a panic at step `k`, with 0-4
//! workers, several prefetch depths and both delivery modes; every batch drawn before `k` arrives
//! before the error, the failing batch never does, and nothing hangs (each case under a watchdog).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::loader::{Boom, Hooked, N, dense_view, fixture, ids, sampler, sys, watchdog};
use loaderx::{Error, Loader, LoaderOptions, Mode, Shard};

const B: usize = 4;

/// Consumes a loader until `None`; returns the steps delivered (in order), the error and its position.
fn drain(loader: Loader<u64>) -> (Vec<u64>, Option<(usize, Error)>) {
    let mut steps = Vec::new();
    let mut error = None;
    let mut loader = loader;
    loop {
        match loader.next() {
            Some(Ok(s)) => {
                assert!(error.is_none(), "a batch arrived after the error");
                steps.push(s);
            }
            Some(Err(e)) => {
                assert!(error.is_none(), "two errors");
                error = Some((steps.len(), e));
            }
            None => break,
        }
        if error.is_some() {
            // After the error the loader has stopped.
            assert!(loader.next().is_none());
            assert!(loader.is_done());
            break;
        }
    }
    (steps, error)
}

fn check_fault_outcome(
    k: u64,
    (workers, prefetch, ordered): (usize, usize, bool),
    steps: &[u64],
    error: Option<(usize, Error)>,
    what: &str,
) {
    let case = format!("{what}: k {k} workers {workers} prefetch {prefetch} ordered {ordered}");
    let (at, err) = error.unwrap_or_else(|| panic!("{case}: no error"));
    assert_eq!(at, steps.len(), "{case}");
    assert!(
        !steps.contains(&k),
        "{case}: the failing batch was delivered"
    );
    if workers <= 1 || ordered {
        assert_eq!(steps, (0..k).collect::<Vec<_>>(), "{case}");
    } else {
        // Several workers deliver in completion order, and batches drawn after step `k` may
        // arrive before its error (a slow failure, e.g. a panic hook printing a backtrace, lets the
        // other workers run on). The sequential sampler wraps every `N / B` steps and the value is
        // the position in the cycle, so a value may repeat once per wrap, never more.
        let period = N / B as u64;
        let max_repeats = steps.len() as u64 / period + 1;
        let mut counts = std::collections::BTreeMap::<u64, u64>::new();
        for &s in steps {
            assert!(s < period, "{case}: value {s} out of the cycle");
            *counts.entry(s).or_default() += 1;
        }
        for (&s, &c) in &counts {
            assert!(c <= max_repeats, "{case}: step {s} delivered {c} times");
        }
        assert!(
            (0..k).all(|s| counts.contains_key(&s)),
            "{case}: a batch before the failure is missing: {steps:?}"
        );
    }
    match (what, err) {
        ("transform", Error::Transform(e)) => {
            assert_eq!(e.to_string(), format!("boom at step {k}"), "{case}")
        }
        ("gather", Error::Store(zrecord::Error::IndexOutOfRange { index, .. })) => {
            assert_eq!(index, N + k, "{case}")
        }
        ("panic", Error::Panicked(m)) => {
            assert!(m.contains("transform panicked: kaboom"), "{case}: {m}")
        }
        (_, e) => panic!("{case}: unexpected error {e}"),
    }
}

#[test]
fn fault_matrix_transform_errors() {
    let fx = Arc::new(fixture());
    for (workers, prefetch, ordered) in cases() {
        for k in 0..20u64 {
            let fx = fx.clone();
            let (steps, error) = watchdog(
                10,
                format!("k {k} workers {workers} prefetch {prefetch} ordered {ordered}"),
                move || {
                    let transform = move |shards: Vec<Shard>| {
                        let step = ids(&shards)[0] / B as u64;
                        if step == k {
                            Err(Error::transform(Boom(k)))
                        } else {
                            Ok(step)
                        }
                    };
                    let loader = Loader::with_transform(
                        [("x", vec![dense_view(&fx.dense, sys())])],
                        sampler(Mode::Sequential, B),
                        LoaderOptions::new(workers, prefetch).ordered(ordered),
                        transform,
                    )
                    .unwrap();
                    drain(loader)
                },
            );
            let case = (workers, prefetch, ordered);
            check_fault_outcome(k, case, &steps, error, "transform");
        }
    }
}

#[test]
fn a_slow_failure_lets_other_workers_run_on_and_its_error_still_arrives() {
    // The worker holding step k fails only after 300 ms; meanwhile the other worker keeps
    // delivering (the sampler wraps several times). The error must still arrive, exactly once.
    let fx = Arc::new(fixture());
    let k = 3u64;
    let fx2 = fx.clone();
    let (steps, error) = watchdog(10, "slow failure".into(), move || {
        let first = Arc::new(AtomicBool::new(true));
        let transform = move |shards: Vec<Shard>| {
            let step = ids(&shards)[0] / B as u64;
            if step == k {
                if first.swap(false, Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(300));
                }
                return Err(Error::transform(Boom(k)));
            }
            Ok(step)
        };
        let loader = Loader::with_transform(
            [("x", vec![dense_view(&fx2.dense, sys())])],
            sampler(Mode::Sequential, B),
            LoaderOptions::new(2, 2),
            transform,
        )
        .unwrap();
        drain(loader)
    });
    check_fault_outcome(k, (2, 2, false), &steps, error, "transform");
}

/// Worker and prefetch counts, and the delivery mode (ordered only matters with 2 workers or more).
fn cases() -> Vec<(usize, usize, bool)> {
    let mut out = Vec::new();
    for workers in [0usize, 1, 2, 4] {
        for prefetch in [1usize, 2, 8] {
            out.push((workers, prefetch, false));
            if workers >= 2 {
                out.push((workers, prefetch, true));
            }
        }
    }
    out
}

#[test]
fn fault_matrix_gather_errors_and_panics() {
    let fx = Arc::new(fixture());
    for (workers, prefetch, ordered) in cases() {
        for k in [0u64, 1, 5, 13, 19] {
            let opts = LoaderOptions::new(workers, prefetch).ordered(ordered);
            let case = (workers, prefetch, ordered);
            let fx2 = fx.clone();
            let (steps, error) =
                watchdog(10, format!("gather k {k} workers {workers}"), move || {
                    // Draws an out-of-range index at step k.
                    let s = Box::new(Hooked::new(B, move |step, batch: &mut [u64]| {
                        if step == k {
                            batch[B - 1] = N + k;
                        }
                        Ok(())
                    }));
                    let loader = Loader::with_transform(
                        [("x", vec![dense_view(&fx2.dense, sys())])],
                        s,
                        opts,
                        |shards: Vec<Shard>| Ok(ids(&shards)[0] / B as u64),
                    )
                    .unwrap();
                    drain(loader)
                });
            check_fault_outcome(k, case, &steps, error, "gather");
            let fx3 = fx.clone();
            let (steps, error) =
                watchdog(10, format!("panic k {k} workers {workers}"), move || {
                    let loader = Loader::with_transform(
                        [("x", vec![dense_view(&fx3.dense, sys())])],
                        sampler(Mode::Sequential, B),
                        opts,
                        move |shards: Vec<Shard>| {
                            let step = ids(&shards)[0] / B as u64;
                            if step == k {
                                panic!("kaboom");
                            }
                            Ok(step)
                        },
                    )
                    .unwrap();
                    drain(loader)
                });
            check_fault_outcome(k, case, &steps, error, "panic");
        }
    }
}
