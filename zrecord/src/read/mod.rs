//! Reading, in data-path order: [`container`] opens and validates a container and answers where
//! each record is, [`store`] and [`view`] hold the public store and view types, [`gather`] fans a gather out
//! over the rayon pool, [`record`] prefetches, checks and decodes each record, [`batch`] holds
//! the batches a gather returns, and [`verify`] is the full check behind `verify()`.
//!
//! This module only declares its children and re-exports their public items; the children never
//! import it (the module graph stays acyclic).

mod batch;
mod cold;
mod container;
mod direct;
mod gather;
mod hint;
mod piece;
mod record;
mod store;
#[cfg(target_os = "linux")]
mod uring;
mod verify;
mod view;

pub use batch::{DenseBatch, OUTPUT_ALIGN, RaggedBatch};
pub use container::{ColdReads, OpenOptions, RecordExtent, container_files};
#[cfg(feature = "mutations")]
pub use direct::with_blocking_direct_reads;
pub(crate) use gather::stores_for;
pub use gather::{gather_fan_outs, sequential_gathers};
pub use store::{DenseStore, RaggedStore};
pub use view::{DenseView, RaggedView, ViewGather};
