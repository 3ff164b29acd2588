//! The connector and the native tool service as child processes: their command lines (the
//! binary, its route and the Temporal connection in its environment: what an `mcpServers`
//! entry runs) and what they announce once they serve.

use std::{path::Path, process::Command, time::Duration};

use anyhow::Context as _;

use crate::harness::{Slice, connector_bin, example_tools_bin};

/// What `durable-mcp-connector --transport http` prints on stderr once it listens; its MCP
/// endpoint follows.
pub const CONNECTOR_LISTENING: &str = "durable-mcp-connector listening on ";
/// What the native tool service prints once both its workers poll.
pub const TOOL_SERVICE_READY: &str = "durable-mcp-example-tools: serving";
/// A 32-byte task signing key, base64 ("0123456789abcdef0123456789abcdef").
pub const TEST_SIGNING_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The connector's `--route` value for `service` on `endpoint`.
pub fn connector_route(service: &str, endpoint: &str) -> String {
    format!("{{service: {service}, endpoint: {endpoint}}}")
}

/// `durable-mcp-connector` with one `--route` to `service` on the slice's endpoint and the
/// Temporal connection in its environment: exactly what an `mcpServers` entry runs.
pub fn connector_command(slice: &Slice, service: &str) -> anyhow::Result<Command> {
    routed_connector_command(slice, &connector_route(service, &slice.endpoint))
}

/// [`connector_command`] with the `--route` value `route` as it is.
fn routed_connector_command(slice: &Slice, route: &str) -> anyhow::Result<Command> {
    let mut command = Command::new(connector_bin()?);
    command
        .arg("--route")
        .arg(route)
        .env("TEMPORAL_ADDRESS", &slice.address)
        .env("TEMPORAL_NAMESPACE", &slice.namespace);
    Ok(command)
}

/// [`connector_command`] serving Streamable HTTP on `addr` (`127.0.0.1:0`: a free port), with
/// the task signing key `signing_key`; it announces its endpoint ([`CONNECTOR_LISTENING`]).
pub fn http_connector_command(
    slice: &Slice,
    service: &str,
    addr: &str,
    signing_key: &str,
) -> anyhow::Result<Command> {
    let route = connector_route(service, &slice.endpoint);
    routed_http_connector_command(slice, &route, addr, signing_key)
}

/// [`http_connector_command`] with the `--route` value `route` as it is.
fn routed_http_connector_command(
    slice: &Slice,
    route: &str,
    addr: &str,
    signing_key: &str,
) -> anyhow::Result<Command> {
    let mut command = routed_connector_command(slice, route)?;
    command
        .args(["--transport", "http", "--addr", addr])
        .env("MCP_TASK_SIGNING_KEY", signing_key);
    Ok(command)
}

/// The MCP endpoint in the connector's [`CONNECTOR_LISTENING`] line, if `line` is that line.
pub fn listening_url(line: &str) -> Option<&str> {
    line.strip_prefix(CONNECTOR_LISTENING.trim_end())
        .map(str::trim)
}

/// The native tool service `bin` (`durable-mcp-example-tools`) on `task_queue`, reaching the
/// server at `address` through Temporal's environment configuration (TLS and API key
/// inherited); it announces [`TOOL_SERVICE_READY`].
pub fn tool_service_command(
    bin: &Path,
    address: &str,
    namespace: &str,
    task_queue: &str,
) -> Command {
    let mut command = Command::new(bin);
    command
        .args(["--task-queue", task_queue])
        .env("TEMPORAL_ADDRESS", address)
        .env("TEMPORAL_NAMESPACE", namespace);
    command
}

