//! The paths a load run compares, and the processes each one needs. Every process whose CPU
//! is charged runs on its own (the Temporal server, the upstream, the connector, the proxy,
//! the floor and peer workers), so `/proc` can tell their costs apart.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::Context as _;
use durable_mcp::{
    contract::payload,
    nexus::{OperationClient, OperationOutcome, StartOperation},
};
use rmcp::{RoleClient, ServiceExt as _, model::CallToolRequestParams, service::RunningService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    DevServer,
    harness::{Slice, TetheredChild, tail_lines, unique_name},
    kit::{
        mcp::session_http_client,
        process::{CONNECTOR_LISTENING, connector_command, http_connector_command},
        upstreams::http_upstream,
    },
    run::proxy_process::{ProxyLauncher, Serves},
};

/// The whole load comes from one caller on one session, which the connector's per-caller and
/// per-session caps (R-CON-38) would refuse after 600 requests a minute: they are off here, as
/// for one trusted client; `--max-in-flight` keeps its default of 512 (above c=256).
const ONE_CALLERS_CAPS_OFF: [&str; 6] = [
    "--max-requests-per-session-minute",
    "0",
    "--max-call-starts-per-caller-minute",
    "0",
    "--max-in-flight-per-caller",
    "0",
];

/// The Nexus service the connector routes to (the proxy serves the upstream under it).
pub const UPSTREAM_SERVICE: &str = "mock";

/// One of the compared paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    /// (a) rmcp straight to the upstream: no Temporal.
    Direct,
    /// (b) a standalone Nexus operation completed by a standalone Activity, no MCP.
    Floor,
    /// (c) rmcp over Streamable HTTP -> connector -> Temporal -> proxy -> Activity -> upstream.
    FullHttp,
    /// (c) the same with the client talking to the connector over stdio.
    FullStdio,
    /// (d) `temporalio-mcp`: one Workflow per call, its Activity calling the upstream.
    Peer,
    /// (e) the full path over HTTP with the proxy answering inline in its Nexus handler
    /// (`execution = "inline"`, R-PRX-30): no Activity.
    InlineHttp,
}

impl PathKind {
    pub const ALL: [PathKind; 6] = [
        PathKind::Direct,
        PathKind::Floor,
        PathKind::FullHttp,
        PathKind::FullStdio,
        PathKind::Peer,
        PathKind::InlineHttp,
    ];

    pub fn label(self) -> &'static str {
        match self {
            PathKind::Direct => "(a) direct",
            PathKind::Floor => "(b) floor",
            PathKind::FullHttp => "(c) full/http",
            PathKind::FullStdio => "(c) full/stdio",
            PathKind::Peer => "(d) peer",
            PathKind::InlineHttp => "(e) inline/http",
        }
    }

    /// Whether the path runs through Temporal (and so gets a fresh dev server).
    pub fn needs_temporal(self) -> bool {
        self != PathKind::Direct
    }
}

/// How a path's calls are made.
pub enum Caller {
    /// An rmcp client: to the upstream (direct) or to the connector (full path).
    Mcp(RunningService<RoleClient, ()>),
    Floor {
        client: OperationClient,
        endpoint: String,
    },
    Peer {
        connection: temporalio_client::Connection,
        namespace: String,
        task_queue: String,
    },
}

impl Caller {
    /// One call with `key`; answers the key the other end echoed.
    pub async fn call(&self, key: &str) -> anyhow::Result<String> {
        match self {
            Caller::Mcp(client) => {
                let result = client
                    .peer()
                    .call_tool(CallToolRequestParams::new("echo").with_arguments(
                        json!({"key": key}).as_object().cloned().unwrap_or_default(),
                    ))
                    .await?;
                anyhow::ensure!(
                    result.is_error != Some(true),
                    "the tool answered isError: {:?}",
                    result.content
                );
                echoed(result.structured_content.as_ref())
            }
            Caller::Floor { client, endpoint } => {
                let mut start = StartOperation::new(
                    format!("floor-{key}"),
                    endpoint,
                    super::floor::FLOOR_SERVICE,
                    super::floor::OPERATION,
                    payload::to_payload(&json!({"key": key}))?,
                );
                start.schedule_to_close = Some(Duration::from_secs(120));
                let (op, _) = client.start(start).await?;
                match client.wait(&op, &CancellationToken::new()).await? {
                    OperationOutcome::Succeeded(p) => echoed(Some(&payload::to_json(&p)?)),
                    other => anyhow::bail!("the operation ended {other:?}"),
                }
            }
            Caller::Peer {
                connection,
                namespace,
                task_queue,
            } => {
                let text = super::peer::call(connection, namespace, task_queue, key).await?;
                echoed(Some(&serde_json::from_str(&text)?))
            }
        }
    }

