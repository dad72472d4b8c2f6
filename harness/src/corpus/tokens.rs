//! The real token corpus: which text files feed which layout ([`plan`]), and its preparation
//! ([`prepare`]) into one directory the store and loader tables read.
//!
//! * **Ragged** records come from WikiText alone (the reference's Ragged token table is
//!   WikiText-103 train): the WikiText files other than the held-out split, and only the `train`
//!   files when there are any. Other prose (sentence-per-line text) would shorten the records.
//! * **Dense** blocks ignore record boundaries, so they take every file but the held-out one.
//! * **Held out**: the WikiText validation split (a file whose name contains `valid`) is never
//!   stored. Its records (same rule) and its 512-token blocks are written under `held-out/` and
//!   used only to train the `zrecord-zstdict` dictionaries, so a dictionary never sees the
//!   records it compresses (with heavy cycling a dictionary trained on the stored records would
//!   have seen them all). The shared corpus's `wiki.valid.tokens.txt` is moreover the tokenized
//!   WikiText variant (`<unk>` for rare words, ` @-@ ` splits, spaces before punctuation), not
//!   the raw text the reference stores: one more reason to keep it out of the stored records.
//!
//! Ragged and Dense are each one [`datasets::tokens::prepare`] (the crate's exact rule), moved
//! into one directory with a composed `metadata.json` (the Ragged and Dense layouts with their
//! sources, the held-out sample, the decisions above as `notes`). When no WikiText file is among
//! the inputs, both layouts take every file and the dictionaries are trained on the stored
//! records; the metadata and captions say so.

use std::path::{Path, PathBuf};

use datasets::npy::write_npy;
use datasets::tokens::{self, LengthStats, RecordSplitter};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{HarnessError, Result, write_json};

/// Which files feed which layout.
#[derive(Clone, Debug, PartialEq)]
pub struct TextPlan {
    pub ragged: Vec<PathBuf>,
    pub dense: Vec<PathBuf>,
    pub held_out: Vec<PathBuf>,
    /// Human-readable decisions, for the metadata and the captions.
    pub notes: Vec<String>,
}

fn lower_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

fn is_wiki(p: &Path) -> bool {
    p.display().to_string().to_lowercase().contains("wiki")
}

/// Splits the input files (in reading order) into the Ragged, Dense and held-out sources.
pub fn plan(files: &[PathBuf]) -> TextPlan {
    let held_out: Vec<PathBuf> = files
        .iter()
        .filter(|p| is_wiki(p) && lower_name(p).contains("valid"))
        .cloned()
        .collect();
    let stored: Vec<PathBuf> = files
        .iter()
        .filter(|p| !held_out.contains(p))
        .cloned()
        .collect();
    let wiki: Vec<PathBuf> = stored.iter().filter(|p| is_wiki(p)).cloned().collect();
    let train: Vec<PathBuf> = wiki
        .iter()
        .filter(|p| lower_name(p).contains("train"))
        .cloned()
        .collect();
    let mut notes = Vec::new();
    let ragged = if !train.is_empty() {
        notes.push("Ragged records: the WikiText train files only".to_string());
        train
    } else if !wiki.is_empty() {
        notes.push(
            "Ragged records: WikiText only (other prose, sentence per line, would shorten them)"
                .to_string(),
        );
        wiki
    } else {
        notes.push(
            "Ragged records: every input file (no WikiText file among the inputs)".to_string(),
        );
        stored.clone()
    };
    if held_out.is_empty() {
        notes.push(
            "no held-out text: zrecord-zstdict dictionaries are trained on the stored records"
                .to_string(),
        );
    }
    for h in &held_out {
        let mut n = format!(
            "{} is held out: never stored, used only to train the zrecord-zstdict dictionaries",
            h.display()
        );
        if lower_name(h).contains(".tokens") {
            n.push_str(
                " (it is the tokenized WikiText variant, with <unk> for rare words, ` @-@ ` \
                 splits and spaces before punctuation; the reference stores raw text)",
            );
        }
        notes.push(n);
    }
    notes.push("Dense blocks: every input file but the held-out ones".to_string());
    TextPlan {
        ragged,
        dense: stored,
        held_out,
        notes,
    }
}

/// Text inputs under `root` (recursively), WikiText files first, then the rest in name order.
pub fn text_files(root: &Path) -> Result<Vec<PathBuf>> {
    if root.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(HarnessError::io("list", &d))?;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| matches!(x, "txt" | "raw" | "parquet"))
            {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| (!is_wiki(p), p.clone()));
    if out.is_empty() {
        return Err(HarnessError::missing_in(".txt/.raw/.parquet files", root));
    }
    Ok(out)
}

