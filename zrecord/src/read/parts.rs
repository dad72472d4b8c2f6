//! A dataset of parts opened for reading ([`Parts`]): one version's manifest, held from the open,
//! and each part's container opened the first time a gather (or a getter) touches it. Record `i`
//! of the dataset is record `i - starts[p]` of part `p`, found through a table of the part at
//! each of about `2 × parts` evenly spaced ids, then a search of the few parts between two of
//! them ([`Starts`]).
//!
//! Opening reads the version manifest only (one listing and one read; a pinned version, one
//! read). A part is checked when first opened, against what the version says of it: record count,
//! its manifest's CRC32C (so it is the container that was committed) and the schema; a mismatch
//! is an error naming the part, never data. Memory held: the manifest (about 50 bytes a part), the
//! lookup table (about 16 bytes a part) and each opened part's container.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::dataset::{ColumnSchema, VersionManifest, part_path};
use crate::error::{Error, Location, Result};
use crate::format::{Kind, dense_stride};
use crate::source::RequestStats;

use super::cold::AcrossCold;
use super::container::{Container, OpenOptions, outgrows_memory};
use super::engine::{across_suits, gather_across, gather_into};
use super::hint::PREFETCH_AHEAD;
use super::plan::push_shape;
use super::window::Window;

/// An opened version of a dataset, read through one of its columns.
pub(in crate::read) struct Parts {
    root: PathBuf,
    m: VersionManifest,
    /// The column this store reads (an index into `m.columns`).
    column: usize,
    /// Where each part's records start.
    starts: Starts,
    opened: Vec<OnceLock<Arc<Container>>>,
    opts: OpenOptions,
    /// Bytes per record of a Dense column.
    stride: u64,
    /// The block buffer, once a reader asks for one (`read::window`).
    pub(in crate::read) window: OnceLock<Window>,
    /// The dataset's cold-read state for gathers across its parts.
    cold: AcrossCold,
    /// The requests the open made (the version manifest's listing and read), on object storage.
    open_requests: Option<RequestStats>,
    closed: AtomicBool,
}

/// A gather whose runs of one part average fewer records than this is read in one pass across
/// the parts, or grouped by part where they do not suit the pass ([`Parts::fill`]), when its
/// records are small.
const MIN_MEAN_RUN: usize = 4;

/// Records averaging fewer bytes than this are read across parts (or grouped by part) when runs
/// are short: a record's part lookup (or, grouped, its copy through a scratch buffer) costs less
/// than an engine call per record.
const GROUP_BELOW_BYTES: usize = 16 << 10;

