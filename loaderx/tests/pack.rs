//! Sequence packing (`loaderx::Packer`) over real Ragged stores: concat against a plain
//! re-implementation on the delivered documents, first-fit's invariants, and exact resume
//! (workers 0 and 2, two processes, a mixture).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loaderx::{
    IndexSampler, Loader, LoaderOptions, MixtureSource, Mode, PackMode, PackOptions, PackState,
    PackedBatch, PackedState, Packer, Shard, StreamView,
};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zrecord::{Codec, DType, RaggedStore, RaggedWriter, SystemAllocator, WriterOptions};

/// A Ragged int32 store of `lens.len()` documents; token `j` of document `d` is `d * 10_000 + j`.
fn doc_store(dir: &Path, name: &str, lens: &[usize]) -> PathBuf {
    let path = dir.join(name);
    let mut w =
        RaggedWriter::create(&path, DType::Int32, 1, Codec::Raw, WriterOptions::default()).unwrap();
    let (mut values, mut cu, mut shapes) = (Vec::new(), vec![0i32], Vec::new());
    for (d, &n) in lens.iter().enumerate() {
        for j in 0..n {
            values.extend_from_slice(&((d * 10_000 + j) as i32).to_le_bytes());
        }
        cu.push(cu.last().unwrap() + n as i32);
        shapes.push(n as u64);
    }
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
    path
}

fn view(p: &Path) -> StreamView {
    RaggedStore::open(p)
        .unwrap()
        .bind(Arc::new(SystemAllocator::new()))
        .into()
}

fn loader(p: &Path, docs: u64, batch: usize, opts: LoaderOptions) -> Loader<Vec<Shard>> {
    let s = IndexSampler::new(docs, batch, Mode::Cyclic, 5).unwrap();
    Loader::new([("t", vec![view(p)])], Box::new(s), opts).unwrap()
}

