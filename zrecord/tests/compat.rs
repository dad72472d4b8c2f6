//! Format compatibility: committed golden containers must keep opening, decoding and hashing the
//! same, so that a change to the on-disk format (reader or writer side) cannot pass silently.
//!
//! `tests/golden/<case>/` holds one published container per case of [`CASES`] (Dense and Ragged,
//! each codec), written once by [`regenerate_golden`] and committed. The tests here
//!
//! * open every case with the public API and compare each record with the values the generator
//!   wrote, recomputed from the same formulas ([`record`]);
//! * hash every committed file (SHA-256) against [`DIGESTS`], so a byte that changes fails;
//! * check every checksum, magic and header field of the golden files against `docs/format.md`
//!   with an independent CRC32C ([`restamp`] rebuilds every checksum from the spec's formulas and
//!   must reproduce the files exactly);
//! * write each case again and compare it byte for byte with its golden copy. Container ids are
//!   random (`/dev/urandom`, no way to choose one through the API), so the fresh copy is first
//!   re-stamped with the golden id: every id-dependent field (the id itself and every checksum it
//!   seeds or covers) is recomputed from the spec, everything else must already be identical.
//!
//! When the format changes on purpose (a new version), regenerate the files and the digest table:
//!
//! ```text
//! ZRECORD_REGEN_GOLDEN=1 cargo test -p zrecord --test compat -- --ignored regenerate_golden --nocapture
//! ```
//!
//! and paste the printed table over [`DIGESTS`]. The fresh-write check also depends on the bundled
//! libzstd producing the same frames (and the same trained dictionary); a zstd upgrade that changes
//! them fails that check while the read checks still pass; regenerate then, after making sure the
//! old files still read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use zrecord::{
    Allocator, Codec, DType, DenseStore, DenseWriter, RaggedStore, RaggedWriter, SystemAllocator,
    WriterOptions,
};

/// One golden container.
#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    ragged: bool,
    codec: Codec,
    dtype: DType,
    /// Dense: the item shape. Ragged: unused (shapes come from [`ragged_shape`]).
    item_shape: &'static [u64],
    /// Ragged: the record rank.
    ndim: u32,
    shards: u32,
    records: u64,
}

const CASES: &[Case] = &[
    Case {
        name: "dense_raw_f32",
        ragged: false,
        codec: Codec::Raw,
        dtype: DType::Float32,
        item_shape: &[3, 2],
        ndim: 2,
        shards: 1,
        records: 5,
    },
    // 2 shards; the Dense block (256 KiB / 64 B = 4096 records) puts every record in shard 0, so
    // shard 1 is a bare header. Record 3 is noise that zstd cannot shrink: stored raw.
    Case {
        name: "dense_zstd_i16",
        ragged: false,
        codec: Codec::Zstd,
        dtype: DType::Int16,
        item_shape: &[4, 8],
        ndim: 2,
        shards: 2,
        records: 6,
    },
    Case {
        name: "dense_zstd_dict_u8",
        ragged: false,
        codec: Codec::ZstdDict,
        dtype: DType::UInt8,
        item_shape: &[96],
        ndim: 1,
        shards: 1,
        records: 8,
    },
    // 0-D records.
    Case {
        name: "dense_scalar_f64",
        ragged: false,
        codec: Codec::Raw,
        dtype: DType::Float64,
        item_shape: &[],
        ndim: 0,
        shards: 1,
        records: 4,
    },
    Case {
        name: "ragged_raw_i32",
        ragged: true,
        codec: Codec::Raw,
        dtype: DType::Int32,
        item_shape: &[],
        ndim: 2,
        shards: 1,
        records: 5,
    },
    // 2 shards, 70 records: blocks of 64 put records 0..64 in shard 0 and 64..70 in shard 1.
    Case {
        name: "ragged_zstd_u16",
        ragged: true,
        codec: Codec::Zstd,
        dtype: DType::UInt16,
        item_shape: &[],
        ndim: 2,
        shards: 2,
        records: 70,
    },
    Case {
        name: "ragged_zstd_dict_bf16",
        ragged: true,
        codec: Codec::ZstdDict,
        dtype: DType::BFloat16,
        item_shape: &[],
        ndim: 3,
        shards: 1,
        records: 8,
    },
];

