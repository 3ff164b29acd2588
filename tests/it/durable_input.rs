//! R-PRX-29, R-CON-40: durable input. A tool whose upstream asks for input (SEP-2322) ends its
//! round with the requests; the caller's answer (`tasks/update`, or the call re-issued with
//! `inputResponses` and the connector's `requestState`) starts the next round once, on any
//! connector, and the tool answers.

use std::time::Duration;

use durable_mcp::connector::{
    server::{Connector, ConnectorOptions, INPUT_STATE_PREFIX},
    task_ref::{CallerScope, SigningKey},
};
use durable_mcp_conformance::fixtures::{
    Ledger, LedgerEvent, SpecSource, ToolSpec, UpstreamSpec,
    ask_input::{CONFIRM_KEY, confirmation},
    serve_mock_upstream_http,
};
use rmcp::model::{CallToolResponse, GetTaskParams, InputResponses, TaskStatus, UpdateTaskParams};
use serde_json::{Value, json};

use crate::support::*;

/// The mock upstream's spec: `ask` (asks for a confirmation) and `ask_task` (the same, run only
/// as a task).
fn asking_spec() -> UpstreamSpec {
    let ask: ToolSpec = serde_json::from_value(json!({
        "name": "ask",
        "description": "Asks for a confirmation, then echoes it.",
        "annotations": {"destructiveHint": true, "idempotentHint": false},
        "behavior": {"kind": "ask_input", "message": "Delete 40 GB?"}
    }))
    .unwrap();
    let mut ask_task = ask.clone();
    ask_task.name = "ask_task".into();
    ask_task.execution = Some(json!({"taskSupport": "required"}));
    UpstreamSpec {
        name: "asking".into(),
        tools: vec![ask, ask_task],
        instructions: None,
    }
}

pub(crate) fn connector(
    env: &TestEnv,
    key: &SigningKey,
    scope: &str,
    input_timeout: Duration,
) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("asking", &env.endpoint)]);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    options.input_timeout = input_timeout;
    Connector::new(env.client.clone(), options)
}

pub(crate) fn confirmed() -> InputResponses {
    [(
        CONFIRM_KEY.to_owned(),
        json!({"action": "accept", "content": {"confirm": true}}),
    )]
    .into()
}

/// Calls `ask_task` as `owner` and polls its task until it asks for input: its ID and that
/// `tasks/get` answer.
async fn waiting_task(
    owner: &McpClient<rmcp::model::ClientConfig>,
    arguments: Value,
) -> (String, Value) {
    waiting_task_of(owner, "ask_task", arguments).await
}

/// [`waiting_task`] for `tool`.
async fn waiting_task_of(
    owner: &McpClient<rmcp::model::ClientConfig>,
    tool: &str,
    arguments: Value,
) -> (String, Value) {
    let task = owner
        .peer()
        .call_tool_once(tool_call(tool, arguments))
        .await
        .unwrap();
    let task_id = task_id_of(task);
    let waiting = poll_task_past(owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    (task_id, waiting)
}

/// The owner's task client on a connector of `env` (input waits a day), and its `ask_task`
/// call of `arguments` waiting for input: the client, the task ID and that `tasks/get` answer.
async fn owner_waiting(
    env: &TestEnv,
    key: &SigningKey,
    arguments: Value,
) -> (McpClient<rmcp::model::ClientConfig>, String, Value) {
    let day = Duration::from_secs(86_400);
    let owner = task_client_for(connector(env, key, "owner", day))
        .await
        .unwrap();
    let (task_id, waiting) = waiting_task(&owner, arguments).await;
    (owner, task_id, waiting)
}

/// `owner` answers the task's request, and the task's state once the answer ran (completed).
async fn answered_and_done(owner: &McpClient<rmcp::model::ClientConfig>, task_id: &str) -> Value {
    owner
        .peer()
        .update_task(UpdateTaskParams::new(task_id, confirmed()))
        .await
        .unwrap();
    let done = poll_task_past(owner, task_id, TaskStatus::InputRequired, |_| {}).await;
    let done = match done["status"].as_str() {
        Some("working") => poll_task_until_done(owner, task_id).await,
        _ => done,
    };
    assert_eq!(done["status"], "completed", "{done}");
    done
}

/// `client` answers the task's request and is refused with an error that `says` so.
async fn answer_refused(client: &McpClient<rmcp::model::ClientConfig>, task_id: &str, says: &str) {
    let refused = client
        .peer()
        .update_task(UpdateTaskParams::new(task_id, confirmed()))
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains(says)),
        "{refused:?}"
    );
}

