//! The common room: what every other room reads, importing nothing above it. `config` (run
//! options, paths), `model` (results, rows, cells, `Status`), `table` (`Table`: names, geometry,
//! corpus), `progress` (bars, time ledgers), `error` (`HarnessError`, what every fallible call
//! returns), `child` (child processes under one time limit), `cell_args` (the hidden
//! subcommands' command lines: `cli` parses them, the code that spawns a cell renders them) and
//! `corrupt` (the test-only `LOADERX_HARNESS_CORRUPT_BATCH` switch of every verifying cell).

pub mod cell_args;
pub mod child;
pub mod config;
pub mod corrupt;
pub mod error;
pub mod model;
pub mod progress;
pub mod table;
