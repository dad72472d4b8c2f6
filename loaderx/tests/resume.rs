//! Resume: `Loader::state_dict` / `load_state_dict` against an oracle, the sequence of global
//! batches one uninterrupted run yields. Resuming at every step of a cycle, twice in a row, with
//! 0, 1 and 4 workers and a transform that sleeps a random time per batch, in both delivery modes,
//! into loaders with other worker and process counts; a mismatched state names the first field
//! that differs. The torchrun and kill -9 tests are in the Python suite (`test_resume.py`).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::loader::{Fixture, N, dense_view, fixture, ids, ragged_view, sampler, sys};
use loaderx::{
    Error, IndexSampler, Loader, LoaderOptions, LoaderState, Mode, Sampler, SamplerSpec, Shard,
};
use zrecord::RaggedStore;

#[test]
fn resume_from_step_reproduces_the_uninterrupted_run() {
    let fx = fixture();
    let streams = || {
        vec![
            ("x", vec![dense_view(&fx.dense, sys())]),
            ("t", vec![ragged_view(&fx.ragged, sys())]),
        ]
    };
    let digest = |shards: Vec<Shard>| {
        let mut v = ids(&shards);
        let t = shards[0].get("t").unwrap().as_ragged().unwrap();
        v.extend(t.shapes());
        Ok(v)
    };
    let block = Mode::Block {
        block: 5,
        window: 3,
    };
    for mode in [Mode::Cyclic, Mode::Iid, block] {
        let full: Vec<Vec<u64>> = Loader::with_transform(
            streams(),
            sampler(mode, 48),
            LoaderOptions::new(0, 1),
            digest,
        )
        .unwrap()
        .take(60)
        .map(Result::unwrap)
        .collect();
        for workers in [0usize, 1] {
            for prefetch in [1usize, 2, 8] {
                let mut first = Loader::with_transform(
                    streams(),
                    sampler(mode, 48),
                    LoaderOptions::new(workers, prefetch),
                    digest,
                )
                .unwrap();
                let head: Vec<Vec<u64>> = first.by_ref().take(23).map(Result::unwrap).collect();
                assert_eq!(head, full[..23]);
                let at = first.step();
                assert_eq!(
                    at, 23,
                    "the loader position counts delivered batches, not prefetched ones"
                );
                let mut s = first.into_sampler();
                assert!(s.step() >= 23, "the workers drew ahead");
                s.seek(at).unwrap();
                let tail: Vec<Vec<u64>> = Loader::with_transform(
                    streams(),
                    s,
                    LoaderOptions::new(workers, prefetch),
                    digest,
                )
                .unwrap()
                .take(37)
                .map(Result::unwrap)
                .collect();
                assert_eq!(
                    tail,
                    full[23..],
                    "{mode:?} workers {workers} prefetch {prefetch}"
                );
            }
        }
    }
}

/// A block-shuffle loader reads its views through block buffers (the window plus the blocks a
/// batch spans, plus one): each block of an epoch is fetched once, and every batch holds the
/// records its sampler drew, Dense and Ragged.
#[test]
fn a_block_shuffle_loader_fetches_each_block_once_an_epoch() {
    let fx = fixture();
    let mode = Mode::Block {
        block: 10,
        window: 4,
    };
    for workers in [0usize, 2] {
        let (x, t) = (dense_view(&fx.dense, sys()), ragged_view(&fx.ragged, sys()));
        let mut drawn = IndexSampler::new(N, 20, mode, 42).unwrap();
        let loader = Loader::new(
            vec![("x", vec![x.clone()]), ("t", vec![t.clone()])],
            sampler(mode, 20),
            LoaderOptions::new(workers, 2).ordered(true),
        )
        .unwrap();
        let steps = (N / 20) as usize;
        for shards in loader.take(steps) {
            let shards = shards.unwrap();
            let want = drawn.next().unwrap().to_vec();
            assert_eq!(ids(&shards), want);
            let ragged = shards[0].get("t").unwrap().as_ragged().unwrap();
            let plain = RaggedStore::open(&fx.ragged)
                .unwrap()
                .bind(sys())
                .gather(&want)
                .unwrap();
            assert_eq!(ragged.values(), plain.values());
        }
        for v in [x, t] {
            let stats = match &v {
                loaderx::StreamView::Dense(v) => v.block_buffer_stats(),
                loaderx::StreamView::Ragged(v) => v.block_buffer_stats(),
            }
            .expect("a block shuffle buffers its views");
            assert_eq!((stats.records, stats.blocks), (10, 4 + 2 + 1));
            assert!(stats.held <= 7);
            // In step order each of the epoch's N / 10 blocks is fetched once. Workers gather
            // out of order: a block dropped while a later batch of its window waits is fetched
            // again.
            if workers == 0 {
                assert_eq!(stats.fetched, N / 10, "{stats:?}");
            } else {
                assert!(
                    stats.fetched >= N / 10 && stats.fetched <= 2 * N / 10,
                    "{stats:?}"
                );
            }
        }
    }
}

