//! [`Writer`]: a new container of layout `L`, with its layout's faces [`DenseWriter`] and
//! [`RaggedWriter`]. What both layouts share is here; how each checks its shape and its input and
//! hands records to the container is in [`super::dense`] and [`super::ragged`].

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use crate::dtype::DType;
use crate::error::Result;
use crate::format::{Codec, Kind};
use crate::read::{Dense, Layout, Ragged};

use super::container::{Core, Shape};
use super::options::WriterOptions;

/// Writes a new container of layout `L`. Nothing is visible at its path until
/// [`close`](Self::close) returns; a dropped writer leaves nothing.
pub struct Writer<L: Layout> {
    pub(super) core: Core,
    layout: PhantomData<fn() -> L>,
}

/// Writes a new Dense container: one fixed-shape array per record.
pub type DenseWriter = Writer<Dense>;

/// Writes a new Ragged container: variable-shape arrays of one dtype and rank.
pub type RaggedWriter = Writer<Ragged>;

impl<L: Layout> Writer<L> {
    /// Starts the container at `path` with records of `shape`, grouped `block` consecutive
    /// records to a shard.
    pub(super) fn start(
        path: &Path,
        dtype: DType,
        shape: Shape,
        block: u64,
        codec: Codec,
        opts: WriterOptions,
    ) -> Result<Self> {
        Ok(Writer {
            core: Core::create(path, L::KIND, dtype, shape, block, codec, opts)?,
            layout: PhantomData,
        })
    }

    /// Records appended so far.
    pub fn len(&self) -> u64 {
        self.core.records
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.core.records == 0
    }

    /// Publishes the container: fsync every file and the temp directory, rename it into place
    /// without replacing anything, fsync the parent. On error nothing is published.
    pub fn close(mut self) -> Result<()> {
        self.core.publish()
    }
}

impl<L: Layout> fmt::Debug for Writer<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.core;
        let mut d = f.debug_struct(&format!("{}Writer", L::NAME));
        d.field("path", &c.final_path()).field("dtype", &c.dtype);
        match L::KIND {
            Kind::Dense => d.field("item_shape", &c.shape.item_shape),
            Kind::Ragged => d.field("ndim", &c.shape.ndim),
        };
        d.field("codec", &c.codec)
            .field("records", &c.records)
            .finish()
    }
}
