//! The multi-stream loader: sampler draw → per-shard zero-copy slices → gather of every named stream
//! → transform → consumer.
//!
//! * `workers == 0`: draw, gather and transform run in the caller's thread, on demand.
//! * `workers > 0`: each worker runs whole jobs. Draw + gather run under one shared lock (so the
//!   sampler and the step counter advance atomically with the gather), the transform runs outside
//!   it, and the result goes straight into a bounded queue of capacity `prefetch`. The gather under
//!   the lock fans out over the loader's rayon pool. One worker preserves sampling order; several
//!   deliver in completion order.
//! * **Pacing**: while transforms take under 1/16 of a gather, all workers but one rest (a second
//!   one could only add hand-offs to a serialized gather), also while the running one waits on a
//!   full queue; they run again as soon as transforms are measured longer (and then a worker that
//!   finds the queue full wakes one).
//! * **Threads**: one rayon pool of `workers + cores - 1` threads, the workers' loops plus
//!   `cores - 1` gather helpers, when there are 2 cores or more; `workers` threads on one core
//!   ([`LoaderOptions::threads`]). All are joined by [`Loader::close`].
//! * **Memory bound**: a worker holds at most one batch (it draws only after its previous result was
//!   queued) and the queue holds at most `prefetch`, so at most `workers + prefetch` batches are alive
//!   besides the ones the consumer holds. While transforms are short (paced), at most
//!   `prefetch + 1` are, once the batches the workers drew before the first measurement are taken.
//! * **Errors**: the first failing step `k` (draw, gather, transform or a caught panic) is delivered
//!   after every batch drawn before it; no batch drawn after it is queued once the failure is known,
//!   and then the loader stops. With several workers, a batch drawn after `k` that was already queued
//!   before `k` failed may still arrive ahead of the error (completion order).
//! * **Close**: [`Loader::close`] (and `Drop`) stops and joins every worker promptly, even one blocked
//!   on a full queue. The loader never closes stores, views, allocators or the sampler.
//! * **Several processes**: with [`LoaderOptions::process_count`] `N > 1`, the sampler's batch is
//!   the global batch of a data-parallel job; this process draws only positions
//!   `r * B/N .. (r + 1) * B/N` of it ([`Sampler::next_range`]) and splits that slice over its
//!   views. Every process runs the same sampler, so they agree on each global batch without talking.
//! * **Resume**: [`Loader::step`] is the first step whose batch the consumer has not received. A loader
//!   built on a sampler sought to `s` yields exactly what an uninterrupted run yields from `s` (with
//!   0 or 1 worker; with several, the same set of batches in completion order).
//!
//! The files follow the data path:
//!
//! * `stream.rs`: the views, the gathered [`Batch`] and [`Shard`], the [`Transform`] type, and the
//!   draw + gather step (`Source`);
//! * `worker.rs`: the worker loop, the state the workers share, failure ordering and stop;
//! * `pacing.rs`: which workers run and which rest;
//! * `threads.rs`: the thread pool or plain threads, started and joined;
//! * `handoff.rs`: the consumer's receive from the bounded queue;
//! * this file: [`LoaderOptions`] and [`Loader`], which validates the streams, picks inline or
//!   worker execution and tracks the resume position.

mod handoff;
mod pacing;
mod stream;
mod threads;
mod worker;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::bounded;
use parking_lot::{Condvar, Mutex};

use self::handoff::recv_spinning;
use self::pacing::Pacing;
pub use self::stream::{Batch, Shard, StreamView, Transform};
use self::stream::{Source, run_transform};
use self::threads::{Threads, cores};
use self::worker::{Shared, Workers, run_worker, stop_workers};
use crate::error::{Error, Result};
use crate::sampler::Sampler;

/// Execution policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Background workers; 0 runs everything in the caller's thread.
    pub workers: usize,
    /// Output queue capacity (>= 1) when `workers > 0`; ignored when `workers == 0`.
    pub prefetch: usize,
    /// This process's rank in a data-parallel job (`< process_count`): it receives the contiguous
    /// slice `process_index` of every global batch. 0 for a single process.
    pub process_index: usize,
    /// Processes sharing each global batch (>= 1); the sampler's batch must divide by
    /// `process_count x shards`. 1 for a single process.
    pub process_count: usize,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions::new(4, 4)
    }
}

