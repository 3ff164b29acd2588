//! R-PRX-15: an HTTP upstream that takes OAuth 2.0 client-credential tokens. The token endpoint
//! is wiremock; the calls go through the proxy on the real dev server, to an upstream that
//! refuses any request without a token it accepts.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp::{
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
    proxy::{
        TransportConfig,
        auth::{AuthProvider, ClientCredentialsProvider},
        config::{ClientAuth, ClientCredentials},
        learned_url::LearnedUrlPolicy,
    },
};
use durable_mcp_conformance::fixtures::{
    Ledger, LedgerEvent, UpstreamSpec,
    faults::{self, HttpFault},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use wiremock::{
    Match, Mock, MockServer, Request, ResponseTemplate,
    matchers::{body_string_contains, header, method, path},
};

use crate::support::*;

const CLIENT_ID: &str = "durable mcp";
const CLIENT_SECRET: &str = "s3cret:with/odd chars";

/// Requests whose bearer token is not (or no longer) accepted.
struct NotAccepted(Arc<Mutex<Vec<String>>>);

impl Match for NotAccepted {
    fn matches(&self, request: &Request) -> bool {
        let given = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        !self
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|t| given == format!("Bearer {t}"))
    }
}

/// HTTP Basic credentials as RFC 6749 section 2.3.1 has them: each form-encoded first.
fn basic() -> String {
    use base64::Engine as _;
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(CLIENT_ID), encode(CLIENT_SECRET));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A token endpoint that hands out `tokens` in order, each living `expires_in` seconds, to a
/// client that authenticates and asks for the scopes and audience below.
async fn token_endpoint(tokens: &[&str], expires_in: u64) -> MockServer {
    let server = MockServer::start().await;
    for (n, token) in tokens.iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/token"))
            .and(header("authorization", basic().as_str()))
            .and(body_string_contains("grant_type=client_credentials"))
            .and(body_string_contains("scope=tools%3Acall+tools%3Alist"))
            .and(body_string_contains("audience=https%3A%2F%2Fmcp.example"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": expires_in,
            })))
            .up_to_n_times(1)
            .with_priority(u8::try_from(n + 1).unwrap())
            .mount(&server)
            .await;
    }
    server
}

fn credentials(server: &MockServer) -> ClientCredentials {
    ClientCredentials {
        token_url: Some(format!("{}/token", server.uri()).parse().unwrap()),
        issuer: None,
        client_id: CLIENT_ID.into(),
        client_auth: ClientAuth::SecretBasic {
            secret: CLIENT_SECRET.into(),
        },
        scopes: vec!["tools:call".into(), "tools:list".into()],
        audience: Some("https://mcp.example".into()),
        resource: Some("https://mcp.example/mcp".parse().unwrap()),
        learned_urls: LearnedUrlPolicy::default(),
    }
}

async fn token_requests(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == "/token")
        .count()
}

async fn echo(env: &TestEnv, key: &str) -> OperationOutcome {
    call(env, "echo", key).await
}

