//! The connector's Prometheus metrics (R-RUN-6): tool calls by service, tool and outcome, their
//! end-to-end latency, calls in flight, tasks created, input requests, cap and auth refusals.
//!
//! Every label value is bounded: a tool label is a name the connector listed (else
//! [`UNLISTED`]), a service label a route's service (or the local tool set's origin), an
//! outcome one of a fixed set ([`outcome_of`]); no argument, task ID or caller identity is a
//! label. A host mounts [`Metrics::encode`] wherever it serves HTTP; the binary serves it on
//! `--metrics-addr`.

use std::sync::Arc;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use rmcp::{ErrorData as McpError, model::CallToolResponse};

use durable_mcp_contract::{
    errors::{ConnectorErrorType, ToolCallErrorType},
    outcome::ERROR_TYPE_META,
};
pub use durable_mcp_runtime::metrics::CONTENT_TYPE;
use durable_mcp_runtime::metrics::{
    CallMetrics, ReasonLabels, encode, latency_histogram, register_codec_calls, registered,
};

/// The tool and service label of a call of a tool the connector never listed.
pub const UNLISTED: &str = "_unlisted";

/// A Temporal RPC's label set: which RPC, from a fixed set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
}

type RpcLatency = Family<RpcLabels, Histogram, fn() -> Histogram>;

/// The connector's instruments and their registry. Cheap to clone; clones count together.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Instruments>,
}

