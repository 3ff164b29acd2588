//! Checks shared by every kind of step: upstream invocation counts (from the ledger), upstream
//! cancellations, result snapshots and saved answers.

use std::{collections::HashMap, time::Duration};

use serde_json::Value;

use super::{Failure, RunOptions};
use crate::{
    fixtures::{Ledger, LedgerEvent},
    scenario::Expect,
};

/// Answers earlier steps saved (`expect.save`), by name.
#[derive(Debug, Default)]
pub(crate) struct Saved {
    answers: HashMap<String, SavedAnswer>,
}

#[derive(Debug, Clone)]
pub(crate) struct SavedAnswer {
    /// The result JSON, or `{"error": {code, message}}`, or `{"status": ...}`.
    pub answer: Value,
    /// The task ID, when the step created or read a task.
    pub task_id: Option<String>,
}

impl Saved {
    pub fn get(&self, name: &str) -> Result<&SavedAnswer, Failure> {
        self.answers
            .get(name)
            .ok_or_else(|| Failure::Setup(format!("nothing was saved as {name:?}")))
    }

    /// Applies `expect.same_as` and `expect.save` to a step's answer.
    pub fn check_and_save(
        &mut self,
        expect: &Expect,
        answer: Value,
        task_id: Option<String>,
        summary: &mut String,
    ) -> Result<(), Failure> {
        if let Some(name) = &expect.same_as {
            let earlier = &self.get(name)?.answer;
            if earlier != &answer {
                return Err(Failure::Violated(format!(
                    "expected the same answer as {name:?} (first difference at {}): saw {}, \
                     {name:?} was {}",
                    first_difference(earlier, &answer, String::new()),
                    short(&answer.to_string()),
                    short(&earlier.to_string())
                )));
            }
            summary.push_str(&format!(", same as {name}"));
        }
        if let Some(name) = &expect.save {
            self.answers
                .insert(name.clone(), SavedAnswer { answer, task_id });
        }
        Ok(())
    }
}

