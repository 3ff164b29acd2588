//! The proxy's part of a call's trace (R-RUN-9): the Activity attempt's span, under the
//! context the Activity's `_tracer-data` header carries; the upstream call's span under it
//! (under the Nexus handler's span for an inline call, R-PRX-30);
//! and that span's context in the upstream request's `_meta` (beside what `_meta` holds).

use durable_mcp_runtime::trace::{self, Kind, TraceContext, attribute};
use rmcp::model::RequestMetaObject;
use temporalio_sdk::activities::ActivityContext;

/// The span `activity.call_tool` of this attempt of the call of `tool` on `service`.
pub fn attempt_span(ctx: &ActivityContext, service: &str, tool: &str) -> TraceContext {
    let parent = trace::from_temporal_header(ctx.headers());
    let attempt = i64::from(ctx.info().attempt);
    let mut attributes = vec![
        attribute("mcp.service", service),
        attribute("mcp.tool", tool),
    ];
    attributes.push(trace::KeyValue::new("temporal.activity.attempt", attempt));
    trace::start("activity.call_tool", Kind::Consumer, &parent, attributes)
}

/// The span `mcp.upstream.call` of one try of the call of `tool`, under the current span.
pub fn upstream_span(tool: &str) -> TraceContext {
    trace::start_child(
        "mcp.upstream.call",
        Kind::Client,
        vec![attribute("mcp.tool", tool)],
    )
}

/// Ends a try's span: `success`, `jsonrpc_error` or `failed` (the failure's kind is on the
/// attempt's span).
pub fn upstream_ended<T, E>(cx: &TraceContext, answer: &Result<T, E>) {
    let (outcome, failed) = match answer {
        Ok(_) => ("answered", false),
        Err(_) => ("failed", true),
    };
    trace::end(cx, outcome, failed);
}

/// Ends a try's span that was cut off (a deadline, a cancel) before the upstream answered.
pub fn upstream_cut(cx: &TraceContext) {
    trace::end(cx, "failed", true);
}

/// `meta` with the current span's W3C fields added (none when there is no span): what the
/// upstream request carries in `_meta`.
pub fn with_trace_fields(meta: Option<RequestMetaObject>) -> Option<RequestMetaObject> {
    let fields = trace::current_fields();
    if fields.is_empty() {
        return meta;
    }
    let mut meta = meta.unwrap_or_default();
    for (name, value) in fields {
        meta.0.0.insert(name, serde_json::Value::String(value));
    }
    Some(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_runtime::trace::WithTraceContext as _;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[tokio::test]
    async fn the_request_meta_gets_the_current_span_and_keeps_its_own_fields() {
        let cx = trace::extract([(trace::TRACEPARENT, PARENT)]);
        let mut given = RequestMetaObject::new();
        given.0.0.insert("progressToken".into(), 7.into());
        let meta = async { with_trace_fields(Some(given)) }
            .with_context(cx)
            .await;
        let meta = serde_json::to_value(meta.unwrap().0).unwrap();
        assert_eq!(meta["traceparent"], PARENT);
        assert_eq!(meta["progressToken"], 7);
        assert!(with_trace_fields(None).is_none());
    }
}
