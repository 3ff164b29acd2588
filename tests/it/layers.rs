//! The crates and their modules depend one way (R-LAY-1).
//!
//! Crate to crate: `cargo metadata` gives each product crate's dependencies on the others,
//! checked against [`CRATES`]; `cargo tree` gives each one's whole tree, checked against what
//! it must never carry ([`KEPT_OUT`]). Module to module, inside every crate: the sources are
//! read, every `crate::`, `self::` and `super::` path (in `use` trees, expressions and doc
//! links alike) is resolved to the module it names, and no two modules under one parent may
//! import each other, directly or round a circle, at any depth. Unit-test modules are exempt.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

/// The product crates under `connector/`, bottom first, and the ones each may depend on.
const CRATES: &[(&str, &[&str])] = &[
    ("durable-mcp-contract", &[]),
    ("durable-mcp-runtime", &["durable-mcp-contract"]),
    ("durable-mcp-workflow-client", &["durable-mcp-contract"]),
    (
        "durable-mcp-connector",
        &["durable-mcp-contract", "durable-mcp-runtime"],
    ),
    (
        "durable-mcp-proxy",
        &["durable-mcp-contract", "durable-mcp-runtime"],
    ),
    (
        "durable-mcp-native",
        &["durable-mcp-contract", "durable-mcp-runtime"],
    ),
    (
        "durable-mcp-cli",
        &[
            "durable-mcp-contract",
            "durable-mcp-runtime",
            "durable-mcp-connector",
            "durable-mcp-proxy",
            "durable-mcp-workflow-client",
        ],
    ),
    (
        "durable-mcp",
        &[
            "durable-mcp-contract",
            "durable-mcp-runtime",
            "durable-mcp-connector",
            "durable-mcp-proxy",
            "durable-mcp-native",
            "durable-mcp-workflow-client",
        ],
    ),
];

/// What a crate's normal dependency tree must not hold: a package name, or `package/feature`
/// for a feature of one. The contract is plain data; the Workflow client stays off the network
/// stack (Workflow code must not reach a server by accident); only the CLI parses flags.
const KEPT_OUT: &[(&str, &[&str])] = &[
    (
        "durable-mcp-contract",
        &[
            "rmcp",
            "reqwest",
            "hyper",
            "axum",
            "temporalio-client",
            "temporalio-sdk-core",
            "clap",
        ],
    ),
    (
        "durable-mcp-workflow-client",
        &[
            "axum",
            "hyper",
            "jsonwebtoken",
            "clap",
            "reqwest",
            "temporalio-client",
            "temporalio-sdk-core",
            "rmcp/server",
            "rmcp/client",
        ],
    ),
    (
        "durable-mcp-runtime",
        &["axum", "jsonwebtoken", "clap", "rmcp"],
    ),
    // The proxy signs RFC 7523 client assertions for upstream OAuth (R-PRX-15) with jsonwebtoken.
    ("durable-mcp-proxy", &["axum", "clap", "rmcp/server"]),
    (
        "durable-mcp-native",
        &["axum", "jsonwebtoken", "clap", "rmcp/server", "rmcp/client"],
    ),
    ("durable-mcp-connector", &["clap", "rmcp/client"]),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cargo(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The product crates (those under `connector/`) and the directory of each.
fn product_crates() -> BTreeMap<String, (PathBuf, Vec<(String, String)>)> {
    let meta: Value = serde_json::from_str(&cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]))
    .unwrap();
    let connector = workspace_root().join("connector").canonicalize().unwrap();
    let mut crates = BTreeMap::new();
    for package in meta["packages"].as_array().unwrap() {
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
        let dir = manifest.parent().unwrap().to_path_buf();
        if !dir.starts_with(&connector) {
            continue;
        }
        let deps = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
                (d["name"].as_str().unwrap().to_owned(), kind)
            })
            .collect();
        crates.insert(package["name"].as_str().unwrap().to_owned(), (dir, deps));
    }
    crates
}

