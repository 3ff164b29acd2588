//! R-PRX-16: the proxy applies what its config says, on the real dev server: a tool's
//! `schedule_to_start_timeout` and `search_attributes` reach its Activity, and
//! `max_concurrent_calls` bounds the tool calls running at once.

use std::{collections::BTreeMap, time::Duration};

use durable_mcp::{
    contract::{call::CallToken, payload},
    nexus::{OperationOutcome, OperationRef, StartOperation},
    proxy::options::ActivityOptions,
};
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent};
use serde_json::{Value, json};
use temporalio_protos::temporal::api::{
    enums::v1::IndexedValueType, operatorservice::v1::AddSearchAttributesRequest,
    workflowservice::v1::DescribeActivityExecutionRequest,
};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// A Keyword search attribute the tests register on their namespace.
const ATTRIBUTE: &str = "DurableMcpTestTool";

async fn start(env: &TestEnv, tool: &str, args: Value) -> OperationRef {
    let mut start = StartOperation::new(
        format!("options-{tool}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "mock",
        tool,
        payload::to_payload(&args).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(120));
    env.client.start(start).await.unwrap().0
}

async fn succeeded(env: &TestEnv, op: &OperationRef) {
    let outcome = env
        .client
        .wait(op, &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(outcome, OperationOutcome::Succeeded(_)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn schedule_to_start_and_search_attributes_reach_the_activity() {
    let env = TestEnv::shared("proxy-options").await;
    let added = env
        .connection
        .operator_service()
        .add_search_attributes(tonic::Request::new(AddSearchAttributesRequest {
            search_attributes: [(ATTRIBUTE.to_owned(), IndexedValueType::Keyword as i32)].into(),
            namespace: env.namespace.clone(),
        }))
        .await;
    if let Err(s) = &added {
        assert_eq!(s.code(), tonic::Code::AlreadyExists, "{s}");
    }
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let mut upstream = mock_stdio_upstream("mock", &ledger).unwrap();
    upstream.overrides.insert(
        "echo".into(),
        ActivityOptions {
            schedule_to_start_timeout: Some(Duration::from_secs(37)),
            search_attributes: Some(BTreeMap::from([(ATTRIBUTE.to_owned(), json!("echo"))])),
            ..Default::default()
        },
    );
    let _proxy = start_proxy(&env, vec![upstream]);

    let op = start(&env, "echo", json!({"key": "o1"})).await;
    succeeded(&env, &op).await;
    let token = env.client.describe(&op).await.unwrap().operation_token;
    let token: CallToken = serde_json::from_str(&token).unwrap();
    let info = env
        .connection
        .workflow_service()
        .describe_activity_execution(tonic::Request::new(DescribeActivityExecutionRequest {
            namespace: env.namespace.clone(),
            activity_id: token.activity_id,
            run_id: token.run_id,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(
        info.schedule_to_start_timeout.map(|d| d.seconds),
        Some(37),
        "{info:?}"
    );
    let attributes = info.search_attributes.unwrap_or_default().indexed_fields;
    let value = attributes
        .get(ATTRIBUTE)
        .unwrap_or_else(|| panic!("{ATTRIBUTE} missing from {attributes:?}"));
    assert_eq!(
        serde_json::from_slice::<Value>(&value.data).unwrap(),
        json!("echo")
    );
}

/// With `max_concurrent_calls = 1`, two slow calls started together run one after the other:
/// the second starts only once the first has completed.
#[tokio::test]
async fn max_concurrent_calls_bounds_the_tool_calls_running_at_once() {
    let env = TestEnv::shared("proxy-one-call").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = env.start_proxy(vec![mock_stdio_upstream("mock", &ledger).unwrap()], 1);
    let first = start(&env, "slow", json!({"key": "c1", "sleep_ms": 2000})).await;
    let second = start(&env, "slow", json!({"key": "c2", "sleep_ms": 2000})).await;
    succeeded(&env, &first).await;
    succeeded(&env, &second).await;

    let entries = ledger.read();
    let at = |key: &str, event: LedgerEvent| {
        entries
            .iter()
            .find(|e| e.tool == "slow" && e.event == event && e.key.as_deref() == Some(key))
            .unwrap_or_else(|| panic!("no {event:?} for {key}: {entries:?}"))
            .at_ms
    };
    let (c1, c2) = (at("c1", LedgerEvent::Called), at("c2", LedgerEvent::Called));
    let (earlier, later) = if c1 <= c2 { ("c1", "c2") } else { ("c2", "c1") };
    assert!(
        at(later, LedgerEvent::Called) >= at(earlier, LedgerEvent::Completed),
        "{later} started while {earlier} was still running: {entries:?}"
    );
}
