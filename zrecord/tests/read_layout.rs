//! The layout rule of the read engines (`src/read/engine/`): an engine module never imports
//! another engine module. Each engine reaches the shared read modules through `crate::read::..`
//! paths only, so a file under `engine/` (other than `mod.rs`, the dispatcher) may name neither
//! `super::` (its parent or a sibling engine) nor `engine::`. Test modules inside a file
//! (`#[cfg(test)] mod tests`) may `use super::*` on their own engine and are not checked.

use std::path::{Path, PathBuf};

/// The source of `src` without comments, cut before its `#[cfg(test)] mod tests` (if any).
fn code_of(src: &str) -> String {
    let mut out = String::new();
    let mut lines = src.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod tests"))
        {
            break;
        }
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Why an engine file's source breaks the rule, if it does.
fn violations(src: &str) -> Vec<String> {
    let code = code_of(src);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for banned in ["super::", "engine::"] {
            if line.contains(banned) {
                found.push(format!("line {}: `{banned}` in `{}`", n + 1, line.trim()));
            }
        }
    }
    found
}

fn engine_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/read/engine")
}

#[test]
fn no_engine_module_imports_another_engine() {
    let mut engines = Vec::new();
    for entry in std::fs::read_dir(engine_dir()).expect("src/read/engine") {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || name == "mod.rs" {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("engine source");
        let bad = violations(&src);
        assert!(
            bad.is_empty(),
            "{name} imports outside the shared modules: {bad:#?}"
        );
        engines.push(name.trim_end_matches(".rs").to_string());
    }
    engines.sort();
    // The engines this rule covers today; a new one joins them without a change here.
    for expected in ["direct", "uring", "warm"] {
        assert!(
            engines.iter().any(|e| e == expected),
            "engine {expected} not found among {engines:?}"
        );
    }
    let dispatch = std::fs::read_to_string(engine_dir().join("mod.rs")).expect("engine/mod.rs");
    for e in &engines {
        assert!(
            dispatch.contains(&format!("mod {e};")),
            "engine {e} is not declared in engine/mod.rs"
        );
    }
}

#[test]
fn the_rule_catches_a_sibling_import_and_ignores_comments_and_tests() {
    let sibling = "use crate::read::plan::Plan;\nuse super::direct::Direct;\n";
    assert_eq!(violations(sibling).len(), 1, "{:?}", violations(sibling));
    let through_parent = "fn f() { crate::read::engine::warm::Warm; }\n";
    assert_eq!(violations(through_parent).len(), 1);
    let clean = "//! see [`super::direct`]\nuse crate::read::piece::Piece; // not super::uring\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    assert!(violations(clean).is_empty(), "{:?}", violations(clean));
}
