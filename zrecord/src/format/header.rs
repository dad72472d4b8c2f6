//! The 64-byte shard and index headers: encoding them, and checking a file's header against the
//! one this container would have written.

use std::path::Path;

use crate::error::{Error, Location, Result};

use super::layout::{FORMAT_VERSION, HEADER_LEN, INDEX_MAGIC, PAGE_ENTRIES, SHARD_MAGIC, rd_u32};

pub(crate) fn encode_shard_header(uuid: &[u8; 16], shard: u32, shards: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&SHARD_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&shard.to_le_bytes());
    h[16..32].copy_from_slice(uuid);
    h[32..36].copy_from_slice(&shards.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

pub(crate) fn encode_index_header(uuid: &[u8; 16], records: u64, entry: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&INDEX_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(entry as u32).to_le_bytes());
    h[16..32].copy_from_slice(uuid);
    h[32..40].copy_from_slice(&records.to_le_bytes());
    h[40..44].copy_from_slice(&(PAGE_ENTRIES as u32).to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a 64-byte header against the one we would have written.
pub(crate) fn check_header(
    found: &[u8],
    expected: &[u8; HEADER_LEN],
    path: &Path,
    shard: Option<u32>,
    what: &str,
) -> Result<()> {
    // Byte `offset` of the header, as an error names it.
    let at = |offset: u64| Location {
        path: path.to_path_buf(),
        shard,
        offset: Some(offset),
        ..Default::default()
    };
    if found.len() < HEADER_LEN {
        return Err(Error::corrupt(
            at(0),
            format!("{what} length"),
            format!(">= {HEADER_LEN}"),
            found.len(),
        ));
    }
    let crc = crc32c::crc32c(&found[..60]);
    if crc != rd_u32(found, 60) {
        return Err(Error::corrupt(
            at(60),
            format!("{what} crc32c"),
            format!("{crc:#010x}"),
            format!("{:#010x}", rd_u32(found, 60)),
        ));
    }
    if let Some(pos) = found[..HEADER_LEN]
        .iter()
        .zip(expected.iter())
        .position(|(a, b)| a != b)
    {
        let field = match pos {
            0..=7 => "magic",
            8..=11 => "format version",
            12..=15 => "shard number / entry size",
            16..=31 => "container id",
            _ => "header field",
        };
        return Err(Error::corrupt(
            at(pos as u64),
            format!("{what} {field} (belongs to another container or position?)"),
            format!("byte {:#04x}", expected[pos]),
            format!("byte {:#04x}", found[pos]),
        ));
    }
    Ok(())
}
