//! Download, verify and unpack the full public datasets.
//!
//! [`fetch`] streams a URL to `<dest>.part`, resuming with an HTTP `Range` request when a
//! part file exists and the server answers `206 Partial Content` at the right offset, and
//! restarting from zero otherwise (`200`, a mismatched `Content-Range`, or `416`). The SHA-256
//! is computed over the whole file and checked *before* the part file is renamed to `dest`;
//! a mismatch deletes the part file and returns [`Error::DigestMismatch`]. An interrupted
//! transfer keeps the part file for the next attempt.
//!
//! [`fetch_full_datasets`] downloads Oxford-IIIT Pet (`images.tar.gz`, `annotations.tar.gz`)
//! and WikiText-103 raw (`wikitext-103-raw-v1.zip`) into a cache directory and unpacks them
//! (into a staging directory first, then renamed into place, so a half-unpacked tree is
//! never mistaken for a complete one).
//!
//! ## Digests
//!
//! The SHA-256 digests of the three public archives are **not pinned yet**: the build
//! machines of this project have no network, and a digest that was not verified on a real
//! download must not be invented. [`PETS_IMAGES_SHA256`], [`PETS_ANNOTATIONS_SHA256`] and
//! [`WIKITEXT103_RAW_SHA256`] are therefore `None` — *to be pinned on first verified
//! download*. Until then, pass the digest explicitly ([`Resource::sha256`]); with `None`
//! the download is accepted unverified, its digest is returned, reported in
//! [`FullDatasets::digests`] and written to `<cache>/SHA256SUMS` so it can be pinned.
//!
//! Plain `http://` always works; the public URLs are `https://` and need the crate's
//! `https` feature (rustls).

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::hex;

/// Oxford-IIIT Pet images (VGG Oxford).
pub const PETS_IMAGES_URL: &str = "https://www.robots.ox.ac.uk/~vgg/data/pets/data/images.tar.gz";
/// Oxford-IIIT Pet annotations (VGG Oxford); holds `annotations/trainval.txt`.
pub const PETS_ANNOTATIONS_URL: &str =
    "https://www.robots.ox.ac.uk/~vgg/data/pets/data/annotations.tar.gz";
/// WikiText-103 raw, the original Salesforce/MetaMind archive (holds
/// `wikitext-103-raw/wiki.train.raw`). If it has moved, pass a mirror in [`Resource::url`].
pub const WIKITEXT103_RAW_URL: &str =
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip";
/// SHA-256 of `images.tar.gz`: to be pinned on first verified download.
pub const PETS_IMAGES_SHA256: Option<&str> = None;
/// SHA-256 of `annotations.tar.gz`: to be pinned on first verified download.
pub const PETS_ANNOTATIONS_SHA256: Option<&str> = None;
/// SHA-256 of `wikitext-103-raw-v1.zip`: to be pinned on first verified download.
pub const WIKITEXT103_RAW_SHA256: Option<&str> = None;

/// What [`fetch`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOutcome {
    /// The final file.
    pub path: PathBuf,
    /// Its SHA-256 (lower-case hex).
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// Whether a part file was resumed with a Range request.
    pub resumed: bool,
    /// Whether `dest` already existed with the right digest (nothing downloaded).
    pub cached: bool,
    /// Whether the digest was checked against a pinned value.
    pub verified: bool,
}

fn normalize_digest(d: &str) -> Result<String> {
    let d = d.trim().to_ascii_lowercase();
    if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(d)
    } else {
        Err(Error::InvalidArgument(format!(
            "expected a SHA-256 digest of 64 hex digits, found {d:?}"
        )))
    }
}

fn sha256_file(path: &Path, hasher: &mut Sha256) -> Result<u64> {
    let mut f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, "read", e))?;
        if n == 0 {
            return Ok(total);
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
}

fn byte_bar(enabled: bool, url: &str) -> ProgressBar {
    use std::io::IsTerminal;
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(url.rsplit('/').next().unwrap_or(url).to_string());
    pb
}

