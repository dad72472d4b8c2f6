//! Command-line parsing and dispatch (hand-written: a handful of flags does not need a parser
//! crate). The top of the module graph: it turns arguments into a [`RunArgs`] and calls the
//! subcommand's module; only `main` imports it.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::RunArgs;
use crate::table::Table;
use crate::{
    cold_table, corpus, gap_probe, gate, loader_table, report, run, sampler_table, store_cell,
    write_probe,
};

const USAGE: &str = "usage:
  harness [run] [--quick] [--repeats N] [--only TABLE[,..]] [--out DIR]
                [--pets DIR] [--text DIR | --wikitext-parquet DIR] [--cache DIR]
                [--min-seconds S] [--vision-records N] [--token-records N]
                [--cold | --cold-only]   (cold-<store table>: page cache dropped per batch; root)
  harness prepare [--download] [--pets DIR] [--text DIR] [--cache DIR] [--quick]
  harness gate BASELINE.json CURRENT.json [--retry-file FILE]
                (FILE: the tables whose speed violations a rerun should confirm)
  harness render RESULTS_DIR        (re-render tables.md and plots/ from RESULTS_DIR/results.json)
tables: dense-vision, ragged-vision, dense-tokens, ragged-tokens, sampler, loader
        (both loader tables; or loader-dense-vision, loader-ragged-tokens)";

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
}

fn parse_run(args: &[String]) -> Result<(RunArgs, bool), String> {
    let mut a = RunArgs::default();
    let mut repeats_set = false;
    let mut download = false;
    let mut i = 0;
    while i < args.len() {
        let f = args[i].as_str();
        match f {
            "--quick" => a.quick = true,
            "--cold" => a.cold = true,
            "--cold-only" => (a.cold, a.cold_only) = (true, true),
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
                let mut only = Vec::new();
                for word in value(args, &mut i, f)?.split(',').map(str::trim) {
                    let tables = Table::ALL
                        .into_iter()
                        .filter(|t| t.selector() == word || t.name() == word);
                    let before = only.len();
                    only.extend(tables);
                    if only.len() == before {
                        return Err(format!("unknown table {word:?}\n{USAGE}"));
                    }
                }
                a.only = Some(only);
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
        Some("gap-probe") => gap_probe::main(&args[1..]),
        Some("write-probe") => write_probe::main(&args[1..]),
        Some("cold-cell") => cold_table::cell_main(&args[1..]),
        Some("sampler-cell") => sampler_table::cell_main(&args[1..]),
        Some("loader-cell") => loader_table::cell_main(&args[1..]),
        Some("render") => {
            let dir: PathBuf = args.get(1).ok_or_else(|| USAGE.to_string())?.into();
            report::rerender(&dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("gate") => {
            let retry: Option<PathBuf> = match args.len() {
                3 => None,
                5 if args[3] == "--retry-file" => Some(args[4].clone().into()),
                _ => return Err(USAGE.to_string()),
            };
            gate::main(
                &args[1].clone().into(),
                &args[2].clone().into(),
                retry.as_ref(),
            )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn only_selects_tables_by_their_cli_names() {
        let (a, _) = parse_run(&args("--quick --only dense-vision,loader")).expect("parses");
        assert_eq!(a.repeats, 1);
        assert_eq!(
            a.only,
            Some(vec![
                Table::DenseVision,
                Table::LoaderDenseVision,
                Table::LoaderRaggedTokens
            ])
        );
        assert!(a.selected(Table::LoaderRaggedTokens) && !a.selected(Table::Sampler));
        let (all, _) = parse_run(&[]).expect("parses");
        assert!(Table::ALL.into_iter().all(|t| all.selected(t)));
        assert_eq!(all.repeats, 3);
        // One loader table by its own name (the CI gate's confirmation run reruns one table).
        let (one, _) = parse_run(&args("--only loader-ragged-tokens")).expect("parses");
        assert_eq!(one.only, Some(vec![Table::LoaderRaggedTokens]));
        for bad in ["loader-dense", "vision", "sampler,bogus"] {
            let e = parse_run(&args(&format!("--only {bad}"))).expect_err(bad);
            assert!(e.starts_with("unknown table"), "{e}");
        }
    }
}