#[test]
fn crates_depend_one_way() {
    let crates = product_crates();
    let allowed: BTreeMap<&str, &[&str]> = CRATES.iter().copied().collect();
    let mut wrong = Vec::new();
    for (name, (_, deps)) in &crates {
        let Some(may) = allowed.get(name.as_str()) else {
            wrong.push(format!("{name} is not in CRATES: say where it stands"));
            continue;
        };
        for (dep, kind) in deps {
            if crates.contains_key(dep) && !may.contains(&dep.as_str()) {
                wrong.push(format!("{name} depends on {dep} ({kind})"));
            }
        }
    }
    for (name, _) in CRATES {
        if !crates.contains_key(*name) {
            wrong.push(format!("{name} is in CRATES but not under connector/"));
        }
    }
    assert!(
        wrong.is_empty(),
        "crate edges against the layer order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn crates_carry_only_their_own_dependencies() {
    let mut found = Vec::new();
    for (name, kept_out) in KEPT_OUT {
        let tree = cargo(&[
            "tree",
            "-p",
            name,
            "-e",
            "normal,features",
            "--prefix",
            "none",
            "--offline",
        ]);
        // Lines are `pkg vX.Y.Z` or `pkg feature "name"`.
        let mut held = BTreeSet::new();
        for line in tree.lines() {
            let mut words = line.split_whitespace();
            let Some(package) = words.next() else {
                continue;
            };
            held.insert(package.to_owned());
            if words.next() == Some("feature") {
                let feature = words.next().unwrap_or_default().trim_matches('"');
                held.insert(format!("{package}/{feature}"));
            }
        }
        for item in *kept_out {
            if held.contains(*item) {
                found.push(format!(
                    "{name} pulls in {item} (cargo tree -p {name} -i ...)"
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "dependencies a crate must not carry:\n{}",
        found.join("\n")
    );
}

/// Every path a `use`-tree (or a plain path) starting at `text` names, as segments.
fn expand_tree(text: &str) -> (Vec<Vec<String>>, usize) {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut prefix: Vec<String> = Vec::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            i += 1;
            let mut out = Vec::new();
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (
                        out.into_iter()
                            .map(|p: Vec<String>| prefix.iter().cloned().chain(p).collect())
                            .collect(),
                        i + 1,
                    );
                }
                let (paths, used) = expand_tree(&text[i..]);
                out.extend(paths);
                i += used.max(1);
            }
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if start == i {
            return (vec![prefix], i);
        }
        prefix.push(text[start..i].to_owned());
        if text[i..].starts_with("::") {
            i += 2;
        } else {
            // `as` renames and anything after the path end it.
            while i < bytes.len() && !matches!(bytes[i], b',' | b'}' | b';' | b'\n') {
                i += 1;
            }
            return (vec![prefix], i);
        }
    }
}

/// The module path of a source file under `src`, e.g. `server/call.rs` -> `[server, call]`,
/// `server/mod.rs` -> `[server]`, `lib.rs` -> `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The absolute module paths a file refers to through `crate::`, `self::` and `super::`.
fn references(module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (anchor, base) in [
        ("crate::", Vec::new()),
        ("self::", module.to_vec()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut from = 0;
        while let Some(at) = text[from..].find(anchor) {
            let at = from + at;
            from = at + anchor.len();
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue; // `super::super::` is handled as one path below; skip inner matches.
            }
            let (paths, _) = expand_tree(&text[from..]);
            for path in paths {
                let mut resolved = base.clone();
                let mut rest = path.as_slice();
                while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
                    resolved.pop();
                    rest = tail;
                }
                resolved.extend(rest.iter().cloned());
                found.push(resolved);
            }
        }
    }
    found
}

/// The crate's source files, without binaries (crates of their own) and without files that
/// are declared only under `#[cfg(test)]`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text without unit-test modules: `#[cfg(test)]` on a `mod name { ... }` drops the
/// block; on `mod name;` the name is returned so its file is skipped.
fn production_part(text: &str) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut test_files = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let Some(decl) = after
            .strip_prefix("mod ")
            .or_else(|| after.strip_prefix("pub mod "))
            .or_else(|| after.strip_prefix("pub(crate) mod "))
        else {
            // On another item: keep it (test helpers outside a module are production code).
            kept.push_str("#[cfg(test)]");
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        };
        let name: String = decl
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let tail = decl[name.len()..].trim_start();
        if let Some(semi) = tail.strip_prefix(';') {
            test_files.push(name);
            rest = semi;
            continue;
        }
        // Skip the block: braces balance at its end.
        let mut depth = 0usize;
        let mut end = tail.len();
        for (i, c) in tail.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &tail[end..];
    }
    kept.push_str(rest);
    (kept, test_files)
}

