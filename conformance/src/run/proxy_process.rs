//! The scenario's proxy: on a thread of the runner, or as a `durable-mcp-proxy` child process
//! (with a generated `proxy.toml`) that `kill_proxy` can SIGKILL like a crashed machine.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use durable_mcp::proxy::{ProxyOptions, TransportConfig, UpstreamConfig};

use crate::{
    harness::{Slice, TetheredChild},
    kit::process::{TOOL_SERVICE_READY, tool_service_command},
    proxy_thread::{Connect, ProxyThread},
};

/// A running proxy of either kind.
pub(crate) enum Proxy {
    Thread(ProxyThread),
    Process(TetheredChild),
    /// Killed by `kill_proxy`, not restarted yet.
    Stopped,
}

/// A variable the proxy child is started with and its stdio upstreams must not see (R-PRX-11).
pub(crate) const PROXY_SECRET_VAR: &str = "DURABLE_MCP_CONFORMANCE_SECRET";

/// What it takes to (re)start the scenario's proxy.
pub(crate) struct ProxyLauncher {
    /// For the child's `proxy.toml`; TLS and API key reach it through the inherited
    /// environment, as Temporal's environment configuration.
    pub address: String,
    /// For the in-process proxy.
    pub connection: temporalio_client::ConnectionOptions,
    pub options: ProxyOptions,
    /// What the proxy fronts: the mock upstream, or a native tool service instead of a proxy.
    pub serves: Serves,
    /// `Some`: run this binary as a child with a config file in `dir`.
    pub bin: Option<PathBuf>,
    pub dir: PathBuf,
}

/// What a scenario's worker process serves.
pub(crate) enum Serves {
    /// The proxy, fronting this upstream.
    Upstream(Box<UpstreamConfig>),
    /// A native tool service binary (`durable-mcp-example-tools`), instead of the proxy.
    ToolService(PathBuf),
}

/// How long a native tool service may take to start.
const TOOL_SERVICE_START: std::time::Duration = std::time::Duration::from_secs(60);

impl ProxyLauncher {
    /// The proxy (or tool service) for `serves` on the slice's task queue, with its config and
    /// log in `dir`; `bin` runs it as a child, `None` on a thread of the runner.
    pub fn on(
        slice: &Slice,
        max_concurrent_calls: usize,
        serves: Serves,
        bin: Option<PathBuf>,
        dir: &Path,
    ) -> Self {
        Self {
            address: slice.address.clone(),
            connection: slice.connection_options.clone(),
            options: slice.proxy_options(max_concurrent_calls),
            serves,
            bin,
            dir: dir.to_owned(),
        }
    }

