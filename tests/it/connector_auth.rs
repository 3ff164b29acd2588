//! Inbound OAuth on the HTTP connector, end to end: a test identity provider (RFC 8414
//! metadata and a JWKS over HTTP, ES256 keys made per run), two `durable-mcp-connector`
//! processes sharing one signing key and one auth config, the proxy and the mock upstream on
//! the real dev server, and rmcp clients sending bearer tokens.

use std::{sync::Arc, time::Duration};

use aws_lc_rs::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair},
};
use durable_mcp::connector::task_ref::{CallerScope, SigningKey};
use durable_mcp::contract::errors::ConnectorErrorType;
use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent};
use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
use rmcp::{
    ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientConfig, GetTaskParams,
    },
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::support::{
    HttpConnectorProcess, TEST_SIGNING_KEY, TestEnv, connector_command, mock_stdio_upstream,
    poll_task_until_done, start_proxy, task_op_id, tasks_client_config, temp_path,
};

/// A minimal identity provider: RFC 8414 metadata naming a JWKS, and tokens signed with its key.
pub(crate) struct TestIssuer {
    pub(crate) url: String,
    key: EncodingKey,
    _server: tokio::task::JoinHandle<()>,
}

pub(crate) const KID: &str = "test-key-1";
pub(crate) const AUDIENCE: &str = "http://localhost/mcp";
pub(crate) const SCOPE: &str = "mcp:tools";

impl TestIssuer {
    pub(crate) async fn start() -> Self {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(KID.into());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let jwks = Arc::new(json!({"keys": [jwk]}));
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || {
                    let m = metadata.clone();
                    async move { axum::Json(m) }
                }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || {
                    let k = jwks.clone();
                    async move { axum::Json((*k).clone()) }
                }),
            );
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            key,
            _server: server,
        }
    }

    /// A token for `subject` with `scope`; `nonce` makes renewed tokens differ.
    pub(crate) fn token(&self, subject: &str, scope: &str, nonce: u32) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let claims = json!({
            "iss": self.url,
            "sub": subject,
            "aud": AUDIENCE,
            "scope": scope,
            "iat": now,
            "exp": now + 600,
            "jti": format!("{subject}-{nonce}"),
        });
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(KID.into());
        // RFC 9068 access tokens (R-CON-9).
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
    }

    pub(crate) fn auth_config(&self) -> std::path::PathBuf {
        let path = temp_path("inbound_auth.yaml");
        std::fs::write(
            &path,
            format!(
                "auth:\n  resource: {AUDIENCE}\n  issuer: {}\n  required_scopes: [{SCOPE}]\n",
                self.url
            ),
        )
        .unwrap();
        path
    }
}

/// An rmcp HTTP client that declares the tasks extension and sends `token`.
pub(crate) async fn client(
    url: &str,
    token: &str,
) -> RunningService<rmcp::RoleClient, ClientConfig> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token),
    );
    tasks_client_config()
        .serve(transport)
        .await
        .expect("MCP handshake with a bearer token")
}

/// The connector binary routing to `mock`, with `idp`'s auth config and `extra` flags.
async fn connector_with_auth(
    env: &TestEnv,
    idp: &TestIssuer,
    extra: &[&str],
) -> HttpConnectorProcess {
    let config = idp.auth_config();
    let mut flags = vec!["--auth-config", config.to_str().unwrap()];
    flags.extend_from_slice(extra);
    HttpConnectorProcess::start(env, "mock", &flags)
        .await
        .unwrap()
}

