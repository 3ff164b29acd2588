//! The one test-case model both kinds of run report through: a bundled scenario and a
//! third-party check each become a [`CaseOutcome`] (carried by `Event::Finished`), and one JUnit
//! writer renders them.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// How a test case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Ran and broke an expectation; why.
    Fail(String),
    /// Did not run here; why. Neither a pass nor a failure.
    Skip(String),
}

/// One finished test case.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// `retry-inference/read-only-flaky-is-retried`, `fidelity/get-sum`.
    pub name: String,
    /// The JUnit suite it belongs to (scenario family, check kind).
    pub suite: String,
    pub verdict: Verdict,
    pub duration: Option<Duration>,
    /// The SPEC rules a scenario checks (a failure's JUnit type); empty for third-party checks.
    pub rules: Vec<String>,
    /// Step log or detail, kept as the case's system-out.
    pub output: String,
}

impl CaseOutcome {
    /// The case in the JSON report.
    pub fn json(&self) -> serde_json::Value {
        let (status, reason) = match &self.verdict {
            Verdict::Pass => ("pass", None),
            Verdict::Fail(why) => ("fail", Some(why)),
            Verdict::Skip(why) => ("skip", Some(why)),
        };
        serde_json::json!({
            "name": self.name,
            "suite": self.suite,
            "status": status,
            "reason": reason,
            "duration_secs": self.duration.map(|d| d.as_secs_f64()),
            "rules": self.rules,
            "output": self.output.lines().collect::<Vec<_>>(),
        })
    }
}

/// The line printed as a test case finishes: `PASS name (1.2 s)`, then the reason indented.
pub fn progress_line(o: &CaseOutcome) -> String {
    let (tag, why) = match &o.verdict {
        Verdict::Pass => ("PASS", None),
        Verdict::Fail(why) => ("FAIL", Some(why)),
        Verdict::Skip(why) => ("SKIP", Some(why)),
    };
    let mut line = format!("{tag} {}", o.name);
    if let Some(d) = o.duration {
        line.push_str(&format!(" ({})", super::fmt_duration(d)));
    }
    if let Some(why) = why.filter(|w| !w.is_empty()) {
        line.push_str(&format!("\n     {why}"));
    }
    line
}

/// How many passed, failed and were skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Counts {
    pub fn of(outcomes: &[CaseOutcome]) -> Self {
        let mut c = Self::default();
        for o in outcomes {
            match o.verdict {
                Verdict::Pass => c.passed += 1,
                Verdict::Fail(_) => c.failed += 1,
                Verdict::Skip(_) => c.skipped += 1,
            }
        }
        c
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// JUnit XML named `report`: one suite per [`CaseOutcome::suite`] (in first-seen order), one case
/// each, classnames `<prefix>.<suite>`.
pub fn junit(
    report: &str,
    prefix: &str,
    outcomes: &[CaseOutcome],
    time: Option<Duration>,
) -> anyhow::Result<String> {
    let mut out = Report::new(report);
    if let Some(t) = time {
        out.set_time(t);
    }
    let mut suites: Vec<&str> = Vec::new();
    for o in outcomes {
        if !suites.contains(&o.suite.as_str()) {
            suites.push(&o.suite);
        }
    }
    for name in suites {
        let mut suite = TestSuite::new(name);
        for o in outcomes.iter().filter(|o| o.suite == name) {
            let status = match &o.verdict {
                Verdict::Pass => TestCaseStatus::success(),
                Verdict::Fail(why) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(why.as_str());
                    if !o.rules.is_empty() {
                        s.set_type(o.rules.join(", "));
                    }
                    s.set_description(o.output.as_str());
                    s
                }
                Verdict::Skip(why) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(why.as_str());
                    s
                }
            };
            let mut case = TestCase::new(o.name.as_str(), status);
            case.set_classname(format!("{prefix}.{name}"));
            if let Some(d) = o.duration {
                case.set_time(d);
            }
            if !o.output.is_empty() {
                case.set_system_out(o.output.as_str());
            }
            suite.add_test_case(case);
        }
        out.add_test_suite(suite);
    }
    Ok(out.to_string()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_suite_per_group_with_reasons_and_skips() {
        let case = |name: &str, suite: &str, verdict| CaseOutcome {
            name: name.into(),
            suite: suite.into(),
            verdict,
            duration: Some(Duration::from_millis(1500)),
            rules: vec!["R-PRX-4".into()],
            output: "step 1: ok".into(),
        };
        let xml = junit(
            "run",
            "conformance",
            &[
                case("b/one", "b", Verdict::Pass),
                case("a/two", "a", Verdict::Fail("expected 1, saw 2".into())),
                case("b/three", "b", Verdict::Skip("restarts the server".into())),
            ],
            None,
        )
        .unwrap();
        assert!(xml.contains(r#"<testsuite name="b" tests="2""#), "{xml}");
        assert!(xml.contains(r#"disabled="1""#), "{xml}");
        assert!(
            xml.contains("expected 1, saw 2") && xml.contains("R-PRX-4"),
            "{xml}"
        );
        assert!(xml.contains("restarts the server"), "{xml}");
        assert!(xml.contains(r#"classname="conformance.a""#), "{xml}");
        assert!(
            xml.find(r#"name="b""#) < xml.find(r#"name="a""#),
            "first-seen order"
        );
    }
}
