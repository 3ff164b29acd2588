//! The issuer's signing keys (JWKS): found through the issuer's metadata when the
//! configuration names no `jwks_uri`, cached, refreshed in the background when old, and
//! fetched when a token names a key id the cache does not have (key rotation), at most once per
//! [`MIN_REFRESH`].

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use url::Url;

use durable_mcp_runtime::temporal::direct_http::client_builder;

/// Cached keys older than this are fetched again (in the background: the old ones keep
/// answering meanwhile).
const MAX_AGE: Duration = Duration::from_secs(600);
/// Fetches never start more often than this, counted from the end of the last attempt (a
/// flood of forged unknown key ids must not become a flood of requests to the identity
/// provider, and a slow provider must not be asked again while it is still answering).
const MIN_REFRESH: Duration = Duration::from_secs(10);
/// The most bytes read of a key set or metadata document (R-CON-9): real ones are a few KiB;
/// a provider, or whatever answers in its name, must not fill the connector's memory.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// Fetches and caches one issuer's keys. Requests never wait behind a fetch for keys they
/// already have; requests that need new keys share one fetch.
pub struct KeySource {
    issuer: String,
    configured_jwks_uri: Option<Url>,
    http: reqwest::Client,
    /// Never held across an `.await`.
    state: Mutex<State>,
    /// Held by the one fetch in progress.
    fetching: Arc<tokio::sync::Mutex<()>>,
    max_age: Duration,
    min_refresh: Duration,
}

#[derive(Default)]
struct State {
    jwks_uri: Option<Url>,
    keys: Option<(Arc<JwkSet>, Instant)>,
    last_attempt_end: Option<Instant>,
}

#[derive(Deserialize)]
struct IssuerMetadata {
    #[serde(default)]
    issuer: Option<String>,
    jwks_uri: String,
}

impl KeySource {
    pub fn new(issuer: &str, jwks_uri: Option<Url>) -> Self {
        // Keys from a provider on loopback are fetched directly, never through a proxy from
        // the environment, which could hand out keys of its own (R-PAY-7).
        let endpoint = jwks_uri.clone().or_else(|| Url::parse(issuer).ok());
        let builder = endpoint
            .as_ref()
            .map_or_else(reqwest::Client::builder, client_builder);
        let http = builder
            .timeout(Duration::from_secs(10))
            // Key material comes from where the configuration says, not from where a
            // redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a reqwest client with a timeout always builds");
        Self {
            issuer: issuer.to_owned(),
            configured_jwks_uri: jwks_uri,
            http,
            state: Mutex::default(),
            fetching: Arc::default(),
            max_age: MAX_AGE,
            min_refresh: MIN_REFRESH,
        }
    }

    /// Other cache timings than [`MAX_AGE`] and [`MIN_REFRESH`] (tests).
    pub fn with_timing(mut self, max_age: Duration, min_refresh: Duration) -> Self {
        self.max_age = max_age;
        self.min_refresh = min_refresh;
        self
    }

    /// Cached keys that can verify a token naming `kid` (any key when `kid` is `None`).
    fn cached_for(&self, kid: Option<&str>) -> Option<(Arc<JwkSet>, bool)> {
        let state = self.state.lock().unwrap();
        let (keys, at) = state.keys.as_ref()?;
        kid.is_none_or(|k| keys.find(k).is_some())
            .then(|| (keys.clone(), at.elapsed() >= self.max_age))
    }

    fn may_attempt(&self) -> bool {
        let state = self.state.lock().unwrap();
        state
            .last_attempt_end
            .is_none_or(|t| t.elapsed() >= self.min_refresh)
    }

