//! The upstream's own tasks (R-PRX-28): a tool the upstream lists with
//! `execution.taskSupport: "required"` is called asking for a task, and the task the upstream
//! answers is followed with `tasks/get` (and, for a 2025-11-25 upstream, `tasks/result`) and
//! cancelled with `tasks/cancel`.
//!
//! How the proxy asks depends on how the upstream offers tasks:
//! - the tasks extension (SEP-2663, `capabilities.extensions["io.modelcontextprotocol/tasks"]`):
//!   the request's `_meta["io.modelcontextprotocol/clientCapabilities"]` declares the
//!   extension, on `tools/call` and on every `tasks/*` request; the answer is a
//!   `CreateTaskResult` (`resultType: "task"`, the task's fields at the top level), and
//!   `tasks/get` inlines the result (`completed`) or the JSON-RPC error (`failed`);
//! - otherwise (2025-11-25, tasks in `capabilities.tasks`): a task-augmented request,
//!   `params.task = {}`; the answer nests the task (`{"task": {...}}`), `tasks/get` reports the
//!   status and `tasks/result` gives the result or error.
//!
//! A task answer is accepted only for a call that asked for one: any other is a broken
//! protocol (R-NXC-4).

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelTaskParams, CancelTaskRequest, ClientRequest,
    CustomRequest, GetTaskParams, GetTaskRequest, ServerResult, UpdateTaskParams,
    UpdateTaskRequest,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};

use super::{UpstreamClient, UpstreamError, to_json};
use durable_mcp_contract::{call::CallNotification, jsonrpc_error::JsonRpcError};

/// How long one `tasks/*` request may wait for its answer.
const TASK_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The first wait between two `tasks/get`, doubling up to [`POLL_BACKOFF_MAX`].
const POLL_BACKOFF_START: Duration = Duration::from_millis(250);
const POLL_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// An upstream's `pollIntervalMs` is honoured up to this.
const POLL_INTERVAL_MAX: Duration = Duration::from_secs(30);

/// What a `tools/call` that asked for a task was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum CallAnswer {
    /// The call's result, as written.
    Result(Value),
    /// The upstream's task: its ID and the poll interval it asks for.
    Task {
        id: String,
        poll_interval: Option<Duration>,
        /// The connection that made it (`UpstreamHandler::origin`): the task is followed
        /// there only (R-PRX-28).
        origin: String,
    },
}

/// An upstream task's state, as `tasks/get` reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Working {
        message: Option<String>,
        poll_interval: Option<Duration>,
    },
    /// The task waits for input: the `inputRequests` its `tasks/get` inlines (the tasks
    /// extension), which the round ends with (R-PRX-29); `None` without them (2025-11-25).
    InputRequired {
        message: Option<String>,
        requests: Option<Map<String, Value>>,
    },
    /// Done: the result when `tasks/get` inlines it, else `tasks/result` has it.
    Completed(Option<Value>),
    /// Failed: the JSON-RPC error, as written, when `tasks/get` inlines it, else
    /// `tasks/result` has it.
    Failed(Option<JsonRpcError>),
    Cancelled,
}

/// The wait before the next `tasks/get`, after `polls` of them: a back-off from 250 ms
/// doubling to 2 s, never shorter than the interval the upstream asked for (at most 30 s).
pub fn next_poll_delay(poll_interval: Option<Duration>, polls: u32) -> Duration {
    let backoff = POLL_BACKOFF_START
        .saturating_mul(1u32.checked_shl(polls.min(16)).unwrap_or(u32::MAX))
        .min(POLL_BACKOFF_MAX);
    backoff.max(poll_interval.unwrap_or_default().min(POLL_INTERVAL_MAX))
}

