//! WikiText → GPT-2 token records: Ragged sequences (16..=512 tokens) and Dense blocks
//! (`int32[512]`).
//!
//! See the crate documentation for the exact fragment/split/cycling rules.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tiktoken_rs::CoreBPE;

use crate::error::{Error, Result};
use crate::npy::NpyWriter;
use crate::{hex, progress_bar, write_json};

/// Shortest Ragged record, in tokens.
pub const MIN_TOKENS: usize = 16;
/// Longest Ragged record and the Dense block size, in tokens.
pub const MAX_TOKENS: usize = 512;
/// Version of `tiktoken-rs` (pinned in `Cargo.toml`).
pub const TIKTOKEN_VERSION: &str = "0.12.1";

/// Bytes of text tokenized per parallel batch.
const BATCH_BYTES: usize = 4 << 20;

static BPE: OnceLock<std::result::Result<CoreBPE, String>> = OnceLock::new();

/// The GPT-2 byte-level BPE (`r50k_base`, ranks embedded in `tiktoken-rs`), loaded once
/// and checked against `"Hello world"` → `[15496, 995]`.
pub fn gpt2() -> Result<&'static CoreBPE> {
    let loaded = BPE.get_or_init(|| {
        let bpe = tiktoken_rs::r50k_base().map_err(|e| e.to_string())?;
        let probe = bpe.encode_ordinary("Hello world");
        if probe != [15496, 995] {
            return Err(format!(
                "r50k_base is not GPT-2: expected \"Hello world\" -> [15496, 995], found {probe:?}"
            ));
        }
        Ok(bpe)
    });
    loaded.as_ref().map_err(|e| Error::Tokenizer(e.clone()))
}

/// GPT-2 token ids of `text` (no special tokens: `<|endoftext|>` is plain text here).
pub fn encode(text: &str) -> Result<Vec<u32>> {
    Ok(gpt2()?.encode_ordinary(text))
}

/// The Ragged fragment/split rule as a state machine over line lengths. Records are
/// half-open token ranges over the concatenated token stream.
#[derive(Debug, Default, Clone)]
pub struct RecordSplitter {
    records: Vec<Range<usize>>,
    pending_start: usize,
    stream_len: usize,
}

impl RecordSplitter {
    /// A new splitter at stream position 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Account for the next non-empty line, `tokens` long.
    pub fn push_line(&mut self, tokens: usize) {
        self.stream_len += tokens;
        if self.stream_len - self.pending_start >= MIN_TOKENS {
            self.emit_group(self.pending_start, self.stream_len);
            self.pending_start = self.stream_len;
        }
    }

    fn emit_group(&mut self, start: usize, end: usize) {
        let len = end - start;
        let full = len / MAX_TOKENS;
        let rem = len % MAX_TOKENS;
        let mut at = start;
        if rem != 0 && rem < MIN_TOKENS && full > 0 {
            for _ in 0..full - 1 {
                self.records.push(at..at + MAX_TOKENS);
                at += MAX_TOKENS;
            }
            let shortened = MAX_TOKENS - (MIN_TOKENS - rem);
            self.records.push(at..at + shortened);
            self.records.push(at + shortened..end);
        } else {
            while at < end {
                let next = (at + MAX_TOKENS).min(end);
                self.records.push(at..next);
                at = next;
            }
        }
    }

    /// Records completed so far.
    pub fn records(&self) -> &[Range<usize>] {
        &self.records
    }

    /// Tokens seen so far.
    pub fn stream_len(&self) -> usize {
        self.stream_len
    }

    /// End of the text: place a trailing fragment (< 16 tokens) and return all records.
    /// Errors when the whole text holds fewer than 16 tokens.
    pub fn finish(mut self) -> std::result::Result<Vec<Range<usize>>, usize> {
        let leftover = self.stream_len - self.pending_start;
        if leftover > 0 {
            let end = self.stream_len;
            let Some(last) = self.records.last_mut() else {
                return Err(self.stream_len);
            };
            if last.len() + leftover <= MAX_TOKENS {
                last.end = end;
            } else {
                let tail = end - MIN_TOKENS;
                last.end = tail;
                self.records.push(tail..end);
            }
        }
        if self.records.is_empty() {
            return Err(self.stream_len);
        }
        Ok(self.records)
    }
}

