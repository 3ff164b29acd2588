//! Steps through a connector replica: `mcp` (`tools/call`, optionally with an idempotency key),
//! `tasks_get` and `tasks_cancel`, and the checks on their answers.

use std::time::Duration;

use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientRequest,
        GetTaskParams, ServerResult, UpdateTaskParams,
    },
    service::{PeerRequestOptions, ServiceError},
};
use serde_json::{Value, json};

use super::{
    Failure, StepEnv,
    checks::{
        cancel_point, check_cancelled_upstream, check_invocations, check_is_error, check_snapshot,
        check_structured, short,
    },
    connector_driver::McpClient,
    setup,
};
use crate::scenario::{Expect, ExpectedOutcome, McpCallStep, TaskStep};

/// `_meta` key of the task ID in a companion-tools answer (R-CON-11).
const TASK_ID_META: &str = durable_mcp::connector::server::companion::TASK_ID_META;
/// `_meta` key of the failure's type in a connector's error results (R-CON-4).
const ERROR_TYPE_META: &str = "io.durable-mcp/errorType";
/// How long `tasks_get` with `until_done` polls.
const TASK_DEADLINE: Duration = Duration::from_secs(60);

/// What a connector answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A `CallToolResult`.
    Result(Value),
    /// A task: created by `tools/call`, or read by `tasks/get` (with its result once done).
    Task {
        id: Option<String>,
        status: String,
        result: Option<Value>,
        /// A `failed` task's inlined JSON-RPC error object.
        error: Option<Value>,
    },
    /// A JSON-RPC error (or the transport failing).
    Error {
        code: Option<i32>,
        message: String,
        data: Option<Value>,
    },
    /// `tasks/cancel` was acknowledged.
    Accepted,
    /// The client cancelled the request before an answer came.
    Canceled,
}

impl Answer {
    fn outcome(&self) -> ExpectedOutcome {
        match self {
            Answer::Result(_) => ExpectedOutcome::Result,
            Answer::Task { .. } => ExpectedOutcome::Task,
            Answer::Error { .. } => ExpectedOutcome::Error,
            Answer::Accepted => ExpectedOutcome::Accepted,
            Answer::Canceled => ExpectedOutcome::Canceled,
        }
    }

    fn describe(&self) -> String {
        match self {
            Answer::Result(r) => match r.get("isError").and_then(Value::as_bool) {
                Some(true) => format!("result (isError: {})", short(&result_text(r))),
                _ => "result".into(),
            },
            Answer::Task {
                status,
                result: Some(r),
                ..
            } if r.get("isError").and_then(Value::as_bool) == Some(true) => {
                format!("task ({status}, isError: {})", short(&result_text(r)))
            }
            Answer::Task {
                status,
                error: Some(e),
                ..
            } => format!("task ({status}, error {} ({}))", e["code"], e["message"]),
            Answer::Task { status, .. } => format!("task ({status})"),
            Answer::Error { code, message, .. } => match code {
                Some(c) => format!("error {c} ({})", short(message)),
                None => format!("error ({})", short(message)),
            },
            Answer::Accepted => "accepted".into(),
            Answer::Canceled => "canceled by the client".into(),
        }
    }

    /// The result a check looks at: the call's, or the finished task's.
    fn result(&self) -> Option<&Value> {
        match self {
            Answer::Result(r) => Some(r),
            Answer::Task { result, .. } => result.as_ref(),
            _ => None,
        }
    }

    /// What `same_as` compares: the result, a created task's ID, a task's status, or the error.
    fn comparable(&self) -> Value {
        match self {
            Answer::Result(r) => r.clone(),
            Answer::Task {
                result: Some(r), ..
            } => r.clone(),
            Answer::Task { error: Some(e), .. } => json!({"error": e}),
            Answer::Task { id: Some(id), .. } => json!({"task": id}),
            Answer::Task { status, .. } => json!({"status": status}),
            Answer::Error { code, message, .. } => {
                json!({"error": {"code": code, "message": message}})
            }
            Answer::Accepted => json!("accepted"),
            Answer::Canceled => json!("canceled"),
        }
    }
}

impl Answer {
    /// The JSON-RPC error answered, or a `failed` task's inlined one: code, message, data.
    fn jsonrpc_error(&self) -> Option<(Option<i32>, String, Option<Value>)> {
        match self {
            Answer::Error {
                code,
                message,
                data,
            } => Some((*code, message.clone(), data.clone())),
            Answer::Task { error: Some(e), .. } => Some((
                e["code"].as_i64().and_then(|c| i32::try_from(c).ok()),
                e["message"].as_str().unwrap_or_default().to_owned(),
                e.get("data").cloned(),
            )),
            _ => None,
        }
    }
}

