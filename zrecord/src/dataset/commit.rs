//! Committing a version: each listed part's container manifests are read and checked (published,
//! one schema, equal record counts across columns), or the parts come as their writers' receipts
//! (`PartReceipt`: what that read would find, checked by readers when they first open the part);
//! then version `newest + 1` is created only if absent.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::{Kind, MANIFEST_FILE, Manifest, rd_u32, valid_name, version_file_name};
use crate::objects::Objects;
use crate::source::RemoteOptions;

use crate::format::{ColumnSchema, PartColumn, PartEntry, VersionManifest};

use super::versions::{PARTS_DIR, VERSIONS_DIR, listed_versions, objects, read_version_in};

/// Parts described at once: their manifests (one request each) are fetched together, so a commit
/// holds at most this many in memory.
const DESCRIBE_CHUNK: usize = 1024;

/// A part as its writer describes it to a committer ([`describe_part`]): its columns' schemas and
/// its entry in a version. [`commit_described`] and [`append_described`] publish receipts without
/// reading the parts (no request per part); a reader checks each part against its entry (records,
/// manifest CRC32C, schema) the first time it opens it, so a receipt that does not match its part
/// is an error naming the part, never wrong data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartReceipt {
    /// The part's columns, in order (one, named `""`, for a part that is one container).
    pub columns: Vec<ColumnSchema>,
    /// The part's entry as a version lists it.
    pub entry: PartEntry,
}

impl PartReceipt {
    /// The receipt as bytes (a version manifest of this one part, numbered 0), for sending to a
    /// committer; [`PartReceipt::decode`] checks its CRC32C.
    pub fn encode(&self) -> Vec<u8> {
        VersionManifest {
            version: 0,
            columns: self.columns.clone(),
            parts: vec![self.entry.clone()],
        }
        .encode()
    }

    /// A receipt from [`PartReceipt::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<PartReceipt> {
        let m = VersionManifest::decode(bytes, Path::new("<part receipt>"))?;
        match (m.version, <[PartEntry; 1]>::try_from(m.parts)) {
            (0, Ok([entry])) => Ok(PartReceipt {
                columns: m.columns,
                entry,
            }),
            _ => Err(Error::invalid(
                "a part receipt is a version manifest numbered 0 listing one part",
            )),
        }
    }
}

/// What a commit lists: parts by name (their manifests are read), or writers' receipts.
#[derive(Clone, Copy)]
enum Listing<'a> {
    Names(&'a [String]),
    Receipts(&'a [PartReceipt]),
}

impl Listing<'_> {
    fn names(&self) -> Vec<&str> {
        match self {
            Listing::Names(n) => n.iter().map(String::as_str).collect(),
            Listing::Receipts(r) => r.iter().map(|r| r.entry.name.as_str()).collect(),
        }
    }
}

/// Publishes a new version of the dataset at `root` listing exactly `parts`, in that order (the
/// first version of a new dataset, or a replacement of the newest one's list). Every part must be
/// published and share one schema. Returns the committed manifest; [`Error::Conflict`] when
/// another commit took the version first (nothing was written: re-read and retry).
pub fn commit(
    root: impl AsRef<Path>,
    parts: &[String],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    commit_listing(root.as_ref(), Listing::Names(parts), remote)
}

/// [`commit`] of the parts `receipts` describe, none of them read: one listing and one create.
pub fn commit_described(
    root: impl AsRef<Path>,
    receipts: &[PartReceipt],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    commit_listing(root.as_ref(), Listing::Receipts(receipts), remote)
}

/// Publishes a new version of the dataset at `root` listing the newest version's parts followed by
/// `parts` (which must not be listed already, and must have its schema). [`Error::Conflict`] when
/// another commit took the version first.
pub fn append(
    root: impl AsRef<Path>,
    parts: &[String],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    append_listing(root.as_ref(), Listing::Names(parts), remote)
}

/// [`append`] of the parts `receipts` describe, none of them read.
pub fn append_described(
    root: impl AsRef<Path>,
    receipts: &[PartReceipt],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    append_listing(root.as_ref(), Listing::Receipts(receipts), remote)
}

