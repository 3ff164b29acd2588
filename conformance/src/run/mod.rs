//! The scenario runner: every scenario gets a fresh task queue and Nexus endpoint on one dev
//! server, its own mock upstream (stdio child or in-process HTTP), and its own proxy; then its
//! steps run through the durable path and their expectations are checked.

mod as_written_check;
mod checks;
mod connector_driver;
mod feature_steps;
mod hostile_steps;
mod mcp_steps;
mod nexus_call;
pub(crate) mod proxy_process;
mod workflows;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use durable_mcp::{nexus::OperationClient, proxy::UpstreamConfig};
use serde::Serialize;

/// The binaries the runner starts, found as every workspace binary is ([`crate::harness::bins`]).
pub use crate::harness::bins::{
    EXAMPLE_TOOLS_BIN, EXAMPLE_TOOLS_BIN_ENV, PROXY_BIN, PROXY_BIN_ENV, example_tools_bin,
    proxy_bin,
};
pub(crate) use checks::first_difference;

use crate::{
    DevServerOptions,
    fixtures::{self, HttpUpstream, Ledger, LedgerEvent, SpecSource, UpstreamSpec},
    harness::{Backend, DevServer, Slice, unique_name},
    kit,
    scenario::{Action, ProxyMode, Scenario, SetAnnotations, UpstreamTransport},
};
use checks::{Saved, wait_count};
use connector_driver::Replicas;
use proxy_process::{Proxy, ProxyLauncher, Serves};

/// The Nexus service name the scenario's upstream is registered under.
const UPSTREAM_SERVICE: &str = "mock";
/// A scenario that takes longer than this fails, naming the step that hung (R-CNF-6).
pub const DEFAULT_SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where the `<name>.snap` files `expect.snapshot` names live (`fixtures/snapshots`);
    /// `INSTA_UPDATE=always` re-records them (R-CNF-9).
    pub snapshot_dir: PathBuf,
    /// The mock upstream binary; `fixtures::mock_upstream_bin()` when `None`.
    pub mock_bin: Option<PathBuf>,
    /// The `durable-mcp-proxy` binary for `[proxy] mode = "process"`; [`proxy_bin`] when `None`.
    pub proxy_bin: Option<PathBuf>,
    /// The `durable-mcp-example-tools` binary for `[tool_service]`; [`example_tools_bin`] when
    /// `None`.
    pub example_tools_bin: Option<PathBuf>,
    /// How many scenarios run at once (at least 1). Each has its own task queue, endpoint,
    /// upstream and proxy, so they do not see each other (R-CNF-6).
    pub jobs: usize,
    /// A scenario still running after this fails, naming the step it hung in.
    pub scenario_timeout: Duration,
}

impl RunOptions {
    pub fn new(root: &Path) -> Self {
        Self {
            snapshot_dir: root.join("fixtures").join("snapshots"),
            mock_bin: None,
            proxy_bin: None,
            example_tools_bin: None,
            jobs: 1,
            scenario_timeout: DEFAULT_SCENARIO_TIMEOUT,
        }
    }
}

/// What one scenario did.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub id: String,
    pub family: String,
    pub rules: Vec<String>,
    /// Ran and met every expectation.
    pub passed: bool,
    /// Not run, and why (e.g. a server restart against an existing server); neither passed
    /// nor failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
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

impl ScenarioResult {
    /// Ran and did not pass.
    pub fn failed(&self) -> bool {
        !self.passed && self.skipped.is_none()
    }
}

/// Runs `scenarios` on `server`, `options.jobs` at a time, calling `on_done` as each finishes;
/// returns the results in the order of `scenarios`.
pub async fn run_all(
    server: &DevServer,
    scenarios: &[Scenario],
    options: &RunOptions,
    mut on_done: impl FnMut(&ScenarioResult),
) -> Vec<ScenarioResult> {
    use futures::StreamExt as _;
    let mut finished: Vec<(usize, ScenarioResult)> = futures::stream::iter(
        scenarios
            .iter()
            .enumerate()
            .map(|(i, s)| async move { (i, run_one(server, s, options).await) }),
    )
    .buffer_unordered(options.jobs.max(1))
    .inspect(|(_, result)| on_done(result))
    .collect()
    .await;
    finished.sort_by_key(|(i, _)| *i);
    finished.into_iter().map(|(_, r)| r).collect()
}

/// Why `scenario` cannot run on `server`, if it cannot.
pub fn skip_reason(server: &DevServer, scenario: &Scenario) -> Option<String> {
    (scenario.restarts_server() && server.backend() == Backend::Existing).then(|| {
        "restarts the Temporal server, which a run against an existing server never does".into()
    })
}

