//! Where a dataset's files are and what its versions say: the layout (`parts/`, `versions/`),
//! part paths and fresh part names, and listing and reading version manifests through the root's
//! keys (`crate::objects`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{MAX_NAME, VersionManifest, valid_name, version_file_name, version_of_file};
use crate::objects::Objects;
use crate::source::{RemoteOptions, RequestStats};

/// The folder of a dataset root that holds its version manifests.
pub const VERSIONS_DIR: &str = "versions";
/// The folder of a dataset root that holds its parts.
pub const PARTS_DIR: &str = "parts";

/// Where part `part`'s container of `column` lives under `root` (`column` `None` or `""` for a
/// dataset of one unnamed column, whose parts are containers themselves).
pub fn part_path(root: impl AsRef<Path>, part: &str, column: Option<&str>) -> PathBuf {
    let p = root.as_ref().join(PARTS_DIR).join(part);
    match column {
        Some(c) if !c.is_empty() => p.join(c),
        _ => p,
    }
}

/// A fresh part name, unique across writers without coordination: the writer's `tag` (if any),
/// the time in nanoseconds, the process id and a per-process counter.
pub fn new_part_name(tag: &str) -> Result<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let name = format!(
        "{}{}{nanos:016x}-{:x}-{:x}",
        tag,
        if tag.is_empty() { "" } else { "-" },
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    if !valid_name(&name) {
        return Err(Error::invalid(format!(
            "part tag {tag:?}: a part name is 1-{MAX_NAME} bytes of [A-Za-z0-9._-], not starting with '.'"
        )));
    }
    Ok(name)
}

/// The dataset root `root`'s keys: its directory, or its prefix on object storage.
pub(super) fn objects(root: &Path, remote: &RemoteOptions) -> Result<Box<dyn Objects>> {
    crate::backend::objects_for(root, remote)
}

/// The versions committed at `root`, oldest first (empty for a root with none).
pub fn versions(root: impl AsRef<Path>, remote: &RemoteOptions) -> Result<Vec<u64>> {
    listed_versions(&*objects(root.as_ref(), remote)?)
}

pub(super) fn listed_versions(o: &dyn Objects) -> Result<Vec<u64>> {
    let mut v: Vec<u64> = o
        .list(VERSIONS_DIR)
        .map_err(|e| Error::io("list", o.root().join(VERSIONS_DIR), e))?
        .iter()
        .filter(|l| !l.dir)
        .filter_map(|l| version_of_file(&l.name))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Reads and checks version `n`'s manifest.
pub(super) fn read_version_in(o: &dyn Objects, n: u64) -> Result<VersionManifest> {
    let key = format!("{VERSIONS_DIR}/{}", version_file_name(n));
    let path = o.root().join(&key);
    let bytes = o.read(&key).map_err(|e| Error::io("read", &path, e))?;
    let m = VersionManifest::decode(&bytes, &path)?;
    if m.version != n {
        return Err(Error::corrupt(
            crate::error::Location {
                path,
                offset: Some(16),
                ..Default::default()
            },
            "version number (the file's name)",
            n,
            m.version,
        ));
    }
    Ok(m)
}

/// Version `version` of the dataset at `root`, or its newest with `None`; `Ok(None)` when the
/// root holds no version (then it is no dataset).
pub fn read_version(
    root: impl AsRef<Path>,
    version: Option<u64>,
    remote: &RemoteOptions,
) -> Result<Option<VersionManifest>> {
    read_version_counted(root.as_ref(), version, remote).map(|(m, _)| m)
}

/// [`read_version`], and the requests it made (a root on object storage; `None` for a local
/// one).
pub(crate) fn read_version_counted(
    root: &Path,
    version: Option<u64>,
    remote: &RemoteOptions,
) -> Result<(Option<VersionManifest>, Option<RequestStats>)> {
    let o = objects(root, remote)?;
    let m = newest_or_pinned(&*o, version)?;
    Ok((m, o.request_stats()))
}

/// Version `version` of the dataset whose root is `o`, or its newest with `None`.
fn newest_or_pinned(o: &dyn Objects, version: Option<u64>) -> Result<Option<VersionManifest>> {
    // A pinned version is read by its name (one request); the listing is only for the newest, or
    // for the error of a pinned one that is not there.
    if let Some(n) = version {
        match read_version_in(o, n) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            read => return read.map(Some),
        }
    }
    let listed = listed_versions(o)?;
    let Some(&newest) = listed.last() else {
        return Ok(None);
    };
    match version {
        None => read_version_in(o, newest).map(Some),
        Some(n) => Err(Error::invalid(format!(
            "{}: no version {n} (versions {}..={newest})",
            o.root().display(),
            listed[0]
        ))),
    }
}
