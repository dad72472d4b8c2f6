//! Command-line dispatch: `run`, `prepare` and `remote` read a [`RunArgs`] through the harness's
//! one flag parser (`cell_args::flags`, which `render` and `gate` use too), the hidden cells their
//! `field=value` words. The top of the module graph: only `main` imports it.

use std::process::ExitCode;

use crate::cell_args::{
    Cell, ColdCellArgs, LoaderCellArgs, SamplerCellArgs, StoreCellArgs, Syntax, WriteProbeArgs,
    flags,
};
use crate::config::RunArgs;
use crate::error::{HarnessError, Result};
use crate::store::{self, sampler, write_probe};
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
tables: dense-vision, ragged-vision, dense-tokens, ragged-tokens, sampler, loader, packing, scale, fleet,
        convert
        (both loader tables; or loader-dense-vision, loader-ragged-tokens)";

/// `run`, `prepare` and `remote`'s options (`--quick` alone times one repeat).
fn parse_run(args: &[String]) -> Result<RunArgs> {
    const SYNTAX: Syntax = Syntax {
        positional: &[],
        switches: &["quick", "cold", "cold-only", "all-plots", "download"],
        numbers: &["repeats", "min-seconds", "vision-records", "token-records"],
        usage: USAGE,
    };
    let mut a: RunArgs = flags(args, &SYNTAX)?;
    if a.repeats == 0 {
        return Err(HarnessError::Argument {
            command: "harness",
            name: "--repeats",
            value: "0".into(),
            expected: "a positive integer",
        });
    }
    a.cold |= a.cold_only;
    if a.quick && !args.iter().any(|w| w == "--repeats") {
        a.repeats = 1;
    }
    Ok(a)
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
            let a = parse_run(&args[1..])?;
            corpus::prepare_command(&a)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("run") => run::main(parse_run(&args[1..])?),
        Some("remote") => {
            let a = parse_run(&args[1..])?;
            #[cfg(feature = "remote")]
            return crate::remote_table::main(a);
            #[cfg(not(feature = "remote"))]
            {
                let _ = a;
                Err(HarnessError::Usage {
                    problem: Some("`harness remote` needs the `remote` feature: cargo run --release -p harness --features remote -- remote".into()),
                    usage: USAGE,
                })
            }
        }
        _ => run::main(parse_run(args)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell_args::words as args;
    use crate::table::Table;

    #[test]
    fn only_selects_tables_by_their_cli_names() {
        let a = parse_run(&args("--quick --only dense-vision,loader")).expect("parses");
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
        let all = parse_run(&[]).expect("parses");
        assert!(Table::ALL.into_iter().all(|t| all.selected(t)));
        assert_eq!(all.repeats, 3);
        // One loader table by its own name.
        let one = parse_run(&args("--only loader-ragged-tokens")).expect("parses");
        assert_eq!(one.only, Some(vec![Table::LoaderRaggedTokens]));
        // A switch implies what it must, a path that reads as a number stays a path.
        let c = parse_run(&args("--cold-only --out 7 --repeats 2 --quick")).expect("parses");
        assert!(c.cold && c.cold_only && c.quick);
        assert_eq!((c.out, c.repeats), (Some("7".into()), 2));
        for bad in ["--repeats 0", "--quick --quick", "--only", "stray", "-x"] {
            assert!(parse_run(&args(bad)).is_err(), "{bad}");
        }
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
