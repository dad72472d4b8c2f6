//! The multi-stream loader: sampler draw → per-shard zero-copy slices → gather of every named stream
//! → transform → consumer.
//!
//! * `workers == 0`: draw, gather and transform run in the caller's thread, on demand.
//! * `workers > 0`: each worker runs whole jobs. Draw + gather run under one shared lock (so the
//!   sampler and the step counter advance atomically with the gather), the transform runs outside
//!   it, and the result goes straight into a bounded queue of capacity `prefetch`. The gather under
//!   the lock fans out over the loader's rayon pool. One worker preserves sampling order; several
//!   deliver in completion order, or in step order with [`LoaderOptions::ordered`] (the consumer
//!   holds early batches in a reorder buffer keyed by step until the earlier ones arrive).
//! * **Window**: a worker draws step `s` only while `s < low + workers + prefetch` (ordered) or
//!   `s <= low + workers + prefetch` (completion order), where `low` is the consumer's first
//!   undelivered step (`window.rs`). So the batches drawn and not delivered in ordered delivery
//!   (reorder buffer included), and the steps delivered past `low` in completion order, are at
//!   most `workers + prefetch`.
//! * **Pacing**: while transforms take under 1/16 of a gather, all workers but one rest (a second
//!   one could only add hand-offs to a serialized gather), also while the running one waits on a
//!   full queue; they run again as soon as transforms are measured longer (and then a worker that
//!   finds the queue full wakes one).
//! * **Threads**: one rayon pool of `workers + cores - 1` threads, the workers' loops plus
//!   `cores - 1` gather helpers, when there are 2 cores or more; `workers` threads on one core
//!   ([`LoaderOptions::threads`]). All are joined by [`Loader::close`].
//! * **Memory bound**: a worker holds at most one batch (it draws only after its previous result was
//!   queued) and the queue holds at most `prefetch`, so at most `workers + prefetch` batches are alive
//!   besides the ones the consumer holds; in ordered delivery the window bounds the queue, the
//!   workers and the reorder buffer together to the same `workers + prefetch`. While transforms are short (paced), at most
//!   `prefetch + 1` are, once the batches the workers drew before the first measurement are taken.
//! * **Errors**: the first failing step `k` (draw, gather, transform or a caught panic) is delivered
//!   after every batch drawn before it; no batch drawn after it is queued once the failure is known,
//!   and then the loader stops. With several workers in completion order, a batch drawn after `k`
//!   that was already queued before `k` failed may still arrive ahead of the error; in ordered
//!   delivery none does.
//! * **Close**: [`Loader::close`] (and `Drop`) stops and joins every worker promptly, even one blocked
//!   on a full queue. The loader never closes stores, views, allocators or the sampler.
//! * **Several processes**: with [`LoaderOptions::process_count`] `N > 1`, the sampler's batch is
//!   the global batch of a data-parallel job; this process draws only positions
//!   `r * B/N .. (r + 1) * B/N` of it ([`Sampler::next_range`]) and splits that slice over its
//!   views. Every process runs the same sampler, so they agree on each global batch without talking.
//! * **Resume**: [`Loader::step`] is the first step whose batch the consumer has not received.
//!   [`Loader::state_dict`] adds the steps delivered past it (completion order) and what the loader
//!   reads; [`Loader::load_state_dict`] continues exactly where it left off, in either mode, with
//!   any worker count and, with the same global batch, any process count (`crate::state`).
//! * **Mixtures**: [`Loader::mixture`] draws each global batch from several sources by weight
//!   (`crate::mixture`); a step yields one shard per shard position and source present there.
//!
//! The files follow the data path:
//!
//! * `options.rs`: [`LoaderOptions`] and [`MixtureSource`];
//! * `stream.rs`: the views, the gathered [`Batch`] and [`Shard`], the [`Transform`] type;
//! * `source.rs`: the draw + gather step (`Source`), from a sampler or a mixture's plan;
//! * `worker.rs`: the worker loop, the state the workers share, failure ordering and stop;
//! * `pacing.rs`: which workers run and which rest;
//! * `threads.rs`: the thread pool or plain threads, started and joined;
//! * `window.rs`: how far workers may draw ahead of the consumer;
//! * `handoff.rs`: the consumer's receive from the bounded queue;
//! * `build.rs`: the construction checks and the streams' fingerprint;
//! * `mixed.rs`: the mixture constructor and its checks;
//! * `resume.rs`: saving and loading the state, and a mixture's weight changes;
//! * this file: [`Loader`], which picks inline or worker execution, orders delivery and tracks
//!   the resume position.

