//! R-CON-51: product code does not index JSON by key or unwrap what it is given.
//!
//! `value["key"]` on a `serde_json::Value` is IndexMut's trap: on a caller's string where an
//! object was expected it panics (a `subscriptions/listen` with a string `params` panicked a
//! Tokio worker that way), and its read-only twin is one `&mut` away from it. `.unwrap()` and
//! `.expect()` on what a caller, an upstream, Temporal or a config file sent panic the same way.
//! Every crate under `connector/` is read, without unit-test modules, comments and the insides
//! of string literals; `x["key"]`, `.unwrap()` and `.expect(` are refused except on a lock
//! (poisoned only after a panic elsewhere) and the few exceptions in [`ALLOWED`], each of which
//! holds no input and must still be found. Only literal keys are seen: `v[key]` with the key in
//! a variable cannot be told from a slice index by reading the text, so it is kept out in review
//! (the connector reads such keys with `.get(key)` too).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// Justified exceptions: a file under `connector/`, a snippet of the statement (its line or the
/// three before it), and why it cannot panic on input.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "runtime/src/metrics.rs",
        "writing to a String cannot fail",
        "fmt::Write into a String is infallible",
    ),
    (
        "connector/src/idempotency.rs",
        "HMAC accepts keys of any length",
        "HMAC takes any key length",
    ),
    (
        "connector/src/task_ref/mod.rs",
        "HMAC accepts keys of any length",
        "HMAC takes any key length",
    ),
    (
        "connector/src/idempotency.rs",
        "which JCS always writes",
        "a serde_json value holds only finite numbers",
    ),
    (
        "connector/src/task_ref/mod.rs",
        "random number generator failed",
        "the operating system's RNG, no input",
    ),
    (
        "connector/src/task_ref/compact.rs",
        "a prefix is at most 32 bytes",
        "only a parsed shape whose prefix is at most 32 bytes is written",
    ),
    (
        "connector/src/server/caller_key.rs",
        "HMAC takes any key",
        "HMAC takes any key length",
    ),
    (
        "proxy/src/state_key.rs",
        "HMAC takes keys of any length",
        "HMAC takes any key length",
    ),
    (
        "proxy/src/state_key.rs",
        "the operating system's random number generator",
        "the operating system's RNG, no input",
    ),
    (
        "connector/src/auth/keys.rs",
        "a reqwest client with a timeout always builds",
        "built from constants",
    ),
    (
        "cli/src/bin/durable-mcp-proxy.rs",
        "SIGTERM handler",
        "at start-up, before any input",
    ),
];

/// Every product crate's directory.
fn product_crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../connector");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    crates
}

