//! R-CON-43, R-CON-40: every kind of input request (`sampling/createMessage`, `roots/list`, as
//! well as `elicitation/create`) goes through connector -> Temporal -> proxy -> mock upstream:
//! relayed to a legacy session client that declared the capability, and shown to a task's
//! owner, who answers with `tasks/update`. R-CON-17: a relayed round is the same call, in the
//! call's in-flight slot. R-CON-40: a re-issue refused by a cap says whether its round was
//! started. R-CON-46: a call re-issued with its `requestState` after its task was
//! cancelled while it waited runs nothing.

// Sampling and roots are deprecated by SEP-2577, and still asked by tools and answered by
// clients of the versions the connector serves: this module speaks them on purpose.
#![allow(deprecated)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp::connector::{
    server::{Connector, ConnectorOptions, INPUT_STATE_PREFIX},
    task_ref::{CallerScope, SigningKey},
};
use durable_mcp_conformance::fixtures::{
    Ledger, LedgerEvent, ToolSpec, UpstreamSpec,
    ask_input::{CONFIRM_KEY, ROOTS_KEY, SAMPLE_KEY},
};
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        CallToolResponse, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
        CreateMessageResult, Implementation, InputResponses, ListRootsResult, Root,
        SamplingMessage, TaskStatus, UpdateTaskParams,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::input_relay::completed;
use crate::support::*;

/// The mock's asking tools: `sample` and `roots` (and `*_task`, run only as tasks), `ask` and
/// `ask_task` (a confirmation).
fn asking_spec() -> UpstreamSpec {
    let tool = |name: &str, behavior: Value, task: bool| -> ToolSpec {
        let mut tool: ToolSpec = serde_json::from_value(json!({
            "name": name,
            "description": "Asks its caller, then echoes the answer.",
            "annotations": {"destructiveHint": true, "idempotentHint": false},
            "behavior": behavior,
        }))
        .unwrap();
        if task {
            tool.execution = Some(json!({"taskSupport": "required"}));
        }
        tool
    };
    let sample = json!({"kind": "ask_sampling", "message": "Summarise the report"});
    let roots = json!({"kind": "ask_roots"});
    let ask = json!({"kind": "ask_input", "message": "Delete 40 GB?"});
    UpstreamSpec {
        name: "asking".into(),
        tools: vec![
            tool("sample", sample.clone(), false),
            tool("sample_task", sample, true),
            tool("roots", roots.clone(), false),
            tool("roots_task", roots, true),
            tool("ask", ask.clone(), false),
            tool("ask_task", ask, true),
        ],
        instructions: None,
    }
}

/// The env, the mock's ledger, the proxy in front of the mock (stdio), and a signing key.
async fn setup(
    test: &str,
) -> (
    TestEnv,
    Ledger,
    durable_mcp_conformance::proxy_thread::ProxyThread,
    SigningKey,
) {
    crate::durable_input::setup_with(test, &asking_spec()).await
}

fn options(env: &TestEnv, key: &SigningKey) -> ConnectorOptions {
    let mut options = ConnectorOptions::new(vec![route("asking", &env.endpoint)]);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process("owner".into());
    options
}

