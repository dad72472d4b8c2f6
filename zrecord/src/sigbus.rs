//! The guard that keeps a memory-mapped file that shrinks under an open store from killing the
//! process.
//!
//! Reading a page of a shared file mapping that lies past the file's current end raises `SIGBUS`,
//! whose default action ends the process. That is what happens when another process truncates a
//! shard in place, or when a shared file system (NFS, a FUSE mount) shows a file that another host
//! is rewriting. zrecord maps its files through [`Guard`]: each live map occupies one slot of a
//! fixed table, and a process-wide `SIGBUS` handler, installed with the first map, looks the
//! faulting address up in it. A fault inside a registered map gets the rest of that map replaced
//! by zero-filled anonymous pages (`mmap(MAP_FIXED)`), the map marked faulted, and the faulting
//! load retried: it now reads zeros, and the read path, which checks its files' fault marks after
//! every gather (`read::engine`), returns a typed error instead of those bytes. A fault anywhere
//! else goes to the handler that was installed before, or to the default action: faults that are
//! not zrecord's are not swallowed.
//!
//! Bound: [`SLOTS`] live maps per process; a map opened while every slot is taken is not guarded
//! (it reads as before, and a truncation under it ends the process as without the guard).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Live guarded maps per process (each open store or dataset part holds one per shard, plus its
/// index when that is larger than 64 MiB, and a remote store with a cache up to 4,096 block maps):
/// Linux's default `vm.max_map_count` (65,530), so every map a process can make is guarded, e.g.
/// 10^4 parts of 4 shards each. 1.5 MiB of zeroed static memory, of which a process touches the
/// pages its live maps have reached.
pub const SLOTS: usize = 65536;

/// One registered map: `[start, end)` (0 when free) and whether a fault was caught in it.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// Faults caught in registered maps since the process started ([`caught`]).
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// How many faults the handler has caught in registered maps so far. A reader of many maps reads
/// it before and after its copies and checks each map's [`Guard::faulted`] only when it moved
/// (one load a gather instead of one per map touched).
pub fn caught() -> u64 {
    CAUGHT.load(Ordering::Acquire)
}

/// The page size, read when the handler is installed.
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The action that was installed for `SIGBUS` before ours, to pass other faults on to: a leaked
/// copy (one per installation, a few bytes), null until the first installation.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises installations (never taken in the handler).
static INSTALL: Mutex<()> = Mutex::new(());

/// A registered map; dropping it unregisters the map. Drop it before the map itself is unmapped.
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Registers the map `bytes` (installing the handler on first use); `None` when every slot is
    /// taken or the map is empty.
    pub fn register(bytes: &[u8]) -> Option<Guard> {
        if bytes.is_empty() {
            return None;
        }
        install();
        let start = bytes.as_ptr() as usize;
        let end = start + bytes.len();
        for (slot, s) in TABLE.iter().enumerate() {
            if s.start
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                s.faulted.store(false, Ordering::Release);
                s.end.store(end, Ordering::Release);
                return Some(Guard { slot });
            }
        }
        None
    }

    /// Whether a `SIGBUS` was caught in this map (its file became shorter than the map): from
    /// then on the map's tail reads zeros, not the file.
    pub fn faulted(&self) -> bool {
        TABLE[self.slot].faulted.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.end.store(0, Ordering::Release);
        s.faulted.store(false, Ordering::Release);
        s.start.store(0, Ordering::Release);
    }
}

/// Makes sure the process's `SIGBUS` action is [`on_sigbus`]: installs it when another action is
/// in place (the first map of the process, or a library such as Python's `faulthandler` that
/// replaced it since), keeping that action to pass other faults on to. One `sigaction` query
/// per map opened.
fn install() {
    let _held = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let ours = on_sigbus as *const () as usize;
    // SAFETY: a zeroed sigaction is a valid "default action, empty mask" value.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction with a null new action only writes the current one into `cur`.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur) } != 0
        || cur.sa_sigaction == ours
    {
        return;
    }
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // The previous action is published before ours is installed, so the handler always finds
    // it; a superseded copy is leaked (a handler may still be reading it).
    PREVIOUS.store(Box::into_raw(Box::new(cur)), Ordering::Release);
    // SAFETY: `new` is a zeroed sigaction filled in with an `extern "C"` handler of the
    // three-argument signature SA_SIGINFO requires; sigemptyset and sigaction only write the
    // structs they are given.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = ours;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut());
    }
}

/// The `SIGBUS` handler. Async-signal-safe: atomic loads and stores, `mmap` and `sigaction`
/// system calls, no allocation, no locks.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler; for SIGBUS `si_addr`
    // is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &TABLE {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start {
            continue;
        }
        let end = s.end.load(Ordering::Acquire);
        if addr >= end {
            continue;
        }
        let from = addr & !(page - 1);
        let len = end.next_multiple_of(page) - from;
        // SAFETY: `[from, from + len)` lies inside a live read-only map this table registered
        // (a map is unregistered before it is unmapped, and nothing reads a map being dropped);
        // replacing its pages with private anonymous ones changes what those addresses read
        // (zeros instead of a file that has no bytes there) and nothing else. The map's own
        // munmap later covers these pages too.
        let p = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            s.faulted.store(true, Ordering::Release);
            CAUGHT.fetch_add(1, Ordering::Release);
            return;
        }
        break;
    }
    pass_on(sig, info);
}

/// A signal that is not a fault in a registered map: the action that was in place before ours is
/// put back and the signal delivered to it as if this handler had never been installed (a fault
/// is retried by the returning load, a sent signal is sent again). The next store opened puts
/// this handler back in front of it.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t) {
    let p = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: a non-null PREVIOUS points to a leaked, never-freed sigaction written before it was
    // published; a zeroed sigaction is the default action (SIG_DFL is 0); sigaction and raise are
    // async-signal-safe; the kernel passes a valid siginfo to a SA_SIGINFO handler.
    unsafe {
        let prev = if p.is_null() { std::mem::zeroed() } else { *p };
        libc::sigaction(sig, &prev, std::ptr::null_mut());
        // si_code <= 0: sent by a process (kill, raise), not raised by a faulting load.
        if (*info).si_code <= 0 {
            libc::raise(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_after_drop() {
        let a = vec![1u8; 100];
        let g = Guard::register(&a).unwrap();
        let slot = g.slot;
        assert!(!g.faulted());
        drop(g);
        assert_eq!(TABLE[slot].start.load(Ordering::Acquire), 0);
        let g2 = Guard::register(&a).unwrap();
        assert!(!g2.faulted());
        assert!(Guard::register(&[]).is_none());
    }
}
