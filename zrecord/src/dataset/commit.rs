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

/// Parts described at once (their manifests are fetched concurrently: one request each).
const DESCRIBE_THREADS: usize = 16;

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

/// Describes `parts` (concurrently), each against `schema` when given, else against the first
/// part's: the dataset's columns and one entry per part, in order.
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
    let names: Option<Vec<String>> = schema.map(|s| s.iter().map(|c| c.name.clone()).collect());
    let threads = DESCRIBE_THREADS.min(parts.len());
    let chunk = parts.len().div_ceil(threads);
    let described: Vec<Result<(Vec<ColumnSchema>, PartEntry)>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .chunks(chunk)
            .map(|ps| {
                let names = names.as_deref();
                s.spawn(move || ps.iter().map(|p| describe(o, p, names)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![Err(Error::invalid("a part description thread panicked"))]
                })
            })
            .collect()
    });
    let mut columns: Option<Vec<ColumnSchema>> = schema.map(<[ColumnSchema]>::to_vec);
    let mut entries = Vec::with_capacity(parts.len());
    for d in described {
        let (cols, entry) = d?;
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

/// Reads part `part`'s container manifest of each column (`columns`; `None`: discover them: the
/// part is one container, or one folder per column).
fn describe(
    o: &dyn Objects,
    part: &str,
    columns: Option<&[String]>,
) -> Result<(Vec<ColumnSchema>, PartEntry)> {
    let dir = format!("{PARTS_DIR}/{part}");
    let at = o.root().join(&dir);
    if !valid_name(part) {
        return Err(Error::invalid(format!(
            "{}: a part name is 1-128 bytes of [A-Za-z0-9._-], not starting with '.'",
            at.display()
        )));
    }
    // A part that is one container has its manifest here.
    let one = manifest_key(&dir, "");
    let names: Vec<String> = match columns {
        Some(c) => c.to_vec(),
        None => match o.read(&one) {
            Ok(bytes) => return one_column(o, &one, part, "", bytes).map(|(c, e)| (vec![c], e)),
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
                cols
            }
            Err(e) => return Err(Error::io("read", o.root().join(&one), e)),
        },
    };
    let mut schema = Vec::with_capacity(names.len());
    let mut entry: Option<PartEntry> = None;
    for name in &names {
        let key = manifest_key(&dir, name);
        let bytes = o
            .read(&key)
            .map_err(|e| Error::io("read", o.root().join(&key), e))?;
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

/// The key of the container manifest of `column` (`""`: the part is the container) of the part
/// folder `dir`.
fn manifest_key(dir: &str, column: &str) -> String {
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
