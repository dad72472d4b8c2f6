//! The worker loop: draw + gather under the shared lock, transform outside it, queue the result;
//! order a failure after every batch drawn before it, and stop promptly on close.
//!
//! `Shared` is the state every worker sees (the source, the transform, the stop flag, the first
//! failed step, the steps in flight, the [`Pacing`] and the delivery [`Window`]); `Workers` is what
//! the loader owns of it, started by [`start_workers`] and stopped by [`stop_workers`].

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, select};
use parking_lot::{Condvar, Mutex};

use super::pacing::Pacing;
use super::source::Source;
use super::stream::{Transform, run_transform};
use super::threads::Threads;
use super::window::Window;
use crate::error::{Error, Result};

/// State shared by the workers.
pub(super) struct Shared<T> {
    pub(super) source: Arc<Mutex<Source>>,
    pub(super) transform: Transform<T>,
    pub(super) stop: AtomicBool,
    /// Smallest failed step, `u64::MAX` while none failed.
    pub(super) fail_step: AtomicU64,
    /// Steps drawn whose result is not yet queued (or dropped).
    pub(super) inflight: Mutex<BTreeSet<u64>>,
    pub(super) inflight_cv: Condvar,
    pub(super) pacing: Pacing,
    /// The steps a worker may draw (the consumer moves it).
    pub(super) window: Window,
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

/// A step and its result, as the workers queue it for the consumer.
pub(super) type Message<T> = (u64, Result<T>);

fn worker_loop<T: Send>(shared: Arc<Shared<T>>, tx: Sender<Message<T>>, cancel: Receiver<()>) {
    // However this loop ends, no resting worker may wait for a wake-up that nobody will send.
    struct WakeOnExit<'a>(&'a Pacing);
    impl Drop for WakeOnExit<'_> {
        fn drop(&mut self) {
            self.0.wake_all();
        }
    }
    let _wake = WakeOnExit(&shared.pacing);
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if !shared.pacing.pace(&shared.stop) {
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
            let next = src.next_draw_step();
            if !shared.window.admits(next) {
                // The consumer is `bound` steps behind: wait for it without holding the lock.
                drop(src);
                if !shared.window.wait_admits(next, &shared.stop) {
                    return;
                }
                continue;
            }
            let started = Instant::now();
            let fan_outs = zrecord::gather_fan_outs();
            let (step, drawn) = src.produce();
            shared
                .pacing
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
        shared.pacing.record(gathered - started, gathered.elapsed());
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
            shared.pacing.block();
            let sent = select! {
                send(tx, msg) -> sent => sent.is_ok(),
                recv(cancel) -> _ => false,
            };
            if !sent {
                return;
            }
        }
        if failed {
            return;
        }
    }
}

/// Runs one worker's loop. User code runs under `catch_unwind` already; a panic in the loader's own
/// code (a bug) ends this worker with an error for the consumer instead of reaching the pool.
fn run_worker<T: Send>(shared: Arc<Shared<T>>, tx: Sender<Message<T>>, cancel: Receiver<()>) {
    let (report, stop) = (tx.clone(), cancel.clone());
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| worker_loop(shared, tx, cancel))) {
        // Waits for room like a batch (the consumer drains the queue, also while it waits for a
        // step in ordered delivery), so the report is never dropped; close cancels the wait.
        let msg = (u64::MAX, Err(Error::from_panic(p, "loader worker")));
        select! {
            send(report, msg) -> _ => {},
            recv(stop) -> _ => {},
        }
    }
}

/// The worker-mode state a loader owns: the shared state, the output queue and the threads.
pub(super) struct Workers<T> {
    pub(super) shared: Arc<Shared<T>>,
    pub(super) rx: Receiver<Message<T>>,
    /// Dropped on close: every worker blocked on a full queue wakes up through `select!`.
    pub(super) cancel: Option<Sender<()>>,
    pub(super) threads: Threads,
}

/// Starts `workers` worker loops drawing from `source` at `low` (the consumer's low-water step),
/// with an output queue of `prefetch` and a window of `workers + prefetch` steps in ordered
/// delivery, one more in completion order (see `window.rs`).
pub(super) fn start_workers<T: Send + 'static>(
    source: Arc<Mutex<Source>>,
    transform: Transform<T>,
    workers: usize,
    prefetch: usize,
    ordered: bool,
    low: u64,
) -> Result<Workers<T>> {
    let bound = (workers + prefetch + usize::from(!ordered)) as u64;
    let shared = Arc::new(Shared {
        source,
        transform,
        stop: AtomicBool::new(false),
        fail_step: AtomicU64::new(u64::MAX),
        inflight: Mutex::new(BTreeSet::new()),
        inflight_cv: Condvar::new(),
        pacing: Pacing::new(workers),
        window: Window::new(low, bound),
    });
    let (tx, rx) = bounded(prefetch);
    let (cancel_tx, cancel_rx) = bounded::<()>(0);
    let job = || -> Box<dyn FnOnce() + Send> {
        let (shared, tx, cancel_rx) = (shared.clone(), tx.clone(), cancel_rx.clone());
        Box::new(move || run_worker(shared, tx, cancel_rx))
    };
    match Threads::start(workers, job) {
        Ok(threads) => Ok(Workers {
            shared,
            rx,
            cancel: Some(cancel_tx),
            threads,
        }),
        Err((threads, why)) => {
            let mut partial = Workers {
                shared,
                rx,
                cancel: Some(cancel_tx),
                threads,
            };
            stop_workers(&mut partial);
            Err(Error::invalid(why))
        }
    }
}

/// Stops every worker, joins the threads and drops the queued batches.
pub(super) fn stop_workers<T>(w: &mut Workers<T>) {
    w.shared.stop.store(true, Ordering::Release);
    w.shared.pacing.wake_all();
    w.shared.window.wake_all();
    w.cancel.take();
    w.shared.inflight_cv.notify_all();
    // Make room for a worker that is blocked on a full queue right now, and drop queued batches.
    while w.rx.try_recv().is_ok() {}
    w.threads.join();
    while w.rx.try_recv().is_ok() {}
}
