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
//!   one could only add hand-offs to a serialized gather); they run again as soon as transforms
//!   are measured longer, or when the running worker finds the queue full.
//! * **Threads**: one rayon pool of `workers + cores - 1` threads, the workers' loops plus
//!   `cores - 1` gather helpers, when there are 2 cores or more; `workers` threads on one core
//!   ([`LoaderOptions::threads`]). All are joined by [`Loader::close`].
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
use std::time::{Duration, Instant};

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
    bench: Bench,
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
    // However this loop ends, no resting worker may wait for a wake-up that nobody will send.
    struct WakeOnExit<'a>(&'a Bench);
    impl Drop for WakeOnExit<'_> {
        fn drop(&mut self) {
            self.0.wake_all();
        }
    }
    let _wake = WakeOnExit(&shared.bench);
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if !shared.bench.pace(&shared.stop) {
            return;
        }
        // Draw and gather under the shared lock (one gather at a time, fanned out over the
        // loader's gather threads); the transform runs outside it.
        let (started, step, drawn) = {
            let mut src = shared.source.lock();
            if shared.stop.load(Ordering::Acquire)
                || shared.fail_step.load(Ordering::Acquire) != u64::MAX
            {
                return;
            }
            let started = Instant::now();
            let fan_outs = zrecord::gather_fan_outs();
            let (step, drawn) = src.produce();
            shared
                .bench
                .fanned_out
                .store(zrecord::gather_fan_outs() != fan_outs, Ordering::Relaxed);
            shared.inflight.lock().insert(step);
            (started, step, drawn)
        };
        let gathered = Instant::now();
        let _guard = InflightGuard {
            shared: &shared,
            step,
        };
        let res = drawn.and_then(|shards| run_transform(&shared.transform, shards));
        shared.bench.record(gathered - started, gathered.elapsed());
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
            // While this worker waits for room, a resting one may gather the batch after it.
            shared.bench.block();
            let sent = select! {
                send(tx, msg) -> sent => sent.is_ok(),
                recv(cancel) -> _ => false,
            };
            shared.bench.unblock();
            if !sent {
                return;
            }
        }
        if failed {
            return;
        }
    }
}

/// Paces the workers: all of them run while transforms are long enough to overlap with gathers,
/// and all but one rest while they are not.
///
/// Gathers are serialized, so a second worker adds throughput only by transforming while another
/// gathers. When transforms take less than 1/16 of a gather (moving averages over recent batches),
/// one worker keeps the gather busy on its own, and another one would only add a lock hand-off
/// and two context switches per batch on the cores the gather needs. Such a worker rests (sleeps)
/// before its next draw, unless it is the last one running and not blocked on a full queue. A
/// running worker wakes one resting worker whenever it measures transforms long again, and before
/// it blocks on a full queue (so a slow consumer still finds `workers + prefetch` batches ready, as
/// without pacing); every worker that exits, and `close`, wakes them all.
struct Bench {
    state: Mutex<BenchState>,
    wake: Condvar,
    /// Moving averages in nanoseconds, 0 until measured. Updated without a lock: a lost update
    /// only delays the estimate by a batch.
    gather_ns: AtomicU64,
    transform_ns: AtomicU64,
    /// Whether the last gather was split across the pool, i.e. kept every core busy.
    fanned_out: AtomicBool,
}

struct BenchState {
    workers: usize,
    /// Running workers blocked on a full queue.
    blocked: usize,
    resting: usize,
    /// Wake-ups sent and not yet taken by a resting worker.
    wakeups: usize,
}

impl BenchState {
    /// Workers not resting (running, or blocked on a full queue).
    fn running(&self) -> usize {
        self.workers - self.resting
    }
}

impl Bench {
    fn new(workers: usize) -> Bench {
        Bench {
            state: Mutex::new(BenchState {
                workers,
                blocked: 0,
                resting: 0,
                wakeups: 0,
            }),
            wake: Condvar::new(),
            gather_ns: AtomicU64::new(0),
            transform_ns: AtomicU64::new(0),
            fanned_out: AtomicBool::new(false),
        }
    }

    /// Folds one batch's gather and transform times into the averages.
    fn record(&self, gather: Duration, transform: Duration) {
        fn fold(avg: &AtomicU64, sample: Duration) {
            let x = u64::try_from(sample.as_nanos())
                .unwrap_or(u64::MAX)
                .clamp(1, 1 << 50);
            let a = avg.load(Ordering::Relaxed);
            avg.store(
                if a == 0 { x } else { a - a / 8 + x / 8 },
                Ordering::Relaxed,
            );
        }
        fold(&self.gather_ns, gather);
        fold(&self.transform_ns, transform);
    }

