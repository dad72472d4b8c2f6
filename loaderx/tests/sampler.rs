//! Sampler behavior: determinism, O(1) seek, cyclic coverage and uniformity, IID uniformity, huge
//! index spaces.

use std::collections::HashSet;

use loaderx::{Error, IndexSampler, Mode, Sampler};
use proptest::prelude::*;

/// Upper critical value of chi-square with `df` degrees of freedom at p = 0.001 (Wilson–Hilferty).
fn chi2_critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.09;
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}

fn chi2(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// Asserts that `counts` fit a uniform distribution over their buckets (chi-square test).
fn assert_uniform(counts: &[u64], what: &str) {
    let chi = chi2(counts);
    assert!(chi < chi2_critical(counts.len() - 1), "{what}: chi2 {chi}");
}

fn draws(s: &mut IndexSampler, n: usize) -> Vec<Vec<u64>> {
    (0..n).map(|_| s.next().unwrap().to_vec()).collect()
}

#[test]
fn construction_errors_are_typed() {
    assert!(matches!(
        IndexSampler::new(0, 4, Mode::Iid, 1),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        IndexSampler::new(10, 0, Mode::Sequential, 1),
        Err(Error::InvalidArgument(_))
    ));
    let e = IndexSampler::new(3, 4, Mode::Cyclic, 1).unwrap_err();
    assert!(e.to_string().contains("len >= batch"), "{e}");
    // Sequential and IID accept len < batch.
    assert!(IndexSampler::new(3, 4, Mode::Sequential, 1).is_ok());
    assert!(IndexSampler::new(3, 4, Mode::Iid, 1).is_ok());
}

#[test]
fn sequential_walks_in_order_and_wraps() {
    let mut s = IndexSampler::new(10, 4, Mode::Sequential, 0).unwrap();
    assert_eq!(s.next().unwrap(), &[0, 1, 2, 3]);
    assert_eq!(s.next().unwrap(), &[4, 5, 6, 7]);
    assert_eq!(s.next().unwrap(), &[8, 9, 0, 1]);
    assert_eq!(s.next().unwrap(), &[2, 3, 4, 5]);
    assert_eq!(s.step(), 4);
    let mut small = IndexSampler::new(3, 4, Mode::Sequential, 0).unwrap();
    assert_eq!(small.next().unwrap(), &[0, 1, 2, 0]);
    assert_eq!(small.next().unwrap(), &[1, 2, 0, 1]);
}

#[test]
fn same_seed_same_batches_different_seed_different_batches() {
    for mode in [Mode::Iid, Mode::Cyclic] {
        let a = draws(&mut IndexSampler::new(1000, 32, mode, 7).unwrap(), 50);
        let b = draws(&mut IndexSampler::new(1000, 32, mode, 7).unwrap(), 50);
        let c = draws(&mut IndexSampler::new(1000, 32, mode, 8).unwrap(), 50);
        assert_eq!(a, b, "{mode:?}");
        assert_ne!(a, c, "{mode:?}");
        assert!(a.iter().flatten().all(|&i| i < 1000));
    }
}

#[test]
fn seek_equals_drawing_that_many_batches() {
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic, block(10, 4)] {
        let mut run = IndexSampler::new(997, 13, mode, 42).unwrap();
        let all = draws(&mut run, 400);
        for s in [0u64, 1, 75, 76, 77, 152, 399] {
            let mut resumed = IndexSampler::new(997, 13, mode, 42).unwrap();
            resumed.seek(s).unwrap();
            assert_eq!(resumed.step(), s);
            let rest = draws(&mut resumed, 400 - s as usize);
            assert_eq!(rest, all[s as usize..], "{mode:?} seek {s}");
        }
        // batch_at is the same pure function.
        let mut buf = vec![0; 13];
        run.batch_at(123, &mut buf).unwrap();
        assert_eq!(buf, all[123]);
        assert!(run.batch_at(0, &mut [0; 3]).is_err());
    }
}

