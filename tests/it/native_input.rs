//! R-NAT-7: native tools that ask for input (a sync one served in-process for a caller without
//! tasks, below). `durable-mcp-example-tools` (a real process) serves
//! `delete_files`, a Workflow-backed tool that asks for a confirmation; a connector in front of
//! it serves the question as a task's `input_required`, and the owner's `tasks/update` starts
//! the tool's next round, which acts on the answer. R-WFC-8: Workflow code calling the tool
//! through the in-Workflow client sees the question and answers it itself.

use std::time::Duration;

use durable_mcp::{
    connector::{
        server::{Connector, ConnectorOptions},
        task_ref::{CallerScope, SigningKey},
    },
    native::{Answer, AskInput, Round, Tool, ToolService},
    workflow_client::{CallOptions, McpTools},
};
use rmcp::model::{CallToolResponse, InputResponses, TaskStatus, UpdateTaskParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use temporalio_client::{Client, ClientOptions, WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{WorkflowContext, WorkflowResult};

use crate::support::*;

/// A connector routing to `examples` for callers of `scope`; a task-capable caller gets a task
/// at once.
pub(crate) fn connector(env: &TestEnv, key: &SigningKey, scope: &str) -> Connector {
    let mut options = ConnectorOptions::new(vec![route("examples", &env.endpoint)]);
    options.task_after = Duration::ZERO;
    options.signing_key = key.clone();
    options.caller_scope = CallerScope::Process(scope.into());
    options.input_timeout = Duration::from_secs(86_400);
    Connector::new(env.client.clone(), options)
}

fn answer(action: Value) -> InputResponses {
    [("confirm".to_owned(), action)].into()
}

fn accept() -> InputResponses {
    answer(json!({"action": "accept", "content": {"confirm": true}}))
}

/// A call of `delete_files` asking to delete 40 GB at `/data`.
pub(crate) fn delete_data() -> rmcp::model::CallToolRequestParams {
    tool_call("delete_files", json!({"path": "/data", "gigabytes": 40}))
}

/// Calls `delete_files` as `owner` and waits until its task asks: the task ID and that
/// `tasks/get` answer.
async fn asking_task(owner: &McpClient<rmcp::model::ClientConfig>) -> (String, Value) {
    let task = owner.peer().call_tool_once(delete_data()).await.unwrap();
    let task_id = task_id_of(task);
    let waiting = poll_task_past(owner, &task_id, TaskStatus::Working, |_| {}).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    (task_id, waiting)
}

/// The task's final `tasks/get` answer once it stopped asking and working.
async fn finished(owner: &McpClient<rmcp::model::ClientConfig>, task_id: &str) -> Value {
    let done = poll_task_past(owner, task_id, TaskStatus::InputRequired, |_| {}).await;
    match done["status"].as_str() {
        Some("working") => poll_task_until_done(owner, task_id).await,
        _ => done,
    }
}

#[tokio::test]
async fn a_native_workflow_tool_asks_and_its_owners_answer_runs_the_next_round() {
    let env = TestEnv::shared("native-input-accept").await;
    let _tools = example_tools(&env).await.unwrap();
    let key = SigningKey::generate();
    let owner = task_client_for(connector(&env, &key, "owner"))
        .await
        .unwrap();
    let (task_id, waiting) = asking_task(&owner).await;
    let request = &waiting["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Delete 40 GB at /data?");

    // A foreign caller cannot answer: indistinguishable from an unknown task.
    let stranger = task_client_for(connector(&env, &key, "stranger"))
        .await
        .unwrap();
    let refused = stranger
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, accept()))
        .await
        .unwrap_err();
    let unknown = stranger
        .peer()
        .update_task(UpdateTaskParams::new("not-a-task", accept()))
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), unknown.to_string());
    assert!(refused.to_string().contains("-32602"), "{refused}");

    owner
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, accept()))
        .await
        .unwrap();
    let done = finished(&owner, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "deleted /data (40 GB)"
    );
    assert_eq!(done["result"]["isError"], false);
    for c in [owner, stranger] {
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_declined_question_completes_with_a_result_saying_so() {
    let env = TestEnv::shared("native-input-decline").await;
    let _tools = example_tools(&env).await.unwrap();
    let key = SigningKey::generate();
    let owner = task_client_for(connector(&env, &key, "owner"))
        .await
        .unwrap();
    let (task_id, _) = asking_task(&owner).await;
    owner
        .peer()
        .update_task(UpdateTaskParams::new(
            &task_id,
            answer(json!({"action": "decline"})),
        ))
        .await
        .unwrap();
    let done = finished(&owner, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("declined"), "{done}");
    owner.cancel().await.unwrap();
}

#[tokio::test]
async fn a_question_outlives_a_restart_of_the_tool_worker_and_the_connector() {
    let env = TestEnv::shared("native-input-restart").await;
    let tools = example_tools(&env).await.unwrap();
    let key = SigningKey::generate();
    let owner = task_client_for(connector(&env, &key, "owner"))
        .await
        .unwrap();
    let (task_id, _) = asking_task(&owner).await;
    // Nothing waits between rounds: the worker and the connector go away and come back.
    drop(tools);
    owner.cancel().await.unwrap();
    let _tools = example_tools(&env).await.unwrap();
    let owner = task_client_for(connector(&env, &key, "owner"))
        .await
        .unwrap();
    owner
        .peer()
        .update_task(UpdateTaskParams::new(&task_id, accept()))
        .await
        .unwrap();
    let done = finished(&owner, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "deleted /data (40 GB)"
    );
    owner.cancel().await.unwrap();
}

// ---- the in-Workflow client answers (R-WFC-8) -------------------------------------------------

/// What [`ApproveThenDelete`] calls, and how it answers the question.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Approval {
    endpoint: String,
    accept: bool,
}

