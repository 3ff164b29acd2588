//! rmcp's session manager, counted where sessions are made (R-CON-28, R-CON-38).
//!
//! [`CountedSessions`] wraps rmcp's [`LocalSessionManager`]: every session rmcp creates is
//! entered in a [`SessionTable`] in `create_session`, under the share of the request that
//! creates it, and leaves it in `close_session` (a DELETE, an eviction, or the session's end:
//! rmcp closes a session through its manager when the session's worker stops, idle or
//! failed). Counting from the HTTP answer instead missed the sessions of clients that went
//! away before their answer was read: rmcp had made them, nobody counted them.
//!
//! Whose share a new session is comes from the request being served: [`open_sessions_as`],
//! the innermost layer around rmcp's service, runs the request with its share (the verified
//! caller, else the peer address, else none: a library host that inserts neither) in a
//! task-local; nothing is spawned, the request runs where it ran. Over the cap the new session
//! is closed at once and the request answered with 503 naming the flag, as before.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{
    http::{StatusCode, header},
    response::{IntoResponse as _, Response},
};
use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_server::session::{
        ServerSseMessage, SessionId, SessionManager,
        local::{LocalSessionManager, LocalSessionManagerError},
    },
};

use crate::{
    auth::{Opened, Refused, SessionOwners},
    fair::{Share, share_of},
    task_ref::CallerScope,
};

tokio::task_local! {
    /// The share of the request being served, and whether its new session was refused.
    static OPENING: Arc<Opening>;
}

/// Who the request being served opens a session for, and the refusal when it may not.
struct Opening {
    share: Option<Share>,
    refused: Mutex<Option<Refused>>,
}

/// Where sessions are counted: who opened which, at most how many.
pub trait SessionTable: Send + Sync + 'static {
    /// Enters session `id`, opened under `share` (`None`: a request with neither a caller nor
    /// an address); what to close, and whether the new one is refused.
    fn open(&self, id: &str, share: Option<&Share>, now: Instant) -> Opened;
    /// Forgets session `id` (closed).
    fn forget(&self, id: &str);
}

/// The table of inbound auth (R-CON-28): sessions by verified caller. Every request reaching
/// rmcp there carries one; a session opened without one is counted as anonymous, and no
/// verified caller may use it.
impl SessionTable for Mutex<SessionOwners<CallerScope>> {
    fn open(&self, id: &str, share: Option<&Share>, now: Instant) -> Opened {
        let owner = match share {
            Some(Share::Caller(caller)) => caller.clone(),
            _ => CallerScope::Anonymous,
        };
        self.lock().unwrap().open(id, owner, now)
    }

    fn forget(&self, id: &str) {
        self.lock().unwrap().close(id);
    }
}

/// The table without inbound auth (R-CON-38): sessions by address (or by a caller a host
/// inserted); a request with neither counts in the table's total only.
impl SessionTable for Mutex<SessionOwners<Option<Share>>> {
    fn open(&self, id: &str, share: Option<&Share>, now: Instant) -> Opened {
        let mut owners = self.lock().unwrap();
        match share {
            Some(share) => owners.open(id, Some(share.clone()), now),
            None => owners.open_unshared(id, None, now),
        }
    }

    fn forget(&self, id: &str) {
        self.lock().unwrap().close(id);
    }
}

/// rmcp's [`LocalSessionManager`] with every session it makes counted in a [`SessionTable`].
pub struct CountedSessions {
    inner: Arc<LocalSessionManager>,
    table: Arc<dyn SessionTable>,
    /// Where refused sessions are counted (R-RUN-6).
    metrics: Option<crate::metrics::Metrics>,
}

/// The `cap_refusals_total` reason of a refused session (R-RUN-6): the flag that sets the
/// share, or `session_table_full` for the connector's fixed most.
pub fn refusal_reason(refused: Refused) -> &'static str {
    match refused {
        Refused::CallerBusy(_) | Refused::NetworkBusy(_) => "--max-sessions-per-caller",
        Refused::TableFull(_) => "session_table_full",
    }
}

impl CountedSessions {
    pub fn new(table: Arc<dyn SessionTable>) -> Self {
        Self {
            inner: Arc::default(),
            table,
            metrics: None,
        }
    }

    /// Counts refused sessions in `metrics` (R-RUN-6).
    pub fn with_metrics(self, metrics: crate::metrics::Metrics) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// How many sessions rmcp holds now.
    pub async fn held(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Closes sessions given up for a new one (or the refused new one), in rmcp.
    fn close_in_rmcp(&self, ids: Vec<String>) {
        if !ids.is_empty() {
            tracing::info!(
                sessions = ids.len(),
                "closing sessions: a caller's idle beyond its share, idle ones, or a refused new one"
            );
        }
        for id in ids {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                let _ = inner.close_session(&SessionId::from(id)).await;
            });
        }
    }
}