/// Batch size and cycle of the resume tests: 25 steps per Cyclic cycle.
const B: usize = 40;
const CYCLE: u64 = N / B as u64;

/// A loader over the fixture's Dense and Ragged streams (two views each), Cyclic, batch `B`,
/// whose transform sleeps 0-500 µs at random and returns the batch's ids and ragged shapes.
fn loader(fx: &Fixture, workers: usize, ordered: bool) -> Loader<Vec<u64>> {
    loader_in(fx, workers, ordered, (0, 1))
}

/// [`loader`] for process `rank` of `count`.
fn loader_in(
    fx: &Fixture,
    workers: usize,
    ordered: bool,
    (rank, count): (usize, usize),
) -> Loader<Vec<u64>> {
    let streams = vec![
        (
            "x",
            vec![dense_view(&fx.dense, sys()), dense_view(&fx.dense, sys())],
        ),
        (
            "t",
            vec![
                ragged_view(&fx.ragged, sys()),
                ragged_view(&fx.ragged, sys()),
            ],
        ),
    ];
    Loader::with_transform(
        streams,
        sampler(Mode::Cyclic, B),
        LoaderOptions::new(workers, 2)
            .ordered(ordered)
            .process(rank, count),
        |shards: Vec<Shard>| {
            std::thread::sleep(Duration::from_micros(rand::random_range(0..500)));
            Ok(digest(&shards))
        },
    )
    .unwrap()
}

/// A batch's ids followed by its ragged shapes.
fn digest(shards: &[Shard]) -> Vec<u64> {
    let mut v = ids(shards);
    for s in shards {
        v.extend(s.get("t").unwrap().as_ragged().unwrap().shapes());
    }
    v
}

/// The oracle's batches, and each batch's step.
type Oracle = (Vec<Vec<u64>>, HashMap<Vec<u64>, u64>);

/// The oracle: the first `n` batches of one uninterrupted inline run, and each batch's step.
fn oracle(fx: &Fixture, n: usize) -> Oracle {
    let all: Vec<Vec<u64>> = loader(fx, 0, false).take(n).map(Result::unwrap).collect();
    let steps = all
        .iter()
        .enumerate()
        .map(|(k, b)| (b.clone(), k as u64))
        .collect();
    (all, steps)
}

/// Checks what a sequence of loaders delivered against the oracle, given the last loader's state:
/// in ordered delivery the batches are the oracle's, in order; in completion order each is one
/// of the oracle's, none twice, and the steps delivered are exactly those the state counts (every
/// step below its low-water step and the ones it lists ahead).
fn check_against_oracle(got: &[Vec<u64>], last: &LoaderState, oracle: &Oracle, case: &str) {
    if last.ordered {
        assert_eq!(got, &oracle.0[..got.len()], "{case}");
        assert!(last.delivered_ahead.is_empty(), "{case}");
        assert_eq!(last.step, got.len() as u64, "{case}");
        return;
    }
    let mut seen = BTreeSet::new();
    for b in got {
        let step = *oracle
            .1
            .get(b)
            .unwrap_or_else(|| panic!("{case}: not an oracle batch"));
        assert!(seen.insert(step), "{case}: step {step} delivered twice");
    }
    let mut counted: BTreeSet<u64> = (0..last.step).collect();
    counted.extend(&last.delivered_ahead);
    assert_eq!(
        seen, counted,
        "{case}: the state does not count what was delivered"
    );
}

