//! Weighted mixtures: the exact apportionment over long windows (against integer arithmetic), the
//! layout and the per-source index streams (against a reference built from them), weight changes,
//! construction errors, and mixture loaders against an oracle across resumes, weight changes,
//! worker counts, delivery modes and process counts.

mod common;

use std::sync::Arc;

use common::loader::{dense_view, ragged_view, sys};
use loaderx::{
    Error, IndexSampler, IndexSpec, Loader, LoaderOptions, LoaderState, MixturePlan, MixtureSource,
    Mode, Shard, Transform, WeightChange,
};

fn spec(len: u64, mode: Mode, seed: u64) -> IndexSpec {
    IndexSpec { len, mode, seed }
}

/// Three sources, one per mode: Cyclic over 1000 records, Iid over `lens[0]`, Sequential over
/// `lens[1]`; seeds `seed`, `seed + 1`, `seed + 2`.
fn one_of_each_mode(lens: [u64; 2], seed: u64) -> [IndexSpec; 3] {
    [
        spec(1000, Mode::Cyclic, seed),
        spec(lens[0], Mode::Iid, seed + 1),
        spec(lens[1], Mode::Sequential, seed + 2),
    ]
}

/// Cumulative counts per source at every step boundary `0..=steps`.
fn cumulative(plan: &MixturePlan, steps: u64) -> Vec<Vec<u64>> {
    let n = plan.sources();
    let mut acc = vec![0u64; n];
    let mut out = vec![acc.clone()];
    for s in 0..steps {
        let c = plan.counts_at(s).unwrap();
        assert_eq!(c.iter().sum::<u64>(), plan.batch_size() as u64, "step {s}");
        for (a, c) in acc.iter_mut().zip(&c) {
            *a += c;
        }
        assert_eq!(
            acc,
            plan.drawn_before(s + 1).unwrap(),
            "step {s}: O(1) seek"
        );
        out.push(acc.clone());
    }
    out
}

#[test]
fn every_cumulative_count_is_within_one_record_of_its_share_over_long_runs() {
    let sources = one_of_each_mode([70, 5], 1);
    for (weights, batch) in [
        (vec![5.0, 3.0, 2.0], 64usize),
        (vec![1.0, 1.0, 1.0], 7),
        (vec![97.0, 2.0, 1.0], 100),
        (vec![13.0, 11.0, 7.0], 31),
    ] {
        let plan = MixturePlan::new(&sources, weights.clone(), batch).unwrap();
        let w: Vec<u128> = weights.iter().map(|&x| x as u128).collect();
        let d: u128 = w.iter().sum();
        let cum = cumulative(&plan, 20_000);
        for (r, counts) in cum.iter().enumerate() {
            let t = (r * batch) as u128;
            for (k, &c) in counts.iter().enumerate() {
                // |c - w_k t / D| < 1, in integers: |c D - w_k t| < D.
                let (a, b) = (c as u128 * d, w[k] * t);
                assert!(a.abs_diff(b) < d, "{weights:?} step {r} source {k}: {c}");
            }
        }
        // Every window of the first 600 steps: within two records (one with two sources).
        for a in 0..600 {
            for b in a + 1..=600 {
                let t = ((b - a) * batch) as u128;
                for k in 0..3 {
                    let c = (cum[b][k] - cum[a][k]) as u128;
                    assert!(
                        (c * d).abs_diff(w[k] * t) < 2 * d,
                        "{weights:?} {a}..{b} source {k}"
                    );
                }
            }
        }
        // Far out, by seek alone.
        for r in [1u64 << 20, 1 << 33, 999_999_999_937] {
            let c = plan.drawn_before(r).unwrap();
            let t = r as u128 * batch as u128;
            for k in 0..3 {
                assert!((c[k] as u128 * d).abs_diff(w[k] * t) < d, "step {r}");
            }
        }
    }
}

