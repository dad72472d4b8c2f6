//! The module-graph reader's first pass: Rust source as tokens, without comments, string
//! literals kept (a serde attribute string can name a module).

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
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
pub(crate) fn tokens(src: &str) -> Vec<Tok> {
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

pub(crate) fn is_ident(t: Option<&Tok>, word: &str) -> bool {
    matches!(t, Some(Tok::Ident(w)) if w == word)
}

pub(crate) fn is_punct(t: Option<&Tok>, p: &str) -> bool {
    matches!(t, Some(Tok::Punct(q)) if *q == p)
}
