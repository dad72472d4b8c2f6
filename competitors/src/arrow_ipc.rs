//! `arrow-ipc-raw` / `arrow-ipc-zstd`: an arrow-rs IPC *file* (arrow-ipc 60).
//!
//! Schema (shared with Parquet, see [`record_batches`]):
//! * Dense: one non-null `record: FixedSizeBinary(stride)` column.
//! * Ragged: `record: Binary` (the record's bytes; same offsets + values buffers as a `List<T>`)
//!   and `shape: FixedSizeList<UInt64>(ndim)`.
//! * dtype / item shape are kept in the schema metadata.
//!
//! Record batches are cut at a byte target of [`BATCH_BYTES`] (1 MiB, at least 1 and at most 65536
//! rows): small enough that a random hit on a compressed batch decodes ~1 MiB, large enough that the
//! per-batch metadata stays negligible. `arrow-ipc-zstd` compresses every body buffer with zstd
//! (IPC's own `CompressionType::ZSTD`, level 3 default).
//!
//! Reads: the file is mmapped and wrapped as an arrow `Buffer` without copying; the footer is parsed
//! at open. Raw: every batch is decoded once at open, zero-copy (the arrays point into the mmap), so
//! a gather is lookups + copies. Zstd: compressed buffers cannot be zero-copy; a gather decodes each
//! *touched* batch once (touched batches decoded in parallel on rayon's global pool), then copies the
//! rows out; there is no cross-gather cache (under uniform random gather over a corpus much larger
//! than a few batches a small LRU would almost never hit). Copies into the output are parallel for
//! batches >= [`crate::PAR_MIN_BYTES`].

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, FixedSizeListArray, RecordBatch,
    UInt64Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_ipc::{Block, CompressionType};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use memmap2::Mmap;
use zrecord::DType;

use crate::backend::Backend;
use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::source::Source;
use crate::util::{check_indices, fill_dense, fresh_path, map_par, ragged_out};

/// Target bytes per IPC record batch.
pub const BATCH_BYTES: usize = 1 << 20;
const MAX_BATCH_ROWS: usize = 65536;

/// The Arrow IPC rows.
#[derive(Debug, Default)]
pub struct ArrowIpc {
    /// `arrow-ipc-zstd` when set, else `arrow-ipc-raw`.
    pub zstd: bool,
}

/// Row ranges `[start, end)` cutting `n` rows at about `target` bytes each.
pub(crate) fn cut_rows(source: &Source<'_>, target: usize, max_rows: usize) -> Vec<(u64, u64)> {
    let n = source.len();
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0u64, 0usize);
    for i in 0..n {
        bytes += source.record(i).len();
        if bytes >= target || (i + 1 - start) as usize >= max_rows {
            out.push((start, i + 1));
            start = i + 1;
            bytes = 0;
        }
    }
    if start < n {
        out.push((start, n));
    }
    out
}

/// The Arrow schema for a source (see the module docs).
pub(crate) fn schema_for(source: &Source<'_>) -> Result<SchemaRef> {
    let mut meta = HashMap::new();
    meta.insert(
        "zrecord.dtype".to_string(),
        source.dtype().name().to_string(),
    );
    let fields = match source {
        Source::Dense(d) => {
            let stride =
                i32::try_from(d.stride()).map_err(|_| Error::msg("arrow: record too large"))?;
            let shape: Vec<String> = d.item_shape.iter().map(u64::to_string).collect();
            meta.insert("zrecord.item_shape".to_string(), shape.join(","));
            vec![Field::new(
                "record",
                DataType::FixedSizeBinary(stride),
                false,
            )]
        }
        Source::Ragged(r) => {
            meta.insert("zrecord.ndim".to_string(), r.ndim.to_string());
            vec![
                Field::new("record", DataType::Binary, false),
                Field::new(
                    "shape",
                    DataType::FixedSizeList(
                        Arc::new(Field::new("item", DataType::UInt64, false)),
                        r.ndim as i32,
                    ),
                    false,
                ),
            ]
        }
    };
    Ok(Arc::new(Schema::new_with_metadata(fields, meta)))
}

