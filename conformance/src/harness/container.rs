//! The container backend: the dev server in the official `temporalio/temporal` image, or one
//! built from the pinned CLI when no registry answers (`image.rs`), via testcontainers.
//!
//! Docker is optional on developer machines and absent on some CI runners, so the first thing
//! this backend does is ask the engine to answer a ping. If it does not, the caller gets
//! [`HarnessError::BackendUnavailable`] and the test prints a skip line instead of passing as if
//! it had tested something.
//!
//! Containers do not die with the test binary the way PDEATHSIG-tethered processes do. When the
//! `docker` CLI is available, each container gets a *reaper*: a detached `sh` that blocks reading
//! a pipe whose write end only this process holds, and runs `docker rm -f` when the pipe closes.
//! The kernel closes the pipe however the test binary ends, including SIGKILL.

use std::{
    io,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use testcontainers::{
    ContainerAsync, GenericImage, ImageExt, TestcontainersError,
    core::{ExecCommand, IntoContainerPort, Mount, client::ClientError},
    runners::AsyncRunner,
};
use url::Url;

use super::{
    Backend, DevServerOptions, HarnessError, ServerVersion, cli, image,
    ports::Ports,
    process::{self, Tether},
    provision::{self, NotReady},
};

/// Fixed ports inside the container; only gRPC is published.
const IN_CONTAINER: Ports = Ports {
    grpc: 7233,
    ui: 8233,
    http: 7243,
    metrics: 7244,
};
/// Where the database directory is mounted inside the container.
const DATA_DIR: &str = "/data";
const TAIL_LINES: usize = 30;

fn unavailable(reason: impl Into<String>) -> HarnessError {
    HarnessError::BackendUnavailable {
        backend: Backend::Container,
        reason: reason.into(),
    }
}

/// Asks the Docker engine testcontainers would use to answer a ping.
async fn check_engine() -> Result<(), HarnessError> {
    let hint = "start a Docker engine (or set DOCKER_HOST), or use DURABLE_MCP_TEMPORAL=process";
    let docker = testcontainers::core::client::docker_client_instance()
        .await
        .map_err(|e| unavailable(format!("no Docker client: {e}; {hint}")))?;
    match tokio::time::timeout(Duration::from_secs(5), docker.ping()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(unavailable(format!(
            "no Docker engine answers: {e}; {hint}"
        ))),
        Err(_) => Err(unavailable(format!(
            "the Docker engine did not answer a ping within 5s; {hint}"
        ))),
    }
}

/// Errors that mean "no engine here" rather than "the engine could not run our container".
fn is_engine_missing(e: &TestcontainersError) -> bool {
    matches!(
        e,
        TestcontainersError::Client(
            ClientError::Init(_)
                | ClientError::Configuration(_)
                | ClientError::InvalidDockerHost(_)
        )
    )
}

/// Removes a container when this process dies (see the module docs).
struct Reaper {
    child: Child,
    /// Closing this (drop) triggers the removal.
    trigger: Option<ChildStdin>,
}

impl Reaper {
    fn arm(container_id: &str) -> io::Result<Self> {
        let mut command = Command::new("sh");
        command
            .args([
                "-c",
                r#"read -r _ignored; docker rm -f -v "$1" >/dev/null 2>&1"#,
                "durable-mcp-reaper",
                container_id,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = process::spawn(command, Tether::Detached)?;
        let trigger = child.stdin.take();
        Ok(Self { child, trigger })
    }

    /// Removes the container now and waits (bounded) for it to be gone.
    fn fire(mut self) {
        drop(self.trigger.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stands down without removing anything (the container was removed normally).
    fn disarm(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn docker_cli_available() -> bool {
    Command::new("docker")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A dev server running in a container.
pub(crate) struct ContainerServer {
    container: Option<ContainerAsync<GenericImage>>,
    reaper: Option<Reaper>,
    host_port: u16,
    namespace: String,
    db_file: Option<PathBuf>,
    startup_timeout: Duration,
    image: String,
    version: Option<ServerVersion>,
}

impl ContainerServer {
    pub(crate) async fn start(opts: &DevServerOptions) -> Result<Self, HarnessError> {
        check_engine().await?;
        let image = image::resolve(&opts.container_image).await?;
        // Only gRPC is published: the UI port has no meaning here.
        let host_port = match opts.grpc_port {
            Some(port) => port,
            None => {
                Ports::pick()
                    .map_err(|e| HarnessError::io("picking a free port", e))?
                    .grpc
            }
        };
        let (name, tag) = image::split_image(&image);

        let db_in_container = opts.db_file.as_ref().map(|db| {
            let file = db.file_name().map(|f| f.to_string_lossy().into_owned());
            format!(
                "{DATA_DIR}/{}",
                file.unwrap_or_else(|| "temporal.db".into())
            )
        });
        let args = process::start_dev_args(
            "0.0.0.0",
            &IN_CONTAINER,
            &opts.namespace,
            db_in_container.as_deref(),
        );
        let mut request = GenericImage::new(name, tag)
            .with_cmd(args)
            .with_mapped_port(host_port, IN_CONTAINER.grpc.tcp())
            .with_label("durable-mcp.harness", "temporal-dev-server")
            .with_startup_timeout(opts.startup_timeout);
        if let Some(db) = &opts.db_file {
            let dir = db_dir(db)?;
            // Run as the host user so the bind-mounted database stays ours.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            request = request
                .with_mount(Mount::bind_mount(dir.to_string_lossy(), DATA_DIR))
                .with_user(format!("{uid}:{gid}"));
        }

        let container = request.start().await.map_err(|e| {
            if is_engine_missing(&e) {
                unavailable(e.to_string())
            } else {
                HarnessError::Container(format!("starting {image}: {e}"))
            }
        })?;
        let reaper = if docker_cli_available() {
            Reaper::arm(container.id())
                .inspect_err(|e| tracing::warn!("no reaper for container {}: {e}", container.id()))
                .ok()
        } else {
            tracing::warn!(
                "no `docker` CLI: container {} is only removed if the harness shuts down cleanly",
                container.id()
            );
            None
        };
        let mut server = Self {
            container: Some(container),
            reaper,
            host_port,
            namespace: opts.namespace.clone(),
            db_file: opts.db_file.clone(),
            startup_timeout: opts.startup_timeout,
            image,
            version: None,
        };
        server.wait_ready().await?;
        server.version = server.read_version().await;
        Ok(server)
    }

    pub(crate) fn host_port(&self) -> u16 {
        self.host_port
    }

    pub(crate) fn version(&self) -> Option<&ServerVersion> {
        self.version.as_ref()
    }

    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    pub(crate) fn container_id(&self) -> Option<&str> {
        self.container.as_ref().map(|c| c.id())
    }

    fn url(&self) -> Url {
        Url::parse(&format!("http://127.0.0.1:{}", self.host_port)).expect("valid url")
    }

    async fn wait_ready(&self) -> Result<(), HarnessError> {
        let result =
            provision::wait_ready(&self.url(), &self.namespace, self.startup_timeout, || None)
                .await;
        match result {
            Ok(()) => Ok(()),
            Err(NotReady::Exited(status)) | Err(NotReady::TimedOut(status)) => {
                Err(HarnessError::StartupTimeout {
                    address: format!("127.0.0.1:{}", self.host_port),
                    timeout: self.startup_timeout,
                    last_error: status,
                    log: format!("docker logs {}", self.container_id().unwrap_or("?")),
                    tail: self.logs_tail().await,
                })
            }
        }
    }

    async fn logs_tail(&self) -> String {
        let Some(c) = &self.container else {
            return String::new();
        };
        let mut text = String::new();
        for bytes in [c.stdout_to_vec().await, c.stderr_to_vec().await]
            .into_iter()
            .flatten()
        {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
        cli::tail_lines(&text, TAIL_LINES)
    }

    /// `temporal --version` inside the container; `None` if the image cannot run it.
    async fn read_version(&self) -> Option<ServerVersion> {
        let c = self.container.as_ref()?;
        let mut exec = c
            .exec(ExecCommand::new(["temporal", "--version"]))
            .await
            .ok()?;
        let out = exec.stdout_to_vec().await.ok()?;
        ServerVersion::parse(&String::from_utf8_lossy(&out))
    }

    pub(crate) async fn stop(&mut self) -> Result<(), HarnessError> {
        if let Some(container) = self.container.take() {
            let _ = container.stop_with_timeout(Some(5)).await;
            container
                .rm()
                .await
                .map_err(|e| HarnessError::Container(format!("removing the container: {e}")))?;
        }
        if let Some(reaper) = self.reaper.take() {
            reaper.disarm();
        }
        Ok(())
    }

    /// Stops and starts the same container: the published port is fixed, so the address stays.
    pub(crate) async fn restart(&mut self) -> Result<(), HarnessError> {
        if self.db_file.is_none() {
            return Err(HarnessError::RestartWithoutDbFile);
        }
        let container = self
            .container
            .as_ref()
            .ok_or_else(|| HarnessError::InvalidState("restart() after stop()".into()))?;
        container
            .stop_with_timeout(Some(5))
            .await
            .map_err(|e| HarnessError::Container(format!("stopping for restart: {e}")))?;
        container
            .start()
            .await
            .map_err(|e| HarnessError::Container(format!("starting again: {e}")))?;
        self.wait_ready().await
    }
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        let Some(container) = self.container.take() else {
            return;
        };
        if let Some(reaper) = self.reaper.take() {
            // testcontainers' own drop needs a tokio runtime; the reaper does not.
            std::mem::forget(container);
            reaper.fire();
        } else if tokio::runtime::Handle::try_current().is_ok() {
            drop(container); // testcontainers removes it
        } else {
            eprintln!(
                "warning: container {} may be left running: no tokio runtime and no `docker` CLI \
                 to remove it",
                container.id()
            );
            std::mem::forget(container);
        }
    }
}

/// The absolute directory holding `db`, created if needed (it is bind-mounted).
fn db_dir(db: &Path) -> Result<PathBuf, HarnessError> {
    let abs = std::path::absolute(db).map_err(|e| HarnessError::io("resolving db_file", e))?;
    let dir = abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
    Ok(dir)
}
