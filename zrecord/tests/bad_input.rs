//! T8 bad-input API calls (Rust side): random, mostly-wrong calls to the writers, stores and
//! views: wrong byte lengths, bad `cu_seqlens`, zero/overflowing/too-many dimensions, shard counts
//! 0/256/u32::MAX, zstd levels out of range, dictionary misuse, sizes at and past the 2 GiB record
//! limit, indices out of range, bad ranges, wrong container kind, closed stores.
//!
//! Every call is checked against an independent model of the documented rules:
//! * 0 panics (each case runs under `catch_unwind`);
//! * every rejection is a typed error of the right kind and leaves the writer usable and unchanged;
//! * 0 silent accepts: a call is accepted only if the model says it is valid, and everything
//!   accepted reads back identical (bytes, shapes, dtype, length);
//! * valid calls are not refused.
//!
//! `ZR_T8_CASES` sets the number of cases (CI 10,000); the total number of API calls is printed.

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::*;
use zrecord::{
    Batch, Codec, DType, Dense, DenseWriter, Error, Layout, OpenOptions, Ragged, RaggedWriter,
    Store, Vfs, View, Writer, WriterOptions,
};

const LIMIT: u64 = 1 << 31;

#[derive(Clone, Debug)]
struct Append {
    /// Element counts per record (Ragged: used through random shapes).
    dims: Vec<Vec<u64>>,
    /// Dense: number of records.
    n: usize,
    perturb: u8,
    seed: u64,
}

#[derive(Clone, Debug)]
struct Case {
    ragged: bool,
    dtype: usize,
    item: Vec<u64>,
    ndim: u32,
    codec: Codec,
    dict: u8,
    shards: u32,
    level: i32,
    appends: Vec<Append>,
    reads: Vec<Vec<u64>>,
    ranges: Vec<(u64, u64)>,
    close_store: bool,
}

fn dim() -> impl Strategy<Value = u64> {
    prop_oneof![
        30 => 1u64..5,
        1 => Just(0u64),
        1 => Just(LIMIT),
        1 => Just(LIMIT + 1),
        1 => Just(u64::MAX / 2),
        1 => Just(u64::MAX),
    ]
}

fn append() -> impl Strategy<Value = Append> {
    (
        prop::collection::vec(prop::collection::vec(1u64..4, 0..4), 0..6),
        0usize..6,
        0u8..24,
        any::<u64>(),
    )
        .prop_map(|(dims, n, perturb, seed)| Append {
            dims,
            n,
            perturb,
            seed,
        })
}

fn case() -> impl Strategy<Value = Case> {
    let head = (
        any::<bool>(),
        0..DType::ALL.len(),
        prop_oneof![
            10 => prop::collection::vec(dim(), 0..4),
            1 => prop::collection::vec(Just(1u64), 33..35),
        ],
        prop_oneof![20 => 1u32..4, 1 => Just(0u32), 1 => Just(32u32), 1 => Just(33u32)],
        prop_oneof![Just(Codec::Raw), Just(Codec::Zstd), Just(Codec::ZstdDict)],
        // 0: the dictionary the codec needs; 1: none; 2: empty; 3: a real one; 4: garbage bytes.
        prop_oneof![12 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        prop_oneof![
            40 => 1u32..5,
            1 => Just(0u32),
            1 => Just(255u32),
            1 => Just(256u32),
            1 => Just(u32::MAX),
        ],
        prop_oneof![
            30 => 1i32..4,
            1 => Just(-8i32),
            1 => Just(-7i32),
            1 => Just(22i32),
            1 => Just(23i32),
        ],
    );
    let tail = (
        prop::collection::vec(append(), 0..5),
        prop::collection::vec(
            prop::collection::vec(
                prop_oneof![
                    6 => 0u64..40,
                    1 => Just(u64::MAX),
                    1 => Just(i64::MAX as u64),
                    1 => Just(1u64 << 32),
                ],
                0..6,
            ),
            0..5,
        ),
        prop::collection::vec((0u64..45, 0u64..45), 0..3),
        any::<bool>(),
    );
    (head, tail).prop_map(
        |(
            (ragged, dtype, item, ndim, codec, dict, shards, level),
            (appends, reads, ranges, close_store),
        )| Case {
            ragged,
            dtype,
            item,
            ndim,
            codec,
            dict,
            shards,
            level,
            appends,
            reads,
            ranges,
            close_store,
        },
    )
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
}

impl Counters {
    fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn outcome<T>(&self, r: &zrecord::Result<T>) {
        self.call();
        if r.is_ok() {
            self.accepted.fetch_add(1, Ordering::Relaxed);
        } else {
            self.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)*)));
        }
    };
}

