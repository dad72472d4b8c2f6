//! `zrecord-raw`, `zrecord-zstd`, `zrecord-zstdict`: this workspace's container.
//!
//! Writers get the whole source in one `append` (Ragged: values + int32 `cu_seqlens` built from the
//! source offsets + shapes; split into several appends only if one would exceed `i32::MAX`
//! elements) with the default `WriterOptions` (`data_shards = 4`, zstd level 3) except `sync = false`
//! (write timing excludes stable-media sync, as for every row). For
//! `zrecord-zstdict` the dictionary is trained in [`Competitor::prepare`] (untimed, like the seed)
//! with `zrecord::train_dict` over the source and [`zrecord::DEFAULT_DICT_BYTES`], or, through
//! [`Competitor::prepare_held_out`], over held-out records that are never stored. Readers open the
//! store with default options (CRC32C verified on every read) bound to loaderx's default pooled CPU
//! allocator (256 MiB pool, what `Allocator("cpu")` gives Python users); a gather
//! is `DenseView::gather` / `RaggedView::gather`, whose batches are returned without copying.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zrecord::{
    Allocator, Codec, ColdReads, DenseBatch, DenseStore, DenseView, DenseWriter, DictSample,
    OpenOptions, RaggedBatch, RaggedStore, RaggedView, RaggedWriter, WriterOptions,
};

use crate::backend::Backend;
use crate::error::{Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::{Batch, DenseOutput, RaggedOutput};
use crate::source::Geometry;
use crate::source::Source;
use crate::util::check_indices;

/// zrecord codec choice for the three zrecord rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZrecordCodec {
    /// `zrecord-raw`.
    Raw,
    /// `zrecord-zstd`.
    Zstd,
    /// `zrecord-zstdict`.
    ZstdDict,
}

/// The zrecord rows.
#[derive(Debug)]
pub struct ZrecordStore {
    codec: ZrecordCodec,
    dict: Option<Vec<u8>>,
}

impl ZrecordStore {
    /// A zrecord row with `codec`.
    pub fn new(codec: ZrecordCodec) -> ZrecordStore {
        ZrecordStore { codec, dict: None }
    }

    /// The zrecord container a write into `dir` leaves.
    pub fn container(dir: &Path) -> PathBuf {
        dir.join("store.zr")
    }
}

struct SourceSample<'s, 'a>(&'s Source<'a>);

impl DictSample for SourceSample<'_, '_> {
    fn record_count(&self) -> u64 {
        self.0.len()
    }
    fn record_bytes(&self, i: u64) -> zrecord::Result<Vec<u8>> {
        Ok(self.0.record(i).to_vec())
    }
}

impl Competitor for ZrecordStore {
    fn backend(&self) -> Backend {
        match self.codec {
            ZrecordCodec::Raw => Backend::ZrecordRaw,
            ZrecordCodec::Zstd => Backend::ZrecordZstd,
            ZrecordCodec::ZstdDict => Backend::ZrecordZstdict,
        }
    }

    /// Trains the `zrecord-zstdict` dictionary on the stored records themselves.
    fn prepare(&mut self, source: &Source<'_>) -> Result<()> {
        self.prepare_held_out(source, source)
    }

