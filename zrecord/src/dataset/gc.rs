//! Removing what no version references: parts whose writer died before a commit listed them (or
//! that a later `commit` dropped from every version), once they are older than a grace period, so
//! that a part still being written or about to be committed is left alone.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::error::{Error, Result};
use crate::source::RemoteOptions;

use super::versions::{PARTS_DIR, listed_versions, objects, read_version_in};

/// What [`gc`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatasetGc {
    /// The versions whose manifests were read (every one: a part any of them lists is kept).
    pub versions: Vec<u64>,
    /// Parts no version lists, older than the grace period: removed, or with `dry_run` listed
    /// only.
    pub removed: Vec<String>,
    /// Files under the removed parts.
    pub files: usize,
    /// Parts no version lists that are younger than the grace period (left alone).
    pub young: Vec<String>,
    /// Whether nothing was removed (a dry run).
    pub dry_run: bool,
}

/// Lists (with `dry_run`) or removes the parts under `root` that no version lists and whose newest
/// file is at least `min_age_secs` old, and any temporary folder a local writer that died left
/// under `parts/`. A version manifest that cannot be read stops it before anything is removed.
pub fn gc(
    root: impl AsRef<Path>,
    min_age_secs: u64,
    dry_run: bool,
    remote: &RemoteOptions,
) -> Result<DatasetGc> {
    let o = objects(root.as_ref(), remote)?;
    let versions = listed_versions(&*o)?;
    let mut listed = HashSet::new();
    for &v in &versions {
        for p in read_version_in(&*o, v)?.parts {
            listed.insert(p.name);
        }
    }
    let at = o.root().join(PARTS_DIR);
    let local = crate::source::url_of(root.as_ref()).is_none();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Every file under `parts/` in one listing, grouped by part: (files, newest modification).
    // An object store lists only objects, so a prefix emptied earlier is no part; a local folder
    // with no file in it is one (listed below).
    let mut found: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for (key, modified) in o
        .list_tree(PARTS_DIR)
        .map_err(|e| Error::io("list", &at, e))?
    {
        let rest = key
            .strip_prefix(PARTS_DIR)
            .unwrap_or(&key)
            .trim_start_matches('/');
        if let Some((part, _)) = rest.split_once('/') {
            let f = found.entry(part.to_string()).or_default();
            f.0 += 1;
            f.1 = f.1.max(modified);
        }
    }
    if local {
        for e in o.list(PARTS_DIR).map_err(|e| Error::io("list", &at, e))? {
            if e.dir {
                found.entry(e.name).or_default();
            }
        }
    }
    let mut report = DatasetGc {
        versions,
        dry_run,
        ..DatasetGc::default()
    };
    for (name, (files, newest)) in found {
        if listed.contains(&name) || name.starts_with('.') {
            continue;
        }
        if now.saturating_sub(newest) < min_age_secs {
            report.young.push(name);
            continue;
        }
        report.files += files;
        if !dry_run {
            let dir = format!("{PARTS_DIR}/{name}");
            o.remove_tree(&dir)
                .map_err(|e| Error::io("remove", o.root().join(&dir), e))?;
        }
        report.removed.push(name);
    }
    // A local writer that died mid-part left a temporary folder beside the parts (never listed,
    // never visible); `publish::gc` removes those nobody holds a lock on.
    let parts = root.as_ref().join(PARTS_DIR);
    if !dry_run && local && parts.is_dir() {
        crate::publish::gc(&parts)?;
    }
    Ok(report)
}
