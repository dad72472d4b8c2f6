//! The multi-stream loader: sampler draw → per-shard zero-copy slices → gather of every named stream
//! → transform → consumer.
//!
//! * `workers == 0`: draw, gather and transform run in the caller's thread, on demand.
//! * `workers > 0`: each worker runs whole jobs. Draw + gather run under one shared lock (so the
//!   sampler and the step counter advance atomically with the gather), the transform runs outside
//!   it, and the result goes straight into a bounded queue of capacity `prefetch`. The gather under
//!   the lock fans out over the worker's private rayon pool (one thread per core). One worker
//!   preserves sampling order; several deliver in completion order.
//! * **Threads**: `workers` worker threads, plus one gather thread per core for each worker when
//!   there are 2 cores or more ([`LoaderOptions::threads`]); all are joined by [`Loader::close`].
//! * **Memory bound**: a worker holds at most one batch (it draws only after its previous result was
//!   queued) and the queue holds at most `prefetch`, so at most `workers + prefetch` batches are alive
//!   besides the ones the consumer holds.
//! * **Errors**: the first failing step `k` (draw, gather, transform or a caught panic) is delivered
//!   after every batch drawn before it; no batch drawn after it is queued once the failure is known,
//!   and then the loader stops. With several workers, a batch drawn after `k` that was already queued
//!   before `k` failed may still arrive ahead of the error (completion order).
//! * **Close**: [`Loader::close`] (and `Drop`) stops and joins every worker promptly, even one blocked
//!   on a full queue. The loader never closes stores, views, allocators or the sampler.
//! * **Resume**: [`Loader::step`] is the first step whose batch the consumer has not received. A loader
//!   built on a sampler sought to `s` yields exactly what an uninterrupted run yields from `s` (with
//!   0 or 1 worker; with several, the same set of batches in completion order).

use std::collections::BTreeSet;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded, select};
use parking_lot::{Condvar, Mutex};
use zrecord::{DenseBatch, DenseView, RaggedBatch, RaggedView};

use crate::error::{Error, Result};
use crate::sampler::Sampler;

/// One view of a stream: a Dense or Ragged store bound to a placement.
#[derive(Clone, Debug)]
pub enum StreamView {
    /// A fixed-shape stream.
    Dense(DenseView),
    /// A variable-shape stream.
    Ragged(RaggedView),
}

impl StreamView {
    /// Number of records.
    pub fn len(&self) -> u64 {
        match self {
            StreamView::Dense(v) => v.len(),
            StreamView::Ragged(v) => v.len(),
        }
    }

    /// True when the view holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gathers `idx` into one batch from the view's allocator.
    pub fn gather(&self, idx: &[u64]) -> zrecord::Result<Batch> {
        Ok(match self {
            StreamView::Dense(v) => Batch::Dense(v.gather(idx)?),
            StreamView::Ragged(v) => Batch::Ragged(v.gather(idx)?),
        })
    }
}

impl From<DenseView> for StreamView {
    fn from(v: DenseView) -> Self {
        StreamView::Dense(v)
    }
}

impl From<RaggedView> for StreamView {
    fn from(v: RaggedView) -> Self {
        StreamView::Ragged(v)
    }
}

/// One gathered stream value of a shard.
#[derive(Debug)]
pub enum Batch {
    /// From a Dense view: shape `(n, *item_shape)`.
    Dense(DenseBatch),
    /// From a Ragged view: packed `values`, `cu_seqlens`, `shapes`.
    Ragged(RaggedBatch),
}

impl Batch {
    /// The Dense batch, if this is one.
    pub fn as_dense(&self) -> Option<&DenseBatch> {
        match self {
            Batch::Dense(b) => Some(b),
            Batch::Ragged(_) => None,
        }
    }

    /// The Ragged batch, if this is one.
    pub fn as_ragged(&self) -> Option<&RaggedBatch> {
        match self {
            Batch::Ragged(b) => Some(b),
            Batch::Dense(_) => None,
        }
    }

