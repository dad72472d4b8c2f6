//! Bad input is rejected with a typed error and changes nothing; publish is atomic.

mod support;

use support::*;
use zrecord::{
    Codec, DType, DenseStore, DenseWriter, Error, RaggedStore, RaggedWriter, WriterOptions,
};

fn list(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn nothing_is_visible_before_close_and_nothing_after_drop() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c");
    let mut w =
        DenseWriter::create(&p, DType::UInt8, &[4], Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&[1u8; 40]).unwrap();
    assert!(
        !p.exists(),
        "the destination must not appear before close()"
    );
    assert!(DenseStore::open(&p).is_err());
    w.close().unwrap();
    assert!(p.exists());
    assert_eq!(
        list(dir.path()),
        vec!["c".to_string()],
        "no temp dir or lock file may remain"
    );
    assert_eq!(DenseStore::open(&p).unwrap().len(), 10);

    let q = dir.path().join("dropped");
    let mut w =
        RaggedWriter::create(&q, DType::Int32, 1, Codec::Zstd, WriterOptions::default()).unwrap();
    w.append(&[0u8; 12], &[0, 3], &[3]).unwrap();
    drop(w);
    assert!(!q.exists());
    assert_eq!(
        list(dir.path()),
        vec!["c".to_string()],
        "a dropped writer leaves nothing behind"
    );
}

#[test]
fn destination_must_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c");
    dense_fixture(&p, Codec::Raw, 2, 3, &[2]);
    let e = DenseWriter::create(&p, DType::UInt8, &[4], Codec::Raw, WriterOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(ref x) if x == &p), "{e}");
    // A destination that appears while the writer runs is not clobbered either.
    let q = dir.path().join("late");
    let mut w =
        DenseWriter::create(&q, DType::UInt8, &[1], Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&[9]).unwrap();
    std::fs::create_dir(&q).unwrap();
    std::fs::write(q.join("keep"), b"mine").unwrap();
    let e = w.close().unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert_eq!(std::fs::read(q.join("keep")).unwrap(), b"mine");
    assert_eq!(list(dir.path()), vec!["c".to_string(), "late".to_string()]);
}

#[test]
fn missing_parents_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("xsub/train/joint");
    let mut w = DenseWriter::create(
        &p,
        DType::Float32,
        &[],
        Codec::Zstd,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&1.5f32.to_ne_bytes()).unwrap();
    w.close().unwrap();
    let v = DenseStore::open(&p).unwrap().bind(alloc());
    let r = v.get(0).unwrap();
    assert_eq!(r.shape(), &[] as &[u64]);
    assert_eq!(r.bytes(), &1.5f32.to_ne_bytes());
}

#[test]
fn rejected_appends_change_nothing_and_writer_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    let mut w = DenseWriter::create(
        &p,
        DType::Int16,
        &[3],
        Codec::Zstd,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&[1u8; 12]).unwrap();
    for bad in [&[0u8; 5][..], &[0u8; 7][..], &[0u8; 13][..]] {
        let e = w.append(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        assert!(e.to_string().contains("6-byte records"), "{e}");
    }
    assert_eq!(w.len(), 2);
    w.append(&[2u8; 6]).unwrap();
    w.close().unwrap();
    let v = DenseStore::open(&p).unwrap().bind(alloc());
    assert_eq!(v.len(), 3);
    assert_eq!(
        v.range(0..3).unwrap().bytes(),
        &[[1u8; 12].as_slice(), &[2u8; 6]].concat()[..]
    );

    let q = dir.path().join("r");
    let mut w =
        RaggedWriter::create(&q, DType::Int32, 2, Codec::Raw, WriterOptions::default()).unwrap();
    let vals = [7u8; 24];
    /// values, cu_seqlens, shapes, and a phrase the error must contain.
    type Case<'a> = (&'a [u8], Vec<i32>, Vec<u64>, &'a str);
    let cases: Vec<Case> = vec![
        (&vals[..23], vec![0, 6], vec![2, 3], "multiple of itemsize"),
        (&vals, vec![], vec![], "n + 1"),
        (&vals, vec![1, 6], vec![2, 3], "must be 0"),
        (&vals, vec![0, 6], vec![2, 3, 1], "shapes hold"),
        (
            &vals,
            vec![0, 3, 3, 6],
            vec![1, 3, 0, 3, 1, 3],
            "strictly increase",
        ),
        (&vals, vec![0, 6], vec![3, 3], "has 9 elements"),
        (&vals, vec![0, 5], vec![5, 1], "ends at 5"),
        (&vals, vec![0, 6], vec![u64::MAX, 2], "overflows"),
    ];
    for (v, cu, sh, needle) in cases {
        let e = w.append(v, &cu, &sh).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        assert!(
            e.to_string().contains(needle),
            "{e} should mention {needle}"
        );
    }
    assert_eq!(w.len(), 0);
    w.append(&vals, &[0, 2, 6], &[1, 2, 2, 2]).unwrap();
    w.close().unwrap();
    let b = RaggedStore::open(&q)
        .unwrap()
        .bind(alloc())
        .gather(&[1, 0])
        .unwrap();
    assert_eq!(b.shapes(), &[2, 2, 1, 2]);
    assert_eq!(b.cu_seqlens(), &[0, 4, 6]);
}

