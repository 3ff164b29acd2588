//! R-PRX with a real third-party upstream: `@modelcontextprotocol/server-everything@2026.8.31`
//! (Node) fronted by the outbound proxy over stdio and over Streamable HTTP (stateful
//! sessions), on the real dev server. Every result that comes back through the durable path
//! (Nexus operation -> proxy -> Activity -> upstream) must equal, as JSON and `isError`
//! included, the result of the same call made straight to the server with an rmcp client; the
//! listed tools must keep their annotations.
//!
//! Where Node (>= 18) is missing each test prints `skipped: <reason>` and returns.
//! Never called: `gzip-file-as-resource` (reaches the internet) and `get-env` (returns the
//! server's whole environment); the fixture refuses both.

use std::{path::PathBuf, time::Duration};

use durable_mcp::{
    contract::listing::TIMEOUT_META_KEY,
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
    proxy::{TransportConfig, UpstreamConfig},
};
use durable_mcp_conformance::fixtures::{
    RawHttpClient, as_written,
    everything::{self, DirectClient, RawStdioClient, mask_timestamps, numbers_as_f64},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

const UPSTREAM_SERVICE: &str = "everything";

/// The tools compared, all read-only and deterministic apart from resource timestamps.
const TOOLS: [&str; 7] = [
    "echo",
    "get-sum",
    "get-tiny-image",
    "get-structured-content",
    "get-annotated-message",
    "get-resource-links",
    "get-resource-reference",
];

/// The calls compared: every content type server-everything has and two `isError` results
/// (the same calls its recorded snapshots hold, R-CNF-9).
fn cases() -> Vec<(&'static str, Value)> {
    everything::content_calls()
        .into_iter()
        .chain(everything::is_error_calls())
        .collect()
}

/// Records a skip (`skipped: <test>: <reason>`, counted by `scripts/test`) and returns from the
/// test when Node is missing.
macro_rules! require_node {
    () => {
        if let Err(reason) = everything::node_available() {
            durable_mcp_conformance::skip::skip(durable_mcp_conformance::skip::Need::Node, &reason);
            return;
        }
    };
}

async fn install() -> PathBuf {
    let started = std::time::Instant::now();
    let entry = tokio::task::spawn_blocking(everything::install)
        .await
        .unwrap()
        .expect("install @modelcontextprotocol/server-everything");
    eprintln!(
        "server-everything ready at {} in {:.1?}",
        entry.display(),
        started.elapsed()
    );
    entry
}

fn stdio_upstream(entry: &std::path::Path) -> UpstreamConfig {
    durable_mcp_conformance::harness::upstream(
        UPSTREAM_SERVICE,
        TransportConfig::stdio(
            "node",
            vec![entry.to_string_lossy().into_owned(), "stdio".into()],
        ),
    )
}

async fn operation(env: &TestEnv, operation: &str, input: &Value) -> OperationOutcome {
    let mut start = StartOperation::new(
        format!("everything-{operation}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        UPSTREAM_SERVICE,
        operation,
        payload::to_payload(input).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (op, _) = env.client.start(start).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(90),
        env.client.wait(&op, &CancellationToken::new()),
    )
    .await
    .unwrap_or_else(|_| panic!("{operation} did not finish within 90 s"))
    .unwrap()
}

/// A tool call through the durable path; the whole CallToolResult, checked to be marked.
async fn call_via_proxy(env: &TestEnv, tool: &str, args: &Value) -> Value {
    let outcome = operation(env, tool, args).await;
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("{tool} {args}: expected a result through the proxy, got {outcome:?}")
    };
    assert_eq!(
        payload::mcp_type(&p),
        Some(payload::CALL_TOOL_RESULT),
        "{tool}: result is marked"
    );
    payload::to_json(&p).unwrap()
}

/// `list_tools` through the proxy: the listed tools, each with the proxy's timeout in `_meta`.
async fn list_via_proxy(env: &TestEnv) -> Vec<Value> {
    let outcome = operation(env, "list_tools", &json!({})).await;
    let OperationOutcome::Succeeded(p) = outcome else {
        panic!("list_tools: {outcome:?}")
    };
    assert_eq!(payload::mcp_type(&p), Some(payload::TOOL_LIST));
    payload::to_json(&p)
        .unwrap()
        .as_array()
        .cloned()
        .expect("list_tools returns an array")
}

fn find<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| {
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        panic!("{name} missing from {names:?}")
    })
}

