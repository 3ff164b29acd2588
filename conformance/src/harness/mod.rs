//! A real Temporal dev server for tests.
//!
//! The connector's behaviour depends on server features (standalone Nexus operations, activity
//! completion callbacks) that no mock reproduces faithfully, so integration tests run against the
//! real `temporal server start-dev`, found or installed by [`find_cli`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), durable_mcp_conformance::harness::HarnessError> {
//! use durable_mcp_conformance::harness::{Slice, shared};
//! let server = shared().await?;                 // one server per test binary
//! let slice = Slice::on(server, "my-test").await?; // its own task queue and endpoint
//! // slice.start_proxy(upstreams, 50) fronts MCP servers there; slice.client calls them.
//! # Ok(()) }
//! ```
//!
//! Backends: [`Backend::Process`] (default) runs the CLI as a child process that cannot outlive
//! the test binary (see `process.rs`); [`Backend::Container`] runs the official image through
//! testcontainers and reports [`HarnessError::BackendUnavailable`] when no Docker engine answers.

pub mod bins;
mod cli;
mod container;
mod error;
mod external;
mod image;
pub mod npm;
mod ports;
mod process;
mod provision;
mod slice;

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::sync::OnceCell;
use url::Url;

pub use bins::{connector_bin, example_tools_bin, mock_upstream_bin, proxy_bin, workspace_bin};
pub use cli::{MIN_CLI_VERSION, ServerVersion, cache_dir, compare_versions, find_cli, tail_lines};
pub use error::HarnessError;
pub use image::LOCAL_IMAGE_REPOSITORY;
pub(crate) use process::TetheredChild;
pub use process::process_alive;
pub use slice::{Slice, test_state_key_base64, test_state_keys, upstream};

use container::ContainerServer;
use external::ExternalServer;
use process::ChildDevServer;

/// Environment variable selecting the backend: `process` (default) or `container`.
pub const BACKEND_ENV: &str = "DURABLE_MCP_TEMPORAL";
/// Environment variable overriding the container image.
pub const IMAGE_ENV: &str = "DURABLE_MCP_TEMPORAL_IMAGE";
/// The image used by the container backend unless [`IMAGE_ENV`] says otherwise: the official
/// CLI image at the same version the process backend installs.
pub const DEFAULT_IMAGE: &str = "temporalio/temporal:1.9.1";

/// How the dev server is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The Temporal CLI as a child process of the test binary.
    #[default]
    Process,
    /// The `temporalio/temporal` image via testcontainers (needs a Docker engine).
    Container,
    /// A server the user already runs ([`DevServer::existing`]); never started, stopped or
    /// restarted by the harness. Not selectable through [`BACKEND_ENV`].
    Existing,
}

impl Backend {
    /// Parses a backend name; `None` or blank means the default. Case-insensitive.
    pub fn parse(value: Option<&str>) -> Result<Self, HarnessError> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("process") => Ok(Self::Process),
            Some("container") | Some("docker") => Ok(Self::Container),
            Some(_) => Err(HarnessError::InvalidSetting {
                name: BACKEND_ENV,
                value: value.unwrap_or_default().to_owned(),
                hint: "use `process` (the default) or `container`".to_owned(),
            }),
        }
    }

    /// Reads [`BACKEND_ENV`]. An unknown value is an error, not a silent fallback: a CI job that
    /// asked for containers must not quietly test processes.
    pub fn from_env() -> Result<Self, HarnessError> {
        let value = std::env::var(BACKEND_ENV).ok();
        Self::parse(value.as_deref())
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Process => "process",
            Self::Container => "container",
            Self::Existing => "existing server",
        })
    }
}

/// How to start a [`DevServer`].
#[derive(Debug, Clone)]
pub struct DevServerOptions {
    /// Process or container.
    pub backend: Backend,
    /// SQLite file for the server's state; with it, state survives [`DevServer::restart`].
    /// `None` keeps state in memory.
    pub db_file: Option<PathBuf>,
    /// Namespace created at startup and used by the readiness check.
    pub namespace: String,
    /// Image for the container backend.
    pub container_image: String,
    /// How long to wait for the server to answer after launch.
    pub startup_timeout: Duration,
    /// The frontend gRPC port on 127.0.0.1 (the address clients use); `None` picks a free one.
    /// The server runs headless, so there is no web UI port to choose.
    pub grpc_port: Option<u16>,
}

