//! Third-party mode against the bundled mock upstream over stdio: discovery, the inferred retry
//! policies, the direct-vs-durable fidelity check, reattachment and cancellation, on a real dev
//! server. The mock's ledger shows what the upstream really executed.

use durable_mcp_conformance::{
    harness,
    third_party::{self, Status, ThirdPartyOptions, Upstream},
};

const BIN: &str = env!("CARGO_BIN_EXE_durable-mcp-mock-upstream");

/// `--chaos` over stdio SIGKILLs every stdio server of the in-process proxies of this test
/// binary, not only its own: the chaos test holds this lock for writing, every other test for
/// reading, so none of theirs is cut.
static CUTS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The mock upstream serving `spec` over stdio, recording into `ledger`.
fn mock_upstream(
    dir: &std::path::Path,
    ledger: &std::path::Path,
    spec: &durable_mcp_conformance::fixtures::UpstreamSpec,
) -> Upstream {
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(spec).unwrap()).unwrap();
    Upstream::stdio(&format!(
        "{BIN} --ledger {} --spec {}",
        ledger.display(),
        spec_path.display()
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_upstream_over_stdio() {
    let _cuts = CUTS.read().await;
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    // The standard mock plus a tool that logs while it serves a call.
    let mut spec = durable_mcp_conformance::fixtures::UpstreamSpec::standard();
    spec.tools
        .push(durable_mcp_conformance::fixtures::ToolSpec {
            name: "chatty".into(),
            title: None,
            description: Some("logs at two levels, then echoes".into()),
            annotations: Some(serde_json::json!({"readOnlyHint": true})),
            input_schema: None,
            output_schema: None,
            meta: None,
            execution: None,
            icons: None,
            behavior: durable_mcp_conformance::fixtures::Behavior::Log {
                levels: vec!["debug".into(), "warning".into()],
                ms: 0,
                every_ms: 0,
                untied: false,
            },
        });
    // And one that annotates nothing: named, with what that means (R-PRX-38).
    let mut plain = spec
        .tools
        .iter()
        .find(|t| t.name == "echo")
        .unwrap()
        .clone();
    plain.name = "plain".into();
    plain.annotations = None;
    spec.tools.push(plain);
    let upstream = mock_upstream(dir.path(), &ledger, &spec);
    let mut options = ThirdPartyOptions::new(upstream);
    // `slow` is read-only but sleeps 60 s unless told otherwise (as an --args file would); it
    // runs long enough to be cancelled half a second in.
    options
        .arguments
        .insert("slow".into(), serde_json::json!({"sleep_ms": 2500}));
    options.cancel_tools = vec!["slow".into()];
    options.cancel_after = std::time::Duration::from_millis(500);
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
    assert!(
        text.lines()
            .any(|l| l.starts_with("retry-policy/write_once ")
                && l.contains("max 1 attempt: destructive, not idempotent tool: never run twice")),
        "{text}"
    );

    let plain = report.check("retry-policy/plain").unwrap();
    assert!(
        plain.detail.contains("MCP reads it as destructive"),
        "{text}"
    );
    let unannotated = report.check("unannotated-tools").unwrap();
    assert!(unannotated.detail.starts_with("plain: "), "{text}");
    assert!(
        unannotated
            .detail
            .contains("missing_hints = \"mcp_defaults\""),
        "{text}"
    );
    assert!(!unannotated.detail.contains("echo"), "{text}");

    let echo = report.check("fidelity/echo").unwrap();
    assert_eq!(echo.status, Status::Pass, "{text}");
    assert!(echo.detail.contains("equal"), "{text}");
    match &report.check("fidelity/write_once").unwrap().status {
        Status::Skipped(why) => assert!(why.contains("not read-only"), "{text}"),
        other => panic!("write_once must be skipped, was {other:?}\n{text}"),
    }
    // Progress and log messages arrive through the durable path as they do directly (R-CNF-3).
    let progress = report
        .check("notifications/progress")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(progress.status, Status::Pass, "{text}");
    assert!(
        progress.detail.contains("3 progress notification(s)"),
        "{text}"
    );
    let chatty = report
        .check("notifications/chatty")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(chatty.status, Status::Pass, "{text}");
    assert!(chatty.detail.contains("2 log message(s)"), "{text}");
    assert!(
        report.check("notifications/echo").is_none(),
        "no check for a tool that sends none: {text}"
    );
    // write_once was never called, directly or through the proxy.
    let ledger_text = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert!(!ledger_text.contains("write_once"), "{ledger_text}");

    // Reattachment on the first tool whose fidelity passed (echo): the retried start attached,
    // so echo ran three times in all (direct, durable, and once for the two starts).
    let reattach = report
        .check("reattachment/echo")
        .expect("a reattachment line");
    assert_eq!(reattach.status, Status::Pass, "{text}");
    assert!(reattach.detail.contains("completed once"), "{text}");
    let entries = durable_mcp_conformance::fixtures::Ledger::new(&ledger).read();
    let echo_calls = entries
        .iter()
        .filter(|e| {
            e.tool == "echo" && e.event == durable_mcp_conformance::fixtures::LedgerEvent::Called
        })
        .count();
    assert_eq!(echo_calls, 3, "{entries:?}");

    // Cancellation reached the upstream.
    let cancel = report
        .check("cancellation/slow")
        .expect("a cancellation line");
    assert_eq!(cancel.status, Status::Pass, "{text}");
    assert!(cancel.detail.contains("CANCELED"), "{text}");
    let cancelled = durable_mcp_conformance::fixtures::Ledger::new(&ledger)
        .wait_for_count(
            "slow",
            durable_mcp_conformance::fixtures::LedgerEvent::Cancelled,
            1,
            std::time::Duration::from_secs(10),
        )
        .await;
    assert!(
        cancelled >= 1,
        "{:?}",
        durable_mcp_conformance::fixtures::Ledger::new(&ledger).read()
    );
    assert!(
        report.all_passed()
            || text
                .lines()
                .any(|l| l.starts_with("fidelity/large ") && l.contains("FAIL")),
        "{text}"
    );
    let junit = report.record().junit().unwrap();
    assert!(junit.contains("cancellation/slow"), "{junit}");
}

/// The report a server author sees for the public reference server (where Node is present).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_gives_a_sensible_report() {
    let _cuts = CUTS.read().await;
    use durable_mcp_conformance::fixtures::everything;
    if let Err(reason) = everything::node_available() {
        durable_mcp_conformance::skip::skip(durable_mcp_conformance::skip::Need::Node, &reason);
        return;
    }
    let entry = tokio::task::spawn_blocking(everything::install)
        .await
        .unwrap()
        .expect("installing server-everything with npm");
    let server = harness::shared().await.expect("shared Temporal dev server");
    let line = format!("node {} stdio", shlex_quote(entry.to_str().unwrap()));
    let mut options = ThirdPartyOptions::new(Upstream::stdio(&line).unwrap());
    options.arguments.insert(
        "trigger-long-running-operation".into(),
        serde_json::json!({"duration": 10, "steps": 5}),
    );
    options
        .arguments
        .insert("echo".into(), serde_json::json!({"message": "hi"}));
    options.cancel_tools = vec!["trigger-long-running-operation".into()];
    options.cancel_after = std::time::Duration::from_millis(500);
    // The long call of the issue a host makes a task of (R-CNF-19), though the server lists
    // every plain tool `taskSupport: "forbidden"`: the task is the connector's, not the server's.
    options.task_tool = Some("trigger-long-running-operation".into());
    options.fuzz = 2;
    options.seed = 7;
    let report = third_party::run(server, &options).await;
    let text = report.render();
    eprintln!("{text}");
    let line = report
        .check("tasks-and-input")
        .expect("a tasks-and-input line");
    assert_eq!(line.status, Status::Pass, "{text}");
    assert!(
        line.detail
            .contains("trigger-long-running-operation became a task through the connector (ID "),
        "{text}"
    );
    let limits = report.check("host-limits").expect("a host-limits line");
    assert_eq!(limits.status, Status::Pass, "{text}");
    assert!(report.all_passed(), "{text}");
    // Arguments come from the input schemas: only tools that are not read-only are skipped.
    for check in &report.checks {
        if let Status::Skipped(why) = &check.status
            && check.name.starts_with("fidelity/")
        {
            assert!(
                why.contains("not read-only"),
                "{}: {why}\n{text}",
                check.name
            );
        }
    }
    // get-sum requires two numbers: synthesized, then fuzzed with generated ones.
    for check in ["fidelity/get-sum", "fuzz/get-sum"] {
        assert_eq!(
            report.check(check).map(|c| &c.status),
            Some(&Status::Pass),
            "{check}\n{text}"
        );
    }
    assert!(
        report
            .check("fuzz/get-sum")
            .unwrap()
            .detail
            .contains("seed 7"),
        "{text}"
    );
    for (check, expect) in [
        ("fidelity/get-tiny-image", Status::Pass),
        ("fidelity/get-resource-links", Status::Pass),
        ("reattachment/echo", Status::Pass),
        ("cancellation/trigger-long-running-operation", Status::Pass),
    ] {
        assert_eq!(
            report.check(check).map(|c| &c.status),
            Some(&expect),
            "{check}\n{text}"
        );
    }
    // The tool that stamps the time into its result passes on everything but the stamp.
    let varying = report.check("fidelity/get-resource-reference").unwrap();
    assert_eq!(varying.status, Status::Pass, "{text}");
    // Tools that are not read-only are not called without --allow-tool, and say so.
    match &report
        .check("fidelity/toggle-simulated-logging")
        .unwrap()
        .status
    {
        Status::Skipped(why) => assert!(why.contains("--allow-tool"), "{text}"),
        other => panic!("{other:?}\n{text}"),
    }
}

/// Single-quotes a path for a shell-like command line.
fn shlex_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// R-CNF-19: a server with a task-only tool and a tool that asks for input gets one
/// `tasks-and-input` line saying both survived the durable path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_input_requests_are_reported_for_the_server() {
    let _cuts = CUTS.read().await;
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let tools: Vec<durable_mcp_conformance::fixtures::ToolSpec> =
        serde_json::from_value(serde_json::json!([
            {"name": "long", "annotations": {"readOnlyHint": true},
             "execution": {"taskSupport": "required"},
             "behavior": {"kind": "task", "ms": 300}},
            {"name": "ask", "annotations": {"readOnlyHint": true},
             "behavior": {"kind": "ask_input", "message": "Delete 40 GB?"}},
        ]))
        .unwrap();
    let spec = durable_mcp_conformance::fixtures::UpstreamSpec {
        name: "features".into(),
        tools,
        instructions: None,
    };
    let upstream = mock_upstream(dir.path(), &ledger, &spec);
    let report = third_party::run(server, &ThirdPartyOptions::new(upstream)).await;
    let text = report.render();
    eprintln!("{text}");
    for tool in ["fidelity/long", "fidelity/ask"] {
        assert_eq!(report.check(tool).unwrap().status, Status::Pass, "{text}");
    }
    // As a host sees it (a connector in front, the tasks extension declared): `long`, the
    // slowest read-only tool, becomes a task followed to its result; `ask` becomes one that
    // reads input_required, answered with tasks/update. Both task IDs within 128 characters.
    let line = report
        .check("tasks-and-input")
        .expect("a tasks-and-input line");
    assert_eq!(line.status, Status::Pass, "{text}");
    let host = "became a task through the connector (ID ";
    for expected in [
        "tasks: long survived, long ".to_owned() + host,
        "input: ask survived, ask ".to_owned() + host,
        "asked for elicitation/create (answered with tasks/update), followed with tasks/get to \
         its result"
            .to_owned(),
    ] {
        assert!(line.detail.contains(&expected), "{expected}\n{text}");
    }
    let limits = report.check("host-limits").expect("a host-limits line");
    assert_eq!(limits.status, Status::Pass, "{text}");
}

