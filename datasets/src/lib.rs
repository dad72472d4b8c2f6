//! # datasets — the benchmark inputs, prepared deterministically
//!
//! This crate turns raw public sources into the `.npy` inputs the loaderx harness and its
//! competitors memory-map, plus a `metadata.json` that proves what was built. Every output
//! is a plain NumPy `.npy` file (see [`npy`]); every metadata file carries SHA-256 digests of
//! the *logical* payload, so two preparations from the same inputs can be compared bit for
//! bit (`tests/` checks this).
//!
//! ## Vision ([`vision::prepare`]) — Oxford-IIIT Pet
//!
//! **Source order.** `source_dir` is either the real archive layout (`images/*.jpg`, and
//! `annotations/trainval.txt` when present — then the records are the images named in its
//! first column, in file order: the train split) or a flat directory of `.jpg` files (then
//! all of them in byte-wise file-name order). The first `N` are used. When fewer than `N`
//! exist, record `i` is image `i % unique` and the metadata says `cycled: true`,
//! `unique_records`, `cycles` — never silently.
//!
//! **Decode.** JPEG with `zune-jpeg` to RGB (grayscale/CMYK converted by the decoder). The
//! archive's two quirks (`Abyssinian_34.jpg` is a GIF, `Abyssinian_5.jpg` an RGBA PNG) are
//! detected by content, decoded with `image`, and converted as PIL's `convert("RGB")` does:
//! palette lookup, alpha dropped without compositing. EXIF orientation is ignored (as PIL
//! and torchvision do). They are listed under `quirks` in the metadata.
//!
//! **Dense** = torchvision `Resize(256)` + `CenterCrop(224)`: the short side becomes 256 and
//! the long side `floor(long * 256 / short)`; the resample is Pillow's antialiased bilinear
//! (a triangle filter whose support is widened by the downscale factor), as implemented by
//! `fast_image_resize`'s `Convolution(Bilinear)`; then a 224×224 crop at
//! `top = round((H' - 224) / 2)`, `left = round((W' - 224) / 2)` with Python's
//! round-half-to-even. Stored `uint8[3,224,224]` CHW.
//!
//! Checked in `tests/vision.rs` against an independent f64 implementation of Pillow's
//! resample (max |diff| 1, mean |diff| < 0.2 on the tested images). The JPEG decoder is
//! `zune-jpeg`, not libjpeg-turbo, so decoded pixels can differ from PIL's by a few units
//! in places: outputs are close to torchvision's, not bit-identical.
//!
//! **Ragged** = the same ordered images at native resolution, `uint8[3,H,W]` CHW.
//!
//! **Files** (in `out_dir`):
//!
//! | file | dtype | shape | content |
//! |---|---|---|---|
//! | `dense.npy` | `|u1` | `(N,3,224,224)` | Dense records |
//! | `ragged_values.npy` | `|u1` | `(total,)` | every Ragged record's CHW bytes, back to back |
//! | `ragged_shapes.npy` | `<u8` | `(N,3)` | `[3, H, W]` per record |
//! | `ragged_offsets.npy` | `<i8` | `(N+1,)` | element offsets into the values; record `i` is `values[off[i]..off[i+1]]` |
//! | `metadata.json` | | | [`vision::VisionMetadata`] (one file for both layouts) |
//!
//! ## Tokens ([`tokens::prepare`]) — WikiText
//!
//! **Input.** Text files (or directories of `.txt`/`.raw` files, taken in name order), one
//! record per line; lines are split on `\n`, a trailing `\r` is removed, and lines that are
//! empty or only whitespace are skipped (WikiText raw convention). With the `parquet`
//! feature, Hugging Face WikiText `.parquet` shards (column `text`, one line per row; a
//! trailing newline is removed) are read too. Every line is tokenized on its own with the
//! GPT-2 byte-level BPE (`tiktoken-rs` `r50k_base`, ranks embedded in the crate, no network;
//! `"Hello world"` → `[15496, 995]`), without special tokens.
//!
//! **Ragged rule** (exact, `MIN = 16`, `MAX = 512`):
//! 1. Walk the non-empty lines in order, appending each line's tokens to a pending buffer.
//!    As soon as the buffer holds at least `MIN` tokens it becomes one *group* and the buffer
//!    is emptied. So a line shorter than `MIN` is combined with the following text, and a
//!    line of `MIN` or more tokens on an empty buffer is a group by itself.
//! 2. A group of `L` tokens is cut into `ceil(L / MAX)` consecutive pieces of `MAX` tokens,
//!    the last one holding the remainder. If that remainder `r` is below `MIN`, the
//!    second-to-last piece gives its last `MIN - r` tokens to it (pieces `MAX - (MIN - r)`
//!    and `MIN`). Every piece is a record.
//! 3. If the text ends with a non-empty buffer (< `MIN` tokens, no following text), it is
//!    appended to the last record when that stays ≤ `MAX`; otherwise the last record gives
//!    its last tokens so the tail holds exactly `MIN`. Fewer than `MIN` tokens in total is
//!    an error.
//!
//! No token is dropped or duplicated: the records, concatenated, are exactly the token
//! stream. Reading stops early once both layouts have enough data (more than the requested
//! ragged records, and enough tokens for the dense blocks), so the first `R` records do
//! not depend on whether the rest of the corpus was read.
//!
//! **Dense rule.** Ignore boundaries: the token stream (all lines' tokens in order) is cut
//! into `int32[512]` blocks.
//!
//! **Cycling.** Ragged record `i` is unique record `i % U` when fewer than `R` exist; dense
//! token `j` is stream token `j % T` when fewer than `512 * D` exist. The metadata records
//! `unique_records`/`unique_tokens`, `cycles` (passes over the unique data) and `cycled`.
//!
//! **Files:** `tokens.npy` (`<i4`, the Ragged records' tokens back to back), `offsets.npy`
//! (`<i8`, `R+1` token offsets), `dense.npy` (`<i4`, `(D,512)`), `metadata.json`
//! ([`tokens::TokenMetadata`], including p10/median/mean/p90 of the Ragged lengths).
//!
//! ## Download ([`download`])
//!
//! [`download::fetch`] downloads to `<dest>.part` with an HTTP Range resume, verifies the
//! SHA-256 before renaming into place (a mismatch deletes the part file), and
//! [`download::fetch_full_datasets`] fetches and unpacks Oxford-IIIT Pet and WikiText-103
//! raw into a cache directory. Plain HTTP is built in; enable the `https` feature for the
//! real (https) URLs.
//!
//! ## Determinism
//!
//! Parallel work (decode, tokenization) is collected in input order before anything is
//! written, so outputs and digests do not depend on thread count or scheduling.

pub mod download;
mod error;
pub mod npy;
pub mod tokens;
pub mod vision;

pub use error::{Error, Result};

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Lower-case hex of a byte slice.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// `path` with `suffix` after its file name: the file a write goes to before it is renamed into
/// place (`x.npy.tmp`, `x.zip.part`).
pub(crate) fn staging_path(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// A progress bar on stderr, hidden unless `enabled` and stderr is a terminal.
pub(crate) fn progress_bar(len: u64, enabled: bool, what: &str) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(what.to_string());
    pb
}

/// Write `value` as pretty JSON to `path` (via a temporary file and a rename).
pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, "rename", e))
}

/// Read a `metadata.json` written by [`vision::prepare`] or [`tokens::prepare`].
pub fn read_metadata<T: serde::de::DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
