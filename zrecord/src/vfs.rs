//! The small file-system interfaces zrecord goes through: [`Vfs`], what its writers and its
//! publish do, and [`ReadFs`] (declared with the read side in `crate::source`, re-exported here),
//! how the reads of a local store open its files.
//!
//! Production code uses [`StdFs`], which implements both (positional writes, `fsync`,
//! `renameat2(RENAME_NOREPLACE)`, read-only memory maps). Tests substitute their own
//! implementations to inject I/O errors or to record every operation of a publish and replay crash
//! images (see the reliability suite). A store on object storage is not a file system: it is read
//! through the read-side traits of `crate::source` ([`ReadFile`], re-exported here with the URL
//! helpers and [`DIRECT_ALIGN`]), which the remote client implements.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;

pub use crate::source::{DIRECT_ALIGN, ReadFile, ReadFs, URL_SCHEMES, url_of};

/// A file being written. Writes are positional so shards can be filled independently.
pub trait WriteFile: Send + Sync {
    /// Writes all of `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Writes `parts` back to back from `offset`, as one `write_at` of their concatenation would.
    /// The default writes them one by one; a file system may gather them into fewer calls.
    fn write_parts_at(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        let mut at = offset;
        for p in parts {
            self.write_at(at, p)?;
            at += p.len() as u64;
        }
        Ok(())
    }
    /// Makes the file's contents durable (`fsync`).
    fn sync(&self) -> io::Result<()>;
    /// Asks the OS to start writing the file's dirty pages back now, without waiting: a hint that
    /// lets the writeback of several files (and of data still being produced) overlap before
    /// [`WriteFile::sync`]. Durability still comes only from `sync`. The default does nothing.
    fn start_writeback(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A held advisory lock; dropping it releases the lock.
pub trait LockGuard: Send + Sync {}

/// File-system operations zrecord's writers and its publish use: create, write, `fsync`, rename
/// without replace, remove, list, lock. Reading a local store goes through [`ReadFs`] instead. A
/// store on object storage is not a `Vfs`.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Creates one directory; fails if it exists.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its missing parents; returns the directories it created (outermost first).
    fn create_dir_all(&self, path: &Path) -> io::Result<Vec<std::path::PathBuf>>;
    /// Creates a new file for writing; fails if it exists.
    fn create_file(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Makes a directory's entries durable (`fsync` on the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, failing (with `AlreadyExists`) if `to` exists.
    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a directory tree.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Whether anything exists at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Names of the entries of a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;
    /// Creates `path` if needed and takes an exclusive advisory lock on it without blocking;
    /// `Ok(None)` when someone else holds it.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdWriteFile(File);

/// Most parts one `pwritev` takes (Linux's `UIO_MAXIOV`).
#[cfg(target_os = "linux")]
const IOV_MAX: usize = 1024;

impl WriteFile for StdWriteFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.0.write_all_at(data, offset)
    }

    /// One `pwritev` per up to [`IOV_MAX`] parts (continued after a short write).
    #[cfg(target_os = "linux")]
    fn write_parts_at(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut at = offset;
        // The part being written and how much of it is done.
        let (mut k, mut done) = (0usize, 0usize);
        loop {
            // Past the parts (or the rest of one) already written; empty ones write nothing, and a
            // call with nothing left to write would return 0.
            while k < parts.len() && parts[k].len() == done {
                k += 1;
                done = 0;
            }
            if k == parts.len() {
                return Ok(());
            }
            let iov: Vec<libc::iovec> = parts[k..]
                .iter()
                .take(IOV_MAX)
                .enumerate()
                .map(|(j, p)| {
                    let p = if j == 0 { &p[done..] } else { p };
                    libc::iovec {
                        iov_base: p.as_ptr() as *mut libc::c_void,
                        iov_len: p.len(),
                    }
                })
                .collect();
            let off = libc::off_t::try_from(at)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
            // SAFETY: every iovec points into a live `&[u8]` of `parts` for its whole length and
            // pwritev only reads them; the descriptor is owned by `self.0` and open; `iov.len()`
            // is at most IOV_MAX.
            let n =
                unsafe { libc::pwritev(self.0.as_raw_fd(), iov.as_ptr(), iov.len() as i32, off) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            let mut n = n as usize;
            at += n as u64;
            // Advance over what was written: whole parts, then the start of one.
            while n > 0 {
                let left = parts[k].len() - done;
                if n >= left {
                    n -= left;
                    k += 1;
                    done = 0;
                } else {
                    done += n;
                    n = 0;
                }
            }
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is owned by `self.0` and open for the duration of the call;
        // sync_file_range only schedules I/O on it (offset 0, length 0 = the whole file).
        let rc =
            unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Whether a `statfs` file-system type (`f_type`, as `linux/magic.h` numbers them) is a shared or
/// network file system: NFS, SMB, CIFS, SMB2, FUSE, Ceph, Lustre, GPFS, 9P, AFS (both numbers),
/// GFS2, OCFS2.
pub fn is_shared_fs_magic(f_type: u64) -> bool {
    const SHARED: [u64; 13] = [
        0x6969,      // NFS_SUPER_MAGIC
        0x517b,      // SMB_SUPER_MAGIC
        0xff53_4d42, // CIFS_MAGIC_NUMBER
        0xfe53_4d42, // SMB2_MAGIC_NUMBER
        0x6573_5546, // FUSE_SUPER_MAGIC
        0x00c3_6400, // CEPH_SUPER_MAGIC
        0x0bd0_0bd0, // LUSTRE_SUPER_MAGIC
        0x4750_4653, // GPFS_SUPER_MAGIC
        0x0102_1997, // V9FS_MAGIC
        0x5346_414f, // AFS_SUPER_MAGIC
        0x6b41_4653, // AFS_FS_MAGIC
        0x0116_1970, // GFS2_MAGIC
        0x7461_636f, // OCFS2_SUPER_MAGIC
    ];
    // f_type is a signed word on some targets: compare its low 32 bits.
    SHARED.contains(&(f_type & 0xffff_ffff))
}

impl ReadFs for StdFs {
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        crate::source::open_mapped(path)
    }

    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        crate::source::open_unmapped(path)
    }

    fn shared_fs(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `statfs` is plain data, for which all-zero bytes are a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: statfs reads the NUL-terminated path and writes only the struct it is given.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
            return false;
        }
        is_shared_fs_magic(st.f_type as u64)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }
}

struct StdLock(#[allow(dead_code)] File);
impl LockGuard for StdLock {}

impl Vfs for StdFs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<Vec<std::path::PathBuf>> {
        let mut missing = Vec::new();
        let mut cur = Some(path);
        while let Some(p) = cur {
            if p.as_os_str().is_empty() || p.exists() {
                break;
            }
            missing.push(p.to_path_buf());
            cur = p.parent();
        }
        missing.reverse();
        for p in &missing {
            match std::fs::create_dir(p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(missing)
    }

    fn create_file(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(StdWriteFile(f)))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        rename_noreplace(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(Box::new(StdLock(f)))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(from.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let b = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // Some file systems do not support the flag: fall back to check-then-rename (a directory
    // rename onto a non-empty directory still fails, and our destination is checked first).
    if matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        if to.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "destination exists",
            ));
        }
        return std::fs::rename(from, to);
    }
    Err(err)
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    if to.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "destination exists",
        ));
    }
    std::fs::rename(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gathered writes put every part where one write of their concatenation would, past the
    /// per-call part limit and with empty parts among them, and leave the rest of the file alone.
    #[test]
    fn write_parts_at_equals_one_write_of_the_concatenation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let f = StdFs.create_file(&path).expect("create");
        f.write_at(0, &[0xEE; 64]).expect("head");
        let owned: Vec<Vec<u8>> = (0..2_500usize)
            .map(|k| (0..k % 37).map(|j| (k * 7 + j) as u8).collect())
            .collect();
        let parts: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        f.write_parts_at(64, &parts).expect("write parts");
        f.write_parts_at(1 << 20, &[]).expect("no parts");
        // Only empty parts: nothing to write, as for `write_at` of an empty slice (the writers never
        // pass one: records are non-empty).
        f.write_parts_at(64, &[&[], &[]]).expect("empty parts");
        let want: Vec<u8> = [vec![0xEE; 64], owned.concat()].concat();
        assert_eq!(std::fs::read(&path).expect("read"), want);
    }
}
