//! R-NAT-8, R-WFC-9: the resource, prompt and completions `durable-mcp-example-tools` publishes
//! beside its tools reach a connector's callers (declared, listed, read, got, completed) and
//! Workflow code through the in-Workflow client, on the real dev server.

use durable_mcp::workflow_client::McpTools;
use durable_mcp_conformance::fixtures::everything::RawStdioClient;
use durable_mcp_examples::{GUIDE_TEXT, GUIDE_URI, REVIEW_PATHS};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use temporalio_client::{Client, ClientOptions, WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{WorkflowContext, WorkflowResult};

use crate::support::*;

/// The example service's name, which callers route to.
const SERVICE: &str = "examples";

/// The guide as `resources/read` answers it.
fn guide_read() -> Value {
    json!([{"uri": GUIDE_URI, "mimeType": "text/plain", "text": GUIDE_TEXT}])
}

/// The `review` prompt's answer for `path`.
fn review_messages(path: &str) -> Value {
    let text = format!("Review the files at {path} and say what slow_report should report.");
    json!([{"role": "user", "content": {"type": "text", "text": text}}])
}

#[tokio::test]
async fn a_native_services_resources_and_prompts_reach_callers_through_the_connector() {
    let env = TestEnv::shared("native-resources").await;
    let _tools = example_tools(&env).await.unwrap();
    let mut caller = RawStdioClient::spawn(connector_command(&env, SERVICE))
        .await
        .unwrap();
    let capabilities = &caller.initialize["capabilities"];
    assert!(
        capabilities["resources"].is_object() && capabilities["prompts"].is_object(),
        "{capabilities}"
    );
    assert!(capabilities["completions"].is_object(), "{capabilities}");

    let listed = caller.request("resources/list", json!({})).await.unwrap();
    assert_eq!(
        listed["resources"],
        json!([{"uri": GUIDE_URI, "name": "guide", "title": "Guide to the example tools",
                "mimeType": "text/plain"}])
    );
    let templates = caller
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    assert_eq!(templates["resourceTemplates"], json!([]));
    let read = caller
        .request("resources/read", json!({"uri": GUIDE_URI}))
        .await
        .unwrap();
    assert_eq!(read["contents"], guide_read());
    let missing = caller
        .exchange("resources/read", json!({"uri": "examples://nope"}))
        .await
        .unwrap()
        .response;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");

    let prompts = caller.request("prompts/list", json!({})).await.unwrap();
    assert_eq!(
        prompts["prompts"],
        json!([{"name": "review", "title": "Review files",
                "description": "Asks for a review of the files at a path.",
                "arguments": [{"name": "path", "description": "The path to review.",
                               "required": true}]}])
    );
    let got = caller
        .request(
            "prompts/get",
            json!({"name": "review", "arguments": {"path": "/tmp/x"}}),
        )
        .await
        .unwrap();
    assert_eq!(got["messages"], review_messages("/tmp/x"));
    let refused = caller
        .exchange("prompts/get", json!({"name": "review", "arguments": {}}))
        .await
        .unwrap()
        .response;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("path"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_native_services_completions_reach_callers_through_the_connector() {
    let env = TestEnv::shared("native-completions").await;
    let _tools = example_tools(&env).await.unwrap();
    let mut caller = RawStdioClient::spawn(connector_command(&env, SERVICE))
        .await
        .unwrap();
    assert_eq!(
        caller.initialize["capabilities"]["completions"],
        json!({}),
        "declared as the service declares it"
    );
    let complete = |value: &str| {
        json!({"ref": {"type": "ref/prompt", "name": "review"},
               "argument": {"name": "path", "value": value}})
    };
    let src = caller
        .request("completion/complete", complete("src"))
        .await
        .unwrap();
    assert_eq!(
        src,
        json!({"completion": {"values": ["src/", "src/bin/"], "total": 2, "hasMore": false}})
    );
    let all = caller
        .request("completion/complete", complete(""))
        .await
        .unwrap();
    assert_eq!(all["completion"]["values"], json!(REVIEW_PATHS));
    // A prompt the service does not have, or an argument the prompt does not have.
    for (params, named) in [
        (
            json!({"ref": {"type": "ref/prompt", "name": "nope"},
                   "argument": {"name": "path", "value": ""}}),
            "nope",
        ),
        (
            json!({"ref": {"type": "ref/prompt", "name": "review"},
                   "argument": {"name": "depth", "value": ""}}),
            "depth",
        ),
    ] {
        let refused = caller
            .exchange("completion/complete", params)
            .await
            .unwrap()
            .response;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{refused}");
    }
}

/// Where the Workflow's service is.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Target {
    endpoint: String,
    service: String,
}

/// Lists and reads the service's resources and prompts; answers each result (or error) by name.
#[workflow]
#[derive(Default)]
struct ReadFeatures;

#[workflow_methods]
impl ReadFeatures {
    #[run(name = "durable-mcp-tests.read-features")]
    async fn run(ctx: &mut WorkflowContext<Self>, target: Target) -> WorkflowResult<Value> {
        let mcp = McpTools::new(ctx, target.endpoint, target.service);
        let shown = |r: Result<Value, durable_mcp::workflow_client::ToolCallError>| match r {
            Ok(v) => v,
            Err(e) => json!({"error": e.to_string()}),
        };
        let capabilities = mcp.capabilities().await.map(Value::Object);
        let resources = mcp.list_resources_json().await;
        let read = mcp.read_resource_json(GUIDE_URI).await;
        let missing = mcp.read_resource_json("examples://nope").await;
        let prompts = mcp.list_prompts_json().await;
        let mut arguments = Map::new();
        arguments.insert("path".into(), "/srv".into());
        let got = mcp.get_prompt_json("review", arguments).await;
        let review = json!({"type": "ref/prompt", "name": "review"});
        let completed = mcp.complete_json(review, "path", "d").await;
        Ok(json!({
            "capabilities": shown(capabilities),
            "resources": shown(resources),
            "read": shown(read),
            "missing": shown(missing),
            "prompts": shown(prompts),
            "got": shown(got),
            "completed": shown(completed),
        }))
    }
}

#[tokio::test]
async fn a_workflow_lists_and_reads_a_native_services_resources_and_prompts() {
    let env = TestEnv::shared("wfc-native-resources").await;
    let _tools = example_tools(&env).await.unwrap();
    let queue = format!("{}-workflows", env.task_queue);
    let _worker = ActivityWorkerGuard::start_with(&env.address, &env.namespace, &queue, |o| {
        o.register_workflow::<ReadFeatures>()
            .expect("ReadFeatures registers");
    });
    let client = Client::new(
        env.connection.clone(),
        ClientOptions::new(env.namespace.clone()).build(),
    )
    .unwrap();
    let target = Target {
        endpoint: env.endpoint.clone(),
        service: SERVICE.into(),
    };
    let id = format!("wfc-native-resources-{}", uuid::Uuid::new_v4());
    let handle = client
        .start_workflow(
            ReadFeatures::run,
            target,
            WorkflowStartOptions::new(queue, id).build(),
        )
        .await
        .unwrap();
    let out: Value = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        handle.get_result(WorkflowGetResultOptions::default()),
    )
    .await
    .expect("the Workflow ends within 120 s")
    .unwrap();
    assert_eq!(
        out["capabilities"],
        json!({"resources": {}, "prompts": {}, "completions": {}})
    );
    assert_eq!(out["resources"]["resources"][0]["uri"], GUIDE_URI, "{out}");
    assert_eq!(out["read"], json!({"contents": guide_read()}));
    let missing = out["missing"]["error"].as_str().unwrap_or_default();
    assert!(
        missing.contains("UpstreamRejected") && missing.contains("examples://nope"),
        "{out}"
    );
    assert_eq!(out["prompts"]["prompts"][0]["name"], "review", "{out}");
    assert_eq!(out["got"], json!({"messages": review_messages("/srv")}));
    assert_eq!(
        out["completed"],
        json!({"completion": {"values": ["docs/"], "total": 1, "hasMore": false}})
    );
}
