//! The HTTP face of inbound auth: the bearer check in front of the MCP endpoint, the
//! `WWW-Authenticate` challenges that send clients to the metadata, and the public RFC 9728
//! metadata document.

use std::sync::Arc;

use axum::{
    extract::Request,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{fair::Counts, listener::ConnectionOwner, task_ref::CallerScope};

use super::{
    config::AuthConfig,
    keys::KeySource,
    sessions::{InUse, SessionOwners},
    token::{AuthError, GrantedScopes, VerifiedCaller, bearer_token, key_id, verify},
};

/// Default for [`Authenticator::with_connections_per_caller`]
/// (`--http-max-connections-per-caller`): a sixteenth of the default connection cap.
pub const DEFAULT_CONNECTIONS_PER_CALLER: usize = 64;

/// Checks bearer tokens for one protected resource. Cheap to share behind an `Arc`.
pub struct Authenticator {
    config: AuthConfig,
    keys: Arc<KeySource>,
    /// `Mcp-Session-Id` -> the caller that opened the session. A session id is a handle to
    /// the session's streams and requests, so only its owner may use it, whatever other valid
    /// token comes with it.
    sessions: Arc<std::sync::Mutex<SessionOwners>>,
    /// Connections each caller holds, at most `connections_per_caller` (0: no cap, R-CON-38).
    connections: Arc<Counts<CallerScope>>,
    connections_per_caller: usize,
    /// Where its refusals are counted (R-RUN-6).
    metrics: Option<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(config: AuthConfig) -> Self {
        let keys = Arc::new(KeySource::new(&config.issuer, config.jwks_uri.clone()));
        Self {
            config,
            keys,
            sessions: Default::default(),
            connections: Arc::default(),
            connections_per_caller: DEFAULT_CONNECTIONS_PER_CALLER,
            metrics: None,
        }
    }

    /// Counts its refusals in `metrics` (R-RUN-6), by reason and by the cap's flag.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// At most `per_caller` HTTP connections serving one caller at once (0: no such cap); a
    /// request on one more gets 503 naming the flag, and its connection is closed (R-CON-38).
    pub fn with_connections_per_caller(mut self, per_caller: usize) -> Self {
        self.connections_per_caller = per_caller;
        self
    }

    /// At most `per_caller` MCP sessions per caller; opening one more closes that caller's
    /// longest idle, or is refused when none is idle (R-CON-28).
    pub fn with_sessions_per_caller(self, per_caller: usize) -> Self {
        let owners = SessionOwners::default().with_per_caller(per_caller);
        *self.sessions.lock().unwrap() = owners;
        self
    }

    /// The table of who opened which MCP session, which the MCP server's session manager
    /// fills as it makes sessions and empties as it closes them (R-CON-28).
    pub(crate) fn session_table(&self) -> Arc<std::sync::Mutex<SessionOwners>> {
        self.sessions.clone()
    }

    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// Fetches the issuer's keys once, so a wrong issuer or `jwks_uri` shows at startup.
    pub async fn preload(&self) -> Result<(), String> {
        self.keys.keys(None).await.map(|_| ())
    }

    /// Verifies the `Authorization` header value.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<VerifiedCaller, AuthError> {
        let token = bearer_token(authorization)?;
        let kid = key_id(token)?;
        let keys = self
            .keys
            .keys(kid.as_deref())
            .await
            .map_err(AuthError::KeysUnavailable)?;
        verify(token, &keys, &self.config)
    }

    /// The RFC 9728 protected-resource metadata.
    pub fn metadata(&self) -> Value {
        let mut doc = serde_json::Map::new();
        doc.insert("resource".into(), json!(self.config.resource.as_str()));
        doc.insert("authorization_servers".into(), json!([self.config.issuer]));
        doc.insert("bearer_methods_supported".into(), json!(["header"]));
        doc.insert("resource_name".into(), json!("durable-mcp connector"));
        if !self.config.required_scopes.is_empty() {
            doc.insert(
                "scopes_supported".into(),
                json!(self.config.required_scopes),
            );
        }
        Value::Object(doc)
    }

    /// The `WWW-Authenticate` value for a refusal (RFC 6750 section 3, RFC 9728 section 5.1).
    pub fn challenge(&self, error: &AuthError) -> String {
        let mut params = vec![format!(
            "resource_metadata=\"{}\"",
            self.config.metadata_url()
        )];
        let scope = self.config.required_scopes.join(" ");
        match error {
            AuthError::Missing | AuthError::KeysUnavailable(_) => {}
            AuthError::Invalid(reason) => {
                params.insert(0, "error=\"invalid_token\"".into());
                params.insert(1, format!("error_description=\"{}\"", quoted(reason)));
            }
            AuthError::InsufficientScope { .. } => {
                params.insert(0, "error=\"insufficient_scope\"".into());
            }
        }
        if !scope.is_empty() {
            params.push(format!("scope=\"{scope}\""));
        }
        format!("Bearer {}", params.join(", "))
    }

    /// The HTTP answer to a refused request.
    pub fn refusal(&self, error: &AuthError) -> Response {
        if let Some(metrics) = &self.metrics {
            metrics.auth_refused(error.reason());
        }
        let (status, code) = match error {
            AuthError::Missing => (StatusCode::UNAUTHORIZED, "invalid_request"),
            AuthError::Invalid(_) => (StatusCode::UNAUTHORIZED, "invalid_token"),
            AuthError::InsufficientScope { .. } => (StatusCode::FORBIDDEN, "insufficient_scope"),
            // Not the client's fault: no challenge that would send it to log in again.
            AuthError::KeysUnavailable(_) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({
                        "error": "temporarily_unavailable",
                        "error_description": "the identity provider's keys are unavailable; try again later",
                    })),
                )
                    .into_response();
            }
        };
        let mut response = (
            status,
            axum::Json(json!({"error": code, "error_description": error.to_string()})),
        )
            .into_response();
        // A reason that cannot be a header value still gets a challenge, without the reason.
        let value = HeaderValue::from_str(&self.challenge(error)).or_else(|_| {
            HeaderValue::from_str(&self.challenge(&AuthError::Invalid(String::new())))
        });
        if let Ok(value) = value {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        // A refused client does not keep its connection (and a place under the connection
        // caps, R-CON-19) for the keep-alive time: it comes back with a token on a new one.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

/// Keeps a challenge parameter a valid quoted-string.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == '"' || c == '\\' { '\'' } else { c })
        .collect()
}

