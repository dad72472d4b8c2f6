//! The report model: what a cell reports, warm or cold ([`CellResult`], its [`CellTable`]), the
//! rows and tables of a report ([`StoreRow`], [`StoreTable`], [`FreeTable`]), a cell's
//! [`Status`], and the whole [`Report`] with its `results.json` form ([`Report::to_json`],
//! [`Report::from_json`]). Aggregation and rendering live in `report`; the gate reads the same
//! JSON.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use crate::table::{Stage, Table, by_name, named};

/// The `schema` field of every `results.json`.
pub const SCHEMA: &str = "loaderx-harness/1";

/// Deserializes an f64 that JSON stored as `null` (serde_json writes NaN and infinities as null).
pub fn f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

named! {
    /// How a store cell (or a row over its repeats) ended.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Status("status") {
        /// Verified and timed.
        Ok = "ok",
        /// Errored, or failed verification.
        Failed = "FAILED",
        /// The backend has no layout for the table's records.
        NotApplicable = "n/a",
        /// Left out of the table: one probe batch took longer than the table allows.
        Excluded = "excluded",
    }
}

/// Deserializes a figure a cell kind has: present (a number, or `null` for NaN) gives `Some`;
/// with `#[serde(default)]`, absent gives `None`.
fn figure<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    f64_or_nan(d).map(Some)
}

/// `skip_serializing_if` for a figure: a name short enough that the attribute fits on one line.
fn none(figure: &Option<f64>) -> bool {
    figure.is_none()
}

/// A figure as a number, NaN when the cell's kind has none.
pub fn or_nan(figure: Option<f64>) -> f64 {
    figure.unwrap_or(f64::NAN)
}

/// The table a cell belongs to: a store table, warm or cold (its cold variant, `cold-<name>`,
/// where each timed batch starts from a dropped page cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellTable {
    pub table: Table,
    pub cold: bool,
}

impl CellTable {
    pub fn warm(table: Table) -> CellTable {
        CellTable { table, cold: false }
    }

    pub fn cold(table: Table) -> CellTable {
        CellTable { table, cold: true }
    }

    /// The name results and tables use: the table's, with `cold-` before it for a cold one.
    pub fn name(self) -> String {
        if self.cold {
            format!("cold-{}", self.table.name())
        } else {
            self.table.name().to_string()
        }
    }

    /// [`CellTable::name`]'s inverse.
    pub fn from_name(name: &str) -> Option<CellTable> {
        match name.strip_prefix("cold-") {
            Some(warm) => Table::from_name(warm).map(CellTable::cold),
            None => Table::from_name(name).map(CellTable::warm),
        }
    }
}

/// A warm cell's table is the table.
impl PartialEq<Table> for CellTable {
    fn eq(&self, t: &Table) -> bool {
        !self.cold && self.table == *t
    }
}

by_name!(CellTable, "table");

/// What one cell reports, warm or cold (one JSON file per cell run; a cold table's cells are
/// `cold.json`). The figures every cell has are plain fields; a figure only one kind measures is
/// an `Option`, absent from the other kind's JSON: the writes, the disk size and the compression
/// of a warm cell, the device counters of a cold one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellResult {
    pub table: CellTable,
    pub backend: String,
    pub status: Status,
    pub note: Option<String>,
    pub records: u64,
    /// Bytes of the source records (absent in cold results written before the merge).
    #[serde(default)]
    pub logical_bytes: u64,
    /// Median seconds of the timed writes (warm cells).
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub write_s: Option<f64>,
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub write_mib_s: Option<f64>,
    #[serde(deserialize_with = "f64_or_nan")]
    pub gather_s: f64,
    /// Timed batches (`batches` in cold results written before the merge).
    #[serde(alias = "batches")]
    pub gather_batches: u64,
    /// Records in the timed batches (absent in cold results written before the merge).
    #[serde(default)]
    pub gather_records: u64,
    pub gather_bytes: u64,
    /// Logical gather MiB/s (`mib_s` in cold results written before the merge).
    #[serde(alias = "mib_s", deserialize_with = "f64_or_nan")]
    pub gather_mib_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub krecords_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub p95_ms: f64,
    /// Bytes the store takes on disk (warm cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Logical bytes / disk bytes (warm cells).
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub compression: Option<f64>,
    /// Device reads completed per second of gather time (cold cells).
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub iops: Option<f64>,
    /// Mean number of device reads in flight while gathering (summed read latency / time); for
    /// the cold limit row, the queue depth it ran at (cold cells).
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub queue_depth: Option<f64>,
    /// MiB/s the device delivered; may exceed `gather_mib_s`: read-ahead beyond the records
    /// (cold cells).
    #[serde(default, deserialize_with = "figure", skip_serializing_if = "none")]
    pub device_mib_s: Option<f64>,
    pub verified_batches: u64,
    /// `Some(true)`: every batch the cell compared with the source arrays matched (and it compared
    /// at least one); `Some(false)`: one differed, or the cell failed; `None` (`null`): nothing was
    /// compared (a backend with no layout for the table, a skipped cell, a row that gathers
    /// nothing).
    pub verified: Option<bool>,
    /// Seconds of every timed write (`write_s` is their median); absent in older results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_repeats_s: Vec<f64>,
    /// A plain sequential file write of the same bytes in the same cell, MiB/s (the write limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_limit_mib_s: Option<f64>,
    /// Seconds the `memcpy-limit` copy took for exactly the timed batches' records, timed in this
    /// cell in rounds alternating with the backend's gathers (`store::LIMIT_METHOD`); absent
    /// in the limit's own cells and in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_gather_s: Option<f64>,
    /// Nanoseconds of a cache line's round trip between two cores around the cell, as runs
    /// before the placement probe's removal recorded it (read back so they round-trip); absent
    /// in newer results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_rt_ns: Option<f64>,
}

