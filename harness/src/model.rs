//! The report model: what a cell reports ([`CellResult`]), the rows and tables of a report
//! ([`StoreRow`], [`StoreTable`], [`FreeTable`]), a cell's [`Status`], and the whole [`Report`]
//! with its `results.json` form ([`Report::to_json`], [`Report::from_json`]).
//!
//! Types and their (de)serialization only: it imports nothing from the crate but [`Table`].
//! Aggregation and rendering live in `report`, `plots`; the gate reads the same JSON.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use crate::table::{Stage, Table};

/// The `schema` field of every `results.json`.
pub const SCHEMA: &str = "loaderx-harness/1";

/// Deserializes an f64 that JSON stored as `null` (serde_json writes NaN and infinities as null).
pub fn f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// How a store cell (or a row over its repeats) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Verified and timed.
    Ok,
    /// Errored, or failed verification.
    Failed,
    /// The backend has no layout for the table's records.
    NotApplicable,
    /// Left out of the table: one probe batch took longer than the table allows.
    Excluded,
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::Ok,
        Status::Failed,
        Status::NotApplicable,
        Status::Excluded,
    ];

    /// The status as `results.json` and `tables.md` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "FAILED",
            Status::NotApplicable => "n/a",
            Status::Excluded => "excluded",
        }
    }

    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Status, D::Error> {
        let name = String::deserialize(d)?;
        Status::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown status {name:?}")))
    }
}

/// What a store cell reports (one JSON file per cell run).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellResult {
    pub table: Table,
    pub backend: String,
    pub status: Status,
    pub note: Option<String>,
    pub records: u64,
    pub logical_bytes: u64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub write_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub write_mib_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub gather_s: f64,
    pub gather_batches: u64,
    pub gather_records: u64,
    pub gather_bytes: u64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub gather_mib_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub krecords_s: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub p95_ms: f64,
    pub disk_bytes: u64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub compression: f64,
    pub verified_batches: u64,
    pub verified: bool,
    /// Seconds of every timed write (`write_s` is their median); absent in older results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_repeats_s: Vec<f64>,
    /// A plain sequential file write of the same bytes in the same cell, MiB/s (the write limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_limit_mib_s: Option<f64>,
}

impl CellResult {
    /// A result with nothing measured yet.
    pub fn new(table: Table, backend: &str, status: Status) -> CellResult {
        CellResult {
            table,
            backend: backend.to_string(),
            status,
            note: None,
            records: 0,
            logical_bytes: 0,
            write_s: 0.0,
            write_mib_s: 0.0,
            gather_s: 0.0,
            gather_batches: 0,
            gather_records: 0,
            gather_bytes: 0,
            gather_mib_s: 0.0,
            krecords_s: 0.0,
            p50_ms: 0.0,
            p95_ms: 0.0,
            disk_bytes: 0,
            compression: 0.0,
            verified_batches: 0,
            verified: false,
            write_repeats_s: Vec::new(),
            write_limit_mib_s: None,
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
    pub verified: bool,
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

/// A table with free-form rows (sampler, loader).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FreeTable {
    pub name: Table,
    pub title: String,
    pub synthetic: bool,
    pub columns: Vec<String>,
    pub rows: Vec<Value>,
}

/// A whole run's report.
#[derive(Clone, Debug)]
pub struct Report {
    pub machine: Value,
    pub source: Value,
    pub corpora: Vec<Value>,
    pub store_tables: Vec<StoreTable>,
    pub sampler: Option<FreeTable>,
    pub loader: Option<Vec<FreeTable>>,
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
            sampler: None,
            loader: None,
            quick,
            repeats,
        }
    }

    /// The free-form tables (sampler, then loaders), in output order.
    pub fn free_tables(&self) -> impl Iterator<Item = &FreeTable> {
        self.sampler.iter().chain(self.loader.iter().flatten())
    }

    /// The `results.json` document.
    pub fn to_json(&self) -> Value {
        let mut tables: Vec<Value> = self
            .store_tables
            .iter()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect();
        if let Some(s) = &self.sampler {
            tables.push(serde_json::to_value(s).unwrap_or(Value::Null));
        }
        for l in self.loader.iter().flatten() {
            tables.push(serde_json::to_value(l).unwrap_or(Value::Null));
        }
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
        let mut loaders = Vec::new();
        for t in j["tables"].as_array().into_iter().flatten() {
            let Some(table) = t["name"].as_str().and_then(Table::from_name) else {
                continue;
            };
            match table.stage() {
                Stage::Sampler => rep.sampler = serde_json::from_value(t.clone()).ok(),
                Stage::Loader => {
                    loaders.extend(serde_json::from_value::<FreeTable>(t.clone()).ok())
                }
                Stage::Store => rep
                    .store_tables
                    .extend(serde_json::from_value::<StoreTable>(t.clone()).ok()),
            }
        }
        rep.loader = (!loaders.is_empty()).then_some(loaders);
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

    /// The committed CI baseline parses, table by table, into the typed model, and writes back
    /// to the same document.
    #[test]
    fn committed_baseline_parses_into_the_model() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../results/baseline-quick.json"
        );
        let bytes = std::fs::read(path).expect("read results/baseline-quick.json");
        let j: Value = serde_json::from_slice(&bytes).expect("baseline is JSON");
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
                Stage::Sampler | Stage::Loader => {
                    let ft: FreeTable =
                        serde_json::from_value(t.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(ft.name, table);
                }
            }
        }
        let rep = Report::from_json(&j);
        assert_eq!(rep.store_tables.len(), 4);
        assert!(rep.sampler.is_some());
        assert_eq!(rep.loader.as_ref().map(Vec::len), Some(2));
        let statuses: Vec<Status> = rep
            .store_tables
            .iter()
            .flat_map(|t| t.rows.iter().map(|r| r.status))
            .collect();
        // npy has no Ragged layout, in every run. Whether a row was excluded (a probe batch too
        // slow) depends on the machine a baseline was measured on; every status's spelling is
        // checked by the round trip above.
        assert!(statuses.contains(&Status::NotApplicable));
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
