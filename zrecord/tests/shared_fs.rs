//! Stores whose files change under them, and stores read without memory maps (what a shared or
//! network file system gets):
//!
//! * a shard truncated in place under an open, memory-mapped store gives a typed error on the
//!   next gather and on `verify()`, never a `SIGBUS` that ends the process, with or without
//!   checksum verification, and every later read of the store fails too;
//! * the same under an unmapped store (`OpenOptions::mmap = Some(false)`);
//! * an unmapped store's gathers return exactly the records written (every codec, both layouts,
//!   several shards, duplicates, any order), and a flipped byte is a checksum error naming the
//!   record;
//! * a `SIGBUS` that is not zrecord's still ends the process (run in a child process);
//! * the file-system types that count as shared.

mod support;

use std::path::{Path, PathBuf};

use rand::Rng;
use support::fixtures::{alloc, dense_fixture, ragged_fixture};
use support::seeded::rng;
use zrecord::{
    Codec, Dense, DenseStore, Error, Layout, OpenOptions, Ragged, RaggedStore, Store, View,
};

fn opts(mmap: Option<bool>, verify: bool) -> OpenOptions {
    OpenOptions {
        mmap,
        verify,
        ..OpenOptions::default()
    }
}

/// Shard `s`'s file (`container_files` lists the manifest, the index, then the shards).
fn shard(path: &Path, s: u32) -> std::path::PathBuf {
    zrecord::container_files(path).unwrap()[2 + s as usize].clone()
}

fn truncate(file: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Opens the store of `n` records at `p` as a `Store<L>` with `o`, reads it once and truncates
/// shard `victim` under it to what `to` makes of its length; returns the store, its view, the
/// shard's path and length before, and the error of the next gather of every record.
fn truncate_under<L: Layout>(
    p: &Path,
    n: u64,
    o: OpenOptions,
    victim: u32,
    to: impl Fn(u64) -> u64,
) -> (Store<L>, View<L>, PathBuf, u64, Error) {
    let store = Store::<L>::open_with(p, o).unwrap();
    let view = store.bind(alloc());
    let all: Vec<u64> = (0..n).collect();
    view.gather(&all).unwrap();
    let victim = shard(p, victim);
    let len = std::fs::metadata(&victim).unwrap().len();
    truncate(&victim, to(len));
    let err = view.gather(&all).unwrap_err();
    (store, view, victim, len, err)
}

fn random_idx(n: u64, k: usize, seed: u64) -> Vec<u64> {
    let mut r = rng(seed);
    (0..k).map(|_| r.random_range(0..n)).collect()
}

#[test]
fn unmapped_gathers_return_the_records_written() {
    let dir = tempfile::tempdir().unwrap();
    for (c, codec) in [Codec::Raw, Codec::Zstd, Codec::ZstdDict]
        .into_iter()
        .enumerate()
    {
        for shards in [1u32, 3] {
            let dp = dir.path().join(format!("d{c}-{shards}"));
            let recs = dense_fixture(&dp, codec, shards, 500, &[3, 50]);
            let un = DenseStore::open_with(&dp, opts(Some(false), true)).unwrap();
            let mapped = DenseStore::open_with(&dp, opts(Some(true), true)).unwrap();
            let (uv, mv) = (un.bind(alloc()), mapped.bind(alloc()));
            for (t, k) in [0usize, 1, 7, 256, 700].into_iter().enumerate() {
                let mut idx = random_idx(500, k, 40 + t as u64);
                if k > 2 {
                    // Neighbours and duplicates, which share ranges.
                    idx[1] = idx[0];
                    idx[2] = (idx[0] + 1) % 500;
                }
                let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
                let got = uv.gather(&idx).unwrap();
                assert_eq!(got.bytes(), &want[..], "{codec:?} shards={shards} k={k}");
                assert_eq!(got.shape()[0], k as u64);
                assert_eq!(mv.gather(&idx).unwrap().bytes(), &want[..]);
            }
            un.verify().unwrap();

            let rp = dir.path().join(format!("r{c}-{shards}"));
            let recs = ragged_fixture(&rp, codec, shards, 400);
            let un = RaggedStore::open_with(&rp, opts(Some(false), true)).unwrap();
            let uv = un.bind(alloc());
            for (t, k) in [1usize, 5, 300].into_iter().enumerate() {
                let idx = random_idx(400, k, 90 + t as u64);
                let b = uv.gather(&idx).unwrap();
                assert_eq!(b.len(), k);
                let mut cu = vec![0i32];
                for (j, &i) in idx.iter().enumerate() {
                    let (bytes, shape) = &recs[i as usize];
                    assert_eq!(
                        b.record(j),
                        &bytes[..],
                        "{codec:?} shards={shards} record {i}"
                    );
                    assert_eq!(&b.shapes()[2 * j..2 * j + 2], &shape[..]);
                    cu.push(cu[j] + (shape[0] * shape[1]) as i32);
                }
                assert_eq!(b.cu_seqlens(), &cu[..]);
            }
            un.verify().unwrap();
        }
    }
}

#[test]
fn unmapped_store_reports_a_flipped_byte_with_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    let stride = 2 * 3 * 50;
    dense_fixture(&p, Codec::Raw, 1, 100, &[3, 50]);
    // Record 40's bytes start at header (64) + 40 strides.
    let f = shard(&p, 0);
    let mut b = std::fs::read(&f).unwrap();
    let at = 64 + 40 * stride + 17;
    b[at] ^= 0x10;
    std::fs::write(&f, &b).unwrap();
    let s = DenseStore::open_with(&p, opts(Some(false), true)).unwrap();
    let v = s.bind(alloc());
    v.gather(&[1, 2, 39, 41]).unwrap();
    let e = v.gather(&[3, 40]).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("record 40") && msg.contains("crc32c"), "{msg}");
    assert!(s.verify().unwrap_err().is_corruption());
}

