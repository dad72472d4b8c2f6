//! The command lines of the hidden subcommands as types: a store cell ([`StoreCellArgs`]), a cold
//! cell ([`ColdCellArgs`]), a sampler cell ([`SamplerCellArgs`]), a loader cell
//! ([`LoaderCellArgs`]) and the two probes ([`GapProbeArgs`], [`WriteProbeArgs`]); and the
//! gate's public ones ([`GateArgs`], [`BaselineArgs`], [`GateBiteArgs`]), which are only parsed.
//!
//! A cell's arguments are declared once, as a serde-derived struct: its command line is its
//! name, then one `field=value` word a field ([`Cell::argv`] renders it from the struct, e.g.
//! `cell table=dense-vision backend=zrecord-raw ... seed=7`), and [`Cell::parse`] reads it back
//! through the same derive, so what a cell parses is what its parent meant
//! (`parse(argv(x)) == x`, tested below). A value is JSON where it reads as JSON (numbers,
//! lists), else the word itself (names, paths). A leaf module apart from [`Table`] and the error
//! type.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{HarnessError, Result};
use crate::table::Table;

/// A hidden subcommand whose arguments are the fields of one serde-derived struct.
pub trait Cell: Serialize + DeserializeOwned {
    /// The subcommand's name (the first word of its command line).
    const NAME: &'static str;

    /// What the fields' types cannot say (`Ok` unless a cell overrides it).
    fn check(&self) -> Result<()> {
        Ok(())
    }

    /// Parses the `field=value` words after [`Cell::NAME`].
    fn parse(args: &[String]) -> Result<Self> {
        let bad = |problem: String| HarnessError::CellArgs {
            command: Self::NAME,
            problem,
        };
        let mut fields = Map::new();
        for arg in args {
            let (name, word) = arg
                .split_once('=')
                .ok_or_else(|| bad(format!("{arg:?} is not FIELD=VALUE")))?;
            let value = serde_json::from_str(word).unwrap_or_else(|_| Value::String(word.into()));
            if fields.insert(name.to_string(), value).is_some() {
                return Err(bad(format!("{name} given twice")));
            }
        }
        let parsed: Self =
            serde_json::from_value(Value::Object(fields)).map_err(|e| bad(e.to_string()))?;
        parsed.check()?;
        Ok(parsed)
    }

    /// The whole command line after the executable: the name, then a `field=value` word for
    /// every field that is set, which [`Cell::parse`] reads back as `self`.
    fn argv(&self) -> Vec<String> {
        let fields = match serde_json::to_value(self) {
            Ok(Value::Object(fields)) => fields,
            other => unreachable!("a cell's arguments are a struct: {other:?}"),
        };
        let words = fields.into_iter().filter(|(_, v)| !v.is_null());
        std::iter::once(Self::NAME.to_string())
            .chain(words.map(|(name, v)| format!("{name}={}", word(v))))
            .collect()
    }
}

/// A value as the word [`Cell::parse`] reads back: a string that would read as JSON (`"12"`,
/// `"true"`) is written quoted, any other string as itself, everything else as JSON.
fn word(v: Value) -> String {
    match v {
        Value::String(s) if serde_json::from_str::<Value>(&s).is_err() => s,
        other => other.to_string(),
    }
}

/// A store cell's command line (`cell`): one backend of one store table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    #[serde(default)]
    pub probe_seconds: Option<f64>,
}

impl Cell for StoreCellArgs {
    const NAME: &'static str = "cell";
}

/// A cold cell's command line (`cold-cell`): one row of one cold table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

impl Cell for ColdCellArgs {
    const NAME: &'static str = "cold-cell";
}

/// A sampler cell's command line (`sampler-cell`): one Rust sampler arm at one batch size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerCellArgs {
    pub arm: String,
    pub batch: usize,
    /// Seconds of timed draws, at least.
    pub seconds: f64,
    /// The cell's result file.
    pub out: PathBuf,
}

impl Cell for SamplerCellArgs {
    const NAME: &'static str = "sampler-cell";
}

/// A loader cell's command line (`loader-cell`): one Rust loader arm over a zrecord store; it
/// prints its result as one JSON line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

