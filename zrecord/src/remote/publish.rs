//! Publishing a local container to object storage ([`publish_dir`]: a claim object, the data
//! objects, the manifest last with a conditional create) and cleaning up what a failed publish
//! left ([`gc`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::stream::TryStreamExt;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload,
};

use super::client::typed;
use super::conn::Remote;
use super::runtime::block_on;
use crate::error::{Error, Result};
use crate::source::RemoteOptions;
use crate::source::cache::now_secs;

/// The object that claims a prefix while a publish is under way.
const CLAIM: &str = ".publishing";

/// Objects of up to this size are uploaded with one PUT; larger ones in parts of this size.
const PART: usize = 16 << 20;

/// Publishes the local container at `dir` to the store at `url`: claims the prefix (a conditional
/// create of a claim object: a second publisher of the prefix fails here with
/// [`Error::AlreadyExists`], as does any publish to a prefix that holds a manifest), uploads the
/// index and the shards (in parts of 16 MiB when larger), then creates the manifest last with a
/// conditional create, and removes the claim. A reader opens only a prefix with a manifest, so
/// it never sees a partial container; a publish that fails or is killed leaves no manifest, and
/// [`gc`] removes what it left.
pub fn publish_dir(dir: &Path, url: &str, opts: &RemoteOptions) -> Result<()> {
    // One client, which types every upload, the parts of multipart ones too (see
    // [`CONTENT_TYPE`](super::CONTENT_TYPE)).
    let remote = Remote::open(url, opts, true)?;
    let c = remote.client()?;
    let files = crate::format::container_files(dir)?;
    let manifest = &files[0];
    let name_of = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| Error::invalid(format!("{}: not a file name", p.display())))
    };
    let mname = name_of(manifest)?;
    let create = PutOptions {
        mode: PutMode::Create,
        attributes: typed(),
        ..PutOptions::default()
    };
    // Fail early on a published prefix.
    if remote.head(&mname).is_ok() {
        return Err(Error::AlreadyExists(PathBuf::from(remote.url_of(&mname))));
    }
    let claim = format!("{} {}", std::process::id(), now_secs());
    {
        let (c, key, opts) = (c.clone(), remote.key(CLAIM), create.clone());
        match block_on(async move {
            c.put_opts(&key, PutPayload::from(claim.into_bytes()), opts)
                .await
        })
        .map_err(|e| Error::io("publish", remote.url.clone(), e))?
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(Error::AlreadyExists(PathBuf::from(remote.url_of(CLAIM))));
            }
            Err(e) => return Err(remote.error("PUT", CLAIM, None, e)),
        }
    }
    let uploaded = (|| -> Result<()> {
        for f in &files[1..] {
            upload(&remote, &c, f, &name_of(f)?)?;
        }
        let bytes = std::fs::read(manifest).map_err(|e| Error::io("read", manifest, e))?;
        let (c2, key) = (c.clone(), remote.key(&mname));
        match block_on(async move { c2.put_opts(&key, PutPayload::from(bytes), create).await })
            .map_err(|e| Error::io("publish", remote.url.clone(), e))?
        {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(Error::AlreadyExists(PathBuf::from(remote.url_of(&mname))))
            }
            Err(e) => Err(remote.error("PUT", &mname, None, e)),
        }
    })();
    // The claim goes either way: a failed publish leaves no manifest, and gc finds its parts.
    let (c3, key) = (c.clone(), remote.key(CLAIM));
    let _ = block_on(async move { c3.delete(&key).await });
    uploaded
}