/// Edges between sibling modules: (parent, from child) -> to children, for one crate's `src`.
fn sibling_edges(src: &Path) -> BTreeMap<(Vec<String>, String), BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut texts = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for file in &files {
        let module = module_of(src, file);
        let (text, tests) = production_part(&std::fs::read_to_string(file).unwrap());
        for name in tests {
            let mut path = module.clone();
            path.push(name);
            test_only.insert(path);
        }
        texts.insert(module, text);
    }
    let modules: BTreeSet<Vec<String>> = texts.keys().cloned().collect();
    let mut edges: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &texts {
        if test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        for mut target in references(module, text) {
            // The deepest module the path names (the rest is an item in it).
            while !target.is_empty() && !modules.contains(&target) {
                target.pop();
            }
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if let (Some(from), Some(to)) = (module.get(common), target.get(common)) {
                edges
                    .entry((module[..common].to_vec(), from.clone()))
                    .or_default()
                    .insert(to.clone());
            }
        }
    }
    edges
}

/// Every circle among the children of one parent, as `a -> b -> a`.
fn circles(edges: &BTreeMap<(Vec<String>, String), BTreeSet<String>>) -> Vec<String> {
    let parents: BTreeSet<&Vec<String>> = edges.keys().map(|(p, _)| p).collect();
    let mut out = Vec::new();
    for parent in parents {
        let graph: BTreeMap<&str, Vec<&str>> = edges
            .iter()
            .filter(|((p, _), _)| p == parent)
            .map(|((_, m), to)| (m.as_str(), to.iter().map(String::as_str).collect()))
            .collect();
        fn visit<'a>(
            node: &'a str,
            graph: &BTreeMap<&'a str, Vec<&'a str>>,
            stack: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
            found: &mut Vec<String>,
        ) {
            if let Some(at) = stack.iter().position(|n| *n == node) {
                let mut circle = stack[at..].to_vec();
                circle.push(node);
                found.push(circle.join(" -> "));
                return;
            }
            if !done.insert(node) {
                return;
            }
            stack.push(node);
            for next in graph.get(node).into_iter().flatten() {
                visit(next, graph, stack, done, found);
            }
            stack.pop();
        }
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            let mut found = Vec::new();
            visit(node, &graph, &mut Vec::new(), &mut done, &mut found);
            let at = if parent.is_empty() {
                "crate".to_owned()
            } else {
                parent.join("::")
            };
            out.extend(found.into_iter().map(|c| format!("{at}: {c}")));
        }
    }
    out
}

#[test]
fn modules_import_in_no_circle_in_any_crate() {
    let mut dirs: Vec<PathBuf> = product_crates().into_values().map(|(dir, _)| dir).collect();
    dirs.push(workspace_root().join("conformance"));
    let mut found = Vec::new();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        found.extend(
            circles(&sibling_edges(&dir.join("src")))
                .into_iter()
                .map(|c| format!("{name}: {c}")),
        );
    }
    assert!(
        found.is_empty(),
        "modules that import each other:\n{}",
        found.join("\n")
    );
}

/// The longest a product function may be without saying why.
const LONGEST_FUNCTION: usize = 80;

/// Product functions longer than [`LONGEST_FUNCTION`] lines whose comment lines right above
/// (doc or plain) give no reason starting `Long:`, as `file:line name (N lines)`.
fn long_functions(file: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let Some(name) = fn_name(code) else { continue };
        let mut depth = 0i64;
        let mut opened = false;
        let mut end = at;
        for (i, l) in lines.iter().enumerate().skip(at) {
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            end = i;
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
        let length = end - at + 1;
        let reason = lines[..at]
            .iter()
            .rev()
            .take_while(|l| {
                let l = l.trim_start();
                l.starts_with("//") || l.starts_with("#[")
            })
            .any(|l| {
                l.trim_start()
                    .trim_start_matches('/')
                    .trim_start()
                    .starts_with("Long:")
            });
        if length > LONGEST_FUNCTION && !reason {
            found.push(format!("{file}:{} {name} ({length} lines)", at + 1));
        }
    }
    found
}

