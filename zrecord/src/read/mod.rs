//! Reading, in data-path order: [`open`] validates a container, [`store`] holds the public store
//! and view types, [`gather`] fans a gather out over the rayon pool, [`fixed`] places a raw
//! Dense store's records without its index, [`record`] locates, prefetches, checks and decodes
//! each record, [`batch`] holds the batches a gather returns, and [`verify`] is the full check
//! behind `verify()`.
//!
//! This module only declares its children and re-exports their public items; the children never
//! import it (the module graph stays acyclic).

mod batch;
mod cold;
mod direct;
mod fixed;
mod gather;
mod open;
mod piece;
mod record;
mod store;
#[cfg(target_os = "linux")]
mod uring;
mod verify;

pub use batch::{DenseBatch, OUTPUT_ALIGN, RaggedBatch};
pub use cold::RecordExtent;
#[cfg(feature = "mutations")]
pub use direct::with_blocking_direct_reads;
pub(crate) use gather::stores_for;
pub use gather::{gather_fan_outs, sequential_gathers};
pub use open::{ColdReads, OpenOptions, container_files};
pub use store::{DenseStore, DenseView, RaggedStore, RaggedView, ViewGather};

/// `direct::split_output` for the crate: the `internals` feature exposes it to the benchmarks.
#[cfg(feature = "internals")]
pub(crate) fn split_output<'o, F: Fn(usize) -> usize>(
    n: usize,
    out: &'o mut [u8],
    offsets: &F,
    pieces: usize,
) -> Vec<(usize, usize, &'o mut [u8])> {
    direct::split_output(n, out, offsets, pieces)
}
