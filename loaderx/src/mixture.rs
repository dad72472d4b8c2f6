//! Weighted mixtures of sources (placeholder, filled in below).

use serde::{Deserialize, Serialize};

use crate::sampler::IndexSpec;

/// A mixture's sampling spec: every source's index space, mode and seed, and the weight schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// One entry per source, in source order.
    pub sources: Vec<IndexSpec>,
    /// The weights from each step on, by ascending step; the first entry is at step 0.
    pub schedule: Vec<WeightChange>,
}

/// Weights that apply from `step` on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightChange {
    /// The first global step drawn with these weights.
    pub step: u64,
    /// One weight per source.
    pub weights: Vec<f64>,
}

impl MixtureSpec {
    /// The first source field that differs from `other`'s, as `(field, ours, theirs)`.
    pub(crate) fn first_difference(&self, other: &MixtureSpec) -> Option<(String, String, String)> {
        if self.sources.len() != other.sources.len() {
            return Some((
                "sources (count)".into(),
                self.sources.len().to_string(),
                other.sources.len().to_string(),
            ));
        }
        for (k, (a, b)) in self.sources.iter().zip(&other.sources).enumerate() {
            if a.len != b.len {
                return Some((
                    format!("sources[{k}].len"),
                    a.len.to_string(),
                    b.len.to_string(),
                ));
            }
            if a.mode != b.mode {
                return Some((
                    format!("sources[{k}].mode"),
                    format!("{:?}", a.mode),
                    format!("{:?}", b.mode),
                ));
            }
            if a.seed != b.seed {
                return Some((
                    format!("sources[{k}].seed"),
                    a.seed.to_string(),
                    b.seed.to_string(),
                ));
            }
        }
        None
    }
}
