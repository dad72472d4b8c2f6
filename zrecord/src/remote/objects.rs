//! A dataset root on object storage as [`Objects`]: listings with a delimiter (one request per
//! 1,000 keys), whole-object GETs, and create-if-absent as a conditional PUT
//! (`If-None-Match: *`, `object_store`'s `PutMode::Create`): of two committers of one key, the
//! server accepts exactly one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::Result;
use crate::objects::{Listed, Objects};
use crate::source::RemoteOptions;

use super::runtime::block_on;
use super::{Remote, to_io, typed};

/// A dataset root at a URL.
pub(crate) struct RemoteObjects {
    remote: Arc<Remote>,
    root: PathBuf,
}

impl RemoteObjects {
    /// Connects to the dataset root `url` (nothing is requested yet).
    pub(crate) fn connect(url: &str, opts: &RemoteOptions) -> Result<RemoteObjects> {
        let remote = Remote::open(url, opts, true)?;
        Ok(RemoteObjects {
            root: PathBuf::from(remote.url()),
            remote,
        })
    }

    /// The object key of `key` (`/`-separated segments under the root).
    fn key(&self, key: &str) -> object_store::path::Path {
        key.split('/')
            .filter(|s| !s.is_empty())
            .fold(self.remote.prefix.clone(), |k, s| k.join(s))
    }

    fn client(&self) -> io::Result<Arc<dyn ObjectStore>> {
        self.remote.client().map_err(to_io)
    }

    /// The part of a listed key below `dir`.
    fn below(&self, key: &object_store::path::Path, dir: &str) -> String {
        let base = self.key(dir);
        key.as_ref()
            .strip_prefix(base.as_ref())
            .unwrap_or(key.as_ref())
            .trim_start_matches('/')
            .to_string()
    }
}

impl Objects for RemoteObjects {
    fn root(&self) -> &Path {
        &self.root
    }

    fn list(&self, dir: &str) -> io::Result<Vec<Listed>> {
        // A recursive listing folded to the first level: SeaweedFS's S3 gateway answers a
        // delimited listing of a nested prefix with nothing, and every server answers this.
        let base = dir.trim_end_matches('/');
        let mut out: Vec<Listed> = Vec::new();
        for (key, modified) in self.list_tree(dir)? {
            let rest = key
                .strip_prefix(base)
                .unwrap_or(&key)
                .trim_start_matches('/');
            let (name, nested) = match rest.split_once('/') {
                Some((first, _)) => (first, true),
                None => (rest, false),
            };
            match out.last_mut() {
                Some(l) if l.name == name && l.dir == nested => {
                    l.modified = l.modified.max(modified)
                }
                _ => out.push(Listed {
                    name: name.to_string(),
                    dir: nested,
                    modified,
                }),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name && a.dir == b.dir);
        Ok(out)
    }

    fn list_tree(&self, dir: &str) -> io::Result<Vec<(String, u64)>> {
        let c = self.client()?;
        let key = self.key(dir);
        let got: Vec<object_store::ObjectMeta> =
            block_on(async move { c.list(Some(&key)).try_collect().await })?
                .map_err(|e| to_io(self.remote.error("LIST", dir, None, e)))?;
        let base = dir.trim_end_matches('/');
        let mut out: Vec<(String, u64)> = got
            .iter()
            .map(|m| {
                (
                    format!("{base}/{}", self.below(&m.location, dir)),
                    m.last_modified.timestamp().max(0) as u64,
                )
            })
            .collect();
        out.sort();
        Ok(out)
    }

    fn read(&self, key: &str) -> io::Result<Vec<u8>> {
        let c = self.client()?;
        let k = self.key(key);
        let got = block_on(async move {
            match c.get(&k).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            }
        })?
        .map_err(|e| to_io(self.remote.error("GET", key, None, e)))?;
        Ok(got.to_vec())
    }

    fn create_new(&self, key: &str, bytes: &[u8]) -> io::Result<bool> {
        let c = self.client()?;
        let k = self.key(key);
        let opts = PutOptions {
            mode: PutMode::Create,
            attributes: typed(),
            ..PutOptions::default()
        };
        let payload = PutPayload::from(bytes.to_vec());
        match block_on(async move { c.put_opts(&k, payload, opts).await })? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(to_io(self.remote.error("PUT", key, None, e))),
        }
    }

    fn remove(&self, key: &str) -> io::Result<()> {
        let c = self.client()?;
        let k = self.key(key);
        block_on(async move { c.delete(&k).await })?
            .map_err(|e| to_io(self.remote.error("DELETE", key, None, e)))
    }
}