/// A session client of an earlier version that declares sampling and roots and answers them.
#[derive(Clone, Default)]
struct Answerer {
    asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Answerer {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = serde_json::from_value(json!({})).ok();
        capabilities.roots = serde_json::from_value(json!({})).ok();
        capabilities.elicitation = serde_json::from_value(json!({})).ok();
        ClientConfig::new(capabilities, Implementation::new("answerer", "1"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let asked = serde_json::to_value(params).unwrap();
        self.asked.lock().unwrap().push(asked);
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("It is short."),
            "mock-model".into(),
        ))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        self.asked
            .lock()
            .unwrap()
            .push(json!({"method": "roots/list"}));
        Ok(ListRootsResult::new(vec![Root::new("file:///work")]))
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, McpError> {
        let mut answer = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        answer.content = Some(json!({"confirm": true}));
        Ok(answer)
    }
}

/// `client`'s call of `tool`, which must answer with an `InputRequiredResult`.
async fn input_required(
    client: &McpClient<ClientConfig>,
    tool: &str,
) -> rmcp::model::InputRequiredResult {
    let asked = client
        .peer()
        .call_tool_once(tool_call(tool, json!({})))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = asked else {
        panic!("expected input_required, got {asked:?}")
    };
    asked
}

/// Checks the echoed answers of `sample` and `roots`.
fn check_echoes(sampled: &Value, rooted: &Value) {
    let message = &sampled["inputResponses"][SAMPLE_KEY];
    assert_eq!(message["model"], "mock-model", "{sampled}");
    assert_eq!(message["content"]["text"], "It is short.", "{sampled}");
    assert_eq!(
        rooted["inputResponses"][ROOTS_KEY]["roots"][0]["uri"],
        "file:///work"
    );
}

async fn sample_and_roots<C: rmcp::Service<RoleClient>>(
    client: &McpClient<C>,
    answerer: &Answerer,
) {
    let sampled = client
        .peer()
        .call_tool_once(tool_call("sample", json!({})))
        .await
        .unwrap();
    let rooted = client
        .peer()
        .call_tool_once(tool_call("roots", json!({})))
        .await
        .unwrap();
    check_echoes(&completed(sampled), &completed(rooted));
    let asked = answerer.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(
        asked[0]["messages"][0]["content"]["text"], "Summarise the report",
        "{asked:?}"
    );
    assert_eq!(asked[1]["method"], "roots/list");
}

#[tokio::test]
async fn a_legacy_session_client_answers_sampling_and_roots_requests_relayed_to_it() {
    let (env, ledger, _proxy, key) = setup("input-rounds-relay").await;
    // Over stdio (an in-memory pipe).
    let answerer = Answerer::default();
    let client = serve_in_memory(
        Connector::new(env.client.clone(), options(&env, &key)),
        answerer.clone(),
    )
    .await
    .unwrap();
    sample_and_roots(&client, &answerer).await;
    client.cancel().await.unwrap();
    // Over Streamable HTTP with a session.
    let connector = Connector::new(env.client.clone(), options(&env, &key));
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let answerer = Answerer::default();
    let client = session_http_client(&server.url, answerer.clone())
        .await
        .unwrap();
    sample_and_roots(&client, &answerer).await;
    client.cancel().await.unwrap();
    shutdown.cancel();
    assert_eq!(ledger.count("sample", LedgerEvent::Called), 4);
    assert_eq!(ledger.count("roots", LedgerEvent::Called), 4);
}

/// A task's owner sees the sampling (or roots) request and answers it with `tasks/update`.
async fn answered_task(
    owner: &McpClient<ClientConfig>,
    tool: &str,
    key: &str,
    method: &str,
    response: Value,
) -> Value {
    let task = owner
        .peer()
        .call_tool_once(tool_call(tool, json!({})))
        .await
        .unwrap();
    let task_id = task_id_of(task);
    let waiting = poll_task_past(owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(waiting["inputRequests"][key]["method"], method, "{waiting}");
    let responses: InputResponses = [(key.to_owned(), response)].into();
    owner
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, responses))
        .await
        .unwrap();
    let done = poll_task_past(owner, &task_id, TaskStatus::InputRequired, |_| {}).await;
    let done = match done["status"].as_str() {
        Some("working") => poll_task_until_done(owner, &task_id).await,
        _ => done,
    };
    assert_eq!(done["status"], "completed", "{done}");
    done["result"]["structuredContent"].clone()
}

/// Both answers through `owner`'s tasks, checked.
async fn sample_and_roots_as_tasks(owner: &McpClient<ClientConfig>) {
    let message = json!({"role": "assistant", "content": {"type": "text", "text": "It is short."}, "model": "mock-model"});
    let sampled = answered_task(
        owner,
        "sample_task",
        SAMPLE_KEY,
        "sampling/createMessage",
        message,
    )
    .await;
    let roots = json!({"roots": [{"uri": "file:///work"}]});
    let rooted = answered_task(owner, "roots_task", ROOTS_KEY, "roots/list", roots).await;
    check_echoes(&sampled, &rooted);
}