#[test]
fn cyclic_batches_of_a_cycle_are_disjoint_and_cover_all_but_the_remainder() {
    for (len, batch) in [
        (100u64, 10usize),
        (103, 10),
        (1000, 7),
        (64, 64),
        (65, 64),
        (5, 1),
        (1, 1),
    ] {
        let mut s = IndexSampler::new(len, batch, Mode::Cyclic, 3).unwrap();
        let per_cycle = (len / batch as u64) as usize;
        assert_eq!(s.steps_per_cycle(), per_cycle as u64);
        let mut omitted_sets = Vec::new();
        for cycle in 0..6 {
            let mut seen = HashSet::new();
            for _ in 0..per_cycle {
                let b = s.next().unwrap();
                assert_eq!(b.len(), batch);
                for &i in b {
                    assert!(i < len);
                    assert!(
                        seen.insert(i),
                        "len {len} batch {batch} cycle {cycle}: {i} repeated"
                    );
                }
            }
            assert_eq!(seen.len() as u64, len - len % batch as u64);
            let omitted: Vec<u64> = (0..len).filter(|i| !seen.contains(i)).collect();
            omitted_sets.push(omitted);
        }
        if len % batch as u64 != 0 && len > 20 {
            // A different remainder is omitted on (at least some) different cycles.
            let distinct: HashSet<_> = omitted_sets.iter().collect();
            assert!(
                distinct.len() > 1,
                "len {len} batch {batch}: the same remainder every cycle"
            );
        }
    }
}

#[test]
fn consecutive_cycles_are_different_permutations() {
    let mut s = IndexSampler::new(1000, 100, Mode::Cyclic, 11).unwrap();
    let c0: Vec<u64> = draws(&mut s, 10).concat();
    let c1: Vec<u64> = draws(&mut s, 10).concat();
    let c2: Vec<u64> = draws(&mut s, 10).concat();
    assert_ne!(c0, c1);
    assert_ne!(c1, c2);
    // Not merely rotated or reversed: positions agree about as often as chance (1/len each).
    let same = c0.iter().zip(&c1).filter(|(a, b)| a == b).count();
    assert!(same < 10, "{same} fixed positions between cycles");
    // And not the identity.
    assert!(
        c0.iter()
            .enumerate()
            .filter(|&(p, &i)| p as u64 == i)
            .count()
            < 10
    );
}

#[test]
fn cyclic_position_in_cycle_is_uniform() {
    // For a few fixed ids, the batch slot they land in (or "omitted") over many cycles is uniform.
    let (len, batch) = (103u64, 10usize);
    let slots = (len / batch as u64) as usize; // 10 batches + 1 omitted bucket of weight 3/103
    let mut s = IndexSampler::new(len, batch, Mode::Cyclic, 99).unwrap();
    let ids = [0u64, 1, 51, 102];
    let cycles = 4000;
    let mut counts = vec![vec![0u64; len as usize]; ids.len()];
    for _ in 0..cycles {
        let mut pos = 0usize;
        let mut in_cycle = vec![false; ids.len()];
        for _ in 0..slots {
            for &i in s.next().unwrap() {
                if let Some(k) = ids.iter().position(|&x| x == i) {
                    counts[k][pos] += 1;
                    in_cycle[k] = true;
                }
                pos += 1;
            }
        }
        // Omitted ids occupy the remaining positions; spread them over those slots uniformly is not
        // observable, so count them in one bucket and compare by weight below.
        for (k, seen) in in_cycle.iter().enumerate() {
            if !seen {
                counts[k][pos] += 1;
            }
        }
    }
    for (k, c) in counts.iter().enumerate() {
        let visible = &c[..slots * batch];
        let omitted = c[slots * batch];
        assert_uniform(visible, &format!("id {}", ids[k]));
        // Omitted about 3/103 of the time.
        let expect = cycles as f64 * (len % batch as u64) as f64 / len as f64;
        assert!(
            (omitted as f64 - expect).abs() < 5.0 * expect.sqrt(),
            "id {}: omitted {omitted}",
            ids[k]
        );
    }
}

#[test]
fn cyclic_ids_are_uniform_over_the_first_position() {
    // Which id comes first in a cycle is uniform over [0, len).
    let (len, batch) = (50u64, 5usize);
    let mut s = IndexSampler::new(len, batch, Mode::Cyclic, 5).unwrap();
    let mut counts = vec![0u64; len as usize];
    for cycle in 0..20_000u64 {
        s.seek(cycle * s.steps_per_cycle()).unwrap();
        counts[s.next().unwrap()[0] as usize] += 1;
    }
    assert_uniform(&counts, "first ids");
}