    pub fn start(&self) -> anyhow::Result<Proxy> {
        let upstream = match &self.serves {
            Serves::Upstream(upstream) => upstream,
            Serves::ToolService(bin) => return self.start_tool_service(bin),
        };
        let Some(bin) = &self.bin else {
            return Ok(Proxy::Thread(ProxyThread::start_with(
                Connect::Options(Box::new(self.connection.clone())),
                self.options.clone(),
                vec![(**upstream).clone()],
            )));
        };
        let config = self.dir.join("proxy.toml");
        std::fs::write(&config, self.config_toml(upstream)?)?;
        let log = std::fs::File::create(self.dir.join("proxy.log"))?;
        let mut command = Command::new(bin);
        command
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            // A secret of the proxy's own that no upstream may find (R-PRX-11).
            .env(PROXY_SECRET_VAR, "for the proxy only")
            // Shared with every proxy of the run, as one deployment's workers (R-PRX-35).
            .env(
                durable_mcp::proxy::state_key::STATE_KEY_ENV,
                crate::harness::test_state_key_base64(),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        Ok(Proxy::Process(TetheredChild::spawn(command)?))
    }

    /// The `proxy.toml` for the child: the scenario's task queue, server and upstream.
    fn config_toml(&self, upstream: &UpstreamConfig) -> anyhow::Result<String> {
        let mut root = proxy_table(
            &self.address,
            &self.options.namespace,
            &self.options.task_queue,
            std::slice::from_ref(upstream),
        )?;
        let watched = i64::try_from(self.options.max_watched_resources).unwrap_or(i64::MAX);
        if let Some(toml::Value::Table(worker)) = root.get_mut("worker") {
            worker.insert("max_watched_resources".into(), watched.into());
        }
        Ok(toml::to_string(&root)?)
    }
}

/// A `proxy.toml` for a `durable-mcp-proxy` child polling `task_queue` on the server at
/// `address`, fronting `upstreams` (each under its own service name).
pub(crate) fn proxy_toml(
    address: &str,
    namespace: &str,
    task_queue: &str,
    upstreams: &[UpstreamConfig],
) -> anyhow::Result<String> {
    Ok(toml::to_string(&proxy_table(
        address, namespace, task_queue, upstreams,
    )?)?)
}

/// [`proxy_toml`]'s document as a table, for a caller that adds keys of its own.
fn proxy_table(
    address: &str,
    namespace: &str,
    task_queue: &str,
    upstreams: &[UpstreamConfig],
) -> anyhow::Result<toml::Table> {
    let upstreams = upstreams
        .iter()
        .map(|u| upstream_table(u).map(toml::Value::from))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut worker = toml::Table::new();
    worker.insert("task_queue".into(), task_queue.into());
    let mut temporal = toml::Table::new();
    temporal.insert("address".into(), address.into());
    temporal.insert("namespace".into(), namespace.into());
    let mut root = toml::Table::new();
    root.insert("worker".into(), worker.into());
    root.insert("temporal".into(), temporal.into());
    root.insert("upstream".into(), toml::Value::Array(upstreams));
    Ok(root)
}

/// One `[[upstream]]` table of a `proxy.toml`.
fn upstream_table(upstream_config: &UpstreamConfig) -> anyhow::Result<toml::Table> {
    let mut upstream = toml::Table::new();
    upstream.insert("service".into(), upstream_config.service.clone().into());
    match &upstream_config.transport {
        TransportConfig::Stdio { command, args, .. } => {
            upstream.insert("transport".into(), "stdio".into());
            upstream.insert("command".into(), escape(command).into());
            let args: Vec<toml::Value> = args.iter().map(|a| escape(a).into()).collect();
            upstream.insert("args".into(), args.into());
        }
        TransportConfig::Http {
            url,
            unavailable_means_not_run,
            ..
        } => {
            upstream.insert("transport".into(), "http".into());
            upstream.insert("url".into(), url.to_string().into());
            if *unavailable_means_not_run {
                upstream.insert("unavailable_means_not_run".into(), true.into());
            }
        }
        TransportConfig::Custom(_) => {
            anyhow::bail!("a client factory cannot be written to a proxy.toml")
        }
    }
    if upstream_config.activity_options != Default::default() {
        upstream.insert(
            "activity_options".into(),
            toml::Value::try_from(&upstream_config.activity_options)?,
        );
    }
    if !upstream_config.overrides.is_empty() {
        upstream.insert(
            "overrides".into(),
            toml::Value::try_from(&upstream_config.overrides)?,
        );
    }
    Ok(upstream)
}

impl ProxyLauncher {
    /// The native tool service as a child on the scenario's task queue, reaching the server
    /// through Temporal's environment configuration (TLS and API key inherited). Wait for it
    /// with [`Proxy::ready`].
    fn start_tool_service(&self, bin: &Path) -> anyhow::Result<Proxy> {
        let log = std::fs::File::create(self.dir.join("proxy.log"))?;
        let mut command = tool_service_command(
            bin,
            &self.address,
            &self.options.namespace,
            &self.options.task_queue,
        );
        command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        Ok(Proxy::Process(TetheredChild::spawn(command)?))
    }

