//! The `server/discover` probe's bounded wait (R-PRX-33). A legacy upstream that ignores the
//! probe, rather than answering it with an error, would hold every new connection for rmcp's
//! own probe timeout (10 s) before the `initialize` fallback. [`BoundedProbe`] answers the
//! probe itself, with the error a legacy server gives (-32601), once its wait has passed: rmcp
//! then falls back on the same connection, and the upstream's late answer, if any, is dropped
//! (it would be taken for the answer to `initialize`). That fallback is logged at info, naming
//! the upstream and its `discover_wait`, since a 2026-07-28 server that starts slowly (`npx`,
//! `uvx`) is then quietly served as a legacy one.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError, RoleClient,
    model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use tokio::time::Instant;
use tracing::info;

/// A client transport whose `server/discover` request is answered with -32601 after `wait`
/// when the upstream has not answered it.
pub struct BoundedProbe<T> {
    inner: T,
    wait: Duration,
    /// The upstream's service name, for the log line of a fallback.
    service: String,
    /// The probe waiting for its answer, and until when.
    pending: Option<(RequestId, Instant)>,
    /// A probe answered here: the upstream's own late answer is dropped.
    abandoned: Option<RequestId>,
}

impl<T> BoundedProbe<T> {
    pub fn new(inner: T, wait: Duration, service: &str) -> Self {
        Self {
            inner,
            wait,
            service: service.to_owned(),
            pending: None,
            abandoned: None,
        }
    }

    /// Notes a message the upstream sent: whether it is the late answer to a probe answered
    /// here (to drop).
    fn is_late_answer(&mut self, message: &ServerJsonRpcMessage) -> bool {
        let Some(id) = answered_id(message) else {
            return false;
        };
        if self.pending.as_ref().is_some_and(|(p, _)| *p == id) {
            self.pending = None;
        }
        if self.abandoned.as_ref() == Some(&id) {
            self.abandoned = None;
            info!(upstream = %self.service, "{}", late_note(&self.service, self.wait));
            return true;
        }
        false
    }
}

/// The ID of a `server/discover` request.
fn discover_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::DiscoverRequest(_)) =>
        {
            Some(r.id.clone())
        }
        _ => None,
    }
}

/// The request ID a message answers, if it is an answer.
fn answered_id(message: &ServerJsonRpcMessage) -> Option<RequestId> {
    match message {
        ServerJsonRpcMessage::Response(r) => Some(r.id.clone()),
        ServerJsonRpcMessage::Error(e) => e.id.clone(),
        _ => None,
    }
}

/// The log line of a probe answered here: the upstream is served as a legacy server from now
/// on, and how to give a slow starter more time. Names no command or argument (they may hold
/// secrets).
fn fallback_note(service: &str, wait: Duration) -> String {
    format!(
        "upstream {service:?} did not answer server/discover within its discover_wait of {wait:?}, \
         so it is served as a legacy (2025-11-25, initialize) server on this connection; if it \
         speaks 2026-07-28 and starts slowly (npx, uvx), raise discover_wait (at most 10s) in its \
         [[upstream]] table of proxy.toml"
    )
}

/// The log line of the upstream's late answer to a probe answered here: it does speak
/// 2026-07-28, but too late for this connection.
fn late_note(service: &str, wait: Duration) -> String {
    format!(
        "upstream {service:?} answered server/discover after its discover_wait of {wait:?}: it \
         is served as a legacy server on this connection; raise discover_wait (at most 10s) in \
         its [[upstream]] table of proxy.toml"
    )
}