mod build;
mod handoff;
mod mixed;
mod options;
mod pacing;
mod resume;
mod source;
mod stream;
mod threads;
mod window;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use self::build::{check_batch, collect_streams, prints, schema_label};
use self::handoff::recv_spinning;
pub use self::options::{LoaderOptions, MixtureSource};
use self::source::{Draw, Source};
use self::stream::run_transform;
pub use self::stream::{
    BLOCK_BUFFER_BYTES, Batch, Shard, StreamView, Transform, block_buffer_blocks,
};
use self::worker::{Workers, start_workers, stop_workers};
use crate::error::{Error, Result};
use crate::mixture::MixtureSpec;
use crate::sampler::{IndexSpec, Mode, Sampler};
use crate::state::StreamPrint;

enum Exec<T> {
    Inline,
    Threads(Workers<T>),
    /// Closed in a `fork`ed child: the workers belonged to the parent and were let go unjoined.
    Forked,
}

/// A multi-stream loader over zrecord views. Iterate it to receive transformed batches.
pub struct Loader<T: Send + 'static> {
    source: Arc<Mutex<Source>>,
    exec: Exec<T>,
    transform: Transform<T>,
    options: LoaderOptions,
    names: Arc<[Arc<str>]>,
    shards: usize,
    batch: usize,
    /// The sampler's spec, `None` for a custom sampler or a mixture.
    spec: Option<IndexSpec>,
    /// A mixture's spec (its weight schedule as it grows), `None` without a mixture.
    mixture: Option<MixtureSpec>,
    /// The streams' fingerprint for the resume state.
    prints: Vec<StreamPrint>,
    /// First step not yet delivered to the consumer, and delivered steps beyond it.
    next_undelivered: u64,
    delivered_ahead: BTreeSet<u64>,
    /// Ordered delivery: batches received ahead of `next_undelivered`, by step (at most
    /// `workers + prefetch`, the window's bound).
    pending: BTreeMap<u64, Result<T>>,
    /// Stopped: after an error, or closed.
    done: bool,
    /// Closed by [`Loader::close`] (or `Drop`): a state can no longer be loaded.
    closed: bool,
    /// Moving average of the consumer's waits on an empty queue, in nanoseconds (`None` before
    /// the first wait).
    wait_ns: Option<u64>,
    /// The process that started the loader: in a `fork`ed child the loader refuses to run.
    pid: u32,
}

impl<T: Send + 'static> fmt::Debug for Loader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("streams", &self.names)
            .field("shards", &self.shards)
            .field("options", &self.options)
            .field("step", &self.step())
            .field("done", &self.done)
            .finish()
    }
}

impl Loader<Vec<Shard>> {
    /// A loader whose transform is the identity: each item is the shard list.
    ///
    /// `streams` maps stream names to non-empty, equally long lists of views (one per shard
    /// position); every view must hold the same number of records, at least the sampler's `len`; the
    /// sampler's batch size must divide evenly by the shard count; `prefetch >= 1`. The sampler's
    /// current step is where the loader starts.
    pub fn new<I, S>(streams: I, sampler: Box<dyn Sampler>, options: LoaderOptions) -> Result<Self>
    where
        I: IntoIterator<Item = (S, Vec<StreamView>)>,
        S: AsRef<str>,
    {
        Loader::with_transform(streams, sampler, options, Ok)
    }
}