/// The MCP session header.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// Middleware: lets a request through only with a valid token, as the token's
/// [`CallerScope`] in the request extensions, and without its
/// `Authorization` header. A session opened by one caller answers any other caller as an
/// unknown session (404), so a leaked session id cannot be used to read, resume, cancel or close
/// someone else's calls.
pub async fn require_bearer(
    auth: Arc<Authenticator>,
    mut request: Request,
    next: Next,
) -> Response {
    let (caller, granted) = match auth.authenticate_request(request.headers()).await {
        Ok(verified) => verified,
        Err(refusal) => return refusal,
    };
    if let Some(refusal) = auth.claim_connection(&request, &caller) {
        return refusal;
    }
    let session = header_text(request.headers(), SESSION_HEADER);
    // The session is busy (never evicted) until the response, a stream too, ends (R-CON-28).
    let in_use = match &session {
        Some(id) => match InUse::begin(&auth.sessions, id, Some(&caller)) {
            Some(in_use) => Some(in_use),
            None => {
                tracing::debug!(
                    "a session id that is not this caller's (another's, or unknown here); answered as unknown"
                );
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
        },
        None => None,
    };
    request.headers_mut().remove(header::AUTHORIZATION);
    request.extensions_mut().insert(caller);
    request.extensions_mut().insert(granted);
    // A session leaves the table when rmcp closes it (the session manager forgets it,
    // R-CON-28), never on an answer: a DELETE rmcp refused leaves it open there.
    let response = next.run(request).await;
    crate::listener::hold_until_body_ends(response, in_use)
}

impl Authenticator {
    /// The caller and scopes of the bearer token in a request's `headers`, or the refusal to
    /// answer with.
    async fn authenticate_request(
        &self,
        headers: &HeaderMap,
    ) -> Result<(CallerScope, GrantedScopes), Response> {
        let header = match headers.get(header::AUTHORIZATION).map(|v| v.to_str()) {
            None => None,
            Some(Ok(value)) => Some(value),
            Some(Err(_)) => {
                return Err(self.refusal(&AuthError::Invalid(
                    "the Authorization header is not text".into(),
                )));
            }
        };
        match self.authenticate(header).await {
            Ok(verified) => Ok((verified.scope(), GrantedScopes(verified.scopes))),
            Err(error) => {
                match &error {
                    AuthError::KeysUnavailable(_) => tracing::warn!(%error, "request refused"),
                    // Refusals are routine (and anyone can cause them): not worth an info line each.
                    _ => tracing::debug!(%error, "request refused"),
                }
                Err(self.refusal(&error))
            }
        }
    }

    /// Counts the request's connection as one of `caller`'s (R-CON-38); the refusal when the
    /// caller holds its share of connections already.
    fn claim_connection(&self, request: &Request, caller: &CallerScope) -> Option<Response> {
        let owner = request.extensions().get::<Arc<ConnectionOwner>>()?;
        let cap = self.connections_per_caller;
        if owner.claim(&self.connections, caller, cap) {
            return None;
        }
        tracing::debug!(
            cap,
            "refused a request: its caller holds its share of connections"
        );
        if let Some(metrics) = &self.metrics {
            metrics.count_refusal("--http-max-connections-per-caller");
        }
        Some(
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONNECTION, "close"), (header::RETRY_AFTER, "1")],
                format!(
                    "this caller already holds {cap} connections to this connector, its share \
                     (--http-max-connections-per-caller {cap}); reuse or close one, or ask the \
                     operator to raise --http-max-connections-per-caller\n"
                ),
            )
                .into_response(),
        )
    }
}

/// A header's value, when it is text.
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The public metadata document, served without authentication.
pub async fn metadata(auth: Arc<Authenticator>) -> Response {
    (
        [(header::CACHE_CONTROL, "max-age=300")],
        axum::Json(auth.metadata()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_by_reason_without_the_token_or_its_fault() {
        let config = AuthConfig::parse(
            "auth:\n  resource: https://mcp.example.com/mcp\n  issuer: https://idp.example.com/\n",
        )
        .unwrap();
        let metrics = crate::metrics::Metrics::new();
        let auth = Authenticator::new(config).with_metrics(metrics.clone());
        assert_eq!(auth.refusal(&AuthError::Missing).status(), 401);
        let invalid = AuthError::Invalid("secret-token-detail".into());
        assert_eq!(auth.refusal(&invalid).status(), 401);
        let text = metrics.encode();
        for reason in ["missing_token", "invalid_token"] {
            let line =
                format!("durable_mcp_connector_auth_refusals_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&line), "{line} missing from {text}");
        }
        assert!(!text.contains("secret-token-detail"), "{text}");
    }
}
