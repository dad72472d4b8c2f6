//! `loaderx.Loader`: gather in Rust without the GIL, a Python transform in the worker thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use loaderx::{
    Batch, Loader, LoaderOptions, MixtureSource, Shard, StreamView, Transform, WeightChange,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::{
    ClosedError, CoreError, Error, IntoPyResult, InvalidInputError, InvalidTypeError, guard, lock,
    take_detached, type_name,
};
use crate::gpu::Placement;
use crate::packed::{PACK_KEY, Packing};
use crate::pickle::refuse;
use crate::sampler::{CustomSampler, PyMode, PySampler};
use crate::tensor::{dense_to_py, ragged_to_py};
use crate::view::any_view;

/// What a worker hands the consumer: the raw shard list (no transform: converted to Python objects
/// on the consumer side, so workers never need the GIL) or the transform's result.
pub(crate) enum Item {
    Shards(Vec<Shard>),
    Obj(Py<PyAny>),
}

/// Per source, per stream name, the placement of each shard position's view (device placements
/// upload).
pub(crate) type Placements = Arc<Vec<HashMap<String, Vec<Placement>>>>;

/// The key of a mixture shard's source in its dict.
const SOURCE_KEY: &str = "__source__";

pub(crate) fn shards_to_py<'py>(
    py: Python<'py>,
    shards: Vec<Shard>,
    placements: &Placements,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let host = Placement::Host;
    for shard in shards {
        let d = PyDict::new(py);
        let (k, source) = (shard.index(), shard.source());
        let places = placements.get(source.unwrap_or(0) as usize);
        for (name, batch) in shard.into_pairs() {
            let place = places
                .and_then(|p| p.get(&*name))
                .and_then(|v| v.get(k).or(v.first()))
                .unwrap_or(&host);
            let v = match batch {
                Batch::Dense(b) => dense_to_py(py, b, place)?,
                Batch::Ragged(b) => ragged_to_py(py, b, place)?,
                #[allow(unreachable_patterns)]
                _ => return Err(Error::new_err("unknown batch kind")),
            };
            d.set_item(&*name, v)?;
        }
        if let Some(source) = source {
            d.set_item(SOURCE_KEY, source)?;
        }
        out.append(d)?;
    }
    Ok(out)
}

/// What one `__next__` took from the loader: a packed batch's tensors, or a delivered item.
enum Next {
    Packed(crate::packed::Tensors),
    Item(loaderx::Result<Item>),
}

/// A delivered item as the shard list a packer reads (a transform's result is refused).
fn item_shards(item: Item) -> loaderx::Result<Vec<Shard>> {
    match item {
        Item::Shards(s) => Ok(s),
        Item::Obj(_) => Err(loaderx::Error::InvalidArgument(
            "a packing loader packs the raw stream: build the Loader without a transform".into(),
        )),
    }
}

/// A `streams` dict, parsed: the core's stream list, each view's store path (the state's store
/// identity), placements, and the fingerprint's `streams` entry.
struct Parsed<'py> {
    list: Vec<(String, Vec<StreamView>)>,
    paths: Vec<Vec<String>>,
    placements: HashMap<String, Vec<Placement>>,
    prints: Bound<'py, PyList>,
}