/// SHA-256 of every committed golden file, `case/file` -> hex digest.
const DIGESTS: &[(&str, &str)] = &[
    (
        "dense_raw_f32/index.zri",
        "3889c32c38ec989baba44d532a9bafb23532a091f3c061550a33762752d218db",
    ),
    (
        "dense_raw_f32/manifest.zrm",
        "bd2d23709f0c6b5707d4c16071d2a70cdebd6e345667382364cfd1fa5526d7be",
    ),
    (
        "dense_raw_f32/shard-000.zrd",
        "24c2cce11e51dbf4160006dfcb10d92c8204aaf5cbb7c4641ee66212147a9433",
    ),
    (
        "dense_scalar_f64/index.zri",
        "769ac91f79a8228a9d754232fafade08f796a2a73207ea031e9b175d2375d48d",
    ),
    (
        "dense_scalar_f64/manifest.zrm",
        "2b27e477fd09f48b4f08cb845b2ddf579f5a6baf58ad2a77ee971cee9cced61a",
    ),
    (
        "dense_scalar_f64/shard-000.zrd",
        "b5f01ce4f9e6d67d5d20b15a42b68dd18297e4415824134a4837b5e692d1cc53",
    ),
    (
        "dense_zstd_dict_u8/index.zri",
        "c5187c9376d3b01b7e7c1ea7d25a8d9095a092de52305f09c6ed1a1ddfbc5ae6",
    ),
    (
        "dense_zstd_dict_u8/manifest.zrm",
        "fca74078c8f57d861cda564fa4f99455e84a6a05d9bce181e5729180b4108ce4",
    ),
    (
        "dense_zstd_dict_u8/shard-000.zrd",
        "b91203452b98d9e1429e729d17a714b23d0ecb1c8c37d219fa2e759fc7dcfb55",
    ),
    (
        "dense_zstd_i16/index.zri",
        "a637d80a29caf4df52a764d958f253e27bf6f204b40052abf4fb9ab0c3b9c66e",
    ),
    (
        "dense_zstd_i16/manifest.zrm",
        "a21a0848b3289970dfbf98cfe7e52157b12fe909ab57c2d8a4db70e498b4c441",
    ),
    (
        "dense_zstd_i16/shard-000.zrd",
        "06aed7ec4bbfc41ae876a7952ab94ddfff6b702d198a34b5f80652c03ec86df9",
    ),
    (
        "dense_zstd_i16/shard-001.zrd",
        "9b9bac8d3583ba357f3e0e4b2518174b80b3af0e1ced0b1db48a8c551b9364dd",
    ),
    (
        "ragged_raw_i32/index.zri",
        "2d09cfcd7ab80278cd9351e24322b2101d1aee40fa30313533b8d45d11fd7a8f",
    ),
    (
        "ragged_raw_i32/manifest.zrm",
        "616b9fa42ecb3d0a43e1dc5160b696d3f0898e38a49b95dfb97627dfc1e73497",
    ),
    (
        "ragged_raw_i32/shard-000.zrd",
        "9c9147ebcf2644a19a41fa28f1303f4d2050bad4dcc956f5839d4ae7c62e51b0",
    ),
    (
        "ragged_zstd_dict_bf16/index.zri",
        "104ba2b0bcc315931eaeb88f770e6b477df8b45e96a9d125a6c67ff1d1b7bdc3",
    ),
    (
        "ragged_zstd_dict_bf16/manifest.zrm",
        "9c4545c5a2ee2630ef25b764c69b1e373cac1be94e827d4c91e6502ce16dc3ec",
    ),
    (
        "ragged_zstd_dict_bf16/shard-000.zrd",
        "aec86c620408c8e4cb3ee30dd17d6990b5cf3cf0df483328e38973d3a2bae028",
    ),
    (
        "ragged_zstd_u16/index.zri",
        "90c2838fb6c9f97d31cfd46adac0ff38053348b521ac78db12855a4158020206",
    ),
    (
        "ragged_zstd_u16/manifest.zrm",
        "017f527ac016f3106d4a0b173092e63a2f4b5a3529e4440c93699ae91cfe0b24",
    ),
    (
        "ragged_zstd_u16/shard-000.zrd",
        "87c1c697a17662691fc23769ae91981631558331ea39c7bc619a0f6e2b74f9f0",
    ),
    (
        "ragged_zstd_u16/shard-001.zrd",
        "30a4a7f84a2e7c3b53784ea046ac3d267098e957153b5864ccb088bc08d635f0",
    ),
];

