//! [`WriterOptions`], shared by both writers, and their defaults.

use std::fmt;
use std::sync::Arc;

use crate::vfs::{StdFs, Vfs};

/// Default number of data shards.
pub const DEFAULT_DATA_SHARDS: u32 = 4;
/// Default zstd level.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Options shared by both writers.
#[derive(Clone)]
pub struct WriterOptions {
    /// Number of data shard files, `1..=255` (default 4). Shards are encoded and written in parallel.
    pub data_shards: u32,
    /// Dictionary for `Codec::ZstdDict` (required there, refused otherwise).
    pub dict: Option<Vec<u8>>,
    /// zstd level for the zstd codecs (default 3).
    pub zstd_level: i32,
    /// Records per placement block (`block_records`: consecutive records a shard holds before
    /// the next shard's turn; docs/format.md, Record placement). `None` (the default): the
    /// writer's choice, about 256 KiB of records (Dense: by the record size; Ragged: by the first
    /// append's mean record, at least 64 and at most 65,536 records).
    pub block_records: Option<u64>,
    /// fsync every file and directory on `close()` (default `true`). `false` still publishes
    /// atomically (readers and crashed processes never see a partial container) but the container
    /// may be lost or incomplete after a power failure; benchmarks use it to exclude stable-media
    /// sync from write timing, as the published methodology does.
    pub sync: bool,
    /// File system used for every operation (default: the real one).
    pub vfs: Arc<dyn Vfs>,
    /// How a container created at a URL (`s3://`, ...; feature `remote`) is uploaded: it is
    /// written to a local staging directory (under `TMPDIR`) and published to the URL by
    /// `close()` (`zrecord::remote::publish_dir`: manifest last, conditional create).
    pub remote: crate::read::RemoteOptions,
    /// Test-only protocol mutations for the crash-simulation suite.
    #[cfg(feature = "mutations")]
    pub mutation: Option<crate::publish::Mutation>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            data_shards: DEFAULT_DATA_SHARDS,
            dict: None,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            block_records: None,
            sync: true,
            vfs: Arc::new(StdFs),
            remote: crate::read::RemoteOptions::default(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

impl fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterOptions")
            .field("data_shards", &self.data_shards)
            .field("dict_bytes", &self.dict.as_ref().map(Vec::len))
            .field("zstd_level", &self.zstd_level)
            .field("block_records", &self.block_records)
            .finish()
    }
}