#[test]
fn bad_writer_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x");
    let o = |s: u32, d: Option<Vec<u8>>| WriterOptions {
        data_shards: s,
        dict: d,
        ..WriterOptions::default()
    };
    for s in [0, 256] {
        let e = DenseWriter::create(&p, DType::UInt8, &[1], Codec::Raw, o(s, None)).unwrap_err();
        assert!(e.to_string().contains("1..=255"), "{e}");
    }
    assert!(DenseWriter::create(&p, DType::UInt8, &[1], Codec::ZstdDict, o(4, None)).is_err());
    assert!(
        DenseWriter::create(
            &p,
            DType::UInt8,
            &[1],
            Codec::Zstd,
            o(4, Some(vec![1, 2, 3]))
        )
        .is_err()
    );
    assert!(DenseWriter::create(&p, DType::UInt8, &[2, 0], Codec::Raw, o(4, None)).is_err());
    let e = DenseWriter::create(
        &p,
        DType::Float64,
        &[1 << 20, 1 << 20],
        Codec::Raw,
        o(4, None),
    )
    .unwrap_err();
    assert!(matches!(e, Error::LimitExceeded(_)), "{e}");
    assert!(RaggedWriter::create(&p, DType::UInt8, 0, Codec::Raw, o(4, None)).is_err());
    assert!(!p.exists());
    assert!(
        list(dir.path()).is_empty(),
        "rejected writers leave nothing: {:?}",
        list(dir.path())
    );
    assert_eq!(Codec::from_name("lz4"), None);
}

#[test]
fn out_of_range_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    dense_fixture(&p, Codec::Raw, 2, 5, &[2]);
    let store = DenseStore::open(&p).unwrap();
    let v = store.bind(alloc());
    let e = v.gather(&[0, 5]).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { index: 5, len: 5 }),
        "{e}"
    );
    assert!(e.to_string().contains("index 5") && e.to_string().contains("5 records"));
    assert!(v.range(3..6).is_err());
    let kept = v.gather(&[1]).unwrap();
    store.close();
    let e = v.gather(&[0]).unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "{e}");
    assert!(store.verify().is_err());
    assert_eq!(
        kept.bytes().len(),
        4,
        "batches gathered before close stay valid"
    );
}

#[test]
fn wrong_kind_and_foreign_paths() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    dense_fixture(&p, Codec::Raw, 1, 2, &[2]);
    let e = RaggedStore::open(&p).unwrap_err();
    assert!(e.to_string().contains("expected a Ragged container"), "{e}");
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    std::fs::create_dir(dir.path().join("foreign")).unwrap();
    std::fs::write(
        dir.path().join("foreign/manifest.zrm"),
        b"PAR1 not ours at all",
    )
    .unwrap();
    // (path under `dir`, what opening it must fail with)
    type Expected = fn(&Error) -> bool;
    let refusals: [(&str, Expected); 3] = [
        ("nope", |e| matches!(e, Error::Io { .. })),
        ("empty", Error::is_corruption),
        ("foreign", |e| e.to_string().contains("magic")),
    ];
    for (name, expected) in refusals {
        let e = DenseStore::open(dir.path().join(name)).unwrap_err();
        assert!(expected(&e), "{name}: {e}");
    }
}

#[test]
fn every_single_bit_flip_is_detected_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures: Vec<(std::path::PathBuf, bool)> = [Codec::Raw, Codec::Zstd, Codec::ZstdDict]
        .iter()
        .flat_map(|&c| {
            let d = dir.path().join(format!("d-{}", c.name()));
            dense_fixture(&d, c, 3, 7, &[5]);
            let r = dir.path().join(format!("r-{}", c.name()));
            ragged_fixture(&r, c, 2, 5);
            [(d, true), (r, false)]
        })
        .collect();
    let mut flips = 0u64;
    for (path, dense) in &fixtures {
        let check = || -> zrecord::Result<()> {
            if *dense {
                let s = DenseStore::open(path)?;
                s.verify()?;
                s.bind(alloc()).range(0..s.len())?;
            } else {
                let s = RaggedStore::open(path)?;
                s.verify()?;
                s.bind(alloc()).range(0..s.len())?;
            }
            Ok(())
        };
        check().expect("untouched fixture must verify (no false alarm)");
        for file in zrecord::container_files(path).unwrap() {
            let orig = std::fs::read(&file).unwrap();
            for bit in 0..orig.len() * 8 {
                let mut b = orig.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                std::fs::write(&file, &b).unwrap();
                let e = check().expect_err("flip must be detected");
                assert!(
                    e.is_corruption(),
                    "{}: bit {bit}: not a corruption error: {e}",
                    file.display()
                );
                assert_eq!(
                    e.corrupt_path(),
                    Some(file.as_path()),
                    "bit {bit}: error must name the flipped file: {e}"
                );
                flips += 1;
            }
            std::fs::write(&file, &orig).unwrap();
        }
        check().unwrap();
    }
    assert!(flips > 10_000, "only {flips} flips tested");
}