/// The answer given for a probe the upstream left unanswered: what a legacy server answers to
/// a method it does not know, so rmcp falls back to `initialize`.
fn unanswered(id: RequestId, wait: Duration) -> ServerJsonRpcMessage {
    let message = format!("server/discover was not answered within {wait:?}");
    let error = McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, message, None);
    ServerJsonRpcMessage::error(error, Some(id))
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for BoundedProbe<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = discover_id(&item) {
            self.pending = Some((id, Instant::now() + self.wait));
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = match self.pending.clone() {
                Some((id, until)) => {
                    let received = tokio::select! {
                        m = self.inner.receive() => Some(m),
                        _ = tokio::time::sleep_until(until) => None,
                    };
                    match received {
                        Some(m) => m?,
                        None => {
                            self.pending = None;
                            self.abandoned = Some(id.clone());
                            info!(upstream = %self.service, "{}", fallback_note(&self.service, self.wait));
                            return Some(unanswered(id, self.wait));
                        }
                    }
                }
                None => self.inner.receive().await?,
            };
            if !self.is_late_answer(&message) {
                return Some(message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{DiscoverRequest, DiscoverRequestParams, ServerResult};

    use super::*;

    fn probe(id: i64) -> ClientJsonRpcMessage {
        let discover = DiscoverRequest::new(DiscoverRequestParams {});
        ClientJsonRpcMessage::request(
            ClientRequest::DiscoverRequest(discover),
            RequestId::Number(id),
        )
    }

    #[test]
    fn only_the_discover_request_starts_the_wait() {
        assert_eq!(discover_id(&probe(7)), Some(RequestId::Number(7)));
        let ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(Default::default()),
            RequestId::Number(8),
        );
        assert_eq!(discover_id(&ping), None);
    }

    #[test]
    fn an_unanswered_probe_gets_the_error_a_legacy_server_gives() {
        let answer = unanswered(RequestId::Number(1), Duration::from_secs(3));
        let ServerJsonRpcMessage::Error(e) = &answer else {
            panic!("an error: {answer:?}")
        };
        assert_eq!(e.id, Some(RequestId::Number(1)));
        assert_eq!(e.error.code, rmcp::model::ErrorCode::METHOD_NOT_FOUND);
        assert!(e.error.message.contains("3s"), "{}", e.error.message);
    }

    /// A legacy stdio upstream that never answers `server/discover`: it answers `initialize`
    /// (with instructions, to show it ran) and `tools/list`, and nothing else.
    const IGNORES_DISCOVER: &str = r#"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"server/discover"'*) ;;
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"legacy","version":"1"},"instructions":"legacy handshake"}}\n' "$id" ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
  esac
done
"#;

    #[tokio::test]
    async fn a_stdio_upstream_that_ignores_discover_gets_initialize_after_the_bounded_wait() {
        let wait = Duration::from_millis(1500);
        let mut transport =
            crate::config::TransportConfig::stdio("sh", vec!["-c".into(), IGNORES_DISCOVER.into()]);
        if let crate::config::TransportConfig::Stdio { discover_wait, .. } = &mut transport {
            *discover_wait = Some(wait);
        }
        let client = crate::upstream::UpstreamClient::new("legacy", transport);
        let started = std::time::Instant::now();
        let tools = client.list_tools(Duration::from_secs(30)).await.unwrap();
        let took = started.elapsed();
        assert_eq!(tools[0]["name"], "echo");
        assert_eq!(client.instructions().as_deref(), Some("legacy handshake"));
        // The probe's wait, not rmcp's 10 s.
        assert!(took >= wait && took < Duration::from_secs(6), "{took:?}");
        client.close().await;
    }

    #[test]
    fn a_fallback_is_logged_naming_the_upstream_its_wait_and_how_to_raise_it() {
        for note in [
            fallback_note("everything", Duration::from_secs(3)),
            late_note("everything", Duration::from_secs(3)),
        ] {
            for part in [
                "\"everything\"",
                "discover_wait",
                "3s",
                "10s",
                "proxy.toml",
                "legacy",
            ] {
                assert!(note.contains(part), "{part:?} in {note}");
            }
        }
        assert!(fallback_note("s", Duration::from_secs(3)).contains("npx"));
    }

    #[test]
    fn the_late_answer_to_a_probe_answered_here_is_dropped_once() {
        let mut bounded = BoundedProbe::new((), Duration::from_secs(3), "s");
        bounded.abandoned = Some(RequestId::Number(1));
        let late = ServerJsonRpcMessage::response(ServerResult::empty(()), RequestId::Number(1));
        let other = ServerJsonRpcMessage::response(ServerResult::empty(()), RequestId::Number(2));
        assert!(!bounded.is_late_answer(&other));
        assert!(bounded.is_late_answer(&late));
        assert!(!bounded.is_late_answer(&late), "only once");
    }
}
