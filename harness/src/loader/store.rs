//! The zrecord raw store the loader tables' rows read ([`ensure_store`]): written once per
//! corpus from the source arrays, and reused by a later run only after every record of it was
//! compared with the source ([`store_matches`]), so a stale or damaged store is never a row's
//! input.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use competitors::{Competitor, ZrecordCodec, ZrecordStore};
use loaderx::{DEFAULT_POOL_SIZE, PooledAllocator, StreamView};
use zrecord::{Allocator, DenseStore, OpenOptions, RaggedStore, SystemAllocator};

use crate::corpus::Loaded;
use crate::error::{HarnessError, Result};
use crate::loader::arms::BATCH;
use crate::loader::matching::Delivered;
use crate::table::Table;

/// Writes the zrecord raw store the loader rows read (untimed, once per corpus): competitors'
/// `zrecord-raw` row's store, as the store tables write it.
pub fn ensure_store(table: Table, corpus: &Path, work: &Path) -> Result<PathBuf> {
    let dir = work.join(format!(
        "loader-{table}-{}",
        corpus.file_name().and_then(|s| s.to_str()).unwrap_or("c")
    ));
    let path = ZrecordStore::container(&dir);
    let loaded = Loaded::open(table, corpus)?;
    if path.exists() {
        // A store left by an earlier run is reused only when it still holds the source's
        // records, every one byte for byte (untimed); otherwise it is written again.
        if store_matches(&path, &loaded.source())? {
            return Ok(path);
        }
        eprintln!(
            "harness: {} differs from the source {}: writing it again",
            path.display(),
            corpus.display()
        );
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(HarnessError::io("remove", &dir))?;
    }
    ZrecordStore::new(ZrecordCodec::Raw)
        .write(&loaded.source(), &dir)
        .map_err(HarnessError::backend("zrecord-raw", "write"))?;
    Ok(path)
}

/// Whether the zrecord store at `path` holds exactly the records of `source` (count, then every
/// record in batches of [`BATCH`]: values, and for ragged records offsets and shapes); a store
/// that does not open does not match.
fn store_matches(path: &Path, source: &competitors::Source<'_>) -> Result<bool> {
    let dense = matches!(source, competitors::Source::Dense(_));
    let alloc = Arc::new(PooledAllocator::new(DEFAULT_POOL_SIZE));
    let opened = open_view(path, dense, OpenOptions::default(), alloc);
    let Some((view, _)) = opened.ok().filter(|(_, n)| *n == source.len()) else {
        return Ok(false);
    };
    let all: Vec<u64> = (0..source.len()).collect();
    for idx in all.chunks(BATCH) {
        let Ok(got) = view.gather(idx) else {
            return Ok(false);
        };
        if !Delivered::Loader(vec![got]).same_as_source(idx, source) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The zrecord store at `path` (of dense or ragged records) opened with `opts` and bound to
/// `alloc`, and its records.
pub fn open_view(
    path: &Path,
    dense: bool,
    opts: OpenOptions,
    alloc: Arc<dyn Allocator>,
) -> Result<(StreamView, u64)> {
    Ok(if dense {
        let s = DenseStore::open_with(path, opts).map_err(HarnessError::store(path))?;
        (StreamView::Dense(s.bind(alloc)), s.len())
    } else {
        let s = RaggedStore::open_with(path, opts).map_err(HarnessError::store(path))?;
        (StreamView::Ragged(s.bind(alloc)), s.len())
    })
}

/// Records in the zrecord store the loader rows read.
pub fn store_len(path: &Path, dense: bool) -> Result<u64> {
    let alloc = Arc::new(SystemAllocator::new());
    Ok(open_view(path, dense, OpenOptions::default(), alloc)?.1)
}

/// The bytes of a batch of the store at `path` (`records` records): its data shards' bytes per
/// record times `arms::BATCH`, the mean for a ragged store.
pub fn batch_bytes(path: &Path, records: u64) -> Result<u64> {
    let mut data = 0u64;
    for e in std::fs::read_dir(path).map_err(HarnessError::io("list", path))? {
        let e = e.map_err(HarnessError::io("list", path))?;
        if e.path().extension().is_some_and(|x| x == "zrd") {
            data += e
                .metadata()
                .map_err(HarnessError::io("stat", e.path()))?
                .len();
        }
    }
    Ok(data / records.max(1) * crate::loader::arms::BATCH as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zrecord::{Codec, DType, DenseWriter, WriterOptions};

    /// A dense corpus of `n` int32 records of 8 values each, every one distinct.
    fn corpus(dir: &Path, n: usize) -> Vec<u8> {
        let bytes: Vec<u8> = (0..(n * 8) as i32)
            .flat_map(|v| (v * 3 + 1).to_le_bytes())
            .collect();
        std::fs::create_dir_all(dir).expect("corpus dir");
        datasets::npy::write_npy(dir.join("dense.npy"), "<i4", &[n as u64, 8], &bytes)
            .expect("write dense.npy");
        bytes
    }

    fn store(path: &Path, bytes: &[u8]) {
        let mut w = DenseWriter::create(
            path,
            DType::Int32,
            &[8],
            Codec::Raw,
            WriterOptions::default(),
        )
        .expect("create");
        w.append(bytes).expect("append");
        w.close().expect("close");
    }

    #[test]
    fn a_stale_store_is_written_again_from_the_source() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("c");
        let mut bytes = corpus(&dir, 300);
        let path = ensure_store(Table::DenseTokens, &dir, tmp.path()).expect("store");
        let loaded = Loaded::open(Table::DenseTokens, &dir).expect("source");
        assert!(store_matches(&path, &loaded.source()).expect("check"));
        // One byte of one record differs: the store no longer matches, and is written again.
        bytes[8 * 4 * 150 + 5] ^= 0x10;
        std::fs::remove_dir_all(&path).expect("remove");
        store(&path, &bytes);
        assert!(!store_matches(&path, &loaded.source()).expect("check"));
        assert_eq!(
            ensure_store(Table::DenseTokens, &dir, tmp.path()).expect("store"),
            path
        );
        assert!(store_matches(&path, &loaded.source()).expect("check"));
        // A store with fewer records does not match either.
        std::fs::remove_dir_all(&path).expect("remove");
        store(&path, &bytes[..8 * 4 * 299]);
        assert!(!store_matches(&path, &loaded.source()).expect("check"));
        assert_eq!(
            store_len(
                &ensure_store(Table::DenseTokens, &dir, tmp.path()).expect("store"),
                true
            )
            .expect("len"),
            300
        );
    }
}
