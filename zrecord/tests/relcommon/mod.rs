//! Helpers of the reliability suite (T1-T10 of `shared/docs/RELIABILITY.md`):
//!
//! * [`MemFs`]: an in-memory [`Vfs`] that records every mutating file-system operation, so a crash
//!   model ([`CrashModel`]) can build the images a power loss could leave behind;
//! * [`FaultFs`]: a wrapper over any `Vfs` that fails the k-th operation (EIO, ENOSPC, short write,
//!   short read), transiently or persistently, and audits fsync calls;
//! * small fixture and oracle helpers.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zrecord::vfs::{LockGuard, ReadFile, WriteFile};
use zrecord::{
    Allocator, Codec, DType, DenseStore, DenseWriter, Error, OpenOptions, RaggedStore,
    RaggedWriter, SystemAllocator, Vfs, WriterOptions,
};

/// Sector size used to tear un-synced writes.
pub const SECTOR: u64 = 512;

pub fn alloc() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

/// Reads a count from the environment (for the long tier), with a default for CI.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seed: `ZR_SEED` when set (to replay a failure), else fixed per call site.
pub fn seed(default: u64) -> u64 {
    env_count("ZR_SEED", default)
}

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Deterministic pseudo-random bytes; `low_entropy` makes them compressible.
pub fn bytes(n: usize, seed: u64, low_entropy: bool) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if low_entropy {
                ((x % 3) as u8).wrapping_add((k / 48) as u8)
            } else {
                x as u8
            }
        })
        .collect()
}

/// A small zstd dictionary (fixtures stay a few KB).
pub fn tiny_dict() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..120).map(|k| bytes(200, k, true)).collect();
    zrecord::train_dict_from(&samples, 1024).expect("train dict")
}

// ---------------------------------------------------------------------------------------------
// In-memory file system with an operation log
// ---------------------------------------------------------------------------------------------

/// One inode.
#[derive(Clone, Debug)]
pub enum Node {
    File(Arc<Vec<u8>>),
    Dir(BTreeMap<OsString, usize>),
}

/// A mutating operation, as recorded.
#[derive(Clone, Debug)]
pub enum Op {
    /// A new directory entry `dir/name -> ino` (file or directory creation).
    Link {
        dir: usize,
        name: OsString,
        ino: usize,
        is_dir: bool,
    },
    /// `dir/name` removed.
    Unlink { dir: usize, name: OsString },
    /// `from_dir/from` renamed to `to_dir/to`.
    Rename {
        from_dir: usize,
        from: OsString,
        to_dir: usize,
        to: OsString,
        ino: usize,
    },
    /// Data written to a file.
    Write { ino: usize, off: u64, data: Vec<u8> },
    /// `fsync` of a file.
    Sync { ino: usize },
    /// `fsync` of a directory.
    SyncDir { ino: usize },
}

#[derive(Debug, Default)]
struct MemState {
    nodes: Vec<Node>,
    log: Vec<Op>,
    base: Vec<Node>,
    locks: HashSet<usize>,
}

/// In-memory [`Vfs`]. Paths must be absolute. Every mutating operation is appended to a log;
/// [`MemFs::start_recording`] marks the current state as fully durable (the crash model's base).
#[derive(Clone, Debug)]
pub struct MemFs {
    st: Arc<Mutex<MemState>>,
}

impl Default for MemFs {
    fn default() -> Self {
        Self::new()
    }
}

fn enoent(p: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: not found", p.display()),
    )
}

fn split(path: &Path) -> io::Result<(PathBuf, OsString)> {
    let parent = path.parent().ok_or_else(|| enoent(path))?.to_path_buf();
    let name = path.file_name().ok_or_else(|| enoent(path))?.to_owned();
    Ok((parent, name))
}

