//! The CPU's last-level cache size, from Linux sysfs: what a gather's store rule
//! (`read::stores_for`) reads, and through it (`internals::streaming_from`) the benchmarks'
//! working-set sizing. Internal: not part of the crate's API (the benchmarks' tests reach
//! [`parse_cache_size`] through `internals`).

/// Parses a sysfs cache `size` (`"266240K"`, `"2048K"`, `"32M"`, `"512"`) into bytes.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, 'K') | (i, 'k') => (&s[..i], 1u64 << 10),
        (i, 'M') | (i, 'm') => (&s[..i], 1 << 20),
        (i, 'G') | (i, 'g') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// The largest data or unified cache of CPU 0 (`type` and `size` under
/// `/sys/devices/system/cpu/cpu0/cache/index*`), in bytes; `None` when sysfs has none. Read anew
/// on each call.
pub(crate) fn llc_bytes() -> Option<u64> {
    let read = |p: String| std::fs::read_to_string(p).ok();
    (0..16)
        .filter_map(|k| {
            let base = format!("/sys/devices/system/cpu/cpu0/cache/index{k}");
            let kind = read(format!("{base}/type"))?;
            if kind.trim() == "Instruction" {
                return None;
            }
            parse_cache_size(&read(format!("{base}/size"))?)
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::parse_cache_size;

    #[test]
    fn cache_sizes_parse_with_and_without_units() {
        assert_eq!(parse_cache_size("266240K\n"), Some(266_240 << 10));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("12Q"), None);
    }
}
