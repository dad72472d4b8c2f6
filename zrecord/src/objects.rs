//! A dataset's root as its versions and parts see it: a namespace of keys (`versions/<n>.zrv`,
//! `parts/<part>/...`) that can be listed one level at a time, read whole, created only when
//! absent, and removed by prefix. [`Objects`] is the seam; [`LocalObjects`] implements it on a
//! local directory, and the object-store client (`crate::remote`, feature `remote`) on a URL
//! prefix, where create-if-absent is a conditional PUT (`If-None-Match: *`). A leaf: it imports
//! only the file-system seam.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One entry of a listing: a key's last path segment, whether it is a folder (a common prefix),
/// and for a file its last modification (seconds since the epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub name: String,
    pub dir: bool,
    pub modified: u64,
}

/// A dataset root's keys. Keys are `/`-separated and relative to the root.
pub(crate) trait Objects: Send + Sync {
    /// The root as users name it (a path or a URL), for errors and for the parts' paths.
    fn root(&self) -> &Path;
    /// The entries directly under `dir` (empty when `dir` does not exist).
    fn list(&self, dir: &str) -> io::Result<Vec<Listed>>;
    /// Every file under `dir`, at any depth, as keys relative to the root, with its modification.
    fn list_tree(&self, dir: &str) -> io::Result<Vec<(String, u64)>>;
    /// The whole object `key` (an error of kind `NotFound` when absent).
    fn read(&self, key: &str) -> io::Result<Vec<u8>>;
    /// Each object of `keys`, whole, in order, as [`Objects::read`] gives it; an object store
    /// fetches them concurrently (its options' `concurrency` at a time).
    fn read_all(&self, keys: &[String]) -> Vec<io::Result<Vec<u8>>> {
        keys.iter().map(|k| self.read(k)).collect()
    }
    /// Creates `key` holding `bytes` only if no object has that key: `Ok(false)`, and nothing
    /// written, when one does. Durable when it returns.
    fn create_new(&self, key: &str, bytes: &[u8]) -> io::Result<bool>;
    /// Removes `key` (a file).
    fn remove(&self, key: &str) -> io::Result<()>;
    /// The requests made through this root so far and the bytes they received, for a root on
    /// object storage; `None` for local files.
    fn request_stats(&self) -> Option<crate::source::RequestStats> {
        None
    }
    /// Removes every file under `dir`; returns how many there were.
    fn remove_tree(&self, dir: &str) -> io::Result<usize> {
        let files = self.list_tree(dir)?;
        for (key, _) in &files {
            self.remove(key)?;
        }
        Ok(files.len())
    }
}

/// Seconds since the epoch of a file's modification time (0 when unknown).
fn secs(t: io::Result<SystemTime>) -> u64 {
    t.ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// A dataset root on the local file system.
pub(crate) struct LocalObjects(pub PathBuf);

impl LocalObjects {
    fn path(&self, key: &str) -> PathBuf {
        self.0.join(key)
    }
}

impl Objects for LocalObjects {
    fn root(&self) -> &Path {
        &self.0
    }

    fn list(&self, dir: &str) -> io::Result<Vec<Listed>> {
        let rd = match std::fs::read_dir(self.path(dir)) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for e in rd {
            let e = e?;
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            // An entry removed since the listing (another process's temporary file) is skipped.
            let md = match e.metadata() {
                Ok(md) => md,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            out.push(Listed {
                name,
                dir: md.is_dir(),
                modified: secs(md.modified()),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn list_tree(&self, dir: &str) -> io::Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut todo = vec![dir.trim_end_matches('/').to_string()];
        while let Some(d) = todo.pop() {
            for e in self.list(&d)? {
                let key = format!("{d}/{}", e.name);
                if e.dir {
                    todo.push(key);
                } else {
                    out.push((key, e.modified));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn read(&self, key: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(key))
    }

    fn create_new(&self, key: &str, bytes: &[u8]) -> io::Result<bool> {
        use std::io::Write;
        let dst = self.path(key);
        let dir = dst.parent().unwrap_or(&self.0).to_path_buf();
        std::fs::create_dir_all(&dir)?;
        // Written and synced under a private name, then linked to its key: `link` fails when the
        // key exists, on every POSIX file system (network ones too), so two creators never both
        // succeed and nobody sees a partial file.
        let tmp = dir.join(format!(".tmp-{}-{:016x}", std::process::id(), tmp_salt()));
        // The private name is this call's alone: a collision (another host's process with this
        // pid and salt) fails here, as an I/O error, before anything of the other file is touched.
        let mut f = std::fs::File::create_new(&tmp)?;
        let linked = f
            .write_all(bytes)
            .and_then(|()| f.sync_all())
            .map(|()| std::fs::hard_link(&tmp, &dst));
        let _ = std::fs::remove_file(&tmp);
        match linked? {
            Ok(()) => {
                std::fs::File::open(&dir)?.sync_all()?;
                Ok(true)
            }
            // Only the link's own refusal means another creator holds the key.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn remove(&self, key: &str) -> io::Result<()> {
        std::fs::remove_file(self.path(key))
    }

    fn remove_tree(&self, dir: &str) -> io::Result<usize> {
        let n = self.list_tree(dir)?.len();
        std::fs::remove_dir_all(self.path(dir))?;
        Ok(n)
    }
}

/// A number that differs between calls in one process and, with the process id, between
/// processes on different hosts: the standard library's per-process random hash keys (seeded from
/// the OS) over a per-process counter.
fn tmp_salt() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static KEYS: std::sync::LazyLock<std::collections::hash_map::RandomState> =
        std::sync::LazyLock::new(Default::default);
    let mut h = KEYS.build_hasher();
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_new_creates_once_and_lists_one_level() {
        let dir = tempfile::tempdir().unwrap();
        let o = LocalObjects(dir.path().to_path_buf());
        assert!(o.create_new("versions/a", b"one").unwrap());
        assert!(!o.create_new("versions/a", b"two").unwrap());
        assert_eq!(o.read("versions/a").unwrap(), b"one");
        std::fs::create_dir_all(dir.path().join("parts/p/c")).unwrap();
        std::fs::write(dir.path().join("parts/p/c/f"), b"x").unwrap();
        let listed = o.list("parts").unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].dir && listed[0].name == "p");
        let tree = o.list_tree("parts").unwrap();
        assert_eq!(tree.len(), 1);
        assert_eq!(tree[0].0, "parts/p/c/f");
        let names: Vec<String> = o
            .list("versions")
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, ["a"], "no temporary file is left");
        assert!(o.list("nothing").unwrap().is_empty());
    }
}