/// Size of the dictionary the generator trains for the `zstd_dict` cases.
const DICT_BYTES: usize = 1024;
/// Records sampled (from the same formulas) to train that dictionary.
const DICT_SAMPLES: u64 = 256;

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn alloc() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

/// Deterministic noise (xorshift64) for the incompressible record.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Shape of Ragged record `i` of `case`.
fn ragged_shape(case: &Case, i: u64) -> Vec<u64> {
    match case.name {
        "ragged_raw_i32" => vec![1 + i % 3, 2 + (i * 7) % 5],
        "ragged_zstd_u16" => vec![2 + i % 3, 16 + i % 5],
        "ragged_zstd_dict_bf16" => vec![1 + i % 2, 2, 8 + i % 3],
        other => panic!("no ragged shape for case {other}"),
    }
}

/// Shape of record `i` (Dense: the item shape).
fn shape(case: &Case, i: u64) -> Vec<u64> {
    if case.ragged {
        ragged_shape(case, i)
    } else {
        case.item_shape.to_vec()
    }
}

/// The bytes of record `i` of `case` (little-endian elements), defined for every `i`.
fn record(case: &Case, i: u64) -> Vec<u8> {
    let n = shape(case, i).iter().product::<u64>();
    let mut out = Vec::new();
    for j in 0..n {
        match case.name {
            "dense_raw_f32" => {
                let v = i as f32 * 10.0 + j as f32 * 0.25 - 1.5;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "dense_zstd_i16" => {
                let v = ((i * 7 + j / 4) % 5) as i16 - 2;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "dense_zstd_dict_u8" => out.push(((j / 8 + i) % 6) as u8 * 40 + (j % 3) as u8),
            "dense_scalar_f64" => out.extend_from_slice(&(i as f64 * 1.5 - 2.0).to_le_bytes()),
            "ragged_raw_i32" => {
                let v = i as i32 * 1000 + j as i32 - 500;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "ragged_zstd_u16" => {
                let v = (j % 7) as u16 * 3 + (i % 4) as u16;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "ragged_zstd_dict_bf16" => {
                let f = (j % 5) as f32 + 0.5 * (i % 3) as f32;
                out.extend_from_slice(&((f.to_bits() >> 16) as u16).to_le_bytes());
            }
            other => panic!("no values for case {other}"),
        }
    }
    if case.name == "dense_zstd_i16" && i == 3 {
        return noise(out.len(), i + 1);
    }
    out
}

/// The dictionary of a `zstd_dict` case, trained on records of the same formulas.
fn dictionary(case: &Case) -> Option<Vec<u8>> {
    (case.codec == Codec::ZstdDict).then(|| {
        let samples: Vec<Vec<u8>> = (0..DICT_SAMPLES).map(|i| record(case, i)).collect();
        zrecord::train_dict_from(&samples, DICT_BYTES).expect("train the golden dictionary")
    })
}

/// Writes `case` to `path` exactly as the generator does.
fn write_case(case: &Case, path: &Path) {
    let opts = WriterOptions {
        data_shards: case.shards,
        dict: dictionary(case),
        // Durability does not change a byte of the container.
        sync: false,
        ..WriterOptions::default()
    };
    if case.ragged {
        let mut w = RaggedWriter::create(path, case.dtype, case.ndim, case.codec, opts)
            .expect("create ragged writer");
        let isz = case.dtype.itemsize();
        let (mut values, mut cu, mut shapes) = (Vec::new(), vec![0i32], Vec::new());
        for i in 0..case.records {
            values.extend_from_slice(&record(case, i));
            cu.push((values.len() / isz) as i32);
            shapes.extend_from_slice(&ragged_shape(case, i));
        }
        w.append(&values, &cu, &shapes).expect("append");
        w.close().expect("close");
    } else {
        let mut w = DenseWriter::create(path, case.dtype, case.item_shape, case.codec, opts)
            .expect("create dense writer");
        let data: Vec<u8> = (0..case.records).flat_map(|i| record(case, i)).collect();
        w.append(&data).expect("append");
        w.close().expect("close");
    }
}

/// The published files of the container at `dir`, by file name.
fn read_container(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    zrecord::container_files(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, bytes)
        })
        .collect()
}

/// Every file under the golden root, as `case/file`, with its SHA-256.
fn golden_digests() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let root = golden_root();
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        let case = d.file_name().unwrap().to_string_lossy().into_owned();
        if case.starts_with('.') {
            // `.gitattributes` (keeps git from converting the binary files).
            continue;
        }
        assert!(d.is_dir(), "stray file {} in the golden root", d.display());
        for f in std::fs::read_dir(&d).unwrap() {
            let p = f.unwrap().path();
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap();
            let hex: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.insert(format!("{case}/{file}"), hex);
        }
    }
    out
}

