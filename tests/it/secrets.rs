//! No secret reaches a log line or Temporal: the connector and the proxy binaries run at
//! `RUST_LOG=trace` (every crate, every level), serve real calls carrying a bearer token, a
//! task signing key and upstream credentials, and their whole logs are searched for them. With
//! an encrypting codec on both sides, Temporal stores no argument or result in clear.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use durable_mcp::{
    contract::payload,
    nexus::{OperationOutcome, StartOperation},
};
use durable_mcp_conformance::fixtures::{self, Ledger, SpecSource, UpstreamSpec};
use rmcp::model::{CallToolRequestParams, CallToolResponse, GetTaskParams};
use serde_json::json;
use temporalio_protos::temporal::api::common::v1::Payload;

use crate::{
    connector_auth::{SCOPE, TestIssuer, args, client},
    support::{
        CONNECTOR_LISTENING, TEST_SIGNING_KEY, TestEnv, connector_command, mock_stdio_upstream,
        start_and_wait, start_proxy, stored_operation, temp_path, workspace_bin,
    },
};

/// Waits for `line_prefix` in a log file being written by a child; returns the rest of the line.
pub(crate) async fn announced(
    log: &Path,
    line_prefix: &str,
    child: &mut tokio::process::Child,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find_map(|l| l.split_once(line_prefix).map(|(_, rest)| rest))
        {
            return line.trim().to_owned();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child exited ({status}) before announcing itself:\n{text}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing announced:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `[worker]` and `[temporal]` tables of a `proxy.toml` for `env`.
pub(crate) fn proxy_toml_head(env: &TestEnv) -> String {
    format!(
        "[worker]\ntask_queue = \"{}\"\n\n[temporal]\naddress = \"{}\"\nnamespace = \"{}\"\n",
        env.task_queue, env.address, env.namespace
    )
}

/// A `proxy.toml` `[[upstream]]` table: service `local`, the mock upstream over stdio with
/// `ledger` and the tools of `spec`.
pub(crate) fn local_mock_upstream(ledger: &Path, spec: &Path) -> String {
    format!(
        r#"
[[upstream]]
service = "local"
transport = "stdio"
command = "{mock}"
args = ["--ledger", "{ledger}", "--spec", "{spec}"]
"#,
        mock = fixtures::mock_upstream_bin().unwrap().display(),
        ledger = ledger.display(),
        spec = spec.display(),
    )
}

/// The `durable-mcp-proxy` binary at `RUST_LOG=trace` with `config` and the extra environment
/// `vars`; its stdout and stderr go to the returned log file.
pub(crate) fn spawn_proxy(config: &str, vars: &[(&str, &str)]) -> (tokio::process::Child, PathBuf) {
    let config_path = temp_path("proxy.toml");
    std::fs::write(&config_path, config).unwrap();
    let log_path = config_path.with_file_name("proxy.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let child = tokio::process::Command::new(workspace_bin("durable-mcp-proxy").unwrap())
        .arg("--config")
        .arg(&config_path)
        .env("RUST_LOG", "trace")
        .envs(vars.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (child, log_path)
}

/// Spawns `command` (a `durable-mcp-connector --transport http`) with the test signing key at
/// `RUST_LOG=rust_log`, its stderr in a log file; once it announced its address: the child, the
/// log file and the MCP URL.
async fn spawn_http_connector(
    mut command: tokio::process::Command,
    rust_log: &str,
) -> (tokio::process::Child, PathBuf, String) {
    let log = temp_path("connector.log");
    let mut child = command
        .env("MCP_TASK_SIGNING_KEY", TEST_SIGNING_KEY)
        .env("RUST_LOG", rust_log)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = announced(&log, CONNECTOR_LISTENING, &mut child).await;
    (child, log, url)
}

/// Asserts that none of `secrets` occurs in the log.
fn assert_absent(log: &str, secrets: &[(&str, &str)]) {
    assert!(
        log.len() > 1000,
        "a trace log this short means tracing was not on: {log}"
    );
    for (what, secret) in secrets {
        assert!(!secret.is_empty());
        if let Some(at) = log.find(secret) {
            let from = log[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = log[at..].find('\n').map_or(log.len(), |i| at + i);
            panic!("the {what} reached a log line: {}", &log[from..to]);
        }
    }
}

#[tokio::test]
async fn no_bearer_token_or_signing_key_reaches_the_connector_log() {
    let env = TestEnv::shared("secrets-connector").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let idp = TestIssuer::start().await;
    let config = idp.auth_config();
    let mut command = connector_command(&env, "mock");
    command
        .args([
            "--transport",
            "http",
            "--addr",
            "127.0.0.1:0",
            "--task-after",
            "300ms",
        ])
        .arg("--auth-config")
        .arg(&config);
    let (mut child, log_path, url) = spawn_http_connector(command, "trace").await;

    let token = idp.token("alice", SCOPE, 1);
    let alice = client(&url, &token).await;
    // A call, a task and its polling: every path that handles the token and the key.
    let echo = alice
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("echo").with_arguments(args(json!({"key": "s1"}))),
        )
        .await
        .unwrap();
    assert!(matches!(echo, CallToolResponse::Complete(_)), "{echo:?}");
    let slow = alice
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("slow")
                .with_arguments(args(json!({"key": "s2", "sleep_ms": 1000}))),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(task) = slow else {
        panic!("expected a task: {slow:?}")
    };
    crate::support::poll_task_until_done(&alice, &task.task.task_id).await;
    // A refused token is not logged either.
    let refused = idp.token("mallory", "wrong-scope", 7);
    let status = reqwest::Client::new()
        .post(&url)
        .bearer_auth(&refused)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403);
    let _ = alice.peer().get_task(GetTaskParams::new("forged")).await;
    alice.cancel().await.unwrap();
    child.kill().await.unwrap();

    let log = std::fs::read_to_string(&log_path).unwrap();
    let key_bytes = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, TEST_SIGNING_KEY)
            .unwrap(),
    )
    .unwrap();
    let signature = |t: &str| t.rsplit('.').next().unwrap().to_owned();
    assert_absent(
        &log,
        &[
            ("bearer token", &token),
            ("bearer token's signature", &signature(&token)),
            ("refused token", &refused),
            ("refused token's signature", &signature(&refused)),
            ("signing key", TEST_SIGNING_KEY),
            ("signing key's bytes", &key_bytes),
        ],
    );
}

#[tokio::test]
async fn no_upstream_credential_reaches_the_proxy_log_or_temporal() {
    let env = TestEnv::shared("secrets-proxy").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let http = fixtures::serve_mock_upstream_http(
        SpecSource::Inline(UpstreamSpec::standard()),
        Some(ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let header_secret = format!("hdr-{}", uuid::Uuid::new_v4().simple());
    let env_secret = format!("env-{}", uuid::Uuid::new_v4().simple());
    let url_token = format!("qry-{}", uuid::Uuid::new_v4().simple());
    let url_password = format!("pwd-{}", uuid::Uuid::new_v4().simple());
    // An upstream behind OAuth client credentials (R-PRX-15): its client secret and the token
    // the (wiremock) token endpoint hands out must not leave the proxy either.
    let client_secret = format!("cs-{}", uuid::Uuid::new_v4().simple());
    let access_token = format!("at-{}", uuid::Uuid::new_v4().simple());
    let token_endpoint = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "access_token": access_token, "token_type": "Bearer", "expires_in": 3600
        })))
        .mount(&token_endpoint)
        .await;
    let guarded = fixtures::faults::faulty_upstream(
        &UpstreamSpec::standard(),
        fixtures::faults::HttpFault::Status {
            code: 500,
            times: 0,
        },
        ledger.clone(),
    )
    .await;
    let config = format!(
        r#"{head}
[[upstream]]
service = "web"
transport = "http"
url = "{url}"
headers = {{ Authorization = "Bearer ${{UPSTREAM_TOKEN}}" }}

[[upstream]]
service = "down"
transport = "http"
url = "http://u:${{URL_PASSWORD}}@127.0.0.1:9/mcp?api_key=${{URL_TOKEN}}"

[[upstream]]
service = "guarded"
transport = "http"
url = "{guarded}"
[upstream.oauth]
token_url = "{token_url}"
client_id = "proxy"
client_secret_env = "OAUTH_CLIENT_SECRET"

[[upstream]]
service = "local"
transport = "stdio"
command = "{mock}"
args = ["--ledger", "{ledger}"]
env = {{ API_KEY = "${{UPSTREAM_API_KEY}}" }}
"#,
        head = proxy_toml_head(&env),
        url =
            http.url.replacen("http://", "http://u:${URL_PASSWORD}@", 1) + "?api_key=${URL_TOKEN}",
        mock = fixtures::mock_upstream_bin().unwrap().display(),
        ledger = ledger.path().display(),
        guarded = fixtures::faults::mcp_url(&guarded),
        token_url = token_endpoint.uri() + "/token",
    );
    let (mut child, log_path) = spawn_proxy(
        &config,
        &[
            ("UPSTREAM_TOKEN", &header_secret),
            ("UPSTREAM_API_KEY", &env_secret),
            ("URL_TOKEN", &url_token),
            ("URL_PASSWORD", &url_password),
            ("OAUTH_CLIENT_SECRET", &client_secret),
        ],
    );
    let secrets = [
        &header_secret,
        &env_secret,
        &url_token,
        &url_password,
        &client_secret,
        &access_token,
    ];

    // One call per upstream through Nexus, as any caller would make it.
    for (service, key) in [("web", "p1"), ("local", "p2"), ("guarded", "p4")] {
        let input = payload::to_payload(&json!({"key": key})).unwrap();
        let mut start = StartOperation::new(
            format!("secrets-{key}-{}", uuid::Uuid::new_v4()),
            &env.endpoint,
            service,
            "echo",
            input,
        );
        start.schedule_to_close = Some(Duration::from_secs(60));
        let (op, outcome) = start_and_wait(&env, start).await;
        let OperationOutcome::Succeeded(result) = outcome else {
            panic!(
                "{service}: {outcome:?}\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            )
        };
        let text = payload::to_json(&result).unwrap().to_string();
        assert!(text.contains(key), "{text}");
        // Nothing the caller or Temporal sees carries a credential.
        let described = env.client.describe(&op).await.unwrap();
        let seen = format!(
            "{text} {:?} {}",
            described.headers, described.operation_token
        );
        assert!(!secrets.iter().any(|s| seen.contains(s.as_str())), "{seen}");
    }
    // An upstream that cannot be reached: the HTTP client's error quotes the URL, and that
    // error goes to the log and into Temporal as the start's failure.
    let mut start = StartOperation::new(
        format!("secrets-down-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "down",
        "echo",
        payload::to_payload(&json!({"key": "p3"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(30));
    let (op, _) = env.client.start(start).await.unwrap();
    let failure = loop {
        let described = env.client.describe(&op).await.unwrap();
        if let Some(failure) = described.last_attempt_failure {
            break failure;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(failure.contains("127.0.0.1:9"), "{failure}");
    assert!(
        !secrets.iter().any(|s| failure.contains(s.as_str())),
        "{failure}"
    );
    child.kill().await.unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_absent(
        &log,
        &[
            ("upstream header value", &header_secret),
            ("upstream env value", &env_secret),
            ("upstream URL query", &url_token),
            ("upstream URL password", &url_password),
            ("OAuth client secret", &client_secret),
            ("OAuth access token", &access_token),
        ],
    );
    // The token did reach the upstream, as a bearer token.
    let carried = guarded
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| {
            r.headers
                .get("authorization")
                .is_some_and(|v| v.as_bytes() == format!("Bearer {access_token}").as_bytes())
        })
        .count();
    assert!(
        carried > 0,
        "no request to the guarded upstream carried the token"
    );
}

/// Whether process `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(!matches!(state, 'Z' | 'X'))
        })
        .unwrap_or(false)
}

/// Waits until `file` holds a line (the shell wrappers below write them before exec).
async fn read_when_written(file: &Path) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.ends_with('\n') {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never written",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// R-PRX-11, the reproduction of the review: a proxy started with another upstream's token in
/// its environment, and a stdio upstream wrapped in `sh -c 'env > file; ...; exec server'`.
#[tokio::test]
async fn stdio_children_get_a_minimal_environment_and_die_with_the_proxy_grandchildren_included() {
    let env = TestEnv::shared("secrets-child-env").await;
    let dir = temp_path("children");
    std::fs::create_dir_all(&dir).unwrap();
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let mock = fixtures::mock_upstream_bin().unwrap();
    let ledger = Ledger::new(dir.join("ledger.jsonl"));
    // `$$` is a literal `$` in proxy.toml: `$$!` is the shell's `$!`, `$$$$` its `$$`.
    let wrapper = |name: &str| {
        format!(
            "env > {dir}/{name}.env; sleep 300 & echo $$! > {dir}/{name}.grandchild; \
             echo $$$$ > {dir}/{name}.server; exec {mock} --ledger {ledger}",
            dir = dir.display(),
            mock = mock.display(),
            ledger = ledger.path().display(),
        )
    };
    let config = format!(
        r#"{head}
[[upstream]]
service = "web"
transport = "http"
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer ${{OTHER_UPSTREAM_TOKEN}}" }}

[[upstream]]
service = "isolated"
transport = "stdio"
command = "sh"
args = ["-c", "{isolated}"]
env = {{ OWN_SETTING = "mine" }}

[[upstream]]
service = "inheriting"
transport = "stdio"
command = "sh"
args = ["-c", "{inheriting}"]
inherit_env = true
"#,
        head = proxy_toml_head(&env),
        isolated = wrapper("isolated"),
        inheriting = wrapper("inheriting"),
    );
    let (mut proxy, log_path) = spawn_proxy(&config, &[("OTHER_UPSTREAM_TOKEN", &token)]);

    // Discovery at startup starts both children.
    let pids = |name: &str| {
        let dir = dir.clone();
        let name = name.to_owned();
        async move {
            let pid = |what: &str| {
                let file = dir.join(format!("{name}.{what}"));
                async move {
                    read_when_written(&file)
                        .await
                        .trim()
                        .parse::<u32>()
                        .unwrap()
                }
            };
            [pid("server").await, pid("grandchild").await]
        }
    };
    let mut all = Vec::new();
    for name in ["isolated", "inheriting"] {
        all.extend(pids(name).await);
    }
    let isolated = std::fs::read_to_string(dir.join("isolated.env")).unwrap();
    let inheriting = std::fs::read_to_string(dir.join("inheriting.env")).unwrap();
    assert!(
        !isolated.contains(&token) && !isolated.contains("RUST_LOG="),
        "another upstream's secret reached a child: {isolated}"
    );
    assert!(
        isolated.contains("OWN_SETTING=mine") && isolated.contains("PATH="),
        "{isolated}"
    );
    assert!(
        inheriting.contains(&token) && !inheriting.contains("OWN_SETTING"),
        "inherit_env passes the whole environment: {inheriting}"
    );

    // The isolated child is a working upstream.
    let mut start = StartOperation::new(
        format!("child-env-{}", uuid::Uuid::new_v4()),
        &env.endpoint,
        "isolated",
        "echo",
        payload::to_payload(&json!({"key": "c1"})).unwrap(),
    );
    start.schedule_to_close = Some(Duration::from_secs(60));
    let (_, outcome) = start_and_wait(&env, start).await;
    assert!(
        matches!(outcome, OperationOutcome::Succeeded(_)),
        "{outcome:?}\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );

    // SIGKILL: the proxy has no chance to clean up, and still nothing of its children stays.
    assert!(all.iter().all(|pid| running(*pid)), "{all:?}");
    proxy.kill().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while all.iter().any(|pid| running(*pid)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "children outlived the proxy: {:?}",
            all.iter().filter(|pid| running(**pid)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bytes Temporal stores for these payloads: data and every metadata value.
fn stored_bytes<'a>(payloads: impl IntoIterator<Item = &'a Payload>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in payloads {
        out.extend_from_slice(&p.data);
        for (k, v) in &p.metadata {
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(v);
        }
        out.push(b'\n');
    }
    out
}

/// Every payload is sealed by the test codec server (R-PRX-20).
fn assert_sealed<'a>(what: &str, payloads: impl IntoIterator<Item = &'a Payload>) {
    let mut n = 0;
    for p in payloads {
        n += 1;
        assert_eq!(
            payload::encoding(p),
            Some(fixtures::codec::ENCRYPTED_ENCODING),
            "{what} is stored unencrypted: {p:?}"
        );
    }
    assert!(n > 0, "{what}: Temporal holds no payload to check");
}

fn find(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The standard mock plus `steps`: three progress notifications 2 s apart, then an echo (so
/// the call heartbeats at least once).
fn steps_spec() -> std::path::PathBuf {
    spec_file_with(
        "steps",
        "reports progress three times, 2 s apart",
        fixtures::Behavior::Progress { steps: 3, ms: 2000 },
    )
}

/// The standard upstream spec plus one read-only tool, written to a file for the mock.
fn spec_file_with(name: &str, description: &str, behavior: fixtures::Behavior) -> PathBuf {
    let mut spec = UpstreamSpec::standard();
    spec.tools
        .push(fixtures::ToolSpec::read_only(name, description, behavior));
    let path = temp_path("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
    path
}

/// End to end with an encrypting codec on both sides (R-PRX-20, R-PRX-21, R-CON-8): an MCP
/// client calls the connector binary (`--codec-endpoint`), which calls the proxy binary
/// (`[codec]`) through Temporal, which calls the upstream. The call succeeds with the argument
/// echoed back, and what Temporal stores for the Nexus operation (input, result) and for the
/// call's Activity (input, result, heartbeats) holds neither the argument nor the
/// result in clear. The upstream's progress still shows in the call's task status (the connector
/// decodes the encrypted heartbeats), and the codec's bearer token reaches no log.
#[tokio::test]
async fn with_a_codec_on_both_sides_temporal_holds_no_plaintext_argument_or_result() {
    use temporalio_protos::temporal::api::workflowservice::v1::{
        DescribeActivityExecutionRequest, ListNexusOperationExecutionsRequest,
        describe_nexus_operation_execution_response::Outcome,
    };
    let env = TestEnv::shared("secrets-codec").await;
    let codec_token = format!("codec-{}", uuid::Uuid::new_v4().simple());
    let codec = fixtures::CodecServer::start(
        "127.0.0.1:0".parse().unwrap(),
        None,
        Some(format!("Bearer {codec_token}")),
    )
    .await
    .unwrap();
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let config_path = temp_path("proxy.toml");
    std::fs::write(
        &config_path,
        format!(
            r#"
[worker]
task_queue = "{task_queue}"

[temporal]
address = "{address}"
namespace = "{namespace}"

[codec]
endpoint = "{codec}"
headers = {{ Authorization = "Bearer ${{CODEC_TOKEN}}" }}
{upstream}"#,
            task_queue = env.task_queue,
            address = env.address,
            namespace = env.namespace,
            codec = codec.url,
            upstream = local_mock_upstream(ledger.path(), &steps_spec()),
        ),
    )
    .unwrap();
    let proxy_log = temp_path("proxy.log");
    let log_file = std::fs::File::create(&proxy_log).unwrap();
    let mut proxy = tokio::process::Command::new(workspace_bin("durable-mcp-proxy").unwrap())
        .arg("--config")
        .arg(&config_path)
        .env("RUST_LOG", "debug")
        .env("CODEC_TOKEN", &codec_token)
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut command = connector_command(&env, "local");
    command
        .args([
            "--transport",
            "http",
            "--addr",
            "127.0.0.1:0",
            "--task-after",
            "300ms",
        ])
        .args(["--codec-endpoint", &codec.url])
        .env("TEMPORAL_CODEC_AUTH", format!("Bearer {codec_token}"));
    let (mut connector, connector_log, url) = spawn_http_connector(command, "debug").await;

    // A call that reports progress, so the Activity heartbeats: the connector must decode the
    // encrypted heartbeats to forward the progress.
    let canary = format!("plaintext-canary-{}", uuid::Uuid::new_v4().simple());
    let client = crate::support::stateless_http_client(&url, crate::support::tasks_client_config())
        .await
        .unwrap();
    let task = crate::support::task_id_of(
        client
            .peer()
            .call_tool_once(
                CallToolRequestParams::new("steps").with_arguments(args(json!({"key": canary}))),
            )
            .await
            .unwrap(),
    );
    // While it works, the task's status shows the upstream's progress, which the connector
    // reads from the Activity's (encrypted) heartbeats.
    let mut messages = Vec::new();
    let done = crate::support::poll_task_watching(&client, &task, |got| {
        if let Some(m) = got["statusMessage"].as_str() {
            messages.push(m.to_owned());
        }
    })
    .await;
    let shown = done.to_string();
    assert!(
        shown.contains(&canary) && done["status"] == "completed",
        "the argument did not come back: {shown}\nproxy log:\n{}",
        std::fs::read_to_string(&proxy_log).unwrap_or_default()
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("step ") && m.ends_with(" of 3")),
        "no progress came through the encrypted heartbeats: {messages:?}"
    );
    assert!(codec.encodes() > 0 && codec.decodes() > 0);
    assert!(
        codec.namespaces().iter().all(|n| n == &env.namespace),
        "{:?}",
        codec.namespaces()
    );

    // What Temporal stores for the Nexus operation (visibility lags: wait for the listing).
    let mut service = env.connection.workflow_service();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let op = loop {
        let listed = service
            .list_nexus_operation_executions(tonic::Request::new(
                ListNexusOperationExecutionsRequest {
                    namespace: env.namespace.clone(),
                    page_size: 100,
                    query: format!("Endpoint = '{}' AND Operation = 'steps'", env.endpoint),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        if let Some(op) = listed.operations.into_iter().next() {
            break op;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the steps operation never became visible"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let described = stored_operation(&env, &op.operation_id, &op.run_id).await;
    let Some(Outcome::Result(op_result)) = described.outcome.clone() else {
        panic!("the operation has no result: {described:?}")
    };
    let op_payloads = [described.input.clone().unwrap(), op_result];
    assert_sealed("the Nexus operation's input and result", &op_payloads);
    let op_text = format!("{described:?}");
    assert!(!find(&stored_bytes(&op_payloads), &canary) && !op_text.contains(&canary));

    // ... and for the call's Activity.
    let token: durable_mcp::contract::call::CallToken =
        serde_json::from_str(&described.info.unwrap().operation_token).unwrap();
    let activity = service
        .describe_activity_execution(tonic::Request::new(DescribeActivityExecutionRequest {
            namespace: env.namespace.clone(),
            activity_id: token.activity_id.clone(),
            run_id: token.run_id.clone(),
            include_input: true,
            include_outcome: true,
            include_heartbeat_details: true,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let input = activity.input.clone().unwrap_or_default().payloads;
    assert_sealed("the Activity's input", &input);
    let outcome = activity.outcome.clone().and_then(|o| o.value);
    let Some(
        temporalio_protos::temporal::api::activity::v1::activity_execution_outcome::Value::Result(
            act_result,
        ),
    ) = outcome
    else {
        panic!("the Activity has no result: {activity:?}")
    };
    assert_sealed("the Activity's result", &act_result.payloads);
    let heartbeats = activity
        .info
        .as_ref()
        .and_then(|i| i.heartbeat_details.clone())
        .unwrap_or_default()
        .payloads;
    assert_sealed("the Activity's heartbeats", &heartbeats);
    let stored = stored_bytes(input.iter().chain(&act_result.payloads).chain(&heartbeats));
    assert!(
        !find(&stored, &canary),
        "the Activity stores the canary in clear"
    );
    assert!(!format!("{activity:?}").contains(&canary));

    client.cancel().await.unwrap();
    connector.kill().await.unwrap();
    proxy.kill().await.unwrap();
    for log in [&proxy_log, &connector_log] {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            !text.contains(&codec_token),
            "the codec token reached {}",
            log.display()
        );
    }
}

/// R-CON-33: rmcp logs whole JSON-RPC messages (a tool call's arguments and its result at
/// `debug`, every notification it receives at `info`, everything at `trace`). With both binaries
/// at `RUST_LOG=trace`, a call's argument and result, the upstream's log message and its
/// progress message reach no line of the connector's or the proxy's log; the call is logged by
/// its tool and sizes instead.
#[tokio::test]
async fn no_tool_argument_result_or_notification_reaches_a_log_line() {
    let env = TestEnv::shared("secrets-contents").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let spec_path = spec_file_with(
        "told",
        "sends one log message, then echoes",
        fixtures::Behavior::Log {
            levels: vec!["warning".into()],
            ms: 0,
            every_ms: 0,
            untied: false,
        },
    );
    let config = format!(
        "{}{}",
        proxy_toml_head(&env),
        local_mock_upstream(ledger.path(), &spec_path)
    );
    let (mut proxy, proxy_log) = spawn_proxy(&config, &[]);
    let mut command = connector_command(&env, "local");
    command.args(["--transport", "http", "--addr", "127.0.0.1:0"]);
    let (mut connector, connector_log, url) = spawn_http_connector(command, "trace").await;

    let canary = format!("argument-canary-{}", uuid::Uuid::new_v4().simple());
    let client = crate::support::session_http_client(&url, ()).await.unwrap();
    for (tool, arguments) in [
        // Not in `key`, which the mock upstream itself writes to its stderr (the proxy's log).
        ("echo", json!({"key": "e", "note": canary})),
        ("told", json!({"key": "t"})),
        ("progress", json!({"key": "p"})),
    ] {
        let answer = client
            .peer()
            .call_tool_once(CallToolRequestParams::new(tool).with_arguments(args(arguments)))
            .await
            .unwrap();
        let CallToolResponse::Complete(result) = answer else {
            panic!("{tool}: {answer:?}")
        };
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
        if tool == "echo" {
            assert!(serde_json::to_string(&result).unwrap().contains(&canary));
        }
    }
    client.cancel().await.unwrap();
    connector.kill().await.unwrap();
    proxy.kill().await.unwrap();

    let contents = [
        ("tool argument (and result)", canary.as_str()),
        ("upstream log message", "warning from told"),
        ("upstream progress message", "step 1 of 3"),
    ];
    let connector_text = without_colours(&std::fs::read_to_string(&connector_log).unwrap());
    assert_absent(&connector_text, &contents);
    let proxy_text = without_colours(&std::fs::read_to_string(&proxy_log).unwrap());
    assert_absent(&proxy_text, &contents);
    // What is logged instead: the tool, the operation and sizes.
    assert!(
        connector_text
            .lines()
            .any(|l| l.contains("tool call started")
                && l.contains("tool=\"echo\"")
                && l.contains("arguments_bytes=")),
        "no start line with the tool and the arguments' size"
    );
    assert!(connector_text.contains("result_bytes="));
    assert!(
        proxy_text
            .lines()
            .any(|l| l.contains("tool call answered") && l.contains("result_bytes=")),
        "no proxy line with the result's size"
    );
}

/// `text` without its ANSI colour sequences (`ESC [ ... m`), as the log lines read.
pub(crate) fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
