//! Log lines without MCP message contents (R-CON-33).
//!
//! rmcp logs whole JSON-RPC messages: every request it serves (a tool call's arguments) and
//! every result at `debug`, every notification it receives (an upstream's log messages and
//! progress, in the proxy) at `info`, and every message again at `trace`. Tool arguments and
//! results are callers' data and may hold their secrets, so the binaries drop those events
//! whatever `RUST_LOG` asks; durable-mcp's own lines name the tool and give sizes instead.

use tracing::{Level, Metadata};
use tracing_subscriber::{
    EnvFilter, filter::FilterFn, layer::SubscriberExt as _, util::SubscriberInitExt as _,
};

/// The fields in which rmcp's events carry a whole message.
const MESSAGE_FIELDS: &[&str] = &["request", "result", "notification", "evt"];

/// Whether an event or span may carry an MCP message's contents: rmcp's with one of
/// [`MESSAGE_FIELDS`], its `response error` lines (an `error` answered under an `id`: the
/// answer may repeat what the caller sent, a 2 MB URI or method name included), and all of
/// rmcp's at `trace` (where it logs each message as it passes).
pub fn carries_message_contents(metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    if target != "rmcp" && !target.starts_with("rmcp::") {
        return false;
    }
    let has = |name: &str| metadata.fields().field(name).is_some();
    *metadata.level() == Level::TRACE
        || MESSAGE_FIELDS.iter().any(|name| has(name))
        || (has("id") && has("error"))
}

/// How log lines are written (`--log-format`, R-RUN-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line (timestamp, level, target, fields), for log shippers.
    Json,
}

/// Installs a binary's logger: `RUST_LOG` (else `default`) on stderr (stdout may be an MCP
/// channel) in `format`, without the events [`carries_message_contents`] names.
pub fn init_stderr_logging(default: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let contents = FilterFn::new(|metadata| !carries_message_contents(metadata));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.finish().with(contents).init(),
        LogFormat::Json => builder.json().finish().with(contents).init(),
    }
    // A panic is logged as these lines are, once, without its message when that may hold input
    // (R-CON-51).
    durable_mcp_runtime::panics::install_hook();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::{Event, Subscriber};
    use tracing_subscriber::{Layer, layer::Context};

    use super::*;

    /// Records the field names of every event that gets through.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let m = event.metadata();
            let mut fields: Vec<_> = m.fields().iter().map(|f| f.name()).collect();
            fields.sort();
            self.0.lock().unwrap().push(format!(
                "{} {} {}",
                m.target(),
                m.level(),
                fields.join(",")
            ));
        }
    }

    #[test]
    fn rmcp_events_that_carry_messages_are_dropped_at_every_level() {
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry()
            .with(seen.clone())
            .with(FilterFn::new(|m| !carries_message_contents(m)));
        tracing::subscriber::with_default(subscriber, || {
            let secret = "s3cret-argument";
            // As rmcp writes them (its service loop and HTTP server).
            tracing::debug!(target: "rmcp::service", id = 1, request = ?secret, "received request");
            tracing::debug!(target: "rmcp::service", id = 1, result = ?secret, "response message");
            tracing::info!(target: "rmcp::service", notification = ?secret, "received notification");
            tracing::trace!(target: "rmcp::service", evt = ?secret, "new event");
            tracing::trace!(target: "rmcp::transport::streamable_http_server::tower", message = ?secret);
            tracing::warn!(target: "rmcp::service", id = 1, error = ?secret, "response error");
            // Kept: rmcp's lines without a message, and everyone else's.
            tracing::info!(target: "rmcp::service", "Service initialized as server");
            tracing::warn!(target: "rmcp::service", id = 1, "Error sending response");
            tracing::error!(target: "rmcp::service", error = "channel closed", "failed to send");
            tracing::debug!(target: "durable_mcp_connector::server", tool = "echo", arguments_bytes = 42, "tool call started");
            tracing::debug!(target: "rmcpx", request = 1, "another crate");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "rmcp::service INFO message",
                "rmcp::service WARN id,message",
                "rmcp::service ERROR error,message",
                "durable_mcp_connector::server DEBUG arguments_bytes,message,tool",
                "rmcpx DEBUG message,request",
            ],
        );
    }
}