/// Percentile statistics of the Ragged record lengths (nearest-rank percentiles:
/// `p = sorted[ceil(p/100 * n) - 1]`; median = lower median `sorted[(n-1)/2]`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct LengthStats {
    /// Shortest.
    pub min: u64,
    /// 10th percentile.
    pub p10: u64,
    /// Lower median.
    pub median: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// 90th percentile.
    pub p90: u64,
    /// Longest.
    pub max: u64,
}

impl LengthStats {
    /// Statistics of `lengths` (all zero when empty).
    pub fn of(lengths: &[u64]) -> Self {
        let mut v = lengths.to_vec();
        v.sort_unstable();
        let n = v.len();
        if n == 0 {
            return LengthStats {
                min: 0,
                p10: 0,
                median: 0,
                mean: 0.0,
                p90: 0,
                max: 0,
            };
        }
        let rank = |p: usize| v[(p * n).div_ceil(100).max(1) - 1];
        LengthStats {
            min: v[0],
            p10: rank(10),
            median: v[(n - 1) / 2],
            mean: v.iter().sum::<u64>() as f64 / n as f64,
            p90: rank(90),
            max: v[n - 1],
        }
    }
}

/// One input file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextSource {
    /// Path as given / found.
    pub path: String,
    /// `"text"` or `"parquet"`.
    pub format: String,
    /// Bytes read (text) or file size (parquet).
    pub bytes_read: u64,
    /// Lines (rows) read.
    pub lines_read: u64,
    /// Non-empty lines among them.
    pub nonempty_lines: u64,
    /// Whether the file was read to its end (reading stops once enough data exists).
    pub complete: bool,
    /// SHA-256 of the bytes read (text) or of the whole file (parquet).
    pub sha256: String,
}

/// Tokenizer identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenizerInfo {
    /// `"gpt2"`.
    pub name: String,
    /// `"r50k_base"`.
    pub encoding: String,
    /// `"tiktoken-rs <version>"`.
    pub implementation: String,
    /// The check run before preparing: ids of `"Hello world"`.
    pub hello_world: Vec<u32>,
}

/// Ragged token layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RaggedTokens {
    /// `"tokens.npy"` (`<i4`, 1-D).
    pub tokens_file: String,
    /// `"offsets.npy"` (`<i8`, `records + 1`).
    pub offsets_file: String,
    /// Records written.
    pub records: u64,
    /// Distinct records among them.
    pub unique_records: u64,
    /// Tokens in the distinct records.
    pub unique_tokens: u64,
    /// Passes over the distinct records.
    pub cycles: u64,
    /// Whether records repeat.
    pub cycled: bool,
    /// Tokens written.
    pub total_tokens: u64,
    /// Length statistics over the written records.
    pub lengths: LengthStats,
    /// `total_tokens * 4`.
    pub logical_bytes: u64,
    /// SHA-256 over, per record, its length as u64 LE followed by its tokens as i32 LE.
    pub logical_sha256: String,
}

/// Dense token layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DenseTokens {
    /// `"dense.npy"` (`<i4`, `(records, 512)`).
    pub file: String,
    /// Blocks written.
    pub records: u64,
    /// 512.
    pub record_tokens: u64,
    /// Distinct stream tokens used (`min(stream, records * 512)`).
    pub unique_tokens: u64,
    /// Passes over the stream.
    pub cycles: u64,
    /// Whether the stream repeats.
    pub cycled: bool,
    /// `records * 2048`.
    pub logical_bytes: u64,
    /// SHA-256 of the `dense.npy` payload.
    pub logical_sha256: String,
}

/// `metadata.json` of a token preparation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenMetadata {
    /// `"loaderx.datasets.tokens/1"`.
    pub schema: String,
    /// Tokenizer identity.
    pub tokenizer: TokenizerInfo,
    /// Inputs in reading order.
    pub sources: Vec<TextSource>,
    /// `"one record per non-empty line; ..."` (human-readable rule summary).
    pub rules: String,
    /// Tokens in the stream that was read.
    pub stream_tokens: u64,
    /// Whether every source was read to its end.
    pub input_exhausted: bool,
    /// Ragged layout.
    pub ragged: RaggedTokens,
    /// Dense layout.
    pub dense: DenseTokens,
}