fn parse_streams<'py>(py: Python<'py>, streams: &Bound<'py, PyAny>) -> PyResult<Parsed<'py>> {
    let items = streams
        .call_method0("items")
        .map_err(|_| InvalidTypeError::new_err("streams must be a dict {name: [view, ...]}"))?;
    let mut out = Parsed {
        list: Vec::new(),
        paths: Vec::new(),
        placements: HashMap::new(),
        prints: PyList::empty(py),
    };
    for item in items.try_iter()? {
        let item = item?;
        let (name, views): (String, Bound<'_, PyAny>) = item.extract().map_err(|_| {
            InvalidTypeError::new_err("streams must map str names to lists of views")
        })?;
        if name == SOURCE_KEY {
            return Err(InvalidInputError::new_err(format!(
                "invalid argument: the stream name {SOURCE_KEY:?} is reserved (a mixture shard's source)"
            )));
        }
        let mut vs = Vec::new();
        let mut places = Vec::new();
        let mut labels = Vec::new();
        let view_prints = PyList::empty(py);
        for v in views.try_iter().map_err(|_| {
            InvalidTypeError::new_err(format!("stream {name:?}: expected a list of views"))
        })? {
            let v = v?;
            let Some(a) = any_view(&v) else {
                let t = type_name(&v);
                return Err(InvalidTypeError::new_err(format!(
                    "stream {name:?}: expected DenseView or RaggedView (store.bind(allocator)), got {t}"
                )));
            };
            let path = a.opened.path;
            view_prints.append((a.kind, path.clone(), a.view.len()))?;
            // A dataset's column is part of what the view reads (its version is in the state).
            let mut label = path.to_string_lossy().into_owned();
            if let Some(c) = &a.opened.column {
                label = format!("{label}#{c}");
            }
            labels.push(label);
            vs.push(a.view);
            places.push(a.placement);
        }
        out.prints.append((&name, view_prints))?;
        out.placements.insert(name.clone(), places);
        out.paths.push(labels);
        out.list.push((name, vs));
    }
    Ok(out)
}

/// `value` as a `usize` for which `ok` holds, else an `InvalidInputError` saying `name` must be
/// `want`.
fn checked(name: &str, value: i64, want: &str, ok: impl Fn(usize) -> bool) -> PyResult<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&v| ok(v))
        .ok_or_else(|| {
            InvalidInputError::new_err(format!(
                "invalid argument: {name} must be {want}, got {value}"
            ))
        })
}

/// Checks `process_index`, `process_count` and `prefetch` (always a positive integer, whatever
/// `workers` is) and makes the options.
fn options(
    workers: usize,
    prefetch: i64,
    process_index: i64,
    process_count: i64,
    ordered: bool,
) -> PyResult<LoaderOptions> {
    let process_count = checked("process_count", process_count, "a positive integer", |c| {
        c > 0
    })?;
    let process_index = checked(
        "process_index",
        process_index,
        &format!("in [0, {process_count})"),
        |i| i < process_count,
    )?;
    let prefetch = checked("prefetch", prefetch, "a positive integer", |p| p > 0)?;
    Ok(LoaderOptions::new(workers, prefetch)
        .process(process_index, process_count)
        .ordered(ordered))
}

/// The core transform: the shard list as is (converted on the consumer's side), or the Python
/// transform's result (called in the worker with the GIL).
fn core_transform(
    py: Python<'_>,
    transform: Option<Py<PyAny>>,
    places: Placements,
) -> Transform<Item> {
    let tf: Option<Py<PyAny>> = transform.filter(|t| !t.is_none(py));
    Arc::new(move |shards: Vec<Shard>| match &tf {
        None => Ok(Item::Shards(shards)),
        Some(f) => Python::attach(|py| {
            let arg = shards_to_py(py, shards, &places)?;
            f.bind(py).call1((arg,)).map(|o| Item::Obj(o.unbind()))
        })
        .map_err(loaderx::Error::transform),
    })
}

/// A multi-stream loader. `next()` / iteration yield the shard list `[{name: DLTensor |
/// RaggedBatch}, ...]` or the transform's result.
#[pyclass(name = "Loader", module = "loaderx", frozen)]
pub(crate) struct PyLoader {
    inner: Mutex<Option<Loader<Item>>>,
    threads: usize,
    process_index: usize,
    process_count: usize,
    ordered: bool,
    /// Built on a `loaderx.sampler.Sampler` (its position can be saved and restored).
    stateless: bool,
    /// What every process of a data-parallel job must agree on (without the step), as a dict.
    fingerprint: Py<PyDict>,
    /// Where each stream's batches are placed (uploads happen at conversion).
    placements: Placements,
    /// Set by `pack()`: the packer the loader's batches go through (locked before `inner`).
    packing: Mutex<Option<Packing>>,
}

/// The `InternalError` message of a poisoned loader lock.
const POISONED: &str = "loader lock poisoned";