#[test]
fn every_truncation_and_extension_is_detected_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    dense_fixture(&d, Codec::Zstd, 2, 6, &[3]);
    let r = dir.path().join("r");
    ragged_fixture(&r, Codec::Raw, 3, 4);
    for (path, dense) in [(&d, true), (&r, false)] {
        let open = || -> zrecord::Result<()> {
            if dense {
                DenseStore::open(path).map(drop)
            } else {
                RaggedStore::open(path).map(drop)
            }
        };
        for file in zrecord::container_files(path).unwrap() {
            let orig = std::fs::read(&file).unwrap();
            for len in 0..orig.len() {
                std::fs::write(&file, &orig[..len]).unwrap();
                let e = open().expect_err("truncation must be detected at open");
                assert!(
                    e.is_corruption(),
                    "{} truncated to {len}: {e}",
                    file.display()
                );
            }
            let mut longer = orig.clone();
            longer.push(0);
            std::fs::write(&file, &longer).unwrap();
            assert!(open().unwrap_err().is_corruption());
            std::fs::remove_file(&file).unwrap();
            assert!(
                open().is_err(),
                "missing {} must be detected",
                file.display()
            );
            std::fs::write(&file, &orig).unwrap();
        }
        open().unwrap();
    }
}

/// Verified raw gathers copy records a group at a time and checksum them afterwards: groups of
/// many short records, records of 64 KiB and more read in one pass, and a damaged record in the
/// middle of a group must still be reported by its number, with nothing returned.
#[test]
fn grouped_verified_gathers_return_the_records_and_name_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g");
    let sizes: Vec<usize> = (0..600usize)
        .map(|k| match k % 50 {
            7 => 70_000,
            13 => 65_536,
            _ => 1 + (k * 37) % 900,
        })
        .collect();
    let total: usize = sizes.iter().sum();
    // Pseudo-random bytes: no window of a record repeats elsewhere, so the damage below lands in
    // the record it is meant for.
    let values = bytes(total, 7, false);
    let mut cu = vec![0i32];
    for s in &sizes {
        cu.push(cu[cu.len() - 1] + *s as i32);
    }
    let shapes: Vec<u64> = sizes.iter().map(|&s| s as u64).collect();
    let mut w =
        RaggedWriter::create(&path, DType::UInt8, 1, Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
    let record = |i: usize| &values[cu[i] as usize..cu[i + 1] as usize];
    let mut x = 7u64;
    let idx: Vec<u64> = (0..1_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % sizes.len() as u64
        })
        .collect();
    let view = RaggedStore::open(&path).unwrap().bind(alloc());
    let b = view.gather(&idx).unwrap();
    let got = b.values();
    let mut at = 0;
    for &i in &idx {
        let want = record(i as usize);
        assert_eq!(&got[at..at + want.len()], want, "record {i}");
        at += want.len();
    }
    assert_eq!(at, got.len());
    drop(b);
    drop(view);

    // Damage one byte of record 101 (short, so inside a group) in its shard.
    let damaged = 101usize;
    let want = record(damaged);
    let shard = zrecord::container_files(&path)
        .unwrap()
        .into_iter()
        .find(|f| {
            let bytes = std::fs::read(f).unwrap();
            bytes.windows(want.len()).any(|win| win == want)
        })
        .expect("the record's bytes are in a shard");
    let mut bytes = std::fs::read(&shard).unwrap();
    let pos = bytes
        .windows(want.len())
        .position(|win| win == want)
        .unwrap();
    bytes[pos + want.len() / 2] ^= 0x10;
    std::fs::write(&shard, &bytes).unwrap();
    let view = RaggedStore::open(&path).unwrap().bind(alloc());
    let batch: Vec<u64> = (90..140).collect();
    let e = view.gather(&batch).expect_err("damage must be detected");
    assert!(e.is_corruption(), "not a corruption error: {e}");
    assert!(
        e.to_string().contains(&format!("record {damaged}")),
        "the error names the record: {e}"
    );
    // The records around it still read.
    assert!(view.gather(&[100, 102]).is_ok());
}