impl LoaderOptions {
    /// Options with the given workers and prefetch, for a single process.
    pub fn new(workers: usize, prefetch: usize) -> Self {
        LoaderOptions {
            workers,
            prefetch,
            process_index: 0,
            process_count: 1,
        }
    }

    /// These options for process `index` of `count` in a data-parallel job.
    pub fn process(self, index: usize, count: usize) -> Self {
        LoaderOptions {
            process_index: index,
            process_count: count,
            ..self
        }
    }

    /// Background threads a loader with these options runs on this machine: `workers` worker
    /// threads, plus `cores - 1` gather helpers (sleeping while idle) when there are 2 cores or
    /// more (see the module docs). All of them exist when the loader's constructor returns and are
    /// joined by [`Loader::close`].
    pub fn threads(&self) -> usize {
        match (self.workers, cores()) {
            (0, _) => 0,
            (w, cores) if cores >= 2 => w + cores - 1,
            (w, _) => w,
        }
    }
}

enum Exec<T> {
    Inline {
        transform: Transform<T>,
    },
    Threads(Workers<T>),
    /// Closed in a `fork`ed child: the workers belonged to the parent and were let go unjoined.
    Forked,
}

/// A multi-stream loader over zrecord views. Iterate it to receive transformed batches.
pub struct Loader<T: Send + 'static> {
    source: Arc<Mutex<Source>>,
    exec: Exec<T>,
    options: LoaderOptions,
    names: Arc<[Arc<str>]>,
    shards: usize,
    /// First step not yet delivered to the consumer, and delivered steps beyond it.
    next_undelivered: u64,
    delivered_ahead: BTreeSet<u64>,
    done: bool,
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
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut views: Vec<Vec<StreamView>> = Vec::new();
        for (name, list) in streams {
            let name = name.as_ref();
            if names.iter().any(|n| &**n == name) {
                return Err(Error::invalid(format!("stream {name:?} is given twice")));
            }
            if list.is_empty() {
                return Err(Error::invalid(format!(
                    "stream {name:?} has an empty view list"
                )));
            }
            names.push(Arc::from(name));
            views.push(list);
        }
        if views.is_empty() {
            return Err(Error::invalid("a loader needs at least one stream"));
        }
        let shards = views[0].len();
        for (name, list) in names.iter().zip(&views) {
            if list.len() != shards {
                return Err(Error::invalid(format!(
                    "stream {name:?} has {} views but stream {:?} has {shards}; every stream needs one view per shard",
                    list.len(),
                    names[0]
                )));
            }
        }
        let records = views[0][0].len();
        for (name, list) in names.iter().zip(&views) {
            for (j, v) in list.iter().enumerate() {
                if v.len() != records {
                    return Err(Error::invalid(format!(
                        "stream {name:?} view {j} holds {} records but stream {:?} view 0 holds {records}; all views must hold the same records",
                        v.len(),
                        names[0]
                    )));
                }
            }
        }
        let batch = sampler.batch_size();
        let (rank, procs) = (options.process_index, options.process_count);
        if procs == 0 || rank >= procs {
            return Err(Error::invalid(format!(
                "process_index {rank} must be below process_count {procs} (and process_count >= 1)"
            )));
        }
        if batch == 0 || !batch.is_multiple_of(shards) {
            return Err(Error::invalid(format!(
                "the global batch {batch} does not divide evenly by the shard count {shards}"
            )));
        }
        if !batch.is_multiple_of(procs * shards) {
            return Err(Error::invalid(format!(
                "the global batch {batch} does not divide evenly by process_count {procs} x \
                 {shards} views per stream"
            )));
        }
        let local = batch / procs;
        let slice = rank * local..(rank + 1) * local;
        if sampler.len() > records {
            return Err(Error::invalid(format!(
                "the sampler draws from {} indices but the streams hold {records} records",
                sampler.len()
            )));
        }
        if options.workers > 0 && options.prefetch == 0 {
            return Err(Error::invalid("prefetch must be at least 1"));
        }
        let names: Arc<[Arc<str>]> = names.into();
        let start = sampler.step();
        let source = Arc::new(Mutex::new(Source {
            views,
            names: names.clone(),
            shards,
            batch,
            slice,
            sampler,
            next_step: start,
        }));
        let exec = if options.workers == 0 {
            Exec::Inline { transform }
        } else {
            let shared = Arc::new(Shared {
                source: source.clone(),
                transform,
                stop: AtomicBool::new(false),
                fail_step: AtomicU64::new(u64::MAX),
                inflight: Mutex::new(BTreeSet::new()),
                inflight_cv: Condvar::new(),
                pacing: Pacing::new(options.workers),
            });
            let (tx, rx) = bounded(options.prefetch);
            let (cancel_tx, cancel_rx) = bounded::<()>(0);
            let job = || -> Box<dyn FnOnce() + Send> {
                let (shared, tx, cancel_rx) = (shared.clone(), tx.clone(), cancel_rx.clone());
                Box::new(move || run_worker(shared, tx, cancel_rx))
            };
            let threads = match Threads::start(options.workers, job) {
                Ok(t) => t,
                Err((threads, why)) => {
                    let mut partial = Workers {
                        shared,
                        rx,
                        cancel: Some(cancel_tx),
                        threads,
                    };
                    stop_workers(&mut partial);
                    return Err(Error::invalid(why));
                }
            };
            Exec::Threads(Workers {
                shared,
                rx,
                cancel: Some(cancel_tx),
                threads,
            })
        };
        Ok(Loader {
            source,
            exec,
            options,
            names,
            shards,
            next_undelivered: start,
            delivered_ahead: BTreeSet::new(),
            done: false,
            wait_ns: None,
            pid: std::process::id(),
        })
    }

    /// The stream names, in order.
    pub fn stream_names(&self) -> Vec<&str> {
        self.names.iter().map(|n| &**n).collect()
    }

    /// Number of shard positions (views per stream).
    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// The execution policy.
    pub fn options(&self) -> LoaderOptions {
        self.options
    }

    /// The resume position: the first sampler step whose batch the consumer has not received. With 0
    /// or 1 worker, every step before it was delivered, in order; seek a sampler here to resume.
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
        } else {
            self.delivered_ahead.insert(step);
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
            Exec::Inline { transform } => {
                let (step, drawn) = self.source.lock().produce();
                (
                    step,
                    drawn.and_then(|shards| run_transform(transform, shards)),
                )
            }
            Exec::Threads(w) => match recv_spinning(
                &w.rx,
                &mut self.wait_ns,
                // Polling takes a core: only while gathers leave one free.
                !w.shared.pacing.fanned_out.load(Ordering::Relaxed),
            ) {
                Ok(msg) => msg,
                Err(_) => {
                    // Every worker exited without an error (only after close): nothing more to give.
                    self.close();
                    return None;
                }
            },
            // Only set by `close()`, after which `done` returns above.
            Exec::Forked => return None,
        };
        if res.is_err() {
            self.close();
        } else {
            self.mark_delivered(step);
        }
        Some(res)
    }

    /// Stops and joins every worker and drops queued batches. Idempotent; also run by `Drop`. The
    /// stores, views, allocators and the sampler stay open.
    ///
    /// In a `fork`ed child the workers do not exist: nothing is joined, and what the parent's
    /// workers held is left alone (it belongs to the parent's copy).
    pub fn close(&mut self) {
        self.done = true;
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

    /// Closes the loader and hands back its sampler, positioned after the last draw (workers may
    /// have drawn ahead of [`Loader::step`]; seek it to `step()` to resume).
    pub fn into_sampler(mut self) -> Box<dyn Sampler> {
        self.close();
        if std::process::id() != self.pid {
            // A forked child: a parent worker may have held the lock at the fork, forever here.
            return Box::new(Exhausted);
        }
        let placeholder = Source {
            views: Vec::new(),
            names: self.names.clone(),
            shards: 1,
            batch: 0,
            slice: 0..0,
            sampler: Box::new(Exhausted),
            next_step: 0,
        };
        let mut src = self.source.lock();
        std::mem::replace(&mut *src, placeholder).sampler
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

    /// The next transformed batch; an error is delivered once, then `None` forever.
    fn next(&mut self) -> Option<Result<T>> {
        self.next_item()
    }
}

impl<T: Send + 'static> Drop for Loader<T> {
    fn drop(&mut self) {
        self.close();
    }
}
