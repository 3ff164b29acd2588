//! The trace context a Workflow's calls carry (R-RUN-9): each Nexus operation the client
//! schedules has the Workflow's W3C `traceparent`/`tracestate` in its Nexus headers, so the
//! tool service's spans join the trace the Workflow was started in.
//!
//! A Workflow gets its context from its start headers: Temporal's SDKs (and this project's
//! proxy) send it in the `_tracer-data` header, which [`McpTools::new`](crate::McpTools::new)
//! reads from the Workflow's context. A Workflow started without that header can take the
//! context from its input instead and give it with
//! [`McpTools::with_trace_context`](crate::McpTools::with_trace_context). Nothing here records
//! or exports a span (no network in Workflow code): the tool service's first span is a child
//! of the span that started the Workflow. Headers are kept in history: a trace context is no
//! secret.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::Payload;

use durable_mcp_contract::{
    payload,
    trace_context::{TRACEPARENT, TRACESTATE},
};

use crate::options::CallOptions;

/// A W3C trace context: a well-formed `traceparent` and the `tracestate` that goes with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TraceContext {
    /// The context of `traceparent`; `None` when it is not a well-formed W3C `traceparent`
    /// (a malformed one is no context, as everywhere else in a call's trace).
    pub fn new(traceparent: impl Into<String>) -> Option<Self> {
        let traceparent = traceparent.into();
        is_traceparent(&traceparent).then_some(Self {
            traceparent,
            tracestate: None,
        })
    }

    /// This context with `tracestate` (vendors' state) carried along.
    pub fn with_tracestate(mut self, tracestate: impl Into<String>) -> Self {
        self.tracestate = Some(tracestate.into()).filter(|s| !s.is_empty());
        self
    }

    /// The context a Temporal `_tracer-data` header carries (a JSON map of the W3C fields;
    /// give it `ctx.headers().get(TRACER_HEADER)`); `None` without one or when its
    /// `traceparent` is malformed.
    pub fn from_tracer_header(header: Option<&Payload>) -> Option<Self> {
        let fields: BTreeMap<String, String> = payload::from_payload(header?).ok()?;
        let context = Self::new(fields.get(TRACEPARENT)?.clone())?;
        Some(match fields.get(TRACESTATE) {
            Some(state) => context.with_tracestate(state.clone()),
            None => context,
        })
    }

    /// The `traceparent` field.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` field, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// `options` with `trace`'s fields added to its Nexus headers, unless the caller set a
/// `traceparent` header of its own (which then wins).
pub(crate) fn with_trace_context(
    options: &CallOptions,
    trace: Option<&TraceContext>,
) -> CallOptions {
    let mut options = options.clone();
    let own = options
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case(TRACEPARENT));
    if let Some(trace) = trace.filter(|_| !own) {
        options = options.header(TRACEPARENT, trace.traceparent.clone());
        if let Some(state) = &trace.tracestate {
            options = options.header(TRACESTATE, state.clone());
        }
    }
    options
}

/// Whether `value` is a W3C `traceparent`: `version-traceid-parentid-flags` in lower-case hex,
/// neither id all zeros, the version not `ff` (version `00` exactly these four fields).
fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    match parts.as_slice() {
        [version, trace, parent, flags, rest @ ..] => {
            hex(version, 2)
                && *version != "ff"
                && (*version != "00" || rest.is_empty())
                && hex(trace, 32)
                && nonzero(trace)
                && hex(parent, 16)
                && nonzero(parent)
                && hex(flags, 2)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_contract::trace_context::TRACER_HEADER;
    use std::collections::HashMap;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn only_a_well_formed_traceparent_is_a_context() {
        assert!(TraceContext::new(PARENT).is_some());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
        ] {
            assert_eq!(TraceContext::new(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_workflows_tracer_header_gives_its_context() {
        let fields = HashMap::from([(TRACEPARENT, PARENT), (TRACESTATE, "caller=1")]);
        let headers = HashMap::from([(
            TRACER_HEADER.to_owned(),
            payload::to_payload(&fields).unwrap(),
        )]);
        let context = TraceContext::from_tracer_header(headers.get(TRACER_HEADER)).unwrap();
        assert_eq!(
            (context.traceparent(), context.tracestate()),
            (PARENT, Some("caller=1"))
        );
        assert_eq!(TraceContext::from_tracer_header(None), None);
        let malformed = HashMap::from([(TRACEPARENT, "00-x")]);
        let headers = HashMap::from([(
            TRACER_HEADER.to_owned(),
            payload::to_payload(&malformed).unwrap(),
        )]);
        assert_eq!(
            TraceContext::from_tracer_header(headers.get(TRACER_HEADER)),
            None
        );
    }

    #[test]
    fn a_calls_nexus_headers_carry_the_context_unless_it_set_its_own() {
        let context = TraceContext::new(PARENT)
            .unwrap()
            .with_tracestate("caller=1");
        let options = with_trace_context(&CallOptions::default(), Some(&context));
        let expected = vec![
            (TRACEPARENT.to_owned(), PARENT.to_owned()),
            (TRACESTATE.to_owned(), "caller=1".to_owned()),
        ];
        assert_eq!(options.headers, expected);
        let own = CallOptions::default().header("Traceparent", "mine");
        assert_eq!(
            with_trace_context(&own, Some(&context)).headers,
            own.headers
        );
        assert!(
            with_trace_context(&CallOptions::default(), None)
                .headers
                .is_empty()
        );
    }
}
