//! The copy limits: records copied into one output buffer, each with `memcpy` ([`Kernel::Memcpy`])
//! or with the stores a zrecord raw gather of the same output size uses ([`Kernel::AsGather`]:
//! ordinary stores below the last-level cache size, non-temporal ones from it up), on the calling
//! thread or split into zrecord's byte-balanced pieces over the current rayon pool, as a gather
//! that fans out splits its output. No file, no checksum, no allocator: what moving the same
//! bytes costs at least.

use rayon::prelude::*;

/// How each record is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `copy_from_slice` (`memcpy`).
    Memcpy,
    /// zrecord's copy with the stores a raw gather of the whole output uses
    /// (`zrecord::internals::copy_as_gather`).
    AsGather,
}

/// Pieces a parallel copy on the current rayon pool is split into: four per thread, as a
/// zrecord gather splits its output.
pub fn parallel_pieces() -> usize {
    rayon::current_num_threads() * 4
}

/// Copies `n` records into `out`: record `k`, `record(k)`, to `out[offsets(k)..offsets(k + 1)]`
/// (`offsets(0) == 0`, `offsets(n) == out.len()`, and each record as long as its span). With
/// `pieces > 1` the output is split into at most that many contiguous runs of about equal bytes
/// (zrecord's own split, `zrecord::internals::split_output`) copied in parallel on the current
/// rayon pool; else every record is copied on the calling thread.
pub fn copy_records<'a, O, R>(
    out: &mut [u8],
    n: usize,
    offsets: &O,
    record: R,
    kernel: Kernel,
    pieces: usize,
) where
    O: Fn(usize) -> usize + Sync,
    R: Fn(usize) -> &'a [u8] + Sync,
{
    let total = out.len();
    let run = |first: usize, end: usize, buf: &mut [u8]| {
        let base = offsets(first);
        for k in first..end {
            let dst = &mut buf[offsets(k) - base..offsets(k + 1) - base];
            match kernel {
                Kernel::Memcpy => dst.copy_from_slice(record(k)),
                Kernel::AsGather => zrecord::internals::copy_as_gather(dst, record(k), total),
            }
        }
    };
    if pieces <= 1 || n <= 1 {
        run(0, n, out);
        return;
    }
    zrecord::internals::split_output(n, out, offsets, pieces)
        .into_par_iter()
        .for_each(|(first, end, buf)| run(first, end, buf));
}

/// Copies `out.len()` bytes of `src` that start at `from` and run on contiguously, wrapping to
/// `src`'s start at its end, into `out`: one stream of bytes rather than records, so no
/// per-record work. With `pieces > 1` the output is split into that many equal runs copied in
/// parallel on the current rayon pool. Copies nothing when `src` is empty.
pub fn copy_span(out: &mut [u8], src: &[u8], from: usize, kernel: Kernel, pieces: usize) {
    if src.is_empty() || out.is_empty() {
        return;
    }
    let total = out.len();
    let run = |at: usize, buf: &mut [u8]| {
        let mut pos = (from + at) % src.len();
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(src.len() - pos);
            let (dst, part) = (&mut buf[done..done + n], &src[pos..pos + n]);
            match kernel {
                Kernel::Memcpy => dst.copy_from_slice(part),
                Kernel::AsGather => zrecord::internals::copy_as_gather(dst, part, total),
            }
            done += n;
            pos = 0;
        }
    };
    if pieces <= 1 {
        run(0, out);
        return;
    }
    let chunk = total.div_ceil(pieces).max(1);
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(k, buf)| run(k * chunk, buf));
}

/// [`copy_records`] of `idx.len()` records of `stride` bytes each, record `k` being
/// `src[idx[k] * stride..][..stride]`.
pub fn copy_strided(
    out: &mut [u8],
    src: &[u8],
    stride: usize,
    idx: &[u64],
    kernel: Kernel,
    pieces: usize,
) {
    let record = |k: usize| {
        let at = idx[k] as usize * stride;
        &src[at..at + stride]
    };
    copy_records(out, idx.len(), &|k| k * stride, record, kernel, pieces);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of varying lengths, gathered in a shuffled order with duplicates.
    fn fixture() -> (Vec<u8>, Vec<usize>, Vec<u64>) {
        let lens: Vec<usize> = (0..200).map(|i| 1 + (i * 37) % 300).collect();
        let mut starts = vec![0usize];
        for l in &lens {
            starts.push(starts[starts.len() - 1] + l);
        }
        let src: Vec<u8> = (0..starts[200]).map(|k| (k * 31 % 251) as u8).collect();
        let idx: Vec<u64> = (0..500).map(|k| (k * 7 + 3) % 200).collect();
        (src, starts, idx)
    }

    #[test]
    fn every_kernel_and_split_copies_the_same_bytes() {
        let (src, starts, idx) = fixture();
        let mut offs = vec![0usize];
        let mut want = Vec::new();
        for &i in &idx {
            let r = &src[starts[i as usize]..starts[i as usize + 1]];
            want.extend_from_slice(r);
            offs.push(want.len());
        }
        let record = |k: usize| &src[starts[idx[k] as usize]..starts[idx[k] as usize + 1]];
        for kernel in [Kernel::Memcpy, Kernel::AsGather] {
            for pieces in [0, 1, 2, 7, 1000] {
                let mut out = vec![0u8; want.len()];
                copy_records(&mut out, idx.len(), &|k| offs[k], record, kernel, pieces);
                assert_eq!(out, want, "{kernel:?}, {pieces} pieces");
            }
        }
    }

    #[test]
    fn a_span_wraps_and_splits_like_one_copy() {
        let src: Vec<u8> = (0..1000).map(|k| (k * 7 % 251) as u8).collect();
        for (from, len) in [(0, 0), (0, 1000), (990, 25), (500, 2500), (999, 1)] {
            let want: Vec<u8> = (0..len).map(|k| src[(from + k) % src.len()]).collect();
            for kernel in [Kernel::Memcpy, Kernel::AsGather] {
                for pieces in [0, 1, 3, 64] {
                    let mut out = vec![0u8; len];
                    copy_span(&mut out, &src, from, kernel, pieces);
                    assert_eq!(out, want, "{from}+{len}, {kernel:?}, {pieces} pieces");
                }
            }
        }
    }

    #[test]
    fn strided_records_land_in_request_order() {
        let src: Vec<u8> = (0..64 * 10).map(|k| k as u8).collect();
        let idx = [9u64, 0, 9, 3];
        let mut out = vec![0u8; idx.len() * 64];
        copy_strided(
            &mut out,
            &src,
            64,
            &idx,
            Kernel::AsGather,
            parallel_pieces(),
        );
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(&out[k * 64..(k + 1) * 64], &src[i as usize * 64..][..64]);
        }
        let mut none: Vec<u8> = Vec::new();
        copy_strided(&mut none, &src, 64, &[], Kernel::Memcpy, 8);
        assert!(none.is_empty());
    }
}
