//! R-RUN-9: a tool call made from Workflow code (the in-Workflow client) carries the Workflow's
//! trace context in its Nexus operation's headers: taken from the Workflow's `_tracer-data`
//! start header, or given from its input. The proxy's spans join that trace (an OTLP receiver
//! gets them under the caller's trace id and span) and the upstream's request carries it.

use std::{collections::HashMap, time::Duration};

use durable_mcp::{
    contract::{payload, trace_context::TRACER_HEADER},
    workflow_client::{CallOptions, McpTools, TraceContext},
};
use durable_mcp_conformance::kit::otlp::{OtlpReceiver, ReceivedSpan};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use temporalio_client::{Client, ClientOptions, WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_protos::temporal::api::common::v1::Header;
use temporalio_sdk::{WorkflowContext, WorkflowResult};

use crate::{
    support::{ActivityWorkerGuard, TestEnv},
    traces::{attribute, child, traced_proxy},
};

/// The trace a Workflow is started in (its `_tracer-data` header).
const HEADER_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
const HEADER_SPAN: &str = "10f067aa0ba902b8";
/// The trace a Workflow is given in its input.
const INPUT_TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4738";
const INPUT_SPAN: &str = "20f067aa0ba902b9";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TracedCallInput {
    endpoint: String,
    service: String,
    /// Replaces the start header's context when given.
    trace: Option<TraceContext>,
}

/// Calls `trace_echo` once; its output is the trace context the upstream saw.
#[workflow]
#[derive(Default)]
struct TracedCall;

#[workflow_methods]
impl TracedCall {
    #[run(name = "durable-mcp-tests.traced-call")]
    async fn run(ctx: &mut WorkflowContext<Self>, input: TracedCallInput) -> WorkflowResult<Value> {
        let mut tools = McpTools::new(ctx, input.endpoint, input.service);
        if input.trace.is_some() {
            tools = tools.with_trace_context(input.trace);
        }
        let result = tools
            .call_tool_json("trace_echo", json!({}), CallOptions::default())
            .await
            .map_err(temporalio_sdk::ApplicationFailure::non_retryable)?;
        Ok(result["structuredContent"].clone())
    }
}

fn tracer_header(traceparent: &str) -> Header {
    let fields = HashMap::from([("traceparent", traceparent), ("tracestate", "wf=1")]);
    Header {
        fields: HashMap::from([(
            TRACER_HEADER.to_owned(),
            payload::to_payload(&fields).unwrap(),
        )]),
    }
}

/// Runs a [`TracedCall`] (started with `header`, given `trace`) to its end: what the upstream saw.
async fn traced_call(
    env: &TestEnv,
    queue: &str,
    header: Option<Header>,
    trace: Option<TraceContext>,
) -> Value {
    let client = Client::new(
        env.connection.clone(),
        ClientOptions::new(env.namespace.clone()).build(),
    )
    .unwrap();
    let input = TracedCallInput {
        endpoint: env.endpoint.clone(),
        service: "mock".into(),
        trace,
    };
    let id = format!("traced-call-{}", uuid::Uuid::new_v4());
    let options = WorkflowStartOptions::new(queue.to_owned(), id)
        .maybe_header(header)
        .build();
    let handle = client
        .start_workflow(TracedCall::run, input, options)
        .await
        .unwrap();
    let result = handle.get_result(WorkflowGetResultOptions::default());
    tokio::time::timeout(Duration::from_secs(60), result)
        .await
        .expect("the Workflow completes within 60 s")
        .unwrap()
}

/// The proxy's spans of the call made in the trace `trace_id` from the span `parent`; checks
/// that the upstream's request (`seen`) carried the upstream call's span in that trace.
fn check_joined(spans: &[ReceivedSpan], trace_id: &str, parent: &str, seen: &Value) {
    // The client lists the tools first (for the advertised timeout): that start joins too.
    let operation = |s: &&ReceivedSpan| attribute(s, "nexus.operation").to_owned();
    let ours: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect();
    let starts: Vec<String> = ours
        .iter()
        .filter(|s| s.name == "nexus.start_operation" && s.parent_span_id == parent)
        .map(|s| operation(&s))
        .collect();
    assert_eq!(starts.len(), 2, "{ours:#?}");
    assert!(starts.contains(&"list_tools".to_owned()), "{starts:?}");
    let calls: Vec<ReceivedSpan> = ours
        .iter()
        .filter(|s| s.name != "nexus.start_operation" || operation(s) == "trace_echo")
        .cloned()
        .collect();
    let nexus = child(&calls, "nexus.start_operation", parent);
    assert_eq!(nexus.service, "durable-mcp-proxy");
    let activity = child(&ours, "activity.call_tool", &nexus.span_id);
    let upstream = child(&ours, "mcp.upstream.call", &activity.span_id);
    let sent = format!("00-{trace_id}-{}-01", upstream.span_id);
    assert_eq!(seen["traceparent"], json!(sent), "{seen}");
    assert_eq!(seen["tracestate"], json!("wf=1"), "{seen}");
}

#[tokio::test]
async fn a_workflows_call_joins_the_workflows_trace() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let env = TestEnv::shared("workflow-traces").await;
    let _proxy = traced_proxy(&env, &receiver, false);
    let queue = format!("{}-workflows", env.task_queue);
    let _worker = ActivityWorkerGuard::start_with(&env.address, &env.namespace, &queue, |o| {
        o.register_workflow::<TracedCall>()
            .expect("TracedCall registers");
    });

    let from_header = format!("00-{HEADER_TRACE}-{HEADER_SPAN}-01");
    let header = Some(tracer_header(&from_header));
    let seen_header = traced_call(&env, &queue, header, None).await;
    let given = TraceContext::new(format!("00-{INPUT_TRACE}-{INPUT_SPAN}-01"))
        .expect("a well-formed traceparent")
        .with_tracestate("wf=1");
    // The input's context wins over the start header's.
    let header = Some(tracer_header(&from_header));
    let seen_input = traced_call(&env, &queue, header, Some(given)).await;

    let names = ["nexus.start_operation", "mcp.upstream.call"];
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut spans = receiver.wait_for(&names, Duration::from_secs(30)).await;
    while spans
        .iter()
        .filter(|s| s.name == "mcp.upstream.call")
        .count()
        < 2
        && tokio::time::Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        spans = receiver.spans();
    }
    check_joined(&spans, HEADER_TRACE, HEADER_SPAN, &seen_header);
    check_joined(&spans, INPUT_TRACE, INPUT_SPAN, &seen_input);
}