const RULES: &str = "one record per non-empty line (whitespace-only lines skipped, trailing \\r \
removed), GPT-2 ids without special tokens; lines are concatenated until >= 16 tokens; groups \
are cut into 512-token pieces and a tail < 16 borrows from the previous piece to 16; a final \
fragment < 16 joins the last record (or borrows to 16); dense ignores boundaries and cuts the \
stream into 512-token blocks; cycling repeats from the start";

/// Expand `sources` (files, or directories of `.txt` / `.raw` / `.parquet` files taken in
/// name order) into the list of files to read.
pub fn expand_sources(sources: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for s in sources {
        if s.is_dir() {
            let mut found = Vec::new();
            for e in fs::read_dir(s).map_err(|e| Error::io(s, "read_dir", e))? {
                let p = e.map_err(|e| Error::io(s, "read_dir", e))?.path();
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                if p.is_file() && matches!(ext, "txt" | "raw" | "parquet") {
                    found.push(p);
                }
            }
            found.sort();
            out.extend(found);
        } else if s.is_file() {
            out.push(s.clone());
        } else {
            return Err(Error::io(
                s,
                "open",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
            ));
        }
    }
    if out.is_empty() {
        let path = sources.first().cloned().unwrap_or_default();
        return Err(Error::EmptySource {
            path,
            expected: "text (.txt/.raw) or .parquet files".into(),
        });
    }
    Ok(out)
}

struct Builder {
    stream: Vec<u32>,
    splitter: RecordSplitter,
    need_records: usize,
    need_tokens: usize,
    pb: indicatif::ProgressBar,
}

impl Builder {
    fn done(&self) -> bool {
        self.splitter.records().len() > self.need_records && self.stream.len() >= self.need_tokens
    }

    /// Tokenize a batch of non-empty lines (in parallel, collected in order).
    fn feed(&mut self, lines: &[String]) -> Result<()> {
        let bpe = gpt2()?;
        let ids: Vec<Vec<u32>> = lines.par_iter().map(|l| bpe.encode_ordinary(l)).collect();
        for t in ids {
            self.splitter.push_line(t.len());
            self.stream.extend_from_slice(&t);
        }
        self.pb
            .set_position(self.splitter.records().len().min(self.need_records) as u64);
        Ok(())
    }
}

fn strip_line(line: &str) -> Option<&str> {
    let l = line.strip_suffix('\n').unwrap_or(line);
    let l = l.strip_suffix('\r').unwrap_or(l);
    (!l.trim().is_empty()).then_some(l)
}

