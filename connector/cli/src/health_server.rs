//! `durable-mcp-proxy --health-addr`: `GET /healthz` (alive: `200 ok`) and `GET /readyz`
//! (200 or 503 with the JSON report of [`ProxyHealth::readiness`]) on a listener of their own
//! (R-RUN-5), under the connector's default connection caps. No token: it reveals only
//! upstream service names and states.

use std::net::SocketAddr;

use anyhow::Context as _;
use durable_mcp_connector::listener::{self, ConnectionLimits};
use durable_mcp_proxy::ProxyHealth;
use tokio_util::sync::CancellationToken;

/// What the proxy prints on stderr once its health listener is bound; its base URL follows.
pub const HEALTH_LISTENING: &str = "durable-mcp-proxy health on ";

/// Binds `addr` (a clear error naming `--health-addr` when it cannot) and serves the two paths
/// until `stop`; answers the bound address.
pub async fn serve_proxy_health(
    addr: SocketAddr,
    health: ProxyHealth,
    stop: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let tcp = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "binding the health listener on {addr}: choose another --health-addr (or [health] addr)"
        )
    })?;
    let bound = tcp.local_addr()?;
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || readyz(health.clone())),
        );
    tokio::spawn(listener::serve(tcp, app, ConnectionLimits::default(), stop));
    Ok(bound)
}

async fn readyz(health: ProxyHealth) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
    let report = health.readiness().await;
    durable_mcp_connector::health::answer(report.ready, report.body)
}
