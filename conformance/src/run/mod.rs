//! The scenario runner: every scenario gets a fresh task queue and Nexus endpoint on one dev
//! server, its own mock upstream (stdio child or in-process HTTP), and its own proxy; then its
//! steps run through the durable path and their expectations are checked.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;
use durable_mcp::{
    nexus::{OperationClient, OperationOutcome, StartOperation},
    outbound::{ProxyOptions, TransportConfig, UpstreamConfig},
    payload,
};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{
    fixtures::{self, HttpUpstream, Ledger, LedgerEvent, SpecSource},
    harness::{DevServer, unique_name},
    scenario::{ExpectedOutcome, Scenario, Step, UpstreamTransport},
};

/// The Nexus service name the scenario's upstream is registered under.
const SERVICE: &str = "mock";
/// A scenario that takes longer than this fails (nothing may hang the run).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where `conformance__<name>.snap.json` files live (`fixtures/snapshots`).
    pub snapshot_dir: PathBuf,
    /// Rewrite snapshots with what was observed instead of comparing.
    pub update_snapshots: bool,
    /// The mock upstream binary; `fixtures::mock_upstream_bin()` when `None`.
    pub mock_bin: Option<PathBuf>,
}

impl RunOptions {
    pub fn new(root: &Path) -> Self {
        Self {
            snapshot_dir: root.join("fixtures").join("snapshots"),
            update_snapshots: false,
            mock_bin: None,
        }
    }
}

/// What one scenario did.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub id: String,
    pub family: String,
    pub rules: Vec<String>,
    pub passed: bool,
    /// Why it failed; names the rules (`R-PRX-4 violated: ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(serialize_with = "ser_secs")]
    pub duration: Duration,
    /// One line per step that ran, e.g. `step 1 (call t): result, 3 invocations`.
    pub steps: Vec<String>,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Runs `scenarios` one after another on `server`, calling `on_done` as each finishes.
pub async fn run_all(
    server: &DevServer,
    scenarios: &[Scenario],
    options: &RunOptions,
    mut on_done: impl FnMut(&ScenarioResult),
) -> Vec<ScenarioResult> {
    let mut results = Vec::new();
    for scenario in scenarios {
        let result = run_one(server, scenario, options).await;
        on_done(&result);
        results.push(result);
    }
    results
}

/// Runs one scenario; never panics on a failed expectation (it becomes the result's message).
pub async fn run_one(
    server: &DevServer,
    scenario: &Scenario,
    options: &RunOptions,
) -> ScenarioResult {
    let started = Instant::now();
    let mut steps = Vec::new();
    let outcome = tokio::time::timeout(
        SCENARIO_TIMEOUT,
        execute(server, scenario, options, &mut steps),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Failure::Setup(format!(
            "did not finish within {} s",
            SCENARIO_TIMEOUT.as_secs()
        )))
    });
    let message = match outcome {
        Ok(()) => None,
        Err(Failure::Violated(msg)) => {
            Some(format!("{} violated: {msg}", scenario.rules.join(", ")))
        }
        Err(Failure::Setup(msg)) => Some(format!("could not run: {msg}")),
    };
    ScenarioResult {
        id: scenario.id.clone(),
        family: scenario.family.to_string(),
        rules: scenario.rules.clone(),
        passed: message.is_none(),
        message,
        duration: started.elapsed(),
        steps,
    }
}

/// A scenario that broke a rule, or one that could not be run at all.
enum Failure {
    Violated(String),
    Setup(String),
}

fn setup(e: impl std::fmt::Display) -> Failure {
    Failure::Setup(e.to_string())
}