fn ints(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// A batch as (tokens, segment ids, positions), row-major.
type Rows = (Vec<i32>, Vec<i32>, Vec<i32>);

fn rows(b: &PackedBatch) -> Rows {
    let h = |a: &zrecord::Allocation| ints(a.host_slice().unwrap());
    (h(&b.tokens), h(&b.segment_ids), h(&b.positions))
}

fn take(p: &mut Packer, l: &mut Loader<Vec<Shard>>, n: usize) -> Vec<Rows> {
    (0..n)
        .map(|_| rows(&p.next_from(l, Ok).unwrap().unwrap()))
        .collect()
}

/// The documents a plain loader delivers over `steps` steps, in delivery order.
fn delivered(l: &mut Loader<Vec<Shard>>, steps: usize) -> Vec<Vec<i32>> {
    let mut out = Vec::new();
    for _ in 0..steps {
        for s in l.next().unwrap().unwrap() {
            let b = s.get("t").unwrap().as_ragged().unwrap();
            let v = ints(b.values());
            for w in b.cu_seqlens().windows(2) {
                out.push(v[w[0] as usize..w[1] as usize].to_vec());
            }
        }
    }
    out
}

/// Concat, written out plainly: one token list, cut every `l`; segments and positions restart
/// at each document start and each row start.
fn concat_oracle(docs: &[Vec<i32>], rows_per: usize, l: usize, batches: usize) -> Vec<Rows> {
    let mut flat = Vec::new();
    for d in docs {
        for (j, &t) in d.iter().enumerate() {
            flat.push((t, j == 0));
        }
    }
    let mut out = Vec::new();
    for b in 0..batches {
        let (mut t, mut s, mut p) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rows_per {
            let (mut seg, mut pos) = (0, 0);
            for c in 0..l {
                let (tok, first) = flat[(b * rows_per + r) * l + c];
                if first || c == 0 {
                    seg += 1;
                    pos = 0;
                }
                t.push(tok);
                s.push(seg);
                p.push(pos);
                pos += 1;
            }
        }
        out.push((t, s, p));
    }
    out
}

/// Every segment of `batches` as (document, first token index, length), checking that each
/// segment is one run of one document with positions from 0, and that padding is all zero.
fn segments(batches: &[Rows], l: usize) -> Vec<(i32, i32, usize)> {
    let mut out = Vec::new();
    for (t, s, p) in batches {
        for r in 0..t.len() / l {
            let row = r * l..(r + 1) * l;
            let (t, s, p) = (&t[row.clone()], &s[row.clone()], &p[row]);
            let mut c = 0;
            let mut want_seg = 1;
            while c < l && s[c] != 0 {
                assert_eq!(s[c], want_seg, "segment ids count up from 1 in a row");
                let start = c;
                while c < l && s[c] == want_seg {
                    assert_eq!(p[c] as usize, c - start, "positions restart per segment");
                    assert_eq!(
                        t[c],
                        t[start] + (c - start) as i32,
                        "one run of one document"
                    );
                    c += 1;
                }
                out.push((t[start] / 10_000, t[start] % 10_000, c - start));
                want_seg += 1;
            }
            assert!(
                (c..l).all(|k| s[k] == 0 && p[k] == 0 && t[k] == 0),
                "padding only at a row's end, zeroed"
            );
        }
    }
    out
}

fn opts(mode: PackMode, rows: usize, seq_len: usize) -> PackOptions {
    PackOptions {
        seq_len,
        rows,
        mode,
        pool: 8,
    }
}

/// Pulls `steps` steps from `l`, then ends the stream.
fn epoch(
    l: &mut Loader<Vec<Shard>>,
    steps: usize,
) -> impl FnMut() -> Option<loaderx::Result<(loaderx::LoaderState, Vec<Shard>)>> + '_ {
    let mut left = steps;
    move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let before = l.state_dict();
        l.next().map(|r| r.map(|s| (before, s)))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Concat equals the plain cut of the delivered documents; first-fit places every token of
    /// every delivered document exactly once, in order, each segment within one document, with
    /// no more rows than documents need; both at workers 0 and 2.
    #[test]
    fn packed_batches_hold_every_delivered_token_once_in_order(
        lens in proptest::collection::vec(1usize..300, 40..120),
        seq_len in 16usize..200,
        rows_per in 1usize..5,
        workers in prop_oneof![Just(0usize), Just(2usize)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = doc_store(dir.path(), "d", &lens);
        let n = lens.len() as u64;
        let o = LoaderOptions::new(workers, 2).ordered(true);
        let total: usize = lens.iter().sum();
        // Concat: enough batches to span about two epochs of tokens.
        let batches = (2 * total / (rows_per * seq_len)).max(1);
        let mut l = loader(&p, n, 8, o);
        let mut pk = Packer::new(&l, "t", opts(PackMode::Concat, rows_per, seq_len)).unwrap();
        let got = take(&mut pk, &mut l, batches);
        let docs = delivered(&mut loader(&p, n, 8, o), (3 * n as usize).div_ceil(8));
        prop_assert_eq!(&got, &concat_oracle(&docs, rows_per, seq_len, batches));

        // First-fit over exactly the first epoch's steps (the loader's stream ends there).
        let steps = n as usize / 8;
        let first = delivered(&mut loader(&p, n, 8, o), steps);
        let mut l = loader(&p, n, 8, o);
        let mut pk = Packer::new(&l, "t", opts(PackMode::FirstFit, rows_per, seq_len)).unwrap();
        let (mut got, mut pad) = (Vec::new(), 0);
        let mut pull = epoch(&mut l, steps);
        while let Some(b) = pk.next_batch(&mut pull) {
            let b = b.unwrap();
            pad += b.padding;
            got.push(rows(&b));
        }
        let mut segs = segments(&got, seq_len);
        segs.sort_by_key(|&(d, j, _)| (d, j));
        let mut want = Vec::new();
        for d in &first {
            let (doc, mut j) = (d[0] / 10_000, 0);
            for c in d.chunks(seq_len) {
                want.push((doc, j, c.len()));
                j += c.len() as i32;
            }
        }
        want.sort_by_key(|&(d, j, _)| (d, j));
        prop_assert_eq!(segs, want);
        let tokens: usize = first.iter().map(Vec::len).sum();
        prop_assert_eq!(got.len() * rows_per * seq_len - pad, tokens);
    }
}

/// Runs `k + m` batches uninterrupted, then `k`, saves (through JSON), loads into a fresh loader
/// and packer, and checks the next `m` equal the uninterrupted run's.
fn resume_matches(make: &dyn Fn() -> Loader<Vec<Shard>>, o: PackOptions, k: usize, m: usize) {
    let mut l = make();
    let mut p = Packer::new(&l, "t", o).unwrap();
    let all = take(&mut p, &mut l, k + m);
    drop(l);
    let mut l = make();
    let mut p = Packer::new(&l, "t", o).unwrap();
    assert_eq!(take(&mut p, &mut l, k), all[..k]);
    let st = p.state_dict(&l);
    drop(l);
    let text = serde_json::to_string(&st.pack).unwrap();
    let pack: PackState = serde_json::from_str(&text).unwrap();
    let loader = loaderx::LoaderState::from_json(&st.loader.to_json()).unwrap();
    let st = PackedState { loader, pack };
    let mut l = make();
    let mut p = Packer::new(&l, "t", o).unwrap();
    p.load_state_dict(&mut l, &st).unwrap();
    assert_eq!(p.batches(), k as u64);
    assert_eq!(
        take(&mut p, &mut l, m),
        all[k..],
        "resumed after {k} batches ({o:?})"
    );
}

/// `n` seeded document lengths in 1..=700.
fn lens(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(1..=700)).collect()
}

#[test]
fn a_saved_state_resumes_exactly_in_both_modes_at_workers_0_and_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = doc_store(dir.path(), "d", &lens(300, 1));
    for mode in [PackMode::Concat, PackMode::FirstFit] {
        for workers in [0, 2] {
            let make = || loader(&p, 300, 16, LoaderOptions::new(workers, 2).ordered(true));
            for k in [0, 1, 3, 7] {
                resume_matches(&make, opts(mode, 4, 256), k, 5);
            }
        }
    }
}

