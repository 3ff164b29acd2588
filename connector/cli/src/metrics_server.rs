//! `--metrics-addr` of both binaries: `GET /metrics`, Prometheus (OpenMetrics) text, on a
//! listener of its own (R-RUN-6), under the connector's default connection caps. No token: the
//! metrics carry no argument, task ID or caller identity; listen where only the scraper reaches.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use durable_mcp_connector::listener::{self, ConnectionLimits};
use durable_mcp_connector::metrics::CONTENT_TYPE;
use tokio_util::sync::CancellationToken;

/// What a binary prints on stderr once its metrics listener is bound; its base URL follows.
pub const METRICS_LISTENING: &str = "metrics on ";

/// Binds `addr` (a clear error naming `flag` when it cannot) and serves `encode`'s text at
/// `/metrics` until `stop`; answers the bound address.
pub async fn serve_metrics(
    addr: SocketAddr,
    flag: &str,
    encode: Arc<dyn Fn() -> String + Send + Sync>,
    stop: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let tcp = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("binding the metrics listener on {addr}: choose another {flag}")
    })?;
    let bound = tcp.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = encode();
            async move { ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text) }
        }),
    );
    tokio::spawn(listener::serve(tcp, app, ConnectionLimits::default(), stop));
    Ok(bound)
}
