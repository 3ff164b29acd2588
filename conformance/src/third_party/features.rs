//! The `tasks-and-input` check (R-CNF-19): whether the server's tasks (tools listing
//! `execution.taskSupport`) and input requests (`InputRequiredResult`, SEP-2322) survive the
//! durable path. A `required` tool is called directly as a task and followed to its result,
//! which the durable path's result must equal (the proxy follows the upstream's task, R-PRX-28);
//! a tool whose direct answer asks for input must ask the same through the durable path (the
//! round ends with the requests as written, R-PRX-29). One line for the server sums them up.

use durable_mcp::proxy::upstream::{CallAnswer, TaskState, UpstreamClient, next_poll_delay};
use rmcp::model::JsonObject;
use serde_json::Value;

use super::{CALL_TIMEOUT, Status};

/// The `execution.taskSupport` the tool `name` lists in `listed` (the listing as written),
/// when it is `required` or `optional`.
pub(super) fn task_support(name: &str, listed: &[Value]) -> Option<String> {
    let tool = listed.iter().find(|t| t["name"] == name)?;
    let support = tool.get("execution")?.get("taskSupport")?.as_str()?;
    matches!(support, "required" | "optional").then(|| support.to_owned())
}

/// Whether a direct answer is an `InputRequiredResult`.
pub(super) fn asks_for_input(direct: &Value) -> bool {
    direct.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// The methods of an answer's input requests, in order.
fn methods(requests: &Value) -> Vec<&str> {
    let asked = requests.as_object().into_iter().flat_map(|m| m.values());
    asked
        .filter_map(|r| r.get("method").and_then(Value::as_str))
        .collect()
}

/// Whether the durable path's round asked what the direct call asked: the same
/// `inputRequests` (the `requestState` is the server's own, and may differ per call).
pub(super) fn input_verdict(direct: &Value, durable: &Result<Value, String>) -> (Status, String) {
    let asked = &direct["inputRequests"];
    let what = format!("asked for input ({})", methods(asked).join(", "));
    match durable {
        Ok(round) if &round["result"]["inputRequests"] == asked => (
            Status::Pass,
            format!("{what}; the durable path's round asked the same"),
        ),
        Ok(round) => (
            Status::Fail(format!(
                "{what}, but the durable path answered {}",
                truncate(&round.to_string())
            )),
            String::new(),
        ),
        Err(e) => (
            Status::Fail(format!("{what}, but the durable path failed: {e}")),
            String::new(),
        ),
    }
}

fn truncate(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// Calls `name` directly asking for a task and follows the task to its result (the result of
/// a call answered at once, too).
pub(super) async fn call_direct_task(
    client: &UpstreamClient,
    name: &str,
    args: &JsonObject,
) -> Result<Value, String> {
    let followed = async {
        let answer = client
            .call_tool_as_task(name, args.clone(), Default::default(), |_| {})
            .await
            .map_err(|e| e.to_string())?;
        let (id, poll_interval, origin) = match answer {
            CallAnswer::Result(result) => return Ok(result),
            CallAnswer::Task {
                id,
                poll_interval,
                origin,
            } => (id, poll_interval, origin),
        };
        for polls in 0.. {
            tokio::time::sleep(next_poll_delay(poll_interval, polls)).await;
            match client.task_state(&id, &origin).await {
                Ok(TaskState::Working { .. }) => continue,
                Ok(TaskState::Completed(Some(result))) => return Ok(result),
                Ok(TaskState::Completed(None)) => break,
                Ok(other) => return Err(format!("the task ended {other:?}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        client
            .task_result(&id, &origin)
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(CALL_TIMEOUT, followed).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("timed out after {} s", CALL_TIMEOUT.as_secs())),
    }
}

/// What one tool showed: `tasks` or `input`, its name, how it went, and what was seen when it
/// passed (else it "survived").
pub(super) struct Seen {
    pub kind: &'static str,
    pub tool: String,
    pub status: Status,
    pub note: Option<String>,
}

/// The server's `tasks-and-input` line: pass when every task-capable tool and every tool that
/// asked for input survived the durable path, skipped when it has none that was called.
pub(super) fn summary(seen: &[Seen], uncalled_tasks: &[String]) -> (Status, String) {
    let line = |kind: &str| {
        let of_kind: Vec<String> = seen
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| match (&s.status, &s.note) {
                (Status::Pass, Some(note)) => format!("{} {note}", s.tool),
                (Status::Pass, None) => format!("{} survived", s.tool),
                (Status::Fail(why), Some(_)) => format!("{} did NOT survive ({why})", s.tool),
                (Status::Fail(_), None) => format!("{} did NOT survive", s.tool),
                (Status::Skipped(why), _) => format!("{} not checked ({why})", s.tool),
            })
            .collect();
        if of_kind.is_empty() {
            "none called".to_owned()
        } else {
            of_kind.join(", ")
        }
    };
    let mut detail = format!("tasks: {}; input: {}", line("tasks"), line("input"));
    if !uncalled_tasks.is_empty() {
        let names = uncalled_tasks.join(", ");
        detail.push_str(&format!("; task-capable but not called: {names}"));
    }
    let failed: Vec<&str> = seen
        .iter()
        .filter(|s| matches!(s.status, Status::Fail(_)))
        .map(|s| s.tool.as_str())
        .collect();
    let status = if !failed.is_empty() {
        Status::Fail(format!(
            "not through the durable path: {}",
            failed.join(", ")
        ))
    } else if seen.iter().any(|s| s.status == Status::Pass) {
        Status::Pass
    } else {
        Status::Skipped("no task-capable tool and no tool that asked for input was called".into())
    };
    (status, detail)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn input_requests_must_come_through_as_asked() {
        let direct = json!({"resultType": "input_required", "requestState": "s1",
            "inputRequests": {"confirm": {"method": "elicitation/create", "params": {"message": "?"}}}});
        let same = Ok(
            json!({"result": {"resultType": "input_required", "requestState": "s2",
            "inputRequests": direct["inputRequests"].clone()}, "arguments": {}}),
        );
        let (status, detail) = input_verdict(&direct, &same);
        assert_eq!(status, Status::Pass);
        assert!(detail.contains("elicitation/create"), "{detail}");
        let changed = Ok(json!({"result": {"inputRequests": {}}, "arguments": {}}));
        assert!(matches!(
            input_verdict(&direct, &changed).0,
            Status::Fail(_)
        ));
        let failed = Err("boom".to_owned());
        assert!(matches!(input_verdict(&direct, &failed).0, Status::Fail(_)));
        assert!(asks_for_input(&direct));
        assert!(!asks_for_input(&json!({"content": []})));
    }

    #[test]
    fn the_server_line_fails_on_any_tool_and_skips_without_any() {
        let seen = |kind, tool: &str, status| Seen {
            kind,
            tool: tool.into(),
            status,
            note: None,
        };
        let all = [
            seen("tasks", "long", Status::Pass),
            seen("input", "ask", Status::Pass),
        ];
        let (status, detail) = summary(&all, &["other".into()]);
        assert_eq!(status, Status::Pass);
        assert_eq!(
            detail,
            "tasks: long survived; input: ask survived; task-capable but not called: other"
        );
        let bad = [seen("input", "ask", Status::Fail("x".into()))];
        assert!(matches!(summary(&bad, &[]).0, Status::Fail(_)));
        assert!(matches!(summary(&[], &[]).0, Status::Skipped(_)));
        let listed = [
            json!({"name": "a", "execution": {"taskSupport": "required"}}),
            json!({"name": "b", "execution": {"taskSupport": "forbidden"}}),
        ];
        assert_eq!(task_support("a", &listed).as_deref(), Some("required"));
        assert_eq!(task_support("b", &listed), None);
        assert_eq!(task_support("c", &listed), None);
    }
}
