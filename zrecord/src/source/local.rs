//! The local file behind [`ReadFile`]: memory-mapped (under the `SIGBUS` guard of
//! [`crate::sigbus`], with its descriptor kept for `O_DIRECT` reads, which the direct and io_uring
//! engines make) or opened for positional reads only.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::file::{ReadFile, copy_at};

/// Maps the file at `path` (an empty file is not mapped: it has no bytes to map).
pub(crate) fn open_mapped(path: &Path) -> io::Result<Arc<dyn ReadFile>> {
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

/// Opens the file at `path` for positional reads only.
pub(crate) fn open_unmapped(path: &Path) -> io::Result<Arc<dyn ReadFile>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    Ok(Arc::new(StdReadFile::Unmapped { file, len }))
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