pub(crate) fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn http_tasks_belong_to_the_token_subject_across_two_connector_processes() {
    let env = TestEnv::shared("connector-auth").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let idp = TestIssuer::start().await;
    let config = idp.auth_config();
    let config = config.to_str().unwrap();
    let extra = ["--auth-config", config, "--task-after", "500ms"];
    let first = HttpConnectorProcess::start(&env, "mock", &extra)
        .await
        .unwrap();
    let second = HttpConnectorProcess::start(&env, "mock", &extra)
        .await
        .unwrap();

    // Alice starts a slow call on the first process and gets a task.
    let alice = client(&first.url, &idp.token("alice", SCOPE, 1)).await;
    let started = alice
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("slow")
                .with_arguments(args(json!({"key": "auth-1", "sleep_ms": 4000}))),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(created) = started else {
        panic!("expected a task, got {started:?}")
    };
    let task_id = created.task.task_id.clone();

    // Bob, with a valid token of his own, cannot read or cancel it on the second process: he
    // gets the answer a forged ID gets.
    let bob = client(&second.url, &idp.token("bob", SCOPE, 1)).await;
    let foreign = bob
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap_err()
        .to_string();
    let forged = bob
        .peer()
        .get_task(GetTaskParams::new("forged"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(foreign, forged);
    assert!(foreign.contains("unknown task"), "{foreign}");
    let cancel = bob
        .peer()
        .cancel_task(CancelTaskParams::new(&task_id))
        .await
        .unwrap_err();
    assert!(cancel.to_string().contains("unknown task"), "{cancel}");
    // The call is still running after Bob's attempt, so "his cancel did nothing" means it.
    let state = alice
        .peer()
        .get_task(GetTaskParams::new(&task_id))
        .await
        .unwrap();
    assert_eq!(
        state.task.status(),
        rmcp::model::TaskStatus::Working,
        "{state:?}"
    );

    // Alice, with a renewed token, on the second process: it answers, and the call completes
    // (Bob's cancel did nothing).
    let alice_again = client(&second.url, &idp.token("alice", SCOPE, 2)).await;
    let done = poll_task_until_done(&alice_again, &task_id).await;
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"key": "auth-1", "sleep_ms": 4000}),
        "{done}"
    );
    assert_eq!(
        ledger.count("slow", LedgerEvent::Cancelled),
        0,
        "{:?}",
        ledger.read()
    );

    // Idempotency keys are per subject too: one key, two subjects, two executions.
    let mut results = Vec::new();
    for (who, c) in [("alice", &alice), ("bob", &bob)] {
        let mut request = CallToolRequestParams::new("echo")
            .with_arguments(args(json!({"key": format!("idem-{who}")})));
        request.meta =
            Some(serde_json::from_value(json!({"idempotencyKey": "shared-key"})).unwrap());
        let response = c.peer().call_tool_once(request).await.unwrap();
        let CallToolResponse::Complete(result) = response else {
            panic!("expected a result, got {response:?}")
        };
        results.push(serde_json::to_value(&result).unwrap());
    }
    assert_ne!(results[0]["isError"], json!(true), "{}", results[0]);
    assert_ne!(
        results[1]["isError"],
        json!(true),
        "bob's call is not alice's: {}",
        results[1]
    );
    assert_eq!(
        results[1]["structuredContent"]["key"],
        json!("idem-bob"),
        "{}",
        results[1]
    );

    // The token never reaches Temporal: the operation's Nexus headers carry none of it.
    let op_id = task_op_id(
        &SigningKey::from_base64(TEST_SIGNING_KEY).unwrap(),
        &env.namespace,
        &CallerScope::Subject {
            issuer: idp.url.clone(),
            subject: "alice".into(),
        },
        &task_id,
    );
    let described = env
        .client
        .describe(&durable_mcp::nexus::OperationRef {
            operation_id: op_id.clone(),
            run_id: String::new(),
        })
        .await
        .unwrap();
    let token = idp.token("alice", SCOPE, 1);
    let header_text = format!("{:?}", described.headers);
    assert!(!header_text.contains(&token[..40]), "{header_text}");
    assert!(
        !header_text.to_lowercase().contains("authorization"),
        "{header_text}"
    );

    for c in [alice, bob, alice_again] {
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn unauthenticated_requests_get_challenges_that_lead_to_the_metadata() {
    let env = TestEnv::shared("connector-auth-challenges").await;
    let idp = TestIssuer::start().await;
    let config = idp.auth_config();
    let connector =
        HttpConnectorProcess::start(&env, "mock", &["--auth-config", config.to_str().unwrap()])
            .await
            .unwrap();
    let base = format!("http://{}", connector.addr);
    let http = reqwest::Client::new();

    // The metadata is public, at the RFC 9728 path for the resource and at the bare path.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let doc: Value = response.json().await.unwrap();
        assert_eq!(doc["resource"], json!(AUDIENCE), "{doc}");
        assert_eq!(doc["authorization_servers"], json!([idp.url]), "{doc}");
        assert_eq!(doc["scopes_supported"], json!([SCOPE]), "{doc}");
    }

    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    });
    let post = |token: Option<String>| {
        let mut request = http
            .post(format!("{base}/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        request.send()
    };
    let metadata_param =
        "resource_metadata=\"http://localhost/.well-known/oauth-protected-resource/mcp\"";

    // No token: 401 pointing at the metadata, no error code (RFC 6750 3.1).
    let response = post(None).await.unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(challenge.contains(metadata_param), "{challenge}");
    assert!(!challenge.contains("error="), "{challenge}");
    // A refused client does not keep its connection (R-CON-19): also a request without a body,
    // whose connection hyper would otherwise keep alive.
    let get = http
        .get(format!("{base}/mcp"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 401);
    assert_eq!(
        get.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "a refusal closes its connection"
    );

    // Tokens that are not good enough, each with its reason.
    let other_idp = TestIssuer::start().await;
    let expired = {
        let now = jsonwebtoken::get_current_timestamp();
        let claims = json!({"iss": idp.url, "sub": "alice", "aud": AUDIENCE, "scope": SCOPE,
                            "exp": now - 3600});
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(KID.into());
        // RFC 9068 access tokens (R-CON-9).
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, &claims, &idp.key).unwrap()
    };
    let cases = [
        ("garbage".to_owned(), 401, "invalid_token"),
        (expired, 401, "invalid_token"),
        // Signed by another issuer's key under the same kid.
        (other_idp.token("alice", SCOPE, 1), 401, "invalid_token"),
        (idp.token("alice", "other", 1), 403, "insufficient_scope"),
    ];
    for (token, status, error) in cases {
        let response = post(Some(token)).await.unwrap();
        assert_eq!(response.status(), status, "{error}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            challenge.contains(&format!("error=\"{error}\"")),
            "{challenge}"
        );
        assert!(challenge.contains(metadata_param), "{challenge}");
        assert!(
            challenge.contains(&format!("scope=\"{SCOPE}\"")),
            "{challenge}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], json!(error), "{body}");
    }

    // A good token gets through to MCP.
    let response = post(Some(idp.token("alice", SCOPE, 1))).await.unwrap();
    assert_eq!(response.status(), 200);
}

