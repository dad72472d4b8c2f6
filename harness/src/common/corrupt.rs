//! The test-only corruption switch of every verifying cell: with
//! `LOADERX_HARNESS_CORRUPT_BATCH=K` set, a cell flips one byte of the `K`-th batch it receives
//! (counted from 0 over all the batches it compares: probe, verification, warm-up, drained and
//! timed ones) after delivery and before verification, so a test can watch the row turn
//! `verified: false` and the gate red. A measured run never sets it.

use competitors::{Batch, DenseOut, RaggedOut};

pub const ENV: &str = "LOADERX_HARNESS_CORRUPT_BATCH";

/// Counts the batches a cell receives and says which one [`ENV`] names.
pub struct Counter {
    target: Option<u64>,
    seen: u64,
}

impl Counter {
    /// A counter for this process's [`ENV`] (the index of the batch to corrupt).
    pub fn from_env() -> Counter {
        Counter {
            target: std::env::var(ENV).ok().and_then(|v| v.parse().ok()),
            seen: 0,
        }
    }

    /// Counts one received batch; true when it is the one to corrupt.
    pub fn hit(&mut self) -> bool {
        let k = self.seen;
        self.seen += 1;
        self.target == Some(k)
    }

    /// Counts one received batch: [`corrupted`] when it is the one to corrupt, else itself.
    pub fn pass(&mut self, b: Batch) -> Batch {
        if self.hit() { corrupted(b) } else { b }
    }
}

/// Flips one byte of `values` (a quarter in: in a batch of 256 equal records, record 64's first
/// byte, none of the records a loader cell probes to match a batch to its step, so only the full
/// comparison can catch it); false when there is none.
pub fn flip(values: &mut [u8]) -> bool {
    let at = values.len() / 4;
    match values.get_mut(at) {
        Some(b) => {
            *b ^= 0xff;
            true
        }
        None => false,
    }
}

/// An owned batch of `values` (with its `cu_seqlens` when Ragged) and `shape` (Dense) or
/// `shapes` (Ragged), one value byte flipped; `None` when it has no value byte.
pub fn flipped(values: &[u8], cu_seqlens: Option<&[i32]>, shape: &[u64]) -> Option<Batch> {
    let mut values = values.to_vec();
    if !flip(&mut values) {
        return None;
    }
    let shape = shape.to_vec();
    Some(match cu_seqlens {
        None => Batch::Dense(Box::new(DenseOut {
            bytes: values,
            shape,
        })),
        Some(cu) => Batch::Ragged(Box::new(RaggedOut {
            values,
            cu_seqlens: cu.to_vec(),
            shapes: shape,
        })),
    })
}

/// An owned copy of `b` with one value byte flipped (`b` itself when it has no value byte).
pub fn corrupted(b: Batch) -> Batch {
    let copy = match &b {
        Batch::Dense(d) => flipped(d.bytes(), None, d.shape()),
        Batch::Ragged(r) => flipped(r.values(), Some(r.cu_seqlens()), r.shapes()),
    };
    copy.unwrap_or(b)
}
