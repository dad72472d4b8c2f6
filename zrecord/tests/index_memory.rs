//! The process's index memory stays within its bound (`zrecord::set_index_memory`): random reads
//! over containers whose indexes outgrow it keep at most half the bound of index pages read in
//! (the paged regions' RSS, from `/proc/self/smaps`), return exactly the records, and `verify()` still reads every entry. Its own test binary:
//! the bound is process-wide.

mod support;

use support::fixtures::{alloc, tiny_dense, tiny_ragged, tiny_record, tiny_value as value};
use zrecord::dataset::{commit, part_path};
use zrecord::{DenseStore, DenseView, RaggedStore, RaggedView, RemoteOptions};

/// Records a container: a 4.7 MiB index (16 bytes a record), past the bound set below.
const N: u64 = 300_000;

/// `k` record ids below [`N`] drawn from the generator state `x`.
fn draw(x: &mut u64, k: usize) -> Vec<u64> {
    (0..k)
        .map(|_| {
            *x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (*x >> 33) % N
        })
        .collect()
}

/// Gathers `idx` from both stores and checks every record.
fn check_batch(dv: &DenseView, rv: &RaggedView, idx: &[u64]) {
    let got = dv.gather(idx).unwrap();
    let want: Vec<u8> = idx.iter().map(|&i| value(i)).collect();
    assert_eq!(got.bytes(), &want[..]);
    let b = rv.gather(idx).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(b.record(k), &tiny_record(i)[..], "record {i}");
    }
}

/// Resident KiB of this process's maps of files named `name`, and how many there are.
fn file_maps_kib(name: &str) -> (u64, usize) {
    maps_kib(|head, _| head.ends_with(name))
}

/// Resident KiB of this process's anonymous maps of exactly `sizes` bytes each (the paged
/// indexes' regions, as long as their index files), and how many there are.
fn regions_kib(sizes: &[u64]) -> (u64, usize) {
    maps_kib(|head, size_kib| {
        head.split_whitespace().count() == 5
            && sizes.iter().any(|&s| s.div_ceil(4096) * 4 == size_kib)
    })
}

/// Resident KiB of the maps `pick(header line, size in KiB)` picks, and how many there are.
fn maps_kib(pick: impl Fn(&str, u64) -> bool) -> (u64, usize) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut total, mut maps) = (0, 0);
    let mut head = "";
    let mut counting = false;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        let kib = || words.clone().next().unwrap().parse::<u64>().unwrap();
        if first.contains('-') && !first.ends_with(':') {
            head = line;
            counting = false;
        } else if first == "Size:" {
            counting = pick(head, kib());
            maps += usize::from(counting);
        } else if counting && first == "Rss:" {
            total += kib();
        }
    }
    (total, maps)
}

#[test]
fn random_reads_keep_index_pages_within_the_bound() {
    const BOUND: usize = 2 << 20;
    zrecord::set_index_memory(BOUND);
    let dir = tempfile::tempdir().unwrap();
    let dense = dir.path().join("d");
    tiny_dense(&dense, N);
    let ragged = dir.path().join("r");
    tiny_ragged(&ragged, N);

    // Both indexes (4.7 and 7 MiB) outgrow the copies' half of the bound (1 MiB): they are
    // read by page, and the open keeps no map of them.
    let d = DenseStore::open(&dense).unwrap();
    let r = RaggedStore::open(&ragged).unwrap();
    assert_eq!(
        file_maps_kib("index.zri"),
        (0, 0),
        "an index file still mapped"
    );
    let sizes: Vec<u64> = [&dense, &ragged]
        .iter()
        .map(|p| std::fs::metadata(p.join("index.zri")).unwrap().len())
        .collect();
    // Two regions, unless the maps hold another anonymous map of one of those sizes by chance.
    let counted = regions_kib(&sizes).1 == 2;
    let (dv, rv) = (d.bind(alloc()), r.bind(alloc()));
    let mut most = 0;
    let mut x = 1u64;
    for _ in 0..400 {
        let idx = draw(&mut x, 64);
        check_batch(&dv, &rv, &idx);
        assert_eq!(r.shape_of(idx[0]).unwrap(), vec![1 + idx[0] % 3]);
        most = most.max(regions_kib(&sizes).0);
    }
    if counted {
        // Half the bound, plus what one batch of 64 records reads in past it: a whole index
        // page (64 KiB and a page) the first time, two memory pages an entry after that.
        let batch_kib = 64 * 72;
        assert!(
            most <= ((BOUND as u64 / 2) >> 10) + batch_kib,
            "{most} KiB of index pages read in"
        );
        assert!(
            most > 256,
            "{most} KiB: too few pages read in to test the bound"
        );
    }
    // Threads reading at once, each releasing the others' pages whenever the count passes the
    // bound: no read sees a page released under it (it would read zeros: a checksum error).
    std::thread::scope(|scope| {
        for t in 0..3u64 {
            let (dv, rv) = (&dv, &rv);
            scope.spawn(move || {
                let mut x = 77 + t;
                for _ in 0..150 {
                    check_batch(dv, rv, &draw(&mut x, 48));
                }
            });
        }
    });
    // verify() reads every entry, then reads go on.
    d.verify().unwrap();
    r.verify().unwrap();
    let got = dv.gather(&[N - 1, 0, 7]).unwrap();
    assert_eq!(got.bytes(), &[value(N - 1), value(0), value(7)]);

    // A dataset of parts whose indexes are read by page too: random batches go across the parts
    // in one pass, each part's pages checked and held before its entries are read.
    let parts = [N / 2, N / 3, N / 5];
    let (pd, pr) = (dir.path().join("pd"), dir.path().join("pr"));
    let mut names = Vec::new();
    for (k, &n) in parts.iter().enumerate() {
        let name = format!("p{k}");
        tiny_dense(&part_path(&pd, &name, None), n);
        tiny_ragged(&part_path(&pr, &name, None), n);
        names.push(name);
    }
    commit(&pd, &names, &RemoteOptions::default()).unwrap();
    commit(&pr, &names, &RemoteOptions::default()).unwrap();
    let (dv, rv) = (
        DenseStore::open(&pd).unwrap().bind(alloc()),
        RaggedStore::open(&pr).unwrap().bind(alloc()),
    );
    assert_eq!(file_maps_kib("index.zri"), (0, 0), "a part's index mapped");
    let local = |i: u64| {
        let (mut i, mut p) = (i, 0);
        while i >= parts[p] {
            i -= parts[p];
            p += 1;
        }
        i
    };
    let total: u64 = parts.iter().sum();
    let mut x = 5u64;
    for _ in 0..200 {
        let idx: Vec<u64> = draw(&mut x, 96).iter().map(|i| i * 7 % total).collect();
        let got = dv.gather(&idx).unwrap();
        let want: Vec<u8> = idx.iter().map(|&i| value(local(i))).collect();
        assert_eq!(got.bytes(), &want[..]);
        let b = rv.gather(&idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(b.record(k), &tiny_record(local(i))[..], "record {i}");
        }
    }
}
