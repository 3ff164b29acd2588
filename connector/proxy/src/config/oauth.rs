//! `[upstream.oauth]`: OAuth 2.0 client credentials (RFC 6749 section 4.4) for an HTTP upstream
//! (R-PRX-15). The client secret is read from the environment variable the file names, never
//! written in the file; errors name the field, never a value.

use serde::Deserialize;
use url::Url;

use super::{ConfigError, invalid};
use durable_mcp_runtime::temporal::direct_http::is_loopback;

/// How the proxy gets the bearer token of an HTTP upstream. `Debug` hides the secret.
#[derive(Clone, PartialEq)]
pub struct ClientCredentials {
    /// The authorization server's token endpoint (https, or http on loopback).
    pub token_url: Url,
    pub client_id: String,
    /// The client secret, from the environment variable `client_secret_env` names.
    pub client_secret: String,
    /// Sent space-separated as `scope`; none when empty.
    pub scopes: Vec<String>,
    /// Sent as `audience` (Auth0, Okta and others use it to pick the token's resource).
    pub audience: Option<String>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &super::redacted_url(&self.token_url))
            .field("client_id", &self.client_id)
            .field("client_secret", &"***")
            .field("scopes", &self.scopes)
            .field("audience", &self.audience)
            .finish()
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientCredentials {
    token_url: String,
    client_id: String,
    client_secret_env: String,
    #[serde(default)]
    scopes: Vec<String>,
    audience: Option<String>,
}

/// Validates `[upstream.oauth]`; `at` names a key (`upstream[i].oauth.KEY`).
pub(super) fn client_credentials(
    raw: RawClientCredentials,
    at: &dyn Fn(&str) -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ClientCredentials, ConfigError> {
    let token_url = Url::parse(&raw.token_url)
        .map_err(|e| invalid(at("token_url"), format!("not a valid URL: {e}")))?;
    match token_url.scheme() {
        "https" => {}
        "http" if is_loopback(&token_url) => {}
        _ => {
            return Err(invalid(
                at("token_url"),
                "must be https (http only on a loopback address): the client secret goes there",
            ));
        }
    }
    if raw.client_id.trim().is_empty() {
        return Err(invalid(at("client_id"), "must not be empty"));
    }
    let name = raw.client_secret_env;
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(invalid(
            at("client_secret_env"),
            "must name an environment variable",
        ));
    }
    let client_secret = env(&name).filter(|v| !v.is_empty()).ok_or_else(|| {
        invalid(
            at("client_secret_env"),
            format!("the environment variable {name} is not set (it holds the client secret)"),
        )
    })?;
    for (n, scope) in raw.scopes.iter().enumerate() {
        // RFC 6749 section 3.3: scope tokens are printable ASCII without space, '"' or '\'.
        if scope.is_empty()
            || !scope
                .bytes()
                .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
        {
            return Err(invalid(
                at(&format!("scopes[{n}]")),
                "not an OAuth scope token (printable ASCII, no space, '\"' or '\\')",
            ));
        }
    }
    if raw.audience.as_ref().is_some_and(|a| a.trim().is_empty()) {
        return Err(invalid(at("audience"), "must not be empty (leave it out)"));
    }
    Ok(ClientCredentials {
        token_url,
        client_id: raw.client_id,
        client_secret,
        scopes: raw.scopes,
        audience: raw.audience,
    })
}
