//! The full check behind `verify()`: every shard's whole-file checksum, then every record's
//! checksum and decoded size (a damaged shard is narrowed down to its first bad record).

use rayon::prelude::*;

use crate::crc::Stores;
use crate::threads::in_parallel;

use crate::error::{Error, Location, Result};

use super::container::Container;
use super::decode::{Decoder, check_frame_size, read_record};

/// Checks every byte of `c`: each shard's whole-file checksum (a damaged shard is narrowed down
/// to its first bad record), then every record's checksum and decoded size.
pub(super) fn verify_all(c: &Container) -> Result<()> {
    let maps = c.maps();
    for (s, bytes) in (0u32..).zip(&maps.shards) {
        let crc = crate::crc::append(0, bytes);
        if crc != c.shard_crc(s) {
            // Locate the damaged record for a precise report, then fall back to the file.
            let mut dec = Decoder::new(c);
            let mut buf = Vec::new();
            for i in (0..c.records()).filter(|&i| c.shard_of(i) == s) {
                let raw_len = c.raw_len(i);
                check_frame_size(c, &maps, i, raw_len)?;
                buf.resize(raw_len as usize, 0);
                read_record(c, &maps, i, &mut buf, &mut dec, true, Stores::Cached)?;
            }
            return Err(Error::corrupt(
                Location {
                    path: c.shard_path(s).to_path_buf(),
                    shard: Some(s),
                    ..Default::default()
                },
                "shard file crc32c",
                format!("{:#010x}", c.shard_crc(s)),
                format!("{crc:#010x}"),
            ));
        }
    }
    // Every record decodes to its declared size (catches compressed frames that lie).
    let ids: Vec<u64> = (0..c.records()).collect();
    // On this process's pool (see `threads`), so a forked child can verify too.
    in_parallel(|| {
        ids.par_chunks(1024).try_for_each(|chunk| -> Result<()> {
            let mut dec = Decoder::new(c);
            let mut buf = Vec::new();
            for &i in chunk {
                let raw_len = c.raw_len(i);
                check_frame_size(c, &maps, i, raw_len)?;
                buf.resize(raw_len as usize, 0);
                read_record(c, &maps, i, &mut buf, &mut dec, true, Stores::Cached)?;
            }
            Ok(())
        })
    })
}
