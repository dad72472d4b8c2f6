//! `arrayrecord-raw` / `arrayrecord-zstd`: Google's `array_record` Python package (PyPI), driven
//! through a helper process (`competitors/python/arrayrecord_helper.py`, run with the project venv's
//! Python) over a length-prefixed binary protocol on stdin/stdout. A helper process, not PyO3
//! embedding, so this crate never links libpython (the workspace's abi3 extension module would
//! otherwise unify pyo3 features with an embedding build).
//!
//! Writer options: `group_size:1,uncompressed` / `group_size:1,zstd:3` (one record per chunk,
//! required for random access). Ragged records are `ndim` little-endian u64 dims + record bytes.
//! Reader options: [`READER_OPTIONS`] (random-access tuned: no readahead; the batch `read(list)` is
//! spread over array_record's C++ pool with `max_parallelism` = rayon's thread count).
//!
//! Timing: the helper measures with `time.perf_counter_ns` and the harness uses
//! [`Stored::write_seconds`] / [`Reader::last_gather_seconds`]. Write time covers every
//! `writer.write` + `close` (writer construction excluded; the source is staged to files during
//! [`Competitor::prepare`]). Gather time covers `reader.read(list_of_indices)` plus packing with numpy
//! into the common layout (`b"".join` into one buffer; Ragged also parses dims and builds int32
//! `cu_seqlens`). The packed bytes travel back through the pipe (untimed) for verification.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::error::{Error, Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::{Batch, DenseOut, RaggedOut};
use crate::source::Geometry;
use crate::source::Source;
use crate::util::{check_indices, le_u64s, u64s_le};

/// Reader options passed to `ArrayRecordReader` (`{threads}` is replaced by rayon's thread count).
pub const READER_OPTIONS: &str = "readahead_buffer_size:0,max_parallelism:{threads}";

