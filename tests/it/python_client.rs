//! R-CON with a real third-party MCP client: the Python SDK, `mcp==2.3.0` (PyPI, installed by `durable_mcp_conformance::kit::python`), drives the
//! `durable-mcp-connector` binary over stdio (as an `mcpServers` entry would start it) and over
//! Streamable HTTP (the current stateless protocol and the older session protocol), in front of
//! the proxy and the mock upstream on the real dev server. The script
//! (`tests/python/mcp_client_check.py`) lists the tools and calls them, with and without an
//! idempotency key in `_meta`, and cancels a slow call once the upstream has it (over stdio and
//! session HTTP the SDK sends `notifications/cancelled`; over stateless HTTP it closes the
//! response stream); every value it saw, and the upstream's ledger, is checked here. A second
//! script (`tests/python/example_tools_check.py`) drives the connector with `--companion-tools`
//! in front of `durable-mcp-example-tools` (R-NAT, R-CON-11).
//!
//! The SDK is installed once into a virtualenv under the cache dir
//! (`~/.cache/durable-mcp/py-mcp-2.3.0`). Where Python or PyPI is unavailable each test prints
//! `skipped: <reason>` and returns.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use durable_mcp::contract::errors::ConnectorErrorType;
use durable_mcp_conformance::fixtures::{self, Ledger, LedgerEvent, UpstreamSpec};
use serde_json::{Value, json};

use crate::support::*;

/// Records a skip (`skipped: <test>: <reason>`, counted by `scripts/test`) and returns from the
/// test when the Python SDK cannot be installed here.
macro_rules! require_python_mcp {
    () => {
        match durable_mcp_conformance::kit::python::python_mcp().await {
            Ok(python) => python,
            Err(reason) => {
                durable_mcp_conformance::skip::skip(
                    durable_mcp_conformance::skip::Need::Python,
                    &reason,
                );
                return;
            }
        }
    };
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client_check.py")
}

/// Runs the script with `target` (`--url U` or `--stdio CMD ARGS...`) and returns its report.
async fn run_script(
    python: &Path,
    env: &TestEnv,
    mode: &str,
    key: &str,
    ledger: &Ledger,
    target: &[String],
) -> Value {
    let mut args: Vec<std::ffi::OsString> = ["--mode", mode, "--key", key, "--ledger"]
        .iter()
        .map(Into::into)
        .collect();
    args.push(ledger.path().into());
    args.extend(target.iter().map(Into::into));
    run_python(python, env, &script(), &args).await
}

/// Runs a Python script of tests/python with `args` and the env's Temporal connection in its
/// environment, and parses the one JSON object it prints.
async fn run_python(
    python: &Path,
    env: &TestEnv,
    script: &Path,
    args: &[std::ffi::OsString],
) -> Value {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(python)
            .arg(script)
            .args(args)
            .env("TEMPORAL_ADDRESS", &env.address)
            .env("TEMPORAL_NAMESPACE", &env.namespace)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python client finishes within 3 minutes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not a JSON report ({e}):\n{stdout}\n{stderr}"))
}

/// Checks everything the script saw, and the upstream's ledger behind it.
async fn check_report(report: &Value, key: &str, protocol_version: &str, ledger: &Ledger) {
    assert_eq!(
        report["protocol_version"],
        json!(protocol_version),
        "{report}"
    );
    assert_eq!(report["server_name"], json!("durable-mcp-connector"));

    // tools/list: the upstream's tools, annotations intact.
    let mut standard: Vec<_> = UpstreamSpec::standard()
        .tools
        .into_iter()
        .map(|t| Value::String(t.name))
        .collect();
    standard.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    assert_eq!(report["tools"], Value::Array(standard), "{report}");
    assert_eq!(report["echo_annotations"]["readOnlyHint"], json!(true));

    // A call through the proxy: text and structuredContent.
    let echo = &report["echo"];
    assert_eq!(echo["structuredContent"], json!({"key": key, "n": 5}));
    assert_eq!(echo["isError"], json!(false));
    assert_eq!(echo["content"][0]["type"], json!("text"));
    let text: Value = serde_json::from_str(echo["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, json!({"key": key, "n": 5}));
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, key), 1);

    // An isError result is a result, with its text, run once.
    let refuse = &report["refuse"];
    assert_eq!(refuse["isError"], json!(true), "{refuse}");
    assert_eq!(
        refuse["content"],
        json!([{"type": "text", "text": "refused: this tool always fails"}])
    );
    assert_eq!(ledger.count_key("refuse", LedgerEvent::Called, key), 1);

    // Every content kind reaches the Python client as the upstream sent it.
    let mut everything = report["everything"].clone();
    everything.as_object_mut().unwrap().remove("resultType");
    assert_eq!(everything, fixtures::all_content_json());

    // The same idempotency key (in _meta) twice is one execution; other arguments conflict.
    let [first, second] = report["write_once"].as_array().unwrap().as_slice() else {
        panic!("{report}")
    };
    assert_eq!(first["isError"], json!(false), "{first}");
    assert_eq!(first["structuredContent"], json!({"key": key, "item": 1}));
    assert_eq!(second, first);
    assert_eq!(report["conflict"]["isError"], json!(true));
    assert!(
        report["conflict"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with(ConnectorErrorType::IdempotencyConflict.as_str()),
        "{report}"
    );
    assert_eq!(
        ledger.count_key("write_once", LedgerEvent::Called, key),
        1,
        "{:?}",
        ledger.read()
    );

    // An unknown tool: a JSON-RPC invalid-params error naming it.
    assert_eq!(report["unknown"]["code"], json!(-32602), "{report}");
    assert!(
        report["unknown"]["message"]
            .as_str()
            .unwrap()
            .contains("no_such_tool"),
        "{report}"
    );

    // Cancelling a call in Python (an anyio cancel scope) cancels the operation, and the cancel
    // reaches the upstream tool; the client was told no result.
    let slow_key = format!("{key}-slow");
    assert_eq!(report["slow"], json!({"cancelled": true}), "{report}");
    eventually(
        Duration::from_secs(30),
        "the Python client's cancel reaches the upstream",
        || ledger.count_key("slow", LedgerEvent::Cancelled, &slow_key) >= 1,
    )
    .await;
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Cancelled, &slow_key),
        1,
        "{:?}",
        ledger.read()
    );
    assert_eq!(
        ledger.count_key("slow", LedgerEvent::Completed, &slow_key),
        0
    );
    assert_eq!(
        report["after_cancel"]["structuredContent"],
        json!({"key": format!("{key}-after")})
    );
}

