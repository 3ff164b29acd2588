//! Requests per MCP session per minute (R-CON-38).
//!
//! rmcp's session manager keeps a session request's events (typed copies, for a `GET` with
//! `Last-Event-ID`) while the request runs and drops them with its answer, but a request the
//! client cancelled before its answer keeps them for [`WINDOW`], with no count bound and no hook
//! to evict them. So a session starts at most [`RequestsPerSession::cap`] requests per window;
//! a request over it is answered with a JSON-RPC error naming
//! `--max-requests-per-session-minute` and never reaches rmcp, which then holds at most twice
//! the cap (two windows overlap the last minute) plus the session's running requests.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{Method, header::CONTENT_TYPE},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
use rmcp::transport::streamable_http_server::session::local::SessionConfig;
use serde_json::{Value, json};

use crate::as_written_http::session_of;

/// How long a window lasts: as long as rmcp keeps a completed request's events.
pub const WINDOW: Duration = SessionConfig::DEFAULT_COMPLETED_CACHE_TTL;

/// Default cap: ten requests a second on average, far more than an agent's session sends.
pub const DEFAULT_REQUESTS_PER_SESSION_MINUTE: usize = 600;

/// Sessions counted at once before stale ones are forgotten (rmcp's sessions are capped at
/// [`crate::auth::MAX_SESSIONS`]; ids that name no session are forgotten on their 404).
const MAX_TRACKED: usize = 2 * crate::auth::MAX_SESSIONS;

/// A session's window: when it started and how many requests it admitted.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    count: usize,
}

/// Each session's requests in its current window.
#[derive(Debug)]
pub struct RequestsPerSession {
    cap: usize,
    windows: Mutex<HashMap<String, Window>>,
}

impl RequestsPerSession {
    /// At most `cap` requests per session per [`WINDOW`]; 0 for no such cap.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Counts one request of `session` at `now`, unless the session admitted `cap` already in
    /// its window (which starts with its first request and lasts [`WINDOW`]).
    pub fn admit(&self, session: &str, now: Instant) -> bool {
        if self.cap == 0 {
            return true;
        }
        let mut windows = self.windows.lock().unwrap();
        if windows.len() >= MAX_TRACKED && !windows.contains_key(session) {
            forget_stale(&mut windows, now);
        }
        let window = windows.entry(session.to_owned()).or_insert(Window {
            started: now,
            count: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                count: 0,
            };
        }
        if window.count >= self.cap {
            return false;
        }
        window.count += 1;
        true
    }

    /// Forgets `session` (closed, or unknown to rmcp).
    pub fn forget(&self, session: &str) {
        self.windows.lock().unwrap().remove(session);
    }

    /// How many sessions are counted now.
    pub fn tracked(&self) -> usize {
        self.windows.lock().unwrap().len()
    }
}

/// Drops windows that ended; when none did, the oldest one (its session then starts afresh).
fn forget_stale(windows: &mut HashMap<String, Window>, now: Instant) {
    windows.retain(|_, w| now.duration_since(w.started) < WINDOW);
    if windows.len() >= MAX_TRACKED
        && let Some(oldest) = windows
            .iter()
            .min_by_key(|(_, w)| w.started)
            .map(|(id, _)| id.clone())
    {
        windows.remove(&oldest);
    }
}

/// Axum middleware, inside the body read (the body is whole): a session's POST that carries a
/// JSON-RPC request counts against its session's cap; over it the request is answered with a
/// JSON-RPC error naming the flag and rmcp never sees it. Notifications and responses, and
/// requests without a session (rmcp keeps nothing of those), pass uncounted.
pub async fn limit_session_requests(
    limits: std::sync::Arc<RequestsPerSession>,
    request: Request,
    next: Next,
) -> Response {
    let session = session_of(request.headers());
    let (Some(session), true, true) = (session, request.method() == Method::POST, limits.cap != 0)
    else {
        return forget_closed(&limits, request, next).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "the request body broke off",
        )
            .into_response();
    };
    if let Some(id) = request_id(&bytes)
        && !limits.admit(&session, Instant::now())
    {
        tracing::debug!(
            cap = limits.cap,
            "refused a session request: the session is over its requests per minute"
        );
        return refusal(id, limits.cap);
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if session_unknown(&response) {
        limits.forget(&session);
    }
    response
}

/// Whether rmcp answered that it knows no such session: a 404 that is not a JSON-RPC answer
/// (an unknown method is a 404 too, on the 2026-07-28 path, and forgetting its session's
/// window on it would let a session reset its own count).
fn session_unknown(response: &Response) -> bool {
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json") || t.starts_with("text/event-stream"));
    response.status() == axum::http::StatusCode::NOT_FOUND && !json
}