/// Takes `n` batches.
fn take(l: &mut Loader<Vec<u64>>, n: usize) -> Vec<Vec<u64>> {
    l.by_ref().take(n).map(Result::unwrap).collect()
}

#[test]
fn resume_at_every_step_of_a_cycle_with_any_worker_count_in_both_modes() {
    let fx = fixture();
    let total = CYCLE as usize + 5;
    let oracle = oracle(&fx, 2 * total);
    for (workers, again) in [(0usize, 4usize), (1, 0), (4, 1), (4, 4)] {
        for ordered in [false, true] {
            for at in 0..=CYCLE as usize {
                let case = format!("w {workers} -> {again} ordered {ordered} at {at}");
                let mut first = loader(&fx, workers, ordered);
                let mut got = take(&mut first, at);
                // Through JSON, as a checkpoint stores it.
                let saved = first.state_dict().to_json();
                let state = LoaderState::from_json(&saved).unwrap();
                if !state.delivered_ahead.is_empty() {
                    eprintln!(
                        "{case}: resumed with steps {:?} ahead",
                        state.delivered_ahead
                    );
                }
                assert!(
                    state.delivered_ahead.len() <= workers + 2,
                    "{case}: {} steps ahead",
                    state.delivered_ahead.len()
                );
                drop(first);
                let mut second = loader(&fx, again, ordered);
                second.load_state_dict(&state).unwrap();
                assert_eq!(
                    second.state_dict(),
                    state,
                    "{case}: loading moved the position"
                );
                got.extend(take(&mut second, total - at));
                check_against_oracle(&got, &second.state_dict(), &oracle, &case);
            }
        }
    }
}

#[test]
fn resume_twice_in_a_row_continues_the_same_sequence() {
    // A resumed loader's own state resumes again: nothing restarts from zero, nothing is skipped.
    let fx = fixture();
    let oracle = oracle(&fx, 120);
    for ordered in [false, true] {
        for workers in [0usize, 1, 4] {
            let case = format!("w {workers} ordered {ordered}");
            let mut a = loader(&fx, workers, ordered);
            let mut got = take(&mut a, 7);
            let s1 = a.state_dict();
            drop(a);
            let mut b = loader(&fx, workers, ordered);
            b.load_state_dict(&s1).unwrap();
            // Saved again before taking anything: the same position, not step 0.
            let s1_again = b.state_dict();
            assert_eq!(s1_again, s1, "{case}");
            let mut c = loader(&fx, workers, ordered);
            c.load_state_dict(&s1_again).unwrap();
            drop(b);
            got.extend(take(&mut c, 11));
            let s2 = c.state_dict();
            drop(c);
            let mut d = loader(&fx, workers, ordered);
            d.load_state_dict(&s2).unwrap();
            got.extend(take(&mut d, 30));
            check_against_oracle(&got, &d.state_dict(), &oracle, &case);
        }
    }
}

