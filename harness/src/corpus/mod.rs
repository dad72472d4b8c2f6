//! The benchmark corpora: locating, preparing or synthesizing them ([`Prepared`], [`Corpora`],
//! `harness prepare`), and opening one table's files as a source ([`Loaded`]).

use std::path::{Path, PathBuf};

use benchkit::lengths::WIKITEXT_103_TOKENS;
use benchkit::rng::SplitMix64;
use competitors::{DenseSource, RaggedSource, Source};
use datasets::npy::{NpyFile, NpyWriter};
use serde_json::{Value, json};
use zrecord::DType;

use crate::config::RunArgs;
use crate::error::{HarnessError, Result, write_json};
use crate::table::{Corpus, Layout, Stage, Table};
use crate::working_set;

pub mod tokens;

/// A prepared corpus directory (the datasets crate's layout) and what it is.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub dir: PathBuf,
    pub synthetic: bool,
    pub metadata: Value,
}

impl Prepared {
    fn real(dir: PathBuf, metadata: Value) -> Prepared {
        Prepared {
            dir,
            synthetic: false,
            metadata,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Corpora {
    pub vision: Option<Prepared>,
    pub tokens: Option<Prepared>,
}

impl Corpora {
    pub fn get(&self, c: Corpus) -> Option<&Prepared> {
        match c {
            Corpus::Vision => self.vision.as_ref(),
            Corpus::Tokens => self.tokens.as_ref(),
        }
    }

    /// The prepared corpus table `t` reads (`None` for the sampler, or when not prepared).
    pub fn of(&self, t: Table) -> Option<&Prepared> {
        t.corpus().and_then(|c| self.get(c))
    }

    /// The `corpora` entries of `results.json`.
    pub fn describe(&self) -> Vec<Value> {
        [Corpus::Vision, Corpus::Tokens]
            .into_iter()
            .filter_map(|c| {
                self.get(c).map(|p| {
                    json!({"kind": c.name(), "dir": p.dir, "synthetic": p.synthetic, "metadata": p.metadata})
                })
            })
            .collect()
    }
}

/// Vision records: `--vision-records`, else enough that the Dense table (147 KiB a record)
/// holds [`working_set::DENSE_VISION_MARGIN`] x the last-level cache, and at least 256 (quick) or
/// 2,500.
pub fn vision_records(a: &RunArgs) -> usize {
    a.vision_records.unwrap_or_else(|| {
        let at_least = if a.quick { 256 } else { 2500 };
        working_set::records_for(
            3 * 224 * 224,
            benchkit::cache::llc_bytes(),
            working_set::DENSE_VISION_MARGIN,
            at_least,
        )
    })
}

/// Token records requested: `--token-records` (both layouts, no floor), else at least 20,000
/// (quick) or 200,000 records for each layout, Dense raised to [`working_set::LLC_MARGIN`] x the
/// last-level cache at 2 KiB a block. The Ragged floor in bytes is [`token_floor_bytes`].
pub fn token_records(a: &RunArgs) -> usize {
    a.token_records.unwrap_or_else(|| {
        let at_least = if a.quick { 20_000 } else { 200_000 };
        working_set::records_for(
            512 * 4,
            benchkit::cache::llc_bytes(),
            working_set::LLC_MARGIN,
            at_least,
        )
    })
}

/// The Ragged token layout's floor in logical bytes (0 when `--token-records` fixes the count).
pub fn token_floor_bytes(a: &RunArgs) -> u64 {
    if a.token_records.is_some() {
        0
    } else {
        working_set::floor_bytes(benchkit::cache::llc_bytes())
    }
}

/// The corpus caption line of store table `t` read from `p` (`None` for a synthetic corpus).
/// `records`: how many the table read (ragged-vision reads a prefix of the corpus, see
/// [`working_set::prefix_records`]).
pub fn caption(t: Table, p: &Prepared, records: u64) -> Option<String> {
    if p.synthetic {
        return None;
    }
    let m = &p.metadata;
    match t.corpus()? {
        Corpus::Tokens => tokens::caption(m, t.layout() == Some(Layout::Ragged)),
        Corpus::Vision => Some(format!(
            "{}{} records from {} ({} images), {} unique{}.",
            if t == Table::RaggedVision {
                format!(
                    "The first {records} (the fewest over {}x the last-level cache) of ",
                    working_set::LLC_MARGIN
                )
            } else {
                String::new()
            },
            m["records"],
            m.pointer("/source/path")
                .and_then(Value::as_str)
                .unwrap_or("?"),
            m.pointer("/source/file_count").unwrap_or(&Value::Null),
            m["unique_records"],
            if m["cycled"].as_bool() == Some(true) {
                format!(", cycled {} times", m["cycles"])
            } else {
                String::new()
            }
        )),
    }
}

fn read_meta(dir: &Path) -> Option<Value> {
    let b = std::fs::read(dir.join("metadata.json")).ok()?;
    serde_json::from_slice(&b).ok()
}

fn records_of(meta: &Value) -> Option<u64> {
    meta.get("records")
        .and_then(Value::as_u64)
        .or_else(|| meta.pointer("/ragged/records").and_then(Value::as_u64))
}

pub fn vision(a: &RunArgs) -> Result<Prepared> {
    let n = vision_records(a);
    let real_dir = a.cache.join(format!("vision-real-{n}"));
    let source = a.pets.clone().or_else(|| {
        let full = a.cache.join("oxford-iiit-pet");
        full.join("images").is_dir().then_some(full)
    });
    if let Some(src) = source {
        let src_str = src
            .canonicalize()
            .unwrap_or(src.clone())
            .display()
            .to_string();
        let same = |m: &Value| {
            m.pointer("/source/path")
                .and_then(Value::as_str)
                .is_some_and(|p| p == src_str || Path::new(p) == src)
                && m.get("records").and_then(Value::as_u64) == Some(n as u64)
        };
        let what = format!("preparing {n} vision records from {}", src.display());
        return prepared_real(real_dir, same, &what, |dir| {
            let _ = std::fs::remove_dir_all(dir);
            datasets::vision::prepare(&src, dir, n, true)
                .map_err(HarnessError::datasets("vision preparation failed"))?;
            read_meta(dir).ok_or_else(|| {
                HarnessError::missing_in("metadata.json after the vision preparation", dir)
            })
        });
    }
    cached_or_synthesized(
        real_dir,
        a.cache.join(format!("vision-synthetic-{n}")),
        |m| records_of(m) == Some(n as u64),
        &format!(
            "no Oxford-IIIT Pet source (--pets DIR); generating a synthetic vision corpus of {n} records"
        ),
        |dir| synth_vision(dir, n),
    )
}

/// The real corpus in `dir`: the one prepared there before when `same` accepts its metadata,
/// else a fresh one from `prepare` (`what` it does, then its time, on stderr).
fn prepared_real(
    dir: PathBuf,
    same: impl Fn(&Value) -> bool,
    what: &str,
    prepare: impl FnOnce(&Path) -> Result<Value>,
) -> Result<Prepared> {
    if let Some(m) = read_meta(&dir).filter(|m| same(m)) {
        return Ok(Prepared::real(dir, m));
    }
    eprintln!("harness: {what}");
    let t = std::time::Instant::now();
    let m = prepare(&dir)?;
    eprintln!("harness: prepared in {:.1} s", t.elapsed().as_secs_f64());
    Ok(Prepared::real(dir, m))
}

/// With no real source: the real corpus an earlier run prepared in `real_dir`, if any; else the
/// synthetic one in `dir`, the one built there before when `fits` accepts its metadata, or a
/// new one from `build` (after saying `why` on stderr).
fn cached_or_synthesized(
    real_dir: PathBuf,
    dir: PathBuf,
    fits: impl Fn(&Value) -> bool,
    why: &str,
    build: impl FnOnce(&Path) -> Result<()>,
) -> Result<Prepared> {
    if let Some(m) = read_meta(&real_dir) {
        return Ok(Prepared::real(real_dir, m));
    }
    let metadata = match read_meta(&dir).filter(|m| fits(m)) {
        Some(m) => m,
        None => {
            eprintln!("harness: {why}");
            build(&dir)?;
            read_meta(&dir)
                .ok_or_else(|| HarnessError::missing_in("synthetic metadata.json", &dir))?
        }
    };
    Ok(Prepared {
        dir,
        synthetic: true,
        metadata,
    })
}

/// Finds or builds the token corpus (the real one is laid out by [`tokens`]).
pub fn tokens(a: &RunArgs) -> Result<Prepared> {
    let n = token_records(a);
    let ragged_min = if a.quick { 20_000 } else { 200_000 };
    let ragged_records = a.token_records.unwrap_or(ragged_min);
    let real_dir = a.cache.join(format!(
        "tokens-real-{n}-{ragged_records}-{}",
        token_floor_bytes(a)
    ));
    let mut sources: Vec<PathBuf> = Vec::new();
    if let Some(t) = &a.text {
        sources.extend(tokens::text_files(t)?);
    }
    if let Some(p) = &a.wikitext_parquet {
        sources.extend(tokens::text_files(p)?);
    }
    if sources.is_empty() {
        let full = a.cache.join("wikitext-103-raw");
        if full.is_dir() {
            sources.extend(tokens::text_files(&full)?);
        }
    }
    if !sources.is_empty() {
        let req = tokens::Request {
            sources: sources
                .iter()
                .map(|s| s.canonicalize().unwrap_or(s.clone()).display().to_string())
                .collect(),
            dense_records: n,
            ragged_records,
            ragged_min_bytes: token_floor_bytes(a),
        };
        let same = |m: &Value| m.get("request") == Some(&req.to_json());
        let plan = tokens::plan(&sources);
        let what = format!(
            "tokenizing {n} dense blocks from {:?} and >= {ragged_records} ragged records from {:?}",
            plan.dense, plan.ragged
        );
        return prepared_real(real_dir, same, &what, |dir| {
            tokens::prepare(&plan, dir, &req)
        });
    }
    cached_or_synthesized(
        real_dir,
        a.cache.join(format!("tokens-synthetic-{n}")),
        |m| m["schema"] == SYNTHETIC_TOKENS_SCHEMA,
        &format!("no text source (--text DIR); generating a synthetic token corpus of {n} records"),
        |dir| synth_tokens(dir, n),
    )
}

pub fn prepare_command(a: &RunArgs) -> Result<()> {
    if a.download {
        let got = datasets::download::fetch_full_datasets(
            &a.cache,
            &datasets::download::FullDatasetSources::public(),
            true,
        )
        .map_err(HarnessError::datasets("download failed"))?;
        eprintln!("harness: downloaded: {got:?}");
    }
    let v = vision(a)?;
    let t = tokens(a)?;
    println!("vision: {} (synthetic: {})", v.dir.display(), v.synthetic);
    println!("tokens: {} (synthetic: {})", t.dir.display(), t.synthetic);
    Ok(())
}

/// The synthetic token corpus's `schema`: a cached corpus of another schema is built again.
const SYNTHETIC_TOKENS_SCHEMA: &str = "loaderx.harness.synthetic-tokens/2";

fn npy_err(source: datasets::Error) -> HarnessError {
    HarnessError::datasets("synthetic corpus")(source)
}

/// Photo-like CHW pixels: smooth gradients plus sensor noise, deterministic per image.
fn synth_image(h: usize, w: usize, seed: u64, out: &mut Vec<u8>) {
    let mut r = SplitMix64::new(seed);
    let (a, b, c) = (r.below(200), r.below(200), r.below(200));
    out.clear();
    for ch in 0..3u64 {
        for y in 0..h {
            for x in 0..w {
                let base =
                    (a * ch + b * y as u64 / h.max(1) as u64 + c * x as u64 / w.max(1) as u64)
                        % 256;
                let noise = r.below(9);
                out.push((base + noise) as u8);
            }
        }
    }
}

fn synth_vision(dir: &Path, n: usize) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
    let mut dense = NpyWriter::create(dir.join("dense.npy"), "|u1", &[n as u64, 3, 224, 224])
        .map_err(npy_err)?;
    let mut values =
        NpyWriter::create_growable(dir.join("ragged_values.npy"), "|u1", &[]).map_err(npy_err)?;
    let mut shapes = Vec::with_capacity(n * 3);
    let mut offsets = vec![0i64];
    let mut r = SplitMix64::new(42);
    let mut buf = Vec::new();
    let (mut hs, mut ws) = (Vec::new(), Vec::new());
    for i in 0..n {
        synth_image(224, 224, i as u64, &mut buf);
        dense.write(&buf).map_err(npy_err)?;
        // Heights/widths spread like the Oxford-IIIT Pet photos (median about 375 x 500).
        let h = 200 + r.below(351) as usize;
        let w = 270 + r.below(461) as usize;
        synth_image(h, w, 1_000_000 + i as u64, &mut buf);
        values.write(&buf).map_err(npy_err)?;
        shapes.extend_from_slice(&[3u64, h as u64, w as u64]);
        offsets.push(offsets[i] + buf.len() as i64);
        hs.push(h as u64);
        ws.push(w as u64);
    }
    dense.finish().map_err(npy_err)?;
    values.finish().map_err(npy_err)?;
    let sb: Vec<u8> = shapes.iter().flat_map(|v| v.to_le_bytes()).collect();
    datasets::npy::write_npy(dir.join("ragged_shapes.npy"), "<u8", &[n as u64, 3], &sb)
        .map_err(npy_err)?;
    let ob: Vec<u8> = offsets.iter().flat_map(|v| v.to_le_bytes()).collect();
    datasets::npy::write_npy(dir.join("ragged_offsets.npy"), "<i8", &[n as u64 + 1], &ob)
        .map_err(npy_err)?;
    hs.sort_unstable();
    ws.sort_unstable();
    let meta = json!({
        "schema": "loaderx.harness.synthetic-vision/1",
        "synthetic": true,
        "records": n,
        "generator": "harness::corpus::synth_vision (gradients + noise, seeded)",
        "dense": {"file": "dense.npy", "dtype": "uint8", "shape": [n, 3, 224, 224], "logical_bytes": n * 150_528},
        "ragged": {"values_file": "ragged_values.npy", "shapes_file": "ragged_shapes.npy", "offsets_file": "ragged_offsets.npy",
                   "logical_bytes": offsets[n], "height": {"min": hs[0], "median": hs[n / 2], "max": hs[n - 1]},
                   "width": {"min": ws[0], "median": ws[n / 2], "max": ws[n - 1]}},
    });
    write_json(&dir.join("metadata.json"), &meta)
}

fn synth_tokens(dir: &Path, n: usize) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
    let mut r = SplitMix64::new(7);
    let mut token = || -> i32 {
        // Zipf-like ids over the GPT-2 vocabulary.
        let u = r.below(1_000_000) as f64 / 1_000_000.0;
        ((50_256.0 * u.powi(4)) as i32).min(50_255)
    };
    let mut tokens: Vec<u8> = Vec::new();
    let mut offsets = vec![0i64];
    let mut lens = Vec::with_capacity(n);
    let mut lr = SplitMix64::new(9);
    for _ in 0..n {
        // WikiText-103's record lengths, within the Ragged rule's 16..=512 tokens.
        let len = WIKITEXT_103_TOKENS.draw(&mut lr).clamp(16, 512);
        for _ in 0..len {
            tokens.extend_from_slice(&token().to_le_bytes());
        }
        offsets.push(offsets.last().copied().unwrap_or(0) + len as i64);
        lens.push(len as u64);
    }
    let total = *offsets.last().unwrap_or(&0) as u64;
    datasets::npy::write_npy(dir.join("tokens.npy"), "<i4", &[total], &tokens).map_err(npy_err)?;
    let ob: Vec<u8> = offsets.iter().flat_map(|v| v.to_le_bytes()).collect();
    datasets::npy::write_npy(dir.join("offsets.npy"), "<i8", &[n as u64 + 1], &ob)
        .map_err(npy_err)?;
    let mut dense = Vec::with_capacity(n * 2048);
    for _ in 0..n * 512 {
        dense.extend_from_slice(&token().to_le_bytes());
    }
    datasets::npy::write_npy(dir.join("dense.npy"), "<i4", &[n as u64, 512], &dense)
        .map_err(npy_err)?;
    lens.sort_unstable();
    let meta = json!({
        "schema": SYNTHETIC_TOKENS_SCHEMA,
        "synthetic": true,
        "generator": "harness::corpus::synth_tokens (Zipf-like ids, WikiText-103 lengths, seeded)",
        "ragged": {"records": n, "tokens_file": "tokens.npy", "offsets_file": "offsets.npy", "tokens": total,
                   "p10": lens[n / 10], "median": lens[n / 2], "p90": lens[n * 9 / 10]},
        "dense": {"records": n, "file": "dense.npy", "shape": [n, 512]},
    });
    write_json(&dir.join("metadata.json"), &meta)
}

fn dtype_of(descr: &str) -> Result<DType> {
    datasets::npy::dtype_of(descr).ok_or_else(|| HarnessError::Unknown {
        what: "npy dtype",
        name: descr.to_string(),
    })
}

fn le_words<T: Copy>(f: &NpyFile, conv: fn([u8; 8]) -> T) -> Vec<T> {
    f.data()
        .chunks_exact(8)
        .map(|c| conv(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// The files behind one table's source, kept open (mmapped) while the source borrows them.
/// Dimensions of a ragged-vision record: `[3, H, W]`.
const RAGGED_VISION_NDIM: usize = 3;

pub struct Loaded {
    files: Vec<NpyFile>,
    offsets: Vec<i64>,
    shapes: Vec<u64>,
    dense_shape: Vec<u64>,
    dtype: DType,
    ragged_ndim: usize,
    dense: bool,
}

impl Loaded {
    /// Opens the source files of store table `table` in the prepared corpus `dir` (for the
    /// ragged-vision table, the prefix of records its working set needs).
    pub fn open(table: Table, dir: &Path) -> Result<Loaded> {
        Loaded::open_records(table, dir, false)
    }

    /// A ragged source: `values` cut at `offsets`, each record's `ndim` dims in `shapes`.
    fn ragged(values: NpyFile, offsets: Vec<i64>, shapes: Vec<u64>, ndim: usize) -> Result<Loaded> {
        Ok(Loaded {
            dtype: dtype_of(values.descr())?,
            files: vec![values],
            offsets,
            shapes,
            dense_shape: vec![],
            ragged_ndim: ndim,
            dense: false,
        })
    }

    /// [`Loaded::open`], with every record of the corpus when `whole`: the cold tables draw from
    /// the whole corpus, since a batch of 256 drawn from the warm ragged-vision prefix (~60
    /// records) would read most records several times, and a reader through the page cache would
    /// read each once.
    pub fn open_records(table: Table, dir: &Path, whole: bool) -> Result<Loaded> {
        let open = |name: &str| {
            NpyFile::open(dir.join(name)).map_err(HarnessError::datasets("open the source"))
        };
        match (table.stage(), table.layout(), table.corpus()) {
            (Stage::Store, Some(Layout::Dense), Some(_)) => {
                let f = open("dense.npy")?;
                let dtype = dtype_of(f.descr())?;
                let shape = f.shape().to_vec();
                Ok(Loaded {
                    files: vec![f],
                    offsets: vec![],
                    shapes: vec![],
                    dense_shape: shape,
                    dtype,
                    ragged_ndim: 0,
                    dense: true,
                })
            }
            (Stage::Store, Some(Layout::Ragged), Some(Corpus::Vision)) => {
                let v = open("ragged_values.npy")?;
                let o = open("ragged_offsets.npy")?;
                let s = open("ragged_shapes.npy")?;
                let mut offsets = le_words(&o, i64::from_le_bytes);
                let mut shapes = le_words(&s, u64::from_le_bytes);
                let dtype = dtype_of(v.descr())?;
                // The table reads the shortest prefix that still exceeds the cache margin.
                let keep = if whole {
                    offsets.len().saturating_sub(1)
                } else {
                    working_set::prefix_records(
                        &offsets,
                        dtype.itemsize() as u64,
                        benchkit::cache::llc_bytes(),
                    )
                };
                offsets.truncate(keep + 1);
                shapes.truncate(keep * RAGGED_VISION_NDIM);
                Loaded::ragged(v, offsets, shapes, RAGGED_VISION_NDIM)
            }
            (Stage::Store, Some(Layout::Ragged), Some(Corpus::Tokens)) => {
                let v = open("tokens.npy")?;
                let o = open("offsets.npy")?;
                let offsets = le_words(&o, i64::from_le_bytes);
                let shapes: Vec<u64> = offsets.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
                Loaded::ragged(v, offsets, shapes, 1)
            }
            _ => Err(HarnessError::missing_in(
                format!("source of table {table}"),
                dir,
            )),
        }
    }

    /// The held-out dictionary sample of token table `table` in the corpus `dir` (see
    /// [`tokens`]); `None` for a vision table or a corpus without one.
    pub fn open_held_out(table: Table, dir: &Path) -> Result<Option<Loaded>> {
        let held = dir.join(tokens::HELD_OUT);
        if table.corpus() != Some(Corpus::Tokens) || !held.is_dir() {
            return Ok(None);
        }
        Loaded::open(table, &held).map(Some)
    }

    pub fn source(&self) -> Source<'_> {
        if self.dense {
            Source::Dense(DenseSource {
                dtype: self.dtype,
                item_shape: self.dense_shape[1..].to_vec(),
                data: self.files[0].data(),
            })
        } else {
            Source::Ragged(RaggedSource {
                dtype: self.dtype,
                ndim: self.ragged_ndim,
                values: self.files[0].data(),
                offsets: &self.offsets,
                shapes: &self.shapes,
            })
        }
    }
}
