//! How the read path opens a store's files ([`Opener`]; on a local file system through its
//! [`ReadFs`]) and, for a store on object storage, fetches many ranges of them at once
//! ([`RangeFetch`], feature `remote`).

use std::fmt;
use std::io;
#[cfg(feature = "remote")]
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "remote")]
use super::cache;
use super::file::ReadFile;
#[cfg(feature = "remote")]
use super::options::RemoteOptions;

/// The read side of a local file system: how the files of a store on it are opened for reading.
/// [`crate::StdFs`] implements it (and [`crate::Vfs`], the side writers and publish use); a test
/// may implement it alone to hand the read path in-memory or faulted files. A store on object
/// storage is read through its client instead.
pub trait ReadFs: Send + Sync + fmt::Debug {
    /// Opens an existing file for reading: mapped where the file system can map it.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// Opens an existing file for positional reads only ([`ReadFile::read_exact_at`]), without a
    /// memory map. The default maps it ([`ReadFs::open_read`]).
    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        self.open_read(path)
    }
    /// Whether anything exists at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Whether `path` lies on a shared or network file system (NFS, SMB/CIFS, FUSE, Lustre,
    /// Ceph, GPFS, 9P, AFS, GFS2, OCFS2), where another host may shrink a file under a map:
    /// stores there are opened unmapped unless asked otherwise. The default: `false`.
    fn shared_fs(&self, _path: &Path) -> bool {
        false
    }
}

/// Where a store's files are opened from, for reading.
pub(crate) trait Opener {
    /// Opens `path` whole: mapped, or (an object) fetched whole into memory.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// Opens `path` for range reads only ([`ReadFile::read_exact_at`]); a file system may map it
    /// anyway ([`ReadFile::mapped`] tells).
    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// Whether anything exists at `path` (a store's prefix exists when anything is under it).
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Whether `path` lies where another host may shrink a file under a map (a shared or network
    /// file system, object storage): a store there is read unmapped unless asked otherwise.
    fn shared_fs(&self, path: &Path) -> bool;
    /// Fetches `files` ahead, all at once, for the opens of them that follow (a store on object
    /// storage: its index and its shards' headers in one round trip). The default does nothing.
    fn prefetch(&self, _files: &[(&Path, Prefetch)]) {}
}

/// What [`Opener::prefetch`] fetches of a file.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) enum Prefetch {
    /// The whole file.
    Whole,
    /// Its first bytes.
    Head(u64),
}

/// A remote store's client as the remote read engine uses it.
#[cfg(feature = "remote")]
pub(crate) trait RangeFetch: Send + Sync {
    /// The options the store was opened with.
    fn options(&self) -> &RemoteOptions;
    /// The node-local cache, when the store was opened with one.
    fn cache(&self) -> Option<&cache::BlockCache>;
    /// Requests made and bytes received through the store's connection so far.
    fn request_stats(&self) -> super::options::RequestStats;
    /// Fetches `ranges` (object name under the store, byte range) with at most
    /// [`RemoteOptions::concurrency`] requests in flight and hands each to `each` with its place
    /// in `ranges` as it lands, on the calling thread; the first failure (a request's, or
    /// `each`'s) ends the fetch and is returned. A range the object does not hold whole is an
    /// [`crate::Error::Io`] of kind `UnexpectedEof` naming its URL and bytes.
    fn fetch(
        &self,
        ranges: Vec<(String, Range<u64>)>,
        each: &mut dyn FnMut(usize, &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()>;
}

/// [`RangeFetch::fetch`] of ranges that each carry a tag, handed to `each` with the range's bytes.
#[cfg(feature = "remote")]
pub(crate) fn fetch_tagged<T>(
    client: &dyn RangeFetch,
    ranges: Vec<(String, Range<u64>, T)>,
    mut each: impl FnMut(T, &[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    let (requests, mut tags): (Vec<_>, Vec<_>) = ranges
        .into_iter()
        .map(|(name, range, tag)| ((name, range), Some(tag)))
        .unzip();
    client.fetch(requests, &mut |k, bytes| match tags[k].take() {
        Some(tag) => each(tag, bytes),
        None => Err(crate::Error::invalid(format!(
            "internal: range {k} of a fetch landed twice"
        ))),
    })
}
