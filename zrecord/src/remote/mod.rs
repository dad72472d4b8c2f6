//! Stores on object storage (feature `remote`): `s3://`, `gs://`, `az://` (also `abfs(s)://`) and
//! `http(s)://` URLs, read and published through the `object_store` crate.
//!
//! * [`Remote`]: one store's connection: its URL, its options and a client made lazily once per
//!   process (after a `fork` the child makes its own: the parent's connections and runtime
//!   threads do not exist there);
//! * [`RemoteFiles`] / [`Object`]: the read-side opener of a store (`crate::source::Opener`): the
//!   manifest and index fetched whole at open, each shard an object read by ranged GETs
//!   (`crate::source::ReadFile`); the read path opens a remote store through them exactly as it
//!   opens an unmapped local one (same checks, same caps);
//! * [`Remote`] as `crate::source::RangeFetch`: a gather's coalesced ranges fetched with a bounded
//!   number of requests in flight, each handed back as it lands (the remote read engine checks
//!   and decodes it into its place), and the store's node-local cache (`crate::source::cache`);
//! * [`publish_dir`] and [`gc`]: an atomic publish of a local container to a prefix (a claim
//!   object, the data objects, the manifest last with a conditional create) and the cleanup of
//!   prefixes a failed publish left without a manifest; every object it writes is typed
//!   ([`CONTENT_TYPE`]), so a server stores it as sent;
//! * `client`: the object-store client of each scheme.
//!
//! This module sees only the read-side traits and leaves it implements (`crate::source`,
//! `crate::format`); the module that hands a URL's client to the read path is `crate::backend`.
//!
//! Requests are retried by `object_store` (5xx including `503 SlowDown`, `429`, `408`, refused
//! and reset connections, timeouts of reads) with jittered backoff of 100 ms to 2 s until the
//! retry deadline ([`crate::RemoteOptions::retry_timeout`]; the count cap
//! [`crate::RemoteOptions::max_retries`] is unbounded by default), after at least the
//! `Retry-After` a `503` or `429` names (`retry_after`), so an outage shorter than the
//! deadline costs latency only; then the error names the URL, the byte range, the deadline and
//! the retries made. A missing object is not retried and says "not found".

mod client;
mod conn;
mod objects;
mod publish;
mod retry_after;
mod runtime;

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::{Error, Result};
use crate::source::cache::BlockCache;
use crate::source::{Opener, Prefetch, RangeFetch, ReadFile, RemoteOptions, RequestStats};

pub use client::CONTENT_TYPE;
pub use conn::Remote;
use conn::{HEAD_BYTES, to_io};
pub(crate) use objects::RemoteObjects;
pub use publish::{GcReport, gc, publish_dir};
use runtime::block_on;

/// The read engine's view of the store: its options, its cache and many ranges at once.
impl RangeFetch for Remote {
    fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    fn cache(&self) -> Option<&BlockCache> {
        self.cache.as_ref()
    }

    fn request_stats(&self) -> RequestStats {
        Remote::request_stats(self)
    }

    /// Memory: at most [`RemoteOptions::concurrency`] ranges' bytes in flight.
    fn fetch(
        &self,
        ranges: Vec<(String, Range<u64>)>,
        each: &mut dyn FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let c = self.client()?;
        let fetches = ranges.into_iter().enumerate().map(|(tag, (name, range))| {
            let c = c.clone();
            async move {
                let want = range.end - range.start;
                let key = self.key(&name);
                let got = c.get_range(&key, range.clone()).await;
                if let Ok(b) = &got {
                    self.count(b.len());
                }
                match got {
                    Ok(b) if b.len() as u64 == want => Ok((tag, b)),
                    Ok(b) => Err(Error::io(
                        "GET",
                        self.url_of(&name),
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "bytes {}..{} returned {} bytes (the object is shorter than the manifest says)",
                                range.start,
                                range.end,
                                b.len()
                            ),
                        ),
                    )),
                    Err(e) => Err(self.error("GET", &name, Some(range), e)),
                }
            }
        });
        let concurrency = self.opts.concurrency.max(1);
        block_on(async move {
            let mut landed = stream::iter(fetches).buffer_unordered(concurrency);
            while let Some(r) = landed.next().await {
                let (tag, bytes) = r?;
                each(tag, &bytes)?;
            }
            Ok(())
        })
        .map_err(|e| Error::io("fetch", self.url.clone(), e))?
    }
}

/// The read side of a remote store (`crate::source::Opener`): `open_read` fetches an object
/// whole, `open_read_unmapped` opens it for ranged GETs. A remote store is written by
/// [`publish_dir`], never through a file system.
#[derive(Debug, Clone)]
pub struct RemoteFiles(pub Arc<Remote>);