impl CellResult {
    /// A warm store cell with nothing measured yet.
    pub fn new(table: Table, backend: &str, status: Status) -> CellResult {
        CellResult {
            table: CellTable::warm(table),
            backend: backend.to_string(),
            status,
            note: None,
            records: 0,
            logical_bytes: 0,
            write_s: Some(0.0),
            write_mib_s: Some(0.0),
            gather_s: 0.0,
            gather_batches: 0,
            gather_records: 0,
            gather_bytes: 0,
            gather_mib_s: 0.0,
            krecords_s: 0.0,
            p50_ms: 0.0,
            p95_ms: 0.0,
            disk_bytes: Some(0),
            compression: Some(0.0),
            iops: None,
            queue_depth: None,
            device_mib_s: None,
            verified_batches: 0,
            verified: None,
            write_repeats_s: Vec::new(),
            write_limit_mib_s: None,
            limit_gather_s: None,
            core_rt_ns: None,
        }
    }

    /// A cold cell of `table` with nothing measured yet (a failed one until it is).
    pub fn cold(table: Table, backend: &str) -> CellResult {
        CellResult {
            table: CellTable::cold(table),
            write_s: None,
            write_mib_s: None,
            gather_mib_s: f64::NAN,
            krecords_s: f64::NAN,
            p50_ms: f64::NAN,
            p95_ms: f64::NAN,
            disk_bytes: None,
            compression: None,
            iops: Some(f64::NAN),
            queue_depth: Some(f64::NAN),
            device_mib_s: Some(f64::NAN),
            ..CellResult::new(table, backend, Status::Failed)
        }
    }
}

/// One backend's row of a store table: medians over its repeats.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreRow {
    pub backend: String,
    pub status: Status,
    pub note: Option<String>,
    #[serde(deserialize_with = "f64_or_nan")]
    pub write_mib_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub gather_mib_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub krecords_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub p95_ms: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub disk_mib: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub compression: f64,
    pub x_memcpy: Option<f64>,
    /// Write MiB/s relative to the table's write limit; absent in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_write_limit: Option<f64>,
    /// `Some(true)` only when every repeat compared batches with the source and all matched;
    /// `Some(false)` when a repeat failed or differed; `None` (`null`) for a row that is no
    /// result to verify: not applicable, or a reference (`memcpy-limit`, `npy-crc-limit`).
    pub verified: Option<bool>,
    /// Sample SD of gather MiB/s over repeats.
    #[serde(deserialize_with = "f64_or_nan")]
    pub sd: f64,
    pub repeats: Vec<CellResult>,
}

/// A store table: one row per backend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreTable {
    pub name: Table,
    pub title: String,
    pub synthetic: bool,
    pub records: u64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub logical_mib: f64,
    /// Median write-limit MiB/s (a plain sequential file write of the same bytes); absent in
    /// older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_limit_mib_s: Option<f64>,
    /// Caption lines under the heading (corpus, working set, write method); absent in older
    /// results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captions: Vec<String>,
    pub rows: Vec<StoreRow>,
}

