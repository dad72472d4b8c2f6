//! Sequence packing: a loader's Ragged token stream (1-D integer records, in delivery order)
//! packed into fixed `[rows, seq_len]` batches with per-token segment ids and positions.
//!
//! * [`PackMode::Concat`]: the documents concatenated and split every `seq_len` tokens; a
//!   document cut at a row's edge carries over into the next row (as a new segment).
//! * [`PackMode::FirstFit`]: whole documents placed into the first of at most `pool` open rows
//!   with room for them; when none has room, the fullest open row is emitted and a new one
//!   opened. A document longer than `seq_len` is split into `seq_len` pieces and a remainder.
//!
//! Each [`PackedBatch`] holds `tokens` (the stream's dtype), `segment_ids` and `positions`
//! (int32), each `[rows, seq_len]` and each one allocation from the stream's allocator. Segment
//! ids count 1, 2, ... per row (0 is padding); positions count 0, 1, ... within each segment.
//!
//! The packer is a pure function of the delivered records: the same stream gives the same
//! batches. Its state ([`PackState`]) is the loader state to resume from (the state before the
//! step whose records are still being consumed), the cursor into that step's records and, for
//! first-fit, the open rows' tokens; [`Packer::state_dict`] / [`Packer::load_state_dict`] resume
//! exactly. Memory: besides the loader's own bound, one delivered step held and `pool x seq_len`
//! tokens of open rows (first-fit), plus the batches the consumer holds.
//!
//! The files: `types.rs` holds the public types and the state, `rows.rs` the open rows and the
//! writing of a batch's arrays; this file the input cursor, the two modes' row filling and the
//! state's save and load.

mod rows;
mod types;

use std::sync::Arc;

use zrecord::{Allocator, DType};

use crate::error::{Error, Result};
use crate::loader::{Batch, Loader, Shard, StreamView};
use crate::state::LoaderState;

use self::rows::Row;
pub use self::types::{
    Cursor, DEFAULT_POOL, PackMode, PackOptions, PackState, PackedBatch, PackedState, Pull,
    RowState,
};

/// A delivered step being consumed: its shards, its documents and the loader state before it.
struct Input {
    shards: Vec<Shard>,
    /// `(shard, first token, tokens)` of each non-empty record.
    docs: Vec<(usize, usize, usize)>,
    before: LoaderState,
}

/// Packs one Ragged stream of a loader. See the module docs.
pub struct Packer {
    stream: Arc<str>,
    opts: PackOptions,
    dtype: DType,
    alloc: Arc<dyn Allocator>,
    process: [u64; 2],
    input: Option<Input>,
    cursor: Cursor,
    /// After a load: the cursor to apply to the next step pulled.
    resume: Option<Cursor>,
    open: Vec<Row>,
    batches: u64,
    ended: bool,
    /// The int32 bytes of 0..seq_len: the positions every segment copies a prefix of.
    iota: Arc<[u8]>,
}

impl std::fmt::Debug for Packer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("stream", &self.stream)
            .field("opts", &self.opts)
            .field("dtype", &self.dtype)
            .field("open", &self.open.len())
            .field("batches", &self.batches)
            .finish()
    }
}

/// True for the integer dtypes a token stream may have.
fn is_integer(d: DType) -> bool {
    matches!(
        d,
        DType::Int8
            | DType::Int16
            | DType::Int32
            | DType::Int64
            | DType::UInt8
            | DType::UInt16
            | DType::UInt32
            | DType::UInt64
    )
}