    /// Waits until a native tool service says both its workers poll (a proxy needs no wait:
    /// the server holds a start until a worker polls).
    pub async fn ready(&self, proxy: &mut Proxy) -> anyhow::Result<()> {
        if !matches!(self.serves, Serves::ToolService(_)) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + TOOL_SERVICE_START;
        loop {
            let log = std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default();
            if log.contains(TOOL_SERVICE_READY) {
                return Ok(());
            }
            if let Some(error) = proxy.error() {
                anyhow::bail!("the tool service stopped: {error}\n{}", log_tail(&self.dir));
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!(
                    "the tool service did not start within {} s:\n{}",
                    TOOL_SERVICE_START.as_secs(),
                    log_tail(&self.dir)
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// `$` is the config's expansion character; a literal one is `$$`.
fn escape(s: &str) -> String {
    s.replace('$', "$$")
}

impl Proxy {
    /// SIGKILLs a child proxy (and its process group: the stdio upstream dies with it).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        match std::mem::replace(self, Proxy::Stopped) {
            Proxy::Process(mut p) => {
                p.kill_now()?;
                Ok(())
            }
            Proxy::Thread(t) => {
                *self = Proxy::Thread(t);
                anyhow::bail!("kill_proxy needs [proxy] mode = \"process\"")
            }
            Proxy::Stopped => anyhow::bail!("the proxy is not running"),
        }
    }

    /// Why the proxy stopped on its own, if it did.
    pub fn error(&mut self) -> Option<String> {
        match self {
            Proxy::Thread(t) => t.error(),
            Proxy::Process(p) => p
                .exited()
                .map(|status| format!("the proxy process exited ({status})")),
            Proxy::Stopped => None,
        }
    }

    pub async fn stop(self) {
        match self {
            Proxy::Thread(t) => t.stop().await,
            Proxy::Process(mut p) => {
                let _ = p.terminate(std::time::Duration::from_secs(5)).await;
            }
            Proxy::Stopped => {}
        }
    }
}

/// The proxy's log, for setup errors.
pub(crate) fn log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("proxy.log")).unwrap_or_default();
    crate::harness::tail_lines(&text, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the runner writes, the proxy reads back: every upstream under its own service, a
    /// literal `$` kept, an HTTP upstream's flag and a tool's override.
    #[test]
    fn a_written_proxy_toml_reads_back_as_its_upstreams() {
        let stdio = crate::harness::upstream(
            "stdio-svc",
            TransportConfig::stdio("/bin/mock$1", vec!["--spec".into(), "a$b.json".into()]),
        );
        let mut http =
            crate::kit::upstreams::http_upstream("http-svc", "http://127.0.0.1:9/mcp").unwrap();
        if let TransportConfig::Http {
            unavailable_means_not_run,
            ..
        } = &mut http.transport
        {
            *unavailable_means_not_run = true;
        }
        http.overrides.insert(
            "slow".into(),
            serde_json::from_str(r#"{"start_to_close_timeout": "2s"}"#).unwrap(),
        );
        let text = proxy_toml("127.0.0.1:7233", "ns", "tq", &[stdio, http]).unwrap();
        let read = durable_mcp::proxy::config::parse(&text, &|_| None).unwrap();
        assert_eq!(read.worker.task_queue, "tq");
        let services: Vec<&str> = read.upstreams.iter().map(|u| u.service.as_str()).collect();
        assert_eq!(services, ["stdio-svc", "http-svc"]);
        match &read.upstreams[0].transport {
            TransportConfig::Stdio { command, args, .. } => {
                assert_eq!(command, "/bin/mock$1");
                assert_eq!(args, &["--spec", "a$b.json"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read.upstreams[1].transport,
            TransportConfig::Http {
                unavailable_means_not_run: true,
                ..
            }
        ));
        assert!(read.upstreams[1].overrides.contains_key("slow"));
    }
}