/// Builds the record batch holding rows `[a, b)` of `source` (copies the rows into Arrow buffers).
pub(crate) fn record_batch(
    schema: &SchemaRef,
    source: &Source<'_>,
    a: u64,
    b: u64,
) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = match source {
        Source::Dense(d) => {
            let s = d.stride();
            let bytes = &d.data[a as usize * s..b as usize * s];
            vec![Arc::new(FixedSizeBinaryArray::try_new(
                s as i32,
                Buffer::from_slice_ref(bytes),
                None,
            )?)]
        }
        Source::Ragged(r) => {
            let it = r.dtype.itemsize() as i64;
            let base = r.offsets[a as usize];
            let offs: Vec<i32> = r.offsets[a as usize..=b as usize]
                .iter()
                .map(|&o| i32::try_from((o - base) * it))
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| Error::msg("arrow: batch exceeds 2 GiB"))?;
            let vals = &r.values[(base * it) as usize..(r.offsets[b as usize] * it) as usize];
            let rec = BinaryArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(offs)),
                Buffer::from_slice_ref(vals),
                None,
            )?;
            let dims =
                UInt64Array::from(r.shapes[a as usize * r.ndim..b as usize * r.ndim].to_vec());
            let shape = FixedSizeListArray::try_new(
                Arc::new(Field::new("item", DataType::UInt64, false)),
                r.ndim as i32,
                Arc::new(dims),
                None,
            )?;
            vec![Arc::new(rec), Arc::new(shape)]
        }
    };
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// What a schema's metadata says: the dtype, and the item shape (Dense) or `ndim` (Ragged).
pub(crate) struct Meta {
    dtype: DType,
    item_shape: Option<Vec<u64>>,
    ndim: usize,
}

/// Schema metadata back to its [`Meta`].
pub(crate) fn parse_meta(schema: &Schema) -> Result<Meta> {
    let m = schema.metadata();
    let dtype = m
        .get("zrecord.dtype")
        .and_then(|n| DType::from_name(n))
        .ok_or_else(|| Error::msg("arrow schema lacks zrecord.dtype"))?;
    if let Some(s) = m.get("zrecord.item_shape") {
        let dim = |x: &str| {
            x.parse()
                .map_err(|e| Error::msg(format!("item_shape: {e}")))
        };
        let shape = s.split(',').filter(|x| !x.is_empty()).map(dim);
        let item_shape = Some(shape.collect::<Result<Vec<u64>>>()?);
        return Ok(Meta {
            dtype,
            item_shape,
            ndim: 0,
        });
    }
    let ndim = m
        .get("zrecord.ndim")
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| Error::msg("arrow schema lacks zrecord.ndim"))?;
    Ok(Meta {
        dtype,
        item_shape: None,
        ndim,
    })
}

/// One decoded batch's columns.
pub(crate) enum Cols {
    Dense(FixedSizeBinaryArray),
    Ragged(BinaryArray, FixedSizeListArray),
}

impl Cols {
    pub(crate) fn from_batch(batch: &RecordBatch) -> Result<Cols> {
        let rec = batch.column(0);
        Ok(match rec.data_type() {
            DataType::FixedSizeBinary(_) => Cols::Dense(rec.as_fixed_size_binary().clone()),
            DataType::Binary => Cols::Ragged(
                rec.as_binary::<i32>().clone(),
                batch.column(1).as_fixed_size_list().clone(),
            ),
            t => bail!("unexpected record column type {t}"),
        })
    }

    pub(crate) fn record(&self, row: usize) -> &[u8] {
        match self {
            Cols::Dense(a) => a.value(row),
            Cols::Ragged(a, _) => a.value(row),
        }
    }

    /// The shape of `row` (Ragged; empty for Dense).
    fn shape(&self, row: usize) -> &[u64] {
        let Cols::Ragged(_, s) = self else { return &[] };
        let (n, at) = (s.value_length() as usize, s.value_offset_at(row));
        &s.values().as_primitive::<UInt64Type>().values()[at..at + n]
    }
}

/// Packs `(cols, row)` hits, in requested order, into the common output layout.
pub(crate) fn pack_hits(hits: &[(&Cols, usize)], meta: &Meta) -> Result<Batch> {
    let itemsize = meta.dtype.itemsize();
    if let Some(shape) = &meta.item_shape {
        let stride = shape.iter().product::<u64>() as usize * itemsize;
        let out = fill_dense(hits.len(), stride, shape, |k| hits[k].0.record(hits[k].1));
        return Ok(Batch::Dense(Box::new(out)));
    }
    let recs: Vec<&[u8]> = hits.iter().map(|(c, r)| c.record(*r)).collect();
    let mut shapes = Vec::with_capacity(hits.len() * meta.ndim);
    shapes.extend(hits.iter().flat_map(|(c, r)| c.shape(*r)));
    ragged_out(&recs, itemsize, shapes)
}

