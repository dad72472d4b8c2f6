//! A dataset of parts opened for reading ([`Parts`]): one version's manifest, held from the open,
//! and each part's container opened the first time a gather (or a getter) touches it. Record `i`
//! of the dataset is record `i - starts[p]` of part `p`, found by a binary search of the parts'
//! first record ids (prefix sums of their counts).
//!
//! Opening reads the version manifest only (one listing and one read; a pinned version, one
//! read). A part is checked when first opened, against what the version says of it: record count,
//! its manifest's CRC32C (so it is the container that was committed) and the schema; a mismatch
//! is an error naming the part, never data. Memory held: the manifest (about 50 bytes a part) and
//! each opened part's container.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::dataset::{ColumnSchema, VersionManifest, part_path};
use crate::error::{Error, Location, Result};
use crate::format::{Kind, dense_stride};

use super::container::{Container, OpenOptions};
use super::engine::gather_into;
use super::plan::push_shape;
use super::window::Window;

/// An opened version of a dataset, read through one of its columns.
pub(in crate::read) struct Parts {
    root: PathBuf,
    m: VersionManifest,
    /// The column this store reads (an index into `m.columns`).
    column: usize,
    /// `starts[p]`: the global id of part `p`'s first record; `starts[parts]` the record count.
    starts: Vec<u64>,
    opened: Vec<OnceLock<Arc<Container>>>,
    opts: OpenOptions,
    /// Bytes per record of a Dense column.
    stride: u64,
    /// The block buffer, once a reader asks for one (`read::window`).
    pub(in crate::read) window: OnceLock<Window>,
    closed: AtomicBool,
}

/// A gather whose runs of one part average fewer records than this is grouped by part
/// ([`Parts::fill`]) when its records are small.
const MIN_MEAN_RUN: usize = 4;

/// Records averaging fewer bytes than this are gathered grouped by part when runs are short:
/// the extra copy through a scratch buffer costs less than an engine call per record.
const GROUP_BELOW_BYTES: usize = 16 << 10;

/// One stretch of a gather: positions `a..b` of the output, all in part `part`.
struct Run {
    part: usize,
    a: usize,
    b: usize,
}

impl Parts {
    /// Opens the dataset at `root` (its newest version, or `opts.version`) for column
    /// `opts.column` (needed when it has several), which must be of `kind`; `Ok(None)` when
    /// `root` holds no version (a single container, or nothing).
    pub(in crate::read) fn open(
        root: &Path,
        kind: Kind,
        opts: &OpenOptions,
    ) -> Result<Option<Parts>> {
        let Some(m) = crate::dataset::read_version(root, opts.version, &opts.remote)? else {
            return Ok(None);
        };
        let column = match (&opts.column, m.columns.len()) {
            (None, 1) => 0,
            (Some(c), _) => m.columns.iter().position(|k| &k.name == c).ok_or_else(|| {
                Error::invalid(format!(
                    "{}: no column {c:?} (columns: {})",
                    root.display(),
                    names(&m.columns)
                ))
            })?,
            (None, _) => {
                return Err(Error::invalid(format!(
                    "{}: a dataset of several columns opens one of them: name it (columns: {})",
                    root.display(),
                    names(&m.columns)
                )));
            }
        };
        let schema = &m.columns[column];
        if schema.kind != kind {
            return Err(Error::format(
                root,
                format!(
                    "column {:?}: expected a {} column, found a {} one",
                    schema.name,
                    kind.name(),
                    schema.kind.name()
                ),
            ));
        }
        let stride = match kind {
            Kind::Dense => dense_stride(schema.dtype, &schema.item_shape)
                .ok_or_else(|| Error::format(root, "a Dense column's record size overflows"))?,
            Kind::Ragged => 0,
        };
        let mut starts = Vec::with_capacity(m.parts.len() + 1);
        let mut at = 0u64;
        starts.push(0);
        for p in &m.parts {
            // The decode checked that the counts add up without overflow.
            at += p.records;
            starts.push(at);
        }
        Ok(Some(Parts {
            root: root.to_path_buf(),
            opened: (0..m.parts.len()).map(|_| OnceLock::new()).collect(),
            m,
            column,
            starts,
            opts: opts.clone(),
            stride,
            window: OnceLock::new(),
            closed: AtomicBool::new(false),
        }))
    }

    pub(in crate::read) fn root(&self) -> &Path {
        &self.root
    }

