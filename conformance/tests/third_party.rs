//! Third-party mode against the bundled mock upstream over stdio: discovery, the inferred retry
//! policies, and the direct-vs-durable fidelity check on a real dev server.

use durable_mcp_conformance::{
    harness,
    third_party::{self, Status, ThirdPartyOptions, Upstream},
};

const BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-mock-upstream");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_upstream_over_stdio() {
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let upstream = Upstream::stdio(&format!("{BIN} --ledger {}", ledger.display())).unwrap();
    let mut options = ThirdPartyOptions::new(upstream);
    // `slow` is read-only but sleeps 60 s unless told otherwise (as an --args file would).
    options
        .arguments
        .insert("slow".into(), serde_json::json!({"sleep_ms": 10}));
    let report = third_party::run(server, &options).await;
    let text = report.render();
    eprintln!("{text}");

    let discovery = report.check("discovery").expect("a discovery line");
    assert_eq!(discovery.status, Status::Pass, "{text}");
    assert!(discovery.detail.contains("echo"), "{text}");
    assert!(discovery.detail.contains("write_once"), "{text}");

    let echo = report.check("retry-policy/echo").unwrap();
    assert_eq!(echo.status, Status::Pass);
    assert!(echo.detail.contains("read-only tool"), "{text}");
    assert!(echo.detail.contains("unlimited"), "{text}");
    let write_once = report.check("retry-policy/write_once").unwrap();
    assert_eq!(write_once.status, Status::Pass);
    assert!(write_once.detail.contains("never run twice"), "{text}");
    assert!(write_once.detail.contains("max 1 attempt"), "{text}");
    assert!(text.contains("retry-policy/write_once: max 1 attempt: destructive, not idempotent tool: never run twice"), "{text}");

    let echo = report.check("fidelity/echo").unwrap();
    assert_eq!(echo.status, Status::Pass, "{text}");
    assert!(echo.detail.contains("equal"), "{text}");
    match &report.check("fidelity/write_once").unwrap().status {
        Status::Skipped(why) => assert!(why.contains("not read-only"), "{text}"),
        other => panic!("write_once must be skipped, was {other:?}\n{text}"),
    }
    // write_once was never called, directly or through the proxy.
    let ledger_text = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert!(!ledger_text.contains("write_once"), "{ledger_text}");

    for honest in ["cancellation", "reattachment"] {
        assert_eq!(
            report.check(honest).unwrap().status,
            Status::Skipped("not implemented in this version".into())
        );
    }
}
