//! The small file-system interface every zrecord read and write goes through.
//!
//! Production code uses [`StdFs`] (positional writes, `fsync`, `renameat2(RENAME_NOREPLACE)`, read-only
//! memory maps). Tests substitute their own implementation to inject I/O errors or to record every
//! operation of a publish and replay crash images (see the reliability suite).

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;

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

/// A file opened for reading, exposed as one immutable byte slice.
pub trait ReadFile: Send + Sync {
    /// The whole file.
    fn bytes(&self) -> &[u8];
    /// The same file for reads that bypass the page cache (`O_DIRECT`: offset, length and buffer
    /// aligned to [`DIRECT_ALIGN`]), used by cold gathers of large records; `None` (the default)
    /// when this file system has no such reads, and every read then goes through
    /// [`ReadFile::bytes`].
    fn direct(&self) -> Option<&File> {
        None
    }
    /// Whether [`ReadFile::bytes`] is the file's contents (a map, or a copy in memory). `false`
    /// for a file opened with [`Vfs::open_read_unmapped`]: its `bytes` is empty and it is read
    /// only with [`ReadFile::read_exact_at`].
    fn mapped(&self) -> bool {
        true
    }
    /// The file's length in bytes (as opened).
    fn file_len(&self) -> u64 {
        self.bytes().len() as u64
    }
    /// Reads `buf.len()` bytes at `offset`; fails with [`io::ErrorKind::UnexpectedEof`] where the
    /// file ends first. The default copies from [`ReadFile::bytes`].
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        copy_at(self.bytes(), buf, offset)
    }
    /// Whether the file was found shorter than its map while it was read (a `SIGBUS` caught by
    /// [`crate::sigbus`]): from then on the map's tail reads zeros, not the file, and every read
    /// of the store fails. Never for a file that is not mapped.
    fn faulted(&self) -> bool {
        false
    }
}

/// `buf.len()` bytes of `b` from `offset` into `buf`; [`io::ErrorKind::UnexpectedEof`] where `b`
/// ends first.
fn copy_at(b: &[u8], buf: &mut [u8], offset: u64) -> io::Result<()> {
    let src = usize::try_from(offset)
        .ok()
        .and_then(|o| b.get(o..)?.get(..buf.len()))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file ends at byte {} before bytes {offset}..{}",
                    b.len(),
                    offset + buf.len() as u64
                ),
            )
        })?;
    buf.copy_from_slice(src);
    Ok(())
}

/// The URL schemes a store path may have: a path `scheme://...` with one of them names a store on
/// object storage (read with the `remote` feature).
pub const URL_SCHEMES: [&str; 7] = ["s3", "gs", "az", "abfs", "abfss", "http", "https"];

/// The URL `path` names, when it is one (`scheme://...` with a scheme of [`URL_SCHEMES`]).
pub fn url_of(path: &Path) -> Option<&str> {
    let s = path.to_str()?;
    let (scheme, rest) = s.split_once("://")?;
    (URL_SCHEMES.contains(&scheme) && !rest.is_empty()).then_some(s)
}

/// The alignment of offsets, lengths and buffers of a [`ReadFile::direct`] read: 4 KiB, a
/// multiple of every common device's logical block size (a device with larger blocks refuses
/// the read with `EINVAL`, and the caller then reads through the mapping).
pub const DIRECT_ALIGN: usize = 4096;

/// A held advisory lock; dropping it releases the lock.
pub trait LockGuard: Send + Sync {}

/// File-system operations used by zrecord.
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
    /// Opens an existing file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// Opens an existing file for positional reads only ([`ReadFile::read_exact_at`]), without a
    /// memory map. The default maps it ([`Vfs::open_read`]).
    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        self.open_read(path)
    }
    /// Whether `path` lies on a shared or network file system (NFS, SMB/CIFS, FUSE, Lustre,
    /// Ceph, GPFS, 9P, AFS, GFS2, OCFS2), where another host may shrink a file under a map:
    /// stores there are opened unmapped unless asked otherwise. The default: `false`.
    fn shared_fs(&self, _path: &Path) -> bool {
        false
    }
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

enum StdReadFile {
    Mapped {
        /// Registers `map` with the `SIGBUS` guard; declared before `map`, so it is dropped (and
        /// the map unregistered) before the map is unmapped. `None` when every slot was taken.
        guard: Option<crate::sigbus::Guard>,
        map: memmap2::Mmap,
        /// The descriptor the map was made from, kept for direct reads.
        file: File,
        /// Whether `file` reads with `O_DIRECT`: switched on at the first direct read (`None`
        /// until then; `Some(false)` where the file system refuses the flag).
        direct: std::sync::OnceLock<bool>,
    },
    /// Opened for positional reads only.
    Unmapped {
        file: File,
        len: u64,
    },
    Empty,
}

impl ReadFile for StdReadFile {
    fn bytes(&self) -> &[u8] {
        match self {
            StdReadFile::Mapped { map, .. } => map,
            StdReadFile::Unmapped { .. } | StdReadFile::Empty => &[],
        }
    }

    fn mapped(&self) -> bool {
        !matches!(self, StdReadFile::Unmapped { .. })
    }

    fn file_len(&self) -> u64 {
        match self {
            StdReadFile::Mapped { map, .. } => map.len() as u64,
            StdReadFile::Unmapped { len, .. } => *len,
            StdReadFile::Empty => 0,
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let StdReadFile::Unmapped { file, .. } = self else {
            return copy_at(self.bytes(), buf, offset);
        };
        // std's loop: short reads continue, EINTR is retried, the file's end is UnexpectedEof
        // (the container names the range and the manifest's length around it).
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }

    fn faulted(&self) -> bool {
        match self {
            StdReadFile::Mapped { guard: Some(g), .. } => g.faulted(),
            _ => false,
        }
    }

    /// The descriptor the file was mapped from, switched to `O_DIRECT` on first use (the map
    /// does not depend on the descriptor's flags, and nothing else reads through it).
    #[cfg(target_os = "linux")]
    fn direct(&self) -> Option<&File> {
        let StdReadFile::Mapped { file, direct, .. } = self else {
            return None;
        };
        let on = *direct.get_or_init(|| {
            use std::os::fd::AsRawFd;
            let fd = file.as_raw_fd();
            // SAFETY: fcntl on a descriptor this value owns and keeps open; F_GETFL and F_SETFL
            // only read and change its status flags.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) == 0
            }
        });
        on.then_some(file)
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

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        if len == 0 {
            return Ok(Arc::new(StdReadFile::Empty));
        }
        // SAFETY: containers are immutable after publish; the map is read-only. A file shrunk
        // under the map (another process truncating it, a shared file system) would raise
        // SIGBUS on a read past its new end: the guard registered here turns that into zeros
        // and a fault mark that the read path reports as an error (`crate::sigbus`).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(Arc::new(StdReadFile::Mapped {
            guard: crate::sigbus::Guard::register(&map),
            map,
            file: f,
            direct: std::sync::OnceLock::new(),
        }))
    }

    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(StdReadFile::Unmapped { file, len }))
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
