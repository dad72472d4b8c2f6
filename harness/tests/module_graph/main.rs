//! Layout lint over the workspace's crates ([`CRATES`]): acyclic module graphs over files and
//! over folders, no non-test file over [`MAX_LINES`] lines, `//!` docs opening every file. Nodes
//! are files (`a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` is `crate`); an edge is a `use` or a
//! path (in code, macros, serde-style attribute strings) resolved, through re-exports, to the
//! module defining the item. Edges from `#[cfg(test)]` modules and files are printed, not checked.

mod graph;
mod reader;

use std::path::{Path, PathBuf};

use graph::{cycles, describe, describe_folders, folder_levels};
use reader::{graph, rust_files};

/// The workspace's crate source folders (from the workspace root).
const CRATES: &[&str] = &[
    "zrecord/src",
    "loaderx/src",
    "loaderx/py/src",
    "harness/src",
    "datasets/src",
    "competitors/src",
    "benchkit/src",
];

/// The longest a non-test source file (not `tests.rs`, not under a `tests/` folder) may be.
const MAX_LINES: usize = 700;

fn files(dir: &str) -> Vec<(PathBuf, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
    rust_files(&Path::new(root).join(dir))
}

#[test]
fn every_crate_has_an_acyclic_module_graph() {
    for dir in CRATES {
        let g = graph(&files(dir));
        println!("{}", describe(dir, &g));
        assert!(g.nodes.len() > 1, "{dir}: no modules found");
        let c = cycles(&g);
        assert!(c.is_empty(), "{dir} has module cycles: {c:?}");
    }
}

#[test]
fn every_crate_has_an_acyclic_folder_graph() {
    let mut bad = Vec::new();
    for dir in CRATES {
        let levels = folder_levels(&graph(&files(dir)));
        println!("{}", describe_folders(dir, &levels));
        for (parent, g) in &levels {
            for c in cycles(g) {
                bad.push(format!("{dir}, in {parent}: {}", c.join(" <-> ")));
            }
        }
    }
    assert!(bad.is_empty(), "folder cycles:\n{}", bad.join("\n"));
}

#[test]
fn every_source_file_is_small_and_says_what_it_owns() {
    let mut bad = Vec::new();
    for dir in CRATES {
        let files = files(dir);
        assert!(!files.is_empty(), "{dir}: no source files");
        for (rel, src) in files {
            let name = format!("{dir}/{}", rel.display());
            let lines = src.lines().count();
            let test =
                rel.ends_with("tests.rs") || rel.components().any(|c| c.as_os_str() == "tests");
            if lines > MAX_LINES && !test {
                bad.push(format!("{name}: {lines} lines (> {MAX_LINES})"));
            }
            let first = src.lines().map(str::trim).find(|l| !l.is_empty());
            if !first.is_some_and(|l| l.starts_with("//!")) {
                bad.push(format!("{name}: does not open with `//!` module docs"));
            }
        }
    }
    assert!(bad.is_empty(), "layout rules broken:\n{}", bad.join("\n"));
}

#[cfg(test)]
mod checker {
    use super::graph::Graph;
    use super::*;
    use std::collections::BTreeSet;

    /// The graph of files given as `"path: source"`.
    fn g(files: &[&str]) -> Graph {
        let files: Vec<(PathBuf, String)> = (files.iter())
            .map(|f| f.split_once(": ").expect("path: source"))
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect();
        graph(&files)
    }

    /// Edges as `a->b c->d`.
    fn edges(e: &BTreeSet<(String, String)>) -> String {
        let e: Vec<String> = e.iter().map(|(a, b)| format!("{a}->{b}")).collect();
        e.join(" ")
    }

    #[test]
    fn finds_a_cycle_through_use_groups_macros_and_plain_paths() {
        let graph = g(&[
            "main.rs: mod a; mod b; mod c; fn main() { a::run(); }",
            "a.rs: use crate::{b::{self, B}, c::C as Cee};\npub fn run() {}",
            "b.rs: pub struct B; fn f() { drop(vec![0..crate::c::g()]); }",
            "c.rs: pub struct C; pub fn g() { let _ = crate::a::run; }",
        ]);
        assert_eq!(edges(&graph.edges), "a->b a->c b->c c->a crate->a");
        assert_eq!(cycles(&graph), [vec!["a", "b", "c"]]);
    }

    #[test]
    fn comments_strings_and_test_modules_are_not_edges() {
        let graph = g(&[
            "lib.rs: //! see [`crate::b`]\nmod a; mod b;\n#[cfg(test)]\nmod tests;",
            "tests.rs: use crate::a::f; use crate::b::S;",
            "a.rs: /* crate::b::x */ const S: &str = \"crate::b::x is text\"; fn f<'a>(x: &'a str) -> char { 'b' }\n#[cfg(test)]\nmod tests { use super::*; use crate::b::helper; }",
            "b.rs: #[serde(with = \"crate::a::codec\")] struct S; pub fn helper() {}",
        ]);
        assert_eq!(edges(&graph.edges), "b->a");
        assert_eq!(edges(&graph.test_edges), "a->b tests->a tests->b");
        assert!(cycles(&graph).is_empty());
    }

    #[test]
    fn finds_a_folder_cycle_that_no_two_files_form() {
        let graph = g(&[
            "lib.rs: mod a; mod b; mod c;",
            "a/mod.rs: mod x; mod w;",
            "a/x.rs: use crate::b::y::Y;",
            "a/w.rs: pub struct W;",
            "b/mod.rs: mod y; mod z;",
            "b/y.rs: pub struct Y;",
            "b/z.rs: use crate::a::w::W; use crate::c::C;",
            "c.rs: pub struct C;",
        ]);
        assert_eq!(edges(&graph.edges), "a::x->b::y b::z->a::w b::z->c");
        assert!(cycles(&graph).is_empty());
        let levels = folder_levels(&graph);
        let parents: Vec<&str> = levels.iter().map(|l| l.0.as_str()).collect();
        assert_eq!(parents, ["crate", "a", "b"]);
        assert_eq!(edges(&levels[0].1.edges), "a/->b/ b/->a/ b/->c");
        assert_eq!(cycles(&levels[0].1), [["a/", "b/"]]);
        assert!(levels[1..].iter().all(|l| cycles(&l.1).is_empty()));
        let text = describe_folders("t", &levels);
        assert!(text.contains("CYCLE among: a/, b/"), "{text}");
    }

    #[test]
    fn follows_reexports_and_folder_modules() {
        let graph = g(&[
            "lib.rs: mod error; pub mod read; pub use error::Error; pub use read::Store;",
            "error.rs: pub enum Error {}",
            "read/mod.rs: mod open; pub use open::Store;",
            "read/open.rs: use crate::Error; use super::super::error; pub struct Store;",
        ]);
        let want = "crate->error crate->read::open read->read::open read::open->error";
        assert_eq!(edges(&graph.edges), want);
        assert!(cycles(&graph).is_empty());
    }
}
