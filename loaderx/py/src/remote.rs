//! `storage_options=`: the object-storage settings of a store or writer at a URL, as Lance and
//! obstore take them (a dict of `object_store` configuration keys), turned into zrecord's
//! `RemoteOptions`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use zrecord::RemoteOptions;

use crate::errors::InvalidTypeError;

/// The options of `storage_options` (a dict of str keys; values str, bool or numbers), or the
/// defaults. Booleans become `"true"` / `"false"`, as `object_store` spells them.
pub(crate) fn remote_options(
    storage_options: Option<&Bound<'_, PyDict>>,
) -> PyResult<RemoteOptions> {
    let mut o = RemoteOptions::default();
    let Some(d) = storage_options else {
        return Ok(o);
    };
    for (k, v) in d.iter() {
        let key: String = k
            .extract()
            .map_err(|_| InvalidTypeError::new_err("storage_options keys must be str"))?;
        let value = if let Ok(b) = v.cast::<PyBool>() {
            if b.is_true() {
                "true".to_string()
            } else {
                "false".to_string()
            }
        } else {
            v.str()?.to_string()
        };
        o.storage_options.push((key, value));
    }
    Ok(o)
}

/// `storage_options` back as the dict it came from (for pickling).
pub(crate) fn options_dict<'py>(
    py: Python<'py>,
    o: &RemoteOptions,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    if o.storage_options.is_empty() {
        return Ok(None);
    }
    let d = PyDict::new(py);
    for (k, v) in &o.storage_options {
        d.set_item(k, v)?;
    }
    Ok(Some(d))
}

/// The node-local cache keywords (`cache_dir`, `cache_bytes`, `cache_block`) into `o`; a size
/// given without `cache_dir` is an error (it would do nothing).
pub(crate) fn with_cache(
    mut o: RemoteOptions,
    cache_dir: Option<std::path::PathBuf>,
    cache_bytes: Option<u64>,
    cache_block: Option<u64>,
) -> PyResult<RemoteOptions> {
    if cache_dir.is_none() && (cache_bytes.is_some() || cache_block.is_some()) {
        return Err(crate::errors::InvalidInputError::new_err(
            "cache_bytes and cache_block need cache_dir (the node-local cache's directory)",
        ));
    }
    o.cache_dir = cache_dir;
    if let Some(b) = cache_bytes {
        o.cache_bytes = b;
    }
    if let Some(b) = cache_block {
        o.cache_block = b;
    }
    Ok(o)
}

/// The cache keywords back as a dict (for pickling), or None without a cache.
pub(crate) fn cache_dict<'py>(
    py: Python<'py>,
    o: &RemoteOptions,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(dir) = &o.cache_dir else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("cache_dir", dir)?;
    d.set_item("cache_bytes", o.cache_bytes)?;
    d.set_item("cache_block", o.cache_block)?;
    Ok(Some(d))
}

/// `store.cache_stats`: a dict of the cache's counts in this process, or None without a cache.
pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    s: Option<zrecord::CacheStats>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(s) = s else { return Ok(None) };
    let d = PyDict::new(py);
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("fills", s.fills)?;
    d.set_item("corrupt", s.corrupt)?;
    d.set_item("evicted", s.evicted)?;
    d.set_item("last_error", s.last_error)?;
    Ok(Some(d))
}

/// Publishes the local container at `path` to `url` (a prefix no container holds yet):
/// uploaded, then its manifest created last with a conditional create, so readers never see a
/// partial container and a second publisher gets `AlreadyExistsError`.
#[cfg(feature = "remote")]
#[pyfunction]
#[pyo3(signature = (path, url, *, storage_options = None))]
pub(crate) fn publish(
    py: Python<'_>,
    path: std::path::PathBuf,
    url: String,
    storage_options: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    use crate::errors::{IntoPyResult, guard};
    let o = remote_options(storage_options)?;
    py.detach(|| guard(|| zrecord::remote::publish_dir(&path, &url, &o)))
        .py_err(py)
}

/// Lists (`dry_run`, the default) or removes what a failed or killed publish left at `url`: a
/// prefix without a manifest whose claim is older than `min_age_secs`. Returns
/// `{"orphans": [object names], "published": bool}`; a published prefix is never touched.
#[cfg(feature = "remote")]
#[pyfunction]
#[pyo3(signature = (url, *, storage_options = None, min_age_secs = 3600, dry_run = true))]
pub(crate) fn gc<'py>(
    py: Python<'py>,
    url: String,
    storage_options: Option<&Bound<'py, PyDict>>,
    min_age_secs: u64,
    dry_run: bool,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::errors::{IntoPyResult, guard};
    let o = remote_options(storage_options)?;
    let r = py
        .detach(|| guard(|| zrecord::remote::gc(&url, &o, min_age_secs, dry_run)))
        .py_err(py)?;
    let d = PyDict::new(py);
    d.set_item("orphans", r.orphans)?;
    d.set_item("published", r.published)?;
    Ok(d)
}