fn http_err(url: &str, reason: impl Into<String>) -> Error {
    let mut reason = reason.into();
    if url.starts_with("https://") && !cfg!(feature = "https") {
        reason.push_str(" (https URLs need the `https` feature of the datasets crate)");
    }
    Error::Http {
        url: url.to_string(),
        reason,
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .timeout_per_read(Some(Duration::from_secs(120)))
        .build()
        .into()
}

enum Start {
    /// Append to the part file from this offset.
    Append(u64),
    /// Start over.
    Fresh,
}

/// Download `url` to `dest`, verifying `sha256` (64 hex digits) when given.
///
/// `sha256 = None` accepts the file unverified (trust on first use) and returns its digest
/// in [`FetchOutcome::sha256`]. An existing `dest` with the expected digest is reused; one
/// with a different digest is deleted and downloaded again.
pub fn fetch(url: &str, sha256: Option<&str>, dest: &Path, progress: bool) -> Result<FetchOutcome> {
    let expected = sha256.map(normalize_digest).transpose()?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, "create_dir", e))?;
    }
    if dest.is_file() {
        let mut h = Sha256::new();
        let bytes = sha256_file(dest, &mut h)?;
        let found = hex(&h.finalize());
        if expected.as_deref().is_none_or(|e| e == found) {
            return Ok(FetchOutcome {
                path: dest.to_path_buf(),
                sha256: found,
                bytes,
                resumed: false,
                cached: true,
                verified: expected.is_some(),
            });
        }
        fs::remove_file(dest).map_err(|e| Error::io(dest, "remove", e))?;
    }
    let part = crate::staging_path(dest, ".part");
    let agent = agent();
    let pb = byte_bar(progress, url);
    let mut resumed = false;
    let mut attempt = 0;
    let (bytes, found) = loop {
        attempt += 1;
        let offset = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        let mut req = agent.get(url);
        if offset > 0 {
            req = req.header("Range", format!("bytes={offset}-"));
        }
        let resp = req.call().map_err(|e| http_err(url, e.to_string()))?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_length = header("content-length").and_then(|v| v.trim().parse::<u64>().ok());
        let start = match status {
            206 if offset > 0 => {
                let range_start = header("content-range").and_then(|v| {
                    v.trim()
                        .strip_prefix("bytes ")
                        .and_then(|r| r.split('-').next())
                        .and_then(|s| s.trim().parse::<u64>().ok())
                });
                if range_start == Some(offset) {
                    Start::Append(offset)
                } else if attempt < 3 {
                    // The server sent some other range: discard and start over.
                    let _ = fs::remove_file(&part);
                    continue;
                } else {
                    return Err(http_err(url, "server keeps answering with the wrong range"));
                }
            }
            200 => Start::Fresh,
            416 if offset > 0 && attempt < 3 => {
                let _ = fs::remove_file(&part);
                continue;
            }
            other => {
                return Err(http_err(
                    url,
                    format!("expected status 200 or 206, found {other}"),
                ));
            }
        };
        let mut hasher = Sha256::new();
        let (mut file, mut got) = match start {
            Start::Append(off) => {
                let have = sha256_file(&part, &mut hasher)?;
                if have != off {
                    return Err(Error::io(
                        &part,
                        "resume",
                        std::io::Error::other("part file changed during resume"),
                    ));
                }
                resumed = true;
                let f = OpenOptions::new()
                    .append(true)
                    .open(&part)
                    .map_err(|e| Error::io(&part, "open", e))?;
                (f, off)
            }
            Start::Fresh => {
                let f = File::create(&part).map_err(|e| Error::io(&part, "create", e))?;
                (f, 0)
            }
        };
        let total = content_length.map(|l| l + got);
        if let Some(t) = total {
            pb.set_length(t);
        }
        pb.set_position(got);
        let mut reader = resp.into_body().into_reader();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                http_err(url, format!("transfer interrupted after {got} bytes: {e}"))
            })?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n])
                .map_err(|e| Error::io(&part, "write", e))?;
            hasher.update(&buf[..n]);
            got += n as u64;
            pb.set_position(got);
        }
        file.sync_all().map_err(|e| Error::io(&part, "sync", e))?;
        if let Some(t) = total.filter(|&t| t != got) {
            return Err(http_err(
                url,
                format!("expected {t} bytes, received {got} (part file kept for resume)"),
            ));
        }
        break (got, hex(&hasher.finalize()));
    };
    pb.finish_and_clear();
    if let Some(exp) = expected.as_ref().filter(|e| **e != found) {
        let _ = fs::remove_file(&part);
        return Err(Error::DigestMismatch {
            url: url.to_string(),
            expected: exp.clone(),
            found,
        });
    }
    fs::rename(&part, dest).map_err(|e| Error::io(dest, "rename", e))?;
    Ok(FetchOutcome {
        path: dest.to_path_buf(),
        sha256: found,
        bytes,
        resumed,
        cached: false,
        verified: expected.is_some(),
    })
}

/// Unpack a `.tar.gz`/`.tgz` or `.zip` archive into `dest_dir` (created if needed).
/// Entries that would escape `dest_dir` are refused by the archive readers.
pub fn unpack(archive: &Path, dest_dir: &Path) -> Result<()> {
    let name = archive
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let fail = |reason: String| Error::Archive {
        path: archive.to_path_buf(),
        reason,
    };
    fs::create_dir_all(dest_dir).map_err(|e| Error::io(dest_dir, "create_dir", e))?;
    let file = File::open(archive).map_err(|e| Error::io(archive, "open", e))?;
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        let gz = flate2::read::GzDecoder::new(BufReader::new(file));
        let mut tar = tar::Archive::new(gz);
        tar.set_preserve_permissions(false);
        tar.unpack(dest_dir).map_err(|e| fail(e.to_string()))
    } else if name.ends_with(".zip") {
        let mut zip =
            zip::ZipArchive::new(BufReader::new(file)).map_err(|e| fail(e.to_string()))?;
        zip.extract(dest_dir).map_err(|e| fail(e.to_string()))
    } else {
        Err(fail(
            "expected a .tar.gz, .tgz or .zip file name, found another extension".into(),
        ))
    }
}