/// What a preparation was asked for (a cached corpus is reused only for the same request).
#[derive(Clone, Debug)]
pub struct Request {
    pub sources: Vec<String>,
    pub dense_records: usize,
    /// Ragged records, at least this many ...
    pub ragged_records: usize,
    /// ... and at least this many logical bytes (0: no floor).
    pub ragged_min_bytes: u64,
}

impl Request {
    pub fn to_json(&self) -> Value {
        json!({"sources": self.sources, "dense_records": self.dense_records,
               "ragged_records": self.ragged_records, "ragged_min_bytes": self.ragged_min_bytes})
    }
}

fn tokens_err(source: datasets::Error) -> HarnessError {
    HarnessError::datasets("token preparation failed")(source)
}

/// Prepares the corpus of `plan` into `dir` (replaced): see the module docs.
pub fn prepare(plan: &TextPlan, dir: &Path, req: &Request) -> Result<Value> {
    let _ = std::fs::remove_dir_all(dir);
    let stage = |name: &str| dir.join(format!(".{name}"));
    // Ragged: raise the record count until the logical bytes reach the floor.
    let mut r = req.ragged_records.max(1);
    let ragged = loop {
        let m = tokens::prepare(&plan.ragged, stage("ragged"), 0, r, true).map_err(tokens_err)?;
        let bytes = m.ragged.logical_bytes.max(1);
        if bytes >= req.ragged_min_bytes {
            break m;
        }
        let scaled = (r as f64 * req.ragged_min_bytes as f64 / bytes as f64).ceil() as usize;
        r = scaled.max(r + 1);
    };
    let dense = tokens::prepare(&plan.dense, stage("dense"), req.dense_records, 0, true)
        .map_err(tokens_err)?;
    let mv = |from: PathBuf, to: &str| {
        std::fs::rename(&from, dir.join(to)).map_err(HarnessError::io("move", &from))
    };
    mv(stage("ragged").join("tokens.npy"), "tokens.npy")?;
    mv(stage("ragged").join("offsets.npy"), "offsets.npy")?;
    mv(stage("dense").join("dense.npy"), "dense.npy")?;
    let _ = std::fs::remove_dir_all(stage("ragged"));
    let _ = std::fs::remove_dir_all(stage("dense"));
    let held_out = if plan.held_out.is_empty() {
        Value::Null
    } else {
        held_out_sample(&plan.held_out, &dir.join(HELD_OUT))?
    };
    let rm = serde_json::to_value(&ragged)?;
    let dm = serde_json::to_value(&dense)?;
    let meta = json!({
        "schema": "loaderx.harness.tokens/2",
        "tokenizer": rm["tokenizer"],
        "rules": rm["rules"],
        "ragged": rm["ragged"],
        "ragged_sources": rm["sources"],
        "ragged_stream_tokens": rm["stream_tokens"],
        "dense": dm["dense"],
        "dense_sources": dm["sources"],
        "dense_stream_tokens": dm["stream_tokens"],
        "held_out": held_out,
        "notes": plan.notes,
        "request": req.to_json(),
    });
    write_json(&dir.join("metadata.json"), &meta)?;
    Ok(meta)
}

/// The held-out sample's directory inside a token corpus.
pub const HELD_OUT: &str = "held-out";