/// A session refused (R-CON-28), or rmcp's own error.
#[derive(Debug, thiserror::Error)]
pub enum CountedSessionError {
    #[error("{}", .0.message("this caller"))]
    Refused(Refused),
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
}

impl SessionManager for CountedSessions {
    type Error = CountedSessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let opening = OPENING.try_with(Arc::clone).ok();
        let share = opening.as_ref().and_then(|o| o.share.as_ref());
        let opened = self.table.open(&id, share, Instant::now());
        let refused = opened.refused;
        self.close_in_rmcp(opened.close);
        match refused {
            None => Ok((id, transport)),
            Some(refused) => {
                if let Some(metrics) = &self.metrics {
                    metrics.count_refusal(refusal_reason(refused));
                }
                if let Some(opening) = opening {
                    *opening.refused.lock().unwrap() = Some(refused);
                }
                Err(CountedSessionError::Refused(refused))
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.table.forget(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }
}

/// Middleware, innermost around rmcp's service: runs the request with its share, so a session
/// it opens is counted under it; answers 503 naming the flag when that session was refused.
pub async fn open_sessions_as(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let opening = Arc::new(Opening {
        share: share_of(request.extensions()),
        refused: Mutex::new(None),
    });
    let response = OPENING.scope(opening.clone(), next.run(request)).await;
    let refused = opening.refused.lock().unwrap().take();
    match refused {
        None => response,
        Some(refused) => {
            let whose = match opening.share {
                Some(Share::Address(_)) => "this address",
                _ => "this caller",
            };
            refusal(refused, whose)
        }
    }
}

/// The 503 a refused new session gets (R-CON-28).
fn refusal(refused: Refused, whose: &str) -> Response {
    tracing::info!(?refused, "refused a new MCP session");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "60")],
        refused.message(whose),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn table(per_share: usize, max: usize) -> Arc<Mutex<SessionOwners<Option<Share>>>> {
        let owners = SessionOwners::new(Duration::from_secs(3600), max).with_per_caller(per_share);
        Arc::new(Mutex::new(owners))
    }

    async fn create(sessions: &CountedSessions, share: Option<Share>) -> Result<SessionId, String> {
        let opening = Arc::new(Opening {
            share,
            refused: Mutex::new(None),
        });
        let created = OPENING.scope(opening, sessions.create_session()).await;
        created.map(|(id, _)| id).map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn every_session_rmcp_makes_is_counted_and_closing_forgets_it() {
        let owners = table(2, 3);
        let sessions = CountedSessions::new(owners.clone());
        let address = Share::Address([127, 0, 0, 1].into());
        let first = create(&sessions, Some(address.clone())).await.unwrap();
        create(&sessions, Some(address.clone())).await.unwrap();
        // A third from the same address gives up its longest idle (the first).
        create(&sessions, Some(address.clone())).await.unwrap();
        assert_eq!(owners.lock().unwrap().len(), 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !sessions.has_session(&first).await.unwrap(),
            "closed in rmcp"
        );
        // Without a share (a host that inserts no address) only the total binds.
        create(&sessions, None).await.unwrap();
        let refused = create(&sessions, None).await.unwrap_err();
        assert!(refused.contains("holds 3 sessions"), "{refused}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            sessions.held().await,
            3,
            "the refused one is gone from rmcp"
        );
        let some = owners.lock().unwrap().len();
        assert_eq!(some, 3);
        let any = sessions.inner.sessions.read().await.keys().next().cloned();
        sessions.close_session(&any.unwrap()).await.unwrap();
        assert_eq!(owners.lock().unwrap().len(), 2, "closing forgets");
    }

    #[tokio::test]
    async fn refused_sessions_are_counted_by_the_cap_that_refused_them() {
        let metrics = crate::metrics::Metrics::new();
        let sessions = CountedSessions::new(table(2, 1)).with_metrics(metrics.clone());
        create(&sessions, None).await.unwrap();
        create(&sessions, None).await.unwrap_err();
        let line = r#"durable_mcp_connector_cap_refusals_total{reason="session_table_full"} 1"#;
        assert!(metrics.encode().contains(line), "{}", metrics.encode());
        let per_caller = "--max-sessions-per-caller";
        assert_eq!(refusal_reason(Refused::CallerBusy(2)), per_caller);
        assert_eq!(refusal_reason(Refused::NetworkBusy(8)), per_caller);
    }
}