    /// The keys for a token naming `kid`: from the cache when it has them (a stale cache is
    /// refreshed in the background), else after one shared fetch (subject to [`MIN_REFRESH`]).
    pub async fn keys(self: &Arc<Self>, kid: Option<&str>) -> Result<Arc<JwkSet>, String> {
        if let Some((keys, stale)) = self.cached_for(kid) {
            if stale {
                self.refresh_in_background();
            }
            return Ok(keys);
        }
        let _one = self.fetching.lock().await;
        // The fetch this request waited for may have brought the key.
        if let Some((keys, _)) = self.cached_for(kid) {
            return Ok(keys);
        }
        if !self.may_attempt() {
            // Too soon to ask again: answer from the cache; an unknown kid then fails
            // verification like any unknown key.
            return self
                .state
                .lock()
                .unwrap()
                .keys
                .as_ref()
                .map(|(k, _)| k.clone())
                .ok_or_else(|| "the last attempt to fetch them failed; retrying shortly".into());
        }
        self.fetch_and_store().await
    }

    fn refresh_in_background(self: &Arc<Self>) {
        let Ok(guard) = self.fetching.clone().try_lock_owned() else {
            return; // A fetch is already under way.
        };
        if !self.may_attempt() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _one = guard;
            let _ = me.fetch_and_store().await;
        });
    }

    /// One fetch; the caller holds `fetching`.
    async fn fetch_and_store(&self) -> Result<Arc<JwkSet>, String> {
        let fetched = self.fetch().await;
        let mut state = self.state.lock().unwrap();
        state.last_attempt_end = Some(Instant::now());
        match fetched {
            Ok((keys, jwks_uri)) => {
                let keys = Arc::new(keys);
                state.keys = Some((keys.clone(), Instant::now()));
                state.jwks_uri = Some(jwks_uri);
                Ok(keys)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "could not fetch the issuer's keys");
                // Keys we had stay good until they are replaced.
                state.keys.as_ref().map(|(k, _)| k.clone()).ok_or(e)
            }
        }
    }

    async fn fetch(&self) -> Result<(JwkSet, Url), String> {
        let known = self.state.lock().unwrap().jwks_uri.clone();
        let uri = match self.configured_jwks_uri.clone().or(known) {
            Some(u) => u,
            None => self.discover().await?,
        };
        let keys: JwkSet = self.get_json(&uri).await?;
        tracing::debug!(issuer = %self.issuer, keys = keys.keys.len(), "fetched the issuer's keys");
        Ok((keys, uri))
    }

    /// The issuer's `jwks_uri`, from RFC 8414 authorization-server metadata, else OpenID
    /// Connect discovery. The metadata must name the configured issuer, and the key set must
    /// be served over https (or http on loopback), as a configured `jwks_uri` must.
    async fn discover(&self) -> Result<Url, String> {
        let mut errors = Vec::new();
        for url in metadata_urls(&self.issuer)? {
            match self.get_json::<IssuerMetadata>(&url).await {
                Ok(m) => {
                    if let Err(e) = check_metadata_issuer(&url, m.issuer.as_deref(), &self.issuer) {
                        errors.push(e);
                        continue;
                    }
                    return super::config::public_url("jwks_uri", &m.jwks_uri)
                        .map_err(|e| format!("{url} names an unusable key set: {e}"));
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
        let body = read_capped(url, response).await?;
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the expected JSON: {e}"))
    }
}

/// The body of `response`, refused once it passes [`MAX_DOCUMENT_BYTES`] (announced or read).
async fn read_capped(url: &Url, mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || format!("GET {url}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Metadata found by discovery must name the configured issuer (RFC 8414 section 3.3, OpenID
/// Discovery 4.3): metadata without `issuer`, or naming another, could be anyone's, so its keys
/// are not used.
pub fn check_metadata_issuer(url: &Url, named: Option<&str>, expected: &str) -> Result<(), String> {
    match named {
        Some(issuer) if issuer == expected => Ok(()),
        Some(issuer) => Err(format!(
            "{url} is the metadata of issuer {issuer:?}, not {expected:?}"
        )),
        None => Err(format!(
            "{url} names no issuer (RFC 8414 requires it), so it cannot be the metadata of {expected:?}"
        )),
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
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn discovered_metadata_must_name_the_configured_issuer() {
        let url = Url::parse("https://idp.example.com/.well-known/openid-configuration").unwrap();
        let expected = "https://idp.example.com/";
        assert_eq!(
            check_metadata_issuer(&url, Some(expected), expected),
            Ok(())
        );
        let other =
            check_metadata_issuer(&url, Some("https://evil.example/"), expected).unwrap_err();
        assert!(
            other.contains("evil.example") && other.contains(expected),
            "{other}"
        );
        let missing = check_metadata_issuer(&url, None, expected).unwrap_err();
        assert!(missing.contains("names no issuer"), "{missing}");
    }

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

    /// A key-set server that counts its requests and answers after `delay_ms`.
    struct Jwks {
        url: Url,
        hits: Arc<AtomicUsize>,
        delay_ms: Arc<AtomicU64>,
    }

    async fn jwks_server() -> Jwks {
        let hits = Arc::new(AtomicUsize::new(0));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (h, d) = (hits.clone(), delay_ms.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (h, d) = (h.clone(), d.clone());
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(d.load(Ordering::SeqCst))).await;
                    axum::Json(serde_json::json!({"keys": [{
                        "kty": "EC", "crv": "P-256", "kid": "k1",
                        "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                        "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
                    }]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/jwks", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Jwks {
            url,
            hits,
            delay_ms,
        }
    }

    #[tokio::test]
    async fn an_endless_or_huge_key_set_is_cut_off_at_the_bound() {
        let endless = || async {
            let chunk = axum::body::Bytes::from(vec![b' '; 64 * 1024]);
            axum::body::Body::from_stream(futures::stream::repeat_with(move || {
                Ok::<_, std::io::Error>(chunk.clone())
            }))
        };
        let app = axum::Router::new()
            .route("/endless", axum::routing::get(endless))
            .route(
                "/huge",
                axum::routing::get(|| async { " ".repeat(MAX_DOCUMENT_BYTES + 1) }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        for path in ["endless", "huge"] {
            let url = Url::parse(&format!("{base}/{path}")).unwrap();
            let source = Arc::new(KeySource::new("http://127.0.0.1/", Some(url)));
            let err = tokio::time::timeout(Duration::from_secs(60), source.keys(Some("k1")))
                .await
                .expect("an endless body is cut off, not read for ever")
                .unwrap_err();
            assert!(err.contains("larger than 262144 bytes"), "{path}: {err}");
        }
    }

    #[tokio::test]
    async fn unknown_key_ids_share_one_fetch_and_are_rate_limited() {
        let jwks = jwks_server().await;
        let source = Arc::new(
            KeySource::new("http://127.0.0.1/", Some(jwks.url.clone()))
                .with_timing(Duration::from_secs(600), Duration::from_secs(600)),
        );
        source.keys(Some("k1")).await.unwrap();
        assert_eq!(jwks.hits.load(Ordering::SeqCst), 1);
        // Twenty forged key ids at once, then more: the first asks (the cache is too young for
        // a second fetch, so none does), and every answer is the cached set.
        let asks = (0..20).map(|i| {
            let source = source.clone();
            async move { source.keys(Some(&format!("forged-{i}"))).await }
        });
        for answer in futures::future::join_all(asks).await {
            assert!(answer.unwrap().find("k1").is_some());
        }
        assert_eq!(jwks.hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn known_keys_never_wait_for_a_slow_identity_provider() {
        let jwks = jwks_server().await;
        let source = Arc::new(
            KeySource::new("http://127.0.0.1/", Some(jwks.url.clone()))
                .with_timing(Duration::ZERO, Duration::ZERO),
        );
        source.keys(Some("k1")).await.unwrap();
        // The provider now takes a minute; the cache is always stale (max age 0).
        jwks.delay_ms.store(60_000, Ordering::SeqCst);
        for _ in 0..5 {
            let answered = tokio::time::timeout(Duration::from_secs(30), source.keys(Some("k1")))
                .await
                .expect("a known key is answered from the cache, without waiting for the fetch");
            assert!(answered.unwrap().find("k1").is_some());
        }
        // A background refresh started, and only one: it is still waiting for the provider.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while jwks.hits.load(Ordering::SeqCst) < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no background refresh"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for _ in 0..5 {
            source.keys(Some("k1")).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(jwks.hits.load(Ordering::SeqCst), 2);
    }
}
