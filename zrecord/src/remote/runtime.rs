//! The async runtime the object-store client runs on: one per process, made on first use and
//! made again in a forked child (whose copy of the parent's runtime has no worker threads: using
//! it would hang). A superseded runtime is leaked, never dropped (dropping it would wait for
//! threads that do not exist in the child).

use std::future::Future;
use std::io;
use std::sync::Mutex;

/// Worker threads of the runtime: they drive the connections; the futures of a request run on
/// the thread that waits for them ([`block_on`]).
const WORKERS: usize = 2;

/// `(pid, runtime)` of the process that made it.
static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);

/// This process's runtime.
fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    let pid = std::process::id();
    let mut held = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, rt)) = *held
        && p == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("zrecord-remote")
        .enable_all()
        .build()?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *held = Some((pid, rt));
    Ok(rt)
}

/// Runs `f` to completion on this process's runtime, from the calling thread. Fails when no
/// runtime can be made, or when the calling thread is itself running async code (blocking it
/// would stall that runtime; call zrecord from a plain thread, e.g. `spawn_blocking`).
pub(crate) fn block_on<F: Future>(f: F) -> io::Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a remote store was read from a thread that runs an async runtime: read it from a \
             plain thread (e.g. tokio::task::spawn_blocking)",
        ));
    }
    Ok(runtime()?.block_on(f))
}
