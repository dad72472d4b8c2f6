//! Blocking readers for one gather, shared by the engines that read with blocking calls (the
//! direct engine's `O_DIRECT` pieces, the positional engine's `pread` ranges): the calling thread
//! and scoped helpers take work from one queue until it is empty or one of them fails.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Runs `step` on every item of `work` with up to `readers` threads: the calling one and scoped
/// helpers named `name`, each taking the next item from a shared queue. Each thread makes its
/// own state with `init` and hands it to `done` when it stops. The first failure stops the
/// others (they finish the item they hold) and is returned. A helper that cannot be started
/// leaves its share to the others.
pub(super) fn drain<W: Send, S>(
    readers: usize,
    name: &str,
    work: Vec<W>,
    init: impl Fn() -> S + Sync,
    step: impl Fn(&mut S, W) -> Result<()> + Sync,
    done: impl Fn(S) + Sync,
) -> Result<()> {
    let readers = readers.min(work.len());
    let queue = Mutex::new(work.into_iter());
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<Error>> = Mutex::new(None);
    let read = || {
        let mut state = init();
        while !failed.load(Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some(item) = next else { break };
            if let Err(e) = step(&mut state, item) {
                failed.store(true, Ordering::Relaxed);
                error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                break;
            }
        }
        done(state);
    };
    std::thread::scope(|s| {
        for _ in 1..readers {
            if std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(s, read)
                .is_err()
            {
                break;
            }
        }
        read();
    });
    match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
