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
