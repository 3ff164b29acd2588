//! `--log-format json` (R-RUN-3): both binaries then write one JSON object a line on stderr.

use std::{process::Stdio, time::Duration};

use durable_mcp_conformance::fixtures::Ledger;
use rmcp::ServiceExt as _;
use serde_json::json;
use tokio::io::AsyncReadExt as _;

use crate::{
    support::{TestEnv, connector_command, temp_path, tool_call},
    temporal_tls::{proxy_command, proxy_config},
};

/// Every line of `stderr` is a JSON object with a level and fields; answers how many.
fn json_lines(what: &str, stderr: &str) -> usize {
    let mut count = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{what}: not a JSON line ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["fields"].is_object(),
            "{what}: {line}"
        );
        count += 1;
    }
    count
}

#[tokio::test]
async fn json_logs_are_one_json_object_a_line_on_both_binaries() {
    let env = TestEnv::shared("json-logs").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let flags = [
        "--address".to_owned(),
        env.address.clone(),
        "--log-format".into(),
        "json".into(),
    ];
    let mut proxy = proxy_command(&proxy_config(&env, "mock", &ledger), &flags)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut connector = connector_command(&env, "mock");
    connector.args(&flags).env("RUST_LOG", "debug");
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(connector)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.expect("MCP handshake");
    let call = client
        .peer()
        .call_tool(tool_call("echo", json!({"k": "v"})));
    let echo = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echo.structured_content, Some(json!({"k": "v"})));
    client.cancel().await.unwrap();
    let mut text = String::new();
    let mut stderr = stderr.unwrap();
    let read = stderr.read_to_string(&mut text);
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap()
        .unwrap();
    assert!(
        json_lines("connector", &text) > 0,
        "the connector logged nothing at debug"
    );
    proxy.kill().await.unwrap();
    let mut text = String::new();
    proxy
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .await
        .unwrap();
    assert!(
        json_lines("proxy", &text) > 0,
        "the proxy logged nothing at info"
    );
}