/// What docs/connector.md's "Mount the connector in your own server" shows: a host authenticates in its
/// own middleware and hands the connector a `CallerScope`; with `require_verified_caller`, a
/// request the middleware did not vouch for is refused rather than served in a shared scope.
#[tokio::test]
async fn a_host_can_mount_the_connector_behind_its_own_identity_middleware() {
    use durable_mcp::connector::{
        http::{HttpOptions, router},
        route::Route,
        server::{Connector, ConnectorOptions},
        task_ref::CallerScope,
    };
    let env = TestEnv::shared("connector-host-middleware").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let mut options = ConnectorOptions::new(vec![Route::new("mock", env.endpoint.clone())]);
    options.task_after = Duration::from_millis(300);
    options.require_verified_caller = true;
    let connector = Connector::new(env.client.clone(), options);

    // The host's own identity check (here: a trusted header set by its gateway).
    async fn identify(
        mut request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let user = request
            .headers()
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(user) = user {
            request.extensions_mut().insert(CallerScope::Subject {
                issuer: "https://gateway.example".into(),
                subject: user,
            });
        }
        next.run(request).await
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = router(connector, &HttpOptions::new(addr), addr, shutdown.clone())
        .layer(axum::middleware::from_fn(identify));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}/mcp");

    let as_user = |user: Option<&str>| {
        let mut headers = std::collections::HashMap::new();
        if let Some(user) = user {
            headers.insert(
                reqwest::header::HeaderName::from_static("x-user"),
                reqwest::header::HeaderValue::from_str(user).unwrap(),
            );
        }
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(headers),
        );
        tasks_client_config().serve(transport)
    };
    let alice = as_user(Some("alice")).await.unwrap();
    let bob = as_user(Some("bob")).await.unwrap();
    let started = alice
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("slow")
                .with_arguments(args(json!({"key": "host-1", "sleep_ms": 1500}))),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(created) = started else {
        panic!("expected a task, got {started:?}")
    };
    let foreign = bob
        .peer()
        .get_task(GetTaskParams::new(&created.task.task_id))
        .await
        .unwrap_err();
    assert!(foreign.to_string().contains("unknown task"), "{foreign}");
    let done = poll_task_until_done(&alice, &created.task.task_id).await;
    assert_eq!(done["status"], json!("completed"), "{done}");

    // Nobody vouched for this caller: refused, and nothing started upstream.
    let anonymous = as_user(None).await.unwrap();
    let refused = anonymous
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("echo").with_arguments(args(json!({"key": "anon"}))),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("authenticated caller"),
        "{refused}"
    );
    assert_eq!(ledger.count_key("echo", LedgerEvent::Called, "anon"), 0);

    for c in [alice, bob, anonymous] {
        c.cancel().await.unwrap();
    }
    shutdown.cancel();
    server.abort();
}

