//! A connector in front of MCP clients: its route to a slice's Nexus endpoint, served over an
//! in-memory pipe or Streamable HTTP, and the rmcp clients (and raw clients) that talk to it.

use anyhow::Context as _;
use durable_mcp::connector::{
    http::{self, HttpOptions, HttpServerHandle},
    route::Route,
    server::{Connector, ConnectorOptions},
};
use rmcp::{
    ClientLifecycleMode, ClientServiceExt as _, RoleClient, ServiceExt as _,
    model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    service::RunningService,
    transport::StreamableHttpClientTransport,
};
use tokio_util::sync::CancellationToken;

use crate::{fixtures::everything::RawStdioClient, harness::Slice};

/// An rmcp client with handler `C`, connected to a connector.
pub type McpClient<C = ()> = RunningService<RoleClient, C>;

/// The route to `service` on the Nexus endpoint `endpoint`.
pub fn route(service: &str, endpoint: &str) -> Route {
    Route::new(service, endpoint)
}

/// Default connector options with one route, to `service` on `endpoint`.
pub fn connector_options(service: &str, endpoint: &str) -> ConnectorOptions {
    ConnectorOptions::new(vec![route(service, endpoint)])
}

/// A connector with default options and one route, to `service` on the slice's endpoint.
pub fn connector_for(slice: &Slice, service: &str) -> Connector {
    Connector::new(
        slice.client.clone(),
        connector_options(service, &slice.endpoint),
    )
}

/// A client handler that declares the tasks extension when `tasks` says so.
pub fn client_config(tasks: bool) -> ClientConfig {
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(
        capabilities,
        Implementation::new("durable-mcp-conformance", env!("CARGO_PKG_VERSION")),
    )
}

/// A client handler that declares the tasks extension.
pub fn tasks_client_config() -> ClientConfig {
    client_config(true)
}

/// Serves `connector` over a fresh in-memory pipe of `buffer` bytes (on a task of the calling
/// runtime, until the other end closes) and answers the client's end.
pub fn pipe(connector: Connector, buffer: usize) -> tokio::io::DuplexStream {
    let (server_side, client_side) = tokio::io::duplex(buffer);
    tokio::spawn(async move {
        match connector.serve(tokio::io::split(server_side)).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::warn!(error = %e, "the connector did not serve the pipe"),
        }
    });
    client_side
}

/// Serves `connector` over an in-memory pipe and connects `client` (an rmcp client handler:
/// `()` or a `ClientConfig`) to it with the initialize handshake.
pub async fn serve_in_memory<C: rmcp::Service<RoleClient>>(
    connector: Connector,
    client: C,
) -> anyhow::Result<McpClient<C>> {
    client
        .serve(tokio::io::split(pipe(connector, 1 << 20)))
        .await
        .context("MCP handshake with the connector over an in-memory pipe")
}

/// A plain rmcp client talking to `connector` over an in-memory pipe.
pub async fn client_for(connector: Connector) -> anyhow::Result<McpClient> {
    serve_in_memory(connector, ()).await
}

/// An rmcp client that declares the tasks extension, over an in-memory pipe.
pub async fn task_client_for(connector: Connector) -> anyhow::Result<McpClient<ClientConfig>> {
    serve_in_memory(connector, tasks_client_config()).await
}

/// A raw JSON-RPC client (no MCP SDK, no capabilities) reading the bytes `connector` writes
/// over a fresh in-memory pipe.
pub async fn raw_pipe_client(connector: Connector) -> anyhow::Result<RawStdioClient> {
    let (read, write) = tokio::io::split(pipe(connector, 1 << 22));
    RawStdioClient::over(read, write).await
}

/// [`HttpOptions`] on a free loopback port.
pub fn loopback_http_options() -> HttpOptions {
    HttpOptions::new(([127, 0, 0, 1], 0).into())
}

/// Serves `connector` over Streamable HTTP (the library's `serve_connector_http`) until the returned
/// token is cancelled.
pub async fn serve_connector_http(
    connector: Connector,
    options: HttpOptions,
) -> anyhow::Result<(HttpServerHandle, CancellationToken)> {
    let shutdown = CancellationToken::new();
    let server = http::serve_connector_http(connector, options, shutdown.clone())
        .await
        .context("the connector serves Streamable HTTP")?;
    Ok((server, shutdown))
}

/// An older (session) rmcp client over Streamable HTTP: the initialize handshake, then an
/// `Mcp-Session-Id`.
pub async fn session_http_client<C: rmcp::Service<RoleClient>>(
    url: &str,
    client: C,
) -> anyhow::Result<McpClient<C>> {
    client
        .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .with_context(|| format!("MCP session handshake with {url}"))
}

/// An older (session) rmcp client over Streamable HTTP whose connections come from the local
/// address `from` (a loopback one, `127.0.0.2`, to be another address to a loopback server),
/// each request carrying `X-Forwarded-For: forwarded_for` when given (a reverse proxy at
/// `from`, R-CON-50).
pub async fn session_http_client_from<C: rmcp::Service<RoleClient>>(
    url: &str,
    (from, forwarded_for): (std::net::IpAddr, Option<&str>),
    client: C,
) -> anyhow::Result<McpClient<C>> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(value) = forwarded_for {
        let value = value.parse().context("an X-Forwarded-For value")?;
        headers.insert("x-forwarded-for", value);
    }
    let http = reqwest::Client::builder()
        .local_address(from)
        .default_headers(headers)
        .build()
        .context("an HTTP client bound to a local address")?;
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        );
    client
        .serve(StreamableHttpClientTransport::with_client(http, config))
        .await
        .with_context(|| format!("MCP session handshake with {url} from {from}"))
}

/// A current rmcp client over Streamable HTTP: `server/discover`, then stateless 2026-07-28
/// requests carrying their protocol version and capabilities (those of `client`, e.g. a
/// `ClientConfig` declaring the tasks extension) in `_meta`.
pub async fn stateless_http_client<C: rmcp::Service<RoleClient>>(
    url: &str,
    client: C,
) -> anyhow::Result<McpClient<C>> {
    client
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.to_owned()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .with_context(|| format!("server/discover with {url}"))
}

/// A client handler that declares the elicitation capability (a 2026-07-28 caller's per-request
/// capabilities, R-CON-44), and the tasks extension when `tasks` says so.
pub fn elicitation_client_config(tasks: bool) -> ClientConfig {
    let mut config = client_config(tasks);
    config.capabilities.elicitation = serde_json::from_value(serde_json::json!({})).ok();
    config
}
