//! From source files to the file graph: `syn` reads each file, a visitor collects what it
//! refers to, and a resolver maps each path to the module that defines the item.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

use super::graph::Graph;

type Module = Vec<String>;

/// What one file says. `refs` and `imports` carry the module each was written in.
#[derive(Default)]
struct Reader {
    cur: Module,
    test: bool,
    inline: Vec<Module>,
    /// Child modules in their own files declared `#[cfg(test)] mod name;`.
    test_files: Vec<Module>,
    refs: Vec<(Module, bool, Module)>,
    imports: Vec<(Module, String, Module)>,
}

impl Reader {
    fn reference(&mut self, path: Module) {
        self.refs.push((self.cur.clone(), self.test, path));
    }

    /// A string that is a whole `crate::`/`self::`/`super::` path (serde's `with = ".."`).
    fn string(&mut self, s: &str) {
        let segs: Module = s.split("::").map(str::to_string).collect();
        let word = |w: &String| !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_');
        if segs.len() > 1
            && matches!(segs[0].as_str(), "crate" | "self" | "super")
            && segs.iter().all(word)
        {
            self.reference(segs);
        }
    }

    /// The paths (`a::b`, not after `::`, `.` or `$`) and strings in macro or attribute tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let toks: Vec<TokenTree> = tokens.into_iter().collect();
        let sep = |k: usize| {
            matches!((toks.get(k), toks.get(k + 1)), (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
        };
        let mut i = 0;
        while i < toks.len() {
            let after = |c: &[char]| matches!(i.checked_sub(1).map(|k| &toks[k]), Some(TokenTree::Punct(p)) if c.contains(&p.as_char()));
            match &toks[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Literal(l) => {
                    if let syn::Lit::Str(s) = syn::Lit::new(l.clone()) {
                        self.string(&s.value());
                    }
                }
                TokenTree::Ident(first) if sep(i + 1) && !after(&[':', '.', '$']) => {
                    let mut path = vec![first.to_string()];
                    while let (true, Some(TokenTree::Ident(s))) = (sep(i + 1), toks.get(i + 3)) {
                        path.push(s.to_string());
                        i += 3;
                    }
                    self.reference(path);
                }
                _ => {}
            }
            i += 1;
        }
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
        let name = if name == "self" {
            path.last().cloned()
        } else {
            Some(name.to_string())
        };
        if let Some(name) = name {
            self.imports.push((self.cur.clone(), name, path.clone()));
        }
        self.reference(path);
    }
}

fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        matches!(&a.meta, syn::Meta::List(l) if l.path.is_ident("cfg") && l.tokens.to_string() == "test")
    })
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let mut path = self.cur.clone();
        path.push(m.ident.to_string());
        let test = self.test || cfg_test(&m.attrs);
        let Some((_, items)) = &m.content else {
            if test {
                self.test_files.push(path);
            }
            return;
        };
        self.inline.push(path.clone());
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
        self.tokens(m.tokens.clone());
    }

    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(l) = &a.meta {
            self.tokens(l.tokens.clone());
        }
    }

    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        self.string(&s.value());
    }

    /// `pub(in crate::a)` names a scope, not a dependency.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}
}

/// The module path of `rel` (a path under `src/`), or `None` for files of other targets.
fn module_of(rel: &Path) -> Option<Module> {
    let s = rel.to_str()?.strip_suffix(".rs")?;
    if s.starts_with("bin/") {
        return None;
    }
    let mut parts: Module = s.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod")
        || matches!(&parts[..], [p] if p == "lib" || p == "main")
    {
        parts.pop();
    }
    Some(parts)
}

struct Resolver {
    /// Every module (file or inline) and the file node it lives in.
    modules: BTreeMap<Module, String>,
    /// Per module: name -> the path it was imported as.
    imports: BTreeMap<Module, BTreeMap<String, Module>>,
}

impl Resolver {
    /// The module that defines what `segs`, written in module `cur`, names; `None` for paths
    /// outside the crate.
    fn resolve(&self, cur: &[String], segs: &[String], depth: usize) -> Option<Module> {
        let via = |m: &[String], first: &String, rest: &[String]| {
            let p = self.imports.get(m)?.get(first)?;
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

/// The module graph of the files `(path under src/, source)`.
pub(crate) fn graph(files: &[(PathBuf, String)]) -> Graph {
    let mut modules = BTreeMap::new();
    let mut read = Vec::new();
    for (rel, src) in files {
        let Some(m) = module_of(rel) else { continue };
        let node = if m.is_empty() {
            "crate".into()
        } else {
            m.join("::")
        };
        let file = syn::parse_file(src).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        let mut r = Reader {
            cur: m.clone(),
            ..Reader::default()
        };
        r.visit_file(&file);
        for inline in r.inline.iter().chain([&m]) {
            modules.insert(inline.clone(), node.clone());
        }
        read.push((m, node, r));
    }
    let mut imports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
    for (cur, name, path) in read.iter().flat_map(|r| &r.2.imports) {
        imports
            .entry(cur.clone())
            .or_default()
            .insert(name.clone(), path.clone());
    }
    let test_files: Vec<&Module> = read.iter().flat_map(|r| &r.2.test_files).collect();
    let r = Resolver { modules, imports };
    let mut g = Graph {
        nodes: r.modules.values().cloned().collect(),
        ..Graph::default()
    };
    for (module, node, reader) in &read {
        let test_file = test_files.iter().any(|t| module.starts_with(t));
        for (cur, test, path) in &reader.refs {
            let Some(to) = r.resolve(cur, path, 0).map(|m| r.modules[&m].clone()) else {
                continue;
            };
            if &to != node {
                let edges = if *test || test_file {
                    &mut g.test_edges
                } else {
                    &mut g.edges
                };
                edges.insert((node.clone(), to));
            }
        }
    }
    let edges = g.edges.clone();
    g.test_edges.retain(|e| !edges.contains(e));
    g
}

/// Every `.rs` file under `dir`, in path order: (path under `root`, source).
pub(crate) fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let src = std::fs::read_to_string(&p).unwrap_or_default();
            out.push((p.strip_prefix(root).unwrap_or(&p).to_path_buf(), src));
        }
    }
}

/// The module graph of the crate source folder `src`.
pub(crate) fn graph_of_dir(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, src, &mut files);
    graph(&files)
}