/// The proxy's listed tool minus what the proxy adds (its timeout in `_meta`, and `_meta`
/// itself when that was all there was); checks the timeout is there.
fn without_proxy_meta(tool: &Value) -> Value {
    let mut tool = tool.clone();
    let name = tool["name"].clone();
    let meta = tool["_meta"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("{name}: no _meta"));
    let timeout = meta.remove(TIMEOUT_META_KEY);
    assert!(
        timeout
            .as_ref()
            .and_then(Value::as_u64)
            .is_some_and(|ms| ms > 0),
        "{name}: timeout {timeout:?}"
    );
    if meta.is_empty() {
        tool.as_object_mut().unwrap().remove("_meta");
    }
    tool
}

/// Every argument a case passes is a property of the listed tool's inputSchema (so a renamed
/// argument upstream fails here, not as a confusing isError later).
fn check_argument_names(listed: &[Value]) {
    for (tool, args) in cases() {
        let schema = &find(listed, tool)["inputSchema"];
        let properties = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{tool}: {schema}"));
        for name in args.as_object().unwrap().keys() {
            assert!(
                properties.contains_key(name),
                "{tool} has no argument {name:?}: {schema}"
            );
        }
    }
}

/// The stdio and HTTP tests: list and call through the proxy, and straight to the server.
async fn compare_with_direct(env: &TestEnv, direct: &DirectClient) {
    let direct_tools = direct
        .list_tools()
        .await
        .expect("tools/list straight to the server");
    check_argument_names(&direct_tools);

    // list_tools through the proxy: the tools, annotations intact, and otherwise equal to
    // what the server lists (the proxy adds only its timeout in _meta).
    let proxied_tools = list_via_proxy(env).await;
    for name in TOOLS {
        let (proxied, direct) = (find(&proxied_tools, name), find(&direct_tools, name));
        assert_eq!(
            proxied["annotations"], direct["annotations"],
            "{name}: annotations"
        );
        assert_eq!(
            proxied["annotations"],
            json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
            "{name}: server-everything's annotations"
        );
        // rmcp's typed `Tool` (the direct client's view) has no `execution`; the wire test
        // below checks that the proxy keeps it.
        let mut proxied = without_proxy_meta(proxied);
        proxied.as_object_mut().unwrap().remove("execution");
        assert_eq!(proxied, *direct, "{name}: listed tool");
    }
    let structured = find(&proxied_tools, "get-structured-content");
    assert!(
        structured["outputSchema"]["properties"]["temperature"].is_object(),
        "{structured}"
    );

    for (tool, args) in cases() {
        let via_proxy = call_via_proxy(env, tool, &args).await;
        let straight = direct
            .call(tool, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e:#}"));
        // get-resource-reference embeds the time the resource was made (toLocaleTimeString,
        // to the second) in its text and, base64-encoded, in its blob: the two calls are made
        // at different times, so that time is masked; everything else is compared as is.
        // Numbers by value: the direct client's typed model turns `1` into `1.0`; the wire
        // test below checks that the proxy does not.
        assert_eq!(
            numbers_as_f64(&mask_timestamps(&via_proxy)),
            numbers_as_f64(&mask_timestamps(&straight)),
            "{tool} {args}"
        );
    }

    // The isError results are results, flag included, not failures.
    let refused = call_via_proxy(env, "get-resource-reference", &json!({"resourceId": -1})).await;
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert_eq!(
        refused["content"][0]["text"],
        "Invalid resourceId: -1. Must be a finite positive integer."
    );
    let invalid = call_via_proxy(env, "echo", &json!({})).await;
    assert_eq!(invalid["isError"], json!(true), "{invalid}");
    // Successful ones carry no isError at all (the server sends none).
    let ok = call_via_proxy(env, "echo", &json!({"message": "x"})).await;
    assert_eq!(
        ok,
        json!({"content": [{"type": "text", "text": "Echo: x"}]})
    );
}

#[tokio::test]
async fn proxy_everything_over_stdio_matches_direct_calls() {
    require_node!();
    let started = std::time::Instant::now();
    let entry = install().await;
    let env = TestEnv::shared("everything-stdio").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let direct = DirectClient::stdio(&entry)
        .await
        .expect("rmcp client over stdio");
    compare_with_direct(&env, &direct).await;
    direct.close().await;
    eprintln!("stdio comparison took {:.1?}", started.elapsed());
}

#[tokio::test]
async fn proxy_everything_over_http_matches_direct_calls() {
    require_node!();
    let started = std::time::Instant::now();
    let _ = install().await;
    let (_server, url) = everything::run_everything_http(0)
        .await
        .expect("server-everything over HTTP");
    let env = TestEnv::shared("everything-http").await;
    let _proxy = start_proxy(&env, vec![http_upstream(UPSTREAM_SERVICE, &url).unwrap()]);
    // A session of its own (server-everything makes a server per session; these tools keep
    // no per-session state).
    let direct = DirectClient::http(&url)
        .await
        .expect("rmcp client over HTTP");
    compare_with_direct(&env, &direct).await;
    direct.close().await;
    eprintln!("HTTP comparison took {:.1?}", started.elapsed());
}

/// The comparison above is between two rmcp clients, so anything rmcp's typed model changes
/// on the way in changes both sides alike. This one compares the proxy's results and listing
/// with the bytes server-everything writes (newline-delimited JSON-RPC over stdio, no SDK in
/// between), as JSON values: integers stay integers (`"priority": 1`, never `1.0`) and every
/// field the server lists survives (`execution` included); the proxy adds only its timeout.
async fn compare_with_the_wire(env: &TestEnv, raw: &mut RawStdioClient) {
    let wire_tools = raw.list_tools().await.unwrap();
    let proxied_tools = list_via_proxy(env).await;
    for wire in &wire_tools {
        let name = wire["name"].as_str().unwrap();
        let proxied = without_proxy_meta(find(&proxied_tools, name));
        assert_eq!(
            proxied, *wire,
            "{name}: the listed tool as the server wrote it"
        );
    }
    assert!(
        wire_tools.iter().any(|t| t.get("execution").is_some()),
        "server-everything lists `execution` on its tools"
    );

    let mut mismatches = Vec::new();
    for (tool, args) in cases() {
        let via_proxy = mask_timestamps(&call_via_proxy(env, tool, &args).await);
        let wire = mask_timestamps(&raw.call(tool, args.clone()).await.unwrap());
        if via_proxy != wire {
            mismatches.push(format!(
                "{tool} {args}:\n  wire:  {wire}\n  proxy: {via_proxy}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "results changed on the way through:\n{}",
        mismatches.join("\n")
    );
    // The integer annotation itself, as the issue reported it.
    let annotated = call_via_proxy(
        env,
        "get-annotated-message",
        &json!({"messageType": "error"}),
    )
    .await;
    let priority = &annotated["content"][0]["annotations"]["priority"];
    assert!(priority.is_u64(), "priority stays an integer: {annotated}");
}

#[tokio::test]
async fn proxy_everything_matches_the_wire() {
    require_node!();
    let entry = install().await;
    let env = TestEnv::shared("everything-wire").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let mut raw = RawStdioClient::start(&entry)
        .await
        .expect("raw stdio client");
    assert_eq!(
        raw.initialize["protocolVersion"], "2025-11-25",
        "{}",
        raw.initialize
    );
    compare_with_the_wire(&env, &mut raw).await;
}

/// The same over Streamable HTTP: the proxy reads the server's event stream, and its results
/// equal what the same server writes over stdio.
#[tokio::test]
async fn proxy_everything_over_http_matches_the_wire() {
    require_node!();
    let entry = install().await;
    let (_server, url) = everything::run_everything_http(0)
        .await
        .expect("server-everything over HTTP");
    let env = TestEnv::shared("everything-wire-http").await;
    let _proxy = start_proxy(&env, vec![http_upstream(UPSTREAM_SERVICE, &url).unwrap()]);
    let mut raw = RawStdioClient::start(&entry)
        .await
        .expect("raw stdio client");
    compare_with_the_wire(&env, &mut raw).await;
}

/// Through the connector as well (R-CON-12): a client reading the connector's own bytes (over
/// an in-memory pipe, no SDK on the client side) sees the results server-everything wrote, and
/// its tools as listed, with only the durable layer's namespaced `_meta` keys added and
/// `execution.taskSupport` saying how the connector calls the tool (R-CON-39).
#[tokio::test]
async fn the_connector_writes_what_server_everything_wrote() {
    require_node!();
    let entry = install().await;
    let env = TestEnv::shared("everything-connector-wire").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let mut through = raw_pipe_client(connector_for(&env, UPSTREAM_SERVICE))
        .await
        .expect("raw client to the connector");
    let mut wire = RawStdioClient::start(&entry)
        .await
        .expect("raw stdio client");

    let listed = through.list_tools().await.unwrap();
    let mut results = Vec::new();
    for (tool, args) in cases() {
        results.push(through.call(tool, args).await.unwrap());
    }
    compare_connector_with_the_wire(&listed, &results, &mut wire).await;
}

/// What a client read from the connector (its listing, then the answers to [`cases`] in order)
/// against what server-everything itself writes: equal field for field, with only the durable
/// layer's namespaced `_meta` keys added and `execution.taskSupport` saying how the connector
/// calls the tool (R-CON-39); integers stay integers.
async fn compare_connector_with_the_wire(
    listed: &[Value],
    results: &[Value],
    wire: &mut RawStdioClient,
) {
    let wire_tools = wire.list_tools().await.unwrap();
    assert_eq!(listed.len(), wire_tools.len(), "every tool is listed");
    for wire_tool in &wire_tools {
        let name = wire_tool["name"].as_str().unwrap();
        let expected = as_written::as_connector_lists(wire_tool, as_written::RouteKeys::default());
        assert_eq!(
            without_proxy_meta(find(listed, name)),
            expected,
            "{name}: listed through the connector"
        );
    }
    for ((tool, args), via) in cases().into_iter().zip(results) {
        let direct = mask_timestamps(&wire.call(tool, args.clone()).await.unwrap());
        assert_eq!(
            mask_timestamps(via),
            direct,
            "{tool} {args}: through the connector"
        );
    }
    assert!(
        results
            .iter()
            .any(|r| r["content"][0]["annotations"]["priority"].is_u64()),
        "an integer priority was compared"
    );
}

/// The same over Streamable HTTP (R-CON-12): a client reading the bytes of the connector's HTTP
/// answers (event streams of a stateful session, no SDK on the client side) sees what
/// server-everything wrote. rmcp's HTTP service alone would write `"priority": 1.0` and drop
/// unknown fields.
#[tokio::test]
async fn the_connector_over_http_writes_what_server_everything_wrote() {
    require_node!();
    let entry = install().await;
    let env = TestEnv::shared("everything-connector-http-wire").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let (server, shutdown) = serve_connector_http(
        connector_for(&env, UPSTREAM_SERVICE),
        loopback_http_options(),
    )
    .await
    .expect("the connector serves HTTP");
    let _stop = shutdown.drop_guard();
    let mut through = RawHttpClient::initialize(&server.url)
        .await
        .expect("raw HTTP session with the connector");
    let listed = through.list_tools().await.unwrap();
    let mut results = Vec::new();
    for (tool, args) in cases() {
        results.push(through.call(tool, args).await.unwrap());
    }
    let mut wire = RawStdioClient::start(&entry)
        .await
        .expect("raw stdio client");
    compare_connector_with_the_wire(&listed, &results, &mut wire).await;
}

/// server-everything's `simulate-research-query` requires a task (2025-11-25: `params.task`,
/// `tasks/get`, `tasks/result`): the proxy asks for one and follows it to the report
/// (R-PRX-28).
#[tokio::test]
async fn simulate_research_query_is_followed_as_the_upstreams_own_task() {
    require_node!();
    let entry = install().await;
    let env = TestEnv::shared("everything-task").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let listed = list_via_proxy(&env).await;
    assert_eq!(
        find(&listed, "simulate-research-query")["execution"]["taskSupport"],
        "required"
    );
    let report = call_via_proxy(&env, "simulate-research-query", &json!({"topic": "tides"})).await;
    let text = report["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("# Research Report: tides"), "{report}");
    assert_ne!(report["isError"], true, "{report}");
}

/// server-everything's tool that takes as long as it is told.
const LONG: &str = "trigger-long-running-operation";

/// A connector to server-everything on `env`, its route with the extra `--route` keys `keys`
/// (R-CON-39), whose calls become tasks after 500 ms.
fn everything_connector(env: &TestEnv, keys: Value) -> durable_mcp::connector::server::Connector {
    let mut route = json!({"service": UPSTREAM_SERVICE, "endpoint": env.endpoint});
    route
        .as_object_mut()
        .unwrap()
        .extend(keys.as_object().unwrap().clone());
    let route = durable_mcp::connector::route::parse_route(&route.to_string()).unwrap();
    let mut options = durable_mcp::connector::server::ConnectorOptions::new(vec![route]);
    options.task_after = Duration::from_millis(500);
    durable_mcp::connector::server::Connector::new(env.client.clone(), options)
}

/// A call of [`LONG`] with `arguments` through `connector` over Streamable HTTP, by a
/// stateless 2026-07-28 caller declaring the tasks extension: the answer and the caller.
async fn long_call_by_a_modern_tasks_caller(
    connector: durable_mcp::connector::server::Connector,
    arguments: &Value,
) -> (
    rmcp::model::CallToolResponse,
    McpClient<rmcp::model::ClientConfig>,
    tokio_util::sync::DropGuard,
) {
    let (server, shutdown) = serve_connector_http(connector, loopback_http_options())
        .await
        .expect("the connector serves HTTP");
    let caller = stateless_http_client(&server.url, tasks_client_config())
        .await
        .expect("a 2026-07-28 caller");
    let answer = caller
        .peer()
        .call_tool_once(tool_call(LONG, arguments.clone()))
        .await
        .unwrap();
    (answer, caller, shutdown.drop_guard())
}

/// R-CON-39 with a TypeScript-SDK server: server-everything lists its plain tools `forbidden`
/// (the SDK's default), which says it cannot run them as its own tasks; through the connector
/// the task is the connector's. A tasks-capable 2026-07-28 caller of a call that outlasts
/// `--task-after` gets a task, which `tasks/get` follows to the result a direct call gives. A
/// route that keeps the tool synchronous makes the caller wait; a mirroring route copies
/// `forbidden`, and its caller waits too.
#[tokio::test]
async fn a_long_server_everything_call_becomes_the_connectors_task() {
    require_node!();
    let entry = install().await;
    let env = TestEnv::shared("everything-connector-task").await;
    let _proxy = start_proxy(&env, vec![stdio_upstream(&entry)]);
    let mut wire = RawStdioClient::start(&entry)
        .await
        .expect("raw stdio client");
    let upstream = wire.list_tools().await.unwrap();
    assert_eq!(
        find(&upstream, LONG)["execution"]["taskSupport"],
        "forbidden",
        "the SDK's default"
    );
    let arguments = json!({"duration": 3, "steps": 3});
    let direct = wire.call(LONG, arguments.clone()).await.unwrap();
    assert!(
        direct["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Duration: 3 seconds")),
        "{direct}"
    );

    // The connector's task, followed to the direct call's result.
    let connector = everything_connector(&env, json!({}));
    let (answer, caller, _stop) = long_call_by_a_modern_tasks_caller(connector, &arguments).await;
    let task = task_id_of(answer);
    let done = poll_task_until_done(&caller, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"], direct["content"], "{done}");
    assert_ne!(done["result"]["isError"], true, "{done}");

    // Kept synchronous by its route: the same caller waits for the result.
    let kept = everything_connector(&env, json!({"synchronous": [LONG]}));
    let (answer, _caller, _stop) = long_call_by_a_modern_tasks_caller(kept, &arguments).await;
    let rmcp::model::CallToolResponse::Complete(result) = answer else {
        panic!("a tool kept synchronous became a task: {answer:?}")
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap()["content"],
        direct["content"]
    );

    // A mirroring route lists the upstream's "forbidden" (to a 2025-11-25 caller) and waits.
    let mirror = || everything_connector(&env, json!({"task_support": "mirror"}));
    let listed = raw_pipe_client(mirror())
        .await
        .unwrap()
        .list_tools()
        .await
        .unwrap();
    assert_eq!(find(&listed, LONG)["execution"]["taskSupport"], "forbidden");
    let (answer, _caller, _stop) = long_call_by_a_modern_tasks_caller(mirror(), &arguments).await;
    assert!(
        matches!(answer, rmcp::model::CallToolResponse::Complete(_)),
        "a mirrored forbidden tool became a task: {answer:?}"
    );
}