    /// The allocation holding the batch.
    pub fn allocation(&self) -> &zrecord::Allocation {
        match self {
            Batch::Dense(b) => b.allocation(),
            Batch::Ragged(b) => b.allocation(),
        }
    }
}

/// The streams gathered at one shard position: one [`Batch`] per stream name, index-aligned (record
/// `r` of every batch comes from the same global index).
pub struct Shard {
    names: Arc<[Arc<str>]>,
    batches: Vec<Batch>,
}

impl Shard {
    /// The batch of stream `name`.
    pub fn get(&self, name: &str) -> Option<&Batch> {
        self.names
            .iter()
            .position(|n| &**n == name)
            .map(|i| &self.batches[i])
    }

    /// `(name, batch)` pairs in stream order (the order the streams were given to the loader).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Batch)> {
        self.names.iter().map(|n| &**n).zip(&self.batches)
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// True when the shard has no streams (never, for a shard a loader produced).
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The owned `(name, batch)` pairs in stream order.
    pub fn into_pairs(self) -> Vec<(Arc<str>, Batch)> {
        self.names.iter().cloned().zip(self.batches).collect()
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The collate step: the complete shard list in, any result out. Must be thread-safe when
/// `workers > 1`.
pub type Transform<T> = Arc<dyn Fn(Vec<Shard>) -> Result<T> + Send + Sync>;

/// Execution policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Background workers; 0 runs everything in the caller's thread.
    pub workers: usize,
    /// Output queue capacity (>= 1) when `workers > 0`; ignored when `workers == 0`.
    pub prefetch: usize,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            workers: 4,
            prefetch: 4,
        }
    }
}

impl LoaderOptions {
    /// Options with the given workers and prefetch.
    pub fn new(workers: usize, prefetch: usize) -> Self {
        LoaderOptions { workers, prefetch }
    }

    /// Background threads a loader with these options runs on this machine: `workers` worker
    /// threads, plus one (mostly sleeping) gather thread per core for each worker when there are
    /// 2 cores or more (see the module docs). All of them exist when the loader's constructor
    /// returns and are joined by [`Loader::close`].
    pub fn threads(&self) -> usize {
        match (self.workers, gather_threads_per_worker()) {
            (0, _) => 0,
            (w, g) if g >= 2 => w * (1 + g),
            (w, _) => w,
        }
    }
}

/// Draw + gather state, behind the shared lock in worker mode.
struct Source {
    /// `views[stream][shard]`.
    views: Vec<Vec<StreamView>>,
    names: Arc<[Arc<str>]>,
    shards: usize,
    batch: usize,
    sampler: Box<dyn Sampler>,
    next_step: u64,
}

impl Source {
    /// The step drawn, and its shards.
    fn produce(&mut self) -> (u64, Result<Vec<Shard>>) {
        let step = self.next_step;
        self.next_step = self.next_step.wrapping_add(1);
        let res = catch_unwind(AssertUnwindSafe(|| self.draw_and_gather()))
            .unwrap_or_else(|p| Err(Error::from_panic(p, "sampler or gather")));
        (step, res)
    }

    fn draw_and_gather(&mut self) -> Result<Vec<Shard>> {
        let idx = self.sampler.next()?;
        if idx.len() != self.batch {
            return Err(Error::Sampler(format!(
                "sampler drew {} indices, expected its batch size {}",
                idx.len(),
                self.batch
            )));
        }
        let per = self.batch / self.shards;
        let mut out = Vec::with_capacity(self.shards);
        for (j, slice) in idx.chunks_exact(per).enumerate() {
            let mut batches = Vec::with_capacity(self.views.len());
            for stream in &self.views {
                batches.push(stream[j].gather(slice)?);
            }
            out.push(Shard {
                names: self.names.clone(),
                batches,
            });
        }
        Ok(out)
    }
}

fn run_transform<T>(transform: &Transform<T>, shards: Vec<Shard>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(|| transform(shards)))
        .unwrap_or_else(|p| Err(Error::from_panic(p, "transform")))
}