impl PyLoader {
    /// Runs `f` on the open loader with the GIL released; `ClosedError` once it is closed.
    fn with_open<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Loader<Item>) -> Result<T, CoreError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            guard(|| {
                let mut g = lock(&self.inner, POISONED)?;
                match g.as_mut() {
                    Some(l) => f(l),
                    None => Err(CoreError::Py(
                        ClosedError::new_err,
                        "the loader is closed".into(),
                    )),
                }
            })
        })
        .py_err(py)
    }
}

impl PyLoader {
    /// As `with_open`, with the packer slot too (`None` when the loader does not pack); both
    /// locks are taken with the GIL released, the packer's first. `closed`: what to return
    /// once the loader is closed (`None`: raise `ClosedError`).
    fn with_packing<T: Send>(
        &self,
        py: Python<'_>,
        closed: Option<T>,
        f: impl FnOnce(&mut Option<Packing>, &mut Loader<Item>) -> Result<T, CoreError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            guard(|| {
                let mut p = lock(&self.packing, POISONED)?;
                let mut g = lock(&self.inner, POISONED)?;
                match (g.as_mut(), closed) {
                    (Some(l), _) => f(&mut p, l),
                    (None, Some(v)) => Ok(v),
                    (None, None) => Err(CoreError::Py(
                        ClosedError::new_err,
                        "the loader is closed".into(),
                    )),
                }
            })
        })
        .py_err(py)
    }
}

#[pymethods]
impl PyLoader {
    /// Refuses: a loader's worker threads and queued batches live in this process.
    fn __reduce__(&self) -> PyResult<()> {
        Err(refuse(
            "Loader",
            "its worker threads and queued batches live in this process; pickle its views and \
             sampler, and build a Loader in the receiving process",
        ))
    }

