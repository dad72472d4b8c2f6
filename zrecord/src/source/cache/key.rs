//! The key of a cached block, and maps by that key ([`Maps`]: an open store's mapped blocks),
//! hashed by [`KeyHasher`].

/// A block's identity: container uuid, shard, block number.
pub(super) type Key = ([u8; 16], u32, u64);

/// Values by block key, hashed by [`KeyHasher`].
pub(super) type Maps<V> =
    std::collections::HashMap<Key, V, std::hash::BuildHasherDefault<KeyHasher>>;

/// A multiply-rotate hash of a block's key, a word at a time: one lookup per record hit, where
/// SipHash took a fifth of a small record's hit. The keys are this store's own block numbers, so
/// a keyed hash would defend nothing.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl KeyHasher {
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(w));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.mix(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }

    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