async fn execute(
    server: &DevServer,
    scenario: &Scenario,
    options: &RunOptions,
    log: &mut Vec<String>,
) -> Result<(), Failure> {
    let dir = tempfile::Builder::new()
        .prefix("durable-mcp-conformance-")
        .tempdir()
        .map_err(setup)?;
    let spec = scenario.upstream.spec();
    let ledger = Ledger::new(dir.path().join("ledger.jsonl"));

    // A fresh slice of the server.
    let slug: String = scenario
        .id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let task_queue = unique_name(&format!("tq-{slug}"));
    let endpoint = unique_name(&format!("ep-{slug}"));
    server
        .create_nexus_endpoint(&endpoint, server.namespace(), &task_queue)
        .await
        .map_err(|e| Failure::Setup(format!("creating the Nexus endpoint: {e}")))?;
    let connection = server
        .connect()
        .await
        .map_err(|e| Failure::Setup(format!("connecting: {e}")))?;
    let client = OperationClient::new(connection, server.namespace());

    // The upstream.
    let mut http: Option<HttpUpstream> = None;
    let transport = match scenario.upstream.transport {
        UpstreamTransport::Stdio => {
            let spec_file = dir.path().join("spec.json");
            spec.write_json(&spec_file).map_err(setup)?;
            let bin = match &options.mock_bin {
                Some(b) => b.clone(),
                None => fixtures::mock_upstream_bin().map_err(setup)?,
            };
            TransportConfig::Stdio {
                command: bin.to_string_lossy().into_owned(),
                args: vec![
                    "--spec".into(),
                    spec_file.to_string_lossy().into_owned(),
                    "--ledger".into(),
                    ledger.path().to_string_lossy().into_owned(),
                ],
                env: BTreeMap::new(),
                cwd: None,
            }
        }
        UpstreamTransport::Http => {
            let upstream = fixtures::serve_http(
                SpecSource::Inline(spec.clone()),
                Some(ledger.path().to_owned()),
                "127.0.0.1:0".parse().unwrap(),
            )
            .await
            .map_err(|e| Failure::Setup(format!("starting the HTTP upstream: {e:#}")))?;
            let url = upstream.url.parse().map_err(setup)?;
            http = Some(upstream);
            TransportConfig::Http {
                url,
                headers: BTreeMap::new(),
            }
        }
    };

    // The proxy.
    let proxy = crate::proxy_thread::ProxyThread::start(
        server.address(),
        ProxyOptions {
            namespace: server.namespace().to_owned(),
            task_queue: task_queue.clone(),
            max_concurrent_calls: 50,
        },
        vec![UpstreamConfig {
            service: SERVICE.into(),
            transport,
            activity_options: Default::default(),
            overrides: BTreeMap::new(),
        }],
    );

    let mut result = Ok(());
    for (i, step) in scenario.steps.iter().enumerate() {
        let label = scenario.step_label(i);
        match run_step(&client, &endpoint, &ledger, step, options).await {
            Ok(summary) => log.push(format!("{label}: {summary}")),
            Err(e) => {
                log.push(format!(
                    "{label}: FAILED: {}",
                    match &e {
                        Failure::Violated(m) | Failure::Setup(m) => m,
                    }
                ));
                let e = match e {
                    Failure::Violated(m) => Failure::Violated(format!("{label}: {m}")),
                    Failure::Setup(m) => Failure::Setup(format!("{label}: {m}")),
                };
                if let Some(err) = proxy.error() {
                    result = Err(Failure::Setup(format!("the proxy stopped: {err}")));
                } else {
                    result = Err(e);
                }
                break;
            }
        }
    }
    proxy.stop().await;
    if let Some(upstream) = http {
        upstream.shutdown().await;
    }
    result
}

