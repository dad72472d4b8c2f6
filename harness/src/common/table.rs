//! The benchmark tables as a type: [`Table`] names every table the harness writes and knows its
//! stage (store, sampler, loader), its layout (dense or ragged) and the corpus it reads. The names
//! it serializes to (and the two
//! reference rows' names, [`LIMIT_ROW`] and [`BARE_ROW`]) are the strings `results.json`,
//! `tables.md`, the plot file names and `results/gate/*.json` use, so they must not change.

/// The reference row of every store table and loader table: the same bytes copied with no store
/// format, no checksum and no loader (`competitors`' `memcpy-limit` backend in a store table, the
/// Rust `memcpy-limit` arm in a loader table). A reference: never compared, `verified: null`.
pub const LIMIT_ROW: &str = "memcpy-limit";

/// The loader tables' row of bare `view.gather` calls on the loaders' draws, with no loader: what
/// the Rust loader rows are read against.
pub const BARE_ROW: &str = "bare-gather";

/// What a table measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// One store backend per row: write, verified IID gathers.
    Store,
    /// Index generation.
    Sampler,
    /// End-to-end loaders over one zrecord store.
    Loader,
    /// Sequence packing of a token stream.
    Packing,
    /// Datasets of many tiny records: open, memory, gathers, many writers.
    Scale,
    /// Shuffled reads from object storage by several processes: requests, bytes, mixing.
    Fleet,
    /// Corpus conversion with Ray Data into loaderx and Lance: rows/s, MiB/s, peak RSS.
    Convert,
}

/// Record layout of a table's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Fixed-shape records.
    Dense,
    /// Variable-shape records (values + offsets + shapes).
    Ragged,
}

/// The corpus a table's records come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Corpus {
    /// Images (Oxford-IIIT Pet, or the synthetic stand-in).
    Vision,
    /// Token sequences (WikiText-103, or the synthetic stand-in).
    Tokens,
}

impl Corpus {
    /// The `kind` a corpus has in `results.json`.
    pub fn name(self) -> &'static str {
        match self {
            Corpus::Vision => "vision",
            Corpus::Tokens => "tokens",
        }
    }
}

named! {
    /// Every table the harness writes (`ALL` in the order a run writes them); the names are
    /// those of `results.json`, `tables.md` and the plot files.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Table("table") {
        DenseVision = "dense-vision",
        RaggedVision = "ragged-vision",
        DenseTokens = "dense-tokens",
        RaggedTokens = "ragged-tokens",
        Sampler = "sampler",
        LoaderDenseVision = "loader-dense-vision",
        LoaderRaggedTokens = "loader-ragged-tokens",
        Packing = "packing",
        Scale = "scale",
        Fleet = "fleet",
        Convert = "convert",
    }
}

impl Table {
    /// The store tables, in run order.
    pub const STORE: [Table; 4] = [
        Table::DenseVision,
        Table::RaggedVision,
        Table::DenseTokens,
        Table::RaggedTokens,
    ];

    /// The loader tables, in run order.
    pub const LOADER: [Table; 2] = [Table::LoaderDenseVision, Table::LoaderRaggedTokens];

    /// The word `--only` selects this table by: its name, except that `loader` selects both
    /// loader tables.
    pub fn selector(self) -> &'static str {
        match self.stage() {
            Stage::Loader => "loader",
            _ => self.name(),
        }
    }

    /// What the table measures, and the layout and corpus of its records (`None` for the
    /// sampler, which reads no records, and for packing, which reads the token corpus's
    /// prepared records rather than a store table's).
    fn geometry(self) -> (Stage, Option<(Layout, Corpus)>) {
        let (dense, ragged) = (Layout::Dense, Layout::Ragged);
        let (vision, tokens) = (Corpus::Vision, Corpus::Tokens);
        match self {
            Table::DenseVision => (Stage::Store, Some((dense, vision))),
            Table::RaggedVision => (Stage::Store, Some((ragged, vision))),
            Table::DenseTokens => (Stage::Store, Some((dense, tokens))),
            Table::RaggedTokens => (Stage::Store, Some((ragged, tokens))),
            Table::Sampler => (Stage::Sampler, None),
            Table::LoaderDenseVision => (Stage::Loader, Some((dense, vision))),
            Table::LoaderRaggedTokens => (Stage::Loader, Some((ragged, tokens))),
            // Reads the token corpus's prepared records directly (no store table's layout).
            Table::Packing => (Stage::Packing, None),
            // Writes its own records (ids encoded in their bytes), no corpus.
            Table::Scale => (Stage::Scale, None),
            // Writes its own stores to SeaweedFS (the corpora read directly), no store table's.
            Table::Fleet => (Stage::Fleet, None),
            // Converts the corpora itself (pets decoded, text tokenised), no store table's.
            Table::Convert => (Stage::Convert, None),
        }
    }

    pub fn stage(self) -> Stage {
        self.geometry().0
    }

    /// Dense or ragged records; `None` for the sampler.
    pub fn layout(self) -> Option<Layout> {
        self.geometry().1.map(|(layout, _)| layout)
    }

    /// The corpus the table reads; `None` for the sampler.
    pub fn corpus(self) -> Option<Corpus> {
        self.geometry().1.map(|(_, corpus)| corpus)
    }

    /// The store table whose records a loader table reads (its `kind` on the loader cells'
    /// command lines); a store table is its own source, the sampler has none.
    pub fn source_table(self) -> Option<Table> {
        match self {
            Table::LoaderDenseVision => Some(Table::DenseVision),
            Table::LoaderRaggedTokens => Some(Table::RaggedTokens),
            Table::Sampler | Table::Packing | Table::Scale | Table::Fleet | Table::Convert => None,
            store => Some(store),
        }
    }

    /// The heading line of a store table (empty for the others, which build theirs).
    pub fn title(self) -> &'static str {
        match self {
            Table::DenseVision => {
                "Dense vision: uint8[3,224,224] records (147 KiB), batch 256, IID"
            }
            Table::RaggedVision => {
                "Ragged vision: native-resolution uint8[3,H,W] records, batch 256, IID"
            }
            Table::DenseTokens => "Dense tokens: int32[512] blocks (2 KiB), batch 256, IID",
            Table::RaggedTokens => {
                "Ragged tokens: int32 sequences of 16..512 tokens, batch 256, IID"
            }
            _ => "",
        }
    }
}

