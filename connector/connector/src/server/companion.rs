//! Companion tools (R-CON-11): `task_status`, `task_result` and `task_cancel`, for MCP hosts
//! that give up on a call after about a minute and do not speak the tasks extension. With
//! `--companion-tools`, such a caller's call still running at `--task-after` answers with a text
//! result carrying the signed task ID; the three tools follow it. They verify the ID exactly as
//! `tasks/get` does, so another caller gets the same "unknown task" as for a forged ID.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError,
    model::{DetailedTask, TaskPayload},
};
use serde_json::{Map, Value, json};

use super::Connector;
use crate::task_ref::CallerScope;
use durable_mcp_contract::outcome::{Outcome, to_call_tool_result};

pub const TASK_STATUS: &str = "task_status";
pub const TASK_RESULT: &str = "task_result";
pub const TASK_CANCEL: &str = "task_cancel";
/// `_meta` key (and `structuredContent` field) of a call that continues as a task.
pub const TASK_ID_META: &str = "io.durable-mcp/taskId";

/// How long `task_result` waits for a working task before answering that it still works: well
/// inside the minute after which hosts give up on a call.
pub const RESULT_WAIT: Duration = Duration::from_secs(20);

/// Whether `name` is one of the companion tools.
pub fn is_companion(name: &str) -> bool {
    matches!(name, TASK_STATUS | TASK_RESULT | TASK_CANCEL)
}

/// The three tools' MCP definitions.
pub fn companion_tools() -> Vec<Value> {
    let input = json!({
        "type": "object",
        "properties": {"task_id": {
            "type": "string",
            "description": "The task ID a long tool call answered with."
        }},
        "required": ["task_id"]
    });
    let tool = |name: &str, title: &str, description: &str, read_only: bool| {
        json!({
            "name": name,
            "title": title,
            "description": description,
            "inputSchema": input,
            "annotations": {"readOnlyHint": read_only, "openWorldHint": false},
        })
    };
    vec![
        tool(
            TASK_STATUS,
            "Task status",
            "Whether a long tool call that continues as a task still works, and its latest \
             progress message.",
            true,
        ),
        tool(
            TASK_RESULT,
            "Task result",
            "The result of a long tool call that continues as a task; waits up to 20 seconds \
             for it, then says it still works (call again).",
            true,
        ),
        tool(
            TASK_CANCEL,
            "Cancel a task",
            "Cancels a long tool call that continues as a task.",
            false,
        ),
    ]
}

fn text_result(text: String, structured: Value, is_error: bool) -> Value {
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": is_error,
    })
}

/// The answer to a call that is still running at `--task-after`, for a caller without the tasks
/// extension: the task ID (text and `_meta`) and how to follow it.
///
/// A tool that declares an `outputSchema` can only answer successfully with conforming
/// `structuredContent`, and strict clients (the Python SDK) reject anything else, so for such a
/// tool the answer is a tool error (`isError`, never schema-checked) whose text says the call
/// goes on; other tools get `structuredContent: {"taskId", "status": "working"}`.
pub fn continues_as_task(task_id: &str, tool_has_output_schema: bool) -> Value {
    let text = format!(
        "The tool call continues in the background as task {task_id}. Call {TASK_RESULT} with \
         {{\"task_id\": \"{task_id}\"}} for its result, {TASK_STATUS} for its progress, or \
         {TASK_CANCEL} to stop it."
    );
    let mut result = if tool_has_output_schema {
        json!({"content": [{"type": "text", "text": text}], "isError": true})
    } else {
        text_result(text, json!({"taskId": task_id, "status": "working"}), false)
    };
    result["_meta"] = json!({ TASK_ID_META: task_id });
    result
}

/// `task_status`'s answer for a task's state.
pub fn status_result(task_id: &str, state: &DetailedTask) -> Value {
    let status = serde_json::to_value(state.status()).unwrap_or(Value::Null);
    let status_text = status.as_str().unwrap_or("unknown").to_owned();
    let mut structured = Map::new();
    structured.insert("taskId".into(), Value::from(task_id));
    structured.insert("status".into(), status);
    let mut text = format!("Task {task_id} is {status_text}.");
    if let Some(message) = &state.task.status_message {
        structured.insert("statusMessage".into(), Value::from(message.clone()));
        text.push_str(&format!(" Latest progress: {message}"));
    }
    if matches!(
        state.payload,
        TaskPayload::Completed { .. } | TaskPayload::Failed { .. }
    ) {
        text.push_str(&format!(" Call {TASK_RESULT} for its result."));
    }
    text_result(text, Value::Object(structured), false)
}