/// Runs one call step and checks its expectations; returns a one-line summary.
async fn run_step(
    client: &OperationClient,
    endpoint: &str,
    ledger: &Ledger,
    step: &Step,
    options: &RunOptions,
) -> Result<String, Failure> {
    let call = &step.call;
    let expect = &step.expect;
    let arguments = Value::Object(call.arguments.clone());
    let mut start = StartOperation::new(
        unique_name(&format!("call-{}", call.tool)),
        endpoint,
        SERVICE,
        &call.tool,
        payload::to_payload(&arguments).map_err(setup)?,
    );
    start.schedule_to_close = Some(Duration::from_millis(call.timeout_ms.unwrap_or(60_000)));
    let (op, _) = client
        .start(start)
        .await
        .map_err(|e| Failure::Setup(format!("starting the operation: {e}")))?;

    let mut cancel_latency = None;
    let outcome = if let Some(after) = call.cancel_after_ms {
        // Wait until the upstream has the call, then give it `after` ms before cancelling.
        wait_count(
            ledger,
            &call.tool,
            LedgerEvent::Called,
            call.key(),
            1,
            Duration::from_secs(30),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(after)).await;
        let cancelled_at = Instant::now();
        client
            .cancel(&op, "conformance: cancel_after_ms")
            .await
            .map_err(|e| Failure::Setup(format!("cancelling: {e}")))?;
        let outcome = client
            .wait(&op, &CancellationToken::new())
            .await
            .map_err(|e| Failure::Setup(format!("waiting for the outcome: {e}")))?;
        cancel_latency = Some(cancelled_at.elapsed());
        outcome
    } else {
        client
            .wait(&op, &CancellationToken::new())
            .await
            .map_err(|e| Failure::Setup(format!("waiting for the outcome: {e}")))?
    };

    // Outcome and error type.
    let (kind, result, error_type, message) = match &outcome {
        OperationOutcome::Succeeded(p) => {
            let json = payload::to_json(p)
                .map_err(|e| Failure::Violated(format!("the result is not readable JSON: {e}")))?;
            (ExpectedOutcome::Result, Some(json), None, String::new())
        }
        OperationOutcome::Failed {
            message,
            error_type,
            ..
        } => (
            ExpectedOutcome::Failed,
            None,
            error_type.clone(),
            message.clone(),
        ),
        OperationOutcome::Canceled { message } => {
            (ExpectedOutcome::Canceled, None, None, message.clone())
        }
        OperationOutcome::TimedOut { message } => {
            (ExpectedOutcome::TimedOut, None, None, message.clone())
        }
        OperationOutcome::Terminated { message } => {
            (ExpectedOutcome::Terminated, None, None, message.clone())
        }
    };
    let described = match (&error_type, message.is_empty()) {
        (Some(t), _) => format!("{kind} ({t}: {})", short(&message)),
        (None, false) => format!("{kind} ({})", short(&message)),
        (None, true) => kind.to_string(),
    };
    if kind != expect.outcome {
        return Err(Failure::Violated(format!(
            "expected outcome {}, saw {described}",
            expect.outcome
        )));
    }
    if let Some(want) = &expect.error_type
        && error_type.as_deref() != Some(want.as_str())
    {
        return Err(Failure::Violated(format!(
            "expected error type {want}, saw {}",
            error_type.as_deref().unwrap_or("none")
        )));
    }
    if let Some(want) = &expect.message_contains
        && !message.contains(want.as_str())
    {
        return Err(Failure::Violated(format!(
            "expected the message to contain {want:?}, saw {message:?}"
        )));
    }
    if let (Some(want), Some(result)) = (expect.is_error, &result) {
        let saw = result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if saw != want {
            return Err(Failure::Violated(format!(
                "expected isError {want}, saw {saw}"
            )));
        }
    }
    let mut summary = described;

    // Invocation count, from the ledger: wait for the expected count, then a moment more to see
    // any extra invocation that a wrong retry would add.
    if let Some(inv) = &expect.invocations {
        let tool = inv.tool.as_deref().unwrap_or(&call.tool);
        let key = inv.key.as_deref().or(call.key());
        wait_count(
            ledger,
            tool,
            LedgerEvent::Called,
            key,
            inv.count,
            Duration::from_secs(10),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let saw = count(ledger, tool, LedgerEvent::Called, key);
        if saw != inv.count {
            let of = match key {
                Some(k) => format!("{tool} (key {k:?})"),
                None => tool.to_owned(),
            };
            return Err(Failure::Violated(format!(
                "expected {} invocation{} of {of}, saw {saw}",
                inv.count,
                if inv.count == 1 { "" } else { "s" }
            )));
        }
        summary.push_str(&format!(
            ", {saw} invocation{}",
            if saw == 1 { "" } else { "s" }
        ));
    }

    if let Some(want) = expect.cancelled_upstream {
        let n = if want {
            wait_count(
                ledger,
                &call.tool,
                LedgerEvent::Cancelled,
                call.key(),
                1,
                Duration::from_secs(10),
            )
            .await
        } else {
            count(ledger, &call.tool, LedgerEvent::Cancelled, call.key())
        };
        if (n > 0) != want {
            return Err(Failure::Violated(if want {
                format!(
                    "expected the upstream to see notifications/cancelled for {}, it did not",
                    call.tool
                )
            } else {
                format!(
                    "the upstream saw an unexpected cancellation of {}",
                    call.tool
                )
            }));
        }
        if want {
            summary.push_str(", cancelled upstream");
        }
    }
    if let Some(latency) = cancel_latency {
        summary.push_str(&format!(", cancel landed in {} ms", latency.as_millis()));
    }

    if let (Some(name), Some(result)) = (&expect.snapshot, &result) {
        check_snapshot(options, name, result)?;
        summary.push_str(&format!(", matches snapshot {name}"));
    }
    Ok(summary)
}

/// The file of snapshot `name`.
pub fn snapshot_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("conformance__{name}.snap.json"))
}

