//! Working-set sizing: how many records a store table needs so its logical bytes exceed the
//! last-level cache (`benchkit::cache::llc_bytes`: the size zrecord's gather store rule switches
//! at), and the caption line that says how a table's working set compares to it. A uniform random
//! gather over a working set that fits in the cache measures the cache, so, unless the record
//! count is given, the quick matrix (the CI gate) and the full run both size every store table to
//! at least [`LLC_MARGIN`] times the cache and compare the same regime. A leaf module.

/// A store table's logical bytes must be at least this many times the last-level cache.
pub const LLC_MARGIN: f64 = 1.25;

/// The dense-vision tables' margin. At [`LLC_MARGIN`] their 147 KiB records make a quick store
/// of ~280 that straddles the cache, and every figure of the table, the limit row included, was
/// bimodal between equal quick runs (224-247k against 378-402k samples/s on one 32 MiB-L3
/// machine). At 4x the gathers read memory in every run.
pub const DENSE_VISION_MARGIN: f64 = 4.0;

/// Bytes a store table must hold: [`LLC_MARGIN`] x `llc`.
pub fn floor_bytes(llc: u64) -> u64 {
    (llc as f64 * LLC_MARGIN).ceil() as u64
}

/// The fewest fixed-size records (`record_bytes` each) whose bytes reach `margin` x `llc`, and
/// at least `at_least`.
pub fn records_for(record_bytes: u64, llc: u64, margin: f64, at_least: usize) -> usize {
    let need = ((llc as f64 * margin).ceil() as u64).div_ceil(record_bytes.max(1));
    at_least.max(usize::try_from(need).unwrap_or(usize::MAX))
}

/// The fewest leading records of a ragged source (element `offsets`, `n + 1` entries, elements of
/// `itemsize` bytes) whose bytes reach [`floor_bytes`]`(llc)`; all `n` when the whole source is
/// smaller. The ragged-vision table reads such a prefix: its native-resolution records average
/// ~0.5 MiB, so the dense table's record count would only make every write longer.
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
    let verdict = match logical >= floor_bytes(llc) {
        true => "gathers read memory, not the cache".to_string(),
        false => format!(
            "below {LLC_MARGIN}x the cache, so part of what the gathers measure is the cache (record count given explicitly)"
        ),
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
    fn record_counts_reach_the_margin() {
        for (llc, margin) in [(260u64 << 20, LLC_MARGIN), (32 << 20, DENSE_VISION_MARGIN)] {
            let want = (llc as f64 * margin) as u64;
            for (bytes, at_least) in [(150_528u64, 256usize), (2048, 20_000), (7, 1)] {
                let n = records_for(bytes, llc, margin, at_least);
                assert!(n >= at_least && n as u64 * bytes >= want, "{bytes}");
                // The fewest: one record less misses the margin (unless `at_least` decided).
                assert!(n == at_least || (n as u64 - 1) * bytes < want, "{bytes}");
            }
        }
        // An explicit minimum above the floor wins.
        assert_eq!(records_for(2048, 1 << 20, LLC_MARGIN, 5000), 5000);
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