/// `error_code` and `error_data` against the JSON-RPC error answered (or a failed task's).
fn check_jsonrpc_error(expect: &Expect, answer: &Answer, described: &str) -> Result<(), Failure> {
    let (code, _, data) = answer
        .jsonrpc_error()
        .unwrap_or((None, String::new(), None));
    if let Some(want) = expect.error_code
        && code != Some(want)
    {
        return Err(Failure::Violated(format!(
            "expected JSON-RPC error {want}, saw {described}"
        )));
    }
    if let Some(want) = &expect.error_data
        && data.as_ref() != Some(want)
    {
        return Err(Failure::Violated(format!(
            "expected the JSON-RPC error's data to be {want}, saw {}",
            data.map_or("none".to_owned(), |d| d.to_string())
        )));
    }
    Ok(())
}

fn result_text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn error_answer(e: ServiceError) -> Answer {
    match e {
        ServiceError::McpError(e) => Answer::Error {
            code: Some(e.code.0),
            message: e.message.to_string(),
            data: e.data,
        },
        other => Answer::Error {
            code: None,
            message: other.to_string(),
            data: None,
        },
    }
}

/// `mcp`: a `tools/call` through a replica.
pub(crate) async fn run_mcp_call(
    env: &mut StepEnv<'_>,
    call: &McpCallStep,
    expect: Option<&Expect>,
) -> Result<String, Failure> {
    let mut arguments = call.arguments.clone();
    for value in arguments.values_mut() {
        fill_placeholders(value, &env.placeholders);
        fill_task_ids(value, env)?;
    }
    let mut params =
        CallToolRequestParams::new(call.tool.clone()).with_arguments(arguments.clone());
    if let Some(key) = &call.idempotency_key {
        params.meta =
            Some(serde_json::from_value(json!({ "idempotencyKey": key })).map_err(setup)?);
    }
    let replicas = env.replicas()?;
    let fresh = match call.from {
        Some(from) => Some(
            replicas
                .client_from(
                    call.connector.as_deref(),
                    from,
                    call.forwarded_for.as_deref(),
                )
                .await
                .map_err(|e| Failure::Setup(format!("a client from {from}: {e:#}")))?,
        ),
        None => None,
    };
    if call.background {
        return start_in_background(env, call, params, fresh);
    }
    let expect = expect.ok_or_else(|| Failure::Setup("this step needs an expectation".into()))?;
    let client = match &fresh {
        Some(client) => client,
        None => replicas.get(call.connector.as_deref()).map_err(setup)?,
    };
    client.service().progress.lock().unwrap().clear();
    client.service().logs.lock().unwrap().clear();
    if let Some(level) = &call.log_level {
        #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; R-CON-13 still serves it)
        let params = rmcp::model::SetLevelRequestParams::new(
            serde_json::from_value(json!(level)).map_err(setup)?,
        );
        #[allow(deprecated)]
        let set = client.peer().set_level(params).await;
        if let Err(e) = set {
            return Err(Failure::Violated(format!("logging/setLevel {level}: {e}")));
        }
    }
    // Checking progress needs the progress token rmcp gives the request, so that call is sent
    // by hand (and cannot be cancelled: validation keeps `progress_at_least` and
    // `cancel_after_ms` apart); every other call is rmcp's own, cancelled when dropped.
    let mut progress_token = None;
    let request: futures::future::BoxFuture<'_, Result<CallToolResponse, ServiceError>> =
        if expect.progress_at_least.is_some() {
            let handle = client
                .peer()
                .send_request_with_option(
                    ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                    PeerRequestOptions::no_options(),
                )
                .await;
            progress_token = handle.as_ref().ok().map(|h| h.progress_token.clone());
            Box::pin(async move {
                match handle?.await_response().await? {
                    ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
                    ServerResult::CreateTaskResult(created) => Ok(CallToolResponse::Task(created)),
                    _ => Err(ServiceError::UnexpectedResponse),
                }
            })
        } else {
            Box::pin(client.peer().call_tool_once(params))
        };
    let response = match call.cancel_after_ms {
        None => request.await,
        Some(after) => {
            // Dropping the request future makes the client send notifications/cancelled.
            tokio::select! {
                response = request => response,
                () = cancel_point(env.ledger, &call.tool, call.key(), after) => {
                    return check_answer(env, expect, Answer::Canceled, Some(&call.tool), call.key()).await;
                }
            }
        }
    };
    let answer = call_answer(response)?;
    if let Some(least) = expect.progress_at_least {
        let seen = settled(&client.service().progress, least, NOTIFICATION_GRACE).await;
        if let Some(wrong) = seen
            .iter()
            .find(|p| Some(&p.progress_token) != progress_token.as_ref())
        {
            return Err(Failure::Violated(format!(
                "progress came under another token than the call's: {wrong:?}"
            )));
        }
        if seen.len() < least {
            return Err(Failure::Violated(format!(
                "expected at least {least} notifications/progress for the call, saw {}",
                seen.len()
            )));
        }
    }
    if let Some(want) = &expect.logs {
        // The handler tasks (see `settled`) may also run in any order, so the client cannot see
        // the wire order: the levels are compared as a multiset here, and the order the
        // connector writes them in is checked by its unit tests (R-CON-13).
        // None expected: what a late handler task would add still gets a moment to arrive.
        let grace = if want.is_empty() {
            NOTIFICATION_GRACE / 10
        } else {
            NOTIFICATION_GRACE
        };
        let mut seen = settled(&client.service().logs, want.len().max(1), grace).await;
        let mut wanted = want.clone();
        seen.sort();
        wanted.sort();
        if seen != wanted {
            return Err(Failure::Violated(format!(
                "expected log messages at levels {want:?} before the result, saw {seen:?}"
            )));
        }
    }
    let mut summary = check_answer(env, expect, answer, Some(&call.tool), call.key()).await?;
    if expect.matches_upstream_as_written {
        super::as_written_check::check_as_written(env, call, &arguments, &mut summary).await?;
    }
    Ok(summary)
}