fn is_arg_error(e: &Error) -> bool {
    matches!(e, Error::InvalidInput(_) | Error::LimitExceeded(_))
}

/// The documented rules for a packed Ragged batch (independent of the implementation).
fn ragged_valid(values: &[u8], cu: &[i32], shapes: &[u64], ndim: usize, isz: usize) -> bool {
    if !values.len().is_multiple_of(isz) || cu.is_empty() || cu[0] != 0 {
        return false;
    }
    let n = cu.len() - 1;
    if shapes.len() != n * ndim {
        return false;
    }
    for k in 0..n {
        if cu[k + 1] <= cu[k] {
            return false;
        }
        let mut count: u128 = 1;
        for &d in &shapes[k * ndim..(k + 1) * ndim] {
            count *= d as u128;
            if count > u64::MAX as u128 {
                return false;
            }
        }
        if count != (cu[k + 1] - cu[k]) as u128 || count * isz as u128 > LIMIT as u128 {
            return false;
        }
    }
    cu[n] as usize * isz == values.len()
}

/// Checks a writer's `create` outcome `r` against the model (`valid`: the arguments are valid;
/// a valid case with a foreign dictionary may be refused too): a refusal is a typed argument
/// error that left nothing at `path`. Returns the writer where it was created.
fn created<L: Layout>(
    r: zrecord::Result<Writer<L>>,
    valid: bool,
    fs: &MemFs,
    path: &Path,
    c: &Case,
    ctr: &Counters,
) -> Result<Option<Writer<L>>, TestCaseError> {
    ctr.outcome(&r);
    match r {
        Err(e) => {
            ensure!(is_arg_error(&e), "create: untyped rejection {e:?}");
            ensure!(!valid || c.dict == 4, "create refused valid args: {e}");
            ensure!(!fs.exists(path).unwrap(), "refused create left a container");
            Ok(None)
        }
        Ok(w) => {
            ensure!(valid, "create accepted invalid args {c:?}");
            Ok(Some(w))
        }
    }
}

/// Checks an append's outcome `r` against the model's verdict `ok` on the input (`what`
/// describes it): an accepted append added `added` records to the `before` the writer held, a
/// refused one is a typed argument error that changed nothing. Returns whether it was accepted.
fn appended<L: Layout>(
    w: &Writer<L>,
    before: u64,
    added: usize,
    r: zrecord::Result<()>,
    ok: bool,
    what: impl Fn() -> String,
    ctr: &Counters,
) -> Result<bool, TestCaseError> {
    ctr.outcome(&r);
    match r {
        Ok(()) => {
            ensure!(ok, "append accepted invalid input: {}", what());
            ensure!(w.len() == before + added as u64, "len not advanced");
            Ok(true)
        }
        Err(e) => {
            ensure!(is_arg_error(&e), "append: untyped rejection {e:?}");
            ensure!(!ok, "append refused valid input ({}): {e}", what());
            ensure!(w.len() == before, "rejected append changed len");
            Ok(false)
        }
    }
}

/// Closes `w`, which must publish.
fn closed<L: Layout>(w: Writer<L>, ctr: &Counters) -> Result<(), TestCaseError> {
    let r = w.close();
    ctr.outcome(&r);
    ensure!(r.is_ok(), "close failed: {r:?}");
    Ok(())
}

