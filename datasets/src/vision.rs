//! Oxford-IIIT Pet → Dense (`uint8[3,224,224]`) and Ragged (`uint8[3,H,W]`) records.
//!
//! See the crate documentation for the exact transform and file layout.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use crate::error::{Error, Result};
use crate::npy::{NpyWriter, write_npy};
use crate::{hex, progress_bar, write_json};

/// Short side after the resize.
pub const RESIZE_SHORT: u32 = 256;
/// Side of the center crop.
pub const CROP: u32 = 224;
/// Bytes of one Dense record (`3 * 224 * 224`).
pub const DENSE_RECORD_BYTES: usize = 3 * (CROP as usize) * (CROP as usize);

/// Version of `zune-jpeg` (pinned in `Cargo.toml`).
pub const ZUNE_JPEG_VERSION: &str = "0.5.15";
/// Version of `image` (pinned in `Cargo.toml`; decodes the GIF/PNG quirks).
pub const IMAGE_VERSION: &str = "0.25.10";
/// Version of `fast_image_resize` (pinned in `Cargo.toml`).
pub const FAST_IMAGE_RESIZE_VERSION: &str = "6.1.0";

/// Human-readable description of the Dense transform, stored in the metadata.
pub const DENSE_TRANSFORM: &str = "decode to RGB (palette/RGBA converted like PIL convert('RGB'): \
palette lookup, alpha dropped); resize so the short side is 256 and the long side is \
floor(long*256/short) with an antialiased bilinear (triangle) filter whose support is scaled by \
the downscale factor (Pillow/torchvision Resize(256) semantics, fast_image_resize \
Convolution(Bilinear)); center crop 224x224 at offsets round_half_even((H'-224)/2), \
round_half_even((W'-224)/2) (torchvision CenterCrop); store uint8 CHW";

/// Human-readable description of the Ragged transform, stored in the metadata.
pub const RAGGED_TRANSFORM: &str =
    "decode to RGB (same as Dense); native resolution; store uint8 CHW";

/// A decoded RGB image, interleaved HWC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `height * width * 3` bytes, row-major, RGB interleaved.
    pub pixels: Vec<u8>,
    /// Container format actually found ("jpeg", "png", "gif", ...).
    pub format: &'static str,
}

/// The ordered list of source images.
#[derive(Debug, Clone)]
pub struct SourceListing {
    /// Directory the images live in (`<source>/images` or `<source>` itself).
    pub images_dir: PathBuf,
    /// `annotations/trainval.txt` when it was used to choose and order the images.
    pub split_file: Option<PathBuf>,
    /// Images in record order.
    pub files: Vec<PathBuf>,
}

/// Where the images came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VisionSource {
    /// The directory passed to [`prepare`].
    pub path: String,
    /// `"images/ + annotations/trainval.txt"`, `"images/ (name order)"` or `"flat (name order)"`.
    pub layout: String,
    /// Number of candidate images in the source (the split list, or all `.jpg` files).
    pub file_count: u64,
    /// Number of distinct files used (the first `min(N, file_count)`).
    pub files_used: u64,
    /// SHA-256 of the used file names in order, each followed by `\n`.
    pub file_list_sha256: String,
    /// SHA-256 over `"<name>\t<sha256 of file bytes>\n"` for every used file, in order.
    pub content_sha256: String,
    /// Total bytes of the used source files.
    pub source_bytes: u64,
}

/// A file whose container format differs from its `.jpg` name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Quirk {
    /// File name.
    pub file: String,
    /// Real format found by content sniffing.
    pub format: String,
}

/// min / median / max of a dimension (median = lower median, element `(n-1)/2` of the
/// sorted values).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct DimStats {
    /// Minimum.
    pub min: u64,
    /// Lower median.
    pub median: u64,
    /// Maximum.
    pub max: u64,
}