/// R-CNF-20: a server with resources and prompts gets one `resources-and-prompts` line: each
/// list, its first resources read and its first prompts got, equal directly and through the
/// durable path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_are_compared_for_the_server() {
    let _cuts = CUTS.read().await;
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let spec = durable_mcp_conformance::fixtures::UpstreamSpec {
        name: "featured".into(),
        tools: Vec::new(),
        instructions: None,
    };
    let Upstream::Stdio { command, mut args } = mock_upstream(dir.path(), &ledger, &spec) else {
        unreachable!()
    };
    args.push("--resources-and-prompts".into());
    let upstream = Upstream::Stdio { command, args };
    let report = third_party::run(server, &ThirdPartyOptions::new(upstream)).await;
    let text = report.render();
    eprintln!("{text}");
    let line = report
        .check("resources-and-prompts")
        .expect("a resources-and-prompts line");
    assert_eq!(line.status, Status::Pass, "{text}");
    assert_eq!(
        line.detail,
        "6 item(s): resources/list: equal; resources/templates/list: equal; \
         resources/read mock://text/readme: equal; resources/read mock://blob/logo: equal; \
         prompts/list: equal; prompts/get greet: equal",
        "{text}"
    );
}

/// A spec of two tools that run long enough to be cut: one read-only (retried), one destructive
/// and not idempotent (one attempt).
fn sleepy_spec() -> durable_mcp_conformance::fixtures::UpstreamSpec {
    use durable_mcp_conformance::fixtures::{Behavior, ToolSpec, UpstreamSpec};
    let tool = |name: &str, annotations: serde_json::Value| ToolSpec {
        name: name.into(),
        title: None,
        description: Some("sleeps, then echoes".into()),
        annotations: Some(annotations),
        input_schema: None,
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior: Behavior::Sleep { ms: 1_500 },
    };
    UpstreamSpec {
        name: "sleepy".into(),
        tools: vec![
            tool("sleepy_read", serde_json::json!({"readOnlyHint": true})),
            tool(
                "sleepy_write",
                serde_json::json!({"destructiveHint": true, "idempotentHint": false}),
            ),
        ],
        instructions: None,
    }
}

