//! The cache's bound: the shared byte count and the eviction of the least recently used blocks
//! ([`account`]), the node's eviction count ([`evictions`]), and which of an open store's maps
//! are of evicted blocks ([`deleted`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use super::held::Mapped;
use super::key::{Key, Maps};

/// How often, at most, an open store reads the node's eviction count, and when it has moved
/// drops its maps of blocks evicted meanwhile (by any process): a deleted file that a process
/// still maps keeps its disk space. One positional read of 8 bytes a gather at most this often.
pub(super) const RECHECK: Duration = Duration::from_millis(100);

/// Temporary files older than this are a killed filler's and are removed by an eviction scan.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// Adds `n` bytes to the shared count, evicting when it passes the bound.
pub(super) fn account(dir: &Path, bound: u64, n: u64, evicted: &AtomicU64) -> io::Result<()> {
    let lock = File::open(dir.join(".lock"))?;
    lock.lock()?;
    let size = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(".size"))?;
    let mut word = [0u8; 8];
    let held = match size.read_exact_at(&mut word, 0) {
        Ok(()) => u64::from_le_bytes(word),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
        Err(e) => return Err(e),
    };
    let mut total = held.saturating_add(n);
    if total > bound {
        let before = evicted.load(Ordering::Relaxed);
        total = evict(dir, bound, evicted)?;
        if evicted.load(Ordering::Relaxed) != before {
            // The node's eviction count, which open stores read to drop their maps of
            // evicted blocks (`drop_evicted`).
            let count = match size.read_exact_at(&mut word, 8) {
                Ok(()) => u64::from_le_bytes(word),
                Err(_) => 0,
            };
            size.write_all_at(&count.wrapping_add(1).to_le_bytes(), 8)?;
        }
    }
    size.write_all_at(&total.to_le_bytes(), 0)?;
    // The lock goes with `lock`.
    Ok(())
}

/// Removes the least recently used blocks until the blocks hold at most 90 % of the bound
/// (stale temporary files go too); the bytes left, counted from the directory. Called under
/// the lock.
fn evict(dir: &Path, bound: u64, evicted: &AtomicU64) -> io::Result<u64> {
    let mut blocks: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    let now = SystemTime::now();
    for c in fs::read_dir(dir)? {
        let c = c?;
        if !c.file_type()?.is_dir() {
            continue;
        }
        for s in fs::read_dir(c.path())? {
            let s = s?;
            if !s.file_type()?.is_dir() {
                continue;
            }
            for f in fs::read_dir(s.path())? {
                let Ok(f) = f else { continue };
                // A file another process removed meanwhile is simply gone.
                let Ok(m) = f.metadata() else { continue };
                let t = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                let name = f.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".tmp") {
                    if now.duration_since(t).is_ok_and(|age| age > STALE_TMP) {
                        let _ = fs::remove_file(f.path());
                    }
                } else if name.ends_with(".blk") {
                    blocks.push((t, m.len(), f.path()));
                }
            }
        }
    }
    let mut total: u64 = blocks.iter().map(|b| b.1).sum();
    let keep = bound / 10 * 9;
    blocks.sort_unstable_by_key(|b| b.0);
    for (_, len, path) in blocks {
        if total <= keep {
            break;
        }
        match fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                evicted.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => total -= len,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// The node's eviction count (the second word of `.size`, opened as `size`); `None` before the
/// first eviction or when it cannot be read.
pub(super) fn evictions(size: &File) -> Option<u64> {
    let mut word = [0u8; 8];
    size.read_exact_at(&mut word, 8).ok()?;
    Some(u64::from_le_bytes(word))
}

/// The keys of `maps` whose block files were deleted (evicted) since they were mapped.
pub(super) fn deleted(maps: &Maps<Arc<Mapped>>) -> Vec<Key> {
    use std::os::unix::fs::MetadataExt;
    maps.iter()
        .filter(|(_, m)| m.file.metadata().is_ok_and(|md| md.nlink() == 0))
        .map(|(k, _)| *k)
        .collect()
}