/// `expect.invocations`: wait for the expected count, then a moment more to see any extra
/// invocation that a wrong retry would add.
pub(crate) async fn check_invocations(
    ledger: &Ledger,
    expect: &Expect,
    step_tool: Option<&str>,
    step_key: Option<&str>,
    summary: &mut String,
) -> Result<(), Failure> {
    let Some(inv) = &expect.invocations else {
        return Ok(());
    };
    let tool = inv
        .tool
        .as_deref()
        .or(step_tool)
        .ok_or_else(|| Failure::Setup("invocations: no tool to count".into()))?;
    let key = inv.key.as_deref().or(step_key);
    wait_count(
        ledger,
        tool,
        LedgerEvent::Called,
        key,
        inv.count,
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let saw = count(ledger, tool, LedgerEvent::Called, key);
    if saw != inv.count {
        let of = match key {
            Some(k) => format!("{tool} (key {k:?})"),
            None => tool.to_owned(),
        };
        return Err(Failure::Violated(format!(
            "expected {} invocation{} of {of}, saw {saw}",
            inv.count,
            plural(inv.count)
        )));
    }
    summary.push_str(&format!(", {saw} invocation{}", plural(saw)));
    Ok(())
}

/// `expect.cancelled_upstream`: whether the upstream saw `notifications/cancelled`.
pub(crate) async fn check_cancelled_upstream(
    ledger: &Ledger,
    expect: &Expect,
    tool: &str,
    key: Option<&str>,
    summary: &mut String,
) -> Result<(), Failure> {
    let Some(want) = expect.cancelled_upstream else {
        return Ok(());
    };
    let n = if want {
        wait_count(
            ledger,
            tool,
            LedgerEvent::Cancelled,
            key,
            1,
            Duration::from_secs(10),
        )
        .await
    } else {
        count(ledger, tool, LedgerEvent::Cancelled, key)
    };
    if (n > 0) != want {
        return Err(Failure::Violated(if want {
            format!("expected the upstream to see notifications/cancelled for {tool}, it did not")
        } else {
            format!("the upstream saw an unexpected cancellation of {tool}")
        }));
    }
    if want {
        summary.push_str(", cancelled upstream");
    }
    Ok(())
}

/// `expect.is_error` on a `CallToolResult`.
pub(crate) fn check_is_error(expect: &Expect, result: &Value) -> Result<(), Failure> {
    if let Some(want) = expect.is_error {
        let saw = result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if saw != want {
            return Err(Failure::Violated(format!(
                "expected isError {want}, saw {saw}"
            )));
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `expect.snapshot`: the result (redacted of times and ids) against `fixtures/snapshots/<name>.snap`,
/// through the same insta assertion the tests use (R-CNF-9).
pub(crate) fn check_snapshot(
    options: &RunOptions,
    expect: &Expect,
    result: &Value,
    summary: &mut String,
) -> Result<(), Failure> {
    let Some(name) = &expect.snapshot else {
        return Ok(());
    };
    crate::snapshots::check_snapshot(&options.snapshot_dir, name, result)
        .map_err(Failure::Violated)?;
    summary.push_str(&format!(", matches snapshot {name}"));
    Ok(())
}

// Also used by third-party mode.
pub(crate) use crate::fixtures::as_written::first_difference;

pub(crate) fn short(s: &str) -> String {
    const MAX: usize = 160;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

pub(crate) fn count(ledger: &Ledger, tool: &str, event: LedgerEvent, key: Option<&str>) -> usize {
    match key {
        Some(k) => ledger.count_key(tool, event, k),
        None => ledger.count(tool, event),
    }
}

/// Polls until the count reaches `n` or `timeout` passes; returns the last count.
pub(crate) async fn wait_count(
    ledger: &Ledger,
    tool: &str,
    event: LedgerEvent,
    key: Option<&str>,
    n: usize,
    timeout: Duration,
) -> usize {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let c = count(ledger, tool, event, key);
        if c >= n || tokio::time::Instant::now() >= deadline {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The moment to cancel a call: `after_ms` after the upstream received it (or after 30 s
/// without it arriving).
pub(crate) async fn cancel_point(ledger: &Ledger, tool: &str, key: Option<&str>, after_ms: u64) {
    wait_count(
        ledger,
        tool,
        LedgerEvent::Called,
        key,
        1,
        Duration::from_secs(30),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
}
/// Whether `got` includes `want`: every key of an object `want` is in `got` with an included
/// value, recursively; any other `want` equals `got`. Lists are compared whole.
pub(crate) fn includes(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(got), Value::Object(want)) => want
            .iter()
            .all(|(k, w)| got.get(k).is_some_and(|g| includes(g, w))),
        (got, want) => got == want,
    }
}

/// `structured`: the result's `structuredContent` includes the expected keys and values.
pub(crate) fn check_structured(want: &Value, result: &Value) -> Result<(), Failure> {
    let got = &result["structuredContent"];
    if includes(got, want) {
        Ok(())
    } else {
        Err(Failure::Violated(format!(
            "expected structuredContent to include {want}, saw {}",
            short(&got.to_string())
        )))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::includes;

    #[test]
    fn objects_are_included_key_by_key_and_other_values_must_be_equal() {
        let got = json!({"status": "RUNNING", "run": {"id": "r", "n": 1}, "list": [1, 2]});
        assert!(includes(&got, &json!({})));
        assert!(includes(&got, &json!({"status": "RUNNING"})));
        assert!(includes(&got, &json!({"run": {"n": 1}})));
        assert!(includes(&got, &json!({"list": [1, 2]})));
        assert!(!includes(&got, &json!({"list": [1]})), "lists are whole");
        assert!(!includes(&got, &json!({"status": "CANCELED"})));
        assert!(!includes(&got, &json!({"missing": null})));
        assert!(!includes(&json!(null), &json!({"status": "RUNNING"})));
        assert!(!includes(&json!(1), &json!(1.0)), "numbers keep their form");
    }
}
