//! R-PRX-15: an HTTP upstream that takes OAuth 2.0 client-credential tokens. The token endpoint
//! is wiremock; the calls go through the proxy on the real dev server, to an upstream that
//! refuses any request without a token it accepts.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use durable_mcp::{
    mcp::payload,
    nexus::{OperationOutcome, StartOperation},
    outbound::{
        TransportConfig,
        auth::{AuthProvider, ClientCredentialsProvider},
        config::ClientCredentials,
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
        token_url: format!("{}/token", server.uri()).parse().unwrap(),
        client_id: CLIENT_ID.into(),
        client_secret: CLIENT_SECRET.into(),
        scopes: vec!["tools:call".into(), "tools:list".into()],
        audience: Some("https://mcp.example".into()),
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