/// A table with free-form rows (sampler, loader, packing, scale).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FreeTable {
    pub name: Table,
    pub title: String,
    pub synthetic: bool,
    pub columns: Vec<String>,
    pub rows: Vec<Value>,
}

/// `v / base` as `0.50x` in a free table's cell, or null where either is missing.
pub fn ratio(v: Option<f64>, base: Option<f64>) -> serde_json::Value {
    match (v, base) {
        (Some(v), Some(b)) if b > 0.0 => serde_json::json!(format!("{:.2}x", v / b)),
        _ => serde_json::Value::Null,
    }
}

/// A free table's `columns` from one line of names joined by ` | `, as its header reads.
pub fn columns(header: &str) -> Vec<String> {
    header.split(" | ").map(String::from).collect()
}

/// A whole run's report.
#[derive(Clone, Debug)]
pub struct Report {
    pub machine: Value,
    pub source: Value,
    pub corpora: Vec<Value>,
    pub store_tables: Vec<StoreTable>,
    /// The free-form tables (sampler, loaders, packing, scale), in output order.
    pub free: Vec<FreeTable>,
    pub quick: bool,
    pub repeats: usize,
}

impl Report {
    /// An empty report (no tables, no receipts yet).
    pub fn new(quick: bool, repeats: usize, corpora: Vec<Value>) -> Report {
        Report {
            machine: Value::Null,
            source: Value::Null,
            corpora,
            store_tables: Vec::new(),
            free: Vec::new(),
            quick,
            repeats,
        }
    }

    /// The `results.json` document.
    pub fn to_json(&self) -> Value {
        let store = self.store_tables.iter().map(serde_json::to_value);
        let free = self.free.iter().map(serde_json::to_value);
        let tables: Vec<Value> = store
            .chain(free)
            .map(|t| t.unwrap_or(Value::Null))
            .collect();
        json!({
            "schema": SCHEMA,
            "quick": self.quick,
            "repeats": self.repeats,
            "machine": self.machine,
            "source": self.source,
            "corpora": self.corpora,
            "tables": tables,
        })
    }

