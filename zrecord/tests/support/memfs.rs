//! An in-memory [`Vfs`] that records every mutating file-system operation, so that the crash
//! model ([`super::crash::CrashModel`]) can build the images a power loss could leave behind, and
//! tests can read, plant or remove files without touching the disk.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use zrecord::vfs::{LockGuard, ReadFile, WriteFile};
use zrecord::{ReadFs, Vfs};

use super::crash::CrashModel;

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

    /// Removes the entry at `path`, which must be a directory (`dir`) or a file (`!dir`), and
    /// logs the unlink. A directory goes with everything below it.
    fn remove_entry(&self, path: &Path, dir: bool) -> io::Result<()> {
        let mut st = self.lock();
        let (parent, name) = split(path)?;
        let parent = st.dir_of(&parent)?;
        let ino = *st.entries(parent).get(&name).ok_or_else(|| enoent(path))?;
        if matches!(st.nodes[ino], Node::Dir(_)) != dir {
            return Err(io::Error::other(if dir {
                "not a directory"
            } else {
                "is a directory"
            }));
        }
        st.entries(parent).remove(&name);
        st.log.push(Op::Unlink { dir: parent, name });
        Ok(())
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

    /// A file system holding exactly `nodes` (a crash image), with an empty log.
    pub(super) fn from_nodes(nodes: Vec<Node>) -> MemFs {
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
        self.remove_entry(path, true)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.remove_entry(path, false)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.lock().resolve(path).is_some())
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

impl ReadFs for MemFs {
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let st = self.lock();
        let ino = st.resolve(path).ok_or_else(|| enoent(path))?;
        match &st.nodes[ino] {
            Node::File(d) => Ok(Arc::new(MemRead(d.clone()))),
            Node::Dir(_) => Err(io::Error::other("is a directory")),
        }
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.lock().resolve(path).is_some())
    }
}