/// Answers the task when nothing is asked any more (acknowledged), and gives a round it would
/// wrongly start time to reach the upstream.
async fn answer_late(owner: &McpClient<rmcp::model::ClientConfig>, task_id: &str) {
    owner
        .peer()
        .update_task(UpdateTaskParams::new(task_id, confirmed()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// A test's env, the mock's ledger, the proxy in front of the asking mock, and a signing key.
pub(crate) async fn setup(
    test: &str,
) -> (
    TestEnv,
    Ledger,
    durable_mcp_conformance::proxy_thread::ProxyThread,
    SigningKey,
) {
    setup_with(test, &asking_spec()).await
}

/// [`setup`] with the mock upstream serving `spec` (named `asking`) over stdio.
pub(crate) async fn setup_with(
    test: &str,
    spec: &UpstreamSpec,
) -> (
    TestEnv,
    Ledger,
    durable_mcp_conformance::proxy_thread::ProxyThread,
    SigningKey,
) {
    let env = TestEnv::shared(test).await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_spec("asking", spec, &ledger)],
    );
    (env, ledger, proxy, SigningKey::generate())
}

#[tokio::test]
async fn a_task_asks_for_input_and_its_owners_update_runs_the_next_round_once_on_any_connector() {
    let (env, ledger, _proxy, key) = setup("durable-input-task").await;
    let day = Duration::from_secs(86_400);
    let (owner, task_id, waiting) = owner_waiting(&env, &key, json!({"path": "/data"})).await;
    let request = &waiting["inputRequests"][CONFIRM_KEY];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Delete 40 GB?");
    // Polled again: the same request, nothing ran again.
    let again = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&again).unwrap()["inputRequests"],
        waiting["inputRequests"]
    );
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 1);

    // A foreign caller cannot answer: indistinguishable from an unknown task.
    let stranger = task_client_for(connector(&env, &key, "stranger", day))
        .await
        .unwrap();
    let refused = stranger
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, confirmed()))
        .await
        .unwrap_err();
    let unknown = stranger
        .peer()
        .update_task(UpdateTaskParams::new("not-a-task", confirmed()))
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), unknown.to_string());
    assert!(refused.to_string().contains("-32602"), "{refused}");

    // The owner answers through a fresh connector (no state shared with the first but the
    // key); answering twice runs the tool's next round once.
    let other = task_client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    other
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, confirmed()))
        .await
        .unwrap();
    let done = answered_and_done(&owner, &task_id).await;
    let answered = &done["result"]["structuredContent"];
    assert_eq!(answered["inputResponses"][CONFIRM_KEY]["action"], "accept");
    assert_eq!(
        answered["arguments"]["path"], "/data",
        "the next round has the arguments"
    );
    // A late answer is acknowledged and ignored, and so is a cancel of the finished rounds.
    answer_late(&owner, &task_id).await;
    owner
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(
        ledger.count("ask_task", LedgerEvent::Called),
        2,
        "{:?}",
        ledger.read()
    );
    for c in [owner, stranger, other] {
        c.cancel().await.unwrap();
    }
}

/// The operation whose ID ends with `suffix` on the test's endpoint, once visibility shows it.
async fn listed_operation(env: &TestEnv, suffix: &str) -> durable_mcp::nexus::OperationRef {
    listed_operation_where(env, |id| id.ends_with(suffix)).await
}