/// The function a line declares, if it does.
fn fn_name(code: &str) -> Option<&str> {
    let mut rest = code;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

#[test]
fn product_functions_are_short_or_say_why() {
    let mut found = Vec::new();
    for (dir, _) in product_crates().into_values() {
        let mut files = Vec::new();
        sources(&dir.join("src"), &mut files);
        // Binaries are product code too.
        let bin = dir.join("src/bin");
        if bin.is_dir() {
            sources_of_bins(&bin, &mut files);
        }
        for file in files {
            let (text, _) = production_part(&std::fs::read_to_string(&file).unwrap());
            let name = file
                .strip_prefix(workspace_root().canonicalize().unwrap())
                .unwrap_or(&file)
                .display()
                .to_string();
            if name.ends_with("/tests.rs") {
                continue; // a unit-test module in a file of its own
            }
            found.extend(long_functions(&name, &text));
        }
    }
    assert!(
        found.is_empty(),
        "functions over {LONGEST_FUNCTION} lines: split them into named steps, or write the \
         reason above them in a comment starting `Long:`\n{}",
        found.join("\n")
    );
}

fn sources_of_bins(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "rs") {
            out.push(entry.path());
        }
    }
}

#[test]
fn the_length_check_counts_bodies_and_reads_reasons() {
    let body = |n: usize| "    x();\n".repeat(n);
    let long = format!("pub async fn long() {{\n{}}}\n", body(LONGEST_FUNCTION));
    let short = format!("fn short() {{\n{}}}\n", body(LONGEST_FUNCTION - 2));
    let excused = format!(
        "/// Does a thing.\n// Long: one table, read top to bottom.\nfn excused() {{\n{}}}\n",
        body(LONGEST_FUNCTION)
    );
    let text = format!("{long}{short}{excused}");
    let found = long_functions("f.rs", &text);
    assert_eq!(
        found,
        [format!("f.rs:1 long ({} lines)", LONGEST_FUNCTION + 2)]
    );
}

#[test]
fn the_checker_sees_grouped_nested_and_relative_imports() {
    let module = ["server".to_owned(), "call".to_owned()];
    let text = "use super::{\n    Connector,\n};\nuse crate::{\n    mcp::{call::CallToken, payload},\n    outbound::service::X as Y,\n};\n/// see [`super::super::progress`]";
    let refs: BTreeSet<String> = references(&module, text)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    for expected in [
        "server::Connector",
        "mcp::call::CallToken",
        "mcp::payload",
        "outbound::service::X",
        "progress",
    ] {
        assert!(refs.contains(expected), "{expected} missing from {refs:?}");
    }
}

#[test]
fn the_checker_skips_unit_tests_but_reads_on_after_them() {
    let text = "use crate::a::X;\n#[cfg(test)]\nmod tests {\n    use crate::b::{Y, Z};\n    fn f() { let _ = {}; }\n}\n#[cfg(test)]\nmod more;\nuse crate::c::W;\n";
    let (kept, test_files) = production_part(text);
    let refs: BTreeSet<String> = references(&[], &kept)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert!(refs.contains("a::X") && refs.contains("c::W"), "{refs:?}");
    assert!(!refs.iter().any(|r| r.starts_with('b')), "{refs:?}");
    assert_eq!(test_files, ["more"]);
}

#[test]
fn the_checker_finds_circles_between_siblings_at_any_depth() {
    let mut edges = BTreeMap::new();
    let deep = vec!["config".to_owned()];
    edges.insert(
        (deep.clone(), "oauth".to_owned()),
        BTreeSet::from(["upstream".to_owned()]),
    );
    edges.insert(
        (deep, "upstream".to_owned()),
        BTreeSet::from(["oauth".to_owned()]),
    );
    assert_eq!(circles(&edges), ["config: oauth -> upstream -> oauth"]);
}
