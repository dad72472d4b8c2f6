//! Construction checks: the stream layout, the batch against shards and processes, the options,
//! and each view's fingerprint for the resume state.

use std::ops::Range;
use std::sync::Arc;

use super::options::LoaderOptions;
use super::stream::StreamView;
use crate::error::{Error, Result};
use crate::state::{StreamPrint, ViewPrint, store_hash};

/// Stream names, and `views[stream][shard]`.
pub(super) type Streams = (Vec<Arc<str>>, Vec<Vec<StreamView>>);

/// Stream names and `views[stream][shard]`, checked: at least one stream, no duplicate name, no
/// empty view list, one view per shard position in every stream, every view holding the same
/// number of records. `what` prefixes the messages (e.g. "source 1: ").
pub(super) fn collect_streams<I, S>(streams: I, what: &str) -> Result<Streams>
where
    I: IntoIterator<Item = (S, Vec<StreamView>)>,
    S: AsRef<str>,
{
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut views: Vec<Vec<StreamView>> = Vec::new();
    for (name, list) in streams {
        let name = name.as_ref();
        if names.iter().any(|n| &**n == name) {
            return Err(Error::invalid(format!(
                "{what}stream {name:?} is given twice"
            )));
        }
        if list.is_empty() {
            return Err(Error::invalid(format!(
                "{what}stream {name:?} has an empty view list"
            )));
        }
        names.push(Arc::from(name));
        views.push(list);
    }
    if views.is_empty() {
        return Err(Error::invalid(format!(
            "{what}a loader needs at least one stream"
        )));
    }
    let shards = views[0].len();
    for (name, list) in names.iter().zip(&views) {
        if list.len() != shards {
            return Err(Error::invalid(format!(
                "{what}stream {name:?} has {} views but stream {:?} has {shards}; every stream needs one view per shard",
                list.len(),
                names[0]
            )));
        }
    }
    let records = views[0][0].len();
    for (name, list) in names.iter().zip(&views) {
        for (j, v) in list.iter().enumerate() {
            if v.len() != records {
                return Err(Error::invalid(format!(
                    "{what}stream {name:?} view {j} holds {} records but stream {:?} view 0 holds {records}; all views must hold the same records",
                    v.len(),
                    names[0]
                )));
            }
        }
    }
    Ok((names, views))
}

/// Checks the global batch against the shard count and the process options, and the options
/// themselves; returns this process's positions of every global batch.
pub(super) fn check_batch(
    batch: usize,
    shards: usize,
    options: &LoaderOptions,
) -> Result<Range<usize>> {
    let (rank, procs) = (options.process_index, options.process_count);
    if procs == 0 || rank >= procs {
        return Err(Error::invalid(format!(
            "process_index {rank} must be below process_count {procs} (and process_count >= 1)"
        )));
    }
    if batch == 0 || !batch.is_multiple_of(shards) {
        return Err(Error::invalid(format!(
            "the global batch {batch} does not divide evenly by the shard count {shards}"
        )));
    }
    if !batch.is_multiple_of(procs * shards) {
        return Err(Error::invalid(format!(
            "the global batch {batch} does not divide evenly by process_count {procs} x \
             {shards} views per stream"
        )));
    }
    if options.workers > 0 && options.prefetch == 0 {
        return Err(Error::invalid("prefetch must be at least 1"));
    }
    let local = batch / procs;
    Ok(rank * local..(rank + 1) * local)
}

/// A view's default store label: its kind, dtype, item shape or rank, and codec.
pub(super) fn schema_label(v: &StreamView) -> String {
    match v {
        StreamView::Dense(d) => {
            format!("dense {:?} {:?} {:?}", d.dtype(), d.item_shape(), d.codec())
        }
        StreamView::Ragged(r) => {
            format!("ragged {:?} ndim {} {:?}", r.dtype(), r.ndim(), r.codec())
        }
    }
}

/// The fingerprint of source `source`'s streams, each view's store named by `label`.
pub(super) fn prints(
    source: u32,
    names: &[Arc<str>],
    views: &[Vec<StreamView>],
    mut label: impl FnMut(usize, usize) -> String,
) -> Vec<StreamPrint> {
    names
        .iter()
        .zip(views)
        .enumerate()
        .map(|(i, (name, list))| StreamPrint {
            source,
            name: name.to_string(),
            views: list
                .iter()
                .enumerate()
                .map(|(j, v)| ViewPrint {
                    kind: match v {
                        StreamView::Dense(_) => "dense".into(),
                        StreamView::Ragged(_) => "ragged".into(),
                    },
                    store: store_hash(&label(i, j)),
                    records: v.len(),
                    version: match v {
                        StreamView::Dense(d) => d.version(),
                        StreamView::Ragged(r) => r.version(),
                    },
                })
                .collect(),
        })
        .collect()
}
