//! `RaggedWriter.append` of packed fields: the field rules host and device inputs share
//! ([`check_fields`]), where the three fields live ([`route`]), the plan of whole-record chunks
//! ([`record_chunks`]) and, with the `cuda` feature, the device append itself ([`DeviceBatch`]),
//! which checks the whole batch's offsets and shapes with `zrecord::check_ragged_batch` before its
//! first write.

use std::ops::Range;

use pyo3::prelude::*;
use zrecord::DType;

use crate::dlpack::Imported;
use crate::errors::{DTypeError, InvalidInputError, UnsupportedDeviceError};

/// The writer a batch is appended to, as the checks name it.
pub(crate) struct Target<'a> {
    /// The container path, for messages.
    pub path: &'a str,
    /// The store dtype.
    pub dtype: DType,
    /// The records' rank.
    pub ndim: u32,
}

impl Target<'_> {
    fn mismatch(&self, what: String) -> PyErr {
        InvalidInputError::new_err(format!("RaggedWriter.append({}): {what}", self.path))
    }
}

/// The dtype, rank, shape and layout rules of the three imported fields, in the order the host
/// path has always applied them; device fields (imported with their DLPack device) get the same
/// checks and messages. Misaligned data was already refused by the import.
pub(crate) fn check_fields(
    t: &Target<'_>,
    v: &Imported<'_>,
    c: &Imported<'_>,
    s: &Imported<'_>,
) -> PyResult<()> {
    if v.dtype() != t.dtype {
        return Err(DTypeError::new_err(format!(
            "RaggedWriter.append({}): values: expected dtype {}, found {}",
            t.path,
            t.dtype,
            v.dtype()
        )));
    }
    if v.shape().len() != 1 {
        return Err(t.mismatch(format!("values must be 1-D, found shape {:?}", v.shape())));
    }
    if c.shape().len() != 1 || c.shape()[0] == 0 {
        return Err(t.mismatch(format!(
            "cu_seqlens must be 1-D with n + 1 >= 1 entries, found shape {:?}",
            c.shape()
        )));
    }
    let n = c.shape()[0] - 1;
    if s.dtype() != DType::UInt64 {
        return Err(DTypeError::new_err(format!(
            "RaggedWriter.append({}): shapes must be uint64, found {}",
            t.path,
            s.dtype()
        )));
    }
    if s.shape() != [n, u64::from(t.ndim)] {
        return Err(t.mismatch(format!(
            "shapes: expected shape ({n}, {}) for {n} records of ndim {}, found {:?}",
            t.ndim,
            t.ndim,
            s.shape()
        )));
    }
    for (imp, what) in [(v, "values"), (c, "cu_seqlens"), (s, "shapes")] {
        if !imp.is_c_contiguous() {
            return Err(t.mismatch(format!(
                "{what} is not C-contiguous (strides {:?})",
                imp.strides()
            )));
        }
    }
    if c.dtype() != DType::Int32 {
        return Err(DTypeError::new_err(format!(
            "RaggedWriter.append: cu_seqlens must be int32, found {}",
            c.dtype()
        )));
    }
    Ok(())
}

/// Which append path a user-built batch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// No field reports a CUDA device: the host path (its import refuses other devices).
    Host,
    /// All three fields on this DLPack `(2, id)` device.
    Device((i32, i32)),
}

/// The DLPack device an object reports, `None` when it reports none (the import then decides).
fn reported_device(obj: &Bound<'_, PyAny>) -> Option<(i32, i32)> {
    let f = obj
        .getattr(pyo3::intern!(obj.py(), "__dlpack_device__"))
        .ok()?;
    f.call0().ok()?.extract().ok()
}