/// Runs one scenario; never panics on a failed expectation (it becomes the result's message).
pub async fn run_one(
    server: &DevServer,
    scenario: &Scenario,
    options: &RunOptions,
) -> ScenarioResult {
    let started = Instant::now();
    let mut steps = Vec::new();
    let result = |steps, passed, skipped, message| ScenarioResult {
        id: scenario.id.clone(),
        family: scenario.family.to_string(),
        rules: scenario.rules.clone(),
        passed,
        skipped,
        message,
        duration: started.elapsed(),
        steps,
    };
    if let Some(reason) = skip_reason(server, scenario) {
        return result(steps, false, Some(reason), None);
    }
    // A fresh slice of the server, named here so it is deleted even when the scenario hangs.
    let slug: String = scenario
        .id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let names = Names {
        task_queue: unique_name(&format!("tq-{slug}")),
        endpoint: unique_name(&format!("ep-{slug}")),
    };
    let mut phase = String::from("setup");
    let outcome = tokio::time::timeout(
        options.scenario_timeout,
        execute(server, scenario, options, &names, &mut steps, &mut phase),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Failure::Setup(format!(
            "did not finish within {} s; hung in {phase}",
            options.scenario_timeout.as_secs()
        )))
    });
    if let Err(e) = server.delete_nexus_endpoint(&names.endpoint).await {
        steps.push(format!(
            "cleanup: could not delete Nexus endpoint {}: {e}",
            names.endpoint
        ));
    }
    let message = match outcome {
        Ok(()) => None,
        Err(Failure::Violated(msg)) => {
            Some(format!("{} violated: {msg}", scenario.rules.join(", ")))
        }
        Err(Failure::Setup(msg)) => Some(format!("could not run: {msg}")),
    };
    result(steps, message.is_none(), None, message)
}

/// The names a scenario's slice of the server goes by.
struct Names {
    task_queue: String,
    endpoint: String,
}

/// A scenario that broke a rule, or one that could not be run at all.
pub(crate) enum Failure {
    Violated(String),
    Setup(String),
}

pub(crate) fn setup(e: impl std::fmt::Display) -> Failure {
    Failure::Setup(e.to_string())
}

/// The server a scenario runs on: the run's, or (for `restart_server`) its own on a db file.
enum ServerSlot<'a> {
    Shared(&'a DevServer),
    Own(Box<DevServer>),
}

impl ServerSlot<'_> {
    fn get(&self) -> &DevServer {
        match self {
            ServerSlot::Shared(s) => s,
            ServerSlot::Own(s) => s,
        }
    }
}

/// Everything a step may use or change.
pub(crate) struct StepEnv<'a> {
    client: OperationClient,
    endpoint: &'a str,
    /// The Nexus service the scenario calls: the mock's, or the native tool service's.
    service: String,
    task_queue: String,
    ledger: &'a Ledger,
    options: &'a RunOptions,
    saved: Saved,
    replicas: Option<Replicas>,
    server: ServerSlot<'a>,
    proxy: Proxy,
    launcher: ProxyLauncher,
    /// The upstream's spec and (stdio) the file the mock reads it from.
    spec: UpstreamSpec,
    spec_file: Option<PathBuf>,
    /// The stdio mock's arguments (its twin gets the same), and its `--more-resources` file.
    mock_args: Vec<String>,
    more_resources: Option<PathBuf>,
    /// How many list changes of each kind reached the stateless listener a `listen` step opened.
    listener: Option<feature_steps::Told>,
    /// The mock upstream's transport, when the scenario has a mock upstream without a fault
    /// (`expect.matches_upstream_as_written` calls a twin of it).
    mock: Option<UpstreamTransport>,
    /// What `mcp` step arguments may name: `{run}` and `{task_queue}`.
    placeholders: Vec<(&'static str, String)>,
    /// `mcp` calls sent with `background = true` and no name, stopped when the scenario ends.
    background: Vec<tokio::task::AbortHandle>,
    /// Named background calls no `answer_of` waited for yet, stopped when the scenario ends.
    pending: std::collections::HashMap<String, mcp_steps::Pending>,
    /// Connections a `connections` step opened and the connector served, held open until the
    /// scenario ends.
    held: Vec<tokio::net::TcpStream>,
}

