//! The SeaweedFS server of the remote tables: the workspace's one launcher
//! (`benchkit::seaweed`, which the object-storage tests start too) with the run's credentials
//! and bucket, killed when the [`Server`] is dropped, and by a parent-death signal when the
//! harness dies without dropping it.

use zrecord::RemoteOptions;

use crate::error::{HarnessError, Result};

/// The run's access key, secret and bucket.
pub(super) const KEY: &str = "harness";
pub(super) const SECRET: &str = "harness-secret";
pub(super) const BUCKET: &str = "bench";

/// A `weed server` (master, volume, filer, S3 gateway) on loopback for the run, its bucket
/// created; stopped on drop.
pub(super) struct Server(benchkit::seaweed::Seaweed);

impl Server {
    pub(super) fn start() -> Result<Server> {
        let w = benchkit::seaweed::Seaweed::start(&benchkit::seaweed::Config::new(KEY, SECRET))
            .map_err(HarnessError::other)?;
        w.bucket(BUCKET).map_err(HarnessError::other)?;
        Ok(Server(w))
    }

    /// The S3 gateway's URL.
    pub(super) fn endpoint(&self) -> String {
        self.0.endpoint()
    }

    /// The options a zrecord store reads the server with.
    pub(super) fn options(&self) -> RemoteOptions {
        RemoteOptions {
            storage_options: self.0.options(),
            ..RemoteOptions::default()
        }
    }
}
