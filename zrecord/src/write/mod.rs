//! Writing, in data-path order: [`options`] holds what both writers take, [`writer`] is the
//! writer generic over the record layout, [`dense`] and [`ragged`] check and append records, [`container`] is the container under construction both
//! share (parallel per-shard encode, index entries, the manifest on close) and [`shard`] encodes
//! into one shard file and into the index. Publishing the finished directory is
//! [`crate::publish`]'s.
//!
//! This module only declares its children and re-exports their public items; the children never
//! import it (the module graph stays acyclic).

mod container;
mod dense;
mod options;
mod ragged;
pub use ragged::check_ragged_batch;
mod shard;
mod writer;

pub use options::{DEFAULT_DATA_SHARDS, DEFAULT_ZSTD_LEVEL, WriterOptions};
pub use shard::WRITE_BUFFER;
pub use writer::{DenseWriter, RaggedWriter, Writer};
