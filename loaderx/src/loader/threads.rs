//! The loader's threads: start-up and join of the worker loops and the gather helpers.
//!
//! With 2 cores or more, one rayon pool of `workers + cores - 1` threads runs each worker loop as a
//! long-running job and lends the rest to the gather that holds the shared lock; on one core (or
//! when no pool can be built), `workers` plain threads gather sequentially.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Counts the loader threads that have started running. A thread names itself (the `loaderx-*`
/// name the OS shows) before its body runs, so once `wait(n)` returns, `n` threads exist under
/// their names.
#[derive(Default)]
struct Started {
    count: Mutex<usize>,
    cv: Condvar,
}

impl Started {
    /// Called first thing on each new thread.
    fn arrive(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_all();
    }

    /// Blocks until `n` threads have arrived. Each of them was spawned successfully, and a spawned
    /// thread runs its body, so this returns.
    fn wait(&self, n: usize) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        while *count < n {
            count = self.cv.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Threads a serialized gather may use: gathers are serialized by the shared lock, so the one
/// running may use every core.
pub(super) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The loader's threads: one rayon pool of `workers + cores - 1` threads (2 cores or more), or
/// `workers` plain threads that gather sequentially (one core, or no pool could be built).
///
/// In the pool, each worker's loop is a long-running job on a thread of its own; the other
/// `cores - 1` threads are helpers. The gather that holds the shared lock fans out by work stealing
/// to the helpers (and to any worker not busy), so the helpers stay warm from one worker's gather to
/// the next: no hand-off to another pool and back per batch, and no per-worker pool to wake.
pub(super) struct Threads {
    pool: Option<rayon::ThreadPool>,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// Starts `workers` loops made by `job` and returns once every thread has started (under its
    /// `loaderx-*` name) and every loop runs.
    pub(super) fn start<F>(workers: usize, job: F) -> std::result::Result<Self, (Self, String)>
    where
        F: Fn() -> Box<dyn FnOnce() + Send>,
    {
        let cores = cores();
        if cores >= 2 {
            let started = Arc::new(Started::default());
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
                    let started = started.clone();
                    handles.push(b.spawn(move || {
                        started.arrive();
                        thread.run()
                    })?);
                    Ok(())
                })
                .build();
            match built {
                Ok(pool) => {
                    started.wait(handles.len());
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
        // Plain threads: none can run another's loop.
        let started = Arc::new(Started::default());
        let mut threads = Threads {
            pool: None,
            handles: Vec::with_capacity(workers),
        };
        for w in 0..workers {
            let (body, started) = (job(), started.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("loaderx-worker-{w}"))
                .spawn(move || {
                    started.arrive();
                    zrecord::sequential_gathers(body)
                });
            match spawned {
                Ok(h) => threads.handles.push(h),
                Err(e) => return Err((threads, format!("could not start loader worker {w}: {e}"))),
            }
        }
        started.wait(workers);
        Ok(threads)
    }

    /// Joins every thread; the worker loops must have been told to stop.
    pub(super) fn join(&mut self) {
        // Dropping the pool lets its threads exit once their current job (a worker loop) returns.
        self.pool.take();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