/// The operation on the test's endpoint whose ID `matches`, once visibility shows it: what a
/// principal that may list the namespace's operations finds.
pub(crate) async fn listed_operation_where(
    env: &TestEnv,
    matches: impl Fn(&str) -> bool,
) -> durable_mcp::nexus::OperationRef {
    use temporalio_protos::temporal::api::workflowservice::v1::ListNexusOperationExecutionsRequest;
    let mut service = env.connection.workflow_service();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = service
            .list_nexus_operation_executions(tonic::Request::new(
                ListNexusOperationExecutionsRequest {
                    namespace: env.namespace.clone(),
                    page_size: 100,
                    query: format!("Endpoint = '{}'", env.endpoint),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let found = listed
            .operations
            .into_iter()
            .find(|o| matches(&o.operation_id));
        if let Some(op) = found {
            return durable_mcp::nexus::OperationRef {
                operation_id: op.operation_id,
                run_id: String::new(),
            };
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no operation listed on the endpoint matches"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// R-CON-40: a copied seal vouches for no other run. A principal that may start and describe
/// operations on the endpoint reads a closed round's seal from its Nexus headers and starts
/// the round's ID again (the reuse policy is the new start's own) with that seal and input of
/// its own; the owner follows that run neither when it reads the task nor when it answers.
#[tokio::test]
async fn a_round_started_again_with_a_copied_seal_and_other_input_is_not_followed() {
    use durable_mcp::contract::input::{INPUT_ROUND, InputRequired};
    use durable_mcp::contract::{operation::OperationOutcome, payload};
    use durable_mcp::nexus::StartOperation;
    let (env, ledger, _proxy, key) = setup("durable-input-copied-seal").await;
    let (owner, task_id, _) = owner_waiting(&env, &key, json!({"path": "/data"})).await;
    let done = answered_and_done(&owner, &task_id).await;
    assert_eq!(
        done["result"]["structuredContent"]["arguments"]["path"],
        "/data"
    );

    // The foreign principal copies the closed round 2 (its seal and caller headers) and starts
    // its ID again with its own arguments and answers.
    let second = listed_operation(&env, "~r2").await;
    let copied = env.client.describe(&second).await.unwrap();
    let first = durable_mcp::nexus::OperationRef {
        operation_id: second.operation_id.trim_end_matches("~r2").to_owned(),
        run_id: String::new(),
    };
    let Some(OperationOutcome::Succeeded(asked)) =
        env.client.describe(&first).await.unwrap().outcome
    else {
        panic!("the first round asked for input")
    };
    let mut asked: InputRequired =
        serde_json::from_value(payload::to_json(&asked).unwrap()).unwrap();
    asked.arguments = json!({"path": "/evil"}).as_object().unwrap().clone();
    let round = asked.answered(confirmed().into_iter().collect());
    let mut foreign = StartOperation::new(
        &second.operation_id,
        &copied.endpoint,
        &copied.service,
        &copied.operation,
        payload::to_marked_payload(&round, INPUT_ROUND).unwrap(),
    );
    foreign.headers = copied.headers.clone();
    foreign.schedule_to_close = Some(Duration::from_secs(60));
    let (run, started) = env.client.start(foreign).await.unwrap();
    assert!(
        started && run.run_id != copied.reference.run_id,
        "a new run of the round's ID"
    );
    env.client
        .wait(&run, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        ledger.count("ask_task", LedgerEvent::Called),
        3,
        "{:?}",
        ledger.read()
    );

    // The owner's task never shows the foreign run's result, and an answer runs nothing.
    let read = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    let read = serde_json::to_value(&read).unwrap();
    assert!(
        !read.to_string().contains("/evil"),
        "the foreign run was followed: {read}"
    );
    answer_refused(&owner, &task_id, "someone other").await;
    assert_eq!(
        ledger.count("ask_task", LedgerEvent::Called),
        3,
        "{:?}",
        ledger.read()
    );
    owner.cancel().await.unwrap();
}

/// R-CON-40: two routes may name one service on two endpoints. A task asked on one; a
/// connector whose route for the tool names the same service on another endpoint refuses the
/// answer and sends it nowhere, and the owner's answer through the first still runs once.
#[tokio::test]
async fn an_answer_goes_only_to_the_endpoint_whose_service_asked() {
    let (env, ledger, _proxy, key) = setup("durable-input-endpoint").await;
    let (namesake, namesake_ledger, _namesake_proxy, _) =
        setup("durable-input-endpoint-namesake").await;
    assert_ne!(env.endpoint, namesake.endpoint);
    let (owner, task_id, _) = owner_waiting(&env, &key, json!({"path": "/data"})).await;
    let day = Duration::from_secs(86_400);
    let moved = task_client_for(connector(&namesake, &key, "owner", day))
        .await
        .unwrap();
    answer_refused(&moved, &task_id, "not sent anywhere").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        namesake_ledger.count("ask_task", LedgerEvent::Called),
        0,
        "{:?}",
        namesake_ledger.read()
    );

    answered_and_done(&owner, &task_id).await;
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 2);
    for c in [owner, moved] {
        c.cancel().await.unwrap();
    }
}

/// R-CON-40, R-CON-8: the seal covers a round's input before any codec, and the describe that
/// checks it reads that input back decoded: through a codec that encrypts under a random
/// nonce (each encoding differs), the input reads back as the connector made it, and its seal
/// verifies; the description names the endpoint the round was started on.
#[tokio::test]
async fn a_rounds_input_reads_back_through_a_codec_as_it_was_sealed() {
    use durable_mcp::connector::task_ref::{SealedRound, round_seal, round_sealed};
    use durable_mcp::contract::payload::{self, PayloadCodec};
    use durable_mcp::nexus::StartOperation;
    use durable_mcp::temporal::codec::RemoteCodec;
    let env = TestEnv::shared("durable-input-sealed-codec").await;
    let server = codec_server().await;
    let codec: std::sync::Arc<dyn PayloadCodec> =
        std::sync::Arc::new(RemoteCodec::new(&server.url, &env.namespace).unwrap());
    let client = env.client.clone().with_codec(codec);
    let input =
        payload::to_marked_payload(&json!({"arguments": {"path": "/data"}}), "InputRound").unwrap();
    // No service answers it: describing a scheduled operation is enough.
    let mut start = StartOperation::new(
        format!("sealed-{}~r2", uuid::Uuid::new_v4()),
        &env.endpoint,
        "nobody",
        "ask",
        input.clone(),
    );
    start.schedule_to_close = Some(Duration::from_secs(30));
    let key = SigningKey::generate();
    let started = SealedRound {
        operation_id: &start.operation_id,
        endpoint: &start.endpoint,
        service: &start.service,
        operation: &start.operation,
        input: &start.input,
    };
    let sealed = |d: &durable_mcp::nexus::OperationDescription| {
        let round = SealedRound {
            operation_id: &d.reference.operation_id,
            endpoint: &d.endpoint,
            service: &d.service,
            operation: &d.operation,
            input: d.input.as_ref().expect("described with its input"),
        };
        round_sealed([&key], &round_seal(&key, started), round)
    };
    let (op, _) = client.start(start.clone()).await.unwrap();
    let described = client.describe_with_input(&op).await.unwrap();
    assert_eq!(described.input.as_ref(), Some(&input));
    assert_eq!(described.endpoint, env.endpoint);
    assert!(sealed(&described));
    let stored = stored_operation(&env, &op.operation_id, &op.run_id).await;
    assert_ne!(stored.input.as_ref(), Some(&input), "the codec encoded it");
    assert_eq!(client.describe(&op).await.unwrap().input, None);
    client.terminate(&op, "test done").await.unwrap();
}

/// The owner's 2026-07-28 client without tasks, declaring elicitation, to a connector served
/// over Streamable HTTP on loopback until the token is cancelled.
async fn stateless_owner(
    env: &TestEnv,
    key: &SigningKey,
) -> (
    McpClient<rmcp::model::ClientConfig>,
    tokio_util::sync::CancellationToken,
) {
    let day = Duration::from_secs(86_400);
    let (server, shutdown) =
        serve_connector_http(connector(env, key, "owner", day), loopback_http_options())
            .await
            .unwrap();
    let client = stateless_http_client(&server.url, elicitation_client_config(false))
        .await
        .unwrap();
    (client, shutdown)
}

#[tokio::test]
async fn a_caller_without_a_task_gets_input_required_and_resumes_with_the_signed_request_state() {
    let (env, ledger, _proxy, key) = setup("durable-input-mrtr").await;
    let (client, shutdown) = stateless_owner(&env, &key).await;

    let asked = client
        .peer()
        .call_tool_once(tool_call("ask", json!({"path": "/data"})))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = asked else {
        panic!("expected input_required, got {asked:?}")
    };
    let requests = serde_json::to_value(&asked.input_requests).unwrap();
    assert_eq!(requests[CONFIRM_KEY]["params"]["message"], "Delete 40 GB?");
    let state = asked.request_state.clone().unwrap();
    assert!(state.starts_with(INPUT_STATE_PREFIX), "{state}");
    assert!(
        !state.contains("mock-upstream-state"),
        "never the upstream's state: {state}"
    );

    // A changed requestState is refused and nothing runs.
    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let mut resume = tool_call("ask", json!({"path": "/data"})).with_input_responses(confirmed());
    resume.request_state = Some(tampered);
    let err = client
        .peer()
        .call_tool_once(resume.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("-32602"), "{err}");

    // The signed one resumes the call, and re-issuing it again gets the same answer without
    // running the tool a third time.
    resume.request_state = Some(state);
    for _ in 0..2 {
        let done = client.peer().call_tool_once(resume.clone()).await.unwrap();
        let CallToolResponse::Complete(done) = done else {
            panic!("expected the result, got {done:?}")
        };
        let answered = done.structured_content.unwrap();
        assert_eq!(answered["inputResponses"][CONFIRM_KEY]["action"], "accept");
    }
    assert_eq!(
        ledger.count("ask", LedgerEvent::Called),
        2,
        "{:?}",
        ledger.read()
    );
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn an_input_request_nobody_answers_in_time_ends_the_call() {
    let (env, ledger, _proxy, key) = setup("durable-input-timeout").await;
    let owner = task_client_for(connector(&env, &key, "owner", Duration::from_secs(1)))
        .await
        .unwrap();
    let (task_id, _) = waiting_task(&owner, json!({})).await;
    let ended = poll_task_past(&owner, &task_id, TaskStatus::InputRequired, |_| {}).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(ended["result"]["isError"], true);
    assert_eq!(
        ended["result"]["_meta"]["io.durable-mcp/errorType"],
        "InputRequired"
    );
    let text = ended["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("--input-timeout"), "{text}");
    // A late answer is acknowledged and runs nothing.
    answer_late(&owner, &task_id).await;
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 1);
    owner.cancel().await.unwrap();
}

/// Over Streamable HTTP the upstream is an rmcp server, which answers an
/// `InputRequiredResult` only to a client that negotiated 2026-07-28: the proxy does, so the
/// same flow works (R-PRX-29, R-PRX-33).
#[tokio::test]
async fn a_task_asks_for_input_over_an_http_upstream_and_its_owners_update_completes_it() {
    let env = TestEnv::shared("durable-input-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = serve_mock_upstream_http(
        SpecSource::Inline(asking_spec()),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config =
        durable_mcp_conformance::kit::upstreams::http_upstream("asking", &upstream.url).unwrap();
    let proxy = start_proxy(&env, vec![config]);
    let key = SigningKey::generate();
    let owner = task_client_for(connector(&env, &key, "owner", Duration::from_secs(86_400)))
        .await
        .unwrap();
    let (task_id, waiting) = waiting_task(&owner, json!({"path": "/data"})).await;
    assert_eq!(
        waiting["inputRequests"][CONFIRM_KEY]["params"]["message"],
        "Delete 40 GB?"
    );
    let done = answered_and_done(&owner, &task_id).await;
    let answered = &done["result"]["structuredContent"];
    assert_eq!(answered["inputResponses"][CONFIRM_KEY]["action"], "accept");
    assert_eq!(answered["arguments"]["path"], "/data");
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 2);
    owner.cancel().await.unwrap();
    drop(proxy);
    upstream.shutdown().await;
}

/// R-CON-46: a cancel of a task that waits for input ends it `cancelled` at once, and an
/// answer that comes after it runs nothing.
#[tokio::test]
async fn a_task_cancelled_while_it_waits_for_input_reads_cancelled_and_a_later_answer_runs_nothing()
{
    let (env, ledger, _proxy, key) = setup("durable-input-cancel").await;
    let owner = task_client_for(connector(&env, &key, "owner", Duration::from_secs(86_400)))
        .await
        .unwrap();
    let (task_id, _) = waiting_task(&owner, json!({})).await;
    owner
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    let read = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    let read = serde_json::to_value(&read).unwrap();
    assert_eq!(read["status"], "cancelled", "{read}");
    // Again, and an answer after it: acknowledged, nothing runs, still cancelled.
    owner
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task_id))
        .await
        .unwrap();
    answer_late(&owner, &task_id).await;
    let read = owner
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap()["status"], "cancelled");
    assert_eq!(ledger.count("ask_task", LedgerEvent::Called), 1);
    owner.cancel().await.unwrap();
}

/// R-CON-46, R-CON-40: a principal that may start operations on the endpoint starts the ID of
/// a waiting task's next round itself, unsealed; the owner's cancel refuses to take that round
/// (it would cancel someone else's operation in the owner's name) and says so, and the task
/// still reads as waiting for input.
#[tokio::test]
async fn a_cancel_does_not_take_a_next_round_someone_else_started() {
    use durable_mcp::contract::input::{INPUT_ROUND, InputRequired, next_round_id};
    use durable_mcp::contract::{operation::OperationOutcome, payload};
    use durable_mcp::nexus::StartOperation;
    let (env, _ledger, _proxy, key) = setup("durable-input-foreign-cancel").await;
    let (owner, task_id, _) = owner_waiting(&env, &key, json!({"path": "/data"})).await;
    let first = listed_operation_where(&env, |id| !id.contains('~')).await;
    let asking = env.client.describe(&first).await.unwrap();
    let Some(OperationOutcome::Succeeded(asked)) = asking.outcome.clone() else {
        panic!("the first round asked for input")
    };
    let asked: InputRequired = serde_json::from_value(payload::to_json(&asked).unwrap()).unwrap();
    let round = asked.answered(confirmed().into_iter().collect());
    let mut foreign = StartOperation::new(
        next_round_id(&first.operation_id).unwrap(),
        &asking.endpoint,
        &asking.service,
        &asking.operation,
        payload::to_marked_payload(&round, INPUT_ROUND).unwrap(),
    );
    foreign.schedule_to_close = Some(Duration::from_secs(60));
    let (run, started) = env.client.start(foreign).await.unwrap();
    assert!(started, "the foreign principal started the next round's ID");

    let refused = owner
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task_id))
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("someone other than this connector")),
        "{refused:?}"
    );
    let foreign_run = env.client.describe(&run).await.unwrap();
    assert_eq!(
        foreign_run.cancellation, None,
        "the owner's cancel reached the foreign run"
    );
    let read = task_now(&owner, &task_id).await;
    assert_eq!(read["status"], "input_required", "{read}");
    owner.cancel().await.unwrap();
}

