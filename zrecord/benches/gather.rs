//! Gather and write throughput of zrecord beside the physical limit measured in the same run.
//!
//! * `dense147k/*`: 256 random records of `uint8[3,224,224]` (147 KiB): zrecord raw (verify on and
//!   off, with the cold-read probe off: `zrecord-raw-coldnever`, and into a recycled output
//!   region as a pooled allocator gives: `zrecord-raw-recycled`) vs `memcpy-limit` (the same
//!   bytes copied from an in-memory array with the same rayon thread count, into one recycled
//!   buffer) and `copy-as-gather-limit` (the same copies with the stores a gather of that size
//!   uses: non-temporal from the last-level cache size up).
//! * `dense2k/*`: 256 random `int32[512]` records (2 KiB): zrecord raw vs a per-record memcpy
//!   gather out of one mmap of a plain `.npy`-style file (what `np.load(mmap_mode='r')[idx]` does),
//!   and that gather plus a CRC32C pass over each record (`npy-mmap-crc-limit`, the least work a
//!   verified gather adds to the copy).
//! * `ragged_tokens/*`: 256 random int32 sequences of 16..512 tokens, raw / zstd / zstd_dict.
//! * `crc_short/*`: the per-record copy + CRC32C kernel of a verified raw read against `memcpy`,
//!   batches of 256 random records out of 2,000 (in L2) or 50,000 (in the L3) with WikiText-103
//!   token lengths x 4 bytes (`benchkit::lengths::WIKITEXT_103_TOKENS`, `variable`, mean ~590 B),
//!   and the same at one fixed length (`fixed`): the difference is what varying lengths cost the
//!   kernel (branches), not the checksum arithmetic.
//! * `write/*`: raw Dense write of 64 MiB vs `std::fs::write` of the same bytes.
//!
//! The limit arms copy with benchkit's copy limit (`benchkit::copy`, zrecord's own split and
//! kernels) and the checksum arms call zrecord's kernels (`zrecord::internals`), so they time the
//! code the harness's limit rows and zrecord's gathers run. Criterion reports time per iteration;
//! throughput is set to the logical bytes, so ratios can be read off directly. Run:
//! `cargo bench -p zrecord --bench gather`.

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use benchkit::copy::{Kernel, copy_strided, parallel_pieces};
use benchkit::lengths::WIKITEXT_103_TOKENS;
use benchkit::rng::SplitMix64;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use zrecord::internals::{copy_crc32c, crc32c_records};
use zrecord::{
    Allocation, Allocator, Codec, ColdReads, DType, DenseStore, DenseWriter, Device, OpenOptions,
    RaggedStore, RaggedWriter, RegionHome, SystemAllocator, WriterOptions, alloc_host_region,
    free_host_region,
};

/// Image-like bytes: smooth-ish with noise (compressible a little, like decoded photos).
fn payload(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    SplitMix64::new(seed).image_like(&mut v);
    v
}

fn indices(n: u64, count: usize, seed: u64) -> Vec<Vec<u64>> {
    let mut r = SplitMix64::new(seed);
    (0..64)
        .map(|_| (0..count).map(|_| r.below(n)).collect())
        .collect()
}

/// Hands a released region out again for the next request of the same size, as a pooled
/// allocator does in steady state (the harness rows gather through loaderx's pool): the
/// `zrecord-raw-recycled` arm writes into a warm buffer, as the limit arms do, where
/// `SystemAllocator` maps a fresh one per gather.
#[derive(Debug, Default)]
struct Recycling {
    home: Arc<Kept>,
}

/// Released regions: (address, bytes, alignment), each from `alloc_host_region(bytes, alignment)`.
#[derive(Debug, Default)]
struct Kept {
    free: Mutex<Vec<(usize, usize, usize)>>,
}

impl RegionHome for Kept {
    unsafe fn release(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        self.free
            .lock()
            .unwrap()
            .push((ptr.as_ptr() as usize, len, align));
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        for (p, len, align) in self.free.get_mut().unwrap().drain(..) {
            // SAFETY: a region from `alloc_host_region(len, align)` that no allocation uses any
            // more (it was released, and the home outlives every allocation it took back).
            unsafe { free_host_region(NonNull::new(p as *mut u8).unwrap(), len, align) };
        }
    }
}

impl Allocator for Recycling {
    fn device(&self) -> Device {
        Device::CPU
    }

    fn acquire(&self, bytes: usize, align: usize) -> zrecord::Result<Allocation> {
        if bytes == 0 {
            return Ok(Allocation::empty(Device::CPU, align));
        }
        let kept = {
            let mut free = self.home.free.lock().unwrap();
            let at = free.iter().position(|&(_, l, a)| l == bytes && a == align);
            at.map(|k| free.swap_remove(k))
        };
        let ptr = match kept {
            Some((p, _, _)) => NonNull::new(p as *mut u8).unwrap(),
            None => alloc_host_region(bytes, align)?,
        };
        let home: Arc<dyn RegionHome> = self.home.clone();
        // SAFETY: `ptr` is a region of `bytes` bytes aligned to `align`, fresh or taken off the
        // free list, so owned by this allocation alone until `home` takes it back.
        Ok(
            unsafe {
                Allocation::from_raw_parts(ptr, bytes, bytes, align, Device::CPU, Some(home))
            },
        )
    }
}

