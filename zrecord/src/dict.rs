//! Dictionary training for the `zstd_dict` codec: [`train_dict`] samples a view's records,
//! [`train_dict_from`] trains on given samples. Never called automatically.

use crate::error::{Error, Result};
use crate::read::{DenseView, RaggedView};

/// Trains a zstd dictionary of at most `max_bytes` from a sample of a store's records (up to 4,096
/// records spread evenly over the store, at most 100x `max_bytes` of sample data). Never called
/// automatically.
pub fn train_dict_from(records: &[Vec<u8>], max_bytes: usize) -> Result<Vec<u8>> {
    if records.is_empty() {
        return Err(Error::invalid(
            "cannot train a dictionary from zero records",
        ));
    }
    zstd::dict::from_samples(records, max_bytes)
        .map_err(|e| Error::invalid(format!("dictionary training failed: {e}")))
}

/// Default dictionary size for [`train_dict`].
pub const DEFAULT_DICT_BYTES: usize = 112_640;

/// Something whose records can feed dictionary training.
pub trait DictSample {
    /// Number of records.
    fn record_count(&self) -> u64;
    /// Raw bytes of record `i`.
    fn record_bytes(&self, i: u64) -> Result<Vec<u8>>;
}

impl DictSample for DenseView {
    fn record_count(&self) -> u64 {
        self.len()
    }

    fn record_bytes(&self, i: u64) -> Result<Vec<u8>> {
        Ok(self.gather(&[i])?.bytes().to_vec())
    }
}

impl DictSample for RaggedView {
    fn record_count(&self) -> u64 {
        self.len()
    }

    fn record_bytes(&self, i: u64) -> Result<Vec<u8>> {
        Ok(self.gather(&[i])?.values().to_vec())
    }
}

/// Trains a dictionary from an evenly spread sample of `view`'s records.
pub fn train_dict(view: &dyn DictSample, max_bytes: usize) -> Result<Vec<u8>> {
    let n = view.record_count();
    if n == 0 {
        return Err(Error::invalid(
            "cannot train a dictionary from an empty store",
        ));
    }
    let want = n.min(4096);
    let budget = max_bytes.saturating_mul(100);
    let mut samples = Vec::with_capacity(want as usize);
    let mut used = 0usize;
    for k in 0..want {
        let i = k * n / want;
        let mut r = view.record_bytes(i)?;
        // Very large records: train on a prefix (dictionaries help most with small records).
        r.truncate(128 << 10);
        used += r.len();
        samples.push(r);
        if used >= budget {
            break;
        }
    }
    train_dict_from(&samples, max_bytes)
}