fn run_case(c: &Case, ctr: &Counters) -> Result<(), TestCaseError> {
    let dtype = DType::ALL[c.dtype];
    let isz = dtype.itemsize();
    let fs = MemFs::new();
    let path = Path::new("/t/c");
    let dict = match c.dict {
        0 => (c.codec == Codec::ZstdDict).then(tiny_dict_cached),
        1 => None,
        2 => Some(Vec::new()),
        3 => Some(tiny_dict_cached()),
        _ => Some(fine_bytes(64, 1, false)),
    };
    let opts = WriterOptions {
        data_shards: c.shards,
        dict: dict.clone(),
        zstd_level: c.level,
        vfs: Arc::new(fs.clone()),
        ..WriterOptions::default()
    };
    // Model of create().
    let has_dict = dict.as_ref().is_some_and(|d| !d.is_empty());
    let mut valid = (1..=255).contains(&c.shards)
        && (-7..=22).contains(&c.level)
        && (c.codec == Codec::ZstdDict) == has_dict;
    let stride: Option<u64> = if c.ragged {
        valid &= (1..=32).contains(&c.ndim);
        None
    } else {
        let s = c
            .item
            .iter()
            .try_fold(isz as u64, |a, &d| a.checked_mul(d))
            .filter(|&s| s <= LIMIT);
        valid &= c.item.len() <= 32 && !c.item.contains(&0) && s.is_some();
        s
    };
    // Records accepted so far: (bytes, shape).
    let mut model: Vec<(Vec<u8>, Vec<u64>)> = Vec::new();
    if c.ragged {
        let r = RaggedWriter::create(path, dtype, c.ndim, c.codec, opts);
        let Some(mut w) = created(r, valid, &fs, path, c, ctr)? else {
            return Ok(());
        };
        let ndim = c.ndim as usize;
        for a in &c.appends {
            // A valid batch: shapes of rank ndim from the generated dims.
            let mut shapes = Vec::new();
            let mut recs = Vec::new();
            for (k, d) in a.dims.iter().enumerate() {
                let shape: Vec<u64> = (0..ndim).map(|j| *d.get(j).unwrap_or(&1)).collect();
                let count: u64 = shape.iter().product();
                recs.push((
                    fine_bytes(count as usize * isz, a.seed + k as u64, k % 2 == 0),
                    shape.clone(),
                ));
                shapes.extend(shape);
            }
            let (mut values, mut cu, _) = pack(&recs, isz);
            let n = recs.len();
            match a.perturb {
                12 if !cu.is_empty() => cu[0] = 1,
                13 if n >= 2 => cu[1] = cu[2],
                14 if n >= 1 => cu[n] += 1,
                15 => {
                    values.pop();
                }
                16 => shapes.push(1),
                17 if !shapes.is_empty() => {
                    shapes.pop();
                }
                18 if !shapes.is_empty() => shapes[0] *= 2,
                19 if !shapes.is_empty() => shapes[0] = 0,
                20 if ndim >= 2 && n >= 1 => {
                    shapes[0] = u64::MAX;
                    shapes[1] = 2;
                }
                21 if n >= 1 => cu[1] = -5,
                22 => cu.clear(),
                23 => values.push(0),
                _ => {}
            }
            let ok = ragged_valid(&values, &cu, &shapes, ndim, isz);
            let what = || format!("batch cu={cu:?} shapes={shapes:?} values={}B", values.len());
            let added = cu.len().saturating_sub(1);
            let before = w.len();
            let r = w.append(&values, &cu, &shapes);
            if appended(&w, before, added, r, ok, what, ctr)? {
                for k in 0..added {
                    let v = values[cu[k] as usize * isz..cu[k + 1] as usize * isz].to_vec();
                    model.push((v, shapes[k * ndim..(k + 1) * ndim].to_vec()));
                }
            }
        }
        closed(w, ctr)?;
    } else {
        let r = DenseWriter::create(path, dtype, &c.item, c.codec, opts);
        let Some(mut w) = created(r, valid, &fs, path, c, ctr)? else {
            return Ok(());
        };
        let stride = stride.unwrap_or(0) as usize;
        for a in &c.appends {
            let n = if stride > 1 << 16 { 0 } else { a.n };
            let mut len = n * stride;
            match a.perturb % 6 {
                1 => len += 1,
                2 if len > 0 => len -= 1,
                3 => len += stride.min(1 << 16) / 2,
                _ => {}
            }
            let data = fine_bytes(len, a.seed, a.perturb % 2 == 0);
            let ok = stride > 0 && len.is_multiple_of(stride);
            let what = || format!("{len} bytes for stride {stride}");
            let before = w.len();
            let r = w.append(&data);
            if appended(&w, before, len / stride.max(1), r, ok, what, ctr)? {
                for ch in data.chunks(stride) {
                    model.push((ch.to_vec(), c.item.clone()));
                }
            }
        }
        closed(w, ctr)?;
    }

    // Read everything back through the public API.
    let oo = OpenOptions {
        verify: true,
        vfs: Arc::new(fs.clone()),
        ..OpenOptions::default()
    };
    let back = ReadBack {
        path,
        oo,
        c,
        ctr,
        model: &model,
        dtype,
    };
    if c.ragged {
        back.check::<Ragged>()
    } else {
        back.check::<Dense>()
    }
}

