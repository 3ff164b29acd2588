//! SPEC.md is normative only if every rule is checked: each rule must name at least one check,
//! and every named test must exist in the workspace. The rules are read as `list --rules` reads
//! them ([`rule_checks`], R-CNF-1), so the two never disagree on what a rule names.

use std::{collections::BTreeSet, path::Path};

use durable_mcp_conformance::scenario::rules::rule_checks;

fn rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() && !name.starts_with('.') && name != "target" {
            rust_sources(&path, out);
        } else if name.ends_with(".rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn every_rule_names_checks_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let spec = std::fs::read_to_string(root.join("SPEC.md")).unwrap();
    let rules = rule_checks(&spec, &[]);
    assert!(
        rules.len() >= 10,
        "SPEC.md lost its rules? found {}",
        rules.len()
    );
    // Every `###` heading is a rule, and each rule has one `Checked by:` line: of two, `list
    // --rules` would show only the last, and a reader would not know which one holds.
    let headings = spec.lines().filter(|l| l.starts_with("### ")).count();
    assert_eq!(
        headings,
        rules.len(),
        "a `###` heading of SPEC.md is not `### R-...`"
    );
    let lines = spec
        .lines()
        .filter(|l| l.starts_with("Checked by:"))
        .count();
    let mut sources = String::new();
    rust_sources(root, &mut sources);
    let mut seen = BTreeSet::new();
    for rule in &rules {
        let id = &rule.id;
        assert!(
            id.starts_with("R-") && id.split('-').count() == 3,
            "malformed rule id {id:?}"
        );
        assert!(seen.insert(id.clone()), "rule {id} is defined twice");
        assert!(!rule.tests.is_empty(), "rule {id} names no test");
        for check in &rule.tests {
            assert!(
                sources.contains(&format!("fn {check}(")),
                "rule {id} names `{check}`, but no test function of that name exists"
            );
        }
    }
    assert_eq!(
        lines,
        rules.len(),
        "every rule has exactly one `Checked by:` line"
    );
}
