//! Recorded snapshots of real servers (R-CNF-9): what `@modelcontextprotocol/server-everything`
//! (pinned, `fixtures::everything::VERSION`) and our mock upstream put on the wire, recorded
//! with no MCP SDK in between (newline-delimited JSON-RPC over stdio) and checked with the same
//! insta assertion the conformance runner uses: tool listings, a result of every content type,
//! `isError` results, JSON-RPC error types, a task's lifecycle and result, and progress
//! sequences. Only times and ids are redacted (`snapshots::redact_volatile`).
//!
//! A difference means the server changed what it sends (a new release, a mock change): read
//! the diff, then re-record with `just snapshots` (see fixtures/README.md) if it is expected.
//! Where Node (>= 18) is missing, the server-everything test prints `skipped: <reason>`.

use std::{process::Stdio, time::Duration};

use durable_mcp_conformance::{
    fixtures::everything::{self, RawStdioClient},
    skip::{Need, skip},
    snapshots::{assert_snapshot, default_dir},
};
use serde_json::{Value, json};

const MOCK_BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-mock-upstream");

fn record(name: &str, value: &Value) {
    assert_snapshot(&default_dir(), name, value);
}

/// Each call as `{tool, arguments, answer}`, the answer `{"result"}` or `{"error"}` as sent.
async fn calls(client: &mut RawStdioClient, cases: &[(&str, Value)]) -> Value {
    let mut out = Vec::new();
    for (tool, arguments) in cases {
        let exchange = client
            .exchange("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e:#}"));
        out.push(json!({"tool": tool, "arguments": arguments, "answer": exchange.response}));
    }
    Value::Array(out)
}

/// A call with a progress token: the progress notifications, in order, then the answer.
async fn progress_sequence(client: &mut RawStdioClient, tool: &str, arguments: Value) -> Value {
    let exchange = client
        .exchange(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": {"progressToken": "recorded-1"}}),
        )
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e:#}"));
    let progress: Vec<&Value> = exchange
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "{tool} sent no progress notification");
    json!({"tool": tool, "arguments": arguments, "progress": progress, "answer": exchange.response})
}

#[tokio::test]
async fn server_everything_matches_its_recording() {
    if let Err(reason) = everything::node_available() {
        skip(Need::Node, &reason);
        return;
    }
    let entry = tokio::task::spawn_blocking(everything::install)
        .await
        .expect("install task")
        .expect("install @modelcontextprotocol/server-everything");
    let mut client = RawStdioClient::start(&entry)
        .await
        .expect("start over stdio");

    let mut tools = client.list_tools().await.expect("tools/list");
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    record(
        "everything_initialize",
        &json!({"initialize": client.initialize}),
    );
    record("everything_tools_list", &Value::Array(tools));

    // Every content type the server has (the calls the proxy tests compare too).
    let contents = calls(&mut client, &everything::content_calls()).await;
    record("everything_content_results", &contents);

    // isError results (the tool throws; the SDK's input validation) and JSON-RPC errors (an
    // unknown tool, an unknown method, a task-only tool called without a task).
    let mut error_calls = everything::is_error_calls();
    error_calls.extend([
        ("no-such-tool", json!({})),
        ("simulate-research-query", json!({"topic": "tides"})),
    ]);
    let mut errors = calls(&mut client, &error_calls).await;
    let unknown_method = client
        .exchange("no/such/method", json!({}))
        .await
        .expect("an answer to an unknown method");
    errors
        .as_array_mut()
        .unwrap()
        .push(json!({"method": "no/such/method", "answer": unknown_method.response}));
    record("everything_errors", &errors);

    let progress = progress_sequence(
        &mut client,
        "trigger-long-running-operation",
        json!({"duration": 0.3, "steps": 3}),
    )
    .await;
    record("everything_progress", &progress);

    record("everything_task", &task_lifecycle(&mut client).await);
}

/// `simulate-research-query` as a task: the `CreateTaskResult`, the task once completed
/// (`tasks/get`, polled), and its result (`tasks/result`). The statuses seen while polling
/// depend on timing, so only the last one is recorded.
async fn task_lifecycle(client: &mut RawStdioClient) -> Value {
    let arguments = json!({"topic": "tides"});
    let created = client
        .request(
            "tools/call",
            json!({"name": "simulate-research-query", "arguments": arguments, "task": {"ttl": 60000}}),
        )
        .await
        .expect("a task-augmented tools/call");
    let task_id = created["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in {created}"))
        .to_owned();
    // Four one-second stages; generous for a loaded machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let finished = loop {
        let task = client
            .request("tasks/get", json!({"taskId": task_id}))
            .await
            .expect("tasks/get");
        if task["status"] != "working" && task["status"] != "input_required" {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task did not finish within 60 s: {task}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let result = client
        .exchange("tasks/result", json!({"taskId": task_id}))
        .await
        .expect("tasks/result");
    json!({
        "tool": "simulate-research-query",
        "arguments": arguments,
        "created": created,
        "finished": finished,
        "result": result.response,
    })
}

/// The mock upstream binary over stdio with its standard tools (no spec file), and the child,
/// killed when dropped.
async fn start_mock() -> (tokio::process::Child, RawStdioClient) {
    let mut child = tokio::process::Command::new(MOCK_BIN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the mock upstream");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let client = RawStdioClient::over(stdout, stdin)
        .await
        .expect("initialize the mock upstream");
    (child, client)
}

#[tokio::test]
async fn the_mock_upstream_matches_its_recording() {
    let (_child, mut client) = start_mock().await;
    let tools = client.list_tools().await.expect("tools/list");
    record("mock_initialize", &json!({"initialize": client.initialize}));
    record("mock_tools_list", &Value::Array(tools));
    let results = calls(
        &mut client,
        &[
            ("echo", json!({"text": "recorded", "key": "r-1"})),
            ("everything", json!({})),
            ("refuse", json!({})),
            ("no_such_tool", json!({})),
        ],
    )
    .await;
    record("mock_results", &results);
    let progress = progress_sequence(&mut client, "progress", json!({})).await;
    record("mock_progress", &progress);
}
