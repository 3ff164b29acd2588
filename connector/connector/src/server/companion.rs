//! Companion tools (R-CON-11): `task_status`, `task_result`, `task_cancel` and `task_input`, for
//! MCP hosts that give up on a call after about a minute and do not speak the tasks extension.
//! With `--companion-tools`, such a caller's call still running at `--task-after` answers with a
//! text result carrying the signed task ID; the four tools follow it, and `task_input` answers
//! what the call's round asks (R-CON-40) as `tasks/update` does. They verify the ID exactly as
//! `tasks/get` does, so another caller gets the same "unknown task" as for a forged ID.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError,
    model::{DetailedTask, InputResponses, TaskPayload},
};
use serde_json::{Map, Value, json};

use super::Connector;
use crate::{fair::Share, task_ref::CallerScope};
use durable_mcp_contract::outcome::{Outcome, to_call_tool_result};

pub const TASK_STATUS: &str = "task_status";
pub const TASK_RESULT: &str = "task_result";
pub const TASK_CANCEL: &str = "task_cancel";
pub const TASK_INPUT: &str = "task_input";
/// `_meta` key (and `structuredContent` field) of a call that continues as a task.
pub const TASK_ID_META: &str = "io.durable-mcp/taskId";

/// How long `task_result` waits for a working task before answering that it still works: well
/// inside the minute after which hosts give up on a call.
pub const RESULT_WAIT: Duration = Duration::from_secs(20);

/// Whether `name` is one of the companion tools.
pub fn is_companion(name: &str) -> bool {
    matches!(name, TASK_STATUS | TASK_RESULT | TASK_CANCEL | TASK_INPUT)
}

/// The four tools' MCP definitions.
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
        input_tool(),
    ]
}

/// `task_input`: the answers to what a task asks (`task_status` shows the requests), keyed as
/// they are, as `tasks/update` takes them (R-CON-40).
fn input_tool() -> Value {
    json!({
        "name": TASK_INPUT,
        "title": "Answer a task's input request",
        "description": "Answers what a long tool call that continues as a task asks for \
            (task_status shows its input requests, each under a key). input_responses maps each \
            key to the answer, the result its request's MCP method would return: for \
            elicitation/create e.g. {\"action\": \"accept\", \"content\": {...}}. The call then goes on \
            once; follow it with task_result.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "task_id": {
                    "type": "string",
                    "description": "The task ID a long tool call answered with."
                },
                "input_responses": {
                    "type": "object",
                    "description": "The answer to each input request, by the request's key.",
                    "additionalProperties": {"type": "object"}
                }
            },
            "required": ["task_id", "input_responses"]
        },
        "annotations": {"readOnlyHint": false, "openWorldHint": false},
    })
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
    if let TaskPayload::InputRequired { input_requests } = &state.payload {
        let requests = serde_json::to_value(input_requests).unwrap_or(Value::Null);
        text.push_str(&asks_text(task_id, &requests));
        structured.insert("inputRequests".into(), requests);
    }
    if matches!(
        state.payload,
        TaskPayload::Completed { .. } | TaskPayload::Failed { .. }
    ) {
        text.push_str(&format!(" Call {TASK_RESULT} for its result."));
    }
    text_result(text, Value::Object(structured), false)
}

/// What a task waiting for input asks, readable for a model, and how to answer with
/// `task_input`.
fn asks_text(task_id: &str, requests: &Value) -> String {
    let mut text = format!(
        " The tool asks for input; nothing goes on until it is answered. Answer with \
         {TASK_INPUT} {{\"task_id\": \"{task_id}\", \"input_responses\": {{<key>: <answer>}}}}, \
         one answer per request:"
    );
    for (key, request) in requests.as_object().into_iter().flatten() {
        text.push_str(&format!("\n- {key}: {}", request_text(request)));
    }
    text
}

/// One input request in words: what it asks and the shape of its answer.
fn request_text(request: &Value) -> String {
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    match method {
        "elicitation/create" => {
            let message = params.get("message").and_then(Value::as_str).unwrap_or("");
            let form = params
                .get("requestedSchema")
                .map(|s| format!(" Form schema: {s}."))
                .unwrap_or_default();
            let url = params
                .get("url")
                .and_then(Value::as_str)
                .map(|u| format!(" URL: {u}."))
                .unwrap_or_default();
            format!(
                "elicitation/create: {message}{form}{url} Answer {{\"action\": \"accept\", \
                 \"content\": {{...}}}}, {{\"action\": \"decline\"}} or {{\"action\": \"cancel\"}}."
            )
        }
        "sampling/createMessage" => format!(
            "sampling/createMessage: a model's reply to {}. Answer {{\"role\": \"assistant\", \
             \"content\": {{\"type\": \"text\", \"text\": ...}}, \"model\": ...}}.",
            params.get("messages").cloned().unwrap_or(Value::Null)
        ),
        "roots/list" => "roots/list: the client's roots. Answer {\"roots\": [{\"uri\": \
                         \"file:///...\"}]}."
            .to_owned(),
        other => format!("{other}: {params}"),
    }
}