/// State shared by the workers.
struct Shared<T> {
    source: Arc<Mutex<Source>>,
    transform: Transform<T>,
    stop: AtomicBool,
    /// Smallest failed step, `u64::MAX` while none failed.
    fail_step: AtomicU64,
    /// Steps drawn whose result is not yet queued (or dropped).
    inflight: Mutex<BTreeSet<u64>>,
    inflight_cv: Condvar,
}

impl<T> Shared<T> {
    fn finish(&self, step: u64) {
        self.inflight.lock().remove(&step);
        self.inflight_cv.notify_all();
    }

    /// Waits until every step before `step` is queued or dropped; false when stopped meanwhile.
    fn wait_for_earlier(&self, step: u64) -> bool {
        let mut g = self.inflight.lock();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if g.range(..step).next().is_none() {
                return true;
            }
            self.inflight_cv.wait_for(&mut g, Duration::from_millis(20));
        }
    }
}

/// Removes a step from the in-flight set however a job ends.
struct InflightGuard<'a, T> {
    shared: &'a Shared<T>,
    step: u64,
}

impl<T> Drop for InflightGuard<'_, T> {
    fn drop(&mut self) {
        self.shared.finish(self.step);
    }
}

type Message<T> = (u64, Result<T>);

fn worker_loop<T: Send>(shared: Arc<Shared<T>>, tx: Sender<Message<T>>, cancel: Receiver<()>) {
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        // Draw and gather under the shared lock (one gather at a time, fanned out over this
        // worker's gather threads); the transform runs outside it.
        let (step, drawn) = {
            let mut src = shared.source.lock();
            if shared.stop.load(Ordering::Acquire)
                || shared.fail_step.load(Ordering::Acquire) != u64::MAX
            {
                return;
            }
            let (step, drawn) = src.produce();
            shared.inflight.lock().insert(step);
            (step, drawn)
        };
        let _guard = InflightGuard {
            shared: &shared,
            step,
        };
        let res = drawn.and_then(|shards| run_transform(&shared.transform, shards));
        let failed = res.is_err();
        if failed {
            shared.fail_step.fetch_min(step, Ordering::AcqRel);
            // The error goes after every batch drawn before it.
            if !shared.wait_for_earlier(step) {
                return;
            }
        }
        if step > shared.fail_step.load(Ordering::Acquire) {
            // An earlier step failed: this batch comes after the error; drop it and stop.
            return;
        }
        // Fast path: a queue with room takes the batch without a two-channel select.
        let msg = match tx.try_send((step, res)) {
            Ok(()) => None,
            Err(crossbeam_channel::TrySendError::Full(m)) => Some(m),
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => return,
        };
        if let Some(msg) = msg {
            select! {
                send(tx, msg) -> sent => {
                    if sent.is_err() {
                        return;
                    }
                }
                recv(cancel) -> _ => return,
            }
        }
        if failed {
            return;
        }
    }
}

/// Threads each worker gathers with: gathers are serialized by the shared lock, so the one running
/// may use every core.
fn gather_threads_per_worker() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A worker thread's body. On a single core the worker gathers alone
/// ([`zrecord::sequential_gathers`]). Otherwise its loop runs inside a private rayon pool of one
/// thread per core, so a large gather fans out by work stealing among threads that belong to this
/// worker alone: no hand-off to a shared pool and back per batch (a measured 1.5x on 1 MiB
/// batches), and no other worker's long-running loop for a waiting thread to steal. Idle pool
/// threads sleep; they are joined before the worker thread ends.
///
/// Sends `ready` once every thread of the worker exists (the loader's constructor waits for it).
fn run_worker<T: Send>(
    w: usize,
    gather_threads: usize,
    shared: Arc<Shared<T>>,
    tx: Sender<Message<T>>,
    cancel: Receiver<()>,
    ready: Sender<()>,
) {
    let mut args = Some((shared, tx, cancel, ready));
    if gather_threads > 1 {
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(gather_threads)
            .thread_name(move |i| format!("loaderx-worker-{w}-gather-{i}"))
            .build_scoped(
                |thread| thread.run(),
                |pool| {
                    if let Some((shared, tx, cancel, ready)) = args.take() {
                        // The pool's threads are all spawned before this closure runs.
                        let _ = ready.send(());
                        drop(ready);
                        pool.install(|| worker_loop(shared, tx, cancel));
                    }
                },
            );
        if built.is_ok() {
            return;
        }
        // No pool (threads could not be started): gather on this thread instead.
    }
    if let Some((shared, tx, cancel, ready)) = args.take() {
        let _ = ready.send(());
        drop(ready);
        zrecord::sequential_gathers(|| worker_loop(shared, tx, cancel));
    }
}

