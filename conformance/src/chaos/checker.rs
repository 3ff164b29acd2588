//! The checker: pure functions over a run's [`History`], one per promise (R-CNF-24). Each
//! answers a [`Verdict`]: what broke the promise (a failure fails the run) and what is worth
//! knowing (notes, such as each unknown outcome with the fault that explains it).

use super::history::{Call, CallKind, End, FaultRecord, History};

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The case's name in the report: `chaos/<check>`.
    pub check: &'static str,
    /// What it promises, in a line.
    pub promise: &'static str,
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

impl Verdict {
    fn new(check: &'static str, promise: &'static str) -> Self {
        Self {
            check,
            promise,
            failures: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Every check, in report order.
pub fn check(history: &History) -> Vec<Verdict> {
    vec![
        final_answers(history),
        at_most_once(history),
        first_execution(history),
        nothing_lost(history),
        unknowns_explained(history),
        read_only_fidelity(history),
        nothing_left_open(history),
        memory_returns(history),
    ]
}

/// `call 12 (destructive-keyed h_stamp, key k12)`: how a call is named in findings.
pub fn describe(call: &Call) -> String {
    format!(
        "call {} ({} {}, key {})",
        call.id,
        call.kind.name(),
        call.tool,
        call.key
    )
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// When the call's final answer was due: the bound after the later of its start and the last
/// heal of a fault that began before it ended (before the run ended, for a call that did not).
pub fn due_ms(call: &Call, faults: &[FaultRecord], bound_ms: u64, run_ended_ms: u64) -> u64 {
    let until = call.ended_ms.unwrap_or(run_ended_ms.max(call.started_ms));
    let last_heal = faults
        .iter()
        .filter(|f| f.started_ms <= until)
        .map(|f| f.healed_ms.unwrap_or(u64::MAX / 2))
        .max()
        .unwrap_or(0);
    call.started_ms.max(last_heal).saturating_add(bound_ms)
}

/// Every call reaches a final answer, within the bound after the last fault heals.
pub fn final_answers(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "final-answers",
        "every call reaches a final answer within the bound after the last fault heals",
    );
    let mut latest_over = 0u64;
    for call in &h.calls {
        let due = due_ms(call, &h.faults, h.bound_ms, h.ended_ms);
        match (call.ended_ms, &call.end) {
            (None, _) | (_, End::Unanswered) => v
                .failures
                .push(format!("{} got no final answer", describe(call))),
            (Some(ended), _) if ended > due => v.failures.push(format!(
                "{} answered at {}, {} past its due time ({} after the last heal before it)",
                describe(call),
                secs(ended),
                secs(ended - due),
                secs(h.bound_ms)
            )),
            (Some(ended), _) => {
                latest_over = latest_over.max(ended.saturating_sub(due - h.bound_ms));
            }
        }
    }
    v.notes.push(format!(
        "bound {}; the slowest answer came {} after its last heal (or its start)",
        secs(h.bound_ms),
        secs(latest_over)
    ));
    v
}

/// No destructive, non-idempotent tool body runs twice for one call.
pub fn at_most_once(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "at-most-once",
        "no destructive, non-idempotent tool body runs twice for one call",
    );
    let mut checked = 0;
    for call in h.calls.iter().filter(|c| h.at_most_once.contains(&c.tool)) {
        checked += 1;
        let ran = h.runs.get(&call.key).map_or(0, |r| r.called);
        if ran > 1 {
            v.failures
                .push(format!("{} ran {ran} times (ledger)", describe(call)));
        }
    }
    v.notes
        .push(format!("{checked} calls of one-attempt tools checked"));
    v
}

/// A keyed call's answer is the first execution's (and any answer naming an execution names
/// one that ran).
pub fn first_execution(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "first-execution",
        "a keyed re-issue after a fault gets the first execution's result",
    );
    let (mut keyed, mut reissued) = (0, 0);
    for call in &h.calls {
        if call.keyed {
            keyed += 1;
            if call.issues > 1 {
                reissued += 1;
            }
        }
        let Some(run) = &call.run else { continue };
        let completed = h
            .runs
            .get(&call.key)
            .map(|r| r.completed_runs.as_slice())
            .unwrap_or_default();
        match completed.first() {
            Some(first) if first == run => {}
            Some(first) => v.failures.push(format!(
                "{} was answered with execution {run}, not the first one ({first}; the ledger \
                 has {completed:?}) after {} issues",
                describe(call),
                call.issues
            )),
            None => v.failures.push(format!(
                "{} was answered with execution {run}, which the ledger never saw complete",
                describe(call)
            )),
        }
    }
    v.notes.push(format!(
        "{keyed} keyed calls, {reissued} of them re-issued on the other replica after a lost answer"
    ));
    v
}

/// A call answered with its result ran (the ledger saw it).
pub fn nothing_lost(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "nothing-lost",
        "a call answered with a result ran (its upstream's ledger saw it)",
    );
    for call in h.calls.iter().filter(|c| c.end == End::Ok) {
        if h.runs.get(&call.key).map_or(0, |r| r.called) == 0 {
            v.failures.push(format!(
                "{} was answered with a result the upstream never ran",
                describe(call)
            ));
        }
    }
    v
}

