//! The local file behind [`ReadFile`]: memory-mapped (under the `SIGBUS` guard of
//! [`crate::sigbus`]) or opened for positional reads only.
//!
//! A mapped file holds no descriptor: the map outlives the one it was made from, so a process
//! with thousands of stores or dataset parts open stays far below the usual limit of 1,024 open
//! files. The `O_DIRECT` descriptor that the direct and io_uring engines read through is opened
//! at the first direct read, and only if the path still names the file that was mapped.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{ReadFile, copy_at};

/// Maps the file at `path` (an empty file is not mapped: it has no bytes to map).
pub(crate) fn open_mapped(path: &Path) -> io::Result<Arc<dyn ReadFile>> {
    let f = File::open(path)?;
    let meta = f.metadata()?;
    if meta.len() == 0 {
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
        path: path.to_path_buf(),
        identity: identity(&meta),
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
        /// Where the map was made from, and that file's device and inode.
        path: PathBuf,
        identity: (u64, u64),
        /// The `O_DIRECT` descriptor, opened at the first direct read (`Some(None)` where the
        /// file system refuses the flag or the path no longer names the mapped file).
        direct: std::sync::OnceLock<Option<File>>,
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

    /// The file opened again with `O_DIRECT` on first use (the map does not need a descriptor;
    /// direct reads do), where the file system accepts the flag and the path still names the file
    /// that was mapped (a container replaced at that path is another inode: its bytes never mix
    /// with this map's).
    #[cfg(target_os = "linux")]
    fn direct(&self) -> Option<&File> {
        let StdReadFile::Mapped {
            path,
            identity: id,
            direct,
            ..
        } = self
        else {
            return None;
        };
        direct
            .get_or_init(|| {
                use std::os::unix::fs::OpenOptionsExt;
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                    .ok()?;
                let same = f.metadata().is_ok_and(|m| identity(&m) == *id);
                same.then_some(f)
            })
            .as_ref()
    }
}

/// A file's device and inode.
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}
