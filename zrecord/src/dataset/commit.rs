//! Committing a version: each listed part's container manifests are read and checked (published,
//! one schema, equal record counts across columns), then version `newest + 1` is created only if
//! absent.

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

/// Publishes a new version of the dataset at `root` listing exactly `parts`, in that order (the
/// first version of a new dataset, or a replacement of the newest one's list). Every part must be
/// published and share one schema. Returns the committed manifest; [`Error::Conflict`] when
/// another commit took the version first (nothing was written: re-read and retry).
pub fn commit(
    root: impl AsRef<Path>,
    parts: &[String],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    let o = objects(root.as_ref(), remote)?;
    let base = listed_versions(&*o)?.last().copied().unwrap_or(0);
    let (columns, entries) = describe_all(&*o, parts, None)?;
    publish(&*o, base + 1, columns, entries)
}

/// Publishes a new version of the dataset at `root` listing the newest version's parts followed by
/// `parts` (which must not be listed already, and must have its schema). [`Error::Conflict`] when
/// another commit took the version first.
pub fn append(
    root: impl AsRef<Path>,
    parts: &[String],
    remote: &RemoteOptions,
) -> Result<VersionManifest> {
    let o = objects(root.as_ref(), remote)?;
    let Some(&base) = listed_versions(&*o)?.last() else {
        return commit(root, parts, remote);
    };
    let m = read_version_in(&*o, base)?;
    if let Some(p) = parts.iter().find(|p| m.parts.iter().any(|q| &q.name == *p)) {
        return Err(Error::invalid(format!(
            "part {p} is already listed by version {base} of {}",
            o.root().display()
        )));
    }
    let (_, new) = describe_all(&*o, parts, Some(&m.columns))?;
    let mut all = m.parts;
    all.extend(new);
    publish(&*o, base + 1, m.columns, all)
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

/// Describes `parts`, each against `schema` when given, else against the first part's: the
/// dataset's columns and one entry per part, in order. The manifests are fetched
/// [`DESCRIBE_CHUNK`] parts at a time, concurrently on an object store.
fn describe_all(
    o: &dyn Objects,
    parts: &[String],
    schema: Option<&[ColumnSchema]>,
) -> Result<(Vec<ColumnSchema>, Vec<PartEntry>)> {
    if parts.is_empty() {
        return Err(Error::invalid(format!(
            "a commit to {} lists at least one part",
            o.root().display()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(p) = parts.iter().find(|p| !seen.insert(p.as_str())) {
        return Err(Error::invalid(format!("part {p} is listed twice")));
    }
    if let Some(p) = parts.iter().find(|p| !valid_name(p)) {
        return Err(Error::invalid(format!(
            "{}: a part name is 1-128 bytes of [A-Za-z0-9._-], not starting with '.'",
            o.root().join(PARTS_DIR).join(p).display()
        )));
    }
    // Every part has the dataset's column folders (`""`: a part is one container).
    let names: Vec<String> = match schema {
        Some(s) => s.iter().map(|c| c.name.clone()).collect(),
        None => column_names(o, &parts[0])?,
    };
    let mut columns: Option<Vec<ColumnSchema>> = schema.map(<[ColumnSchema]>::to_vec);
    let mut entries = Vec::with_capacity(parts.len());
    for chunk in parts.chunks(DESCRIBE_CHUNK) {
        let keys: Vec<String> = chunk
            .iter()
            .flat_map(|p| names.iter().map(move |n| manifest_key(p, n)))
            .collect();
        let mut fetched = o.read_all(&keys).into_iter();
        for part in chunk {
            let (cols, entry) = describe(o, part, &names, &mut fetched)?;
            match &columns {
                None => columns = Some(cols),
                Some(want) => {
                    if let Some((w, g)) = want.iter().zip(&cols).find(|(w, g)| w != g) {
                        return Err(Error::format(
                            o.root().join(PARTS_DIR).join(&entry.name),
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

/// The column folders of part `part`: `[""]` when the part is one container, else its folders.
fn column_names(o: &dyn Objects, part: &str) -> Result<Vec<String>> {
    let dir = format!("{PARTS_DIR}/{part}");
    let at = o.root().join(&dir);
    match o.read(&manifest_key(part, "")) {
        Ok(_) => Ok(vec![String::new()]),
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
            Ok(cols)
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