/// Uploads the local file `f` as object `name` of `remote`.
fn upload(remote: &Remote, c: &Arc<dyn ObjectStore>, f: &Path, name: &str) -> Result<()> {
    let len = std::fs::metadata(f)
        .map_err(|e| Error::io("stat", f, e))?
        .len();
    let key = remote.key(name);
    let c = c.clone();
    if len <= PART as u64 {
        let bytes = std::fs::read(f).map_err(|e| Error::io("read", f, e))?;
        let opts = PutOptions {
            attributes: typed(),
            ..PutOptions::default()
        };
        return block_on(async move { c.put_opts(&key, PutPayload::from(bytes), opts).await })
            .map_err(|e| Error::io("publish", remote.url.clone(), e))?
            .map(|_| ())
            .map_err(|e| remote.error("PUT", name, None, e));
    }
    let file = std::fs::File::open(f).map_err(|e| Error::io("open", f, e))?;
    let r = block_on(async move {
        use std::os::unix::fs::FileExt;
        let opts = PutMultipartOptions {
            attributes: typed(),
            ..PutMultipartOptions::default()
        };
        let up = c.put_multipart_opts(&key, opts).await?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(up, PART);
        let mut buf = vec![0u8; PART];
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(PART as u64) as usize;
            if let Err(e) = file.read_exact_at(&mut buf[..n], at) {
                let _ = w.abort().await;
                return Err(object_store::Error::Generic {
                    store: "zrecord publish",
                    source: Box::new(e),
                });
            }
            // At most two parts in flight besides the one being filled.
            w.wait_for_capacity(2).await?;
            w.write(&buf[..n]);
            at += n as u64;
        }
        w.finish().await.map(|_| ())
    })
    .map_err(|e| Error::io("publish", remote.url.clone(), e))?;
    r.map_err(|e| remote.error("PUT (multipart)", name, None, e))
}

/// What [`gc`] found under a prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects of unpublished containers (no manifest) that were removed, or would be under
    /// `dry_run`.
    pub orphans: Vec<String>,
    /// Whether the prefix holds a published container (then nothing is removed).
    pub published: bool,
}

/// Removes (or, with `dry_run`, lists) what a failed or killed [`publish_dir`] left at `url`: the
/// data objects and claim of a prefix without a manifest. A prefix with a manifest is a published
/// container and is left alone; so is a claim younger than `min_age_secs` (a publish that may
/// still be running).
pub fn gc(url: &str, opts: &RemoteOptions, min_age_secs: u64, dry_run: bool) -> Result<GcReport> {
    let remote = Remote::connect(url, opts)?;
    // The manifest is asked for by name before anything is listed: a published prefix is
    // reported and left alone whatever the server's listing holds (once, in the converter test
    // against SeaweedFS, the listing alone made a published prefix read as unpublished; not
    // reproduced since).
    if remote.head(crate::format::MANIFEST_FILE).is_ok() {
        return Ok(GcReport {
            published: true,
            ..GcReport::default()
        });
    }
    let c = remote.client()?;
    let prefix = remote.prefix.clone();
    let listed: Vec<object_store::ObjectMeta> = block_on({
        let c = c.clone();
        async move { c.list(Some(&prefix)).try_collect().await }
    })
    .map_err(|e| Error::io("list", remote.url.clone(), e))?
    .map_err(|e| remote.error("LIST", "", None, e))?;
    let under = |m: &object_store::ObjectMeta| {
        m.location
            .as_ref()
            .strip_prefix(remote.prefix.as_ref())
            .map(|s| s.trim_start_matches('/').to_string())
            .unwrap_or_else(|| m.location.to_string())
    };
    let names: Vec<(String, &object_store::ObjectMeta)> =
        listed.iter().map(|m| (under(m), m)).collect();
    let mut report = GcReport::default();
    if names.iter().any(|(n, _)| n == crate::format::MANIFEST_FILE) {
        report.published = true;
        return Ok(report);
    }
    if let Some((_, m)) = names.iter().find(|(n, _)| n == CLAIM) {
        let age = now_secs().saturating_sub(m.last_modified.timestamp().max(0) as u64);
        if age < min_age_secs {
            return Ok(report);
        }
    }
    // Only the container's own files (and the claim): never anything else a user keeps there.
    for (n, m) in &names {
        if n == CLAIM || crate::format::is_container_file(n) {
            report.orphans.push(remote.url_of(n));
            if !dry_run {
                let (c, key) = (c.clone(), m.location.clone());
                block_on(async move { c.delete(&key).await })
                    .map_err(|e| Error::io("gc", remote.url.clone(), e))?
                    .map_err(|e| remote.error("DELETE", n, None, e))?;
            }
        }
    }
    Ok(report)
}