async fn call(env: &TestEnv, tool: &str, key: &str) -> OperationOutcome {
    let mut start = StartOperation::new(
        format!("oauth-{key}-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "guarded",
        tool,
        payload::to_payload(&json!({"key": key})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (op, _) = env.client.start(start).await.unwrap();
    env.client
        .wait(&op, &CancellationToken::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn client_credential_tokens_are_fetched_once_cached_and_renewed_after_a_401() {
    let env = TestEnv::shared("proxy-oauth").await;
    let auth = token_endpoint(&["tok-1", "tok-2", "tok-3"], 3600).await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let upstream = faults::faulty_upstream(
        &UpstreamSpec::standard(),
        HttpFault::Status {
            code: 500,
            times: 0,
        },
        ledger.clone(),
    )
    .await;
    let accepted = Arc::new(Mutex::new(
        ["tok-1", "tok-2", "tok-3"].map(str::to_owned).to_vec(),
    ));
    Mock::given(NotAccepted(accepted.clone()))
        .respond_with(
            ResponseTemplate::new(401).insert_header("www-authenticate", "Bearer realm=\"mcp\""),
        )
        .with_priority(1)
        .mount(&upstream)
        .await;
    let mut config = http_upstream("guarded", &faults::mcp_url(&upstream)).unwrap();
    let TransportConfig::Http { oauth, .. } = &mut config.transport else {
        unreachable!()
    };
    *oauth = Some(credentials(&auth));
    let _proxy = start_proxy(&env, vec![config]);

    for key in ["a1", "a2"] {
        let outcome = echo(&env, key).await;
        let OperationOutcome::Succeeded(result) = &outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            payload::to_json(result).unwrap()["structuredContent"]["key"],
            json!(key)
        );
    }
    assert_eq!(
        token_requests(&auth).await,
        1,
        "one token serves every request until it is due"
    );

    // The upstream stops accepting the first token: the next request gets a 401 and the proxy
    // fetches a new token. A `tools/call` is not sent again within the attempt (a gateway may
    // answer 401 after forwarding): the retryable tool's next attempt carries the new token.
    accepted.lock().unwrap().retain(|t| t != "tok-1");
    let outcome = echo(&env, "a3").await;
    assert!(
        matches!(outcome, OperationOutcome::Succeeded(_)),
        "{outcome:?}"
    );
    assert_eq!(token_requests(&auth).await, 2);
    assert_eq!(
        ledger.count_key("echo", LedgerEvent::Called, "a3"),
        1,
        "{:?}",
        ledger.read()
    );

    // A one-attempt tool (destructive, not idempotent) answered 401 is never sent twice: its
    // outcome is unknown. The token is renewed for the next call all the same.
    accepted.lock().unwrap().retain(|t| t != "tok-2");
    let outcome = call(&env, "write_once", "w1").await;
    let OperationOutcome::Failed { error_type, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(error_type.as_deref(), Some("ToolCallOutcomeUnknown"));
    let posted = upstream
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| {
            let body = String::from_utf8_lossy(&r.body);
            body.contains("tools/call") && body.contains("\"w1\"")
        })
        .count();
    assert_eq!(posted, 1, "the one-attempt tools/call was sent again");
    let outcome = echo(&env, "a4").await;
    assert!(
        matches!(outcome, OperationOutcome::Succeeded(_)),
        "{outcome:?}"
    );
    assert_eq!(token_requests(&auth).await, 3, "the renewed token serves");
}

/// Renewal before expiry, through the provider alone: a token that lives no time at all is
/// renewed at the next request; a rejected one is renewed at once; a token endpoint that
/// refuses says so without echoing what it was sent.
#[tokio::test]
async fn tokens_are_renewed_when_due_or_rejected_and_refusals_are_plain() {
    let auth = token_endpoint(&["short-1", "short-2", "short-3"], 0).await;
    let provider = ClientCredentialsProvider::new(credentials(&auth));
    assert_eq!(provider.token().await.unwrap(), "short-1");
    assert_eq!(
        provider.token().await.unwrap(),
        "short-2",
        "expired: renewed"
    );

    let auth = token_endpoint(&["long-1", "long-2"], 3600).await;
    let provider = ClientCredentialsProvider::new(credentials(&auth));
    assert_eq!(provider.token().await.unwrap(), "long-1");
    assert_eq!(provider.token().await.unwrap(), "long-1", "cached");
    provider.rejected("long-1");
    assert_eq!(provider.token().await.unwrap(), "long-2");
    provider.rejected("long-1");
    assert_eq!(
        provider.token().await.unwrap(),
        "long-2",
        "a stale rejection does not drop the new token"
    );

    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": "invalid_client",
            "error_description": "unknown client",
        })))
        .mount(&refusing)
        .await;
    let provider = ClientCredentialsProvider::new(credentials(&refusing));
    let err = provider.token().await.unwrap_err().to_string();
    assert!(err.contains("invalid_client: unknown client"), "{err}");
    assert!(!err.contains(CLIENT_SECRET), "{err}");
}

