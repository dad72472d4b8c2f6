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
//! Modules by layer; each imports only from layers below it (`tests/module_graph/` checks the
//! graph has no cycle):
//!
//! | layer | modules |
//! |---|---|
//! | entry | `main` → `cli` (arguments, dispatch; nothing else imports it) |
//! | run | `run` (corpora, every selected table, the report) |
//! | tables | `store_cell` (and `write_probe`, its interleaved A/B of writes), `sampler_table`, `loader_table` (running the rows, the tables), `loader_cell` (the Rust rows' cell) → `loader_store` (the store the rows read, checked against the source), `loader_match`, `loader_limit`, `cold_table` (the `--cold` tables) → `cold_loader`, `cold_limit`; `gate` (A/B pairs of two builds' loader cells: `gate::cells` → `loader_store`, `loader_arms`) |
//! | inputs, outputs | `corpus` (corpora, sources); `report` (aggregation, `tables.md`, `plots`, `render`); `machine` (receipts) |
//! | leaves | `config` (run options, paths), `model` (results, rows, cells, `Status`), `progress` → `table` (`Table`: names, geometry, corpus); `cell_args` (the hidden subcommands' command lines: `cli` parses them, the code that spawns a cell renders them) → `table`; `error` (`HarnessError`, what every fallible call returns); `corrupt` (the test-only `LOADERX_HARNESS_CORRUPT_BATCH` switch of every verifying cell) |

mod cell_args;
mod child;
mod cli;
mod cold_limit;
mod cold_loader;
mod cold_table;
mod config;
mod corpus;
mod corrupt;
mod error;
mod gate;
mod loader_arms;
mod loader_cell;
mod loader_goals;
mod loader_limit;
mod loader_match;
mod loader_pair;
mod loader_store;
mod loader_table;
mod machine;
mod model;
mod progress;
mod remote_report;
#[cfg(feature = "remote")]
mod remote_table;
mod report;
mod run;
mod sampler_table;
mod store_cell;
mod table;
mod token_corpus;
mod working_set;
mod write_probe;

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