/// A session id is a handle to someone's calls: another caller with a valid token of its own
/// gets "unknown session" for every use of it (requests, the event stream, closing it).
#[tokio::test]
async fn a_session_belongs_to_the_caller_that_opened_it() {
    let env = TestEnv::shared("connector-auth-sessions").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let idp = TestIssuer::start().await;
    let connector = connector_with_auth(&env, &idp, &["--max-sessions-per-caller", "2"]).await;
    let url = connector.url.clone();
    let http = reqwest::Client::new();
    let alice = idp.token("alice", SCOPE, 1);
    let bob = idp.token("bob", SCOPE, 1);
    let post = |token: &str, session: Option<&str>, body: Value| {
        let mut request = http
            .post(&url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            request = request.header("mcp-session-id", s);
        }
        request.send()
    };
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}},
    });
    let opened = post(&alice, None, initialize.clone()).await.unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(opened);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(&alice, Some(&session), initialized)
            .await
            .unwrap()
            .status(),
        202
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    // Bob, with a good token of his own, cannot use Alice's session in any way.
    assert_eq!(
        post(&bob, Some(&session), list.clone())
            .await
            .unwrap()
            .status(),
        404
    );
    let get = http
        .get(&url)
        .bearer_auth(&bob)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 404);
    let delete = http
        .delete(&url)
        .bearer_auth(&bob)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 404);

    // Bob opening sessions in a loop evicts only his own oldest (R-CON-28): two at most.
    let mut bobs = Vec::new();
    for _ in 0..3 {
        let opened = post(&bob, None, initialize.clone()).await.unwrap();
        assert_eq!(opened.status(), 200);
        bobs.push(
            opened.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(&bob, Some(&bobs[0]), initialized.clone())
            .await
            .unwrap()
            .status(),
        404,
        "the oldest went"
    );
    assert_eq!(
        post(&bob, Some(&bobs[2]), initialized)
            .await
            .unwrap()
            .status(),
        202
    );
    // A session with a stream open is never evicted: with both of his listening, Bob's next
    // session is refused, naming the flag, and both streams stay (R-CON-28).
    let mut streams = Vec::new();
    for id in &bobs[1..] {
        let stream = http
            .get(&url)
            .bearer_auth(&bob)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", id)
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    let refused = post(&bob, None, initialize.clone()).await.unwrap();
    assert_eq!(refused.status(), 503);
    let why = refused.text().await.unwrap();
    assert!(why.contains("--max-sessions-per-caller 2"), "{why}");
    for id in &bobs[1..] {
        let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
        let answered = post(&bob, Some(id), ping).await.unwrap();
        assert_eq!(answered.status(), 200, "{id} kept");
    }
    drop(streams);

    // Alice's session is untouched.
    let listed = post(&alice, Some(&session), list.clone()).await.unwrap();
    assert_eq!(listed.status(), 200);
    let text = listed.text().await.unwrap();
    assert!(text.contains("\"echo\""), "{text}");
    let closed = http
        .delete(&url)
        .bearer_auth(&alice)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert_eq!(
        post(&alice, Some(&session), list).await.unwrap().status(),
        404
    );
}

/// One `--temporal-tools` call over HTTP as the caller of `token`: the result as JSON.
async fn ops_call(url: &str, token: &str, tool: &str, arguments: Value) -> Value {
    let caller = client(url, token).await;
    let result = caller
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments)))
        .await
        .unwrap();
    caller.cancel().await.unwrap();
    serde_json::to_value(result).unwrap()
}

