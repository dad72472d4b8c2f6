//! Format compatibility: committed golden containers must keep opening, decoding and hashing the
//! same, so that a change to the on-disk format (reader or writer side) cannot pass silently.
//!
//! `tests/golden/<case>/` holds one published container per case of [`CASES`] (Dense and Ragged,
//! each codec), written once by [`regenerate_golden`] and committed. The tests here
//!
//! * open every case with the public API and compare each record with the values the generator
//!   wrote, recomputed from the same formulas ([`generate::record`]);
//! * hash every committed file (SHA-256) against [`DIGESTS`], so a byte that changes fails;
//! * check every checksum, magic and header field of the golden files against `docs/format.md`
//!   with an independent CRC32C ([`spec::restamp`] rebuilds every checksum from the spec's formulas
//!   and must reproduce the files exactly);
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
//!
//! The generator's formulas and file helpers live in `compat/generate.rs`, the independent checksum
//! code in `compat/spec.rs`; the cases, the digest table and the tests stay here.

#[path = "compat/generate.rs"]
mod generate;
#[path = "compat/spec.rs"]
mod spec;

use std::collections::BTreeMap;

use generate::*;
use spec::*;
use zrecord::{Batch, Codec, DType, Dense, Layout, Ragged, Store, View};

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

/// Opens golden `case` as a `Store<L>`, verifies it and checks what a store of any layout says.
fn open_golden<L: Layout>(case: &Case) -> Store<L> {
    let ctx = case.name;
    let store = Store::<L>::open(golden_root().join(ctx)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    store
        .verify()
        .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert_eq!(store.len(), case.records, "{ctx}: records");
    assert_eq!(store.dtype(), case.dtype, "{ctx}: dtype");
    assert_eq!(store.codec(), case.codec, "{ctx}: codec");
    assert_eq!(store.data_shards(), case.shards, "{ctx}: shards");
    assert_eq!(
        store.dictionary().map(<[u8]>::to_vec),
        dictionary(case),
        "{ctx}: dictionary"
    );
    store
}

/// Every record of golden `case` through `view.get`, with its index.
fn each_record<'v, L: Layout>(
    case: &'v Case,
    view: &'v View<L>,
) -> impl Iterator<Item = (u64, Batch<L>)> + 'v {
    let ctx = case.name;
    (0..case.records).map(move |i| {
        let b = view.get(i);
        (i, b.unwrap_or_else(|e| panic!("{ctx}: record {i}: {e}")))
    })
}

#[test]
fn golden_containers_decode_to_the_generated_records() {
    for case in CASES {
        let want: Vec<Vec<u8>> = (0..case.records).map(|i| record(case, i)).collect();
        let reversed: Vec<u64> = (0..case.records).rev().collect();
        let ctx = case.name;
        if case.ragged {
            let store = open_golden::<Ragged>(case);
            assert_eq!(store.ndim(), case.ndim, "{ctx}: ndim");
            let view = store.bind(alloc());
            for (i, b) in each_record(case, &view) {
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
            let store = open_golden::<Dense>(case);
            assert_eq!(store.item_shape(), case.item_shape, "{ctx}: item shape");
            let view = store.bind(alloc());
            for (i, b) in each_record(case, &view) {
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
