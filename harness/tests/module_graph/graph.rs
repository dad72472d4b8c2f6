//! The file graph, its cycles and printed form, and the folder graph over it. A folder is a
//! module with children; the level of folder `P` has a node per child (a child folder stands for
//! its whole tree) plus `P`'s own file, and an edge where a file in one refers to a file in
//! another; references leaving `P` belong to a level above.

use std::collections::{BTreeMap, BTreeSet};

/// A crate's module graph over files (or one level of its folder graph).
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) nodes: BTreeSet<String>,
    pub(crate) edges: BTreeSet<(String, String)>,
    pub(crate) test_edges: BTreeSet<(String, String)>,
}

/// The strongly connected components with more than one node, each sorted.
pub(crate) fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let reach: BTreeMap<&String, BTreeSet<&String>> = (g.nodes.iter())
        .map(|n| {
            let (mut seen, mut todo) = (BTreeSet::new(), vec![n]);
            while let Some(a) = todo.pop() {
                let next = g.edges.iter().filter(|e| &e.0 == a).map(|e| &e.1);
                todo.extend(next.filter(|b| seen.insert(*b)));
            }
            (n, seen)
        })
        .collect();
    let mut out: Vec<Vec<String>> = (g.nodes.iter())
        .map(|n| {
            let both = |m: &&String| reach[n].contains(m) && reach[m].contains(n);
            g.nodes.iter().filter(both).cloned().collect()
        })
        .filter(|c: &Vec<String>| c.len() > 1)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The targets of `node`'s edges among `edges` that `keep` allows, as `a, b`.
fn targets(edges: &BTreeSet<(String, String)>, node: &str, keep: impl Fn(&str) -> bool) -> String {
    let to: Vec<&str> = (edges.iter())
        .filter(|e| e.0 == node && keep(&e.1))
        .map(|e| e.1.as_str())
        .collect();
    to.join(", ")
}

pub(crate) fn describe(name: &str, g: &Graph) -> String {
    let (n, e, t) = (g.nodes.len(), g.edges.len(), g.test_edges.len());
    let mut s = format!("module graph of {name}: {n} modules, {e} edges (+{t} test-only)\n");
    for n in &g.nodes {
        let to = targets(&g.edges, n, |_| true);
        let test = Some(targets(&g.test_edges, n, |_| true)).filter(|t| !t.is_empty());
        let test = test.map(|t| format!(" (tests: {t})")).unwrap_or_default();
        s += &format!("  {n} -> [{to}]{test}\n");
    }
    for c in cycles(g) {
        s += &format!("  CYCLE among: {}\n", c.join(", "));
    }
    s
}

/// A module's node name: `a::b`, `crate` for the root.
pub(crate) fn node<S: std::borrow::Borrow<str>>(m: &[S]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// A node's module path (empty for `crate`).
fn path(n: &str) -> Vec<&str> {
    n.split("::").filter(|s| *s != "crate").collect()
}

/// The levels of `g`'s folder graph, outermost first: per folder, its name and the graph of its
/// children. A node ending in `/` is a child folder standing for its whole tree; the folder's own
/// name stands for its own file.
pub(crate) fn folder_levels(g: &Graph) -> Vec<(String, Graph)> {
    let paths: Vec<Vec<&str>> = g.nodes.iter().map(|n| path(n)).collect();
    let is_folder = |p: &[&str]| paths.iter().any(|q| q.len() > p.len() && q.starts_with(p));
    let folders: BTreeSet<&[&str]> = (paths.iter())
        .flat_map(|p| (0..p.len()).map(move |k| &p[..k]))
        .collect();
    let level = |parent: &[&str]| {
        // The node standing for `n` at this level, or `None` when `n` lies outside `parent`.
        let group = |n: &String| {
            let p = path(n);
            let child = &p[..p.len().min(parent.len() + 1)];
            let folder = child.len() > parent.len() && is_folder(child);
            let mark = if folder { "/" } else { "" };
            p.starts_with(parent).then(|| node(child) + mark)
        };
        let mut level = Graph {
            nodes: g.nodes.iter().filter_map(group).collect(),
            ..Graph::default()
        };
        for (a, b) in &g.edges {
            if let (Some(a), Some(b)) = (group(a), group(b))
                && a != b
            {
                level.edges.insert((a, b));
            }
        }
        (node(parent), level)
    };
    folders.into_iter().map(level).collect()
}

/// The folder graph as text: per level with a child folder (or a cycle), each child folder's
/// edges and every edge into one.
pub(crate) fn describe_folders(name: &str, levels: &[(String, Graph)]) -> String {
    let mut s = format!("folder graph of {name}: {} folders\n", levels.len());
    for (parent, g) in levels {
        let found = cycles(g);
        if !g.nodes.iter().any(|n| n.ends_with('/')) && found.is_empty() {
            continue;
        }
        s += &format!("  in {parent}:\n");
        for n in &g.nodes {
            let to = targets(&g.edges, n, |b| n.ends_with('/') || b.ends_with('/'));
            if n.ends_with('/') || !to.is_empty() {
                s += &format!("    {n} -> [{to}]\n");
            }
        }
        for c in found {
            s += &format!("    CYCLE among: {}\n", c.join(", "));
        }
    }
    s
}