/// What a `tools/call` answered, as the checks read it.
fn call_answer(response: Result<CallToolResponse, ServiceError>) -> Result<Answer, Failure> {
    Ok(match response {
        Ok(CallToolResponse::Complete(result)) => {
            Answer::Result(serde_json::to_value(result).map_err(setup)?)
        }
        Ok(CallToolResponse::Task(created)) => Answer::Task {
            id: Some(created.task.task_id.clone()),
            status: status_name(&serde_json::to_value(&created.task).map_err(setup)?),
            result: None,
            error: None,
        },
        Ok(other) => {
            return Err(Failure::Violated(format!(
                "expected a result or a task, got {other:?}"
            )));
        }
        Err(e) => error_answer(e),
    })
}

/// A named background call in flight: its tool and key (for the checks), and its answer once
/// it comes.
pub(crate) struct Pending {
    tool: String,
    key: Option<String>,
    answer: tokio::task::JoinHandle<Result<Answer, Failure>>,
}

impl Pending {
    /// Stops waiting (the scenario ended).
    pub(crate) fn abort(&self) {
        self.answer.abort();
    }
}

/// Sends the call on a task of its own (keeping a fresh client alive with it) and leaves it in
/// flight; the scenario's end stops it. A named call keeps its answer for `answer_of`.
fn start_in_background(
    env: &mut StepEnv<'_>,
    call: &McpCallStep,
    params: CallToolRequestParams,
    fresh: Option<McpClient>,
) -> Result<String, Failure> {
    let peer = match &fresh {
        Some(client) => client.peer().clone(),
        None => env
            .replicas()?
            .get(call.connector.as_deref())
            .map_err(setup)?
            .peer()
            .clone(),
    };
    let answer = tokio::spawn(async move {
        let _client = fresh;
        call_answer(peer.call_tool_once(params).await)
    });
    let Some(name) = &call.name else {
        env.background.push(answer.abort_handle());
        return Ok(format!("{} sent; left in flight", call.tool));
    };
    let pending = Pending {
        tool: call.tool.clone(),
        key: call.key().map(str::to_owned),
        answer,
    };
    env.pending.insert(name.clone(), pending);
    Ok(format!("{} sent as {name:?}; left in flight", call.tool))
}

/// `answer_of`: waits (up to [`TASK_DEADLINE`]) for the named background call's own answer and
/// checks it as an `mcp` step's.
pub(crate) async fn run_answer_of(
    env: &mut StepEnv<'_>,
    name: &str,
    expect: &Expect,
) -> Result<String, Failure> {
    let Pending { tool, key, answer } = env
        .pending
        .remove(name)
        .ok_or_else(|| Failure::Setup(format!("no background call named {name:?} in flight")))?;
    let answer = match tokio::time::timeout(TASK_DEADLINE, answer).await {
        Ok(joined) => joined.map_err(|e| Failure::Setup(format!("the call {name:?}: {e}")))??,
        Err(_) => {
            return Err(Failure::Violated(format!(
                "the background call {name:?} got no answer within {} s",
                TASK_DEADLINE.as_secs()
            )));
        }
    };
    check_answer(env, expect, answer, Some(&tool), key.as_deref()).await
}