/// One downloadable archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Where to get it.
    pub url: String,
    /// Pinned SHA-256, or `None` to accept it unverified (see the module docs).
    pub sha256: Option<String>,
    /// File name in `<cache>/downloads/`.
    pub file_name: String,
    /// Top-level directory the archive unpacks to (e.g. `images`).
    pub top_dir: String,
}

/// The three archives of the full benchmark datasets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullDatasetSources {
    /// `images.tar.gz` → `images/`.
    pub pets_images: Resource,
    /// `annotations.tar.gz` → `annotations/`.
    pub pets_annotations: Resource,
    /// `wikitext-103-raw-v1.zip` → `wikitext-103-raw/`.
    pub wikitext103_raw: Resource,
}

impl FullDatasetSources {
    /// The public URLs with the (currently unpinned) digest constants.
    pub fn public() -> Self {
        let r = |url: &str, sha: Option<&str>, file: &str, top: &str| Resource {
            url: url.to_string(),
            sha256: sha.map(str::to_string),
            file_name: file.to_string(),
            top_dir: top.to_string(),
        };
        FullDatasetSources {
            pets_images: r(
                PETS_IMAGES_URL,
                PETS_IMAGES_SHA256,
                "images.tar.gz",
                "images",
            ),
            pets_annotations: r(
                PETS_ANNOTATIONS_URL,
                PETS_ANNOTATIONS_SHA256,
                "annotations.tar.gz",
                "annotations",
            ),
            wikitext103_raw: r(
                WIKITEXT103_RAW_URL,
                WIKITEXT103_RAW_SHA256,
                "wikitext-103-raw-v1.zip",
                "wikitext-103-raw",
            ),
        }
    }
}

/// Where [`fetch_full_datasets`] put things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullDatasets {
    /// Oxford-IIIT Pet root (`images/`, `annotations/`): pass to [`crate::vision::prepare`].
    pub pets_dir: PathBuf,
    /// `wiki.train.raw`: pass to [`crate::tokens::prepare`].
    pub wikitext_train: PathBuf,
    /// `(file name, sha256, verified)` of each archive.
    pub digests: Vec<(String, String, bool)>,
}

fn fetch_and_unpack(
    res: &Resource,
    downloads: &Path,
    into: &Path,
    progress: bool,
) -> Result<FetchOutcome> {
    let archive = downloads.join(&res.file_name);
    let outcome = fetch(&res.url, res.sha256.as_deref(), &archive, progress)?;
    let target = into.join(&res.top_dir);
    if target.is_dir() {
        return Ok(outcome);
    }
    let staging = into.join(format!(".unpacking-{}", res.file_name));
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, "remove", e))?;
    }
    unpack(&archive, &staging)?;
    let top = staging.join(&res.top_dir);
    if !top.is_dir() {
        return Err(Error::Archive {
            path: archive,
            reason: format!(
                "expected a top-level directory '{}', found none",
                res.top_dir
            ),
        });
    }
    fs::rename(&top, &target).map_err(|e| Error::io(&target, "rename", e))?;
    fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, "remove", e))?;
    Ok(outcome)
}

/// Download (resuming where possible), verify and unpack the full datasets into
/// `cache_dir`: `downloads/` (archives), `oxford-iiit-pet/{images,annotations}/`,
/// `wikitext-103-raw/`, and `SHA256SUMS` (the digests of the archives). Steps already
/// done are skipped.
pub fn fetch_full_datasets(
    cache_dir: &Path,
    sources: &FullDatasetSources,
    progress: bool,
) -> Result<FullDatasets> {
    let downloads = cache_dir.join("downloads");
    let pets_dir = cache_dir.join("oxford-iiit-pet");
    fs::create_dir_all(&pets_dir).map_err(|e| Error::io(&pets_dir, "create_dir", e))?;
    let mut digests = Vec::new();
    for (res, into) in [
        (&sources.pets_images, pets_dir.as_path()),
        (&sources.pets_annotations, pets_dir.as_path()),
        (&sources.wikitext103_raw, cache_dir),
    ] {
        let o = fetch_and_unpack(res, &downloads, into, progress)?;
        digests.push((res.file_name.clone(), o.sha256, o.verified));
    }
    let sums: String = digests
        .iter()
        .map(|(name, sha, _)| format!("{sha}  downloads/{name}\n"))
        .collect();
    let sums_path = cache_dir.join("SHA256SUMS");
    fs::write(&sums_path, sums).map_err(|e| Error::io(&sums_path, "write", e))?;
    let wikitext_train = cache_dir
        .join(&sources.wikitext103_raw.top_dir)
        .join("wiki.train.raw");
    if !wikitext_train.is_file() {
        return Err(Error::MissingFile {
            path: wikitext_train,
            referenced_by: downloads.join(&sources.wikitext103_raw.file_name),
        });
    }
    Ok(FullDatasets {
        pets_dir,
        wikitext_train,
        digests,
    })
}
