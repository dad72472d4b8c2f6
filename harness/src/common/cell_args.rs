//! The command lines of the hidden subcommands as types: a store cell ([`StoreCellArgs`]), a cold
//! cell ([`ColdCellArgs`]), a sampler cell ([`SamplerCellArgs`]), a loader cell
//! ([`LoaderCellArgs`]) and the two probes ([`GapProbeArgs`], [`WriteProbeArgs`]); and the
//! gate's ([`GateArgs`]), the one positional public subcommand.
//!
//! Each is parsed from its positional words by one function ([`Subcommand::parse`]) that names
//! the argument it rejects, and rendered back to them by [`Subcommand::to_args`]; the code that
//! spawns a cell builds the struct and renders it, so what a cell parses is what its parent meant
//! (`parse(render(x)) == x`, tested below). A leaf module apart from [`Table`] and the error type.

use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{HarnessError, Result};
use crate::table::Table;

/// A subcommand whose arguments are positional words.
pub trait Subcommand: Sized {
    /// The subcommand's name (the first word of its command line).
    const NAME: &'static str;
    /// Its arguments, in order (optional ones in brackets).
    const USAGE: &'static str;

    /// Parses the words after [`Subcommand::NAME`].
    fn parse(args: &[String]) -> Result<Self>;

    /// The words after [`Subcommand::NAME`] that [`Subcommand::parse`] reads back as `self`.
    fn to_args(&self) -> Vec<String>;

    /// The whole command line after the executable: the name, then [`Subcommand::to_args`].
    fn argv(&self) -> Vec<String> {
        let mut v = vec![Self::NAME.to_string()];
        v.extend(self.to_args());
        v
    }
}

/// Reads positional words one by one, naming each as it is read.
struct Words<'a> {
    command: &'static str,
    usage: &'static str,
    args: &'a [String],
    next: usize,
}

impl<'a> Words<'a> {
    /// The words of `C`, which must number between `required` and `args.len()` of `C`'s usage.
    fn of<C: Subcommand>(args: &'a [String], required: usize, optional: usize) -> Result<Self> {
        if args.len() < required || args.len() > required + optional {
            return Err(HarnessError::ArgumentCount {
                command: C::NAME,
                usage: C::USAGE,
                found: args.len(),
            });
        }
        Ok(Words {
            command: C::NAME,
            usage: C::USAGE,
            args,
            next: 0,
        })
    }

    fn word(&mut self) -> Result<&'a str> {
        let w = self
            .args
            .get(self.next)
            .ok_or(HarnessError::ArgumentCount {
                command: self.command,
                usage: self.usage,
                found: self.args.len(),
            })?;
        self.next += 1;
        Ok(w)
    }

    fn string(&mut self) -> Result<String> {
        self.word().map(str::to_string)
    }

    fn path(&mut self) -> Result<PathBuf> {
        self.word().map(PathBuf::from)
    }

    /// The next word as a `T`; `name` and `expected` go into the error.
    fn parsed<T: FromStr>(&mut self, name: &'static str, expected: &'static str) -> Result<T> {
        let w = self.word()?;
        w.parse().map_err(|_| HarnessError::Argument {
            command: self.command,
            name,
            value: w.to_string(),
            expected,
        })
    }

    fn table(&mut self) -> Result<Table> {
        let w = self.word()?;
        Table::from_name(w).ok_or_else(|| HarnessError::UnknownTable { name: w.into() })
    }

    /// The next word as a comma-separated list.
    fn list(&mut self) -> Result<Vec<String>> {
        Ok(self.word()?.split(',').map(str::to_string).collect())
    }

    fn has_more(&self) -> bool {
        self.next < self.args.len()
    }
}

/// A path as one command-line word.
fn word(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// A store cell's command line (`cell`): one backend of one store table.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreCellArgs {
    pub table: Table,
    pub backend: String,
    /// The prepared corpus.
    pub corpus: PathBuf,
    /// Where the cell writes its stores.
    pub work: PathBuf,
    /// The cell's result file.
    pub out: PathBuf,
    /// Seconds of timed gathers, at least.
    pub min_seconds: f64,
    /// Batches verified before timing.
    pub verify_batches: u64,
    pub seed: u64,
    /// When set, one probe batch first: a backend slower than this many seconds per batch is
    /// excluded from the table.
    pub probe_seconds: Option<f64>,
}

