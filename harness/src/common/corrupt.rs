//! The test-only corruption switch of every verifying cell: with
//! `LOADERX_HARNESS_CORRUPT_BATCH=K` set, a cell flips one byte of the `K`-th batch it receives
//! (counted from 0 over all the batches it compares: probe, verification, warm-up, drained and
//! timed ones) after delivery and before verification, so a test can watch the row turn
//! `verified: false` and the gate red. A measured run never sets it.
//!
//! A leaf: it imports nothing of the harness.

use competitors::{Batch, DenseOut, RaggedOut};

/// The variable's name.
pub const ENV: &str = "LOADERX_HARNESS_CORRUPT_BATCH";

/// The batch [`ENV`] names, if it is set to an index.
pub fn target() -> Option<u64> {
    std::env::var(ENV).ok()?.parse().ok()
}

/// Counts the batches a cell receives and says which one [`ENV`] names.
pub struct Counter {
    target: Option<u64>,
    seen: u64,
}

impl Counter {
    /// A counter for this process's [`ENV`].
    pub fn from_env() -> Counter {
        Counter {
            target: target(),
            seen: 0,
        }
    }

    /// Counts one received batch; true when it is the one to corrupt.
    pub fn hit(&mut self) -> bool {
        let k = self.seen;
        self.seen += 1;
        self.target == Some(k)
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

/// An owned copy of `b` with one value byte flipped (`b` itself when it has no value byte).
pub fn corrupted(b: Batch) -> Batch {
    let flipped = match &b {
        Batch::Dense(d) => {
            let mut bytes = d.bytes().to_vec();
            let shape = d.shape().to_vec();
            flip(&mut bytes).then(|| Batch::Dense(Box::new(DenseOut { bytes, shape })))
        }
        Batch::Ragged(r) => {
            let (mut values, cu_seqlens) = (r.values().to_vec(), r.cu_seqlens().to_vec());
            let shapes = r.shapes().to_vec();
            flip(&mut values).then(|| {
                Batch::Ragged(Box::new(RaggedOut {
                    values,
                    cu_seqlens,
                    shapes,
                }))
            })
        }
    };
    flipped.unwrap_or(b)
}