#[test]
fn iid_is_uniform() {
    for len in [10u64, 97, 1000] {
        let mut s = IndexSampler::new(len, 256, Mode::Iid, 1234).unwrap();
        let mut counts = vec![0u64; len as usize];
        for _ in 0..2000 {
            for &i in s.next().unwrap() {
                counts[i as usize] += 1;
            }
        }
        assert_uniform(&counts, &format!("len {len}"));
    }
}

#[test]
fn iid_with_a_biased_modulus_is_still_uniform() {
    // len just above 2^63: a naive `h % len` would put ids below 2^64 - len twice as often.
    let len = (1u64 << 63) + (1 << 62);
    let mut s = IndexSampler::new(len, 1024, Mode::Iid, 9).unwrap();
    let mut low = 0u64;
    let n = 200 * 1024;
    for _ in 0..200 {
        low += s.next().unwrap().iter().filter(|&&i| i < (1 << 62)).count() as u64;
    }
    // P(i < 2^62) = 1/3 exactly.
    let p = 1.0 / 3.0;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (low as f64 - n as f64 * p).abs() < 5.0 * sd,
        "low {low} of {n}"
    );
}

#[test]
fn huge_index_spaces_work_without_memory_growth() {
    let len = 1u64 << 40;
    for mode in [
        Mode::Sequential,
        Mode::Iid,
        Mode::Cyclic,
        Mode::block_default(),
    ] {
        let mut s = IndexSampler::new(len, 4096, mode, 77).unwrap();
        s.seek(u64::MAX / 8192).unwrap();
        let mut seen = HashSet::new();
        for _ in 0..16 {
            for &i in s.next().unwrap() {
                assert!(i < len);
                seen.insert(i);
            }
        }
        if mode != Mode::Iid {
            assert_eq!(seen.len(), 16 * 4096, "{mode:?}");
        }
        // The sampler holds one batch buffer and a few words, nothing of size len.
        assert!(std::mem::size_of_val(&s) < 256);
    }
    // Cyclic with len = 2^40 + 1 (domain 2^41, the worst cycle-walking ratio) stays within range.
    let mut s = IndexSampler::new((1 << 40) + 1, 256, Mode::Cyclic, 1).unwrap();
    assert!(s.next().unwrap().iter().all(|&i| i <= 1 << 40));
}

/// A user-defined sampler plugged in through the trait.
struct Every3rd {
    step: u64,
    buf: Vec<u64>,
}

impl Sampler for Every3rd {
    fn next(&mut self) -> loaderx::Result<&[u64]> {
        for (k, o) in self.buf.iter_mut().enumerate() {
            *o = (self.step * 3 + k as u64 * 3) % 30;
        }
        self.step += 1;
        Ok(&self.buf)
    }
    fn batch_size(&self) -> usize {
        self.buf.len()
    }
    fn len(&self) -> u64 {
        30
    }
    fn step(&self) -> u64 {
        self.step
    }
    fn seek(&mut self, step: u64) -> loaderx::Result<()> {
        self.step = step;
        Ok(())
    }
}

#[test]
fn a_user_sampler_works_through_a_box_dyn() {
    let mut s: Box<dyn Sampler> = Box::new(Every3rd {
        step: 0,
        buf: vec![0; 2],
    });
    assert_eq!(s.next().unwrap(), &[0, 3]);
    s.seek(5).unwrap();
    assert_eq!(s.next().unwrap(), &[15, 18]);
    assert!(!s.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cyclic_is_a_permutation_for_any_shape(len in 1u64..3000, batch in 1usize..64, seed in any::<u64>(), cycle in 0u64..1000) {
        prop_assume!(len >= batch as u64);
        let mut s = IndexSampler::new(len, batch, Mode::Cyclic, seed).unwrap();
        let per = s.steps_per_cycle();
        s.seek(cycle * per).unwrap();
        let mut seen = HashSet::new();
        for _ in 0..per {
            for &i in s.next().unwrap() {
                prop_assert!(i < len);
                prop_assert!(seen.insert(i));
            }
        }
        prop_assert_eq!(seen.len() as u64, per * batch as u64);
    }

    #[test]
    fn every_mode_stays_in_range(len in 1u64..u64::MAX, batch in 1usize..300, seed in any::<u64>(), step in any::<u64>()) {
        for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic, block(1, 1), block(7, 3), Mode::block_default()] {
            let Ok(mut s) = IndexSampler::new(len, batch, mode, seed) else { continue };
            s.seek(step).unwrap();
            prop_assert!(s.next().unwrap().iter().all(|&i| i < len));
        }
    }
}

