//! `loaderx.dataset`'s native half: commit, append, list, describe and clean up datasets of parts
//! (`zrecord::dataset`), local or on object storage, each call with the GIL released.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use zrecord::Kind;
use zrecord::dataset::{self, PartReceipt, VersionManifest};

use crate::errors::{IntoPyResult, guard};
use crate::remote::remote_options;

/// A version manifest as a dict: `version`, `records`, `columns` (name, kind, dtype, codec, ndim,
/// item_shape) and `parts` (name, records, bytes over its columns).
fn manifest_dict<'py>(py: Python<'py>, m: &VersionManifest) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", m.version)?;
    d.set_item("records", m.records())?;
    let cols = PyList::empty(py);
    for c in &m.columns {
        let e = PyDict::new(py);
        e.set_item("name", &c.name)?;
        e.set_item(
            "kind",
            match c.kind {
                Kind::Dense => "dense",
                Kind::Ragged => "ragged",
            },
        )?;
        e.set_item("dtype", c.dtype.name())?;
        e.set_item("codec", c.codec.name())?;
        e.set_item("ndim", c.ndim)?;
        e.set_item("item_shape", c.item_shape.clone())?;
        cols.append(e)?;
    }
    d.set_item("columns", cols)?;
    let parts = PyList::empty(py);
    for p in &m.parts {
        let e = PyDict::new(py);
        e.set_item("name", &p.name)?;
        e.set_item("records", p.records)?;
        e.set_item("bytes", p.columns.iter().map(|c| c.bytes).sum::<u64>())?;
        parts.append(e)?;
    }
    d.set_item("parts", parts)?;
    Ok(d)
}

/// What a commit lists: part names, or writers' receipts (bytes from `_dataset_describe_part`).
#[derive(FromPyObject)]
pub(crate) enum Listed {
    Names(Vec<String>),
    Receipts(Vec<Vec<u8>>),
}

/// Commits a version listing exactly `parts` (`append=True`: the newest version's parts, then
/// `parts`): names (each part's manifests are read) or receipts (none is). Raises
/// `CommitConflictError` when another commit took the version first.
#[pyfunction]
#[pyo3(signature = (root, parts, *, append = false, storage_options = None))]
pub(crate) fn _dataset_commit<'py>(
    py: Python<'py>,
    root: PathBuf,
    parts: Listed,
    append: bool,
    storage_options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let o = remote_options(storage_options)?;
    let m = py
        .detach(|| {
            guard(|| match &parts {
                Listed::Names(parts) if append => dataset::append(&root, parts, &o),
                Listed::Names(parts) => dataset::commit(&root, parts, &o),
                Listed::Receipts(bytes) => {
                    let receipts = bytes
                        .iter()
                        .map(|b| PartReceipt::decode(b))
                        .collect::<zrecord::Result<Vec<_>>>()?;
                    if append {
                        dataset::append_described(&root, &receipts, &o)
                    } else {
                        dataset::commit_described(&root, &receipts, &o)
                    }
                }
            })
        })
        .py_err(py)?;
    manifest_dict(py, &m)
}

/// Part `part`'s receipt (its manifests read here): bytes a committer publishes it by.
#[pyfunction]
#[pyo3(signature = (root, part, *, storage_options = None))]
pub(crate) fn _dataset_describe_part<'py>(
    py: Python<'py>,
    root: PathBuf,
    part: String,
    storage_options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let o = remote_options(storage_options)?;
    let r = py
        .detach(|| guard(|| dataset::describe_part(&root, &part, &o)))
        .py_err(py)?;
    Ok(PyBytes::new(py, &r.encode()))
}

/// The committed versions, oldest first.
#[pyfunction]
#[pyo3(signature = (root, *, storage_options = None))]
pub(crate) fn _dataset_versions(
    py: Python<'_>,
    root: PathBuf,
    storage_options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<u64>> {
    let o = remote_options(storage_options)?;
    py.detach(|| guard(|| dataset::versions(&root, &o)))
        .py_err(py)
}

/// Version `version` (None: the newest) as a dict, or None where no version is committed.
#[pyfunction]
#[pyo3(signature = (root, version = None, *, storage_options = None))]
pub(crate) fn _dataset_info<'py>(
    py: Python<'py>,
    root: PathBuf,
    version: Option<u64>,
    storage_options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let o = remote_options(storage_options)?;
    let m = py
        .detach(|| guard(|| dataset::read_version(&root, version, &o)))
        .py_err(py)?;
    m.map(|m| manifest_dict(py, &m)).transpose()
}

/// Lists (`dry_run`) or removes the parts no version lists, older than `min_age_secs`.
#[pyfunction]
#[pyo3(signature = (root, *, min_age_secs = 3600, dry_run = true, storage_options = None))]
pub(crate) fn _dataset_gc<'py>(
    py: Python<'py>,
    root: PathBuf,
    min_age_secs: u64,
    dry_run: bool,
    storage_options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let o = remote_options(storage_options)?;
    let r = py
        .detach(|| guard(|| dataset::gc(&root, min_age_secs, dry_run, &o)))
        .py_err(py)?;
    let d = PyDict::new(py);
    d.set_item("versions", r.versions)?;
    d.set_item("removed", r.removed)?;
    d.set_item("files", r.files)?;
    d.set_item("young", r.young)?;
    d.set_item("dry_run", r.dry_run)?;
    Ok(d)
}

/// Where part `part`'s container (of `column`) lives under `root`.
#[pyfunction]
#[pyo3(signature = (root, part, column = None))]
pub(crate) fn _dataset_part_path(root: PathBuf, part: &str, column: Option<&str>) -> String {
    dataset::part_path(root, part, column)
        .to_string_lossy()
        .into_owned()
}

/// A fresh part name, unique across writers (`tag` first, when given).
#[pyfunction]
#[pyo3(signature = (tag = ""))]
pub(crate) fn _dataset_new_part_name(py: Python<'_>, tag: &str) -> PyResult<String> {
    guard(|| dataset::new_part_name(tag)).py_err(py)
}
