//! Credentials of an HTTP upstream's requests (R-PRX-15).
//!
//! An [`AuthProvider`] gives the bearer token each request carries; the HTTP client asks it
//! before every request and, when the upstream answers 401, tells it the token was rejected
//! and sends the request once more with a new one (a 401 proves the request never ran).
//! [`ClientCredentialsProvider`] is the provider `[upstream.oauth]` configures: OAuth 2.0
//! client credentials (RFC 6749 section 4.4) with the upstream as RFC 8707 `resource`, the
//! client authenticated by `client_secret_basic`, `client_secret_post` or `private_key_jwt`
//! (RFC 7523), its token cached and renewed before it expires. (Hand-written: rmcp's `auth`
//! feature and the `oauth2` crate would bring a second `jsonwebtoken` or `reqwest` into the
//! tree, and a discovery flow this fixed-endpoint client does not need.)
//! An upstream that needs another scheme is given its own provider in Rust
//! (`UpstreamClient::with_auth`).
//!
//! Tokens and the client secret never reach a log line, an error or Temporal: errors name the
//! token endpoint's host and the OAuth error code, nothing else it sent.

use std::{sync::Mutex, time::Duration};

use futures::{FutureExt as _, future::BoxFuture};
use serde::Deserialize;
use tokio::time::Instant;

use super::oauth_discovery::{self, DiscoveryClients};
use super::{
    assertion::{CLIENT_ASSERTION_TYPE, client_assertion},
    config::{ClientAuth, ClientCredentials},
};
use durable_mcp_runtime::temporal::direct_http::client_builder;

/// Why no token could be had. Its text never holds a token or a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no bearer token for the upstream: {0}")]
pub struct AuthError(pub String);

/// Gives the bearer token of an HTTP upstream's requests. Implement it for a scheme the config
/// does not offer and hand it to `UpstreamClient::with_auth`.
pub trait AuthProvider: Send + Sync + 'static {
    /// The token for the next request. Called before every request: cache as needed.
    fn token(&self) -> BoxFuture<'_, Result<String, AuthError>>;
    /// The upstream answered 401 to a request carrying `token`: forget it, so that the next
    /// [`token`](Self::token) gives a new one.
    fn rejected(&self, token: &str);
}

/// The longest a token request may take, and the largest answer read from the endpoint.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// When a token that lives `lifetime` from `obtained` should be renewed: a tenth of its
/// lifetime early, at most a minute early, so that no request leaves with a token about to
/// expire. A token without `expires_in`, or with one too large for the clock to count (a
/// token endpoint may send any `u64`), is kept until the upstream rejects it.
pub fn renew_at(obtained: Instant, lifetime: Option<Duration>) -> Option<Instant> {
    let lifetime = lifetime?;
    let early = (lifetime / 10).min(Duration::from_secs(60));
    obtained.checked_add(lifetime - early)
}

struct Cached {
    token: String,
    renew_at: Option<Instant>,
}

/// OAuth 2.0 client credentials: one token for every request, fetched when first needed,
/// renewed before it expires (see [`renew_at`]) or after a 401. Concurrent requests share one
/// fetch.
pub struct ClientCredentialsProvider {
    config: ClientCredentials,
    /// For the token endpoint: the configured one's, or for a discovered one the learned-URL
    /// client (R-PRX-37). Or why it could not be built (said by every fetch).
    http: Result<reqwest::Client, String>,
    /// How the token endpoint is found when the config names none.
    discovery: Option<Discovery>,
    cached: Mutex<Option<Cached>>,
    fetching: tokio::sync::Mutex<()>,
}