#[test]
fn two_sources_are_within_one_record_over_every_window() {
    let sources = [spec(100, Mode::Cyclic, 1), spec(100, Mode::Cyclic, 2)];
    for (weights, batch) in [
        (vec![2.0, 1.0], 10usize),
        (vec![0.7, 0.3], 8),
        (vec![5.0, 3.0], 3),
    ] {
        let plan = MixturePlan::new(&sources, weights.clone(), batch).unwrap();
        let p = weights[0] / (weights[0] + weights[1]);
        let cum = cumulative(&plan, 800);
        for a in 0..800 {
            for b in a + 1..=800 {
                let c = (cum[b][0] - cum[a][0]) as f64;
                let share = p * ((b - a) * batch) as f64;
                // 1e-9: the share's own f64 arithmetic (the weights' ratios are exact).
                assert!(
                    (c - share).abs() < 1.0 + 1e-9,
                    "{weights:?} {a}..{b}: {c} vs {share}"
                );
            }
        }
    }
}

#[test]
fn the_layout_follows_each_sources_index_stream_and_process_slices_tile_the_batch() {
    let sources = one_of_each_mode([37, 9], 11);
    let batch = 48;
    let plan = MixturePlan::new(&sources, vec![6.0, 3.0, 1.0], batch).unwrap();
    let mut per_source: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let (mut s, mut i) = (Vec::new(), Vec::new());
    for step in 0..300 {
        plan.draw_range(step, 0..batch, &mut s, &mut i).unwrap();
        let counts = plan.counts_at(step).unwrap();
        for (k, &c) in counts.iter().enumerate() {
            assert_eq!(s.iter().filter(|&&x| x == k as u32).count() as u64, c);
        }
        for (&k, &x) in s.iter().zip(&i) {
            per_source[k as usize].push(x);
        }
        // Process slices concatenate to the whole batch.
        for procs in [2usize, 3, 4, 8] {
            let local = batch / procs;
            let (mut js, mut ji) = (Vec::new(), Vec::new());
            for r in 0..procs {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                plan.draw_range(step, r * local..(r + 1) * local, &mut a, &mut b)
                    .unwrap();
                js.extend(a);
                ji.extend(b);
            }
            assert_eq!((&js, &ji), (&s, &i), "step {step}, {procs} processes");
        }
    }
    // Each source's records, in draw order, are its own index stream (batch 1) from position 0.
    for (k, got) in per_source.iter().enumerate() {
        let stream =
            IndexSampler::new(sources[k].len, 1, sources[k].mode, sources[k].seed).unwrap();
        let mut want = vec![0; got.len()];
        stream.positions_at(0, &mut want);
        assert_eq!(got, &want, "source {k}");
    }
    // A Cyclic source walks a permutation of all its records per epoch.
    let mut first_epoch = per_source[0][..1000].to_vec();
    first_epoch.sort();
    assert_eq!(first_epoch, (0..1000).collect::<Vec<_>>());
}

#[test]
fn a_block_source_draws_its_block_shuffle_epoch_by_epoch() {
    let block = Mode::Block {
        block: 16,
        window: 4,
    };
    let sources = [spec(1003, block, 5), spec(500, Mode::Cyclic, 6)];
    let batch = 32;
    let plan = MixturePlan::new(&sources, vec![3.0, 1.0], batch).unwrap();
    let mut got = Vec::new();
    let (mut s, mut i) = (Vec::new(), Vec::new());
    for step in 0..200 {
        plan.draw_range(step, 0..batch, &mut s, &mut i).unwrap();
        got.extend(s.iter().zip(&i).filter(|(k, _)| **k == 0).map(|(_, &x)| x));
    }
    // The source's records are its own index stream (batch 1), so each epoch is a permutation.
    let stream = IndexSampler::new(1003, 1, block, 5).unwrap();
    let mut want = vec![0; got.len()];
    stream.positions_at(0, &mut want);
    assert_eq!(got, want);
    assert!(got.len() >= 3 * 1003);
    for epoch in got.chunks_exact(1003) {
        let mut e = epoch.to_vec();
        e.sort_unstable();
        assert!(e.iter().copied().eq(0..1003));
    }
}

