//! [`Remote`]: one store's connection on object storage: its URL, options, client (made once per
//! process), node-local cache, request counts, and the plain requests (`HEAD`, ranged GETs, a
//! GET of an object's head) with their errors.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use super::client::{build, ended, io_kind, key_under};
use super::runtime::block_on;
use crate::error::{Error, Result};
use crate::source::cache::BlockCache;
use crate::source::{RemoteOptions, RequestStats};

/// One remote store's connection.
pub struct Remote {
    /// The store's URL, without a trailing `/`.
    pub(super) url: String,
    /// The object key of the store's prefix.
    pub(super) prefix: Key,
    pub(super) opts: RemoteOptions,
    /// The client of the process that made it (`(pid, client)`), remade after a fork.
    pub(super) client: Mutex<Option<(u32, Arc<dyn ObjectStore>)>>,
    /// Whether the client types every upload (a publish's connection: see [`CONTENT_TYPE`]).
    pub(super) upload: bool,
    /// The node-local cache, when `cache_dir` is set.
    pub(super) cache: Option<BlockCache>,
    /// What an open fetched ahead ([`Opener::prefetch`]) and has not opened yet, by object name:
    /// taken by the open of each (at most one open's files).
    pub(super) held: Mutex<HashMap<String, Head>>,
    /// Requests made and bytes received through this connection.
    pub(super) counted: Counted,
}

/// Requests made and bytes received through one connection or dataset root.
#[derive(Default)]
pub(super) struct Counted {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Counted {
    /// Counts `n` requests that received `bytes` in all.
    pub(super) fn add(&self, n: u64, bytes: usize) {
        self.requests.fetch_add(n, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// What was counted so far.
    pub(super) fn stats(&self) -> RequestStats {
        RequestStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The first bytes of an object (all of it, for a small one) and its length, as one GET learns
/// them.
pub(super) struct Head {
    pub(super) bytes: Bytes,
    pub(super) size: u64,
}

/// The bytes an open's first GET of an object asks for (a manifest whole, in most stores).
pub(super) const HEAD_BYTES: u64 = 64 << 10;

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

impl Remote {
    /// Connects to the store at `url` (nothing is requested yet: the client is made, and the
    /// options checked).
    pub fn connect(url: &str, opts: &RemoteOptions) -> Result<Arc<Remote>> {
        Self::open(url, opts, false)
    }

    /// [`Remote::connect`], with a client that types uploads when `upload` is set.
    pub(super) fn open(url: &str, opts: &RemoteOptions, upload: bool) -> Result<Arc<Remote>> {
        let url = url.trim_end_matches('/').to_string();
        let (client, prefix) = build(&url, opts, upload)?;
        let cache = match &opts.cache_dir {
            None => None,
            Some(dir) => Some(
                BlockCache::open(dir, opts.cache_bytes, opts.cache_block).map_err(|e| {
                    if e.kind() == io::ErrorKind::InvalidInput {
                        Error::invalid(format!("{url}: {e}"))
                    } else {
                        Error::io("open the cache directory", dir.clone(), e)
                    }
                })?,
            ),
        };
        let r = Remote {
            url,
            prefix,
            opts: opts.clone(),
            client: Mutex::new(Some((std::process::id(), client))),
            upload,
            cache,
            held: Mutex::default(),
            counted: Counted::default(),
        };
        Ok(Arc::new(r))
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    /// This process's client, made on first use in each process.
    pub(super) fn client(&self) -> Result<Arc<dyn ObjectStore>> {
        let pid = std::process::id();
        let mut held = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((p, c)) = held.as_ref()
            && *p == pid
        {
            return Ok(c.clone());
        }
        let (c, _) = build(&self.url, &self.opts, self.upload)?;
        *held = Some((pid, c.clone()));
        Ok(c)
    }

    /// The key of file `name` of the store (`name` may name a file below a folder, as a
    /// dataset's `parts/<part>/manifest.zrm` does: each `/`-separated segment is joined on its
    /// own, since `Key::join` takes one segment and would encode the `/` into it).
    pub(super) fn key(&self, name: &str) -> Key {
        key_under(&self.prefix, name)
    }

    /// The URL of file `name` of the store, for errors.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// The error of a failed request `what` of `name` (bytes `range`, if any).
    pub(super) fn error(
        &self,
        what: &'static str,
        name: &str,
        range: Option<Range<u64>>,
        e: object_store::Error,
    ) -> Error {
        let kind = io_kind(&e);
        let range = range
            .map(|r| format!(" bytes {}..{}", r.start, r.end))
            .unwrap_or_default();
        Error::io(
            what,
            self.url_of(name),
            io::Error::new(kind, format!("{what}{range}: {}", ended(&e, &self.opts))),
        )
    }

    /// Counts a request that received `bytes`.
    pub(super) fn count(&self, bytes: usize) {
        self.counted.add(1, bytes);
    }

    /// Requests made and bytes received through this connection so far.
    pub fn request_stats(&self) -> RequestStats {
        self.counted.stats()
    }

    /// The first `n` bytes of file `name` (all of it `n == None`) and its length, with one GET.
    pub(super) async fn get_head(
        &self,
        c: Arc<dyn ObjectStore>,
        name: &str,
        n: Option<u64>,
    ) -> std::result::Result<Head, object_store::Error> {
        let key = self.key(name);
        let opts = GetOptions {
            range: n.map(|n| GetRange::Bounded(0..n.max(1))),
            ..GetOptions::default()
        };
        let r = c.get_opts(&key, opts).await?;
        let size = r.meta.size;
        let bytes = r.bytes().await?;
        self.count(bytes.len());
        Ok(Head { bytes, size })
    }

    /// [`Remote::get_head`] of file `name` on this process's client, its error naming the URL.
    pub(super) fn fetch_head(&self, name: &str, n: Option<u64>) -> io::Result<Head> {
        let c = self.client().map_err(io::Error::other)?;
        block_on(self.get_head(c, name, n))?.map_err(|e| to_io(self.error("GET", name, None, e)))
    }

    /// The length of file `name`.
    pub(super) fn head(&self, name: &str) -> io::Result<u64> {
        self.count(0);
        let c = self.client().map_err(io::Error::other)?;
        let key = self.key(name);
        block_on(async move { c.head(&key).await })?
            .map(|m| m.size)
            .map_err(|e| to_io(self.error("HEAD", name, None, e)))
    }

    /// Bytes `range` of file `name`: [`io::ErrorKind::UnexpectedEof`] when the object is shorter.
    pub(super) fn get_range(&self, name: &str, range: Range<u64>) -> io::Result<Bytes> {
        let c = self.client().map_err(io::Error::other)?;
        let key = self.key(name);
        let want = range.end - range.start;
        let r = range.clone();
        let got = block_on(async move { c.get_range(&key, r).await })?
            .map_err(|e| to_io(self.error("GET", name, Some(range.clone()), e)))?;
        self.count(got.len());
        if (got.len() as u64) < want {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: bytes {}..{} returned {} bytes",
                    self.url_of(name),
                    range.start,
                    range.end,
                    got.len()
                ),
            ));
        }
        Ok(got)
    }
}

/// An [`Error`] as an [`io::Error`] (its message kept).
pub(super) fn to_io(e: Error) -> io::Error {
    match e {
        Error::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
    }
}