/// The token request each client authentication sends, byte for byte: `client_secret_basic`
/// (HTTP Basic), `client_secret_post` (id and secret in the body) and `private_key_jwt` (an RFC
/// 7523 assertion signed with the configured key, checked with its public key); each carries the
/// upstream as RFC 8707 `resource`.
#[tokio::test]
async fn each_client_authentication_sends_the_exact_token_request() {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    use base64::Engine as _;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "access_token": "t", "token_type": "Bearer", "expires_in": 3600,
        })))
        .mount(&server)
        .await;
    let common = "grant_type=client_credentials&scope=tools%3Acall+tools%3Alist\
                  &audience=https%3A%2F%2Fmcp.example&resource=https%3A%2F%2Fmcp.example%2Fmcp";
    let sent = async |client_auth: ClientAuth| {
        let provider = ClientCredentialsProvider::new(ClientCredentials {
            client_auth,
            ..credentials(&server)
        });
        assert_eq!(provider.token().await.unwrap(), "t");
        let request = server.received_requests().await.unwrap().pop().unwrap();
        let body = String::from_utf8(request.body.clone()).unwrap();
        let authorization = request
            .headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned());
        (body, authorization)
    };

    let by_basic = ClientAuth::SecretBasic {
        secret: CLIENT_SECRET.into(),
    };
    assert_eq!(sent(by_basic).await, (common.to_owned(), Some(basic())));

    let post = ClientAuth::SecretPost {
        secret: CLIENT_SECRET.into(),
    };
    let (body, authorization) = sent(post).await;
    assert_eq!(
        body,
        format!("{common}&client_id=durable+mcp&client_secret=s3cret%3Awith%2Fodd+chars")
    );
    assert_eq!(authorization, None);

    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
    );
    let key_file = temp_path("client-key.pem");
    std::fs::write(&key_file, pem).unwrap();
    let jwt = ClientAuth::PrivateKeyJwt {
        key_file,
        algorithm: jsonwebtoken::Algorithm::ES256,
        key_id: Some("key-1".into()),
    };
    let (body, authorization) = sent(jwt).await;
    assert_eq!(authorization, None);
    let (head, assertion) = body.rsplit_once("&client_assertion=").unwrap();
    assert_eq!(
        head,
        format!(
            "{common}&client_id=durable+mcp\
             &client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"
        )
    );
    let token_url = format!("{}/token", server.uri());
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[&token_url]);
    validation.set_issuer(&[CLIENT_ID]);
    validation.set_required_spec_claims(&["exp", "iat", "aud", "iss", "sub", "jti"]);
    let key = jsonwebtoken::DecodingKey::from_ec_der(pair.public_key().as_ref());
    let decoded = jsonwebtoken::decode::<serde_json::Value>(assertion, &key, &validation).unwrap();
    assert_eq!(decoded.header.kid.as_deref(), Some("key-1"));
    let claims = decoded.claims;
    assert_eq!(claims["sub"], CLIENT_ID);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        60
    );
    assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));
}

/// An upstream whose protected-resource metadata (RFC 9728) names `server` as its
/// authorization server.
async fn upstream_naming(server: &str) -> MockServer {
    let upstream = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/.well-known/oauth-protected-resource/mcp"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "resource": format!("{}/mcp", upstream.uri()),
            "authorization_servers": [server],
        })))
        .mount(&upstream)
        .await;
    upstream
}

/// An authorization server whose metadata (RFC 8414) names `token_endpoint`, and which hands
/// out one token there.
async fn authorization_server(token_endpoint: Option<&str>) -> MockServer {
    let server = MockServer::start().await;
    let token_endpoint = token_endpoint.map_or(format!("{}/token", server.uri()), str::to_owned);
    Mock::given(method("GET"))
        .and(path("/.well-known/oauth-authorization-server"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "issuer": server.uri(),
            "token_endpoint": token_endpoint,
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .and(header("authorization", basic().as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "access_token": "found", "token_type": "Bearer", "expires_in": 3600,
        })))
        .mount(&server)
        .await;
    server
}

/// A provider that finds its token endpoint from `upstream`, learned URLs allowed `allowed`,
/// its credentials issued by `issuer`.
fn discovering(upstream: &MockServer, issuer: &str, allowed: &[&str]) -> ClientCredentialsProvider {
    let upstream_url: url::Url = format!("{}/mcp", upstream.uri()).parse().unwrap();
    ClientCredentialsProvider::new(ClientCredentials {
        token_url: None,
        issuer: Some(issuer.parse().unwrap()),
        learned_urls: LearnedUrlPolicy {
            allowed: allowed.iter().map(|n| n.parse().unwrap()).collect(),
        },
        ..credentials(upstream)
    })
    .discovering_from(&upstream_url)
}