/// The former name of [`RemoteFiles`], when it was a `Vfs` that refused every write.
#[deprecated(note = "renamed RemoteFiles: a remote store is read through the read-side traits")]
pub type RemoteVfs = RemoteFiles;

impl RemoteFiles {
    /// The object name of `path`, a path under the store's URL.
    fn name(&self, path: &Path) -> io::Result<String> {
        let s = path.to_str().unwrap_or_default();
        s.strip_prefix(&self.0.url)
            .map(|n| n.trim_start_matches('/').to_string())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{s} is not under {}", self.0.url),
                )
            })
    }
}

impl Opener for RemoteFiles {
    fn exists(&self, path: &Path) -> io::Result<bool> {
        let name = self.name(path)?;
        if name.is_empty() {
            // The store's prefix "exists" when anything is under it.
            let c = self.0.client().map_err(io::Error::other)?;
            let prefix = self.0.prefix.clone();
            let first = block_on(async move { c.list(Some(&prefix)).next().await })?;
            self.0.count(0);
            return Ok(matches!(first, Some(Ok(_))));
        }
        match self.0.head(&name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let name = self.name(path)?;
        Ok(Arc::new(Whole(self.0.fetch_head(&name, None)?.bytes)))
    }
    /// An object for ranged GETs, its length and first bytes learnt with one GET (or taken from
    /// what [`Opener::prefetch`] fetched): no `HEAD`, and the open's first read of it (a
    /// manifest whole, a shard's header) costs no second request.
    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let name = self.name(path)?;
        let held = self
            .0
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        let head = match held {
            Some(h) => h,
            None => self.0.fetch_head(&name, Some(HEAD_BYTES))?,
        };
        Ok(Arc::new(Object {
            remote: self.0.clone(),
            name,
            len: head.size,
            head: Mutex::new(Some(head.bytes)),
        }))
    }
    /// Fetches `files` at once (at most [`RemoteOptions::concurrency`] requests in flight), so
    /// an open's index and shard headers cost one round trip. A failed fetch is dropped here:
    /// the open asks again and reports it.
    fn prefetch(&self, files: &[(&Path, Prefetch)]) {
        let Ok(c) = self.0.client() else { return };
        let r = &self.0;
        let fetches = files.iter().filter_map(|(p, what)| {
            let name = self.name(p).ok()?;
            let n = match what {
                Prefetch::Whole => None,
                Prefetch::Head(n) => Some(*n),
            };
            let c = c.clone();
            Some(async move { (r.get_head(c, &name, n).await, name) })
        });
        let concurrency = r.opts.concurrency.max(1);
        let got = block_on(async move {
            stream::iter(fetches)
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
        });
        if let Ok(got) = got {
            let mut held = r.held.lock().unwrap_or_else(|p| p.into_inner());
            held.clear();
            for (h, name) in got {
                if let Ok(h) = h {
                    held.insert(name, h);
                }
            }
        }
    }
    fn shared_fs(&self, _: &Path) -> bool {
        true
    }
}

/// An object fetched whole (a manifest or an index).
struct Whole(Bytes);

impl ReadFile for Whole {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A shard object, read by ranged GETs.
pub struct Object {
    remote: Arc<Remote>,
    name: String,
    len: u64,
    /// The object's first bytes, fetched when it was opened: they serve its first read (an
    /// open's), which then drops them.
    head: Mutex<Option<Bytes>>,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("name", &self.name)
            .field("len", &self.len)
            .finish()
    }
}

impl Object {
    /// The object's name in its store.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl ReadFile for Object {
    fn bytes(&self) -> &[u8] {
        &[]
    }
    fn mapped(&self) -> bool {
        false
    }
    fn file_len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let head = self.head.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = head
            && let Ok(at) = usize::try_from(offset)
            && let Some(b) = h.get(at..).and_then(|b| b.get(..buf.len()))
        {
            buf.copy_from_slice(b);
            return Ok(());
        }
        let got = self
            .remote
            .get_range(&self.name, offset..offset + buf.len() as u64)?;
        buf.copy_from_slice(&got[..buf.len()]);
        Ok(())
    }
    /// The reads as ranged GETs, at most [`RemoteOptions::concurrency`] in flight.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        let ranges = reads
            .iter()
            .map(|(o, b)| (self.name.clone(), *o..*o + b.len() as u64))
            .collect();
        self.remote
            .fetch(ranges, &mut |k, bytes| {
                reads[k].1.copy_from_slice(bytes);
                Ok(())
            })
            .map_err(to_io)
    }
}