struct Instruments {
    registry: Registry,
    calls: CallMetrics,
    in_flight: Gauge,
    tasks_created: Counter,
    input_requests: Counter,
    refusals: Family<ReasonLabels, Counter>,
    auth_refusals: Family<ReasonLabels, Counter>,
    temporal_rpcs: RpcLatency,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh instruments, registered under `durable_mcp_connector_*`.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("durable_mcp_connector");
        let calls = CallMetrics::register(
            &mut r,
            [
                "tool_calls",
                "Tool calls answered, by service, tool and outcome",
            ],
            [
                "tool_call_duration_seconds",
                "End-to-end time from a tools/call request to its answer",
            ],
        );
        let in_flight = "Tool calls being answered now";
        let in_flight = registered(&mut r, "tool_calls_in_flight", in_flight, Gauge::default());
        let tasks = "Tool calls answered with a task";
        let tasks_created = registered(&mut r, "tasks_created", tasks, Counter::default());
        let input = "Tool calls answered with a request for input (the tool waits for it)";
        let input_requests = registered(&mut r, "input_requests", input, Counter::default());
        let caps = "Requests refused by a cap, by the cap's flag";
        let refusals = registered(&mut r, "cap_refusals", caps, Family::default());
        let auth = "HTTP requests refused by inbound auth, by reason";
        let auth_refusals = registered(&mut r, "auth_refusals", auth, Family::default());
        let rpcs = "Round trip of the Temporal RPCs a call makes, by RPC";
        let rpc_latency = RpcLatency::new_with_constructor(latency_histogram);
        let temporal_rpcs = registered(&mut r, "temporal_rpc_duration_seconds", rpcs, rpc_latency);
        register_codec_calls(&mut r);
        durable_mcp_runtime::panics::register_panics(&mut r);
        let inner = Instruments {
            registry: r,
            calls,
            in_flight,
            tasks_created,
            input_requests,
            refusals,
            auth_refusals,
            temporal_rpcs,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The metrics as Prometheus (OpenMetrics) text, served with [`CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        encode(&self.inner.registry)
    }

    /// A tool call begins: it counts in flight until the returned timer finishes or drops.
    pub fn call_started(&self) -> CallTimer {
        self.inner.in_flight.inc();
        CallTimer {
            metrics: self.clone(),
            started: std::time::Instant::now(),
            done: false,
        }
    }

    /// Awaits `rpc` (the Temporal RPC named `name`) and times its round trip.
    pub async fn timed<T>(&self, name: &'static str, rpc: impl Future<Output = T>) -> T {
        let started = std::time::Instant::now();
        let answer = rpc.await;
        let labels = RpcLabels { rpc: name };
        let seconds = started.elapsed().as_secs_f64();
        self.inner
            .temporal_rpcs
            .get_or_create(&labels)
            .observe(seconds);
        answer
    }

    /// Counts `error` when it is a cap's refusal (R-CON-17, R-CON-38).
    pub fn note_refusal(&self, error: &McpError) {
        if let Some(flag) = refused_cap(error) {
            self.count_refusal(flag);
        }
    }

    /// Counts a refusal by the cap `flag` (e.g. `--max-sessions-per-caller`).
    pub fn count_refusal(&self, flag: &str) {
        let reason = flag.to_owned();
        self.inner
            .refusals
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts an HTTP request inbound auth refused, by a fixed `reason` (R-CON-9).
    pub fn auth_refused(&self, reason: &'static str) {
        let reason = reason.to_owned();
        self.inner
            .auth_refusals
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// One tool call being answered (see [`Metrics::call_started`]).
pub struct CallTimer {
    metrics: Metrics,
    started: std::time::Instant,
    done: bool,
}

impl CallTimer {
    /// The call of `tool` on `service` (bounded values, see the module) is answered with
    /// `answer`: counted under its outcome, with its latency.
    pub fn finished(
        mut self,
        service: &str,
        tool: &str,
        answer: &Result<CallToolResponse, McpError>,
    ) {
        self.done = true;
        let m = &self.metrics.inner;
        let outcome = outcome_of(answer);
        match answer {
            Ok(CallToolResponse::Task(_)) => {
                m.tasks_created.inc();
            }
            Ok(CallToolResponse::InputRequired(_)) => {
                m.input_requests.inc();
            }
            Err(e) => self.metrics.note_refusal(e),
            _ => {}
        }
        self.record(service, tool, outcome);
    }

    fn record(&self, service: &str, tool: &str, outcome: &str) {
        let seconds = self.started.elapsed().as_secs_f64();
        let calls = &self.metrics.inner.calls;
        calls.record(service, tool, outcome, seconds);
    }
}

impl Drop for CallTimer {
    /// Out of flight; a call whose request was dropped unanswered counts as cancelled.
    fn drop(&mut self) {
        self.metrics.inner.in_flight.dec();
        if !self.done {
            self.record(UNLISTED, UNLISTED, "cancelled");
        }
    }
}

/// The (service, tool) labels of a call of `tool`: as given when the connector listed it on
/// `service`, else [`UNLISTED`] for both, so a caller cannot mint label values.
pub fn bounded_labels<'a>(service: Option<&'a str>, tool: &'a str) -> (&'a str, &'a str) {
    match service {
        Some(service) => (service, tool),
        None => (UNLISTED, UNLISTED),
    }
}

/// The outcome label of a tool call's answer: `success`, `tool_error`, a stable error type of
/// R-NXC-4 (or of the connector's own tool errors), `task`, `input_required`, `cancelled`,
/// `outcome_unknown`, `refused` (a cap), `internal_error` or `jsonrpc_error`.
pub fn outcome_of(answer: &Result<CallToolResponse, McpError>) -> &'static str {
    match answer {
        Ok(CallToolResponse::Task(_)) => "task",
        Ok(CallToolResponse::InputRequired(_)) => "input_required",
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            let error_type = result
                .meta
                .as_ref()
                .and_then(|m| m.get(ERROR_TYPE_META))
                .and_then(|t| t.as_str());
            error_type.and_then(stable_type).unwrap_or("tool_error")
        }
        Ok(_) => "success",
        Err(e) => error_outcome(e),
    }
}

/// The stable error type `name` names, as a `'static` label value; `None` for any other string.
fn stable_type(name: &str) -> Option<&'static str> {
    ToolCallErrorType::parse(name)
        .map(ToolCallErrorType::as_str)
        .or_else(|| ConnectorErrorType::parse(name).map(ConnectorErrorType::as_str))
}

/// The outcome label of a JSON-RPC error answer.
fn error_outcome(e: &McpError) -> &'static str {
    if e.code != rmcp::model::ErrorCode::INTERNAL_ERROR {
        return "jsonrpc_error";
    }
    if refused_cap(e).is_some() {
        "refused"
    } else if e.message.contains("may have run") {
        "outcome_unknown"
    } else if e.message.contains("cancelled by the client") {
        "cancelled"
    } else {
        "internal_error"
    }
}

/// The flag of the cap that refused with `error`, if a cap did (R-CON-17, R-CON-38).
pub fn refused_cap(error: &McpError) -> Option<&'static str> {
    const CAPS: [(&str, &str); 3] = [
        ("maxInFlight", "--max-in-flight"),
        ("maxInFlightPerCaller", "--max-in-flight-per-caller"),
        (
            "maxCallStartsPerCallerMinute",
            "--max-call-starts-per-caller-minute",
        ),
    ];
    let data = error.data.as_ref()?.as_object()?;
    CAPS.into_iter()
        .find(|(key, _)| data.contains_key(*key))
        .map(|(_, flag)| flag)
}

#[cfg(test)]
mod tests;