#[test]
fn weights_change_at_a_step_boundary_and_the_spec_reproduces_the_plan() {
    let sources = [spec(500, Mode::Cyclic, 1), spec(500, Mode::Cyclic, 2)];
    let mut plan = MixturePlan::new(&sources, vec![3.0, 1.0], 16).unwrap();
    plan.set_weights(100, vec![1.0, 3.0]).unwrap();
    plan.set_weights(250, vec![1.0, 1.0]).unwrap();
    let before = plan.drawn_before(100).unwrap();
    assert_eq!(before, [1200, 400]);
    let at = plan.drawn_before(250).unwrap();
    assert_eq!(at, [1200 + 600, 400 + 1800]);
    assert_eq!(plan.counts_at(300).unwrap(), [8, 8]);
    assert!(matches!(
        plan.set_weights(200, vec![1.0, 1.0]),
        Err(Error::InvalidArgument(_))
    ));
    let again = MixturePlan::from_spec(&plan.spec(), 16).unwrap();
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for step in [0u64, 99, 100, 101, 249, 250, 10_000] {
        plan.draw_range(step, 0..16, &mut a, &mut b).unwrap();
        again.draw_range(step, 0..16, &mut c, &mut d).unwrap();
        assert_eq!((&a, &b), (&c, &d), "step {step}");
    }
}

#[test]
fn bad_weights_and_sources_are_refused_at_construction() {
    let s2 = [spec(10, Mode::Cyclic, 1), spec(10, Mode::Cyclic, 2)];
    let refused = |r: loaderx::Result<MixturePlan>| match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("accepted: {other:?}"),
    };
    for (w, want) in [
        (vec![1.0, 0.0], "source 1's weight is 0"),
        (vec![-1.0, 1.0], "source 0's weight is -1"),
        (vec![f64::NAN, 1.0], "source 0's weight is NaN"),
        (vec![1.0, f64::INFINITY], "source 1's weight is inf"),
        (vec![1.0], "1 weights for 2 sources"),
        (vec![1000.0, 1.0], "at least one record per global batch"),
    ] {
        let m = refused(MixturePlan::new(&s2, w.clone(), 64));
        assert!(m.contains(want), "{w:?}: {m}");
    }
    assert!(refused(MixturePlan::new(&[], vec![], 8)).contains("at least one source"));
    let empty = [spec(0, Mode::Iid, 1)];
    assert!(refused(MixturePlan::new(&empty, vec![1.0], 8)).contains("source 0 holds no records"));
}

/// Two sources: `a` (a Dense index store of 1000 records and a Ragged one) and `b` (600).
struct Two {
    _dir: tempfile::TempDir,
    dense: [std::path::PathBuf; 2],
    ragged: [std::path::PathBuf; 2],
}

fn two() -> Two {
    let dir = tempfile::tempdir().unwrap();
    let d0 = common::dense_index_store(dir.path(), "d0", 1000, 0);
    let d1 = common::dense_index_store(dir.path(), "d1", 600, 0);
    let r0 = common::ragged_index_store(dir.path(), "r0", 1000);
    let r1 = common::ragged_index_store(dir.path(), "r1", 600);
    Two {
        dense: [d0, d1],
        ragged: [r0, r1],
        _dir: dir,
    }
}

fn sources(t: &Two, views: usize, weights: [f64; 2]) -> Vec<MixtureSource<&'static str>> {
    (0..2)
        .map(|k| MixtureSource {
            streams: vec![
                (
                    "x",
                    (0..views).map(|_| dense_view(&t.dense[k], sys())).collect(),
                ),
                (
                    "t",
                    (0..views)
                        .map(|_| ragged_view(&t.ragged[k], sys()))
                        .collect(),
                ),
            ],
            weight: weights[k],
            mode: if k == 0 { Mode::Cyclic } else { Mode::Iid },
            seed: 7 + k as u64,
        })
        .collect()
}

