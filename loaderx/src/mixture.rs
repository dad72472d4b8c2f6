//! Weighted mixtures: which source each position of a global batch comes from, and which record.
//!
//! A mixture has `n` sources, each a stateless index stream of its own (an [`IndexSampler`] of
//! batch 1 over the source's records, with the source's mode and seed: a Cyclic source walks a
//! fresh permutation of all its records per epoch), and a weight schedule: weights from step 0,
//! changed at step boundaries.
//!
//! **Apportionment.** Within a weight segment (the steps from one change to the next), the weights
//! are integers `W_k` in exactly the ratios of the given ones (every `f64` is a dyadic rational:
//! scaled by one power of two they are integers, used when they sum to at most 2^62, as integer
//! weights and fractional weights within a factor of about 100 of each other do), else rounded to
//! parts of 2^62 of their total; `D = ΣW`, and `C_k = W_1 + .. + W_k`. After `T` records of the
//! segment, source `k` has given `N_k(T) = ⌊C_k T / D⌋ - ⌊C_(k-1) T / D⌋` of them, evaluated at
//! step boundaries (`T = r x batch` after `r` steps). So:
//!
//! * at every step boundary, `|N_k - W_k T / D| < 1` for every source (the cumulative count is
//!   within one record of its share), and the counts sum to `T`;
//! * over any window of steps a source's count is within one record of its share with two
//!   sources, and within two records with more (the difference of two counts within one; for
//!   three or more rates no sequence keeps every window within one record, Fraenkel's
//!   conjecture, proven up to seven sources);
//! * a step's count `N_k(T + batch) - N_k(T) > W_k batch / D - 2`, hence `>= 0` when every
//!   source's share of a batch is at least one record, which construction checks;
//! * the count at any step is O(1) arithmetic (128-bit), so a seek is O(1) (O(log changes) to
//!   find the segment).
//!
//! **Layout.** A step's `n_k` records of source `k` are interleaved over the batch: item `i` of
//! source `k` sits at the rank of `(2i + 1) / 2n_k` among all items (ties by source), so every
//! process slice and every shard gets close to its share of each source. Item `i` of source `k` at
//! step `s` is the source's record at flat position `drawn_k(s) + i` of its index stream, where
//! `drawn_k(s)` counts the source's records in all steps before `s`.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sampler::{IndexSampler, IndexSpec};

/// A mixture's sampling spec: every source's index space, mode and seed, and the weight schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// One entry per source, in source order.
    pub sources: Vec<IndexSpec>,
    /// The weights from each step on, by ascending step; the first entry is at step 0.
    pub schedule: Vec<WeightChange>,
}

/// Weights that apply from `step` on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightChange {
    /// The first global step drawn with these weights.
    pub step: u64,
    /// One weight per source.
    pub weights: Vec<f64>,
}

impl MixtureSpec {
    /// The first source field that differs from `other`'s, as `(field, ours, theirs)`; with
    /// `any_len`, the sources' sizes are not compared.
    pub(crate) fn first_difference(
        &self,
        other: &MixtureSpec,
        any_len: bool,
    ) -> Option<(String, String, String)> {
        if self.sources.len() != other.sources.len() {
            return Some((
                "sources (count)".into(),
                self.sources.len().to_string(),
                other.sources.len().to_string(),
            ));
        }
        for (k, (a, b)) in self.sources.iter().zip(&other.sources).enumerate() {
            let field = |f: &str| format!("sources[{k}].{f}");
            if a.len != b.len && !any_len {
                return Some((field("len"), a.len.to_string(), b.len.to_string()));
            }
            if a.mode != b.mode {
                let (x, y) = (format!("{:?}", a.mode), format!("{:?}", b.mode));
                return Some((field("mode"), x, y));
            }
            if a.seed != b.seed {
                return Some((field("seed"), a.seed.to_string(), b.seed.to_string()));
            }
        }
        None
    }
}

