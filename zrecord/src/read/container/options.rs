//! How a store is opened: [`OpenOptions`] and the cold-read policy it carries, [`ColdReads`].

use std::fmt;
use std::sync::Arc;

use crate::vfs::{StdFs, Vfs};

/// How to open a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Verify each record's CRC32C on every read (default `true`).
    pub verify: bool,
    /// File system to read through.
    pub vfs: Arc<dyn Vfs>,
    /// When a gather requests all of its records from the device before copying (default
    /// [`ColdReads::Auto`]).
    pub cold_reads: ColdReads,
    /// Whether the store's files are memory-mapped: `None` (the default) maps them except on a
    /// shared or network file system ([`Vfs::shared_fs`]: NFS, SMB, FUSE, Lustre, ...), where
    /// another host may shrink a file under the map and they are read with positional reads
    /// instead; `Some(true)` always maps, `Some(false)` never does. An unmapped store holds its
    /// whole index in memory and reads each gather's records as coalesced ranges of its shards
    /// (`read::engine::positional`).
    pub mmap: Option<bool>,
    /// How a store on object storage (a URL path: `s3://`, `gs://`, `az://`, `http(s)://`) is
    /// reached (feature `remote`).
    pub remote: RemoteOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify: true,
            vfs: Arc::new(StdFs),
            cold_reads: ColdReads::Auto,
            mmap: None,
            remote: RemoteOptions::default(),
        }
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("verify", &self.verify)
            .field("cold_reads", &self.cold_reads)
            .field("mmap", &self.mmap)
            .field("remote", &self.remote)
            .finish()
    }
}

/// When a gather first asks the kernel to read all of its records (see `docs/performance.md`,
/// "Cold reads").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColdReads {
    /// Probe the page-cache residency of a few of the batch's records (`mincore`, one call
    /// each) and take the cold path when any of them is not resident: raw records are read past
    /// the page cache (`O_DIRECT`) when the store's shards hold more than half of the machine's
    /// memory, else every record is requested through the page cache (read-ahead), so a store
    /// that fits in memory becomes warm over its first epoch. The default.
    #[default]
    Auto,
    /// For a store known to be larger than memory: no probe; every gather of raw records reads
    /// them past the page cache (`O_DIRECT`), compressed ones are requested through it.
    Always,
    /// Never: every gather is a plain copy, faulting pages in one at a time.
    Never,
}

/// How a store on object storage is reached and read (feature `remote`).
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteOptions {
    /// `object_store` configuration keys and values, as Lance and obstore take them
    /// (`endpoint`, `region`, `allow_http`, `access_key_id`, `secret_access_key`, ...): they
    /// override what the environment gives (`AWS_*`, `GOOGLE_*`, `AZURE_*`). An unknown key is an
    /// error.
    pub storage_options: Vec<(String, String)>,
    /// Range requests in flight per gather (default 32).
    pub concurrency: usize,
    /// Records of one shard whose stored bytes lie at most this far apart are fetched by one
    /// request (default 256 KiB: a request costs more than that many bytes on the wire).
    pub gap: u64,
    /// The longest request that merges several records (default 8 MiB).
    pub max_span: u64,
    /// Retries of a failed request (5xx, timeout, reset) with exponential backoff (default 5).
    pub max_retries: usize,
    /// No retry starts later than this after the first attempt (default 30 s).
    pub retry_timeout: std::time::Duration,
    /// A node-local cache of the store's shard blocks on this directory (default none), shared
    /// by every process and thread of the node that opens stores with it (`remote::cache`).
    pub cache_dir: Option<std::path::PathBuf>,
    /// The cache's bound in bytes of block files (default 10 GiB); least recently used blocks
    /// are evicted past it.
    pub cache_bytes: u64,
    /// The cache's block: the unit it fetches, keeps and evicts, a multiple of 4 KiB (default
    /// 256 KiB, the gap at which neighbouring records already share a request).
    pub cache_block: u64,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            storage_options: Vec::new(),
            concurrency: 32,
            gap: 256 << 10,
            max_span: 8 << 20,
            max_retries: 5,
            retry_timeout: std::time::Duration::from_secs(30),
            cache_dir: None,
            cache_bytes: 10 << 30,
            cache_block: 256 << 10,
        }
    }
}

impl fmt::Debug for RemoteOptions {
    /// Option values are not printed: they may hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self
            .storage_options
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        f.debug_struct("RemoteOptions")
            .field("storage_options (keys)", &keys)
            .field("concurrency", &self.concurrency)
            .field("gap", &self.gap)
            .field("max_span", &self.max_span)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("cache_dir", &self.cache_dir)
            .field("cache_bytes", &self.cache_bytes)
            .field("cache_block", &self.cache_block)
            .finish()
    }
}

/// What a remote store's node-local cache (`RemoteOptions::cache_dir`) has done for one opening
/// of the store in this process, in blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks read from the cache.
    pub hits: u64,
    /// Blocks the cache did not hold (fetched from the object store).
    pub misses: u64,
    /// Blocks written into the cache.
    pub fills: u64,
    /// Cached blocks that failed their check, were removed and fetched again.
    pub corrupt: u64,
    /// Blocks this process removed to keep the bound.
    pub evicted: u64,
    /// The first error the cache met in this process (it then acted as a miss), if any.
    pub last_error: Option<String>,
}
