//! `lmdb-raw`: LMDB through heed 0.23 (bundled LMDB 0.9.70).
//!
//! One environment directory; one named database `records`: key = record index as big-endian u64
//! (so key order = index order), value = record bytes (Dense) or `ndim` little-endian u64 dims
//! followed by the record bytes (Ragged). The whole source is loaded in one write transaction with
//! `MDB_APPEND` (keys arrive sorted), the environment opened with `MDB_NOSYNC` for the load (no
//! writer here syncs to stable media inside the timed write; the commit still writes everything to
//! the page cache). The map size is sized from the input: `2 * payload + n * 3 pages + 64 MiB`
//! (values over ~2 KiB live on overflow pages rounded up to whole 4 KiB pages).
//!
//! Reads: the environment is opened read-only with `MDB_NORDAHEAD` (random access) and
//! `read_txn_without_tls`; a gather opens one read transaction, looks every requested key up
//! (zero-copy `&[u8]` into the mmap, on the calling thread), then copies the slices into the output
//! buffer, in parallel on rayon's global pool when the batch is >= [`crate::PAR_MIN_BYTES`].

use std::path::Path;

use heed::byteorder::BigEndian;
use heed::types::{Bytes, U64};
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, PutFlags, WithoutTls};

use crate::backend::Backend;
use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::source::Source;
use crate::util::{check_indices, fill_dense, le_u64s, ragged_out};

type Db = Database<'static, U64<BigEndian>, Bytes>;

/// The LMDB row.
#[derive(Debug, Default)]
pub struct Lmdb;

const META_KEY_DB: &str = "meta";

impl Competitor for Lmdb {
    fn backend(&self) -> Backend {
        Backend::LmdbRaw
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        source.validate()?;
        let env_dir = dir.join("lmdb");
        std::fs::create_dir_all(&env_dir)?;
        if env_dir.join("data.mdb").exists() {
            bail!("{} already holds a store", env_dir.display());
        }
        let n = source.len();
        let page = 4096u64;
        let map = 2 * source.payload_bytes() + (n + 16) * 3 * page + (64 << 20);
        let map = map.div_ceil(page) * page;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(map as usize).max_dbs(2);
        // SAFETY: NO_SYNC only drops the fsync at commit; this process is the only user of the fresh
        // directory, so there is no concurrent opener with different flags.
        unsafe { opts.flags(EnvFlags::NO_SYNC) };
        // SAFETY: the directory is new and private to this writer; nothing else maps it.
        let env = unsafe { opts.open(&env_dir)? };
        let wtxn = env.write_txn()?;
        let (db, meta) = env
            .create_databases_and_commit(wtxn, |wdo, wtxn| -> heed::Result<_> {
                let db = wdo.create_database::<U64<BigEndian>, Bytes>(wtxn, Some("records"))?;
                let meta = wdo.create_database::<U64<BigEndian>, Bytes>(wtxn, Some(META_KEY_DB))?;
                Ok(CommitOrAbort::<_, ()>::Commit((db, meta)))
            })?
            .unwrap_commit();
        let mut wtxn = env.write_txn()?;
        match source {
            Source::Dense(d) => {
                for i in 0..n {
                    db.put_with_flags(&mut wtxn, PutFlags::APPEND, &i, d.record(i))?;
                }
                let head = [0, d.dtype.itemsize() as u64, d.item_shape.len() as u64];
                let m = [&head[..], &d.item_shape].concat();
                meta.put(&mut wtxn, &0, &crate::util::u64s_le(&m))?;
            }
            Source::Ragged(r) => {
                let mut buf = Vec::new();
                for i in 0..n {
                    buf.clear();
                    for &dim in r.shape(i) {
                        buf.extend_from_slice(&dim.to_le_bytes());
                    }
                    buf.extend_from_slice(r.record(i));
                    db.put_with_flags(&mut wtxn, PutFlags::APPEND, &i, &buf)?;
                }
                meta.put(
                    &mut wtxn,
                    &0,
                    &crate::util::u64s_le(&[1, r.dtype.itemsize() as u64, r.ndim as u64]),
                )?;
            }
        }
        wtxn.commit()?;
        let closing = env.prepare_for_closing();
        closing.wait();
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let env_dir = stored.dir.join("lmdb");
        let size = std::fs::metadata(env_dir.join("data.mdb"))?.len();
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(size.div_ceil(4096) as usize * 4096)
            .max_dbs(2)
            .max_readers(1024);
        // SAFETY: READ_ONLY and NO_READ_AHEAD only change how this process maps the file.
        unsafe { opts.flags(EnvFlags::READ_ONLY | EnvFlags::NO_READ_AHEAD) };
        // SAFETY: the store is immutable once written; no writer maps it concurrently.
        let env = unsafe { opts.open(&env_dir)? };
        let rtxn = env.read_txn()?;
        let (db, meta) = env
            .open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
                let db = dbo.open_database::<U64<BigEndian>, Bytes>(rtxn, Some("records"))?;
                let meta = dbo.open_database::<U64<BigEndian>, Bytes>(rtxn, Some(META_KEY_DB))?;
                Ok(CommitOrAbort::<_, ()>::Commit((db, meta)))
            })?
            .unwrap_commit();
        let (Some(db), Some(meta)) = (db, meta) else {
            bail!("lmdb-raw: databases missing")
        };
        let m: Vec<u64> = {
            let rtxn = env.read_txn()?;
            let v = meta
                .get(&rtxn, &0)?
                .ok_or_else(|| Error::msg("lmdb-raw: meta missing"))?;
            le_u64s(v).collect()
        };
        let (ragged, itemsize, rank) = (m[0] == 1, m[1] as usize, m[2] as usize);
        let item_shape = m[3..].to_vec(); // empty for Ragged
        Ok(Box::new(LmdbReader {
            env,
            db,
            len: stored.len,
            ragged,
            itemsize,
            rank,
            item_shape,
        }))
    }
}

struct LmdbReader {
    env: Env<WithoutTls>,
    db: Db,
    len: u64,
    ragged: bool,
    itemsize: usize,
    rank: usize,
    item_shape: Vec<u64>,
}

impl Reader for LmdbReader {
    fn len(&self) -> u64 {
        self.len
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.len)?;
        let rtxn = self.env.read_txn()?;
        let mut recs: Vec<&[u8]> = Vec::with_capacity(indices.len());
        for i in indices {
            recs.push(
                self.db
                    .get(&rtxn, i)?
                    .ok_or_else(|| Error::msg(format!("lmdb-raw: key {i} missing")))?,
            );
        }
        if !self.ragged {
            let stride = self.item_shape.iter().product::<u64>() as usize * self.itemsize;
            if let Some(bad) = recs.iter().find(|r| r.len() != stride) {
                bail!("lmdb-raw: value of {} bytes, expected {stride}", bad.len());
            }
            let out = fill_dense(recs.len(), stride, &self.item_shape, |k| recs[k]);
            return Ok(Batch::Dense(Box::new(out)));
        }
        let head = self.rank * 8;
        let mut shapes = Vec::with_capacity(indices.len() * self.rank);
        for r in &mut recs {
            shapes.extend(le_u64s(&r[..head]));
            *r = &r[head..];
        }
        ragged_out(&recs, self.itemsize, shapes)
    }
}
