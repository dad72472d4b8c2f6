//! # benchkit: the workspace's measurement code
//!
//! Everything that measures rather than stores or loads, in one place, so that the harness, the
//! competitors' limit rows and the criterion benches time the same thing the same way:
//!
//! * [`copy`]: the copy limits, records copied into one output with `memcpy` or with the stores a
//!   zrecord gather of that size uses, split into zrecord's byte-balanced pieces over the pool;
//! * [`buffers`]: huge-page advised output buffers and a [`buffers::Recycler`] that hands a
//!   dropped batch's buffer to the next one, as a pooled allocator does;
//! * [`rng`]: the seeded generator ([`rng::SplitMix64`]) and its image-like bytes, plus uniform
//!   batch draws for any `rand` generator;
//! * [`lengths`]: corpus-shaped length distributions (WikiText-103 token records);
//! * [`stats`]: median, mean, sample SD and percentiles, each defined once;
//! * [`cache`]: the last-level cache size as zrecord's store rule reads it, and the cache list the
//!   machine receipt records;
//! * [`probe`]: this process's page faults and context switches (`getrusage`);
//! * [`seaweed`]: a real SeaweedFS server on loopback (master, volume servers, filer, S3
//!   gateway) that the object-storage tests and the harness's remote tables both start.
//!
//! It depends on zrecord's `internals` feature for the gather's own kernels and split (never
//! copies of them), and is a dependency of the harness and competitors and a dev-dependency of
//! the product crates' benches only: no product crate's normal build compiles it.
//!
//! The modules are leaves, except `lengths`, which draws with [`rng`].

pub mod buffers;
pub mod cache;
pub mod copy;
pub mod lengths;
pub mod probe;
pub mod rng;
pub mod seaweed;
pub mod stats;