/// Dense layout description.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DenseVision {
    /// `"dense.npy"`.
    pub file: String,
    /// `"uint8"`.
    pub dtype: String,
    /// `[N, 3, 224, 224]`.
    pub shape: Vec<u64>,
    /// The transform.
    pub transform: String,
    /// `N * 150528`.
    pub logical_bytes: u64,
    /// SHA-256 of the payload of `dense.npy` (records in order, C order).
    pub logical_sha256: String,
}

/// Ragged layout description.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RaggedVision {
    /// `"ragged_values.npy"`: uint8, 1-D, all records' CHW bytes back to back.
    pub values_file: String,
    /// `"ragged_shapes.npy"`: uint64 `(N, 3)`, rows `[3, H, W]`.
    pub shapes_file: String,
    /// `"ragged_offsets.npy"`: int64 `(N+1,)`, element offsets into the values.
    pub offsets_file: String,
    /// `"uint8"`.
    pub dtype: String,
    /// `"CHW"`.
    pub layout: String,
    /// The transform.
    pub transform: String,
    /// Height statistics over the N records.
    pub height: DimStats,
    /// Width statistics over the N records.
    pub width: DimStats,
    /// Total values bytes.
    pub logical_bytes: u64,
    /// SHA-256 over, per record in order, its shape as three little-endian u64
    /// (`3, H, W`) followed by its CHW bytes.
    pub logical_sha256: String,
}

/// `metadata.json` of a vision preparation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VisionMetadata {
    /// `"loaderx.datasets.vision/1"`.
    pub schema: String,
    /// Source description.
    pub source: VisionSource,
    /// Number of records `N`.
    pub records: u64,
    /// Distinct images among the records.
    pub unique_records: u64,
    /// Whether the images were repeated (record `i` is image `i % unique_records`).
    pub cycled: bool,
    /// Number of passes over the unique images (`ceil(N / unique_records)`).
    pub cycles: u64,
    /// Decoder and resizer crates with versions.
    pub decoders: std::collections::BTreeMap<String, String>,
    /// Files whose content is not JPEG (converted to RGB).
    pub quirks: Vec<Quirk>,
    /// Dense layout.
    pub dense: DenseVision,
    /// Ragged layout.
    pub ragged: RaggedVision,
}

/// List the source images in record order.
///
/// `source_dir` may be the real archive layout (`images/*.jpg`, optionally
/// `annotations/trainval.txt`) or a flat directory of `.jpg` files. With a split file, the
/// images are its first column in file order (`<name>.jpg`); otherwise every `.jpg`/`.jpeg`
/// file in byte-wise name order.
pub fn list_source(source_dir: &Path) -> Result<SourceListing> {
    let nested = source_dir.join("images");
    let images_dir = if nested.is_dir() {
        nested
    } else {
        source_dir.to_path_buf()
    };
    let split = source_dir.join("annotations").join("trainval.txt");
    if split.is_file() {
        let text = fs::read_to_string(&split).map_err(|e| Error::io(&split, "read", e))?;
        let mut files = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name = line.split_whitespace().next().unwrap_or(line);
            let path = images_dir.join(format!("{name}.jpg"));
            if !path.is_file() {
                return Err(Error::MissingFile {
                    path,
                    referenced_by: split,
                });
            }
            files.push(path);
        }
        if files.is_empty() {
            return Err(Error::EmptySource {
                path: split,
                expected: "image names (one per line)".into(),
            });
        }
        return Ok(SourceListing {
            images_dir,
            split_file: Some(split),
            files,
        });
    }
    let entries = fs::read_dir(&images_dir).map_err(|e| Error::io(&images_dir, "read_dir", e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&images_dir, "read_dir", e))?;
        let path = entry.path();
        let is_jpg = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"));
        if is_jpg && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(Error::EmptySource {
            path: images_dir,
            expected: "*.jpg images".into(),
        });
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(SourceListing {
        images_dir,
        split_file: None,
        files,
    })
}

