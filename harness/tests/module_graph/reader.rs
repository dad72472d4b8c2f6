//! From source files to the file graph: `syn` parses each file; [`Crate`], a `Visit`or, records
//! modules, imports and paths, and resolves each path to the module that defines the item.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::buffer::{Cursor, TokenBuffer};
use syn::visit::{self, Visit};

use super::graph::{Graph, node};

type Module = Vec<String>;

/// What a crate's files say: every module (file or inline) with its file's node, the imports
/// (per module and name, the path imported), the modules whose files are test code (declared
/// `#[cfg(test)] mod x;`) and the references; then where the visitor is.
#[derive(Default)]
struct Crate {
    modules: BTreeMap<Module, String>,
    imports: BTreeMap<(Module, String), Module>,
    test_files: Vec<Module>,
    /// (file node, module written in, test code, path).
    refs: Vec<(String, Module, bool, Module)>,
    file: String,
    cur: Module,
    test: bool,
}

/// The cursor after a `::` at `c`.
fn sep(c: Cursor<'_>) -> Option<Cursor<'_>> {
    let (a, c) = c.punct()?;
    let (b, c) = c.punct()?;
    (a.as_char() == ':' && b.as_char() == ':').then_some(c)
}

impl Crate {
    fn reference(&mut self, path: Module) {
        self.refs
            .push((self.file.clone(), self.cur.clone(), self.test, path));
    }

    fn use_tree(&mut self, mut path: Module, tree: &syn::UseTree) {
        let (leaf, name) = match tree {
            syn::UseTree::Path(p) => {
                path.push(p.ident.to_string());
                return self.use_tree(path, &p.tree);
            }
            syn::UseTree::Group(g) => {
                return g.items.iter().for_each(|t| self.use_tree(path.clone(), t));
            }
            syn::UseTree::Glob(_) => return self.reference(path),
            syn::UseTree::Name(n) => (&n.ident, &n.ident),
            syn::UseTree::Rename(r) => (&r.ident, &r.rename),
        };
        if leaf != "self" {
            path.push(leaf.to_string());
        }
        let name = (name != "self").then(|| name.to_string());
        if let Some(name) = name.or_else(|| path.last().cloned()) {
            self.imports.insert((self.cur.clone(), name), path.clone());
        }
        self.reference(path);
    }

    /// The paths (`a::b`, not after `$`, `::` or a method's `.`, though after a range's `..`) and
    /// strings in macro or attribute tokens.
    fn scan(&mut self, mut c: Cursor) {
        let mut last = [' ', ' '];
        while let Some((_, mut next)) = c.token_tree() {
            let may_start = !"$:".contains(last[1]) && (last[1] != '.' || last[0] == '.');
            if let Some((inside, ..)) = c.any_group() {
                self.scan(inside);
            } else if let Some((lit, _)) = c.literal()
                && let syn::Lit::Str(s) = syn::Lit::new(lit)
            {
                self.visit_lit_str(&s);
            } else if let Some((first, mut after)) = c.ident()
                && may_start
            {
                let mut path = vec![first.to_string()];
                while let Some((seg, rest)) = sep(after).and_then(Cursor::ident) {
                    path.push(seg.to_string());
                    after = rest;
                }
                if path.len() > 1 {
                    self.reference(path);
                    next = after;
                }
            }
            last = [last[1], c.punct().map_or(' ', |p| p.0.as_char())];
            c = next;
        }
    }

    /// The module defining what `segs`, written in module `cur`, names; `None` outside the crate.
    fn resolve(&self, cur: &[String], segs: &[String], depth: usize) -> Option<Module> {
        let via = |m: &[String], first: &String, rest: &[String]| {
            let p = self.imports.get(&(m.to_vec(), first.clone()))?;
            self.resolve(m, &[p, rest].concat(), depth + 1)
        };
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let mut abs: Module = match segs[0].as_str() {
            "crate" => segs[1..].to_vec(),
            "self" => [cur, &segs[1..]].concat(),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                [&cur[..cur.len().checked_sub(ups)?], &segs[ups..]].concat()
            }
            _ if self.modules.contains_key(&[cur, &segs[..1]].concat()) => [cur, segs].concat(),
            _ => return via(cur, &segs[0], &segs[1..]),
        };
        let mut prefix = abs.len();
        while !self.modules.contains_key(&abs[..prefix]) {
            prefix = prefix.checked_sub(1)?;
        }
        let rest = abs.split_off(prefix);
        let found = rest.first().and_then(|first| via(&abs, first, &rest[1..]));
        Some(found.unwrap_or(abs))
    }
}