    #[new]
    #[pyo3(signature = (streams, sampler, transform=None, workers=4, prefetch=4, *, process_index=0, process_count=1, ordered=false))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        streams: &Bound<'_, PyAny>,
        sampler: &Bound<'_, PyAny>,
        transform: Option<Py<PyAny>>,
        workers: usize,
        prefetch: i64,
        process_index: i64,
        process_count: i64,
        ordered: bool,
    ) -> PyResult<Self> {
        let opts = options(workers, prefetch, process_index, process_count, ordered)?;
        let parsed = parse_streams(py, streams)?;
        let fingerprint = PyDict::new(py);
        fingerprint.set_item("process_count", opts.process_count)?;
        fingerprint.set_item("streams", &parsed.prints)?;
        let stateless = sampler.cast::<PySampler>().is_ok();
        let boxed: Box<dyn loaderx::Sampler> = if let Ok(s) = sampler.cast::<PySampler>() {
            let (len, batch, mode, seed) = s.get().plan();
            fingerprint.set_item("batch", batch)?;
            fingerprint.set_item("sampler_len", len)?;
            fingerprint.set_item("mode", mode)?;
            fingerprint.set_item("seed", seed)?;
            Box::new(s.get().shared())
        } else if sampler.hasattr("next")? {
            let custom = CustomSampler::new(sampler)?;
            fingerprint.set_item("batch", loaderx::Sampler::batch_size(&custom))?;
            fingerprint.set_item("mode", format!("custom {}", type_name(sampler)))?;
            Box::new(custom)
        } else {
            return Err(InvalidTypeError::new_err(
                "sampler must be a loaderx.sampler.Sampler or an object whose next() returns a 1-D index array",
            ));
        };
        let placements: Placements = Arc::new(vec![parsed.placements]);
        let transform = core_transform(py, transform, placements.clone());
        let paths = parsed.paths;
        let mut loader =
            guard(|| Loader::with_transform_arc(parsed.list, boxed, opts, transform)).py_err(py)?;
        // The state's store identity is the path each view's store was opened at.
        loader.label_stores(|i, j| paths[i][j].clone());
        Ok(PyLoader {
            inner: Mutex::new(Some(loader)),
            threads: opts.threads(),
            process_index: opts.process_index,
            process_count: opts.process_count,
            ordered,
            stateless,
            fingerprint: fingerprint.unbind(),
            placements,
            packing: Mutex::new(None),
        })
    }

    /// A loader over a weighted mixture of sources (`loaderx.MixtureSource`: streams, weight, mode,
    /// seed), `batch` records per global step; `schedule` lists later weight changes as
    /// `(step, [weight, ...])`. See `Loader::mixture` in the Rust docs and docs/python.md.
    #[staticmethod]
    #[pyo3(signature = (sources, batch, transform=None, workers=4, prefetch=4, *, process_index=0, process_count=1, ordered=false, schedule=None))]
    #[allow(clippy::too_many_arguments)]
    fn mixture(
        py: Python<'_>,
        sources: &Bound<'_, PyAny>,
        batch: usize,
        transform: Option<Py<PyAny>>,
        workers: usize,
        prefetch: i64,
        process_index: i64,
        process_count: i64,
        ordered: bool,
        schedule: Option<Vec<(u64, Vec<f64>)>>,
    ) -> PyResult<Self> {
        let opts = options(workers, prefetch, process_index, process_count, ordered)?;
        let mut core = Vec::new();
        let mut places = Vec::new();
        let mut paths = Vec::new();
        let prints = PyList::empty(py);
        for (k, src) in sources
            .try_iter()
            .map_err(|_| {
                InvalidTypeError::new_err("sources must be a list of loaderx.MixtureSource")
            })?
            .enumerate()
        {
            let src = src?;
            let field = |name: &str| {
                src.getattr(name).map_err(|_| {
                    InvalidTypeError::new_err(format!(
                        "source {k}: expected a loaderx.MixtureSource (streams, weight, mode, seed), got {}",
                        type_name(&src)
                    ))
                })
            };
            let parsed = parse_streams(py, &field("streams")?)?;
            let weight: f64 = field("weight")?.extract()?;
            let mode = *field("mode")?
                .cast::<PyMode>()
                .map_err(|_| {
                    InvalidTypeError::new_err(format!("source {k}: mode must be a Sampler.Mode"))
                })?
                .get();
            let seed: u64 = field("seed")?.extract()?;
            prints.append((weight, mode.name(), seed, &parsed.prints))?;
            paths.extend(parsed.paths);
            places.push(parsed.placements);
            core.push(MixtureSource {
                streams: parsed.list,
                weight,
                mode: mode.core(),
                seed,
            });
        }
        let changes = schedule
            .unwrap_or_default()
            .into_iter()
            .map(|(step, weights)| WeightChange { step, weights })
            .collect();
        let placements: Placements = Arc::new(places);
        let transform = core_transform(py, transform, placements.clone());
        let mut loader =
            guard(|| Loader::mixture(core, batch, changes, opts, transform)).py_err(py)?;
        loader.label_stores(|i, j| paths[i][j].clone());
        let fingerprint = PyDict::new(py);
        fingerprint.set_item("process_count", opts.process_count)?;
        fingerprint.set_item("batch", batch)?;
        fingerprint.set_item("mode", "mixture")?;
        fingerprint.set_item("streams", prints)?;
        Ok(PyLoader {
            inner: Mutex::new(Some(loader)),
            threads: opts.threads(),
            process_index: opts.process_index,
            process_count: opts.process_count,
            ordered,
            stateless: true,
            fingerprint: fingerprint.unbind(),
            placements,
            packing: Mutex::new(None),
        })
    }

    /// A mixture's weights from `step` on (default: the first step no worker has drawn yet);
    /// returns that step. The change is part of `state_dict()`.
    #[pyo3(signature = (weights, step=None))]
    fn set_weights(&self, py: Python<'_>, weights: Vec<f64>, step: Option<u64>) -> PyResult<u64> {
        self.with_open(py, |l| {
            l.set_weights(weights, step).map_err(CoreError::from)
        })
    }

    /// Whether batches are delivered in step order.
    #[getter]
    fn ordered(&self) -> bool {
        self.ordered
    }

    /// The resume state as a JSON-serialisable dict (a few hundred bytes; see
    /// `loaderx::LoaderState`): `format`, `version`, the low-water `step` and, in completion
    /// order, the steps `delivered_ahead` of it, `ordered`, the global `batch`, the process slice,
    /// the `sampler`'s spec and the `streams`' fingerprint. Save it with the model; a new loader
    /// over the same streams continues exactly with `load_state_dict`. Refused for a custom
    /// sampler (its position cannot be restored), once closed, and when called from Lightning's
    /// own modules, whose fetcher holds a batch ahead of training (`loaderx.lightning` adapts).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if !self.stateless {
            return Err(InvalidInputError::new_err(
                "invalid argument: state_dict needs a loaderx.sampler.Sampler: a custom sampler's \
                 position cannot be restored by the loader (seek it yourself and save loader.step)",
            ));
        }
        // A trainer that fetches ahead of training (Lightning) must not save the state of the
        // batches it delivered: the guard raises for such a caller (see `loaderx._fetch_ahead`).
        py.import("loaderx._fetch_ahead")?
            .call_method0("refuse_fetching_ahead_caller")?;
        let (json, pack) = self.with_packing(py, None, |p, l| {
            Ok(match p {
                Some(p) => {
                    let (l, k) = crate::packed::state_json(p, l);
                    (l, Some(k))
                }
                None => (l.state_dict().to_json(), None),
            })
        })?;
        let loads = py.import("json")?.getattr("loads")?;
        let state = loads.call1((json,))?;
        if let Some(k) = pack {
            state.set_item(PACK_KEY, loads.call1((k,))?)?;
        }
        Ok(state)
    }

    /// Continues from a state saved by `state_dict` (possibly by a loader with another worker or
    /// process count): workers stop, batches drawn ahead are dropped, and the next batches are
    /// exactly those an uninterrupted run delivers after the ones the state counts. A state of a
    /// loader over other streams, stores, record counts, global batch, delivery mode or sampler
    /// raises `InvalidInputError` naming the first field that differs. A state saved while
    /// reading another version of a dataset is refused too, unless `allow_other_version=True`:
    /// the loader then goes on from the state's position over the records of the version it reads
    /// now (not the batches the state's version would have given). Not for a packed loader, whose
    /// state holds its version's documents.
    #[pyo3(signature = (state, *, allow_other_version=false))]
    fn load_state_dict(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        allow_other_version: bool,
    ) -> PyResult<()> {
        if !state.is_instance_of::<PyDict>() {
            return Err(InvalidTypeError::new_err(format!(
                "state must be the dict Loader.state_dict() returned, got {}",
                type_name(state)
            )));
        }
        let state = state.cast::<PyDict>()?.copy()?;
        let pack = state.get_item(PACK_KEY)?;
        if pack.is_some() {
            state.del_item(PACK_KEY)?;
        }
        let dumps = py.import("json")?.getattr("dumps")?;
        let json: String = dumps
            .call1((&state,))
            .map_err(|e| {
                InvalidInputError::new_err(format!("invalid argument: not a loader state ({e})"))
            })?
            .extract()?;
        let parsed =
            loaderx::LoaderState::from_json(&json).map_err(|e| crate::errors::l_to_py(py, e))?;
        if !self.stateless {
            return Err(InvalidInputError::new_err(
                "invalid argument: load_state_dict needs a loaderx.sampler.Sampler: a custom \
                 sampler's position cannot be restored by the loader",
            ));
        }
        let pack: Option<String> = match pack {
            Some(k) => Some(dumps.call1((k,))?.extract()?),
            None => None,
        };
        self.with_packing(py, None, |p, l| match (p.as_mut(), pack) {
            (None, None) => l
                .load_state_dict_with(&parsed, allow_other_version)
                .map_err(CoreError::from),
            (Some(_), Some(_)) if allow_other_version => {
                Err(CoreError::from(loaderx::Error::InvalidArgument(
                    "allow_other_version does not apply to a packed loader: its state holds \
                     documents of the version it read; open that version to resume"
                        .into(),
                )))
            }
            (Some(p), Some(pack)) => crate::packed::load(p, l, &json, &pack),
            (p, _) => Err(crate::packed::mismatch(p.is_none())),
        })
    }

    /// Packs Ragged stream `stream` (1-D integer token records) from now on: each step yields
    /// `{"tokens", "segment_ids", "positions"}`, `[batch_size, seq_len]` DLPack tensors (tokens
    /// in the stream's dtype, the others int32), packed in Rust by `mode` `"concat"` or
    /// `"first_fit"` (`pool` open rows); the packer's state is part of `state_dict()`. Needs
    /// ordered delivery with several workers and no transform. Returns the loader.
    #[pyo3(signature = (stream, seq_len, batch_size, *, mode="concat", pool=32))]
    fn pack(
        slf: Py<Self>,
        py: Python<'_>,
        stream: &str,
        seq_len: usize,
        batch_size: usize,
        mode: &str,
        pool: usize,
    ) -> PyResult<Py<Self>> {
        let me = slf.get();
        let placement = me
            .placements
            .first()
            .and_then(|m| m.get(stream))
            .and_then(|v| v.first())
            .cloned()
            .unwrap_or(Placement::Host);
        me.with_packing(py, None, |p, l| {
            if p.is_some() {
                return Err(CoreError::Py(
                    InvalidInputError::new_err,
                    "invalid argument: the loader already packs; build a new Loader to pack \
                     otherwise"
                        .into(),
                ));
            }
            let packer = crate::packed::packer(l, stream, seq_len, batch_size, mode, pool)?;
            *p = Some(Packing { packer, placement });
            Ok(())
        })?;
        Ok(slf)
    }

    /// This process's rank: it receives slice `process_index` of every global batch.
    #[getter]
    fn process_index(&self) -> usize {
        self.process_index
    }

    /// Processes sharing each global batch.
    #[getter]
    fn process_count(&self) -> usize {
        self.process_count
    }

    /// What the processes of a data-parallel job must agree on, as a fresh dict: `process_count`,
    /// `streams` (`[(name, [(kind, store path, records), ...]), ...]`), the global `batch`, the
    /// sampler's `sampler_len`, `mode` and `seed` (a custom sampler: its `mode` names its type),
    /// and the current `step` (`None` once closed). `loaderx.distributed.check_consistent`
    /// compares it across processes.
    fn fingerprint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = self.fingerprint.bind(py).copy()?;
        d.set_item("step", self.step(py)?)?;
        Ok(d)
    }

    /// The next step's result; `StopIteration` once closed (or after an error was delivered).
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.__next__(py)? {
            Some(o) => Ok(o),
            None => Err(pyo3::exceptions::PyStopIteration::new_err(())),
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        // One pass under both locks, taken with the GIL released: a packing loader's next
        // batch from its packer, any other's next item (`None` once closed).
        let got = self.with_packing(py, Some(None), |p, l| match p.as_mut() {
            Some(p) => Ok(crate::packed::next(p, l, item_shards)?.map(Next::Packed)),
            None => Ok(l.next().map(Next::Item)),
        })?;
        match got {
            None => Ok(None),
            Some(Next::Packed(t)) => crate::packed::to_dict(py, t).map(Some),
            Some(Next::Item(Err(e))) => Err(crate::errors::l_to_py(py, e)),
            Some(Next::Item(Ok(Item::Obj(o)))) => Ok(Some(o)),
            Some(Next::Item(Ok(Item::Shards(s)))) => Ok(Some(
                shards_to_py(py, s, &self.placements)?.into_any().unbind(),
            )),
        }
    }

    /// Background threads this loader runs (workers plus `cores - 1` gather helpers); all exist once the
    /// constructor returns, and `close()` joins them.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// The low-water step: the first global step whose batch was not delivered. In ordered
    /// delivery (or with 0 or 1 worker) every step before it was delivered; in completion order
    /// some after it may have been too: `state_dict()` lists them. `None` once closed.
    #[getter]
    fn step(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        py.detach(|| {
            guard(|| {
                let g = lock(&self.inner, POISONED)?;
                Ok::<_, CoreError>(g.as_ref().map(|l| l.step()))
            })
        })
        .py_err(py)
    }

    /// Stops and joins the workers and drops queued batches. Never closes stores, views,
    /// allocators or the sampler. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        take_detached(py, &self.inner, POISONED, |l| {
            drop(l);
            Ok(())
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        let l = match self.inner.get_mut() {
            Ok(g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(l) = l {
            // Workers may be waiting for the GIL (a transform): join them with the GIL released.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Python::attach(|py| py.detach(move || drop(l)));
            }));
        }
    }
}
