//! `parquet-raw` / `parquet-zstd`: the parquet crate (60) with its Arrow reader/writer.
//!
//! Same schema as Arrow IPC (`record: FixedSizeBinary(stride)` for Dense, `record: Binary` +
//! `shape: FixedSizeList<UInt64>(ndim)` for Ragged). Writer properties, tuned for random access:
//! * pages of about [`PAGE_BYTES`] (64 KiB): `data_page_row_count_limit = write_batch_size =
//!   clamp(64 KiB / mean record bytes, 1, 1024)` rows and `data_page_size_limit = 64 KiB`, so one
//!   large record is one page and small records share a page;
//! * row groups of about [`ROW_GROUP_BYTES`] (64 MiB) of payload (`max_row_group_row_count`);
//! * page index on: page-level statistics (column index, truncated to 64 bytes) and the offset
//!   index; dictionary encoding off (opaque records), PLAIN encoding;
//! * `parquet-zstd`: `ZSTD(3)` per page; `parquet-raw`: `UNCOMPRESSED`.
//!
//! Reads: the file is mmapped and handed to the reader as `bytes::Bytes` (page reads are slices of
//! the mapping). `ArrowReaderMetadata` (footer + page index) is loaded once at open. A gather groups
//! the requested rows by row group and reads every touched group once with a `RowSelection` of
//! exactly the needed rows (selector policy, so untouched pages are skipped through the offset
//! index); touched groups are read in parallel on rayon's global pool, then rows are scattered
//! into the requested order (copies parallel for batches >= [`crate::PAR_MIN_BYTES`]).

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelectionPolicy, RowSelector,
};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::arrow_ipc::{Cols, Meta, pack_hits, parse_meta, record_batch, schema_for};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::source::Source;
use crate::util::{check_indices, fresh_path, map_par, unique_sorted};

/// Target data page size.
pub const PAGE_BYTES: usize = 64 << 10;
/// Target row group payload size.
pub const ROW_GROUP_BYTES: usize = 64 << 20;
const WRITE_CHUNK_BYTES: usize = 8 << 20;

/// The Parquet rows.
#[derive(Debug, Default)]
pub struct Parquet {
    /// `parquet-zstd` when set, else `parquet-raw`.
    pub zstd: bool,
}

impl Competitor for Parquet {
    fn backend(&self) -> Backend {
        Backend::ParquetRaw.compressed_if(self.zstd)
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        source.validate()?;
        let path = fresh_path(dir, "store.parquet")?;
        let schema = schema_for(source)?;
        let n = source.len().max(1) as usize;
        let mean = (source.payload_bytes() as usize / n).max(1);
        let page_rows = (PAGE_BYTES / mean).clamp(1, 1024);
        let group_rows = (ROW_GROUP_BYTES / mean).clamp(1, 1 << 20);
        let compression = if self.zstd {
            Compression::ZSTD(ZstdLevel::try_new(3)?)
        } else {
            Compression::UNCOMPRESSED
        };
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_dictionary_enabled(false)
            .set_encoding(Encoding::PLAIN)
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_data_page_row_count_limit(page_rows)
            .set_write_batch_size(page_rows)
            .set_data_page_size_limit(PAGE_BYTES)
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let file = std::io::BufWriter::with_capacity(1 << 20, File::create(&path)?);
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props))?;
        for (a, b) in crate::arrow_ipc::cut_rows(source, WRITE_CHUNK_BYTES, 1 << 20) {
            w.write(&record_batch(&schema, source, a, b)?)?;
        }
        w.close()?;
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let file = File::open(stored.dir.join("store.parquet"))?;
        // SAFETY: the store is immutable once written and nobody truncates it while mapped; the
        // mapping is only read.
        let map = unsafe { Mmap::map(&file)? };
        let data = bytes::Bytes::from_owner(map);
        let opts = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
        let meta = ArrowReaderMetadata::load(&data, opts)?;
        let columns = parse_meta(meta.schema())?;
        let mut starts = vec![0u64];
        for rg in meta.metadata().row_groups() {
            starts.push(starts.last().expect("nonempty") + rg.num_rows() as u64);
        }
        Ok(Box::new(ParquetReader {
            data,
            meta,
            starts,
            columns,
        }))
    }
}

/// One row group's read: decoded batches and, per requested row, (batch, row in batch).
type GroupRead = (Vec<Cols>, Vec<(usize, usize)>);

struct ParquetReader {
    data: bytes::Bytes,
    meta: ArrowReaderMetadata,
    starts: Vec<u64>,
    /// What the rows hold (the schema metadata).
    columns: Meta,
}

impl ParquetReader {
    /// Reads the sorted, unique in-group `rows` of row group `rg`; returns the decoded batches and,
    /// per requested row, (batch, row in batch).
    fn read_group(&self, rg: usize, rows: &[u64]) -> Result<GroupRead> {
        let mut sel = Vec::new();
        let mut next = 0u64;
        for &r in rows {
            if r > next {
                sel.push(RowSelector::skip((r - next) as usize));
            }
            match sel.last_mut() {
                Some(last) if !last.skip => last.row_count += 1,
                _ => sel.push(RowSelector::select(1)),
            }
            next = r + 1;
        }
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.data.clone(),
            self.meta.clone(),
        )
        .with_row_groups(vec![rg])
        .with_row_selection(RowSelection::from(sel))
        .with_row_selection_policy(RowSelectionPolicy::Selectors)
        .with_batch_size(rows.len().max(1))
        .build()?;
        let mut cols = Vec::new();
        let mut pos = Vec::with_capacity(rows.len());
        for batch in reader {
            let batch = batch.map_err(Error::from)?;
            let k = cols.len();
            pos.extend((0..batch.num_rows()).map(|r| (k, r)));
            cols.push(Cols::from_batch(&batch)?);
        }
        if pos.len() != rows.len() {
            return Err(Error::msg(format!(
                "parquet: row group {rg} returned {} of {} rows",
                pos.len(),
                rows.len()
            )));
        }
        Ok((cols, pos))
    }
}

impl Reader for ParquetReader {
    fn len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.len())?;
        let (uniq, pos) = unique_sorted(indices);
        // Split the sorted unique rows by row group.
        let mut groups: Vec<(usize, usize, usize)> = Vec::new(); // (rg, start in uniq, end)
        let mut at = 0;
        while at < uniq.len() {
            let rg = self.starts.partition_point(|&s| s <= uniq[at]) - 1;
            let end = at + uniq[at..].partition_point(|&i| i < self.starts[rg + 1]);
            groups.push((rg, at, end));
            at = end;
        }
        let read = |&(rg, a, b): &(usize, usize, usize)| {
            let rel: Vec<u64> = uniq[a..b].iter().map(|&i| i - self.starts[rg]).collect();
            self.read_group(rg, &rel)
        };
        let results: Vec<GroupRead> = map_par(&groups, read)?;
        // For each unique row: (group result, batch, row).
        let mut where_u: Vec<(usize, usize, usize)> = Vec::with_capacity(uniq.len());
        for (g, (_, p)) in results.iter().enumerate() {
            where_u.extend(p.iter().map(|&(b, r)| (g, b, r)));
        }
        let hits: Vec<(&Cols, usize)> = pos
            .iter()
            .map(|&u| {
                let (g, b, r) = where_u[u];
                (&results[g].0[b], r)
            })
            .collect();
        pack_hits(&hits, &self.columns)
    }
}
