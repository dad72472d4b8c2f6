//! Vision preparation on a few real Oxford-IIIT Pet images from `../shared/corpora`.

use std::path::{Path, PathBuf};

use datasets::npy::NpyFile;
use datasets::vision::{self, VisionMetadata};

mod common;

fn corpora() -> Option<PathBuf> {
    common::corpora("oxford-pet", "vision tests need the shared corpora")
}

/// A source directory of symlinks to the named corpus images (nothing is copied).
fn link_source(corpora: &Path, names: &[&str], dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for n in names {
        std::os::unix::fs::symlink(corpora.join("oxford-pet").join(n), dir.join(n)).unwrap();
    }
}

const NAMES: [&str; 3] = ["Abyssinian_1.jpg", "Abyssinian_34.jpg", "Abyssinian_5.jpg"];

/// Independent Pillow-style antialiased bilinear resample along one axis, in f64.
/// `src` is `len_in` samples with the given stride; returns `len_out` samples.
fn resample(src: &[f64], len_in: usize, len_out: usize) -> Vec<f64> {
    let scale = len_in as f64 / len_out as f64;
    let filter_scale = scale.max(1.0);
    let support = filter_scale; // triangle filter support 1.0, widened when downscaling
    let tri = |x: f64| {
        let x = x.abs();
        if x < 1.0 { 1.0 - x } else { 0.0 }
    };
    (0..len_out)
        .map(|i| {
            let center = (i as f64 + 0.5) * scale;
            let lo = ((center - support + 0.5).floor().max(0.0)) as usize;
            let hi = ((center + support + 0.5).floor() as usize).min(len_in);
            let mut acc = 0.0;
            let mut norm = 0.0;
            for (j, &v) in src.iter().enumerate().take(hi).skip(lo) {
                let w = tri((j as f64 - center + 0.5) / filter_scale);
                acc += w * v;
                norm += w;
            }
            acc / norm
        })
        .collect()
}