fn read_text(path: &Path, b: &mut Builder) -> Result<TextSource> {
    let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut sha = Sha256::new();
    let (mut bytes_read, mut lines_read, mut nonempty) = (0u64, 0u64, 0u64);
    let mut batch: Vec<String> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut raw = Vec::new();
    let mut complete = false;
    loop {
        raw.clear();
        let got = reader
            .read_until(b'\n', &mut raw)
            .map_err(|e| Error::io(path, "read", e))?;
        if got > 0 {
            sha.update(&raw);
            bytes_read += got as u64;
            lines_read += 1;
            let text = std::str::from_utf8(&raw).map_err(|_| Error::Utf8 {
                path: path.to_path_buf(),
                line: lines_read,
            })?;
            if let Some(l) = strip_line(text) {
                nonempty += 1;
                batch_bytes += l.len();
                batch.push(l.to_string());
            }
        }
        if got == 0 || batch_bytes >= BATCH_BYTES {
            b.feed(&batch)?;
            batch.clear();
            batch_bytes = 0;
            if got == 0 {
                complete = true;
                break;
            }
            if b.done() {
                break;
            }
        }
    }
    Ok(TextSource {
        path: path.display().to_string(),
        format: "text".into(),
        bytes_read,
        lines_read,
        nonempty_lines: nonempty,
        complete,
        sha256: hex(&sha.finalize()),
    })
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &Path, b: &mut Builder) -> Result<TextSource> {
    use arrow_array::{Array, LargeStringArray, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let fail = |reason: String| Error::Parquet {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    let sha = hex(&Sha256::digest(&bytes));
    let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| fail(e.to_string()))?
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let (mut rows, mut nonempty) = (0u64, 0u64);
    let mut complete = true;
    for batch in reader {
        let batch = batch.map_err(|e| fail(e.to_string()))?;
        let col = batch
            .column_by_name("text")
            .ok_or_else(|| fail("expected a string column named 'text', found none".into()))?;
        let mut lines = Vec::new();
        let mut push = |v: Option<&str>| {
            rows += 1;
            if let Some(l) = v.and_then(strip_line) {
                nonempty += 1;
                lines.push(l.to_string());
            }
        };
        if let Some(a) = col.as_any().downcast_ref::<StringArray>() {
            a.iter().for_each(&mut push);
        } else if let Some(a) = col.as_any().downcast_ref::<LargeStringArray>() {
            a.iter().for_each(&mut push);
        } else {
            return Err(fail(format!(
                "expected column 'text' of type Utf8, found {}",
                col.data_type()
            )));
        }
        b.feed(&lines)?;
        if b.done() {
            complete = false;
            break;
        }
    }
    Ok(TextSource {
        path: path.display().to_string(),
        format: "parquet".into(),
        bytes_read: bytes.len() as u64,
        lines_read: rows,
        nonempty_lines: nonempty,
        complete,
        sha256: sha,
    })
}

#[cfg(not(feature = "parquet"))]
fn read_parquet(path: &Path, _b: &mut Builder) -> Result<TextSource> {
    Err(Error::Unsupported {
        path: path.to_path_buf(),
        reason: "parquet input needs the `parquet` cargo feature of the datasets crate".into(),
    })
}

fn i32_bytes(tokens: &[u32], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(tokens.len() * 4);
    for &t in tokens {
        out.extend_from_slice(&(t as i32).to_le_bytes());
    }
}

/// Tokenize `sources` and write `tokens.npy`, `offsets.npy` (Ragged, `ragged_records`
/// records), `dense.npy` (`dense_records` blocks of 512) and `metadata.json` into `out_dir`.
pub fn prepare(
    sources: &[PathBuf],
    out_dir: impl AsRef<Path>,
    dense_records: usize,
    ragged_records: usize,
    progress: bool,
) -> Result<TokenMetadata> {
    let out_dir = out_dir.as_ref();
    if dense_records == 0 && ragged_records == 0 {
        return Err(Error::InvalidArgument(
            "at least one of dense_records and ragged_records must be > 0".into(),
        ));
    }
    let need_tokens = dense_records
        .checked_mul(MAX_TOKENS)
        .ok_or_else(|| Error::InvalidArgument("dense_records is too large".into()))?;
    gpt2()?;
    let files = expand_sources(sources)?;
    let mut b = Builder {
        stream: Vec::new(),
        splitter: RecordSplitter::new(),
        need_records: ragged_records,
        need_tokens,
        pb: progress_bar(ragged_records as u64, progress, "tokens"),
    };
    let mut source_info = Vec::new();
    for f in &files {
        let is_parquet = f.extension().and_then(|e| e.to_str()) == Some("parquet");
        let info = if is_parquet {
            read_parquet(f, &mut b)?
        } else {
            read_text(f, &mut b)?
        };
        source_info.push(info);
        if b.done() {
            break;
        }
    }
    b.pb.finish_and_clear();
    let input_exhausted =
        source_info.len() == files.len() && source_info.iter().all(|s| s.complete);
    let Builder {
        stream, splitter, ..
    } = b;
    let where_ = files[0].clone();
    let unique_all: Vec<Range<usize>> = if input_exhausted {
        splitter.finish().map_err(|found| Error::NotEnoughData {
            path: where_.clone(),
            expected: format!("at least {MIN_TOKENS} GPT-2 tokens"),
            found: format!("{found} tokens"),
        })?
    } else {
        splitter.records().to_vec()
    };
    if stream.is_empty() {
        return Err(Error::NotEnoughData {
            path: where_,
            expected: "non-empty text lines".into(),
            found: "no tokens".into(),
        });
    }
    fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, "create_dir", e))?;

    // Ragged.
    let unique_n = unique_all.len().min(ragged_records);
    let unique = &unique_all[..unique_n];
    let lengths: Vec<u64> = (0..ragged_records)
        .map(|i| unique[i % unique_n].len() as u64)
        .collect();
    let total: u64 = lengths.iter().sum();
    let mut tok_w = NpyWriter::create(out_dir.join("tokens.npy"), "<i4", &[total])?;
    let mut offsets = Vec::with_capacity((ragged_records + 1) * 8);
    offsets.extend_from_slice(&0i64.to_le_bytes());
    let mut ragged_sha = Sha256::new();
    let mut buf = Vec::new();
    let mut at = 0u64;
    for i in 0..ragged_records {
        let r = &unique[i % unique_n];
        i32_bytes(&stream[r.clone()], &mut buf);
        ragged_sha.update((r.len() as u64).to_le_bytes());
        ragged_sha.update(&buf);
        tok_w.write(&buf)?;
        at += r.len() as u64;
        offsets.extend_from_slice(&(at as i64).to_le_bytes());
    }
    tok_w.finish()?;
    crate::npy::write_npy(
        out_dir.join("offsets.npy"),
        "<i8",
        &[ragged_records as u64 + 1],
        &offsets,
    )?;

    // Dense.
    let stream_len = stream.len();
    let mut dense_w = NpyWriter::create(
        out_dir.join("dense.npy"),
        "<i4",
        &[dense_records as u64, MAX_TOKENS as u64],
    )?;
    let mut dense_sha = Sha256::new();
    let mut remaining = need_tokens;
    while remaining > 0 {
        for chunk in stream[..remaining.min(stream_len)].chunks(1 << 18) {
            i32_bytes(chunk, &mut buf);
            dense_sha.update(&buf);
            dense_w.write(&buf)?;
        }
        remaining -= remaining.min(stream_len);
    }
    dense_w.finish()?;

    let unique_tokens: u64 = unique.iter().map(|r| r.len() as u64).sum();
    let meta = TokenMetadata {
        schema: "loaderx.datasets.tokens/1".into(),
        tokenizer: TokenizerInfo {
            name: "gpt2".into(),
            encoding: "r50k_base".into(),
            implementation: format!("tiktoken-rs {TIKTOKEN_VERSION}"),
            hello_world: encode("Hello world")?,
        },
        sources: source_info,
        rules: RULES.into(),
        stream_tokens: stream_len as u64,
        input_exhausted,
        ragged: RaggedTokens {
            tokens_file: "tokens.npy".into(),
            offsets_file: "offsets.npy".into(),
            records: ragged_records as u64,
            unique_records: if ragged_records == 0 {
                0
            } else {
                unique_n as u64
            },
            unique_tokens: if ragged_records == 0 {
                0
            } else {
                unique_tokens
            },
            cycles: ragged_records.div_ceil(unique_n.max(1)) as u64,
            cycled: unique_n < ragged_records,
            total_tokens: total,
            lengths: LengthStats::of(&lengths),
            logical_bytes: total * 4,
            logical_sha256: hex(&ragged_sha.finalize()),
        },
        dense: DenseTokens {
            file: "dense.npy".into(),
            records: dense_records as u64,
            record_tokens: MAX_TOKENS as u64,
            unique_tokens: need_tokens.min(stream_len) as u64,
            cycles: need_tokens.div_ceil(stream_len) as u64,
            cycled: need_tokens > stream_len,
            logical_bytes: (need_tokens * 4) as u64,
            logical_sha256: hex(&dense_sha.finalize()),
        },
    };
    write_json(&out_dir.join("metadata.json"), &meta)?;
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(lines: &[usize]) -> Vec<usize> {
        let mut s = RecordSplitter::new();
        for &l in lines {
            s.push_line(l);
        }
        s.finish().unwrap().iter().map(|r| r.len()).collect()
    }

    #[test]
    fn fragments_merge_with_following_text() {
        assert_eq!(split(&[5, 5, 10, 20]), vec![20, 20]);
        assert_eq!(split(&[16, 3, 40]), vec![16, 43]);
    }

    #[test]
    fn long_groups_split_and_tail_borrows() {
        assert_eq!(split(&[1024]), vec![512, 512]);
        // 1030 = 2 * 512 + 6: the 6-token tail borrows 10 tokens from the piece before it.
        assert_eq!(split(&[1030]), vec![512, 502, 16]);
        assert_eq!(split(&[600]), vec![512, 88]);
    }

    #[test]
    fn trailing_fragment_joins_or_borrows() {
        assert_eq!(split(&[100, 5]), vec![105]);
        assert_eq!(split(&[510, 5]), vec![499, 16]);
        assert!(RecordSplitter::new().finish().is_err());
        let mut s = RecordSplitter::new();
        s.push_line(10);
        assert_eq!(s.finish(), Err(10));
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        let s = LengthStats::of(&v);
        assert_eq!((s.p10, s.median, s.p90, s.min, s.max), (10, 50, 90, 1, 100));
        assert!((s.mean - 50.5).abs() < 1e-12);
    }
}