#[test]
fn cyclic_position_in_cycle_is_uniform_for_wider_halves() {
    // The same property as above at a size where each Feistel half is 6-7 bits wide: over many
    // cycles, the position of a fixed id (bucketed into 20 equal ranges of the cycle) is uniform.
    let (len, batch) = (5000u64, 50usize);
    let buckets = 20usize;
    let mut s = IndexSampler::new(len, batch, Mode::Cyclic, 2024).unwrap();
    let ids = [0u64, 1, 2, 2500, 4095, 4096, 4999];
    let mut counts = vec![vec![0u64; buckets]; ids.len()];
    for _ in 0..1500 {
        let mut pos = 0usize;
        for _ in 0..s.steps_per_cycle() {
            for &i in s.next().unwrap() {
                if let Some(k) = ids.iter().position(|&x| x == i) {
                    counts[k][pos * buckets / len as usize] += 1;
                }
                pos += 1;
            }
        }
    }
    for (k, c) in counts.iter().enumerate() {
        assert_eq!(c.len(), buckets);
        assert_uniform(c, &format!("id {}", ids[k]));
    }
}

#[test]
fn cyclic_neighbouring_positions_are_independent() {
    // The ids at positions p and p + 1 of a cycle should not be correlated: bucket both into 8
    // ranges of [0, len) and test the 8 x 8 contingency table against uniform.
    let (len, batch) = (4000u64, 40usize);
    let mut s = IndexSampler::new(len, batch, Mode::Cyclic, 31).unwrap();
    let mut counts = vec![0u64; 64];
    let per_cycle = s.steps_per_cycle() as usize;
    for _ in 0..200 {
        let cycle: Vec<u64> = draws(&mut s, per_cycle).concat();
        for w in cycle.windows(2).step_by(2) {
            counts[(w[0] * 8 / len * 8 + w[1] * 8 / len) as usize] += 1;
        }
    }
    assert_eq!(counts.len(), 64);
    assert_uniform(&counts, "neighbour pairs");
}

/// The naive oracle of a slice: the whole batch at `step`, then sliced.
fn oracle(s: &IndexSampler, step: u64, range: std::ops::Range<usize>) -> Vec<u64> {
    let mut full = vec![0; s.batch_size()];
    s.batch_at(step, &mut full).unwrap();
    full[range].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A process's slice, computed alone (`batch_range_at`, `next_range` after a seek to `k`),
    /// equals the full batch sliced, for every mode and several process counts.
    #[test]
    fn slices_equal_the_sliced_full_batch(
        len in 1u64..5000,
        per in 1usize..40,
        procs in prop::sample::select(vec![1usize, 2, 3, 4, 8]),
        mode in prop::sample::select(vec![Mode::Sequential, Mode::Iid, Mode::Cyclic]),
        seed in any::<u64>(),
        k in 0u64..1_000_000,
    ) {
        let batch = per * procs;
        prop_assume!(mode != Mode::Cyclic || len >= batch as u64);
        let s = IndexSampler::new(len, batch, mode, seed).unwrap();
        for rank in 0..procs {
            let range = rank * per..(rank + 1) * per;
            let mut live = s.clone();
            live.seek(k).unwrap();
            for step in k..k + 3 {
                let want = oracle(&s, step, range.clone());
                let mut got = vec![0; per];
                s.batch_range_at(step, range.clone(), &mut got).unwrap();
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(live.next_range(range.clone()).unwrap(), &want[..]);
                prop_assert_eq!(live.step(), step + 1);
            }
        }
        // Odd ranges too (not aligned to the lockstep groups): any sub-range is the slice.
        let a = (seed % batch as u64) as usize;
        let b = a + ((seed >> 32) % (batch - a) as u64 + 1) as usize;
        let mut got = vec![0; b - a];
        s.batch_range_at(k, a..b, &mut got).unwrap();
        prop_assert_eq!(got, oracle(&s, k, a..b));
    }
}

