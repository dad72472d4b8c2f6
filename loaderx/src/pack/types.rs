//! The packer's public types: the mode and options, a packed batch, the resume state
//! ([`PackState`], [`PackedState`]) and the pull a packer reads delivered steps through.

use serde::{Deserialize, Serialize};
use zrecord::{Allocation, DType};

use crate::error::{Error, Result};
use crate::loader::Shard;
use crate::state::LoaderState;

/// How documents are placed into rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PackMode {
    /// Concatenate, split every `seq_len`; a cut document carries over into the next row.
    Concat,
    /// Whole documents into the first open row with room (a bounded pool of open rows).
    FirstFit,
}

impl PackMode {
    /// The mode named `concat` or `first_fit`.
    pub fn from_name(name: &str) -> Option<PackMode> {
        match name {
            "concat" => Some(PackMode::Concat),
            "first_fit" => Some(PackMode::FirstFit),
            _ => None,
        }
    }
}

/// What a [`Packer`](super::Packer) makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackOptions {
    /// Tokens per row (`L`).
    pub seq_len: usize,
    /// Rows per batch (`B`).
    pub rows: usize,
    /// How documents are placed.
    pub mode: PackMode,
    /// First-fit: open rows at most (ignored by `Concat`).
    pub pool: usize,
}

/// The default first-fit pool: 32 open rows.
pub const DEFAULT_POOL: usize = 32;

/// One packed batch: three `[rows, seq_len]` arrays, each in its own allocation.
#[derive(Debug)]
pub struct PackedBatch {
    /// The tokens, in the stream's dtype (0 where padding).
    pub tokens: Allocation,
    /// int32 segment ids: 1, 2, ... per row, 0 where padding.
    pub segment_ids: Allocation,
    /// int32 positions within each segment (0 where padding).
    pub positions: Allocation,
    /// The tokens' dtype.
    pub dtype: DType,
    /// Rows (`B`).
    pub rows: usize,
    /// Tokens per row (`L`).
    pub seq_len: usize,
    /// Padding tokens in the batch.
    pub padding: usize,
}

/// Where the packer is in the step it holds: the document and the token within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cursor {
    /// The document (non-empty record, counted over the step's shards in order).
    pub doc: u64,
    /// Tokens of it already packed.
    pub token: u64,
}

/// One open first-fit row in a [`PackState`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowState {
    /// The row's tokens so far, as the hex of their little-endian bytes.
    pub tokens: String,
    /// Each segment's length, in order.
    pub segments: Vec<u32>,
}

/// The packer's resume state, saved beside the loader state it resumes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackState {
    /// The packed stream.
    pub stream: String,
    /// The mode.
    pub mode: PackMode,
    /// Tokens per row.
    pub seq_len: u64,
    /// Rows per batch.
    pub rows: u64,
    /// The first-fit pool.
    pub pool: u64,
    /// The tokens' dtype.
    pub dtype: String,
    /// The saving process's slice: `[process_index, process_count]` (a packer packs its own
    /// slice of the stream, so only the same slice continues it).
    pub process: [u64; 2],
    /// Packed batches delivered.
    pub batches: u64,
    /// Into the first step the loader delivers after its state: where packing continues.
    /// `None` when no step was held.
    pub cursor: Option<Cursor>,
    /// First-fit's open rows, oldest first.
    pub open: Vec<RowState>,
    /// The loader's stream ended (nothing more will be delivered).
    pub ended: bool,
}

impl PackState {
    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Plain data with string keys cannot fail to serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a state written by [`PackState::to_json`]; errors name what is malformed.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("not a pack state ({e})")))
    }
}

/// A packer's and its loader's state together: load both with
/// [`Packer::load_state_dict`](super::Packer::load_state_dict).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedState {
    /// The loader state to load (the one before the step the packer holds, if it holds one).
    pub loader: LoaderState,
    /// The packer's own state.
    pub pack: PackState,
}

/// Pulls the next delivered step: the loader state before it and its shards.
pub type Pull<'a> = dyn FnMut() -> Option<Result<(LoaderState, Vec<Shard>)>> + 'a;