impl Packer {
    /// A packer of `loader`'s Ragged stream `stream` (1-D integer records), its batches from that
    /// stream's allocator (source 0's first view, for a mixture).
    ///
    /// Errors (`InvalidArgument`): no such stream, a Dense stream, records that are not 1-D
    /// integers, `seq_len` or `rows` 0, a first-fit `pool` of 0, sizes past `i32`, or a loader
    /// that delivers in completion order with several workers (packing follows delivery order,
    /// which must be the step order for the batches to be reproducible).
    pub fn new<T: Send + 'static>(
        loader: &Loader<T>,
        stream: &str,
        opts: PackOptions,
    ) -> Result<Packer> {
        let o = loader.options();
        if !o.ordered && o.workers > 1 {
            return Err(Error::invalid(format!(
                "packing needs batches in step order: build the loader with ordered=True (it has \
                 {} workers in completion order)",
                o.workers
            )));
        }
        if opts.seq_len == 0 || opts.rows == 0 {
            return Err(Error::invalid(format!(
                "seq_len and batch_size must be positive, got {} and {}",
                opts.seq_len, opts.rows
            )));
        }
        if opts.mode == PackMode::FirstFit && opts.pool == 0 {
            return Err(Error::invalid(
                "the first-fit pool must hold at least one row",
            ));
        }
        let cells = opts.seq_len.checked_mul(opts.rows);
        if opts.seq_len > i32::MAX as usize || cells.is_none_or(|c| c > i32::MAX as usize) {
            return Err(Error::invalid(format!(
                "a packed batch of {} x {} tokens is too large (positions are int32)",
                opts.rows, opts.seq_len
            )));
        }
        let view = loader.stream_view(stream).ok_or_else(|| {
            Error::invalid(format!(
                "no stream {stream:?} to pack (streams: {:?})",
                loader.stream_names()
            ))
        })?;
        let StreamView::Ragged(view) = view else {
            return Err(Error::invalid(format!(
                "stream {stream:?} is Dense: packing needs a Ragged stream of 1-D token records"
            )));
        };
        let dtype = view.dtype();
        if view.ndim() != 1 || !is_integer(dtype) {
            return Err(Error::invalid(format!(
                "stream {stream:?} holds {}-D {dtype} records: packing needs 1-D integer tokens",
                view.ndim()
            )));
        }
        Ok(Packer {
            stream: stream.into(),
            opts,
            dtype,
            alloc: view.allocator().clone(),
            process: [o.process_index as u64, o.process_count as u64],
            input: None,
            cursor: Cursor::default(),
            resume: None,
            open: Vec::new(),
            batches: 0,
            ended: false,
            iota: rows::iota(opts.seq_len),
        })
    }

    /// The options.
    pub fn options(&self) -> PackOptions {
        self.opts
    }

    /// Packed batches delivered so far.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The next packed batch from `loader`, whose items `split` turns into shard lists (the
    /// identity for a `Loader<Vec<Shard>>`). `None` once the loader's stream ended and every
    /// token was packed; the last batch may carry padding rows. An error (the loader's, or a
    /// record the packer cannot use) leaves the packer to be reloaded from a saved state.
    pub fn next_from<T: Send + 'static>(
        &mut self,
        loader: &mut Loader<T>,
        split: impl Fn(T) -> Result<Vec<Shard>>,
    ) -> Option<Result<PackedBatch>> {
        let mut pull = || {
            let before = loader.state_dict();
            loader
                .next()
                .map(|r| r.and_then(&split).map(|shards| (before, shards)))
        };
        self.next_batch(&mut pull)
    }

    /// The combined resume state: see [`PackedState`].
    pub fn state_dict<T: Send + 'static>(&self, loader: &Loader<T>) -> PackedState {
        let loader_state = match &self.input {
            Some(i) => i.before.clone(),
            None => loader.state_dict(),
        };
        PackedState {
            loader: loader_state,
            pack: self.pack_state(),
        }
    }

    /// Continues from `state`: loads its loader state into `loader` and the packer's own state;
    /// the next batches are exactly those an uninterrupted run delivers after the ones the
    /// state counts. Errors (`InvalidArgument`): a state of another stream, mode, geometry,
    /// dtype or process slice, a malformed row, and whatever the loader's load refuses.
    pub fn load_state_dict<T: Send + 'static>(
        &mut self,
        loader: &mut Loader<T>,
        state: &PackedState,
    ) -> Result<()> {
        let open = self.check_state(&state.pack)?;
        loader.load_state_dict(&state.loader)?;
        self.open = open;
        self.input = None;
        self.cursor = Cursor::default();
        self.resume = state.pack.cursor;
        self.batches = state.pack.batches;
        self.ended = state.pack.ended;
        Ok(())
    }

    fn pack_state(&self) -> PackState {
        PackState {
            stream: self.stream.to_string(),
            mode: self.opts.mode,
            seq_len: self.opts.seq_len as u64,
            rows: self.opts.rows as u64,
            pool: self.opts.pool as u64,
            dtype: self.dtype.name().into(),
            process: self.process,
            batches: self.batches,
            cursor: match (&self.input, self.resume) {
                (Some(_), _) => Some(self.cursor),
                (None, r) => r,
            },
            open: self.open.iter().map(Row::state).collect(),
            ended: self.ended,
        }
    }

    /// Checks a state against this packer and decodes its open rows.
    fn check_state(&self, s: &PackState) -> Result<Vec<Row>> {
        let mine = self.pack_state();
        let differs = |field: &str, theirs: &dyn std::fmt::Debug, ours: &dyn std::fmt::Debug| {
            Error::invalid(format!(
                "the pack state cannot be loaded: its {field} is {theirs:?} but this packer's is \
                 {ours:?}"
            ))
        };
        if s.stream != mine.stream {
            return Err(differs("stream", &s.stream, &mine.stream));
        }
        if s.mode != mine.mode {
            return Err(differs("mode", &s.mode, &mine.mode));
        }
        if (s.seq_len, s.rows) != (mine.seq_len, mine.rows) {
            let (a, b) = ((s.rows, s.seq_len), (mine.rows, mine.seq_len));
            return Err(differs("[batch_size, seq_len]", &a, &b));
        }
        if s.mode == PackMode::FirstFit && s.pool != mine.pool {
            return Err(differs("pool", &s.pool, &mine.pool));
        }
        if s.dtype != mine.dtype {
            return Err(differs("dtype", &s.dtype, &mine.dtype));
        }
        if s.process != mine.process {
            return Err(differs("process [index, count]", &s.process, &mine.process));
        }
        if s.open.len() > self.opts.pool.max(1)
            || (s.mode == PackMode::Concat && !s.open.is_empty())
        {
            return Err(Error::invalid(format!(
                "the pack state cannot be loaded: it holds {} open rows, more than the pool",
                s.open.len()
            )));
        }
        s.open
            .iter()
            .enumerate()
            .map(|(i, r)| Row::from_state(r, self.dtype.itemsize(), self.opts.seq_len, i))
            .collect()
    }

    /// The next batch, pulling delivered steps with `pull` (the loader state before the step,
    /// and its shards; `None` ends the stream: the packer then empties its pool and returns
    /// `None`). [`Packer::next_from`] pulls from a loader; this form lets a caller end the stream
    /// early (after one epoch, say).
    pub fn next_batch(&mut self, pull: &mut Pull<'_>) -> Option<Result<PackedBatch>> {
        let res = match self.opts.mode {
            PackMode::Concat => self.concat_batch(pull),
            PackMode::FirstFit => self.first_fit_batch(pull),
        };
        match res {
            Ok(Some(b)) => {
                self.batches += 1;
                Some(Ok(b))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Makes sure a step with tokens left is held, pulling steps as needed (and applying a
    /// loaded state's cursor to the first); `false` at the end of the stream.
    fn ensure_input(&mut self, pull: &mut Pull<'_>) -> Result<bool> {
        while self.input.is_none() {
            if self.ended {
                return Ok(false);
            }
            let Some(got) = pull() else {
                self.ended = true;
                return Ok(false);
            };
            let (before, shards) = got?;
            let input = self.take_input(before, shards)?;
            if input.docs.is_empty() {
                continue;
            }
            let cursor = self.resume.take().unwrap_or_default();
            let doc = input.docs.get(cursor.doc as usize);
            if doc.is_none_or(|d| cursor.token as usize >= d.2) {
                return Err(Error::invalid(format!(
                    "the pack state's cursor (document {}, token {}) lies outside step {}, which \
                     holds {} documents of stream {:?}",
                    cursor.doc,
                    cursor.token,
                    input.before.step,
                    input.docs.len(),
                    self.stream
                )));
            }
            self.cursor = cursor;
            self.input = Some(input);
        }
        Ok(true)
    }

    /// Tokens left of the current document (0 when no step is held).
    fn peek(&self) -> usize {
        self.input.as_ref().map_or(0, |i| {
            i.docs[self.cursor.doc as usize].2 - self.cursor.token as usize
        })
    }

    /// Hands `sink` the next chunk of at most `max` tokens of the current document (its bytes)
    /// and advances the cursor; returns the chunk's tokens (0 when no step is held: call
    /// [`Packer::ensure_input`] first).
    fn take_chunk(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let Some(input) = &self.input else {
            return 0;
        };
        let (shard, start, len) = input.docs[self.cursor.doc as usize];
        let done = self.cursor.token as usize;
        let n = (len - done).min(max);
        let isz = self.dtype.itemsize();
        if let Some(Batch::Ragged(b)) = input.shards[shard].get(&self.stream) {
            sink(&b.values()[(start + done) * isz..(start + done + n) * isz]);
        }
        self.cursor.token += n as u64;
        if self.cursor.token as usize == len {
            self.cursor = Cursor {
                doc: self.cursor.doc + 1,
                token: 0,
            };
            if self.cursor.doc as usize == input.docs.len() {
                // Every document of the step is packed: let it go (a state saved now resumes
                // from the loader's own position).
                self.input = None;
                self.cursor = Cursor::default();
            }
        }
        n
    }

    /// A pulled step's documents, checked.
    fn take_input(&self, before: LoaderState, shards: Vec<Shard>) -> Result<Input> {
        let mut docs = Vec::new();
        for (s, shard) in shards.iter().enumerate() {
            let Some(Batch::Ragged(b)) = shard.get(&self.stream) else {
                return Err(Error::invalid(format!(
                    "step {}: shard {s} has no Ragged stream {:?} to pack",
                    before.step, self.stream
                )));
            };
            if b.dtype() != self.dtype || b.ndim() != 1 {
                return Err(Error::invalid(format!(
                    "step {}: stream {:?} delivered {}-D {} records, packing expects 1-D {}",
                    before.step,
                    self.stream,
                    b.ndim(),
                    b.dtype(),
                    self.dtype
                )));
            }
            let cu = b.cu_seqlens();
            for w in cu.windows(2) {
                let (a, z) = (w[0] as usize, w[1] as usize);
                if z > a {
                    docs.push((s, a, z - a));
                }
            }
        }
        Ok(Input {
            shards,
            docs,
            before,
        })
    }
}

impl Packer {
    /// Concat: each row takes the stream's next `seq_len` tokens; `None` at the end of the
    /// stream (the last batch's rows past it are padding).
    fn concat_batch(&mut self, pull: &mut Pull<'_>) -> Result<Option<PackedBatch>> {
        if !self.ensure_input(pull)? {
            return Ok(None);
        }
        let (rows, l) = (self.opts.rows, self.opts.seq_len);
        let iota = self.iota.clone();
        let mut out = rows::Out::new(&*self.alloc, rows, l, self.dtype.itemsize())?;
        let mut more = true;
        for r in 0..rows {
            let (mut col, mut seg) = (0, 0);
            while more && col < l {
                more = self.ensure_input(pull)?;
                if !more {
                    break;
                }
                seg += 1;
                let at = col;
                col += self.take_chunk(l - at, &mut |b| out.put(r, at, seg, b, &iota));
            }
            out.pad(r, col);
        }
        Ok(Some(out.finish(self.dtype, rows, l)))
    }

    /// First-fit: each document (or `seq_len` piece of a longer one) goes into the first open
    /// row with room; with none and the pool full, the fullest open row (the first of equals) is
    /// emitted first. A row that fills up is emitted at once. At the end of the stream the open
    /// rows are emitted oldest first.
    fn first_fit_batch(&mut self, pull: &mut Pull<'_>) -> Result<Option<PackedBatch>> {
        if !self.ensure_input(pull)? && self.open.is_empty() {
            return Ok(None);
        }
        let (rows, l, isz) = (self.opts.rows, self.opts.seq_len, self.dtype.itemsize());
        let iota = self.iota.clone();
        let mut out = rows::Out::new(&*self.alloc, rows, l, isz)?;
        let mut emitted = 0;
        // The last emitted row's buffers, reused by the next row opened.
        let mut spare: Option<Row> = None;
        while emitted < rows {
            if let Some(j) = self.open.iter().position(|r| r.used(isz) == l) {
                let row = self.open.remove(j);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
                continue;
            }
            if !self.ensure_input(pull)? {
                if self.open.is_empty() {
                    break;
                }
                let row = self.open.remove(0);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
                continue;
            }
            let n = self.peek().min(l);
            let slot = match self.open.iter().position(|r| l - r.used(isz) >= n) {
                Some(i) => i,
                None => {
                    if self.open.len() >= self.opts.pool {
                        let j = rows::fullest(&self.open, isz);
                        let row = self.open.remove(j);
                        out.row(emitted, &row, &iota);
                        spare = Some(row);
                        emitted += 1;
                    }
                    self.open.push(
                        spare
                            .take()
                            .map_or_else(|| Row::with_capacity(l * isz), Row::cleared),
                    );
                    self.open.len() - 1
                }
            };
            let mut row = std::mem::take(&mut self.open[slot]);
            self.take_chunk(n, &mut |b| row.push(b, isz));
            if row.used(isz) == l && emitted < rows {
                self.open.remove(slot);
                out.row(emitted, &row, &iota);
                spare = Some(row);
                emitted += 1;
            } else {
                self.open[slot] = row;
            }
        }
        for r in emitted..rows {
            out.pad(r, 0);
        }
        Ok(Some(out.finish(self.dtype, rows, l)))
    }
}
