//! A `fork`ed child reads, writes and verifies after its parent fanned gathers out: the parallel
//! paths run on a pool the child builds for itself, never on threads only the parent has (rayon's
//! global pool does not survive `fork`, and work sent there never runs). One test in this binary,
//! so no other test thread is alive at the fork. A child that hangs is killed at a deadline, which
//! turns the hang into a failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::{Codec, DType, DenseStore, DenseWriter, SystemAllocator, WriterOptions};

const ITEM: usize = 64 << 10; // 64 KiB records: a 64-record gather is 4 MiB and fans out

fn record(i: u64) -> Vec<u8> {
    (0..ITEM)
        .map(|k| (i as usize * 31 + k * 7 % 251) as u8)
        .collect()
}

fn write(path: &std::path::Path, codec: Codec, n: u64) {
    let mut w = DenseWriter::create(
        path,
        DType::UInt8,
        &[ITEM as u64],
        codec,
        WriterOptions {
            data_shards: 4,
            sync: false,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let bytes: Vec<u8> = (0..n).flat_map(record).collect();
    w.append(&bytes).unwrap();
    w.close().unwrap();
}

/// Gathers `idx` from the container at `path` and checks every byte; `Err` names what differs.
fn gather_and_check(path: &std::path::Path, idx: &[u64]) -> Result<(), String> {
    let view = DenseStore::open(path)
        .map_err(|e| e.to_string())?
        .bind(Arc::new(SystemAllocator::new()));
    let batch = view.gather(idx).map_err(|e| e.to_string())?;
    let bytes = batch.bytes();
    for (k, &i) in idx.iter().enumerate() {
        if bytes[k * ITEM..(k + 1) * ITEM] != record(i)[..] {
            return Err(format!("record {i} at position {k} differs"));
        }
    }
    Ok(())
}

fn indices(seed: u64, n: u64) -> Vec<u64> {
    (0..64).map(|k| (k * 37 + seed * 11) % n).collect()
}

#[test]
fn a_forked_child_gathers_writes_and_verifies_after_the_parent_fanned_out() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, zst) = (dir.path().join("raw"), dir.path().join("zstd"));
    write(&raw, Codec::Raw, 96);
    write(&zst, Codec::Zstd, 96);
    // The parent fans gathers out (4 MiB raw, compressed records), starting its pool threads.
    gather_and_check(&raw, &indices(1, 96)).unwrap();
    gather_and_check(&zst, &indices(2, 96)).unwrap();

    // SAFETY: the child runs only this crate's code and std, then leaves with `_exit` (no
    // destructors, no atexit handlers of the test harness); the parent only waits for it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let child = || -> Result<(), String> {
            gather_and_check(&raw, &indices(3, 96))?;
            gather_and_check(&zst, &indices(4, 96))?;
            let fresh = dir.path().join("written-in-child");
            write(&fresh, Codec::Zstd, 70);
            DenseStore::open(&fresh)
                .and_then(|s| s.verify())
                .map_err(|e| e.to_string())?;
            gather_and_check(&fresh, &indices(5, 70))
        };
        let code = match child() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("forked child: {e}");
                1
            }
        };
        // SAFETY: ends the child at once, as the comment at the fork says.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        assert_eq!(r, 0, "waitpid failed");
        if Instant::now() > deadline {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child hung (killed after 120 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed (status {status:#x}; its error is above)"
    );
    // The parent's pool still works after the fork.
    gather_and_check(&raw, &indices(6, 96)).unwrap();
}