/// Reads part `part`'s container manifests (one request per column, in the calling process: a
/// writer's, after it published the part) into the receipt a committer publishes it by.
pub fn describe_part(
    root: impl AsRef<Path>,
    part: &str,
    remote: &RemoteOptions,
) -> Result<PartReceipt> {
    let o = objects(root.as_ref(), remote)?;
    check_names(&*o, &[part])?;
    let (names, manifest) = column_names(&*o, part)?;
    // A part that is one container: its manifest was read finding that out.
    let fetched = match manifest {
        Some(bytes) => vec![Ok(bytes)],
        None => {
            let keys: Vec<String> = names.iter().map(|n| manifest_key(part, n)).collect();
            o.read_all(&keys)
        }
    };
    let (columns, entry) = describe(&*o, part, &names, &mut fetched.into_iter())?;
    Ok(PartReceipt { columns, entry })
}

fn commit_listing(
    root: &Path,
    listing: Listing<'_>,
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    let o = objects(root, remote)?;
    let base = listed_versions(&*o)?.last().copied().unwrap_or(0);
    let (columns, entries) = settle_listing(&*o, listing, None)?;
    publish(&*o, base + 1, columns, entries)
}

fn append_listing(
    root: &Path,
    listing: Listing<'_>,
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    let o = objects(root, remote)?;
    let Some(&base) = listed_versions(&*o)?.last() else {
        return commit_listing(root, listing, remote);
    };
    let m = read_version_in(&*o, base)?;
    if let Some(p) = listing
        .names()
        .into_iter()
        .find(|p| m.parts.iter().any(|q| q.name == *p))
    {
        return Err(Error::invalid(format!(
            "part {p} is already listed by version {base} of {}",
            o.root().display()
        )));
    }
    let (_, new) = settle_listing(&*o, listing, Some(&m.columns))?;
    let mut all = m.parts;
    all.extend(new);
    publish(&*o, base + 1, m.columns, all)
}

/// The columns and entries of a listing, checked: by name (each part's manifests read) or from
/// receipts (nothing read).
fn settle_listing(
    o: &dyn Objects,
    listing: Listing<'_>,
    schema: Option<&[ColumnSchema]>,
) -> Result<(Vec<ColumnSchema>, Vec<PartEntry>)> {
    match listing {
        Listing::Names(parts) => describe_all(o, parts, schema),
        Listing::Receipts(receipts) => {
            check_names(o, &listing.names())?;
            let described = receipts
                .iter()
                .map(|r| Ok((r.columns.clone(), r.entry.clone())));
            settle(o, described, schema)
        }
    }
}

/// Creates version `n` listing `parts`, only if no version `n` exists.
fn publish(
    o: &dyn Objects,
    n: u64,
    columns: Vec<ColumnSchema>,
    parts: Vec<PartEntry>,
) -> Result<VersionManifest> {
    let m = VersionManifest {
        version: n,
        columns,
        parts,
    };
    let key = format!("{VERSIONS_DIR}/{}", version_file_name(n));
    let path = o.root().join(&key);
    match o.create_new(&key, &m.encode()) {
        Ok(true) => Ok(m),
        Ok(false) => Err(Error::Conflict { path, version: n }),
        Err(e) => Err(Error::io("commit", path, e)),
    }
}

