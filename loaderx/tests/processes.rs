//! Data-parallel loading: process `r` of `N` receives the contiguous slice `r` of every global
//! batch, split over its own views; the slices of all processes, concatenated, are the batch a
//! single process receives, at every step and across a resume.

mod common;

use std::path::Path;
use std::sync::Arc;

use loaderx::{Error, IndexSampler, Loader, LoaderOptions, Mode, Sampler, Shard, StreamView};
use zrecord::{Allocator, DenseStore, RaggedStore, SystemAllocator};

const N: u64 = 1000;

fn sys() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

fn streams(dir: &Path, views: usize) -> Vec<(&'static str, Vec<StreamView>)> {
    let dense = common::dense_index_store(dir, "dense", N, 0);
    let ragged = common::ragged_index_store(dir, "ragged", N);
    let d = DenseStore::open(&dense).unwrap();
    let r = RaggedStore::open(&ragged).unwrap();
    vec![
        ("x", (0..views).map(|_| d.bind(sys()).into()).collect()),
        ("tok", (0..views).map(|_| r.bind(sys()).into()).collect()),
    ]
}

/// The global ids of a shard list, with the Ragged stream checked against the Dense one.
fn ids(shards: &[Shard]) -> Vec<u64> {
    let mut out = Vec::new();
    for s in shards {
        let ids = common::dense_ids(s.get("x").unwrap().as_dense().unwrap().bytes(), 8);
        let tok = s.get("tok").unwrap().as_ragged().unwrap();
        let shapes: Vec<u64> = ids.iter().map(|i| i % 4 + 1).collect();
        assert_eq!(tok.shapes(), shapes, "the Ragged stream stays aligned");
        out.extend(ids);
    }
    out
}

#[test]
fn the_processes_slices_concatenate_to_the_global_batch() {
    let dir = tempfile::tempdir().unwrap();
    let views = 2;
    let streams = streams(dir.path(), views);
    let batch = 48;
    let block = Mode::Block {
        block: 8,
        window: 3,
    };
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic, block] {
        let reference = IndexSampler::new(N, batch, mode, 7).unwrap();
        for procs in [1usize, 2, 3, 4] {
            for workers in [0, 1] {
                for start in [0u64, 19] {
                    let mut got: Vec<Vec<u64>> = vec![Vec::new(); 6];
                    for rank in 0..procs {
                        let mut s = reference.clone();
                        s.seek(start).unwrap();
                        let opts = LoaderOptions::new(workers, 2).process(rank, procs);
                        let mut loader = Loader::new(streams.clone(), Box::new(s), opts).unwrap();
                        for g in got.iter_mut() {
                            let shards = loader.next().unwrap().unwrap();
                            assert_eq!(shards.len(), views);
                            assert_eq!(ids(&shards).len(), batch / procs);
                            g.extend(ids(&shards));
                        }
                        assert_eq!(loader.step(), start + 6, "the step is the global step");
                    }
                    for (k, g) in got.iter().enumerate() {
                        let mut want = vec![0; batch];
                        reference.batch_at(start + k as u64, &mut want).unwrap();
                        assert_eq!(
                            g, &want,
                            "{mode:?} procs {procs} workers {workers} step {k}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn process_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let streams = streams(dir.path(), 2);
    let err = |batch: usize, rank: usize, procs: usize| {
        let s = Box::new(IndexSampler::new(N, batch, Mode::Iid, 0).unwrap());
        let opts = LoaderOptions::new(0, 1).process(rank, procs);
        match Loader::new(streams.clone(), s, opts) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    };
    assert!(err(12, 0, 4).contains("process_count 4 x 2 views"));
    assert!(err(16, 2, 2).contains("process_index 2"));
    assert!(err(16, 0, 0).contains("process_count 0"));
    let opts = LoaderOptions::default();
    assert_eq!((opts.process_index, opts.process_count), (0, 1));
    assert_eq!(LoaderOptions::new(3, 5).process_count, 1);
}

/// A sampler without `next_range` (the trait's default) gets the full draw, sliced.
#[test]
fn a_sampler_without_ranges_is_sliced() {
    struct Plain(IndexSampler);
    impl Sampler for Plain {
        fn next(&mut self) -> loaderx::Result<&[u64]> {
            self.0.next()
        }
        fn batch_size(&self) -> usize {
            self.0.batch_size()
        }
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn step(&self) -> u64 {
            self.0.step()
        }
        fn seek(&mut self, step: u64) -> loaderx::Result<()> {
            self.0.seek(step)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let streams = streams(dir.path(), 1);
    let reference = IndexSampler::new(N, 8, Mode::Cyclic, 5).unwrap();
    let opts = LoaderOptions::new(0, 1).process(1, 2);
    let mut loader = Loader::new(streams, Box::new(Plain(reference.clone())), opts).unwrap();
    let mut want = vec![0; 8];
    for step in 0..4 {
        reference.batch_at(step, &mut want).unwrap();
        assert_eq!(ids(&loader.next().unwrap().unwrap()), &want[4..]);
    }
}
