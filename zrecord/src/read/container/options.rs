//! How a store is opened: [`OpenOptions`] and the cold-read policy it carries, [`ColdReads`].

use std::fmt;
use std::sync::Arc;

use crate::source::RemoteOptions;
use crate::vfs::{ReadFs, StdFs};

/// How to open a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Verify each record's CRC32C on every read (default `true`).
    pub verify: bool,
    /// The local file system a store's files are read through (its read side, [`ReadFs`]; the
    /// default [`StdFs`]). A store on object storage is read through its client instead.
    pub vfs: Arc<dyn ReadFs>,
    /// When a gather requests all of its records from the device before copying (default
    /// [`ColdReads::Auto`]).
    pub cold_reads: ColdReads,
    /// Whether the store's files are memory-mapped: `None` (the default) maps them except on a
    /// shared or network file system ([`ReadFs::shared_fs`]: NFS, SMB, FUSE, Lustre, ...), where
    /// another host may shrink a file under the map and they are read with positional reads
    /// instead; `Some(true)` always maps, `Some(false)` never does. An unmapped store holds its
    /// whole index in memory and reads each gather's records as coalesced ranges of its shards
    /// (`read::engine::positional`).
    pub mmap: Option<bool>,
    /// How a store on object storage (a URL path: `s3://`, `gs://`, `az://`, `http(s)://`) is
    /// reached (feature `remote`).
    pub remote: RemoteOptions,
    /// The version of a dataset of parts to open (`None`: its newest). Refused for a single
    /// container.
    pub version: Option<u64>,
    /// The column to open, of a dataset of several columns (or of a converter's root of one
    /// container per column: the container `path/<column>`).
    pub column: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify: true,
            vfs: Arc::new(StdFs),
            cold_reads: ColdReads::Auto,
            mmap: None,
            remote: RemoteOptions::default(),
            version: None,
            column: None,
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
            .field("version", &self.version)
            .field("column", &self.column)
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
