//! Opening a container's files, before the container is assembled from them: the manifest, the
//! index (mapped, copied, read whole, or paged), every shard (length and header), the
//! dictionary, the entries' structure (unless checked page by page) and a raw Dense store's
//! checksum table. On object storage the index and the shards' headers are fetched at once (the
//! open's second and last round trip).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::format::{self, INDEX_FILE, Kind, Manifest};
use crate::source::{Opener, Prefetch, ReadFile};

use super::fixed::Fixed;
use super::paged::Paged;
use super::{files, index, paged};

/// A container's files, opened and checked.
pub(super) struct Opened {
    pub(super) m: Manifest,
    /// The manifest file's CRC32C.
    pub(super) manifest_crc: u32,
    pub(super) index_path: PathBuf,
    /// The index as reads see it: mapped, a copy, read whole, or `paged`'s region.
    pub(super) index: Arc<dyn ReadFile>,
    pub(super) paged: Option<Arc<Paged>>,
    /// Whether the index is checked page by page as reads first need each page.
    pub(super) lazy: bool,
    pub(super) shards: Vec<Arc<dyn ReadFile>>,
    pub(super) shard_paths: Vec<PathBuf>,
    /// Whether any shard is mapped.
    pub(super) mapped: bool,
    /// Whether a mapped store's index was copied into process memory.
    pub(super) copied: bool,
    pub(super) stride: u64,
    pub(super) ddict: Option<zstd::dict::DecoderDictionary<'static>>,
    pub(super) entry: usize,
    pub(super) fixed: Option<Fixed>,
    pub(super) outgrows_memory: bool,
}

/// Opens and checks the files of the container at `path`, which must hold a store of `kind`,
/// through `opener` (mapped when `mapped`).
pub(super) fn open_files(
    opener: &dyn Opener,
    path: &Path,
    kind: Kind,
    mapped: bool,
) -> Result<Opened> {
    let (m, mp, manifest_crc) = files::open_manifest(opener, path, kind, mapped)?;
    let index_path = path.join(INDEX_FILE);
    // An unmapped store's (one on object storage, or on a shared file system) index larger
    // than a few requests' worth is read by page as reads need it, within the index bound,
    // and checked page by page; a smaller one is read whole at open.
    let unmapped_paged = !mapped && m.index_len > paged::UNMAPPED_WHOLE_INDEX;
    if !mapped {
        // The index and every shard's header, fetched at once by a store on object storage
        // (the open's second and last round trip; a local store reads them as below).
        let shard_paths: Vec<PathBuf> = (0..m.shard_count())
            .map(|s| path.join(format::shard_file_name(s)))
            .collect();
        let mut ahead = vec![(
            index_path.as_path(),
            match unmapped_paged {
                true => Prefetch::Head(format::HEADER_LEN as u64),
                false => Prefetch::Whole,
            },
        )];
        ahead.extend(
            shard_paths
                .iter()
                .map(|p| (p.as_path(), Prefetch::Head(format::HEADER_LEN as u64))),
        );
        opener.prefetch(&ahead);
    }
    // A large index is checked page by page as reads first need each page (`pages`).
    let lazy = m.records > index::EAGER_RECORDS || unmapped_paged;
    let unmapped_paged = match unmapped_paged {
        true => paged::Paged::open_checked(opener, &index_path, &m)?,
        false => None,
    };
    let index = match &unmapped_paged {
        Some(p) => p.clone() as Arc<dyn ReadFile>,
        None => index::open_index(opener, &m, &index_path, mapped, lazy)?,
    };
    let (shards, shard_paths) = files::open_shards(opener, path, &m, mapped)?;
    // A file system may map a file even when asked not to (`ReadFs::open_read_unmapped`'s
    // default): the store is unmapped only when no shard is.
    let mapped = shards.iter().any(|f| f.mapped());
    let stride = match m.kind {
        Kind::Dense => m.dense_stride().unwrap_or(0),
        Kind::Ragged => 0,
    };
    let ddict = files::load_dict(&m, &mp)?;
    if !lazy {
        index::validate_entries(&m, index.bytes(), &index_path, stride, &shard_paths)?;
    }
    let entry = m.entry_size();
    // A paged index holds no entry yet: no checksum table from it.
    let fixed = match unmapped_paged {
        Some(_) => None,
        None => Fixed::build(&m, stride, |i| index::entry_at(index.bytes(), entry, i).crc)?,
    };
    // Each shard's length was checked against its file above.
    let outgrows_memory = files::outgrows_memory(m.shards.iter().map(|s| s.len).sum());
    let (index, copied) = if mapped {
        index::in_memory(index)
    } else {
        (index, true)
    };
    // A local index not copied is read by page, within the process's bound, instead of
    // through its map (dropped here, with whatever the open read of it).
    let paged = match mapped && !copied {
        true => paged::Paged::for_index(opener, &index_path, &m)?,
        false => unmapped_paged,
    };
    let index = paged.clone().map_or(index, |p| p as Arc<dyn ReadFile>);
    Ok(Opened {
        m,
        manifest_crc,
        index_path,
        index,
        paged,
        lazy,
        shards,
        shard_paths,
        mapped,
        copied,
        stride,
        ddict,
        entry,
        fixed,
        outgrows_memory,
    })
}