/// One weight segment: integer weights, their prefix sums, and each source's records drawn in
/// every step before the segment.
#[derive(Clone, Debug)]
struct Segment {
    start: u64,
    /// `cum[k]` = `W_0 + .. + W_(k-1)`; `cum[n]` = `D`.
    cum: Vec<u64>,
    base: Vec<u64>,
}

impl Segment {
    /// Records of each source among the segment's first `steps` steps, written into `out`.
    fn counts(&self, steps: u64, batch: usize, out: &mut [u64]) -> Result<()> {
        let d = u128::from(*self.cum.last().unwrap_or(&1));
        let t = u128::from(steps) * batch as u128;
        let floor = |c: u64| -> Result<u128> {
            u128::from(c)
                .checked_mul(t)
                .map(|x| x / d)
                .ok_or_else(|| Error::Sampler(format!("mixture step {steps} overflows")))
        };
        let mut prev = 0u128;
        for (k, o) in out.iter_mut().enumerate() {
            let next = floor(self.cum[k + 1])?;
            *o = u64::try_from(next - prev)
                .map_err(|_| Error::Sampler(format!("mixture step {steps} overflows")))?;
            prev = next;
        }
        Ok(())
    }
}

/// A mixture's pure draw (see the module docs): the sources' index streams and the weight
/// schedule. Which record each position of the batch at any step holds is a function of this and
/// the step alone.
#[derive(Clone, Debug)]
pub struct MixturePlan {
    batch: usize,
    streams: Vec<IndexSampler>,
    schedule: Vec<WeightChange>,
    segments: Vec<Segment>,
}

/// The integer weights of `weights` (see the module docs), checked: one per source, each finite and
/// positive, and each source's share of a batch of `batch` at least one record.
fn units(weights: &[f64], sources: usize, batch: usize) -> Result<Vec<u64>> {
    if weights.len() != sources {
        return Err(Error::invalid(format!(
            "{} weights for {sources} sources: give one weight per source",
            weights.len()
        )));
    }
    for (k, &w) in weights.iter().enumerate() {
        if !w.is_finite() || w <= 0.0 {
            return Err(Error::invalid(format!(
                "source {k}'s weight is {w}: weights must be finite and positive"
            )));
        }
    }
    let units = exact_units(weights).unwrap_or_else(|| {
        let total: f64 = weights.iter().sum();
        weights
            .iter()
            .map(|&w| ((w / total * LIMIT as f64).round() as u64).max(1))
            .collect()
    });
    let d: u64 = units.iter().sum();
    for (k, &u) in units.iter().enumerate() {
        if u128::from(u) * (batch as u128) < u128::from(d) {
            return Err(Error::invalid(format!(
                "source {k}'s weight {} gives it {:.3} records of each global batch of {batch}: \
                 a source needs at least one record per global batch (raise its weight or the batch)",
                weights[k],
                u as f64 * batch as f64 / d as f64
            )));
        }
    }
    Ok(units)
}

/// The largest sum of integer weights: `C_k x T` stays within 128 bits for `T < 2^66` records.
const LIMIT: u64 = 1 << 62;

/// The weights as integers in exactly their ratios (each `f64` is `m x 2^e`; all scaled by the
/// smallest `2^-e`), when they sum to at most [`LIMIT`].
fn exact_units(weights: &[f64]) -> Option<Vec<u64>> {
    let parts: Vec<(u64, i32)> = weights
        .iter()
        .map(|&w| {
            let bits = w.to_bits();
            let exp = ((bits >> 52) & 0x7ff) as i32;
            let frac = bits & ((1 << 52) - 1);
            let (m, e) = if exp == 0 {
                (frac, -1074)
            } else {
                (frac | 1 << 52, exp - 1075)
            };
            let tz = m.trailing_zeros();
            (m >> tz, e + tz as i32)
        })
        .collect();
    let low = parts.iter().map(|p| p.1).min()?;
    let mut sum = 0u64;
    let mut out = Vec::with_capacity(parts.len());
    for (m, e) in parts {
        let shift = u32::try_from(e - low).ok().filter(|&s| s < 63)?;
        let u = m.checked_shl(shift).filter(|u| u >> shift == m)?;
        sum = sum.checked_add(u).filter(|&s| s <= LIMIT)?;
        out.push(u);
    }
    Some(out)
}

