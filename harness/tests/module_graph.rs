//! Module graph of a crate's `src/`: which module refers to which, and whether that is acyclic.
//!
//! A small Rust reader (std only, no parser crate): it strips comments and strings, follows
//! inline `mod x { .. }` blocks, expands `use` trees (`{..}` groups, `self`, `as`), and resolves
//! `crate::`, `self::`, `super::` and child-module paths to the module that defines the item,
//! following re-exports (`pub use error::Error;` at the root makes `crate::Error` point at
//! `error`, not at the root). Serde-style attribute strings such as
//! `"crate::stats::f64_or_nan"` count as references. Nodes are files (`a/b.rs` and `a/b/mod.rs`
//! are `a::b`, `lib.rs`/`main.rs` is `crate`); an inline module belongs to its file. References
//! made inside `#[cfg(test)] mod .. { }`, or in a file declared `#[cfg(test)] mod ..;`, are test
//! edges: printed, not part of the cycle check.
//!
//! The checker is generic; [`CRATES`] lists the workspace's source folders, and for each of them
//! the tests here also check the layout rules: no source file over [`MAX_LINES`] lines (test
//! files excepted) and `//!` docs opening every file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crate source folders (from the workspace root). Each must have an acyclic
/// module graph, no source file over [`MAX_LINES`] lines (test files excepted) and `//!` docs
/// opening every file.
const CRATES: &[&str] = &[
    "zrecord/src",
    "loaderx/src",
    "loaderx/py/src",
    "harness/src",
    "datasets/src",
    "competitors/src",
];

/// The longest a non-test source file may be.
const MAX_LINES: usize = 700;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(&'static str),
    Other,
}

fn punct(c: char) -> &'static str {
    match c {
        '{' => "{",
        '}' => "}",
        '(' => "(",
        ')' => ")",
        '[' => "[",
        ']' => "]",
        ',' => ",",
        ';' => ";",
        '*' => "*",
        '#' => "#",
        '.' => ".",
        '$' => "$",
        ':' => ":",
        '!' => "!",
        _ => "?",
    }
}

