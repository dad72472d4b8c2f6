//! The files of a container, as an open finds them: the manifest (and whether it describes the
//! kind of store asked for), the data shards (each one's length and header), the `zstd_dict`
//! dictionary, and the on-disk size. A file the manifest lists but the
//! directory lacks is a damaged container, not an I/O failure ([`missing_or_io`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Location, Result};
use crate::format::{self, Codec, Kind, MANIFEST_FILE, Manifest};
use crate::source::{Opener, ReadFile};

/// A file's bytes held in process memory.
pub(super) struct InMemory(pub(super) Vec<u8>);

impl ReadFile for InMemory {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Opens `path` whole: memory-mapped when `mapped`, else read into process memory with positional
/// reads (an unmapped store's manifest and index).
pub(super) fn open_whole(
    opener: &dyn Opener,
    path: &Path,
    mapped: bool,
) -> std::io::Result<Arc<dyn ReadFile>> {
    if mapped {
        return opener.open_read(path);
    }
    let f = opener.open_read_unmapped(path)?;
    if f.mapped() {
        return Ok(f);
    }
    let len = usize::try_from(f.file_len()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "file larger than memory")
    })?;
    let mut v = vec![0u8; len];
    f.read_exact_at(&mut v, 0)?;
    Ok(Arc::new(InMemory(v)))
}

/// Reads and decodes the manifest of the container at `path`, which must be of `kind`. Returns
/// the manifest and its path.
pub(super) fn open_manifest(
    opener: &dyn Opener,
    path: &Path,
    kind: Kind,
    mapped: bool,
) -> Result<(Manifest, PathBuf, u32)> {
    let mp = path.join(MANIFEST_FILE);
    let not_found = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mfile = match open_whole(opener, &mp, mapped) {
        Ok(f) => f,
        Err(e) if not_found(&e) && !opener.exists(path).unwrap_or(false) => {
            return Err(Error::io("open", path, e));
        }
        // The directory exists now; it may have been published (renamed into place, manifest
        // included) between the two calls, so look once more before calling it foreign.
        Err(e) if not_found(&e) => open_whole(opener, &mp, mapped).map_err(|e| {
            if not_found(&e) {
                Error::format(
                    path,
                    "no manifest.zrm: not a zrecord container (or not published)",
                )
            } else {
                Error::io("open", &mp, e)
            }
        })?,
        Err(e) => return Err(Error::io("open", &mp, e)),
    };
    let m = Manifest::decode(mfile.bytes(), &mp)?;
    // The decode checked the length and this trailing checksum.
    let bytes = mfile.bytes();
    let crc = crate::format::rd_u32(bytes, bytes.len() - 4);
    if m.kind != kind {
        return Err(Error::format(
            path,
            format!(
                "expected a {} container, found a {} one",
                kind.name(),
                m.kind.name()
            ),
        ));
    }
    Ok((m, mp, crc))
}

/// A container's open data shards, and their paths, in shard order.
pub(super) type Shards = (Vec<Arc<dyn ReadFile>>, Vec<PathBuf>);

/// The open data shards of the container at `path` and their paths, each checked for its
/// length and header; memory-mapped when `mapped`, else opened for positional reads.
pub(super) fn open_shards(
    opener: &dyn Opener,
    path: &Path,
    m: &Manifest,
    mapped: bool,
) -> Result<Shards> {
    let nshards = m.shard_count();
    let mut shards = Vec::with_capacity(nshards as usize);
    let mut shard_paths = Vec::with_capacity(nshards as usize);
    for s in 0..nshards {
        let p = path.join(format::shard_file_name(s));
        let f = if mapped {
            opener.open_read(&p)
        } else {
            opener.open_read_unmapped(&p)
        }
        .map_err(|e| missing_or_io(&p, Some(s), e))?;
        let len = f.file_len();
        let want = m.shards[s as usize].len;
        if len != want {
            return Err(Error::corrupt(
                file_at(&p, Some(s)),
                "shard file length",
                want,
                len,
            ));
        }
        let mut head = [0u8; format::HEADER_LEN];
        let head_len = (len as usize).min(format::HEADER_LEN);
        f.read_exact_at(&mut head[..head_len], 0)
            .map_err(|e| Error::io("read the header of", &p, e))?;
        format::check_header(
            &head[..head_len],
            &format::encode_shard_header(&m.uuid, s, nshards),
            &p,
            Some(s),
            "shard header",
        )?;
        shards.push(f);
        shard_paths.push(p);
    }
    Ok((shards, shard_paths))
}

/// The decoder dictionary of a `zstd_dict` container (`None` for other codecs); `mp` names the
/// manifest that holds it in errors.
pub(super) fn load_dict(
    m: &Manifest,
    mp: &Path,
) -> Result<Option<zstd::dict::DecoderDictionary<'static>>> {
    if m.codec != Codec::ZstdDict {
        return Ok(None);
    }
    zstd::dict::DecoderDictionary::try_copy(&m.dict)
        .map(Some)
        .map_err(|e| {
            Error::corrupt(
                file_at(mp, None),
                "zstd dictionary",
                "a dictionary zstd can load",
                e.to_string(),
            )
        })
}

/// Whether `data_bytes` of shards are more than half of this machine's memory (`sysinfo`): such a
/// store cannot all stay in the page cache, so reading its cold records past the cache keeps
/// them from evicting the rest. `false` where the size of memory is unknown.
pub(in crate::read) fn outgrows_memory(data_bytes: u64) -> bool {
    // SAFETY: sysinfo only writes the struct it is given, which is plain data.
    let ram = unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return false;
        }
        (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
    };
    ram > 0 && data_bytes > ram / 2
}

/// The file at `path` (shard `shard`'s, if any), as an error names it.
pub(super) fn file_at(path: &Path, shard: Option<u32>) -> Location {
    Location {
        path: path.to_path_buf(),
        shard,
        ..Default::default()
    }
}

/// A file the manifest lists but the directory lacks is a damaged container, not an I/O failure.
pub(super) fn missing_or_io(path: &Path, shard: Option<u32>, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::corrupt(
            file_at(path, shard),
            "file listed in the manifest",
            "present",
            "missing",
        )
    } else {
        Error::io("open", path, e)
    }
}

/// Allocated bytes on disk of `files` (those that can be read; others count 0).
pub(super) fn disk_bytes<'a>(files: impl IntoIterator<Item = &'a Path>) -> u64 {
    let mut total = 0;
    for p in files {
        if let Ok(md) = std::fs::metadata(p) {
            use std::os::unix::fs::MetadataExt;
            total += md.blocks() * 512;
        }
    }
    total
}