impl<T: Send + 'static> Loader<T> {
    /// A loader with a transform (the collate: the shard list in, any `T` out). See [`Loader::new`]
    /// for the stream and option requirements.
    pub fn with_transform<I, S, F>(
        streams: I,
        sampler: Box<dyn Sampler>,
        options: LoaderOptions,
        transform: F,
    ) -> Result<Self>
    where
        I: IntoIterator<Item = (S, Vec<StreamView>)>,
        S: AsRef<str>,
        F: Fn(Vec<Shard>) -> Result<T> + Send + Sync + 'static,
    {
        Self::with_transform_arc(streams, sampler, options, Arc::new(transform))
    }

    /// As [`Loader::with_transform`], with a shared transform object.
    pub fn with_transform_arc<I, S>(
        streams: I,
        sampler: Box<dyn Sampler>,
        options: LoaderOptions,
        transform: Transform<T>,
    ) -> Result<Self>
    where
        I: IntoIterator<Item = (S, Vec<StreamView>)>,
        S: AsRef<str>,
    {
        let (names, views) = collect_streams(streams, "")?;
        let shards = views[0].len();
        let records = views[0][0].len();
        let batch = sampler.batch_size();
        let slice = check_batch(batch, shards, &options)?;
        if sampler.len() > records {
            return Err(Error::invalid(format!(
                "the sampler draws from {} indices but the streams hold {records} records",
                sampler.len()
            )));
        }
        let prints = prints(0, &names, &views, |i, j| schema_label(&views[i][j]));
        let names: Arc<[Arc<str>]> = names.into();
        let start = sampler.step();
        let spec = sampler.spec();
        // A block shuffle reads each block once into a bounded buffer (stream.rs).
        if let Some(IndexSpec {
            mode: Mode::Block { block, window },
            ..
        }) = spec
        {
            for v in views.iter().flatten() {
                v.buffer_for_blocks(block, window, batch)?;
            }
        }
        let source = Source::new(
            vec![views],
            names.clone(),
            batch,
            slice,
            Draw::Sampler(sampler),
            start,
        );
        Self::assemble(source, transform, options, (spec, None), prints)
    }

    /// The loader around a built source, its workers started.
    fn assemble(
        source: Source,
        transform: Transform<T>,
        options: LoaderOptions,
        (spec, mixture): (Option<IndexSpec>, Option<MixtureSpec>),
        prints: Vec<StreamPrint>,
    ) -> Result<Self> {
        let (names, shards, batch, start) = (
            source.names.clone(),
            source.shards,
            source.batch,
            source.next_step,
        );
        let source = Arc::new(Mutex::new(source));
        let exec = Self::start(&source, &transform, &options, start)?;
        Ok(Loader {
            source,
            exec,
            transform,
            options,
            names,
            shards,
            batch,
            spec,
            mixture,
            prints,
            next_undelivered: start,
            delivered_ahead: BTreeSet::new(),
            pending: BTreeMap::new(),
            done: false,
            closed: false,
            wait_ns: None,
            pid: std::process::id(),
        })
    }

    /// Inline execution, or workers drawing from `low` on.
    fn start(
        source: &Arc<Mutex<Source>>,
        transform: &Transform<T>,
        options: &LoaderOptions,
        low: u64,
    ) -> Result<Exec<T>> {
        Ok(if options.workers == 0 {
            Exec::Inline
        } else {
            Exec::Threads(start_workers(
                source.clone(),
                transform.clone(),
                options.workers,
                options.prefetch,
                options.ordered,
                low,
            )?)
        })
    }

    /// The stream names, in order.
    pub fn stream_names(&self) -> Vec<&str> {
        self.names.iter().map(|n| &**n).collect()
    }

    /// The first view of stream `name` (of source 0, for a mixture).
    pub fn stream_view(&self, name: &str) -> Option<StreamView> {
        let i = self.names.iter().position(|n| &**n == name)?;
        let src = self.source.lock();
        src.views.first()?.get(i)?.first().cloned()
    }

    /// Number of shard positions (views per stream).
    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// The execution policy.
    pub fn options(&self) -> LoaderOptions {
        self.options
    }

    /// The low-water step: the first global step whose batch the consumer has not received. In
    /// ordered delivery (and with 0 or 1 worker) every step before it was delivered, in order; in
    /// completion order some steps after it may have been delivered too, which
    /// [`Loader::state_dict`] lists. Save and load that state to resume exactly.
    pub fn step(&self) -> u64 {
        self.next_undelivered
    }

    /// True once the loader stopped (closed, or after delivering an error).
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn mark_delivered(&mut self, step: u64) {
        if step == self.next_undelivered {
            self.next_undelivered = self.next_undelivered.wrapping_add(1);
            while self.delivered_ahead.remove(&self.next_undelivered) {
                self.next_undelivered = self.next_undelivered.wrapping_add(1);
            }
            if let Exec::Threads(w) = &self.exec {
                w.shared.window.advance(self.next_undelivered);
            }
        } else {
            self.delivered_ahead.insert(step);
        }
    }

    /// The next message from the workers: in completion order the first to arrive, in ordered
    /// delivery the one for `next_undelivered` (a loader bug's report, step `u64::MAX`, at once).
    /// `None` once every worker exited.
    fn receive(&mut self) -> Option<(u64, Result<T>)> {
        let Exec::Threads(w) = &self.exec else {
            return None;
        };
        loop {
            if self.options.ordered {
                let want = self.next_undelivered;
                if let Some(res) = self.pending.remove(&want) {
                    return Some((want, res));
                }
            }
            // Polling takes a core: only while gathers leave one free.
            let may_poll = !w.shared.pacing.fanned_out.load(Ordering::Relaxed);
            let (step, res) = recv_spinning(&w.rx, &mut self.wait_ns, may_poll).ok()?;
            if !self.options.ordered || step == self.next_undelivered || step == u64::MAX {
                return Some((step, res));
            }
            self.pending.insert(step, res);
        }
    }

    fn next_item(&mut self) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        let now = std::process::id();
        if now != self.pid {
            self.close();
            return Some(Err(Error::Forked {
                started_in: self.pid,
                used_in: now,
            }));
        }
        let (step, res) = match &self.exec {
            Exec::Inline => {
                let (step, drawn) = self.source.lock().produce();
                (
                    step,
                    drawn.and_then(|shards| run_transform(&self.transform, shards)),
                )
            }
            Exec::Threads(_) => match self.receive() {
                Some(msg) => msg,
                None => {
                    // Every worker exited without an error (only after close): nothing more to give.
                    self.stop();
                    return None;
                }
            },
            // Only set by `close()`, after which `done` returns above.
            Exec::Forked => return None,
        };
        if res.is_err() {
            self.stop();
        } else {
            self.mark_delivered(step);
        }
        Some(res)
    }

    /// Stops and joins the workers and drops what they drew ahead; the loader delivers nothing
    /// more until a state is loaded.
    fn stop(&mut self) {
        self.done = true;
        self.pending.clear();
        if std::process::id() != self.pid {
            if let Exec::Threads(w) = std::mem::replace(&mut self.exec, Exec::Forked) {
                // Joining or signalling threads that exist only in the parent would hang.
                std::mem::forget(w);
            }
            return;
        }
        if let Exec::Threads(w) = &mut self.exec {
            stop_workers(w);
        }
    }

    /// Stops and joins every worker and drops queued batches. Idempotent; also run by `Drop`. The
    /// stores, views, allocators and the sampler stay open.
    ///
    /// In a `fork`ed child the workers do not exist: nothing is joined, and what the parent's
    /// workers held is left alone (it belongs to the parent's copy).
    pub fn close(&mut self) {
        self.closed = true;
        self.stop();
    }

    /// Closes the loader and hands back its sampler, positioned after the last draw (workers may
    /// have drawn ahead of [`Loader::step`]; seek it to `step()` to resume). A mixture loader has
    /// no sampler: it hands back one that fails every draw.
    pub fn into_sampler(mut self) -> Box<dyn Sampler> {
        self.close();
        if std::process::id() != self.pid {
            // A forked child: a parent worker may have held the lock at the fork, forever here.
            return Box::new(Exhausted);
        }
        let mut src = self.source.lock();
        match std::mem::replace(&mut src.draw, Draw::Sampler(Box::new(Exhausted))) {
            Draw::Sampler(s) => s,
            Draw::Mixture(_) => Box::new(Exhausted),
        }
    }
}

/// Stand-in left in a loader whose sampler was handed back.
struct Exhausted;

impl Sampler for Exhausted {
    fn next(&mut self) -> Result<&[u64]> {
        Err(Error::Sampler(
            "the sampler was taken out of this loader".into(),
        ))
    }
    fn batch_size(&self) -> usize {
        0
    }
    fn len(&self) -> u64 {
        0
    }
    fn step(&self) -> u64 {
        0
    }
    fn seek(&mut self, _step: u64) -> Result<()> {
        Ok(())
    }
}

impl<T: Send + 'static> Iterator for Loader<T> {
    type Item = Result<T>;

    /// The next transformed batch; an error is delivered once, then `None` until a state is
    /// loaded.
    fn next(&mut self) -> Option<Result<T>> {
        self.next_item()
    }
}

impl<T: Send + 'static> Drop for Loader<T> {
    fn drop(&mut self) {
        self.close();
    }
}
