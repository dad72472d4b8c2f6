//! This process's own thread pool for parallel reads and writes (gather fan-out, `verify`, a
//! writer's per-shard encode), rebuilt in a `fork`ed child, and the core count.
//!
//! rayon's global pool does not survive `fork`: the child inherits the pool object but none of
//! its threads, so work sent there never runs (a torch `DataLoader` worker is such a child). Code
//! here never uses the global pool from a thread outside a pool; [`in_parallel`] runs its closure
//! on the process pool, or on the caller's pool when it is already inside one (a loader's).

/// This process's pool and the pid that built it.
struct ProcessPool {
    pid: u32,
    pool: rayon::ThreadPool,
}

static POOL: std::sync::atomic::AtomicPtr<ProcessPool> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The thread pool of the calling process: `cores()` threads, built on first use and built again
/// in a `fork`ed child (which inherits the parent's pool object but none of its threads: work sent
/// there would never run). Lock-free, so a fork taken while another thread is here cannot leave
/// the child a held lock. A pool replaced after a fork is leaked on purpose: its threads do not
/// exist in this process, and dropping it would signal them. `None` when no thread can be
/// started: the caller then gathers on its own thread.
pub(crate) fn process_pool() -> Option<&'static rayon::ThreadPool> {
    use std::sync::atomic::Ordering;
    let pid = std::process::id();
    let cur = POOL.load(Ordering::Acquire);
    // SAFETY: a non-null POOL always points at a leaked `Box<ProcessPool>` that is never freed.
    if let Some(p) = unsafe { cur.as_ref() }
        && p.pid == pid
    {
        return Some(&p.pool);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores())
        .thread_name(|i| format!("zrecord-{i}"))
        .build()
        .ok()?;
    let fresh = Box::into_raw(Box::new(ProcessPool { pid, pool }));
    match POOL.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `fresh` was just leaked and is now published; it is never freed.
        Ok(_) => Some(unsafe { &(*fresh).pool }),
        Err(winner) => {
            // Another thread of this process installed its pool first: drop ours (its threads
            // live in this process and never ran a job) and use that one.
            // SAFETY: `fresh` came from Box::into_raw above and was never published.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `winner` is non-null (it differs from `cur` only because a pool was
            // installed) and points at a leaked, never-freed `ProcessPool`.
            let w = unsafe { winner.as_ref() }?;
            (w.pid == pid).then_some(&w.pool)
        }
    }
}

/// Runs `f`, whose rayon calls then use the caller's pool when the caller is a pool thread, else
/// this process's pool ([`process_pool`]).
pub(crate) fn in_parallel<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match process_pool() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// The machine's available parallelism, read once.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
