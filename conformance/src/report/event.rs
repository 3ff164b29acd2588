//! The report model: a run is a stream of [`Event`]s (as nextest's reporter has), whatever runs
//! it. Bundled scenarios and third-party checks emit the same events; one [`Recorder`] folds
//! them into a [`RunRecord`], from which the live progress lines, the summary, JUnit and JSON
//! are all rendered (R-CNF-10). Nothing else writes a report.

use std::time::Duration;

use serde::Serialize;

use super::case_outcome::{CaseOutcome, Counts, Verdict};

/// What kind of run emits the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// The bundled scenarios (`scenarios/`).
    Bundled,
    /// Checks of a third-party MCP server (`--upstream-stdio`, `--upstream-http`).
    ThirdParty,
    /// The official MCP conformance suite's scenarios through the durable path (`official`).
    Official,
    /// The chaos run's checks over its history (R-CNF-24).
    Chaos,
    /// The wire fuzzer (`fuzz`, R-CNF-26).
    Fuzz,
}

impl RunKind {
    /// The JUnit report name and the classname prefix of its cases.
    fn junit_names(self) -> (&'static str, &'static str) {
        match self {
            RunKind::Bundled => ("durable-mcp-conformance", "conformance"),
            RunKind::ThirdParty => ("durable-mcp-conformance third-party", "third-party"),
            RunKind::Official => ("durable-mcp-conformance official", "official"),
            RunKind::Chaos => ("durable-mcp-conformance chaos", "chaos"),
            RunKind::Fuzz => ("durable-mcp-conformance fuzz", "fuzz"),
        }
    }
}

/// One thing that happened in a run, in order.
#[derive(Debug, Clone)]
pub enum Event {
    /// The run began. `planned` names the cases known up front, in the order reports list
    /// them (bundled runs; a third-party run discovers its checks as it goes).
    Started {
        kind: RunKind,
        /// What ran against what: `Temporal 1.32.0 at 127.0.0.1:7233`, `stdio: node x.js`.
        target: String,
        planned: Vec<String>,
    },
    /// A case finished (passed, failed or was skipped).
    Finished(CaseOutcome),
    /// The run ended after `duration`.
    Ended { duration: Duration },
}

/// The live progress line for an event, if it prints one: `PASS name (1.2 s)` as each case
/// finishes, with the reason under a failure or a skip (the run's header and the summary are
/// printed around them).
pub fn progress_line(event: &Event) -> Option<String> {
    match event {
        Event::Finished(outcome) => Some(super::case_outcome::progress_line(outcome)),
        Event::Started { .. } | Event::Ended { .. } => None,
    }
}

/// Folds events into a [`RunRecord`].
#[derive(Debug, Default)]
pub struct Recorder {
    kind: Option<RunKind>,
    target: String,
    planned: Vec<String>,
    outcomes: Vec<CaseOutcome>,
    duration: Option<Duration>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in one event.
    pub fn on(&mut self, event: &Event) {
        match event {
            Event::Started {
                kind,
                target,
                planned,
            } => {
                self.kind = Some(*kind);
                self.target = target.clone();
                self.planned = planned.clone();
            }
            Event::Finished(outcome) => self.outcomes.push(outcome.clone()),
            Event::Ended { duration } => self.duration = Some(*duration),
        }
    }

    /// What `run` does with each event: prints its progress line (stdout), then records it.
    pub fn print_and_record(&mut self, event: Event) {
        if let Some(line) = progress_line(&event) {
            println!("{line}");
        }
        self.on(&event);
    }

    /// The run so far: cases in planned order (then unplanned ones as they came), so reports
    /// do not depend on which parallel case finished first.
    pub fn record(&self) -> RunRecord {
        let position = |o: &CaseOutcome| {
            self.planned
                .iter()
                .position(|p| *p == o.name)
                .unwrap_or(usize::MAX)
        };
        let mut cases = self.outcomes.clone();
        cases.sort_by_key(position);
        RunRecord {
            kind: self.kind.unwrap_or(RunKind::Bundled),
            target: self.target.clone(),
            duration: self.duration,
            counts: Counts::of(&cases),
            cases,
        }
    }
}

/// A finished run, as every report renders it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub kind: RunKind,
    pub target: String,
    pub duration: Option<Duration>,
    pub counts: Counts,
    pub cases: Vec<CaseOutcome>,
}

impl RunRecord {
    /// A record of `events` (for a run already over, and in tests).
    pub fn of(events: &[Event]) -> Self {
        let mut recorder = Recorder::new();
        for event in events {
            recorder.on(event);
        }
        recorder.record()
    }

    pub fn all_passed(&self) -> bool {
        self.counts.failed == 0
    }

    pub fn case(&self, name: &str) -> Option<&CaseOutcome> {
        self.cases.iter().find(|c| c.name == name)
    }

