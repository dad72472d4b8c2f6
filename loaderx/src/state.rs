//! A loader's resume state: [`LoaderState`], what [`Loader::state_dict`](crate::Loader::state_dict)
//! returns and [`Loader::load_state_dict`](crate::Loader::load_state_dict) takes.
//!
//! The state is small and independent of the dataset's size: a format version, the resume position
//! (the low-water step and, in completion order, the at most `workers + prefetch` steps already
//! delivered past it), the delivery mode, the global batch, the process slice, the sampler's spec
//! (index space, mode and seed; for a mixture every source's and the weight schedule) and a
//! fingerprint of the streams (per view: its kind, a hash of its store's identity and its record
//! count). It serializes with serde (JSON through [`LoaderState::to_json`]); a few hundred bytes
//! for a few streams.
//!
//! [`LoaderState::check_loadable`] compares a state with the one a loader would save and names the
//! first field that differs.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mixture::MixtureSpec;
use crate::sampler::IndexSpec;

/// The `format` string of every loader state.
pub const STATE_FORMAT: &str = "loaderx.loader";
/// The state layout this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// A loader's resume state (see the module docs). Fields are public so that a trainer can read the
/// position; build one only with [`Loader::state_dict`](crate::Loader::state_dict) or
/// [`LoaderState::from_json`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderState {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The layout version, [`STATE_VERSION`].
    pub version: u32,
    /// The low-water step: the first global step whose batch the consumer has not received.
    pub step: u64,
    /// Steps after `step` already delivered (completion order only), ascending; a loader that
    /// loads the state skips exactly these.
    pub delivered_ahead: Vec<u64>,
    /// Whether the loader delivered in step order.
    pub ordered: bool,
    /// The global batch (records per step over all processes).
    pub batch: u64,
    /// The saving process's slice of each global batch: `process_index` of `process_count`.
    pub process_index: u64,
    /// Processes that shared each global batch.
    pub process_count: u64,
    /// What the sampler draws.
    pub sampler: SamplerSpec,
    /// The streams' fingerprint, per source and stream name.
    pub streams: Vec<StreamPrint>,
}

/// What a loader's sampler draws.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SamplerSpec {
    /// An [`IndexSampler`](crate::IndexSampler) (or any sampler that reports an
    /// [`IndexSpec`]).
    Index {
        /// Size of the index space.
        len: u64,
        /// The ordering mode.
        mode: crate::sampler::Mode,
        /// The seed.
        seed: u64,
    },
    /// A weighted mixture of sources.
    Mixture(MixtureSpec),
    /// A sampler with no spec: the state holds its position only, and loading it seeks the
    /// sampler there.
    Custom,
}

impl From<IndexSpec> for SamplerSpec {
    fn from(s: IndexSpec) -> Self {
        SamplerSpec::Index {
            len: s.len,
            mode: s.mode,
            seed: s.seed,
        }
    }
}

/// One stream of one source: its name and its views' fingerprints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamPrint {
    /// The source (0 for a loader without a mixture).
    pub source: u32,
    /// The stream name.
    pub name: String,
    /// One entry per shard position.
    pub views: Vec<ViewPrint>,
}

/// One view's fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewPrint {
    /// `"dense"` or `"ragged"`.
    pub kind: String,
    /// A 64-bit hash (16 hex digits) of the store's identity: the label the loader was given for
    /// it (the Python binding: its path), else its schema (dtype, shape or rank, codec).
    pub store: String,
    /// Records in the view.
    pub records: u64,
    /// The version of the dataset of parts the view reads (absent for a single container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// Refuses a state saved while reading another version of a dataset (checked before the sampler:
/// another version's record count changes the index space too), saying which version to open.
fn check_versions(theirs: &[StreamPrint], mine: &[StreamPrint]) -> Result<()> {
    for (a, b) in theirs.iter().zip(mine) {
        for (j, (u, v)) in a.views.iter().zip(&b.views).enumerate() {
            if u.version != v.version {
                let name = |x: Option<u64>| {
                    x.map_or("a single container".to_string(), |n| format!("version {n}"))
                };
                return Err(Error::invalid(format!(
                    "the state cannot be loaded: stream {:?} view {j} was read at {} of its dataset, \
                     this loader reads {}; open the dataset at the state's version \
                     (OpenOptions::version, `version=` in Python) to resume exactly",
                    a.name,
                    name(u.version),
                    name(v.version)
                )));
            }
        }
    }
    Ok(())
}

