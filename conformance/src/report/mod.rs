//! Reporting: a progress line per scenario, a summary table, JUnit XML and JSON.

use std::{path::Path, time::Duration};

use anyhow::Context;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use crate::run::ScenarioResult;

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub server_version: String,
    #[serde(serialize_with = "ser_secs")]
    pub duration: Duration,
    pub passed: usize,
    pub failed: usize,
    /// Not run here (e.g. server restarts against an existing server); not counted as passed.
    pub skipped: usize,
    pub scenarios: Vec<ScenarioResult>,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl RunReport {
    pub fn new(server_version: String, duration: Duration, scenarios: Vec<ScenarioResult>) -> Self {
        let passed = scenarios.iter().filter(|r| r.passed).count();
        let failed = scenarios.iter().filter(|r| r.failed()).count();
        Self {
            server_version,
            duration,
            passed,
            failed,
            skipped: scenarios.len() - passed - failed,
            scenarios,
        }
    }

    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }

    /// The summary table, then each failure's message.
    pub fn summary(&self) -> String {
        let width = self
            .scenarios
            .iter()
            .map(|r| r.id.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let mut out = String::new();
        out.push_str(&format!(
            "{:<width$}  {:<6}  {:>8}  {}\n",
            "SCENARIO", "RESULT", "TIME", "RULES"
        ));
        for r in &self.scenarios {
            out.push_str(&format!(
                "{:<width$}  {:<6}  {:>8}  {}\n",
                r.id,
                verdict(r),
                fmt_duration(r.duration),
                r.rules.join(", ")
            ));
        }
        out.push_str(&format!(
            "\n{} passed, {} failed, {} skipped in {} (Temporal {})\n",
            self.passed,
            self.failed,
            self.skipped,
            fmt_duration(self.duration),
            self.server_version
        ));
        let sections = [
            (
                "Skipped",
                self.scenarios
                    .iter()
                    .filter(|r| r.skipped.is_some())
                    .collect::<Vec<_>>(),
            ),
            (
                "Failures",
                self.scenarios.iter().filter(|r| r.failed()).collect(),
            ),
        ];
        for (title, listed) in sections.iter().filter(|(_, l)| !l.is_empty()) {
            out.push_str(&format!("\n{title}:\n"));
            for r in listed {
                let why = r.skipped.as_deref().or(r.message.as_deref());
                out.push_str(&format!("  {}: {}\n", r.id, why.unwrap_or("failed")));
            }
        }
        out
    }

    /// JUnit XML: one test suite per family, one test case per scenario.
    pub fn junit(&self) -> anyhow::Result<String> {
        let mut report = Report::new("durable-mcp-conformance");
        report.set_time(self.duration);
        let mut families: Vec<&str> = self.scenarios.iter().map(|r| r.family.as_str()).collect();
        families.dedup();
        families.sort();
        families.dedup();
        for family in families {
            let mut suite = TestSuite::new(family);
            for r in self.scenarios.iter().filter(|r| r.family == family) {
                let status = if r.passed {
                    TestCaseStatus::success()
                } else if let Some(reason) = &r.skipped {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(reason.clone());
                    s
                } else {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(r.message.clone().unwrap_or_default());
                    s.set_type(r.rules.join(","));
                    s.set_description(r.steps.join("\n"));
                    s
                };
                let mut case = TestCase::new(r.id.clone(), status);
                case.set_classname(format!("conformance.{family}"));
                case.set_time(r.duration);
                case.set_system_out(r.steps.join("\n"));
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
        Ok(report.to_string()?)
    }

    pub fn write_junit(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.junit()?).with_context(|| format!("writing {}", path.display()))
    }

    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// The progress line printed when a scenario finishes.
pub fn progress_line(r: &ScenarioResult) -> String {
    let mut line = format!(
        "{} {} ({})",
        verdict(r).to_ascii_uppercase(),
        r.id,
        fmt_duration(r.duration)
    );
    if let Some(m) = r.message.as_ref().or(r.skipped.as_ref()) {
        line.push_str(&format!("\n     {m}"));
    }
    line
}

/// `pass`, `FAIL` or `skip`.
fn verdict(r: &ScenarioResult) -> &'static str {
    if r.passed {
        "pass"
    } else if r.skipped.is_some() {
        "skip"
    } else {
        "FAIL"
    }
}

pub fn fmt_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