/// Independent torchvision Resize(256) + CenterCrop(224) → CHW u8.
fn reference_dense(img: &vision::RgbImage) -> Vec<u8> {
    let (w, h) = (img.width as usize, img.height as usize);
    let (nw, nh) = if w <= h {
        (256, 256 * h / w)
    } else {
        (256 * w / h, 256)
    };
    // Python round() on x.5 rounds to even.
    let py_round_half = |d: usize| {
        let half = d / 2;
        if d % 2 == 1 && half % 2 == 1 {
            half + 1
        } else {
            half
        }
    };
    let (left, top) = (py_round_half(nw - 224), py_round_half(nh - 224));
    let mut out = vec![0u8; 3 * 224 * 224];
    for c in 0..3 {
        // Horizontal pass per row.
        let rows: Vec<Vec<f64>> = (0..h)
            .map(|y| {
                let row: Vec<f64> = (0..w)
                    .map(|x| img.pixels[(y * w + x) * 3 + c] as f64)
                    .collect();
                resample(&row, w, nw)
            })
            .collect();
        // Vertical pass per column, only for the cropped columns.
        for x in 0..224 {
            let col: Vec<f64> = (0..h).map(|y| rows[y][left + x]).collect();
            let res = resample(&col, h, nh);
            for y in 0..224 {
                out[c * 224 * 224 + y * 224 + x] = res[top + y].round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

#[test]
fn dense_ragged_and_quirks_on_real_images() {
    let Some(corpora) = corpora() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    link_source(&corpora, &NAMES, &src);
    let out = tmp.path().join("out");
    let meta = vision::prepare(&src, &out, 3, false).unwrap();
    assert_eq!(meta.records, 3);
    assert!(!meta.cycled);
    assert_eq!(meta.source.layout, "flat (name order)");
    let quirks: Vec<(&str, &str)> = meta
        .quirks
        .iter()
        .map(|q| (q.file.as_str(), q.format.as_str()))
        .collect();
    assert_eq!(
        quirks,
        vec![("Abyssinian_34.jpg", "gif"), ("Abyssinian_5.jpg", "png")]
    );

    let dense = NpyFile::open(out.join("dense.npy")).unwrap();
    assert_eq!(dense.descr(), "|u1");
    assert_eq!(dense.shape(), &[3, 3, 224, 224]);
    let values = NpyFile::open(out.join("ragged_values.npy")).unwrap();
    let shapes = NpyFile::open(out.join("ragged_shapes.npy")).unwrap();
    let offsets = NpyFile::open(out.join("ragged_offsets.npy")).unwrap();
    assert_eq!(values.descr(), "|u1");
    assert_eq!(shapes.descr(), "<u8");
    assert_eq!(shapes.shape(), &[3, 3]);
    assert_eq!(offsets.descr(), "<i8");
    assert_eq!(offsets.shape(), &[4]);
    let shapes_v = shapes.to_u64_vec().unwrap();
    let offs = offsets.to_u64_vec().unwrap();
    assert_eq!(values.shape(), &[offs[3]]);
    assert_eq!(meta.ragged.logical_bytes, offs[3]);

    for (i, name) in NAMES.iter().enumerate() {
        let path = src.join(name);
        let img = vision::decode_rgb(&path, &std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(img.pixels.len(), (img.width * img.height * 3) as usize);
        // Ragged: exact CHW of the decoded image.
        assert_eq!(
            &shapes_v[i * 3..i * 3 + 3],
            &[3, img.height as u64, img.width as u64]
        );
        let rec = &values.data()[offs[i] as usize..offs[i + 1] as usize];
        let plane = (img.width * img.height) as usize;
        for p in [0, plane / 3, plane - 1] {
            for c in 0..3 {
                assert_eq!(
                    rec[c * plane + p],
                    img.pixels[p * 3 + c],
                    "{name} pixel {p} ch {c}"
                );
            }
        }
        // Dense: against the independent f64 resample.
        let got = &dense.data()[i * 150528..(i + 1) * 150528];
        let want = reference_dense(&img);
        let diffs: Vec<i32> = got
            .iter()
            .zip(&want)
            .map(|(&a, &b)| (a as i32 - b as i32).abs())
            .collect();
        let max = *diffs.iter().max().unwrap();
        let mean = diffs.iter().map(|&d| d as f64).sum::<f64>() / diffs.len() as f64;
        eprintln!(
            "{name} {}x{}: max |diff| {max}, mean |diff| {mean:.4}",
            img.width, img.height
        );
        assert!(max <= 2, "{name}: max abs diff {max}");
        assert!(mean < 0.5, "{name}: mean abs diff {mean}");
    }
    // The PNG is RGBA in the file; the record has 3 channels (alpha dropped).
    assert_eq!(shapes_v[6], 3);

    let back: VisionMetadata = datasets::read_metadata(out.join("metadata.json")).unwrap();
    assert_eq!(back, meta);
}

#[test]
fn cycling_is_recorded_and_exact() {
    let Some(corpora) = corpora() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    link_source(&corpora, &NAMES[..2], &src);
    let out = tmp.path().join("out");
    let meta = vision::prepare(&src, &out, 5, false).unwrap();
    assert!(meta.cycled);
    assert_eq!((meta.records, meta.unique_records, meta.cycles), (5, 2, 3));
    assert_eq!(meta.source.files_used, 2);
    let dense = NpyFile::open(out.join("dense.npy")).unwrap();
    let rec = |i: usize| &dense.data()[i * 150528..(i + 1) * 150528];
    assert_eq!(rec(0), rec(2));
    assert_eq!(rec(1), rec(3));
    assert_eq!(rec(0), rec(4));
    assert_ne!(rec(0), rec(1));
    let offs = NpyFile::open(out.join("ragged_offsets.npy"))
        .unwrap()
        .to_u64_vec()
        .unwrap();
    assert_eq!(offs[1] - offs[0], offs[3] - offs[2]);
}

#[test]
fn deterministic_digests() {
    let Some(corpora) = corpora() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    link_source(
        &corpora,
        &["Abyssinian_1.jpg", "Bengal_10.jpg", "Abyssinian_5.jpg"],
        &src,
    );
    let a = vision::prepare(&src, tmp.path().join("a"), 4, false).unwrap();
    let b = vision::prepare(&src, tmp.path().join("b"), 4, false).unwrap();
    assert_eq!(a, b);
    let fa = std::fs::read(tmp.path().join("a/dense.npy")).unwrap();
    let fb = std::fs::read(tmp.path().join("b/dense.npy")).unwrap();
    assert_eq!(fa, fb);
    // The digest is of the payload as stored.
    let d = NpyFile::open(tmp.path().join("a/dense.npy")).unwrap();
    assert_eq!(
        datasets::hex(&sha2_digest(d.data())),
        a.dense.logical_sha256
    );
}

fn sha2_digest(b: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(b).to_vec()
}

#[test]
fn archive_layout_uses_trainval_order() {
    let Some(corpora) = corpora() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pets");
    link_source(&corpora, &NAMES, &root.join("images"));
    std::fs::create_dir_all(root.join("annotations")).unwrap();
    std::fs::write(
        root.join("annotations/trainval.txt"),
        "Abyssinian_5 1 1 1\nAbyssinian_1 1 1 1\n",
    )
    .unwrap();
    let listing = vision::list_source(&root).unwrap();
    let names: Vec<_> = listing
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["Abyssinian_5.jpg", "Abyssinian_1.jpg"]);
    let meta = vision::prepare(&root, tmp.path().join("out"), 2, false).unwrap();
    assert_eq!(meta.source.layout, "images/ + annotations/trainval.txt");
    assert_eq!(meta.source.file_count, 2);

    std::fs::write(root.join("annotations/trainval.txt"), "Nope_1 1 1 1\n").unwrap();
    let err = vision::list_source(&root).unwrap_err();
    assert!(matches!(err, datasets::Error::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("Nope_1.jpg"), "{err}");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let err = vision::prepare(tmp.path(), tmp.path().join("o"), 1, false).unwrap_err();
    assert!(matches!(err, datasets::Error::EmptySource { .. }), "{err}");
    std::fs::write(tmp.path().join("x.jpg"), b"not an image").unwrap();
    let err = vision::prepare(tmp.path(), tmp.path().join("o"), 1, false).unwrap_err();
    assert!(matches!(err, datasets::Error::Decode { .. }), "{err}");
    assert!(err.to_string().contains("x.jpg"), "{err}");
    let err = vision::prepare(tmp.path(), tmp.path().join("o"), 0, false).unwrap_err();
    assert!(matches!(err, datasets::Error::InvalidArgument(_)), "{err}");
}

#[test]
fn pinned_versions_match_cargo_lock() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
        .unwrap_or_default();
    if lock.is_empty() {
        eprintln!("SKIP: no Cargo.lock");
        return;
    }
    for (name, v) in [
        ("zune-jpeg", vision::ZUNE_JPEG_VERSION),
        ("image", vision::IMAGE_VERSION),
        ("fast_image_resize", vision::FAST_IMAGE_RESIZE_VERSION),
        ("tiktoken-rs", datasets::tokens::TIKTOKEN_VERSION),
    ] {
        let entry = format!("name = \"{name}\"\nversion = \"{v}\"");
        assert!(lock.contains(&entry), "Cargo.lock does not pin {name} {v}");
    }
}
