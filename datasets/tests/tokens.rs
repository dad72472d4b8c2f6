//! Token preparation: GPT-2 ids, the fragment/split rules, cycling and determinism.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use datasets::npy::NpyFile;
use datasets::tokens::{self, MAX_TOKENS, MIN_TOKENS};

mod common;

fn corpora() -> Option<PathBuf> {
    common::corpora("text", "corpus token tests need it")
}

/// `k` tokens exactly: "a" then " a" repeated (each is one GPT-2 token).
fn line_of(k: usize) -> String {
    let mut s = String::from("a");
    for _ in 1..k {
        s.push_str(" a");
    }
    s
}

fn read_i32(f: &NpyFile) -> Vec<i32> {
    f.data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn record_lengths(dir: &Path) -> Vec<u64> {
    let off = NpyFile::open(dir.join("offsets.npy"))
        .unwrap()
        .to_u64_vec()
        .unwrap();
    off.windows(2).map(|w| w[1] - w[0]).collect()
}

#[test]
fn known_gpt2_ids() {
    assert_eq!(tokens::encode("Hello world").unwrap(), vec![15496, 995]);
    assert_eq!(tokens::encode(" Hello world").unwrap(), vec![18435, 995]);
    assert_eq!(
        tokens::encode("The quick brown fox").unwrap(),
        vec![464, 2068, 7586, 21831]
    );
    assert_eq!(tokens::encode(&line_of(7)).unwrap().len(), 7);
    // Special tokens are plain text here.
    assert!(tokens::encode("<|endoftext|>").unwrap().len() > 1);
}

/// GPT-2's byte ↔ unicode table (the `bytes_to_unicode` of the original encoder).
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(&cs)
        .map(|(&b, &c)| (char::from_u32(c).unwrap(), b as u8))
        .collect()
}

#[test]
fn vocabulary_matches_shared_gpt2_encoder_json() {
    let Some(c) = corpora() else { return };
    let text = std::fs::read_to_string(c.join("gpt2/encoder.json")).unwrap();
    let enc: HashMap<String, u32> = serde_json::from_str(&text).unwrap();
    assert_eq!(enc.len(), 50257);
    let map = unicode_to_byte();
    let bpe = tokens::gpt2().unwrap();
    let mut checked = 0;
    for (tok, &id) in &enc {
        if tok == "<|endoftext|>" {
            assert_eq!(id, 50256);
            continue;
        }
        let bytes: Vec<u8> = tok.chars().map(|ch| map[&ch]).collect();
        assert_eq!(bpe.decode_bytes(&[id]).unwrap(), bytes, "id {id}");
        checked += 1;
    }
    assert_eq!(checked, 50256);
    assert_eq!(enc["The"], 464);
    assert_eq!(enc["\u{120}quick"], 2068);
}

#[test]
fn fragment_and_split_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("crafted.txt");
    // Group 1: 5 + 5 + 10 = 20. Then blank lines (skipped). Group 2: 1030 → 512, 502, 16.
    // Group 3: 16 alone. Group 4: 600 → 512, 88. Trailing 5 joins the last record (93).
    let lines = [
        line_of(5),
        line_of(5),
        "   ".to_string(),
        line_of(10),
        String::new(),
        line_of(1030),
        line_of(16),
        line_of(600),
        line_of(5),
    ];
    std::fs::write(&f, lines.join("\r\n")).unwrap();
    let out = tmp.path().join("out");
    let meta = tokens::prepare(std::slice::from_ref(&f), &out, 3, 7, false).unwrap();
    assert_eq!(record_lengths(&out), vec![20, 512, 502, 16, 16, 512, 93]);
    assert!(meta.input_exhausted);
    assert!(!meta.ragged.cycled);
    assert_eq!(meta.stream_tokens, 5 + 5 + 10 + 1030 + 16 + 600 + 5);
    assert_eq!(meta.sources[0].nonempty_lines, 7);
    assert_eq!(meta.sources[0].lines_read, 9);
    // Every token kept exactly once, in order.
    let toks = read_i32(&NpyFile::open(out.join("tokens.npy")).unwrap());
    let expected: Vec<i32> = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .flat_map(|l| tokens::encode(l).unwrap())
        .map(|t| t as i32)
        .collect();
    assert_eq!(toks, expected);
    // Dense ignores boundaries.
    let dense = NpyFile::open(out.join("dense.npy")).unwrap();
    assert_eq!(dense.descr(), "<i4");
    assert_eq!(dense.shape(), &[3, 512]);
    assert_eq!(read_i32(&dense), expected[..1536].to_vec());
    assert!(!meta.dense.cycled);

    // A trailing fragment that does not fit borrows from the record before it.
    let g = tmp.path().join("tail.txt");
    std::fs::write(&g, format!("{}\n{}\n", line_of(510), line_of(5))).unwrap();
    tokens::prepare(&[g], tmp.path().join("tail"), 1, 2, false).unwrap();
    assert_eq!(record_lengths(&tmp.path().join("tail")), vec![499, 16]);
}

