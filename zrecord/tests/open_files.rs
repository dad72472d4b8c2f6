//! A process reads a dataset of many parts under a low limit on open files: a mapped shard holds
//! no descriptor once mapped, so 300 parts of 4 shards (1,200 maps) read under a limit of 256
//! open files. One test in its own process: it lowers this process's limit.

use zrecord::dataset::{commit, part_path};
use zrecord::{
    Codec, DType, DenseStore, DenseWriter, RemoteOptions, SystemAllocator, WriterOptions,
};

const PARTS: u64 = 300;
const PER_PART: u64 = 8;

fn record(i: u64) -> [u8; 8] {
    (i * 0x9E37_79B9).to_le_bytes()
}

#[test]
fn hundreds_of_parts_read_under_a_limit_of_256_open_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("d");
    let mut names = Vec::new();
    for p in 0..PARTS {
        let name = format!("part-{p:04}");
        let opts = WriterOptions {
            data_shards: 4,
            ..WriterOptions::default()
        };
        let path = part_path(&root, &name, None);
        let mut w = DenseWriter::create(&path, DType::UInt64, &[], Codec::Raw, opts).unwrap();
        let data: Vec<u8> = (p * PER_PART..(p + 1) * PER_PART)
            .flat_map(record)
            .collect();
        w.append(&data).unwrap();
        w.close().unwrap();
        names.push(name);
    }
    commit(&root, &names, &RemoteOptions::default()).unwrap();
    let low = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 256,
    };
    // SAFETY: setrlimit with a valid struct; it only lowers this test process's own limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let s = DenseStore::open(&root).unwrap();
    let v = s.bind(std::sync::Arc::new(SystemAllocator::new()));
    // Every part, in an order that leaves each part open while the next ones open.
    let idx: Vec<u64> = (0..PER_PART)
        .flat_map(|r| (0..PARTS).map(move |p| p * PER_PART + r))
        .collect();
    let want: Vec<u8> = idx.iter().flat_map(|&i| record(i)).collect();
    assert_eq!(v.gather(&idx).unwrap().bytes(), &want[..]);
}