/// A written case read back through the public API, against the model of what was accepted.
struct ReadBack<'a> {
    path: &'a Path,
    oo: OpenOptions,
    c: &'a Case,
    ctr: &'a Counters,
    model: &'a [(Vec<u8>, Vec<u64>)],
    dtype: DType,
}

/// What the read-back of a case checks that differs between the layouts.
trait Face: Layout {
    /// The other layout, which must refuse to open the container.
    type Other: Layout;
    /// What the refusal of [`Face::Other`] is called in a failure.
    const WRONG: &'static str;
    /// Whether what the store says of its records' shape is what the case wrote.
    fn shape_ok(st: &Store<Self>, c: &Case) -> bool;
    /// The records of a batch of `n` as (bytes, shape).
    fn records(b: &Batch<Self>, n: usize, c: &Case) -> Vec<(Vec<u8>, Vec<u64>)>;
    /// The layout's own checks of the range `a..b` (`range`, what it returned) and of its start.
    fn check_at(
        back: &ReadBack<'_>,
        v: &View<Self>,
        range_ab: (u64, u64),
        range: &zrecord::Result<Batch<Self>>,
    ) -> Result<(), TestCaseError>;
    /// The gather that must fail with `Closed` once the store is closed.
    const AFTER_CLOSE: &'static [u64];
}

impl Face for Ragged {
    type Other = Dense;
    const WRONG: &'static str = "Ragged container opened as Dense";
    const AFTER_CLOSE: &'static [u64] = &[0];

    fn shape_ok(st: &Store<Ragged>, c: &Case) -> bool {
        st.ndim() == c.ndim
    }

    fn records(b: &Batch<Ragged>, _: usize, _: &Case) -> Vec<(Vec<u8>, Vec<u64>)> {
        (0..b.len())
            .map(|k| {
                (
                    b.record(k).to_vec(),
                    b.shapes()[k * b.ndim()..(k + 1) * b.ndim()].to_vec(),
                )
            })
            .collect()
    }

    fn check_at(
        back: &ReadBack<'_>,
        v: &View<Ragged>,
        (a, b): (u64, u64),
        range: &zrecord::Result<Batch<Ragged>>,
    ) -> Result<(), TestCaseError> {
        if let Ok(batch) = range {
            ensure!(batch.len() as u64 == b - a, "range length");
        }
        let s = v.shape_of(a);
        back.ctr.outcome(&s);
        ensure!(s.is_ok() == (a < v.len()), "shape_of({a}) of {}", v.len());
        Ok(())
    }
}

impl Face for Dense {
    type Other = Ragged;
    const WRONG: &'static str = "Dense container opened as Ragged";
    const AFTER_CLOSE: &'static [u64] = &[];

    fn shape_ok(st: &Store<Dense>, c: &Case) -> bool {
        st.item_shape() == &c.item[..]
    }

    fn records(b: &Batch<Dense>, n: usize, c: &Case) -> Vec<(Vec<u8>, Vec<u64>)> {
        let stride = b.bytes().len() / n.max(1);
        b.bytes()
            .chunks(stride.max(1))
            .take(n)
            .map(|ch| (ch.to_vec(), c.item.clone()))
            .collect()
    }

    fn check_at(
        back: &ReadBack<'_>,
        v: &View<Dense>,
        (a, _): (u64, u64),
        _: &zrecord::Result<Batch<Dense>>,
    ) -> Result<(), TestCaseError> {
        let g = v.get(a);
        back.ctr.outcome(&g);
        ensure!(g.is_ok() == (a < v.len()), "get({a}) of {}", v.len());
        if let Ok(g) = g {
            ensure!(g.shape() == &back.c.item[..], "get shape");
            ensure!(g.bytes() == &back.model[a as usize].0[..], "get bytes");
        }
        Ok(())
    }
}

