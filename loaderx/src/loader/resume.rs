//! Saving and loading the resume position: [`Loader::state_dict`], [`Loader::load_state_dict`],
//! the stores' labels in the fingerprint, and a mixture's weight changes (part of the state).

use std::collections::BTreeSet;

use super::Loader;
use super::source::Draw;
use crate::error::{Error, Result};
use crate::mixture::MixturePlan;
use crate::state::{LoaderState, STATE_FORMAT, STATE_VERSION, SamplerSpec, store_hash};

impl<T: Send + 'static> Loader<T> {
    /// Names the store behind each view in the state's fingerprint (e.g. its path), instead of
    /// its schema: `label(stream, shard)`, where `stream` indexes the fingerprint's streams (in the
    /// order given; for a mixture, each source's streams in turn).
    pub fn label_stores(&mut self, mut label: impl FnMut(usize, usize) -> String) {
        // The workers may hold the source's lock (and wait there for whatever `label` holds, such
        // as Python's GIL): relabel the fingerprint alone.
        for (i, stream) in self.prints.iter_mut().enumerate() {
            for (j, view) in stream.views.iter_mut().enumerate() {
                view.store = store_hash(&label(i, j));
            }
        }
    }

    /// The resume state: the low-water step and, in completion order, the steps delivered past
    /// it; the delivery mode, the global batch, the process slice, the sampler's spec and the
    /// streams' fingerprint (see [`LoaderState`]). Cheap: a few hundred bytes, whatever the data.
    pub fn state_dict(&self) -> LoaderState {
        LoaderState {
            format: STATE_FORMAT.into(),
            version: STATE_VERSION,
            step: self.next_undelivered,
            delivered_ahead: self.delivered_ahead.iter().copied().collect(),
            ordered: self.options.ordered,
            batch: self.batch as u64,
            process_index: self.options.process_index as u64,
            process_count: self.options.process_count as u64,
            sampler: match (&self.mixture, self.spec) {
                (Some(m), _) => SamplerSpec::Mixture(m.clone()),
                (None, Some(spec)) => spec.into(),
                (None, None) => SamplerSpec::Custom,
            },
            streams: self.prints.clone(),
        }
    }

    /// Continues from `state`: the next batches are exactly those an uninterrupted run delivers
    /// after the ones counted in the state (every step from its low-water step on, less the steps
    /// it lists as delivered ahead). Workers stop, batches drawn ahead are dropped, and the workers
    /// start again from the state's position, so it can be called at any point, also after an
    /// error was delivered.
    ///
    /// Errors (`Error::InvalidArgument`, naming the first field that differs): a state of another
    /// format or version, or of a loader with other streams, stores, record counts, global batch,
    /// delivery mode or sampler; a completion-order state with steps delivered ahead, loaded by
    /// another process slice; a closed loader. The process count may differ (elastic resume): with
    /// the same global batch, the processes' slices continue the same global sequence. A
    /// mixture's weight schedule is the state's (with the changes made before it was saved).
    pub fn load_state_dict(&mut self, state: &LoaderState) -> Result<()> {
        self.load_state_dict_with(state, false)
    }

    /// [`Loader::load_state_dict`]; with `allow_other_version`, a state saved while reading
    /// another version of a view's dataset is accepted instead of refused. The loader then goes
    /// on from the state's step (and the steps it delivered ahead) over the records of the
    /// version it reads now: its own sampler, seeded as the state's, over this version's index
    /// space; a mixture keeps the state's weight schedule over this loader's sources. The batches
    /// are not those the state's version would have given (records were added or replaced), only
    /// the position carries over: for a dataset that grew, say, and a run that accepts that.
    /// Every other field must match as in `load_state_dict`.
    pub fn load_state_dict_with(
        &mut self,
        state: &LoaderState,
        allow_other_version: bool,
    ) -> Result<()> {
        if self.closed {
            return Err(Error::invalid(
                "the loader is closed: build a new one to load a state",
            ));
        }
        let now = std::process::id();
        if now != self.pid {
            return Err(Error::Forked {
                started_in: self.pid,
                used_in: now,
            });
        }
        let mine = self.state_dict();
        state.check_loadable_with(&mine, allow_other_version)?;
        let plan = match (&state.sampler, &mine.sampler) {
            (SamplerSpec::Mixture(spec), SamplerSpec::Mixture(ours))
                if allow_other_version && state.reads_other_version(&mine) =>
            {
                // This version's sources (sizes), the state's weight schedule.
                let spec = crate::mixture::MixtureSpec {
                    sources: ours.sources.clone(),
                    schedule: spec.schedule.clone(),
                };
                Some(MixturePlan::from_spec(&spec, self.batch)?)
            }
            (SamplerSpec::Mixture(spec), _) => Some(MixturePlan::from_spec(spec, self.batch)?),
            _ => None,
        };
        self.stop();
        let skip: BTreeSet<u64> = state.delivered_ahead.iter().copied().collect();
        {
            let mut src = self.source.lock();
            if let Some(plan) = plan {
                self.mixture = Some(plan.spec());
                src.draw = Draw::Mixture(plan);
            }
            src.reposition(state.step, skip.clone())?;
        }
        self.pending.clear();
        self.next_undelivered = state.step;
        self.delivered_ahead = skip;
        self.exec = Self::start(&self.source, &self.transform, &self.options, state.step)?;
        self.done = false;
        Ok(())
    }

    /// A mixture's weights from step `at` on (one per source; finite, positive, each giving its
    /// source at least one record per global batch), or from the first step no worker has drawn
    /// yet when `at` is `None`; returns the step they apply from. The change is part of the state,
    /// so a loader resumed from a later state draws with the same weights at the same steps.
    ///
    /// Errors (`Error::InvalidArgument`): not a mixture loader; `at` already drawn (workers draw
    /// up to `workers + prefetch` steps ahead of delivery) or before the last change; weights as
    /// at construction.
    pub fn set_weights(&mut self, weights: Vec<f64>, at: Option<u64>) -> Result<u64> {
        let mut src = self.source.lock();
        let drawn = src.next_step;
        let Draw::Mixture(plan) = &mut src.draw else {
            return Err(Error::invalid("set_weights needs a mixture loader"));
        };
        let step = at.unwrap_or(drawn);
        if step < drawn {
            return Err(Error::invalid(format!(
                "step {step} was already drawn (the workers draw ahead of delivery; the first step \
                 not drawn is {drawn}): change the weights at a later step, or at None"
            )));
        }
        plan.set_weights(step, weights)?;
        self.mixture = Some(plan.spec());
        Ok(step)
    }
}
