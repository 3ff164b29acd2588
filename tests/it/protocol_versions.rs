//! R-CON-48: the protocol versions the connector serves over stdio with the `initialize`
//! handshake, each answered at its own version, and a version it does not know answered with
//! the latest it does (the client then decides), on the real dev server.

use durable_mcp_conformance::fixtures::everything::RawStdioClient;
use serde_json::json;

use crate::support::*;

/// The `initialize` versions the connector serves, oldest first.
const INITIALIZE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

#[tokio::test]
async fn every_initialize_version_is_served_at_its_own_version_and_lists_the_tools() {
    let env = TestEnv::shared("protocol-versions").await;
    let _tools = example_tools(&env).await.unwrap();
    for version in INITIALIZE_VERSIONS {
        let mut caller = RawStdioClient::spawn_at(connector_command(&env, "examples"), version)
            .await
            .unwrap();
        assert_eq!(caller.initialize["protocolVersion"], version, "{version}");
        let tools = caller.list_tools().await.unwrap();
        assert!(
            tools.iter().any(|t| t["name"] == "word_count"),
            "{version}: {tools:?}"
        );
        let counted = caller
            .request(
                "tools/call",
                json!({"name": "word_count", "arguments": {"text": "one two three"}}),
            )
            .await
            .unwrap();
        assert_ne!(counted["isError"], json!(true), "{version}: {counted}");
    }
}

#[tokio::test]
async fn an_unknown_version_is_answered_with_the_latest_initialize_version() {
    let env = TestEnv::shared("protocol-versions").await;
    let _tools = example_tools(&env).await.unwrap();
    let caller = RawStdioClient::spawn_at(connector_command(&env, "examples"), "2023-01-01")
        .await
        .unwrap();
    assert_eq!(
        caller.initialize["protocolVersion"],
        INITIALIZE_VERSIONS[INITIALIZE_VERSIONS.len() - 1]
    );
}
