//! `Loader.pack(...)`: the loader's Ragged token stream packed in Rust (`loaderx::Packer`) into
//! `{"tokens", "segment_ids", "positions"}` DLPack tensors of shape `[batch_size, seq_len]`, and
//! the packer's part of `state_dict()` / `load_state_dict()` (the `"pack"` entry).

use loaderx::{Loader, PackMode, PackOptions, PackState, PackedBatch, PackedState, Packer, Shard};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{CoreError, InvalidInputError};
use crate::gpu::{Placement, place};
use crate::tensor::PyDLTensor;

/// The key of the packer's state in a packing loader's `state_dict()`.
pub(crate) const PACK_KEY: &str = "pack";

/// A packing loader's packer and where its batches are placed.
pub(crate) struct Packing {
    pub(crate) packer: Packer,
    pub(crate) placement: Placement,
}

/// The packer over `loader`'s stream `stream`, from the Python arguments.
pub(crate) fn packer<T: Send + 'static>(
    loader: &Loader<T>,
    stream: &str,
    seq_len: usize,
    batch_size: usize,
    mode: &str,
    pool: usize,
) -> Result<Packer, CoreError> {
    let mode = PackMode::from_name(mode).ok_or_else(|| {
        loaderx::Error::InvalidArgument(format!(
            "mode must be \"concat\" or \"first_fit\", got {mode:?}"
        ))
    })?;
    let opts = PackOptions {
        seq_len,
        rows: batch_size,
        mode,
        pool,
    };
    Ok(Packer::new(loader, stream, opts)?)
}

/// The next packed batch as its three tensors (called with the GIL released).
pub(crate) fn next<T: Send + 'static>(
    p: &mut Packing,
    loader: &mut Loader<T>,
    shards: impl Fn(T) -> loaderx::Result<Vec<Shard>>,
) -> Result<Option<Tensors>, CoreError> {
    match p.packer.next_from(loader, shards) {
        None => Ok(None),
        Some(b) => to_tensors(b?, &p.placement).map(Some),
    }
}

/// A packed batch's tensors as the dict a packing loader yields.
pub(crate) fn to_dict(py: Python<'_>, (tokens, seg, pos): Tensors) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item("tokens", Py::new(py, tokens)?)?;
    d.set_item("segment_ids", Py::new(py, seg)?)?;
    d.set_item("positions", Py::new(py, pos)?)?;
    Ok(d.into_any().unbind())
}

pub(crate) type Tensors = (PyDLTensor, PyDLTensor, PyDLTensor);

fn to_tensors(b: PackedBatch, placement: &Placement) -> Result<Tensors, CoreError> {
    let shape = vec![b.rows as u64, b.seq_len as u64];
    let one = |a, dtype| -> Result<PyDLTensor, CoreError> {
        let (a, gpu) = place(placement, a)?;
        Ok(PyDLTensor::new(a, 0, shape.clone(), dtype).with_gpu(&gpu))
    };
    Ok((
        one(b.tokens, b.dtype)?,
        one(b.segment_ids, zrecord::DType::Int32)?,
        one(b.positions, zrecord::DType::Int32)?,
    ))
}

/// The loader state to save (the one before the step the packer holds) and the packer's own,
/// both as JSON.
pub(crate) fn state_json<T: Send + 'static>(p: &Packing, loader: &Loader<T>) -> (String, String) {
    let s = p.packer.state_dict(loader);
    (s.loader.to_json(), s.pack.to_json())
}

/// Loads a loader state and a packer state (JSON) into `loader` and `p`.
pub(crate) fn load<T: Send + 'static>(
    p: &mut Packing,
    loader: &mut Loader<T>,
    loader_json: &str,
    pack_json: &str,
) -> Result<(), CoreError> {
    let state = PackedState {
        loader: loaderx::LoaderState::from_json(loader_json)?,
        pack: PackState::from_json(pack_json)?,
    };
    Ok(p.packer.load_state_dict(loader, &state)?)
}

/// The error of a state whose `"pack"` entry does not match the loader (`saved`: the state has
/// one).
pub(crate) fn mismatch(saved: bool) -> CoreError {
    let why = if saved {
        "invalid argument: the state was saved by a packing loader: call loader.pack(...) with \
         the same arguments before load_state_dict"
    } else {
        "invalid argument: the state has no \"pack\" entry but this loader packs: load a state \
         saved by a loader packed the same way"
    };
    CoreError::Py(InvalidInputError::new_err, why.into())
}

// `Loader.pack`'s signature spells the default pool as a literal (the stub shows it).
const _: () = assert!(loaderx::pack::DEFAULT_POOL == 32);
