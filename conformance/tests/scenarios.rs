//! The bundled conformance suite: every scenario file parses, ids are unique, every cited rule
//! exists in SPEC.md, and the whole suite passes through the runner against a real dev server.

use std::path::{Path, PathBuf};

use durable_mcp_conformance::{
    harness,
    report::{Event, Recorder, RunKind, progress_line, scenario_outcome},
    run::{self, RunOptions},
    scenario::{self, Family},
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn load() -> Vec<scenario::Scenario> {
    scenario::load_dir(&root().join("scenarios")).expect("every scenario file parses")
}

#[test]
fn scenarios_parse_with_unique_ids_and_known_rules() {
    let scenarios = load();
    assert!(!scenarios.is_empty(), "no scenarios bundled");
    let spec = std::fs::read_to_string(root().join("SPEC.md")).unwrap();
    let rules = scenario::spec_rules(&spec);
    assert!(
        rules.iter().any(|r| r == "R-PRX-4"),
        "SPEC.md rules read: {rules:?}"
    );
    for s in &scenarios {
        for rule in &s.rules {
            assert!(
                rules.contains(rule),
                "{}: rule {rule} is not a `### {rule}:` heading in SPEC.md",
                s.path.display()
            );
        }
        // The file sits in its family's folder.
        let folder = s.path.parent().and_then(|p| p.file_name()).unwrap();
        assert_eq!(
            folder.to_string_lossy(),
            s.family.as_str(),
            "{}",
            s.path.display()
        );
    }
    // load_dir rejects duplicate ids; check anyway so the guarantee is visible here.
    let mut ids: Vec<_> = scenarios.iter().map(|s| s.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), scenarios.len());
    // Every family has scenarios, but the hosts family, which is built into the runner.
    for family in Family::ALL.into_iter().filter(|f| *f != Family::Hosts) {
        assert!(
            scenarios.iter().any(|s| s.family == family),
            "no {family} scenario"
        );
    }
}

/// SPEC.md names, for each rule, exactly the scenarios that cite it (after `; scenarios` on its
/// `Checked by:` line), so a reader of a rule finds its scenarios and no list goes stale.
#[test]
fn spec_checked_by_lines_name_the_scenarios_that_cite_them() {
    let scenarios = load();
    let spec = std::fs::read_to_string(root().join("SPEC.md")).unwrap();
    let listed = scenario::spec_rule_scenarios(&spec);
    for (rule, names) in &listed {
        let mut citing: Vec<_> = scenarios
            .iter()
            .filter(|s| s.rules.contains(rule))
            .map(|s| s.id.clone())
            .collect();
        citing.sort();
        let mut names = names.clone();
        names.sort();
        assert_eq!(
            names,
            citing,
            "SPEC.md {rule}: the `Checked by:` line must end with `; scenarios {}`",
            citing.join(", ")
        );
    }
}