/// How long the notifications a connector wrote before a result may lag behind it.
const NOTIFICATION_GRACE: Duration = Duration::from_secs(5);

/// The notifications `received` holds once it has `least` of them, or after `grace`
/// ([`NOTIFICATION_GRACE`] in steps). The connector writes a call's progress and log messages before its
/// result (R-CON-10), but rmcp's client hands each notification to its handler on a task of its
/// own, which on a loaded machine may run after the result is delivered: reading at once would
/// miss them.
async fn settled<T: Clone>(
    received: &std::sync::Mutex<Vec<T>>,
    least: usize,
    grace: Duration,
) -> Vec<T> {
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let seen = received.lock().unwrap().clone();
        if seen.len() >= least || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status_name(task: &Value) -> String {
    task["status"].as_str().unwrap_or("?").to_owned()
}

/// The task ID a step names: saved, altered, or forged.
fn task_id(env: &StepEnv<'_>, step: &TaskStep) -> Result<String, Failure> {
    if let Some(forged) = &step.forged {
        return Ok(forged.clone());
    }
    let name = step.task.as_deref().unwrap_or_default();
    let mut id = env.saved.get(name)?.task_id.clone().ok_or_else(|| {
        Failure::Setup(format!(
            "the step that saved {name:?} did not create a task"
        ))
    })?;
    if step.alter {
        // Flip one character of the payload part: the MAC no longer matches.
        let at = id.len() / 3;
        let flipped = if id.as_bytes()[at] == b'A' { "B" } else { "A" };
        id.replace_range(at..at + 1, flipped);
    }
    Ok(id)
}

/// The task ID a task step sends and the replica it asks.
fn task_target<'e>(
    env: &'e StepEnv<'_>,
    step: &TaskStep,
) -> Result<(String, &'e McpClient), Failure> {
    let id = task_id(env, step)?;
    let client = env
        .replicas()?
        .get(step.connector.as_deref())
        .map_err(setup)?;
    Ok((id, client))
}

/// `tasks_get`: one `tasks/get`, or polls until the task is no longer working.
pub(crate) async fn run_tasks_get(
    env: &mut StepEnv<'_>,
    step: &TaskStep,
    expect: &Expect,
) -> Result<String, Failure> {
    let (id, client) = task_target(env, step)?;
    let deadline = tokio::time::Instant::now() + TASK_DEADLINE;
    let answer = loop {
        match client.peer().get_task(GetTaskParams::new(&id)).await {
            Ok(got) => {
                let json = serde_json::to_value(&got).map_err(setup)?;
                let status = status_name(&json);
                if step.until_done && status == "working" && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                break Answer::Task {
                    id: None,
                    result: json.get("result").cloned(),
                    error: json.get("error").cloned(),
                    status,
                };
            }
            Err(e) => break error_answer(e),
        }
    };
    check_answer(env, expect, answer, None, None).await
}

