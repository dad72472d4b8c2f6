//! [`ReadFile`], one file of a store as a reader sees it, and what every reader of one shares:
//! the URL test of a store path ([`url_of`]) and the alignment of direct reads
//! ([`DIRECT_ALIGN`]).

use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::Path;

/// A file opened for reading, exposed as one immutable byte slice.
pub trait ReadFile: Send + Sync {
    /// The whole file.
    fn bytes(&self) -> &[u8];
    /// The same file for reads that bypass the page cache (`O_DIRECT`: offset, length and buffer
    /// aligned to [`DIRECT_ALIGN`]), used by cold gathers of large records; `None` (the default)
    /// when this file system has no such reads, and every read then goes through
    /// [`ReadFile::bytes`].
    fn direct(&self) -> Option<&File> {
        None
    }
    /// Whether [`ReadFile::bytes`] is the file's contents (a map, or a copy in memory). `false`
    /// for a file opened unmapped ([`crate::ReadFs::open_read_unmapped`], a remote store's shard):
    /// its `bytes` is empty and it is read only with [`ReadFile::read_exact_at`].
    fn mapped(&self) -> bool {
        true
    }
    /// The file's length in bytes (as opened).
    fn file_len(&self) -> u64 {
        self.bytes().len() as u64
    }
    /// Reads `buf.len()` bytes at `offset`; fails with [`io::ErrorKind::UnexpectedEof`] where the
    /// file ends first. The default copies from [`ReadFile::bytes`].
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        copy_at(self.bytes(), buf, offset)
    }
    /// Whether the file was found shorter than its map while it was read (a `SIGBUS` caught by
    /// [`crate::sigbus`]): from then on the map's tail reads zeros, not the file, and every read
    /// of the store fails. Never for a file that is not mapped.
    fn faulted(&self) -> bool {
        false
    }
    /// Bytes `range` of the file, for a reader that takes them a range at a time (a page of an
    /// index, a shard's block): borrowed from [`ReadFile::bytes`] where the file is mapped (or
    /// held in memory), else read into `buf` (resized to the range) with
    /// [`ReadFile::read_exact_at`]: a positional read of a local file, a ranged GET of an object.
    /// [`io::ErrorKind::UnexpectedEof`] where the file ends first.
    fn read_range<'a>(&'a self, range: Range<u64>, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        let want = range.end.saturating_sub(range.start);
        let want = usize::try_from(want)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range larger than memory"))?;
        if self.mapped() {
            let b = self.bytes();
            return usize::try_from(range.start)
                .ok()
                .and_then(|at| b.get(at..)?.get(..want))
                .ok_or_else(|| past_end(b.len() as u64, range.start, want));
        }
        buf.resize(want, 0);
        self.read_exact_at(buf, range.start)?;
        Ok(buf)
    }

    /// Reads every `(offset, buf)` of `reads` whole, as [`ReadFile::read_exact_at`] reads one: a
    /// remote object fetches them concurrently. The default reads them one after another.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (offset, buf) in reads.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }
}

/// `buf.len()` bytes of `b` from `offset` into `buf`; [`io::ErrorKind::UnexpectedEof`] where `b`
/// ends first.
pub(crate) fn copy_at(b: &[u8], buf: &mut [u8], offset: u64) -> io::Result<()> {
    let src = usize::try_from(offset)
        .ok()
        .and_then(|o| b.get(o..)?.get(..buf.len()))
        .ok_or_else(|| past_end(b.len() as u64, offset, buf.len()))?;
    buf.copy_from_slice(src);
    Ok(())
}

/// The URL schemes a store path may have: a path `scheme://...` with one of them names a store on
/// object storage (read with the `remote` feature).
pub const URL_SCHEMES: [&str; 7] = ["s3", "gs", "az", "abfs", "abfss", "http", "https"];

/// The URL `path` names, when it is one (`scheme://...` with a scheme of [`URL_SCHEMES`]).
pub fn url_of(path: &Path) -> Option<&str> {
    let s = path.to_str()?;
    let (scheme, rest) = s.split_once("://")?;
    (URL_SCHEMES.contains(&scheme) && !rest.is_empty()).then_some(s)
}

/// The alignment of offsets, lengths and buffers of a [`ReadFile::direct`] read: 4 KiB, a
/// multiple of every common device's logical block size (a device with larger blocks refuses
/// the read with `EINVAL`, and the caller then reads through the mapping).
pub const DIRECT_ALIGN: usize = 4096;

/// The error of a read of `want` bytes at `offset` of a file that ends at byte `len`.
fn past_end(len: u64, offset: u64, want: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "the file ends at byte {len} before bytes {offset}..{}",
            offset + want as u64
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file held in memory, read as a mapped one or as one read by positional reads only.
    struct Held(Vec<u8>, bool);

    impl ReadFile for Held {
        fn bytes(&self) -> &[u8] {
            if self.1 { &self.0 } else { &[] }
        }
        fn mapped(&self) -> bool {
            self.1
        }
        fn file_len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            copy_at(&self.0, buf, offset)
        }
    }

    /// A range reads the same bytes borrowed from a map and read into the buffer, and a range
    /// past the end fails as `UnexpectedEof` either way.
    #[test]
    fn read_range_borrows_a_map_and_reads_otherwise() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for mapped in [true, false] {
            let f = Held(data.clone(), mapped);
            let mut buf = Vec::new();
            let got = f.read_range(4_000..4_100, &mut buf).expect("in range");
            assert_eq!(got, &data[4_000..4_100], "mapped {mapped}");
            assert_eq!(buf.is_empty(), mapped, "a map is borrowed, not copied");
            let err = f
                .read_range(9_990..10_010, &mut buf)
                .expect_err("past the end");
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "mapped {mapped}");
        }
    }
}