/// R-PRX-37: a hostile upstream whose OAuth metadata points the proxy at the cloud's metadata
/// service, a private host or loopback (by address or by a name that resolves there) is
/// refused before any request leaves toward it, with an error that names the range to allow;
/// once the operator allows the range, discovery finds the token endpoint and the token comes.
#[tokio::test]
async fn discovery_refuses_learned_urls_toward_private_ranges_unless_allowed() {
    let server = authorization_server(None).await;
    let port = server.address().port();
    for (named, range) in [
        ("http://169.254.169.254", "169.254.169.254/32"),
        ("http://10.1.2.3:8080", "10.1.2.3/32"),
        ("http://[fd00::1]", "fd00::1/128"),
        (server.uri().as_str(), "127.0.0.1/32"),
        (&format!("http://localhost:{port}"), "/"),
    ] {
        let upstream = upstream_naming(named).await;
        let error = discovering(&upstream, named, &["192.168.0.0/16"])
            .token()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("token endpoint discovery")
                && error.contains("allow_private_urls = [")
                && error.contains(range),
            "{named}: {error}"
        );
    }
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "a refused server was asked"
    );

    // The operator allows loopback: the token endpoint is found and used.
    let upstream = upstream_naming(&server.uri()).await;
    let provider = discovering(&upstream, &server.uri(), &["127.0.0.0/8"]);
    assert_eq!(provider.token().await.unwrap(), "found");

    // An allowed server that names a token endpoint in a range not allowed is refused too.
    let pointing = authorization_server(Some("http://169.254.169.254/token")).await;
    let upstream = upstream_naming(&pointing.uri()).await;
    let error = discovering(&upstream, &pointing.uri(), &["127.0.0.0/8"])
        .token()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("the token endpoint 169.254.169.254 the upstream named is refused")
            && error.contains("allow_private_urls"),
        "{error}"
    );
}

/// R-PRX-15: discovery reads metadata and learns URLs only over https (or on loopback): an
/// on-path attacker could otherwise rewrite an http document to name its own https token
/// endpoint and receive the client's credentials. Each refusal names the host and says to set
/// `token_url`; no request leaves for the http host.
#[tokio::test]
async fn discovery_over_http_off_loopback_is_refused_and_names_token_url() {
    let refused = |error: &str, host: &str| {
        error.contains("token endpoint discovery")
            && error.contains(host)
            && error.contains("https")
            && error.contains("token_url")
    };
    // The upstream (on loopback) names an authorization server over http.
    let upstream = upstream_naming("http://auth.example").await;
    let error = discovering(&upstream, "http://auth.example", &[])
        .token()
        .await
        .unwrap_err()
        .to_string();
    assert!(refused(&error, "auth.example"), "{error}");
    // An upstream over http off loopback: its own metadata is not trusted either.
    let provider = ClientCredentialsProvider::new(ClientCredentials {
        token_url: None,
        issuer: Some("https://auth.example".parse().unwrap()),
        ..credentials(&upstream)
    })
    .discovering_from(&"http://mcp.example/mcp".parse().unwrap());
    let error = provider.token().await.unwrap_err().to_string();
    assert!(refused(&error, "mcp.example"), "{error}");
}

/// R-PRX-15: the authorization server that receives the client's secret is the operator's
/// choice, never the upstream's. The operator configured client credentials issued by its own
/// authorization server and left `token_url` out; a hostile (or compromised) upstream's
/// protected-resource metadata names an authorization server of the attacker's (here on
/// loopback, allowed, standing in for any public https host, which the R-PRX-37 policy lets
/// through without configuration), and it publishes matching metadata. Discovery refuses it,
/// naming the configured issuer and the key to set, and the secret never leaves (before the fix
/// it arrived at the attacker in HTTP Basic). With the operator's server named, it is used.
#[tokio::test]
async fn a_hostile_upstream_names_the_server_that_receives_the_client_secret() {
    let operators = authorization_server(None).await;
    let attacker = authorization_server(None).await;
    let upstream = upstream_naming(&attacker.uri()).await;
    let error = discovering(&upstream, &operators.uri(), &["127.0.0.0/8"])
        .token()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not the configured issuer 127.0.0.1")
            && error.contains("[upstream.oauth] issuer")
            && !error.contains(CLIENT_SECRET),
        "{error}"
    );
    let stolen = attacker
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| {
            r.headers
                .get("authorization")
                .is_some_and(|v| v.to_str().unwrap_or("") == basic())
        })
        .count();
    assert_eq!(
        stolen, 0,
        "the upstream-named authorization server received the client secret {stolen} time(s)"
    );
    assert!(
        attacker.received_requests().await.unwrap().is_empty(),
        "the upstream-named authorization server was asked at all"
    );

    // The upstream names the operator's server: discovery finds its token endpoint.
    let upstream = upstream_naming(&operators.uri()).await;
    let provider = discovering(&upstream, &operators.uri(), &["127.0.0.0/8"]);
    assert_eq!(provider.token().await.unwrap(), "found");
}