/// Every write of a shard's data, but its last, ends on a 2 MiB file offset (so each aligned
/// 2 MiB of the shard is written by one call and the page cache can hold it as one large folio),
/// whatever the appends' sizes; the stored records read back unchanged.
#[test]
fn shard_writes_end_on_2_mib_boundaries_and_the_records_read_back() {
    use std::ffi::OsString;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};
    use zrecord::vfs::{LockGuard, WriteFile};
    use zrecord::{StdFs, Vfs};

    type Log = Arc<Mutex<Vec<(PathBuf, u64, u64)>>>;
    #[derive(Debug)]
    struct Recording(Log);
    struct File(Box<dyn WriteFile>, PathBuf, Log);
    impl WriteFile for File {
        fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            let end = offset + data.len() as u64;
            self.2.lock().unwrap().push((self.1.clone(), offset, end));
            self.0.write_at(offset, data)
        }
        fn write_parts_at(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
            let n: usize = parts.iter().map(|p| p.len()).sum();
            self.2
                .lock()
                .unwrap()
                .push((self.1.clone(), offset, offset + n as u64));
            self.0.write_parts_at(offset, parts)
        }
        fn sync(&self) -> io::Result<()> {
            self.0.sync()
        }
    }
    impl Vfs for Recording {
        fn create_dir(&self, p: &Path) -> io::Result<()> {
            StdFs.create_dir(p)
        }
        fn create_dir_all(&self, p: &Path) -> io::Result<Vec<PathBuf>> {
            StdFs.create_dir_all(p)
        }
        fn create_file(&self, p: &Path) -> io::Result<Box<dyn WriteFile>> {
            let name = PathBuf::from(p.file_name().unwrap());
            Ok(Box::new(File(StdFs.create_file(p)?, name, self.0.clone())))
        }
        fn sync_dir(&self, p: &Path) -> io::Result<()> {
            StdFs.sync_dir(p)
        }
        fn rename_noreplace(&self, a: &Path, b: &Path) -> io::Result<()> {
            StdFs.rename_noreplace(a, b)
        }
        fn remove_dir_all(&self, p: &Path) -> io::Result<()> {
            StdFs.remove_dir_all(p)
        }
        fn remove_file(&self, p: &Path) -> io::Result<()> {
            StdFs.remove_file(p)
        }
        fn exists(&self, p: &Path) -> io::Result<bool> {
            Vfs::exists(&StdFs, p)
        }
        fn list_dir(&self, p: &Path) -> io::Result<Vec<OsString>> {
            StdFs.list_dir(p)
        }
        fn try_lock(&self, p: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
            StdFs.try_lock(p)
        }
    }

    const ALIGN: u64 = 2 << 20;
    let dir = tempfile::tempdir().unwrap();
    let stride = 3_000usize; // not a divisor of 2 MiB: blocks end anywhere
    let n = 6_000usize; // ~17 MiB over 2 shards
    // Incompressible bytes, so the zstd container is as large as the raw one.
    let data = bytes(n * stride, 11, false);
    for (name, codec) in [("raw", Codec::Raw), ("zstd", Codec::Zstd)] {
        let log: Log = Arc::default();
        let path = dir.path().join(name);
        let opts = WriterOptions {
            data_shards: 2,
            vfs: Arc::new(Recording(log.clone())),
            ..WriterOptions::default()
        };
        let mut w =
            DenseWriter::create(&path, DType::UInt8, &[stride as u64], codec, opts).unwrap();
        // Appends of uneven sizes, one of a single record.
        for (a, b) in [(0, 1_700), (1_700, 1_701), (1_701, 4_950), (4_950, n)] {
            w.append(&data[a * stride..b * stride]).unwrap();
        }
        w.close().unwrap();
        let log = log.lock().unwrap();
        for shard in ["shard-000.zrd", "shard-001.zrd"] {
            let mut writes: Vec<(u64, u64)> = log
                .iter()
                .filter(|(p, _, _)| p.as_os_str() == shard)
                .map(|&(_, a, b)| (a, b))
                .filter(|&(a, _)| a > 0) // the header
                .collect();
            writes.sort();
            assert!(writes.len() > 2, "{name} {shard}: {writes:?}");
            assert!(
                writes[0].0 < ALIGN,
                "{name} {shard}: data from the header's end"
            );
            for pair in writes.windows(2) {
                assert_eq!(pair[0].1, pair[1].0, "{name} {shard}: contiguous writes");
            }
            for &(a, b) in &writes[..writes.len() - 1] {
                assert_eq!(
                    b % ALIGN,
                    0,
                    "{name} {shard}: write {a}..{b} ends off a boundary"
                );
            }
        }
        let view = DenseStore::open(&path).unwrap().bind(alloc());
        let all = view.range(0..n as u64).unwrap();
        assert!(
            all.bytes() == &data[..],
            "{name}: records read back unchanged"
        );
    }
}