impl Default for DevServerOptions {
    /// Process backend, in-memory state, namespace `default`, 60 s startup timeout. The image
    /// honours [`IMAGE_ENV`]; the backend does not (see [`DevServerOptions::from_env`]).
    fn default() -> Self {
        Self {
            backend: Backend::Process,
            db_file: None,
            namespace: "default".to_owned(),
            container_image: std::env::var(IMAGE_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_IMAGE.to_owned()),
            startup_timeout: Duration::from_secs(60),
            grpc_port: None,
        }
    }
}

impl DevServerOptions {
    /// The defaults with the backend taken from [`BACKEND_ENV`]. This is what [`shared`] uses,
    /// so a CI job can run the whole suite against the container backend.
    pub fn from_env() -> Result<Self, HarnessError> {
        Ok(Self {
            backend: Backend::from_env()?,
            ..Self::default()
        })
    }
}

// A handful of these exist per test binary: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Running {
    Process(ChildDevServer),
    Container(ContainerServer),
    Existing(ExternalServer),
}

/// A running Temporal dev server.
///
/// Holds no tokio resources: clients are created per call on the caller's runtime, so one
/// server can serve tests that each run their own runtime (see [`shared`]). Dropping it kills the
/// server synchronously.
pub struct DevServer {
    running: Running,
    namespace: String,
    db_file: Option<PathBuf>,
}

impl fmt::Debug for DevServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevServer")
            .field("backend", &self.backend())
            .field("address", &self.address())
            .field("namespace", &self.namespace)
            .field("pid", &self.pid())
            .field("db_file", &self.db_file)
            .finish()
    }
}

impl DevServer {
    /// Starts a server and waits until it answers gRPC and knows `opts.namespace`.
    pub async fn start(opts: DevServerOptions) -> Result<DevServer, HarnessError> {
        let running = match opts.backend {
            Backend::Process => Running::Process(ChildDevServer::start(&opts).await?),
            Backend::Container => Running::Container(ContainerServer::start(&opts).await?),
            Backend::Existing => {
                return Err(HarnessError::InvalidState(
                    "an existing server is not started: use DevServer::existing".into(),
                ));
            }
        };
        let server = DevServer {
            running,
            namespace: opts.namespace,
            db_file: opts.db_file,
        };
        server.announce("started");
        Ok(server)
    }

    /// A server the user already runs at `address` (`HOST:PORT`), with TLS and API key from
    /// Temporal's environment configuration; fails unless it answers and knows `namespace`.
    /// [`DevServer::stop`] leaves it running and [`DevServer::restart`] is refused.
    pub async fn existing(address: &str, namespace: &str) -> Result<DevServer, HarnessError> {
        let server = DevServer {
            running: Running::Existing(ExternalServer::connect(address, namespace).await?),
            namespace: namespace.to_owned(),
            db_file: None,
        };
        server.announce("in use");
        Ok(server)
    }

    /// Logs (and prints, so it shows under `cargo test` without a subscriber) which server the
    /// tests are talking to: CI logs must prove they ran against the real thing.
    fn announce(&self, what: &str) {
        let version = match self.version() {
            Some(v) => format!("{} (CLI {})", v.server, v.cli),
            None => "(unknown version)".to_owned(),
        };
        let detail = match &self.running {
            Running::Process(p) => format!(
                "process backend, pid {}, log {}",
                p.pid().map_or("-".into(), |p| p.to_string()),
                p.log_path().display()
            ),
            Running::Container(c) => format!(
                "container backend, image {}, container {}",
                c.image(),
                c.container_id().unwrap_or("-")
            ),
            Running::Existing(_) => "an existing server: nothing is started or stopped".into(),
        };
        let line = format!(
            "temporal dev server {version} listening on {} ({what}; {detail})",
            self.address()
        );
        tracing::info!(address = %self.address(), %version, "{line}");
        eprintln!("{line}");
    }

    /// Which backend runs this server.
    pub fn backend(&self) -> Backend {
        match self.running {
            Running::Process(_) => Backend::Process,
            Running::Container(_) => Backend::Container,
            Running::Existing(_) => Backend::Existing,
        }
    }

    /// The frontend gRPC address: `127.0.0.1:PORT` for servers the harness runs.
    pub fn address(&self) -> String {
        let port = match &self.running {
            Running::Process(p) => p.grpc_port(),
            Running::Container(c) => c.host_port(),
            Running::Existing(e) => return e.address().to_owned(),
        };
        format!("127.0.0.1:{port}")
    }