/// Passes a request that is not counted on; a `DELETE` that closed its session forgets it
/// (one rmcp refused leaves the session open, and its window counting).
async fn forget_closed(limits: &RequestsPerSession, request: Request, next: Next) -> Response {
    let closing = (request.method() == Method::DELETE)
        .then(|| session_of(request.headers()))
        .flatten();
    let response = next.run(request).await;
    if let Some(session) = closing
        && (response.status().is_success() || session_unknown(&response))
    {
        limits.forget(&session);
    }
    response
}

/// The id of the JSON-RPC request in `body` (a message with `method` and `id`; in a batch, the
/// first request's id, or `null`); `None` for notifications, responses and anything else.
fn request_id(body: &Bytes) -> Option<Value> {
    let is_request = |m: &Value| m.get("method").is_some() && m.get("id").is_some();
    match serde_json::from_slice::<Value>(body).ok()? {
        Value::Array(batch) => batch.iter().any(is_request).then_some(Value::Null),
        message if is_request(&message) => message.get("id").cloned(),
        _ => None,
    }
}

/// The JSON-RPC error a request over its session's cap gets (HTTP 200, so that MCP clients
/// show the message rather than only a status).
fn refusal(id: Value, cap: usize) -> Response {
    (
        [(CONTENT_TYPE, "application/json")],
        refusal_body(id, cap).to_string(),
    )
        .into_response()
}

/// The JSON-RPC error of [`refusal`].
fn refusal_body(id: Value, cap: usize) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": format!(
                "this session sent more than {cap} requests in the last minute \
                 (--max-requests-per-session-minute {cap}); nothing was started. Wait a \
                 minute and retry, or ask the operator to raise \
                 --max-requests-per-session-minute"
            ),
            "data": {"maxRequestsPerSessionMinute": cap},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_gets_its_cap_per_window_and_others_are_untouched() {
        let limits = RequestsPerSession::new(3);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limits.admit("a", start));
        }
        assert!(!limits.admit("a", start + Duration::from_secs(59)), "4th");
        assert!(limits.admit("b", start), "another session is untouched");
        assert!(limits.admit("a", start + WINDOW), "a new window");
        limits.forget("a");
        assert_eq!(limits.tracked(), 1);
        let unlimited = RequestsPerSession::new(0);
        assert!((0..10_000).all(|_| unlimited.admit("a", start)));
        assert_eq!(unlimited.tracked(), 0, "0 is no cap and counts nothing");
    }

    #[test]
    fn the_table_forgets_ended_windows_then_the_oldest() {
        let limits = RequestsPerSession::new(1);
        let start = Instant::now();
        for i in 0..MAX_TRACKED {
            limits.admit(&i.to_string(), start + Duration::from_millis(i as u64));
        }
        assert!(limits.admit("new", start + Duration::from_secs(1)));
        assert_eq!(limits.tracked(), MAX_TRACKED, "the oldest went");
        assert!(
            limits.admit("0", start + Duration::from_secs(1)),
            "forgotten"
        );
        assert!(limits.admit("late", start + WINDOW + Duration::from_secs(30)));
        assert!(limits.tracked() < MAX_TRACKED, "ended windows went");
    }

    #[test]
    fn only_requests_count_and_the_refusal_names_the_flag() {
        let id = |s: &str| request_id(&Bytes::from(s.to_owned()));
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#),
            Some(json!(7))
        );
        assert_eq!(id(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), None);
        assert_eq!(id(r#"[{"id":1,"method":"a"}]"#), Some(Value::Null));
        assert_eq!(id("not json"), None);
        let refused = refusal_body(json!("r1"), 5);
        assert_eq!(refused["id"], "r1");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("--max-requests-per-session-minute 5"),
            "{message}"
        );
        assert_eq!(refused["error"]["data"]["maxRequestsPerSessionMinute"], 5);
        assert_eq!(refusal(json!(1), 5).status(), 200);
    }
}

/// Property tests: a body of any shape names its request's id, or none, and panics nothing
/// (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{body, envelope};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_body_names_its_requests_id_or_none(b in body(), message in envelope()) {
            let _ = request_id(&Bytes::from(b));
            let id = request_id(&Bytes::from(message.to_string()));
            let is_request = message.get("method").is_some() && message.get("id").is_some();
            prop_assert_eq!(id, is_request.then(|| message.get("id").cloned()).flatten());
        }
    }
}