/// FNV-1a over `label`: the `store` field of a [`ViewPrint`].
pub(crate) fn store_hash(label: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl LoaderState {
    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a state written by [`LoaderState::to_json`]. Errors name what is malformed.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("not a loader state ({e})")))
    }

    /// True when a view of `self` was read at another version of its dataset than the same view
    /// of `mine` (views are paired in order, as [`LoaderState::check_loadable`] pairs them).
    pub fn reads_other_version(&self, mine: &LoaderState) -> bool {
        self.streams.iter().zip(&mine.streams).any(|(a, b)| {
            a.views
                .iter()
                .zip(&b.views)
                .any(|(u, v)| u.version != v.version)
        })
    }

    /// Checks that a loader whose own state is `mine` can load `self`: the same format and
    /// version, global batch, delivery mode, sampler and streams; a state with steps delivered
    /// ahead (completion order) also needs the same process slice, since other processes delivered
    /// other steps ahead. A mixture's weight schedule is not compared: the loaded one replaces the
    /// loader's. The error names the first field that differs, with both values.
    pub fn check_loadable(&self, mine: &LoaderState) -> Result<()> {
        self.check_loadable_with(mine, false)
    }

    /// [`LoaderState::check_loadable`], where `other_version` accepts a state saved while
    /// reading another version of a view's dataset (see [`LoaderState::reads_other_version`]):
    /// those views' record counts and the sampler's index space (`len`, a mixture's sources'
    /// `len`) may then differ; everything else must still match.
    pub fn check_loadable_with(&self, mine: &LoaderState, other_version: bool) -> Result<()> {
        let relaxed = other_version && self.reads_other_version(mine);
        let differs = |field: &str, theirs: &dyn std::fmt::Debug, ours: &dyn std::fmt::Debug| {
            Err(Error::invalid(format!(
                "the state cannot be loaded: its {field} is {theirs:?} but this loader's is {ours:?}"
            )))
        };
        if self.format != STATE_FORMAT {
            return differs("format", &self.format, &STATE_FORMAT);
        }
        if self.version != STATE_VERSION {
            return differs("version", &self.version, &STATE_VERSION);
        }
        if self.batch != mine.batch {
            return differs("batch", &self.batch, &mine.batch);
        }
        if self.ordered != mine.ordered {
            return differs("ordered", &self.ordered, &mine.ordered);
        }
        if !relaxed {
            check_versions(&self.streams, &mine.streams)?;
        }
        check_sampler(&self.sampler, &mine.sampler, relaxed, &differs)?;
        if self.streams.len() != mine.streams.len() {
            return differs(
                "number of streams",
                &self.streams.len(),
                &mine.streams.len(),
            );
        }
        for (i, (a, b)) in self.streams.iter().zip(&mine.streams).enumerate() {
            if a.source != b.source {
                return differs(&format!("streams[{i}].source"), &a.source, &b.source);
            }
            if a.name != b.name {
                return differs(&format!("streams[{i}].name"), &a.name, &b.name);
            }
            if a.views.len() != b.views.len() {
                return differs(
                    &format!("streams[{i}] ({:?}) view count", a.name),
                    &a.views.len(),
                    &b.views.len(),
                );
            }
            for (j, (u, v)) in a.views.iter().zip(&b.views).enumerate() {
                let at = format!("streams[{i}] ({:?}) views[{j}]", a.name);
                if u.kind != v.kind {
                    return differs(&format!("{at}.kind"), &u.kind, &v.kind);
                }
                if u.store != v.store {
                    return differs(&format!("{at}.store"), &u.store, &v.store);
                }
                if u.records != v.records && !(relaxed && u.version != v.version) {
                    return differs(&format!("{at}.records"), &u.records, &v.records);
                }
            }
        }
        if let Some(bad) = self.delivered_ahead.iter().find(|&&s| s <= self.step) {
            return Err(Error::invalid(format!(
                "the state cannot be loaded: delivered_ahead holds step {bad}, not after its step {}",
                self.step
            )));
        }
        if !self.delivered_ahead.is_empty()
            && (self.process_index, self.process_count) != (mine.process_index, mine.process_count)
        {
            return Err(Error::invalid(format!(
                "the state cannot be loaded: it was saved by process {} of {} in completion order \
                 with steps {:?} delivered ahead of step {}, which only that process slice \
                 received; load it into process {} of {} as saved (this loader is process {} of \
                 {}), or save states with ordered delivery to resume on another process count",
                self.process_index,
                self.process_count,
                self.delivered_ahead,
                self.step,
                self.process_index,
                self.process_count,
                mine.process_index,
                mine.process_count
            )));
        }
        Ok(())
    }
}

type Differs<'a> = dyn Fn(&str, &dyn std::fmt::Debug, &dyn std::fmt::Debug) -> Result<()> + 'a;

/// Compares the samplers; `relaxed` (a state of another dataset version, accepted) lets the
/// index space's size differ.
fn check_sampler(
    theirs: &SamplerSpec,
    ours: &SamplerSpec,
    relaxed: bool,
    differs: &Differs<'_>,
) -> Result<()> {
    match (theirs, ours) {
        (
            SamplerSpec::Index { len, mode, seed },
            SamplerSpec::Index {
                len: l2,
                mode: m2,
                seed: s2,
            },
        ) => {
            if len != l2 && !relaxed {
                return differs("sampler.len", len, l2);
            }
            if mode != m2 {
                return differs("sampler.mode", mode, m2);
            }
            if seed != s2 {
                return differs("sampler.seed", seed, s2);
            }
            Ok(())
        }
        (SamplerSpec::Mixture(a), SamplerSpec::Mixture(b)) => {
            match a.first_difference(b, relaxed) {
                Some((field, x, y)) => Err(Error::invalid(format!(
                    "the state cannot be loaded: its sampler.{field} is {x} but this loader's is {y}"
                ))),
                None => Ok(()),
            }
        }
        (SamplerSpec::Custom, SamplerSpec::Custom) => Ok(()),
        (a, b) => differs("sampler.kind", &kind(a), &kind(b)),
    }
}

fn kind(s: &SamplerSpec) -> &'static str {
    match s {
        SamplerSpec::Index { .. } => "index",
        SamplerSpec::Mixture(_) => "mixture",
        SamplerSpec::Custom => "custom",
    }
}