impl Subcommand for StoreCellArgs {
    const NAME: &'static str = "cell";
    const USAGE: &'static str =
        "TABLE BACKEND CORPUS WORK OUT MIN_SECONDS VERIFY_BATCHES SEED [PROBE_SECONDS]";

    fn parse(args: &[String]) -> Result<StoreCellArgs> {
        let mut w = Words::of::<Self>(args, 8, 1)?;
        Ok(StoreCellArgs {
            table: w.table()?,
            backend: w.string()?,
            corpus: w.path()?,
            work: w.path()?,
            out: w.path()?,
            min_seconds: w.parsed("MIN_SECONDS", "a number")?,
            verify_batches: w.parsed("VERIFY_BATCHES", "an integer")?,
            seed: w.parsed("SEED", "an integer")?,
            probe_seconds: if w.has_more() {
                Some(w.parsed("PROBE_SECONDS", "a number")?)
            } else {
                None
            },
        })
    }

    fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            self.table.name().to_string(),
            self.backend.clone(),
            word(&self.corpus),
            word(&self.work),
            word(&self.out),
            self.min_seconds.to_string(),
            self.verify_batches.to_string(),
            self.seed.to_string(),
        ];
        v.extend(self.probe_seconds.map(|p| p.to_string()));
        v
    }
}

/// A cold cell's command line (`cold-cell`): one row of one cold table.
#[derive(Clone, Debug, PartialEq)]
pub struct ColdCellArgs {
    /// The warm store table whose cold variant this is.
    pub table: Table,
    /// A backend, a cold loader row or the device limit row.
    pub backend: String,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub out: PathBuf,
    /// Timed cold batches.
    pub batches: u64,
    pub seed: u64,
}

impl Subcommand for ColdCellArgs {
    const NAME: &'static str = "cold-cell";
    const USAGE: &'static str = "TABLE BACKEND CORPUS WORK OUT BATCHES SEED";

    fn parse(args: &[String]) -> Result<ColdCellArgs> {
        let mut w = Words::of::<Self>(args, 7, 0)?;
        Ok(ColdCellArgs {
            table: w.table()?,
            backend: w.string()?,
            corpus: w.path()?,
            work: w.path()?,
            out: w.path()?,
            batches: w.parsed("BATCHES", "an integer")?,
            seed: w.parsed("SEED", "an integer")?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![
            self.table.name().to_string(),
            self.backend.clone(),
            word(&self.corpus),
            word(&self.work),
            word(&self.out),
            self.batches.to_string(),
            self.seed.to_string(),
        ]
    }
}

/// A sampler cell's command line (`sampler-cell`): one Rust sampler arm at one batch size.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerCellArgs {
    pub arm: String,
    pub batch: usize,
    /// Seconds of timed draws, at least.
    pub seconds: f64,
    /// The cell's result file.
    pub out: PathBuf,
}

impl Subcommand for SamplerCellArgs {
    const NAME: &'static str = "sampler-cell";
    const USAGE: &'static str = "ARM BATCH SECONDS OUT";