/// The question the tool asked (its `inputRequests`), and the result after the answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Approved {
    asked: Value,
    result: Value,
}

/// Calls `delete_files`; when its round asks for input, answers it from Workflow code.
#[workflow]
#[derive(Default)]
struct ApproveThenDelete;

#[workflow_methods]
impl ApproveThenDelete {
    #[run(name = "durable-mcp-tests.approve-then-delete")]
    async fn run(ctx: &mut WorkflowContext<Self>, input: Approval) -> WorkflowResult<Approved> {
        let tools = McpTools::new(ctx, input.endpoint, "examples");
        let arguments = json!({"path": "/wf", "gigabytes": 7});
        let fail = temporalio_sdk::ApplicationFailure::non_retryable;
        let asked = match tools
            .call_tool_json("delete_files", arguments, CallOptions::default())
            .await
        {
            Err(e) if e.input_required().is_some() => e.input_required().unwrap().clone(),
            other => return Err(fail(std::io::Error::other(format!("{other:?}"))).into()),
        };
        let action = if input.accept {
            json!({"action": "accept", "content": {"confirm": true}})
        } else {
            json!({"action": "decline"})
        };
        let responses = [("confirm".to_owned(), action)].into_iter().collect();
        let result = tools
            .answer_input_json("delete_files", &asked, responses, CallOptions::default())
            .await
            .map_err(temporalio_sdk::ApplicationFailure::non_retryable)?;
        Ok(Approved {
            asked: asked.input_requests(),
            result,
        })
    }
}

