//! The third-party checks as they are made. Each becomes a [`CaseOutcome`] (an `Event::Finished`),
//! and the summary, JUnit and JSON come from the one report model in `crate::report`.

use std::fmt;

use serde::Serialize;

use crate::report::{CaseOutcome, Event, RunKind, RunRecord, Verdict};

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
    /// `reattachment/<tool>`, `tasks-and-input`.
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

impl Check {
    /// This check as a [`CaseOutcome`] (progress lines, counts and JUnit for both kinds of run).
    pub fn outcome(&self) -> CaseOutcome {
        CaseOutcome {
            name: self.name.clone(),
            suite: self.kind().to_owned(),
            verdict: match &self.status {
                Status::Pass => Verdict::Pass,
                Status::Fail(why) => Verdict::Fail(why.clone()),
                Status::Skipped(why) => Verdict::Skip(why.clone()),
            },
            duration: None,
            rules: Vec::new(),
            output: self.detail.clone(),
        }
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
        self.record().all_passed()
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

    /// The checks as the report model records them (the events a run emits).
    pub fn record(&self) -> RunRecord {
        let started = Event::Started {
            kind: RunKind::ThirdParty,
            target: self.upstream.clone(),
            planned: Vec::new(),
        };
        let finished = self.checks.iter().map(|c| Event::Finished(c.outcome()));
        RunRecord::of(&std::iter::once(started).chain(finished).collect::<Vec<_>>())
    }

    /// The printed summary ([`RunRecord::summary`]).
    pub fn render(&self) -> String {
        self.record().summary()
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
        let xml = r.record().junit().unwrap();
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