/// Item `i` of a source with `n` items in a step: its key `(2i + 1) / 2n`, compared exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    num: u64,
    den: u64,
    source: usize,
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.num) * u128::from(other.den))
            .cmp(&(u128::from(other.num) * u128::from(self.den)))
            .then(self.source.cmp(&other.source))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl MixturePlan {
    /// A plan over `sources` (each source's record count, mode and seed) with `weights` from step
    /// 0, drawing `batch` records per step. Errors (`Error::InvalidArgument`): no source, a source
    /// with no records, a weight count that does not match the sources, a weight that is zero,
    /// negative or not finite, or one that gives a source less than one record per batch.
    pub fn new(sources: &[IndexSpec], weights: Vec<f64>, batch: usize) -> Result<Self> {
        if sources.is_empty() {
            return Err(Error::invalid("a mixture needs at least one source"));
        }
        if batch == 0 {
            return Err(Error::invalid("the mixture's batch must be positive"));
        }
        let mut streams = Vec::with_capacity(sources.len());
        for (k, s) in sources.iter().enumerate() {
            if s.len == 0 {
                return Err(Error::invalid(format!("source {k} holds no records")));
            }
            streams.push(IndexSampler::new(s.len, 1, s.mode, s.seed)?);
        }
        let cum = prefix(&units(&weights, sources.len(), batch)?);
        Ok(MixturePlan {
            batch,
            streams,
            schedule: vec![WeightChange { step: 0, weights }],
            segments: vec![Segment {
                start: 0,
                cum,
                base: vec![0; sources.len()],
            }],
        })
    }

    /// The plan a [`MixtureSpec`] describes, drawing `batch` records per step.
    pub fn from_spec(spec: &MixtureSpec, batch: usize) -> Result<Self> {
        let mut changes = spec.schedule.iter();
        let first = changes
            .next()
            .filter(|c| c.step == 0)
            .ok_or_else(|| Error::invalid("a mixture's schedule must start at step 0"))?;
        let mut plan = MixturePlan::new(&spec.sources, first.weights.clone(), batch)?;
        for c in changes {
            plan.set_weights(c.step, c.weights.clone())?;
        }
        Ok(plan)
    }

    /// Uses `weights` from `step` on. `step` must not precede the last change (the schedule only
    /// grows); a change at the same step replaces it.
    pub fn set_weights(&mut self, step: u64, weights: Vec<f64>) -> Result<()> {
        let n = self.streams.len();
        let cum = prefix(&units(&weights, n, self.batch)?);
        let last = self.segments.len() - 1;
        let (lstart, lbase) = (self.segments[last].start, self.segments[last].base.clone());
        if step < lstart {
            return Err(Error::invalid(format!(
                "weights can change from step {lstart} on (the last change), not at step {step}"
            )));
        }
        if step == lstart {
            self.segments[last].cum = cum;
            self.schedule[last].weights = weights;
            return Ok(());
        }
        let mut drawn = vec![0; n];
        self.segments[last].counts(step - lstart, self.batch, &mut drawn)?;
        for (d, b) in drawn.iter_mut().zip(&lbase) {
            *d += b;
        }
        self.segments.push(Segment {
            start: step,
            cum,
            base: drawn,
        });
        self.schedule.push(WeightChange { step, weights });
        Ok(())
    }

    /// The spec: the sources and the weight schedule.
    pub fn spec(&self) -> MixtureSpec {
        MixtureSpec {
            sources: self.streams.iter().map(IndexSampler::spec).collect(),
            schedule: self.schedule.clone(),
        }
    }

    /// Records per step.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// Number of sources.
    pub fn sources(&self) -> usize {
        self.streams.len()
    }

    fn segment(&self, step: u64) -> &Segment {
        let i = self.segments.partition_point(|s| s.start <= step);
        &self.segments[i.saturating_sub(1)]
    }

    /// Records of each source in all steps before `step`.
    pub fn drawn_before(&self, step: u64) -> Result<Vec<u64>> {
        let seg = self.segment(step);
        let mut out = vec![0; self.streams.len()];
        seg.counts(step - seg.start, self.batch, &mut out)?;
        for (o, b) in out.iter_mut().zip(&seg.base) {
            *o += b;
        }
        Ok(out)
    }

    /// Records of each source in the batch at `step`.
    pub fn counts_at(&self, step: u64) -> Result<Vec<u64>> {
        let seg = self.segment(step);
        let n = self.streams.len();
        let (mut a, mut b) = (vec![0; n], vec![0; n]);
        seg.counts(step - seg.start, self.batch, &mut a)?;
        seg.counts(step - seg.start + 1, self.batch, &mut b)?;
        Ok(b.iter().zip(&a).map(|(b, a)| b - a).collect())
    }

    /// Positions `range` of the batch at `step`: the source of each (`sources`) and its record in
    /// that source (`idx`), both resized to `range.len()`. O(`batch` log `sources`) for the
    /// layout, O(`range.len()`) for the records.
    pub fn draw_range(
        &self,
        step: u64,
        range: Range<usize>,
        sources: &mut Vec<u32>,
        idx: &mut Vec<u64>,
    ) -> Result<()> {
        if range.start > range.end || range.end > self.batch {
            return Err(Error::invalid(format!(
                "index range {}..{} is not within the batch 0..{}",
                range.start, range.end, self.batch
            )));
        }
        let counts = self.counts_at(step)?;
        let drawn = self.drawn_before(step)?;
        // The layout: each position's source, by merging the sources' items by key.
        let mut heap: BinaryHeap<Reverse<(Key, u64)>> = BinaryHeap::new();
        for (k, &c) in counts.iter().enumerate() {
            if c > 0 {
                heap.push(Reverse((
                    Key {
                        num: 1,
                        den: 2 * c,
                        source: k,
                    },
                    0,
                )));
            }
        }
        sources.clear();
        // Items of each source before the range, and in it.
        let mut before = vec![0u64; counts.len()];
        let mut within = vec![0u64; counts.len()];
        for pos in 0..range.end {
            let Some(Reverse((key, i))) = heap.pop() else {
                return Err(Error::Sampler(format!(
                    "mixture step {step}: the sources' counts do not fill the batch"
                )));
            };
            let k = key.source;
            if pos < range.start {
                before[k] += 1;
            } else {
                within[k] += 1;
                sources.push(k as u32);
            }
            if i + 1 < counts[k] {
                heap.push(Reverse((
                    Key {
                        num: key.num + 2,
                        ..key
                    },
                    i + 1,
                )));
            }
        }
        // Each source's records for the range, in its stream order, then placed by position.
        let mut per: Vec<Vec<u64>> = Vec::with_capacity(counts.len());
        for (k, stream) in self.streams.iter().enumerate() {
            let mut v = vec![0; within[k] as usize];
            stream.positions_at(drawn[k] + before[k], &mut v);
            per.push(v);
        }
        let mut next = vec![0usize; counts.len()];
        idx.clear();
        for &k in sources.iter() {
            let k = k as usize;
            idx.push(per[k][next[k]]);
            next[k] += 1;
        }
        Ok(())
    }
}

fn prefix(units: &[u64]) -> Vec<u64> {
    let mut cum = Vec::with_capacity(units.len() + 1);
    cum.push(0);
    for &u in units {
        cum.push(cum.last().copied().unwrap_or(0) + u);
    }
    cum
}