/// A child's stderr lines after its announcement, kept as they arrive.
#[derive(Clone, Debug, Default)]
pub struct ChildLog(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl ChildLog {
    /// Keeps one more line.
    pub fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The lines that tell of a panic.
    pub fn panics(&self) -> Vec<String> {
        let mut lines = self.lines();
        lines.retain(|l| l.contains("panicked"));
        lines
    }
}

/// Spawns `command` (stderr piped, killed when dropped, `RUST_LOG=warn`) and waits up to 30 s
/// for a stderr line starting with `announcement`; returns the child and its stderr lines up to
/// and including that one, and keeps draining stderr so the child never blocks on it.
pub async fn spawn_announcing(
    command: impl Into<tokio::process::Command>,
    announcement: &str,
) -> anyhow::Result<(tokio::process::Child, Vec<String>)> {
    let (child, seen, _) = spawn_announcing_logged(command, announcement).await?;
    Ok((child, seen))
}

/// [`spawn_announcing`], keeping the stderr lines that follow the announcement.
pub async fn spawn_announcing_logged(
    command: impl Into<tokio::process::Command>,
    announcement: &str,
) -> anyhow::Result<(tokio::process::Child, Vec<String>, ChildLog)> {
    use tokio::io::AsyncBufReadExt as _;
    let mut command = command.into();
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("spawning the process")?;
    let mut stderr =
        tokio::io::BufReader::new(child.stderr.take().context("no stderr pipe")?).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await? {
            seen.push(line.clone());
            if line.starts_with(announcement) {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("the process exited before announcing {announcement:?}: {seen:?}")
    })
    .await
    .map_err(|_| anyhow::anyhow!("no {announcement:?} within 30 s"))??;
    let log = ChildLog::default();
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            kept.push(line);
        }
    });
    Ok((child, seen, log))
}

/// The native tool service on the slice's task queue, killed when dropped; returns once it
/// announced that it serves.
pub async fn example_tools(slice: &Slice) -> anyhow::Result<tokio::process::Child> {
    let command = tool_service_command(
        &example_tools_bin()?,
        &slice.address,
        &slice.namespace,
        &slice.task_queue,
    );
    Ok(spawn_announcing(command, TOOL_SERVICE_READY).await?.0)
}

/// A `durable-mcp-connector --transport http` process, killed when dropped.
pub struct HttpConnectorProcess {
    pub child: tokio::process::Child,
    /// The MCP endpoint it announced.
    pub url: String,
    pub addr: std::net::SocketAddr,
    /// Its stderr lines up to and including the announcement.
    pub startup_log: Vec<String>,
    /// Its stderr lines after the announcement.
    pub log: ChildLog,
}

impl HttpConnectorProcess {
    /// Starts the binary with one route to `service` on the slice's endpoint, on a free
    /// loopback port, with `extra_args` and [`TEST_SIGNING_KEY`], and waits for it to announce
    /// its address (it keeps draining stderr afterwards).
    pub async fn start(slice: &Slice, service: &str, extra_args: &[&str]) -> anyhow::Result<Self> {
        Self::start_at(slice, service, "127.0.0.1:0", extra_args).await
    }

    /// [`Self::start`] listening on `addr`.
    pub async fn start_at(
        slice: &Slice,
        service: &str,
        addr: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<Self> {
        let route = connector_route(service, &slice.endpoint);
        Self::start_routed(slice, &route, addr, extra_args).await
    }

    /// [`Self::start_at`] with the `--route` value `route` as it is (a route that keeps some
    /// tools synchronous, say).
    pub async fn start_routed(
        slice: &Slice,
        route: &str,
        addr: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<Self> {
        let mut command = routed_http_connector_command(slice, route, addr, TEST_SIGNING_KEY)?;
        command.args(extra_args);
        let (child, seen, log) = spawn_announcing_logged(command, CONNECTOR_LISTENING).await?;
        let url = seen
            .last()
            .and_then(|line| listening_url(line))
            .context("no announced endpoint")?
            .to_owned();
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .with_context(|| format!("the announced endpoint {url}"))?;
        Ok(Self {
            child,
            url,
            addr,
            startup_log: seen,
            log,
        })
    }
}
