//! Writes the seed corpus: `cargo run --release --bin make_seeds` (from `fuzz/`).
//! open_container: real containers (all codecs x Dense/Ragged) in the `split_files` framing;
//! index_decode / record_decode: structured inputs describing valid containers.

use std::path::Path;
use std::sync::Arc;

use zrecord::{Codec, DType, DenseWriter, RaggedWriter, StdFs, WriterOptions};
use zrecord_fuzz::{fuzz_dict, join_files};

fn save(target: &str, name: &str, data: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
}

fn read_container(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn main() {
    let tmp = std::env::temp_dir().join(format!("zr-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let data: Vec<u8> = (0..4096u32)
        .map(|k| ((k * 7) % 11) as u8 + (k / 300) as u8)
        .collect();
    for (ci, codec) in [Codec::Raw, Codec::Zstd, Codec::ZstdDict]
        .into_iter()
        .enumerate()
    {
        for shards in [1u32, 3] {
            let opts = || WriterOptions {
                data_shards: shards,
                dict: (codec == Codec::ZstdDict).then(|| fuzz_dict().to_vec()),
                vfs: Arc::new(StdFs),
                ..WriterOptions::default()
            };
            let p = tmp.join(format!("d{ci}{shards}"));
            let mut w = DenseWriter::create(&p, DType::UInt16, &[8], codec, opts()).unwrap();
            w.append(&data[..16 * 40]).unwrap();
            w.close().unwrap();
            save(
                "open_container",
                &format!("dense-{}-{shards}", codec.name()),
                &join_files(&read_container(&p)),
            );
            let p = tmp.join(format!("r{ci}{shards}"));
            let mut w = RaggedWriter::create(&p, DType::UInt8, 2, codec, opts()).unwrap();
            let cu: Vec<i32> = (0..=70).map(|k| k * 9).collect();
            let shapes: Vec<u64> = (0..70).flat_map(|_| [3u64, 3]).collect();
            w.append(&data[..630], &cu, &shapes).unwrap();
            w.close().unwrap();
            save(
                "open_container",
                &format!("ragged-{}-{shards}", codec.name()),
                &join_files(&read_container(&p)),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);

    // index_decode: Dense uint8 [16], 1 shard, 4 raw records with consistent offsets.
    let mut s = vec![
        0u8, 0, 5, /* uint8 */
        1, /* ndim 1 */
        0, 16, /* dim */
        0,  /* 1 shard */
    ];
    s.extend_from_slice(&[0, 4, 0, 1, 1]); // records 4, block 1, no dict
    for _ in 0..4 {
        s.push(0); // consistent offset
        s.extend_from_slice(&0u64.to_le_bytes());
        s.push(1); // stored raw
        s.extend_from_slice(&16u32.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes());
    }
    s.push(1); // index_len computed
    s.extend(std::iter::repeat_n(0x5a, 64));
    s.push(2);
    save("index_decode", "dense-4", &s);
    let mut r = vec![
        1u8, 0, 5, 2, /* ndim 2 */
        1, /* 2 shards */
        0, 3, 0, 2, 1,
    ];
    for _ in 0..3 {
        r.push(0);
        r.extend_from_slice(&0u64.to_le_bytes());
        r.push(1);
        r.extend_from_slice(&6u32.to_le_bytes());
        r.extend_from_slice(&0u32.to_le_bytes());
        r.extend_from_slice(&[0, 2, 0, 3]); // shape (2, 3) as size() values
    }
    r.push(1);
    r.extend(std::iter::repeat_n(7, 40));
    r.extend_from_slice(&[2, 2]);
    save("index_decode", "ragged-3", &r);

    // record_decode: real zstd frames (with and without the dictionary) and their true sizes.
    let plain: Vec<u8> = (0..600u32)
        .map(|j| ((j * 7) % 13) as u8 + (j / 40) as u8)
        .collect();
    for (mode, dict) in [
        (0u8, None),
        (1, None),
        (2, Some(fuzz_dict())),
        (3, Some(fuzz_dict())),
    ] {
        let frame = match dict {
            None => zstd::bulk::compress(&plain, 3).unwrap(),
            Some(d) => zstd::bulk::Compressor::with_dictionary(3, d)
                .unwrap()
                .compress(&plain)
                .unwrap(),
        };
        let mut s = vec![mode, 0, 0, 0 /* int8 */, 0];
        s.extend_from_slice(&600u16.to_le_bytes()); // dense: 600 elements
        s.push(1); // 2 records
        for _ in 0..2 {
            if mode & 1 == 1 {
                s.push(1);
                s.extend_from_slice(&599u16.to_le_bytes()); // declared 600
            }
            s.extend_from_slice(&(frame.len() as u16).to_le_bytes());
            s.extend_from_slice(&frame);
        }
        save("record_decode", &format!("frames-{mode}"), &s);
    }
    println!("seeds written");
}