    /// Reads a `results.json` document back; a table whose name or shape it does not know is
    /// left out.
    pub fn from_json(j: &Value) -> Report {
        let mut rep = Report::new(
            j["quick"].as_bool().unwrap_or(false),
            j["repeats"].as_u64().unwrap_or(1) as usize,
            j["corpora"].as_array().cloned().unwrap_or_default(),
        );
        rep.machine = j["machine"].clone();
        rep.source = j["source"].clone();
        for t in j["tables"].as_array().into_iter().flatten() {
            let Some(table) = t["name"].as_str().and_then(Table::from_name) else {
                continue;
            };
            match table.stage() {
                Stage::Store => rep
                    .store_tables
                    .extend(serde_json::from_value(t.clone()).ok()),
                _ => rep.free.extend(serde_json::from_value(t.clone()).ok()),
            }
        }
        rep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_name_round_trips() {
        for name in ["ok", "FAILED", "n/a", "excluded"] {
            let s = Status::from_name(name).unwrap_or_else(|| panic!("{name} is no status"));
            assert_eq!(s.name(), name);
            let json = serde_json::to_string(&s).expect("serialize");
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).expect("parse"), s);
        }
        assert!(serde_json::from_str::<Status>("\"failed\"").is_err());
    }

    /// One cell type for both kinds: a warm cell's JSON has no device counters, a cold cell's
    /// no writes, and a cold result written before the two merged (`batches`, `mib_s`) reads
    /// into the same fields a new one writes.
    #[test]
    fn warm_and_cold_cells_share_one_model() {
        let warm = serde_json::to_value(CellResult::new(Table::DenseTokens, "x", Status::Ok))
            .expect("serialize");
        assert_eq!(warm["table"], "dense-tokens");
        assert!(warm.get("write_s").is_some() && warm.get("iops").is_none());
        let cold = serde_json::to_value(CellResult::cold(Table::DenseTokens, "x")).expect("json");
        assert_eq!(cold["table"], "cold-dense-tokens");
        assert!(cold.get("write_s").is_none() && cold["iops"].is_null());
        let back: CellResult = serde_json::from_value(cold.clone()).expect("parse");
        assert_eq!(back.table, CellTable::cold(Table::DenseTokens));
        assert!(back.table != Table::DenseTokens);
        assert!(back.iops.is_some_and(f64::is_nan) && back.write_s.is_none());
        assert_eq!(serde_json::to_value(&back).expect("json"), cold);
        let old = json!({
            "table": "cold-ragged-tokens", "backend": "cold-limit", "status": "ok", "note": null,
            "records": 9, "batches": 20, "gather_s": 0.5, "gather_bytes": 100, "mib_s": 12.5,
            "krecords_s": 3.0, "p50_ms": null, "p95_ms": 2.0, "iops": 400.0, "queue_depth": 8.0,
            "device_mib_s": 12.5, "verified_batches": 0, "verified": true
        });
        let c: CellResult = serde_json::from_value(old).expect("an old cold cell parses");
        assert_eq!(c.table, CellTable::cold(Table::RaggedTokens));
        assert_eq!((c.gather_batches, c.gather_mib_s), (20, 12.5));
        assert!(c.p50_ms.is_nan());
        assert_eq!((c.iops, c.queue_depth), (Some(400.0), Some(8.0)));
        assert_eq!((c.write_mib_s, c.disk_bytes), (None, None));
    }

    /// The committed quick runs (`results/*/results.json` with `quick: true` and all seven
    /// tables) parse, table by table, into the typed model, and write back to the same documents.
    #[test]
    fn the_committed_quick_runs_parse_into_the_model() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../results");
        let mut runs = 0;
        for e in std::fs::read_dir(root).expect("results/") {
            let path = e.expect("an entry").path().join("results.json");
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let j: Value = serde_json::from_slice(&bytes).expect("a run is JSON");
            let all = j["tables"].as_array().is_some_and(|t| t.len() == 7);
            if j["quick"] == Value::Bool(true) && all {
                a_quick_run_round_trips(&j);
                runs += 1;
            }
        }
        assert!(runs >= 1, "no committed quick run under {root}");
    }

    fn a_quick_run_round_trips(j: &Value) {
        let j = j.clone();
        assert_eq!(j["schema"], SCHEMA);
        let tables = j["tables"].as_array().expect("tables");
        assert_eq!(tables.len(), 7);
        for t in tables {
            let name = t["name"].as_str().expect("table name");
            let table = Table::from_name(name).unwrap_or_else(|| panic!("unknown table {name}"));
            match table.stage() {
                Stage::Store => {
                    let st: StoreTable =
                        serde_json::from_value(t.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(st.name, table);
                    assert!(!st.rows.is_empty(), "{name}");
                    for r in &st.rows {
                        assert!(!r.repeats.is_empty(), "{name}/{}", r.backend);
                        assert!(r.repeats.iter().all(|c| c.table == table), "{name}");
                    }
                }
                Stage::Sampler
                | Stage::Loader
                | Stage::Packing
                | Stage::Scale
                | Stage::Fleet
                | Stage::Convert => {
                    let ft: FreeTable =
                        serde_json::from_value(t.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(ft.name, table);
                }
            }
        }
        let rep = Report::from_json(&j);
        assert_eq!(rep.store_tables.len(), 4);
        let stages: Vec<Stage> = rep.free.iter().map(|t| t.name.stage()).collect();
        assert_eq!(stages[..3], [Stage::Sampler, Stage::Loader, Stage::Loader]);
        let statuses: Vec<Status> = rep
            .store_tables
            .iter()
            .flat_map(|t| t.rows.iter().map(|r| r.status))
            .collect();
        // npy has no Ragged layout, in every run that has npy rows (a `--gated` run times only
        // the rows the gate reads). Whether a row was excluded (a probe batch too slow) depends on
        // the machine a baseline was measured on; every status's spelling is checked by the round
        // trip above.
        let gated = j["source"]["command_line"]
            .as_array()
            .is_some_and(|a| a.iter().any(|w| w == "--gated"));
        assert!(gated || statuses.contains(&Status::NotApplicable));
        // Written back through the model, the document is the one committed (NaN cells aside,
        // which JSON stores as null and the model reads back as NaN, written again as null).
        assert_eq!(rep.to_json(), j);
        // An excluded row survives the same round trip.
        let mut k = j.clone();
        k["tables"][0]["rows"][1]["status"] = Value::from(Status::Excluded.name());
        let rk = Report::from_json(&k);
        assert!(
            rk.store_tables
                .iter()
                .flat_map(|t| t.rows.iter())
                .any(|r| r.status == Status::Excluded)
        );
        assert_eq!(rk.to_json(), k);
    }
}