impl MemState {
    fn resolve(&self, path: &Path) -> Option<usize> {
        let mut cur = 0usize;
        for c in path.components() {
            match c {
                Component::RootDir => cur = 0,
                Component::CurDir => {}
                Component::Normal(n) => match &self.nodes[cur] {
                    Node::Dir(e) => cur = *e.get(n)?,
                    Node::File(_) => return None,
                },
                _ => return None,
            }
        }
        Some(cur)
    }

    fn dir_of(&self, path: &Path) -> io::Result<usize> {
        let ino = self.resolve(path).ok_or_else(|| enoent(path))?;
        match self.nodes[ino] {
            Node::Dir(_) => Ok(ino),
            Node::File(_) => Err(io::Error::other(format!(
                "{}: not a directory",
                path.display()
            ))),
        }
    }

    fn entries(&mut self, dir: usize) -> &mut BTreeMap<OsString, usize> {
        match &mut self.nodes[dir] {
            Node::Dir(e) => e,
            Node::File(_) => unreachable!("checked by dir_of"),
        }
    }

    fn link(&mut self, path: &Path, node: Node) -> io::Result<usize> {
        let (parent, name) = split(path)?;
        let dir = self.dir_of(&parent)?;
        if self.entries(dir).contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: exists", path.display()),
            ));
        }
        let is_dir = matches!(node, Node::Dir(_));
        let ino = self.nodes.len();
        self.nodes.push(node);
        self.entries(dir).insert(name.clone(), ino);
        self.log.push(Op::Link {
            dir,
            name,
            ino,
            is_dir,
        });
        Ok(ino)
    }
}