/// Reads a string literal body starting after its opening quote; returns (text, index after).
fn string_at(s: &[char], mut i: usize, hashes: Option<usize>) -> (String, usize) {
    let mut out = String::new();
    while i < s.len() {
        match (s[i], hashes) {
            ('\\', None) => i += 2,
            ('"', None) => return (out, i + 1),
            ('"', Some(h)) if s[i + 1..].iter().take(h).filter(|&&c| c == '#').count() == h => {
                return (out, i + 1 + h);
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, i)
}

/// Tokens of Rust source, without comments; string literals kept as [`Tok::Str`].
fn tokens(src: &str) -> Vec<Tok> {
    let s: Vec<char> = src.chars().collect();
    let mut t = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied().unwrap_or('\0');
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == '*' {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            let (text, end) = string_at(&s, i + 1, None);
            t.push(Tok::Str(text));
            i = end;
        } else if c == '\'' {
            if next == '\\' {
                i += 3; // the quote, the backslash and the escaped character
                while i < s.len() && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1; // a lifetime: its name follows as an identifier
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let at = s.get(i).copied().unwrap_or('\0');
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at == '"' || at == '#') {
                let h = s[i..].iter().take_while(|&&c| c == '#').count();
                if s.get(i + h) == Some(&'"') {
                    let (text, end) = string_at(&s, i + h + 1, Some(h));
                    t.push(Tok::Str(text));
                    i = end;
                    continue;
                }
                if word == "r" && h == 1 {
                    continue; // a raw identifier `r#name`: the name follows
                }
            }
            if matches!(word.as_str(), "b" | "c") && at == '"' {
                let (text, end) = string_at(&s, i + 1, None);
                t.push(Tok::Str(text));
                i = end;
                continue;
            }
            if word.starts_with(|c: char| c.is_ascii_digit()) {
                t.push(Tok::Other);
            } else {
                t.push(Tok::Ident(word));
            }
        } else if c == ':' && next == ':' {
            t.push(Tok::Punct("::"));
            i += 2;
        } else {
            let p = punct(c);
            t.push(if p == "?" { Tok::Other } else { Tok::Punct(p) });
            i += 1;
        }
    }
    t
}

fn is_ident(t: Option<&Tok>, word: &str) -> bool {
    matches!(t, Some(Tok::Ident(w)) if w == word)
}

fn is_punct(t: Option<&Tok>, p: &str) -> bool {
    matches!(t, Some(Tok::Punct(q)) if *q == p)
}

/// One `use` leaf: its path and the name it binds (`None` for a glob).
struct UseItem {
    path: Vec<String>,
    name: Option<String>,
}

/// Parses a use tree at `toks[*i]` under `prefix`.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<UseItem>) {
    let mut path = prefix.to_vec();
    while let Some(tok) = toks.get(*i) {
        match tok {
            Tok::Ident(seg) => {
                path.push(seg.clone());
                *i += 1;
                if is_punct(toks.get(*i), "::") {
                    *i += 1;
                    continue;
                }
                let mut name = path.last().cloned();
                if is_ident(toks.get(*i), "as") {
                    if let Some(Tok::Ident(alias)) = toks.get(*i + 1) {
                        name = Some(alias.clone());
                    }
                    *i += 2;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                    if name.as_deref() == Some("self") {
                        name = path.last().cloned();
                    }
                }
                out.push(UseItem { path, name });
                return;
            }
            Tok::Punct("{") => {
                *i += 1;
                while *i < toks.len() && !is_punct(toks.get(*i), "}") {
                    let before = *i;
                    use_tree(toks, i, &path, out);
                    if is_punct(toks.get(*i), ",") || *i == before {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Tok::Punct("*") => {
                *i += 1;
                out.push(UseItem { path, name: None });
                return;
            }
            Tok::Punct("::") => {
                // `use ::name`: an extern crate.
                *i += 1;
                path.push("::".into());
            }
            _ => return,
        }
    }
}

/// Whether the tokens before `toks[at]` (a `mod`) carry `#[cfg(test)]`.
fn cfg_test_before(toks: &[Tok], mut at: usize) -> bool {
    // Step back over a visibility (`pub`, `pub(crate)`, ..).
    if at > 0 && is_punct(toks.get(at - 1), ")") {
        while at > 0 && !is_punct(toks.get(at - 1), "(") {
            at -= 1;
        }
        at = at.saturating_sub(1);
    }
    if at > 0 && is_ident(toks.get(at - 1), "pub") {
        at -= 1;
    }
    while at > 0 && is_punct(toks.get(at - 1), "]") {
        let close = at - 1;
        let mut open = close;
        while open > 0 && !is_punct(toks.get(open), "[") {
            open -= 1;
        }
        let body = &toks[open + 1..close];
        let cfg_test = [
            Tok::Ident("cfg".into()),
            Tok::Punct("("),
            Tok::Ident("test".into()),
            Tok::Punct(")"),
        ];
        if body == cfg_test {
            return true;
        }
        at = open.saturating_sub(1);
    }
    false
}

/// What one file says: inline modules, `use` items and other paths, each with the module it is
/// written in and whether that is test code.
#[derive(Default)]
struct FileFacts {
    inline: Vec<Vec<String>>,
    /// Child modules in their own files declared `#[cfg(test)] mod name;`.
    test_files: Vec<Vec<String>>,
    uses: Vec<(Vec<String>, bool, UseItem)>,
    paths: Vec<(Vec<String>, bool, Vec<String>)>,
}

fn facts(module: &[String], src: &str) -> FileFacts {
    let toks = tokens(src);
    let mut f = FileFacts::default();
    // (name, brace depth inside its block, test)
    let mut stack: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let cur: Vec<String> = module
            .iter()
            .cloned()
            .chain(stack.iter().map(|s| s.0.clone()))
            .collect();
        let test = stack.iter().any(|s| s.2);
        let prev = if i > 0 { toks.get(i - 1) } else { None };
        match &toks[i] {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => {
                if stack.last().is_some_and(|s| s.1 == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(Tok::Ident(name)), true) =
                    (toks.get(i + 1), is_punct(toks.get(i + 2), "{"))
                {
                    let t = test || cfg_test_before(&toks, i);
                    depth += 1;
                    stack.push((name.clone(), depth, t));
                    let mut p = cur.clone();
                    p.push(name.clone());
                    f.inline.push(p);
                    i += 3;
                    continue;
                }
                if let (Some(Tok::Ident(name)), true) =
                    (toks.get(i + 1), is_punct(toks.get(i + 2), ";"))
                    && (test || cfg_test_before(&toks, i))
                {
                    let mut p = cur.clone();
                    p.push(name.clone());
                    f.test_files.push(p);
                }
            }
            Tok::Ident(w) if w == "use" && !is_punct(prev, "::") => {
                let mut items = Vec::new();
                i += 1;
                use_tree(&toks, &mut i, &[], &mut items);
                while i < toks.len() && !is_punct(toks.get(i), ";") {
                    i += 1;
                }
                f.uses
                    .extend(items.into_iter().map(|u| (cur.clone(), test, u)));
            }
            Tok::Ident(first)
                if is_punct(toks.get(i + 1), "::")
                    && !is_punct(prev, "::")
                    && !is_punct(prev, ".")
                    && !is_punct(prev, "$") =>
            {
                let mut segs = vec![first.clone()];
                let mut k = i + 1;
                while is_punct(toks.get(k), "::") {
                    match toks.get(k + 1) {
                        Some(Tok::Ident(s)) => segs.push(s.clone()),
                        _ => break,
                    }
                    k += 2;
                }
                // `pub(in crate::a)` names a scope, not a dependency.
                let scope = is_ident(prev, "in") && i >= 2 && is_punct(toks.get(i - 2), "(");
                if !scope {
                    f.paths.push((cur.clone(), test, segs));
                }
                i = k;
                continue;
            }
            Tok::Str(s) => {
                let segs: Vec<String> = s.split("::").map(str::to_string).collect();
                let word = |w: &String| {
                    !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_')
                };
                if segs.len() > 1
                    && matches!(segs[0].as_str(), "crate" | "self" | "super")
                    && segs.iter().all(word)
                {
                    f.paths.push((cur.clone(), test, segs));
                }
            }
            _ => {}
        }
        i += 1;
    }
    f
}

/// A crate's module graph over files.
#[derive(Debug, Default)]
struct Graph {
    nodes: BTreeSet<String>,
    edges: BTreeSet<(String, String)>,
    test_edges: BTreeSet<(String, String)>,
}

fn node_name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The module path of `rel` (a path under `src/`), or `None` for files of other targets.
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && matches!(stem, "lib" | "main") {
        return Some(Vec::new());
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

struct Resolver {
    /// Every module (file or inline) and the file node it lives in.
    modules: BTreeMap<Vec<String>, String>,
    /// Per module: name -> (module it was imported in, path as written).
    imports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Resolver {
    /// The module that defines what `segs`, written in module `cur`, names; `None` for paths
    /// outside the crate.
    fn resolve(&self, cur: &[String], segs: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let mut abs: Vec<String> = match segs[0].as_str() {
            "crate" => segs[1..].to_vec(),
            "self" => cur.iter().chain(&segs[1..]).cloned().collect(),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let keep = cur.len().checked_sub(ups)?;
                cur[..keep].iter().chain(&segs[ups..]).cloned().collect()
            }
            first => {
                let mut child = cur.to_vec();
                child.push(first.to_string());
                if self.modules.contains_key(&child) {
                    cur.iter().chain(segs).cloned().collect()
                } else if let Some(p) = self.imports.get(cur).and_then(|m| m.get(first)) {
                    let via: Vec<String> = p.iter().chain(&segs[1..]).cloned().collect();
                    return self.resolve(cur, &via, depth + 1);
                } else {
                    return None;
                }
            }
        };
        let mut prefix = abs.len();
        while !self.modules.contains_key(&abs[..prefix]) {
            prefix = prefix.checked_sub(1)?;
        }
        let rest = abs.split_off(prefix);
        if let Some(first) = rest.first()
            && let Some(p) = self.imports.get(&abs).and_then(|m| m.get(first))
        {
            let via: Vec<String> = p.iter().chain(&rest[1..]).cloned().collect();
            if let Some(m) = self.resolve(&abs, &via, depth + 1) {
                return Some(m);
            }
        }
        Some(abs)
    }
}

/// The module graph of the files `(path under src/, source)`.
fn graph(files: &[(PathBuf, String)]) -> Graph {
    let mut modules = BTreeMap::new();
    let mut all = Vec::new();
    for (rel, src) in files {
        let Some(m) = module_of(rel) else { continue };
        let node = node_name(&m);
        let f = facts(&m, src);
        modules.insert(m.clone(), node.clone());
        for inline in &f.inline {
            modules.insert(inline.clone(), node.clone());
        }
        all.push((m, node, f));
    }
    let mut imports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let test_files: Vec<&Vec<String>> = all.iter().flat_map(|a| &a.2.test_files).collect();
    for (_, _, f) in &all {
        for (cur, _, u) in &f.uses {
            if let Some(name) = &u.name {
                imports
                    .entry(cur.clone())
                    .or_default()
                    .insert(name.clone(), u.path.clone());
            }
        }
    }
    let r = Resolver { modules, imports };
    let mut g = Graph {
        nodes: r.modules.values().cloned().collect(),
        ..Graph::default()
    };
    for (module, node, f) in &all {
        let test_file = test_files.iter().any(|t| module.starts_with(t));
        let refs = f
            .uses
            .iter()
            .map(|(cur, test, u)| (cur, *test || test_file, &u.path))
            .chain(
                f.paths
                    .iter()
                    .map(|(cur, test, p)| (cur, *test || test_file, p)),
            );
        for (cur, test, path) in refs {
            let Some(target) = r.resolve(cur, path, 0) else {
                continue;
            };
            let to = r.modules[&target].clone();
            if &to != node {
                let e = (node.clone(), to);
                if test {
                    g.test_edges.insert(e);
                } else {
                    g.edges.insert(e);
                }
            }
        }
    }
    g.test_edges.retain(|e| !g.edges.contains(e));
    g
}

fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let src = std::fs::read_to_string(&p).unwrap_or_default();
            let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
            out.push((rel, src));
        }
    }
}