    pub async fn close(self) {
        if let Caller::Mcp(client) = self {
            let _ = client.cancel().await;
        }
    }
}

fn echoed(value: Option<&serde_json::Value>) -> anyhow::Result<String> {
    value
        .and_then(|v| v["key"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no echoed key in {value:?}"))
}

/// A child process of the run, by role; killed when dropped.
pub struct Child {
    pub role: &'static str,
    pub pid: u32,
    process: Option<TetheredChild>,
    /// Held for stdio children whose lifetime rmcp owns.
    _tokio: Option<tokio::process::Child>,
}

impl Child {
    pub(super) fn spawned(role: &'static str, process: TetheredChild) -> Self {
        Child {
            role,
            pid: process.pid(),
            process: Some(process),
            _tokio: None,
        }
    }

    pub async fn stop(mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.terminate(Duration::from_secs(5)).await;
        }
    }
}

/// Spawns `command` with stdout and stderr in `log` and waits until `log` has a line starting
/// with `marker`; answers the rest of that line.
pub(super) async fn spawn_until(
    role: &'static str,
    mut command: Command,
    log: &Path,
    marker: &str,
) -> anyhow::Result<(Child, String)> {
    let file = std::fs::File::create(log)?;
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    let mut process =
        TetheredChild::spawn(command).with_context(|| format!("starting the {role}"))?;
    let rest = announced(role, &mut process, log, 0, marker).await?;
    Ok((Child::spawned(role, process), rest))
}

/// Waits up to 60 s until `log`, read from byte `from` on (a log a restarted process appends
/// to), has a line starting with `marker`; answers the rest of that line. Fails with the log's
/// tail when `process` exits first.
pub(crate) async fn announced(
    role: &str,
    process: &mut TetheredChild,
    log: &Path,
    from: usize,
    marker: &str,
) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = std::fs::read(log).unwrap_or_default();
        let text = String::from_utf8_lossy(all.get(from..).unwrap_or_default());
        if let Some(rest) = text.lines().find_map(|l| l.strip_prefix(marker)) {
            return Ok(rest.trim().to_owned());
        }
        if let Some(status) = process.exited() {
            anyhow::bail!("the {role} exited ({status}): {}", tail_lines(&text, 8));
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the {role} did not get ready in 60 s: {}",
            tail_lines(&text, 8)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The mock upstream over Streamable HTTP, recording every invocation in `ledger`.
pub async fn start_upstream(dir: &Path, ledger: &Path) -> anyhow::Result<(Child, String)> {
    let mut command = Command::new(crate::fixtures::mock_upstream_bin()?);
    command
        .args(["--transport", "http", "--ledger"])
        .arg(ledger)
        .env("RUST_LOG", "warn");
    spawn_until("upstream", command, &dir.join("upstream.log"), "LISTENING").await
}

/// Everything one path runs besides the driver.
pub struct Setup {
    pub caller: Caller,
    pub children: Vec<Child>,
    /// The full path's slice of the server (its proxy's task queue and endpoint), for more
    /// connectors.
    pub full: Option<Slice>,
}

/// Starts what `kind` needs on `server` (none for [`PathKind::Direct`]) and checks one call.
pub async fn start(
    kind: PathKind,
    server: Option<&DevServer>,
    upstream_url: &str,
    dir: &Path,
    peer: Option<&(String, PathBuf)>,
) -> anyhow::Result<Setup> {
    let mut children = Vec::new();
    let mut full = None;
    let caller = match kind {
        PathKind::Direct => Caller::Mcp(
            session_http_client(upstream_url, ())
                .await
                .context("MCP handshake with the upstream")?,
        ),
        PathKind::Floor => {
            let server = server.context("the floor needs a server")?;
            let slice = Slice::on(server, "floor").await?;
            let mut command = Command::new(std::env::current_exe()?);
            command
                .args(["load-floor-worker", "--address"])
                .arg(server.address())
                .args([
                    "--namespace",
                    server.namespace(),
                    "--task-queue",
                    &slice.task_queue,
                ])
                .env("RUST_LOG", "warn");
            let (child, _) =
                spawn_until("floor worker", command, &dir.join("floor.log"), "READY").await?;
            children.push(child);
            Caller::Floor {
                client: slice.client,
                endpoint: slice.endpoint,
            }
        }
        PathKind::FullHttp | PathKind::FullStdio | PathKind::InlineHttp => {
            let server = server.context("the full path needs a server")?;
            let slice = Slice::on(server, "proxy").await?;
            let inline = kind == PathKind::InlineHttp;
            children.push(start_proxy(&slice, upstream_url, dir, inline)?);
            let caller = if kind != PathKind::FullStdio {
                let mut command = http_connector_command(
                    &slice,
                    UPSTREAM_SERVICE,
                    "127.0.0.1:0",
                    &signing_key(),
                )?;
                command
                    // Every caller comes from loopback: one address.
                    .args(["--http-max-connections-per-address", "0"])
                    .args(ONE_CALLERS_CAPS_OFF)
                    .env("RUST_LOG", "warn");
                let (child, url) = spawn_until(
                    "connector",
                    command,
                    &dir.join("connector.log"),
                    CONNECTOR_LISTENING,
                )
                .await?;
                children.push(child);
                Caller::Mcp(
                    session_http_client(&url, ())
                        .await
                        .context("MCP handshake with the connector over HTTP")?,
                )
            } else {
                let mut command =
                    tokio::process::Command::from(connector_command(&slice, UPSTREAM_SERVICE)?);
                command
                    .args(ONE_CALLERS_CAPS_OFF)
                    .env("RUST_LOG", "warn")
                    .stderr(std::fs::File::create(dir.join("connector-stdio.log"))?);
                let transport = rmcp::transport::TokioChildProcess::new(command)?;
                let pid = transport.id().context("the stdio connector has no pid")?;
                children.push(Child {
                    role: "connector",
                    pid,
                    process: None,
                    _tokio: None,
                });
                Caller::Mcp(
                    ().serve(transport)
                        .await
                        .context("MCP handshake with the connector over stdio")?,
                )
            };
            full = Some(slice);
            caller
        }
        PathKind::Peer => {
            let server = server.context("the peer needs a server")?;
            let (python, install) = peer.context("the peer is not installed")?;
            let task_queue = unique_name("tq-peer");
            let command = super::peer::worker_command(
                python,
                install,
                dir,
                &server.address(),
                server.namespace(),
                &task_queue,
                upstream_url,
            )?;
            let (child, _) =
                spawn_until("peer worker", command, &dir.join("peer.log"), "READY").await?;
            children.push(child);
            Caller::Peer {
                connection: durable_mcp::temporal::connect_to(
                    &server.address(),
                    "durable-mcp-load",
                )
                .await?,
                namespace: server.namespace().to_owned(),
                task_queue,
            }
        }
    };
    // One call through the whole path: it also waits until the workers poll.
    let key = format!("warmup-{}", uuid::Uuid::new_v4());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout(Duration::from_secs(30), caller.call(&key)).await {
            Ok(Ok(echo)) if echo == key => break,
            Ok(Ok(echo)) => anyhow::bail!("{}: echoed {echo:?} for {key:?}", kind.label()),
            Ok(Err(e)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!("warm-up call failed ({e:#}); trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(Err(e)) => return Err(e.context(format!("{}: the warm-up call", kind.label()))),
            Err(_) => anyhow::bail!("{}: the warm-up call got no answer in 30 s", kind.label()),
        }
    }
    Ok(Setup {
        caller,
        children,
        full,
    })
}

/// `durable-mcp-proxy` as a child with a generated config fronting the HTTP upstream; with
/// `inline`, its `echo` tool runs inline in the Nexus handler (R-PRX-30).
fn start_proxy(
    slice: &Slice,
    upstream_url: &str,
    dir: &Path,
    inline: bool,
) -> anyhow::Result<Child> {
    let mut upstream = http_upstream(UPSTREAM_SERVICE, upstream_url)?;
    if inline {
        let options = durable_mcp::proxy::options::ActivityOptions {
            execution: Some(durable_mcp::proxy::options::Execution::Inline),
            ..Default::default()
        };
        upstream.overrides.insert("echo".into(), options);
    }
    proxy_child(slice, upstream, dir)
}

/// `durable-mcp-proxy` as a child fronting `upstream` on `slice`.
pub(super) fn proxy_child(
    slice: &Slice,
    upstream: durable_mcp::proxy::UpstreamConfig,
    dir: &Path,
) -> anyhow::Result<Child> {
    let launcher = ProxyLauncher::on(
        slice,
        super::WORKER_SLOTS,
        Serves::Upstream(Box::new(upstream)),
        Some(crate::harness::proxy_bin()?),
        dir,
    );
    match launcher.start()? {
        crate::run::proxy_process::Proxy::Process(p) => Ok(Child::spawned("proxy", p)),
        _ => anyhow::bail!("the proxy did not start as a process"),
    }
}

/// A random task-signing key for the HTTP connector (it refuses to start without one).
pub(super) fn signing_key() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(uuid::Uuid::new_v4().as_bytes().repeat(2))
}
