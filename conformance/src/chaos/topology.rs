//! What a chaos run stands up (R-CNF-24): a dev server on a database file, two mock upstreams
//! writing one ledger (over HTTP, reached through the runner's relay, and over stdio, a child of
//! each proxy), two `durable-mcp-proxy` workers on one task queue, two `durable-mcp-connector`
//! replicas over HTTP with one signing key, and a Workflow worker calling tools through the
//! in-Workflow client. Every process can be killed and started again the same way.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::Context as _;
use durable_mcp::proxy::UpstreamConfig;
use serde_json::json;

use crate::{
    DevServer, DevServerOptions,
    fixtures::{Behavior, Ledger, ToolSpec, UpstreamSpec},
    harness::{Slice, TetheredChild, connector_bin, mock_upstream_bin, proxy_bin, upstream},
    kit::{
        process::{CONNECTOR_LISTENING, connector_route},
        upstreams::{http_transport, mock_stdio_transport},
    },
    load::paths::announced,
};

use super::relay::Relay;

/// The Nexus services the proxies serve the two upstreams under.
pub const HTTP_SERVICE: &str = "chaos-http";
pub const STDIO_SERVICE: &str = "chaos-stdio";
/// What `durable-mcp-proxy --health-addr` prints on stderr once its health listener is bound
/// (the CLI's `HEALTH_LISTENING`); its base URL follows.
const PROXY_HEALTH: &str = "durable-mcp-proxy health on ";
/// What the mock upstream prints on stdout once it serves HTTP; its URL follows.
const MOCK_LISTENING: &str = "LISTENING ";
/// The proxy's heartbeat timeout (R-PRX-4's default): a stopped worker stays stopped past it.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long a long call sleeps before it becomes a task (`--task-after`).
const TASK_AFTER: &str = "1s";

/// The tools of one upstream, their names prefixed (`h_` over HTTP, `s_` over stdio) so the
/// connector lists both upstreams' tools apart.
pub fn spec(prefix: &str) -> UpstreamSpec {
    let tool = |name: &str, annotations: serde_json::Value, behavior: Behavior| ToolSpec {
        name: format!("{prefix}{name}"),
        title: None,
        description: Some(format!("chaos: {name}")),
        annotations: Some(annotations),
        input_schema: Some(json!({"type": "object"})),
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior,
    };
    let mut ask = tool(
        "ask",
        json!({"idempotentHint": true}),
        Behavior::AskInput {
            message: "Go on?".into(),
        },
    );
    ask.execution = Some(json!({"taskSupport": "required"}));
    UpstreamSpec {
        name: format!("chaos-{prefix}upstream"),
        tools: vec![
            tool("echo", json!({"readOnlyHint": true}), Behavior::Echo),
            tool("bump", json!({"idempotentHint": true}), Behavior::Echo),
            tool(
                "stamp",
                json!({"destructiveHint": true, "idempotentHint": false}),
                Behavior::Stamp,
            ),
            tool(
                "slow",
                json!({"readOnlyHint": true}),
                Behavior::Sleep { ms: 3_000 },
            ),
            ask,
        ],
        instructions: None,
    }
}

/// How a process's command line is made, given the address it listens on.
type CommandFor = Box<dyn Fn(&str) -> anyhow::Result<Command> + Send + Sync>;

/// A child process that can be killed and started again with the same command line; its
/// stdout and stderr go to one log, appended across restarts.
pub struct Proc {
    pub role: String,
    command: CommandFor,
    /// The address it listens on: `127.0.0.1:0` until its first start, then the one it took.
    addr: String,
    keep_addr: bool,
    log: PathBuf,
    marker: &'static str,
    child: Option<TetheredChild>,
    /// The rest of its announcement at its last start (a URL).
    pub announced: String,
}

impl Proc {
    fn new(
        role: impl Into<String>,
        log: PathBuf,
        marker: &'static str,
        keep_addr: bool,
        command: impl Fn(&str) -> anyhow::Result<Command> + Send + Sync + 'static,
    ) -> Self {
        Self {
            role: role.into(),
            command: Box::new(command),
            addr: "127.0.0.1:0".into(),
            keep_addr,
            log,
            marker,
            child: None,
            announced: String::new(),
        }
    }