/// `task_input`'s answer: whether the answers went to the round that asked for them, or
/// nothing asked (then nothing changed, as for `tasks/update`, R-CON-40).
pub fn input_taken(task_id: &str, answered: bool) -> Value {
    let text = if answered {
        format!(
            "Task {task_id} has its answers and goes on. Call {TASK_RESULT} with \
             {{\"task_id\": \"{task_id}\"}} for its result."
        )
    } else {
        format!(
            "Task {task_id} asks nothing these answers answer (it works, has ended, was answered \
             already, or asks under other keys); nothing changed. {TASK_STATUS} says what it \
             asks, if anything."
        )
    };
    text_result(
        text,
        json!({"taskId": task_id, "answered": answered}),
        false,
    )
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
        share: Option<&Share>,
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
            TASK_INPUT => {
                let responses = input_responses(arguments)?;
                self.update_task_op(task_id, scope, responses, share)
                    .await
                    .map(|answered| input_taken(task_id, answered))
            }
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
                // Nothing goes on until the caller answers: say so now (R-CON-40).
                TaskPayload::InputRequired { .. } => return Ok(status_result(task_id, &state)),
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

/// `task_input`'s `input_responses`: an object of answers by request key.
fn input_responses(arguments: &Map<String, Value>) -> Result<InputResponses, McpError> {
    arguments
        .get("input_responses")
        .and_then(Value::as_object)
        .map(|o| o.clone().into_iter().collect())
        .ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "{TASK_INPUT} needs an object \"input_responses\": the answer to each input \
                     request {TASK_STATUS} shows, by its key"
                ),
                None,
            )
        })
}

#[cfg(test)]
mod tests {
    use rmcp::model::{Task, TaskStatus};

    use super::*;

    #[test]
    fn four_tools_that_take_a_task_id() {
        let tools = companion_tools();
        let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, [TASK_STATUS, TASK_RESULT, TASK_CANCEL, TASK_INPUT]);
        for t in &tools {
            assert!(is_companion(t["name"].as_str().unwrap()));
            assert_eq!(t["inputSchema"]["required"][0], "task_id");
            serde_json::from_value::<rmcp::model::Tool>(t.clone()).expect("valid MCP Tool");
        }
        assert_eq!(
            tools[3]["inputSchema"]["required"],
            json!(["task_id", "input_responses"])
        );
        assert!(!is_companion("word_count"));
    }

    /// A confirmation request as the mock upstream asks it.
    fn asking(task_id: &str) -> Value {
        let requests: rmcp::model::InputRequests = serde_json::from_value(json!({
            "confirm": {"method": "elicitation/create", "params": {
                "mode": "form",
                "message": "Delete 40 GB?",
                "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
            }}
        }))
        .unwrap();
        let task = Task::new(task_id, TaskStatus::InputRequired, "t", "t");
        status_result(
            task_id,
            &DetailedTask::new(
                task,
                TaskPayload::InputRequired {
                    input_requests: requests,
                },
            ),
        )
    }

    #[test]
    fn status_shows_what_a_task_asks_and_how_to_answer() {
        let r = asking("T");
        assert_eq!(r["isError"], false);
        let structured = &r["structuredContent"];
        assert_eq!(structured["status"], "input_required");
        assert_eq!(
            structured["inputRequests"]["confirm"]["params"]["message"],
            "Delete 40 GB?"
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        for part in [
            "input_required",
            "Delete 40 GB?",
            "- confirm: elicitation/create",
            "\"confirm\":{\"type\":\"boolean\"}",
            TASK_INPUT,
            "\"task_id\": \"T\"",
            "\"action\": \"accept\"",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    #[test]
    fn sampling_and_roots_requests_read_as_what_they_ask() {
        let sampling = request_text(&json!({"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise"}}]
        }}));
        assert!(sampling.contains("Summarise") && sampling.contains("\"role\": \"assistant\""));
        let roots = request_text(&json!({"method": "roots/list"}));
        assert!(roots.contains("\"roots\""), "{roots}");
    }

    #[test]
    fn task_input_takes_an_object_of_answers_and_says_whether_they_were_taken() {
        let arguments =
            json!({"task_id": "T", "input_responses": {"confirm": {"action": "accept"}}});
        let responses = input_responses(arguments.as_object().unwrap()).unwrap();
        assert_eq!(responses["confirm"]["action"], "accept");
        for bad in [
            json!({"task_id": "T"}),
            json!({"task_id": "T", "input_responses": "yes"}),
        ] {
            let e = input_responses(bad.as_object().unwrap()).unwrap_err();
            assert!(e.message.contains("input_responses"), "{}", e.message);
        }
        let taken = input_taken("T", true);
        assert_eq!(
            taken["structuredContent"],
            json!({"taskId": "T", "answered": true})
        );
        assert!(
            taken["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(TASK_RESULT)
        );
        let ignored = input_taken("T", false);
        assert_eq!(ignored["isError"], false, "acknowledged, as tasks/update");
        assert_eq!(ignored["structuredContent"]["answered"], false);
        assert!(
            ignored["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("nothing changed")
        );
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
