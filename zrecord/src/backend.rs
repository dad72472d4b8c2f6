//! Where a store's files are read from, wired above both sides: a store path names either a
//! local container, read through the [`ReadFs`] of its `OpenOptions`, or (a URL, feature `remote`)
//! a prefix of an object store, read through the client of `crate::remote`. The read path
//! (`read::container`) asks this module for a path's [`Backend`] and then sees only the read-side
//! traits of `crate::source`; it never names the remote client, and the client never names the
//! read path.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::source::{Opener, ReadFile, ReadFs, RemoteOptions, url_of};

/// A store path's files: how they are opened, and for a store on object storage the client the
/// remote read engine fetches ranges with.
pub(crate) struct Backend {
    /// Opens the store's files.
    pub(crate) files: Box<dyn Opener>,
    /// The object-store client of a store opened from a URL (`None` for a local store).
    #[cfg(feature = "remote")]
    pub(crate) fetch: Option<Arc<dyn crate::source::RangeFetch>>,
}

impl Backend {
    /// Whether the store's files are objects of an object store (never mapped).
    pub(crate) fn remote(&self) -> bool {
        #[cfg(feature = "remote")]
        return self.fetch.is_some();
        #[cfg(not(feature = "remote"))]
        false
    }
}

/// The backend of the store at `path`: an object store for a URL (connected with `remote`;
/// nothing is requested yet), else the local file system `vfs`.
pub(crate) fn for_path(
    path: &Path,
    vfs: &Arc<dyn ReadFs>,
    remote: &RemoteOptions,
) -> Result<Backend> {
    let Some(url) = url_of(path) else {
        return Ok(Backend {
            files: Box::new(Local(vfs.clone())),
            #[cfg(feature = "remote")]
            fetch: None,
        });
    };
    #[cfg(feature = "remote")]
    {
        let client = crate::remote::Remote::connect(url, remote)?;
        let fetch: Arc<dyn crate::source::RangeFetch> = client.clone();
        Ok(Backend {
            files: Box::new(crate::remote::RemoteFiles(client)),
            fetch: Some(fetch),
        })
    }
    #[cfg(not(feature = "remote"))]
    {
        let _ = remote;
        Err(crate::error::Error::invalid(format!(
            "{url}: this build of zrecord reads local stores only (object storage needs the \
             `remote` feature, which the Python wheel has)"
        )))
    }
}

/// The keys of the dataset root `root`: its directory, or (a URL) its prefix on object storage.
pub(crate) fn objects_for(
    root: &Path,
    remote: &RemoteOptions,
) -> Result<Box<dyn crate::objects::Objects>> {
    let Some(url) = url_of(root) else {
        return Ok(Box::new(crate::objects::LocalObjects(root.to_path_buf())));
    };
    #[cfg(feature = "remote")]
    return Ok(Box::new(crate::remote::RemoteObjects::connect(
        url, remote,
    )?));
    #[cfg(not(feature = "remote"))]
    {
        let _ = remote;
        Err(crate::error::Error::invalid(format!(
            "{url}: this build of zrecord reads local datasets only (object storage needs the \
             `remote` feature)"
        )))
    }
}

/// A local file system's read side.
struct Local(Arc<dyn ReadFs>);

impl Opener for Local {
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        self.0.open_read(path)
    }
    fn open_read_unmapped(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        self.0.open_read_unmapped(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.0.exists(path)
    }
    fn shared_fs(&self, path: &Path) -> bool {
        self.0.shared_fs(path)
    }
}