impl MemFs {
    pub fn new() -> MemFs {
        MemFs {
            st: Arc::new(Mutex::new(MemState {
                nodes: vec![Node::Dir(BTreeMap::new())],
                ..Default::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MemState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the log and takes the current state as durable.
    pub fn start_recording(&self) {
        let mut st = self.lock();
        st.log.clear();
        st.base = st.nodes.clone();
    }

    pub fn log_len(&self) -> usize {
        self.lock().log.len()
    }

    pub fn crash_model(&self) -> CrashModel {
        let st = self.lock();
        CrashModel {
            base: st.base.clone(),
            log: st.log.clone(),
        }
    }

    /// Contents of a file, if it exists.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock();
        match &st.nodes[st.resolve(path)?] {
            Node::File(d) => Some(d.to_vec()),
            Node::Dir(_) => None,
        }
    }

    /// Replaces a file's contents (fixtures for corruption sweeps); creates it when missing.
    pub fn put(&self, path: &Path, data: Vec<u8>) {
        let mut st = self.lock();
        match st.resolve(path) {
            Some(ino) => st.nodes[ino] = Node::File(Arc::new(data)),
            None => {
                st.link(path, Node::File(Arc::new(data))).expect("put");
            }
        }
    }

    /// Removes a directory entry without logging it as a crash-relevant op.
    pub fn unlink(&self, path: &Path) -> bool {
        let mut st = self.lock();
        let Ok((parent, name)) = split(path) else {
            return false;
        };
        let Ok(dir) = st.dir_of(&parent) else {
            return false;
        };
        st.entries(dir).remove(&name).is_some()
    }

    /// Names in a directory (empty when it does not exist).
    pub fn names(&self, path: &Path) -> Vec<String> {
        self.list_dir(path)
            .map(|v| {
                v.into_iter()
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A copy of the current (live) tree as a new, independent file system.
    pub fn snapshot(&self) -> MemFs {
        let st = self.lock();
        MemFs {
            st: Arc::new(Mutex::new(MemState {
                nodes: st.nodes.clone(),
                ..Default::default()
            })),
        }
    }

    fn from_nodes(nodes: Vec<Node>) -> MemFs {
        MemFs {
            st: Arc::new(Mutex::new(MemState {
                nodes,
                ..Default::default()
            })),
        }
    }
}

struct MemWrite {
    fs: MemFs,
    ino: usize,
}

impl WriteFile for MemWrite {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.fs.lock();
        if let Node::File(d) = &mut st.nodes[self.ino] {
            let d = Arc::make_mut(d);
            let end = offset as usize + data.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[offset as usize..end].copy_from_slice(data);
        }
        st.log.push(Op::Write {
            ino: self.ino,
            off: offset,
            data: data.to_vec(),
        });
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.fs.lock().log.push(Op::Sync { ino: self.ino });
        Ok(())
    }
}

struct MemRead(Arc<Vec<u8>>);

impl ReadFile for MemRead {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

struct MemLock {
    fs: MemFs,
    ino: usize,
}

impl LockGuard for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.fs.lock().locks.remove(&self.ino);
    }
}

impl Vfs for MemFs {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.lock()
            .link(path, Node::Dir(BTreeMap::new()))
            .map(|_| ())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut st = self.lock();
        let mut created = Vec::new();
        let mut cur = PathBuf::new();
        for c in path.components() {
            cur.push(c);
            if matches!(c, Component::Normal(_)) && st.resolve(&cur).is_none() {
                st.link(&cur, Node::Dir(BTreeMap::new()))?;
                created.push(cur.clone());
            }
        }
        st.dir_of(path)?;
        Ok(created)
    }

    fn create_file(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let ino = self.lock().link(path, Node::File(Arc::new(Vec::new())))?;
        Ok(Box::new(MemWrite {
            fs: self.clone(),
            ino,
        }))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let ino = st.dir_of(path)?;
        st.log.push(Op::SyncDir { ino });
        Ok(())
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let (fp, fname) = split(from)?;
        let (tp, tname) = split(to)?;
        let fdir = st.dir_of(&fp)?;
        let tdir = st.dir_of(&tp)?;
        let ino = *st.entries(fdir).get(&fname).ok_or_else(|| enoent(from))?;
        if st.entries(tdir).contains_key(&tname) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "destination exists",
            ));
        }
        st.entries(fdir).remove(&fname);
        st.entries(tdir).insert(tname.clone(), ino);
        st.log.push(Op::Rename {
            from_dir: fdir,
            from: fname,
            to_dir: tdir,
            to: tname,
            ino,
        });
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let (parent, name) = split(path)?;
        let dir = st.dir_of(&parent)?;
        let ino = *st.entries(dir).get(&name).ok_or_else(|| enoent(path))?;
        if !matches!(st.nodes[ino], Node::Dir(_)) {
            return Err(io::Error::other("not a directory"));
        }
        st.entries(dir).remove(&name);
        st.log.push(Op::Unlink { dir, name });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let (parent, name) = split(path)?;
        let dir = st.dir_of(&parent)?;
        let ino = *st.entries(dir).get(&name).ok_or_else(|| enoent(path))?;
        if !matches!(st.nodes[ino], Node::File(_)) {
            return Err(io::Error::other("is a directory"));
        }
        st.entries(dir).remove(&name);
        st.log.push(Op::Unlink { dir, name });
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.lock().resolve(path).is_some())
    }

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let st = self.lock();
        let ino = st.resolve(path).ok_or_else(|| enoent(path))?;
        match &st.nodes[ino] {
            Node::File(d) => Ok(Arc::new(MemRead(d.clone()))),
            Node::Dir(_) => Err(io::Error::other("is a directory")),
        }
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let st = self.lock();
        let ino = st.dir_of(path)?;
        match &st.nodes[ino] {
            Node::Dir(e) => Ok(e.keys().cloned().collect()),
            Node::File(_) => unreachable!(),
        }
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let mut st = self.lock();
        let ino = match st.resolve(path) {
            Some(i) => i,
            None => st.link(path, Node::File(Arc::new(Vec::new())))?,
        };
        if !st.locks.insert(ino) {
            return Ok(None);
        }
        Ok(Some(Box::new(MemLock {
            fs: self.clone(),
            ino,
        })))
    }
}

// ---------------------------------------------------------------------------------------------
// Crash model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum EntryOp {
    Add(OsString, usize),
    Remove(OsString),
    Move(OsString, OsString, usize),
}

