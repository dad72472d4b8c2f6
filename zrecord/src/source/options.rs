//! What reaching a store on object storage takes ([`RemoteOptions`], feature `remote`) and what
//! its node-local cache reports ([`CacheStats`]): plain data, shared by the read path (which
//! carries them in `OpenOptions` and reports the stats), the writers (a publish to a URL) and
//! the object-store client.

use std::fmt;

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
    /// What one request costs, in bytes a connection would move in its latency (default 256
    /// KiB). A gather merges neighbouring records of a shard into one request where that costs
    /// least: requests go out in waves of `concurrency`, each wave costs one request, and every
    /// byte read (gaps included) its own; so scattered records that fit in few waves get a
    /// request each, and close ones share one.
    pub gap: u64,
    /// The longest request that merges several records (default 8 MiB).
    pub max_span: u64,
    /// A cap on the retries of one failed request (default unbounded: the deadline ends them).
    pub max_retries: usize,
    /// The retry deadline: a failed request (5xx and `503 SlowDown`, `429`, `408`, a refused or
    /// reset connection, a timed-out read) is retried with jittered backoff of 100 ms to 2 s, and
    /// no retry starts later than this after the first attempt (default 30 s). Each attempt is
    /// also bounded by the `timeout` storage option (`object_store`'s default: 30 s; connecting:
    /// `connect_timeout`, 5 s), so a stalled store fails a read within about `retry_timeout` +
    /// `timeout` + 2 s.
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
            max_retries: usize::MAX,
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

/// The requests a store on object storage made through its connection in this process, and the
/// bytes they received: every GET (ranged or whole), `HEAD` and listing, retries not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Requests made.
    pub requests: u64,
    /// Bytes received.
    pub bytes: u64,
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