    fn prepare_held_out(&mut self, source: &Source<'_>, held_out: &Source<'_>) -> Result<()> {
        source.validate()?;
        held_out.validate()?;
        let kind = |s: &Source<'_>| format!("{} {}", s.geometry().name(), s.dtype().name());
        if kind(held_out) != kind(source) {
            let (held_out, source) = (kind(held_out), kind(source));
            bail!("zrecord: held-out sample is {held_out}, the source {source}");
        }
        if self.codec == ZrecordCodec::ZstdDict {
            self.dict = Some(zrecord::train_dict(
                &SourceSample(held_out),
                zrecord::DEFAULT_DICT_BYTES,
            )?);
        }
        Ok(())
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        if self.codec == ZrecordCodec::ZstdDict && self.dict.is_none() {
            bail!(
                "zrecord-zstdict: call prepare() first (dictionary training is a separate, untimed step)"
            );
        }
        std::fs::create_dir_all(dir)?;
        let path = ZrecordStore::container(dir);
        let codec = match self.codec {
            ZrecordCodec::Raw => Codec::Raw,
            ZrecordCodec::Zstd => Codec::Zstd,
            ZrecordCodec::ZstdDict => Codec::ZstdDict,
        };
        // `sync: false`: the methodology excludes stable-media sync from write timing (no other
        // row fsyncs either); the publish is still atomic.
        let opts = WriterOptions {
            dict: self.dict.clone(),
            sync: false,
            ..Default::default()
        };
        match source {
            Source::Dense(d) => {
                let mut w = DenseWriter::create(&path, d.dtype, &d.item_shape, codec, opts)?;
                w.append(d.data)?;
                w.close()?;
            }
            Source::Ragged(r) => {
                let mut w = RaggedWriter::create(&path, r.dtype, r.ndim as u32, codec, opts)?;
                let it = r.dtype.itemsize();
                let n = r.len() as usize;
                let mut a = 0usize;
                while a < n {
                    // Largest run of records starting at `a` whose elements fit in i32.
                    let base = r.offsets[a];
                    let b =
                        a + r.offsets[a + 1..=n].partition_point(|&o| o - base <= i32::MAX as i64);
                    if b == a {
                        bail!("zrecord: record {a} exceeds i32::MAX elements");
                    }
                    let cu: Vec<i32> = r.offsets[a..=b]
                        .iter()
                        .map(|&o| (o - base) as i32)
                        .collect();
                    let values = &r.values[base as usize * it..r.offsets[b] as usize * it];
                    w.append(values, &cu, &r.shapes[a * r.ndim..b * r.ndim])?;
                    a = b;
                }
                w.close()?;
            }
        }
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        open_with(stored, OpenOptions::default())
    }

    fn open_larger_than_memory(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let opts = OpenOptions {
            cold_reads: ColdReads::Always,
            ..Default::default()
        };
        open_with(stored, opts)
    }
}

fn open_with(stored: &Stored, opts: OpenOptions) -> Result<Box<dyn Reader>> {
    let path = ZrecordStore::container(&stored.dir);
    // The CPU allocator loaderx users get (`Allocator("cpu")`): a bounded 256 MiB pool.
    let alloc: Arc<dyn Allocator> =
        Arc::new(loaderx::PooledAllocator::new(loaderx::DEFAULT_POOL_SIZE));
    Ok(Box::new(match stored.geometry {
        Geometry::Dense => View::Dense(DenseStore::open_with(&path, opts)?.bind(alloc)),
        Geometry::Ragged => View::Ragged(RaggedStore::open_with(&path, opts)?.bind(alloc)),
    }))
}

/// An open zrecord store of either geometry.
enum View {
    Dense(DenseView),
    Ragged(RaggedView),
}

/// A zrecord batch is a [`Batch`] without copying (`Batch::Dense(Box::new(batch))`), also for
/// callers that gather through a view of their own (e.g. one opened with other `OpenOptions`).
impl DenseOutput for DenseBatch {
    fn bytes(&self) -> &[u8] {
        DenseBatch::bytes(self)
    }
    fn shape(&self) -> &[u64] {
        DenseBatch::shape(self)
    }
}

impl RaggedOutput for RaggedBatch {
    fn values(&self) -> &[u8] {
        RaggedBatch::values(self)
    }
    fn cu_seqlens(&self) -> &[i32] {
        RaggedBatch::cu_seqlens(self)
    }
    fn shapes(&self) -> &[u64] {
        RaggedBatch::shapes(self)
    }
}

impl Reader for View {
    fn len(&self) -> u64 {
        match self {
            View::Dense(v) => v.len(),
            View::Ragged(v) => v.len(),
        }
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.len())?;
        Ok(match self {
            View::Dense(v) => Batch::Dense(Box::new(v.gather(indices)?)),
            View::Ragged(v) => Batch::Ragged(Box::new(v.gather(indices)?)),
        })
    }
}