fn apply_entry(entries: &mut BTreeMap<OsString, usize>, op: &EntryOp) {
    match op {
        EntryOp::Add(n, i) => {
            entries.insert(n.clone(), *i);
        }
        EntryOp::Remove(n) => {
            entries.remove(n);
        }
        EntryOp::Move(from, to, i) => {
            if entries.get(from) == Some(i) {
                entries.remove(from);
            }
            entries.insert(to.clone(), *i);
        }
    }
}

fn apply_write(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let end = off as usize + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[off as usize..end].copy_from_slice(bytes);
}

/// State after a log prefix: what is durable, and what is still pending (un-synced).
#[derive(Clone, Debug)]
pub struct Durable {
    nodes: Vec<Node>,
    pending_writes: BTreeMap<usize, Vec<(u64, Vec<u8>)>>,
    pending_entries: BTreeMap<usize, Vec<EntryOp>>,
}

impl Durable {
    /// Number of un-synced operations (writes + directory-entry changes).
    pub fn pending(&self) -> usize {
        self.pending_writes.values().map(Vec::len).sum::<usize>()
            + self.pending_entries.values().map(Vec::len).sum::<usize>()
    }
}

/// The recorded log of a workload plus the durable base it started from.
///
/// Durability rules (deliberately the weakest POSIX gives):
/// * a write to a file is durable only once that file is fsynced after it;
/// * a directory entry change (create, mkdir, unlink, rename) is durable only once the directory
///   holding the entry is fsynced after it; fsyncing a file does not persist its name;
/// * at a crash, every un-synced write independently survives per 512-byte sector (torn writes),
///   and every un-synced entry change independently survives or not (applied in log order).
#[derive(Clone, Debug)]
pub struct CrashModel {
    pub base: Vec<Node>,
    pub log: Vec<Op>,
}

impl CrashModel {
    /// Durable state and pending operations after the first `p` operations.
    pub fn durable_at(&self, p: usize) -> Durable {
        let mut nodes = self.base.clone();
        let mut pending_writes: BTreeMap<usize, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        let mut pending_entries: BTreeMap<usize, Vec<EntryOp>> = BTreeMap::new();
        for op in &self.log[..p] {
            match op {
                Op::Link {
                    dir,
                    name,
                    ino,
                    is_dir,
                } => {
                    if nodes.len() <= *ino {
                        nodes.resize(*ino + 1, Node::File(Arc::new(Vec::new())));
                    }
                    nodes[*ino] = if *is_dir {
                        Node::Dir(BTreeMap::new())
                    } else {
                        Node::File(Arc::new(Vec::new()))
                    };
                    pending_entries
                        .entry(*dir)
                        .or_default()
                        .push(EntryOp::Add(name.clone(), *ino));
                }
                Op::Unlink { dir, name } => pending_entries
                    .entry(*dir)
                    .or_default()
                    .push(EntryOp::Remove(name.clone())),
                Op::Rename {
                    from_dir,
                    from,
                    to_dir,
                    to,
                    ino,
                } => {
                    if from_dir == to_dir {
                        pending_entries
                            .entry(*to_dir)
                            .or_default()
                            .push(EntryOp::Move(from.clone(), to.clone(), *ino));
                    } else {
                        pending_entries
                            .entry(*from_dir)
                            .or_default()
                            .push(EntryOp::Remove(from.clone()));
                        pending_entries
                            .entry(*to_dir)
                            .or_default()
                            .push(EntryOp::Add(to.clone(), *ino));
                    }
                }
                Op::Write { ino, off, data } => pending_writes
                    .entry(*ino)
                    .or_default()
                    .push((*off, data.clone())),
                Op::Sync { ino } => {
                    if let Some(ws) = pending_writes.remove(ino)
                        && let Node::File(d) = &mut nodes[*ino]
                    {
                        let d = Arc::make_mut(d);
                        for (off, data) in ws {
                            apply_write(d, off, &data);
                        }
                    }
                }
                Op::SyncDir { ino } => {
                    if let Some(ops) = pending_entries.remove(ino)
                        && let Node::Dir(e) = &mut nodes[*ino]
                    {
                        for o in &ops {
                            apply_entry(e, o);
                        }
                    }
                }
            }
        }
        Durable {
            nodes,
            pending_writes,
            pending_entries,
        }
    }

