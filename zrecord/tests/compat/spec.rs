//! An independent CRC32C and the checksum formulas of `docs/format.md`: [`restamp`] rebuilds
//! every checksum of a container from the spec (checking magics, versions and fixed header fields
//! on the way), so the golden files can be checked against the spec and a fresh write compared
//! with them byte for byte.

use std::collections::BTreeMap;

/// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF, final XOR
/// 0xFFFFFFFF. Bitwise, deliberately unlike the crate's implementation.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

pub(crate) fn crc_of(parts: &[&[u8]]) -> u32 {
    crc32c(&parts.concat())
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Rewrites a container's files for container id `id`, recomputing every checksum from the
/// formulas of `docs/format.md`, after checking the magics, versions and fixed header fields:
///
/// * record `i`: `CRC32C(id || u64le(i) || stored)`, in its index entry;
/// * index page `p`: `CRC32C(id || u64le(p) || 0xA5 || entries of page p)`, after the page;
/// * index and shard headers: `CRC32C(header[0..60])` at 60;
/// * shard file: `CRC32C(whole file)`, in the manifest's shard descriptor;
/// * manifest: `CRC32C(manifest[0..L-4])` at `L-4`.
pub(crate) fn restamp(
    files: &BTreeMap<String, Vec<u8>>,
    id: &[u8; 16],
) -> BTreeMap<String, Vec<u8>> {
    let mut files = files.clone();
    let mut m = files["manifest.zrm"].clone();
    assert_eq!(&m[0..8], b"ZRECMAN\0", "manifest magic");
    assert_eq!(u32_at(&m, 8), 1, "manifest format version");
    assert_eq!(u32_at(&m, 12) as usize, m.len(), "manifest length");
    let kind = m[32];
    let ndim = u32_at(&m, 40) as usize;
    let shards = u32_at(&m, 44) as usize;
    let records = u64_at(&m, 48);
    let block = u64_at(&m, 56);
    let entry = u32_at(&m, 76) as usize;
    let dense_dims = if kind == 0 { ndim } else { 0 };
    assert_eq!(
        entry,
        16 + if kind == 1 { 8 * ndim } else { 0 },
        "entry size"
    );
    m[16..32].copy_from_slice(id);

    // Shard headers.
    for s in 0..shards {
        let f = files.get_mut(&format!("shard-{s:03}.zrd")).unwrap();
        assert_eq!(&f[0..8], b"ZRECSHD\0", "shard magic");
        assert_eq!(u32_at(f, 8), 1, "shard format version");
        assert_eq!(u32_at(f, 12) as usize, s, "shard number");
        assert_eq!(u32_at(f, 32) as usize, shards, "shard count");
        assert!(f[36..60].iter().all(|&b| b == 0), "shard header reserved");
        f[16..32].copy_from_slice(id);
        let c = crc32c(&f[..60]);
        put_u32(f, 60, c);
    }

    // Index header, entries (record CRCs), pages.
    let mut ix = files["index.zri"].clone();
    assert_eq!(&ix[0..8], b"ZRECIDX\0", "index magic");
    assert_eq!(u32_at(&ix, 8), 1, "index format version");
    assert_eq!(u32_at(&ix, 12) as usize, entry, "index entry size");
    assert_eq!(u64_at(&ix, 32), records, "index record count");
    assert_eq!(u32_at(&ix, 40), 4096, "entries per page");
    assert!(ix[44..60].iter().all(|&b| b == 0), "index header reserved");
    assert_eq!(
        ix.len() as u64,
        64 + records * entry as u64 + 4 * records.div_ceil(4096),
        "index length"
    );
    ix[16..32].copy_from_slice(id);
    let c = crc32c(&ix[..60]);
    put_u32(&mut ix, 60, c);
    let mut pos = 64;
    for p in 0..records.div_ceil(4096) {
        let first = p * 4096;
        let k = (records - first).min(4096) as usize;
        for r in 0..k {
            let i = first + r as u64;
            let e = pos + r * entry;
            let word = u64_at(&ix, e);
            let (offset, flags) = ((word & ((1 << 56) - 1)) as usize, word >> 56);
            assert!(flags <= 1, "entry flags of record {i}");
            let len = u32_at(&ix, e + 8) as usize;
            let s = ((i / block) % shards as u64) as usize;
            let stored = &files[&format!("shard-{s:03}.zrd")][offset..offset + len];
            let c = crc_of(&[id, &i.to_le_bytes(), stored]);
            put_u32(&mut ix, e + 12, c);
        }
        let body = &ix[pos..pos + k * entry];
        let c = crc_of(&[id, &p.to_le_bytes(), &[0xA5], body]);
        put_u32(&mut ix, pos + k * entry, c);
        pos += k * entry + 4;
    }
    assert_eq!(pos, ix.len(), "pages fill the index");
    files.insert("index.zri".into(), ix);

    // Manifest: shard descriptors, then its own CRC.
    for s in 0..shards {
        let d = 128 + 8 * dense_dims + 24 * s;
        let f = &files[&format!("shard-{s:03}.zrd")];
        assert_eq!(u64_at(&m, d) as usize, f.len(), "shard {s} length");
        assert!(
            m[d + 20..d + 24].iter().all(|&b| b == 0),
            "descriptor reserved"
        );
        put_u32(&mut m, d + 16, crc32c(f));
    }
    let l = m.len();
    let c = crc32c(&m[..l - 4]);
    put_u32(&mut m, l - 4, c);
    files.insert("manifest.zrm".into(), m);
    files
}

pub(crate) fn container_id(files: &BTreeMap<String, Vec<u8>>) -> [u8; 16] {
    files["manifest.zrm"][16..32].try_into().unwrap()
}

/// First differing byte of two file sets, for a readable failure.
pub(crate) fn first_difference(
    a: &BTreeMap<String, Vec<u8>>,
    b: &BTreeMap<String, Vec<u8>>,
) -> Option<String> {
    if a.keys().ne(b.keys()) {
        return Some(format!(
            "file sets differ: {:?} vs {:?}",
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>()
        ));
    }
    for (name, x) in a {
        let y = &b[name];
        if x != y {
            let at = x.iter().zip(y).position(|(p, q)| p != q);
            return Some(match at {
                Some(k) => format!(
                    "{name}: first difference at byte {k} ({:#04x} vs {:#04x})",
                    x[k], y[k]
                ),
                None => format!("{name}: lengths {} vs {}", x.len(), y.len()),
            });
        }
    }
    None
}
