//! The chaos run's report (R-CNF-24): faults by kind with their recovery times, calls by kind
//! and outcome, lost and duplicated calls, each unknown outcome with the fault that explains
//! it, throughput with and without faults in force, and the checks as cases of the runner's
//! one report model (R-CNF-10), so JUnit and JSON come out as for every other run.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use serde::Serialize;

use super::{
    checker::Verdict,
    history::{Call, CallKind, End, FaultKind, FaultRecord, History},
    schedule::Planned,
};
use crate::report::{CaseOutcome, Event, RunKind, Verdict as CaseVerdict};

/// How fast the calls it touches came back after one kind of fault healed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Recovery {
    pub applied: usize,
    /// Faults after whose heal a call it touches succeeded (the others had none to show).
    pub observed: usize,
    pub p50_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

/// Calls answered with their result per second, with a fault in force and without.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Throughput {
    pub with_faults_per_s: f64,
    pub faulted_s: u64,
    pub without_faults_per_s: f64,
    pub quiet_s: u64,
}

/// Everything the run reports.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    /// The command that replays the run (the same seed, duration, pace and faults).
    pub replay: String,
    pub machine: String,
    pub build: &'static str,
    pub duration_s: f64,
    pub concurrency: usize,
    pub schedule: Vec<Planned>,
    pub skipped: Vec<(Planned, String)>,
    pub overlapping: usize,
    /// Calls by kind, then by how they ended.
    pub outcomes: BTreeMap<String, BTreeMap<String, usize>>,
    pub lost: usize,
    pub duplicated: usize,
    pub recovery: BTreeMap<String, Recovery>,
    pub throughput: Throughput,
    pub checks: Vec<CheckJson>,
    pub history: History,
}

/// A check in the JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct CheckJson {
    pub check: &'static str,
    pub promise: &'static str,
    pub passed: bool,
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

/// The time after `f` healed until a call it touches was next answered with its result.
pub fn recovery_ms(f: &FaultRecord, calls: &[Call]) -> Option<u64> {
    let healed = f.healed_ms?;
    calls
        .iter()
        .filter(|c| c.end == End::Ok && f.kind.touches(f.target, c))
        .filter_map(|c| c.ended_ms.filter(|e| *e >= healed))
        .min()
        .map(|e| e - healed)
}

/// The nearest-rank percentile of `values` (sorted here).
fn percentile(values: &mut [u64], p: f64) -> Option<u64> {
    values.sort_unstable();
    let sorted: Vec<Duration> = values.iter().map(|v| Duration::from_millis(*v)).collect();
    (!sorted.is_empty()).then(|| crate::load::measure::percentile(&sorted, p).as_millis() as u64)
}

/// Recovery per fault kind.
pub fn recoveries(faults: &[FaultRecord], calls: &[Call]) -> BTreeMap<String, Recovery> {
    let mut out = BTreeMap::new();
    for kind in FaultKind::ALL {
        let of_kind: Vec<&FaultRecord> = faults.iter().filter(|f| f.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut times: Vec<u64> = of_kind
            .iter()
            .filter_map(|f| recovery_ms(f, calls))
            .collect();
        out.insert(
            kind.name().to_owned(),
            Recovery {
                applied: of_kind.len(),
                observed: times.len(),
                p50_ms: percentile(&mut times, 50.0),
                p99_ms: percentile(&mut times, 99.0),
            },
        );
    }
    out
}

/// Calls answered with their result per second of the run, in the seconds some fault was in
/// force and in the others.
pub fn throughput(calls: &[Call], faults: &[FaultRecord], run_ms: u64) -> Throughput {
    let seconds = run_ms.div_ceil(1000).max(1);
    let faulted = |s: u64| {
        faults
            .iter()
            .any(|f| f.active_at(s * 1000) || f.active_at(s * 1000 + 999))
    };
    let (mut with, mut without) = (0u64, 0u64);
    for ended in calls
        .iter()
        .filter(|c| c.end == End::Ok)
        .filter_map(|c| c.ended_ms)
        .filter(|e| *e < run_ms)
    {
        if faulted(ended / 1000) {
            with += 1;
        } else {
            without += 1;
        }
    }
    let faulted_s = (0..seconds).filter(|s| faulted(*s)).count() as u64;
    let quiet_s = seconds - faulted_s;
    let rate = |n: u64, s: u64| if s == 0 { 0.0 } else { n as f64 / s as f64 };
    Throughput {
        with_faults_per_s: rate(with, faulted_s),
        faulted_s,
        without_faults_per_s: rate(without, quiet_s),
        quiet_s,
    }
}

/// Calls by kind, then by how they ended.
pub fn outcomes(calls: &[Call]) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for call in calls {
        *out.entry(call.kind.name().to_owned())
            .or_default()
            .entry(call.end.label().to_owned())
            .or_default() += 1;
    }
    out
}