#[test]
fn each_process_packs_its_own_slice_and_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = doc_store(dir.path(), "d", &lens(300, 2));
    let mut firsts = Vec::new();
    for rank in 0..2 {
        let make = || {
            loader(
                &p,
                300,
                16,
                LoaderOptions::new(2, 2).ordered(true).process(rank, 2),
            )
        };
        for mode in [PackMode::Concat, PackMode::FirstFit] {
            resume_matches(&make, opts(mode, 2, 512), 4, 4);
        }
        let mut l = make();
        let mut pk = Packer::new(&l, "t", opts(PackMode::Concat, 2, 512)).unwrap();
        firsts.push(take(&mut pk, &mut l, 1).remove(0).0[0]);
    }
    assert_ne!(
        firsts[0], firsts[1],
        "the two ranks pack different documents"
    );
}

#[test]
fn a_mixture_is_packed_in_delivery_order_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = doc_store(dir.path(), "a", &lens(200, 3));
    let b = doc_store(dir.path(), "b", &lens(150, 4));
    let make = || {
        let src = |p: &Path, w: f64, seed: u64| MixtureSource {
            streams: vec![("t", vec![view(p)])],
            weight: w,
            mode: Mode::Cyclic,
            seed,
        };
        Loader::mixture(
            vec![src(&a, 3.0, 1), src(&b, 1.0, 2)],
            16,
            vec![loaderx::WeightChange {
                step: 6,
                weights: vec![1.0, 1.0],
            }],
            LoaderOptions::new(2, 2).ordered(true),
            Arc::new(Ok),
        )
        .unwrap()
    };
    for mode in [PackMode::Concat, PackMode::FirstFit] {
        for k in [2, 5] {
            resume_matches(&make, opts(mode, 4, 300), k, 6);
        }
    }
}

#[test]
fn first_fit_pads_little_and_concat_pads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = doc_store(dir.path(), "d", &lens(400, 5));
    let mut l = loader(&p, 400, 16, LoaderOptions::new(0, 1));
    let mut ff = Packer::new(&l, "t", opts(PackMode::FirstFit, 8, 2048)).unwrap();
    let pad: usize = (0..20)
        .map(|_| ff.next_from(&mut l, Ok).unwrap().unwrap().padding)
        .sum();
    // Documents of 1..700 tokens in rows of 2,048 with 8 open rows: a few percent at most.
    assert!(pad * 100 < 20 * 8 * 2048 * 4, "first-fit padding {pad}");
    let mut l = loader(&p, 400, 16, LoaderOptions::new(0, 1));
    let mut cc = Packer::new(&l, "t", opts(PackMode::Concat, 8, 2048)).unwrap();
    for _ in 0..20 {
        assert_eq!(cc.next_from(&mut l, Ok).unwrap().unwrap().padding, 0);
    }
}

#[test]
fn unusable_streams_orders_and_states_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = doc_store(dir.path(), "d", &lens(64, 6));
    let o = opts(PackMode::Concat, 2, 64);
    let err = |r: loaderx::Result<Packer>| r.unwrap_err().to_string();
    let l = loader(&p, 64, 8, LoaderOptions::new(2, 2));
    assert!(err(Packer::new(&l, "t", o)).contains("ordered=True"));
    let l = loader(&p, 64, 8, LoaderOptions::new(0, 1));
    assert!(err(Packer::new(&l, "nope", o)).contains("no stream \"nope\""));
    assert!(err(Packer::new(&l, "t", PackOptions { seq_len: 0, ..o })).contains("positive"));
    let ff = PackOptions {
        pool: 0,
        ..opts(PackMode::FirstFit, 2, 64)
    };
    assert!(err(Packer::new(&l, "t", ff)).contains("pool"));

    let mut l = loader(&p, 64, 8, LoaderOptions::new(0, 1));
    let mut a = Packer::new(&l, "t", o).unwrap();
    take(&mut a, &mut l, 3);
    let st = a.state_dict(&l);
    let mut b = Packer::new(&l, "t", opts(PackMode::FirstFit, 2, 64)).unwrap();
    let e = b.load_state_dict(&mut l, &st).unwrap_err().to_string();
    assert!(
        e.contains("its mode is Concat but this packer's is FirstFit"),
        "{e}"
    );
    let mut c = Packer::new(&l, "t", opts(PackMode::Concat, 2, 65)).unwrap();
    let e = c.load_state_dict(&mut l, &st).unwrap_err().to_string();
    assert!(e.contains("[batch_size, seq_len]"), "{e}");
    // A cursor past the step's documents is named when the step is pulled.
    let mut bad = st.clone();
    bad.pack.cursor = Some(loaderx::pack::Cursor {
        doc: 1_000,
        token: 0,
    });
    let mut d = Packer::new(&l, "t", o).unwrap();
    d.load_state_dict(&mut l, &bad).unwrap();
    let e = d.next_from(&mut l, Ok).unwrap().unwrap_err().to_string();
    assert!(
        e.contains("cursor (document 1000, token 0) lies outside step"),
        "{e}"
    );
}
