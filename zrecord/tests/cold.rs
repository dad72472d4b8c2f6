//! Cold gathers through the public API: under every `ColdReads` policy, a gather of a store whose
//! pages were evicted returns the stored bytes, and a damaged record is still reported (the cold
//! path requests pages; the copy that verifies them is the warm one).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use zrecord::{
    Allocator, Codec, ColdReads, DType, DenseStore, Error, OpenOptions, RaggedStore, RaggedWriter,
    SystemAllocator, WriterOptions,
};

fn evict(path: &std::path::Path) {
    for f in zrecord::container_files(path).unwrap() {
        let file = std::fs::File::open(&f).unwrap();
        file.sync_all().unwrap();
        // SAFETY: the descriptor is open for the call; the advice only drops clean cached pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn opts(cold: ColdReads) -> OpenOptions {
    OpenOptions {
        cold_reads: cold,
        ..OpenOptions::default()
    }
}

#[test]
fn every_policy_returns_the_stored_records_of_an_evicted_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let (n, stride) = (3000usize, 2048usize);
    let data: Vec<u8> = (0..n * stride).map(|k| (k * 31 / 7) as u8).collect();
    let mut w = zrecord::DenseWriter::create(
        &path,
        DType::Int32,
        &[512],
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let idx: Vec<u64> = (0..256u64).map(|k| (k * 2654435761) % n as u64).collect();
    for cold in [ColdReads::Auto, ColdReads::Always, ColdReads::Never] {
        evict(&path);
        let store = DenseStore::open_with(&path, opts(cold)).unwrap();
        let b = store.bind(alloc.clone()).gather(&idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &b.bytes()[k * stride..(k + 1) * stride],
                &data[i * stride..(i + 1) * stride],
                "{cold:?} record {i}"
            );
        }
        let ext = store.record_extents(&idx[..3]).unwrap();
        assert_eq!(ext.len(), 3);
        assert!(ext.iter().all(|e| e.len == stride as u64));
    }
    assert!(matches!(
        DenseStore::open(&path).unwrap().record_extents(&[n as u64]),
        Err(Error::IndexOutOfRange { .. })
    ));
}

#[test]
fn a_damaged_record_is_reported_on_the_cold_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let lens: Vec<u64> = (0..500u64).map(|k| 16 + k % 300).collect();
    let total: u64 = lens.iter().sum();
    let values: Vec<u8> = (0..total * 4).map(|k| (k % 251) as u8).collect();
    let mut cu = vec![0i32];
    for l in &lens {
        cu.push(cu.last().unwrap() + *l as i32);
    }
    let mut w =
        RaggedWriter::create(&path, DType::Int32, 1, Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&values, &cu, &lens).unwrap();
    w.close().unwrap();
    let victim = 250u64;
    let ext = RaggedStore::open(&path)
        .unwrap()
        .record_extents(&[victim])
        .unwrap();
    let mut bytes = std::fs::read(&ext[0].path).unwrap();
    bytes[ext[0].offset as usize + 5] ^= 0x40;
    std::fs::write(&ext[0].path, &bytes).unwrap();
    evict(&path);
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let view = RaggedStore::open_with(&path, opts(ColdReads::Always))
        .unwrap()
        .bind(alloc);
    let idx: Vec<u64> = (0..100u64).map(|k| k * 5).collect();
    match view.gather(&idx) {
        Err(Error::Corrupt { at, .. }) => assert_eq!(at.record, Some(victim)),
        other => panic!("expected a corruption error for record {victim}, got {other:?}"),
    }
}
