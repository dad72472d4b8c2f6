//! The `fleet` table: IID against block shuffles read from a SeaweedFS server on loopback by 1 and
//! 8 reader processes: requests and bytes per batch, MiB/s beside the GET limit for the same
//! requests, batch latency and mixing. `harness/python/fleet_bench.py` writes the stores (10^6
//! Dense int64[8] records, 10^6 WikiText-2 sentences as Ragged bytes, Oxford-Pet images sorted by
//! breed), runs every cell in fresh spawned processes and verifies every batch; this module turns
//! its JSON rows into the table and its goals.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{self, RunArgs};
use crate::error::Result;
use crate::model::{FreeTable, columns, ratio};
use crate::table::Table;

/// The goals: requests per 1,024-record batch of small records at the default block
/// shuffle, MiB/s against the GET limit, and class entropy against IID.
const REQUESTS_PER_1024: f64 = 8.0;
const GET_FRACTION: f64 = 0.8;
const ENTROPY_FRACTION: f64 = 0.95;

pub fn run(a: &RunArgs, work: &Path) -> Result<FreeTable> {
    let out = work.join("fleet.json");
    let mut cmd = config::python_command("fleet_bench.py")?;
    cmd.args(["--peers", "--work"])
        .arg(work)
        .arg("--json")
        .arg(&out);
    // Quick: 10^5 records, 1 s a cell (the full run: 10^6, 3 s; 23 min on 2 cores, peers included).
    if a.quick {
        cmd.args(["--records", "100000", "--seconds", "1"]);
    }
    if let Some(p) = &a.pets {
        cmd.arg("--pets").arg(p);
    }
    if let Some(t) = &a.text {
        cmd.arg("--text").arg(t);
    }
    let rows: Vec<Value> = crate::child::script_json(&mut cmd, &out)?;
    Ok(table(&rows))
}

/// Whether two rows are the same cell (store, order, processes, batch).
fn same_cell(a: &Value, b: &Value) -> bool {
    ["store", "order", "procs", "batch"]
        .iter()
        .all(|k| a[*k] == b[*k])
}

