//! The proxy on a thread of its own, for tests, benches and the runner.
//!
//! `durable_mcp::proxy::run_proxy`'s future is not `Send` (the SDK activity worker's is not),
//! so it cannot be `tokio::spawn`ed: it runs on a dedicated thread with its own runtime, and is
//! stopped through a cancellation token. One implementation, used by every caller.

use durable_mcp::proxy::{ProxyOptions, UpstreamConfig, run_proxy};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// How the proxy reaches Temporal.
pub enum Connect {
    /// `host:port`, plain gRPC (servers the harness runs).
    Address(String),
    /// Full options, e.g. [`crate::DevServer::connection_options`] of an existing server.
    Options(Box<temporalio_client::ConnectionOptions>),
}

/// A running proxy. Dropping it stops the proxy and waits for its thread.
pub struct ProxyThread {
    shutdown: CancellationToken,
    error: Arc<Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProxyThread {
    /// Connects to the Temporal frontend at `address` (plain gRPC) and runs the proxy until
    /// stopped.
    pub fn start(address: String, options: ProxyOptions, upstreams: Vec<UpstreamConfig>) -> Self {
        Self::start_with(Connect::Address(address), options, upstreams)
    }

    /// Like [`ProxyThread::start`], with full connection options (TLS, API key) for a server
    /// the harness did not start.
    pub fn start_with(
        connect: Connect,
        options: ProxyOptions,
        upstreams: Vec<UpstreamConfig>,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let error = Arc::new(Mutex::new(None));
        let error_out = error.clone();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    *error_out.lock().unwrap() = Some(format!("runtime: {e}"));
                    return;
                }
            };
            let outcome: anyhow::Result<()> = rt.block_on(async move {
                let connection = match connect {
                    Connect::Address(address) => {
                        durable_mcp::temporal::connect_to(&address, "durable-mcp-conformance")
                            .await?
                    }
                    Connect::Options(options) => {
                        temporalio_client::Connection::connect(*options).await?
                    }
                };
                run_proxy(connection, options, upstreams, token).await?;
                Ok(())
            });
            if let Err(e) = outcome {
                *error_out.lock().unwrap() = Some(format!("{e:#}"));
            }
        });
        Self {
            shutdown,
            error,
            thread: Some(thread),
        }
    }

    /// Stops the proxy without blocking the calling runtime (an in-process upstream may run on it).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// Why the proxy stopped on its own, if it did.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap().clone()
    }
}

impl Drop for ProxyThread {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