/// A refused task ID (or any failure reading it) as a tool error the model can read.
pub fn refused(error: &McpError) -> Value {
    json!({
        "content": [{"type": "text", "text": error.message}],
        "isError": true,
    })
}

impl Connector {
    /// Serves one companion tool call for `scope`.
    pub(super) async fn call_companion(
        &self,
        tool: &str,
        arguments: &Map<String, Value>,
        scope: &CallerScope,
    ) -> Result<Value, McpError> {
        let task_id = arguments
            .get("task_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                McpError::invalid_params(format!("{tool} needs a string \"task_id\""), None)
            })?;
        let answer = match tool {
            TASK_STATUS => self
                .task_state(task_id, scope)
                .await
                .map(|state| status_result(task_id, &state)),
            TASK_CANCEL => self.cancel_task_op(task_id, scope).await.map(|()| {
                text_result(
                    format!(
                        "Cancellation of task {task_id} was requested; {TASK_STATUS} says \
                         cancelled once the work has stopped."
                    ),
                    json!({"taskId": task_id, "cancelRequested": true}),
                    false,
                )
            }),
            _ => self.task_result(task_id, scope).await,
        };
        Ok(answer.unwrap_or_else(|e| refused(&e)))
    }

    async fn task_result(&self, task_id: &str, scope: &CallerScope) -> Result<Value, McpError> {
        let deadline = tokio::time::Instant::now() + RESULT_WAIT;
        loop {
            let state = self.task_state(task_id, scope).await?;
            match state.payload {
                TaskPayload::Completed { result } => return Ok(Value::Object(result)),
                // The upstream's JSON-RPC error, as a tool error the model can read, the
                // error object in its `_meta` (R-CON-4).
                TaskPayload::Failed { error } => {
                    let error = serde_json::from_value(Value::Object(error))
                        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                    return Ok(to_call_tool_result(&Outcome::JsonRpcError(error)));
                }
                TaskPayload::Cancelled => {
                    return Ok(json!({
                        "content": [{"type": "text", "text": format!("Task {task_id} was cancelled.")}],
                        "isError": true,
                    }));
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return Ok(status_result(task_id, &state));
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{Task, TaskStatus};

    use super::*;

    #[test]
    fn three_tools_that_take_a_task_id() {
        let tools = companion_tools();
        let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, [TASK_STATUS, TASK_RESULT, TASK_CANCEL]);
        for t in &tools {
            assert!(is_companion(t["name"].as_str().unwrap()));
            assert_eq!(t["inputSchema"]["required"], json!(["task_id"]));
            serde_json::from_value::<rmcp::model::Tool>(t.clone()).expect("valid MCP Tool");
        }
        assert!(!is_companion("word_count"));
    }

    #[test]
    fn a_call_that_continues_says_how_to_follow_it() {
        let r = continues_as_task("T1", false);
        assert_eq!(r["isError"], false);
        assert_eq!(
            r["structuredContent"],
            json!({"taskId": "T1", "status": "working"})
        );
        assert_eq!(r["_meta"][TASK_ID_META], "T1");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("T1") && text.contains(TASK_RESULT) && text.contains(TASK_CANCEL));
        // A tool with an output schema: no structuredContent that would break it.
        let r = continues_as_task("T1", true);
        assert_eq!(r["isError"], true);
        assert!(r.get("structuredContent").is_none());
        assert_eq!(r["_meta"][TASK_ID_META], "T1");
        assert_eq!(r["content"][0]["text"].as_str().unwrap(), text);
    }

    #[test]
    fn status_shows_the_state_and_progress() {
        let task =
            Task::new("T", TaskStatus::Working, "t", "t").with_status_message("2 of 3 seconds");
        let r = status_result("T", &DetailedTask::new(task, TaskPayload::Working));
        assert_eq!(
            r["structuredContent"],
            json!({"taskId": "T", "status": "working", "statusMessage": "2 of 3 seconds"})
        );
        assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("2 of 3 seconds")
        );
        let done = Task::new("T", TaskStatus::Working, "t", "t");
        let r = status_result(
            "T",
            &DetailedTask::new(done, TaskPayload::Completed { result: Map::new() }),
        );
        assert_eq!(r["structuredContent"]["status"], "completed");
    }
}
