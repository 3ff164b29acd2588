//! R-RUN-9: one call through the connector, Temporal, the proxy and the mock upstream (in an
//! Activity, or inline: R-PRX-30), made with the caller's `traceparent` in `_meta`, shows in an
//! OTLP receiver as one trace (the caller's) with the connector's, the Nexus handler's, the
//! Activity's (none inline) and the upstream call's spans, each the child of the one before;
//! the upstream sees the context in its request's `_meta`; a `tasks/get` sent with the same
//! context is `mcp.tasks.get` in that trace; no attribute holds the arguments, the result or a
//! key.

use std::{process::Stdio, time::Duration};

use durable_mcp_conformance::{
    fixtures::{Behavior, Ledger, ToolSpec, UpstreamSpec},
    kit::{
        mcp::tasks_client_config,
        otlp::{OtlpReceiver, ReceivedSpan},
    },
};
use rmcp::{ServiceExt as _, model::RequestMetaObject};
use serde_json::json;

use crate::{
    support::{TestEnv, connector_command, mock_stdio_upstream_with_spec, temp_path, tool_call},
    temporal_tls::{proxy_command, proxy_config_for},
};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// Values that must reach no span attribute.
const SECRET: &str = "argument-value-5c1e";
const KEY: &str = "sk-live-key-9d2b";

pub(crate) fn trace_echo() -> ToolSpec {
    ToolSpec {
        name: "trace_echo".into(),
        title: None,
        description: Some("answers its request's trace context".into()),
        annotations: None,
        input_schema: None,
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior: Behavior::EchoTraceContext,
    }
}

/// The one span named `name` whose parent is `parent`.
pub(crate) fn child<'s>(spans: &'s [ReceivedSpan], name: &str, parent: &str) -> &'s ReceivedSpan {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name && s.parent_span_id == parent)
        .collect();
    assert_eq!(found.len(), 1, "one {name} under {parent}: {spans:#?}");
    found[0]
}

pub(crate) fn attribute<'s>(span: &'s ReceivedSpan, key: &str) -> &'s str {
    let found = span.attributes.iter().find(|(k, _)| k == key);
    found.map_or("", |(_, v)| v.as_str())
}

/// The flags that point a binary at `env`'s server and at `receiver`.
pub(crate) fn traced_flags(env: &TestEnv, receiver: &OtlpReceiver) -> [String; 4] {
    [
        "--address".to_owned(),
        env.address.clone(),
        "--otlp-endpoint".to_owned(),
        receiver.endpoint.clone(),
    ]
}