fn check_snapshot(options: &RunOptions, name: &str, result: &Value) -> Result<(), Failure> {
    let path = snapshot_path(&options.snapshot_dir, name);
    if options.update_snapshots {
        let mut text = serde_json::to_string_pretty(result).map_err(setup)?;
        text.push('\n');
        std::fs::create_dir_all(&options.snapshot_dir).map_err(setup)?;
        std::fs::write(&path, text)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(|e| Failure::Setup(format!("{e:#}")))?;
        return Ok(());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Failure::Setup(format!(
            "snapshot {} unreadable ({e}); record it with `run --update-snapshots`",
            path.display()
        ))
    })?;
    let recorded: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::Setup(format!("snapshot {} is not JSON: {e}", path.display())))?;
    if &recorded != result {
        return Err(Failure::Violated(format!(
            "the result differs from snapshot {} (first difference at {}); re-record with \
             `run --update-snapshots` if the change is deliberate",
            path.display(),
            first_difference(&recorded, result, String::new())
        )));
    }
    Ok(())
}

/// A JSON pointer to the first place `a` and `b` differ (also used by third-party mode).
pub(crate) fn first_difference(a: &Value, b: &Value, at: String) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) if p == q => {}
                    (Some(p), Some(q)) => return first_difference(p, q, format!("{at}/{k}")),
                    _ => return format!("{at}/{k}"),
                }
            }
            at
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if p != q {
                    return first_difference(p, q, format!("{at}/{i}"));
                }
            }
            format!("{at} (length {} vs {})", x.len(), y.len())
        }
        _ => {
            if at.is_empty() {
                "/".into()
            } else {
                at
            }
        }
    }
}

fn short(s: &str) -> String {
    const MAX: usize = 160;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

fn count(ledger: &Ledger, tool: &str, event: LedgerEvent, key: Option<&str>) -> usize {
    match key {
        Some(k) => ledger.count_key(tool, event, k),
        None => ledger.count(tool, event),
    }
}

/// Polls until the count reaches `n` or `timeout` passes; returns the last count.
async fn wait_count(
    ledger: &Ledger,
    tool: &str,
    event: LedgerEvent,
    key: Option<&str>,
    n: usize,
    timeout: Duration,
) -> usize {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let c = count(ledger, tool, event, key);
        if c >= n || tokio::time::Instant::now() >= deadline {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
