//! What the workspace's benchmarks take from zrecord's internals (feature `internals`; not a
//! stable API, and no normal build of the library compiles it): the copy and checksum kernels a
//! gather runs, the rule that picks its stores, the byte-balanced split of its output and the
//! parse of a sysfs cache size that the rule's cache size comes from. The
//! limit rows and criterion arms call these, so they time the product's own code rather than a
//! copy of it.

use crate::crc::{self, Stores};
use crate::read;

/// Copies `src` into `dst` (equal lengths) and returns the CRC32C of the bytes extended from
/// `crc`: the kernel a verified raw read runs per record.
pub fn copy_crc32c(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    crc::copy_append(crc, dst, src)
}

/// The CRC32C of each `stride`-byte record of `data` (the last may be shorter), XORed together,
/// by the kernel a verified gather of raw records runs over each record it has copied: the pass
/// of the verified-copy limit (a plain copy of the same records, then this pass over the output).
pub fn crc32c_records(data: &[u8], stride: usize) -> u32 {
    data.chunks(stride.max(1))
        .fold(0, |x, record| x ^ crc::append(0, record))
}

/// Copies `src` into `dst` (equal lengths) with the stores a raw gather of `output_bytes` in all
/// uses for each record (non-temporal ones from [`streaming_from`] up).
pub fn copy_as_gather(dst: &mut [u8], src: &[u8], output_bytes: usize) {
    crc::copy_with(dst, src, read::stores_for(output_bytes));
}

/// The smallest output, in bytes, that a raw gather writes with non-temporal stores: the
/// last-level cache size as the gather's store rule reads it (from sysfs, or the size it assumes
/// where sysfs does not tell). Found by bisecting the rule itself, so it is the rule's value and
/// not a second reading of the cache.
pub fn streaming_from() -> usize {
    let streams = |total: usize| read::stores_for(total) == Stores::Streaming;
    if !streams(usize::MAX) {
        return usize::MAX;
    }
    // Invariant: `lo` is cached, `hi` streams.
    let (mut lo, mut hi) = (0usize, usize::MAX);
    if streams(lo) {
        return 0;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if streams(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

pub use crate::cache::parse_cache_size;
pub use crate::read::split_output;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_starts_where_the_store_rule_says() {
        let at = streaming_from();
        assert!(at >= 1 << 16, "cache size {at}");
        assert_eq!(read::stores_for(at), Stores::Streaming);
        assert_eq!(read::stores_for(at - 1), Stores::Cached);
        assert_eq!(
            crate::cache::llc_bytes().map_or(at, |b| b as usize),
            at,
            "the rule reads the probe's value"
        );
    }

    #[test]
    fn kernels_copy_and_checksum_as_the_crate_does() {
        let src: Vec<u8> = (0..1000u32).map(|k| (k * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let crc = copy_crc32c(0, &mut dst, &src);
        assert_eq!(dst, src);
        assert_eq!(crc, crc::append(0, &src));
        let mut again = vec![0u8; src.len()];
        copy_as_gather(&mut again, &src, 1 << 40);
        assert_eq!(again, src);
        let want = src.chunks(300).fold(0, |x, r| x ^ crc32c::crc32c(r));
        assert_eq!(crc32c_records(&src, 300), want);
    }
}

/// The benchmarks' GET limit: byte ranges of a remote store's objects fetched by the client a
/// remote store uses, with its concurrency and retries, and dropped as they land (no checks, no
/// copies).
#[cfg(feature = "remote")]
#[derive(Debug)]
pub struct GetLimit(std::sync::Arc<crate::remote::Remote>);

#[cfg(feature = "remote")]
impl GetLimit {
    /// A client of the store at `url` (nothing is requested yet).
    pub fn connect(url: &str, opts: &crate::RemoteOptions) -> crate::Result<GetLimit> {
        crate::remote::Remote::connect(url, opts).map(GetLimit)
    }

    /// Fetches `requests` (object name under the store's URL, byte range) with at most
    /// `concurrency` in flight; the bytes received.
    pub fn fetch(&self, requests: Vec<(String, std::ops::Range<u64>)>) -> crate::Result<u64> {
        let mut n = 0u64;
        crate::source::RangeFetch::fetch(&*self.0, requests, &mut |_, bytes| {
            n += bytes.len() as u64;
            Ok(())
        })?;
        Ok(n)
    }
}
