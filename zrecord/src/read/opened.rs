//! What a store or view reads: one container, or a dataset of parts ([`super::parts`]). The
//! getters every store and view share ask it, and a gather takes its arm once, before any record.

use std::path::Path;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{Codec, Kind};

use super::container::{Container, OpenOptions};
use super::parts::Parts;
use super::window::Window;

/// An opened container or dataset.
#[derive(Clone)]
pub(in crate::read) enum Opened {
    One(Arc<Container>),
    Parts(Arc<Parts>),
}

impl Opened {
    /// Opens `path` as a dataset when it holds versions, else as one container.
    pub(in crate::read) fn open(path: &Path, kind: Kind, opts: &OpenOptions) -> Result<Opened> {
        if let Some(p) = Parts::open(path, kind, opts)? {
            return Ok(Opened::Parts(Arc::new(p)));
        }
        if opts.version.is_some() {
            return Err(Error::invalid(format!(
                "{}: a version was asked for, but no dataset (no versions/) is there",
                path.display()
            )));
        }
        let path = match &opts.column {
            Some(c) => path.join(c),
            None => path.to_path_buf(),
        };
        Ok(Opened::One(Arc::new(Container::open(&path, kind, opts)?)))
    }

    pub(in crate::read) fn records(&self) -> u64 {
        match self {
            Opened::One(c) => c.records(),
            Opened::Parts(p) => p.records(),
        }
    }

    pub(in crate::read) fn dtype(&self) -> DType {
        match self {
            Opened::One(c) => c.dtype(),
            Opened::Parts(p) => p.schema().dtype,
        }
    }

    pub(in crate::read) fn codec(&self) -> Codec {
        match self {
            Opened::One(c) => c.codec(),
            Opened::Parts(p) => p.schema().codec,
        }
    }

    pub(in crate::read) fn item_shape(&self) -> &[u64] {
        match self {
            Opened::One(c) => c.item_shape(),
            Opened::Parts(p) => &p.schema().item_shape,
        }
    }

    pub(in crate::read) fn ndim(&self) -> u32 {
        match self {
            Opened::One(c) => c.ndim(),
            Opened::Parts(p) => p.schema().ndim,
        }
    }

    pub(in crate::read) fn record_bytes(&self) -> u64 {
        match self {
            Opened::One(c) => c.record_bytes(),
            Opened::Parts(p) => p.record_bytes(),
        }
    }

    /// A single `zstd_dict` container's dictionary (a dataset's parts each have their own).
    pub(in crate::read) fn dictionary(&self) -> Option<&[u8]> {
        match self {
            Opened::One(c) => c.dictionary(),
            Opened::Parts(_) => None,
        }
    }

    pub(in crate::read) fn is_closed(&self) -> bool {
        match self {
            Opened::One(c) => c.is_closed(),
            Opened::Parts(p) => p.is_closed(),
        }
    }

    pub(in crate::read) fn close(&self) {
        match self {
            Opened::One(c) => c.close(),
            Opened::Parts(p) => p.close(),
        }
    }

    /// The container directory, or the dataset's root.
    pub(in crate::read) fn path(&self) -> &Path {
        match self {
            Opened::One(c) => c.path(),
            Opened::Parts(p) => p.root(),
        }
    }

    /// The dataset version read (`None` for a single container).
    pub(in crate::read) fn version(&self) -> Option<u64> {
        match self {
            Opened::One(_) => None,
            Opened::Parts(p) => Some(p.version()),
        }
    }

    /// Record `i`'s shape (Ragged), from the index.
    pub(in crate::read) fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        match self {
            Opened::One(c) => {
                c.check_indices(&[i])?;
                let _index = c.check_pages(&[i])?;
                Ok(c.shape_words(i).collect())
            }
            Opened::Parts(p) => p.shape_of(i),
        }
    }

    /// Checks a gather of `idx`: the store is open and every index in range.
    pub(in crate::read) fn check_gather(&self, idx: &[u64]) -> Result<()> {
        match self {
            Opened::One(c) => {
                c.check_open()?;
                c.check_indices(idx)
            }
            Opened::Parts(p) => {
                p.check_open()?;
                p.check_indices(idx)
            }
        }
    }

    /// Allocated bytes on disk (all files; a dataset: the bytes its version lists for this
    /// column's parts).
    pub(in crate::read) fn disk_bytes(&self) -> u64 {
        match self {
            Opened::One(c) => c.disk_bytes(),
            Opened::Parts(p) => p.bytes(),
        }
    }

    /// The block buffer, when a reader asked for one.
    pub(in crate::read) fn window(&self) -> Option<&Window> {
        match self {
            Opened::One(c) => c.window.get(),
            Opened::Parts(p) => p.window.get(),
        }
    }

    /// Buffers blocks of `records` records, `blocks` of them at most (`read::window`), for
    /// every store and view of this one; again with the same shape is a no-op, another shape an
    /// error.
    pub(in crate::read) fn buffer_blocks(&self, records: u64, blocks: usize) -> Result<()> {
        let slot = match self {
            Opened::One(c) => &c.window,
            Opened::Parts(p) => &p.window,
        };
        let w = Window::new(records, blocks)?;
        if slot.set(w).is_err() {
            let (r, b) = slot.get().map_or((0, 0), Window::shape);
            if (r, b) != (records, blocks) {
                return Err(Error::invalid(format!(
                    "{}: its block buffer holds {b} blocks of {r} records already; another \
                     shape ({blocks} of {records}) needs the store opened again",
                    self.path().display()
                )));
            }
        }
        Ok(())
    }
}
