//! The third-party report: one line per check (pass, FAIL or skipped, with why), as text,
//! JSON or JUnit.

use std::fmt;

use serde::Serialize;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail(String),
    Skipped(String),
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `discovery`, `retry-policy/<tool>`, `fidelity/<tool>`, `cancellation/<tool>`,
    /// `reattachment/<tool>`.
    pub name: String,
    pub status: Status,
    /// What was seen (for a pass, or extra context).
    pub detail: String,
}

impl Check {
    /// The part before the first `/`: the check's kind.
    pub fn kind(&self) -> &str {
        self.name.split('/').next().unwrap_or(&self.name)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Status::Pass => write!(f, "pass     {}: {}", self.name, self.detail),
            Status::Fail(why) => write!(f, "FAIL     {}: {why}", self.name),
            Status::Skipped(why) => write!(f, "skipped  {}: {why}", self.name),
        }
    }
}

/// A third-party run.
#[derive(Debug, Clone, Serialize)]
pub struct ThirdPartyReport {
    pub upstream: String,
    pub checks: Vec<Check>,
}

impl ThirdPartyReport {
    pub fn new(upstream: String) -> Self {
        Self {
            upstream,
            checks: Vec::new(),
        }
    }

    pub fn all_passed(&self) -> bool {
        !self
            .checks
            .iter()
            .any(|c| matches!(c.status, Status::Fail(_)))
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    pub fn push(&mut self, name: impl Into<String>, status: Status, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            status,
            detail: detail.into(),
        });
    }

    /// The printed report: one line per check, then totals.
    pub fn render(&self) -> String {
        let mut out = format!("third-party upstream ({})\n", self.upstream);
        for c in &self.checks {
            out.push_str(&format!("  {c}\n"));
        }
        let count = |f: fn(&Status) -> bool| self.checks.iter().filter(|c| f(&c.status)).count();
        out.push_str(&format!(
            "{} passed, {} failed, {} skipped\n",
            count(|s| matches!(s, Status::Pass)),
            count(|s| matches!(s, Status::Fail(_))),
            count(|s| matches!(s, Status::Skipped(_))),
        ));
        out
    }

    /// JUnit XML: one suite per kind of check, one test case per check.
    pub fn junit(&self) -> anyhow::Result<String> {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut report = Report::new("durable-mcp-conformance third-party");
        let mut kinds: Vec<&str> = self.checks.iter().map(Check::kind).collect();
        kinds.dedup();
        let mut seen = std::collections::BTreeSet::new();
        for kind in kinds.into_iter().filter(|k| seen.insert(*k)) {
            let mut suite = TestSuite::new(kind);
            for c in self.checks.iter().filter(|c| c.kind() == kind) {
                let status = match &c.status {
                    Status::Pass => TestCaseStatus::success(),
                    Status::Fail(why) => {
                        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        s.set_message(why.as_str());
                        s
                    }
                    Status::Skipped(why) => {
                        let mut s = TestCaseStatus::skipped();
                        s.set_message(why.as_str());
                        s
                    }
                };
                let mut case = TestCase::new(c.name.as_str(), status);
                case.set_classname(format!("third-party.{kind}"));
                if !c.detail.is_empty() {
                    case.set_system_out(c.detail.as_str());
                }
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
        Ok(report.to_string()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_has_a_suite_per_kind_and_keeps_reasons() {
        let mut r = ThirdPartyReport::new("stdio: x".into());
        r.push("discovery", Status::Pass, "2 tools");
        r.push("fidelity/a", Status::Pass, "equal");
        r.push(
            "fidelity/b",
            Status::Fail("results differ at /x".into()),
            "",
        );
        r.push(
            "cancellation/c",
            Status::Skipped("no --cancel-tool".into()),
            "",
        );
        let xml = r.junit().unwrap();
        assert!(
            xml.contains(r#"<testsuite name="fidelity" tests="2""#),
            "{xml}"
        );
        assert!(xml.contains("results differ at /x"), "{xml}");
        assert!(xml.contains("no --cancel-tool"), "{xml}");
        assert!(!r.all_passed());
        assert!(r.render().contains("2 passed, 1 failed, 1 skipped"));
    }
}