/// Decode an image file's bytes to RGB. JPEG goes through `zune-jpeg`; anything else
/// (the archive's GIF and RGBA PNG) through `image`, then palette → RGB and alpha dropped,
/// as PIL's `convert("RGB")` does. `path` is only used in error messages.
pub fn decode_rgb(path: &Path, bytes: &[u8]) -> Result<RgbImage> {
    let fail = |reason: String| Error::Decode {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        let options = DecoderOptions::default()
            .jpeg_set_out_colorspace(ColorSpace::RGB)
            .set_max_width(1 << 16)
            .set_max_height(1 << 16);
        let mut d = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
        d.decode_headers().map_err(|e| fail(format!("{e:?}")))?;
        let info = d
            .info()
            .ok_or_else(|| fail("no JPEG frame header".into()))?;
        let size = d
            .output_buffer_size()
            .ok_or_else(|| fail("image dimensions overflow".into()))?;
        let (width, height) = (u32::from(info.width), u32::from(info.height));
        if size != width as usize * height as usize * 3 || size == 0 {
            return Err(fail(format!(
                "expected {}x{}x3 RGB output, decoder reports {size} bytes",
                width, height
            )));
        }
        let mut pixels = vec![0u8; size];
        d.decode_into(&mut pixels)
            .map_err(|e| fail(format!("{e:?}")))?;
        return Ok(RgbImage {
            width,
            height,
            pixels,
            format: "jpeg",
        });
    }
    let format = image::guess_format(bytes).map_err(|e| fail(format!("unknown format: {e}")))?;
    let name = match format {
        image::ImageFormat::Png => "png",
        image::ImageFormat::Gif => "gif",
        _ => {
            return Err(fail(format!(
                "expected JPEG, PNG or GIF content, found {format:?}"
            )));
        }
    };
    let img =
        image::load_from_memory_with_format(bytes, format).map_err(|e| fail(e.to_string()))?;
    let rgb = img.to_rgb8();
    let (width, height) = rgb.dimensions();
    if width == 0 || height == 0 {
        return Err(fail("zero-sized image".into()));
    }
    Ok(RgbImage {
        width,
        height,
        pixels: rgb.into_raw(),
        format: name,
    })
}

/// Size after the torchvision `Resize(256)` rule: short side 256, long side
/// `floor(long * 256 / short)`. Returns `(width, height)`.
pub fn resized_size(width: u32, height: u32) -> (u32, u32) {
    let s = u64::from(RESIZE_SHORT);
    if width <= height {
        let h = (u64::from(height) * s / u64::from(width)) as u32;
        (RESIZE_SHORT, h)
    } else {
        let w = (u64::from(width) * s / u64::from(height)) as u32;
        (w, RESIZE_SHORT)
    }
}

/// Crop offset `round((size - 224) / 2)` with Python's round-half-to-even.
pub fn crop_offset(size: u32) -> u32 {
    let d = size.saturating_sub(CROP);
    let half = d / 2;
    if d % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

/// Dense transform of one decoded image → `uint8[3,224,224]` CHW bytes.
pub fn dense_record(path: &Path, img: &RgbImage, resizer: &mut Resizer) -> Result<Vec<u8>> {
    let fail = |reason: String| Error::Resize {
        path: path.to_path_buf(),
        reason,
    };
    let (rw, rh) = resized_size(img.width, img.height);
    let src = ImageRef::new(img.width, img.height, &img.pixels, PixelType::U8x3)
        .map_err(|e| fail(e.to_string()))?;
    let mut dst = Image::new(rw, rh, PixelType::U8x3);
    let opts = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    resizer
        .resize(&src, &mut dst, &opts)
        .map_err(|e| fail(e.to_string()))?;
    let (left, top) = (crop_offset(rw) as usize, crop_offset(rh) as usize);
    let buf = dst.buffer();
    let c = CROP as usize;
    let plane = c * c;
    let mut out = vec![0u8; DENSE_RECORD_BYTES];
    let (r, rest) = out.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    for y in 0..c {
        let row_start = ((top + y) * rw as usize + left) * 3;
        let row = &buf[row_start..row_start + c * 3];
        for (x, px) in row.chunks_exact(3).enumerate() {
            r[y * c + x] = px[0];
            g[y * c + x] = px[1];
            b[y * c + x] = px[2];
        }
    }
    Ok(out)
}

/// HWC interleaved → CHW planar.
pub fn to_chw(img: &RgbImage) -> Vec<u8> {
    let plane = img.width as usize * img.height as usize;
    let mut out = vec![0u8; plane * 3];
    let (r, rest) = out.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    for (i, px) in img.pixels.chunks_exact(3).enumerate() {
        r[i] = px[0];
        g[i] = px[1];
        b[i] = px[2];
    }
    out
}

struct Processed {
    dense: Vec<u8>,
    chw: Vec<u8>,
    width: u32,
    height: u32,
    format: &'static str,
    file_sha256: [u8; 32],
    file_bytes: u64,
}

fn process(path: &Path, resizer: &mut Resizer) -> Result<Processed> {
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| Error::io(path, "read", e))?;
    let file_sha256: [u8; 32] = Sha256::digest(&bytes).into();
    let img = decode_rgb(path, &bytes)?;
    let dense = dense_record(path, &img, resizer)?;
    let chw = to_chw(&img);
    Ok(Processed {
        dense,
        chw,
        width: img.width,
        height: img.height,
        format: img.format,
        file_sha256,
        file_bytes: bytes.len() as u64,
    })
}