/// Where `values`, `cu_seqlens` and `shapes` live: on the host (any non-CUDA device, left to the
/// host import) or all three on one CUDA device. A CUDA field beside a field elsewhere is refused
/// before any field is exported.
pub(crate) fn route(path: &str, fields: [&Bound<'_, PyAny>; 3]) -> PyResult<Route> {
    let devs = fields.map(reported_device);
    let Some(cuda) = devs.iter().flatten().find(|d| d.0 == 2).copied() else {
        return Ok(Route::Host);
    };
    if devs.iter().all(|d| *d == Some(cuda)) {
        return Ok(Route::Device(cuda));
    }
    let show = |d: &Option<(i32, i32)>| match d {
        Some(d) => format!("{d:?}"),
        None => "the host (no __dlpack_device__)".to_string(),
    };
    Err(UnsupportedDeviceError::new_err(format!(
        "RaggedWriter.append({path}): RaggedBatch fields on different devices are not supported: values on {}, cu_seqlens on {}, shapes on {}; put all three on one CUDA device, or all on the host",
        show(&devs[0]),
        show(&devs[1]),
        show(&devs[2])
    )))
}

/// Splits the records of checked offsets `cu` (strictly increasing from 0) into consecutive runs
/// whose values take at most `limit` bytes each; a record larger than `limit` is a run of its
/// own. Every record is in exactly one run, in order.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn record_chunks(cu: &[i32], itemsize: usize, limit: usize) -> Vec<Range<usize>> {
    let n = cu.len().saturating_sub(1);
    let bytes = |a: usize, b: usize| (cu[b] as usize - cu[a] as usize) * itemsize;
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && bytes(start, end + 1) <= limit {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// A batch whose three fields live on one CUDA device, ready to append: each field exported with
/// the loaderx append stream as the consumer stream (the producer orders its pending work before
/// it), checked as on the host, `cu_seqlens` and `shapes` (small) copied to the host and the
/// whole batch checked against them, so nothing is written when a check fails.
#[cfg(feature = "cuda")]
pub(crate) struct DeviceBatch<'py> {
    values: crate::gpu::DeviceInput<'py>,
    cu: Vec<i32>,
    shapes: Vec<u64>,
    ndim: usize,
    itemsize: usize,
}

#[cfg(feature = "cuda")]
impl<'py> DeviceBatch<'py> {
    /// Opens and checks the three fields (see the type).
    pub(crate) fn open(
        py: Python<'py>,
        t: &Target<'_>,
        dev: (i32, i32),
        fields: [&Bound<'py, PyAny>; 3],
    ) -> PyResult<Self> {
        use crate::errors::{IntoPyResult, guard};
        use crate::gpu::DeviceInput;

        let what = |f: &str| format!("RaggedWriter.append({}): {f}", t.path);
        let v = DeviceInput::open(fields[0], &what("values"), dev)?;
        let c = DeviceInput::open(fields[1], &what("cu_seqlens"), dev)?;
        let s = DeviceInput::open(fields[2], &what("shapes"), dev)?;
        check_fields(t, v.imported(), c.imported(), s.imported())?;
        let (cs, ss) = (c.span()?, s.span()?);
        let (cu, shapes) = py
            .detach(|| {
                guard(|| {
                    let (cb, sb) = (cs.copy(0, cs.len())?, ss.copy(0, ss.len())?);
                    let (cb, sb) = (
                        cb.host_slice().unwrap_or(&[]),
                        sb.host_slice().unwrap_or(&[]),
                    );
                    let cu: Vec<i32> = cb
                        .chunks_exact(4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .collect();
                    let shapes: Vec<u64> = sb
                        .chunks_exact(8)
                        .map(|b| {
                            u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                        })
                        .collect();
                    Ok::<_, zrecord::Error>((cu, shapes))
                })
            })
            .py_err(py)?;
        let (ndim, itemsize) = (t.ndim as usize, t.dtype.itemsize());
        let nvalues = v.imported().numel() as usize;
        guard(|| zrecord::check_ragged_batch(&cu, &shapes, ndim, itemsize, nvalues)).py_err(py)?;
        Ok(DeviceBatch {
            values: v,
            cu,
            shapes,
            ndim,
            itemsize,
        })
    }

    /// The append itself, to run with the GIL released (`Send`).
    pub(crate) fn job(&self) -> PyResult<DeviceJob<'_>> {
        Ok(DeviceJob {
            values: self.values.span()?,
            cu: &self.cu,
            shapes: &self.shapes,
            ndim: self.ndim,
            itemsize: self.itemsize,
        })
    }
}

/// A checked device batch's append (see [`DeviceBatch::job`]).
#[cfg(feature = "cuda")]
pub(crate) struct DeviceJob<'a> {
    values: crate::gpu::DeviceSpan<'a>,
    cu: &'a [i32],
    shapes: &'a [u64],
    ndim: usize,
    itemsize: usize,
}

#[cfg(feature = "cuda")]
impl DeviceJob<'_> {
    /// Copies the values through pooled pinned staging in runs of whole records of at most
    /// `crate::gpu::APPEND_CHUNK_BYTES` (one record if larger) and appends each run as it lands,
    /// its offsets rebased to 0. A failure of a later run leaves the runs before it appended.
    pub(crate) fn append_to(
        &self,
        w: &mut zrecord::RaggedWriter,
    ) -> Result<(), crate::errors::CoreError> {
        let (cu, isz, ndim) = (self.cu, self.itemsize, self.ndim);
        let runs = record_chunks(cu, isz, crate::gpu::APPEND_CHUNK_BYTES);
        if runs.is_empty() {
            return Ok(w.append(&[], cu, self.shapes)?);
        }
        for r in runs {
            let (a, b) = (cu[r.start] as usize * isz, cu[r.end] as usize * isz);
            let local: Vec<i32> = cu[r.start..=r.end]
                .iter()
                .map(|&x| x - cu[r.start])
                .collect();
            let st = self.values.copy(a, b - a)?;
            w.append(
                st.host_slice().unwrap_or(&[]),
                &local,
                &self.shapes[r.start * ndim..r.end * ndim],
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_record_once_within_the_limit() {
        // Records of 3, 1, 4, 1, 5, 9, 2 elements of 4 bytes; limit 20 bytes = 5 elements.
        let lens = [3, 1, 4, 1, 5, 9, 2];
        let mut cu = vec![0i32];
        for l in lens {
            cu.push(cu.last().unwrap() + l);
        }
        let runs = record_chunks(&cu, 4, 20);
        assert_eq!(runs, vec![0..2, 2..4, 4..5, 5..6, 6..7]);
        let flat: Vec<usize> = runs.iter().flat_map(|r| r.clone()).collect();
        assert_eq!(flat, (0..lens.len()).collect::<Vec<_>>());
        for r in &runs {
            let bytes = (cu[r.end] - cu[r.start]) as usize * 4;
            assert!(bytes <= 20 || r.len() == 1, "{r:?} holds {bytes} bytes");
        }
        // A limit above the whole batch: one run; no records: no run.
        assert_eq!(record_chunks(&cu, 4, 1 << 20), vec![0..7]);
        assert!(record_chunks(&[0], 4, 16).is_empty());
        // A limit below every record: one run per record.
        assert_eq!(record_chunks(&cu, 4, 1).len(), 7);
    }
}