/// The poll interval a task object asks for (`pollIntervalMs`, or 2025-11-25's `pollInterval`).
fn poll_interval(task: &Map<String, Value>) -> Option<Duration> {
    task.get("pollIntervalMs")
        .or_else(|| task.get("pollInterval"))
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

/// The task an answer to `tools/call` creates, if it is one: `resultType: "task"` with the
/// task's fields at the top level (SEP-2663), or a `task` object and no `content` (2025-11-25).
pub fn created_task(answer: &Value) -> Option<CallAnswer> {
    let task = crate::flights::created_task(answer)?;
    let id = task.get("taskId")?.as_str()?.to_owned();
    Some(CallAnswer::Task {
        id,
        poll_interval: poll_interval(task),
        origin: String::new(),
    })
}

/// A `tasks/get` answer's state.
pub fn task_state(answer: &Value) -> Result<TaskState, String> {
    let task = answer
        .as_object()
        .ok_or("the answer to tasks/get is not an object")?;
    let message = task
        .get("statusMessage")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let status = task.get("status").and_then(Value::as_str);
    Ok(match status {
        Some("working") => TaskState::Working {
            message,
            poll_interval: poll_interval(task),
        },
        Some("input_required") => TaskState::InputRequired {
            message,
            requests: task
                .get("inputRequests")
                .and_then(Value::as_object)
                .cloned(),
        },
        Some("completed") => TaskState::Completed(
            task.get("result")
                .filter(|r| r.is_object())
                .cloned()
                .map(super::era::without_complete_marker),
        ),
        Some("failed") => TaskState::Failed(task.get("error").and_then(jsonrpc_error)),
        Some("cancelled") => TaskState::Cancelled,
        other => {
            return Err(format!(
                "tasks/get answered an unknown task status {other:?}"
            ));
        }
    })
}

/// A JSON-RPC error object's code and message.
fn jsonrpc_error(error: &Value) -> Option<JsonRpcError> {
    let code = i32::try_from(error.get("code")?.as_i64()?).ok()?;
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let data = error.get("data").cloned();
    Some(JsonRpcError {
        code,
        message: message.to_owned(),
        data,
    })
}

impl UpstreamClient {
    /// `tools/call` asking for a task (see the module): the upstream's task, or its result
    /// when it answered at once. Dropping the future before the answer cancels the request.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        round: super::CallRound<'_>,
        on_note: impl FnMut(CallNotification),
    ) -> Result<CallAnswer, UpstreamError> {
        let conn = self.connect().await?;
        let upstream = super::era::Upstream::of(conn.peer());
        let meta = super::era::request_meta(upstream, true);
        let answers = round.answers;
        let mut request = if upstream.offers_tasks {
            let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
            ClientRequest::CallToolRequest(CallToolRequest::new(crate::input::with_answers(
                params, answers,
            )))
        } else {
            let mut params = Map::new();
            params.insert("name".into(), json!(name));
            params.insert("arguments".into(), json!(arguments));
            params.insert("task".into(), json!({}));
            if let Some(answers) = answers {
                // The answers go with every round, whatever the protocol (R-PRX-29).
                params.insert("inputResponses".into(), json!(answers.input_responses));
                if let Some(state) = &answers.request_state {
                    params.insert("requestState".into(), json!(state));
                }
            }
            let params = Value::Object(params);
            ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(params)))
        };
        super::for_caller(&mut request, round.caller);
        let (id, answered) = self.send_reporting(&conn, request, meta, on_note).await?;
        if let ServerResult::InputRequiredResult(asked) = &answered {
            // Asked for input at once, before any task (R-PRX-29): the round ends with it.
            return self
                .asked_as_written(&conn, &id, asked)
                .map(CallAnswer::Result);
        }
        let written = conn.service().written.take(&id);
        let seen = match &written {
            Some(w) => Some(w.clone()),
            None => to_json(&answered).ok(),
        };
        if let Some(CallAnswer::Task {
            id, poll_interval, ..
        }) = seen.as_ref().and_then(created_task)
        {
            let origin = conn.service().origin.clone();
            return Ok(CallAnswer::Task {
                id,
                poll_interval,
                origin,
            });
        }
        let result = self.call_tool_result(answered)?;
        let result = match written {
            Some(w @ Value::Object(_)) => w,
            _ => to_json(&result).map_err(|reason| self.protocol(reason))?,
        };
        Ok(CallAnswer::Result(super::era::without_complete_marker(
            result,
        )))
    }

    /// `tasks/get`: the upstream task's state.
    pub async fn task_state(
        &self,
        task_id: &str,
        origin: &str,
    ) -> Result<TaskState, UpstreamError> {
        let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(
            task_id.to_owned(),
        )));
        let answer = self.task_request(request, origin).await?;
        let mut state = task_state(&answer).map_err(|reason| self.protocol(reason))?;
        if let TaskState::InputRequired { requests, .. } = &mut state
            && !self.offers_tasks().await
        {
            // Only the tasks extension answers input with `tasks/update` (R-PRX-28).
            *requests = None;
        }
        Ok(state)
    }

    /// Whether the upstream offers the tasks extension (SEP-2663), not 2025-11-25's tasks.
    async fn offers_tasks(&self) -> bool {
        match self.connect().await {
            Ok(conn) => super::era::Upstream::of(conn.peer()).offers_tasks,
            Err(_) => false,
        }
    }

    /// `tasks/update` (SEP-2663): the caller's answers to the task's input requests; its
    /// answer is an acknowledgement.
    pub async fn update_task(
        &self,
        task_id: &str,
        origin: &str,
        input_responses: &Map<String, Value>,
    ) -> Result<(), UpstreamError> {
        let responses = input_responses.clone().into_iter().collect();
        let request = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
            UpdateTaskParams::new(task_id.to_owned(), responses),
        ));
        self.task_request(request, origin).await.map(|_| ())
    }

    /// `tasks/result` (2025-11-25): the finished task's result, or its error.
    pub async fn task_result(&self, task_id: &str, origin: &str) -> Result<Value, UpstreamError> {
        let request = ClientRequest::CustomRequest(CustomRequest::new(
            "tasks/result",
            Some(json!({"taskId": task_id})),
        ));
        self.task_request(request, origin).await
    }

    /// `tasks/cancel`: asks the upstream to stop the task; its answer is an acknowledgement.
    pub async fn cancel_task(&self, task_id: &str, origin: &str) -> Result<(), UpstreamError> {
        let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
            CancelTaskParams::new(task_id.to_owned()),
        ));
        self.task_request(request, origin).await.map(|_| ())
    }

    /// One `tasks/*` request, bounded by [`TASK_REQUEST_TIMEOUT`]: its answer as written. It
    /// goes only to the connection that made the task (`origin`): a task ID may be only the
    /// upstream's counter, so a restarted child's task of that ID is another call's
    /// (R-PRX-28); elsewhere it is not sent, and fails as a connect failure.
    async fn task_request(
        &self,
        request: ClientRequest,
        origin: &str,
    ) -> Result<Value, UpstreamError> {
        let conn = self.connect().await?;
        if conn.service().origin != origin {
            return Err(UpstreamError::Connect {
                service: self.service.clone(),
                reason: "the upstream connection that made the task is gone".into(),
            });
        }
        let mut options = PeerRequestOptions::no_options();
        options.meta = super::era::request_meta(super::era::Upstream::of(conn.peer()), true);
        options.timeout = Some(TASK_REQUEST_TIMEOUT);
        self.send_as_written(&conn, request, options).await
    }

    /// A protocol error of this upstream, with `reason`.
    pub(super) fn protocol(&self, reason: String) -> UpstreamError {
        UpstreamError::Protocol {
            service: self.service.clone(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_task_answer_shapes_are_recognised_and_results_are_not_tasks() {
        let extension = json!({"resultType": "task", "taskId": "t1", "status": "working",
            "createdAt": "x", "lastUpdatedAt": "x", "ttlMs": null, "pollIntervalMs": 500});
        assert_eq!(
            created_task(&extension),
            Some(CallAnswer::Task {
                id: "t1".into(),
                poll_interval: Some(Duration::from_millis(500)),
                origin: String::new()
            })
        );
        let legacy = json!({"task": {"taskId": "t2", "status": "working", "pollInterval": 1000}});
        assert_eq!(
            created_task(&legacy),
            Some(CallAnswer::Task {
                id: "t2".into(),
                poll_interval: Some(Duration::from_secs(1)),
                origin: String::new()
            })
        );
        let result = json!({"content": [], "task": {"taskId": "t3"}});
        assert_eq!(created_task(&result), None);
        assert_eq!(created_task(&json!({"content": []})), None);
        assert_eq!(created_task(&json!({"resultType": "task"})), None);
    }

    #[test]
    fn every_task_status_is_read_with_what_it_carries() {
        let working = json!({"taskId": "t", "status": "working", "statusMessage": "half",
            "pollIntervalMs": 200});
        assert_eq!(
            task_state(&working),
            Ok(TaskState::Working {
                message: Some("half".into()),
                poll_interval: Some(Duration::from_millis(200))
            })
        );
        let done = json!({"status": "completed", "result": {"content": []}});
        assert_eq!(
            task_state(&done),
            Ok(TaskState::Completed(Some(json!({"content": []}))))
        );
        assert_eq!(
            task_state(&json!({"status": "completed"})),
            Ok(TaskState::Completed(None))
        );
        let failed = json!({"status": "failed", "error": {"code": -32603, "message": "boom", "data": {"x": 1}}});
        assert_eq!(
            task_state(&failed),
            Ok(TaskState::Failed(Some(JsonRpcError {
                code: -32603,
                message: "boom".into(),
                data: Some(json!({"x": 1}))
            })))
        );
        assert_eq!(
            task_state(&json!({"status": "failed"})),
            Ok(TaskState::Failed(None))
        );
        assert_eq!(
            task_state(&json!({"status": "cancelled"})),
            Ok(TaskState::Cancelled)
        );
        assert_eq!(
            task_state(&json!({"status": "input_required", "inputRequests": {"a": {}}})),
            Ok(TaskState::InputRequired {
                message: None,
                requests: json!({"a": {}}).as_object().cloned()
            })
        );
        assert_eq!(
            task_state(&json!({"status": "input_required"})),
            Ok(TaskState::InputRequired {
                message: None,
                requests: None
            })
        );
        assert!(task_state(&json!({"status": "paused"})).is_err());
        assert!(task_state(&json!([])).is_err());
    }

    #[test]
    fn polls_back_off_and_honour_the_upstreams_interval() {
        let ms = Duration::from_millis;
        let delays: Vec<_> = (0..6).map(|n| next_poll_delay(None, n)).collect();
        assert_eq!(
            delays,
            [ms(250), ms(500), ms(1000), ms(2000), ms(2000), ms(2000)]
        );
        assert_eq!(next_poll_delay(Some(ms(1000)), 0), ms(1000));
        assert_eq!(next_poll_delay(Some(ms(1000)), 4), ms(2000));
        assert_eq!(next_poll_delay(Some(ms(5000)), 9), ms(5000));
        assert_eq!(
            next_poll_delay(Some(Duration::from_secs(3600)), 0),
            Duration::from_secs(30)
        );
        assert_eq!(next_poll_delay(None, u32::MAX), ms(2000));
    }
}

/// Property tests of an upstream's task answers as the proxy reads them (R-PRX-28, R-CON-51):
/// any JSON is a state or an error, never a panic; what an upstream writes reads back.
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::answer;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_task_answer_is_a_state_a_task_or_an_error(a in answer()) {
            let _ = task_state(&a);
            let _ = created_task(&a);
            let _ = jsonrpc_error(&a);
            let _ = super::super::era::without_complete_marker(a.clone());
            if let Some(fields) = a.as_object() {
                let _ = poll_interval(fields);
            }
        }

        /// A `tasks/get` answer as an upstream writes it reads back as its state.
        #[test]
        fn a_written_task_state_reads_back(
            status in prop::sample::select(&["working", "input_required", "completed", "failed", "cancelled"][..]),
            message in prop::option::of("\\PC{0,20}"),
            poll_ms in prop::option::of(any::<u64>()),
            code in any::<i32>(),
            text in "\\PC{0,20}",
            payload in answer(),
        ) {
            let mut task = json!({"taskId": "t", "status": status});
            if let Some(m) = &message {
                task["statusMessage"] = json!(m);
            }
            if let Some(ms) = poll_ms {
                task["pollIntervalMs"] = json!(ms);
            }
            let requests = Map::from_iter([("q".to_owned(), payload.clone())]);
            let result = json!({"content": [], "structuredContent": payload});
            let error = JsonRpcError { code, message: text, data: Some(payload) };
            match status {
                "input_required" => task["inputRequests"] = json!(requests),
                "completed" => task["result"] = result.clone(),
                "failed" => task["error"] = json!(error),
                _ => {}
            }
            let expected = match status {
                "working" => TaskState::Working { message, poll_interval: poll_ms.map(Duration::from_millis) },
                "input_required" => TaskState::InputRequired { message, requests: Some(requests) },
                "completed" => TaskState::Completed(Some(result)),
                "failed" => TaskState::Failed(Some(error)),
                _ => TaskState::Cancelled,
            };
            prop_assert_eq!(task_state(&task), Ok(expected));
        }

        /// A created task reads back as its ID, in either era's form.
        #[test]
        fn a_created_task_reads_back_as_its_id(id in "\\PC{0,30}", poll_ms in prop::option::of(any::<u64>()), nested in any::<bool>()) {
            let mut task = json!({"taskId": id, "status": "working"});
            if let Some(ms) = poll_ms {
                task["pollIntervalMs"] = json!(ms);
            }
            let answer = if nested {
                json!({"task": task})
            } else {
                task["resultType"] = json!("task");
                task
            };
            let expected = CallAnswer::Task { id, poll_interval: poll_ms.map(Duration::from_millis), origin: String::new() };
            prop_assert_eq!(created_task(&answer), Some(expected));
        }
    }
}