// ---- An independent CRC32C and the checksum formulas of docs/format.md ----

/// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF, final XOR
/// 0xFFFFFFFF. Bitwise, deliberately unlike the crate's implementation.
fn crc32c(data: &[u8]) -> u32 {
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

fn crc_of(parts: &[&[u8]]) -> u32 {
    crc32c(&parts.concat())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
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
fn restamp(files: &BTreeMap<String, Vec<u8>>, id: &[u8; 16]) -> BTreeMap<String, Vec<u8>> {
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

fn container_id(files: &BTreeMap<String, Vec<u8>>) -> [u8; 16] {
    files["manifest.zrm"][16..32].try_into().unwrap()
}

/// First differing byte of two file sets, for a readable failure.
fn first_difference(
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

// ---- The tests ----

#[test]
fn crc32c_is_the_castagnoli_checksum() {
    // The standard check value of CRC-32C.
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), 0);
}

#[test]
fn golden_files_match_their_digests() {
    let found = golden_digests();
    let stored: BTreeMap<String, String> = DIGESTS
        .iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (file, digest) in &stored {
        match found.get(file) {
            None => panic!("golden file {file} is missing"),
            Some(d) => assert_eq!(
                d, digest,
                "golden file {file} changed (SHA-256); a format change needs a new version and \
                 regenerated golden files (see the top of tests/compat.rs)"
            ),
        }
    }
    for file in found.keys() {
        assert!(
            stored.contains_key(file),
            "golden file {file} has no digest in tests/compat.rs"
        );
    }
    for case in CASES {
        assert!(
            found.contains_key(&format!("{}/manifest.zrm", case.name)),
            "case {} has no golden container",
            case.name
        );
    }
}

#[test]
fn golden_containers_decode_to_the_generated_records() {
    for case in CASES {
        let path = golden_root().join(case.name);
        let want: Vec<Vec<u8>> = (0..case.records).map(|i| record(case, i)).collect();
        let reversed: Vec<u64> = (0..case.records).rev().collect();
        let ctx = case.name;
        if case.ragged {
            let store = RaggedStore::open(&path).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            store
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
            assert_eq!(store.len(), case.records, "{ctx}: records");
            assert_eq!(store.dtype(), case.dtype, "{ctx}: dtype");
            assert_eq!(store.codec(), case.codec, "{ctx}: codec");
            assert_eq!(store.data_shards(), case.shards, "{ctx}: shards");
            assert_eq!(store.ndim(), case.ndim, "{ctx}: ndim");
            assert_eq!(
                store.dictionary().map(<[u8]>::to_vec),
                dictionary(case),
                "{ctx}: dictionary"
            );
            let view = store.bind(alloc());
            for i in 0..case.records {
                let b = view
                    .get(i)
                    .unwrap_or_else(|e| panic!("{ctx}: record {i}: {e}"));
                assert_eq!(b.len(), 1);
                assert_eq!(b.values(), &want[i as usize][..], "{ctx}: record {i}");
                assert_eq!(b.shapes(), &ragged_shape(case, i)[..], "{ctx}: shape {i}");
                assert_eq!(view.shape_of(i).unwrap(), ragged_shape(case, i));
            }
            let all = view.gather(&reversed).unwrap();
            for (k, &i) in reversed.iter().enumerate() {
                assert_eq!(all.record(k), &want[i as usize][..], "{ctx}: gathered {i}");
            }
        } else {
            let store = DenseStore::open(&path).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            store
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
            assert_eq!(store.len(), case.records, "{ctx}: records");
            assert_eq!(store.dtype(), case.dtype, "{ctx}: dtype");
            assert_eq!(store.codec(), case.codec, "{ctx}: codec");
            assert_eq!(store.data_shards(), case.shards, "{ctx}: shards");
            assert_eq!(store.item_shape(), case.item_shape, "{ctx}: item shape");
            assert_eq!(
                store.dictionary().map(<[u8]>::to_vec),
                dictionary(case),
                "{ctx}: dictionary"
            );
            let view = store.bind(alloc());
            for i in 0..case.records {
                let b = view
                    .get(i)
                    .unwrap_or_else(|e| panic!("{ctx}: record {i}: {e}"));
                assert_eq!(b.shape(), case.item_shape, "{ctx}: shape {i}");
                assert_eq!(b.bytes(), &want[i as usize][..], "{ctx}: record {i}");
            }
            let all = view.gather(&reversed).unwrap();
            let expect: Vec<u8> = reversed
                .iter()
                .flat_map(|&i| want[i as usize].clone())
                .collect();
            assert_eq!(all.bytes(), &expect[..], "{ctx}: gathered");
            let range = view.range(0..case.records).unwrap();
            assert_eq!(range.bytes(), &want.concat()[..], "{ctx}: range");
        }
    }
}

#[test]
fn golden_checksums_and_headers_follow_the_spec() {
    for case in CASES {
        let files = read_container(&golden_root().join(case.name));
        let id = container_id(&files);
        if let Some(diff) = first_difference(&restamp(&files, &id), &files) {
            panic!(
                "{}: a checksum differs from the formula in docs/format.md: {diff}",
                case.name
            );
        }
    }
}

#[test]
fn golden_cases_cover_both_entry_flags_in_zstd_containers() {
    // A zstd container stores a record raw when compression does not shrink it; the goldens must
    // hold both kinds so that both decode paths stay covered.
    for case in CASES.iter().filter(|c| c.codec != Codec::Raw) {
        let files = read_container(&golden_root().join(case.name));
        let ix = &files["index.zri"];
        let entry = u32_at(ix, 12) as usize;
        let flags: Vec<u64> = (0..case.records as usize)
            .map(|i| u64_at(ix, 64 + i * entry) >> 56)
            .collect();
        assert!(flags.contains(&0), "{}: no compressed record", case.name);
        if case.name == "dense_zstd_i16" {
            assert_eq!(flags[3], 1, "{}: record 3 must be stored raw", case.name);
        }
    }
}

#[test]
fn a_fresh_write_reproduces_the_golden_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    for case in CASES {
        let golden = read_container(&golden_root().join(case.name));
        let path = tmp.path().join(case.name);
        write_case(case, &path);
        let fresh = read_container(&path);
        // Container ids are random: give the fresh copy the golden id (and recompute everything
        // that id seeds), then every byte must match.
        let same_id = restamp(&fresh, &container_id(&golden));
        if let Some(diff) = first_difference(&same_id, &golden) {
            panic!(
                "{}: the writer no longer produces the golden bytes: {diff}",
                case.name
            );
        }
    }
}

/// Regenerates `tests/golden/` and prints the digest table for [`DIGESTS`]. Run only on purpose.
#[test]
#[ignore = "regenerates the committed golden files; run with ZRECORD_REGEN_GOLDEN=1"]
fn regenerate_golden() {
    if std::env::var_os("ZRECORD_REGEN_GOLDEN").is_none() {
        eprintln!("set ZRECORD_REGEN_GOLDEN=1 to rewrite tests/golden/");
        return;
    }
    let root = golden_root();
    std::fs::create_dir_all(&root).unwrap();
    // Every case directory goes (cases may have been renamed); `.gitattributes` stays.
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    for case in CASES {
        let path = tmp.path().join(case.name);
        write_case(case, &path);
        // Copy only the published files (never a lock or temp directory).
        let dest = root.join(case.name);
        std::fs::create_dir(&dest).unwrap();
        for (name, bytes) in read_container(&path) {
            std::fs::write(dest.join(name), bytes).unwrap();
        }
    }
    println!("const DIGESTS: &[(&str, &str)] = &[");
    for (file, digest) in golden_digests() {
        // In the layout `cargo fmt` gives the table, so the output pastes as is.
        println!("    (\n        \"{file}\",\n        \"{digest}\",\n    ),");
    }
    println!("];");
}
