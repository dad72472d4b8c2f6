//! The source layout's rules, checked on `src/`: every file opens with `//!` docs saying what it
//! owns, no file but a `tests.rs` is over 700 lines, and the modules' imports (`crate::`, `super::`,
//! `self::` paths and `use child::...`) form no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

/// Every `.rs` file under `dir`, with its path relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

fn src() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    sources(&root, &root, &mut out);
    out.sort();
    out
}

/// `loader/pacing.rs` -> `["loader", "pacing"]`; `lib.rs` -> `[]`; `loader/mod.rs` -> `["loader"]`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("lib" | "mod")) {
        parts.pop();
    }
    parts
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// The path segments after `at` in `code`: `a::b::C` -> `["a", "b", "C"]`.
fn segments(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            return out;
        }
        out.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => return out,
        }
    }
}

/// Import edges between modules (a module's own items and unknown targets left out).
fn import_edges() -> BTreeSet<(Vec<String>, Vec<String>)> {
    let files = src();
    let mut modules = BTreeSet::new();
    let mut uses = Vec::new();
    let mut relative = Vec::new();
    for (rel, text) in &files {
        let file_mod = module_of(rel);
        modules.insert(file_mod.clone());
        let mut ctx = file_mod.clone();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let decl = code
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(inline) = decl.strip_prefix("mod ").filter(|d| d.ends_with('{')) {
                ctx = file_mod.clone();
                ctx.push(inline.trim_end_matches('{').trim().to_owned());
                modules.insert(ctx.clone());
                continue;
            }
            if line.starts_with('}') {
                ctx = file_mod.clone();
            }
            let stmt = decl.trim_start();
            let first = stmt
                .strip_prefix("use ")
                .and_then(|path| segments(path).into_iter().next());
            if let Some(first) = first.filter(|f| !["crate", "super", "self"].contains(&f.as_str()))
            {
                let mut child = ctx.clone();
                child.push(first);
                relative.push((ctx.clone(), child));
            }
            for (i, _) in code.match_indices("::") {
                let head_start = code[..i]
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map_or(0, |p| p + 1);
                let head = &code[head_start..i];
                let mut base = match head {
                    "crate" => Vec::new(),
                    "self" => ctx.clone(),
                    "super" if code[..head_start].ends_with("::") => continue,
                    "super" => ctx[..ctx.len().saturating_sub(1)].to_vec(),
                    _ => continue,
                };
                let mut tail = segments(&code[i + 2..]);
                while tail.first().is_some_and(|s| s == "super") {
                    tail.remove(0);
                    base.pop();
                }
                if code[i + 2..].starts_with('{') {
                    // `crate::{a, b::c}`: each first segment of the group.
                    let group = &code[i + 3..code[i..].find('}').map_or(code.len(), |e| i + e)];
                    for item in group.split(',') {
                        let mut t = base.clone();
                        t.extend(segments(item.trim()).into_iter().take(1));
                        uses.push((ctx.clone(), t));
                    }
                } else {
                    base.extend(tail);
                    uses.push((ctx.clone(), base));
                }
            }
        }
    }
    uses.extend(relative.into_iter().filter(|(_, m)| modules.contains(m)));
    let mut edges = BTreeSet::new();
    for (from, mut to) in uses {
        while !to.is_empty() && !modules.contains(&to) {
            to.pop();
        }
        if to != from {
            edges.insert((from, to));
        }
    }
    edges
}

#[test]
fn every_source_file_opens_with_module_docs() {
    for (rel, text) in src() {
        assert!(
            text.starts_with("//!"),
            "src/{rel} does not open with //! docs"
        );
    }
}

#[test]
fn no_source_file_but_a_test_module_is_over_700_lines() {
    for (rel, text) in src() {
        if rel.ends_with("tests.rs") {
            continue;
        }
        let lines = text.lines().count();
        assert!(
            lines <= MAX_LINES,
            "src/{rel} has {lines} lines (at most {MAX_LINES})"
        );
    }
}

#[test]
fn module_imports_form_no_cycle() {
    let edges = import_edges();
    let mut graph: BTreeMap<&[String], Vec<&[String]>> = BTreeMap::new();
    for (from, to) in &edges {
        graph.entry(from).or_default().push(to);
    }
    // The loader's parts import each other only downwards.
    let loader = |m: &str| vec!["loader".to_owned(), m.to_owned()];
    assert!(edges.contains(&(loader("worker"), loader("pacing"))));
    assert!(edges.contains(&(vec!["loader".to_owned()], loader("worker"))));
    // Depth-first search; `on_path` holds the current chain.
    fn visit<'a>(
        m: &'a [String],
        graph: &BTreeMap<&'a [String], Vec<&'a [String]>>,
        on_path: &mut Vec<&'a [String]>,
        done: &mut BTreeSet<&'a [String]>,
    ) {
        if let Some(at) = on_path.iter().position(|p| *p == m) {
            let cycle: Vec<String> = on_path[at..].iter().map(|p| name(p)).collect();
            panic!("import cycle: {} -> {}", cycle.join(" -> "), name(m));
        }
        if !done.insert(m) {
            return;
        }
        on_path.push(m);
        for next in graph.get(m).into_iter().flatten() {
            visit(next, graph, on_path, done);
        }
        on_path.pop();
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
    let list: Vec<String> = edges
        .iter()
        .map(|(a, b)| format!("{} -> {}", name(a), name(b)))
        .collect();
    eprintln!(
        "loaderx module imports ({} edges):\n{}",
        list.len(),
        list.join("\n")
    );
}