/// Datasets of at most this many parts find a gather's slots through a table by part number
/// (4 bytes a part, allocated per gather); larger ones through a hash table by the parts touched.
const DIRECT_SLOT_PARTS: usize = 4096;

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
        let (m, open_requests) =
            crate::dataset::read_version_counted(root, opts.version, &opts.remote)?;
        let Some(m) = m else {
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
        // The decode checked that the counts add up without overflow.
        let starts = Starts::new(m.parts.iter().map(|p| p.records));
        let bytes = m.parts.iter().map(|p| p.columns[column].bytes).sum();
        let cold = AcrossCold {
            policy: opts.cold_reads,
            warm: AtomicU32::new(0),
            outgrows_memory: outgrows_memory(bytes),
        };
        Ok(Some(Parts {
            root: root.to_path_buf(),
            cold,
            open_requests,
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
        self.starts.records()
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
    #[inline(always)]
    pub(in crate::read) fn locate(&self, i: u64) -> (usize, u64) {
        self.starts.locate(i)
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

    /// The requests opening the dataset made (object storage only): its parts' are their
    /// containers' own.
    pub(in crate::read) fn open_requests(&self) -> Option<RequestStats> {
        self.open_requests
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

    /// Locates records `idx` (checked in range) in the parts: each one's part and id there and,
    /// for a batch of short runs (a random batch over many parts), the parts it touches, each
    /// once and opened, with each position's slot among them.
    pub(in crate::read) fn locate_batch(&self, idx: &[u64]) -> Result<Located<'_>> {
        self.locate_batch_with(idx, DIRECT_SLOT_PARTS)
    }

    /// [`Parts::locate_batch`], numbering slots through a table by part number when the dataset
    /// has at most `direct_parts` parts.
    fn locate_batch_with(&self, idx: &[u64], direct_parts: usize) -> Result<Located<'_>> {
        let n = idx.len();
        let mut part = Vec::with_capacity(n);
        let mut local = Vec::with_capacity(n);
        let (mut runs, mut last) = (0, u32::MAX);
        // A dataset of few parts numbers the slots as it goes, through a table by part number.
        let direct = self.part_count() <= direct_parts && n <= u32::MAX as usize;
        let mut table = vec![u32::MAX; if direct { self.part_count() } else { 0 }];
        let mut parts: Vec<&Container> = Vec::new();
        let mut slot = Vec::with_capacity(if direct { n } else { 0 });
        for &i in idx {
            let (p, l) = self.locate(i);
            if direct {
                if table[p] == u32::MAX {
                    table[p] = parts.len() as u32;
                    parts.push(self.part(p)?);
                }
                slot.push(table[p]);
            }
            // A version lists fewer than 2^32 parts.
            let p = p as u32;
            runs += usize::from(p != last);
            last = p;
            part.push(p);
            local.push(l);
        }
        let slots = match (runs * MIN_MEAN_RUN > n && n <= u32::MAX as usize, direct) {
            (false, _) => None,
            (true, true) => Some((parts, slot)),
            (true, false) => Some(self.slots(&part)?),
        };
        Ok(Located {
            part,
            local,
            runs,
            slots,
        })
    }

    /// The parts of a gather (`part`: each position's), each once and opened, and each
    /// position's slot among them.
    fn slots(&self, part: &[u32]) -> Result<(Vec<&Container>, Vec<u32>)> {
        // Slots by part through a small open-addressed table; `u32::MAX` (no part's number)
        // marks an empty entry.
        let cap = (part.len().min(self.part_count()) * 2).next_power_of_two();
        let mut table = vec![(u32::MAX, 0u32); cap];
        let mut parts: Vec<&Container> = Vec::new();
        let mut slot = Vec::with_capacity(part.len());
        for (k, &p) in part.iter().enumerate() {
            if k > 0 && part[k - 1] == p {
                slot.push(slot[k - 1]);
                continue;
            }
            let mut h = p.wrapping_mul(0x9E37_79B1) as usize & (cap - 1);
            let s = loop {
                match table[h] {
                    (q, s) if q == p => break s,
                    (u32::MAX, _) => {
                        let s = parts.len() as u32;
                        parts.push(self.part(p as usize)?);
                        table[h] = (p, s);
                        break s;
                    }
                    _ => h = (h + 1) & (cap - 1),
                }
            };
            slot.push(s);
        }
        Ok((parts, slot))
    }

    /// Fills `out` with the records `at` locates, record k at `out[offsets(k)..offsets(k + 1)]`:
    /// a random batch of small records over many parts in one pass across them
    /// (`engine::gather_across`) where they suit it, else each stretch of one part through that
    /// part's engine into its slice of the output.
    fn fill<F: Fn(usize) -> usize + Sync>(
        &self,
        at: &Located<'_>,
        out: &mut [u8],
        offsets: &F,
    ) -> Result<()> {
        let (n, local) = (at.local.len(), &at.local[..]);
        let short = at
            .slots
            .as_ref()
            .filter(|_| out.len() < n * GROUP_BELOW_BYTES);
        if let Some((parts, slot)) = short
            && parts.iter().all(|c| across_suits(c, out.len()))
        {
            return gather_across(parts, slot, local, out, offsets, &self.cold);
        }
        let mut stretches: Vec<Run> = Vec::with_capacity(at.runs);
        for (k, &p) in at.part.iter().enumerate() {
            match stretches.last_mut() {
                Some(r) if r.part == p as usize => r.b = k + 1,
                _ => stretches.push(Run {
                    part: p as usize,
                    a: k,
                    b: k + 1,
                }),
            }
        }
        // Short runs that cannot go across parts: one engine call per part into a scratch
        // buffer, then each record copied to its place; the copy costs less than an engine call
        // per record.
        if short.is_some() {
            return self.fill_grouped(local, &stretches, out, offsets);
        }
        let mut rest = out;
        let mut consumed = 0;
        for r in stretches {
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
        self.fill(&self.locate_batch(idx)?, out, &|k| k * stride)
    }

    /// A Ragged gather's element counts and shapes (`cu` from 0, `n + 1` entries), from the parts'
    /// indexes, and where its records are (for [`Parts::fill_ragged`]): each record's part found
    /// first, then the shapes read in order, each entry requested a few records ahead (as from
    /// one container).
    #[allow(clippy::type_complexity)]
    pub(in crate::read) fn ragged_sizes(
        &self,
        idx: &[u64],
    ) -> Result<(Vec<i32>, Vec<u64>, Located<'_>)> {
        self.check_open()?;
        self.check_indices(idx)?;
        let n = idx.len();
        let ndim = self.schema().ndim as usize;
        let at = self.locate_batch(idx)?;
        let owned;
        let (parts, slot) = match &at.slots {
            Some((parts, slot)) => (parts, slot),
            None => {
                owned = self.slots(&at.part)?;
                (&owned.0, &owned.1)
            }
        };
        // Each part's index bytes, or `None` while its pages are not all checked (or it is read
        // by page): then each entry's page is checked (and held) before the entry is read.
        let index: Vec<Option<&[u8]>> = parts
            .iter()
            .map(|c| c.index_ready().then(|| c.index_bytes()))
            .collect();
        let mut cu = Vec::with_capacity(n + 1);
        let mut dims = Vec::with_capacity(n * ndim);
        cu.push(0i32);
        for (k, (&s, &l)) in slot.iter().zip(&at.local).enumerate() {
            if let Some(&ahead) = slot.get(k + 2 * PREFETCH_AHEAD)
                && let Some(bytes) = index[ahead as usize]
            {
                parts[ahead as usize].prefetch_entry(bytes, at.local[k + 2 * PREFETCH_AHEAD]);
            }
            let c = parts[s as usize];
            match index[s as usize] {
                Some(bytes) => push_shape(&mut cu, &mut dims, c.shape_words_in(bytes, l), n)?,
                None => {
                    let _index = c.check_pages(&[l])?;
                    push_shape(&mut cu, &mut dims, c.shape_words(l), n)?;
                }
            }
        }
        Ok((cu, dims, at))
    }

    /// Fills a Ragged gather's values (`values`, record k at element `cu[k]`) with the records
    /// `at` locates.
    pub(in crate::read) fn fill_ragged(
        &self,
        at: &Located<'_>,
        cu: &[i32],
        values: &mut [u8],
    ) -> Result<()> {
        let isz = self.schema().dtype.itemsize();
        self.fill(at, values, &|k| cu[k] as usize * isz)
    }
}

/// A gather's records located in a dataset's parts ([`Parts::locate_batch`]).
pub(in crate::read) struct Located<'a> {
    /// Each record's part and its id there.
    part: Vec<u32>,
    local: Vec<u64>,
    /// How many runs of consecutive positions in one part the records make.
    runs: usize,
    /// For a batch of short runs: the parts it touches (each once) and each position's slot.
    slots: Option<(Vec<&'a Container>, Vec<u32>)>,
}

/// Where each part's records start, and a table to find the part of a record id quickly.
struct Starts {
    /// `at[p]`: the id of part `p`'s first record; `at[parts]` the record count.
    at: Vec<u64>,
    /// `first[b]`: the part holding record `b << shift`.
    first: Vec<u32>,
    shift: u32,
}

impl Starts {
    /// The starts of parts of `counts` records each (their sum must not overflow).
    fn new(counts: impl ExactSizeIterator<Item = u64>) -> Starts {
        let mut at = Vec::with_capacity(counts.len() + 1);
        at.push(0u64);
        for n in counts {
            at.push(at[at.len() - 1] + n);
        }
        let (parts, records) = (at.len() - 1, at[at.len() - 1]);
        // Two to four table entries a part: ids `2^shift` apart, the largest such spacing not
        // over `records / (2 * parts)`.
        let spacing = records / (2 * parts as u64).max(1);
        let shift = 63u32.saturating_sub(spacing.max(1).leading_zeros());
        let buckets = if records == 0 {
            0
        } else {
            ((records - 1) >> shift) + 1
        };
        let mut first = Vec::with_capacity(buckets as usize);
        let mut p = 0usize;
        for b in 0..buckets {
            while at[p + 1] <= b << shift {
                p += 1;
            }
            first.push(p as u32);
        }
        Starts { at, first, shift }
    }

    fn records(&self) -> u64 {
        self.at[self.at.len() - 1]
    }

    /// The part holding record `i` (in range) and the record's id inside it.
    #[inline(always)]
    fn locate(&self, i: u64) -> (usize, u64) {
        let b = (i >> self.shift) as usize;
        let lo = self.first[b] as usize;
        // The part is the last whose first id is <= i (an empty part shares its first id with
        // the next one, which then counts), one of `lo` up to the part at the next table entry.
        // Mostly `lo` or the one after it, decided without a branch; further only when the
        // parts are small beside the table's spacing.
        let mut p = lo + usize::from(self.at[lo + 1] <= i);
        if self.at[p + 1] <= i {
            let hi = self
                .first
                .get(b + 1)
                .map_or(self.at.len() - 2, |&q| q as usize);
            p += self.at[p + 1..=hi].partition_point(|&s| s <= i);
        }
        (p, i - self.at[p])
    }
}

/// The columns' names as errors list them.
fn names(cols: &[ColumnSchema]) -> String {
    cols.iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Codec, DType, DenseWriter, RemoteOptions, WriterOptions};
    use proptest::prelude::*;

    /// Both ways of numbering a gather's parts (a table by part number, a hash of the parts
    /// touched) give every position its own part, and fill the same bytes.
    #[test]
    fn slots_by_table_and_by_hash_agree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("d");
        let mut names = Vec::new();
        for p in 0..7u32 {
            let name = format!("p{p}");
            let path = crate::dataset::part_path(&root, &name, None);
            let opts = WriterOptions::default();
            let mut w = DenseWriter::create(&path, DType::UInt32, &[1], Codec::Raw, opts).unwrap();
            let n = [5, 0, 9, 1, 30, 2, 11][p as usize];
            let recs: Vec<u8> = (0..n)
                .flat_map(|r: u32| (p << 16 | r).to_le_bytes())
                .collect();
            w.append(&recs).unwrap();
            w.close().unwrap();
            names.push(name);
        }
        crate::dataset::commit(&root, &names, &RemoteOptions::default()).unwrap();
        let parts = Parts::open(&root, Kind::Dense, &OpenOptions::default())
            .unwrap()
            .unwrap();
        let idx: Vec<u64> = (0..200u64).map(|k| k * 7919 % parts.records()).collect();
        let mut outs = Vec::new();
        for limit in [0, usize::MAX] {
            let at = parts.locate_batch_with(&idx, limit).unwrap();
            let (cs, slot) = at.slots.as_ref().unwrap();
            for (k, &s) in slot.iter().enumerate() {
                let want = parts.part(at.part[k] as usize).unwrap();
                assert!(std::ptr::eq(cs[s as usize], want.as_ref()), "position {k}");
            }
            let mut out = vec![0u8; 4 * idx.len()];
            parts.fill(&at, &mut out, &|k| 4 * k).unwrap();
            outs.push(out);
        }
        assert_eq!(outs[0], outs[1]);
        let first: Vec<u32> = outs[0]
            .chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        for (k, &i) in idx.iter().enumerate() {
            let (p, l) = parts.locate(i);
            assert_eq!(first[k], (p as u32) << 16 | l as u32);
        }
    }

    proptest! {
        /// The table lookup finds the part a naive scan finds, for any part sizes (empty parts,
        /// one huge part among tiny ones) and any id.
        #[test]
        fn locate_finds_the_part_a_scan_finds(
            counts in prop::collection::vec(
                prop_oneof![Just(0u64), 1u64..5, 1u64..100_000, Just(1u64 << 40)],
                1..40,
            ),
            picks in prop::collection::vec(any::<u64>(), 1..64),
        ) {
            let s = Starts::new(counts.iter().copied());
            let records: u64 = counts.iter().sum();
            prop_assert_eq!(s.records(), records);
            prop_assert!(s.first.len() <= 4 * counts.len() + 1, "{} entries", s.first.len());
            if records == 0 {
                return Ok(());
            }
            let edges = counts.iter().scan(0u64, |at, &n| { *at += n; Some(*at) });
            let last_of_each = edges.filter(|&e| e > 0).map(|e| e - 1);
            let ids = picks.iter().map(|p| p % records).chain(last_of_each);
            for i in ids.chain([0, records - 1]) {
                let (mut p, mut first) = (0usize, 0u64);
                while first + counts[p] <= i {
                    first += counts[p];
                    p += 1;
                }
                prop_assert_eq!(s.locate(i), (p, i - first), "id {}", i);
            }
        }
    }
}
