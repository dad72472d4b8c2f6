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
//! [`crate::RemoteOptions::max_retries`] is unbounded by default), so an outage shorter than the
//! deadline costs latency only; then the error names the URL, the byte range, the deadline and
//! the retries made. A missing object is not retried and says "not found".

mod client;
mod objects;
mod runtime;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions,
    PutPayload,
};

use crate::error::{Error, Result};
use crate::source::cache::{BlockCache, now_secs};
use crate::source::{Opener, Prefetch, RangeFetch, ReadFile, RemoteOptions, RequestStats};

pub use client::CONTENT_TYPE;
use client::{build, ended, io_kind, key_under, typed};
pub(crate) use objects::RemoteObjects;
use runtime::block_on;

/// One remote store's connection.
pub struct Remote {
    /// The store's URL, without a trailing `/`.
    url: String,
    /// The object key of the store's prefix.
    prefix: Key,
    opts: RemoteOptions,
    /// The client of the process that made it (`(pid, client)`), remade after a fork.
    client: Mutex<Option<(u32, Arc<dyn ObjectStore>)>>,
    /// Whether the client types every upload (a publish's connection: see [`CONTENT_TYPE`]).
    upload: bool,
    /// The node-local cache, when `cache_dir` is set.
    cache: Option<BlockCache>,
    /// What an open fetched ahead ([`Opener::prefetch`]) and has not opened yet, by object name:
    /// taken by the open of each (at most one open's files).
    held: Mutex<HashMap<String, Head>>,
    /// Requests made and bytes received through this connection.
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// The first bytes of an object (all of it, for a small one) and its length, as one GET learns
/// them.
struct Head {
    bytes: Bytes,
    size: u64,
}

/// The bytes an open's first GET of an object asks for (a manifest whole, in most stores).
const HEAD_BYTES: u64 = 64 << 10;

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
    fn open(url: &str, opts: &RemoteOptions, upload: bool) -> Result<Arc<Remote>> {
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
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
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
    fn client(&self) -> Result<Arc<dyn ObjectStore>> {
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
    fn key(&self, name: &str) -> Key {
        key_under(&self.prefix, name)
    }

    /// The URL of file `name` of the store, for errors.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// The error of a failed request `what` of `name` (bytes `range`, if any).
    fn error(
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
    fn count(&self, bytes: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Requests made and bytes received through this connection so far.
    pub fn request_stats(&self) -> RequestStats {
        RequestStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// The first `n` bytes of file `name` (all of it `n == None`) and its length, with one GET.
    async fn get_head(
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

    /// The length of file `name`.
    fn head(&self, name: &str) -> io::Result<u64> {
        self.count(0);
        let c = self.client().map_err(io::Error::other)?;
        let key = self.key(name);
        block_on(async move { c.head(&key).await })?
            .map(|m| m.size)
            .map_err(|e| to_io(self.error("HEAD", name, None, e)))
    }

    /// Bytes `range` of file `name`: [`io::ErrorKind::UnexpectedEof`] when the object is shorter.
    fn get_range(&self, name: &str, range: Range<u64>) -> io::Result<Bytes> {
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

/// An [`Error`] as an [`io::Error`] (its message kept).
fn to_io(e: Error) -> io::Error {
    match e {
        Error::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
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
        let c = self.0.client().map_err(io::Error::other)?;
        let key = self.0.key(&name);
        let got = block_on(async move {
            match c.get(&key).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            }
        })?
        .map_err(|e| to_io(self.0.error("GET", &name, None, e)))?;
        self.0.count(got.len());
        Ok(Arc::new(Whole(got)))
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
            None => {
                let c = self.0.client().map_err(io::Error::other)?;
                block_on(self.0.get_head(c, &name, Some(HEAD_BYTES)))?
                    .map_err(|e| to_io(self.0.error("GET", &name, None, e)))?
            }
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

/// The object that claims a prefix while a publish is under way.
const CLAIM: &str = ".publishing";

/// Objects of up to this size are uploaded with one PUT; larger ones in parts of this size.
const PART: usize = 16 << 20;

/// Publishes the local container at `dir` to the store at `url`: claims the prefix (a conditional
/// create of a claim object: a second publisher of the prefix fails here with
/// [`Error::AlreadyExists`], as does any publish to a prefix that holds a manifest), uploads the
/// index and the shards (in parts of 16 MiB when larger), then creates the manifest last with a
/// conditional create, and removes the claim. A reader opens only a prefix with a manifest, so
/// it never sees a partial container; a publish that fails or is killed leaves no manifest, and
/// [`gc`] removes what it left.
pub fn publish_dir(dir: &Path, url: &str, opts: &RemoteOptions) -> Result<()> {
    // One client, which types every upload, the parts of multipart ones too (see
    // [`CONTENT_TYPE`]).
    let remote = Remote::open(url, opts, true)?;
    let c = remote.client()?;
    let files = crate::format::container_files(dir)?;
    let manifest = &files[0];
    let name_of = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| Error::invalid(format!("{}: not a file name", p.display())))
    };
    let mname = name_of(manifest)?;
    let create = PutOptions {
        mode: PutMode::Create,
        attributes: typed(),
        ..PutOptions::default()
    };
    // Fail early on a published prefix.
    if remote.head(&mname).is_ok() {
        return Err(Error::AlreadyExists(PathBuf::from(remote.url_of(&mname))));
    }
    let claim = format!("{} {}", std::process::id(), now_secs());
    {
        let (c, key, opts) = (c.clone(), remote.key(CLAIM), create.clone());
        match block_on(async move {
            c.put_opts(&key, PutPayload::from(claim.into_bytes()), opts)
                .await
        })
        .map_err(|e| Error::io("publish", remote.url.clone(), e))?
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(Error::AlreadyExists(PathBuf::from(remote.url_of(CLAIM))));
            }
            Err(e) => return Err(remote.error("PUT", CLAIM, None, e)),
        }
    }
    let uploaded = (|| -> Result<()> {
        for f in &files[1..] {
            upload(&remote, &c, f, &name_of(f)?)?;
        }
        let bytes = std::fs::read(manifest).map_err(|e| Error::io("read", manifest, e))?;
        let (c2, key) = (c.clone(), remote.key(&mname));
        match block_on(async move { c2.put_opts(&key, PutPayload::from(bytes), create).await })
            .map_err(|e| Error::io("publish", remote.url.clone(), e))?
        {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(Error::AlreadyExists(PathBuf::from(remote.url_of(&mname))))
            }
            Err(e) => Err(remote.error("PUT", &mname, None, e)),
        }
    })();
    // The claim goes either way: a failed publish leaves no manifest, and gc finds its parts.
    let (c3, key) = (c.clone(), remote.key(CLAIM));
    let _ = block_on(async move { c3.delete(&key).await });
    uploaded
}

/// Uploads the local file `f` as object `name` of `remote`.
fn upload(remote: &Remote, c: &Arc<dyn ObjectStore>, f: &Path, name: &str) -> Result<()> {
    let len = std::fs::metadata(f)
        .map_err(|e| Error::io("stat", f, e))?
        .len();
    let key = remote.key(name);
    let c = c.clone();
    if len <= PART as u64 {
        let bytes = std::fs::read(f).map_err(|e| Error::io("read", f, e))?;
        let opts = PutOptions {
            attributes: typed(),
            ..PutOptions::default()
        };
        return block_on(async move { c.put_opts(&key, PutPayload::from(bytes), opts).await })
            .map_err(|e| Error::io("publish", remote.url.clone(), e))?
            .map(|_| ())
            .map_err(|e| remote.error("PUT", name, None, e));
    }
    let file = std::fs::File::open(f).map_err(|e| Error::io("open", f, e))?;
    let r = block_on(async move {
        use std::os::unix::fs::FileExt;
        let opts = PutMultipartOptions {
            attributes: typed(),
            ..PutMultipartOptions::default()
        };
        let up = c.put_multipart_opts(&key, opts).await?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(up, PART);
        let mut buf = vec![0u8; PART];
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(PART as u64) as usize;
            if let Err(e) = file.read_exact_at(&mut buf[..n], at) {
                let _ = w.abort().await;
                return Err(object_store::Error::Generic {
                    store: "zrecord publish",
                    source: Box::new(e),
                });
            }
            // At most two parts in flight besides the one being filled.
            w.wait_for_capacity(2).await?;
            w.write(&buf[..n]);
            at += n as u64;
        }
        w.finish().await.map(|_| ())
    })
    .map_err(|e| Error::io("publish", remote.url.clone(), e))?;
    r.map_err(|e| remote.error("PUT (multipart)", name, None, e))
}

/// What [`gc`] found under a prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects of unpublished containers (no manifest) that were removed, or would be under
    /// `dry_run`.
    pub orphans: Vec<String>,
    /// Whether the prefix holds a published container (then nothing is removed).
    pub published: bool,
}

/// Removes (or, with `dry_run`, lists) what a failed or killed [`publish_dir`] left at `url`: the
/// data objects and claim of a prefix without a manifest. A prefix with a manifest is a published
/// container and is left alone; so is a claim younger than `min_age_secs` (a publish that may
/// still be running).
pub fn gc(url: &str, opts: &RemoteOptions, min_age_secs: u64, dry_run: bool) -> Result<GcReport> {
    let remote = Remote::connect(url, opts)?;
    // The manifest is asked for by name before anything is listed: a published prefix is
    // reported and left alone whatever the server's listing holds (once, in the converter test
    // against SeaweedFS, the listing alone made a published prefix read as unpublished; not
    // reproduced since).
    if remote.head(crate::format::MANIFEST_FILE).is_ok() {
        return Ok(GcReport {
            published: true,
            ..GcReport::default()
        });
    }
    let c = remote.client()?;
    let prefix = remote.prefix.clone();
    let listed: Vec<object_store::ObjectMeta> = block_on({
        let c = c.clone();
        async move { c.list(Some(&prefix)).try_collect().await }
    })
    .map_err(|e| Error::io("list", remote.url.clone(), e))?
    .map_err(|e| remote.error("LIST", "", None, e))?;
    let under = |m: &object_store::ObjectMeta| {
        m.location
            .as_ref()
            .strip_prefix(remote.prefix.as_ref())
            .map(|s| s.trim_start_matches('/').to_string())
            .unwrap_or_else(|| m.location.to_string())
    };
    let names: Vec<(String, &object_store::ObjectMeta)> =
        listed.iter().map(|m| (under(m), m)).collect();
    let mut report = GcReport::default();
    if names.iter().any(|(n, _)| n == crate::format::MANIFEST_FILE) {
        report.published = true;
        return Ok(report);
    }
    if let Some((_, m)) = names.iter().find(|(n, _)| n == CLAIM) {
        let age = now_secs().saturating_sub(m.last_modified.timestamp().max(0) as u64);
        if age < min_age_secs {
            return Ok(report);
        }
    }
    // Only the container's own files (and the claim): never anything else a user keeps there.
    for (n, m) in &names {
        if n == CLAIM || crate::format::is_container_file(n) {
            report.orphans.push(remote.url_of(n));
            if !dry_run {
                let (c, key) = (c.clone(), m.location.clone());
                block_on(async move { c.delete(&key).await })
                    .map_err(|e| Error::io("gc", remote.url.clone(), e))?
                    .map_err(|e| remote.error("DELETE", n, None, e))?;
            }
        }
    }
    Ok(report)
}