struct Workers<T> {
    shared: Arc<Shared<T>>,
    rx: Receiver<Message<T>>,
    /// Dropped on close: every worker blocked on a full queue wakes up through `select!`.
    cancel: Option<Sender<()>>,
    handles: Vec<JoinHandle<()>>,
}

enum Exec<T> {
    Inline { transform: Transform<T> },
    Threads(Workers<T>),
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
        if batch == 0 || !batch.is_multiple_of(shards) {
            return Err(Error::invalid(format!(
                "the global batch {batch} does not divide evenly by the shard count {shards}"
            )));
        }
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
            });
            let (tx, rx) = bounded(options.prefetch);
            let (cancel_tx, cancel_rx) = bounded::<()>(0);
            let mut handles = Vec::with_capacity(options.workers);
            let gather_threads = gather_threads_per_worker();
            let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<()>();
            for w in 0..options.workers {
                let (job_shared, tx, cancel_rx) = (shared.clone(), tx.clone(), cancel_rx.clone());
                let ready = ready_tx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("loaderx-worker-{w}"))
                    .spawn(move || run_worker(w, gather_threads, job_shared, tx, cancel_rx, ready));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        let mut partial = Workers {
                            shared,
                            rx,
                            cancel: Some(cancel_tx),
                            handles,
                        };
                        Self::stop_workers(&mut partial);
                        return Err(Error::invalid(format!(
                            "could not start loader worker {w}: {e}"
                        )));
                    }
                }
            }
            // Return once every worker's threads exist (a worker that died first counts too:
            // its sender is gone), so the loader's thread count is settled when it is handed out.
            drop(ready_tx);
            for _ in 0..options.workers {
                if ready_rx.recv().is_err() {
                    break;
                }
            }
            Exec::Threads(Workers {
                shared,
                rx,
                cancel: Some(cancel_tx),
                handles,
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
        let (step, res) = match &self.exec {
            Exec::Inline { transform } => {
                let (step, drawn) = self.source.lock().produce();
                (
                    step,
                    drawn.and_then(|shards| run_transform(transform, shards)),
                )
            }
            Exec::Threads(w) => match w.rx.recv() {
                Ok(msg) => msg,
                Err(_) => {
                    // Every worker exited without an error (only after close): nothing more to give.
                    self.close();
                    return None;
                }
            },
        };
        if res.is_err() {
            self.close();
        } else {
            self.mark_delivered(step);
        }
        Some(res)
    }

    fn stop_workers(w: &mut Workers<T>) {
        w.shared.stop.store(true, Ordering::Release);
        w.cancel.take();
        w.shared.inflight_cv.notify_all();
        // Make room for a worker that is blocked on a full queue right now, and drop queued batches.
        while w.rx.try_recv().is_ok() {}
        for h in w.handles.drain(..) {
            // A worker never panics (user code runs under catch_unwind); nothing to report if it did.
            let _ = h.join();
        }
        while w.rx.try_recv().is_ok() {}
    }

    /// Stops and joins every worker and drops queued batches. Idempotent; also run by `Drop`. The
    /// stores, views, allocators and the sampler stay open.
    pub fn close(&mut self) {
        self.done = true;
        if let Exec::Threads(w) = &mut self.exec {
            Self::stop_workers(w);
        }
    }

    /// Closes the loader and hands back its sampler, positioned after the last draw (workers may
    /// have drawn ahead of [`Loader::step`]; seek it to `step()` to resume).
    pub fn into_sampler(mut self) -> Box<dyn Sampler> {
        self.close();
        let placeholder = Source {
            views: Vec::new(),
            names: self.names.clone(),
            shards: 1,
            batch: 0,
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