/// The limit arms' copy of records `idx` (`stride` bytes each) out of `src` into `out`: with
/// `memcpy` or the stores a gather of this output size uses, split over the pool or not.
fn memcpy_gather(
    src: &[u8],
    stride: usize,
    idx: &[u64],
    out: &mut [u8],
    parallel: bool,
    as_gather: bool,
) {
    let kernel = if as_gather {
        Kernel::AsGather
    } else {
        Kernel::Memcpy
    };
    let pieces = if parallel { parallel_pieces() } else { 1 };
    copy_strided(out, src, stride, idx, kernel, pieces);
}

fn dense_bench(c: &mut Criterion, name: &str, dtype: DType, item: &[u64], n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let stride = item.iter().product::<u64>() as usize * dtype.itemsize();
    let data = payload(stride * n, 1);
    let path = dir.path().join("store");
    let mut w =
        DenseWriter::create(&path, dtype, item, Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    // The `.npy`-style file: 128-byte header + payload, mmapped.
    let npy = dir.path().join("plain.npy");
    let mut file_bytes = vec![0u8; 128];
    file_bytes.extend_from_slice(&data);
    std::fs::write(&npy, &file_bytes).unwrap();
    drop(file_bytes);
    let f = std::fs::File::open(&npy).unwrap();
    // SAFETY: the benchmark's own temp file, not modified while mapped.
    let map = unsafe { memmap2::Mmap::map(&f).unwrap() };
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    // The store opened with `o`, bound to `alloc`.
    let open = |o: OpenOptions, alloc: Arc<dyn Allocator>| {
        DenseStore::open_with(&path, o).unwrap().bind(alloc)
    };
    let arms = [
        ("zrecord-raw", open(OpenOptions::default(), alloc.clone())),
        (
            "zrecord-raw-recycled",
            open(OpenOptions::default(), Arc::new(Recycling::default())),
        ),
        // The cold-read probe off: `zrecord-raw` vs this is the probe's cost on a warm gather
        // (the default policy, `ColdReads::Auto`, probes every gather of 2+ records).
        (
            "zrecord-raw-coldnever",
            open(
                OpenOptions {
                    cold_reads: ColdReads::Never,
                    ..OpenOptions::default()
                },
                alloc.clone(),
            ),
        ),
        (
            "zrecord-raw-noverify",
            open(
                OpenOptions {
                    verify: false,
                    ..OpenOptions::default()
                },
                alloc,
            ),
        ),
    ];
    let sets = indices(n as u64, 256, 7);
    let parallel = 256 * stride >= 1 << 20;
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes((256 * stride) as u64));
    let mut k = 0;
    for (arm, view) in &arms {
        g.bench_function(*arm, |b| {
            b.iter(|| {
                k = (k + 1) % sets.len();
                black_box(view.gather(&sets[k]).unwrap());
            })
        });
    }
    // One output buffer for the limit rows, faulted in (on huge pages where the kernel has them)
    // before timing, as the pooled gathers' recycled regions are.
    let mut out = benchkit::buffers::zeroed(256 * stride);
    g.bench_function("memcpy-limit", |b| {
        b.iter(|| {
            k = (k + 1) % sets.len();
            memcpy_gather(&data, stride, &sets[k], &mut out, parallel, false);
            black_box(&out);
        })
    });
    // The same copies with the stores a zrecord gather of this output size uses (non-temporal
    // from the last-level cache size up).
    g.bench_function("copy-as-gather-limit", |b| {
        b.iter(|| {
            k = (k + 1) % sets.len();
            memcpy_gather(&data, stride, &sets[k], &mut out, parallel, true);
            black_box(&out);
        })
    });
    g.bench_function("npy-mmap-per-record", |b| {
        b.iter(|| {
            k = (k + 1) % sets.len();
            memcpy_gather(&map[128..], stride, &sets[k], &mut out, false, false);
            black_box(&out);
        })
    });
    // The verified-copy reference: the same per-record copies, then a CRC32C pass over each
    // record of the output with the kernel a verified gather runs (the least work a gather that
    // checks every record must add to the copy).
    g.bench_function("npy-mmap-crc-limit", |b| {
        b.iter(|| {
            k = (k + 1) % sets.len();
            memcpy_gather(&map[128..], stride, &sets[k], &mut out, false, false);
            black_box(crc32c_records(&out, stride));
        })
    });
    g.finish();
}

fn dense(c: &mut Criterion) {
    dense_bench(c, "dense147k", DType::UInt8, &[3, 224, 224], 600);
    dense_bench(c, "dense2k", DType::Int32, &[512], 50_000);
}