const OUTCOME_COLUMNS: [&str; 6] = [
    "ok",
    "tool error",
    "error",
    "cancelled",
    "unknown",
    "unanswered",
];

impl ChaosReport {
    /// The text report: the tables, the unknown outcomes, the checks, and on a failure the
    /// fault schedule and the command that replays it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "CHAOS RUN  seed {}, {:.0} s of faults and calls at concurrency {}, {} build, {}",
            self.seed, self.duration_s, self.concurrency, self.build, self.machine
        );
        let _ = writeln!(out, "replay:    {}\n", self.replay);
        self.render_faults(&mut out);
        self.render_calls(&mut out);
        let t = &self.throughput;
        let _ = writeln!(
            out,
            "throughput: {:.2} calls/s answered with their result while a fault was in force \
             ({} s), {:.2} without ({} s)\n",
            t.with_faults_per_s, t.faulted_s, t.without_faults_per_s, t.quiet_s
        );
        let unknowns: Vec<&String> = self
            .checks
            .iter()
            .filter(|c| c.check == "unknowns-explained")
            .flat_map(|c| c.notes.iter())
            .collect();
        let _ = writeln!(
            out,
            "UNKNOWN OUTCOMES ({}), each with what explains it:",
            unknowns.len()
        );
        for line in unknowns.iter().take(40) {
            let _ = writeln!(out, "  {line}");
        }
        if unknowns.len() > 40 {
            let _ = writeln!(out, "  ... {} more in the JSON report", unknowns.len() - 40);
        }
        let _ = writeln!(out, "\nCHECKS");
        for c in &self.checks {
            let tag = if c.passed { "pass" } else { "FAIL" };
            let _ = writeln!(out, "  {tag}  {:<20} {}", c.check, c.promise);
            for line in c.failures.iter().take(20) {
                let _ = writeln!(out, "        {line}");
            }
        }
        if self.checks.iter().any(|c| !c.passed) {
            let _ = writeln!(
                out,
                "\nFAILED. Seed {}; the fault schedule below replays with: {}",
                self.seed, self.replay
            );
            for p in &self.schedule {
                let _ = writeln!(out, "  {p}");
            }
        }
        out
    }

    fn render_faults(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<20} {:>7} {:>7} {:>8} {:>13} {:>13}",
            "FAULT", "PLANNED", "APPLIED", "SKIPPED", "RECOVERY p50", "RECOVERY p99"
        );
        let ms = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.2} s", v as f64 / 1000.0));
        for kind in FaultKind::ALL {
            let planned = self.schedule.iter().filter(|p| p.kind == kind).count();
            if planned == 0 {
                continue;
            }
            let skipped = self.skipped.iter().filter(|(p, _)| p.kind == kind).count();
            let r = self.recovery.get(kind.name()).cloned().unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<20} {planned:>7} {:>7} {skipped:>8} {:>13} {:>13}",
                kind.name(),
                r.applied,
                ms(r.p50_ms),
                ms(r.p99_ms)
            );
        }
        let applied: usize = self.recovery.values().map(|r| r.applied).sum();
        let _ = writeln!(
            out,
            "{applied} faults applied, {} of the planned began while another held\n",
            self.overlapping
        );
    }

    fn render_calls(&self, out: &mut String) {
        let _ = write!(out, "{:<18}", "CALLS");
        for c in OUTCOME_COLUMNS {
            let _ = write!(out, " {c:>10}");
        }
        let _ = writeln!(out);
        let mut total = 0;
        for kind in CallKind::ALL {
            let Some(row) = self.outcomes.get(kind.name()) else {
                continue;
            };
            let _ = write!(out, "{:<18}", kind.name());
            for c in OUTCOME_COLUMNS {
                let n = row.get(c).copied().unwrap_or(0);
                total += n;
                let _ = write!(out, " {n:>10}");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "{total} calls; lost {}, duplicated {} (both must be 0)\n",
            self.lost, self.duplicated
        );
    }

    /// The checks as the report model's events (R-CNF-10): one case per check.
    pub fn events(&self, target: String, duration: Duration) -> Vec<Event> {
        let mut events = vec![Event::Started {
            kind: RunKind::Chaos,
            target,
            planned: self
                .checks
                .iter()
                .map(|c| format!("chaos/{}", c.check))
                .collect(),
        }];
        for c in &self.checks {
            let verdict = match c.failures.first() {
                None => CaseVerdict::Pass,
                Some(first) if c.failures.len() == 1 => CaseVerdict::Fail(first.clone()),
                Some(first) => {
                    CaseVerdict::Fail(format!("{first} (and {} more)", c.failures.len() - 1))
                }
            };
            let mut output = vec![c.promise.to_owned()];
            output.extend(c.failures.iter().cloned());
            output.extend(c.notes.iter().cloned());
            events.push(Event::Finished(CaseOutcome {
                name: format!("chaos/{}", c.check),
                suite: "chaos".into(),
                verdict,
                duration: None,
                rules: vec!["R-CNF-24".into()],
                output: output.join("\n"),
            }));
        }
        events.push(Event::Ended { duration });
        events
    }
}

