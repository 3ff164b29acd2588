//! Reporting: a progress line per scenario, a summary table, JUnit XML and JSON.

use std::{path::Path, time::Duration};

use anyhow::Context;
use serde::Serialize;

use crate::run::ScenarioResult;

mod outcome;
pub use outcome::{Counts, Outcome, Verdict, junit, progress_line as outcome_progress_line};

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
        let counts = Counts::of(&scenarios.iter().map(scenario_outcome).collect::<Vec<_>>());
        Self {
            server_version,
            duration,
            passed: counts.passed,
            failed: counts.failed,
            skipped: counts.skipped,
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

    /// Each scenario as an [`Outcome`], the model the JUnit writer shares with third-party runs.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.scenarios.iter().map(scenario_outcome).collect()
    }

    /// JUnit XML: one test suite per family, one test case per scenario.
    pub fn junit(&self) -> anyhow::Result<String> {
        outcome::junit(
            "durable-mcp-conformance",
            "conformance",
            &self.outcomes(),
            Some(self.duration),
        )
    }

    pub fn write_junit(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.junit()?).with_context(|| format!("writing {}", path.display()))
    }

    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// A scenario's result as an [`Outcome`].
pub fn scenario_outcome(r: &ScenarioResult) -> Outcome {
    Outcome {
        name: r.id.clone(),
        suite: r.family.clone(),
        verdict: if r.passed {
            Verdict::Pass
        } else if let Some(why) = &r.skipped {
            Verdict::Skip(why.clone())
        } else {
            Verdict::Fail(r.message.clone().unwrap_or_default())
        },
        duration: Some(r.duration),
        kind: Some(r.rules.join(",")),
        output: r.steps.join("\n"),
    }
}

/// The progress line printed when a scenario finishes.
pub fn progress_line(r: &ScenarioResult) -> String {
    outcome::progress_line(&scenario_outcome(r))
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
