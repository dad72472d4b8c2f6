//! The delivery window: how far the workers may draw ahead of the consumer.
//!
//! The consumer's *low-water step* is the first step it has not received. A worker draws step `s`
//! only while `s < low + bound`, so every step drawn and not yet delivered lies in
//! `low .. low + bound`, and every step delivered past `low` in `low + 1 .. low + bound`.
//!
//! * Ordered delivery: `bound = workers + prefetch`, so at most that many batches are alive
//!   besides the ones the consumer holds, the reorder buffer included.
//! * Completion order: `bound = workers + prefetch + 1`, so at most `workers + prefetch` steps are
//!   delivered past the low-water step (what a resume state lists). The workers and the queue
//!   already hold at most `workers + prefetch` batches; the window keeps them from drawing more
//!   than that past a slow step.
//!
//! A worker whose next step lies past the window waits here until the consumer's low-water step
//! moves or the loader stops.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

/// The window `low .. low + bound` of steps the workers may draw.
pub(super) struct Window {
    /// The consumer's low-water step.
    low: AtomicU64,
    bound: u64,
    /// Workers waiting for the window to move; the consumer takes the lock and wakes them only
    /// when there are any, so a delivery costs no system call while nobody waits.
    waiting: AtomicUsize,
    lock: Mutex<()>,
    moved: Condvar,
}

impl Window {
    /// A window of `bound` steps starting at `low`.
    pub(super) fn new(low: u64, bound: u64) -> Window {
        Window {
            low: AtomicU64::new(low),
            bound: bound.max(1),
            waiting: AtomicUsize::new(0),
            lock: Mutex::new(()),
            moved: Condvar::new(),
        }
    }

    /// Whether a worker may draw `step` now.
    pub(super) fn admits(&self, step: u64) -> bool {
        step < self.low.load(Ordering::SeqCst).saturating_add(self.bound)
    }

    /// Waits until `step` is inside the window; false when the loader stopped meanwhile.
    pub(super) fn wait_admits(&self, step: u64, stop: &AtomicBool) -> bool {
        let mut g = self.lock.lock();
        // Counted before the window is read again: the consumer stores the new low-water step
        // before it reads the count (both sequentially consistent), so either this worker sees
        // the new step or the consumer sees the waiter and wakes it under the lock.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while !self.admits(step) && !stop.load(Ordering::Acquire) {
            self.moved.wait(&mut g);
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        !stop.load(Ordering::Acquire)
    }

    /// The consumer's low-water step moved to `low`.
    pub(super) fn advance(&self, low: u64) {
        self.low.store(low, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock();
            self.moved.notify_all();
        }
    }

    /// Wakes every waiting worker (on stop).
    pub(super) fn wake_all(&self) {
        let _g = self.lock.lock();
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_step_past_the_window_waits_until_the_low_water_step_moves_or_the_loader_stops() {
        let w = Arc::new(Window::new(10, 3));
        assert!(w.admits(10) && w.admits(12) && !w.admits(13));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || tx.send(w.wait_admits(14, &stop)).unwrap())
        };
        // Moving the window by one does not admit step 14; by two does.
        w.advance(11);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        w.advance(12);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        waiter.join().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || tx.send(w.wait_admits(100, &stop)).unwrap())
        };
        stop.store(true, Ordering::Release);
        w.wake_all();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(false));
        waiter.join().unwrap();
    }
}