/// Every unknown outcome overlaps a fault that can explain it.
pub fn unknowns_explained(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "unknowns-explained",
        "every \"outcome unknown\" answer overlaps a fault that can explain it",
    );
    for call in &h.calls {
        let End::Unknown { why } = &call.end else {
            continue;
        };
        let explaining: Vec<String> = h
            .faults
            .iter()
            .filter(|f| f.explains(call))
            .map(|f| format!("{} {} at {}", f.kind, f.target, secs(f.started_ms)))
            .collect();
        if explaining.is_empty() {
            v.failures.push(format!(
                "{} ended unknown ({why}) with no fault on its path between {} and {}",
                describe(call),
                secs(call.started_ms),
                call.ended_ms.map_or("the end".into(), secs)
            ));
        } else {
            let more = match explaining.len() {
                0..=3 => String::new(),
                n => format!(" and {} more", n - 3),
            };
            v.notes.push(format!(
                "{}: {why}; explained by {}{more}",
                describe(call),
                explaining[..explaining.len().min(3)].join(", ")
            ));
        }
    }
    v
}

/// A read-only call's result equals a direct call's.
pub fn read_only_fidelity(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "read-only-fidelity",
        "read-only results equal the direct ones",
    );
    let mut compared = 0;
    for call in h
        .calls
        .iter()
        .filter(|c| c.kind == CallKind::Read && c.end == End::Ok)
    {
        let Some(through) = &call.result else {
            v.failures
                .push(format!("{} kept no result to compare", describe(call)));
            continue;
        };
        match h.direct.get(&call.id) {
            Some(Ok(direct)) => {
                compared += 1;
                let (direct, through) = (
                    without_complete_marker(direct),
                    without_complete_marker(through),
                );
                if let Some(diff) = crate::fixtures::as_written::difference(&direct, &through) {
                    v.failures.push(format!("{}: {diff}", describe(call)));
                }
            }
            Some(Err(why)) => v
                .failures
                .push(format!("{}: the direct call failed: {why}", describe(call))),
            None => v
                .failures
                .push(format!("{}: no direct call to compare", describe(call))),
        }
    }
    v.notes.push(format!("{compared} results compared"));
    v
}

/// `result` without `resultType: "complete"`, whose absence means the same (R-PRX-33): it says
/// what the answer is for the caller's protocol version, not what the tool wrote.
fn without_complete_marker(result: &serde_json::Value) -> serde_json::Value {
    let mut result = result.clone();
    if let Some(object) = result.as_object_mut()
        && object.get("resultType").and_then(|t| t.as_str()) == Some("complete")
    {
        object.remove("resultType");
    }
    result
}

/// Temporal holds no open Nexus operation, Activity or Workflow once the run is over.
pub fn nothing_left_open(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "nothing-left-open",
        "no Nexus operation, Activity or Workflow is left open",
    );
    let o = &h.open;
    if o.nexus_operations + o.activities + o.workflows > 0 {
        v.failures.push(format!(
            "{} Nexus operations, {} Activities and {} Workflows still open: {}",
            o.nexus_operations,
            o.activities,
            o.workflows,
            o.examples.join(", ")
        ));
    }
    v
}

/// How far above its start a process's memory may end: half again, or 64 MiB, whichever is
/// more (caches and pools settle at their working size; a leak keeps growing with the calls).
pub fn memory_allowed_mib(start_mib: f64) -> f64 {
    (start_mib * 1.5).max(start_mib + 64.0)
}

/// The role of the Temporal dev server among the processes measured: its memory is
/// reported, not judged (a Go process that was killed and started again mid-run, whose heap
/// follows its own caches and history, not anything durable-mcp holds).
pub const SERVER_ROLE: &str = "server";

