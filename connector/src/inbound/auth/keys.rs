//! The issuer's signing keys (JWKS): found through the issuer's metadata when the
//! configuration names no `jwks_uri`, cached, and refreshed when a token names a key id the
//! cache does not have (key rotation), at most once per [`MIN_REFRESH`].

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use tokio::sync::Mutex;
use url::Url;

/// Cached keys older than this are fetched again.
const MAX_AGE: Duration = Duration::from_secs(600);
/// Unknown key ids never trigger fetches more often than this (a flood of forged tokens must
/// not become a flood of requests to the identity provider).
const MIN_REFRESH: Duration = Duration::from_secs(10);

/// Fetches and caches one issuer's keys.
pub struct KeySource {
    issuer: String,
    configured_jwks_uri: Option<Url>,
    http: reqwest::Client,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    jwks_uri: Option<Url>,
    keys: Option<Arc<JwkSet>>,
    fetched_at: Option<Instant>,
    attempted_at: Option<Instant>,
}

#[derive(Deserialize)]
struct IssuerMetadata {
    jwks_uri: String,
}

impl KeySource {
    pub fn new(issuer: &str, jwks_uri: Option<Url>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("a reqwest client with a timeout always builds");
        Self {
            issuer: issuer.to_owned(),
            configured_jwks_uri: jwks_uri,
            http,
            state: Mutex::default(),
        }
    }

    /// The keys, refreshed when stale or when they lack `kid` (subject to [`MIN_REFRESH`]).
    pub async fn keys(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, String> {
        let mut state = self.state.lock().await;
        let fresh = state.fetched_at.is_some_and(|t| t.elapsed() < MAX_AGE);
        let has_kid = |keys: &JwkSet| kid.is_none_or(|k| keys.find(k).is_some());
        if let Some(keys) = &state.keys
            && fresh
            && has_kid(keys)
        {
            return Ok(keys.clone());
        }
        let may_fetch = state
            .attempted_at
            .is_none_or(|t| t.elapsed() >= MIN_REFRESH);
        if !may_fetch {
            // Too soon to ask again: answer from the cache; an unknown kid then fails verification.
            return state
                .keys
                .clone()
                .ok_or_else(|| "the last attempt to fetch them failed; retrying shortly".into());
        }
        state.attempted_at = Some(Instant::now());
        match self.fetch(&mut state).await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                state.keys = Some(keys.clone());
                state.fetched_at = Some(Instant::now());
                Ok(keys)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "could not fetch the issuer's keys");
                // Keys we had stay good until they are replaced.
                state.keys.clone().ok_or(e)
            }
        }
    }

    async fn fetch(&self, state: &mut State) -> Result<JwkSet, String> {
        let uri = match (&self.configured_jwks_uri, &state.jwks_uri) {
            (Some(u), _) | (None, Some(u)) => u.clone(),
            (None, None) => {
                let u = self.discover().await?;
                state.jwks_uri = Some(u.clone());
                u
            }
        };
        let keys: JwkSet = self.get_json(&uri).await?;
        tracing::debug!(issuer = %self.issuer, keys = keys.keys.len(), "fetched the issuer's keys");
        Ok(keys)
    }

    /// The issuer's `jwks_uri`, from RFC 8414 authorization-server metadata, else OpenID
    /// Connect discovery.
    async fn discover(&self) -> Result<Url, String> {
        let mut errors = Vec::new();
        for url in metadata_urls(&self.issuer)? {
            match self.get_json::<IssuerMetadata>(&url).await {
                Ok(m) => {
                    return Url::parse(&m.jwks_uri)
                        .map_err(|e| format!("{url} names jwks_uri {:?}: {e}", m.jwks_uri));
                }
                Err(e) => errors.push(e),
            }
        }
        Err(format!(
            "no issuer metadata with a jwks_uri ({}); set auth.jwks_uri",
            errors.join("; ")
        ))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &Url) -> Result<T, String> {
        let response = self
            .http
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        response
            .json()
            .await
            .map_err(|e| format!("GET {url}: not the expected JSON: {e}"))
    }
}

/// Where the issuer's metadata may be: RFC 8414 inserts the well-known path before the issuer's
/// path; OpenID Connect Discovery appends it.
pub fn metadata_urls(issuer: &str) -> Result<Vec<Url>, String> {
    let base = Url::parse(issuer).map_err(|e| format!("issuer {issuer:?}: {e}"))?;
    let path = base.path().trim_end_matches('/').to_owned();
    let mut rfc8414 = base.clone();
    rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    let mut oidc = base;
    oidc.set_path(&format!("{path}/.well-known/openid-configuration"));
    Ok(vec![rfc8414, oidc])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_both_specs() {
        let urls = metadata_urls("https://idp.example.com/tenant/").unwrap();
        assert_eq!(
            urls[0].as_str(),
            "https://idp.example.com/.well-known/oauth-authorization-server/tenant"
        );
        assert_eq!(
            urls[1].as_str(),
            "https://idp.example.com/tenant/.well-known/openid-configuration"
        );
        let root = metadata_urls("https://idp.example.com").unwrap();
        assert_eq!(
            root[0].as_str(),
            "https://idp.example.com/.well-known/oauth-authorization-server"
        );
    }
}