    /// True once transforms are measured to be too short to overlap usefully with gathers.
    fn transforms_short(&self) -> bool {
        let (g, t) = (
            self.gather_ns.load(Ordering::Relaxed),
            self.transform_ns.load(Ordering::Relaxed),
        );
        g != 0 && t != 0 && t.saturating_mul(16) < g
    }

    /// Called before each draw: rests while transforms are short and another worker runs (and is
    /// not blocked on a full queue), or wakes a resting worker when they are long. False when the
    /// loader stopped.
    fn pace(&self, stop: &AtomicBool) -> bool {
        if !self.transforms_short() {
            self.wake_one();
            return true;
        }
        let mut g = self.state.lock();
        if g.running().saturating_sub(g.blocked) <= 1 {
            return true;
        }
        g.resting += 1;
        while g.wakeups == 0 && !stop.load(Ordering::Acquire) {
            self.wake.wait(&mut g);
        }
        g.wakeups = g.wakeups.saturating_sub(1);
        g.resting -= 1;
        !stop.load(Ordering::Acquire)
    }

    /// Wakes one resting worker, if any.
    fn wake_one(&self) {
        self.wake_one_after(|_| {});
    }

    /// Applies `update` to the state, then wakes one resting worker if any, under one lock.
    fn wake_one_after(&self, update: impl FnOnce(&mut BenchState)) {
        let mut g = self.state.lock();
        update(&mut g);
        if g.resting > g.wakeups {
            g.wakeups += 1;
            drop(g);
            self.wake.notify_one();
        }
    }

    /// A running worker is about to block on a full queue: wake a resting worker to gather the
    /// next batch meanwhile (under the same lock as the decision to rest, so none is missed).
    fn block(&self) {
        self.wake_one_after(|g| g.blocked += 1);
    }

    /// The worker that called [`Bench::block`] can go on.
    fn unblock(&self) {
        let mut g = self.state.lock();
        g.blocked = g.blocked.saturating_sub(1);
    }

    /// Wakes every resting worker (on close, and when a worker exits).
    fn wake_all(&self) {
        let mut g = self.state.lock();
        g.wakeups = g.resting;
        drop(g);
        self.wake.notify_all();
    }
}

/// Threads a serialized gather may use: gathers are serialized by the shared lock, so the one
/// running may use every core.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs one worker's loop. User code runs under `catch_unwind` already; a panic in the loader's own
/// code (a bug) ends this worker with an error for the consumer instead of reaching the pool.
fn run_worker<T: Send>(shared: Arc<Shared<T>>, tx: Sender<Message<T>>, cancel: Receiver<()>) {
    let report = tx.clone();
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| worker_loop(shared, tx, cancel))) {
        let _ = report.try_send((u64::MAX, Err(Error::from_panic(p, "loader worker"))));
    }
}

/// The loader's threads: one rayon pool of `workers + cores - 1` threads (2 cores or more), or
/// `workers` plain threads that gather sequentially (one core, or no pool could be built).
///
/// In the pool, each worker's loop is a long-running job on a thread of its own; the other
/// `cores - 1` threads are helpers. The gather that holds the shared lock fans out by work stealing
/// to the helpers (and to any worker not busy), so the helpers stay warm from one worker's gather to
/// the next: no hand-off to another pool and back per batch, and no per-worker pool to wake.
struct Threads {
    pool: Option<rayon::ThreadPool>,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// Starts `workers` loops made by `job` and returns once every one of them runs.
    fn start<F>(workers: usize, job: F) -> std::result::Result<Self, (Self, String)>
    where
        F: Fn() -> Box<dyn FnOnce() + Send>,
    {
        let cores = cores();
        if cores >= 2 {
            let mut handles = Vec::new();
            let built = rayon::ThreadPoolBuilder::new()
                .num_threads(workers + cores - 1)
                .thread_name(|i| format!("loaderx-{i}"))
                .panic_handler(|_| {})
                .spawn_handler(|thread| {
                    let mut b = std::thread::Builder::new();
                    if let Some(name) = thread.name() {
                        b = b.name(name.to_owned());
                    }
                    if let Some(size) = thread.stack_size() {
                        b = b.stack_size(size);
                    }
                    handles.push(b.spawn(|| thread.run())?);
                    Ok(())
                })
                .build();
            match built {
                Ok(pool) => {
                    // Every loop waits until all have started: a worker waiting inside a gather
                    // could otherwise pick up another worker's loop job that no thread has taken
                    // yet. The pool has more threads than loops, so each loop gets its own.
                    let barrier = Arc::new(std::sync::Barrier::new(workers + 1));
                    for _ in 0..workers {
                        let (body, barrier) = (job(), barrier.clone());
                        pool.spawn(move || {
                            barrier.wait();
                            body();
                        });
                    }
                    barrier.wait();
                    return Ok(Threads {
                        pool: Some(pool),
                        handles,
                    });
                }
                Err(_) => {
                    // The threads that did start end on their own; fall back to plain threads.
                    for h in handles {
                        let _ = h.join();
                    }
                }
            }
        }
        // Plain threads: each exists once `spawn` returns, and none can run another's loop.
        let mut threads = Threads {
            pool: None,
            handles: Vec::with_capacity(workers),
        };
        for w in 0..workers {
            let body = job();
            let spawned = std::thread::Builder::new()
                .name(format!("loaderx-worker-{w}"))
                .spawn(move || zrecord::sequential_gathers(body));
            match spawned {
                Ok(h) => threads.handles.push(h),
                Err(e) => return Err((threads, format!("could not start loader worker {w}: {e}"))),
            }
        }
        Ok(threads)
    }