#[tokio::test]
async fn python_mcp_client_drives_the_connector_binary_over_stdio() {
    let python = require_python_mcp!();
    let env = TestEnv::shared("py-stdio").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let key = format!("py-stdio-{}", uuid::Uuid::new_v4());
    let stdio = vec![
        "--stdio".to_owned(),
        workspace_bin("durable-mcp-connector")
            .unwrap()
            .to_string_lossy()
            .into_owned(),
        "--route".to_owned(),
        format!("{{service: mock, endpoint: {}}}", env.endpoint),
    ];
    let report = run_script(&python, &env, "auto", &key, &ledger, &stdio).await;
    check_report(&report, &key, "2026-07-28", &ledger).await;
}

#[tokio::test]
async fn python_mcp_client_drives_the_connector_binary_over_http() {
    let python = require_python_mcp!();
    let env = TestEnv::shared("py-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let connector = HttpConnectorProcess::start(&env, "mock", &[])
        .await
        .unwrap();
    let url = vec!["--url".to_owned(), connector.url.clone()];
    // The default: server/discover, then stateless 2026-07-28 requests.
    let key = format!("py-http-{}", uuid::Uuid::new_v4());
    let report = run_script(&python, &env, "auto", &key, &ledger, &url).await;
    check_report(&report, &key, "2026-07-28", &ledger).await;
    // An older client: the initialize handshake and a session.
    let key = format!("py-legacy-{}", uuid::Uuid::new_v4());
    let report = run_script(&python, &env, "legacy", &key, &ledger, &url).await;
    check_report(&report, &key, "2025-11-25", &ledger).await;
}

/// The "done" check, with a third-party client: the Python SDK (no tasks API) lists
/// exactly the example's tools with their titles and schemas, gets `{"words": 3}`, and follows a
/// long `slow_report` call to its result through the companion tools.
#[tokio::test]
async fn python_mcp_client_uses_native_tools_and_companion_tools() {
    let python = require_python_mcp!();
    let env = TestEnv::shared("py-native").await;
    let _tools = example_tools(&env).await.unwrap();
    let args: Vec<std::ffi::OsString> = vec![
        "--stdio".into(),
        workspace_bin("durable-mcp-connector").unwrap().into(),
        "--route".into(),
        format!("{{service: examples, endpoint: {}}}", env.endpoint).into(),
        "--companion-tools".into(),
        "--task-after".into(),
        "1s".into(),
    ];
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/example_tools_check.py");
    let report = run_python(&python, &env, &script, &args).await;

    let tools = report["tools"].as_array().unwrap();
    let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, EXAMPLE_TOOLS_WITH_COMPANIONS, "{report}");
    assert_eq!(tools[0]["title"], "Count words");
    assert_eq!(
        tools[0]["inputSchema"]["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(tools[1]["title"], "Write a slow report");
    assert_eq!(
        tools[1]["inputSchema"]["properties"]["seconds"]["type"],
        "integer"
    );
    assert_eq!(
        report["word_count"]["structuredContent"],
        json!({"words": 3})
    );
    // slow_report declares an output schema: the task note is a tool error, never checked
    // against it (the SDK validates structuredContent of successful results).
    assert_eq!(report["slow_report"]["isError"], true, "{report}");
    let task_id = report["slow_report"]["_meta"]["io.durable-mcp/taskId"].clone();
    assert!(task_id.is_string(), "{report}");
    assert_eq!(
        report["task_status"]["structuredContent"]["taskId"],
        task_id
    );
    assert_eq!(
        report["task_result"]["structuredContent"],
        json!({"seconds": 3, "report": "The report took 3 seconds."}),
        "{report}"
    );
}
