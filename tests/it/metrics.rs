//! R-RUN-6: both binaries' `--metrics-addr`. A successful call and a failing one through a
//! connector and a proxy, both with a remote codec, show on both `/metrics` as counts and
//! latencies (codec calls and the proxy's SDK worker metrics included), and no argument value
//! is a label.

use std::{process::Stdio, time::Duration};

use durable_mcp_conformance::fixtures::Ledger;
use durable_mcp_conformance::kit::process::spawn_announcing;
use rmcp::ServiceExt as _;
use serde_json::json;
use tokio::io::AsyncBufReadExt as _;

use crate::{
    support::{TestEnv, codec_server, connector_command, temp_path, tool_call},
    temporal_tls::{proxy_command, proxy_config},
};

/// What both binaries print before the metrics URL (`durable_mcp_cli::metrics_server`).
const CONNECTOR_METRICS: &str = "durable-mcp-connector metrics on ";
const PROXY_METRICS: &str = "durable-mcp-proxy metrics on ";

/// An argument value that must not reach any label.
const SECRET: &str = "argument-value-7f3a";

/// `GET base/metrics`: the content type and the text.
async fn scrape(base: &str) -> (String, String) {
    let answer = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, answer.text().await.unwrap())
}

/// The value of the sample line that starts with `series ` in `text`, 0 when there is none.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// `text` counts one `echo` that succeeded and one `refuse` that ended with a tool error in
/// `calls`, and holds no argument value.
fn one_success_and_one_tool_error(text: &str, calls: &str) {
    let ok = format!(r#"{calls}{{service="mock",tool="echo",outcome="success"}}"#);
    let failed = format!(r#"{calls}{{service="mock",tool="refuse",outcome="tool_error"}}"#);
    assert_eq!(sample(text, &ok), 1.0, "{text}");
    assert_eq!(sample(text, &failed), 1.0, "{text}");
    assert!(!text.contains(SECRET), "{text}");
}

/// The value of the first sample of `series` in `text`, whatever its labels; 0 when none.
fn labelled_sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// `text` counts codec calls in `calls`: both ways, none failed (every argument and result
/// went through the codec).
fn codec_calls_counted(text: &str, calls: &str) {
    for op in ["encode", "decode"] {
        let ok = format!(r#"{calls}{{op="{op}",outcome="ok"}}"#);
        assert!(sample(text, &ok) >= 1.0, "{text}");
        let failed = format!(r#"{calls}{{op="{op}",outcome="error"}}"#);
        assert_eq!(sample(text, &failed), 0.0, "{text}");
    }
}

#[tokio::test]
async fn calls_through_both_binaries_show_on_both_metrics_endpoints() {
    let env = TestEnv::shared("metrics").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let address = ["--address".to_owned(), env.address.clone()];
    let codec = codec_server().await;
    let config = proxy_config(&env, "mock", &ledger);
    let with_codec = format!("[codec]\nendpoint = \"{}\"\n", codec.url);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{with_codec}{text}")).unwrap();
    let mut proxy = proxy_command(&config, &address);
    proxy.args(["--metrics-addr", "127.0.0.1:0"]);
    let (_proxy, seen) = spawn_announcing(proxy, PROXY_METRICS).await.unwrap();
    let proxy_base = seen.last().unwrap()[PROXY_METRICS.len()..]
        .trim()
        .to_owned();

    let mut connector = connector_command(&env, "mock");
    connector
        .args(&address)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--codec-endpoint", &codec.url]);
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(connector)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(stderr.unwrap()).lines();
    let announced = async {
        loop {
            let line = lines.next_line().await.unwrap().expect("announcement");
            if let Some(url) = line.strip_prefix(CONNECTOR_METRICS) {
                return url.trim().to_owned();
            }
        }
    };
    let connector_base = tokio::time::timeout(Duration::from_secs(30), announced)
        .await
        .expect("the connector announces its metrics address");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let client = ().serve(transport).await.expect("MCP handshake");

    let echo = client
        .peer()
        .call_tool(tool_call("echo", json!({"k": SECRET})));
    let echo = tokio::time::timeout(Duration::from_secs(60), echo)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(echo.is_error, Some(true), "{echo:?}");
    let refuse = client
        .peer()
        .call_tool(tool_call("refuse", json!({"k": SECRET})));
    let refused = tokio::time::timeout(Duration::from_secs(60), refuse)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refused.is_error, Some(true));

    let (content_type, text) = scrape(&connector_base).await;
    assert!(content_type.contains("openmetrics-text"), "{content_type}");
    one_success_and_one_tool_error(&text, "durable_mcp_connector_tool_calls_total");
    let latency =
        r#"durable_mcp_connector_tool_call_duration_seconds_count{service="mock",tool="echo"}"#;
    assert_eq!(sample(&text, latency), 1.0, "{text}");
    let in_flight = "durable_mcp_connector_tool_calls_in_flight";
    assert_eq!(sample(&text, in_flight), 0.0, "{text}");
    let starts =
        r#"durable_mcp_connector_temporal_rpc_duration_seconds_count{rpc="start_nexus_operation"}"#;
    assert_eq!(sample(&text, starts), 2.0, "{text}");
    codec_calls_counted(&text, "durable_mcp_connector_codec_calls_total");

    let (_, text) = scrape(&proxy_base).await;
    one_success_and_one_tool_error(&text, "durable_mcp_proxy_upstream_calls_total");
    let latency =
        r#"durable_mcp_proxy_upstream_call_duration_seconds_count{service="mock",tool="echo"}"#;
    assert_eq!(sample(&text, latency), 1.0, "{text}");
    let connects = r#"durable_mcp_proxy_upstream_connects_total{service="mock"}"#;
    assert!(sample(&text, connects) >= 1.0, "{text}");
    codec_calls_counted(&text, "durable_mcp_proxy_codec_calls_total");
    // The SDK workers' own metrics: one Activity execution and one Nexus task per call.
    let sdk = "durable_mcp_proxy_temporal_activity_execution_latency_count";
    assert_eq!(labelled_sample(&text, sdk), 2.0, "{text}");
    let sdk = "durable_mcp_proxy_temporal_nexus_task_execution_latency_count";
    assert!(labelled_sample(&text, sdk) >= 2.0, "{text}");
    client.cancel().await.unwrap();
}
