//! Test data shared by zrecord's test suites (each declares `mod support;` and imports what it
//! uses, usually `use support::*;`):
//!
//! * [`seeded`]: seeded generators (bytes, dictionaries, seeds and counts from the environment);
//! * [`fixtures`]: fixture containers and their oracles, and the read-back check;
//! * [`memfs`]: an in-memory [`Fs`] that logs every mutating operation;
//! * [`crash`]: the crash model that turns that log into power-loss images;
//! * [`fault`]: an [`Fs`] wrapper that injects I/O errors and audits fsyncs;
//! * [`tally`]: the `RELIABILITY` lines the reliability suites print;
//! * `seaweed` (feature `remote`): a real SeaweedFS server on loopback, and a test deadline;
//!   `s3`: the options a store on it opens with and a plain client to tamper with its objects.
//!
//! The golden containers of `compat.rs` keep their own generators: their formulas define
//! committed bytes.
#![allow(dead_code, unused_imports)]

pub mod crash;
pub mod fault;
pub mod fixtures;
pub mod memfs;
#[cfg(feature = "remote")]
pub mod s3;
#[cfg(feature = "remote")]
pub mod seaweed;
pub mod seeded;
pub mod tally;

/// A file system both sides use: what writers and publish do ([`zrecord::Vfs`]) and how reads
/// open files ([`zrecord::ReadFs`]), as the in-memory and faulty test file systems provide.
pub trait Fs: zrecord::Vfs + zrecord::ReadFs {}
impl<T: zrecord::Vfs + zrecord::ReadFs + ?Sized> Fs for T {}

pub use crash::*;
pub use fault::*;
pub use fixtures::*;
pub use memfs::*;
pub use seeded::*;
pub use tally::*;
