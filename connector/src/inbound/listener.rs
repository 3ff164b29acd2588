//! The HTTP connector's accept loop (R-CON-19), in place of `axum::serve`, which sets no
//! header-read timeout and caps no connections: a client that sends its request headers a
//! byte at a time (slowloris) or opens connections and never speaks used to be held forever.
//!
//! - Each connection must send a request's headers within [`ConnectionLimits::header_read`];
//!   hyper's timer runs whenever the connection waits for a request head, so a keep-alive
//!   connection idle between requests is closed after the same time. Response streams (a
//!   session's event stream, a long call's answer) are not reads and are never cut.
//! - At most [`ConnectionLimits::max_connections`] connections are served at once; further
//!   ones wait in the kernel's accept queue until one closes.
//! - Shutdown stops accepting, and the returned future ends when every connection has closed
//!   (hyper's graceful shutdown: idle keep-alive connections close at once, busy ones after
//!   their response).

use std::{sync::Arc, time::Duration};

use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Bounds on the connections the HTTP connector serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a connection has to send a request's headers, also the idle time after which a
    /// keep-alive connection is closed.
    pub header_read: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Default [`ConnectionLimits::header_read`]: generous for a slow client on a slow link,
/// short enough that idle and stalled connections do not pile up.
pub const DEFAULT_HEADER_READ: Duration = Duration::from_secs(30);
/// Default [`ConnectionLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read: DEFAULT_HEADER_READ,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `app` on `listener` within `limits` until `stop` is cancelled, then until every
/// connection has closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
            drop(slot);
        });
    }
    graceful.shutdown().await;
}