    fn parse(args: &[String]) -> Result<SamplerCellArgs> {
        let mut w = Words::of::<Self>(args, 4, 0)?;
        Ok(SamplerCellArgs {
            arm: w.string()?,
            batch: w.parsed("BATCH", "an integer")?,
            seconds: w.parsed("SECONDS", "a number")?,
            out: w.path()?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![
            self.arm.clone(),
            self.batch.to_string(),
            self.seconds.to_string(),
            word(&self.out),
        ]
    }
}

/// A loader cell's command line (`loader-cell`): one Rust loader arm over a zrecord store; it
/// prints its result as one JSON line.
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderCellArgs {
    /// The store table whose records the store holds (its layout says dense or ragged).
    pub kind: Table,
    /// The zrecord store.
    pub store: PathBuf,
    /// The corpus directory the store was written from: every delivered batch is compared with
    /// the batch its source arrays give.
    pub corpus: PathBuf,
    pub arm: String,
    /// Timed batches.
    pub batches: usize,
}

impl Subcommand for LoaderCellArgs {
    const NAME: &'static str = "loader-cell";
    const USAGE: &'static str = "KIND STORE CORPUS ARM BATCHES";

    fn parse(args: &[String]) -> Result<LoaderCellArgs> {
        let mut w = Words::of::<Self>(args, 5, 0)?;
        let kind = w.table()?;
        if kind.layout().is_none() {
            return Err(HarnessError::Argument {
                command: Self::NAME,
                name: "KIND",
                value: kind.name().to_string(),
                expected: "a table with records",
            });
        }
        Ok(LoaderCellArgs {
            kind,
            store: w.path()?,
            corpus: w.path()?,
            arm: w.string()?,
            batches: w.parsed("BATCHES", "an integer")?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![
            self.kind.name().to_string(),
            word(&self.store),
            word(&self.corpus),
            self.arm.clone(),
            self.batches.to_string(),
        ]
    }
}

/// The gather probe's command line (`gap-probe`): interleaved timed gathers of several arms.
#[derive(Clone, Debug, PartialEq)]
pub struct GapProbeArgs {
    pub table: Table,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub rounds: usize,
    /// Batches per arm per round.
    pub batches: usize,
    pub arms: Vec<String>,
}

impl Subcommand for GapProbeArgs {
    const NAME: &'static str = "gap-probe";
    const USAGE: &'static str = "TABLE CORPUS WORK ROUNDS BATCHES ARM[,ARM...]";

    fn parse(args: &[String]) -> Result<GapProbeArgs> {
        let mut w = Words::of::<Self>(args, 6, 0)?;
        Ok(GapProbeArgs {
            table: w.table()?,
            corpus: w.path()?,
            work: w.path()?,
            rounds: w.parsed("ROUNDS", "an integer")?,
            batches: w.parsed("BATCHES", "an integer")?,
            arms: w.list()?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![
            self.table.name().to_string(),
            word(&self.corpus),
            word(&self.work),
            self.rounds.to_string(),
            self.batches.to_string(),
            self.arms.join(","),
        ]
    }
}

/// The write probe's command line (`write-probe`): interleaved timed writes of several arms.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteProbeArgs {
    pub table: Table,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub rounds: usize,
    pub arms: Vec<String>,
}

impl Subcommand for WriteProbeArgs {
    const NAME: &'static str = "write-probe";
    const USAGE: &'static str =
        "TABLE CORPUS WORK ROUNDS ARM[,ARM...] (ARM: a store backend, or write-limit)";

    fn parse(args: &[String]) -> Result<WriteProbeArgs> {
        let mut w = Words::of::<Self>(args, 5, 0)?;
        Ok(WriteProbeArgs {
            table: w.table()?,
            corpus: w.path()?,
            work: w.path()?,
            rounds: w.parsed("ROUNDS", "an integer")?,
            arms: w.list()?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![
            self.table.name().to_string(),
            word(&self.corpus),
            word(&self.work),
            self.rounds.to_string(),
            self.arms.join(","),
        ]
    }
}

/// The regression gate's command line (`gate`): the baseline, a `results.json`, where to write
/// the tables a rerun should confirm, and whether the run holds only some tables (a confirmation
/// run).
#[derive(Clone, Debug, PartialEq)]
pub struct GateArgs {
    pub baseline: PathBuf,
    pub current: PathBuf,
    /// `--retry-file FILE`: the tables whose speed violations a rerun should confirm.
    pub retry_file: Option<PathBuf>,
    /// `--partial`: a baseline table the run does not hold is not checked.
    pub partial: bool,
    /// `--first RUN.json` (a confirmation): the run that asked for it; a speed violation is final
    /// only where that run put the same figure below its floor too (`gate::confirm`).
    pub first: Option<PathBuf>,
    /// `--last`: no further confirmation follows; a figure judged once is not failed.
    pub last: bool,
}

impl Subcommand for GateArgs {
    const NAME: &'static str = "gate";
    const USAGE: &'static str =
        "BASELINE.json CURRENT.json [--retry-file FILE] [--partial] [--first RUN.json] [--last]";

    fn parse(args: &[String]) -> Result<GateArgs> {
        let mut w = Words::of::<Self>(args, 2, 6)?;
        let (baseline, current) = (w.path()?, w.path()?);
        let (mut retry_file, mut partial, mut first, mut last) = (None, false, None, false);
        while w.has_more() {
            match w.word()? {
                "--retry-file" => retry_file = Some(w.path()?),
                "--partial" => partial = true,
                "--first" => first = Some(w.path()?),
                "--last" => last = true,
                flag => {
                    return Err(HarnessError::Argument {
                        command: Self::NAME,
                        name: "option",
                        value: flag.to_string(),
                        expected: "--retry-file, --partial, --first or --last",
                    });
                }
            }
        }
        Ok(GateArgs {
            baseline,
            current,
            retry_file,
            partial,
            first,
            last,
        })
    }

    fn to_args(&self) -> Vec<String> {
        let mut v = vec![word(&self.baseline), word(&self.current)];
        if let Some(f) = &self.retry_file {
            v.push("--retry-file".into());
            v.push(word(f));
        }
        if self.partial {
            v.push("--partial".into());
        }
        if let Some(f) = &self.first {
            v.push("--first".into());
            v.push(word(f));
        }
        if self.last {
            v.push("--last".into());
        }
        v
    }
}

/// `baseline OUT RUN... [--spread RUN...]`: the gate's baseline from quick runs of one commit;
/// `--spread` runs (other commits or machines of the same kind) widen each figure's spread only.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineArgs {
    pub out: PathBuf,
    pub runs: Vec<PathBuf>,
    pub spread: Vec<PathBuf>,
}

impl Subcommand for BaselineArgs {
    const NAME: &'static str = "baseline";
    const USAGE: &'static str = "OUT.json RUN1/results.json RUN2/results.json RUN3/results.json [...] [--spread RUN/results.json ...]";

    fn parse(args: &[String]) -> Result<BaselineArgs> {
        let mut w = Words::of::<Self>(args, 4, 128)?;
        let out = w.path()?;
        let (mut runs, mut spread, mut in_spread) = (Vec::new(), Vec::new(), false);
        while w.has_more() {
            let p = w.path()?;
            if p.as_os_str() == "--spread" {
                in_spread = true;
            } else if in_spread {
                spread.push(p);
            } else {
                runs.push(p);
            }
        }
        Ok(BaselineArgs { out, runs, spread })
    }

    fn to_args(&self) -> Vec<String> {
        let mut v: Vec<String> = std::iter::once(word(&self.out))
            .chain(self.runs.iter().map(|p| word(p)))
            .collect();
        if !self.spread.is_empty() {
            v.push("--spread".into());
            v.extend(self.spread.iter().map(|p| word(p)));
        }
        v
    }
}

/// `gate-bite BASELINE RUN`: the gate's measured bite on a run.
#[derive(Clone, Debug, PartialEq)]
pub struct GateBiteArgs {
    pub baseline: PathBuf,
    pub run: PathBuf,
}

impl Subcommand for GateBiteArgs {
    const NAME: &'static str = "gate-bite";
    const USAGE: &'static str = "BASELINE.json RUN/results.json";

    fn parse(args: &[String]) -> Result<GateBiteArgs> {
        let mut w = Words::of::<Self>(args, 2, 0)?;
        Ok(GateBiteArgs {
            baseline: w.path()?,
            run: w.path()?,
        })
    }

    fn to_args(&self) -> Vec<String> {
        vec![word(&self.baseline), word(&self.run)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `parse(render(x)) == x`, and the rendered line starts with the subcommand's name.
    fn round_trip<C: Subcommand + PartialEq + std::fmt::Debug>(x: C) {
        let argv = x.argv();
        assert_eq!(argv[0], C::NAME);
        let back = C::parse(&argv[1..]).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert_eq!(back, x, "{argv:?}");
    }

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn every_command_line_parses_back_to_what_rendered_it() {
        let store = StoreCellArgs {
            table: Table::RaggedVision,
            backend: "hdf5-gzip".into(),
            corpus: "/c/vision real".into(),
            work: "/w".into(),
            out: "/w/cell-ragged-vision-hdf5-gzip-2.json".into(),
            min_seconds: 0.1 + 0.2,
            verify_batches: 100,
            seed: 2003,
            probe_seconds: Some(1.0),
        };
        round_trip(store.clone());
        round_trip(StoreCellArgs {
            probe_seconds: None,
            min_seconds: 2.0,
            ..store
        });
        round_trip(ColdCellArgs {
            table: Table::DenseTokens,
            backend: "cold-limit".into(),
            corpus: "/c/t".into(),
            work: "/w".into(),
            out: "/w/o.json".into(),
            batches: 20,
            seed: 7,
        });
        round_trip(SamplerCellArgs {
            arm: "smallrng-uniform".into(),
            batch: 8192,
            seconds: 0.1,
            out: "/w/s.json".into(),
        });
        round_trip(LoaderCellArgs {
            kind: Table::RaggedTokens,
            store: "/w/loader-ragged-tokens-c.zr".into(),
            corpus: "/c".into(),
            arm: "loaderx-w4".into(),
            batches: 1250,
        });
        round_trip(GapProbeArgs {
            table: Table::DenseVision,
            corpus: "/c".into(),
            work: "/w".into(),
            rounds: 5,
            batches: 20,
            arms: vec!["zrecord-raw".into(), "npy-4k".into()],
        });
        round_trip(GateArgs {
            baseline: "results/gate".into(),
            current: "/tmp/r/results.json".into(),
            retry_file: Some("/tmp/retry".into()),
            partial: true,
            first: Some("/tmp/first/results.json".into()),
            last: true,
        });
        round_trip(BaselineArgs {
            out: "results/gate/amd-epyc-2cpu.json".into(),
            runs: vec![
                "a/results.json".into(),
                "b/results.json".into(),
                "c/results.json".into(),
            ],
            spread: vec!["d/results.json".into()],
        });
        round_trip(GateBiteArgs {
            baseline: "b.json".into(),
            run: "r/results.json".into(),
        });
        round_trip(GateArgs {
            baseline: "b.json".into(),
            current: "c.json".into(),
            retry_file: None,
            partial: false,
            first: None,
            last: false,
        });
        round_trip(WriteProbeArgs {
            table: Table::DenseTokens,
            corpus: "/c".into(),
            work: "/w".into(),
            rounds: 3,
            arms: vec!["write-limit".into()],
        });
    }

    #[test]
    fn a_bad_word_is_named_in_the_error() {
        let e = StoreCellArgs::parse(&words("dense-vision zrecord-raw /c /w /o x 100 7"))
            .expect_err("MIN_SECONDS is no number");
        assert!(
            matches!(
                &e,
                HarnessError::Argument { command: "cell", name: "MIN_SECONDS", value, .. }
                    if value == "x"
            ),
            "{e}"
        );
        let e = ColdCellArgs::parse(&words("dense-vision zrecord-raw /c /w /o 20"))
            .expect_err("one word short");
        assert!(
            matches!(
                e,
                HarnessError::ArgumentCount {
                    command: "cold-cell",
                    found: 6,
                    ..
                }
            ),
            "{e}"
        );
        let e = ColdCellArgs::parse(&words("cold-dense-vision b /c /w /o 20 7"))
            .expect_err("no such table");
        assert!(matches!(e, HarnessError::UnknownTable { .. }), "{e}");
        let e =
            LoaderCellArgs::parse(&words("sampler /s /c loaderx-w4 10")).expect_err("no records");
        assert!(
            matches!(e, HarnessError::Argument { name: "KIND", .. }),
            "{e}"
        );
        let e = GateArgs::parse(&words("b.json c.json --retry-file"))
            .expect_err("no value for the option");
        assert!(
            matches!(
                e,
                HarnessError::ArgumentCount {
                    command: "gate",
                    found: 3,
                    ..
                }
            ),
            "{e}"
        );
        let e = GateArgs::parse(&words("b.json c.json --retry f")).expect_err("no such option");
        assert!(
            matches!(e, HarnessError::Argument { name: "option", .. }),
            "{e}"
        );
        let e = StoreCellArgs::parse(&words("dense-vision b /c /w /o 1 2 3 4 5"))
            .expect_err("one word too many");
        assert!(
            matches!(e, HarnessError::ArgumentCount { found: 10, .. }),
            "{e}"
        );
    }
}
