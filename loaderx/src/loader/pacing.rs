//! Worker pacing: which workers run and which rest, from the measured gather and transform times.
//!
//! Gathers are serialized, so a worker beyond the first pays off only while transforms are long
//! enough to overlap with another worker's gather. [`Pacing`] keeps the moving averages, the
//! counts of running and resting workers, and the condition variable resting workers
//! sleep on; the worker loop calls it before each draw and before a blocking send.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// The workers' pacing state: which of them run and which rest. All of them run while transforms are
/// long enough to overlap with gathers, and all but one rest while they are not.
///
/// Gathers are serialized, so a second worker adds throughput only by transforming while another
/// gathers. When transforms take less than 1/16 of a gather (moving averages over recent batches),
/// one worker keeps the gather busy on its own, and another one would only add a lock hand-off
/// and two context switches per batch on the cores the gather needs. Such a worker rests (sleeps)
/// before its next draw unless it is the only one not resting; a worker blocked on a full queue
/// counts as not resting, so while one waits there with its batch the others do not gather more:
/// with short transforms at most `prefetch + 1` batches are alive in the pipeline (the queue and
/// the blocked worker's), against `workers + prefetch` when every worker runs. A running worker
/// wakes one resting worker whenever it measures transforms long again, and before it blocks on a
/// full queue while they are long; every worker that exits, and `close`, wakes them all.
pub(super) struct Pacing {
    state: Mutex<PacingState>,
    wake: Condvar,
    /// Moving averages in nanoseconds, 0 until measured. Updated without a lock: a lost update
    /// only delays the estimate by a batch.
    gather_ns: AtomicU64,
    transform_ns: AtomicU64,
    /// Whether the last gather was split across the pool, i.e. kept every core busy.
    pub(super) fanned_out: AtomicBool,
}

/// The worker counts behind [`Pacing`]'s lock.
struct PacingState {
    workers: usize,
    resting: usize,
    /// Wake-ups sent and not yet taken by a resting worker.
    wakeups: usize,
}

impl PacingState {
    /// Workers not resting (running, or blocked on a full queue).
    fn running(&self) -> usize {
        self.workers - self.resting
    }
}

impl Pacing {
    pub(super) fn new(workers: usize) -> Pacing {
        Pacing {
            state: Mutex::new(PacingState {
                workers,
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
    pub(super) fn record(&self, gather: Duration, transform: Duration) {
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

    /// Called before each draw: rests while transforms are short and another worker runs or is
    /// blocked on a full queue, or wakes a resting worker when they are long. False when the
    /// loader stopped.
    pub(super) fn pace(&self, stop: &AtomicBool) -> bool {
        if !self.transforms_short() {
            self.wake_one();
            return true;
        }
        let mut g = self.state.lock();
        if g.running() <= 1 {
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

    /// Wakes one resting worker, if any (under the lock the decision to rest is taken under, so
    /// none is missed).
    fn wake_one(&self) {
        let mut g = self.state.lock();
        if g.resting > g.wakeups {
            g.wakeups += 1;
            drop(g);
            self.wake.notify_one();
        }
    }

    /// A running worker is about to block on a full queue (it stays counted as running). While
    /// transforms are long, a resting worker is woken to gather and transform the next batch
    /// meanwhile; while they are short nobody is: the blocked worker gathers the next batch as
    /// soon as the queue has room, and another batch held ready would only be memory.
    pub(super) fn block(&self) {
        if !self.transforms_short() {
            self.wake_one();
        }
    }

    /// Wakes every resting worker (on close, and when a worker exits).
    pub(super) fn wake_all(&self) {
        let mut g = self.state.lock();
        g.wakeups = g.resting;
        drop(g);
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::time::Instant;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn transforms_count_as_short_only_once_measured_below_a_sixteenth_of_a_gather() {
        let b = Pacing::new(2);
        assert!(!b.transforms_short(), "unmeasured");
        b.record(Duration::from_micros(160), Duration::from_micros(9));
        assert!(b.transforms_short());
        let b = Pacing::new(2);
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
    fn pace_on_thread(b: &Arc<Pacing>, stop: &Arc<AtomicBool>) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let _ = tx.send(b.pace(&stop));
        });
        rx
    }

    fn resting(b: &Pacing) -> usize {
        b.state.lock().resting
    }

    /// `(resting, wakeups)` read under one lock. A resting worker returns from `pace` only after
    /// taking a wake-up and leaving the resting count, so `(n, 0)` proves that `n` of them still rest
    /// and none can return until the next wake-up.
    fn rest_state(b: &Pacing) -> (usize, usize) {
        let g = b.state.lock();
        (g.resting, g.wakeups)
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
        let b = Arc::new(Pacing::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        let first = pace_on_thread(&b, &stop);
        let second = pace_on_thread(&b, &stop);
        wait_until("two workers rest", || resting(&b) == 2);
        // The last one running never rests, and wakes nobody: both still rest, with no wake-up
        // pending that could release them.
        assert!(b.pace(&stop));
        assert_eq!(rest_state(&b), (2, 0));
        assert!(first.try_recv().is_err() && second.try_recv().is_err());
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
        // Exactly one: the other still rests, with no wake-up pending for it.
        assert_eq!(rest_state(&b), (1, 0));
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
    fn with_short_transforms_a_worker_rests_while_another_is_blocked_on_a_full_queue() {
        let b = Arc::new(Pacing::new(2));
        let stop = Arc::new(AtomicBool::new(false));
        b.record(Duration::from_micros(100), Duration::from_nanos(100));
        // The other worker blocks holding its batch: it wakes nobody, and this one rests instead
        // of gathering a batch that could only wait behind it.
        b.block();
        assert_eq!(rest_state(&b), (0, 0), "block woke nobody");
        let rx = pace_on_thread(&b, &stop);
        wait_until("the second worker rests", || resting(&b) == 1);
        assert_eq!(rest_state(&b), (1, 0));
        // Its queue has room again: the first one goes on alone.
        assert!(b.pace(&stop));
        assert_eq!(rest_state(&b), (1, 0));
        assert!(rx.try_recv().is_err(), "still resting");
        // Long transforms: blocking on the full queue wakes the resting worker, which goes on
        // while the first waits, and a worker does not rest beside a blocked one.
        for _ in 0..40 {
            b.record(Duration::from_micros(100), Duration::from_millis(50));
        }
        b.block();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        assert_eq!(resting(&b), 0);
        assert!(b.pace(&stop));
        assert_eq!(resting(&b), 0);
    }

    #[test]
    fn stop_and_wake_all_release_every_resting_worker() {
        let b = Arc::new(Pacing::new(3));
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
        let b = Arc::new(Pacing::new(3));
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
