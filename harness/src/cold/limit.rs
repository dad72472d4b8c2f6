//! The device side of the cold tables: the page-cache drop before each timed batch, the block
//! device's own read counters ([`DiskStat`]: reads completed and their summed latency, hence
//! achieved IOPS and queue depth), and the cold limit ([`limit`]): `O_DIRECT` random reads of
//! given record extents at a fixed queue depth (one thread per outstanding read), the way `fio
//! --direct=1 --rw=randread --iodepth=N` measures a device.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::error::{HarnessError, Result};

/// `O_DIRECT` transfers are aligned to this (the logical block size of every current device is at
/// most 4 KiB).
const ALIGN: u64 = 4096;

pub const DEPTHS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// Writes back dirty pages, then drops the clean page cache (`echo 3 > /proc/sys/vm/drop_caches`).
/// Pages a process still maps stay: call [`unmap_pages_under`] first for a reader's own mappings.
/// Fails without root, with the reason.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no memory-safety preconditions.
    unsafe { libc::sync() };
    std::fs::write(DROP_CACHES, b"3").map_err(HarnessError::io("write (needs root)", DROP_CACHES))
}

/// Drops this process's page-table entries for every read-only file mapping of a file under
/// `dir` (`MADV_DONTNEED`), so that [`drop_caches`] can evict those pages too: the kernel never
/// evicts a page some process maps, and a reader maps what its open touched (headers, index,
/// footers: with large folios and fault-around, megabytes of data around each). The next access
/// faults the bytes back from the file. Returns how many mappings it dropped.
pub fn unmap_pages_under(dir: &Path) -> Result<usize> {
    let dir = dir
        .canonicalize()
        .map_err(HarnessError::io("resolve", dir))?;
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(HarnessError::io("read", "/proc/self/maps"))?;
    let mut dropped = 0;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1].contains('w') {
            continue;
        }
        let path = Path::new(fields[5]);
        if !path.starts_with(&dir) {
            continue;
        }
        let Some((start, end)) = fields[0].split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        // SAFETY: the range is one whole, read-only mapping of a file (from /proc/self/maps);
        // MADV_DONTNEED on it only drops page-table entries, and the next read of any byte faults
        // the same file contents back in. No Rust reference sees different bytes.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(HarnessError::Io {
                op: "madvise(MADV_DONTNEED) on",
                path: path.to_path_buf(),
                source: std::io::Error::last_os_error(),
            });
        }
        dropped += 1;
    }
    Ok(dropped)
}

/// Whether this process can drop the page cache (checked once before a cold table runs).
pub fn can_drop_caches() -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(DROP_CACHES)
        .map(|_| ())
        .map_err(HarnessError::io(
            "open for writing (needs root)",
            DROP_CACHES,
        ))
}

/// Read counters of the block device holding a path (`/sys/dev/block/MAJ:MIN/stat`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStat {
    pub reads: u64,
    /// 512-byte sectors read.
    pub sectors: u64,
    /// Milliseconds reads spent in flight, summed over reads (so its rate is the mean queue depth).
    pub read_ms: u64,
}

impl DiskStat {
    /// The counter file of the device holding `path`.
    pub fn file_for(path: &Path) -> Result<PathBuf> {
        let md = std::fs::metadata(path).map_err(HarnessError::io("stat", path))?;
        let dev = md.dev();
        let p = PathBuf::from(format!(
            "/sys/dev/block/{}:{}/stat",
            libc::major(dev),
            libc::minor(dev)
        ));
        p.exists()
            .then_some(p)
            .ok_or_else(|| HarnessError::missing_in("block-device counters", path))
    }

    pub fn read(file: &Path) -> Result<DiskStat> {
        let s = std::fs::read_to_string(file).map_err(HarnessError::io("read", file))?;
        let f: Vec<u64> = s
            .split_whitespace()
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        if f.len() < 4 {
            return Err(HarnessError::Format {
                path: file.to_path_buf(),
                expected: "at least 4 counters",
                found: format!("{s:?}"),
            });
        }
        Ok(DiskStat {
            reads: f[0],
            sectors: f[2],
            read_ms: f[3],
        })
    }

    /// `self - earlier`, per counter.
    pub fn since(self, earlier: DiskStat) -> DiskStat {
        DiskStat {
            reads: self.reads.saturating_sub(earlier.reads),
            sectors: self.sectors.saturating_sub(earlier.sectors),
            read_ms: self.read_ms.saturating_sub(earlier.read_ms),
        }
    }
}

/// One extent to read: file (an index into the opened files), offset, length.
#[derive(Clone, Copy, Debug)]
pub struct Extent {
    pub file: usize,
    pub offset: u64,
    pub len: u64,
}

/// What one limit run measured.
#[derive(Clone, Copy, Debug)]
pub struct LimitRun {
    pub depth: usize,
    pub seconds: f64,
    /// Records (extents) read.
    pub records: u64,
    /// Record bytes (the extents' own lengths, not the aligned transfers).
    pub bytes: u64,
    /// Device reads issued (aligned transfers; one per extent).
    pub reads: u64,
}

