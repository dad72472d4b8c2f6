//! The `crc32`-instruction loops on an x86-64 CPU with SSE4.2: one chain over a buffer (copying it
//! or not; the short-buffer path of `crc::copy_append` and the tails below), and three chains over
//! many buffers (`crc::append_each`): `crc32` has a latency of several cycles and a throughput of
//! one per cycle, so one chain leaves the unit idle most of the time and three keep it busy.

use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u32, _mm_crc32_u64};

/// Extends the raw (not inverted) CRC state over `n` bytes from `s`, eight bytes per `crc32`
/// instruction, copying them to `d` when `COPY` (else `d` is not used).
///
/// # Safety
/// The CPU supports SSE4.2; `s` is readable for `n` bytes, and with `COPY` `d` is writable
/// for `n` bytes.
#[inline]
#[target_feature(enable = "sse4.2")]
pub(super) unsafe fn copy_crc_words<const COPY: bool>(
    mut state: u32,
    s: *const u8,
    d: *mut u8,
    n: usize,
) -> u32 {
    let mut i = 0;
    // SAFETY: every access is at `i..i + w` with `i + w <= n` (loop bounds), unaligned; `d`
    // is written only with `COPY`.
    unsafe {
        // A u64 state (`crc32` zero-extends its result): a cast per word would add a
        // zero-extending move to the chain's latency.
        let mut wide = u64::from(state);
        while i + 8 <= n {
            let w = s.add(i).cast::<u64>().read_unaligned();
            if COPY {
                d.add(i).cast::<u64>().write_unaligned(w);
            }
            wide = _mm_crc32_u64(wide, w);
            i += 8;
        }
        state = wide as u32;
        if i + 4 <= n {
            let w = s.add(i).cast::<u32>().read_unaligned();
            if COPY {
                d.add(i).cast::<u32>().write_unaligned(w);
            }
            state = _mm_crc32_u32(state, w);
            i += 4;
        }
        while i < n {
            let b = *s.add(i);
            if COPY {
                *d.add(i) = b;
            }
            state = _mm_crc32_u8(state, b);
            i += 1;
        }
    }
    state
}

/// One chain of [`append_each_sse42`]: the item it checksums, where it is, the whole-word
/// bytes it has left and its raw state.
#[derive(Clone, Copy)]
struct Lane {
    k: usize,
    p: *const u8,
    words: usize,
    st: u32,
}

/// `out[k] = append(items[k].0, items[k].1)`, three chains at a time: while three items are
/// open, eight bytes of each per round up to the shortest one's end; an item whose words are
/// done gets its last bytes and its result, and its chain the next item. With fewer than
/// three items left, two chains, then one.
///
/// # Safety
/// The CPU supports SSE4.2; `items.len() == out.len()`.
#[target_feature(enable = "sse4.2")]
pub(super) unsafe fn append_each_sse42(items: &[(u32, &[u8])], out: &mut [u32]) {
    let mut next = 0;
    let open = |next: &mut usize| {
        let (crc, d) = items.get(*next)?;
        *next += 1;
        Some(Lane {
            k: *next - 1,
            p: d.as_ptr(),
            words: d.len() & !7,
            st: !crc,
        })
    };
    let mut lanes: [Option<Lane>; 3] = [open(&mut next), open(&mut next), open(&mut next)];
    loop {
        // Close every lane whose words are done (its item's last bytes, its result) and give
        // it the next item; several in a row while items are shorter than a word.
        for lane in &mut lanes {
            while let Some(l) = *lane
                && l.words == 0
            {
                let d = items[l.k].1;
                let tail = &d[d.len() & !7..];
                // SAFETY: SSE4.2 is present (caller); `tail` is readable for its length, and
                // without `COPY` the destination is never touched.
                let st = unsafe {
                    copy_crc_words::<false>(l.st, tail.as_ptr(), std::ptr::null_mut(), tail.len())
                };
                out[l.k] = !st;
                *lane = open(&mut next);
            }
        }
        match lanes {
            [Some(mut x), Some(mut y), Some(mut z)] => {
                let n = x.words.min(y.words).min(z.words);
                // The states stay u64 (`crc32` zero-extends its result): a cast per round
                // would add a zero-extending move to every chain's latency.
                let (mut sx, mut sy, mut sz) = (u64::from(x.st), u64::from(y.st), u64::from(z.st));
                let mut i = 0;
                // SAFETY: each lane's item has `words` whole-word bytes left from `p`, and
                // `n` is at most every lane's; reads are unaligned.
                unsafe {
                    while i < n {
                        sx = _mm_crc32_u64(sx, x.p.add(i).cast::<u64>().read_unaligned());
                        sy = _mm_crc32_u64(sy, y.p.add(i).cast::<u64>().read_unaligned());
                        sz = _mm_crc32_u64(sz, z.p.add(i).cast::<u64>().read_unaligned());
                        i += 8;
                    }
                }
                for (l, st) in [(&mut x, sx), (&mut y, sy), (&mut z, sz)] {
                    // SAFETY: `n` bytes were read past `p`, inside the item.
                    l.p = unsafe { l.p.add(n) };
                    l.words -= n;
                    l.st = st as u32;
                }
                lanes = [Some(x), Some(y), Some(z)];
            }
            [None, None, None] => return,
            _ => {
                // Two or one chains left: the last items, each to its end in turn (two
                // chains while two are open).
                let mut live = lanes.into_iter().flatten();
                let pair = (live.next(), live.next());
                lanes = [None, None, None];
                if let (Some(mut x), Some(mut y)) = pair {
                    let n = x.words.min(y.words);
                    let (mut sx, mut sy) = (u64::from(x.st), u64::from(y.st));
                    let mut i = 0;
                    // SAFETY: as above, for two lanes.
                    unsafe {
                        while i < n {
                            sx = _mm_crc32_u64(sx, x.p.add(i).cast::<u64>().read_unaligned());
                            sy = _mm_crc32_u64(sy, y.p.add(i).cast::<u64>().read_unaligned());
                            i += 8;
                        }
                    }
                    for (l, st) in [(&mut x, sx), (&mut y, sy)] {
                        // SAFETY: `n` bytes were read past `p`, inside the item.
                        l.p = unsafe { l.p.add(n) };
                        l.words -= n;
                        l.st = st as u32;
                    }
                    lanes = [Some(x), Some(y), None];
                } else if let (Some(mut x), None) = pair {
                    // SAFETY: SSE4.2 is present (caller); the lane's item has `words`
                    // readable bytes from `p`.
                    x.st = unsafe {
                        copy_crc_words::<false>(x.st, x.p, std::ptr::null_mut(), x.words)
                    };
                    x.words = 0;
                    lanes = [Some(x), None, None];
                }
            }
        }
    }
}