/// Tokenizes the held-out files with the same line rule and Ragged rule (no cycling) and writes
/// `tokens.npy` / `offsets.npy` (its records) and `dense.npy` (its stream in whole 512-token
/// blocks) into `out`.
fn held_out_sample(files: &[PathBuf], out: &Path) -> Result<Value> {
    std::fs::create_dir_all(out).map_err(HarnessError::io("create", out))?;
    let mut stream: Vec<u32> = Vec::new();
    let mut splitter = RecordSplitter::new();
    let mut sources = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).map_err(HarnessError::io("read", f))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| HarnessError::Format {
            path: f.clone(),
            expected: "UTF-8 text",
            found: format!("a byte that is not UTF-8 at {}", e.valid_up_to()),
        })?;
        for line in text.split('\n') {
            let l = line.strip_suffix('\r').unwrap_or(line);
            if l.trim().is_empty() {
                continue;
            }
            let ids = tokens::encode(l).map_err(tokens_err)?;
            splitter.push_line(ids.len());
            stream.extend_from_slice(&ids);
        }
        sources.push(
            json!({"path": f.display().to_string(), "bytes": bytes.len(),
                            "sha256": datasets::hex(&Sha256::digest(&bytes))}),
        );
    }
    let records = splitter.finish().map_err(|found| HarnessError::Count {
        what: "GPT-2 tokens in the held-out text",
        expected: "at least 16".into(),
        found: found as u64,
    })?;
    let le =
        |ids: &[u32]| -> Vec<u8> { ids.iter().flat_map(|&t| (t as i32).to_le_bytes()).collect() };
    let npy = HarnessError::datasets("write the held-out sample");
    write_npy(
        out.join("tokens.npy"),
        "<i4",
        &[stream.len() as u64],
        &le(&stream),
    )
    .map_err(npy)?;
    let ends = std::iter::once(0).chain(records.iter().map(|r| r.end as i64));
    let offsets: Vec<u8> = ends.flat_map(i64::to_le_bytes).collect();
    write_npy(
        out.join("offsets.npy"),
        "<i8",
        &[records.len() as u64 + 1],
        &offsets,
    )
    .map_err(npy)?;
    let blocks = stream.len() / tokens::MAX_TOKENS;
    write_npy(
        out.join("dense.npy"),
        "<i4",
        &[blocks as u64, tokens::MAX_TOKENS as u64],
        &le(&stream[..blocks * tokens::MAX_TOKENS]),
    )
    .map_err(npy)?;
    let lengths: Vec<u64> = records.iter().map(|r| r.len() as u64).collect();
    Ok(json!({
        "dir": HELD_OUT,
        "use": "zrecord-zstdict dictionary training only; never stored in a table",
        "sources": sources,
        "records": records.len(),
        "tokens": stream.len(),
        "lengths": LengthStats::of(&lengths),
        "dense_blocks": blocks,
    }))
}

/// The caption line of a token table from its corpus metadata (`None` for a synthetic corpus).
pub fn caption(meta: &Value, ragged: bool) -> Option<String> {
    if meta.get("schema").and_then(Value::as_str) != Some("loaderx.harness.tokens/2") {
        return None;
    }
    let names = |v: &Value| -> String {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("path").and_then(Value::as_str))
            .map(|p| {
                Path::new(p)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let dict = match meta["held_out"].get("sources") {
        Some(s) => format!(
            "zrecord-zstdict dictionaries trained on held-out text never stored ({})",
            names(s)
        ),
        None => "zrecord-zstdict dictionaries trained on the stored records (no held-out text)"
            .to_string(),
    };
    Some(if ragged {
        let r = &meta["ragged"];
        let l = &r["lengths"];
        format!(
            "Records from {} only: {} unique records cycled {} times; lengths p10 {} / median {} \
             / mean {:.1} / p90 {} tokens; {dict}.",
            names(&meta["ragged_sources"]),
            r["unique_records"],
            r["cycles"],
            l["p10"],
            l["median"],
            l["mean"].as_f64().unwrap_or(f64::NAN),
            l["p90"]
        )
    } else {
        let d = &meta["dense"];
        format!(
            "Blocks cut from the whole stream of {} ({} tokens, cycled {} times); {dict}.",
            names(&meta["dense_sources"]),
            d["unique_tokens"],
            d["cycles"]
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    /// WikiText's test (or train) file is the ragged source, its validation file held out, and
    /// the dense blocks read the other texts too; the `<unk>` note only for the shared layout.
    #[test]
    fn wikitext_plans_hold_out_validation() {
        let shared = [
            "text/wikitext2/wiki.test.raw.txt",
            "text/wikitext2/wiki.valid.tokens.txt",
            "text/supplement/abc.txt",
            "text/supplement/brown.txt",
        ];
        let full = [
            "wikitext-103-raw/wiki.test.raw",
            "wikitext-103-raw/wiki.train.raw",
            "wikitext-103-raw/wiki.valid.raw",
        ];
        let dense = [shared[0], shared[2], shared[3]];
        for (files, ragged, held_out, dense, unk) in [
            (&shared[..], shared[0], shared[1], &dense[..], true),
            (&full[..], full[1], full[2], &[full[0], full[1]][..], false),
        ] {
            let p = plan(&paths(files));
            assert_eq!(p.ragged, paths(&[ragged]));
            assert_eq!(p.held_out, paths(&[held_out]));
            assert_eq!(p.dense, paths(dense));
            assert_eq!(p.notes.iter().any(|n| n.contains("<unk>")), unk);
        }
    }

    #[test]
    fn no_wikitext_means_no_held_out() {
        let files = paths(&["prose/a.txt", "prose/valid.txt"]);
        let p = plan(&files);
        assert_eq!(p.ragged, files);
        assert_eq!(p.dense, files);
        assert!(p.held_out.is_empty());
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("trained on the stored records"))
        );
    }
}