    /// One crash image: the durable state plus a random subset of the pending operations, each
    /// surviving with probability `keep`, writes torn at sector granularity.
    pub fn image(d: &Durable, rng: &mut SmallRng, keep: f64) -> MemFs {
        let mut nodes = d.nodes.clone();
        for (ino, ws) in &d.pending_writes {
            let Node::File(data) = &mut nodes[*ino] else {
                continue;
            };
            let data = Arc::make_mut(data);
            for (off, w) in ws {
                let end = off + w.len() as u64;
                let mut s = off - off % SECTOR;
                while s < end {
                    let a = s.max(*off);
                    let b = (s + SECTOR).min(end);
                    if rng.random_bool(keep) {
                        apply_write(data, a, &w[(a - off) as usize..(b - off) as usize]);
                    }
                    s += SECTOR;
                }
            }
        }
        for (dir, ops) in &d.pending_entries {
            let Node::Dir(e) = &mut nodes[*dir] else {
                continue;
            };
            for o in ops {
                if rng.random_bool(keep) {
                    apply_entry(e, o);
                }
            }
        }
        MemFs::from_nodes(nodes)
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

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

/// Wraps a [`Vfs`] and fails operation number `fail_at` (counting from 0 over every call,
/// including `write_at`/`sync` on open files).
#[derive(Clone, Debug)]
pub struct FaultFs {
    inner: Arc<dyn Vfs>,
    st: Arc<Mutex<FaultState>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpClass {
    Write,
    Read,
    Other,
}

impl FaultFs {
    pub fn new(inner: Arc<dyn Vfs>) -> FaultFs {
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
        self.inner.exists(path)
    }

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        match self.tick(OpClass::Read) {
            Some(Fault::ShortRead) => {
                let inner = self.inner.open_read(path)?;
                let len = inner.bytes().len() / 2;
                Ok(Arc::new(Truncated { inner, len }))
            }
            Some(k) => Err(Self::err(k)),
            None => self.inner.open_read(path),
        }
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

// ---------------------------------------------------------------------------------------------
// Fixtures and oracles
// ---------------------------------------------------------------------------------------------

/// How a fixture container is written.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: &'static str,
    pub ragged: bool,
    pub codec: Codec,
    pub shards: u32,
    pub records: usize,
    /// Dense: elements (uint8) per record; Ragged: max elements (int32) per record.
    pub size: usize,
    /// Appends the records are split into.
    pub appends: usize,
}

/// The records a fixture holds: raw bytes and (Ragged) shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oracle {
    pub ragged: bool,
    pub recs: Vec<(Vec<u8>, Vec<u64>)>,
}

impl Spec {
    pub fn oracle(&self, seed: u64) -> Oracle {
        let recs = (0..self.records)
            .map(|k| {
                if self.ragged {
                    let n = 1 + (k * 7 + seed as usize) % self.size;
                    (bytes(n * 4, seed + k as u64, true), vec![n as u64])
                } else {
                    (bytes(self.size, seed + k as u64, true), vec![])
                }
            })
            .collect();
        Oracle {
            ragged: self.ragged,
            recs,
        }
    }

    pub fn writer_options(&self, vfs: Arc<dyn Vfs>) -> WriterOptions {
        WriterOptions {
            data_shards: self.shards,
            dict: (self.codec == Codec::ZstdDict).then(tiny_dict),
            vfs,
            ..WriterOptions::default()
        }
    }

    /// Writes the fixture with `opts` and returns what `close()` returned (the writer's own errors
    /// are returned, never unwrapped).
    pub fn write(&self, path: &Path, oracle: &Oracle, opts: WriterOptions) -> zrecord::Result<()> {
        let per = oracle.recs.len().div_ceil(self.appends.max(1)).max(1);
        if self.ragged {
            let mut w = RaggedWriter::create(path, DType::Int32, 1, self.codec, opts)?;
            for chunk in oracle.recs.chunks(per) {
                let (v, cu, sh) = pack(chunk, 4);
                w.append(&v, &cu, &sh)?;
            }
            w.close()
        } else {
            let mut w =
                DenseWriter::create(path, DType::UInt8, &[self.size as u64], self.codec, opts)?;
            for chunk in oracle.recs.chunks(per) {
                let data: Vec<u8> = chunk.iter().flat_map(|r| r.0.iter().copied()).collect();
                w.append(&data)?;
            }
            w.close()
        }
    }
}

pub fn pack(recs: &[(Vec<u8>, Vec<u64>)], isz: usize) -> (Vec<u8>, Vec<i32>, Vec<u64>) {
    let mut values = Vec::new();
    let mut cu = vec![0i32];
    let mut shapes = Vec::new();
    for (b, s) in recs {
        values.extend_from_slice(b);
        cu.push((values.len() / isz) as i32);
        shapes.extend_from_slice(s);
    }
    (values, cu, shapes)
}

/// Opens `path` through `vfs`, then reads everything back and compares it with the oracle.
/// `verify` additionally runs `verify()` on a second open. Returns the first error.
pub fn check_container(
    vfs: Arc<dyn Vfs>,
    path: &Path,
    oracle: &Oracle,
    verify: bool,
) -> Result<(), CheckError> {
    let opts = OpenOptions {
        verify: true,
        vfs,
        ..OpenOptions::default()
    };
    let n = oracle.recs.len() as u64;
    let all: Vec<u64> = (0..n).collect();
    if oracle.ragged {
        let store = RaggedStore::open_with(path, opts.clone()).map_err(CheckError::Zr)?;
        if verify {
            store.verify().map_err(CheckError::Zr)?;
        }
        if store.len() != n {
            return Err(CheckError::Mismatch(format!("len {} != {n}", store.len())));
        }
        let b = store.bind(alloc()).gather(&all).map_err(CheckError::Zr)?;
        for (k, (data, shape)) in oracle.recs.iter().enumerate() {
            if b.record(k) != &data[..] || b.shapes()[k..k + 1] != shape[..] {
                return Err(CheckError::Mismatch(format!("record {k} differs")));
            }
        }
    } else {
        let store = DenseStore::open_with(path, opts.clone()).map_err(CheckError::Zr)?;
        if verify {
            store.verify().map_err(CheckError::Zr)?;
        }
        if store.len() != n {
            return Err(CheckError::Mismatch(format!("len {} != {n}", store.len())));
        }
        let b = store.bind(alloc()).gather(&all).map_err(CheckError::Zr)?;
        let expect: Vec<u8> = oracle.recs.iter().flat_map(|r| r.0.clone()).collect();
        if b.bytes() != &expect[..] {
            return Err(CheckError::Mismatch("records differ".into()));
        }
    }
    Ok(())
}

/// Why a container did not check out.
#[derive(Debug)]
pub enum CheckError {
    Zr(Error),
    Mismatch(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Zr(e) => write!(f, "{e}"),
            CheckError::Mismatch(m) => write!(f, "silent mismatch: {m}"),
        }
    }
}

/// Entries of `dir` that belong to writers (temp directories and their lock files).
pub fn temp_entries(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.contains(".zr-tmp-"))
        .cloned()
        .collect()
}

/// A tally printed at the end of a test (the long-tier script greps these lines).
pub fn report(test: &str, fields: &[(&str, String)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("RELIABILITY {test} {}", body.join(" "));
}

/// Collects a `HashMap` count.
pub fn bump(m: &mut HashMap<String, u64>, k: impl Into<String>) {
    *m.entry(k.into()).or_default() += 1;
}
