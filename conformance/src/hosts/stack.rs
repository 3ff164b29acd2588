//! What every host of the family talks to: two real upstreams, each reachable directly and
//! through the durable path (the `durable-mcp-connector` binary over Streamable HTTP ->
//! Temporal -> the proxy -> the upstream), so a host's answers through durable-mcp can be
//! compared with the same host's answers from the upstream itself.

use serde_json::json;

use crate::{
    fixtures::{self, HttpUpstream, Ledger, SpecSource, ToolSpec, UpstreamSpec, everything},
    harness::{DevServer, Slice, unique_name},
    kit::{process::HttpConnectorProcess, upstreams::http_upstream},
    proxy_thread::ProxyThread,
};

/// How long a task-capable call waits before the connector makes it a task (`--task-after`):
/// short, so the family's long calls (a few seconds) become tasks.
pub const TASK_AFTER: &str = "1s";
/// server-everything's tools the family calls as plain calls, kept synchronous on their
/// route (R-CON-39's `synchronous`): a loaded machine can make a short call last past
/// [`TASK_AFTER`], and it must not then become a task its case does not follow.
pub const EVERYTHING_SYNCHRONOUS: &[&str] = &["echo", "get-sum"];
/// The mock's tools the family calls as plain calls, kept synchronous likewise.
pub const MOCK_SYNCHRONOUS: &[&str] = &["echo", "refuse"];

/// One upstream, directly and durably.
pub struct Endpoints {
    /// The upstream's own MCP URL.
    pub direct: String,
    /// The connector's MCP URL, routed to the upstream through Temporal.
    pub durable: String,
}

/// The running stack; everything stops when it is dropped (the endpoint on [`Stack::stop`]).
pub struct Stack {
    pub everything: Endpoints,
    pub mock: Endpoints,
    /// The mock upstream's invocation ledger (calls, cancellations), for both paths.
    pub ledger: Ledger,
    endpoint: String,
    _dir: tempfile::TempDir,
    _everything: tokio::process::Child,
    mock_server: Option<HttpUpstream>,
    _proxy: ProxyThread,
    _connectors: Vec<HttpConnectorProcess>,
}

/// The mock upstream's tools for the hosts: the standard ones, a tool that asks for a
/// confirmation (an `InputRequiredResult`, after `sleep_ms`), and a task of its own that asks
/// for one (so a direct caller sees a task too).
pub fn mock_spec() -> UpstreamSpec {
    let mut spec = UpstreamSpec::standard();
    let extra = [
        json!({"name": "ask", "description": "Asks to confirm, then echoes the answer.",
               "annotations": {"destructiveHint": true, "idempotentHint": false},
               "inputSchema": {"type": "object", "properties": {
                   "key": {"type": "string"}, "sleep_ms": {"type": "integer", "minimum": 0}}},
               "behavior": {"kind": "ask_input", "message": "Delete 40 GB?"}}),
        json!({"name": "ask_task", "description": "A task that asks to confirm.",
               "annotations": {"destructiveHint": true, "idempotentHint": false},
               "execution": {"taskSupport": "required"},
               "behavior": {"kind": "task", "ms": 2000, "ask": "Delete 40 GB?"}}),
    ];
    for tool in extra {
        spec.tools
            .push(serde_json::from_value::<ToolSpec>(tool).expect("a valid tool spec"));
    }
    spec
}

impl Stack {
    /// Starts server-everything (HTTP), the mock (HTTP, with resources and prompts), a proxy
    /// fronting both on a fresh slice of `server`, and one connector process per upstream.
    pub async fn start(server: &DevServer) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("durable-mcp-hosts-")
            .tempdir()?;
        let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
        let (everything_child, everything_url) = everything::run_everything_http(0).await?;
        let mock = fixtures::serve_mock_upstream_http_with(
            SpecSource::Inline(mock_spec()),
            Some(ledger.path().to_owned()),
            "127.0.0.1:0".parse()?,
            Some(fixtures::server::features::Features {
                more_resources: None,
            }),
        )
        .await?;
        let slice =
            Slice::named(server, &unique_name("tq-hosts"), &unique_name("ep-hosts")).await?;
        let proxy = slice.start_proxy(
            vec![
                http_upstream("everything", &everything_url)?,
                http_upstream("mock", &mock.url)?,
            ],
            50,
        );
        let through_everything = connector(&slice, "everything", EVERYTHING_SYNCHRONOUS).await?;
        let through_mock = connector(&slice, "mock", MOCK_SYNCHRONOUS).await?;
        Ok(Self {
            everything: Endpoints {
                direct: everything_url,
                durable: through_everything.url.clone(),
            },
            mock: Endpoints {
                direct: mock.url.clone(),
                durable: through_mock.url.clone(),
            },
            ledger,
            endpoint: slice.endpoint.clone(),
            _dir: dir,
            _everything: everything_child,
            mock_server: Some(mock),
            _proxy: proxy,
            _connectors: vec![through_everything, through_mock],
        })
    }

    /// Stops the in-process mock and deletes the Nexus endpoint; the rest stops on drop.
    pub async fn stop(mut self, server: &DevServer) {
        if let Some(mock) = self.mock_server.take() {
            mock.shutdown().await;
        }
        let _ = server.delete_nexus_endpoint(&self.endpoint).await;
    }
}

/// The connector process routing to `service`, tasks after [`TASK_AFTER`] except for the
/// `synchronous` tools.
async fn connector(
    slice: &Slice,
    service: &str,
    synchronous: &[&str],
) -> anyhow::Result<HttpConnectorProcess> {
    let route = format!(
        "{{service: {service}, endpoint: {}, synchronous: [{}]}}",
        slice.endpoint,
        synchronous.join(", ")
    );
    let args = ["--task-after", TASK_AFTER];
    HttpConnectorProcess::start_routed(slice, &route, "127.0.0.1:0", &args).await
}