/// Every SPEC.md rule is checked by at least one scenario, or its `Checked by:` line says why
/// no scenario can check it (`; no scenario: <reason>`): a rule never silently lacks one.
#[test]
fn every_rule_has_a_scenario_or_says_why_not() {
    let scenarios = load();
    let spec = std::fs::read_to_string(root().join("SPEC.md")).unwrap();
    let listed = scenario::spec_rule_scenarios(&spec);
    assert!(
        listed.len() >= 40,
        "SPEC.md lost its rules? {}",
        listed.len()
    );
    let mut rule = None;
    for line in spec.lines() {
        if let Some(heading) = line.strip_prefix("### R-") {
            rule = Some(format!(
                "R-{}",
                heading.split(':').next().unwrap_or_default()
            ));
            continue;
        }
        let (Some(id), Some(checks)) = (&rule, line.strip_prefix("Checked by:")) else {
            continue;
        };
        let citing = scenarios.iter().filter(|s| s.rules.contains(id)).count();
        match checks.split_once("; no scenario: ") {
            Some((_, why)) => {
                assert!(
                    why.trim().len() >= 20,
                    "SPEC.md {id}: say why no scenario checks it, in a sentence"
                );
                assert_eq!(
                    citing, 0,
                    "SPEC.md {id} says no scenario checks it, but {citing} scenario(s) cite it"
                );
            }
            None => assert!(
                !listed[id].is_empty(),
                "SPEC.md {id} has no scenario: add one that cites it, or end its `Checked by:` \
                 line with `; no scenario: <why>`"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_suite_passes_against_the_dev_server() {
    let scenarios = load();
    let server = harness::shared().await.expect("shared Temporal dev server");
    let mut options = RunOptions::new(&root());
    options.mock_bin = Some(env!("CARGO_BIN_EXE_durable-mcp-mock-upstream").into());
    // Two at a time, as `run` does on two cores: the scenarios must not see each other.
    options.jobs = 2;
    let started = std::time::Instant::now();
    // The runner's report model: events, as `run` emits them.
    let mut recorder = Recorder::new();
    let mut emit = |event: Event| {
        if let Some(line) = progress_line(&event) {
            eprintln!("{line}");
        }
        recorder.on(&event);
    };
    let version = server.version().map(|v| v.to_string()).unwrap_or_default();
    emit(Event::Started {
        kind: RunKind::Bundled,
        target: format!("Temporal {version}"),
        planned: scenarios.iter().map(|s| s.id.clone()).collect(),
    });
    run::run_all(server, &scenarios, &options, |r| {
        emit(Event::Finished(scenario_outcome(r)))
    })
    .await;
    emit(Event::Ended {
        duration: started.elapsed(),
    });
    let report = recorder.record();
    eprintln!("{}", report.summary());
    // The reports render.
    assert!(report.junit().unwrap().contains("<testsuites"));
    assert_eq!(
        report.json()["cases"].as_array().map(Vec::len),
        Some(scenarios.len())
    );
    assert!(report.all_passed(), "{}", report.summary());
}

/// The container backend carries the durable path end to end: a proxied call with retries on
/// a containerised server, and the server-restart fault, which restarts a container of its own
/// on a bind-mounted database (R-HAR-5). Skipped, and counted as such, without a Docker engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied_calls_and_a_server_restart_on_the_container_backend() {
    use durable_mcp_conformance::{
        DevServer, DevServerOptions,
        harness::Backend,
        skip::{Need, skip},
    };
    const IDS: [&str; 2] = [
        "retry-inference/destructive-idempotent-flaky-is-retried",
        "faults/server-restart-mid-call-loses-nothing",
    ];
    let scenarios: Vec<_> = load()
        .into_iter()
        .filter(|s| IDS.contains(&s.id.as_str()))
        .collect();
    assert_eq!(scenarios.len(), IDS.len(), "bundled scenarios renamed?");
    let mut server = match DevServer::start(DevServerOptions {
        backend: Backend::Container,
        ..DevServerOptions::default()
    })
    .await
    {
        Ok(server) => server,
        Err(e) => match e.skip_reason() {
            Some(reason) => return skip(Need::Docker, &reason),
            None => panic!("container backend failed with a Docker engine present: {e}"),
        },
    };
    let mut options = RunOptions::new(&root());
    options.mock_bin = Some(env!("CARGO_BIN_EXE_durable-mcp-mock-upstream").into());
    let results = run::run_all(&server, &scenarios, &options, |r| {
        eprintln!(
            "{}",
            progress_line(&Event::Finished(scenario_outcome(r))).unwrap_or_default()
        )
    })
    .await;
    server.stop().await.expect("stop the container");
    let restart = results
        .iter()
        .find(|r| r.id == IDS[1])
        .expect("the restart scenario ran");
    assert!(
        restart
            .steps
            .iter()
            .any(|s| s.contains("Temporal server restarted")),
        "{:?}",
        restart.steps
    );
    for r in &results {
        assert!(r.passed, "{}: {:?}\n{:?}", r.id, r.message, r.steps);
    }
}

/// `run --temporal-address` against a dev server started separately (as a team's staging
/// server would be): scenarios run in the given namespace, the server-restart scenario is
/// skipped with its reason and counted as skipped, and no endpoint is left behind (R-CNF-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_against_an_existing_server_skips_restarts_and_leaves_nothing() {
    use durable_mcp_conformance::{DevServer, DevServerOptions, harness::unique_name};
    use temporalio_protos::temporal::api::operatorservice::v1::ListNexusEndpointsRequest;

    let mut server = DevServer::start(DevServerOptions::default())
        .await
        .expect("a separate dev server");
    let namespace = unique_name("staging");
    server.create_namespace(&namespace).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = |select: &[&str], json: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_durable-mcp-conformance"))
            .args(["run", "--temporal-address", &server.address()])
            .args(["--namespace", &namespace, "--jobs", "2", "--json"])
            .arg(dir.path().join(json))
            .args(select)
            .env("DURABLE_MCP_TEMPORAL", "container") // ignored: nothing is started
            .output()
            .expect("run the conformance binary");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(json)).unwrap()).unwrap();
        (text, report)
    };
    let (text, report) = run(&["--family", "retry-inference"], "calls.json");
    assert_eq!(report["failed"], 0, "{text}");
    assert!(report["passed"].as_u64().unwrap() >= 5, "{text}");
    let (text, report) = run(&["--rule", "R-HAR-4"], "restart.json");
    assert_eq!(
        (report["passed"].as_u64(), report["skipped"].as_u64()),
        (Some(0), Some(1)),
        "{text}"
    );
    assert!(text.contains("1 skipped"), "{text}");
    let case = &report["cases"][0];
    assert_eq!(case["status"], "skip", "{text}");
    assert!(
        case["reason"]
            .as_str()
            .is_some_and(|why| why.contains("restarts the Temporal server")),
        "{text}"
    );

    let left = server
        .connect()
        .await
        .unwrap()
        .operator_service()
        .list_nexus_endpoints(temporalio_client::tonic::Request::new(
            ListNexusEndpointsRequest {
                page_size: 100,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .endpoints;
    assert!(left.is_empty(), "endpoints left behind: {left:?}");
    server.stop().await.unwrap();
}

/// A scenario that hangs fails at its timeout, and the message names the step it hung in
/// (R-CNF-6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_scenario_fails_naming_the_step_it_hung_in() {
    let scenario = scenario::Scenario::parse(
        r#"
id = "faults/hangs-on-purpose"
family = "faults"
rules = ["R-CNF-6"]
description = "Pauses longer than its timeout."

[upstream]
transport = "stdio"
standard = true

[[steps]]
pause_ms = 1

[[steps]]
pause_ms = 60000
"#,
        Path::new("hangs-on-purpose.toml"),
    )
    .expect("a valid scenario");
    let server = harness::shared().await.expect("shared Temporal dev server");
    let mut options = RunOptions::new(&root());
    options.mock_bin = Some(env!("CARGO_BIN_EXE_durable-mcp-mock-upstream").into());
    options.scenario_timeout = std::time::Duration::from_secs(3);
    let result = run::run_one(server, &scenario, &options).await;
    assert!(result.failed(), "{result:?}");
    let message = result.message.unwrap_or_default();
    assert!(
        message.contains("did not finish within 3 s; hung in step 2"),
        "{message}"
    );
    assert_eq!(result.steps.len(), 1, "{:?}", result.steps);
}
