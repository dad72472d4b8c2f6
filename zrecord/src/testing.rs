//! Test hooks (feature `testing`, never in production builds): what the crate's own suites reach
//! into that no user of the container should.
//!
//! * [`Mutation`]: deliberate breakages of the publish protocol (a skipped fsync, the rename
//!   before the syncs), set through `WriterOptions::mutation`, with which the crash-simulation
//!   suite (`tests/crash_sim.rs`) proves it finds a broken protocol;
//! * [`with_blocking_direct_reads`]: the gathers of a closure make their direct reads with
//!   blocking readers even where io_uring is available, so the tests reach both engines.

pub use crate::publish::Mutation;
pub use crate::read::with_blocking_direct_reads;