/// Replaces `{run}` (unique to this run of the scenario) and `{task_queue}` (the scenario's)
/// in every string of a step's arguments (and its `structured` expectation), so a scenario can name what it creates without
/// colliding with another run on the same server.
fn fill_placeholders(value: &mut Value, placeholders: &[(&'static str, String)]) {
    match value {
        Value::String(s) => {
            for (name, with) in placeholders {
                if s.contains(name) {
                    *s = s.replace(name, with);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| fill_placeholders(v, placeholders)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| fill_placeholders(v, placeholders)),
        _ => {}
    }
}

/// Replaces `{task:NAME}` with the task ID the step that saved `NAME` got: a created task's,
/// or the one a companion-tools answer carries (R-CON-11).
fn fill_task_ids(value: &mut Value, env: &StepEnv<'_>) -> Result<(), Failure> {
    let mut names = Vec::new();
    crate::scenario::task_placeholders(value, &mut names);
    for name in names {
        let id = env.saved.get(&name)?.task_id.clone().ok_or_else(|| {
            Failure::Setup(format!("the step that saved {name:?} got no task ID"))
        })?;
        replace_in_strings(value, &format!("{{task:{name}}}"), &id);
    }
    Ok(())
}

fn replace_in_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| replace_in_strings(v, from, to)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| replace_in_strings(v, from, to)),
        _ => {}
    }
}

/// `tasks_cancel`: one `tasks/cancel`.
pub(crate) async fn run_tasks_cancel(
    env: &mut StepEnv<'_>,
    step: &TaskStep,
    expect: &Expect,
) -> Result<String, Failure> {
    let (id, client) = task_target(env, step)?;
    let answer = match client.peer().cancel_task(CancelTaskParams::new(&id)).await {
        Ok(()) => Answer::Accepted,
        Err(e) => error_answer(e),
    };
    check_answer(env, expect, answer, None, None).await
}

/// `tasks_update`: one `tasks/update` with the step's `inputResponses` (R-CON-40).
pub(crate) async fn run_tasks_update(
    env: &mut StepEnv<'_>,
    step: &TaskStep,
    expect: &Expect,
) -> Result<String, Failure> {
    let (id, client) = task_target(env, step)?;
    let responses = step.input_responses.clone().unwrap_or_default();
    let params = UpdateTaskParams::new(&id, responses.into_iter().collect());
    let answer = match client.peer().update_task(params).await {
        Ok(()) => Answer::Accepted,
        Err(e) => error_answer(e),
    };
    check_answer(env, expect, answer, None, None).await
}

/// The expectations of a connector step against its answer.
async fn check_answer(
    env: &mut StepEnv<'_>,
    expect: &Expect,
    answer: Answer,
    tool: Option<&str>,
    key: Option<&str>,
) -> Result<String, Failure> {
    let described = answer.describe();
    if answer.outcome() != expect.outcome {
        return Err(Failure::Violated(format!(
            "expected {}, saw {described}",
            expect.outcome
        )));
    }
    if let (Some(want), Answer::Task { status, .. }) = (&expect.task_status, &answer)
        && want != status
    {
        return Err(Failure::Violated(format!(
            "expected task status {want}, saw {status}"
        )));
    }
    check_jsonrpc_error(expect, &answer, &described)?;
    if let Some(want) = &expect.message_contains {
        let message = match answer.jsonrpc_error() {
            Some((_, message, _)) => message,
            None => answer.result().map(result_text).unwrap_or_default(),
        };
        if !message.contains(want.as_str()) {
            return Err(Failure::Violated(format!(
                "expected the message to contain {want:?}, saw {message:?}"
            )));
        }
    }
    if let Some(result) = answer.result() {
        check_is_error(expect, result)?;
        if let Some(want) = &expect.structured {
            let mut want = want.clone();
            fill_placeholders(&mut want, &env.placeholders);
            check_structured(&want, result)?;
        }
        if let Some(want) = &expect.error_type {
            let saw = result["_meta"][ERROR_TYPE_META].as_str();
            if saw != Some(want.as_str()) {
                return Err(Failure::Violated(format!(
                    "expected error type {want}, saw {}",
                    saw.unwrap_or("none")
                )));
            }
        }
    } else if expect.error_type.is_some()
        || expect.is_error.is_some()
        || expect.structured.is_some()
    {
        return Err(Failure::Violated(format!(
            "expected a result to check, saw {described}"
        )));
    }
    let mut summary = described;
    // Steps without a tool of their own (tasks_get, tasks_cancel) count the one named in
    // `invocations`.
    let counted = expect.invocations.as_ref();
    let tool = tool.or(counted.and_then(|i| i.tool.as_deref()));
    let key = key.or(counted.and_then(|i| i.key.as_deref()));
    check_invocations(env.ledger, expect, tool, key, &mut summary).await?;
    if let Some(tool) = tool {
        check_cancelled_upstream(env.ledger, expect, tool, key, &mut summary).await?;
    }
    if let Some(result) = answer.result() {
        check_snapshot(env.options, expect, result, &mut summary)?;
    }
    super::workflows::check_workflows(env, expect, &mut summary).await?;
    let task_id = match &answer {
        Answer::Task { id, .. } => id.clone(),
        // A call that continues as a task for a client without the extension (R-CON-11).
        Answer::Result(r) => r["_meta"][TASK_ID_META].as_str().map(str::to_owned),
        _ => None,
    };
    env.saved
        .check_and_save(expect, answer.comparable(), task_id, &mut summary)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Notifications whose handler tasks run after the result was delivered still count.
    #[tokio::test]
    async fn settled_waits_for_notifications_handled_after_the_result() {
        let received = Arc::new(Mutex::new(Vec::new()));
        let late = received.clone();
        tokio::spawn(async move {
            for n in 0..3 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                late.lock().unwrap().push(n);
            }
        });
        assert_eq!(
            settled(&received, 3, NOTIFICATION_GRACE).await,
            vec![0, 1, 2]
        );
    }

    /// Fewer than expected: the grace period ends and what arrived is returned for the check.
    #[tokio::test]
    async fn settled_returns_what_arrived_after_the_grace_period() {
        let received = Mutex::new(vec!["info"]);
        let grace = Duration::from_millis(100);
        assert_eq!(settled(&received, 2, grace).await, vec!["info"]);
    }
}