fn dim_stats(mut v: Vec<u64>) -> DimStats {
    v.sort_unstable();
    DimStats {
        min: v.first().copied().unwrap_or(0),
        median: v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0),
        max: v.last().copied().unwrap_or(0),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Prepare `n` records from `source_dir` into `out_dir` (created if needed): `dense.npy`,
/// `ragged_values.npy`, `ragged_shapes.npy`, `ragged_offsets.npy` and `metadata.json`.
///
/// When the source has fewer than `n` images, record `i` is image `i % unique` and the
/// metadata says `cycled: true`. Decoding runs on the rayon pool; outputs are streamed.
pub fn prepare(
    source_dir: impl AsRef<Path>,
    out_dir: impl AsRef<Path>,
    n: usize,
    progress: bool,
) -> Result<VisionMetadata> {
    let source_dir = source_dir.as_ref();
    let out_dir = out_dir.as_ref();
    if n == 0 {
        return Err(Error::InvalidArgument(
            "vision record count N must be > 0".into(),
        ));
    }
    let listing = list_source(source_dir)?;
    let unique = n.min(listing.files.len());
    let files = &listing.files[..unique];
    fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, "create_dir", e))?;

    let c = u64::from(CROP);
    let mut dense_w = NpyWriter::create(out_dir.join("dense.npy"), "|u1", &[n as u64, 3, c, c])?;
    let mut values_w = NpyWriter::create_growable(out_dir.join("ragged_values.npy"), "|u1", &[])?;
    let mut dense_sha = Sha256::new();
    let mut ragged_sha = Sha256::new();
    let mut shapes: Vec<u8> = Vec::with_capacity(n * 24);
    let mut offsets: Vec<u8> = Vec::with_capacity((n + 1) * 8);
    offsets.extend_from_slice(&0i64.to_le_bytes());
    let mut heights = Vec::with_capacity(n);
    let mut widths = Vec::with_capacity(n);
    let mut quirks = Vec::new();
    let mut content_sha = Sha256::new();
    let mut source_bytes = 0u64;
    let mut total: u64 = 0;

    let pb = progress_bar(n as u64, progress, "vision");
    let chunk = (rayon::current_num_threads() * 8).max(8);
    let mut start = 0usize;
    while start < n {
        let end = (start + chunk).min(n);
        let results: Vec<Result<Processed>> = (start..end)
            .into_par_iter()
            .map_init(Resizer::new, |rs, i| process(&files[i % unique], rs))
            .collect();
        for (i, res) in (start..end).zip(results) {
            let p = res?;
            let path = &files[i % unique];
            if i < unique {
                let name = file_name(path);
                if p.format != "jpeg" {
                    quirks.push(Quirk {
                        file: name.clone(),
                        format: p.format.to_string(),
                    });
                }
                content_sha.update(format!("{name}\t{}\n", hex(&p.file_sha256)).as_bytes());
                source_bytes += p.file_bytes;
            }
            dense_w.write(&p.dense)?;
            dense_sha.update(&p.dense);
            let shape = [3u64, u64::from(p.height), u64::from(p.width)];
            for d in shape {
                ragged_sha.update(d.to_le_bytes());
                shapes.extend_from_slice(&d.to_le_bytes());
            }
            ragged_sha.update(&p.chw);
            values_w.write(&p.chw)?;
            total += p.chw.len() as u64;
            offsets.extend_from_slice(&(total as i64).to_le_bytes());
            heights.push(u64::from(p.height));
            widths.push(u64::from(p.width));
            pb.inc(1);
        }
        start = end;
    }
    pb.finish_and_clear();
    dense_w.finish()?;
    values_w.finish()?;
    write_npy(
        out_dir.join("ragged_shapes.npy"),
        "<u8",
        &[n as u64, 3],
        &shapes,
    )?;
    write_npy(
        out_dir.join("ragged_offsets.npy"),
        "<i8",
        &[n as u64 + 1],
        &offsets,
    )?;

    let mut list_sha = Sha256::new();
    for f in files {
        list_sha.update(file_name(f).as_bytes());
        list_sha.update(b"\n");
    }
    let layout = match (&listing.split_file, listing.images_dir == source_dir) {
        (Some(_), _) => "images/ + annotations/trainval.txt",
        (None, false) => "images/ (name order)",
        (None, true) => "flat (name order)",
    };
    let decoders = [
        ("zune-jpeg", ZUNE_JPEG_VERSION),
        ("image", IMAGE_VERSION),
        ("fast_image_resize", FAST_IMAGE_RESIZE_VERSION),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let meta = VisionMetadata {
        schema: "loaderx.datasets.vision/1".into(),
        source: VisionSource {
            path: source_dir.display().to_string(),
            layout: layout.into(),
            file_count: listing.files.len() as u64,
            files_used: unique as u64,
            file_list_sha256: hex(&list_sha.finalize()),
            content_sha256: hex(&content_sha.finalize()),
            source_bytes,
        },
        records: n as u64,
        unique_records: unique as u64,
        cycled: unique < n,
        cycles: n.div_ceil(unique) as u64,
        decoders,
        quirks,
        dense: DenseVision {
            file: "dense.npy".into(),
            dtype: "uint8".into(),
            shape: vec![n as u64, 3, c, c],
            transform: DENSE_TRANSFORM.into(),
            logical_bytes: (n * DENSE_RECORD_BYTES) as u64,
            logical_sha256: hex(&dense_sha.finalize()),
        },
        ragged: RaggedVision {
            values_file: "ragged_values.npy".into(),
            shapes_file: "ragged_shapes.npy".into(),
            offsets_file: "ragged_offsets.npy".into(),
            dtype: "uint8".into(),
            layout: "CHW".into(),
            transform: RAGGED_TRANSFORM.into(),
            height: dim_stats(heights),
            width: dim_stats(widths),
            logical_bytes: total,
            logical_sha256: hex(&ragged_sha.finalize()),
        },
    };
    write_json(&out_dir.join("metadata.json"), &meta)?;
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchvision_sizes_and_offsets() {
        assert_eq!(resized_size(500, 375), (341, 256));
        assert_eq!(resized_size(375, 500), (256, 341));
        assert_eq!(resized_size(300, 300), (256, 256));
        // 341 - 224 = 117 -> 58.5 -> 58 (half to even); 343 -> 59.5 -> 60.
        assert_eq!(crop_offset(341), 58);
        assert_eq!(crop_offset(343), 60);
        assert_eq!(crop_offset(256), 16);
        assert_eq!(crop_offset(224), 0);
    }

    #[test]
    fn lower_median() {
        let s = dim_stats(vec![4, 1, 3, 2]);
        assert_eq!((s.min, s.median, s.max), (1, 2, 4));
    }
}
