//! The publish protocol of `docs/format.md` ("Publish protocol"), in the spec's step order:
//!
//! 1. take the lock on `<parent>/.<name>.zr-tmp-<uuid>.lock` ([`Staging::begin`]);
//! 2. create the private temp directory ([`Staging::begin`]); the writer then writes every file
//!    there;
//! 3. fsync each shard file, the index and the manifest, then the temp directory
//!    ([`Staging::publish`], after a writeback hint for every file);
//! 4. rename the temp directory into place without replacing anything;
//! 5. fsync the parent (and any parents the writer created), release and remove the lock.
//!
//! Any failure before step 4 removes the temp directory ([`Staging`]'s `Drop`), and temp
//! directories of dead writers are collected by [`gc`]. This module owns only the directory
//! and the lock; what goes into the files is the writer's (`crate::write`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::vfs::{LockGuard, StdFs, Vfs, WriteFile};

/// Suffix of the private directory a writer fills before publishing.
const TMP_MARKER: &str = ".zr-tmp-";

/// Deliberate protocol breakages, for proving the crash-simulation suite has teeth. Only honoured
/// in test builds (feature `testing`, which exports it as `zrecord::testing::Mutation`); other
/// builds never construct one (the publish reads `None`).
#[cfg_attr(not(feature = "mutations"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Skip fsync step k (shards 0..S, then index, manifest, temp dir, parent).
    SkipSync(usize),
    /// Rename the temp directory into place before any fsync.
    RenameBeforeSync,
}

/// One writer's private temp directory and its lock, from step 1 until the container is published
/// under its final name (or, on any failure before step 4, removed again).
pub(crate) struct Staging {
    vfs: Arc<dyn Vfs>,
    final_path: PathBuf,
    tmp_path: PathBuf,
    lock_path: PathBuf,
    lock: Option<Box<dyn LockGuard>>,
    created_dirs: Vec<PathBuf>,
    /// fsync on publish (the writer's `sync` option).
    sync: bool,
    /// The container exists under its final name.
    done: bool,
    #[cfg(feature = "mutations")]
    mutation: Option<Mutation>,
}

