//! Command-line parsing (hand-written: a handful of flags does not need a parser crate).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{corpus, gate, loader_table, run, sampler_table, store_cell};

/// Options of a benchmark run.
#[derive(Clone, Debug)]
pub struct RunArgs {
    pub quick: bool,
    pub repeats: usize,
    pub only: Option<Vec<String>>,
    pub out: Option<PathBuf>,
    pub pets: Option<PathBuf>,
    pub text: Option<PathBuf>,
    pub wikitext_parquet: Option<PathBuf>,
    pub cache: PathBuf,
    pub min_seconds: Option<f64>,
    pub vision_records: Option<usize>,
    pub token_records: Option<usize>,
}

pub const TABLES: &[&str] = &[
    "dense-vision",
    "ragged-vision",
    "dense-tokens",
    "ragged-tokens",
    "sampler",
    "loader",
];

const USAGE: &str = "usage:
  harness [run] [--quick] [--repeats N] [--only TABLE[,..]] [--out DIR]
                [--pets DIR] [--text DIR | --wikitext-parquet DIR] [--cache DIR]
                [--min-seconds S] [--vision-records N] [--token-records N]
  harness prepare [--download] [--pets DIR] [--text DIR] [--cache DIR] [--quick]
  harness gate BASELINE.json CURRENT.json
  harness render RESULTS_DIR        (re-render tables.md and plots/ from RESULTS_DIR/results.json)
tables: dense-vision, ragged-vision, dense-tokens, ragged-tokens, sampler, loader";

pub fn default_cache() -> PathBuf {
    std::env::var_os("LOADERX_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cache"))
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
}

fn parse_run(args: &[String]) -> Result<(RunArgs, bool), String> {
    let mut a = RunArgs {
        quick: false,
        repeats: 3,
        only: None,
        out: None,
        pets: None,
        text: None,
        wikitext_parquet: None,
        cache: default_cache(),
        min_seconds: None,
        vision_records: None,
        token_records: None,
    };
    let mut repeats_set = false;
    let mut download = false;
    let mut i = 0;
    while i < args.len() {
        let f = args[i].as_str();
        match f {
            "--quick" => a.quick = true,
            "--download" => download = true,
            "--repeats" => {
                a.repeats = value(args, &mut i, f)?
                    .parse()
                    .map_err(|_| "--repeats takes a positive integer".to_string())?;
                if a.repeats == 0 {
                    return Err("--repeats must be at least 1".into());
                }
                repeats_set = true;
            }
            "--only" => {
                let list: Vec<String> = value(args, &mut i, f)?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect();
                for t in &list {
                    if !TABLES.contains(&t.as_str()) {
                        return Err(format!("unknown table {t:?}\n{USAGE}"));
                    }
                }
                a.only = Some(list);
            }
            "--out" => a.out = Some(value(args, &mut i, f)?.into()),
            "--pets" => a.pets = Some(value(args, &mut i, f)?.into()),
            "--text" => a.text = Some(value(args, &mut i, f)?.into()),
            "--wikitext-parquet" => a.wikitext_parquet = Some(value(args, &mut i, f)?.into()),
            "--cache" => a.cache = value(args, &mut i, f)?.into(),
            "--min-seconds" => {
                a.min_seconds = Some(
                    value(args, &mut i, f)?
                        .parse()
                        .map_err(|_| "--min-seconds takes a number".to_string())?,
                )
            }
            "--vision-records" => {
                a.vision_records = Some(
                    value(args, &mut i, f)?
                        .parse()
                        .map_err(|_| "--vision-records takes an integer".to_string())?,
                )
            }
            "--token-records" => {
                a.token_records = Some(
                    value(args, &mut i, f)?
                        .parse()
                        .map_err(|_| "--token-records takes an integer".to_string())?,
                )
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
        i += 1;
    }
    if a.quick && !repeats_set {
        a.repeats = 1;
    }
    Ok((a, download))
}

pub fn dispatch(args: &[String]) -> Result<ExitCode, String> {
    match args.first().map(String::as_str) {
        Some("cell") => store_cell::main(&args[1..]),
        Some("sampler-cell") => sampler_table::cell_main(&args[1..]),
        Some("loader-cell") => loader_table::cell_main(&args[1..]),
        Some("render") => {
            let dir: PathBuf = args.get(1).ok_or_else(|| USAGE.to_string())?.into();
            crate::report::rerender(&dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("gate") => {
            if args.len() != 3 {
                return Err(USAGE.to_string());
            }
            gate::main(&args[1].clone().into(), &args[2].clone().into())
        }
        Some("prepare") => {
            let (a, download) = parse_run(&args[1..])?;
            corpus::prepare_command(&a, download)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("run") => {
            let (a, _) = parse_run(&args[1..])?;
            run::main(a)
        }
        _ => {
            let (a, _) = parse_run(args)?;
            run::main(a)
        }
    }
}