    pub(in crate::read) fn version(&self) -> u64 {
        self.m.version
    }

    pub(in crate::read) fn schema(&self) -> &ColumnSchema {
        &self.m.columns[self.column]
    }

    pub(in crate::read) fn part_count(&self) -> usize {
        self.m.parts.len()
    }

    pub(in crate::read) fn records(&self) -> u64 {
        self.starts[self.m.parts.len()]
    }

    pub(in crate::read) fn record_bytes(&self) -> u64 {
        self.stride
    }

    /// The committed bytes of this column over every part.
    pub(in crate::read) fn bytes(&self) -> u64 {
        self.m
            .parts
            .iter()
            .map(|p| p.columns[self.column].bytes)
            .sum()
    }

    pub(in crate::read) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(in crate::read) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for c in self.opened.iter().filter_map(OnceLock::get) {
            c.close();
        }
    }

    pub(in crate::read) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed(format!("dataset {}", self.root.display())));
        }
        Ok(())
    }

    pub(in crate::read) fn check_indices(&self, idx: &[u64]) -> Result<()> {
        let len = self.records();
        if let Some(&bad) = idx.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        Ok(())
    }

    /// The part holding record `i` (in range) and the record's id inside it.
    pub(in crate::read) fn locate(&self, i: u64) -> (usize, u64) {
        // `starts` is non-decreasing; the last part whose first id is <= i holds it (empty parts
        // share their first id with the next one and are skipped).
        let p = self.starts.partition_point(|&s| s <= i) - 1;
        (p, i - self.starts[p])
    }

    /// Part `p`'s container, opened and checked against the version on first use.
    pub(in crate::read) fn part(&self, p: usize) -> Result<&Arc<Container>> {
        if let Some(c) = self.opened[p].get() {
            return Ok(c);
        }
        let e = &self.m.parts[p];
        let schema = self.schema();
        let col = (!schema.name.is_empty()).then_some(schema.name.as_str());
        let path = part_path(&self.root, &e.name, col);
        let c = Container::open(&path, schema.kind, &self.opts)?;
        let at = || Location {
            path: path.clone(),
            ..Default::default()
        };
        if c.records() != e.records {
            return Err(Error::corrupt(
                at(),
                format!(
                    "record count of part {} (what version {} lists)",
                    e.name, self.m.version
                ),
                e.records,
                c.records(),
            ));
        }
        let want = e.columns[self.column].manifest_crc;
        if c.manifest_crc() != want {
            return Err(Error::corrupt(
                at(),
                format!(
                    "manifest crc32c of part {} (what version {} lists: another container is there)",
                    e.name, self.m.version
                ),
                format!("{want:#010x}"),
                format!("{:#010x}", c.manifest_crc()),
            ));
        }
        if c.dtype() != schema.dtype
            || c.codec() != schema.codec
            || c.ndim() != schema.ndim
            || c.item_shape() != schema.item_shape.as_slice()
        {
            return Err(Error::format(
                &path,
                format!("part {} does not have the dataset's schema", e.name),
            ));
        }
        if self.is_closed() {
            c.close();
        }
        Ok(self.opened[p].get_or_init(|| Arc::new(c)))
    }

    /// The parts' containers opened so far.
    pub(in crate::read) fn opened_parts(&self) -> impl Iterator<Item = &Arc<Container>> {
        self.opened.iter().filter_map(OnceLock::get)
    }

    /// Record `i`'s shape (a Ragged column), from its part's index.
    pub(in crate::read) fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.check_indices(&[i])?;
        let (p, local) = self.locate(i);
        let c = self.part(p)?;
        let _index = c.check_pages(&[local])?;
        Ok(c.shape_words(local).collect())
    }

    /// The parts' ids of `idx` and the stretches of consecutive positions in one part.
    fn runs(&self, idx: &[u64]) -> (Vec<u64>, Vec<Run>) {
        let mut local = Vec::with_capacity(idx.len());
        let mut runs: Vec<Run> = Vec::new();
        for (k, &i) in idx.iter().enumerate() {
            let (p, l) = self.locate(i);
            local.push(l);
            match runs.last_mut() {
                Some(r) if r.part == p => r.b = k + 1,
                _ => runs.push(Run {
                    part: p,
                    a: k,
                    b: k + 1,
                }),
            }
        }
        (local, runs)
    }

    /// Fills `out` with records `idx` (checked in range), record k at
    /// `out[offsets(k)..offsets(k + 1)]`: each stretch of one part through that part's engine
    /// into its slice of the output.
    fn fill(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &(dyn Fn(usize) -> usize + Sync),
    ) -> Result<()> {
        let (local, runs) = self.runs(idx);
        // Short runs of small records (a random batch over many parts): one engine call per
        // part into a scratch buffer, then each record copied to its place; the copy costs less
        // than an engine call per record.
        if runs.len() * MIN_MEAN_RUN > idx.len()
            && out.len() < idx.len() * GROUP_BELOW_BYTES
            && idx.len() <= u32::MAX as usize
        {
            return self.fill_grouped(&local, &runs, out, offsets);
        }
        let mut rest = out;
        let mut consumed = 0;
        for r in runs {
            let (start, end) = (offsets(r.a), offsets(r.b));
            let (slice, tail) = std::mem::take(&mut rest).split_at_mut(end - consumed);
            rest = tail;
            consumed = end;
            let c = self.part(r.part)?;
            gather_into(c, &local[r.a..r.b], slice, &|k| offsets(r.a + k) - start)?;
        }
        Ok(())
    }

    /// [`Parts::fill`] of short runs: the records of each part gathered by one engine call into
    /// a scratch buffer (in output order within the part), then copied to their places.
    fn fill_grouped(
        &self,
        local: &[u64],
        runs: &[Run],
        out: &mut [u8],
        offsets: &(dyn Fn(usize) -> usize + Sync),
    ) -> Result<()> {
        // Output positions grouped by part, in output order within each part: one integer key
        // a position, its part above its position (`fill` sends at most 2^32 positions here).
        let mut order: Vec<u64> = runs
            .iter()
            .flat_map(|r| (r.a..r.b).map(move |k| (r.part as u64) << 32 | k as u64))
            .collect();
        order.sort_unstable();
        let position = |key: u64| (key & u64::from(u32::MAX)) as usize;
        let mut scratch = Vec::new();
        let mut ids = Vec::new();
        let mut offs = Vec::new();
        for group in order.chunk_by(|x, y| x >> 32 == y >> 32) {
            ids.clear();
            offs.clear();
            offs.push(0usize);
            for &key in group {
                let k = position(key);
                ids.push(local[k]);
                offs.push(offs.last().copied().unwrap_or(0) + offsets(k + 1) - offsets(k));
            }
            scratch.resize(offs[offs.len() - 1], 0);
            let c = self.part((group[0] >> 32) as usize)?;
            gather_into(c, &ids, &mut scratch, &|j| offs[j])?;
            for (j, k) in group.iter().map(|&key| position(key)).enumerate() {
                out[offsets(k)..offsets(k + 1)].copy_from_slice(&scratch[offs[j]..offs[j + 1]]);
            }
        }
        Ok(())
    }

    /// Fills a Dense gather's output with records `idx` (checked in range), back to back.
    pub(in crate::read) fn fill_dense(&self, idx: &[u64], out: &mut [u8]) -> Result<()> {
        let stride = self.stride as usize;
        self.fill(idx, out, &|k| k * stride)
    }

    /// A Ragged gather's element counts and shapes (`cu` from 0, `n + 1` entries), from the parts'
    /// indexes.
    pub(in crate::read) fn ragged_sizes(&self, idx: &[u64]) -> Result<(Vec<i32>, Vec<u64>)> {
        self.check_open()?;
        self.check_indices(idx)?;
        let ndim = self.schema().ndim as usize;
        let mut cu = Vec::with_capacity(idx.len() + 1);
        let mut dims = Vec::with_capacity(idx.len() * ndim);
        cu.push(0i32);
        for &i in idx {
            let (p, l) = self.locate(i);
            let c = self.part(p)?;
            let _index = c.check_pages(&[l])?;
            push_shape(&mut cu, &mut dims, c.shape_words(l), idx.len())?;
        }
        Ok((cu, dims))
    }

    /// Fills a Ragged gather's values (`values`, record k at element `cu[k]`).
    pub(in crate::read) fn fill_ragged(
        &self,
        idx: &[u64],
        cu: &[i32],
        values: &mut [u8],
    ) -> Result<()> {
        let isz = self.schema().dtype.itemsize();
        self.fill(idx, values, &|k| cu[k] as usize * isz)
    }
}

/// The columns' names as errors list them.
fn names(cols: &[ColumnSchema]) -> String {
    cols.iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