#[tokio::test]
async fn a_tasks_owner_answers_sampling_and_roots_requests_with_tasks_update() {
    let (env, ledger, _proxy, key) = setup("input-rounds-task").await;
    // A session client with the tasks extension.
    let owner = task_client_for(Connector::new(env.client.clone(), options(&env, &key)))
        .await
        .unwrap();
    sample_and_roots_as_tasks(&owner).await;
    owner.cancel().await.unwrap();
    // A 2026-07-28 caller without a session, declaring the extension per request.
    let connector = Connector::new(env.client.clone(), options(&env, &key));
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let owner = stateless_http_client(&server.url, tasks_client_config())
        .await
        .unwrap();
    sample_and_roots_as_tasks(&owner).await;
    owner.cancel().await.unwrap();
    shutdown.cancel();
    assert_eq!(ledger.count("sample_task", LedgerEvent::Called), 4);
    assert_eq!(ledger.count("roots_task", LedgerEvent::Called), 4);
}

/// A 2026-07-28 caller without a task gets the sampling request in an `InputRequiredResult`
/// and resumes the call with its answer and the signed `requestState` (R-CON-40, R-CON-44).
#[tokio::test]
async fn a_current_caller_answers_a_sampling_request_by_re_issuing_the_call() {
    let (env, ledger, _proxy, key) = setup("input-rounds-mrtr").await;
    let connector = Connector::new(env.client.clone(), options(&env, &key));
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let client = stateless_http_client(&server.url, Answerer::default().get_info())
        .await
        .unwrap();
    let asked = input_required(&client, "sample").await;
    let requests = serde_json::to_value(&asked.input_requests).unwrap();
    assert_eq!(requests[SAMPLE_KEY]["method"], "sampling/createMessage");
    let message = json!({"role": "assistant", "content": {"type": "text", "text": "It is short."}, "model": "mock-model"});
    let responses: InputResponses = [(SAMPLE_KEY.to_owned(), message)].into();
    let mut resume = tool_call("sample", json!({})).with_input_responses(responses);
    resume.request_state = asked.request_state.clone();
    let done = completed(client.peer().call_tool_once(resume).await.unwrap());
    assert_eq!(done["inputResponses"][SAMPLE_KEY]["model"], "mock-model");
    assert_eq!(ledger.count("sample", LedgerEvent::Called), 2);
    client.cancel().await.unwrap();
    shutdown.cancel();
}

/// R-CON-17, R-CON-43: a caller capped at one call in flight is served through a relayed
/// round: the round is the call's, in its slot.
#[tokio::test]
async fn a_relayed_round_runs_in_its_calls_in_flight_slot() {
    let (env, ledger, _proxy, key) = setup("input-rounds-slot").await;
    let mut options = options(&env, &key);
    options.max_in_flight_per_caller = 1;
    let connector = Connector::new(env.client.clone(), options);
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let client = session_http_client(&server.url, Answerer::default())
        .await
        .unwrap();
    let answered = client
        .peer()
        .call_tool_once(tool_call("ask", json!({"path": "/data"})))
        .await
        .unwrap();
    let answered = completed(answered);
    assert_eq!(answered["inputResponses"][CONFIRM_KEY]["action"], "accept");
    assert_eq!(ledger.count("ask", LedgerEvent::Called), 2);
    // The slot was given back: the next call is served.
    let again = client
        .peer()
        .call_tool_once(tool_call("ask", json!({})))
        .await
        .unwrap();
    completed(again);
    client.cancel().await.unwrap();
    shutdown.cancel();
}