    /// Starts it and waits for its announcement; a listener keeps its first port.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let from = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = (self.command)(&self.addr)?;
        command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut child =
            TetheredChild::spawn(command).with_context(|| format!("starting the {}", self.role))?;
        let rest = announced(&self.role, &mut child, &self.log, from, self.marker).await?;
        if self.keep_addr {
            self.addr = host_port(&rest)?.to_string();
        }
        self.announced = rest;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL (its whole process group: a proxy's stdio upstream dies with it).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill_now();
        }
    }

    /// Sends `signal` to the process alone (SIGSTOP, SIGCONT).
    pub fn signal(&self, signal: libc::c_int) -> bool {
        self.pid().is_some_and(|pid| {
            // SAFETY: a plain syscall on our own live child.
            unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(TetheredChild::pid)
    }

    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.terminate(Duration::from_secs(5)).await;
        }
    }
}

/// `127.0.0.1:PORT` out of an announced URL (`http://127.0.0.1:PORT/mcp`).
fn host_port(url: &str) -> anyhow::Result<SocketAddr> {
    let parsed = url::Url::parse(url).with_context(|| format!("the announced URL {url:?}"))?;
    let host = parsed.host_str().context("no host")?;
    let port = parsed.port().context("no port")?;
    Ok(format!("{host}:{port}").parse()?)
}

/// A process the nemesis and the run share: one fault holds it at a time.
pub type Shared<T> = std::sync::Arc<tokio::sync::Mutex<T>>;

fn shared<T>(t: T) -> Shared<T> {
    std::sync::Arc::new(tokio::sync::Mutex::new(t))
}

/// Everything a chaos run stands up.
pub struct Topology {
    pub dir: PathBuf,
    pub server: Shared<DevServer>,
    pub address: String,
    pub namespace: String,
    pub slice: Slice,
    pub ledger: Ledger,
    pub relay: std::sync::Arc<Relay>,
    pub upstream: Shared<Proc>,
    pub proxies: Vec<Shared<Proc>>,
    pub connectors: Vec<Shared<Proc>>,
    /// The two replicas' MCP endpoints.
    pub urls: Vec<String>,
    pub workflows: super::workflows::WorkflowWorker,
}

impl Topology {
    /// Starts it all in `dir`; answers once every process announced it serves.
    pub async fn start(dir: &Path, options: DevServerOptions) -> anyhow::Result<Self> {
        let server = DevServer::start(DevServerOptions {
            db_file: Some(dir.join("temporal.db")),
            ..options
        })
        .await?;
        let slice = Slice::on(&server, "chaos").await?;
        let ledger = Ledger::new(dir.join("ledger.jsonl"));
        for (prefix, file) in [("h_", "spec-http.json"), ("s_", "spec-stdio.json")] {
            spec(prefix).write_json(&dir.join(file))?;
        }
        let mut upstream = http_upstream(dir, &ledger)?;
        upstream.start().await?;
        let relay = Relay::start(host_port(&upstream.announced)?).await?;
        let config = dir.join("proxy.toml");
        std::fs::write(&config, proxy_config(&slice, dir, &ledger, relay.addr)?)?;
        let mut proxies: Vec<Proc> = (0..2).map(|i| proxy(dir, i, &config)).collect();
        for p in &mut proxies {
            p.start().await?;
        }
        let mut connectors: Vec<Proc> = (0..2).map(|i| connector(dir, i, &slice)).collect();
        for c in &mut connectors {
            c.start().await?;
        }
        let urls = connectors.iter().map(|c| c.announced.clone()).collect();
        let (address, namespace) = (server.address(), server.namespace().to_owned());
        let workflows = super::workflows::WorkflowWorker::start(&address, &namespace)?;
        Ok(Self {
            dir: dir.to_owned(),
            server: shared(server),
            address,
            namespace,
            slice,
            ledger,
            relay: std::sync::Arc::new(relay),
            upstream: shared(upstream),
            proxies: proxies.into_iter().map(shared).collect(),
            connectors: connectors.into_iter().map(shared).collect(),
            urls,
            workflows,
        })
    }

    /// The long-lived processes by role, with their pids now.
    pub async fn processes(&self) -> Vec<(String, Option<u32>)> {
        let server = self.server.lock().await.pid();
        let mut all = vec![(super::checker::SERVER_ROLE.to_owned(), server)];
        let procs = std::iter::once(&self.upstream)
            .chain(&self.proxies)
            .chain(&self.connectors);
        for p in procs {
            let p = p.lock().await;
            all.push((p.role.clone(), p.pid()));
        }
        all
    }

    /// Stops every process (the server last).
    pub async fn stop(mut self) {
        self.workflows.stop().await;
        let procs = self
            .connectors
            .iter()
            .chain(&self.proxies)
            .chain(std::iter::once(&self.upstream));
        for p in procs {
            p.lock().await.stop().await;
        }
        let _ = self.server.lock().await.stop().await;
    }
}

