//! Both binaries reach Temporal through a TLS-terminating front (R-RUN-1, R-RUN-2): over
//! server-authenticated TLS, over mTLS and with an API key, their connection flags winning over
//! the environment and the proxy's `[temporal]` table; and a wrong CA, a missing client
//! certificate and a wrong API key each stop them at start-up with an error naming the setting.

use std::{process::Stdio, sync::atomic::Ordering, time::Duration};

use durable_mcp::proxy::TransportConfig;
use durable_mcp_conformance::{
    fixtures::Ledger, harness::proxy_bin, kit::upstreams::mock_stdio_upstream,
};
use rmcp::ServiceExt as _;
use serde_json::json;

use crate::{
    support::{TestEnv, connector_command, temp_path, tool_call},
    tls_front::{Mode, TlsFront, cert_file},
};

/// An address nothing listens on: the environment points there, so only the flags can work.
const NOWHERE: &str = "127.0.0.1:1";
const API_KEY: &str = "test-api-key-0123456789";

/// The connection flags that fit `mode` (the front at `address`).
fn flags(mode: &Mode, address: &str) -> Vec<String> {
    let mut flags = vec!["--address".to_owned(), address.to_owned()];
    let ca = cert_file("ca.pem").to_string_lossy().into_owned();
    match mode {
        Mode::Tls => flags.extend(["--tls-ca".into(), ca]),
        Mode::MutualTls => flags.extend([
            "--tls-ca".into(),
            ca,
            "--tls-cert".into(),
            cert_file("client.pem").to_string_lossy().into_owned(),
            "--tls-key".into(),
            cert_file("client-key.pem").to_string_lossy().into_owned(),
            "--tls-server-name".into(),
            "localhost".into(),
        ]),
        Mode::ApiKey(key) => flags.extend(["--tls-ca".into(), ca, "--api-key".into(), key.clone()]),
    }
    flags
}

/// A `proxy.toml` for the mock upstream as `service` on the env's task queue, whose
/// `[temporal]` table points at [`NOWHERE`] (the flags must win over it).
pub(crate) fn proxy_config(env: &TestEnv, service: &str, ledger: &Ledger) -> std::path::PathBuf {
    proxy_config_for(env, service, mock_stdio_upstream(service, ledger).unwrap())
}

/// [`proxy_config`] for a mock stdio `upstream` of its own (e.g. one with a spec).
pub(crate) fn proxy_config_for(
    env: &TestEnv,
    service: &str,
    upstream: durable_mcp::proxy::UpstreamConfig,
) -> std::path::PathBuf {
    let TransportConfig::Stdio { command, args, .. } = upstream.transport else {
        panic!("the mock is a stdio upstream")
    };
    let quoted = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    let text = format!(
        "[worker]\ntask_queue = {}\n[temporal]\naddress = {}\nnamespace = {}\n\
         [[upstream]]\nservice = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [{}]\n",
        quoted(&env.task_queue),
        quoted(NOWHERE),
        quoted(&env.namespace),
        quoted(service),
        quoted(&command),
        args.join(", ")
    );
    let path = temp_path("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn proxy_command(config: &std::path::Path, flags: &[String]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(proxy_bin().unwrap());
    command
        .arg("--config")
        .arg(config)
        .args(flags)
        .env("TEMPORAL_ADDRESS", NOWHERE)
        .env_remove("TEMPORAL_API_KEY")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

#[tokio::test]
async fn both_binaries_connect_over_tls_mtls_and_an_api_key() {
    for mode in [Mode::Tls, Mode::MutualTls, Mode::ApiKey(API_KEY.into())] {
        let env = TestEnv::shared("tls-ok").await;
        let front = TlsFront::start(mode.clone(), &env.address).await;
        let flags = flags(&mode, &front.address);
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let mut proxy = proxy_command(&proxy_config(&env, "mock", &ledger), &flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut connector = connector_command(&env, "mock");
        connector.args(&flags).env("TEMPORAL_ADDRESS", NOWHERE);
        let transport = rmcp::transport::TokioChildProcess::new(connector).unwrap();
        let connector_pid = transport.id().unwrap();
        let client = ().serve(transport).await.expect("MCP handshake");
        let echo = tokio::time::timeout(
            Duration::from_secs(60),
            client
                .peer()
                .call_tool(tool_call("echo", json!({"over": format!("{mode:?}")}))),
        )
        .await
        .unwrap_or_else(|_| panic!("{mode:?}: the call did not finish"))
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(
            echo.structured_content,
            Some(json!({"over": format!("{mode:?}")})),
            "{mode:?}"
        );
        if let Mode::ApiKey(_) = mode {
            assert!(front.forwarded.load(Ordering::Relaxed) > 0);
            // Every local process (a stdio upstream too) reads a command line (R-PRX-11).
            for (binary, pid) in [("proxy", proxy.id().unwrap()), ("connector", connector_pid)] {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
                let cmdline = String::from_utf8_lossy(&cmdline);
                assert!(cmdline.contains("--api-key"), "{cmdline}");
                assert!(
                    !cmdline.contains(API_KEY),
                    "the {binary} shows its key: {cmdline}"
                );
            }
        }
        client.cancel().await.unwrap();
        assert!(
            proxy.try_wait().unwrap().is_none(),
            "{mode:?}: the proxy is still up"
        );
        proxy.kill().await.unwrap();
    }
}

/// Runs a binary that must refuse to start; answers its stderr.
async fn refused(mut command: tokio::process::Command, what: &str) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        command.stdin(Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: still running after a minute"))
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{what}: started anyway: {stderr}");
    stderr
}

#[tokio::test]
async fn a_wrong_ca_a_missing_client_certificate_and_a_wrong_api_key_are_refused_naming_the_setting()
 {
    let env = TestEnv::shared("tls-refused").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let config = proxy_config(&env, "mock", &ledger);
    let other_ca = cert_file("other-ca.pem").to_string_lossy().into_owned();
    let wrong_key = "wrong-key-must-not-be-shown";
    // (front, the flags that do not fit it, the setting the error must name)
    let cases = [
        (Mode::Tls, vec!["--tls-ca".to_owned(), other_ca], "--tls-ca"),
        (
            Mode::MutualTls,
            vec![
                "--tls-ca".to_owned(),
                cert_file("ca.pem").to_string_lossy().into(),
            ],
            "--tls-cert",
        ),
        (
            Mode::ApiKey(API_KEY.into()),
            vec![
                "--tls-ca".to_owned(),
                cert_file("ca.pem").to_string_lossy().into(),
                "--api-key".into(),
                wrong_key.into(),
            ],
            "--api-key",
        ),
    ];
    for (mode, extra, setting) in cases {
        let front = TlsFront::start(mode.clone(), &env.address).await;
        let mut flags = vec!["--address".to_owned(), front.address.clone()];
        flags.extend(extra);
        let mut connector = connector_command(&env, "mock");
        connector.args(&flags).env("TEMPORAL_ADDRESS", NOWHERE);
        let what = format!("connector, {mode:?}");
        let stderr = refused(connector, &what).await;
        assert!(stderr.contains(setting), "{what}: {stderr}");
        assert!(
            !stderr.contains(wrong_key),
            "{what}: the key is shown: {stderr}"
        );
        let what = format!("proxy, {mode:?}");
        let stderr = refused(proxy_command(&config, &flags), &what).await;
        assert!(stderr.contains(setting), "{what}: {stderr}");
        assert!(
            !stderr.contains(wrong_key),
            "{what}: the key is shown: {stderr}"
        );
    }
}
