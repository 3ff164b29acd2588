//! Companion tools (R-CON-11): `task_status`, `task_result`, `task_cancel` and `task_input`, for
//! MCP hosts that give up on a call after about a minute and do not speak the tasks extension.
//! With `--companion-tools`, such a caller's call still running at `--task-after` answers with a
//! text result carrying the signed task ID; the four tools follow it, and `task_input` answers
//! what the call's round asks (R-CON-40) as `tasks/update` does. They verify the ID exactly as
//! `tasks/get` does, so another caller gets the same "unknown task" as for a forged ID.
//!
//! The caller is a model: the tools show it, and take its answers to, only requests meant for a
//! model (`sampling/createMessage`), and those only when its host does not take sampling itself
//! (a session client that declared `sampling` gets them relayed, so its user consents,
//! [`Answerer`]). A request for the user (`elicitation/create`, whose URL
//! mode needs the user's consent before a URL is opened) or the host (`roots/list`) is never
//! shown to the model: `task_result` relays it to the host's session when the host declared the
//! capability (R-CON-43's relay), else answers a tool error saying what the host must support.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{DetailedTask, InputResponses, TaskPayload},
    service::RequestContext,
};
use serde_json::{Map, Value, json};

use super::Typed;
use crate::{fair::Share, task_ref::CallerScope};
use durable_mcp_contract::{
    input::INPUT_REQUIRED_ERROR_TYPE,
    outcome::{ERROR_TYPE_META, Outcome, to_call_tool_result},
};

pub const TASK_STATUS: &str = "task_status";
pub const TASK_RESULT: &str = "task_result";
pub const TASK_CANCEL: &str = "task_cancel";
pub const TASK_INPUT: &str = "task_input";
/// `_meta` key (and `structuredContent` field) of a call that continues as a task.
pub const TASK_ID_META: &str = "io.durable-mcp/taskId";

/// How long `task_result` waits for a working task before answering that it still works: well
/// inside the minute after which hosts give up on a call.
pub const RESULT_WAIT: Duration = Duration::from_secs(20);

/// The one kind of input request the model sees and answers through the companion tools: a
/// request for a model's message. The others are the user's or the host's to answer.
const MODEL_REQUEST: &str = "sampling/createMessage";

/// Who answers a task's input requests (R-CON-40, R-CON-11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answerer {
    /// The task's owner, with `tasks/update`: whatever the round asks.
    Owner,
    /// The model, with `task_input`: requests for a model's message only, and not those either
    /// when its host takes sampling requests on its session (`host_samples`): the host then
    /// asks its user, as MCP wants, and the model never answers in the host's place.
    Model { host_samples: bool },
}

/// The methods of the requests in `requests` (by key) that are not for the model: never shown
/// to it, nor answered by it (R-CON-11). Empty when the model may answer them all. A request
/// for a model's message is the host's too when the host takes sampling (`host_samples`).
pub(super) fn not_for_the_model(requests: &Value, host_samples: bool) -> Vec<String> {
    let mut methods: Vec<String> = requests
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, r)| r.get("method").and_then(Value::as_str).unwrap_or(""))
        .filter(|m| host_samples || *m != MODEL_REQUEST)
        .map(str::to_owned)
        .collect();
    methods.sort();
    methods.dedup();
    methods
}

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