/// R-CON-40, R-CON-38: a call re-issued with its answers and refused by the caller's call
/// starts says truly whether its round was started: by an earlier answer (re-issue with the
/// same `requestState` to wait for it), or not at all (nothing was started), and runs nothing.
#[tokio::test]
async fn a_refused_re_issue_says_whether_its_round_was_started() {
    let (env, ledger, _proxy, key) = setup("input-rounds-refused").await;
    let serve = |starts: usize| {
        let mut options = options(&env, &key);
        options.max_call_starts_per_caller_minute = starts;
        serve_connector_http(
            Connector::new(env.client.clone(), options),
            loopback_http_options(),
        )
    };
    let resume_of = |asked: &rmcp::model::InputRequiredResult| {
        let mut resume =
            tool_call("ask", json!({})).with_input_responses(crate::durable_input::confirmed());
        resume.request_state = asked.request_state.clone();
        resume
    };

    // Two starts a minute: the call and its answer's round; the re-issue is a third.
    let (server, shutdown) = serve(2).await.unwrap();
    let _stop = shutdown.drop_guard();
    let client = stateless_http_client(&server.url, Answerer::default().get_info())
        .await
        .unwrap();
    let resume = resume_of(&input_required(&client, "ask").await);
    completed(client.peer().call_tool_once(resume.clone()).await.unwrap());
    let refused = format!("{:?}", client.peer().call_tool_once(resume).await);
    assert!(
        refused.contains("--max-call-starts-per-caller-minute 2")
            && refused.contains("already started by an earlier answer")
            && refused.contains("same requestState")
            && !refused.contains("nothing was started"),
        "{refused}"
    );
    assert_eq!(ledger.count("ask", LedgerEvent::Called), 2);

    // One start a minute: the call; its answer is refused before its round starts.
    let (server, shutdown) = serve(1).await.unwrap();
    let _stop = shutdown.drop_guard();
    let client = stateless_http_client(&server.url, Answerer::default().get_info())
        .await
        .unwrap();
    let resume = resume_of(&input_required(&client, "ask").await);
    let refused = format!("{:?}", client.peer().call_tool_once(resume).await);
    assert!(
        refused.contains("--max-call-starts-per-caller-minute 1")
            && refused.contains("nothing was started")
            && refused.contains("same inputResponses and requestState"),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ledger.count("ask", LedgerEvent::Called),
        3,
        "the round never ran"
    );
}

/// R-CON-46: a call re-issued with its signed `requestState` after its task was cancelled while
/// it waited is refused, saying so, and runs nothing.
#[tokio::test]
async fn a_re_issue_with_the_request_state_after_a_cancel_while_waiting_runs_nothing() {
    let (env, ledger, _proxy, key) = setup("input-rounds-cancel").await;
    let owner = task_client_for(Connector::new(env.client.clone(), options(&env, &key)))
        .await
        .unwrap();
    let task = owner
        .peer()
        .call_tool_once(tool_call("ask_task", json!({})))
        .await
        .unwrap();
    let task_id = task_id_of(task);
    let waiting = poll_task_past(&owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    owner
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    let mut resume =
        tool_call("ask_task", json!({})).with_input_responses(crate::durable_input::confirmed());
    resume.request_state = Some(format!("{INPUT_STATE_PREFIX}{task_id}"));
    for _ in 0..2 {
        let refused = owner.peer().call_tool_once(resume.clone()).await;
        let text = format!("{refused:?}");
        assert!(
            refused.is_err() && text.contains("-32602") && text.contains("cancelled"),
            "{text}"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 1);
    let read = owner
        .peer()
        .get_task(rmcp::model::GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap()["status"], "cancelled");
    owner.cancel().await.unwrap();
}

/// R-CON-44: on the wire, a 2026-07-28 call whose input request needs a capability the
/// request did not declare is HTTP 400 with -32021 listing it, and nothing more runs.
#[tokio::test]
async fn a_missing_capability_for_an_input_request_is_http_400_with_32021() {
    let (env, ledger, _proxy, key) = setup("input-rounds-400").await;
    let connector = Connector::new(env.client.clone(), options(&env, &key));
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .unwrap();
    let _stop = shutdown.drop_guard();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "sample", "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            },
        },
    });
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sample")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, 400, "{text}");
    let json_text = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(json_text.trim()).unwrap();
    assert_eq!(answer["error"]["code"], -32021, "{answer}");
    assert!(
        answer["error"]["data"]["requiredCapabilities"]
            .get("sampling")
            .is_some(),
        "{answer}"
    );
    assert_eq!(ledger.count("sample", LedgerEvent::Called), 1);
}