    /// Joins every thread; the worker loops must have been told to stop.
    fn join(&mut self) {
        // Dropping the pool lets its threads exit once their current job (a worker loop) returns.
        self.pool.take();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

struct Workers<T> {
    shared: Arc<Shared<T>>,
    rx: Receiver<Message<T>>,
    /// Dropped on close: every worker blocked on a full queue wakes up through `select!`.
    cancel: Option<Sender<()>>,
    threads: Threads,
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
    /// Moving average of the consumer's waits on an empty queue, in nanoseconds (`None` before
    /// the first wait).
    wait_ns: Option<u64>,
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
                bench: Bench::new(options.workers),
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
                    Self::stop_workers(&mut partial);
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
            Exec::Threads(w) => match recv_spinning(
                &w.rx,
                &mut self.wait_ns,
                // Polling takes a core: only while gathers leave one free.
                !w.shared.bench.fanned_out.load(Ordering::Relaxed),
            ) {
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
        w.shared.bench.wake_all();
        w.cancel.take();
        w.shared.inflight_cv.notify_all();
        // Make room for a worker that is blocked on a full queue right now, and drop queued batches.
        while w.rx.try_recv().is_ok() {}
        w.threads.join();
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

/// Waits shorter than this on average are worth spinning for.
const SPIN_BELOW: Duration = Duration::from_micros(100);

/// Receives the next message. When the queue is empty, `may_poll` is set (the gathers run on one
/// thread, so a core is free) and recent waits averaged under [`SPIN_BELOW`], the consumer first
/// polls for up to twice that average, yielding its core between polls, and only then blocks: a
/// worker that finds the consumer awake hands its batch over without a futex wake (an
/// inter-processor interrupt, several µs on a VM, on the worker's critical path). Measured on the
/// 2-core VM: 27 µs token batches went from 35 to 30 µs per batch with one worker. Next to gathers
/// split across both cores (1 MiB batches) polling made the rate bimodal (0.66x–1.1x of a bare
/// gather from round to round), hence `may_poll`; polling with `pause` instead of yielding starved
/// those gathers outright (49 → 90 µs).
fn recv_spinning<M>(
    rx: &Receiver<M>,
    wait_ns: &mut Option<u64>,
    may_poll: bool,
) -> std::result::Result<M, crossbeam_channel::RecvError> {
    match rx.try_recv() {
        Ok(m) => return Ok(m),
        Err(crossbeam_channel::TryRecvError::Disconnected) => {
            return Err(crossbeam_channel::RecvError);
        }
        Err(crossbeam_channel::TryRecvError::Empty) => {}
    }
    let start = Instant::now();
    let budget = match *wait_ns {
        Some(avg) if may_poll && avg < SPIN_BELOW.as_nanos() as u64 => {
            Duration::from_nanos(2 * avg)
        }
        _ => Duration::ZERO,
    };
    let mut got = None;
    while start.elapsed() < budget {
        std::thread::yield_now();
        match rx.try_recv() {
            Ok(m) => {
                got = Some(Ok(m));
                break;
            }
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                got = Some(Err(crossbeam_channel::RecvError));
                break;
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
    }
    let got = got.unwrap_or_else(|| rx.recv());
    let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    *wait_ns = Some(match *wait_ns {
        None => waited,
        Some(a) => a - a / 8 + waited.min(1 << 40) / 8,
    });
    got
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn transforms_count_as_short_only_once_measured_below_a_sixteenth_of_a_gather() {
        let b = Bench::new(2);
        assert!(!b.transforms_short(), "unmeasured");
        b.record(Duration::from_micros(160), Duration::from_micros(9));
        assert!(b.transforms_short());
        let b = Bench::new(2);
        b.record(Duration::from_micros(160), Duration::from_micros(10));
        assert!(!b.transforms_short(), "exactly 1/16 is not short");
        // The average follows a change in a few batches.
        for _ in 0..40 {
            b.record(Duration::from_micros(160), Duration::from_micros(1));
        }
        assert!(b.transforms_short());
        for _ in 0..40 {
            b.record(Duration::from_micros(160), Duration::from_micros(500));
        }
        assert!(!b.transforms_short());
    }

    /// Runs `pace` on a thread and reports when it returns.
    fn pace_on_thread(b: &Arc<Bench>, stop: &Arc<AtomicBool>) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let _ = tx.send(b.pace(&stop));
        });
        rx
    }

    fn resting(b: &Bench) -> usize {
        b.state.lock().resting
    }

    fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
            std::thread::sleep(MS);
        }
    }