impl ClientCredentialsProvider {
    pub fn new(config: ClientCredentials) -> Self {
        // A token endpoint on loopback is reached directly, never through a proxy from the
        // environment: the client secret travels to it (R-PAY-7).
        let http = match &config.token_url {
            Some(url) => client_builder(url).redirect(reqwest::redirect::Policy::none()),
            None => config.learned_urls.client_builder(),
        };
        Self {
            http: build(http),
            config,
            discovery: None,
            cached: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Finds the token endpoint from `upstream`'s metadata when the config names none
    /// (RFC 9728, RFC 8414): the upstream's own host is asked as configured, what it names
    /// only as R-PRX-37 allows.
    pub fn discovering_from(mut self, upstream: &url::Url) -> Self {
        self.discovery = Some(Discovery {
            upstream: upstream.clone(),
            own: build(client_builder(upstream).redirect(reqwest::redirect::Policy::none())),
            found: Mutex::new(None),
        });
        self
    }

    /// The token endpoint: the configured one, or the one discovery found (asked once, again
    /// after a failure).
    async fn endpoint(&self) -> Result<url::Url, String> {
        if let Some(url) = &self.config.token_url {
            return Ok(url.clone());
        }
        let Some(d) = &self.discovery else {
            return Err(
                "[upstream.oauth] names no token_url and no upstream to find it from".into(),
            );
        };
        if let Some(found) = d.found.lock().unwrap().clone() {
            return Ok(found);
        }
        let Some(issuer) = &self.config.issuer else {
            return Err(format!(
                "[upstream.oauth] issuer: {}",
                super::config::ISSUER_REQUIRED
            ));
        };
        let clients = DiscoveryClients {
            own: d.own.as_ref().map_err(Clone::clone)?,
            learned: self.http.as_ref().map_err(Clone::clone)?,
            policy: &self.config.learned_urls,
        };
        let found = oauth_discovery::token_endpoint(&d.upstream, issuer, &clients)
            .await
            .map_err(|e| format!("token endpoint discovery: {e}"))?;
        tracing::info!(
            upstream = d.upstream.host_str().unwrap_or("?"),
            token_endpoint = found.host_str().unwrap_or("?"),
            "token endpoint discovered from the configured issuer's metadata"
        );
        *d.found.lock().unwrap() = Some(found.clone());
        Ok(found)
    }

    fn current(&self) -> Option<String> {
        let cached = self.cached.lock().unwrap();
        let c = cached.as_ref()?;
        match c.renew_at {
            Some(at) if Instant::now() >= at => None,
            _ => Some(c.token.clone()),
        }
    }

    async fn get(&self) -> Result<String, AuthError> {
        if let Some(token) = self.current() {
            return Ok(token);
        }
        let _one_fetch = self.fetching.lock().await;
        if let Some(token) = self.current() {
            return Ok(token);
        }
        let obtained = Instant::now();
        let (token, lifetime) = self.fetch().await?;
        *self.cached.lock().unwrap() = Some(Cached {
            token: token.clone(),
            renew_at: renew_at(obtained, lifetime),
        });
        Ok(token)
    }

    /// One token request (RFC 6749 section 4.4.2), the client authenticated as configured
    /// (see [`token_request`]).
    async fn fetch(&self) -> Result<(String, Option<Duration>), AuthError> {
        let c = &self.config;
        let token_url = self.endpoint().await.map_err(AuthError)?;
        let endpoint = token_url.host_str().unwrap_or("the token endpoint");
        let fail = |what: String| AuthError(format!("token endpoint {endpoint}: {what}"));
        let (form, basic) = token_request(c, &token_url, unix_now()).map_err(fail)?;
        let http = self.http.as_ref().map_err(|e| fail(e.clone()))?;
        let mut request = http.post(token_url.clone());
        if let Some((id, secret)) = basic {
            request = request.basic_auth(id, Some(secret));
        }
        let mut response = request
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(form)
            .send()
            .await
            // Without the URL: it is the config's, and only its host is shown.
            .map_err(|e| fail(format!("the request failed: {}", e.without_url())))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| fail(format!("the answer broke off: {}", e.without_url())))?
        {
            if body.len() + chunk.len() > MAX_TOKEN_RESPONSE {
                return Err(fail(format!(
                    "the answer is over {MAX_TOKEN_RESPONSE} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        token_from_answer(status.as_u16(), &body).map_err(fail)
    }
}

impl AuthProvider for ClientCredentialsProvider {
    fn token(&self) -> BoxFuture<'_, Result<String, AuthError>> {
        self.get().boxed()
    }

    fn rejected(&self, token: &str) {
        let mut cached = self.cached.lock().unwrap();
        if cached.as_ref().is_some_and(|c| c.token == token) {
            *cached = None;
        }
    }
}

/// The form body of a token request to `token_url` at `now` (seconds since the epoch), and the HTTP Basic
/// credentials to send with it (`client_secret_basic` only, each form-encoded first, RFC 6749
/// section 2.3.1): `grant_type`, `scope`, `audience`, `resource` (RFC 8707), then the client's
/// authentication, `client_id` and `client_secret` (`client_secret_post`) or `client_id`,
/// `client_assertion_type` and `client_assertion` (`private_key_jwt`, RFC 7523). Its error
/// never holds the secret or the key.
pub fn token_request(
    c: &ClientCredentials,
    token_url: &url::Url,
    now: u64,
) -> Result<(String, Option<(String, String)>), String> {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "client_credentials");
    if !c.scopes.is_empty() {
        form.append_pair("scope", &c.scopes.join(" "));
    }
    if let Some(audience) = &c.audience {
        form.append_pair("audience", audience);
    }
    if let Some(resource) = &c.resource {
        form.append_pair("resource", resource.as_str());
    }
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let basic = match &c.client_auth {
        ClientAuth::SecretBasic { secret } => Some((encode(&c.client_id), encode(secret))),
        ClientAuth::SecretPost { secret } => {
            form.append_pair("client_id", &c.client_id);
            form.append_pair("client_secret", secret);
            None
        }
        ClientAuth::PrivateKeyJwt {
            key_file,
            algorithm,
            key_id,
        } => {
            let assertion =
                client_assertion(c, token_url, key_file, *algorithm, key_id.clone(), now)?;
            form.append_pair("client_id", &c.client_id);
            form.append_pair("client_assertion_type", CLIENT_ASSERTION_TYPE);
            form.append_pair("client_assertion", &assertion);
            None
        }
    };
    Ok((form.finish(), basic))
}

/// The token endpoint's client, its timeout set; or why it could not be built.
fn build(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, String> {
    builder
        .timeout(TOKEN_REQUEST_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Discovery's state: the upstream it asks, the client for its host, what it found.
struct Discovery {
    upstream: url::Url,
    own: Result<reqwest::Client, String>,
    found: Mutex<Option<url::Url>>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The token endpoint's answer: the token and its lifetime, or what went wrong, said without
/// anything from the body but the OAuth error code and description (RFC 6749 section 5.2).
pub fn token_from_answer(status: u16, body: &[u8]) -> Result<(String, Option<Duration>), String> {
    #[derive(Deserialize)]
    struct Answer {
        access_token: Option<String>,
        token_type: Option<String>,
        expires_in: Option<u64>,
        error: Option<String>,
        error_description: Option<String>,
    }
    let answer: Option<Answer> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        return Err(
            match answer.and_then(|a| a.error.map(|e| (e, a.error_description))) {
                Some((error, Some(description))) => {
                    format!(
                        "HTTP {status}, {}: {}",
                        printable(&error),
                        printable(&description)
                    )
                }
                Some((error, None)) => format!("HTTP {status}, {}", printable(&error)),
                None => format!("HTTP {status}"),
            },
        );
    }
    let Some(answer) = answer else {
        return Err("the answer is not a JSON token response".into());
    };
    let Some(token) = answer.access_token.filter(|t| !t.is_empty()) else {
        return Err("the answer has no access_token".into());
    };
    if !answer
        .token_type
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case("bearer"))
    {
        return Err("the token is not a Bearer token".into());
    }
    if token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err("the token has characters a header cannot carry".into());
    }
    Ok((token, answer.expires_in.map(Duration::from_secs)))
}

/// At most 200 printable characters of an endpoint's own words.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_a_tenth_of_their_lifetime_early_at_most_a_minute() {
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        assert_eq!(
            renew_at(now, Some(hour)),
            Some(now + hour - Duration::from_secs(60))
        );
        let ten = Duration::from_secs(10);
        assert_eq!(renew_at(now, Some(ten)), Some(now + Duration::from_secs(9)));
        assert_eq!(renew_at(now, Some(Duration::ZERO)), Some(now));
        assert_eq!(renew_at(now, None), None);
        // An `expires_in` of u64::MAX seconds used to panic on the Instant's overflow.
        assert_eq!(renew_at(now, Some(Duration::from_secs(u64::MAX))), None);
    }

    #[test]
    fn token_answers() {
        let ok = br#"{"access_token":"abc","token_type":"bearer","expires_in":300}"#;
        assert_eq!(
            token_from_answer(200, ok),
            Ok(("abc".into(), Some(Duration::from_secs(300))))
        );
        let no_type = br#"{"access_token":"abc"}"#;
        assert!(token_from_answer(200, no_type).is_err());
        let mac = br#"{"access_token":"abc","token_type":"mac"}"#;
        assert!(token_from_answer(200, mac).is_err());
        let refused = br#"{"error":"invalid_client","error_description":"bad\nsecret"}"#;
        assert_eq!(
            token_from_answer(401, refused),
            Err("HTTP 401, invalid_client: badsecret".into())
        );
        // A body that is not an OAuth error is not echoed.
        let err = token_from_answer(500, b"secret stack trace").unwrap_err();
        assert_eq!(err, "HTTP 500");
        assert!(
            token_from_answer(200, br#"{"access_token":"a b","token_type":"Bearer"}"#).is_err()
        );
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    fn credentials(client_auth: ClientAuth) -> ClientCredentials {
        ClientCredentials {
            token_url: Some("https://auth.example/token".parse().unwrap()),
            client_id: "proxy id".into(),
            client_auth,
            scopes: vec!["a".into(), "b:c".into()],
            audience: Some("https://aud".into()),
            resource: Some("https://mcp.example/mcp".parse().unwrap()),
            issuer: None,
            learned_urls: Default::default(),
        }
    }

    fn url() -> url::Url {
        "https://auth.example/token".parse().unwrap()
    }

    #[test]
    fn each_client_authentication_sends_its_own_token_request() {
        let secret = "s&=cret";
        let common = "grant_type=client_credentials&scope=a+b%3Ac&audience=https%3A%2F%2Faud\
                      &resource=https%3A%2F%2Fmcp.example%2Fmcp";
        let basic = ClientAuth::SecretBasic {
            secret: secret.into(),
        };
        assert_eq!(
            token_request(&credentials(basic), &url(), 0).unwrap(),
            (
                common.to_owned(),
                Some(("proxy+id".into(), "s%26%3Dcret".into()))
            )
        );
        let post = ClientAuth::SecretPost {
            secret: secret.into(),
        };
        assert_eq!(
            token_request(&credentials(post), &url(), 0).unwrap(),
            (
                format!("{common}&client_id=proxy+id&client_secret=s%26%3Dcret"),
                None
            )
        );
        let key_file = std::env::temp_dir().join(format!("not-a-key-{}.pem", std::process::id()));
        std::fs::write(&key_file, "not a key").unwrap();
        let broken = ClientAuth::PrivateKeyJwt {
            key_file: key_file.clone(),
            algorithm: jsonwebtoken::Algorithm::ES256,
            key_id: None,
        };
        let error = token_request(&credentials(broken), &url(), 0).unwrap_err();
        assert!(
            error.contains("holds no PEM private key for ES256"),
            "{error}"
        );
        assert!(!error.contains("not a key"), "{error}");
        std::fs::remove_file(&key_file).unwrap();
    }
}
