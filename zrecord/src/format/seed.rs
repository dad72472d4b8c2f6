//! Checksum seeds: a record's CRC starts from the CRC32C of the container id and the record
//! index, an index page's from the id, the page number and a tag byte.

/// Seed of a record's CRC: CRC32C of the container id followed by the record index.
#[inline]
pub(crate) fn record_seed(uuid: &[u8; 16], i: u64) -> u32 {
    record_seed_after(uuid_crc(uuid), i)
}

/// CRC32C of the container id alone: the running value that [`record_seed_after`] extends.
#[inline]
pub(crate) fn uuid_crc(uuid: &[u8; 16]) -> u32 {
    crc32c::crc32c(uuid)
}

/// [`record_seed`] from a precomputed [`uuid_crc`]: CRC32C of `uuid ‖ i as u64 LE`.
#[inline]
pub(crate) fn record_seed_after(uuid_crc: u32, i: u64) -> u32 {
    crate::crc::append_u64(uuid_crc, i)
}

/// Seed of an index page's CRC.
pub(crate) fn page_seed(uuid: &[u8; 16], page: u64) -> u32 {
    let mut b = [0u8; 25];
    b[..16].copy_from_slice(uuid);
    b[16..24].copy_from_slice(&page.to_le_bytes());
    b[24] = 0xA5;
    crc32c::crc32c(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_seed_is_the_crc_of_the_id_and_the_index() {
        let uuid: [u8; 16] = std::array::from_fn(|k| (k as u8).wrapping_mul(37) ^ 0x5c);
        for i in [0u64, 1, 255, 256, 1 << 32, u64::MAX] {
            let mut b = uuid.to_vec();
            b.extend_from_slice(&i.to_le_bytes());
            assert_eq!(record_seed(&uuid, i), crc32c::crc32c(&b), "record {i}");
        }
    }
}
