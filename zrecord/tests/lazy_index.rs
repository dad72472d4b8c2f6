//! Containers larger than the eager bound (4 Mi records) open without reading their index: each
//! index page is checked (checksum, every entry's structure and extent) the first time a read
//! needs it. Reads of checked pages return exactly the records; a damaged page is a corruption
//! error naming the page when a read first needs it, never data, and `verify()` finds it too.

mod support;

use support::fixtures::{alloc, tiny_dense, tiny_ragged, tiny_record, tiny_value as value};
use zrecord::{DenseStore, RaggedStore};

/// One more page than the eager bound holds.
const N: u64 = (4 << 20) + 4096 + 17;

#[test]
fn a_large_dense_index_is_checked_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    tiny_dense(&path, N);

    // Damage index page 700's body: the open does not notice (it reads no page).
    let ipath = path.join("index.zri");
    let mut index = std::fs::read(&ipath).unwrap();
    let page_len = 4096 * 16 + 4;
    let at = 64 + 700 * page_len + 100;
    index[at] ^= 0x40;
    std::fs::write(&ipath, &index).unwrap();

    let s = DenseStore::open(&path).unwrap();
    let v = s.bind(alloc());
    let idx: Vec<u64> = (0..2000u64).map(|k| (k * 9973) % (700 * 4096)).collect();
    let got = v.gather(&idx).unwrap();
    let want: Vec<u8> = idx.iter().map(|&i| value(i)).collect();
    assert_eq!(got.bytes(), &want[..]);
    // The last, partial page reads too.
    assert_eq!(v.gather(&[N - 1]).unwrap().bytes(), &[value(N - 1)]);
    let e = v.gather(&[700 * 4096 + 5]).unwrap_err();
    assert!(
        e.is_corruption() && e.to_string().contains("index page 700"),
        "{e}"
    );
    // Still refused on the next read (the page is not marked checked), and by verify().
    assert!(v.gather(&[700 * 4096]).is_err());
    let e = s.verify().unwrap_err();
    assert!(e.to_string().contains("index page 700"), "{e}");
}

#[test]
fn a_large_ragged_index_reads_shapes_after_checking_their_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    tiny_ragged(&path, N);
    let s = RaggedStore::open(&path).unwrap();
    assert_eq!(s.shape_of(N - 2).unwrap(), vec![1 + (N - 2) % 3]);
    let idx = [N - 1, 3, 4 << 20, 12_345];
    let b = s.bind(alloc()).gather(&idx).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(b.record(k), &tiny_record(i)[..], "record {i}");
    }
    s.verify().unwrap();
}
