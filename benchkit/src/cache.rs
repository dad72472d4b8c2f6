//! The machine's caches: [`llc_bytes`], the last-level cache size the tables size their working
//! sets by, which is the size zrecord's gather store rule switches at (so "larger than the cache"
//! means the same thing to the sizing and to the stores it measures), and [`levels`], every cache
//! of CPU 0 as sysfs lists it, for the machine receipt.

/// The last-level cache size in bytes as a zrecord gather reads it (from sysfs, or the size it
/// assumes where sysfs does not tell): the output size from which its raw stores stream past the
/// cache (`zrecord::internals::streaming_from`).
pub fn llc_bytes() -> u64 {
    zrecord::internals::streaming_from() as u64
}

/// One cache of CPU 0, as sysfs words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Level {
    /// `level` (`"1"`, `"2"`, `"3"`).
    pub level: String,
    /// `type` (`"Data"`, `"Instruction"`, `"Unified"`).
    pub kind: String,
    /// `size` (`"48K"`, `"260M"`; `zrecord::internals::parse_cache_size` reads it).
    pub size: String,
}

/// Every cache `/sys/devices/system/cpu/cpu0/cache/index*` describes, in index order (empty where
/// sysfs has none).
pub fn levels() -> Vec<Level> {
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    (0..16)
        .filter_map(|k| {
            let base = format!("/sys/devices/system/cpu/cpu0/cache/index{k}");
            Some(Level {
                level: read(format!("{base}/level"))?,
                kind: read(format!("{base}/type"))?,
                size: read(format!("{base}/size"))?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizing_cache_is_the_largest_listed_one_or_the_assumed_size() {
        let llc = llc_bytes();
        assert!(llc >= 1 << 16, "{llc}");
        let largest = levels()
            .iter()
            .filter(|l| l.kind != "Instruction")
            .filter_map(|l| zrecord::internals::parse_cache_size(&l.size))
            .max();
        if let Some(b) = largest.filter(|&b| b > 0) {
            assert_eq!(llc, b);
        }
    }
}
