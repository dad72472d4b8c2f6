//! [`Loader::mixture`]: a loader over several sources with weights (see `crate::mixture` for the
//! apportionment and the layout), and the checks that the sources agree on their streams.

use std::sync::Arc;

use super::Loader;
use super::build::{check_batch, collect_streams, prints, schema_label};
use super::options::{LoaderOptions, MixtureSource};
use super::source::{Draw, Source};
use super::stream::{StreamView, Transform};
use crate::error::{Error, Result};
use crate::mixture::{MixturePlan, WeightChange};
use crate::sampler::IndexSpec;

/// What two views of one stream must agree on across sources: kind, dtype, and item shape (Dense)
/// or rank (Ragged).
fn schema(v: &StreamView) -> (&'static str, String) {
    match v {
        StreamView::Dense(d) => (
            "Dense",
            format!("dtype {:?}, item shape {:?}", d.dtype(), d.item_shape()),
        ),
        StreamView::Ragged(r) => (
            "Ragged",
            format!("dtype {:?}, ndim {}", r.dtype(), r.ndim()),
        ),
    }
}

impl<T: Send + 'static> Loader<T> {
    /// A loader over a weighted mixture of `sources`, `batch` records per global step, with the
    /// weight changes `changes` (steps after 0, ascending; more can be made with
    /// [`Loader::set_weights`]).
    ///
    /// Each step draws its records from the sources by exact apportionment over the cumulative
    /// record count (`crate::mixture`), each source through its own index stream (its mode and seed
    /// over all its records). A step yields, per shard position, one [`Shard`](super::Shard) per
    /// source present there ([`Shard::source`](super::Shard::source)), gathered from that source's
    /// views: no record is copied between sources. Everything else is as for
    /// [`Loader::with_transform_arc`]: process slices, delivery modes, resume state.
    ///
    /// Errors (`Error::InvalidArgument`): no source; a source whose streams fail the checks of
    /// [`Loader::new`] or hold no records; sources whose stream names, shard counts or kinds
    /// differ, Dense streams of another dtype or item shape, Ragged streams of another dtype or
    /// rank; weights that are zero, negative or not finite, or give a source less than one record
    /// per global batch; the batch against shards and processes as for [`Loader::new`].
    pub fn mixture<S: AsRef<str>>(
        sources: Vec<MixtureSource<S>>,
        batch: usize,
        changes: Vec<WeightChange>,
        options: LoaderOptions,
        transform: Transform<T>,
    ) -> Result<Self> {
        if sources.is_empty() {
            return Err(Error::invalid("a mixture needs at least one source"));
        }
        let mut views: Vec<Vec<Vec<StreamView>>> = Vec::with_capacity(sources.len());
        let mut specs = Vec::with_capacity(sources.len());
        let mut weights = Vec::with_capacity(sources.len());
        let mut names = Vec::new();
        for (k, src) in sources.into_iter().enumerate() {
            let (n, v) = collect_streams(src.streams, &format!("source {k}: "))?;
            let records = v[0][0].len();
            if records == 0 {
                return Err(Error::invalid(format!("source {k} holds no records")));
            }
            if k == 0 {
                names = n;
            } else {
                check_agrees(k, &names, &n, &views[0], &v)?;
            }
            specs.push(IndexSpec {
                len: records,
                mode: src.mode,
                seed: src.seed,
            });
            weights.push(src.weight);
            views.push(v);
        }
        let shards = views[0][0].len();
        let slice = check_batch(batch, shards, &options)?;
        let mut plan = MixturePlan::new(&specs, weights, batch)?;
        for c in changes {
            plan.set_weights(c.step, c.weights)?;
        }
        let mut all_prints = Vec::new();
        for (k, v) in views.iter().enumerate() {
            all_prints.extend(prints(k as u32, &names, v, |i, j| schema_label(&v[i][j])));
        }
        let names: Arc<[Arc<str>]> = names.into();
        let spec = plan.spec();
        let source = Source::new(views, names, batch, slice, Draw::Mixture(plan), 0);
        Self::assemble(source, transform, options, (None, Some(spec)), all_prints)
    }
}

/// Source `k`'s stream names and views against source 0's.
fn check_agrees(
    k: usize,
    names: &[Arc<str>],
    theirs: &[Arc<str>],
    first: &[Vec<StreamView>],
    views: &[Vec<StreamView>],
) -> Result<()> {
    if names != theirs {
        return Err(Error::invalid(format!(
            "source {k} has the streams {theirs:?} but source 0 has {names:?}: every source needs \
             the same stream names, in the same order"
        )));
    }
    if views[0].len() != first[0].len() {
        return Err(Error::invalid(format!(
            "source {k} has {} views per stream but source 0 has {}: every source needs one view \
             per shard position",
            views[0].len(),
            first[0].len()
        )));
    }
    for ((name, a), b) in names.iter().zip(first).zip(views) {
        let (want, got) = (schema(&a[0]), schema(&b[0]));
        if want != got {
            return Err(Error::invalid(format!(
                "source {k} stream {name:?} is {} ({}) but source 0's is {} ({})",
                got.0, got.1, want.0, want.1
            )));
        }
    }
    Ok(())
}