/// The proxy binary fronting a mock with [`trace_echo`] as `mock` on `env`'s task queue,
/// exporting its spans to `receiver` every 100 ms; `inline`: the tool runs inline (R-PRX-30).
pub(crate) fn traced_proxy(
    env: &TestEnv,
    receiver: &OtlpReceiver,
    inline: bool,
) -> tokio::process::Child {
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let spec = UpstreamSpec {
        name: "mock".into(),
        tools: vec![trace_echo()],
        instructions: None,
    };
    let upstream = mock_stdio_upstream_with_spec("mock", &spec, &ledger);
    let flags = traced_flags(env, receiver);
    let config = proxy_config_for(env, "mock", upstream);
    if inline {
        let text = std::fs::read_to_string(&config).unwrap();
        let table = "[upstream.overrides.trace_echo]\nexecution = \"inline\"\n";
        std::fs::write(&config, format!("{text}{table}")).unwrap();
    }
    proxy_command(&config, &flags)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A request's `_meta` with the caller's `traceparent` and a `tracestate`.
fn call_meta(traceparent: &str) -> Option<RequestMetaObject> {
    let mut meta = RequestMetaObject::new();
    meta.0.0.insert("traceparent".into(), json!(traceparent));
    meta.0.0.insert("tracestate".into(), json!("caller=1"));
    Some(meta)
}

#[tokio::test]
async fn one_call_is_one_trace_from_the_caller_to_the_upstream() {
    one_traced_call(false).await;
}

/// R-PRX-30: an inline call's upstream call is a child of the Nexus handler's span.
#[tokio::test]
async fn an_inline_call_is_one_trace_with_the_upstream_call_under_the_nexus_span() {
    one_traced_call(true).await;
}

/// One call of `trace_echo` (inline or in an Activity) through the connector and the proxy:
/// one trace, each span the child of the one before, no argument or key in an attribute.
async fn one_traced_call(inline: bool) {
    let receiver = OtlpReceiver::start().await.unwrap();
    let env = TestEnv::shared("traces").await;
    let proxy = traced_proxy(&env, &receiver, inline);
    let flags = traced_flags(&env, &receiver);
    let mut connector = connector_command(&env, "mock");
    connector.args(&flags).env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let transport = rmcp::transport::TokioChildProcess::new(connector).unwrap();
    // Declares the tasks extension, so that its tasks/get reaches the connector.
    let client = tasks_client_config()
        .serve(transport)
        .await
        .expect("MCP handshake");

    let mut call = tool_call("trace_echo", json!({"k": SECRET, "api_key": KEY}));
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    call.meta = call_meta(&caller);
    let answered = tokio::time::timeout(Duration::from_secs(60), client.peer().call_tool(call))
        .await
        .expect("the call finishes")
        .unwrap();
    let seen = answered
        .structured_content
        .expect("the upstream's trace context");

    // A tasks/* request with the same context joins the trace (an unknown task: an error).
    let mut get = rmcp::model::GetTaskParams::new("not-a-task");
    get.meta = call_meta(&caller);
    assert!(client.peer().get_task(get).await.is_err());

    let names = [
        "mcp.call",
        "nexus.start_operation",
        "mcp.upstream.call",
        "mcp.tasks.get",
    ];
    let spans = receiver.wait_for(&names, Duration::from_secs(30)).await;
    let ours: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == TRACE_ID)
        .cloned()
        .collect();
    let call = child(&ours, "mcp.call", CALLER_SPAN);
    assert_eq!(call.service, "durable-mcp-connector");
    assert_eq!(attribute(call, "mcp.service"), "mock");
    assert_eq!(attribute(call, "mcp.tool"), "trace_echo");
    assert_eq!(attribute(call, "durable_mcp.outcome"), "success");
    let nexus = child(&ours, "nexus.start_operation", &call.span_id);
    assert_eq!(nexus.service, "durable-mcp-proxy");
    assert_eq!(
        attribute(nexus, "durable_mcp.outcome"),
        if inline { "sync" } else { "async" }
    );
    let parent = if inline {
        let activities = ours.iter().filter(|s| s.name == "activity.call_tool");
        assert_eq!(activities.count(), 0, "{ours:#?}");
        nexus
    } else {
        let activity = child(&ours, "activity.call_tool", &nexus.span_id);
        assert_eq!(attribute(activity, "durable_mcp.outcome"), "success");
        activity
    };
    let upstream = child(&ours, "mcp.upstream.call", &parent.span_id);
    let tasks_get = child(&ours, "mcp.tasks.get", CALLER_SPAN);
    assert_eq!(tasks_get.service, "durable-mcp-connector");
    assert_eq!(attribute(tasks_get, "durable_mcp.outcome"), "error");
    assert_eq!(attribute(upstream, "durable_mcp.outcome"), "answered");
    // The upstream's request carries the upstream call's span, in the caller's trace.
    let sent = format!("00-{TRACE_ID}-{}-01", upstream.span_id);
    assert_eq!(seen["traceparent"], json!(sent), "{seen}");
    assert_eq!(seen["tracestate"], json!("caller=1"), "{seen}");
    for span in &spans {
        for (key, value) in &span.attributes {
            let leaked = [SECRET, KEY, TRACE_ID].iter().any(|v| value.contains(v));
            assert!(!leaked, "{}: {key}={value}", span.name);
        }
    }
    client.cancel().await.unwrap();
    drop(proxy);
}