#[test]
fn cycling_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("small.txt");
    std::fs::write(
        &f,
        format!("{}\n{}\n{}\n", line_of(20), line_of(30), line_of(10)),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let meta = tokens::prepare(&[f], &out, 2, 7, false).unwrap();
    // Records: 20, 40 (30 + trailing 10) → 2 unique.
    assert_eq!(meta.ragged.unique_records, 2);
    assert_eq!(meta.ragged.unique_tokens, 60);
    assert_eq!(meta.ragged.cycles, 4);
    assert!(meta.ragged.cycled);
    assert_eq!(record_lengths(&out), vec![20, 40, 20, 40, 20, 40, 20]);
    assert_eq!(meta.ragged.total_tokens, 200);
    assert_eq!(meta.stream_tokens, 60);
    assert_eq!(meta.dense.unique_tokens, 60);
    assert_eq!(meta.dense.cycles, 18); // ceil(1024 / 60)
    assert!(meta.dense.cycled);
    let dense = read_i32(&NpyFile::open(out.join("dense.npy")).unwrap());
    let stream = read_i32(&NpyFile::open(out.join("tokens.npy")).unwrap());
    for (j, t) in dense.iter().enumerate() {
        assert_eq!(*t, stream[j % 60]);
    }
    let s = meta.ragged.lengths;
    assert_eq!((s.min, s.max, s.median), (20, 40, 20));
}

#[test]
fn real_text_slice_rules_and_determinism() {
    let Some(c) = corpora() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(c.join("text/wikitext2/wiki.test.raw.txt")).unwrap();
    let slice: String = text.lines().take(300).map(|l| format!("{l}\n")).collect();
    let f = tmp.path().join("slice.txt");
    std::fs::write(&f, &slice).unwrap();

    // Ask for more records than exist: all of them, then cycled.
    let full = tokens::prepare(
        std::slice::from_ref(&f),
        tmp.path().join("full"),
        4,
        100_000,
        false,
    )
    .unwrap();
    assert!(full.ragged.cycled);
    let u = full.ragged.unique_records as usize;
    let lens = record_lengths(&tmp.path().join("full"));
    assert!(
        lens.iter()
            .all(|&l| (MIN_TOKENS as u64..=MAX_TOKENS as u64).contains(&l))
    );
    let all_tokens: u64 = lens[..u].iter().sum();
    assert_eq!(all_tokens, full.stream_tokens);
    let expected_stream: usize = slice
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| tokens::encode(l).unwrap().len())
        .sum();
    assert_eq!(full.stream_tokens as usize, expected_stream);
    eprintln!(
        "300 lines: {} tokens, {} records, p10 {} median {} mean {:.1} p90 {}",
        full.stream_tokens,
        u,
        full.ragged.lengths.p10,
        full.ragged.lengths.median,
        full.ragged.lengths.mean,
        full.ragged.lengths.p90
    );

    // A shorter request stops reading early but yields the same first records.
    let few = tokens::prepare(
        std::slice::from_ref(&f),
        tmp.path().join("few"),
        1,
        20,
        false,
    )
    .unwrap();
    assert!(!few.ragged.cycled);
    assert_eq!(record_lengths(&tmp.path().join("few")), lens[..20].to_vec());
    let a = read_i32(&NpyFile::open(tmp.path().join("few/tokens.npy")).unwrap());
    let b = read_i32(&NpyFile::open(tmp.path().join("full/tokens.npy")).unwrap());
    assert_eq!(a[..], b[..a.len()]);

    // Deterministic.
    let again = tokens::prepare(&[f], tmp.path().join("again"), 4, 100_000, false).unwrap();
    assert_eq!(again.ragged.logical_sha256, full.ragged.logical_sha256);
    assert_eq!(again.dense.logical_sha256, full.dense.logical_sha256);
    assert_eq!(again, full);
}