/// The table from the script's rows: `row` (`loaderx`, `get-limit`, or a peer), `store`,
/// `records`, `order`, `block`, `window`, `procs`, `batch`, `requests_per_batch`,
/// `bytes_per_batch`, `delivered_per_batch`, `mib_s`, `p50_ms`, `p99_ms`, `mixing`,
/// `mixing_metric`, `verified`, `note`, `error`. A `get-limit` row joins its cell's row.
fn table(rows: &[Value]) -> FreeTable {
    let (mut reqs, mut gets, mut mix) = ((0, 0), (0, 0), (0, 0));
    let mut out = Vec::new();
    let tally = |t: &mut (usize, usize), met: bool| *t = (t.0 + usize::from(met), t.1 + 1);
    for r in rows.iter().filter(|r| r["row"] != "get-limit") {
        let f = |k: &str| r[k].as_f64();
        let limit = rows
            .iter()
            .find(|g| g["row"] == "get-limit" && same_cell(g, r))
            .and_then(|g| g["mib_s"].as_f64());
        let iid = rows
            .iter()
            .find(|s| {
                s["row"] == r["row"]
                    && s["order"] == "iid"
                    && ["store", "procs", "batch"].iter().all(|k| s[*k] == r[*k])
            })
            .and_then(|s| s["mixing"].as_f64())
            .filter(|_| r["order"] != "iid");
        let default = r["row"] == "loaderx" && r["order"] == "block-default";
        if default {
            if let (Some(q), 1024) = (f("requests_per_batch"), r["batch"].as_u64().unwrap_or(0))
                && r["store"] != "pet"
            {
                tally(&mut reqs, q <= REQUESTS_PER_1024);
            }
            if let (Some(m), Some(l)) = (f("mib_s"), limit) {
                tally(&mut gets, m >= GET_FRACTION * l);
            }
            if let (Some(m), Some(i), "pet") = (f("mixing"), iid, r["store"].as_str().unwrap_or(""))
            {
                tally(&mut mix, m >= ENTROPY_FRACTION * i);
            }
        }
        let shape = match (&r["block"], &r["window"]) {
            (Value::Number(b), Value::Number(w)) => json!(format!("{b} x {w}")),
            _ => Value::Null,
        };
        let note = match (&r["error"], &r["note"]) {
            (Value::String(e), _) => json!(e),
            (_, n) => n.clone(),
        };
        out.push(json!({
            "row": format!("{} {} {} P{} b{}", r["row"].as_str().unwrap_or(""),
                           r["store"].as_str().unwrap_or(""), r["order"].as_str().unwrap_or(""),
                           r["procs"], r["batch"]),
            "impl": r["row"],
            "store": r["store"],
            "records": r["records"],
            "order": r["order"],
            "block x window": shape,
            "procs": r["procs"],
            "batch": r["batch"],
            "requests/batch": f("requests_per_batch"),
            "wire KiB/batch": f("bytes_per_batch").map(|b| b / 1024.0),
            "wire/delivered": ratio(f("bytes_per_batch"), f("delivered_per_batch")),
            "MiB/s": f("mib_s"),
            "GET limit MiB/s": limit,
            "x GET limit": ratio(f("mib_s"), limit),
            "first batch ms": f("first_ms"),
            "p50 ms": f("p50_ms"),
            "p99 ms": f("p99_ms"),
            "mixing": f("mixing"),
            "mixing metric": r["mixing_metric"],
            "mixing vs IID": ratio(f("mixing"), iid),
            "verified": r["verified"],
            "note": note,
        }));
    }
    let goal = |what: &str, (met, of): (usize, usize)| format!("{what}: met in {met} of {of}");
    FreeTable {
        name: Table::Fleet,
        title: format!(
            "Fleet: IID against block shuffles (block x window records x blocks) read from \
             SeaweedFS on loopback, no node cache, P spawned reader processes reading disjoint \
             steps of one stream, batch 256 (1,024 for the request goal); requests and wire \
             bytes per batch from store.request_stats summed over the processes; MiB/s of \
             delivered records; GET limit: the same requests and bytes as plain concurrent \
             ranged GETs, issued from Python (obstore, asyncio, at most 32 in flight): with \
             hundreds of small requests a batch it is slower than the Rust engine and bounds \
             nothing (x GET limit > 1); mixing: per-batch class entropy (bits; Pet sorted by breed) or mean \
             |id difference| of consecutive samples; every batch verified. MosaicML Streaming \
             (py1e) and LitData (shuffle=True) in their documented S3 configurations on the same \
             records, P worker processes: requests counted by SeaweedFS, wire bytes = what their \
             local caches hold, MiB/s after the first batch (which downloads whole 64 MB \
             shards or chunks; they then read their local copy, where the loaderx rows have no \
             cache). Goals at the default \
             block shuffle: {}; {}; {}",
            goal(
                &format!("<= {REQUESTS_PER_1024} requests per 1,024-record batch"),
                reqs
            ),
            goal(&format!(">= {GET_FRACTION}x the GET limit"), gets),
            goal(&format!(">= {ENTROPY_FRACTION}x IID's class entropy"), mix),
        ),
        synthetic: false,
        columns: columns(
            "impl | store | records | order | block x window | procs | batch | requests/batch | \
             wire KiB/batch | wire/delivered | MiB/s | GET limit MiB/s | x GET limit | first batch ms | p50 ms | \
             p99 ms | mixing | mixing metric | mixing vs IID | verified | note",
        ),
        rows: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, store: &str, order: &str, batch: u64, mib: f64, mixing: f64) -> Value {
        json!({"row": name, "store": store, "records": 1000, "order": order, "procs": 1,
               "batch": batch, "block": 256, "window": 64, "requests_per_batch": 6.0,
               "bytes_per_batch": 4096.0, "delivered_per_batch": 2048.0, "mib_s": mib,
               "p50_ms": 1.0, "p99_ms": 2.0, "mixing": mixing, "mixing_metric": "m",
               "verified": if name == "get-limit" { Value::Null } else { json!(true) }})
    }

    #[test]
    fn rows_join_their_get_limit_and_iid_and_count_the_goals() {
        let rows = vec![
            row("loaderx", "dense", "iid", 1024, 10.0, 300.0),
            row("get-limit", "dense", "iid", 1024, 20.0, 0.0),
            row("loaderx", "dense", "block-default", 1024, 9.0, 150.0),
            row("get-limit", "dense", "block-default", 1024, 10.0, 0.0),
            row("loaderx", "pet", "iid", 256, 100.0, 4.0),
            row("loaderx", "pet", "block-default", 256, 50.0, 3.0),
            row("get-limit", "pet", "block-default", 256, 100.0, 0.0),
            json!({"row": "streaming", "store": "dense", "order": "py1e", "procs": 1,
                   "batch": 256, "verified": false, "error": "cell exited 1: boom"}),
        ];
        let t = table(&rows);
        assert_eq!(t.rows.len(), 5, "get-limit rows join their cells");
        assert_eq!(t.rows[0]["x GET limit"], "0.50x");
        assert_eq!(
            t.rows[0]["mixing vs IID"],
            Value::Null,
            "IID against itself"
        );
        assert_eq!(t.rows[1]["mixing vs IID"], "0.50x");
        assert_eq!(t.rows[1]["x GET limit"], "0.90x");
        assert_eq!(t.rows[1]["wire/delivered"], "2.00x");
        assert_eq!(t.rows[1]["wire KiB/batch"], 4.0);
        assert_eq!(t.rows[1]["block x window"], "256 x 64");
        assert_eq!(t.rows[3]["mixing vs IID"], "0.75x");
        assert_eq!(t.rows[4]["note"], "cell exited 1: boom");
        assert_eq!(t.rows[4]["verified"], false);
        assert_eq!(t.rows[1]["row"], "loaderx dense block-default P1 b1024");
        for goal in [
            "<= 8 requests per 1,024-record batch: met in 1 of 1",
            ">= 0.8x the GET limit: met in 1 of 2",
            ">= 0.95x IID's class entropy: met in 0 of 1",
        ] {
            assert!(t.title.contains(goal), "{goal}: {}", t.title);
        }
        assert!(
            t.columns.iter().all(|c| t.rows[1].get(c).is_some()),
            "{:?}",
            t.columns
        );
    }
}