impl StepEnv<'_> {
    /// `text` with `{run}` and `{task_queue}` filled in.
    fn fill(&self, text: &str) -> String {
        self.placeholders
            .iter()
            .fold(text.to_owned(), |text, (name, with)| {
                text.replace(name, with)
            })
    }

    fn replicas(&self) -> Result<&Replicas, Failure> {
        self.replicas
            .as_ref()
            .ok_or_else(|| Failure::Setup("the scenario has no connectors".into()))
    }

    /// A raw JSON-RPC client of replica `name` (or of the first).
    async fn raw_client(&self, name: Option<&str>) -> Result<as_written_check::RawClient, Failure> {
        self.replicas()?
            .raw_client(name)
            .await
            .map_err(|e| Failure::Setup(format!("a raw client of the connector: {e:#}")))
    }
}

/// What an in-process mock serves beside its tools: its resources, template, prompt and
/// completions when the scenario has a `more_resources` file for it (`resources_and_prompts`).
pub(crate) fn features_of(
    more_resources: &Option<PathBuf>,
) -> Option<fixtures::server::features::Features> {
    more_resources
        .as_ref()
        .map(|file| fixtures::server::features::Features {
            more_resources: Some(file.clone()),
        })
}

/// Runs the scenario; keeps `phase` naming what it is doing, for the timeout message.
async fn execute(
    server: &DevServer,
    scenario: &Scenario,
    options: &RunOptions,
    names: &Names,
    log: &mut Vec<String>,
    phase: &mut String,
) -> Result<(), Failure> {
    let dir = tempfile::Builder::new()
        .prefix("durable-mcp-conformance-")
        .tempdir()
        .map_err(setup)?;
    let spec = scenario.upstream.spec();
    let ledger = Ledger::new(dir.path().join("ledger.jsonl"));

    let server = if scenario.restarts_server() {
        *phase = "setup: starting a dev server on a db file".into();
        // The run's backend, so `--backend container` restarts a container (R-HAR-5).
        let own = DevServer::start(DevServerOptions {
            backend: server.backend(),
            db_file: Some(dir.path().join("temporal.db")),
            ..DevServerOptions::default()
        })
        .await
        .map_err(|e| Failure::Setup(format!("starting a dev server on a db file: {e}")))?;
        ServerSlot::Own(Box::new(own))
    } else {
        ServerSlot::Shared(server)
    };

    let s = server.get();
    *phase = "setup: creating the task queue and Nexus endpoint".into();
    let slice = Slice::named(s, &names.task_queue, &names.endpoint)
        .await
        .map_err(|e| Failure::Setup(format!("creating the task queue and Nexus endpoint: {e}")))?;
    let (task_queue, endpoint, client) = (
        slice.task_queue.clone(),
        slice.endpoint.clone(),
        slice.client.clone(),
    );

    *phase = "setup: starting the upstream".into();
    let mut http: Option<HttpUpstream> = None;
    // Kept until the scenario ends: dropping it stops the server.
    let mut wiremock = None;
    let mut spec_file = None;
    let mut mock_args = Vec::new();
    let more_resources = scenario
        .upstream
        .resources_and_prompts
        .then(|| dir.path().join("more-resources.json"));
    let transport = match scenario.upstream.transport {
        _ if scenario.tool_service.is_some() => None,
        UpstreamTransport::Stdio => Some({
            let file = dir.path().join("spec.json");
            spec.write_json(&file).map_err(setup)?;
            let bin = match &options.mock_bin {
                Some(b) => b.clone(),
                None => fixtures::mock_upstream_bin().map_err(setup)?,
            };
            let mut args = vec!["--spec".into(), file.to_string_lossy().into_owned()];
            if let Some(more) = &more_resources {
                args.extend(["--resources-and-prompts".into(), "--more-resources".into()]);
                args.push(more.to_string_lossy().into_owned());
            }
            mock_args = args.clone();
            spec_file = Some(file);
            kit::upstreams::mock_stdio_transport(&bin, args, &ledger)
        }),
        UpstreamTransport::Http if scenario.upstream.fault.is_some() => Some({
            let fault = scenario.upstream.fault.clone().expect("checked");
            let server = fixtures::faults::faulty_upstream(&spec, fault, ledger.clone()).await;
            let url = fixtures::faults::mcp_url(&server).parse().map_err(setup)?;
            wiremock = Some(server);
            kit::upstreams::http_transport(url, scenario.upstream.unavailable_means_not_run)
        }),
        UpstreamTransport::Http => Some({
            let upstream = fixtures::serve_mock_upstream_http_with(
                SpecSource::Inline(spec.clone()),
                Some(ledger.path().to_owned()),
                "127.0.0.1:0".parse().unwrap(),
                features_of(&more_resources),
            )
            .await
            .map_err(|e| Failure::Setup(format!("starting the HTTP upstream: {e:#}")))?;
            let url = upstream.url.parse().map_err(setup)?;
            http = Some(upstream);
            kit::upstreams::http_transport(url, scenario.upstream.unavailable_means_not_run)
        }),
    };
    let (service, serves) = match (transport, &scenario.tool_service) {
        (Some(transport), _) => (
            UPSTREAM_SERVICE.to_owned(),
            Serves::Upstream(Box::new(UpstreamConfig {
                service: UPSTREAM_SERVICE.into(),
                transport,
                activity_options: scenario.proxy.activity_options.clone(),
                overrides: scenario.proxy.overrides.clone(),
            })),
        ),
        (None, Some(native)) => (
            native.kind.service().to_owned(),
            Serves::ToolService(match &options.example_tools_bin {
                Some(b) => b.clone(),
                None => example_tools_bin().map_err(setup)?,
            }),
        ),
        (None, None) => unreachable!("a scenario without a tool service has an upstream"),
    };

    // The proxy.
    let bin = match scenario.proxy.mode {
        ProxyMode::InProcess => None,
        ProxyMode::Process => Some(match &options.proxy_bin {
            Some(b) => b.clone(),
            None => proxy_bin().map_err(setup)?,
        }),
    };
    *phase = "setup: starting the proxy".into();
    let mut launcher = ProxyLauncher::on(&slice, 50, serves, bin, dir.path());
    if let Some(cap) = scenario.proxy.max_watched_resources {
        launcher.options.max_watched_resources = cap;
    }
    let mut proxy = launcher
        .start()
        .map_err(|e| Failure::Setup(format!("starting the proxy: {e:#}")))?;
    launcher
        .ready(&mut proxy)
        .await
        .map_err(|e| Failure::Setup(format!("starting the tool service: {e:#}")))?;

    *phase = "setup: starting the connectors".into();
    let replicas = if scenario.connectors.is_empty() {
        None
    } else {
        Some(
            Replicas::start(&scenario.connectors, client.clone(), &endpoint, &service)
                .await
                .map_err(|e| Failure::Setup(format!("starting the connectors: {e:#}")))?,
        )
    };

    let mut env = StepEnv {
        client,
        endpoint: &endpoint,
        service,
        task_queue: task_queue.clone(),
        ledger: &ledger,
        options,
        saved: Saved::default(),
        replicas,
        server,
        proxy,
        launcher,
        spec,
        spec_file,
        mock_args,
        more_resources,
        listener: None,
        mock: (scenario.tool_service.is_none() && scenario.upstream.fault.is_none())
            .then_some(scenario.upstream.transport),
        placeholders: vec![
            ("{run}", crate::harness::unique_name("run")),
            ("{task_queue}", task_queue.clone()),
        ],
        background: Vec::new(),
        pending: Default::default(),
        held: Vec::new(),
    };
    let mut result = Ok(());
    for (i, step) in scenario.steps.iter().enumerate() {
        let label = scenario.step_label(i);
        *phase = label.clone();
        match run_step(&mut env, step).await {
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
                result = match env.proxy.error() {
                    Some(err) => Err(Failure::Setup(format!(
                        "the proxy stopped: {err}\n{}",
                        proxy_process::log_tail(dir.path())
                    ))),
                    None => Err(e),
                };
                break;
            }
        }
    }
    *phase = "teardown".into();
    env.background.drain(..).for_each(|call| call.abort());
    env.pending.drain().for_each(|(_, call)| call.abort());
    env.held.clear();
    if let Some(replicas) = env.replicas.take() {
        replicas.stop().await;
    }
    env.proxy.stop().await;
    if let Some(upstream) = http {
        upstream.shutdown().await;
    }
    drop(wiremock);
    result
}