/// The mock upstream over HTTP, recording into `ledger`.
fn http_upstream(dir: &Path, ledger: &Ledger) -> anyhow::Result<Proc> {
    let (bin, spec, ledger) = (
        mock_upstream_bin()?,
        dir.join("spec-http.json"),
        ledger.path().to_owned(),
    );
    Ok(Proc::new(
        "upstream (http)",
        dir.join("upstream-http.log"),
        MOCK_LISTENING,
        true,
        move |addr| {
            let mut command = Command::new(&bin);
            command
                .args(["--transport", "http", "--addr", addr, "--spec"])
                .arg(&spec)
                .arg("--ledger")
                .arg(&ledger);
            Ok(command)
        },
    ))
}

/// The proxies' `proxy.toml`: the HTTP upstream through the relay, and the stdio upstream.
fn proxy_config(
    slice: &Slice,
    dir: &Path,
    ledger: &Ledger,
    relay: SocketAddr,
) -> anyhow::Result<String> {
    let url = format!("http://{relay}/mcp").parse()?;
    let stdio = mock_stdio_transport(
        &mock_upstream_bin()?,
        vec![
            "--spec".into(),
            dir.join("spec-stdio.json").to_string_lossy().into_owned(),
        ],
        ledger,
    );
    let upstreams: Vec<UpstreamConfig> = vec![
        upstream(HTTP_SERVICE, http_transport(url, false)),
        upstream(STDIO_SERVICE, stdio),
    ];
    crate::run::proxy_process::proxy_toml(
        &slice.address,
        &slice.namespace,
        &slice.task_queue,
        &upstreams,
    )
}

/// Proxy worker `i`, announcing its health listener.
fn proxy(dir: &Path, i: usize, config: &Path) -> Proc {
    let config = config.to_owned();
    Proc::new(
        format!("proxy {i}"),
        dir.join(format!("proxy-{i}.log")),
        PROXY_HEALTH,
        false,
        move |_| {
            let mut command = Command::new(proxy_bin()?);
            command
                .arg("--config")
                .arg(&config)
                .args(["--health-addr", "127.0.0.1:0"])
                // One key for both workers, as one deployment's (R-PRX-35): a round may reach
                // either.
                .env(
                    durable_mcp::proxy::state_key::STATE_KEY_ENV,
                    crate::harness::test_state_key_base64(),
                );
            Ok(command)
        },
    )
}

/// Connector replica `i` over HTTP, routing to both services, with the run's signing key. The
/// whole load comes from loopback, one caller: the per-caller and per-address caps are off.
fn connector(dir: &Path, i: usize, slice: &Slice) -> Proc {
    let (endpoint, address, namespace) = (
        slice.endpoint.clone(),
        slice.address.clone(),
        slice.namespace.clone(),
    );
    Proc::new(
        format!("connector {i}"),
        dir.join(format!("connector-{i}.log")),
        CONNECTOR_LISTENING,
        true,
        move |addr| {
            let mut command = Command::new(connector_bin()?);
            for service in [HTTP_SERVICE, STDIO_SERVICE] {
                command
                    .arg("--route")
                    .arg(connector_route(service, &endpoint));
            }
            command
                .args([
                    "--transport",
                    "http",
                    "--addr",
                    addr,
                    "--task-after",
                    TASK_AFTER,
                ])
                .args(["--http-max-connections-per-address", "0"])
                .args(["--max-in-flight-per-caller", "0"])
                .args(["--max-call-starts-per-caller-minute", "0"])
                .args(["--max-requests-per-session-minute", "0"])
                .env("TEMPORAL_ADDRESS", &address)
                .env("TEMPORAL_NAMESPACE", &namespace)
                .env(
                    "MCP_TASK_SIGNING_KEY",
                    crate::kit::process::TEST_SIGNING_KEY,
                );
            Ok(command)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstreams_tools_are_named_apart_and_say_what_they_promise() {
        let (h, s) = (spec("h_"), spec("s_"));
        h.validate().unwrap();
        let names = |spec: &UpstreamSpec| -> Vec<String> {
            spec.tools.iter().map(|t| t.name.clone()).collect()
        };
        assert_eq!(
            names(&h),
            ["h_echo", "h_bump", "h_stamp", "h_slow", "h_ask"]
        );
        assert!(names(&s).iter().all(|n| n.starts_with("s_")));
        let stamp = h.tool("h_stamp").unwrap();
        assert_eq!(stamp.behavior, Behavior::Stamp);
        assert_eq!(stamp.annotations.as_ref().unwrap()["idempotentHint"], false);
        assert_eq!(host_port("http://127.0.0.1:4242/mcp").unwrap().port(), 4242);
    }
}