/// A connector serving the companion tools to callers of `scope`, a call becoming a companion
/// task after 1 s.
pub(crate) fn companion(env: &TestEnv, key: &SigningKey, scope: &str) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("asking", &env.endpoint)]);
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    options.task_after = Duration::from_secs(1);
    options.companion_tools = true;
    Connector::new(env.client.clone(), options)
}

/// Polls `task_status` as `client` until the task no longer works.
pub(crate) async fn status_past_working<C: rmcp::Service<rmcp::RoleClient>>(
    client: &McpClient<C>,
    task_id: &str,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = call(client, "task_status", json!({"task_id": task_id})).await;
        if status["structuredContent"]["status"] != "working" {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// R-CON-11: a companion task whose tool asks the user (`elicitation/create`) never shows the
/// question to the model and never takes the model's answer: `task_status` withholds it,
/// `task_input` is refused and runs nothing, and `task_result` answers a tool error naming the
/// capability the host lacks; a host that declared elicitation gets the question on its session
/// from `task_result`, and the user's answer is the next round (once).
#[tokio::test]
async fn a_companion_tasks_question_for_the_user_goes_to_the_host_never_to_the_model() {
    let (env, ledger, _proxy, key) = setup("durable-input-companion").await;
    let owner = client_for(companion(&env, &key, "owner")).await.unwrap();
    // The tool asks only after 2.5 s: the call is a companion task by then.
    let started = call(&owner, "ask", json!({"path": "/data", "sleep_ms": 2500})).await;
    let task_id = started["_meta"]["io.durable-mcp/taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no companion task ID in {started}"))
        .to_owned();
    let by_id = json!({"task_id": task_id});
    let status = status_past_working(&owner, &task_id).await;
    assert_eq!(
        status["structuredContent"]["status"], "input_required",
        "{status}"
    );
    assert_eq!(
        status["structuredContent"]["hostInputRequests"],
        json!(["elicitation/create"])
    );
    assert!(!status.to_string().contains("Delete 40 GB?"), "{status}");
    assert!(
        status["structuredContent"].get("inputRequests").is_none(),
        "{status}"
    );

    // The model's answer is refused and runs nothing; a stranger's is an unknown task.
    let answer = |task_id: &str| json!({"task_id": task_id, "input_responses": confirmed()});
    let refused = call(&owner, "task_input", answer(&task_id)).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("elicitation/create") && text.contains("nothing ran"),
        "{text}"
    );
    let stranger = client_for(companion(&env, &key, "stranger")).await.unwrap();
    let foreign = call(&stranger, "task_input", answer(&task_id)).await;
    assert_eq!(foreign["content"][0]["text"], "unknown task", "{foreign}");

    // A host without elicitation: a typed tool error naming it, at once.
    let asked_at = tokio::time::Instant::now();
    let waiting = call(&owner, "task_result", by_id.clone()).await;
    assert!(asked_at.elapsed() < Duration::from_secs(10), "it waited");
    assert_eq!(waiting["isError"], true, "{waiting}");
    assert_eq!(
        waiting["_meta"]["io.durable-mcp/errorType"], "InputRequired",
        "{waiting}"
    );
    let text = waiting["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("elicitation capability") && !text.contains("Delete 40 GB?"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ledger.count("ask", LedgerEvent::Called),
        1,
        "{:?}",
        ledger.read()
    );

    // The same owner on a host that declared elicitation: task_result asks the user.
    let confirmer = crate::input_relay::Confirmer::default();
    let host = serve_in_memory(companion(&env, &key, "owner"), confirmer.clone())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let done = loop {
        let done = call(&host, "task_result", by_id.clone()).await;
        if done["structuredContent"]["status"] != "working" {
            break done;
        }
        assert!(tokio::time::Instant::now() < deadline, "{done}");
    };
    let asked = confirmer.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["message"], "Delete 40 GB?");
    let answered = &done["structuredContent"];
    assert_eq!(
        answered["inputResponses"][CONFIRM_KEY]["action"], "accept",
        "{done}"
    );
    assert_eq!(answered["arguments"]["path"], "/data");
    assert_eq!(
        ledger.count("ask", LedgerEvent::Called),
        2,
        "{:?}",
        ledger.read()
    );
    for c in [owner, stranger] {
        c.cancel().await.unwrap();
    }
    host.cancel().await.unwrap();
}