#[test]
fn loading_a_state_in_place_rewinds_also_after_an_error() {
    // A live loader loads an earlier state of its own: it drops what its workers drew ahead and
    // delivers the same batches again; a loader that stopped on an error restarts the same way.
    let fx = fixture();
    let oracle = oracle(&fx, 60);
    for workers in [0usize, 1, 4] {
        let mut l = loader(&fx, workers, true);
        take(&mut l, 5);
        let at5 = l.state_dict();
        let ahead = take(&mut l, 9);
        l.load_state_dict(&at5).unwrap();
        assert_eq!(take(&mut l, 9), ahead, "w {workers}");
        assert_eq!(ahead, oracle.0[5..14], "w {workers}");
    }
    let failing = |fx: &Fixture, fail: Arc<std::sync::atomic::AtomicBool>| {
        Loader::with_transform(
            [("x", vec![dense_view(&fx.dense, sys())])],
            sampler(Mode::Sequential, 4),
            LoaderOptions::new(2, 2).ordered(true),
            move |shards: Vec<Shard>| {
                let step = ids(&shards)[0] / 4;
                if step == 6 && fail.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(Error::Sampler("transient".into()));
                }
                Ok(step)
            },
        )
        .unwrap()
    };
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut l = failing(&fx, fail.clone());
    let before: Vec<u64> = l.by_ref().take(6).map(Result::unwrap).collect();
    assert_eq!(before, (0..6).collect::<Vec<_>>());
    assert!(matches!(l.next(), Some(Err(Error::Sampler(_)))));
    assert!(l.next().is_none(), "stopped after the error");
    let state = l.state_dict();
    assert_eq!(state.step, 6);
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    l.load_state_dict(&state).unwrap();
    let after: Vec<u64> = l.by_ref().take(5).map(Result::unwrap).collect();
    assert_eq!(after, (6..11).collect::<Vec<_>>());
    l.close();
    assert!(matches!(
        l.load_state_dict(&state),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_state_lists_the_steps_delivered_ahead_and_a_loader_skips_exactly_those() {
    // A completion-order state made by hand: low-water step 10, steps 11, 14 and 15 delivered.
    let fx = fixture();
    let oracle = oracle(&fx, 40);
    for (workers, ordered) in [(0usize, false), (1, false), (4, false)] {
        let mut l = loader(&fx, workers, ordered);
        let mut state = l.state_dict();
        state.step = 10;
        state.delivered_ahead = vec![11, 14, 15];
        l.load_state_dict(&state).unwrap();
        let got: BTreeSet<u64> = take(&mut l, 20).iter().map(|b| oracle.1[b]).collect();
        assert!(
            got.iter().all(|s| *s >= 10 && ![11, 14, 15].contains(s)),
            "w {workers}"
        );
        let end = l.state_dict();
        let mut counted: BTreeSet<u64> = (0..end.step).collect();
        counted.extend(&end.delivered_ahead);
        let mut before: BTreeSet<u64> = (0..10).collect();
        before.extend([11, 14, 15]);
        assert_eq!(
            got.union(&before).copied().collect::<BTreeSet<_>>(),
            counted,
            "w {workers}"
        );
    }
}

#[test]
fn a_state_is_a_few_hundred_bytes_of_json_and_round_trips() {
    let fx = fixture();
    let mut l = loader(&fx, 2, false);
    take(&mut l, 3);
    let s = l.state_dict();
    let json = s.to_json();
    assert!(json.len() < 800, "{} bytes: {json}", json.len());
    assert_eq!(LoaderState::from_json(&json).unwrap(), s);
    assert_eq!(s.format, "loaderx.loader");
    assert_eq!(s.version, 1);
    assert_eq!(
        (s.batch, s.process_index, s.process_count),
        (B as u64, 0, 1)
    );
    assert_eq!(
        s.sampler,
        SamplerSpec::Index {
            len: N,
            mode: Mode::Cyclic,
            seed: 42
        }
    );
    assert!(json.contains(r#""sampler":{"kind":"index","len":1000,"mode":"CYCLIC","seed":42}"#));
    assert_eq!(s.streams.len(), 2);
    assert_eq!(s.streams[1].views[1].kind, "ragged");
    assert_eq!(s.streams[1].views[1].records, N);
    for bad in [
        "{}",
        "[1]",
        &json.replace("\"version\":1", "\"version\":1,\"extra\":2"),
    ] {
        match LoaderState::from_json(bad) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("not a loader state"), "{m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

/// `load_state_dict`'s error message.
fn refusal(l: &mut Loader<Vec<u64>>, s: &LoaderState) -> String {
    match l.load_state_dict(s) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("loaded: {other:?}"),
    }
}

#[test]
fn loading_a_mismatched_state_names_the_first_field_that_differs() {
    let fx = fixture();
    let mut l = loader(&fx, 1, false);
    let good = l.state_dict();
    type Change = Box<dyn Fn(&mut LoaderState)>;
    let cases: Vec<(&str, Change)> = vec![
        ("its version is 2", Box::new(|s| s.version = 2)),
        ("its batch is 80", Box::new(|s| s.batch = 80)),
        ("its ordered is true", Box::new(|s| s.ordered = true)),
        (
            "its sampler.len is 999",
            Box::new(|s| s.sampler = index(999, Mode::Cyclic, 42)),
        ),
        (
            "its sampler.mode is Iid",
            Box::new(|s| s.sampler = index(N, Mode::Iid, 42)),
        ),
        (
            "its sampler.mode is Block { block: 4, window: 2 }",
            Box::new(|s| {
                let mode = Mode::Block {
                    block: 4,
                    window: 2,
                };
                s.sampler = index(N, mode, 42)
            }),
        ),
        (
            "its sampler.seed is 7",
            Box::new(|s| s.sampler = index(N, Mode::Cyclic, 7)),
        ),
        (
            "its sampler.kind is \"custom\"",
            Box::new(|s| s.sampler = SamplerSpec::Custom),
        ),
        ("number of streams", Box::new(|s| drop(s.streams.pop()))),
        (
            "streams[1].name is \"u\"",
            Box::new(|s| s.streams[1].name = "u".into()),
        ),
        (
            "streams[0] (\"x\") view count",
            Box::new(|s| drop(s.streams[0].views.pop())),
        ),
        (
            "streams[1] (\"t\") views[0].kind",
            Box::new(|s| s.streams[1].views[0].kind = "dense".into()),
        ),
        (
            "streams[0] (\"x\") views[1].records is 5",
            Box::new(|s| s.streams[0].views[1].records = 5),
        ),
    ];
    for (want, change) in cases {
        let mut s = good.clone();
        change(&mut s);
        let m = refusal(&mut l, &s);
        assert!(m.contains(want), "{want}: {m}");
    }
    // Another store (its label, e.g. a path) behind a view: the store hash differs.
    let mut other = loader(&fx, 1, false);
    other.label_stores(|i, j| format!("/data/{i}/{j}"));
    let m = refusal(&mut l, &other.state_dict());
    assert!(m.contains("streams[0] (\"x\") views[0].store"), "{m}");
    // A completion-order state with steps ahead belongs to its process slice.
    let mut ahead = good.clone();
    ahead.delivered_ahead = vec![good.step + 2];
    let mut two = loader_in(&fx, 1, false, (1, 2));
    let m = refusal(&mut two, &ahead);
    assert!(
        m.contains("saved by process 0 of 1 in completion order"),
        "{m}"
    );
    let mut bad = good.clone();
    bad.delivered_ahead = vec![good.step];
    assert!(refusal(&mut l, &bad).contains("not after its step"));
    // Nothing was changed by the refusals.
    assert_eq!(l.state_dict(), good);
    l.load_state_dict(&good).unwrap();
}

#[test]
fn a_state_of_another_dataset_version_loads_only_when_allowed_and_keeps_its_position() {
    let fx = fixture();
    let mut l = loader(&fx, 1, true);
    let oracle = take(&mut l, 5);
    let mut l = loader(&fx, 2, true);
    take(&mut l, 3);
    let good = l.state_dict();
    // The state as a loader reading version 3 of a dataset of 900 records would have saved it.
    let mut older = good.clone();
    for stream in &mut older.streams {
        for v in &mut stream.views {
            v.version = Some(3);
            v.records = 900;
        }
    }
    older.sampler = index(900, Mode::Cyclic, 42);
    assert!(older.reads_other_version(&good) && !good.reads_other_version(&good));
    let mut r = loader(&fx, 2, true);
    let m = refusal(&mut r, &older);
    assert!(m.contains("read at version 3 of its dataset"), "{m}");
    // Allowed: this loader's own sampler and records, from the state's step on.
    r.load_state_dict_with(&older, true).unwrap();
    assert_eq!(r.state_dict(), good);
    assert_eq!(take(&mut r, 2), oracle[3..5]);
    // Everything else must still match.
    let mut seeded = older.clone();
    seeded.sampler = index(900, Mode::Cyclic, 7);
    match r.load_state_dict_with(&seeded, true) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("its sampler.seed is 7"), "{m}"),
        other => panic!("loaded: {other:?}"),
    }
    // The same version with other record counts is not another version: still refused.
    let mut counts = good.clone();
    counts.streams[0].views[1].records = 5;
    match r.load_state_dict_with(&counts, true) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("views[1].records is 5"), "{m}"),
        other => panic!("loaded: {other:?}"),
    }
}

fn index(len: u64, mode: Mode, seed: u64) -> SamplerSpec {
    SamplerSpec::Index { len, mode, seed }
}

/// `count` ordered loaders, processes `0 .. count` of a job over one view per stream (the global
/// batch `B` divides by 1, 2, 4 and 8 processes).
/// The next batch of each process's loader, concatenated in process order: the global batch.
fn next_of_all(loaders: &mut [Loader<Vec<u64>>]) -> Vec<u64> {
    loaders
        .iter_mut()
        .flat_map(|l| l.next().unwrap().unwrap())
        .collect()
}

fn loaders(fx: &Fixture, count: usize, ordered: bool) -> Vec<Loader<Vec<u64>>> {
    (0..count)
        .map(|r| {
            let streams = vec![
                ("x", vec![dense_view(&fx.dense, sys())]),
                ("t", vec![ragged_view(&fx.ragged, sys())]),
            ];
            Loader::with_transform(
                streams,
                sampler(Mode::Cyclic, B),
                LoaderOptions::new(2, 2).ordered(ordered).process(r, count),
                |shards: Vec<Shard>| Ok(ids(&shards)),
            )
            .unwrap()
        })
        .collect()
}

#[test]
fn elastic_resume_continues_the_global_sequence_on_another_process_count() {
    // N processes run 9 steps; process 0's state (ordered: every process's is the same, bar its
    // slice) loads into M processes, whose slices, in rank order, continue the global batches.
    let fx = fixture();
    let mut reference = IndexSampler::new(N, B, Mode::Cyclic, 42).unwrap();
    let global: Vec<Vec<u64>> = (0..40)
        .map(|_| reference.next().unwrap().to_vec())
        .collect();
    for (n, m) in [(1, 2), (2, 4), (4, 2), (2, 1), (8, 1), (1, 8)] {
        let mut old = loaders(&fx, n, true);
        for (step, want) in global.iter().enumerate().take(9) {
            assert_eq!(&next_of_all(&mut old), want, "{n} processes, step {step}");
        }
        let states: Vec<LoaderState> = old.iter().map(|l| l.state_dict()).collect();
        for (r, s) in states.iter().enumerate() {
            assert_eq!((s.process_index, s.process_count), (r as u64, n as u64));
            let mut same = s.clone();
            same.process_index = 0;
            assert_eq!(
                same, states[0],
                "the states differ only in the process slice"
            );
        }
        drop(old);
        let mut new = loaders(&fx, m, true);
        for l in &mut new {
            l.load_state_dict(&states[0]).unwrap();
        }
        for (step, want) in global.iter().enumerate().skip(9) {
            let got = next_of_all(&mut new);
            assert_eq!(&got, want, "{n} -> {m} processes, step {step}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Any run cut at any points into loaders of any worker counts, in either mode, delivers what
    /// the oracle does (in ordered delivery its sequence; in completion order exactly the steps the
    /// last state counts, each once).
    #[test]
    fn any_chain_of_resumes_matches_the_oracle(
        ordered in proptest::prelude::any::<bool>(),
        cuts in proptest::collection::vec((0usize..12, 0usize..5), 1..5),
    ) {
        let fx = FX.with(|f| f.clone());
        let oracle = ORACLE.with(|o| o.clone());
        let mut got = Vec::new();
        let mut state: Option<LoaderState> = None;
        for (take_n, workers) in cuts.iter().copied().chain([(10, 2)]) {
            let mut l = loader(&fx, workers, ordered);
            if let Some(s) = &state {
                l.load_state_dict(s).unwrap();
            }
            got.extend(take(&mut l, take_n));
            state = Some(LoaderState::from_json(&l.state_dict().to_json()).unwrap());
        }
        let last = state.unwrap();
        check_against_oracle(&got, &last, &oracle, &format!("{ordered} {cuts:?}"));
    }
}

thread_local! {
    static FX: Arc<Fixture> = Arc::new(fixture());
    static ORACLE: Arc<Oracle> = FX.with(|f| Arc::new(oracle(f, 200)));
}
