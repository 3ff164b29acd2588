//! `durable-mcp-proxy`: fronts unchanged MCP servers as Temporal Nexus services; every tool
//! call runs in a standalone Activity.

use clap::Parser;
use durable_mcp_cli::health_server::{HEALTH_LISTENING, serve_proxy_health};
use durable_mcp_cli::metrics_server::{METRICS_LISTENING, serve_metrics};
use durable_mcp_cli::proxy_config::{self, ProxyFlags};
use durable_mcp_cli::traces::install_if_asked;
use durable_mcp_proxy::{ProxyHealth, config::ProxyConfig, run_proxy_with_health};
use durable_mcp_runtime::temporal;
use tokio_util::sync::CancellationToken;
use tracing::info;

fn main() -> anyhow::Result<()> {
    let flags = ProxyFlags::parse();
    // Logs go to stderr, without MCP message contents (R-CON-33).
    durable_mcp_cli::logs::init_stderr_logging("info", flags.log_format);
    // Stdio upstreams run as our user: they must not read our environment or memory (R-PRX-11).
    durable_mcp_proxy::child::refuse_inspection();
    // The command line is readable by every local process, stdio upstreams included.
    if let Some(key) = &flags.temporal.api_key {
        durable_mcp_proxy::child::hide_in_own_command_line(key);
    }
    let config = proxy_config::load(&flags.config)?;
    // Read before connecting to anything, and by --check too (R-PRX-35).
    let state_keys = durable_mcp_proxy::state_key::StateKeys::from_env()?;
    if flags.check {
        println!("{}", proxy_config::check_report(&flags.config, &config));
        return Ok(());
    }
    let settings = proxy_config::temporal_settings(&flags.temporal, &config);
    let listeners = Listeners {
        health: proxy_config::health_addr(&flags, &config),
        metrics: proxy_config::metrics_addr(&flags, &config),
        otlp_endpoint: proxy_config::otlp_endpoint(&flags, &config),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config, settings, listeners, state_keys))
}

/// Where the proxy's own listeners go, if anywhere.
struct Listeners {
    /// `/healthz` and `/readyz` (R-RUN-5).
    health: Option<std::net::SocketAddr>,
    /// `/metrics` (R-RUN-6).
    metrics: Option<std::net::SocketAddr>,
    /// Where spans go (R-RUN-9).
    otlp_endpoint: Option<String>,
}

/// Connects (R-RUN-1), serves `/healthz` and `/readyz` (R-RUN-5) and `/metrics` (R-RUN-6)
/// where `listeners` say and runs the proxy until SIGINT or SIGTERM.
async fn serve(
    config: ProxyConfig,
    settings: temporal::ConnectionSettings,
    listeners: Listeners,
    state_keys: durable_mcp_proxy::state_key::StateKeys,
) -> anyhow::Result<()> {
    let traces = install_if_asked(listeners.otlp_endpoint.as_deref(), "durable-mcp-proxy")?;
    let identity = durable_mcp_runtime::nexus::worker::default_identity();
    let temporal::TemporalConnection {
        connection,
        namespace,
    } = temporal::connect(&settings, &identity).await?;
    let codec = proxy_config::codec(&config, &namespace)?;
    let mut options = proxy_config::proxy_options(&config, namespace, codec);
    options.state_keys = state_keys;
    let health = ProxyHealth::new(connection.clone());
    let health_stop = CancellationToken::new();
    if let Some(addr) = listeners.metrics {
        let encode = std::sync::Arc::new(|| durable_mcp_proxy::metrics::global().encode());
        let flag = "--metrics-addr (or [metrics] addr)";
        let bound = serve_metrics(addr, flag, encode, health_stop.clone()).await?;
        eprintln!("durable-mcp-proxy {METRICS_LISTENING}http://{bound}");
    }
    if let Some(addr) = listeners.health {
        let bound = serve_proxy_health(addr, health.clone(), health_stop.clone()).await?;
        // One line on stderr that scripts (and tests) can read the address from.
        eprintln!("{HEALTH_LISTENING}http://{bound}");
    }
    let shutdown = cancel_on_signal();
    let ran = run_proxy_with_health(connection, options, config.upstreams, shutdown, health).await;
    health_stop.cancel();
    durable_mcp_cli::traces::flush(traces).await;
    ran?;
    Ok(())
}

/// A token cancelled on SIGINT or SIGTERM.
fn cancel_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        info!("interrupt received; shutting down (in-flight calls resume on another worker)");
        on_signal.cancel();
    });
    shutdown
}
