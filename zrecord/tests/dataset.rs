//! Datasets of parts on the local file system: parts written independently (concurrently, in any
//! order) and committed as versions; the same `DenseStore` / `RaggedStore` reads a dataset as it
//! reads one container (against an oracle, across part boundaries, pinned versions, several
//! columns); racing commits (exactly one wins each version, the losers get `Conflict`); every
//! mismatch between a version and its parts is a typed error naming the part; `gc` removes what no
//! version lists.

mod support;

use std::path::Path;

use proptest::prelude::*;
use support::fixtures::alloc;
use zrecord::dataset::{
    self, PartReceipt, append, append_described, commit, commit_described, describe_part, gc,
    new_part_name, part_path,
};
use zrecord::{
    Codec, ColdReads, DType, DenseStore, DenseWriter, Error, OpenOptions, RaggedStore,
    RaggedWriter, RemoteOptions, WriterOptions,
};

/// Record `r` of part `p` of a Dense dataset (int32 `[3]`): three words that name it.
fn dense_record(p: u32, r: u32) -> Vec<u8> {
    [p, r, p.wrapping_mul(2_654_435_761) ^ r]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// Writes a Dense part of `n` records at `path` (2 data shards).
fn dense_part(path: &Path, p: u32, n: u32, codec: Codec) {
    let mut w = DenseWriter::create(
        path,
        DType::Int32,
        &[3],
        codec,
        WriterOptions {
            data_shards: 2,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let data: Vec<u8> = (0..n).flat_map(|r| dense_record(p, r)).collect();
    w.append(&data).unwrap();
    w.close().unwrap();
}

/// Record `r` of part `p` of a Ragged dataset (uint16, 1-D): `1 + (p + r) % 7` values.
fn ragged_record(p: u32, r: u32) -> Vec<u16> {
    (0..1 + (p + r) % 7)
        .map(|k| (p * 1000 + r * 10 + k) as u16)
        .collect()
}

fn ragged_part(path: &Path, p: u32, n: u32) {
    ragged_part_coded(path, p, n, Codec::Zstd);
}

fn ragged_part_coded(path: &Path, p: u32, n: u32, codec: Codec) {
    let mut w =
        RaggedWriter::create(path, DType::UInt16, 1, codec, WriterOptions::default()).unwrap();
    let recs: Vec<Vec<u16>> = (0..n).map(|r| ragged_record(p, r)).collect();
    let values: Vec<u8> = recs
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut cu = vec![0i32];
    for r in &recs {
        cu.push(cu.last().unwrap() + r.len() as i32);
    }
    let shapes: Vec<u64> = recs.iter().map(|r| r.len() as u64).collect();
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
}

fn local() -> RemoteOptions {
    RemoteOptions::default()
}

/// Writes Dense parts of `sizes` records under `root` (part `k` named `p<k>`) and returns, per
/// global record, its oracle bytes.
fn write_dense(root: &Path, sizes: &[u32], first: u32) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut names = Vec::new();
    let mut recs = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let p = first + k as u32;
        let name = format!("p{p:04}");
        dense_part(&part_path(root, &name, None), p, n, Codec::Raw);
        recs.extend((0..n).map(|r| dense_record(p, r)));
        names.push(name);
    }
    (names, recs)
}

#[test]
fn a_dataset_of_parts_reads_as_one_store_and_versions_pin() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let (names, mut recs) = write_dense(&root, &[5, 1, 17, 4], 0);
    // Written but not committed: nothing is a dataset yet.
    assert!(
        dataset::read_version(&root, None, &local())
            .unwrap()
            .is_none()
    );
    let v1 = commit(&root, &names, &local()).unwrap();
    assert_eq!((v1.version, v1.records()), (1, 27));
    let s = DenseStore::open(&root).unwrap();
    assert_eq!(
        (s.len(), s.version(), s.item_shape()),
        (27, Some(1), &[3u64][..])
    );
    let v = s.bind(alloc());
    let idx: Vec<u64> = vec![26, 0, 5, 6, 5, 22, 7, 23, 4, 4, 21];
    let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
    assert_eq!(v.gather(&idx).unwrap().bytes(), &want[..]);
    assert_eq!(v.range(3..9).unwrap().bytes(), &recs[3..9].concat()[..]);
    assert!(matches!(
        v.gather(&[27]),
        Err(Error::IndexOutOfRange { index: 27, len: 27 })
    ));
    s.verify().unwrap();

    // Append two parts: version 2 lists six; version 1, pinned, still reads its four.
    let (more, recs2) = write_dense(&root, &[3, 2], 10);
    let v2 = append(&root, &more, &local()).unwrap();
    assert_eq!((v2.version, v2.parts.len(), v2.records()), (2, 6, 32));
    recs.extend(recs2);
    let s2 = DenseStore::open(&root).unwrap();
    assert_eq!((s2.len(), s2.version()), (32, Some(2)));
    let all: Vec<u64> = (0..32).rev().collect();
    let want: Vec<u8> = all.iter().flat_map(|&i| recs[i as usize].clone()).collect();
    assert_eq!(s2.bind(alloc()).gather(&all).unwrap().bytes(), &want[..]);
    let pinned = DenseStore::open_with(
        &root,
        OpenOptions {
            version: Some(1),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!((pinned.len(), pinned.version()), (27, Some(1)));
    assert_eq!(dataset::versions(&root, &local()).unwrap(), [1, 2]);
    // A version never committed is refused, naming the ones there are.
    let e = DenseStore::open_with(
        &root,
        OpenOptions {
            version: Some(9),
            ..OpenOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("no version 9 (versions 1..=2)"),
        "{e}"
    );
    // Appending a listed part again is refused; so is a Ragged open of a Dense dataset.
    assert!(matches!(
        append(&root, &more[..1], &local()),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        RaggedStore::open(&root),
        Err(Error::Format { .. })
    ));
    // A single container refuses a version.
    let one = dir.path().join("one");
    dense_part(&one, 0, 3, Codec::Zstd);
    let e = DenseStore::open_with(
        &one,
        OpenOptions {
            version: Some(1),
            ..OpenOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}

#[test]
fn ragged_and_multi_column_datasets_keep_their_columns_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cols");
    let sizes = [4u32, 9, 2];
    let mut names = Vec::new();
    for (p, &n) in sizes.iter().enumerate() {
        let name = format!("w{p}");
        ragged_part(&part_path(&root, &name, Some("tokens")), p as u32, n);
        dense_part(
            &part_path(&root, &name, Some("label")),
            p as u32,
            n,
            Codec::Zstd,
        );
        names.push(name);
    }
    let m = commit(&root, &names, &local()).unwrap();
    let cols: Vec<&str> = m.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cols, ["label", "tokens"]);
    let col = |c: &str| OpenOptions {
        column: Some(c.into()),
        ..OpenOptions::default()
    };
    let tokens = RaggedStore::open_with(&root, col("tokens")).unwrap();
    let labels = DenseStore::open_with(&root, col("label")).unwrap();
    assert_eq!((tokens.len(), labels.len()), (15, 15));
    let global: Vec<(u32, u32)> = sizes
        .iter()
        .enumerate()
        .flat_map(|(p, &n)| (0..n).map(move |r| (p as u32, r)))
        .collect();
    let idx = [14u64, 0, 3, 4, 12, 13, 8, 8];
    let b = tokens.bind(alloc()).gather(&idx).unwrap();
    let l = labels.bind(alloc()).gather(&idx).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        let (p, r) = global[i as usize];
        let want: Vec<u8> = ragged_record(p, r)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(b.record(k), &want[..], "record {i}");
        assert_eq!(b.shapes()[k], want.len() as u64 / 2);
        assert_eq!(&l.bytes()[12 * k..12 * k + 12], &dense_record(p, r)[..]);
    }
    assert_eq!(
        tokens.shape_of(5).unwrap(),
        vec![ragged_record(1, 1).len() as u64]
    );
    // Several columns: one must be named, and it must exist.
    assert!(matches!(
        DenseStore::open(&root),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        DenseStore::open_with(&root, col("nope")),
        Err(Error::InvalidInput(_))
    ));
    // A part whose columns disagree in length is refused at commit, naming it.
    ragged_part(&part_path(&root, "bad", Some("tokens")), 7, 3);
    dense_part(&part_path(&root, "bad", Some("label")), 7, 4, Codec::Zstd);
    let e = append(&root, &["bad".to_string()], &local()).unwrap_err();
    assert!(
        e.to_string().contains("bad") && e.to_string().contains("record counts"),
        "{e}"
    );
    // A part that lacks one of the dataset's columns, or is one container where the dataset's
    // parts are folders of columns (and the reverse), is refused naming it.
    ragged_part(&part_path(&root, "half", Some("tokens")), 8, 3);
    dense_part(&part_path(&root, "flat", None), 9, 3, Codec::Zstd);
    for (part, what) in [("half", "column \"label\""), ("flat", "column \"label\"")] {
        let e = append(&root, &[part.to_string()], &local()).unwrap_err();
        assert!(
            matches!(e, Error::Format { .. })
                && e.to_string().contains(part)
                && e.to_string().contains(what),
            "{e}"
        );
    }
    let e = commit(&root, &["flat".to_string(), "w0".to_string()], &local()).unwrap_err();
    assert!(
        matches!(e, Error::Format { .. })
            && e.to_string().contains("w0")
            && e.to_string().contains("one container"),
        "{e}"
    );
}

#[test]
fn receipts_commit_what_reading_the_parts_would_and_readers_check_them() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("b");
    let (names, recs) = write_dense(&b, &[5, 3, 7], 0);
    // Each writer describes its part; the bytes travel to the committer and decode checked.
    let receipts: Vec<PartReceipt> = names
        .iter()
        .map(|n| {
            let bytes = describe_part(&b, n, &local()).unwrap().encode();
            PartReceipt::decode(&bytes).unwrap()
        })
        .collect();
    // The same version as a commit that reads the parts (then, as the next version).
    let by_name = commit(&b, &names[..2], &local()).unwrap();
    let by_receipt = commit_described(&b, &receipts[..2], &local()).unwrap();
    assert_eq!(by_receipt.version, 2);
    assert_eq!(
        (&by_name.columns, &by_name.parts),
        (&by_receipt.columns, &by_receipt.parts)
    );
    let appended = append_described(&b, &receipts[2..], &local()).unwrap();
    assert_eq!(appended.parts.len(), 3);
    assert_eq!(appended.parts[2], receipts[2].entry);
    let s = DenseStore::open(&b).unwrap();
    let idx: Vec<u64> = (0..recs.len() as u64).rev().collect();
    let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
    assert_eq!(s.bind(alloc()).gather(&idx).unwrap().bytes(), &want[..]);
    // A damaged receipt does not decode; listing a part twice, or again, is refused.
    let mut bytes = receipts[0].encode();
    bytes[20] ^= 1;
    assert!(PartReceipt::decode(&bytes).is_err());
    assert!(matches!(
        append_described(&b, &receipts[..1], &local()),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        commit_described(&b, &[receipts[0].clone(), receipts[0].clone()], &local()),
        Err(Error::InvalidInput(_))
    ));
    // A receipt of another schema is refused at commit, naming the part.
    let mut other = receipts[1].clone();
    other.columns[0].item_shape = vec![4];
    let e = commit_described(&b, &[receipts[0].clone(), other], &local()).unwrap_err();
    assert!(
        matches!(e, Error::Format { .. }) && e.to_string().contains(&names[1]),
        "{e}"
    );
    // A receipt that does not match its part commits, but the part is refused when first read.
    let mut wrong = receipts[1].clone();
    wrong.entry.columns[0].manifest_crc ^= 1;
    commit_described(&b, &[receipts[0].clone(), wrong], &local()).unwrap();
    let s = DenseStore::open(&b).unwrap();
    assert_eq!(s.bind(alloc()).gather(&[0]).unwrap().bytes(), &recs[0][..]);
    let e = s.bind(alloc()).gather(&[6]).unwrap_err();
    assert!(e.to_string().contains(&names[1]), "{e}");
}

#[test]
fn racing_commits_never_both_win_and_parts_from_many_writers_commit_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("race");
    // Eight writers, five parts each, written at once.
    let names: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8u32)
            .map(|w| {
                let root = &root;
                s.spawn(move || {
                    (0..5u32)
                        .map(|k| {
                            let name = new_part_name(&format!("w{w}")).unwrap();
                            dense_part(&part_path(root, &name, None), w * 5 + k, 1 + k, Codec::Raw);
                            name
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(commit(&root, &names, &local()).unwrap().records(), 8 * 15);
    // Eight appenders race, each retrying on conflict: every part lands exactly once, and each
    // version was won by exactly one of them.
    let extra: Vec<String> = (0..8u32)
        .map(|k| {
            let name = format!("late{k}");
            dense_part(&part_path(&root, &name, None), 100 + k, 2, Codec::Raw);
            name
        })
        .collect();
    let conflicts: usize = std::thread::scope(|s| {
        let hs: Vec<_> = extra
            .iter()
            .map(|name| {
                let root = &root;
                s.spawn(move || {
                    let mut lost = 0;
                    loop {
                        match append(root, std::slice::from_ref(name), &local()) {
                            Ok(_) => return lost,
                            Err(Error::Conflict { version, .. }) => {
                                assert!(version >= 2);
                                lost += 1;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let versions = dataset::versions(&root, &local()).unwrap();
    assert_eq!(
        versions,
        (1..=9).collect::<Vec<u64>>(),
        "{conflicts} conflicts"
    );
    let last = dataset::read_version(&root, None, &local())
        .unwrap()
        .unwrap();
    let mut listed: Vec<&str> = last.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(listed.len(), 48);
    listed.sort_unstable();
    listed.dedup();
    assert_eq!(listed.len(), 48, "a part listed twice");
    // `commit` publishes a version listing exactly what it is given.
    let v10 = commit(&root, &names[..2], &local()).unwrap();
    assert_eq!((v10.version, v10.parts.len()), (10, 2));
    assert_eq!(DenseStore::open(&root).unwrap().len(), 3);
}

#[test]
fn a_part_that_is_not_what_the_version_lists_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tamper");
    let (names, _) = write_dense(&root, &[4, 4, 4], 0);
    commit(&root, &names, &local()).unwrap();
    // Part p0001 replaced by another container of the same shape and count after the commit.
    let p1 = part_path(&root, "p0001", None);
    std::fs::remove_dir_all(&p1).unwrap();
    dense_part(&p1, 9, 4, Codec::Raw);
    let v = DenseStore::open(&root).unwrap().bind(alloc());
    // Records of the other parts still read; the replaced one is refused, named.
    v.gather(&[0, 11]).unwrap();
    let e = v.gather(&[5]).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(
        e.to_string().contains("p0001") && e.to_string().contains("manifest crc32c"),
        "{e}"
    );
    // A part removed: an I/O error naming its path, at first touch only.
    std::fs::remove_dir_all(part_path(&root, "p0002", None)).unwrap();
    let v = DenseStore::open(&root).unwrap().bind(alloc());
    v.gather(&[0]).unwrap();
    let e = v.gather(&[9]).unwrap_err();
    assert!(e.to_string().contains("p0002"), "{e}");
    // A schema that differs is refused at commit, naming the part.
    let odd = part_path(&root, "odd", None);
    let mut w = DenseWriter::create(
        &odd,
        DType::Int32,
        &[4],
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&[0u8; 16]).unwrap();
    w.close().unwrap();
    let e = append(&root, &["odd".to_string()], &local()).unwrap_err();
    assert!(
        matches!(e, Error::Format { .. }) && e.to_string().contains("odd"),
        "{e}"
    );
    // An unpublished or missing part too.
    let e = append(&root, &["ghost".to_string()], &local()).unwrap_err();
    assert!(e.to_string().contains("ghost"), "{e}");
    // A damaged version manifest: a corruption error naming it, at open.
    let vfile = root.join("versions").join(format!("{:020}.zrv", 1));
    let mut b = std::fs::read(&vfile).unwrap();
    b[20] ^= 1;
    std::fs::write(&vfile, b).unwrap();
    let e = DenseStore::open(&root).unwrap_err();
    assert!(e.is_corruption() && e.to_string().contains(".zrv"), "{e}");
}

#[test]
fn gc_removes_only_old_parts_no_version_lists() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("gc");
    let (names, _) = write_dense(&root, &[3, 3], 0);
    commit(&root, &names, &local()).unwrap();
    write_dense(&root, &[2], 5); // p0005: a writer that never committed
    let young = gc(&root, 3600, false, &local()).unwrap();
    assert_eq!(
        (young.removed.len(), young.young.clone()),
        (0, vec!["p0005".to_string()])
    );
    let dry = gc(&root, 0, true, &local()).unwrap();
    assert_eq!(dry.removed, ["p0005"]);
    assert!(
        part_path(&root, "p0005", None).exists(),
        "a dry run removes nothing"
    );
    let done = gc(&root, 0, false, &local()).unwrap();
    assert_eq!(done.removed, ["p0005"]);
    assert!(done.files >= 3);
    assert!(!part_path(&root, "p0005", None).exists());
    let s = DenseStore::open(&root).unwrap();
    assert_eq!(s.len(), 6);
    s.verify().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random batches of small raw records over many parts are read in one pass across the
    /// parts (Dense and Ragged, under every cold-read policy: `Always` requests every record
    /// before the copy); each reads exactly what a flat list of the same records holds, and a
    /// record damaged in one part is a corruption error naming that part, never data.
    #[test]
    fn one_pass_gathers_across_parts_match_a_flat_oracle(
        sizes in prop::collection::vec(0u32..40, 2..12),
        picks in prop::collection::vec(any::<u64>(), 1..300),
        policy in 0usize..3,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (dense, ragged) = (dir.path().join("d"), dir.path().join("r"));
        let (names, recs) = write_dense(&dense, &sizes, 0);
        commit(&dense, &names, &local()).unwrap();
        let mut flat: Vec<Vec<u16>> = Vec::new();
        for (p, (name, &n)) in names.iter().zip(&sizes).enumerate() {
            ragged_part_coded(&part_path(&ragged, name, None), p as u32, n, Codec::Raw);
            flat.extend((0..n).map(|r| ragged_record(p as u32, r)));
        }
        commit(&ragged, &names, &local()).unwrap();
        if recs.is_empty() {
            return Ok(());
        }
        let opts = || OpenOptions {
            cold_reads: [ColdReads::Auto, ColdReads::Always, ColdReads::Never][policy],
            ..OpenOptions::default()
        };
        let idx: Vec<u64> = picks.iter().map(|p| p % recs.len() as u64).collect();
        let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        let d = DenseStore::open_with(&dense, opts()).unwrap().bind(alloc());
        let got = d.gather(&idx).unwrap();
        prop_assert_eq!(got.bytes(), &want[..]);
        let r = RaggedStore::open_with(&ragged, opts()).unwrap().bind(alloc());
        let got = r.gather(&idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            let want: Vec<u8> = flat[i as usize].iter().flat_map(|v| v.to_le_bytes()).collect();
            prop_assert_eq!(got.record(k), &want[..], "record {}", i);
        }
        // One byte of a picked record flipped in its part's shard (not record 0 of part 0, whose
        // twelve zero bytes a shard's header may hold too).
        let Some(&i) = idx.iter().find(|&&i| i != 0) else {
            return Ok(());
        };
        let i = i as usize;
        let (p, local_id) = (recs[i][0] as usize, u32::from_le_bytes(recs[i][4..8].try_into().unwrap()));
        let part = part_path(&dense, &names[p], None);
        let mut shards: Vec<_> = std::fs::read_dir(&part).unwrap()
            .map(|e| e.unwrap().path())
            .filter(|f| f.extension().is_some_and(|x| x == "zrd"))
            .collect();
        shards.sort();
        let damaged = shards.into_iter().find(|f| {
                let b = std::fs::read(f).unwrap();
                let needle = &recs[i][..];
                match b.windows(12).position(|w| w == needle) {
                    Some(at) => {
                        let mut b = b;
                        b[at + 8] ^= 0x40;
                        std::fs::write(f, b).unwrap();
                        true
                    }
                    None => false,
                }
            });
        prop_assert!(damaged.is_some(), "record {} not found in its part's shards", i);
        let d = DenseStore::open_with(&dense, opts()).unwrap().bind(alloc());
        let e = d.gather(&idx).unwrap_err();
        prop_assert!(e.is_corruption(), "{}", e);
        prop_assert!(e.to_string().contains(&names[p]), "{}", e);
        prop_assert!(e.to_string().contains(&format!("record {local_id}")), "{}", e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any split of records into parts (empty parts included) and any gather read exactly what a
    /// flat list of the same records holds.
    #[test]
    fn gathers_across_any_parts_match_a_flat_oracle(
        sizes in prop::collection::vec(0u32..9, 1..7),
        picks in prop::collection::vec(any::<u64>(), 0..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        let (names, recs) = write_dense(&root, &sizes, 0);
        commit(&root, &names, &local()).unwrap();
        let s = DenseStore::open(&root).unwrap();
        prop_assert_eq!(s.len(), recs.len() as u64);
        if recs.is_empty() {
            return Ok(());
        }
        let idx: Vec<u64> = picks.iter().map(|p| p % recs.len() as u64).collect();
        let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        let got = s.bind(alloc()).gather(&idx).unwrap();
        prop_assert_eq!(got.bytes(), &want[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A store read through a block buffer (`buffer_blocks`), a dataset of parts or one container,
    /// Dense or Ragged, gathers exactly what it gathers without one, batch after batch, and holds
    /// at most its bound of blocks.
    #[test]
    fn block_buffered_gathers_match_plain_ones(
        sizes in prop::collection::vec(1u32..30, 1..5),
        block in 1u64..20,
        blocks in 1usize..4,
        batches in prop::collection::vec(prop::collection::vec(any::<u64>(), 0..30), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (dense, ragged) = (dir.path().join("d"), dir.path().join("r"));
        let (names, _) = write_dense(&dense, &sizes, 0);
        commit(&dense, &names, &local()).unwrap();
        for (p, &n) in sizes.iter().enumerate() {
            ragged_part(&part_path(&ragged, &names[p], None), p as u32, n);
        }
        commit(&ragged, &names, &local()).unwrap();
        for root in [dense.clone(), part_path(&dense, &names[0], None)] {
            let (plain, buffered) = (DenseStore::open(&root).unwrap(), DenseStore::open(&root).unwrap());
            buffered.buffer_blocks(block, blocks).unwrap();
            let view = buffered.bind(alloc());
            for picks in &batches {
                let idx: Vec<u64> = picks.iter().map(|p| p % plain.len()).collect();
                let want = plain.bind(alloc()).gather(&idx).unwrap();
                let got = view.gather(&idx).unwrap();
                prop_assert_eq!(got.bytes(), want.bytes());
                prop_assert!(view.block_buffer_stats().unwrap().held <= blocks);
            }
        }
        for root in [ragged.clone(), part_path(&ragged, &names[0], None)] {
            let (plain, buffered) = (RaggedStore::open(&root).unwrap(), RaggedStore::open(&root).unwrap());
            buffered.buffer_blocks(block, blocks).unwrap();
            for picks in &batches {
                let idx: Vec<u64> = picks.iter().map(|p| p % plain.len()).collect();
                let (want, got) = (plain.bind(alloc()).gather(&idx).unwrap(), buffered.bind(alloc()).gather(&idx).unwrap());
                prop_assert_eq!(got.values(), want.values());
                prop_assert_eq!(got.shapes(), want.shapes());
                prop_assert_eq!(got.cu_seqlens(), want.cu_seqlens());
            }
            let s = buffered.block_buffer_stats().unwrap();
            prop_assert!(s.held <= blocks && s.records == block);
        }
    }
}

/// A block buffer fetches a block once, reads it checked (a damaged record is a `Corrupt` error,
/// never wrong bytes), and keeps its shape: asking again with another is an error.
#[test]
fn a_block_buffer_fetches_each_block_once_and_checks_what_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("c");
    dense_part(&root, 1, 100, Codec::Raw);
    let s = DenseStore::open(&root).unwrap();
    s.buffer_blocks(10, 4).unwrap();
    s.buffer_blocks(10, 4).unwrap();
    assert!(matches!(
        s.buffer_blocks(10, 5),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        DenseStore::open(&root).unwrap().buffer_blocks(0, 4),
        Err(Error::InvalidInput(_))
    ));
    let v = s.bind(alloc());
    let idx: Vec<u64> = (20..40).rev().chain([21, 39]).collect();
    let got = v.gather(&idx).unwrap();
    let want: Vec<u8> = idx
        .iter()
        .flat_map(|&i| dense_record(1, i as u32))
        .collect();
    assert_eq!(got.bytes(), &want[..]);
    let st = s.block_buffer_stats().unwrap();
    assert_eq!(
        (st.held, st.fetched, st.hits, st.held_bytes),
        (2, 2, 0, 240)
    );
    v.gather(&[25, 35]).unwrap();
    assert_eq!(s.block_buffer_stats().unwrap().hits, 2);
    // A flipped byte in record 57's stored bytes: the block that holds it is never served.
    let at = s.record_extents(&[57]).unwrap()[0].clone();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&at.path)
        .unwrap();
    let mut byte = [0u8];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut byte, at.offset).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[byte[0] ^ 0x40], at.offset).unwrap();
    let fresh = DenseStore::open(&root).unwrap();
    fresh.buffer_blocks(10, 4).unwrap();
    let e = fresh.bind(alloc()).gather(&[55]).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert_eq!(fresh.block_buffer_stats().unwrap().held, 0);
}

/// A Ragged writer sizes its placement blocks by its first append (about 256 KiB of records, 64
/// to 65,536 records), so consecutive small records share a shard run; `block_records` fixes
/// it; 0 is refused.
#[test]
fn a_ragged_writer_sizes_its_shard_runs_by_its_first_append() {
    let dir = tempfile::tempdir().unwrap();
    // The shard file of records `ids` in a 4-shard Ragged container of `n` `len`-byte records.
    let shards_of = |name: &str, len: usize, n: usize, block: Option<u64>, ids: &[u64]| {
        let path = dir.path().join(name);
        let opts = WriterOptions {
            block_records: block,
            ..WriterOptions::default()
        };
        let mut w = RaggedWriter::create(&path, DType::UInt8, 1, Codec::Raw, opts).unwrap();
        let values = vec![7u8; len * n];
        let cu: Vec<i32> = (0..=n).map(|k| (k * len) as i32).collect();
        w.append(&values, &cu, &vec![len as u64; n]).unwrap();
        w.close().unwrap();
        let s = RaggedStore::open(&path).unwrap();
        assert_eq!(s.data_shards(), 4);
        let e = s.record_extents(ids).unwrap();
        e.into_iter().map(|x| x.path).collect::<Vec<_>>()
    };
    // 100-byte records: blocks of 2,621 records; record 64 (and 2,620) in record 0's shard.
    let small = shards_of("small", 100, 6000, None, &[0, 64, 2620, 2621]);
    assert_eq!(small[0], small[1]);
    assert_eq!(small[0], small[2]);
    assert_ne!(small[0], small[3]);
    // 64 KiB records: the least, 64 records.
    let large = shards_of("large", 64 << 10, 130, None, &[0, 63, 64]);
    assert_eq!(large[0], large[1]);
    assert_ne!(large[0], large[2]);
    // Fixed by the option.
    let fixed = shards_of("fixed", 100, 300, Some(64), &[0, 63, 64]);
    assert_eq!(fixed[0], fixed[1]);
    assert_ne!(fixed[0], fixed[2]);
    let zero = WriterOptions {
        block_records: Some(0),
        ..WriterOptions::default()
    };
    assert!(matches!(
        RaggedWriter::create(dir.path().join("zero"), DType::UInt8, 1, Codec::Raw, zero),
        Err(Error::InvalidInput(_))
    ));
}
