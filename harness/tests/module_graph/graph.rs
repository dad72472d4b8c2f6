//! The module graph itself: files as nodes, resolved references as edges (test-only ones apart),
//! the strongly connected components that are cycles, and its printed form.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::facts::facts;

/// A crate's module graph over files.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) nodes: BTreeSet<String>,
    pub(crate) edges: BTreeSet<(String, String)>,
    pub(crate) test_edges: BTreeSet<(String, String)>,
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
pub(crate) fn graph(files: &[(PathBuf, String)]) -> Graph {
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

pub(crate) fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
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
pub(crate) fn graph_of_dir(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, src, &mut files);
    graph(&files)
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
pub(crate) fn cycles(g: &Graph) -> Vec<Vec<String>> {
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
            // The earliest node `w` reaches: its low link once visited from here, its index when
            // it is on the stack (an edge back into the component being built).
            let reach = if !s.index.contains_key(w) {
                visit(w, s);
                s.low[w]
            } else if s.on.contains(w) {
                s.index[w]
            } else {
                continue;
            };
            let lv = s.low.get_mut(v).expect("visited");
            *lv = (*lv).min(reach);
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

pub(crate) fn describe(name: &str, g: &Graph) -> String {
    let mut s = format!(
        "module graph of {name}: {} modules, {} edges (+{} test-only)\n",
        g.nodes.len(),
        g.edges.len(),
        g.test_edges.len()
    );
    // The targets of `n`'s edges among `edges`.
    let from = |edges: &BTreeSet<(String, String)>, n: &String| -> Vec<String> {
        edges
            .iter()
            .filter(|e| &e.0 == n)
            .map(|e| e.1.clone())
            .collect()
    };
    for n in &g.nodes {
        let (to, test) = (from(&g.edges, n), from(&g.test_edges, n));
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