/// `Display`, `Serialize` and `Deserialize` of a type by its `name()` and `from_name()` (`what`
/// says what an unknown name was meant to be): [`Table`] here, `model`'s
/// `Status` and `CellTable`.
macro_rules! by_name {
    ($t:ty, $what:literal) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.name())
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<$t, D::Error> {
                let name = <String as serde::Deserialize>::deserialize(d)?;
                <$t>::from_name(&name).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("unknown ", $what, " {:?}"), name))
                })
            }
        }
    };
}
pub(crate) use by_name;

/// Declares an enum from one list of its values (doc, variant, name): the enum, `ALL` in the
/// list's order, `name`, its inverse `from_name`, and by [`by_name`] `Display` and serde as
/// the name (`$what` says what an unknown name was meant to be).
macro_rules! named {
    (
        $(#[$meta:meta])*
        $vis:vis enum $t:ident($what:literal) {
            $($(#[doc = $doc:literal])* $v:ident = $name:literal,)*
        }
    ) => {
        $(#[$meta])*
        $vis enum $t {
            $($(#[doc = $doc])* $v,)*
        }

        impl $t {
            pub const ALL: [$t; [$($name),*].len()] = [$($t::$v),*];

            /// The name `results.json` and `tables.md` spell it by.
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $name,)*
                }
            }

            /// [`Self::name`]'s inverse.
            pub fn from_name(name: &str) -> Option<$t> {
                $t::ALL.into_iter().find(|x| x.name() == name)
            }
        }

        by_name!($t, $what);
    };
}
pub(crate) use named;

/// A markdown table: the `header` row (its cells joined by ` | `), the rule (a column a letter
/// of `align`: `r` aligned right, `l` left), then `rows`. Each table of `tables.md` and
/// `cold.md` is one.
pub fn md_table(header: &str, align: &str, rows: &[Vec<String>]) -> String {
    let rule: Vec<&str> = align
        .chars()
        .map(|a| if a == 'r' { "---:" } else { "---" })
        .collect();
    let mut s = format!("| {header} |\n|{}|\n", rule.join("|"));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_name_round_trips() {
        let names = [
            "dense-vision",
            "ragged-vision",
            "dense-tokens",
            "ragged-tokens",
            "sampler",
            "loader-dense-vision",
            "loader-ragged-tokens",
            "packing",
            "scale",
            "fleet",
            "convert",
        ];
        assert_eq!(names.len(), Table::ALL.len());
        for name in names {
            let t = Table::from_name(name).unwrap_or_else(|| panic!("{name} is no table"));
            assert_eq!(t.name(), name);
            assert_eq!(t.to_string(), name);
            let json = serde_json::to_string(&t).expect("serialize");
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Table>(&json).expect("parse"), t);
        }
        assert_eq!(Table::from_name("loader"), None);
        assert!(serde_json::from_str::<Table>("\"dense\"").is_err());
    }

    #[test]
    fn geometry_matches_the_names() {
        for t in Table::ALL {
            let n = t.name();
            assert_eq!(t.stage() == Stage::Store, Table::STORE.contains(&t), "{n}");
            assert_eq!(
                t.stage() == Stage::Loader,
                Table::LOADER.contains(&t),
                "{n}"
            );
            for (holds, word) in [
                (t.corpus() == Some(Corpus::Vision), "vision"),
                (t.corpus() == Some(Corpus::Tokens), "tokens"),
                (t.layout() == Some(Layout::Dense), "dense"),
                (t.layout() == Some(Layout::Ragged), "ragged"),
            ] {
                assert_eq!(holds, n.contains(word), "{n}: {word}");
            }
            if let Some(s) = t.source_table() {
                assert_eq!(s.stage(), Stage::Store, "{n}");
                assert!(n.ends_with(s.name()), "{n}");
            }
        }
        let selectors: Vec<&str> = Table::ALL.iter().map(|t| t.selector()).collect();
        assert_eq!(
            selectors,
            [
                "dense-vision",
                "ragged-vision",
                "dense-tokens",
                "ragged-tokens",
                "sampler",
                "loader",
                "loader",
                "packing",
                "scale",
                "fleet",
                "convert"
            ]
        );
    }
}
