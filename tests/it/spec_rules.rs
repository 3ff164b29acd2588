//! SPEC.md is normative only if every rule is checked: each rule must name at least one check,
//! and every named test must exist in the workspace.

use std::{collections::BTreeSet, path::Path};

/// (rule id, named checks) for every `### R-...` heading.
fn rules(spec: &str) -> Vec<(String, Vec<String>)> {
    let mut rules: Vec<(String, Vec<String>)> = Vec::new();
    for line in spec.lines() {
        if let Some(rest) = line.strip_prefix("### ") {
            let id = rest.split(':').next().unwrap_or_default().trim().to_owned();
            rules.push((id, Vec::new()));
        } else if let Some(checks) = line.strip_prefix("Checked by:") {
            let (_, names) = rules.last_mut().expect("`Checked by` before any rule");
            names.extend(checks.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    rules
}

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
    let rules = rules(&spec);
    assert!(
        rules.len() >= 10,
        "SPEC.md lost its rules? found {}",
        rules.len()
    );
    let mut sources = String::new();
    rust_sources(root, &mut sources);
    let mut seen = BTreeSet::new();
    for (id, checks) in &rules {
        assert!(
            id.starts_with("R-") && id.split('-').count() == 3,
            "malformed rule id {id:?}"
        );
        assert!(seen.insert(id.clone()), "rule {id} is defined twice");
        assert!(!checks.is_empty(), "rule {id} names no test or scenario");
        for check in checks {
            assert!(
                sources.contains(&format!("fn {check}(")),
                "rule {id} names `{check}`, but no test function of that name exists"
            );
        }
    }
}