/// The checks in the JSON report's form.
pub fn checks_json(verdicts: &[Verdict]) -> Vec<CheckJson> {
    verdicts
        .iter()
        .map(|v| CheckJson {
            check: v.check,
            promise: v.promise,
            passed: v.passed(),
            failures: v.failures.clone(),
            notes: v.notes.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::history::Service;
    use super::*;

    fn ok_call(id: usize, service: Service, ended: u64) -> Call {
        Call {
            id,
            kind: CallKind::Read,
            service,
            tool: "h_echo".into(),
            key: format!("k{id}"),
            arguments: serde_json::json!({}),
            keyed: false,
            started_ms: ended.saturating_sub(10),
            ended_ms: Some(ended),
            end: End::Ok,
            replicas: vec![0],
            issues: 1,
            run: None,
            result: None,
        }
    }

    fn fault(kind: FaultKind, started: u64, healed: u64) -> FaultRecord {
        FaultRecord {
            kind,
            target: 0,
            started_ms: started,
            healed_ms: Some(healed),
        }
    }

    #[test]
    fn recovery_is_the_first_success_on_the_faults_path_after_its_heal() {
        let calls = vec![
            ok_call(1, Service::Http, 900),
            ok_call(2, Service::Stdio, 1_100),
            ok_call(3, Service::Http, 1_400),
        ];
        // A relay fault touches HTTP calls only: the stdio success at 1.1 s does not count.
        let relay = fault(FaultKind::RelayStall, 0, 1_000);
        assert_eq!(recovery_ms(&relay, &calls), Some(400));
        assert_eq!(
            recovery_ms(&fault(FaultKind::KillServer, 0, 1_000), &calls),
            Some(100)
        );
        assert_eq!(
            recovery_ms(&fault(FaultKind::KillServer, 0, 2_000), &calls),
            None
        );
        let r = recoveries(
            &[relay.clone(), fault(FaultKind::RelayStall, 0, 5_000)],
            &calls,
        );
        let stall = &r["relay-stall"];
        assert_eq!(
            (stall.applied, stall.observed, stall.p50_ms),
            (2, 1, Some(400))
        );
    }

    #[test]
    fn throughput_splits_seconds_with_a_fault_in_force_from_the_others() {
        let calls: Vec<Call> = (0..6)
            .map(|i| ok_call(i, Service::Http, i as u64 * 1_000 + 500))
            .collect();
        // In force during seconds 1 and 2.
        let t = throughput(&calls, &[fault(FaultKind::KillProxy, 1_200, 2_600)], 6_000);
        assert_eq!((t.faulted_s, t.quiet_s), (2, 4));
        assert_eq!(t.with_faults_per_s, 1.0);
        assert_eq!(t.without_faults_per_s, 1.0);
    }

    #[test]
    fn the_checks_become_cases_of_the_report_model() {
        let verdicts = vec![
            Verdict {
                check: "at-most-once",
                promise: "no destructive, non-idempotent tool body runs twice for one call",
                failures: vec!["call 3 ran 2 times".into(), "call 9 ran 3 times".into()],
                notes: vec![],
            },
            Verdict {
                check: "nothing-lost",
                promise: "p",
                failures: vec![],
                notes: vec!["n".into()],
            },
        ];
        let report = ChaosReport {
            seed: 9,
            replay: "durable-mcp-conformance chaos --seed 9".into(),
            machine: String::new(),
            build: "debug",
            duration_s: 60.0,
            concurrency: 4,
            schedule: vec![Planned {
                at_ms: 1_000,
                kind: FaultKind::KillProxy,
                target: 1,
                hold_ms: 2_000,
            }],
            skipped: vec![],
            overlapping: 0,
            outcomes: BTreeMap::new(),
            lost: 0,
            duplicated: 2,
            recovery: BTreeMap::new(),
            throughput: Throughput::default(),
            checks: checks_json(&verdicts),
            history: History::default(),
        };
        let record =
            crate::report::RunRecord::of(&report.events("t".into(), Duration::from_secs(1)));
        assert_eq!(record.kind, RunKind::Chaos);
        assert_eq!(record.counts.failed, 1);
        let case = record.case("chaos/at-most-once").unwrap();
        assert_eq!(
            case.verdict,
            CaseVerdict::Fail("call 3 ran 2 times (and 1 more)".into())
        );
        assert!(
            record
                .junit()
                .unwrap()
                .contains(r#"classname="chaos.chaos""#)
        );
        let text = report.render();
        assert!(
            text.contains("FAILED. Seed 9") && text.contains("kill-proxy"),
            "{text}"
        );
        assert!(text.contains("duplicated 2"), "{text}");
    }
}