impl Staging {
    /// Steps 1 and 2 for a container that will be published at `path` (which must not exist):
    /// creates the parent directories, collects dead writers' temp directories there, takes the
    /// lock and creates the empty temp directory named after the container id `uuid`.
    pub(crate) fn begin(
        vfs: Arc<dyn Vfs>,
        path: &Path,
        name: &str,
        uuid: &[u8; 16],
        sync: bool,
    ) -> Result<Staging> {
        if vfs.exists(path).map_err(|e| Error::io("stat", path, e))? {
            return Err(Error::AlreadyExists(path.to_path_buf()));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let created_dirs = vfs
            .create_dir_all(&parent)
            .map_err(|e| Error::io("create directory", &parent, e))?;
        // Clean temp directories that dead writers left behind (they hold no lock any more).
        let _ = gc_with(&*vfs, &parent);
        // Step 1: the exclusive lock on the temp directory's lock file.
        let tmp_name = format!(".{name}{TMP_MARKER}{}", hex(uuid));
        let tmp_path = parent.join(&tmp_name);
        let lock_path = parent.join(format!("{tmp_name}.lock"));
        let lock = lock_live(&*vfs, &lock_path)?;
        let stage = Staging {
            vfs: vfs.clone(),
            final_path: path.to_path_buf(),
            tmp_path: tmp_path.clone(),
            lock_path,
            lock: Some(lock),
            created_dirs,
            sync,
            done: false,
            #[cfg(feature = "mutations")]
            mutation: None,
        };
        // Step 2: the private directory; the writer fills it (from here on, dropping `stage`
        // removes it).
        vfs.create_dir(&tmp_path)
            .map_err(|e| Error::io("create directory", &tmp_path, e))?;
        Ok(stage)
    }

    /// Arms a test-only protocol mutation for [`publish`](Self::publish).
    #[cfg(feature = "mutations")]
    pub(crate) fn with_mutation(mut self, mutation: Option<Mutation>) -> Staging {
        self.mutation = mutation;
        self
    }

    /// The temp directory the writer fills.
    pub(crate) fn tmp_path(&self) -> &Path {
        &self.tmp_path
    }

    /// Where the container is published.
    pub(crate) fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Whether the container exists under its final name.
    pub(crate) fn published(&self) -> bool {
        self.done
    }

    /// Steps 3 to 5, once every file in the temp directory is written: `shards` are the shard
    /// files in order, then come the index and the manifest, each with its path.
    pub(crate) fn publish(
        &mut self,
        shards: &[(&Path, &dyn WriteFile)],
        index: (&Path, &dyn WriteFile),
        manifest: (&Path, &dyn WriteFile),
    ) -> Result<()> {
        let (ip, ifile) = index;
        let (mp, mfile) = manifest;
        #[cfg(feature = "mutations")]
        let mutation = self.mutation;
        #[cfg(not(feature = "mutations"))]
        let mutation: Option<Mutation> = None;
        let sync = self.sync;
        let skip =
            |step: usize| !sync || matches!(mutation, Some(Mutation::SkipSync(k)) if k == step);
        let rename_first = matches!(mutation, Some(Mutation::RenameBeforeSync));
        if rename_first {
            self.rename()?;
        }
        // Step numbering for mutations: 0..S = shards, S = index, S+1 = manifest, S+2 = temp dir,
        // S+3 = parent directory.
        let ns = shards.len();
        if sync {
            // Start every file's writeback first so the fsyncs below wait for overlapping I/O
            // rather than one file after another. A hint: errors surface at the fsyncs.
            for (_, file) in shards {
                let _ = file.start_writeback();
            }
            let _ = ifile.start_writeback();
            let _ = mfile.start_writeback();
        }
        // Step 3: fsync each shard file, the index and the manifest, then the temp directory.
        for (k, (path, file)) in shards.iter().enumerate() {
            if !skip(k) {
                file.sync().map_err(|e| Error::io("fsync", path, e))?;
            }
        }
        if !skip(ns) {
            ifile.sync().map_err(|e| Error::io("fsync", ip, e))?;
        }
        if !skip(ns + 1) {
            mfile.sync().map_err(|e| Error::io("fsync", mp, e))?;
        }
        let dir = if rename_first {
            self.final_path.clone()
        } else {
            self.tmp_path.clone()
        };
        if !skip(ns + 2) {
            self.vfs
                .sync_dir(&dir)
                .map_err(|e| Error::io("fsync", &dir, e))?;
        }
        // Step 4: rename the temp directory into place, never replacing anything.
        if !rename_first {
            self.rename()?;
        }
        let parent = match self.final_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // The container now exists under its final name.
        self.done = true;
        // Step 5: fsync the parent directory and the parents of the directories this writer
        // created, then release and remove the lock file.
        let mut durable = Ok(());
        if !skip(ns + 3) {
            durable = self
                .vfs
                .sync_dir(&parent)
                .map_err(|e| Error::io("fsync", &parent, e));
        }
        for d in self.created_dirs.iter().rev() {
            if durable.is_err() || !sync {
                break;
            }
            if let Some(p) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                durable = self.vfs.sync_dir(p).map_err(|e| Error::io("fsync", p, e));
            }
        }
        if let Err(e) = durable {
            // The rename is not durable and close() fails: take the container back out of sight
            // (atomically, under its temp name) so a failed close never leaves it published; Drop
            // then removes it. If even that is refused, it stays (complete) under its final name.
            if !rename_first
                && self
                    .vfs
                    .rename_noreplace(&self.final_path, &self.tmp_path)
                    .is_ok()
            {
                self.done = false;
            }
            return Err(e);
        }
        self.release_lock();
        Ok(())
    }