/// The Python interpreter used for the helper: `$LOADERX_PYTHON`, else `$LOADERX_VENV/bin/python`
/// (the venv `scripts/bench.sh` installs and the harness's Python rows run in), else the checkout's
/// `.venv/bin/python` as compiled in.
fn python_interpreter() -> PathBuf {
    if let Some(p) = std::env::var_os("LOADERX_PYTHON") {
        return PathBuf::from(p);
    }
    if let Some(v) = std::env::var_os("LOADERX_VENV") {
        return PathBuf::from(v).join("bin/python");
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/arrayrecord_helper.py")
}

/// The helper process.
#[derive(Debug)]
struct Helper {
    child: Child,
    tx: BufWriter<ChildStdin>,
    rx: BufReader<ChildStdout>,
}

impl Helper {
    fn start() -> Result<Helper> {
        let py = python_interpreter();
        let missing = || {
            Error::msg(format!(
                "array_record not installed: run scripts/install-deps.sh (python: {})",
                py.display()
            ))
        };
        if !py.exists() {
            return Err(missing());
        }
        let probe = "import numpy; from array_record.python import array_record_module";
        let probe = Command::new(&py)
            .args(["-c", probe])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !probe.success() {
            return Err(missing());
        }
        let mut child = Command::new(&py)
            .arg(helper_script())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let tx = BufWriter::with_capacity(1 << 16, child.stdin.take().expect("piped"));
        let rx = BufReader::with_capacity(1 << 20, child.stdout.take().expect("piped"));
        let mut h = Helper { child, tx, rx };
        h.tx.write_all(b"P")?;
        h.finish()?;
        h.str()?;
        Ok(h)
    }

    fn str_arg(&mut self, s: &str) -> Result<()> {
        self.tx.write_all(&(s.len() as u32).to_le_bytes())?;
        self.tx.write_all(s.as_bytes())?;
        Ok(())
    }

    fn path_arg(&mut self, p: &Path) -> Result<()> {
        self.str_arg(p.to_str().ok_or_else(|| Error::msg("non-utf-8 path"))?)
    }

    fn u64_arg(&mut self, x: u64) -> Result<()> {
        self.tx.write_all(&x.to_le_bytes())?;
        Ok(())
    }

    /// Flushes the request and reads the status byte.
    fn finish(&mut self) -> Result<()> {
        self.tx.flush()?;
        let mut st = [0u8; 1];
        self.rx
            .read_exact(&mut st)
            .map_err(|e| Error::msg(format!("arrayrecord helper died: {e}")))?;
        if st[0] != 0 {
            let msg = self.str()?;
            bail!("arrayrecord helper: {msg}");
        }
        Ok(())
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.rx.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn str(&mut self) -> Result<String> {
        let mut b = [0u8; 4];
        self.rx.read_exact(&mut b)?;
        let mut s = vec![0u8; u32::from_le_bytes(b) as usize];
        self.rx.read_exact(&mut s)?;
        String::from_utf8(s).map_err(|e| Error::msg(format!("helper sent bad utf-8: {e}")))
    }

    fn blob(&mut self) -> Result<Vec<u8>> {
        let n = self.u64()? as usize;
        let mut v = vec![0u8; n];
        self.rx.read_exact(&mut v)?;
        Ok(v)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.tx.write_all(b"Q");
        let _ = self.tx.flush();
        let _ = self.child.wait();
    }
}

/// The source staged as files for the helper (written in `prepare`, removed after `write`).
#[derive(Debug)]
struct Staged {
    dir: PathBuf,
    kind: u8,
    ndim: u64,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The ArrayRecord rows.
#[derive(Debug)]
pub struct ArrayRecord {
    zstd: bool,
    helper: Option<Helper>,
    staged: Option<Staged>,
}

impl ArrayRecord {
    /// `arrayrecord-zstd` when `zstd`, else `arrayrecord-raw`.
    pub fn new(zstd: bool) -> ArrayRecord {
        ArrayRecord {
            zstd,
            helper: None,
            staged: None,
        }
    }

    fn stage(source: &Source<'_>) -> Result<Staged> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "competitors-arrayrecord-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let n = source.len();
        // Byte offsets of the records in `values`, then the Ragged dims (none for Dense).
        let (values, offsets, shapes, kind, ndim): (&[u8], Vec<u64>, &[u64], u8, usize) =
            match source {
                Source::Dense(d) => {
                    let offsets = (0..=n).map(|i| i * d.stride() as u64).collect();
                    (d.data, offsets, &[], 0, 0)
                }
                Source::Ragged(r) => {
                    let it = r.dtype.itemsize() as u64;
                    let offsets = r.offsets.iter().map(|&o| o as u64 * it).collect();
                    (r.values, offsets, r.shapes, 1, r.ndim)
                }
            };
        // Constructed before writing so that a failed write still removes the directory.
        let staged = Staged {
            dir,
            kind,
            ndim: ndim as u64,
        };
        std::fs::write(staged.dir.join("values"), values)?;
        std::fs::write(staged.dir.join("offsets"), u64s_le(&offsets))?;
        std::fs::write(staged.dir.join("shapes"), u64s_le(shapes))?;
        Ok(staged)
    }
}

impl Competitor for ArrayRecord {
    fn backend(&self) -> Backend {
        Backend::ArrayRecordRaw.compressed_if(self.zstd)
    }

    fn prepare(&mut self, source: &Source<'_>) -> Result<()> {
        source.validate()?;
        if self.helper.is_none() {
            self.helper = Some(Helper::start()?);
        }
        self.staged = Some(ArrayRecord::stage(source)?);
        Ok(())
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        if self.staged.is_none() {
            self.prepare(source)?;
        }
        let staged = self.staged.take().expect("prepared");
        let path = crate::util::fresh_path(dir, "store.array_record")?;
        let opts = if self.zstd {
            "group_size:1,zstd:3"
        } else {
            "group_size:1,uncompressed"
        };
        let h = self.helper.as_mut().expect("prepared");
        h.tx.write_all(b"W")?;
        h.path_arg(&path)?;
        h.str_arg(opts)?;
        h.tx.write_all(&[staged.kind])?;
        h.u64_arg(staged.ndim)?;
        for f in ["values", "offsets", "shapes"] {
            h.path_arg(&staged.dir.join(f))?;
        }
        h.finish()?;
        let ns = h.u64()?;
        // Sidecar metadata (untimed, one block): item shape for Dense, itemsize + ndim for Ragged.
        match source {
            Source::Dense(d) => std::fs::write(dir.join("dense.meta"), u64s_le(&d.item_shape))?,
            Source::Ragged(r) => std::fs::write(
                dir.join("ragged.meta"),
                u64s_le(&[r.dtype.itemsize() as u64, r.ndim as u64]),
            )?,
        }
        Ok(Stored {
            write_seconds: Some(ns as f64 * 1e-9),
            ..Stored::new(self.backend(), dir, source)
        })
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        // Each reader gets its own helper (the writer's stays with the writer).
        let mut h = Helper::start()?;
        let path = stored.dir.join("store.array_record");
        let (kind, itemsize, ndim) = match stored.geometry {
            Geometry::Dense => (0u8, 1u64, 0u64),
            Geometry::Ragged => {
                let meta = std::fs::read(stored.dir.join("ragged.meta"))?;
                let m: Vec<u64> = le_u64s(&meta).collect();
                (1u8, m[0], m[1])
            }
        };
        let opts = READER_OPTIONS.replace("{threads}", &rayon::current_num_threads().to_string());
        h.tx.write_all(b"O")?;
        h.path_arg(&path)?;
        h.str_arg(&opts)?;
        h.tx.write_all(&[kind])?;
        h.u64_arg(itemsize)?;
        h.u64_arg(ndim)?;
        h.finish()?;
        let n = h.u64()?;
        let shape: Vec<u64> = match stored.geometry {
            Geometry::Dense => le_u64s(&std::fs::read(stored.dir.join("dense.meta"))?).collect(),
            Geometry::Ragged => Vec::new(),
        };
        Ok(Box::new(ArReader {
            h,
            n,
            ragged: kind == 1,
            item_shape: shape,
            last: None,
        }))
    }
}

struct ArReader {
    h: Helper,
    n: u64,
    ragged: bool,
    item_shape: Vec<u64>,
    last: Option<f64>,
}

impl Reader for ArReader {
    fn len(&self) -> u64 {
        self.n
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.n)?;
        self.h.tx.write_all(b"G")?;
        self.h.u64_arg(indices.len() as u64)?;
        self.h.tx.write_all(&u64s_le(indices))?;
        self.h.finish()?;
        self.last = Some(self.h.u64()? as f64 * 1e-9);
        if !self.ragged {
            let bytes = self.h.blob()?;
            let shape = crate::util::batch_shape(indices.len(), &self.item_shape);
            return Ok(Batch::Dense(Box::new(DenseOut { bytes, shape })));
        }
        let values = self.h.blob()?;
        let cu = self.h.blob()?;
        let shapes = self.h.blob()?;
        let cu_seqlens = cu
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4")))
            .collect();
        Ok(Batch::Ragged(Box::new(RaggedOut {
            values,
            cu_seqlens,
            shapes: le_u64s(&shapes).collect(),
        })))
    }

    fn last_gather_seconds(&self) -> Option<f64> {
        self.last
    }
}
