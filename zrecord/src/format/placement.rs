//! Record placement: which shard holds record `i` (blocks of `block_records` consecutive records,
//! dealt round-robin over the shards), as a plain function and as a precomputed [`ShardMap`].

/// Shard that holds record `i`.
#[inline]
pub(crate) fn shard_of(i: u64, block: u64, shards: u32) -> u32 {
    ((i / block) % shards as u64) as u32
}

/// [`shard_of`] for one store, precomputed: shifts and masks where the block size and the shard
/// count are powers of two (the defaults), divisions otherwise. Same results for every `i`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardMap {
    block: u64,
    shards: u32,
    /// `log2(block)` when `block` is a power of two.
    block_shift: Option<u32>,
    /// `shards - 1` when `shards` is a power of two.
    shard_mask: Option<u32>,
}

impl ShardMap {
    pub(crate) fn new(block: u64, shards: u32) -> ShardMap {
        ShardMap {
            block,
            shards,
            block_shift: block.is_power_of_two().then(|| block.trailing_zeros()),
            shard_mask: shards.is_power_of_two().then(|| shards - 1),
        }
    }

    #[inline]
    pub(crate) fn shard_of(&self, i: u64) -> u32 {
        let b = match self.block_shift {
            Some(s) => i >> s,
            None => i / self.block,
        };
        match self.shard_mask {
            Some(m) => (b as u32) & m,
            None => (b % u64::from(self.shards)) as u32,
        }
    }

    /// Record `i`'s shard and its position among that shard's records (records are stored in
    /// record order within a shard).
    #[inline]
    pub(crate) fn place(&self, i: u64) -> (u32, u64) {
        let (b, within) = match self.block_shift {
            Some(s) => (i >> s, i & ((1u64 << s) - 1)),
            None => (i / self.block, i % self.block),
        };
        let (shard, round) = match self.shard_mask {
            Some(m) => ((b as u32) & m, b >> m.count_ones()),
            None => (
                (b % u64::from(self.shards)) as u32,
                b / u64::from(self.shards),
            ),
        };
        (shard, round * self.block + within)
    }
}

/// Position of record `i` among the records of its shard.
#[inline]
#[cfg(test)]
fn local_index(i: u64, block: u64, shards: u32) -> u64 {
    let b = i / block;
    (b / shards as u64) * block + i % block
}

/// Number of the first `records` records that land in shard `s`.
pub(super) fn records_in_shard(records: u64, block: u64, shards: u32, s: u32) -> u64 {
    let full_blocks = records / block;
    let tail = records % block;
    let s = s as u64;
    let n = shards as u64;
    let mut count = (full_blocks / n) * block;
    if full_blocks % n > s {
        count += block;
    }
    if full_blocks % n == s {
        count += tail;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_map_agrees_with_shard_of() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for block in [1u64, 2, 3, 6, 64, 100, 128, 1 << 20, u64::MAX] {
            for shards in [1u32, 2, 3, 4, 5, 8, 255] {
                let map = ShardMap::new(block, shards);
                for i in (0..300u64).chain([u64::MAX, u64::MAX - 1, 1 << 40]) {
                    assert_eq!(
                        map.shard_of(i),
                        shard_of(i, block, shards),
                        "{i} {block} {shards}"
                    );
                }
                for _ in 0..1000 {
                    let i = next();
                    assert_eq!(
                        map.shard_of(i),
                        shard_of(i, block, shards),
                        "{i} {block} {shards}"
                    );
                }
                // `place` against the plain functions.
                for i in (0..300u64)
                    .chain([u64::MAX, 1 << 40])
                    .chain((0..1000).map(|_| next()))
                {
                    assert_eq!(
                        map.place(i),
                        (shard_of(i, block, shards), local_index(i, block, shards)),
                        "{i} {block} {shards}"
                    );
                }
            }
        }
    }

    #[test]
    fn shard_mapping_is_a_bijection_onto_local_slots() {
        for &(n, block, shards) in &[
            (0u64, 1u64, 1u32),
            (17, 1, 4),
            (100, 7, 3),
            (1000, 32, 4),
            (33, 64, 5),
        ] {
            let mut seen = vec![Vec::new(); shards as usize];
            for i in 0..n {
                seen[shard_of(i, block, shards) as usize].push(local_index(i, block, shards));
            }
            for (s, v) in seen.iter().enumerate() {
                let expect: Vec<u64> = (0..v.len() as u64).collect();
                assert_eq!(
                    v, &expect,
                    "shard {s} local slots must be 0..k in record order"
                );
                assert_eq!(v.len() as u64, records_in_shard(n, block, shards, s as u32));
            }
        }
    }
}