    /// The summary: a table (case, result, time, and the rules a scenario checks or what a
    /// check saw), the counts, then each skip's and failure's reason.
    pub fn summary(&self) -> String {
        let width = self
            .cases
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!(
            "{:<width$}  {:<6}  {:>8}  {}\n",
            "CASE", "RESULT", "TIME", "RULES / DETAIL"
        );
        for c in &self.cases {
            let result = match c.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail(_) => "FAIL",
                Verdict::Skip(_) => "skip",
            };
            let time = c.duration.map(super::fmt_duration).unwrap_or_default();
            let note = if c.rules.is_empty() {
                c.output.lines().next().unwrap_or_default().to_owned()
            } else {
                c.rules.join(", ")
            };
            out.push_str(format!("{:<width$}  {result:<6}  {time:>8}  {note}", c.name).trim_end());
            out.push('\n');
        }
        out.push_str(&format!("\n{}", self.counts));
        if let Some(d) = self.duration {
            out.push_str(&format!(" in {}", super::fmt_duration(d)));
        }
        out.push_str(&format!(" ({})\n", self.target));
        for (title, skipped) in [("Skipped", true), ("Failures", false)] {
            let listed: Vec<(&str, &str)> = self
                .cases
                .iter()
                .filter_map(|c| match (&c.verdict, skipped) {
                    (Verdict::Skip(why), true) | (Verdict::Fail(why), false) => {
                        Some((c.name.as_str(), why.as_str()))
                    }
                    _ => None,
                })
                .collect();
            if !listed.is_empty() {
                out.push_str(&format!("\n{title}:\n"));
                for (name, why) in listed {
                    out.push_str(&format!("  {name}: {why}\n"));
                }
            }
        }
        out
    }

    /// JUnit XML: one suite per family or kind of check, one case each.
    pub fn junit(&self) -> anyhow::Result<String> {
        let (report, prefix) = self.kind.junit_names();
        super::case_outcome::junit(report, prefix, &self.cases, self.duration)
    }

    /// The JSON report: the same fields for both kinds of run.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind,
            "target": self.target,
            "duration_secs": self.duration.map(|d| d.as_secs_f64()),
            "passed": self.counts.passed,
            "failed": self.counts.failed,
            "skipped": self.counts.skipped,
            "cases": self.cases.iter().map(CaseOutcome::json).collect::<Vec<_>>(),
        })
    }

    /// Writes JUnit and JSON where asked, saying where.
    pub fn write(
        &self,
        junit: Option<&std::path::Path>,
        json: Option<&std::path::Path>,
    ) -> anyhow::Result<()> {
        use anyhow::Context as _;
        if let Some(path) = junit {
            std::fs::write(path, self.junit()?)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("JUnit report: {}", path.display());
        }
        if let Some(path) = json {
            let mut text = serde_json::to_string_pretty(&self.json())?;
            text.push('\n');
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("JSON report: {}", path.display());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small bundled run whose cases finish out of planned order, one of each verdict.
    fn events() -> Vec<Event> {
        let case = |name: &str, verdict, ms, rules: &[&str], output: &str| {
            Event::Finished(CaseOutcome {
                name: name.into(),
                suite: name.split('/').next().unwrap().into(),
                verdict,
                duration: Some(Duration::from_millis(ms)),
                rules: rules.iter().map(|r| (*r).to_owned()).collect(),
                output: output.into(),
            })
        };
        vec![
            Event::Started {
                kind: RunKind::Bundled,
                target: "Temporal 1.32.0 at 127.0.0.1:7233".into(),
                planned: vec![
                    "faults/server-restart".into(),
                    "fidelity/snapshot".into(),
                    "retry/flaky".into(),
                ],
            },
            case(
                "retry/flaky",
                Verdict::Fail("R-PRX-4 violated: expected 1 invocation, saw 2".into()),
                3400,
                &["R-PRX-4"],
                "step 1 (call flaky): result\nstep 2 (expect): 2 invocations",
            ),
            case(
                "faults/server-restart",
                Verdict::Skip("restarts the server; not against an existing one".into()),
                0,
                &["R-HAR-4"],
                "",
            ),
            case(
                "fidelity/snapshot",
                Verdict::Pass,
                570,
                &["R-PRX-9", "R-CNF-9"],
                "step 1 (call everything): result, matches snapshot mock_everything_result",
            ),
            Event::Ended {
                duration: Duration::from_millis(4100),
            },
        ]
    }

    #[test]
    fn junit_of_a_small_event_stream() {
        let xml = RunRecord::of(&events()).junit().unwrap();
        insta::assert_snapshot!("report_junit", xml);
    }

    #[test]
    fn json_of_a_small_event_stream() {
        insta::assert_json_snapshot!("report_json", RunRecord::of(&events()).json());
    }

    #[test]
    fn summary_and_progress_of_a_small_event_stream() {
        let events = events();
        let progress: Vec<String> = events.iter().filter_map(progress_line).collect();
        let record = RunRecord::of(&events);
        insta::assert_snapshot!(
            "report_summary",
            format!("{}\n---\n{}", progress.join("\n"), record.summary())
        );
        assert!(!record.all_passed());
        assert_eq!(
            record.case("retry/flaky").map(|c| &c.verdict),
            Some(&Verdict::Fail(
                "R-PRX-4 violated: expected 1 invocation, saw 2".into()
            ))
        );
    }

    #[test]
    fn a_third_party_stream_keeps_its_order_and_names() {
        let check = |name: &str, verdict| {
            Event::Finished(CaseOutcome {
                name: name.into(),
                suite: name.split('/').next().unwrap().into(),
                verdict,
                duration: None,
                rules: vec![],
                output: format!("{name} detail"),
            })
        };
        let record = RunRecord::of(&[
            Event::Started {
                kind: RunKind::ThirdParty,
                target: "stdio: node server.js".into(),
                planned: vec![],
            },
            check("discovery", Verdict::Pass),
            check("fidelity/b", Verdict::Pass),
            check("fidelity/a", Verdict::Skip("not read-only".into())),
        ]);
        let names: Vec<&str> = record.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["discovery", "fidelity/b", "fidelity/a"]);
        let xml = record.junit().unwrap();
        assert!(xml.contains(r#"classname="third-party.fidelity""#), "{xml}");
        assert!(record.summary().contains("fidelity/b detail"));
        assert_eq!(record.json()["kind"], "third-party");
    }
}
