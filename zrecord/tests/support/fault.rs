//! Fault injection: [`FaultFs`] wraps any [`Fs`] and fails its k-th operation (EIO, ENOSPC, a
//! short write or a short read), once or from then on, and audits fsync calls (no fsync may be
//! retried on a path whose fsync failed).

use std::collections::HashSet;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use zrecord::{ReadFs, Vfs};

use super::Fs;
use zrecord::vfs::{LockGuard, ReadFile, WriteFile};

/// What the injected fault looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `EIO` from the operation.
    Eio,
    /// `ENOSPC` from the operation.
    Enospc,
    /// A write that stores only its first half, then fails (`write_all` hitting a zero-length
    /// write); other operations are not faulted in this mode.
    ShortWrite,
    /// `open_read` hands out only the first half of the file; other operations are not faulted.
    ShortRead,
}

#[derive(Debug, Default)]
struct FaultState {
    ops: u64,
    fail_at: Option<u64>,
    persistent: bool,
    kind: Option<Fault>,
    injected: u64,
    /// Paths whose fsync failed.
    failed_sync: HashSet<PathBuf>,
    /// fsync calls on a path after its fsync failed (must stay empty).
    retried_sync: Vec<PathBuf>,
    syncs: u64,
}

/// Wraps an [`Fs`] and fails operation number `fail_at` (counting from 0 over every call,
/// including `write_at`/`sync` on open files).
#[derive(Clone, Debug)]
pub struct FaultFs {
    inner: Arc<dyn Fs>,
    st: Arc<Mutex<FaultState>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpClass {
    Write,
    Read,
    Other,
}

impl FaultFs {
    pub fn new(inner: Arc<dyn Fs>) -> FaultFs {
        FaultFs {
            inner,
            st: Arc::new(Mutex::new(FaultState::default())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arms the fault (and resets the counters).
    pub fn arm(&self, fail_at: u64, kind: Fault, persistent: bool) {
        let mut st = self.lock();
        *st = FaultState {
            fail_at: Some(fail_at),
            kind: Some(kind),
            persistent,
            ..Default::default()
        };
    }

    /// Stops injecting (the "disk" is repaired); keeps the audit.
    pub fn heal(&self) {
        self.lock().fail_at = None;
    }

    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    pub fn retried_syncs(&self) -> Vec<PathBuf> {
        self.lock().retried_sync.clone()
    }

    /// Counts one operation; returns the fault to inject, if any.
    fn tick(&self, class: OpClass) -> Option<Fault> {
        let mut st = self.lock();
        let n = st.ops;
        st.ops += 1;
        let at = st.fail_at?;
        let hit = if st.persistent { n >= at } else { n == at };
        if !hit {
            return None;
        }
        let kind = st.kind?;
        let applies = match kind {
            Fault::Eio | Fault::Enospc => true,
            Fault::ShortWrite => class == OpClass::Write,
            Fault::ShortRead => class == OpClass::Read,
        };
        if applies {
            st.injected += 1;
            Some(kind)
        } else {
            None
        }
    }

    fn err(kind: Fault) -> io::Error {
        match kind {
            Fault::Enospc => io::Error::from_raw_os_error(libc::ENOSPC),
            Fault::ShortWrite => io::Error::new(io::ErrorKind::WriteZero, "short write"),
            _ => io::Error::from_raw_os_error(libc::EIO),
        }
    }

    fn check(&self, class: OpClass) -> io::Result<()> {
        match self.tick(class) {
            Some(k) => Err(Self::err(k)),
            None => Ok(()),
        }
    }

    fn audit_sync(&self, path: &Path, r: &io::Result<()>) {
        let mut st = self.lock();
        st.syncs += 1;
        if st.failed_sync.contains(path) {
            st.retried_sync.push(path.to_path_buf());
        }
        if r.is_err() {
            st.failed_sync.insert(path.to_path_buf());
        }
    }
}

struct FaultWrite {
    fs: FaultFs,
    path: PathBuf,
    inner: Box<dyn WriteFile>,
}

impl WriteFile for FaultWrite {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        match self.fs.tick(OpClass::Write) {
            Some(Fault::ShortWrite) => {
                self.inner.write_at(offset, &data[..data.len() / 2])?;
                Err(FaultFs::err(Fault::ShortWrite))
            }
            Some(k) => Err(FaultFs::err(k)),
            None => self.inner.write_at(offset, data),
        }
    }

    fn sync(&self) -> io::Result<()> {
        let r = self
            .fs
            .check(OpClass::Other)
            .and_then(|()| self.inner.sync());
        self.fs.audit_sync(&self.path, &r);
        r
    }
}

struct Truncated {
    inner: Arc<dyn ReadFile>,
    len: usize,
}

impl ReadFile for Truncated {
    fn bytes(&self) -> &[u8] {
        &self.inner.bytes()[..self.len]
    }
}

impl Vfs for FaultFs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.check(OpClass::Other)?;
        self.inner.create_dir(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.check(OpClass::Other)?;
        self.inner.create_dir_all(path)
    }

    fn create_file(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check(OpClass::Other)?;
        let inner = self.inner.create_file(path)?;
        Ok(Box::new(FaultWrite {
            fs: self.clone(),
            path: path.to_path_buf(),
            inner,
        }))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let r = self
            .check(OpClass::Other)
            .and_then(|()| self.inner.sync_dir(path));
        self.audit_sync(path, &r);
        r
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(OpClass::Other)?;
        self.inner.rename_noreplace(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.check(OpClass::Other)?;
        self.inner.remove_dir_all(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(OpClass::Other)?;
        self.inner.remove_file(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.check(OpClass::Other)?;
        Vfs::exists(&*self.inner, path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.check(OpClass::Other)?;
        self.inner.list_dir(path)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.check(OpClass::Other)?;
        self.inner.try_lock(path)
    }
}

impl ReadFs for FaultFs {
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        match self.tick(OpClass::Read) {
            Some(Fault::ShortRead) => {
                let inner = ReadFs::open_read(&*self.inner, path)?;
                let len = inner.bytes().len() / 2;
                Ok(Arc::new(Truncated { inner, len }))
            }
            Some(k) => Err(Self::err(k)),
            None => ReadFs::open_read(&*self.inner, path),
        }
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.check(OpClass::Other)?;
        Vfs::exists(&*self.inner, path)
    }
}
