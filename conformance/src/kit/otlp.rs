//! An OTLP/gRPC receiver for tests (R-RUN-9): it keeps every span the binaries export, with
//! the exporting process's `service.name`, so a test can check one call's trace.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{AnyValue, KeyValue, any_value::Value},
};
use tokio_util::sync::CancellationToken;

/// One span as received, its ids in lower-case hex (the parent's empty for a root).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// Every attribute, its value as text.
    pub attributes: Vec<(String, String)>,
}

/// A running receiver; stops when dropped.
pub struct OtlpReceiver {
    /// The URL to give `--otlp-endpoint`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    stop: CancellationToken,
}

#[derive(Clone, Default)]
struct Keeper {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

#[tonic::async_trait]
impl TraceService for Keeper {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let received = flatten(request.into_inner());
        self.spans.lock().unwrap().extend(received);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The spans of an export request, each with its resource's `service.name`.
fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| r.attributes);
        let service = attribute_texts(&resource.unwrap_or_default())
            .into_iter()
            .find_map(|(k, v)| (k == "service.name").then_some(v))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(ReceivedSpan {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: attribute_texts(&span.attributes),
            });
        }
    }
    spans
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute_texts(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), value_text(kv.value.as_ref())))
        .collect()
}

fn value_text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let keeper = Keeper::default();
        let spans = keeper.spans.clone();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(keeper))
                .serve_with_incoming_shutdown(incoming, stopped.cancelled_owned()),
        );
        Ok(Self {
            endpoint,
            spans,
            stop,
        })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans received once every name in `names` is among them, or when `timeout` passes.
    pub async fn wait_for(&self, names: &[&str], timeout: Duration) -> Vec<ReceivedSpan> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            let all = names.iter().all(|n| spans.iter().any(|s| s.name == *n));
            if all || tokio::time::Instant::now() >= until {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