    #[test]
    fn with_short_transforms_all_but_one_worker_rest_until_woken() {
        let b = Arc::new(Bench::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        let first = pace_on_thread(&b, &stop);
        let second = pace_on_thread(&b, &stop);
        wait_until("two workers rest", || resting(&b) == 2);
        // The last one running never rests.
        assert!(b.pace(&stop));
        assert!(first.recv_timeout(20 * MS).is_err() && second.try_recv().is_err());
        // Long transforms again: the next pace wakes exactly one resting worker.
        b.record(Duration::from_micros(100), Duration::from_millis(50));
        b.record(Duration::from_micros(100), Duration::from_millis(50));
        assert!(!b.transforms_short());
        assert!(b.pace(&stop));
        wait_until("one worker woken", || resting(&b) == 1);
        let mut woken = 0;
        wait_until("the woken worker returns", || {
            for rx in [&first, &second] {
                if let Ok(ok) = rx.try_recv() {
                    assert!(ok);
                    woken += 1;
                }
            }
            woken > 0
        });
        std::thread::sleep(20 * MS);
        for rx in [&first, &second] {
            woken += usize::from(rx.try_recv().is_ok());
        }
        assert_eq!(woken, 1);
        assert_eq!(resting(&b), 1);
        // A worker about to block on a full queue wakes the other.
        b.block();
        wait_until("all run", || resting(&b) == 0);
        assert_eq!(b.state.lock().running(), 3);
    }

    #[test]
    fn the_consumer_receives_in_order_whether_it_polls_or_blocks_and_sees_disconnection() {
        for avg in [None, Some(1_000), Some(50_000), Some(10_000_000)] {
            let (tx, rx) = crossbeam_channel::bounded::<u32>(4);
            let mut wait_ns = avg;
            tx.send(1).unwrap();
            assert_eq!(recv_spinning(&rx, &mut wait_ns, true), Ok(1));
            assert_eq!(wait_ns, avg, "no wait, no sample");
            let sender = std::thread::spawn(move || {
                for k in 2..6 {
                    std::thread::sleep(Duration::from_micros(30 * u64::from(k)));
                    tx.send(k).unwrap();
                }
            });
            for k in 2..6 {
                assert_eq!(recv_spinning(&rx, &mut wait_ns, true), Ok(k), "{avg:?}");
            }
            assert!(wait_ns.is_some_and(|w| w > 0));
            sender.join().unwrap();
            assert!(recv_spinning(&rx, &mut wait_ns, true).is_err(), "{avg:?}");
        }
    }

    #[test]
    fn a_worker_does_not_rest_while_the_others_are_blocked_on_a_full_queue() {
        let b = Arc::new(Bench::new(2));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        b.block();
        // The other worker is blocked: this one goes on, so the queue still fills up to the bound.
        assert!(b.pace(&stop));
        assert_eq!(resting(&b), 0);
        b.unblock();
        // Unblocked again, it may rest.
        let rx = pace_on_thread(&b, &stop);
        wait_until("one rests", || resting(&b) == 1);
        // And the next block wakes it.
        b.block();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        assert_eq!(resting(&b), 0);
    }

    #[test]
    fn stop_and_wake_all_release_every_resting_worker() {
        let b = Arc::new(Bench::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        let rests = [pace_on_thread(&b, &stop), pace_on_thread(&b, &stop)];
        wait_until("two workers rest", || resting(&b) == 2);
        stop.store(true, Ordering::Release);
        b.wake_all();
        for rx in &rests {
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(false));
        }
        // Without a stop, wake_all resumes them (a worker exited; the others find out why).
        let b = Arc::new(Bench::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        let rests = [pace_on_thread(&b, &stop), pace_on_thread(&b, &stop)];
        wait_until("two workers rest", || resting(&b) == 2);
        b.wake_all();
        for rx in &rests {
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        }
    }
}
