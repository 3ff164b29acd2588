use rmcp::model::CallToolResult;
use serde_json::json;

use super::*;

fn complete(json: serde_json::Value) -> Result<CallToolResponse, McpError> {
    let result: CallToolResult = serde_json::from_value(json).unwrap();
    Ok(result.into())
}

#[test]
fn outcomes_are_one_of_a_fixed_set() {
    let ok = complete(json!({"content": [{"type": "text", "text": "hi"}]}));
    assert_eq!(outcome_of(&ok), "success");
    let plain = complete(json!({"content": [], "isError": true}));
    assert_eq!(outcome_of(&plain), "tool_error");
    let typed = complete(
        json!({"content": [], "isError": true, "_meta": {ERROR_TYPE_META: "UpstreamTimeout"}}),
    );
    assert_eq!(outcome_of(&typed), "UpstreamTimeout");
    let conflict = complete(
        json!({"content": [], "isError": true, "_meta": {ERROR_TYPE_META: "IdempotencyConflict"}}),
    );
    assert_eq!(outcome_of(&conflict), "IdempotencyConflict");
    // A type the upstream made up is not a label value.
    let minted =
        complete(json!({"content": [], "isError": true, "_meta": {ERROR_TYPE_META: "secret-42"}}));
    assert_eq!(outcome_of(&minted), "tool_error");
}

#[test]
fn errors_are_classified_without_their_text_becoming_a_label() {
    let upstream = McpError::new(rmcp::model::ErrorCode(-32042), "secret text", None);
    assert_eq!(outcome_of(&Err(upstream)), "jsonrpc_error");
    let cap = McpError::internal_error("refused", Some(json!({"maxInFlight": 1})));
    assert_eq!(outcome_of(&Err(cap.clone())), "refused");
    assert_eq!(refused_cap(&cap), Some("--max-in-flight"));
    let unknown = McpError::internal_error("waiting failed: the tool may have run", None);
    assert_eq!(outcome_of(&Err(unknown)), "outcome_unknown");
    let cancelled = McpError::internal_error("the tool call was cancelled by the client", None);
    assert_eq!(outcome_of(&Err(cancelled)), "cancelled");
    let other = McpError::internal_error("listing failed", None);
    assert_eq!(outcome_of(&Err(other)), "internal_error");
    assert_eq!(refused_cap(&McpError::internal_error("x", None)), None);
}

#[test]
fn unlisted_tools_share_one_label_value() {
    assert_eq!(bounded_labels(Some("svc"), "echo"), ("svc", "echo"));
    assert_eq!(
        bounded_labels(None, "an-argument-like-name-42"),
        (UNLISTED, UNLISTED)
    );
}

#[test]
fn a_finished_call_is_counted_with_its_latency_and_leaves_flight() {
    let metrics = Metrics::new();
    let timer = metrics.call_started();
    assert!(
        metrics
            .encode()
            .contains("durable_mcp_connector_tool_calls_in_flight 1")
    );
    let ok = complete(json!({"content": []}));
    timer.finished("svc", "echo", &ok);
    let text = metrics.encode();
    assert!(
        text.contains("durable_mcp_connector_tool_calls_in_flight 0"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"durable_mcp_connector_tool_calls_total{service="svc",tool="echo",outcome="success"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"durable_mcp_connector_tool_call_duration_seconds_count{service="svc",tool="echo"} 1"#
        ),
        "{text}"
    );
    drop(metrics.call_started());
    assert!(metrics.encode().contains(r#"outcome="cancelled"} 1"#));
    metrics.count_refusal("--max-sessions-per-caller");
    metrics.auth_refused("invalid_token");
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"durable_mcp_connector_cap_refusals_total{reason="--max-sessions-per-caller"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"durable_mcp_connector_auth_refusals_total{reason="invalid_token"} 1"#),
        "{text}"
    );
    let panicked = durable_mcp_runtime::panics::catching("tasks/cancel", async { panic!() });
    assert!(futures::executor::block_on(panicked).is_err());
    let text = metrics.encode();
    assert!(
        text.contains(r#"durable_mcp_connector_panics_total{method="tasks/cancel"} "#),
        "{text}"
    );
}

#[tokio::test]
async fn temporal_rpcs_are_timed_by_name() {
    let metrics = Metrics::new();
    let answer = metrics.timed("start_nexus_operation", async { 7 }).await;
    assert_eq!(answer, 7);
    let text = metrics.encode();
    let line = r#"durable_mcp_connector_temporal_rpc_duration_seconds_count{rpc="start_nexus_operation"} 1"#;
    assert!(text.contains(line), "{text}");
}
