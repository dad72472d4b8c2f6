//! Test data shared by zrecord's test suites (each declares `mod support;` and imports what it
//! uses, usually `use support::*;`):
//!
//! * [`seeded`]: seeded generators (bytes, dictionaries, seeds and counts from the environment);
//! * [`fixtures`]: fixture containers and their oracles, and the read-back check;
//! * [`memfs`]: an in-memory [`zrecord::Vfs`] that logs every mutating operation;
//! * [`crash`]: the crash model that turns that log into power-loss images;
//! * [`fault`]: a [`zrecord::Vfs`] wrapper that injects I/O errors and audits fsyncs;
//! * [`tally`]: the `RELIABILITY` lines the reliability suites print;
//! * `seaweed` (feature `remote`): a real SeaweedFS server on loopback, and a test deadline.
//!
//! The golden containers of `compat.rs` keep their own generators: their formulas define
//! committed bytes.
#![allow(dead_code, unused_imports)]

pub mod crash;
pub mod fault;
pub mod fixtures;
pub mod memfs;
#[cfg(feature = "remote")]
pub mod seaweed;
pub mod seeded;
pub mod tally;

pub use crash::*;
pub use fault::*;
pub use fixtures::*;
pub use memfs::*;
pub use seeded::*;
pub use tally::*;
