//! The connector crate's layers depend one way (R-LAY-1): temporal <- nexus <- mcp <- {inbound,
//! outbound, workflow_client}, siblings that never import each other, and no two
//! modules of one layer importing each other, directly or round a circle.
//!
//! The check reads the sources: every `crate::...` and `super::...` path (in `use` trees,
//! expressions and doc links alike) is expanded and resolved to the module it names.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The layers, bottom first, and what each may import besides itself.
const LAYERS: &[(&str, &[&str])] = &[
    ("temporal", &[]),
    ("nexus", &["temporal"]),
    ("mcp", &["nexus", "temporal"]),
    ("inbound", &["mcp", "nexus", "temporal"]),
    ("outbound", &["mcp", "nexus", "temporal"]),
    ("temporal_tools", &["mcp", "temporal"]),
    ("workflow_client", &["mcp", "nexus", "temporal"]),
    ("native", &["mcp", "nexus", "temporal"]),
];

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

/// The module path of a source file under `src`, e.g. `inbound/server/call.rs` -> `[inbound,
/// server, call]`, `inbound/server/mod.rs` -> `[inbound, server]`.
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

/// The absolute module paths a file refers to through `crate::` and `super::`.
fn references(module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (anchor, base) in [
        ("crate::", Vec::new()),
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

/// Strips everything from `#[cfg(test)]` on: unit tests may reach anywhere.
fn production_part(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

#[test]
fn layers_depend_one_way_and_modules_import_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../connector/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut upward = Vec::new();
    // Within a layer: (layer, module) -> modules of the same layer it imports.
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        let Some(layer) = module.first() else {
            continue;
        }; // lib.rs
        let Some(may) = allowed.get(layer.as_str()) else {
            upward.push(format!(
                "{}: layer {layer:?} is not in LAYERS",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for target in references(&module, production_part(&text)) {
            let Some(to_layer) = target.first() else {
                continue;
            };
            if to_layer == layer {
                if let (Some(from), Some(to)) = (module.get(1), target.get(1))
                    && from != to
                    && allowed.contains_key(layer.as_str())
                {
                    edges
                        .entry((layer.clone(), from.clone()))
                        .or_default()
                        .insert(to.clone());
                }
            } else if allowed.contains_key(to_layer.as_str()) && !may.contains(&to_layer.as_str()) {
                upward.push(format!(
                    "{} ({layer}) imports {} ({to_layer})",
                    file.strip_prefix(&src).unwrap().display(),
                    target.join("::")
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layer order:\n{}",
        upward.join("\n")
    );

    // Circles among the modules of one layer.
    let mut circles = Vec::new();
    for (layer, _) in LAYERS {
        let graph: BTreeMap<&str, Vec<&str>> = edges
            .iter()
            .filter(|((l, _), _)| l == layer)
            .map(|((_, m), to)| (m.as_str(), to.iter().map(String::as_str).collect()))
            .collect();
        fn visit<'a>(
            node: &'a str,
            graph: &BTreeMap<&'a str, Vec<&'a str>>,
            stack: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
            circles: &mut Vec<String>,
        ) {
            if let Some(at) = stack.iter().position(|n| *n == node) {
                let mut circle = stack[at..].to_vec();
                circle.push(node);
                circles.push(circle.join(" -> "));
                return;
            }
            if !done.insert(node) {
                return;
            }
            stack.push(node);
            for next in graph.get(node).into_iter().flatten() {
                visit(next, graph, stack, done, circles);
            }
            stack.pop();
        }
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            let mut found = Vec::new();
            visit(node, &graph, &mut Vec::new(), &mut done, &mut found);
            circles.extend(found.into_iter().map(|c| format!("{layer}: {c}")));
        }
    }
    assert!(
        circles.is_empty(),
        "modules that import each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_nested_and_relative_imports() {
    let module = ["inbound".to_owned(), "server".to_owned(), "call".to_owned()];
    let text = "use super::{\n    Connector,\n};\nuse crate::{\n    mcp::{call::CallToken, payload},\n    outbound::service::X as Y,\n};\n/// see [`super::super::progress`]";
    let refs: BTreeSet<String> = references(&module, text)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    for expected in [
        "inbound::server::Connector",
        "mcp::call::CallToken",
        "mcp::payload",
        "outbound::service::X",
        "inbound::progress",
    ] {
        assert!(refs.contains(expected), "{expected} missing from {refs:?}");
    }
}