/// The module graph of the crate source folder `src`.
fn graph_of_dir(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, src, &mut files);
    graph(&files)
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        adj: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.adj.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(w, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        adj: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for (a, b) in &g.edges {
        s.adj.entry(a.as_str()).or_default().push(b.as_str());
    }
    for v in &g.nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(v.as_str(), &mut s);
        }
    }
    s.out.sort();
    s.out
}

fn describe(name: &str, g: &Graph) -> String {
    let mut s = format!(
        "module graph of {name}: {} modules, {} edges (+{} test-only)\n",
        g.nodes.len(),
        g.edges.len(),
        g.test_edges.len()
    );
    for n in &g.nodes {
        let to: Vec<&str> = g
            .edges
            .iter()
            .filter(|e| &e.0 == n)
            .map(|e| e.1.as_str())
            .collect();
        let test: Vec<&str> = g
            .test_edges
            .iter()
            .filter(|e| &e.0 == n)
            .map(|e| e.1.as_str())
            .collect();
        s.push_str(&format!("  {n} -> [{}]", to.join(", ")));
        if !test.is_empty() {
            s.push_str(&format!(" (tests: {})", test.join(", ")));
        }
        s.push('\n');
    }
    for c in cycles(g) {
        s.push_str(&format!("  CYCLE among: {}\n", c.join(", ")));
    }
    s
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_crate_has_an_acyclic_module_graph() {
    for dir in CRATES {
        let g = graph_of_dir(&workspace().join(dir));
        println!("{}", describe(dir, &g));
        assert!(g.nodes.len() > 1, "{dir}: no modules found");
        let c = cycles(&g);
        assert!(c.is_empty(), "{dir} has module cycles: {c:?}");
    }
}

/// A file that is test code: `tests.rs` or anything under a `tests/` folder of `src`.
fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn every_source_file_is_small_and_says_what_it_owns() {
    let mut bad = Vec::new();
    for dir in CRATES {
        let root = workspace().join(dir);
        let mut files = Vec::new();
        rust_files(&root, &root, &mut files);
        assert!(!files.is_empty(), "{dir}: no source files");
        for (rel, src) in files {
            let name = format!("{dir}/{}", rel.display());
            let lines = src.lines().count();
            if lines > MAX_LINES && !is_test_file(&rel) {
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
    use super::*;

    fn g(files: &[(&str, &str)]) -> Graph {
        let files: Vec<(PathBuf, String)> = files
            .iter()
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect();
        graph(&files)
    }

    fn edges(g: &Graph) -> Vec<String> {
        g.edges.iter().map(|(a, b)| format!("{a}->{b}")).collect()
    }

    #[test]
    fn finds_a_cycle_through_use_groups_and_plain_paths() {
        let graph = g(&[
            ("main.rs", "mod a; mod b; mod c; fn main() { a::run(); }"),
            (
                "a.rs",
                "use crate::{b::{self, B}, c::C as Cee};\npub fn run() {}",
            ),
            ("b.rs", "pub struct B; fn f() { crate::c::g(); }"),
            (
                "c.rs",
                "pub struct C; pub fn g() { let _ = crate::a::run; }",
            ),
        ]);
        assert_eq!(edges(&graph), ["a->b", "a->c", "b->c", "c->a", "crate->a"]);
        assert_eq!(cycles(&graph), [vec!["a", "b", "c"]]);
    }

    #[test]
    fn comments_strings_and_test_modules_are_not_edges() {
        let graph = g(&[
            (
                "lib.rs",
                "//! see [`crate::b`]\nmod a; mod b;\n#[cfg(test)]\nmod tests;",
            ),
            ("tests.rs", "use crate::a::f; use crate::b::S;"),
            (
                "a.rs",
                "/* crate::b::x */ const S: &str = \"crate::b::x is text\"; fn f<'a>(x: &'a str) -> char { 'b' }\n#[cfg(test)]\nmod tests { use super::*; use crate::b::helper; }",
            ),
            (
                "b.rs",
                "#[serde(with = \"crate::a::codec\")] struct S; pub fn helper() {}",
            ),
        ]);
        assert_eq!(edges(&graph), ["b->a"]);
        let test_edges: Vec<String> = graph
            .test_edges
            .iter()
            .map(|(a, b)| format!("{a}->{b}"))
            .collect();
        assert_eq!(test_edges, ["a->b", "tests->a", "tests->b"]);
        assert!(cycles(&graph).is_empty());
    }

    #[test]
    fn follows_reexports_and_folder_modules() {
        let graph = g(&[
            (
                "lib.rs",
                "mod error; pub mod read; pub use error::Error; pub use read::Store;",
            ),
            ("error.rs", "pub enum Error {}"),
            ("read/mod.rs", "mod open; pub use open::Store;"),
            (
                "read/open.rs",
                "use crate::Error; use super::super::error; pub struct Store;",
            ),
        ]);
        assert_eq!(
            edges(&graph),
            [
                "crate->error",
                "crate->read::open",
                "read->read::open",
                "read::open->error"
            ]
        );
        assert!(cycles(&graph).is_empty());
    }
}