/// `--chaos` over stdio and over HTTP (R-CNF-25): every cut read-only call is tried again and
/// ends with its result; no cut destructive call is attempted twice, and the ledger shows each
/// ran at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_cuts_calls_and_each_tool_keeps_what_its_annotations_promise() {
    let _cuts = CUTS.write().await;
    use durable_mcp_conformance::fixtures::{Ledger, LedgerEvent, SpecSource};
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let stdio_ledger = dir.path().join("stdio.jsonl");
    let http_ledger = Ledger::new(dir.path().join("http.jsonl"));
    let http = durable_mcp_conformance::fixtures::serve_mock_upstream_http_with(
        SpecSource::Inline(sleepy_spec()),
        Some(http_ledger.path().to_owned()),
        "127.0.0.1:0".parse().unwrap(),
        None,
    )
    .await
    .unwrap();
    let upstreams = [
        (
            "stdio",
            mock_upstream(dir.path(), &stdio_ledger, &sleepy_spec()),
        ),
        ("http", Upstream::http(&http.url, &[]).unwrap()),
    ];
    for (how, upstream) in upstreams {
        let mut options = ThirdPartyOptions::new(upstream);
        options.allow_tools = vec!["sleepy_write".into()];
        options.chaos = true;
        options.seed = 7;
        let report = third_party::run(server, &options).await;
        println!("{how}:\n{}", report.render());
        for tool in ["sleepy_read", "sleepy_write"] {
            let check = report
                .checks
                .iter()
                .find(|c| c.name == format!("chaos/{tool}"))
                .unwrap_or_else(|| panic!("{how}: no chaos/{tool} line"));
            assert_eq!(check.status, Status::Pass, "{how}: {check}");
            assert!(check.detail.contains("promises:"), "{check}");
        }
        let read = report
            .checks
            .iter()
            .find(|c| c.name == "chaos/sleepy_read")
            .unwrap();
        assert!(!read.detail.contains("one attempt") && read.detail.contains("retried"));
    }
    // Whatever the cuts did, the destructive tool ran at most once per call: five calls (the
    // direct and the durable fidelity calls, three cut ones), never more runs.
    for ledger in [Ledger::new(stdio_ledger), http_ledger] {
        let called = ledger.count("sleepy_write", LedgerEvent::Called);
        assert!(called <= 5, "sleepy_write ran {called} times for 5 calls");
    }
    http.shutdown().await;
}