    /// The frontend as a URL for [`temporalio_client::ConnectionOptions`].
    pub fn target_url(&self) -> Url {
        match &self.running {
            Running::Existing(e) => e.options().target.clone(),
            _ => Url::parse(&format!("http://{}", self.address()))
                .expect("an IP and port form a valid URL"),
        }
    }

    /// How to connect: plain gRPC for servers the harness runs; for an existing server, TLS and
    /// API key as Temporal's environment configuration says.
    pub fn connection_options(&self) -> temporalio_client::ConnectionOptions {
        match &self.running {
            Running::Existing(e) => e.options().clone(),
            _ => provision::local_options(&self.target_url()),
        }
    }

    /// The Prometheus endpoint (`--metrics-port`) as `127.0.0.1:PORT` (process backend only).
    pub fn metrics_address(&self) -> Option<String> {
        match &self.running {
            Running::Process(p) => Some(format!("127.0.0.1:{}", p.metrics_port())),
            _ => None,
        }
    }

    /// The namespace created at startup.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// CLI and server versions, when known (always for the process backend).
    pub fn version(&self) -> Option<&ServerVersion> {
        match &self.running {
            Running::Process(p) => Some(p.version()),
            Running::Container(c) => c.version(),
            Running::Existing(e) => e.version(),
        }
    }

    /// The server's pid (process backend, while running).
    pub fn pid(&self) -> Option<u32> {
        match &self.running {
            Running::Process(p) => p.pid(),
            _ => None,
        }
    }

    /// The container's id (container backend, until stopped).
    pub fn container_id(&self) -> Option<&str> {
        match &self.running {
            Running::Container(c) => c.container_id(),
            _ => None,
        }
    }

    /// The database file, if state is persisted.
    pub fn db_file(&self) -> Option<&Path> {
        self.db_file.as_deref()
    }

    /// A new connection on the caller's runtime.
    pub async fn connect(&self) -> Result<temporalio_client::Connection, HarnessError> {
        provision::connect(&self.connection_options()).await
    }

    /// Registers a namespace (one-day retention); an existing one is fine. Returns once
    /// `DescribeNamespace` finds it.
    pub async fn create_namespace(&self, name: &str) -> Result<(), HarnessError> {
        provision::create_namespace(&self.connection_options(), name).await
    }

    /// Creates a Nexus endpoint routing to `task_queue` in `namespace`. Creating the same
    /// endpoint again is fine; the same name with another target is a
    /// [`HarnessError::Conflict`]. Endpoint names must match `^[a-zA-Z][a-zA-Z0-9\-]*[a-zA-Z0-9]$`
    /// (the server's rule; [`unique_name`] produces such names).
    pub async fn create_nexus_endpoint(
        &self,
        name: &str,
        namespace: &str,
        task_queue: &str,
    ) -> Result<(), HarnessError> {
        provision::create_nexus_endpoint(&self.connection_options(), name, namespace, task_queue)
            .await
    }

    /// Deletes the Nexus endpoint called `name`, if it exists.
    pub async fn delete_nexus_endpoint(&self, name: &str) -> Result<(), HarnessError> {
        provision::delete_nexus_endpoint(&self.connection_options(), name).await
    }

    /// Stops the server: SIGTERM, up to 5 s grace, then SIGKILL, and reaps it. Idempotent.
    pub async fn stop(&mut self) -> Result<(), HarnessError> {
        match &mut self.running {
            Running::Process(p) => p.stop().await,
            Running::Container(c) => c.stop().await,
            Running::Existing(_) => Ok(()),
        }
    }

    /// Stops and starts the server again on the same address and database file, and waits until
    /// it is ready. Needs [`DevServerOptions::db_file`].
    pub async fn restart(&mut self) -> Result<(), HarnessError> {
        match &mut self.running {
            Running::Process(p) => p.restart().await?,
            Running::Container(c) => c.restart().await?,
            Running::Existing(_) => {
                return Err(HarnessError::InvalidState(
                    "an existing server is never restarted by the harness".into(),
                ));
            }
        }
        self.announce("restarted");
        Ok(())
    }
}

impl DevServer {
    /// SIGKILLs the server, as a crash would (process backend only): no shutdown, and clients
    /// see the frontend vanish mid-request. [`DevServer::start_again`] brings it back.
    pub fn kill(&mut self) -> Result<(), HarnessError> {
        match &mut self.running {
            Running::Process(p) => {
                p.kill_now();
                Ok(())
            }
            _ => Err(HarnessError::InvalidState(format!(
                "killing the server needs the process backend, not the {} backend",
                self.backend()
            ))),
        }
    }