#[tokio::test]
async fn workflow_code_answers_a_native_tools_question_and_the_next_round_acts_on_it() {
    let env = TestEnv::shared("native-input-wfc").await;
    let _tools = example_tools(&env).await.unwrap();
    let queue = format!("{}-workflows", env.task_queue);
    let _worker = ActivityWorkerGuard::start_with(&env.address, &env.namespace, &queue, |o| {
        o.register_workflow::<ApproveThenDelete>()
            .expect("ApproveThenDelete registers");
    });
    let client = Client::new(
        env.connection.clone(),
        ClientOptions::new(env.namespace.clone()).build(),
    )
    .unwrap();
    for (accept, text) in [
        (true, "deleted /wf (7 GB)"),
        (false, "declined: nothing was deleted at /wf"),
    ] {
        let input = Approval {
            endpoint: env.endpoint.clone(),
            accept,
        };
        let id = format!("approve-{}", uuid::Uuid::new_v4());
        let handle = client
            .start_workflow(
                ApproveThenDelete::run,
                input,
                WorkflowStartOptions::new(queue.clone(), id).build(),
            )
            .await
            .unwrap();
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            handle.get_result(WorkflowGetResultOptions::default()),
        )
        .await
        .expect("the Workflow completes within 60 s")
        .unwrap();
        assert_eq!(
            out.asked["confirm"]["params"]["message"],
            "Delete 7 GB at /wf?"
        );
        assert_eq!(out.result["content"][0]["text"], text, "{out:?}");
        assert_eq!(out.result["isError"], false);
    }
}

// ---- a sync tool that asks, for a caller without tasks (R-NAT-7) ------------------------------

/// Asks first; on the answer, says what it did and the state it got back.
async fn rename(
    round: Round<serde_json::Map<String, Value>>,
) -> Result<Answer<String>, durable_mcp::native::ToolFailure> {
    let from = round.arguments["from"].as_str().unwrap_or_default();
    let Some(answers) = &round.answers else {
        let ask = AskInput::new().confirm("ok", format!("Rename {from}?"));
        return Ok(Answer::Ask(ask.state("rename-v1")));
    };
    let did = if answers.accepted("ok") {
        "renamed"
    } else {
        "kept"
    };
    let state = answers.state.as_deref().unwrap_or("none");
    Ok(Answer::Done(format!("{did} {from} (state {state})")))
}

#[tokio::test]
async fn a_sync_tool_asks_a_caller_without_tasks_and_the_signed_resume_runs_its_next_round() {
    let env = TestEnv::shared("native-input-sync").await;
    let service = ToolService::new("asking")
        .tool(Tool::sync_asking("rename", rename))
        .build()
        .unwrap();
    let _worker = env.nexus_worker(vec![service]).await;
    let mut options = ConnectorOptions::new(vec![route("asking", &env.endpoint)]);
    options.signing_key = SigningKey::generate();
    let (server, shutdown) = serve_connector_http(
        Connector::new(env.client.clone(), options),
        loopback_http_options(),
    )
    .await
    .unwrap();
    let client = stateless_http_client(&server.url, elicitation_client_config(false))
        .await
        .unwrap();

    let call = tool_call("rename", json!({"from": "/a"}));
    let asked = client.peer().call_tool_once(call.clone()).await.unwrap();
    let CallToolResponse::InputRequired(asked) = asked else {
        panic!("expected input_required, got {asked:?}")
    };
    let requests = serde_json::to_value(&asked.input_requests).unwrap();
    assert_eq!(requests["ok"]["params"]["message"], "Rename /a?");
    let state = asked.request_state.clone().unwrap();
    assert!(
        !state.contains("rename-v1"),
        "the connector's signed state: {state}"
    );

    let responses: InputResponses = [(
        "ok".to_owned(),
        json!({"action": "accept", "content": {"confirm": true}}),
    )]
    .into();
    let mut resume = call.with_input_responses(responses);
    resume.request_state = Some(state);
    let done = client.peer().call_tool_once(resume).await.unwrap();
    let CallToolResponse::Complete(done) = done else {
        panic!("expected the result, got {done:?}")
    };
    let text = serde_json::to_value(&done.content).unwrap()[0]["text"].clone();
    assert_eq!(text, "renamed /a (state rename-v1)");
    client.cancel().await.unwrap();
    shutdown.cancel();
}
