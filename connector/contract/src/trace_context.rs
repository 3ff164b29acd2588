//! The names a call's W3C trace context travels under (R-RUN-9): the fields (`traceparent`,
//! `tracestate`) in MCP `_meta`, HTTP and Nexus headers, and the Temporal header Temporal's SDKs
//! carry them in to an Activity or a Workflow. Names only: the spans are the runtime's.

/// The W3C field naming the parent span (in `_meta`, HTTP and Nexus headers).
pub const TRACEPARENT: &str = "traceparent";
/// The W3C field with vendors' state, carried along with [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";
/// The Temporal header Temporal's SDKs carry trace context in: a JSON map of the W3C fields.
pub const TRACER_HEADER: &str = "_tracer-data";