/// Each process of durable-mcp's (connectors, proxies, upstreams) ends with its memory near
/// its start; the dev server's is only reported.
pub fn memory_returns(h: &History) -> Verdict {
    let mut v = Verdict::new(
        "memory-returns",
        "each process's memory returns near its start",
    );
    for m in &h.memory {
        let line = format!(
            "{}: {:.1} MiB at the start, {:.1} MiB at the end",
            m.role, m.start_mib, m.end_mib
        );
        if m.role == SERVER_ROLE {
            v.notes.push(format!("{line} (Temporal's, reported only)"));
        } else if m.end_mib > memory_allowed_mib(m.start_mib) {
            v.failures.push(format!(
                "{line} (more than the {:.1} MiB allowed)",
                memory_allowed_mib(m.start_mib)
            ));
        } else {
            v.notes.push(line);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::super::history::{FaultKind, Memory, OpenWork, Runs, Service};
    use super::*;

    fn call(id: usize, kind: CallKind, end: End, started: u64, ended: Option<u64>) -> Call {
        Call {
            id,
            kind,
            service: Service::Http,
            tool: match kind {
                CallKind::Destructive | CallKind::DestructiveKeyed => "h_stamp".into(),
                _ => "h_echo".into(),
            },
            key: format!("k{id}"),
            arguments: json!({"key": format!("k{id}")}),
            keyed: kind == CallKind::DestructiveKeyed,
            started_ms: started,
            ended_ms: ended,
            end,
            replicas: vec![0],
            issues: 1,
            run: None,
            result: None,
        }
    }

    fn fault(kind: FaultKind, target: usize, started: u64, healed: u64) -> FaultRecord {
        FaultRecord {
            kind,
            target,
            started_ms: started,
            healed_ms: Some(healed),
        }
    }

    fn ran(keys: &[(&str, usize)]) -> BTreeMap<String, Runs> {
        keys.iter()
            .map(|(k, n)| {
                (
                    (*k).to_owned(),
                    Runs {
                        called: *n,
                        completed_runs: Vec::new(),
                    },
                )
            })
            .collect()
    }

    /// A clean history: two calls answered, their runs in the ledger, nothing open.
    fn clean() -> History {
        let mut read = call(1, CallKind::Read, End::Ok, 0, Some(100));
        read.result = Some(json!({"content": [], "structuredContent": {"key": "k1"}}));
        History {
            calls: vec![read, call(2, CallKind::Destructive, End::Ok, 50, Some(300))],
            faults: vec![fault(FaultKind::KillProxy, 0, 10, 2_000)],
            runs: ran(&[("k1", 1), ("k2", 1)]),
            at_most_once: vec!["h_stamp".into()],
            direct: BTreeMap::from([(
                1,
                Ok(json!({"content": [], "structuredContent": {"key": "k1"}})),
            )]),
            open: OpenWork::default(),
            memory: vec![Memory {
                role: "proxy 0".into(),
                start_mib: 40.0,
                end_mib: 60.0,
            }],
            bound_ms: 90_000,
            ended_ms: 10_000,
        }
    }

    fn failing(history: &History) -> Vec<&'static str> {
        check(history)
            .into_iter()
            .filter(|v| !v.passed())
            .map(|v| v.check)
            .collect()
    }

    #[test]
    fn a_clean_history_passes_every_check() {
        assert_eq!(failing(&clean()), Vec::<&str>::new());
    }

    #[test]
    fn a_call_without_a_final_answer_or_answered_past_its_bound_is_caught() {
        let mut h = clean();
        h.calls[0].ended_ms = None;
        h.calls[0].end = End::Unanswered;
        assert_eq!(failing(&h), ["final-answers"]);
        let mut h = clean();
        // The last heal before it ended was at 2 s: due at 92 s.
        h.calls[1].ended_ms = Some(95_000);
        let v = final_answers(&h);
        assert!(
            v.failures[0].contains("call 2") && v.failures[0].contains("3.0 s past"),
            "{v:?}"
        );
        // A heal later than its start moves its due time.
        h.faults
            .push(fault(FaultKind::KillServer, 0, 4_000, 20_000));
        assert!(final_answers(&h).passed());
    }

    #[test]
    fn a_destructive_call_run_twice_is_caught() {
        let mut h = clean();
        h.runs.insert(
            "k2".into(),
            Runs {
                called: 2,
                completed_runs: vec![],
            },
        );
        assert_eq!(failing(&h), ["at-most-once"]);
        // The read-only call running twice is allowed.
        let mut h = clean();
        h.runs.insert(
            "k1".into(),
            Runs {
                called: 3,
                completed_runs: vec![],
            },
        );
        assert!(failing(&h).is_empty());
    }

    #[test]
    fn a_keyed_reissue_answered_by_another_execution_is_caught() {
        let mut h = clean();
        let mut keyed = call(3, CallKind::DestructiveKeyed, End::Ok, 0, Some(500));
        keyed.issues = 2;
        keyed.run = Some("77-2".into());
        h.calls.push(keyed);
        h.runs.insert(
            "k3".into(),
            Runs {
                called: 1,
                completed_runs: vec!["77-2".into()],
            },
        );
        let v = first_execution(&h);
        assert!(v.passed(), "{v:?}");
        assert!(v.notes[0].contains("1 of them re-issued"), "{v:?}");
        h.runs.get_mut("k3").unwrap().completed_runs = vec!["77-1".into()];
        assert_eq!(failing(&h), ["first-execution"]);
        h.runs.get_mut("k3").unwrap().completed_runs.clear();
        assert!(first_execution(&h).failures[0].contains("never saw complete"));
    }

    #[test]
    fn an_answer_the_upstream_never_ran_is_lost() {
        let mut h = clean();
        h.runs.remove("k2");
        assert_eq!(failing(&h), ["nothing-lost"]);
    }

    #[test]
    fn an_unknown_outcome_needs_a_fault_on_its_path() {
        let mut h = clean();
        let unknown = End::Unknown {
            why: "ToolCallOutcomeUnknown".into(),
        };
        // During the proxy kill: explained.
        h.calls.push(call(
            4,
            CallKind::Destructive,
            unknown.clone(),
            1_000,
            Some(8_000),
        ));
        h.runs.insert(
            "k4".into(),
            Runs {
                called: 1,
                completed_runs: vec![],
            },
        );
        let v = unknowns_explained(&h);
        assert!(v.passed(), "{v:?}");
        assert!(v.notes[0].contains("kill-proxy 0"), "{v:?}");
        // Long after every heal (and what a proxy kill leaves behind): not explained.
        h.calls.push(call(
            5,
            CallKind::Destructive,
            unknown.clone(),
            40_000,
            Some(41_000),
        ));
        assert_eq!(failing(&h), ["unknowns-explained"]);
        // A fault off the call's path does not explain it: a relay fault and a stdio call.
        let mut h = clean();
        h.faults = vec![fault(FaultKind::RelayReset, 0, 0, 5_000)];
        let mut stdio = call(6, CallKind::Destructive, unknown, 1_000, Some(2_000));
        stdio.service = Service::Stdio;
        h.calls.push(stdio);
        assert_eq!(failing(&h), ["unknowns-explained"]);
        // Nor does a kill of the replica the call never went to.
        h.faults = vec![fault(FaultKind::KillConnector, 1, 0, 5_000)];
        assert_eq!(failing(&h), ["unknowns-explained"]);
        h.faults = vec![fault(FaultKind::KillConnector, 0, 0, 5_000)];
        h.calls[2].replicas = vec![1, 0];
        assert!(failing(&h).is_empty());
    }

    #[test]
    fn a_read_only_result_unlike_the_direct_one_is_caught() {
        let mut h = clean();
        h.direct.insert(
            1,
            Ok(json!({"content": [], "structuredContent": {"key": "other"}})),
        );
        let v = read_only_fidelity(&h);
        assert!(v.failures[0].contains("/structuredContent/key"), "{v:?}");
        // The durable layer's namespaced _meta is not a difference.
        let mut h = clean();
        h.calls[0].result = Some(json!({
            "content": [], "structuredContent": {"key": "k1"},
            "_meta": {"io.durable-mcp/operationId": "x"}
        }));
        assert!(read_only_fidelity(&h).passed());
        // Nor is the complete marker one side carries and the other does not (R-PRX-33).
        h.direct.insert(1, Ok(json!({"content": [], "structuredContent": {"key": "k1"}, "resultType": "complete"})));
        assert!(read_only_fidelity(&h).passed());
        h.direct.remove(&1);
        assert_eq!(failing(&h), ["read-only-fidelity"]);
    }

    #[test]
    fn open_work_and_grown_memory_are_caught() {
        let mut h = clean();
        h.open.activities = 1;
        h.open.examples = vec!["mcp/x/h_slow/1".into()];
        assert_eq!(failing(&h), ["nothing-left-open"]);
        let mut h = clean();
        h.memory[0].end_mib = 105.0;
        assert_eq!(failing(&h), ["memory-returns"]);
        // The dev server's memory is Temporal's: reported, never judged.
        let mut h = clean();
        h.memory[0].role = SERVER_ROLE.into();
        h.memory[0].end_mib = 1000.0;
        assert!(memory_returns(&h).passed());
        assert!(memory_returns(&h).notes[0].contains("reported only"));
        assert_eq!(memory_allowed_mib(40.0), 104.0);
        assert_eq!(memory_allowed_mib(400.0), 600.0);
    }
}