impl Cell for LoaderCellArgs {
    const NAME: &'static str = "loader-cell";

    fn check(&self) -> Result<()> {
        match self.kind.layout() {
            Some(_) => Ok(()),
            None => Err(HarnessError::Argument {
                command: Self::NAME,
                name: "kind",
                value: self.kind.name().to_string(),
                expected: "a table with records",
            }),
        }
    }
}

/// The gather probe's command line (`gap-probe`): interleaved timed gathers of several arms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GapProbeArgs {
    pub table: Table,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub rounds: usize,
    /// Batches per arm per round.
    pub batches: usize,
    pub arms: Vec<String>,
}

impl Cell for GapProbeArgs {
    const NAME: &'static str = "gap-probe";
}

/// The write probe's command line (`write-probe`): interleaved timed writes of several arms (a
/// store backend, or `write-limit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteProbeArgs {
    pub table: Table,
    pub corpus: PathBuf,
    pub work: PathBuf,
    pub rounds: usize,
    pub arms: Vec<String>,
}

impl Cell for WriteProbeArgs {
    const NAME: &'static str = "write-probe";
}

/// The words of a public positional subcommand: `required` of them at least, `most` at most.
fn count(
    command: &'static str,
    usage: &'static str,
    args: &[String],
    required: usize,
    most: usize,
) -> Result<()> {
    if (required..=most).contains(&args.len()) {
        Ok(())
    } else {
        Err(HarnessError::ArgumentCount {
            command,
            usage,
            found: args.len(),
        })
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

impl GateArgs {
    pub const NAME: &'static str = "gate";
    const USAGE: &'static str =
        "BASELINE.json CURRENT.json [--retry-file FILE] [--partial] [--first RUN.json] [--last]";

    pub fn parse(args: &[String]) -> Result<GateArgs> {
        count(Self::NAME, Self::USAGE, args, 2, 8)?;
        let mut g = GateArgs {
            baseline: args[0].clone().into(),
            current: args[1].clone().into(),
            retry_file: None,
            partial: false,
            first: None,
            last: false,
        };
        let mut rest = args[2..].iter();
        while let Some(flag) = rest.next() {
            let mut path = || -> Result<Option<PathBuf>> {
                let v = rest.next().ok_or(HarnessError::ArgumentCount {
                    command: Self::NAME,
                    usage: Self::USAGE,
                    found: args.len(),
                })?;
                Ok(Some(v.into()))
            };
            match flag.as_str() {
                "--retry-file" => g.retry_file = path()?,
                "--partial" => g.partial = true,
                "--first" => g.first = path()?,
                "--last" => g.last = true,
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
        Ok(g)
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

impl BaselineArgs {
    pub const NAME: &'static str = "baseline";
    const USAGE: &'static str = "OUT.json RUN1/results.json RUN2/results.json RUN3/results.json [...] [--spread RUN/results.json ...]";

    pub fn parse(args: &[String]) -> Result<BaselineArgs> {
        count(Self::NAME, Self::USAGE, args, 4, 132)?;
        let split = (args.iter())
            .position(|a| a == "--spread")
            .unwrap_or(args.len());
        let paths = |s: &[String]| {
            s.iter()
                .filter(|a| *a != "--spread")
                .map(PathBuf::from)
                .collect()
        };
        Ok(BaselineArgs {
            out: args[0].clone().into(),
            runs: paths(&args[1..split]),
            spread: paths(&args[split..]),
        })
    }
}

/// `gate-bite BASELINE RUN`: the gate's measured bite on a run.
#[derive(Clone, Debug, PartialEq)]
pub struct GateBiteArgs {
    pub baseline: PathBuf,
    pub run: PathBuf,
}

impl GateBiteArgs {
    pub const NAME: &'static str = "gate-bite";

    pub fn parse(args: &[String]) -> Result<GateBiteArgs> {
        count(Self::NAME, "BASELINE.json RUN/results.json", args, 2, 2)?;
        Ok(GateBiteArgs {
            baseline: args[0].clone().into(),
            run: args[1].clone().into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `parse(argv(x)) == x`, and the line starts with the subcommand's name.
    fn round_trip<C: Cell + PartialEq + std::fmt::Debug>(x: C) {
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
            work: "/w=x".into(),
            out: "/w/cell-ragged-vision-hdf5-gzip-2.json".into(),
            min_seconds: 0.1 + 0.2,
            verify_batches: 100,
            seed: 2003,
            probe_seconds: Some(1.0),
        };
        round_trip(store.clone());
        let no_probe = StoreCellArgs {
            probe_seconds: None,
            min_seconds: 2.0,
            ..store
        };
        assert!(
            !no_probe
                .argv()
                .iter()
                .any(|w| w.starts_with("probe_seconds"))
        );
        round_trip(no_probe);
        // Names that would read as JSON stay names.
        for backend in ["12", "true", "null", "", "[x]", "\"q\""] {
            round_trip(ColdCellArgs {
                table: Table::DenseTokens,
                backend: backend.into(),
                corpus: "/c/t".into(),
                work: "7".into(),
                out: "/w/o.json".into(),
                batches: 20,
                seed: 7,
            });
        }
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
        round_trip(WriteProbeArgs {
            table: Table::DenseTokens,
            corpus: "/c".into(),
            work: "/w".into(),
            rounds: 3,
            arms: vec!["write-limit".into()],
        });
    }

    #[test]
    fn a_hand_written_line_parses_in_any_order() {
        let a =
            SamplerCellArgs::parse(&words("out=/o.json seconds=2 batch=64 arm=a")).expect("parses");
        assert_eq!((a.arm.as_str(), a.batch, a.seconds), ("a", 64, 2.0));
        assert_eq!(a.out, PathBuf::from("/o.json"));
    }

    #[test]
    fn a_bad_word_is_named_in_the_error() {
        let problem = |e: HarnessError| match e {
            HarnessError::CellArgs { command, problem } => format!("{command}: {problem}"),
            other => panic!("{other}"),
        };
        let line = "table=dense-vision backend=b corpus=/c work=/w out=/o verify_batches=1 seed=7";
        let e = StoreCellArgs::parse(&words(&format!("{line} min_seconds=x")));
        assert!(problem(e.expect_err("no number")).starts_with("cell: invalid type"));
        let e = StoreCellArgs::parse(&words(line)).expect_err("one field short");
        assert!(problem(e).contains("missing field `min_seconds`"));
        let e = StoreCellArgs::parse(&words(&format!("{line} min_seconds=1 sed=2")));
        assert!(problem(e.expect_err("a typo")).contains("unknown field `sed`"));
        let e = StoreCellArgs::parse(&words(&format!("{line} min_seconds=1 seed=2")));
        assert_eq!(problem(e.expect_err("twice")), "cell: seed given twice");
        let e = StoreCellArgs::parse(&words("dense-vision")).expect_err("positional");
        assert!(problem(e).contains("not FIELD=VALUE"));
        let e = ColdCellArgs::parse(&words(
            "table=cold-dense-vision backend=b corpus=/c work=/w out=/o batches=2 seed=7",
        ))
        .expect_err("no such table");
        assert!(problem(e).contains("unknown table"));
        let e = LoaderCellArgs::parse(&words("kind=sampler store=/s corpus=/c arm=a batches=1"))
            .expect_err("no records");
        assert!(
            matches!(e, HarnessError::Argument { name: "kind", .. }),
            "{e}"
        );
    }

    #[test]
    fn the_gate_command_lines_parse() {
        let g = GateArgs::parse(&words("b.json c.json --partial --retry-file r --last"))
            .expect("parses");
        assert_eq!(
            g,
            GateArgs {
                baseline: "b.json".into(),
                current: "c.json".into(),
                retry_file: Some("r".into()),
                partial: true,
                first: None,
                last: true,
            }
        );
        let e = GateArgs::parse(&words("b.json c.json --retry-file")).expect_err("no value");
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
        let b = BaselineArgs::parse(&words("o.json a b c --spread d")).expect("parses");
        assert_eq!((b.runs.len(), b.spread), (3, vec![PathBuf::from("d")]));
        assert!(BaselineArgs::parse(&words("o.json a b")).is_err());
        let bite = GateBiteArgs::parse(&words("b.json r.json")).expect("parses");
        assert_eq!(bite.run, PathBuf::from("r.json"));
    }
}
