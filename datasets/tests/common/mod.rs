//! What the corpus tests share: the shared corpora beside the repository.

use std::path::PathBuf;

/// `../shared/corpora` when it holds `folder`; else `None`, after saying that `what` is skipped.
pub fn corpora(folder: &str, what: &str) -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpora"));
    if p.join(folder).is_dir() {
        Some(p)
    } else {
        eprintln!("SKIP: {} not found; {what}", p.display());
        None
    }
}
