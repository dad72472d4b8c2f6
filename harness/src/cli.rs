//! Command-line parsing and dispatch (hand-written: a handful of flags does not need a parser
//! crate). The top of the module graph: it turns arguments into a [`RunArgs`] and calls the
//! subcommand's module; only `main` imports it.

use std::process::ExitCode;

use crate::cell_args::{
    Cell, ColdCellArgs, LoaderCellArgs, SamplerCellArgs, StoreCellArgs, WriteProbeArgs,
};
use crate::config::RunArgs;
use crate::error::{HarnessError, Result};
use crate::store::{self, sampler, write_probe};
use crate::table::Table;
use crate::{cold, corpus, gate, loader, report, run};

const USAGE: &str = "usage:
  harness [run] [--quick] [--repeats N] [--only TABLE[,..]] [--out DIR]
                [--pets DIR] [--text DIR | --wikitext-parquet DIR] [--cache DIR]
                [--min-seconds S] [--vision-records N] [--token-records N]
                [--cold | --cold-only]   (cold-<store table>: page cache dropped per batch; root)
                [--all-plots]   (every plot, PNG + SVG; default: the headline plots, PNG)
  harness prepare [--download] [--pets DIR] [--text DIR] [--cache DIR] [--quick]
  harness gate BASELINE_HARNESS CANDIDATE_HARNESS [--pairs N] [--out DIR] [--seed S]
                [--pets DIR] [--text DIR] [--cache DIR] [--vision-corpus DIR] [--token-corpus DIR]
                (the regression gate: interleaved A/B pairs of two builds' loader-table cells,
                 decided on the paired ratios; scripts/ci-gate.sh, results/gate/README.md)
  harness remote [--quick] [--repeats N] [--only TABLE[,..]] [--out DIR] [--pets DIR] [--text DIR] [--cache DIR]
                (feature `remote`: remote-dense-vision and remote-ragged-tokens against a
                 SeaweedFS server on loopback: GET limit, no cache, cache cold, cached, local)
  harness render RUN [--out DIR] [--headline] [--check]
                (tables.md and every plot from RUN/results.json, cold.md from RUN/cold.json;
                 --check: compare with RUN's committed tables, write nothing)
tables: dense-vision, ragged-vision, dense-tokens, ragged-tokens, sampler, loader, packing, scale
        (both loader tables; or loader-dense-vision, loader-ragged-tokens)";

/// A usage error: `problem`, then the usage text.
fn usage(problem: impl Into<String>) -> HarnessError {
    HarnessError::Usage {
        problem: Some(problem.into()),
        usage: USAGE,
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| usage(format!("{flag} needs a value")))
}

/// The value of flag `flag`, parsed as `T` (`expected` says what it must be).
fn parsed<T: std::str::FromStr>(
    args: &[String],
    i: &mut usize,
    flag: &'static str,
    expected: &'static str,
) -> Result<T> {
    let v = value(args, i, flag)?;
    v.parse().map_err(|_| HarnessError::Argument {
        command: "harness",
        name: flag,
        value: v.to_string(),
        expected,
    })
}

fn parse_run(args: &[String]) -> Result<(RunArgs, bool)> {
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
            "--all-plots" => a.all_plots = true,
            "--download" => download = true,
            "--repeats" => {
                a.repeats = parsed(args, &mut i, "--repeats", "a positive integer")?;
                if a.repeats == 0 {
                    return Err(HarnessError::Argument {
                        command: "harness",
                        name: "--repeats",
                        value: "0".into(),
                        expected: "a positive integer",
                    });
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
                        return Err(usage(
                            HarnessError::UnknownTable { name: word.into() }.to_string(),
                        ));
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
                a.min_seconds = Some(parsed(args, &mut i, "--min-seconds", "a number")?)
            }
            "--vision-records" => {
                a.vision_records = Some(parsed(args, &mut i, "--vision-records", "an integer")?)
            }
            "--token-records" => {
                a.token_records = Some(parsed(args, &mut i, "--token-records", "an integer")?)
            }
            "-h" | "--help" => {
                return Err(HarnessError::Usage {
                    problem: None,
                    usage: USAGE,
                });
            }
            other => return Err(usage(format!("unknown argument {other:?}"))),
        }
        i += 1;
    }
    if a.quick && !repeats_set {
        a.repeats = 1;
    }
    Ok((a, download))
}

pub fn dispatch(args: &[String]) -> Result<ExitCode> {
    match args.first().map(String::as_str) {
        Some(StoreCellArgs::NAME) => store::main(&StoreCellArgs::parse(&args[1..])?),
        Some(WriteProbeArgs::NAME) => write_probe::main(&WriteProbeArgs::parse(&args[1..])?),
        Some(ColdCellArgs::NAME) => cold::cell_main(&ColdCellArgs::parse(&args[1..])?),
        Some(SamplerCellArgs::NAME) => sampler::cell_main(&SamplerCellArgs::parse(&args[1..])?),
        Some(LoaderCellArgs::NAME) => loader::cell::cell_main(&LoaderCellArgs::parse(&args[1..])?),
        Some("render") => report::render::main(
            &report::render::RenderArgs::parse(&args[1..])?,
            cold::cold_md,
        ),
        Some("gate") => gate::main(&args[1..]),
        Some("prepare") => {
            let (a, download) = parse_run(&args[1..])?;
            corpus::prepare_command(&a, download)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("run") => {
            let (a, _) = parse_run(&args[1..])?;
            run::main(a)
        }
        Some("remote") => {
            let (a, _) = parse_run(&args[1..])?;
            #[cfg(feature = "remote")]
            return crate::remote_table::main(a);
            #[cfg(not(feature = "remote"))]
            {
                let _ = a;
                Err(usage(
                    "`harness remote` needs the `remote` feature: cargo run --release -p harness --features remote -- remote",
                ))
            }
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
    use crate::cell_args::words as args;

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
        // One loader table by its own name.
        let (one, _) = parse_run(&args("--only loader-ragged-tokens")).expect("parses");
        assert_eq!(one.only, Some(vec![Table::LoaderRaggedTokens]));
        assert!(
            parse_run(&args("--gated")).is_err(),
            "the flag went with the old gate"
        );
        for bad in ["loader-dense", "vision", "sampler,bogus"] {
            let e = parse_run(&args(&format!("--only {bad}"))).expect_err(bad);
            assert!(e.to_string().starts_with("unknown table"), "{e}");
        }
    }
}