/// One step as `(shard index, source, record)` per record, checking the streams agree.
fn records(shards: Vec<Shard>) -> loaderx::Result<Vec<(usize, u32, u64)>> {
    let mut out = Vec::new();
    for s in &shards {
        let ids = common::dense_ids(s.get("x").unwrap().as_dense().unwrap().bytes(), 8);
        let t = s.get("t").unwrap().as_ragged().unwrap();
        assert_eq!(
            t.shapes(),
            ids.iter().map(|i| i % 4 + 1).collect::<Vec<_>>()
        );
        let source = s.source().expect("a mixture shard names its source");
        out.extend(ids.into_iter().map(|i| (s.index(), source, i)));
    }
    Ok(out)
}

fn mixture(
    t: &Two,
    opts: LoaderOptions,
    changes: Vec<WeightChange>,
) -> Loader<Vec<(usize, u32, u64)>> {
    Loader::mixture(
        sources(t, 2, [3.0, 1.0]),
        32,
        changes,
        opts,
        Arc::new(records),
    )
    .unwrap()
}

#[test]
fn a_mixture_loader_delivers_the_plans_records_grouped_by_shard_and_source() {
    let t = two();
    let plan = MixturePlan::new(
        &[spec(1000, Mode::Cyclic, 7), spec(600, Mode::Iid, 8)],
        vec![3.0, 1.0],
        32,
    )
    .unwrap();
    let mut l = mixture(&t, LoaderOptions::new(2, 2).ordered(true), vec![]);
    let (mut s, mut i) = (Vec::new(), Vec::new());
    for step in 0..50u64 {
        let got = l.next().unwrap().unwrap();
        plan.draw_range(step, 0..32, &mut s, &mut i).unwrap();
        // Shard j holds positions 16j..16j+16, grouped by source in source order.
        let mut want = Vec::new();
        for j in 0..2 {
            for k in 0..2u32 {
                for p in j * 16..(j + 1) * 16 {
                    if s[p] == k {
                        want.push((j, k, i[p]));
                    }
                }
            }
        }
        assert_eq!(got, want, "step {step}");
    }
}

#[test]
fn sources_that_disagree_are_refused_with_the_stream_named() {
    let t = two();
    let opts = LoaderOptions::new(0, 1);
    let identity: Transform<Vec<Shard>> = Arc::new(Ok);
    let refused = |srcs: Vec<MixtureSource<&'static str>>| match Loader::mixture(
        srcs,
        32,
        vec![],
        opts,
        identity.clone(),
    ) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("accepted: {:?}", other.map(|_| ())),
    };
    let mut s = sources(&t, 2, [1.0, 1.0]);
    s[1].streams.swap(0, 1);
    assert!(refused(s).contains("source 1 has the streams"));
    let mut s = sources(&t, 2, [1.0, 1.0]);
    s[1].streams[1] = (
        "t",
        vec![
            dense_view(&t.dense[1], sys()),
            dense_view(&t.dense[1], sys()),
        ],
    );
    assert!(refused(s).contains("source 1 stream \"t\" is Dense"));
    let dir = tempfile::tempdir().unwrap();
    let wide = common::dense_index_store(dir.path(), "wide", 600, 1);
    let mut s = sources(&t, 2, [1.0, 1.0]);
    s[1].streams[0] = (
        "x",
        vec![dense_view(&wide, sys()), dense_view(&wide, sys())],
    );
    assert!(refused(s).contains("item shape [2]"));
    let mut s = sources(&t, 2, [1.0, 1.0]);
    s[1].streams[0].1.pop();
    let m = refused(s);
    assert!(m.contains("source 1: stream \"t\" has 2 views"), "{m}");
    assert!(refused(vec![]).contains("at least one source"));
    assert!(refused(sources(&t, 2, [1.0, f64::NAN])).contains("weights must be finite"));
    assert!(refused(sources(&t, 2, [1.0, 0.0])).contains("source 1's weight is 0"));
    let empty = common::dense_index_store(dir.path(), "empty", 0, 0);
    let only_x = |p: &std::path::Path| MixtureSource {
        streams: vec![("x", vec![dense_view(p, sys())])],
        weight: 1.0,
        mode: Mode::Iid,
        seed: 0,
    };
    let m = refused(vec![only_x(&t.dense[0]), only_x(&empty)]);
    assert!(m.contains("source 1 holds no records"), "{m}");
}