#[test]
fn directory_sources_in_name_order() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("dir");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("b.txt"), line_of(20)).unwrap();
    std::fs::write(d.join("a.txt"), line_of(30)).unwrap();
    std::fs::write(d.join("ignored.md"), line_of(40)).unwrap();
    let meta = tokens::prepare(&[d], tmp.path().join("out"), 1, 2, false).unwrap();
    assert_eq!(record_lengths(&tmp.path().join("out")), vec![30, 20]);
    assert!(meta.sources[0].path.ends_with("a.txt"));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.txt");
    let err = tokens::prepare(&[missing], tmp.path().join("o"), 1, 1, false).unwrap_err();
    assert!(err.to_string().contains("missing.txt"), "{err}");
    let short = tmp.path().join("short.txt");
    std::fs::write(&short, "Hello world\n\n").unwrap();
    let err = tokens::prepare(&[short], tmp.path().join("o"), 1, 1, false).unwrap_err();
    assert!(
        matches!(err, datasets::Error::NotEnoughData { .. }),
        "{err}"
    );
    let bin = tmp.path().join("bin.txt");
    std::fs::write(&bin, b"ok line\n\xff\xfe\n").unwrap();
    let err = tokens::prepare(&[bin], tmp.path().join("o"), 1, 1, false).unwrap_err();
    assert!(
        matches!(err, datasets::Error::Utf8 { line: 2, .. }),
        "{err}"
    );
    let err = tokens::prepare(
        &[tmp.path().to_path_buf()],
        tmp.path().join("o"),
        0,
        0,
        false,
    )
    .unwrap_err();
    assert!(matches!(err, datasets::Error::InvalidArgument(_)), "{err}");
    #[cfg(not(feature = "parquet"))]
    {
        let pq = tmp.path().join("x.parquet");
        std::fs::write(&pq, b"PAR1").unwrap();
        let err = tokens::prepare(&[pq], tmp.path().join("o"), 1, 1, false).unwrap_err();
        assert!(matches!(err, datasets::Error::Unsupported { .. }), "{err}");
    }
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_shards_read_like_text() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, RecordBatch, StringArray};

    let tmp = tempfile::tempdir().unwrap();
    // Hugging Face WikiText rows: empty strings and lines ending in "\n".
    let rows = vec![
        String::new(),
        format!("{}\n", line_of(20)),
        String::new(),
        format!("{}\n", line_of(30)),
    ];
    let col: ArrayRef = Arc::new(StringArray::from(rows.clone()));
    let batch = RecordBatch::try_from_iter([("text", col)]).unwrap();
    let pq = tmp.path().join("train-00000-of-00001.parquet");
    let file = std::fs::File::create(&pq).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let txt = tmp.path().join("same.txt");
    std::fs::write(&txt, rows.concat()).unwrap();
    let a = tokens::prepare(&[pq], tmp.path().join("a"), 1, 2, false).unwrap();
    let b = tokens::prepare(&[txt], tmp.path().join("b"), 1, 2, false).unwrap();
    assert_eq!(a.sources[0].format, "parquet");
    assert_eq!(a.sources[0].lines_read, 4);
    assert_eq!(a.sources[0].nonempty_lines, 2);
    assert_eq!(a.ragged.logical_sha256, b.ragged.logical_sha256);
    assert_eq!(record_lengths(&tmp.path().join("a")), vec![20, 30]);
}