/// `task_input`: the answers to a task's requests for a model's message (`task_status` shows
/// them), keyed as they are, as `tasks/update` takes them (R-CON-40, R-CON-11).
fn input_tool() -> Value {
    json!({
        "name": TASK_INPUT,
        "title": "Answer a task's input request",
        "description": "Answers a long tool call's requests for a model's message \
            (sampling/createMessage), which task_status shows, each under a key. \
            input_responses maps each key to the message, e.g. {\"role\": \"assistant\", \
            \"content\": {\"type\": \"text\", \"text\": ...}, \"model\": ...}. A request for the \
            user or the host is not answered here: task_result passes it to the host. The call \
            then goes on once; follow it with task_result.",
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
    if let Some(fields) = result.as_object_mut() {
        fields.insert("_meta".into(), json!({ TASK_ID_META: task_id }));
    }
    result
}

/// `task_status`'s answer for a task's state.
pub fn status_result(task_id: &str, state: &DetailedTask, host_samples: bool) -> Value {
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
        let withheld = not_for_the_model(&requests, host_samples);
        if withheld.is_empty() {
            text.push_str(&asks_text(task_id, &requests));
            structured.insert("inputRequests".into(), requests);
        } else {
            // Neither what it asks nor where (a URL) reaches the model.
            text.push_str(&format!(
                " The tool asks the user or the host for input ({}), which is not shown here; \
                 nothing goes on until it is answered. Call {TASK_RESULT}, which passes it to \
                 the host if the host supports it.",
                withheld.join(", ")
            ));
            structured.insert("hostInputRequests".into(), Value::from(withheld));
        }
    }
    if matches!(
        state.payload,
        TaskPayload::Completed { .. } | TaskPayload::Failed { .. }
    ) {
        text.push_str(&format!(" Call {TASK_RESULT} for its result."));
    }
    text_result(text, Value::Object(structured), false)
}

/// What a task waiting for a model's message asks, readable for a model, and how to answer
/// with `task_input`.
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

/// A request for a model's message in words: what it asks and the shape of its answer. Only
/// those are ever put in words for the model ([`not_for_the_model`]).
fn request_text(request: &Value) -> String {
    let messages = request
        .get("params")
        .and_then(|p| p.get("messages"))
        .cloned()
        .unwrap_or(Value::Null);
    format!(
        "{MODEL_REQUEST}: a model's reply to {messages}. Answer {{\"role\": \"assistant\", \
         \"content\": {{\"type\": \"text\", \"text\": ...}}, \"model\": ...}}."
    )
}

/// `task_result`'s tool error for a task whose request for the user or the host could not be
/// passed to the host: of type `InputRequired`, saying what the host must support. The task
/// still waits (until `--input-timeout`).
fn host_must_answer(task_id: &str, why: &str) -> Value {
    let text = format!(
        "Task {task_id} asks the user or the host for input, which is never shown to the model, \
         and it could not be passed to the host: {why}. A host that supports it, or one with the \
         tasks extension (tasks/get, tasks/update), can answer it; the task waits until the \
         connector's --input-timeout, and {TASK_CANCEL} stops it."
    );
    json!({
        "content": [{"type": "text", "text": text}],
        "isError": true,
        "_meta": {ERROR_TYPE_META: INPUT_REQUIRED_ERROR_TYPE},
    })
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

impl Typed {
    /// Serves one companion tool call for `scope`.
    pub(super) async fn call_companion(
        &self,
        tool: &str,
        arguments: &Map<String, Value>,
        (scope, share): (&CallerScope, Option<&Share>),
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let task_id = arguments
            .get("task_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                McpError::invalid_params(format!("{tool} needs a string \"task_id\""), None)
            })?;
        let host_samples = super::capabilities::host_samples(context);
        let answer = match tool {
            TASK_STATUS => self
                .task_state(task_id, scope)
                .await
                .map(|state| status_result(task_id, &state, host_samples)),
            TASK_INPUT => {
                let responses = input_responses(arguments)?;
                let model = Answerer::Model { host_samples };
                self.update_task_op(task_id, scope, responses, share, model)
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
            _ => self.task_result(task_id, (scope, share), context).await,
        };
        Ok(answer.unwrap_or_else(|e| refused(&e)))
    }

    async fn task_result(
        &self,
        task_id: &str,
        (scope, share): (&CallerScope, Option<&Share>),
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let deadline = tokio::time::Instant::now() + RESULT_WAIT;
        let host_samples = super::capabilities::host_samples(context);
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
                // A model's message: the model answers, so say so now (R-CON-40).
                TaskPayload::InputRequired { ref input_requests }
                    if serde_json::to_value(input_requests)
                        .is_ok_and(|r| not_for_the_model(&r, host_samples).is_empty()) =>
                {
                    return Ok(status_result(task_id, &state, host_samples));
                }
                // The user's or the host's: to the host, or why not (R-CON-11).
                TaskPayload::InputRequired { .. } => {
                    let op = self.task_op(task_id, scope)?;
                    if let Some(why) = self
                        .relay_waiting_round(&op, context, (scope, share))
                        .await?
                    {
                        return Ok(host_must_answer(task_id, &why));
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(status_result(
                            task_id,
                            &self.task_state(task_id, scope).await?,
                            host_samples,
                        ));
                    }
                }
                TaskPayload::Cancelled => {
                    return Ok(json!({
                        "content": [{"type": "text", "text": format!("Task {task_id} was cancelled.")}],
                        "isError": true,
                    }));
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return Ok(status_result(task_id, &state, host_samples));
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

    /// The status of a task whose round asks `requests` (by key).
    fn asking(task_id: &str, requests: Value) -> Value {
        let requests: rmcp::model::InputRequests = serde_json::from_value(requests).unwrap();
        let task = Task::new(task_id, TaskStatus::InputRequired, "t", "t");
        status_result(
            task_id,
            &DetailedTask::new(
                task,
                TaskPayload::InputRequired {
                    input_requests: requests,
                },
            ),
            false,
        )
    }

    fn sampling() -> Value {
        json!({"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise"}}],
            "maxTokens": 100
        }})
    }

    #[test]
    fn status_shows_a_models_request_and_how_to_answer() {
        let r = asking("T", json!({"sample": sampling()}));
        assert_eq!(r["isError"], false);
        let structured = &r["structuredContent"];
        assert_eq!(structured["status"], "input_required");
        assert_eq!(
            structured["inputRequests"]["sample"]["method"],
            "sampling/createMessage"
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        for part in [
            "input_required",
            "- sample: sampling/createMessage",
            "Summarise",
            "\"role\": \"assistant\"",
            TASK_INPUT,
            "\"task_id\": \"T\"",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    #[test]
    fn a_request_for_the_user_or_the_host_is_never_shown_to_the_model() {
        let form = json!({"method": "elicitation/create", "params": {
            "mode": "form",
            "message": "Delete 40 GB?",
            "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
        }});
        let url = json!({"method": "elicitation/create", "params": {
            "mode": "url",
            "message": "Sign in",
            "url": "https://auth.example/consent?code=secret",
            "elicitationId": "e1"
        }});
        let roots = json!({"method": "roots/list"});
        for requests in [
            json!({"confirm": form}),
            json!({"login": url}),
            json!({"roots": roots}),
            json!({"confirm": form, "sample": sampling()}),
        ] {
            let r = asking("T", requests.clone());
            let all = r.to_string();
            for hidden in [
                "Delete 40 GB?",
                "requestedSchema",
                "auth.example",
                "Sign in",
                "Summarise",
            ] {
                assert!(!all.contains(hidden), "{hidden:?} shown in {all}");
            }
            assert!(
                r["structuredContent"].get("inputRequests").is_none(),
                "{all}"
            );
            assert_eq!(r["structuredContent"]["status"], "input_required");
            assert_eq!(
                r["structuredContent"]["hostInputRequests"],
                json!(not_for_the_model(&requests, false)),
            );
            let text = r["content"][0]["text"].as_str().unwrap();
            assert!(
                text.contains(TASK_RESULT) && !text.contains(TASK_INPUT),
                "{text}"
            );
        }
    }

    #[test]
    fn only_a_models_message_is_for_the_model() {
        let requests = json!({
            "a": sampling(),
            "b": {"method": "elicitation/create"},
            "c": {"method": "roots/list"},
            "d": {"method": "elicitation/create"},
        });
        assert_eq!(
            not_for_the_model(&requests, false),
            ["elicitation/create", "roots/list"]
        );
        assert!(not_for_the_model(&json!({"a": sampling()}), false).is_empty());
        assert_eq!(not_for_the_model(&json!({"x": {}}), false), [""]);
    }

    /// R-CON-11: a host that takes sampling requests itself answers them with its user's
    /// consent; the model is never shown them, nor may it answer them with task_input.
    #[test]
    fn a_model_never_answers_sampling_in_place_of_a_host_that_takes_it() {
        let requests = json!({"a": sampling(), "b": {"method": "roots/list"}});
        assert_eq!(
            not_for_the_model(&requests, true),
            ["roots/list", "sampling/createMessage"]
        );
        let state = |requests: Value| {
            let input_requests = serde_json::from_value(requests).unwrap();
            let task = Task::new("T", TaskStatus::InputRequired, "t", "t");
            DetailedTask::new(task, TaskPayload::InputRequired { input_requests })
        };
        let r = status_result("T", &state(json!({"a": sampling()})), true);
        let all = r.to_string();
        assert!(!all.contains("Summarise"), "{all}");
        assert_eq!(
            r["structuredContent"]["hostInputRequests"],
            json!(["sampling/createMessage"])
        );
        let shown = status_result("T", &state(json!({"a": sampling()})), false);
        assert!(shown["structuredContent"].get("inputRequests").is_some());
    }

    #[test]
    fn a_request_the_host_cannot_take_is_a_typed_tool_error_saying_why() {
        let r = host_must_answer("T", "it needs the elicitation capability");
        assert_eq!(r["isError"], true);
        assert_eq!(r["_meta"][ERROR_TYPE_META], INPUT_REQUIRED_ERROR_TYPE);
        let text = r["content"][0]["text"].as_str().unwrap();
        for part in ["elicitation capability", "--input-timeout", TASK_CANCEL] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
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

    /// A companion task ID is a task ID (R-CON-6): the longest one is carried whole, within
    /// the 128 characters hosts keep.
    #[test]
    fn a_continuing_calls_answer_carries_the_longest_task_id_whole() {
        let id = crate::task_ref::longest_task_id();
        for has_schema in [false, true] {
            let r = continues_as_task(&id, has_schema);
            let carried = r["_meta"][TASK_ID_META].as_str().unwrap();
            assert_eq!(carried, id);
            assert!(carried.len() <= crate::task_ref::MAX_COMPACT_TASK_ID_LEN);
            let text = r["content"][0]["text"].as_str().unwrap();
            assert!(
                text.contains(&format!("{{\"task_id\": \"{id}\"}}")),
                "{text}"
            );
        }
        let r = continues_as_task(&id, false);
        assert_eq!(r["structuredContent"]["taskId"], id.as_str());
    }

    #[test]
    fn status_shows_the_state_and_progress() {
        let task =
            Task::new("T", TaskStatus::Working, "t", "t").with_status_message("2 of 3 seconds");
        let r = status_result("T", &DetailedTask::new(task, TaskPayload::Working), false);
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
            false,
        );
        assert_eq!(r["structuredContent"]["status"], "completed");
    }
}
