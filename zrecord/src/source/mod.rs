//! The read side of a store's files, below both the read path (`crate::read`) and the
//! object-store client (`crate::remote`), importing neither:
//!
//! * [`file`]: [`ReadFile`], one file as a reader sees it: its length, its bytes borrowed where
//!   it is mapped (or held in memory), range reads into a caller's buffer
//!   ([`ReadFile::read_exact_at`], [`ReadFile::read_range`]: a page of an index or a block of a
//!   shard, locally from the map or with `pread`, remotely with a ranged GET) and, where the file
//!   system has them, the descriptor for reads past the page cache that the direct and io_uring
//!   engines queue ([`ReadFile::direct`]). A local file implements it ([`local`]: mapped or
//!   positional), and so does a shard object of a remote store;
//! * [`open`]: [`Opener`], where a store's files are opened from (a local file system through
//!   its [`ReadFs`], or an object store), and [`RangeFetch`] (feature `remote`), a remote store's
//!   client as the remote read engine uses it: many ranges of its objects fetched at once, its
//!   options and its node-local cache;
//! * [`options`]: [`RemoteOptions`] and [`CacheStats`]; [`cache`] (feature `remote`): the
//!   node-local cache of remote stores' blocks.
//!
//! The module above both sides that wires a store's path to its opener is `crate::backend`.
//! This module only declares its children and re-exports their items; they never import it.

#[cfg(feature = "remote")]
pub(crate) mod cache;
mod file;
mod local;
mod open;
mod options;

pub use file::{DIRECT_ALIGN, ReadFile, URL_SCHEMES, url_of};
pub(crate) use local::{open_mapped, open_unmapped};
pub use open::ReadFs;
pub(crate) use open::{Opener, Prefetch};
#[cfg(feature = "remote")]
pub(crate) use open::{RangeFetch, fetch_tagged};
pub use options::{CacheStats, RemoteOptions, RequestStats};