impl ReadBack<'_> {
    /// Opens the container as `L` (as the other layout it must be refused), then checks its
    /// metadata, every requested gather and range, and `close` or `verify`.
    fn check<L: Face>(&self) -> Result<(), TestCaseError> {
        let (c, ctr, len) = (self.c, self.ctr, self.model.len() as u64);
        let wrong = Store::<L::Other>::open_with(self.path, self.oo.clone());
        ctr.outcome(&wrong);
        ensure!(matches!(wrong, Err(Error::Format { .. })), "{}", L::WRONG);
        let st = Store::<L>::open_with(self.path, self.oo.clone())
            .map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
        ctr.call();
        ensure!(
            st.len() == len && st.dtype() == self.dtype && L::shape_ok(&st, c),
            "metadata differs"
        );
        let v = st.bind(alloc());
        let gather = |idx: &[u64]| v.gather(idx).map(|b| L::records(&b, idx.len(), c));
        let mut sets = c.reads.clone();
        sets.push((0..len).collect());
        for idx in &sets {
            let r = gather(idx);
            ctr.outcome(&r);
            self.check_idx(idx, &r)?;
        }
        for &(a, b) in &c.ranges {
            let r = v.range(a..b);
            ctr.outcome(&r);
            ensure!(
                r.is_ok() == (a <= b && b <= len),
                "range {a}..{b} of {len}: {:?}",
                r.as_ref().err()
            );
            L::check_at(self, &v, (a, b), &r)?;
        }
        if c.close_store {
            st.close();
            let r = gather(L::AFTER_CLOSE);
            ctr.outcome(&r);
            ensure!(
                matches!(r, Err(Error::Closed(_))),
                "gather after close: {:?}",
                r.err()
            );
            let r = st.verify();
            ctr.outcome(&r);
            ensure!(matches!(r, Err(Error::Closed(_))), "verify after close");
        } else {
            let r = st.verify();
            ctr.outcome(&r);
            ensure!(r.is_ok(), "verify: {r:?}");
        }
        Ok(())
    }

    /// A gather of `idx` returned the model's records, or refused an out-of-range index.
    fn check_idx(
        &self,
        idx: &[u64],
        r: &zrecord::Result<Vec<(Vec<u8>, Vec<u64>)>>,
    ) -> Result<(), TestCaseError> {
        let len = self.model.len() as u64;
        let ok = idx.iter().all(|&i| i < len);
        match r {
            Ok(got) => {
                ensure!(ok, "gather accepted out-of-range {idx:?} (len {len})");
                for (k, &i) in idx.iter().enumerate() {
                    ensure!(got[k] == self.model[i as usize], "record {i} differs");
                }
            }
            Err(e) => {
                ensure!(!ok, "gather refused valid {idx:?}: {e}");
                ensure!(
                    matches!(e, Error::IndexOutOfRange { .. }),
                    "gather: wrong error {e:?}"
                );
            }
        }
        Ok(())
    }
}

fn tiny_dict_cached() -> Vec<u8> {
    static D: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    D.get_or_init(tiny_dict).clone()
}

#[test]
fn random_bad_api_calls_are_rejected_with_typed_errors_and_never_accepted_silently() {
    let cases = env_count("ZR_T8_CASES", 10_000) as u32;
    let ctr = Counters::default();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let t0 = std::time::Instant::now();
    let result = runner.run(&case(), |c| {
        match catch_unwind(AssertUnwindSafe(|| run_case(&c, &ctr))) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(TestCaseError::fail(format!("PANIC: {msg}")))
            }
        }
    });
    if let Err(e) = result {
        panic!("T8 failed: {e}");
    }
    report(
        "T8",
        &[
            ("cases", cases.to_string()),
            ("api_calls", ctr.calls.load(Ordering::Relaxed).to_string()),
            ("accepted", ctr.accepted.load(Ordering::Relaxed).to_string()),
            ("rejected", ctr.rejected.load(Ordering::Relaxed).to_string()),
            ("panics", "0".into()),
            ("silent_accepts", "0".into()),
            ("secs", format!("{:.1}", t0.elapsed().as_secs_f64())),
        ],
    );
}
