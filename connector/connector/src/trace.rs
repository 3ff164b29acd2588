//! The connector's part of a call's trace (R-RUN-9): the span `mcp.call`, a child of the
//! caller's W3C trace context, current while the call is answered so that the call's Nexus
//! operation carries it in its headers; and the `tasks/*` requests' spans.

use rmcp::{ErrorData as McpError, RoleServer, model::CallToolResponse, service::RequestContext};

use durable_mcp_runtime::trace::{self, Kind, TraceContext, WithTraceContext as _, attribute};

/// The caller's trace context: the request's `_meta` (`traceparent`, `tracestate`) when it has
/// a `traceparent`, else the HTTP request's headers; empty when neither carries one.
pub fn caller_context(context: &RequestContext<RoleServer>) -> TraceContext {
    let meta = &context.meta.0.0;
    if meta.contains_key(trace::TRACEPARENT) {
        let fields = meta
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.as_str()?)));
        return trace::extract(fields);
    }
    let Some(parts) = context.extensions.get::<http::request::Parts>() else {
        return TraceContext::new();
    };
    let fields = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    trace::extract(fields)
}

/// The span `mcp.call` of a `tools/call` request, under the caller's context.
pub fn call_span(context: &RequestContext<RoleServer>) -> TraceContext {
    trace::start(
        "mcp.call",
        Kind::Server,
        &caller_context(context),
        Vec::new(),
    )
}

/// Ends the call's span with its service and tool (the bounded metric labels, R-RUN-6) and
/// its outcome (R-RUN-6's set).
pub fn call_ended(
    cx: &TraceContext,
    service: &str,
    tool: &str,
    answer: &Result<CallToolResponse, McpError>,
) {
    trace::set_attribute(cx, attribute("mcp.service", service));
    trace::set_attribute(cx, attribute("mcp.tool", tool));
    let outcome = crate::metrics::outcome_of(answer);
    let failed = !matches!(outcome, "success" | "task" | "input_required");
    trace::end(cx, outcome, failed);
}

/// Answers a `tasks/*` request (`name`: `mcp.tasks.get`, `mcp.tasks.update`, `mcp.tasks.cancel`)
/// in a span of that name under the request's own caller context, like `mcp.call`: the task's
/// call's context is not kept (a task ID carries none), so a caller that sends its call's
/// `traceparent` again joins that trace, and any other gets a trace of its own. An update's
/// next round starts under this span. The outcome is `success` or `error`.
pub async fn task_request<T>(
    name: &'static str,
    context: &RequestContext<RoleServer>,
    answer: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    let cx = trace::start(name, Kind::Server, &caller_context(context), Vec::new());
    let answer = answer.with_context(cx.clone()).await;
    let (outcome, failed) = match &answer {
        Ok(_) => ("success", false),
        Err(_) => ("error", true),
    };
    trace::end(&cx, outcome, failed);
    answer
}
