//! R-PRX-39: an upstream that answers malformed JSON, wrong types, bad UTF-8, another id, an
//! oversize answer, half an answer or nothing, over stdio and over Streamable HTTP, never
//! panics or hangs the proxy: every call through it ends with a clear error within its
//! Activity's bounds, and the proxy still serves the upstream's well-behaved tool after each.

use std::time::Duration;

use durable_mcp::{
    panics,
    proxy::{TransportConfig, UpstreamConfig, options::ActivityOptions, retry::RetryPolicySpec},
};
use durable_mcp_conformance::{
    fixtures::hostile_upstream::{self, HostileHttp},
    harness::{mock_upstream_bin, upstream},
};
use rmcp::model::CallToolResult;
use serde_json::json;

use crate::support::*;

/// The longest a hostile call may take: two attempts of at most 5 s each, their backoff, and
/// a loaded machine's Temporal round trips.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// The hostile upstream's Activities: 5 s per attempt, two attempts (a `silent` call ends).
fn bounded(service: &str, transport: TransportConfig) -> UpstreamConfig {
    let mut config = upstream(service, transport);
    config.activity_options = ActivityOptions {
        start_to_close_timeout: Some(Duration::from_secs(5)),
        retry_policy: Some(RetryPolicySpec {
            initial_interval: Some(Duration::from_millis(200)),
            maximum_attempts: Some(2),
            ..RetryPolicySpec::default()
        }),
        ..ActivityOptions::default()
    };
    config
}

/// Panics the proxy caught in this process so far, in its Activities and its Nexus handlers.
fn proxy_panics() -> u64 {
    [
        "tools/call",
        "nexus_start",
        "nexus_cancel",
        panics::OUTSIDE_A_REQUEST,
    ]
    .into_iter()
    .map(panics::counted)
    .sum()
}

/// The error a caller got for `tool`: a JSON-RPC error's message, or an `isError` result's text.
fn clear_error(tool: &str, answer: Result<CallToolResult, rmcp::ServiceError>) -> String {
    match answer {
        Err(error) => error.to_string(),
        Ok(result) => {
            assert_eq!(
                result.is_error,
                Some(true),
                "{tool} answered a result: {result:?}"
            );
            serde_json::to_string(&result.content).unwrap_or_default()
        }
    }
}

/// Calls every hostile tool of `service` through a connector, then `echo`.
async fn every_call_ends_with_a_clear_error(env: &TestEnv, service: &str) {
    let connector = durable_mcp::connector::server::Connector::new(
        env.client.clone(),
        kit::mcp::connector_options(service, &env.endpoint),
    );
    let client = kit::mcp::client_for(connector).await.unwrap();
    let panics_before = proxy_panics();
    for tool in hostile_upstream::hostile_tools() {
        let call = client.peer().call_tool(tool_call(tool, json!({})));
        let answer = tokio::time::timeout(ANSWER_WITHIN, call)
            .await
            .unwrap_or_else(|_| panic!("{service}: {tool} got no answer in {ANSWER_WITHIN:?}"));
        let error = clear_error(tool, answer);
        println!("{service}: {tool}: {error}");
        assert!(
            !error.trim().is_empty(),
            "{service}: {tool}: an empty error"
        );
        let echo = client
            .peer()
            .call_tool(tool_call("echo", json!({"after": tool})))
            .await
            .unwrap_or_else(|e| panic!("{service}: echo after {tool}: {e}"));
        assert_eq!(echo.is_error, Some(false), "{service}: echo after {tool}");
    }
    assert_eq!(
        proxy_panics(),
        panics_before,
        "{service}: the proxy panicked"
    );
}

#[tokio::test]
async fn a_hostile_stdio_upstream_gets_every_call_a_clear_error() {
    let env = TestEnv::shared("hostile-upstream-stdio").await;
    let bin = mock_upstream_bin().unwrap();
    let transport = TransportConfig::stdio(bin.to_string_lossy(), vec!["--hostile".into()]);
    let _proxy = start_proxy(&env, vec![bounded("hostile", transport)]);
    every_call_ends_with_a_clear_error(&env, "hostile").await;
}

#[tokio::test]
async fn a_hostile_http_upstream_gets_every_call_a_clear_error() {
    let env = TestEnv::shared("hostile-upstream-http").await;
    let server: HostileHttp = hostile_upstream::serve_http(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let transport = http_transport(server.url.parse().unwrap(), false);
    let _proxy = start_proxy(&env, vec![bounded("hostile", transport)]);
    every_call_ends_with_a_clear_error(&env, "hostile").await;
}
