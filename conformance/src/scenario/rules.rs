//! SPEC.md's rules and what checks each (`list --rules`, R-CNF-1): read from the rules'
//! `Checked by:` lines, and from the scenario files that cite them.

use super::{Scenario, spec_rule_scenarios};

/// One rule and its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChecks {
    /// `R-PRX-4`.
    pub id: String,
    /// The heading after the id.
    pub title: String,
    /// Test functions named on its `Checked by:` line.
    pub tests: Vec<String>,
    /// Scenarios that cite it.
    pub scenarios: Vec<String>,
    /// Why no scenario checks it, when the line says so.
    pub no_scenario: Option<String>,
}

/// Every `### R-...` rule of `spec_md` in order, with the tests its `Checked by:` line names
/// and the scenarios among `scenarios` that cite it.
pub fn rule_checks(spec_md: &str, scenarios: &[Scenario]) -> Vec<RuleChecks> {
    let listed = spec_rule_scenarios(spec_md);
    let mut out: Vec<RuleChecks> = Vec::new();
    for line in spec_md.lines() {
        if let Some(heading) = line.strip_prefix("### ")
            && heading.starts_with("R-")
        {
            let (id, title) = heading.split_once(':').unwrap_or((heading, ""));
            let id = id.trim().to_owned();
            let mut cited: Vec<String> = scenarios
                .iter()
                .filter(|s| s.rules.contains(&id))
                .map(|s| s.id.clone())
                .collect();
            if cited.is_empty() {
                cited = listed.get(&id).cloned().unwrap_or_default();
            }
            out.push(RuleChecks {
                id,
                title: title.trim().to_owned(),
                tests: Vec::new(),
                scenarios: cited,
                no_scenario: None,
            });
        } else if let (Some(checks), Some(rule)) =
            (line.strip_prefix("Checked by:"), out.last_mut())
        {
            let (tests, rest) = checks.split_once(';').unwrap_or((checks, ""));
            rule.tests = tests
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            rule.no_scenario = rest
                .trim()
                .strip_prefix("no scenario:")
                .map(|why| why.trim().to_owned());
        }
    }
    out
}

/// The text `list --rules` prints: each rule, then its tests and scenarios indented.
pub fn render(rules: &[RuleChecks]) -> String {
    let mut out = String::new();
    for r in rules {
        out.push_str(&format!("{}  {}\n", r.id, r.title));
        if !r.tests.is_empty() {
            out.push_str(&format!("    tests:     {}\n", r.tests.join(", ")));
        }
        match (&r.no_scenario, r.scenarios.is_empty()) {
            (_, false) => out.push_str(&format!("    scenarios: {}\n", r.scenarios.join(", "))),
            (Some(why), true) => out.push_str(&format!("    scenarios: none ({why})\n")),
            (None, true) => out.push_str("    scenarios: none\n"),
        }
    }
    out.push_str(&format!("{} rule(s)\n", rules.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "\
### R-AB-1: First rule
Text.
Checked by: `test_one`, `test_two`; scenarios fam/one, fam/two

### R-AB-2: Second rule
Checked by: `test_three`; no scenario: it needs a machine that dies
";

    #[test]
    fn rules_list_their_tests_and_scenarios() {
        let rules = rule_checks(SPEC, &[]);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].id, "R-AB-1");
        assert_eq!(rules[0].title, "First rule");
        assert_eq!(rules[0].tests, ["test_one", "test_two"]);
        assert_eq!(rules[0].scenarios, ["fam/one", "fam/two"]);
        assert_eq!(rules[1].tests, ["test_three"]);
        assert!(rules[1].scenarios.is_empty());
        assert_eq!(
            rules[1].no_scenario.as_deref(),
            Some("it needs a machine that dies")
        );
        let text = render(&rules);
        assert!(
            text.contains(
                "R-AB-2  Second rule\n    tests:     test_three\n    scenarios: none (it needs"
            ),
            "{text}"
        );
    }
}
