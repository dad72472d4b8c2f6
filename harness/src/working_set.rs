//! Working-set sizing: how many records a store table needs so its logical bytes exceed the
//! machine's last-level cache ([`llc_or_fallback`]: the size zrecord's gather store rule switches
//! at, read from the sysfs entries the machine receipt reports), and the caption line that says
//! how a table's working set compares to it.
//!
//! A uniform random gather over a working set that fits in the last-level cache measures the
//! cache, not memory: the `memcpy-limit` row would then be a cache-bandwidth limit and every
//! `x memcpy-limit` ratio would answer a different question than on a machine with a smaller
//! cache. So, unless the record count is given explicitly, both the quick matrix (the CI gate)
//! and the full run size every store table to at least [`LLC_MARGIN`] times the last-level
//! cache, and the quick and full runs compare the same regime.
//!
//! A leaf module: it imports nothing from the crate (the cache probe is benchkit's).

/// A store table's logical bytes must be at least this many times the last-level cache.
pub const LLC_MARGIN: f64 = 1.25;

/// The dense-vision tables' margin. Their records are 147 KiB, so at [`LLC_MARGIN`] the quick
/// table holds ~280 of them and a batch of 32 reads a tenth of the store: a working set that
/// straddles the cache, so the fraction that hits it moved with whatever else the process held,
/// and every figure of the table, the limit row included, was bimodal between otherwise equal
/// quick runs (224-247k against 378-402k samples/s on one 32 MiB-L3 machine). At 4x the cache
/// the gathers read memory in every run.
pub const DENSE_VISION_MARGIN: f64 = 4.0;

/// The last-level cache the sizing uses: the one zrecord's gathers read (sysfs), or the size they
/// assume where sysfs reports none (`benchkit::cache::llc_bytes`), so "larger than the cache"
/// means the same to the sizing as to the stores it measures.
pub fn llc_or_fallback() -> u64 {
    benchkit::cache::llc_bytes()
}

/// Bytes a store table must hold: [`LLC_MARGIN`] x `llc`.
pub fn floor_bytes(llc: u64) -> u64 {
    (llc as f64 * LLC_MARGIN).ceil() as u64
}

/// The fewest fixed-size records (`record_bytes` each) that reach [`floor_bytes`], and at least
/// `at_least`.
pub fn records_for(record_bytes: u64, llc: u64, at_least: usize) -> usize {
    records_for_margin(record_bytes, llc, LLC_MARGIN, at_least)
}

/// The fewest fixed-size records (`record_bytes` each) whose bytes reach `margin` x `llc`
/// (never less than [`floor_bytes`]), and at least `at_least`.
pub fn records_for_margin(record_bytes: u64, llc: u64, margin: f64, at_least: usize) -> usize {
    let floor = floor_bytes(llc).max((llc as f64 * margin).ceil() as u64);
    let need = floor.div_ceil(record_bytes.max(1));
    at_least.max(usize::try_from(need).unwrap_or(usize::MAX))
}

/// The fewest leading records of a ragged source (element `offsets`, `n + 1` entries, elements of
/// `itemsize` bytes) whose bytes reach [`floor_bytes`]`(llc)`; all `n` when the whole source is
/// smaller. The ragged-vision table reads such a prefix: its native-resolution records average
/// ~0.5 MiB, so the record count the dense table needs would hold several times the floor and
/// only make every write of the matrix longer.
pub fn prefix_records(offsets: &[i64], itemsize: u64, llc: u64) -> usize {
    let n = offsets.len().saturating_sub(1);
    let floor = floor_bytes(llc);
    let base = offsets.first().copied().unwrap_or(0);
    (1..=n)
        .find(|&k| (offsets[k] - base).max(0) as u64 * itemsize >= floor)
        .unwrap_or(n)
}

/// The caption line of a table with `logical` bytes on a machine whose last-level cache is `llc`.
pub fn caption(logical: u64, llc: u64) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let x = logical as f64 / llc.max(1) as f64;
    let verdict = if logical >= floor_bytes(llc) {
        "gathers read memory, not the cache".to_string()
    } else {
        format!(
            "below {LLC_MARGIN}x the cache, so part of what the gathers measure is the cache \
             (record count given explicitly)"
        )
    };
    format!(
        "Working set {:.1} MiB = {x:.2}x the {:.0} MiB last-level cache: {verdict}.",
        mib(logical),
        mib(llc)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_counts_reach_the_floor() {
        let llc = 260u64 << 20;
        for (bytes, at_least) in [(150_528u64, 256usize), (2048, 20_000), (7, 1)] {
            let n = records_for(bytes, llc, at_least);
            assert!(n >= at_least);
            assert!(n as u64 * bytes >= floor_bytes(llc), "{bytes}");
            // The fewest: one record less misses the floor (unless `at_least` decided).
            if n > at_least {
                assert!((n as u64 - 1) * bytes < floor_bytes(llc), "{bytes}");
            }
        }
        // An explicit minimum above the floor wins.
        assert_eq!(records_for(2048, 1 << 20, 5000), 5000);
        // A larger margin: the fewest records over it; a smaller one never goes below the floor.
        let llc = 32u64 << 20;
        let n = records_for_margin(150_528, llc, DENSE_VISION_MARGIN, 256);
        assert!(n as u64 * 150_528 >= 4 * llc && (n as u64 - 1) * 150_528 < 4 * llc);
        assert_eq!(
            records_for_margin(2048, llc, 0.5, 1),
            records_for(2048, llc, 1)
        );
    }

    #[test]
    fn ragged_prefix_is_the_fewest_records_reaching_the_floor() {
        let llc = 1000u64;
        let floor = floor_bytes(llc); // 1250
        // Records of 300 elements of 2 bytes: 600 B each, so 3 records (1800 B) reach the floor.
        let offsets: Vec<i64> = (0..=10).map(|i| 7 + i * 300).collect();
        let k = prefix_records(&offsets, 2, llc);
        assert_eq!(k, 3);
        assert!((offsets[k] - offsets[0]) as u64 * 2 >= floor);
        assert!((offsets[k - 1] - offsets[0]) as u64 * 2 < floor);
        // A source below the floor is read whole.
        assert_eq!(prefix_records(&offsets[..3], 2, llc), 2);
        assert_eq!(prefix_records(&[0], 1, llc), 0);
    }

    #[test]
    fn captions_say_which_side_of_the_cache() {
        let llc = 100u64 << 20;
        assert!(caption(200 << 20, llc).contains("read memory"));
        assert!(caption(200 << 20, llc).contains("2.00x the 100 MiB"));
        assert!(caption(50 << 20, llc).contains("part of what the gathers measure is the cache"));
    }
}