#[test]
fn ranges_outside_the_batch_are_refused() {
    let mut s = IndexSampler::new(100, 8, Mode::Cyclic, 3).unwrap();
    let mut out = vec![0; 4];
    assert!(matches!(
        s.batch_range_at(0, 6..10, &mut out),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.batch_range_at(0, 0..3, &mut out),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(s.next_range(4..9), Err(Error::InvalidArgument(_))));
    assert_eq!(s.step(), 0, "a refused draw does not advance");
}

/// A sampler without its own `next_range` falls back to the full draw, sliced.
#[test]
fn default_next_range_slices_the_full_draw() {
    let mk = || Every3rd {
        step: 4,
        buf: vec![0; 6],
    };
    let full = mk().next().unwrap().to_vec();
    let mut s: Box<dyn Sampler> = Box::new(mk());
    assert_eq!(s.next_range(2..5).unwrap(), &full[2..5]);
    assert_eq!(s.step(), 5);
    assert!(matches!(s.next_range(5..7), Err(Error::InvalidArgument(_))));
}

/// FNV-1a over the indices of the first `steps` batches.
fn digest(len: u64, batch: usize, mode: Mode, seed: u64, steps: usize) -> u64 {
    let mut s = IndexSampler::new(len, batch, mode, seed).unwrap();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..steps {
        for &i in s.next().unwrap() {
            h ^= i;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[test]
fn existing_modes_draw_what_they_always_drew() {
    // Digests taken before Block was added (and the Feistel kernels shared with it): the
    // Sequential, IID and Cyclic streams must never change.
    let cases: [(u64, usize, Mode, u64); 6] = [
        (997, 13, Mode::Sequential, 1),
        (997, 13, Mode::Iid, 42),
        (997, 13, Mode::Cyclic, 42),
        (1 << 40, 256, Mode::Cyclic, 7),
        ((1 << 20) + 1, 1000, Mode::Cyclic, 3),
        (5, 1, Mode::Cyclic, 0),
    ];
    let got: Vec<u64> = cases
        .iter()
        .map(|&(len, batch, mode, seed)| digest(len, batch, mode, seed, 200))
        .collect();
    let want = [
        0x990a_fd84_eced_8406,
        0x6e65_ce67_e59b_eda9,
        0x68ae_2cf0_e932_3214,
        0xbc8f_3383_caec_2100,
        0x00e0_7a0d_47dc_f1d2,
        0xa825_b59f_4330_4ed7,
    ];
    assert_eq!(got, want);
}

// ---- Block shuffle ----

fn block(block: u64, window: u64) -> Mode {
    Mode::Block { block, window }
}

/// The indices of epoch `e` (flat positions `e * len .. (e + 1) * len`).
fn epoch(s: &IndexSampler, e: u64) -> Vec<u64> {
    let mut out = vec![0; s.len() as usize];
    s.positions_at(e * s.len(), &mut out);
    out
}

/// Checks one epoch of a block shuffle against what the mode promises, naively: every id once;
/// window `w` (positions `w * block * window ..`, of at most `window` blocks) made of whole blocks
/// (a block's ids all in one window), and the partial last block, if any, in the last window.
fn check_block_epoch(len: u64, b: u64, w: u64, ids: &[u64], what: &str) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    assert!(
        sorted.iter().copied().eq(0..len),
        "{what}: not a permutation of 0..{len}"
    );
    let span = (b * w) as usize;
    let windows: Vec<&[u64]> = ids.chunks(span).collect();
    for (k, win) in windows.iter().enumerate() {
        let blocks: HashSet<u64> = win.iter().map(|&i| i / b).collect();
        assert!(
            blocks.len() as u64 <= w,
            "{what}: window {k} touches {} blocks",
            blocks.len()
        );
        // Whole blocks: the window holds every id of each block it touches.
        let size: u64 = blocks.iter().map(|&k| b.min(len - k * b)).sum();
        assert_eq!(size, win.len() as u64, "{what}: window {k} splits a block");
        if !len.is_multiple_of(b) && blocks.contains(&(len / b)) {
            assert_eq!(
                k,
                windows.len() - 1,
                "{what}: the tail block is not in the last window"
            );
        }
    }
}

#[test]
fn block_construction_errors_are_typed() {
    for (m, needle) in [
        (block(0, 4), "block >= 1"),
        (block(4, 0), "window >= 1"),
        (block(1 << 40, 1 << 30), "overflows"),
    ] {
        let e = IndexSampler::new(100, 4, m, 0).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{m:?}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    // A block or a window larger than the index space is a valid (small) shuffle, and so is a
    // batch larger than an epoch.
    assert!(IndexSampler::new(10, 4, block(100, 1), 0).is_ok());
    assert!(IndexSampler::new(10, 4, block(2, 100), 0).is_ok());
    assert!(IndexSampler::new(3, 8, block(2, 2), 0).is_ok());
}

#[test]
fn block_epochs_hold_every_record_once_in_whole_blocks() {
    for (len, b, w) in [
        (1000u64, 10u64, 4u64), // whole blocks, whole windows
        (1000, 10, 3),          // 100 blocks: a last window of one block
        (1003, 10, 4),          // a partial last block (3 records)
        (1003, 10, 7),          // both partial
        (9, 10, 4),             // no full block: the tail alone
        (100, 1, 1),            // block 1, window 1: the blocks' permutation, like Cyclic
        (100, 100, 1),          // one block: its records permuted in the one window
        (257, 16, 1000),        // the window spans the epoch: a full shuffle
        (1, 1, 1),
    ] {
        let s = IndexSampler::new(len, 7, block(b, w), 11).unwrap();
        let mut epochs = HashSet::new();
        for e in [0u64, 1, 2, 1 << 40] {
            let ids = epoch(&s, e);
            check_block_epoch(
                len,
                b,
                w,
                &ids,
                &format!("len {len} block {b} window {w} epoch {e}"),
            );
            epochs.insert(ids);
        }
        if len > 50 {
            assert_eq!(
                epochs.len(),
                4,
                "len {len} block {b} window {w}: epochs repeat"
            );
        }
    }
}

#[test]
fn block_windows_are_not_read_in_order() {
    // Class-sorted data stays sorted only within a block: the blocks of an epoch come in a
    // permuted order, and records within a window are permuted (not block by block).
    let (len, b, w) = (100_000u64, 100u64, 8u64);
    let s = IndexSampler::new(len, 256, block(b, w), 5).unwrap();
    let ids = epoch(&s, 0);
    let firsts: Vec<u64> = ids.chunks((b * w) as usize).map(|win| win[0] / b).collect();
    let ascending = firsts.windows(2).filter(|p| p[0] < p[1]).count();
    assert!(
        (ascending as f64 - firsts.len() as f64 / 2.0).abs() < 0.1 * firsts.len() as f64,
        "{ascending} of {} window starts ascend",
        firsts.len()
    );
    // Within a window, neighbouring positions are in the same block about 1/w of the time.
    let same = ids.windows(2).filter(|p| p[0] / b == p[1] / b).count() as f64;
    let expect = len as f64 / w as f64;
    assert!(
        (same - expect).abs() < 0.1 * expect,
        "{same} same-block neighbours, ~{expect}"
    );
}

#[test]
fn block_seek_equals_replay_and_batches_cross_epochs() {
    for (len, batch, b, w) in [
        (997u64, 13usize, 10u64, 4u64),
        (64, 64, 8, 2),
        (10, 16, 3, 2),
    ] {
        let m = block(b, w);
        let all = draws(&mut IndexSampler::new(len, batch, m, 42).unwrap(), 300);
        for s in [0u64, 1, 76, 77, 150, 299] {
            let mut resumed = IndexSampler::new(len, batch, m, 42).unwrap();
            resumed.seek(s).unwrap();
            assert_eq!(
                draws(&mut resumed, 300 - s as usize),
                all[s as usize..],
                "seek {s}"
            );
        }
        // The batches are the flat stream cut every `batch` positions: epoch after epoch, each
        // a permutation, whatever batch boundaries an epoch ends inside.
        let flat: Vec<u64> = all.concat();
        for (e, ids) in flat.chunks_exact(len as usize).enumerate() {
            check_block_epoch(
                len,
                b,
                w,
                ids,
                &format!("len {len} batch {batch} epoch {e}"),
            );
        }
        let s = IndexSampler::new(len, batch, m, 42).unwrap();
        let mut buf = vec![0; batch];
        s.batch_at(123, &mut buf).unwrap();
        assert_eq!(buf, all[123]);
    }
}

#[test]
fn block_process_slices_are_disjoint_and_cover_the_batch() {
    // The loader gives process k of n the contiguous slice k of every global batch: the slices of
    // an epoch are disjoint, and together they are the epoch.
    let (len, batch, n) = (1024u64, 64usize, 4usize);
    let s = IndexSampler::new(len, batch, block(16, 4), 9).unwrap();
    let part = batch / n;
    let mut seen = vec![Vec::new(); n];
    for step in 0..len / batch as u64 {
        let mut whole = vec![0; batch];
        s.batch_at(step, &mut whole).unwrap();
        for (k, seen) in seen.iter_mut().enumerate() {
            let mut slice = vec![0; part];
            s.batch_range_at(step, k * part..(k + 1) * part, &mut slice)
                .unwrap();
            assert_eq!(slice, whole[k * part..(k + 1) * part]);
            seen.extend(slice);
        }
    }
    let mut all: Vec<u64> = seen.concat();
    all.sort_unstable();
    assert!(all.iter().copied().eq(0..len));
}

#[test]
fn block_defaults_follow_the_record_size() {
    assert_eq!(Mode::block_default(), block(256, 64));
    assert_eq!(Mode::block_for_record_bytes(4096), Mode::block_default());
    assert_eq!(Mode::block_for_record_bytes(8), block(256, 1024));
    assert_eq!(Mode::block_for_record_bytes(100 << 10), block(10, 65));
    assert_eq!(Mode::block_for_record_bytes(4 << 20), block(1, 16));
    assert_eq!(Mode::block_for_record_bytes(1 << 40), block(1, 1));
    assert_eq!(Mode::block_for_record_bytes(0), block(256, 1024));
    assert_eq!(Mode::block_for_record_bytes(u64::MAX), block(1, 1));
}

#[test]
fn block_mode_serializes_with_its_shape() {
    let json = serde_json::to_string(&block(256, 64)).unwrap();
    assert_eq!(json, r#"{"BLOCK":{"block":256,"window":64}}"#);
    assert_eq!(serde_json::from_str::<Mode>(&json).unwrap(), block(256, 64));
    assert_eq!(serde_json::to_string(&Mode::Cyclic).unwrap(), r#""CYCLIC""#);
    // Inside a loader state's (internally tagged) sampler spec too.
    let s = IndexSampler::new(1000, 8, block(16, 4), 3).unwrap();
    let spec = loaderx::SamplerSpec::from(s.spec());
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(
        json,
        r#"{"kind":"index","len":1000,"mode":{"BLOCK":{"block":16,"window":4}},"seed":3}"#
    );
    assert_eq!(
        serde_json::from_str::<loaderx::SamplerSpec>(&json).unwrap(),
        spec
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any shape: every epoch of the flat stream is a permutation made of whole blocks.
    #[test]
    fn block_epochs_are_permutations_for_any_shape(
        len in 1u64..3000, b in 1u64..80, w in 1u64..20, seed in any::<u64>(), e in 0u64..1000,
    ) {
        let s = IndexSampler::new(len, 1, block(b, w), seed).unwrap();
        check_block_epoch(len, b, w, &epoch(&s, e), &format!("len {len} block {b} window {w}"));
    }
}

#[test]
fn block_runs_name_each_block_a_batch_slice_touches_once() {
    for (len, batch, b, w) in [
        (1003u64, 32usize, 10u64, 4u64),
        (1000, 50, 7, 3),
        (9, 4, 10, 2),
    ] {
        let s = IndexSampler::new(len, batch, block(b, w), 4).unwrap();
        for step in 0..80u64 {
            for range in [0..batch, 1..batch / 2 + 1] {
                let mut ids = vec![0; range.len()];
                s.batch_range_at(step, range.clone(), &mut ids).unwrap();
                let mut runs = Vec::new();
                s.block_runs_at(step, range.clone(), &mut runs).unwrap();
                // Ascending, disjoint, whole blocks, each touched by the slice; every id in one.
                for pair in runs.windows(2) {
                    assert!(pair[0].end <= pair[1].start, "{runs:?}");
                }
                for r in &runs {
                    assert_eq!(r.start % b, 0);
                    assert_eq!(r.end, (r.start + b).min(len));
                    assert!(
                        ids.iter().any(|i| r.contains(i)),
                        "{r:?} is read for nothing"
                    );
                }
                assert!(ids.iter().all(|i| runs.iter().any(|r| r.contains(i))));
                // The window runs hold the block runs.
                let mut windows = Vec::new();
                s.window_runs_at(step, range, &mut windows).unwrap();
                assert!(runs.iter().all(|r| windows.contains(r)));
            }
        }
    }
}

#[test]
fn a_window_buffer_reads_every_block_once_per_epoch() {
    // Batches that end where epochs end (len % batch == 0), windows that end inside batches.
    for (len, batch, b, w) in [
        (1000u64, 25usize, 10u64, 4u64),
        (1005, 15, 10, 4),
        (64, 16, 4, 3),
    ] {
        let s = IndexSampler::new(len, batch, block(b, w), 8).unwrap();
        let steps = len / batch as u64;
        for epoch in 0..3u64 {
            // A reader that keeps the windows of the last batch and fetches the others' blocks.
            let mut fetched: Vec<std::ops::Range<u64>> = Vec::new();
            let mut held: Vec<std::ops::Range<u64>> = Vec::new();
            for step in epoch * steps..(epoch + 1) * steps {
                let mut need = Vec::new();
                s.window_runs_at(step, 0..batch, &mut need).unwrap();
                let mut ids = vec![0; batch];
                s.batch_at(step, &mut ids).unwrap();
                assert!(ids.iter().all(|i| need.iter().any(|r| r.contains(i))));
                fetched.extend(need.iter().filter(|r| !held.contains(r)).cloned());
                held = need;
            }
            // Every block once: the batches of a window never fetch it again.
            let mut starts: Vec<u64> = fetched.iter().map(|r| r.start).collect();
            starts.sort_unstable();
            let want: Vec<u64> = (0..len.div_ceil(b)).map(|k| k * b).collect();
            assert_eq!(starts, want, "len {len} block {b} window {w} epoch {epoch}");
        }
    }
}

#[test]
fn runs_are_refused_for_the_other_modes() {
    let s = IndexSampler::new(100, 4, Mode::Cyclic, 0).unwrap();
    let e = s.block_runs_at(0, 0..4, &mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("Mode::Block"));
    assert!(s.window_runs_at(0, 0..4, &mut Vec::new()).is_err());
    let s = IndexSampler::new(100, 4, block(4, 2), 0).unwrap();
    assert!(s.block_runs_at(0, 0..5, &mut Vec::new()).is_err());
    assert!(s.window_runs_at(0, 2..5, &mut Vec::new()).is_err());
    // A window too large to list is refused, not allocated.
    let s = IndexSampler::new(1 << 40, 4, block(1, 1 << 30), 0).unwrap();
    let e = s.window_runs_at(0, 0..4, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("too many to list"), "{e}");
    let mut runs = Vec::new();
    s.block_runs_at(0, 0..4, &mut runs).unwrap();
    assert_eq!(runs.len(), 4);
}

#[test]
fn runs_near_the_top_of_the_index_space_do_not_overflow() {
    // One full block of 2^63 records and a partial one of 2^63 - 1.
    let s = IndexSampler::new(u64::MAX, 4, block(1 << 63, 1), 0).unwrap();
    for step in [0u64, 1, u64::MAX / 4] {
        let mut runs = Vec::new();
        s.block_runs_at(step, 0..4, &mut runs).unwrap();
        for r in &runs {
            assert_eq!(r.start % (1 << 63), 0);
            assert_eq!(r.end, r.start.saturating_add(1 << 63));
        }
        let mut windows = Vec::new();
        s.window_runs_at(step, 0..4, &mut windows).unwrap();
        assert!(runs.iter().all(|r| windows.contains(r)));
    }
}