/// R-CON-40: a signed `requestState` resumes only its own caller's call of its own tool: another
/// caller's re-issue, and one naming another tool, are -32602 and run nothing.
#[tokio::test]
async fn a_request_state_resumes_only_its_callers_call_of_its_tool() {
    let (env, ledger, _proxy, key) = setup("input-rounds-foreign").await;
    let mut serve = Vec::new();
    for caller in ["owner", "intruder"] {
        let mut options = options(&env, &key);
        options.caller_scope = CallerScope::Process(caller.into());
        let connector = Connector::new(env.client.clone(), options);
        let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
            .await
            .unwrap();
        let client = stateless_http_client(&server.url, Answerer::default().get_info())
            .await
            .unwrap();
        serve.push((client, shutdown.drop_guard()));
    }
    let (owner, intruder) = (&serve[0].0, &serve[1].0);
    let asked = input_required(owner, "ask").await;
    let mut resume =
        tool_call("ask", json!({})).with_input_responses(crate::durable_input::confirmed());
    resume.request_state = asked.request_state.clone();
    let mut other_tool = resume.clone();
    other_tool.name = "sample".into();
    for (client, call) in [(intruder, resume.clone()), (owner, other_tool)] {
        let err = client.peer().call_tool_once(call).await.unwrap_err();
        assert!(err.to_string().contains("-32602"), "{err}");
    }
    assert_eq!(ledger.count("ask", LedgerEvent::Called), 1);
    assert_eq!(ledger.count("sample", LedgerEvent::Called), 0);
    // The owner's own re-issue still resumes it.
    let done = completed(owner.peer().call_tool_once(resume).await.unwrap());
    assert_eq!(done["inputResponses"][CONFIRM_KEY]["action"], "accept");
    assert_eq!(ledger.count("ask", LedgerEvent::Called), 2);
}

/// R-CON-11, R-CON-40: a companion task whose tool asks for a model's message
/// (`sampling/createMessage`) shows it to the model with `task_status`, and the model answers
/// it with `task_input` (its owner only; twice, on two connectors, runs the next round once);
/// `task_result` says it waits for that answer instead of waiting 20 s.
#[tokio::test]
async fn a_companion_caller_reads_and_answers_its_tasks_sampling_request_once() {
    use crate::durable_input::{call, companion, status_past_working};
    let (env, ledger, _proxy, key) = setup("input-rounds-companion").await;
    let owner = client_for(companion(&env, &key, "owner")).await.unwrap();
    let started = call(&owner, "sample", json!({"sleep_ms": 2500})).await;
    let task_id = started["_meta"]["io.durable-mcp/taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no companion task ID in {started}"))
        .to_owned();
    let by_id = json!({"task_id": task_id});
    let status = status_past_working(&owner, &task_id).await;
    let request = &status["structuredContent"]["inputRequests"][SAMPLE_KEY];
    assert_eq!(request["method"], "sampling/createMessage", "{status}");
    let text = status["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Summarise the report") && text.contains("task_input"),
        "{text}"
    );
    let asked_at = tokio::time::Instant::now();
    let waiting = call(&owner, "task_result", by_id.clone()).await;
    assert!(asked_at.elapsed() < Duration::from_secs(10), "it waited");
    assert_eq!(waiting["structuredContent"]["status"], "input_required");

    let message = json!({"role": "assistant", "content": {"type": "text", "text": "It is short."},
        "model": "the-model"});
    let answer = json!({"task_id": task_id, "input_responses": {SAMPLE_KEY: message}});
    let stranger = client_for(companion(&env, &key, "stranger")).await.unwrap();
    let foreign = call(&stranger, "task_input", answer.clone()).await;
    let forged = call(
        &stranger,
        "task_input",
        json!({"task_id": "forged", "input_responses": {}}),
    )
    .await;
    assert_eq!(foreign, forged);
    assert_eq!(foreign["content"][0]["text"], "unknown task", "{foreign}");
    let taken = call(&owner, "task_input", answer.clone()).await;
    assert_eq!(taken["structuredContent"]["answered"], true, "{taken}");
    let other = client_for(companion(&env, &key, "owner")).await.unwrap();
    let again = call(&other, "task_input", answer).await;
    assert_eq!(again["isError"], false, "{again}");
    assert_eq!(again["structuredContent"]["answered"], false, "{again}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let done = loop {
        let done = call(&owner, "task_result", by_id.clone()).await;
        if done["structuredContent"]["status"] != "working" {
            break done;
        }
        assert!(tokio::time::Instant::now() < deadline, "{done}");
    };
    let echoed = &done["structuredContent"]["inputResponses"][SAMPLE_KEY];
    assert_eq!(echoed["model"], "the-model", "{done}");
    assert_eq!(
        ledger.count("sample", LedgerEvent::Called),
        2,
        "{:?}",
        ledger.read()
    );
    for c in [owner, stranger, other] {
        c.cancel().await.unwrap();
    }
}