/// The oracle: one uninterrupted inline run, weights changed at step 20.
fn oracle(t: &Two, n: usize) -> Vec<Vec<(usize, u32, u64)>> {
    let change = vec![WeightChange {
        step: 20,
        weights: vec![1.0, 2.0],
    }];
    mixture(t, LoaderOptions::new(0, 1), change)
        .take(n)
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_mixture_resumes_exactly_with_its_weight_changes_in_both_modes() {
    // The weights change at step 20 through `set_weights` on the running loader; a state saved
    // after it carries the change into a loader built with the original weights.
    let t = two();
    let want = oracle(&t, 60);
    for workers in [0usize, 1, 4] {
        for ordered in [false, true] {
            for at in [5usize, 20, 33] {
                let case = format!("w {workers} ordered {ordered} at {at}");
                let opts = LoaderOptions::new(workers, 2).ordered(ordered);
                let mut a = mixture(&t, opts, vec![]);
                assert_eq!(
                    a.set_weights(vec![1.0, 2.0], Some(20)).unwrap(),
                    20,
                    "{case}"
                );
                let mut got: Vec<_> = a.by_ref().take(at).map(Result::unwrap).collect();
                let state = LoaderState::from_json(&a.state_dict().to_json()).unwrap();
                drop(a);
                let mut b = mixture(&t, opts, vec![]);
                b.load_state_dict(&state).unwrap();
                got.extend(b.by_ref().take(60 - at).map(Result::unwrap));
                let end = b.state_dict();
                if ordered {
                    assert_eq!(got, want, "{case}");
                } else {
                    let mut steps: Vec<usize> = got
                        .iter()
                        .map(|g| want.iter().position(|w| w == g).unwrap_or(usize::MAX))
                        .collect();
                    steps.sort();
                    let mut counted: Vec<usize> = (0..end.step as usize).collect();
                    counted.extend(end.delivered_ahead.iter().map(|&s| s as usize));
                    counted.sort();
                    // Steps beyond the oracle's 60 can be delivered ahead: compare below 60.
                    steps.retain(|&s| s < 60);
                    counted.retain(|&s| s < 60);
                    assert_eq!(steps, counted, "{case}");
                }
            }
        }
    }
    // A change at a step already drawn is refused; a plain loader has no weights.
    let mut l = mixture(&t, LoaderOptions::new(0, 1), vec![]);
    l.next().unwrap().unwrap();
    assert!(matches!(
        l.set_weights(vec![1.0, 1.0], Some(0)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(l.set_weights(vec![1.0, 1.0], None).unwrap(), 1);
}

#[test]
fn a_mixture_state_of_another_dataset_version_keeps_its_weights_over_this_loaders_sources() {
    // The state as a loader over version 1 of the sources' datasets (500 and 300 records) would
    // have saved it, with a weight change at step 20; allowed, this loader goes on from its step
    // with the state's weights over its own 1000 and 600 records: the oracle's steps.
    let t = two();
    let want = oracle(&t, 40);
    let mut a = mixture(&t, LoaderOptions::new(0, 1).ordered(true), vec![]);
    a.set_weights(vec![1.0, 2.0], Some(20)).unwrap();
    a.by_ref().take(25).for_each(|r| drop(r.unwrap()));
    let mut state = a.state_dict();
    let loaderx::SamplerSpec::Mixture(m) = &mut state.sampler else {
        panic!("not a mixture state");
    };
    m.sources[0].len = 500;
    m.sources[1].len = 300;
    for stream in &mut state.streams {
        for v in &mut stream.views {
            v.version = Some(1);
            v.records /= 2;
        }
    }
    let mut b = mixture(&t, LoaderOptions::new(2, 2).ordered(true), vec![]);
    assert!(matches!(
        b.load_state_dict(&state),
        Err(Error::InvalidArgument(_))
    ));
    b.load_state_dict_with(&state, true).unwrap();
    let got: Vec<_> = b.by_ref().take(15).map(Result::unwrap).collect();
    assert_eq!(got, want[25..40]);
    let loaderx::SamplerSpec::Mixture(now) = b.state_dict().sampler else {
        panic!("not a mixture state");
    };
    assert_eq!((now.sources[0].len, now.sources[1].len), (1000, 600));
    assert_eq!(now.schedule.len(), 2, "the state's weight change is kept");
}

#[test]
fn a_mixture_state_resumes_on_another_process_count() {
    let t = two();
    let want = oracle(&t, 30);
    for (n, m) in [(1usize, 2usize), (2, 4), (4, 2), (2, 1)] {
        let make = |r: usize, count: usize| {
            let change = vec![WeightChange {
                step: 20,
                weights: vec![1.0, 2.0],
            }];
            mixture(
                &t,
                LoaderOptions::new(1, 2).ordered(true).process(r, count),
                change,
            )
        };
        // Global position of a (shard, record) within a process's slice: shard positions are
        // per process, so compare the sorted records of every step instead of their layout.
        let norm = |mut v: Vec<(usize, u32, u64)>| {
            let mut v: Vec<(u32, u64)> = v.drain(..).map(|(_, k, i)| (k, i)).collect();
            v.sort();
            v
        };
        let mut old: Vec<_> = (0..n).map(|r| make(r, n)).collect();
        for (step, w) in want.iter().enumerate().take(12) {
            let all: Vec<_> = old
                .iter_mut()
                .flat_map(|l| l.next().unwrap().unwrap())
                .collect();
            assert_eq!(norm(all), norm(w.clone()), "{n} processes, step {step}");
        }
        let state = old[0].state_dict();
        drop(old);
        let mut new: Vec<_> = (0..m).map(|r| make(r, m)).collect();
        for l in &mut new {
            l.load_state_dict(&state).unwrap();
        }
        for (step, w) in want.iter().enumerate().skip(12) {
            let all: Vec<_> = new
                .iter_mut()
                .flat_map(|l| l.next().unwrap().unwrap())
                .collect();
            assert_eq!(
                norm(all),
                norm(w.clone()),
                "{n} -> {m} processes, step {step}"
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any weights (integers, or fractions: their f64 values in exactly their ratios) and batch that give every
    /// source a record per batch: every step's counts are non-negative and fill the batch, and at
    /// any step, near or far, every cumulative count is within one record of its share.
    #[test]
    fn any_weights_keep_every_cumulative_count_within_one_record(
        raw in proptest::collection::vec(1u32..1000, 2..7),
        fractional in proptest::prelude::any::<bool>(),
        batch in 1usize..300,
        steps in proptest::collection::vec(0u64..1 << 40, 1..20),
    ) {
        let weights: Vec<f64> = raw.iter().map(|&w| if fractional { w as f64 / 7.0 } else { w as f64 }).collect();
        let total: f64 = weights.iter().sum();
        proptest::prop_assume!(weights.iter().all(|w| w / total * batch as f64 >= 1.0 + 1e-9));
        let sources: Vec<IndexSpec> = (0..weights.len()).map(|k| spec(50, Mode::Iid, k as u64)).collect();
        let plan = MixturePlan::new(&sources, weights.clone(), batch).unwrap();
        for &s in &steps {
            let before = plan.drawn_before(s).unwrap();
            let counts = plan.counts_at(s).unwrap();
            proptest::prop_assert_eq!(counts.iter().sum::<u64>(), batch as u64);
            let t = s as f64 * batch as f64;
            for (k, &c) in before.iter().enumerate() {
                // Slack for the f64 arithmetic of the share alone (t up to 2^40 x 300).
                let share = weights[k] / total * t;
                proptest::prop_assert!((c as f64 - share).abs() < 1.0 + t * 1e-15, "{} vs {}", c, share);
            }
        }
    }
}