/// Reads every extent once with `O_DIRECT` at queue depth `depth` (that many threads, each with
/// one read outstanding, taking the next extent as it finishes one), and times it.
pub fn limit(files: &[PathBuf], extents: &[Extent], depth: usize) -> Result<LimitRun> {
    let opened: Vec<File> = files
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .map_err(HarnessError::io("open with O_DIRECT", p))
        })
        .collect::<Result<_, _>>()?;
    let biggest = extents.iter().map(|e| e.len).max().unwrap_or(0);
    let span = (biggest + 2 * ALIGN).next_multiple_of(ALIGN) as usize;
    let next = AtomicUsize::new(0);
    let t = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..depth.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    // An `O_DIRECT` buffer: the `span` bytes of `raw` from its first aligned
                    // address on.
                    let mut raw = vec![0u8; span + ALIGN as usize];
                    let at = raw.as_ptr().align_offset(ALIGN as usize);
                    let buf = &mut raw[at..at + span];
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(e) = extents.get(k) else {
                            return Ok(());
                        };
                        let start = e.offset / ALIGN * ALIGN;
                        let end = (e.offset + e.len).next_multiple_of(ALIGN);
                        let f = opened.get(e.file).ok_or_else(|| {
                            HarnessError::other(format!("extent names no file {}", e.file))
                        })?;
                        let want = (end - start) as usize;
                        let got = f.read_at(&mut buf[..want], start).map_err(|source| {
                            HarnessError::DirectRead {
                                path: files[e.file].clone(),
                                offset: start,
                                source,
                            }
                        })?;
                        // The last extent of a file may end inside the final block.
                        if (got as u64) < e.offset + e.len - start {
                            return Err(HarnessError::DirectRead {
                                path: files[e.file].clone(),
                                offset: start,
                                source: std::io::Error::new(
                                    std::io::ErrorKind::UnexpectedEof,
                                    format!("short read: {got} of {want} bytes"),
                                ),
                            });
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(HarnessError::other("reader thread panicked")))
            })
            .collect()
    });
    let seconds = t.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(LimitRun {
        depth,
        seconds,
        records: extents.len() as u64,
        bytes: extents.iter().map(|e| e.len).sum(),
        reads: extents.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmapping_drops_only_mappings_under_the_directory_and_keeps_the_bytes() {
        let inside = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let page = 4096usize;
        let (a, b) = (inside.path().join("a"), outside.path().join("b"));
        std::fs::write(&a, vec![3u8; 8 * page]).unwrap();
        std::fs::write(&b, vec![4u8; 8 * page]).unwrap();
        // SAFETY: read-only maps of the test's own files, which nothing modifies while mapped.
        let (ma, mb) = unsafe {
            (
                memmap2::Mmap::map(&File::open(&a).unwrap()).unwrap(),
                memmap2::Mmap::map(&File::open(&b).unwrap()).unwrap(),
            )
        };
        assert_eq!(ma[5 * page] + mb[5 * page], 7);
        assert_eq!(unmap_pages_under(inside.path()).unwrap(), 1);
        assert_eq!(unmap_pages_under(outside.path()).unwrap(), 1);
        // The bytes fault back in from the files.
        assert!(ma.iter().all(|&x| x == 3) && mb.iter().all(|&x| x == 4));
        drop((ma, mb));
        assert_eq!(unmap_pages_under(inside.path()).unwrap(), 0);
    }

    #[test]
    fn limit_reads_every_extent_at_every_depth() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![3u8; 1 << 20]).unwrap();
        let extents: Vec<Extent> = (0..100u64)
            .map(|k| Extent {
                file: 0,
                offset: (k * 7919) % ((1 << 20) - 3000),
                len: 2048 + k,
            })
            .collect();
        for depth in [1, 4] {
            match limit(std::slice::from_ref(&p), &extents, depth) {
                Ok(r) => {
                    assert_eq!(r.records, 100);
                    assert_eq!(r.bytes, extents.iter().map(|e| e.len).sum::<u64>());
                    assert!(r.seconds > 0.0);
                }
                // tmpfs and some overlay file systems refuse O_DIRECT: nothing to measure there.
                Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
            }
        }
        let beyond = [Extent {
            file: 0,
            offset: (1 << 20) - 10,
            len: 100,
        }];
        if let Err(e) = limit(std::slice::from_ref(&p), &beyond, 1) {
            assert!(e.to_string().contains("O_DIRECT"), "{e}");
        } else {
            panic!("an extent past the end of the file must fail");
        }
    }

    #[test]
    fn disk_stat_differences() {
        let a = DiskStat {
            reads: 10,
            sectors: 80,
            read_ms: 5,
        };
        let b = DiskStat {
            reads: 15,
            sectors: 120,
            read_ms: 9,
        };
        let d = b.since(a);
        assert_eq!((d.reads, d.sectors, d.read_ms), (5, 40, 4));
        assert_eq!(a.since(b).reads, 0);
    }
}
