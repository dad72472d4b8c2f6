//! `harness`: the benchmark driver of the loaderx workspace.
//!
//! ```text
//! cargo run --release -p harness                          # full matrix (cached or synthetic corpora)
//! cargo run --release -p harness -- --pets DIR --text DIR # real sources
//! cargo run --release -p harness -- --quick --only dense-vision,sampler
//! cargo run --release -p harness -- prepare --download    # fetch the full public datasets
//! cargo run --release -p harness -- gate BASELINE_HARNESS CANDIDATE_HARNESS   # scripts/ci-gate.sh
//! cargo run --release -p harness -- render results/RUN    # its tables and every plot, from its data
//! ```
//!
//! Every (table, backend) cell runs in a fresh process (the harness re-invokes itself with the
//! hidden `cell` subcommand); arms are rotated per repeat; each cell verifies 100 random batches
//! byte for byte before timing and checks every timed batch after its timer stops.
//!
//! The source is in rooms, one folder each; a room imports only from rooms below it
//! (`tests/module_graph/` checks the module graph has no cycle):
//!
//! | layer | rooms and modules |
//! |---|---|
//! | entry | `main` → `cli` (arguments, dispatch; nothing else imports it) → `run` (corpora, every selected table, the report) |
//! | tables | `store/` (the store cell, its write probe, the sampler table), `loader/` (the loader tables, their Rust cell, the store they read), `cold/` (the `--cold` tables), `remote_table/` (feature `remote`), `packing/`, `scale/` (Python-measured tables); `gate` (A/B pairs of two builds' loader cells: `gate::cells` → `loader::store`, `loader::arms`) |
//! | inputs, outputs | `corpus/` (corpora, sources, the token corpus); `report/` (aggregation, `tables.md`, plots, `render`); `machine` (receipts) |
//! | leaves | `common/` (run options, results, tables, errors, progress, child processes, the cells' command lines, the corruption switch) |
//!
//! The common room's modules are named at the root too (`crate::error`, `crate::table`, ...), as
//! every room reads them.

mod cli;
mod cold;
mod common;
mod convert;
mod corpus;
mod fleet;
mod gate;
mod loader;
mod machine;
mod packing;
mod remote_report;
#[cfg(feature = "remote")]
mod remote_table;
mod report;
mod run;
mod scale;
mod store;
mod working_set;

use common::{cell_args, child, config, corrupt, error, model, progress, table};

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::dispatch(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness: error: {e}");
            ExitCode::from(2)
        }
    }
}
