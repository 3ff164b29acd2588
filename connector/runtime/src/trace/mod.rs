//! W3C trace context through a tool call, and the call's spans (R-RUN-9).
//!
//! The caller's `traceparent`/`tracestate` (from the MCP request's `_meta`, or its HTTP
//! headers) parents the connector's `mcp.call` span; the connector passes that span's context in
//! the Nexus operation's headers, the Nexus handler's span passes its own in the Activity's
//! `_tracer-data` Temporal header (the header Temporal's SDKs use), and the Activity's upstream
//! call puts its span's context in the upstream request's `_meta`.
//!
//! Spans go to the global tracer provider, which [`export::install`] sets up when an OTLP
//! endpoint is given. Without one the provider is OpenTelemetry's no-op: every span is the
//! parent's context passed on unchanged, so the caller's context still travels and nothing is
//! recorded or sent. Span attributes are names and fixed labels only: never arguments,
//! results, errors' text or tokens.

pub mod export;

use std::collections::HashMap;

use opentelemetry::{
    Context, global,
    propagation::TextMapPropagator,
    trace::{SpanKind, Status, TraceContextExt, Tracer},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use temporalio_protos::temporal::api::common::v1::{Header, Payload};

use durable_mcp_contract::payload;

pub use opentelemetry::{Context as TraceContext, context::FutureExt as WithTraceContext};
pub use opentelemetry::{KeyValue, trace::SpanKind as Kind};

pub use durable_mcp_contract::trace_context::{TRACEPARENT, TRACER_HEADER, TRACESTATE};
/// The attribute that says how a span's work ended: a fixed label (an outcome or error type).
pub const OUTCOME: &str = "durable_mcp.outcome";

const TRACER_NAME: &str = "durable-mcp";

/// Whether `name` is one of the W3C trace context fields (any case).
pub fn is_trace_field(name: &str) -> bool {
    name.eq_ignore_ascii_case(TRACEPARENT) || name.eq_ignore_ascii_case(TRACESTATE)
}

/// The remote parent that `fields` carry (pairs of name and value; other names ignored); an
/// empty context when there is no valid `traceparent`.
pub fn extract<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> Context {
    let map: HashMap<String, String> = fields
        .into_iter()
        .filter(|(name, _)| is_trace_field(name))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    TraceContextPropagator::new().extract(&map)
}

/// The W3C fields of `cx`'s span: empty when it has no valid span context.
pub fn fields(cx: &Context) -> HashMap<String, String> {
    let mut map = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut map);
    map
}

/// The W3C fields of the span current where this runs (see [`WithTraceContext`]).
pub fn current_fields() -> HashMap<String, String> {
    fields(&Context::current())
}

/// Starts the span `name` of `kind` under `parent`: the context that holds it, to run the
/// span's work in (`.with_context(cx.clone())`) and to [`end`].
pub fn start(
    name: &'static str,
    kind: SpanKind,
    parent: &Context,
    attributes: Vec<KeyValue>,
) -> Context {
    let tracer = global::tracer(TRACER_NAME);
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(&tracer, parent);
    parent.with_span(span)
}

/// [`start`] under the current span.
pub fn start_child(name: &'static str, kind: SpanKind, attributes: Vec<KeyValue>) -> Context {
    start(name, kind, &Context::current(), attributes)
}

/// Ends `cx`'s span with `outcome`, a fixed label; `failed` marks the span's status as error.
pub fn end(cx: &Context, outcome: &str, failed: bool) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(OUTCOME, outcome.to_owned()));
    if failed {
        span.set_status(Status::error(outcome.to_owned()));
    }
    span.end();
}

/// Sets `attribute` on `cx`'s span (known only once its work ended, like a call's service).
pub fn set_attribute(cx: &Context, attribute: KeyValue) {
    cx.span().set_attribute(attribute);
}

/// A name attribute (a service, tool or operation name: never arguments or results).
pub fn attribute(key: &'static str, value: &str) -> KeyValue {
    KeyValue::new(key, value.to_owned())
}

/// The Temporal header that carries `cx`'s span to an Activity or Workflow; `None` without one.
pub fn temporal_header(cx: &Context) -> Option<Header> {
    let fields = fields(cx);
    if fields.is_empty() {
        return None;
    }
    let data = payload::to_payload(&fields).ok()?;
    Some(Header {
        fields: HashMap::from([(TRACER_HEADER.to_owned(), data)]),
    })
}

/// The remote parent a Temporal header carries (see [`temporal_header`]); empty without one.
pub fn from_temporal_header(header: &HashMap<String, Payload>) -> Context {
    let map: HashMap<String, String> = header
        .get(TRACER_HEADER)
        .and_then(|p| payload::from_payload(p).ok())
        .unwrap_or_default();
    extract(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

#[cfg(test)]
mod tests;