#[tokio::test]
async fn temporal_tool_families_need_the_scopes_the_operator_set() {
    let env = TestEnv::shared("ops-scopes").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let idp = TestIssuer::start().await;
    let config = idp.auth_config();

    // A family left out would be open to every token: the connector refuses to start, naming
    // the family and the flag, before it connects to anything.
    for scopes in [Some("read=temporal.read,admin=temporal.admin"), None] {
        let mut command = connector_command(&env, "mock");
        command.args([
            "--transport",
            "http",
            "--addr",
            "127.0.0.1:0",
            "--auth-config",
            config.to_str().unwrap(),
            "--temporal-tools",
        ]);
        if let Some(scopes) = scopes {
            command.args(["--temporal-tools-scopes", scopes]);
        }
        command
            .env("MCP_TASK_SIGNING_KEY", TEST_SIGNING_KEY)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .unwrap_or_else(|_| panic!("{scopes:?}: the connector started and kept serving"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{scopes:?} started: {stderr}");
        assert!(
            stderr.contains("--temporal-tools-scopes") && stderr.contains("write"),
            "{scopes:?}: {stderr}"
        );
    }

    let extra = [
        "--auth-config",
        config.to_str().unwrap(),
        "--temporal-tools",
        "--temporal-tools-scopes",
        "read=temporal.read,write=temporal.write,admin=temporal.admin",
    ];
    let connector = HttpConnectorProcess::start(&env, "mock", &extra)
        .await
        .unwrap();
    let plain = idp.token("plain", SCOPE, 1);
    let writer = idp.token("writer", &format!("{SCOPE} temporal.write"), 1);
    let reader = idp.token(
        "reader",
        &format!("{SCOPE} temporal.read temporal.write"),
        1,
    );
    let admin = idp.token("admin", &format!("{SCOPE} temporal.admin"), 1);
    let id = durable_mcp_conformance::harness::unique_name("ops-scoped");
    let workflow = json!({"workflow_id": id});
    let start =
        json!({"workflow_type": "never-run", "task_queue": env.task_queue, "workflow_id": id});
    let refused_for = |answer: &Value, scope: &str| {
        assert_eq!(answer["isError"], json!(true), "{answer}");
        assert_eq!(
            answer["_meta"]["io.durable-mcp/errorType"],
            json!(ConnectorErrorType::InsufficientScope.as_str()),
            "{answer}"
        );
        assert!(
            answer.to_string().contains(scope),
            "names {scope}: {answer}"
        );
    };

    // A token with only the connector's own scope may neither start nor batch-cancel.
    let started = ops_call(&connector.url, &plain, "start_workflow", start.clone()).await;
    refused_for(&started, "temporal.write");
    let batch = json!({"query": format!("WorkflowId = '{id}'")});
    let cancelled = ops_call(&connector.url, &plain, "batch_cancel", batch.clone()).await;
    refused_for(&cancelled, "temporal.write");
    // Write without read may not batch: the answer would count what the query matches.
    let cancelled = ops_call(&connector.url, &writer, "batch_cancel", batch).await;
    refused_for(&cancelled, "temporal.read");

    // The reader (read and write) may start a Workflow (no worker runs it).
    let started = ops_call(&connector.url, &reader, "start_workflow", start).await;
    assert_eq!(started["isError"], json!(false), "{started}");

    // Terminate is admin: refused for the reader, and the Workflow runs on untouched.
    let refused = ops_call(
        &connector.url,
        &reader,
        "terminate_workflow",
        json!({"workflow_id": id, "reason": "not yours"}),
    )
    .await;
    refused_for(&refused, "temporal.admin");
    let described = ops_call(
        &connector.url,
        &reader,
        "describe_workflow",
        workflow.clone(),
    )
    .await;
    assert_eq!(
        described["structuredContent"]["status"],
        json!("RUNNING"),
        "{described}"
    );

    // With the scope, the same call goes through.
    let terminated = ops_call(
        &connector.url,
        &admin,
        "terminate_workflow",
        json!({"workflow_id": id, "reason": "admin says so"}),
    )
    .await;
    assert_eq!(terminated["isError"], json!(false), "{terminated}");
    let described = ops_call(&connector.url, &reader, "describe_workflow", workflow).await;
    assert_eq!(
        described["structuredContent"]["status"],
        json!("TERMINATED"),
        "{described}"
    );
}

/// R-CON-38: under auth one caller holds at most `--http-max-connections-per-caller`
/// connections, whatever addresses they come from: a connection counts for the first caller
/// whose request it carries, a request on one more gets 503 naming the flag with
/// `Connection: close`, another caller is served, and a closed connection frees its place.
#[tokio::test]
async fn a_caller_at_its_connection_share_is_refused_and_another_is_served() {
    let env = TestEnv::shared("connector-auth-connections").await;
    let idp = TestIssuer::start().await;
    let connector =
        connector_with_auth(&env, &idp, &["--http-max-connections-per-caller", "1"]).await;
    let url = connector.url.clone();
    let (alice, bob) = (idp.token("alice", SCOPE, 1), idp.token("bob", SCOPE, 1));
    // Each reqwest client keeps a connection of its own open between requests.
    let initialize = |http: &reqwest::Client, token: &str| {
        http.post(&url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "0"}},
            }))
            .send()
    };
    let served = |response: reqwest::Response| async move {
        let status = response.status();
        response.text().await.unwrap();
        status == 200
    };
    let alices_first = reqwest::Client::new();
    assert!(served(initialize(&alices_first, &alice).await.unwrap()).await);

    let alices_second = reqwest::Client::new();
    let refused = initialize(&alices_second, &alice).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["connection"], "close");
    let text = refused.text().await.unwrap();
    assert!(
        text.contains("--http-max-connections-per-caller 1"),
        "{text}"
    );

    let bobs = reqwest::Client::new();
    assert!(
        served(initialize(&bobs, &bob).await.unwrap()).await,
        "another caller is served"
    );
    assert!(
        served(initialize(&alices_first, &alice).await.unwrap()).await,
        "alice's own connection still serves her"
    );

    drop(alices_first);
    let freed = async {
        while !served(initialize(&reqwest::Client::new(), &alice).await.unwrap()).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), freed)
        .await
        .expect("a closed connection frees its caller's place");
}