    /// Starts a killed server again on the same address and database file, and waits until it
    /// is ready (process backend, with [`DevServerOptions::db_file`]).
    pub async fn start_again(&mut self) -> Result<(), HarnessError> {
        match &mut self.running {
            Running::Process(p) => p.start_again().await?,
            _ => {
                return Err(HarnessError::InvalidState(format!(
                    "starting a killed server again needs the process backend, not the {} backend",
                    self.backend()
                )));
            }
        }
        self.announce("started again after a kill");
        Ok(())
    }
}

impl Drop for DevServer {
    /// Kills the server synchronously (SIGKILL + waitpid) if it is still running, so a panicking
    /// test leaves nothing behind. The backends' own `Drop`s do the same for a start that is
    /// cancelled before a `DevServer` exists; the container backend removes its container there.
    fn drop(&mut self) {
        if let Running::Process(p) = &mut self.running {
            p.kill_now();
        }
    }
}

static SHARED: OnceCell<DevServer> = OnceCell::const_new();

/// One server per test binary, started on first use with [`DevServerOptions::from_env`].
///
/// Safe to call from many `#[tokio::test]`s, each on its own runtime: the server is a plain
/// child process spawned from a dedicated thread and the handle keeps no runtime-bound state.
/// It is never dropped; it dies with the test binary (PDEATHSIG, or the container reaper).
/// If a start fails, the next caller tries again.
pub async fn shared() -> Result<&'static DevServer, HarnessError> {
    SHARED
        .get_or_try_init(|| async { DevServer::start(DevServerOptions::from_env()?).await })
        .await
}

/// `prefix` plus `-` and a short random suffix, e.g. `tq-3f9a0c1be2`: unique names keep tests
/// that share a server apart.
///
/// With a prefix of ASCII letters and digits that starts with a letter, the result is valid as a
/// task queue, a namespace and a Nexus endpoint name. Mind the endpoint rule: the server enforces
/// `^[a-zA-Z][a-zA-Z0-9\-]*[a-zA-Z0-9]$` (hyphens, no underscores, although the proto comment
/// says `[a-zA-Z_][a-zA-Z0-9_]*`).
pub fn unique_name(prefix: &str) -> String {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..10];
    if prefix.is_empty() {
        format!("u{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_parsing() {
        assert_eq!(Backend::parse(None).unwrap(), Backend::Process);
        assert_eq!(Backend::parse(Some("")).unwrap(), Backend::Process);
        assert_eq!(Backend::parse(Some("process")).unwrap(), Backend::Process);
        assert_eq!(
            Backend::parse(Some(" Container ")).unwrap(),
            Backend::Container
        );
        let err = Backend::parse(Some("k8s")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("DURABLE_MCP_TEMPORAL") && msg.contains("k8s"),
            "{msg}"
        );
        assert!(
            msg.contains("process") && msg.contains("container"),
            "{msg}"
        );
    }

    #[test]
    fn unique_names_have_prefix_and_differ() {
        let a = unique_name("tq");
        let b = unique_name("tq");
        assert_ne!(a, b);
        assert!(a.starts_with("tq-"));
        assert_eq!(a.len(), "tq-".len() + 10);
        // The server's Nexus endpoint name rule: ^[a-zA-Z][a-zA-Z0-9\-]*[a-zA-Z0-9]$
        let valid = |s: &str| {
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        assert!(valid(&a), "{a}");
        assert!(valid(&unique_name("")));
    }

    #[test]
    fn default_options() {
        let o = DevServerOptions::default();
        assert_eq!(o.backend, Backend::Process);
        assert_eq!(o.namespace, "default");
        assert_eq!(o.startup_timeout, Duration::from_secs(60));
        assert!(o.db_file.is_none());
        assert!(!o.container_image.is_empty());
    }

    #[test]
    fn skip_reason_only_for_unavailable_backends() {
        let e = HarnessError::BackendUnavailable {
            backend: Backend::Container,
            reason: "no Docker engine answers".into(),
        };
        assert!(e.skip_reason().unwrap().contains("no Docker engine"));
        assert!(HarnessError::RestartWithoutDbFile.skip_reason().is_none());
    }
}
