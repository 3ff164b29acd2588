//! `--grpc-compression gzip|none` and the proxy's `[temporal] grpc_compression` (R-RUN-7): a call
//! goes through both binaries with either setting.

use std::{process::Stdio, time::Duration};

use durable_mcp_conformance::fixtures::Ledger;
use rmcp::ServiceExt as _;
use serde_json::json;

use crate::{
    support::{TestEnv, connector_command, temp_path, tool_call},
    temporal_tls::{proxy_command, proxy_config},
};

/// The proxy's config with `grpc_compression = value` in its `[temporal]` table.
fn config_with(env: &TestEnv, ledger: &Ledger, value: &str) -> std::path::PathBuf {
    let path = proxy_config(env, "mock", ledger);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "[temporal]\n",
        &format!("[temporal]\ngrpc_compression = \"{value}\"\n"),
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn a_call_goes_through_both_binaries_with_gzip_and_without_compression() {
    // The flag on both binaries, then the proxy's table (its flag left out) with the connector's
    // flag.
    for (value, proxy_flag) in [("gzip", true), ("none", true), ("none", false)] {
        let env = TestEnv::shared("grpc-compression").await;
        let ledger = Ledger::new(temp_path("ledger.jsonl"));
        let address = ["--address".to_owned(), env.address.clone()];
        let compression = ["--grpc-compression".to_owned(), value.to_owned()];
        let (config, flags) = if proxy_flag {
            let config = proxy_config(&env, "mock", &ledger);
            (config, [&address[..], &compression[..]].concat())
        } else {
            (config_with(&env, &ledger, value), address.to_vec())
        };
        let mut proxy = proxy_command(&config, &flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut connector = connector_command(&env, "mock");
        connector.args(&address).args(&compression);
        let transport = rmcp::transport::TokioChildProcess::builder(connector)
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
            .0;
        let client = ().serve(transport).await.expect("MCP handshake");
        let call = client
            .peer()
            .call_tool(tool_call("echo", json!({"compression": value})));
        let echo = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .unwrap_or_else(|_| panic!("{value}: no answer within 60 s"))
            .unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(
            echo.structured_content,
            Some(json!({"compression": value})),
            "{value}, proxy flag {proxy_flag}"
        );
        client.cancel().await.unwrap();
        proxy.kill().await.unwrap();
    }
}