impl<'ast> Visit<'ast> for Crate {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let path = [&self.cur[..], &[m.ident.to_string()]].concat();
        let cfg_test = |a: &syn::Attribute| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        };
        let test = self.test || m.attrs.iter().any(cfg_test);
        let Some((_, items)) = &m.content else {
            if test {
                self.test_files.push(path);
            }
            return;
        };
        self.modules.insert(path.clone(), self.file.clone());
        let outer = (std::mem::replace(&mut self.cur, path), self.test);
        self.test = test;
        items.iter().for_each(|item| self.visit_item(item));
        (self.cur, self.test) = outer;
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let root = u.leading_colon.is_some().then(|| vec!["::".to_string()]);
        self.use_tree(root.unwrap_or_default(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.reference(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.scan(TokenBuffer::new2(m.tokens.clone()).begin());
    }

    /// Doc comments are `#[doc = ".."]`, no list: not read.
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(l) = &a.meta {
            self.scan(TokenBuffer::new2(l.tokens.clone()).begin());
        }
    }

    /// A string that is a whole `crate::`/`self::`/`super::` path (serde's `with = ".."`).
    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        let segs: Module = s.value().split("::").map(str::to_string).collect();
        let word = |w: &String| !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_');
        if segs.len() > 1
            && ["crate", "self", "super"].contains(&&*segs[0])
            && segs.iter().all(word)
        {
            self.reference(segs);
        }
    }

    /// `pub(in crate::a)` names a scope, not a dependency.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}
}

/// The module graph of the files `(path under src/, source)`; `bin/` files are another target.
/// Files are read parents first, so a file's test flag is known when it is read.
pub(crate) fn graph(files: &[(PathBuf, String)]) -> Graph {
    let mut c = Crate::default();
    let mut files: Vec<(Module, &PathBuf, &String)> = (files.iter())
        .filter(|f| !f.0.starts_with("bin"))
        .map(|(rel, src)| {
            let m = rel.with_extension("");
            let mut m: Module = m.iter().map(|s| s.to_string_lossy().into()).collect();
            if m.last().is_some_and(|p| p == "mod") || m == ["lib"] || m == ["main"] {
                m.pop();
            }
            (m, rel, src)
        })
        .collect();
    files.sort_by_key(|f| f.0.len());
    for (m, rel, src) in files {
        c.test = c.test_files.iter().any(|t| m.starts_with(t));
        (c.file, c.cur) = (node(&m), m.clone());
        c.modules.insert(m, c.file.clone());
        c.visit_file(&syn::parse_file(src).unwrap_or_else(|e| panic!("{}: {e}", rel.display())));
    }
    let mut g = Graph {
        nodes: c.modules.values().cloned().collect(),
        ..Graph::default()
    };
    for (from, cur, test, path) in &c.refs {
        if let Some(to) = c.resolve(cur, path, 0).map(|m| &c.modules[&m])
            && to != from
        {
            let sets = [&mut g.edges, &mut g.test_edges];
            sets[usize::from(*test)].insert((from.clone(), to.clone()));
        }
    }
    let edges = g.edges.clone();
    g.test_edges.retain(|e| !edges.contains(e));
    g
}

/// Every `.rs` file under `src`, in path order: (path under `src`, source).
pub(crate) fn rust_files(src: &Path) -> Vec<(PathBuf, String)> {
    let (mut out, mut todo) = (Vec::new(), vec![src.to_path_buf()]);
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            let entries = std::fs::read_dir(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            todo.extend(entries.map(|e| e.expect("a directory entry").path()));
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p);
            let text = text.unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push((p.strip_prefix(src).expect("under src").to_path_buf(), text));
        }
    }
    out.sort();
    out
}