fn ragged(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let n = 50_000usize;
    let mut r = SplitMix64::new(3);
    let mut values: Vec<u8> = Vec::new();
    let mut cu = vec![0i32];
    let mut shapes = Vec::new();
    for _ in 0..n {
        let len = 16 + r.below(497) as usize;
        for _ in 0..len {
            // Token-like ids: Zipf-ish small numbers.
            let t = r.below(50_000) as u32 >> r.below(8);
            values.extend_from_slice(&(t as i32).to_ne_bytes());
        }
        cu.push((values.len() / 4) as i32);
        shapes.push(len as u64);
    }
    let samples: Vec<Vec<u8>> = (0..2000)
        .map(|k| values[cu[k] as usize * 4..cu[k + 1] as usize * 4].to_vec())
        .collect();
    let dict = zrecord::train_dict_from(&samples, 64 << 10).unwrap();
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let sets = indices(n as u64, 256, 9);
    let mut g = c.benchmark_group("ragged_tokens");
    g.throughput(Throughput::Elements(256));
    for codec in [Codec::Raw, Codec::Zstd, Codec::ZstdDict] {
        let path = dir.path().join(codec.name());
        let opts = WriterOptions {
            dict: (codec == Codec::ZstdDict).then(|| dict.clone()),
            ..WriterOptions::default()
        };
        let mut w = RaggedWriter::create(&path, DType::Int32, 1, codec, opts).unwrap();
        w.append(&values, &cu, &shapes).unwrap();
        w.close().unwrap();
        let view = RaggedStore::open(&path).unwrap().bind(alloc.clone());
        let mut k = 0;
        g.bench_with_input(BenchmarkId::new("zrecord", codec.name()), &view, |b, v| {
            b.iter(|| {
                k = (k + 1) % sets.len();
                black_box(v.gather(&sets[k]).unwrap());
            })
        });
    }
    g.finish();
}

fn write(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = payload(64 << 20, 5);
    let mut g = c.benchmark_group("write");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(data.len() as u64));
    let mut k = 0u64;
    g.bench_function("zrecord-raw", |b| {
        b.iter(|| {
            k += 1;
            let p = dir.path().join(format!("z{k}"));
            let mut w = DenseWriter::create(
                &p,
                DType::UInt8,
                &[3, 224, 224],
                Codec::Raw,
                WriterOptions::default(),
            )
            .unwrap();
            w.append(&data[..(data.len() / 150_528) * 150_528]).unwrap();
            w.close().unwrap();
            std::fs::remove_dir_all(&p).unwrap();
        })
    });
    g.bench_function("std-fs-write", |b| {
        b.iter(|| {
            k += 1;
            let p = dir.path().join(format!("f{k}"));
            std::fs::write(&p, &data[..(data.len() / 150_528) * 150_528]).unwrap();
            std::fs::File::open(&p).unwrap().sync_all().unwrap();
            std::fs::remove_file(&p).unwrap();
        })
    });
    g.finish();
}

fn crc_short(c: &mut Criterion) {
    // 2,000 records (~1.1 MB, in L2) and 50,000 (~27 MB, in L3); a fresh random batch of 256 per iteration: the
    // length sequence never repeats, as in a real gather (a repeated short sequence lets the branch
    // predictor learn it). Each record has its own seed, as in a read: no chain across records.
    const BATCH: usize = 256;
    let mut g = c.benchmark_group("crc_short");
    for pool in [2_000usize, 50_000] {
        let var: Vec<usize> = WIKITEXT_103_TOKENS
            .sample(pool, 11)
            .into_iter()
            .map(|tokens| tokens * 4)
            .collect();
        let mean = var.iter().sum::<usize>() / var.len();
        let fixed = vec![mean & !3; var.len()];
        for (kind, lens) in [("variable", &var), ("fixed", &fixed)] {
            let name = format!("{kind}-{pool}");
            let mut offs = Vec::with_capacity(pool + 1);
            offs.push(0usize);
            for l in lens.iter() {
                offs.push(offs[offs.len() - 1] + l);
            }
            let src = payload(offs[pool], 5);
            let mut dst = vec![0u8; BATCH * 2048];
            g.throughput(Throughput::Bytes((BATCH * mean) as u64));
            for kernel in ["memcpy", "copy_crc32c"] {
                let mut r = SplitMix64::new(3);
                g.bench_function(BenchmarkId::new(kernel, &name), |b| {
                    b.iter(|| {
                        let (mut o, mut acc) = (0, 0u32);
                        for _ in 0..BATCH {
                            let i = r.below(pool as u64) as usize;
                            let (s, d) = (&src[offs[i]..offs[i + 1]], &mut dst[o..o + lens[i]]);
                            if kernel == "memcpy" {
                                d.copy_from_slice(s);
                            } else {
                                acc ^= copy_crc32c(i as u32, d, s);
                            }
                            o += lens[i];
                        }
                        black_box(&dst);
                        black_box(acc)
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = dense, ragged, write, crc_short
}
criterion_main!(benches);
