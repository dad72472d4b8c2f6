//! Gather outputs: the common packed layouts, as traits so zrecord's own batch types can be
//! returned without copying.

use crate::error::{Result, bail};

/// A Dense batch: one contiguous `(n, *item_shape)` buffer in the requested order.
pub trait DenseOutput: Send {
    /// `n * stride` bytes.
    fn bytes(&self) -> &[u8];
    /// `[n, *item_shape]`.
    fn shape(&self) -> &[u64];
}

/// A Ragged batch in zrecord's packed layout.
pub trait RaggedOutput: Send {
    /// Packed values, records back to back in the requested order.
    fn values(&self) -> &[u8];
    /// Element boundaries: `n + 1` entries starting at 0.
    fn cu_seqlens(&self) -> &[i32];
    /// `n * ndim` dims.
    fn shapes(&self) -> &[u64];
}

/// An owned Dense batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DenseOut {
    pub bytes: Vec<u8>,
    /// `[n, *item_shape]`.
    pub shape: Vec<u64>,
}

impl DenseOutput for DenseOut {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

/// An owned Ragged batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaggedOut {
    pub values: Vec<u8>,
    /// Element boundaries (`n + 1`).
    pub cu_seqlens: Vec<i32>,
    /// `n * ndim` dims.
    pub shapes: Vec<u64>,
}

impl RaggedOutput for RaggedOut {
    fn values(&self) -> &[u8] {
        &self.values
    }
    fn cu_seqlens(&self) -> &[i32] {
        &self.cu_seqlens
    }
    fn shapes(&self) -> &[u64] {
        &self.shapes
    }
}

/// The result of one gather.
pub enum Batch {
    /// Dense geometry.
    Dense(Box<dyn DenseOutput>),
    /// Ragged geometry.
    Ragged(Box<dyn RaggedOutput>),
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Batch::Dense(d) => {
                let (shape, n) = (d.shape(), d.bytes().len());
                write!(f, "Batch::Dense(shape {shape:?}, {n} bytes)")
            }
            Batch::Ragged(r) => {
                let (n, len) = (r.cu_seqlens().len().saturating_sub(1), r.values().len());
                write!(f, "Batch::Ragged({n} records, {len} value bytes)")
            }
        }
    }
}

impl Batch {
    /// Payload bytes in the batch (Dense bytes or Ragged values; metadata excluded).
    pub fn payload_bytes(&self) -> usize {
        match self {
            Batch::Dense(d) => d.bytes().len(),
            Batch::Ragged(r) => r.values().len(),
        }
    }
}

/// Checks that `got` is byte-identical to `want` (shape, values, cu_seqlens, shapes).
pub fn verify(got: &Batch, want: &Batch) -> Result<()> {
    match (got, want) {
        (Batch::Dense(g), Batch::Dense(w)) => {
            let want = w.bytes();
            same_dense(g.bytes(), g.shape(), w.shape(), [want], want.len())
        }
        (Batch::Ragged(g), Batch::Ragged(w)) => {
            let (got, want) = ((g.values(), g.cu_seqlens(), g.shapes()), w.values());
            same_ragged(got, (w.cu_seqlens(), w.shapes()), [want], want.len())
        }
        _ => bail!("geometry mismatch: got {got:?}, expected {want:?}"),
    }
}

/// The dense half of [`verify`], the expected bytes given as `records` (`want_len` bytes in all)
/// so that [`crate::Source::check`] compares in place, with the same verdict and message.
pub(crate) fn same_dense<'w>(
    bytes: &[u8],
    shape: &[u64],
    want_shape: &[u64],
    records: impl IntoIterator<Item = &'w [u8]>,
    want_len: usize,
) -> Result<()> {
    if shape != want_shape {
        bail!("dense shape {shape:?} != expected {want_shape:?}");
    }
    same_bytes("dense bytes", bytes, records, want_len)
}

/// The ragged half of [`verify`]: `got` as (values, cu_seqlens, shapes), `want` as (cu_seqlens,
/// shapes) and its values as `records` (`want_len` bytes in all).
pub(crate) fn same_ragged<'w>(
    (values, cu, shapes): (&[u8], &[i32], &[u64]),
    (want_cu, want_shapes): (&[i32], &[u64]),
    records: impl IntoIterator<Item = &'w [u8]>,
    want_len: usize,
) -> Result<()> {
    if cu != want_cu {
        let (cu, want) = (head(cu), head(want_cu));
        bail!("ragged cu_seqlens differ: {cu:?}... vs {want:?}...");
    }
    if shapes != want_shapes {
        let (dims, want) = (head(shapes), head(want_shapes));
        bail!("ragged shapes differ: {dims:?}... vs {want:?}...");
    }
    same_bytes("ragged values", values, records, want_len)
}

/// `got` against `records` back to back, naming the first byte that differs (or where one ends).
fn same_bytes<'w>(
    what: &str,
    got: &[u8],
    records: impl IntoIterator<Item = &'w [u8]>,
    want_len: usize,
) -> Result<()> {
    let (mut at, len) = (0, got.len());
    for want in records {
        let end = (at + want.len()).min(len);
        if let Some(p) = first_diff(&got[at.min(end)..end], want) {
            let at = at + p;
            bail!("{what} differ at byte {at} (len {len} vs {want_len})");
        }
        at += want.len();
    }
    if len != at {
        bail!("{what} differ at byte {at} (len {len} vs {want_len})");
    }
    Ok(())
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    let p = a.iter().zip(b).position(|(x, y)| x != y);
    Some(p.unwrap_or(a.len().min(b.len())))
}

fn head<T: Copy>(s: &[T]) -> Vec<T> {
    s.iter().take(8).copied().collect()
}