impl Competitor for ArrowIpc {
    fn backend(&self) -> Backend {
        Backend::ArrowIpcRaw.compressed_if(self.zstd)
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        source.validate()?;
        let path = fresh_path(dir, "store.arrow")?;
        let schema = schema_for(source)?;
        let mut opts = IpcWriteOptions::default();
        if self.zstd {
            opts = opts.try_with_compression(Some(CompressionType::ZSTD))?;
        }
        let file = std::io::BufWriter::with_capacity(1 << 20, File::create(&path)?);
        let mut w = FileWriter::try_new_with_options(file, &schema, opts)?;
        for (a, b) in cut_rows(source, BATCH_BYTES, MAX_BATCH_ROWS) {
            w.write(&record_batch(&schema, source, a, b)?)?;
        }
        w.finish()?;
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let file = File::open(stored.dir.join("store.arrow"))?;
        // SAFETY: the store is immutable once written and nobody truncates it while mapped; the
        // mapping is only read.
        let map = unsafe { Mmap::map(&file)? };
        let buf = Buffer::from(bytes::Bytes::from_owner(map));
        let len = buf.len();
        if len < 10 {
            bail!("arrow: file too short");
        }
        let trailer: [u8; 10] = buf[len - 10..].try_into().expect("10 bytes");
        let footer_len = arrow_ipc::reader::read_footer_length(trailer)?;
        let footer = arrow_ipc::root_as_footer(&buf[len - 10 - footer_len..len - 10])
            .map_err(|e| Error::msg(format!("arrow footer: {e}")))?;
        let schema = Arc::new(arrow_ipc::convert::try_fb_to_schema(
            footer
                .schema()
                .ok_or_else(|| Error::msg("arrow footer lacks schema"))?,
        )?);
        let meta = parse_meta(&schema)?;
        let decoder = FileDecoder::new(schema, footer.version());
        let blocks: Vec<Block> = footer
            .recordBatches()
            .map(|b| b.iter().copied().collect())
            .unwrap_or_default();
        // Row starts per batch, from each batch's message header (no body decoding).
        let mut starts = Vec::with_capacity(blocks.len() + 1);
        let mut rows = 0u64;
        for b in &blocks {
            starts.push(rows);
            let meta = &buf[b.offset() as usize..b.offset() as usize + b.metaDataLength() as usize];
            let skip = if meta[..4] == [0xff; 4] { 8 } else { 4 };
            let msg = arrow_ipc::root_as_message(&meta[skip..])
                .map_err(|e| Error::msg(format!("arrow message: {e}")))?;
            let rb = msg
                .header_as_record_batch()
                .ok_or_else(|| Error::msg("arrow: block is not a record batch"))?;
            rows += rb.length() as u64;
        }
        starts.push(rows);
        let mut reader = IpcReader {
            buf,
            decoder,
            blocks,
            starts,
            decoded: Vec::new(),
            meta,
            zstd: self.zstd,
        };
        if !self.zstd {
            reader.decoded = (0..reader.blocks.len())
                .map(|k| reader.decode(k))
                .collect::<Result<_>>()?;
        }
        Ok(Box::new(reader))
    }
}

struct IpcReader {
    buf: Buffer,
    decoder: FileDecoder,
    blocks: Vec<Block>,
    starts: Vec<u64>,
    decoded: Vec<Cols>,
    meta: Meta,
    zstd: bool,
}

impl IpcReader {
    fn decode(&self, k: usize) -> Result<Cols> {
        let b = &self.blocks[k];
        let data = self.buf.slice_with_length(
            b.offset() as usize,
            b.metaDataLength() as usize + b.bodyLength() as usize,
        );
        let batch = self
            .decoder
            .read_record_batch(b, &data)?
            .ok_or_else(|| Error::msg("arrow: empty block"))?;
        Cols::from_batch(&batch)
    }

    /// (batch, row within batch) of record `i`.
    fn locate(&self, i: u64) -> (usize, usize) {
        let k = self.starts.partition_point(|&s| s <= i) - 1;
        (k, (i - self.starts[k]) as usize)
    }
}

impl Reader for IpcReader {
    fn len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.len())?;
        let located: Vec<(usize, usize)> = indices.iter().map(|&i| self.locate(i)).collect();
        if !self.zstd {
            let hits: Vec<(&Cols, usize)> = located
                .iter()
                .map(|&(k, r)| (&self.decoded[k], r))
                .collect();
            return pack_hits(&hits, &self.meta);
        }
        let mut touched: Vec<usize> = located.iter().map(|&(k, _)| k).collect();
        touched.sort_unstable();
        touched.dedup();
        let decoded = map_par(&touched, |&k| self.decode(k))?;
        let hits: Vec<(&Cols, usize)> = located
            .iter()
            .map(|&(k, r)| (&decoded[touched.binary_search(&k).expect("touched")], r))
            .collect();
        pack_hits(&hits, &self.meta)
    }
}