/// All `.rs` files under `dir`, binaries included.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` with comments and the insides of string and char literals as spaces (quotes kept),
/// so that what is left is code; newlines stay, so lines keep their numbers.
fn code_only(text: &str) -> Vec<char> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(chars.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let starts = |s: &str| rest.iter().take(s.len()).copied().eq(s.chars());
        if starts("//") {
            let end = rest
                .iter()
                .position(|c| *c == '\n')
                .map_or(chars.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if starts("/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < chars.len() {
                if chars[j..].starts_with(&['/', '*']) {
                    depth += 1;
                    j += 2;
                } else if chars[j..].starts_with(&['*', '/']) {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if starts("r#") || starts("r\"") || starts("br#") || starts("br\"") {
            let prefix = rest.iter().take_while(|c| **c == 'r' || **c == 'b').count();
            let hashes = rest[prefix..].iter().take_while(|c| **c == '#').count();
            let open = i + prefix + hashes;
            if chars.get(open) != Some(&'"') {
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let close: Vec<char> = close.chars().collect();
            let mut j = open + 1;
            while j < chars.len() && !chars[j..].starts_with(&close) {
                j += 1;
            }
            blank(&mut out, open + 1, j);
            i = j + close.len();
        } else if chars[i] == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if chars[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            let end = match rest.get(1) {
                Some('\\') => rest.iter().skip(2).position(|c| *c == '\'').map(|n| n + 2),
                Some(_) if rest.get(2) == Some(&'\'') => Some(2),
                _ => None,
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, i + end);
                    i += end + 1;
                }
                None => i += 1,
            }
        } else if chars[i].is_alphanumeric() || chars[i] == '_' {
            // Skip an identifier whole (so `br` in `abbr"..."` is not read as a raw string).
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Blanks every item under `#[cfg(test)]` in `code` (from [`code_only`]); returns the names
/// of `#[cfg(test)] mod name;` declarations, whose files are test code.
fn drop_test_items(code: &mut [char]) -> Vec<String> {
    const MARK: &str = "#[cfg(test)]";
    let mut test_files = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if !code[i..].iter().take(MARK.len()).copied().eq(MARK.chars()) {
            i += 1;
            continue;
        }
        let item: String = code[i + MARK.len()..].iter().take(200).collect();
        let item = item.trim_start();
        if let Some(name) = item
            .strip_prefix("mod ")
            .or_else(|| item.strip_prefix("pub mod "))
            .and_then(|m| m.split_once(';'))
            .map(|(name, _)| name.trim())
            .filter(|name| name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            test_files.push(name.to_owned());
        }
        let (mut depth, mut j) = (0usize, i + MARK.len());
        while j < code.len() {
            match code[j] {
                ';' if depth == 0 => break,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let last = j.min(code.len() - 1);
        for c in &mut code[i..=last] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j + 1;
    }
    test_files
}

/// Where `code` indexes by a string key or unwraps: (line, what), locks' unwraps left out.
fn hits(code: &[char]) -> Vec<(usize, &'static str)> {
    let text: String = code.iter().collect();
    let mut found = Vec::new();
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices('[') {
        let before = text[..at].trim_end();
        let indexes = before
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ')' || c == ']');
        // One string literal (masked to spaces) and the bracket's end: `["..."]`.
        let inside = text[at + 1..].trim_start();
        let key = inside.strip_prefix('"').is_some_and(|rest| {
            rest.find('"')
                .is_some_and(|end| rest[end + 1..].trim_start().starts_with(']'))
        });
        // `#[attr("..")]`, `vec!["..."]` and `in ["..."]` are no index expressions.
        let word = before
            .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
            .next();
        let array = matches!(word, Some("in" | "return" | "break" | "else"));
        if indexes && key && !array && bytes.get(at.wrapping_sub(1)) != Some(&b'#') {
            found.push((line_of(at), "indexes by a string key"));
        }
    }
    let calls = [(".unwrap()", "unwrap"), (".expect(", "expect")];
    for (at, what) in calls
        .iter()
        .flat_map(|(call, what)| text.match_indices(call).map(|(at, _)| (at, *what)))
        .collect::<Vec<_>>()
    {
        let before: String = text[..at].chars().filter(|c| !c.is_whitespace()).collect();
        let on_lock = [".lock()", ".read()", ".write()"]
            .iter()
            .any(|l| before.ends_with(l));
        if !on_lock {
            found.push((line_of(at), what));
        }
    }
    found
}

/// Whether an exception of [`ALLOWED`] covers a hit at `line` (1-based) of `file`.
fn allowed(file: &str, lines: &[&str], line: usize, used: &mut BTreeSet<usize>) -> bool {
    let context = lines[line.saturating_sub(4)..line].join("\n");
    let found = ALLOWED
        .iter()
        .position(|(f, snippet, _)| file.ends_with(f) && context.contains(snippet));
    found.inspect(|i| {
        used.insert(*i);
    });
    found.is_some()
}

#[test]
fn product_code_neither_indexes_json_by_key_nor_unwraps() {
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for krate in product_crates() {
        let mut files = Vec::new();
        rust_files(&krate.join("src"), &mut files);
        files.sort();
        let mut codes = Vec::new();
        let mut test_files = BTreeSet::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let mut code = code_only(&text);
            for name in drop_test_items(&mut code) {
                let dir = file.parent().unwrap();
                let dir = match file.file_stem().and_then(|s| s.to_str()) {
                    Some("lib" | "main" | "mod") => dir.to_path_buf(),
                    Some(stem) => dir.join(stem),
                    None => dir.to_path_buf(),
                };
                test_files.insert(dir.join(format!("{name}.rs")));
                test_files.insert(dir.join(name).join("mod.rs"));
            }
            codes.push((file, text, code));
        }
        for (file, text, code) in codes {
            let name = file.to_string_lossy();
            if test_files.contains(file) || name.ends_with("/tests.rs") {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            for (line, what) in hits(&code) {
                if !allowed(&name, &lines, line, &mut used) {
                    let shown = name.split("/connector/").last().unwrap_or(&name).to_owned();
                    found.push(format!(
                        "{shown}:{line}: {what}: {}",
                        lines[line - 1].trim()
                    ));
                }
            }
        }
    }
    let stale: Vec<_> = (0..ALLOWED.len())
        .filter(|i| !used.contains(i))
        .map(|i| format!("{:?}", ALLOWED[i]))
        .collect();
    assert!(
        found.is_empty() && stale.is_empty(),
        "read JSON with .get()/.pointer() and handle None, and turn unwrap/expect into an \
         error the caller gets (R-CON-51); or, for a value that holds no input, add a justified \
         exception to ALLOWED.\n{}\nexceptions no longer found: {stale:?}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_code_not_comments_strings_or_tests() {
    let text = r##"
// v["commented"].unwrap()
/// doc: v["doc"]
fn f(v: Value) {
    let s = "v[\"in a string\"].unwrap()";
    let t = r#"x".unwrap()"#;
    let c = '"';
    let _ = v["live"];
    let _ = v.get("ok").unwrap();
    let _ = m.lock().unwrap();
    let _ = m
        .lock()
        .unwrap();
    let a = vec!["x"];
    let b: &[&str] = &["y"];
    for s in ["z"] {}
    let d = &line["data:".len()..];
}
#[cfg(test)]
mod tests { fn g(v: Value) { v["test"].take(); x.unwrap(); } }
"##;
    let mut code = code_only(text);
    assert!(drop_test_items(&mut code).is_empty());
    let mut found = hits(&code);
    found.sort();
    assert_eq!(found, vec![(8, "indexes by a string key"), (9, "unwrap")]);
    let mut declared = code_only("#[cfg(test)]\nmod helpers;\nfn h() {}");
    assert_eq!(drop_test_items(&mut declared), vec!["helpers".to_owned()]);
}