/// R-CNF-26: `--wire-fuzz N` sends the upstream itself N malformed requests (a stdio server
/// started once more for them) and reports one line per family, its memory and its panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_fuzz_sends_the_upstream_itself_malformed_requests() {
    let _cuts = CUTS.read().await;
    let server = harness::shared().await.expect("shared Temporal dev server");
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let spec = durable_mcp_conformance::fixtures::UpstreamSpec::standard();
    let mut options = ThirdPartyOptions::new(mock_upstream(dir.path(), &ledger, &spec));
    options.wire_fuzz = 120;
    options.seed = durable_mcp_conformance::fuzz::random_seed();
    let report = third_party::run(server, &options).await;
    let text = report.render();
    eprintln!("seed {}\n{text}", options.seed);
    let lines: Vec<&str> = report
        .checks
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| n.starts_with("wire-fuzz/"))
        .collect();
    let planned: Vec<String> = durable_mcp_conformance::fuzz::planned()
        .iter()
        .map(|n| n.replacen("fuzz/", "wire-fuzz/", 1))
        .collect();
    assert_eq!(lines, planned, "{text}");
    let sent: u64 = report
        .checks
        .iter()
        .filter(|c| c.name.starts_with("wire-fuzz/"))
        .filter_map(|c| {
            c.detail
                .lines()
                .next()?
                .strip_suffix(" request(s)")?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(sent, 120, "{text}");
    // What it found (rmcp's stdio server answers an invalid request with no id at all), each
    // with the command that replays it; the server never panicked.
    for check in report
        .checks
        .iter()
        .filter(|c| c.name.starts_with("wire-fuzz/"))
    {
        if let Status::Fail(_) = check.status {
            let replay = format!("--seed {} --start ", options.seed);
            assert!(
                check
                    .detail
                    .contains("durable-mcp-conformance fuzz --stdio ")
                    && check.detail.contains(&replay),
                "{}: {}\n{text}",
                check.name,
                check.detail
            );
        }
    }
    let memory = report.check("wire-fuzz/memory").unwrap();
    assert!(memory.detail.contains("VmRSS before"), "{text}");
    assert_eq!(
        report.check("wire-fuzz/panics").map(|c| &c.status),
        Some(&Status::Pass),
        "{text}"
    );
}