/// Runs one step; returns a one-line summary.
async fn run_step(env: &mut StepEnv<'_>, step: &crate::scenario::Step) -> Result<String, Failure> {
    let action = step.action().map_err(setup)?;
    let expect = step.expect.as_ref();
    let need = || Failure::Setup("this step needs an expectation".into());
    match action {
        Action::Call(call) => nexus_call::run_call(env, call, expect.ok_or_else(need)?).await,
        Action::Mcp(call) => mcp_steps::run_mcp_call(env, call, expect).await,
        Action::TasksGet(t) => mcp_steps::run_tasks_get(env, t, expect.ok_or_else(need)?).await,
        Action::TasksCancel(t) => {
            mcp_steps::run_tasks_cancel(env, t, expect.ok_or_else(need)?).await
        }
        Action::TasksUpdate(t) => {
            mcp_steps::run_tasks_update(env, t, expect.ok_or_else(need)?).await
        }
        Action::RestartConnector(name) => {
            let replicas = env
                .replicas
                .as_mut()
                .ok_or_else(|| Failure::Setup("the scenario has no connectors".into()))?;
            replicas
                .restart(name)
                .await
                .map_err(|e| Failure::Setup(format!("restarting connector {name}: {e:#}")))?;
            Ok(format!("connector {name} restarted"))
        }
        Action::SetAnnotations(change) => set_annotations(env, change),
        Action::Request(r) => feature_steps::run_request(env, r, expect.ok_or_else(need)?).await,
        Action::AddTool(a) => feature_steps::add_tool(env, a),
        Action::MoreResources(m) => feature_steps::more_resources(env, m),
        Action::ListChanged(l) => feature_steps::list_changed(env, l).await,
        Action::Listen(l) => feature_steps::listen(env, l).await,
        Action::WaitHeartbeat(w) => workflows::wait_heartbeat(env, w).await,
        Action::AnswerOf(name) => {
            mcp_steps::run_answer_of(env, name, expect.ok_or_else(need)?).await
        }
        Action::ChurnSubscriptions(c) => hostile_steps::churn_subscriptions(env, c).await,
        Action::ListTools(list) => hostile_steps::run_list_tools(env, list).await,
        Action::Connections(c) => hostile_steps::run_connections(env, c).await,
        Action::ProxyMemory(m) => hostile_steps::run_proxy_memory(env, m),
        Action::PlantCiphertext(p) => hostile_steps::run_plant_ciphertext(env, p).await,
        Action::WaitFor(w) => {
            let seen = wait_count(
                env.ledger,
                &w.tool,
                w.event,
                w.key.as_deref(),
                w.count,
                Duration::from_secs(30),
            )
            .await;
            if seen < w.count {
                return Err(Failure::Setup(format!(
                    "the upstream recorded {seen} {} event(s) of {} within 30 s, not {}",
                    w.event, w.tool, w.count
                )));
            }
            Ok(format!(
                "the upstream recorded {seen} {} of {}",
                w.event, w.tool
            ))
        }
        Action::Pause(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(format!("paused {ms} ms"))
        }
        Action::KillProxy(kill) => {
            if let Some(tool) = &kill.after_called {
                let seen = wait_count(
                    env.ledger,
                    tool,
                    LedgerEvent::Called,
                    kill.after_key.as_deref(),
                    1,
                    Duration::from_secs(30),
                )
                .await;
                if seen == 0 {
                    return Err(Failure::Setup(format!(
                        "the upstream never received a call of {tool}"
                    )));
                }
            }
            env.proxy.kill().map_err(setup)?;
            Ok("proxy killed (SIGKILL)".into())
        }
        Action::RestartProxy => {
            if !matches!(env.proxy, Proxy::Stopped) {
                return Err(Failure::Setup("restart_proxy: the proxy is running".into()));
            }
            env.proxy = env
                .launcher
                .start()
                .map_err(|e| Failure::Setup(format!("restarting the proxy: {e:#}")))?;
            env.launcher
                .ready(&mut env.proxy)
                .await
                .map_err(|e| Failure::Setup(format!("restarting the tool service: {e:#}")))?;
            Ok("proxy restarted".into())
        }
        Action::RestartServer => {
            let ServerSlot::Own(server) = &mut env.server else {
                return Err(Failure::Setup(
                    "restart_server needs a server of its own".into(),
                ));
            };
            let started = Instant::now();
            server
                .restart()
                .await
                .map_err(|e| Failure::Setup(format!("restarting the server: {e}")))?;
            Ok(format!(
                "Temporal server restarted on its db file in {} ms",
                started.elapsed().as_millis()
            ))
        }
    }
}

/// Rewrites the stdio mock's spec file with the tool's new annotations.
fn set_annotations(env: &mut StepEnv<'_>, change: &SetAnnotations) -> Result<String, Failure> {
    let file = env
        .spec_file
        .as_ref()
        .ok_or_else(|| Failure::Setup("set_annotations needs a stdio upstream".into()))?;
    let tool = env
        .spec
        .tool_mut(&change.tool)
        .ok_or_else(|| Failure::Setup(format!("no tool {:?}", change.tool)))?;
    tool.annotations = Some(change.annotations.clone());
    env.spec.write_json(file).map_err(setup)?;
    Ok(format!(
        "annotations of {} set to {}",
        change.tool, change.annotations
    ))
}
