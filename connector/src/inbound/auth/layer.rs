//! The HTTP face of inbound auth: the bearer check in front of the MCP endpoint, the
//! `WWW-Authenticate` challenges that send clients to the metadata, and the public RFC 9728
//! metadata document.

use std::sync::Arc;

use axum::{
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    config::AuthConfig,
    keys::KeySource,
    token::{AuthError, VerifiedCaller, bearer_token, key_id, verify},
};

/// Checks bearer tokens for one protected resource. Cheap to share behind an `Arc`.
pub struct Authenticator {
    config: AuthConfig,
    keys: KeySource,
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
        let keys = KeySource::new(&config.issuer, config.jwks_uri.clone());
        Self { config, keys }
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
        let mut doc = json!({
            "resource": self.config.resource.as_str(),
            "authorization_servers": [self.config.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "durable-mcp connector",
        });
        if !self.config.required_scopes.is_empty() {
            doc["scopes_supported"] = json!(self.config.required_scopes);
        }
        doc
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
        if let Ok(value) = HeaderValue::from_str(&self.challenge(error)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
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

/// Middleware: lets a request through only with a valid token, as the token's
/// [`CallerScope`](crate::inbound::task_ref::CallerScope) in the request extensions, and
/// without its `Authorization` header.
pub async fn require_bearer(
    auth: Arc<Authenticator>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = match request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str())
    {
        None => None,
        Some(Ok(value)) => Some(value),
        Some(Err(_)) => {
            return auth.refusal(&AuthError::Invalid(
                "the Authorization header is not text".into(),
            ));
        }
    };
    match auth.authenticate(header).await {
        Ok(caller) => {
            request.headers_mut().remove(header::AUTHORIZATION);
            request.extensions_mut().insert(caller.scope());
            next.run(request).await
        }
        Err(error) => {
            match &error {
                AuthError::Missing => tracing::debug!("request without a bearer token refused"),
                AuthError::KeysUnavailable(_) => tracing::warn!(%error, "request refused"),
                _ => tracing::info!(%error, "request refused"),
            }
            auth.refusal(&error)
        }
    }
}

/// The public metadata document, served without authentication.
pub async fn metadata(auth: Arc<Authenticator>) -> Response {
    (
        [(header::CACHE_CONTROL, "max-age=300")],
        axum::Json(auth.metadata()),
    )
        .into_response()
}
