//! The command lines of the hidden subcommands as types: a store cell ([`StoreCellArgs`]), a cold
//! cell ([`ColdCellArgs`]), a sampler cell ([`SamplerCellArgs`]), a loader cell
//! ([`LoaderCellArgs`]) and the write probe ([`WriteProbeArgs`]).
//!
//! A cell's arguments are declared once, as a serde-derived struct: its command line is its
//! name, then one `field=value` word a field ([`Cell::argv`] renders it from the struct, e.g.
//! `cell table=dense-vision backend=zrecord-raw ... seed=7`), and [`Cell::parse`] reads it back
//! through the same derive, so what a cell parses is what its parent meant
//! (`parse(argv(x)) == x`, tested below). A value is JSON where it reads as JSON (numbers,
//! lists), else the word itself (names, paths). The user-facing command lines (`run`, `render`,
//! `gate`) are serde-derived structs too, read by [`flags`] from `--flag value` words.

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
    pub corpus: PathBuf,
    /// Where the cell writes its stores.
    pub work: PathBuf,
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
    pub store: PathBuf,
    /// The corpus directory the store was written from: every delivered batch is compared with
    /// the batch its source arrays give.
    pub corpus: PathBuf,
    pub arm: String,
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

/// The words of a user-facing command line: the fields `positional` words fill in order, the
/// flags that take no value (`switches`) and those whose value is a number (`numbers`).
pub struct Syntax {
    pub positional: &'static [&'static str],
    pub switches: &'static [&'static str],
    pub numbers: &'static [&'static str],
    pub usage: &'static str,
}

/// Reads a user-facing command line into `T`, the one parser of `harness run`, `prepare`,
/// `remote`, `render` and `gate`: `--some-flag VALUE` sets field `some_flag` (a number where the
/// flag is one of `numbers`, else the word), a switch sets its field to `true`, and the other
/// words fill the positional fields in order. Unknown, repeated or missing flags and values are
/// usage errors naming the word.
pub fn flags<T: DeserializeOwned>(args: &[String], syntax: &Syntax) -> Result<T> {
    let usage = syntax.usage;
    let bad = |problem: String| HarnessError::Usage {
        problem: Some(problem),
        usage,
    };
    let mut fields = Map::new();
    let mut places = syntax.positional.iter();
    let mut words = args.iter();
    while let Some(w) = words.next() {
        let (name, value) = match w.strip_prefix("--") {
            _ if w == "-h" || w == "--help" => {
                return Err(HarnessError::Usage {
                    problem: None,
                    usage,
                });
            }
            Some(f) if syntax.switches.contains(&f) => (f.replace('-', "_"), Value::Bool(true)),
            Some(f) => {
                let v = words
                    .next()
                    .ok_or_else(|| bad(format!("{w} needs a value")))?;
                let number = serde_json::from_str::<serde_json::Number>(v).ok();
                let v = match number.filter(|_| syntax.numbers.contains(&f)) {
                    Some(n) => Value::Number(n),
                    None => Value::String(v.clone()),
                };
                (f.replace('-', "_"), v)
            }
            None if w.starts_with('-') => return Err(bad(format!("unknown flag {w:?}"))),
            None => match places.next() {
                Some(p) => (p.to_string(), Value::String(w.clone())),
                None => return Err(bad(format!("unknown argument {w:?}"))),
            },
        };
        if fields.insert(name, value).is_some() {
            return Err(bad(format!("{w} given twice")));
        }
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| bad(e.to_string()))
}

/// A command line's words from one string, for the tests of every parser.
#[cfg(test)]
pub fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
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
            store: "/w/loader-ragged-tokens-c/store.zr".into(),
            corpus: "/c".into(),
            arm: "loaderx-w4".into(),
            batches: 1250,
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
}
