//! The module-graph reader's second pass: what one file says (its inline modules, `use` trees
//! and other paths, each with the module it is written in and whether that is test code).

use super::tokens::{Tok, is_ident, is_punct, tokens};

/// One `use` leaf: its path and the name it binds (`None` for a glob).
pub(crate) struct UseItem {
    pub(crate) path: Vec<String>,
    pub(crate) name: Option<String>,
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
pub(crate) struct FileFacts {
    pub(crate) inline: Vec<Vec<String>>,
    /// Child modules in their own files declared `#[cfg(test)] mod name;`.
    pub(crate) test_files: Vec<Vec<String>>,
    pub(crate) uses: Vec<(Vec<String>, bool, UseItem)>,
    pub(crate) paths: Vec<(Vec<String>, bool, Vec<String>)>,
}

pub(crate) fn facts(module: &[String], src: &str) -> FileFacts {
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