/// Opens a 4-shard raw Dense store of 64 KiB records as `mmap` and `verify` say, reads it once,
/// truncates shard 2 to half its length, and checks that every read fails with a typed error
/// naming that shard.
fn truncated_under(mmap: bool, verify: bool, codec: Codec) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    // int16 [32, 1024]: 64 KiB records; 4 shards of 32 records.
    dense_fixture(&p, codec, 4, 128, &[32, 1024]);
    let (s, v, victim, _, e) =
        truncate_under::<Dense>(&p, 128, opts(Some(mmap), verify), 2, |len| len / 2);
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Corrupt { .. }),
        "mmap={mmap} verify={verify} {codec:?}: {msg}"
    );
    assert!(
        msg.contains(&victim.display().to_string()) && msg.contains("shard 2"),
        "mmap={mmap} verify={verify} {codec:?}: {msg}"
    );
    assert!(
        msg.contains("length"),
        "mmap={mmap} verify={verify} {codec:?}: {msg}"
    );
    // Every later read fails too where the store is mapped (its map now reads zeros past the
    // end); an unmapped store fails on the records it can no longer read.
    let later = v.gather(&[120, 121]).unwrap_err();
    assert!(later.is_corruption(), "{later}");
    if mmap {
        assert!(v.gather(&[0]).is_err(), "a faulted store must not read on");
    } else {
        v.gather(&[0]).unwrap();
    }
    assert!(s.verify().unwrap_err().is_corruption());
}

#[test]
fn a_shard_truncated_under_a_mapped_store_is_an_error_not_a_signal() {
    truncated_under(true, true, Codec::Raw);
    truncated_under(true, false, Codec::Raw);
    truncated_under(true, true, Codec::Zstd);
}

#[test]
fn a_shard_truncated_under_an_unmapped_store_is_an_error() {
    truncated_under(false, true, Codec::Raw);
    truncated_under(false, false, Codec::Zstd);
}

#[test]
fn a_truncated_ragged_shard_is_an_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    ragged_fixture(&p, Codec::Raw, 2, 3000);
    let (.., len, e) = truncate_under::<Ragged>(&p, 3000, opts(Some(true), false), 1, |_| 64);
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("shrank"), "{e} (was {len} bytes)");
}

#[test]
fn shared_file_system_types() {
    use zrecord::vfs::is_shared_fs_magic;
    for shared in [
        0x6969u64,
        0xff53_4d42,
        0xffff_ffff_ff53_4d42, // CIFS, sign-extended from a 32-bit f_type
        0x6573_5546,
        0x0bd0_0bd0,
    ] {
        assert!(is_shared_fs_magic(shared), "{shared:#x}");
    }
    // ext4, tmpfs, xfs, btrfs, overlayfs, zfs: local.
    for local in [
        0xef53u64,
        0x0102_1994,
        0x5846_5342,
        0x9123_683e,
        0x794c_7630,
        0x2fc1_2fc1,
    ] {
        assert!(!is_shared_fs_magic(local), "{local:#x}");
    }
}

/// The child half of [`a_foreign_sigbus_still_ends_the_process`]: does nothing unless that test
/// started it.
#[test]
fn foreign_sigbus_child() {
    let Ok(dir) = std::env::var("ZR_FOREIGN_SIGBUS_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    // Open a store, so zrecord's handler is installed.
    let p = dir.join("d");
    dense_fixture(&p, Codec::Raw, 1, 4, &[8]);
    let _s = DenseStore::open(&p).unwrap();
    // A map that is not zrecord's, truncated under it, then read past its new end.
    let f = dir.join("foreign");
    std::fs::write(&f, vec![7u8; 1 << 16]).unwrap();
    let file = std::fs::File::open(&f).unwrap();
    // SAFETY: a read-only map of a file this test owns; the fault it provokes is the point.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    truncate(&f, 0);
    let v = std::hint::black_box(&map[40_000]);
    println!("read {v} past the end: the SIGBUS was swallowed");
}

#[test]
fn a_foreign_sigbus_still_ends_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "foreign_sigbus_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ZR_FOREIGN_SIGBUS_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}