/// Checks a commit's part names: at least one, none twice, each a valid name.
fn check_names(o: &dyn Objects, parts: &[&str]) -> Result<()> {
    if parts.is_empty() {
        return Err(Error::invalid(format!(
            "a commit to {} lists at least one part",
            o.root().display()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(p) = parts.iter().find(|p| !seen.insert(**p)) {
        return Err(Error::invalid(format!("part {p} is listed twice")));
    }
    if let Some(p) = parts.iter().find(|p| !valid_name(p)) {
        return Err(Error::invalid(format!(
            "{}: a part name is 1-128 bytes of [A-Za-z0-9._-], not starting with '.'",
            o.root().join(PARTS_DIR).join(p).display()
        )));
    }
    Ok(())
}

/// Describes `parts`, each against `schema` when given, else against the first part's: the
/// dataset's columns and one entry per part, in order. The manifests are fetched
/// [`DESCRIBE_CHUNK`] parts at a time, concurrently on an object store.
fn describe_all(
    o: &dyn Objects,
    parts: &[String],
    schema: Option<&[ColumnSchema]>,
) -> Result<(Vec<ColumnSchema>, Vec<PartEntry>)> {
    let names: Vec<&str> = parts.iter().map(String::as_str).collect();
    check_names(o, &names)?;
    // Every part has the dataset's column folders (`""`: a part is one container). Learning that
    // from a one-container first part reads its manifest, which is kept, not fetched again.
    let (columns, mut first) = match schema {
        Some(s) => (s.iter().map(|c| c.name.clone()).collect(), None),
        None => column_names(o, &parts[0])?,
    };
    let columns = &columns;
    let described = parts.chunks(DESCRIBE_CHUNK).flat_map(|chunk| {
        // Only in the first chunk, whose first part is `parts[0]`.
        let known = first.take();
        let keys: Vec<String> = chunk
            .iter()
            .skip(usize::from(known.is_some()))
            .flat_map(|p| columns.iter().map(move |n| manifest_key(p, n)))
            .collect();
        let mut fetched = known.map(Ok).into_iter().chain(o.read_all(&keys));
        chunk
            .iter()
            .map(|part| describe(o, part, columns, &mut fetched))
            .collect::<Vec<_>>()
    });
    settle(o, described, schema)
}

/// The dataset's columns (`schema`, else the first part's) and the parts' entries, each part
/// checked against them (its schema and one entry column per column).
fn settle(
    o: &dyn Objects,
    described: impl Iterator<Item = Result<(Vec<ColumnSchema>, PartEntry)>>,
    schema: Option<&[ColumnSchema]>,
) -> Result<(Vec<ColumnSchema>, Vec<PartEntry>)> {
    let mut columns: Option<Vec<ColumnSchema>> = schema.map(<[ColumnSchema]>::to_vec);
    let mut entries = Vec::new();
    for d in described {
        let (cols, entry) = d?;
        let at = || o.root().join(PARTS_DIR).join(&entry.name);
        if entry.columns.len() != cols.len() {
            return Err(Error::format(
                at(),
                format!(
                    "{} columns described, {} in its entry",
                    cols.len(),
                    entry.columns.len()
                ),
            ));
        }
        match &columns {
            None => columns = Some(cols),
            Some(want) => {
                if want.len() != cols.len() {
                    return Err(Error::format(
                        at(),
                        format!(
                            "{} columns where the dataset has {}",
                            cols.len(),
                            want.len()
                        ),
                    ));
                }
                if let Some((w, g)) = want.iter().zip(&cols).find(|(w, g)| w != g) {
                    return Err(Error::format(
                        at(),
                        format!(
                            "schema of column {:?} differs from the dataset's: expected {}, found {}",
                            w.name,
                            schema_text(w),
                            schema_text(g)
                        ),
                    ));
                }
            }
        }
        entries.push(entry);
    }
    Ok((columns.unwrap_or_default(), entries))
}

/// A column's schema as errors print it.
fn schema_text(c: &ColumnSchema) -> String {
    match c.kind {
        Kind::Dense => format!(
            "Dense {} {:?} ({})",
            c.dtype.name(),
            c.item_shape,
            c.codec.name()
        ),
        Kind::Ragged => format!(
            "Ragged {} ndim {} ({})",
            c.dtype.name(),
            c.ndim,
            c.codec.name()
        ),
    }
}

/// The column folders of part `part`: `[""]` and its manifest's bytes when the part is one
/// container, else its folders.
fn column_names(o: &dyn Objects, part: &str) -> Result<(Vec<String>, Option<Vec<u8>>)> {
    let dir = format!("{PARTS_DIR}/{part}");
    let at = o.root().join(&dir);
    match o.read(&manifest_key(part, "")) {
        Ok(bytes) => Ok((vec![String::new()], Some(bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let listed = o.list(&dir).map_err(|e| Error::io("list", &at, e))?;
            let cols: Vec<String> = listed
                .into_iter()
                .filter(|l| l.dir && valid_name(&l.name))
                .map(|l| l.name)
                .collect();
            if cols.is_empty() {
                return Err(Error::format(
                    &at,
                    "no published part here (no manifest.zrm, no column folders)",
                ));
            }
            Ok((cols, None))
        }
        Err(e) => Err(Error::io("read", o.root().join(manifest_key(part, "")), e)),
    }
}

/// Part `part`'s schema and entry from its container manifests, one per column of `names`, taken
/// in order from `fetched`.
fn describe(
    o: &dyn Objects,
    part: &str,
    names: &[String],
    fetched: &mut impl Iterator<Item = std::io::Result<Vec<u8>>>,
) -> Result<(Vec<ColumnSchema>, PartEntry)> {
    let at = o.root().join(PARTS_DIR).join(part);
    let mut schema = Vec::with_capacity(names.len());
    let mut entry: Option<PartEntry> = None;
    for name in names {
        let key = manifest_key(part, name);
        let bytes = match fetched.next() {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::format(
                    &at,
                    if name.is_empty() {
                        "no published part here (no manifest.zrm; the dataset's parts are one container each)".to_string()
                    } else {
                        format!("no published column {name:?} here (the dataset's parts have it)")
                    },
                ));
            }
            Some(Err(e)) => return Err(Error::io("read", o.root().join(&key), e)),
            None => {
                return Err(Error::invalid(format!(
                    "{}: manifest not fetched",
                    at.display()
                )));
            }
        };
        let (c, e) = one_column(o, &key, part, name, bytes)?;
        match &mut entry {
            None => entry = Some(e),
            Some(first) => {
                if first.records != e.records {
                    return Err(Error::format(
                        &at,
                        format!(
                            "columns hold different record counts: {:?} {}, {name:?} {}",
                            names[0], first.records, e.records
                        ),
                    ));
                }
                first.columns.extend(e.columns);
            }
        }
        schema.push(c);
    }
    let entry = entry.ok_or_else(|| Error::format(&at, "a part without columns"))?;
    Ok((schema, entry))
}

/// The key of the container manifest of `column` (`""`: the part is the container) of part
/// `part`.
fn manifest_key(part: &str, column: &str) -> String {
    let dir = format!("{PARTS_DIR}/{part}");
    if column.is_empty() {
        format!("{dir}/{MANIFEST_FILE}")
    } else {
        format!("{dir}/{column}/{MANIFEST_FILE}")
    }
}

/// The schema and entry of one column's container of a part, from its manifest's bytes, read at
/// `key`.
fn one_column(
    o: &dyn Objects,
    key: &str,
    part: &str,
    column: &str,
    bytes: Vec<u8>,
) -> Result<(ColumnSchema, PartEntry)> {
    let m = Manifest::decode(&bytes, &o.root().join(key))?;
    let files: u64 = m.index_len + m.shards.iter().map(|s| s.len).sum::<u64>();
    Ok((
        ColumnSchema {
            name: column.to_string(),
            kind: m.kind,
            codec: m.codec,
            dtype: m.dtype,
            ndim: m.ndim,
            item_shape: m.item_shape.clone(),
        },
        PartEntry {
            name: part.to_string(),
            records: m.records,
            columns: vec![PartColumn {
                // The decode checked the length and this trailing checksum.
                manifest_crc: rd_u32(&bytes, bytes.len() - 4),
                bytes: files + bytes.len() as u64,
            }],
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::sync::Mutex;

    use super::describe_all;
    use crate::objects::{Listed, LocalObjects, Objects};
    use crate::{Codec, DType, DenseWriter, WriterOptions};

    /// Local objects that record every key read.
    struct Counting(LocalObjects, Mutex<Vec<String>>);

    impl Objects for Counting {
        fn root(&self) -> &Path {
            self.0.root()
        }
        fn list(&self, dir: &str) -> io::Result<Vec<Listed>> {
            self.0.list(dir)
        }
        fn list_tree(&self, dir: &str) -> io::Result<Vec<(String, u64)>> {
            self.0.list_tree(dir)
        }
        fn read(&self, key: &str) -> io::Result<Vec<u8>> {
            self.1.lock().unwrap().push(key.to_string());
            self.0.read(key)
        }
        fn create_new(&self, key: &str, bytes: &[u8]) -> io::Result<bool> {
            self.0.create_new(key, bytes)
        }
        fn remove(&self, key: &str) -> io::Result<()> {
            self.0.remove(key)
        }
    }

    #[test]
    fn a_commit_by_name_reads_each_parts_manifest_once() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..5).map(|p| format!("p{p}")).collect();
        for (p, name) in names.iter().enumerate() {
            let path = crate::dataset::part_path(dir.path(), name, None);
            let mut w = DenseWriter::create(
                &path,
                DType::Int32,
                &[],
                Codec::Raw,
                WriterOptions::default(),
            )
            .unwrap();
            w.append(&(p as i32).to_le_bytes().repeat(3)).unwrap();
            w.close().unwrap();
        }
        let o = Counting(
            LocalObjects(dir.path().to_path_buf()),
            Mutex::new(Vec::new()),
        );
        let (columns, entries) = describe_all(&o, &names, None).unwrap();
        assert_eq!((columns.len(), entries.len()), (1, 5));
        let mut read = o.1.lock().unwrap().clone();
        read.sort();
        let want: Vec<String> = names.iter().map(|n| super::manifest_key(n, "")).collect();
        assert_eq!(read, want, "one read of each part's manifest");
    }
}
