//! Clients of the test server for the object-storage suites (feature `remote`): the options a
//! store on it is opened with, a plain `object_store` client to tamper with objects, and
//! blocking put / get / list through it.

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rand::Rng;
use zrecord::{OpenOptions, RemoteOptions};

use super::seaweed::{KEY, SECRET, Seaweed};
use super::seeded::rng;

pub fn remote(w: &Seaweed) -> RemoteOptions {
    RemoteOptions {
        storage_options: w.options(),
        max_retries: 2,
        retry_timeout: std::time::Duration::from_secs(10),
        ..RemoteOptions::default()
    }
}

pub fn opts(w: &Seaweed) -> OpenOptions {
    OpenOptions {
        remote: remote(w),
        ..OpenOptions::default()
    }
}

/// A plain client of bucket `b`, to tamper with objects.
pub fn client(w: &Seaweed, b: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(w.endpoint())
            .with_bucket_name(b)
            .with_region("us-east-1")
            .with_allow_http(true)
            .with_access_key_id(KEY)
            .with_secret_access_key(SECRET)
            .build()
            .unwrap(),
    )
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn put(c: &Arc<dyn ObjectStore>, key: &str, bytes: Vec<u8>) {
    rt().block_on(c.put(&Key::from(key), PutPayload::from(bytes)))
        .unwrap();
}

pub fn get(c: &Arc<dyn ObjectStore>, key: &str) -> Vec<u8> {
    rt().block_on(async { c.get(&Key::from(key)).await?.bytes().await })
        .unwrap()
        .to_vec()
}

pub fn names(c: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    let mut v: Vec<String> = rt()
        .block_on(c.list(Some(&Key::from(prefix))).try_collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .map(|m| m.location.to_string())
        .collect();
    v.sort();
    v
}

pub fn random_idx(n: u64, k: usize, seed: u64) -> Vec<u64> {
    let mut r = rng(seed);
    (0..k).map(|_| r.random_range(0..n)).collect()
}