    /// Step 4's `renameat2(temp, final, RENAME_NOREPLACE)`.
    fn rename(&mut self) -> Result<()> {
        self.vfs
            .rename_noreplace(&self.tmp_path, &self.final_path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists
                    || e.raw_os_error() == Some(libc::ENOTEMPTY)
                {
                    Error::AlreadyExists(self.final_path.clone())
                } else {
                    Error::io("rename", &self.tmp_path, e)
                }
            })
    }

    fn release_lock(&mut self) {
        if self.lock.take().is_some() {
            let _ = self.vfs.remove_file(&self.lock_path);
        }
    }
}

/// Any failure before step 4 (and a writer dropped without `close()`) publishes nothing: the temp
/// directory goes, then the lock.
impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.vfs.remove_dir_all(&self.tmp_path);
        }
        self.release_lock();
    }
}

/// Takes the exclusive lock on `lock_path` (creating the file), making sure the file locked is
/// still the one at that path. The name is this writer's own (it carries the container's uuid),
/// so only a concurrent [`gc`] in the same folder can be in the way: it may lock the new file
/// before this writer does (the lock is then busy for a moment), find no temp directory beside it
/// (this writer has not made it yet) and unlink it, leaving a writer that locks it afterwards
/// holding a file nobody else can see. Both are retried. Once the lock is held nobody unlinks the
/// file (a `gc` unlinks only what it has locked) and nobody recreates it (a `gc` locks a path only
/// beside an existing temp directory), so a file found at the path then is the one held.
fn lock_live(vfs: &dyn Vfs, lock_path: &Path) -> Result<Box<dyn LockGuard>> {
    const TRIES: u32 = 64;
    for attempt in 0..TRIES {
        let lock = vfs
            .try_lock(lock_path)
            .map_err(|e| Error::io("lock", lock_path, e))?;
        if let Some(lock) = lock {
            match vfs.exists(lock_path) {
                Ok(true) => return Ok(lock),
                Ok(false) => {}
                Err(e) => {
                    // Held, so nobody else uses the file: it goes with the failed create.
                    let _ = vfs.remove_file(lock_path);
                    return Err(Error::io("stat", lock_path, e));
                }
            }
        }
        // A clean-up holds or has just removed the file: it lets go within microseconds.
        std::thread::sleep(std::time::Duration::from_micros(50 << attempt.min(10)));
    }
    Err(Error::invalid(format!(
        "{}: the lock stayed busy through {TRIES} tries (another writer with this container's id?)",
        lock_path.display()
    )))
}

/// Removes temp directories under `parent` left by writers that died before publishing (a live
/// writer holds a lock on its temp directory's lock file, so it is never touched). Returns the
/// number of directories removed.
pub fn gc(parent: impl AsRef<Path>) -> Result<usize> {
    gc_with(&StdFs, parent.as_ref())
}

fn gc_with(vfs: &dyn Vfs, parent: &Path) -> Result<usize> {
    let names = vfs
        .list_dir(parent)
        .map_err(|e| Error::io("list", parent, e))?;
    let mut removed = 0;
    for name in names {
        let Some(s) = name.to_str() else { continue };
        if !s.starts_with('.') || !s.contains(TMP_MARKER) {
            continue;
        }
        if let Some(dir_name) = s.strip_suffix(".lock") {
            // A lock file whose writer died before creating (or after removing) its temp
            // directory: remove it once nobody holds it.
            let dir = parent.join(dir_name);
            if !vfs.exists(&dir).unwrap_or(true) {
                let lock_path = parent.join(s);
                if let Ok(Some(guard)) = vfs.try_lock(&lock_path) {
                    if !vfs.exists(&dir).unwrap_or(true) {
                        let _ = vfs.remove_file(&lock_path);
                    }
                    drop(guard);
                }
            }
            continue;
        }
        let dir = parent.join(s);
        let lock_path = parent.join(format!("{s}.lock"));
        if let Ok(Some(guard)) = vfs.try_lock(&lock_path) {
            if vfs.remove_dir_all(&dir).is_ok() {
                removed += 1;
            }
            let _ = vfs.remove_file(&lock_path);
            drop(guard);
        }
    }
    Ok(removed)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