/// A client's call of `tool`, answered as JSON.
pub(crate) async fn call<C: rmcp::Service<rmcp::RoleClient>>(
    client: &McpClient<C>,
    tool: &str,
    arguments: Value,
) -> Value {
    let answer = client.peer().call_tool(tool_call(tool, arguments)).await;
    serde_json::to_value(answer.unwrap()).unwrap()
}

/// The asking mock plus `ask_both`: two confirmations (`first`, `second`) asked at once, and
/// `ask_two`: the same, run only as a task.
fn two_keys_spec() -> UpstreamSpec {
    let mut spec = asking_spec();
    let ask_both: ToolSpec = serde_json::from_value(json!({
        "name": "ask_both",
        "description": "Asks two confirmations at once, then echoes both.",
        "annotations": {"destructiveHint": true, "idempotentHint": false},
        "behavior": {"kind": "ask_written", "requests": {
            "first": confirmation("Go on? (first)"),
            "second": confirmation("Go on? (second)")
        }}
    }))
    .unwrap();
    let mut ask_two = ask_both.clone();
    ask_two.name = "ask_two".into();
    ask_two.execution = Some(json!({"taskSupport": "required"}));
    spec.tools.extend([ask_both, ask_two]);
    spec
}

/// An accepted confirmation under `key`, signed `by`.
fn yes(key: &str, by: &str) -> InputResponses {
    [(
        key.to_owned(),
        json!({"action": "accept", "content": {"confirm": true, "by": by}}),
    )]
    .into()
}

