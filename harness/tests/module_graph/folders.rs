//! The folder graph over a crate's file graph ([`super::graph`]). A folder is a module with
//! children (its file and the module tree under its directory: `read/mod.rs` and everything under
//! `read/`; `crc.rs` and everything under `crc/`). The graph is checked one level at a time: the
//! level of a folder `P` has one node per child module of `P` (a child folder counts as one node,
//! its whole tree) plus `P`'s own file, and an edge between two nodes when any file in one
//! refers to any file in the other. References that leave `P` belong to a level above. A cycle
//! at any level (two folders, or a folder and a file beside it, that refer to each other through
//! different files) fails the check even where the file graph has none.

use std::collections::BTreeSet;

use super::graph::{Graph, cycles};

/// One level of the folder graph: the children of the folder `parent` (`crate` for the root).
/// A node ending in `/` is a child folder standing for its whole tree; `parent` itself stands for
/// its own file.
#[derive(Debug)]
pub(crate) struct Level {
    pub(crate) parent: String,
    pub(crate) graph: Graph,
}

/// The module path of a file node (`crate` is the root, the empty path).
fn segs(node: &str) -> Vec<&str> {
    if node == "crate" {
        Vec::new()
    } else {
        node.split("::").collect()
    }
}

/// The name of a module path as a node (`crate` for the root).
fn name(path: &[&str]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// The levels of `g`'s folder graph, one per folder, outermost first.
pub(crate) fn folder_levels(g: &Graph) -> Vec<Level> {
    let paths: Vec<Vec<&str>> = g.nodes.iter().map(|n| segs(n)).collect();
    // A folder: a module with at least one module under it.
    let is_folder = |p: &[&str]| paths.iter().any(|q| q.len() > p.len() && q.starts_with(p));
    let mut folders: Vec<&[&str]> = paths
        .iter()
        .flat_map(|p| (0..p.len()).map(move |k| &p[..k]))
        .filter(|p| is_folder(p))
        .collect();
    folders.sort();
    folders.dedup();
    folders
        .into_iter()
        .map(|parent| {
            // The node of `node` at this level, or `None` when it lies outside `parent`.
            let group = |node: &str| {
                let p = segs(node);
                if !p.starts_with(parent) {
                    return None;
                }
                if p.len() == parent.len() {
                    return Some(name(parent));
                }
                let child = &p[..parent.len() + 1];
                let mark = if is_folder(child) { "/" } else { "" };
                Some(format!("{}{mark}", name(child)))
            };
            let mut level = Graph {
                nodes: g.nodes.iter().filter_map(|n| group(n)).collect(),
                ..Graph::default()
            };
            for (a, b) in &g.edges {
                if let (Some(ga), Some(gb)) = (group(a), group(b))
                    && ga != gb
                {
                    level.edges.insert((ga, gb));
                }
            }
            Level {
                parent: name(parent),
                graph: level,
            }
        })
        .collect()
}

/// The cycles at every level: `(level's folder, the nodes of one cycle)`.
pub(crate) fn folder_cycles(levels: &[Level]) -> Vec<(String, Vec<String>)> {
    levels
        .iter()
        .flat_map(|l| cycles(&l.graph).into_iter().map(|c| (l.parent.clone(), c)))
        .collect()
}

/// The folder graph as text: per level with a child folder (or a cycle), each child folder's
/// edges and every edge into one.
pub(crate) fn describe_folders(name: &str, levels: &[Level]) -> String {
    let mut s = format!("folder graph of {name}: {} folders\n", levels.len());
    for l in levels {
        let g = &l.graph;
        let folders: BTreeSet<&String> = g.nodes.iter().filter(|n| n.ends_with('/')).collect();
        let found = cycles(g);
        if folders.is_empty() && found.is_empty() {
            continue;
        }
        s.push_str(&format!("  in {}:\n", l.parent));
        for n in &g.nodes {
            let to: Vec<&str> = g
                .edges
                .iter()
                .filter(|e| &e.0 == n && (folders.contains(n) || folders.contains(&e.1)))
                .map(|e| e.1.as_str())
                .collect();
            if folders.contains(n) || !to.is_empty() {
                s.push_str(&format!("    {n} -> [{}]\n", to.join(", ")));
            }
        }
        for c in found {
            s.push_str(&format!("    CYCLE among: {}\n", c.join(", ")));
        }
    }
    s
}
