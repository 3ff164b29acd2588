//! R-CON-51, R-CNF-26: the wire fuzzer's short run against the connector binary, over
//! Streamable HTTP and over stdio, in front of the proxy and the mock upstream on the dev
//! server: every request answered, no 5xx other than 503, no malformed answer, no hang, no
//! panic in the connector's log. Bounded in count and time (well under a minute each).

use std::time::Duration;

use durable_mcp_conformance::{
    fixtures::Ledger,
    fuzz::{self, FuzzOptions, FuzzReport, TargetSpec},
};

use crate::support::*;

/// Requests per transport in the test command's run.
const COUNT: u64 = 400;

fn options(target: TargetSpec, seed: u64, pid: Option<u32>) -> FuzzOptions {
    FuzzOptions {
        target,
        seed,
        start: 0,
        count: COUNT,
        duration: Duration::from_secs(40),
        timeout: Duration::from_secs(10),
        pid,
        concurrency: 2,
    }
}

/// Fails with every finding, the seed to replay it with and the server's log.
fn assert_clean(report: &FuzzReport, log: &[String]) {
    let findings: Vec<String> = report
        .findings
        .iter()
        .map(|f| {
            format!(
                "case {} ({:?}, {}): {}",
                f.index, f.family, f.method, f.finding
            )
        })
        .collect();
    assert!(
        report.clean() && report.total() > 0,
        "seed {}: {} of {} request(s) went wrong, stopped: {:?}, panics: {:?}\n{}\nlog:\n{}",
        report.seed,
        findings.len(),
        report.total(),
        report.stopped,
        report.panics,
        findings.join("\n"),
        log.join("\n")
    );
}

#[tokio::test]
async fn the_connector_over_http_answers_every_fuzzed_request_and_never_panics() {
    let env = TestEnv::shared("wire-fuzz-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let connector = HttpConnectorProcess::start(&env, "mock", &[])
        .await
        .unwrap();
    let target = TargetSpec::Url {
        url: connector.url.clone(),
        headers: Vec::new(),
    };
    let seed = fuzz::random_seed();
    let report = fuzz::run(options(target, seed, connector.child.id()))
        .await
        .unwrap();
    assert_clean(&report, &connector.log.lines());
    assert_eq!(connector.log.panics(), Vec::<String>::new());
    assert!(report.rss_kib.is_some(), "the connector's memory was read");
}

#[tokio::test]
async fn the_connector_over_stdio_answers_every_fuzzed_request_and_never_panics() {
    let env = TestEnv::shared("wire-fuzz-stdio").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let mut command = kit::process::connector_command(&env, "mock").unwrap();
    command.env("RUST_LOG", "warn");
    let target = TargetSpec::Stdio(fuzz::stdio::Command::of(&command));
    let report = fuzz::run(options(target, fuzz::random_seed(), None))
        .await
        .unwrap();
    assert_clean(&report, report.panics.as_deref().unwrap_or_default());
    assert_eq!(report.panics, Some(Vec::new()));
    assert!(report.rss_kib.is_some(), "the connector's memory was read");
}
