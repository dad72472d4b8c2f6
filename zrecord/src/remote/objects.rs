//! A dataset root on object storage as [`Objects`]: listings (recursive, folded to one level
//! where asked), whole-object GETs, and create-if-absent as a conditional PUT (`If-None-Match:
//! *`, `object_store`'s `PutMode::Create`): of two committers of one key, the server accepts
//! exactly one. It uses the client its bucket and options share in the process (`client`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt, stream};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::Result;
use crate::objects::{Listed, Objects};
use crate::source::{RemoteOptions, RequestStats};

use super::client::{build, ended, io_kind, key_under, typed};
use super::conn::Counted;
use super::runtime::block_on;

/// Keys an S3 listing returns a page.
const LIST_PAGE: u64 = 1000;

/// A dataset root at a URL.
pub(crate) struct RemoteObjects {
    root: PathBuf,
    url: String,
    prefix: Key,
    opts: RemoteOptions,
    /// Requests made and bytes received through this root (`Objects::request_stats`).
    counted: Counted,
}

impl RemoteObjects {
    /// Connects to the dataset root `url` (nothing is requested yet).
    pub(crate) fn connect(url: &str, opts: &RemoteOptions) -> Result<RemoteObjects> {
        let url = url.trim_end_matches('/').to_string();
        let (_, prefix) = build(&url, opts, true)?;
        Ok(RemoteObjects {
            root: PathBuf::from(&url),
            url,
            prefix,
            opts: opts.clone(),
            counted: Counted::default(),
        })
    }

    /// This process's client of the root's bucket (made again in a forked child).
    fn client(&self) -> io::Result<Arc<dyn ObjectStore>> {
        build(&self.url, &self.opts, true)
            .map(|(c, _)| c)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// The object key of `key` (`/`-separated segments under the root).
    fn key(&self, key: &str) -> Key {
        key_under(&self.prefix, key)
    }

    /// The part of a listed key below `dir`.
    fn below(&self, key: &Key, dir: &str) -> String {
        let base = self.key(dir);
        key.as_ref()
            .strip_prefix(base.as_ref())
            .unwrap_or(key.as_ref())
            .trim_start_matches('/')
            .to_string()
    }

    /// The whole object `key` by one GET through `c` (`read` and `read_all`).
    async fn get_whole(&self, c: Arc<dyn ObjectStore>, key: &str) -> io::Result<Vec<u8>> {
        let got = match c.get(&self.key(key)).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        };
        self.counted.add(1, got.as_ref().map_or(0, |b| b.len()));
        got.map(|b| b.to_vec())
            .map_err(|e| self.error("GET", key, e))
    }

    /// An `io::Error` for a failed request `what` of `key`, its kind kept (`NotFound` above all).
    fn error(&self, what: &str, key: &str, e: object_store::Error) -> io::Error {
        io::Error::new(
            io_kind(&e),
            format!("{what} {}/{key}: {}", self.url, ended(&e, &self.opts)),
        )
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
                .map_err(|e| self.error("LIST", dir, e))?;
        // One request a page of up to 1,000 keys (S3's ListObjectsV2).
        self.counted
            .add((got.len() as u64).div_ceil(LIST_PAGE).max(1), 0);
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
        block_on(self.get_whole(c, key))?
    }

    fn read_all(&self, keys: &[String]) -> Vec<io::Result<Vec<u8>>> {
        let failed = |e: io::Error| {
            keys.iter()
                .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                .collect()
        };
        let c = match self.client() {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let gets = keys.iter().map(|key| self.get_whole(c.clone(), key));
        let concurrency = self.opts.concurrency.max(1);
        block_on(stream::iter(gets).buffered(concurrency).collect::<Vec<_>>())
            .unwrap_or_else(failed)
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
        self.counted.add(1, 0);
        match block_on(async move { c.put_opts(&k, payload, opts).await })? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.error("PUT", key, e)),
        }
    }

    fn remove(&self, key: &str) -> io::Result<()> {
        let c = self.client()?;
        let k = self.key(key);
        self.counted.add(1, 0);
        block_on(async move { c.delete(&k).await })?.map_err(|e| self.error("DELETE", key, e))
    }

    fn request_stats(&self) -> Option<RequestStats> {
        Some(self.counted.stats())
    }
}
