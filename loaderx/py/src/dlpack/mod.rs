//! Hand-written DLPack 1.x ABI, in three parts: [`ffi`] (the C structs and constants), [`export`]
//! (loaderx allocations out as versioned or legacy capsules) and [`import`] (foreign CPU tensors
//! in, for append and indexing).
//!
//! The capsule pointer is the `DLManagedTensor(Versioned)*` itself; a consumer takes ownership by
//! renaming the capsule, otherwise the capsule destructor calls the deleter.
//!
//! This module knows nothing of the binding's Python classes: `crate::tensor` builds on it.

pub(crate) mod export;
pub(crate) mod ffi;
pub(crate) mod import;

pub(crate) use export::export;
pub(crate) use ffi::DLPackVersion;
pub(crate) use import::{Imported, import_foreign};