/// The keys a task's `tasks/get` answer asks.
fn asked_keys(task: &Value) -> Vec<String> {
    let requests = task["inputRequests"].as_object();
    requests
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect()
}

/// `client`'s `tasks/get` answer for `task_id`, as JSON.
async fn task_now(client: &McpClient<rmcp::model::ClientConfig>, task_id: &str) -> Value {
    let got = client.peer().get_task(GetTaskParams::new(task_id)).await;
    serde_json::to_value(got.unwrap()).unwrap()
}

/// The task's end, once it no longer waits nor works.
async fn ended(client: &McpClient<rmcp::model::ClientConfig>, task_id: &str) -> Value {
    let after = poll_task_past(client, task_id, TaskStatus::InputRequired, |_| {}).await;
    match after["status"].as_str() {
        Some("working") => poll_task_until_done(client, task_id).await,
        _ => after,
    }
}

/// R-CON-40 (SEP-2663 partial fulfilment): a task whose tool asks two keys at once is answered
/// one key at a time from two replicas. After the first answer it still reads `input_required`
/// with only the other key (the answer kept in Temporal, not in a replica); a second answer to
/// the answered key changes nothing; the last answer runs the tool's next round once, with both
/// answers. Two replicas answering the two keys at the same moment both count. A task cancelled
/// while partly answered ends `cancelled`, and the upstream runs nothing more.
#[tokio::test]
async fn a_task_answered_one_key_at_a_time_from_two_replicas_runs_once_with_every_answer() {
    let (env, ledger, _proxy, key) = setup_with("partial-input", &two_keys_spec()).await;
    let day = Duration::from_secs(86_400);
    let a = task_client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    let b = task_client_for(connector(&env, &key, "owner", day))
        .await
        .unwrap();
    let update = |client: &McpClient<rmcp::model::ClientConfig>, task: &str, answer| {
        let (peer, task) = (client.peer().clone(), task.to_owned());
        async move { peer.update_task(UpdateTaskParams::new(&task, answer)).await }
    };

    // One key at a time, from two replicas.
    let (task, waiting) = waiting_task_of(&a, "ask_two", json!({"n": 1})).await;
    assert_eq!(asked_keys(&waiting), ["first", "second"], "{waiting}");
    update(&b, &task, yes("first", "b")).await.unwrap();
    let still = task_now(&a, &task).await;
    assert_eq!(still["status"], "input_required", "{still}");
    assert_eq!(asked_keys(&still), ["second"], "{still}");
    // The answered key again: ignored.
    update(&a, &task, yes("first", "a")).await.unwrap();
    assert_eq!(asked_keys(&task_now(&b, &task).await), ["second"]);
    assert_eq!(ledger.count("ask_two", LedgerEvent::Called), 1);
    update(&a, &task, yes("second", "a")).await.unwrap();
    let done = ended(&b, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let answers = &done["result"]["structuredContent"]["inputResponses"];
    assert_eq!(answers["first"]["content"]["by"], "b", "{done}");
    assert_eq!(answers["second"]["content"]["by"], "a", "{done}");
    assert_eq!(done["result"]["structuredContent"]["arguments"]["n"], 1);
    assert_eq!(
        ledger.count("ask_two", LedgerEvent::Called),
        2,
        "asked once, then answered once with both: {:?}",
        ledger.read()
    );

    // Both keys at the same moment, one on each replica.
    let (task, _) = waiting_task_of(&a, "ask_two", json!({"n": 2})).await;
    let (first, second) = tokio::join!(
        update(&a, &task, yes("first", "a")),
        update(&b, &task, yes("second", "b"))
    );
    first.unwrap();
    second.unwrap();
    let done = ended(&a, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let answers = &done["result"]["structuredContent"]["inputResponses"];
    assert_eq!(
        (
            &answers["first"]["content"]["by"],
            &answers["second"]["content"]["by"]
        ),
        (&json!("a"), &json!("b")),
        "{done}"
    );
    assert_eq!(ledger.count("ask_two", LedgerEvent::Called), 4);

    // Cancelled while partly answered.
    let (task, _) = waiting_task_of(&a, "ask_two", json!({"n": 3})).await;
    update(&b, &task, yes("first", "b")).await.unwrap();
    a.peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(&task))
        .await
        .unwrap();
    let cancelled = ended(&b, &task).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    update(&a, &task, yes("second", "a")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ledger.count("ask_two", LedgerEvent::Called), 5);
    for c in [a, b] {
        c.cancel().await.unwrap();
    }
}

/// R-CON-40: a 2026-07-28 caller without a task re-issues the call with some of the answers:
/// it gets an `InputRequiredResult` asking only the rest, with a new `requestState`; re-issued
/// with the rest, the tool runs once with all of them.
#[tokio::test]
async fn a_call_re_issued_with_some_answers_is_asked_only_the_rest_and_runs_once_with_all() {
    let (env, ledger, _proxy, key) = setup_with("partial-input-mrtr", &two_keys_spec()).await;
    let (client, shutdown) = stateless_owner(&env, &key).await;
    let call = |answers: Option<(InputResponses, String)>| {
        let mut request = tool_call("ask_both", json!({"n": 4}));
        if let Some((responses, state)) = answers {
            request = request.with_input_responses(responses);
            request.request_state = Some(state);
        }
        let peer = client.peer().clone();
        async move { peer.call_tool_once(request).await.unwrap() }
    };
    let asked = |answer: CallToolResponse| match answer {
        CallToolResponse::InputRequired(asked) => {
            let requests = serde_json::to_value(&asked.input_requests).unwrap();
            let keys: Vec<String> = requests.as_object().unwrap().keys().cloned().collect();
            (keys, asked.request_state.unwrap())
        }
        other => panic!("expected input_required, got {other:?}"),
    };
    let (keys, state) = asked(call(None).await);
    assert_eq!(keys, ["first", "second"]);
    let (keys, rest) = asked(call(Some((yes("first", "one"), state.clone()))).await);
    assert_eq!(keys, ["second"]);
    assert_ne!(rest, state, "the rest is asked by a round of its own");
    // The answered key again: ignored, the rest asked again and the tool not called.
    let (keys, again) = asked(call(Some((yes("first", "other"), rest.clone()))).await);
    assert_eq!((keys, &again), (vec!["second".to_owned()], &rest));
    assert_eq!(ledger.count("ask_both", LedgerEvent::Called), 1);
    let CallToolResponse::Complete(done) = call(Some((yes("second", "two"), rest))).await else {
        panic!("expected the result")
    };
    let answers = &done.structured_content.unwrap()["inputResponses"];
    assert_eq!(answers["first"]["content"]["by"], "one");
    assert_eq!(answers["second"]["content"]["by"], "two");
    assert_eq!(ledger.count("ask_both", LedgerEvent::Called), 2);
    client.cancel().await.unwrap();
    shutdown.cancel();
}
