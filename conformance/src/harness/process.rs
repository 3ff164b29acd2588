//! The process backend: the dev server as a child process of the test binary.
//!
//! # No orphans
//!
//! A test binary can die at any point (panic, `process::exit`, SIGKILL from a CI timeout), and a
//! dev server left behind keeps its ports and memory forever. The kernel is the only thing that
//! sees every way a process can die, so each server is spawned with
//! `prctl(PR_SET_PDEATHSIG, SIGKILL)`: it is killed when its parent dies.
//!
//! The catch: on Linux the "parent" for PDEATHSIG is the *thread* that forked the child, not the
//! process. `cargo test` runs each test on its own short-lived thread and `#[tokio::test]` builds
//! a runtime on it, so a server spawned directly from a test would be killed as soon as that test
//! returns, even though [`super::shared`] wants it to outlive the test. All spawning therefore
//! happens on one dedicated thread ([`spawn`]) that is started once and never exits: it dies only
//! with the process, which is exactly when the server should die.
//!
//! The server also gets its own process group (`setpgid(0, 0)`), so a Ctrl-C in the terminal
//! reaches the test binary (which then dies and takes the server with it through PDEATHSIG) and
//! so stop/kill can signal the server and anything it may fork as one unit.
//!
//! Processes are spawned with `std::process`, not `tokio::process`: a tokio child is tied to the
//! runtime that spawned it, and the shared server outlives the runtime of the test that started
//! it.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Read, Seek, SeekFrom},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{OnceLock, mpsc},
    time::{Duration, Instant},
};

use url::Url;

use super::{
    DevServerOptions, HarnessError, ServerVersion, cli,
    ports::{self, Ports},
    provision::{self, NotReady},
};

/// How long `stop` waits after SIGTERM before sending SIGKILL. The dev server shuts down
/// gracefully in about 3 s.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Attempts at starting with fresh ports when one was taken between picking and binding.
const START_ATTEMPTS: usize = 3;
/// Lines of server output included in errors.
const TAIL_LINES: usize = 30;

/// How a spawned process is tied to the test binary.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tether {
    /// SIGKILL when the test binary dies; own process group. For servers.
    DieWithParent,
    /// Own session, survives the test binary. For cleanup helpers that must run *after* it dies
    /// (the container reaper).
    Detached,
}

struct SpawnRequest {
    command: Command,
    reply: mpsc::SyncSender<io::Result<Child>>,
}

/// The spawner thread's request queue. The sender lives in a static, so the thread's receive
/// loop never ends and the thread lives as long as the process.
static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("durable-mcp-spawner".into())
            .spawn(move || {
                for mut req in rx {
                    let _ = req.reply.send(req.command.spawn());
                }
            })
            .expect("cannot start the durable-mcp spawner thread");
        tx
    })
}

/// Spawns `command` from the never-exiting spawner thread (see the module docs for why).
pub(crate) fn spawn(mut command: Command, tether: Tether) -> io::Result<Child> {
    // Our pid, read before fork: in the child, a different parent means we already died.
    let parent = std::process::id() as libc::pid_t;
    let setup = move || -> io::Result<()> {
        // Only async-signal-safe calls here: this runs between fork and exec.
        unsafe {
            match tether {
                Tether::DieWithParent => {
                    if libc::setpgid(0, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    ) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    // The parent may have died between fork and prctl; then no signal comes.
                    if libc::getppid() != parent {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                Tether::Detached => {
                    if libc::setsid() < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
        }
        Ok(())
    };
    // SAFETY: `setup` only calls async-signal-safe libc functions and does not allocate.
    unsafe { command.pre_exec(setup) };

    let (reply, answer) = mpsc::sync_channel(1);
    spawner()
        .send(SpawnRequest { command, reply })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Whether `pid` is a live process (exists and is not a zombie). Test helper.
pub fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ") ".
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// A child process tethered to this one (PDEATHSIG, its own process group): the dev server, or
/// the runner's proxy and load-path children. Dropping it kills the process group and reaps it.
pub(crate) struct TetheredChild {
    child: Child,
    pid: u32,
    reaped: Option<ExitStatus>,
}

impl TetheredChild {
    /// Spawns `command` tethered to this process (PDEATHSIG, own process group), so killing
    /// it kills everything it started. Also used for the runner's proxy child.
    pub(crate) fn spawn(command: Command) -> io::Result<TetheredChild> {
        let child = spawn(command, Tether::DieWithParent)?;
        Ok(TetheredChild {
            pid: child.id(),
            child,
            reaped: None,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status if the process has exited (reaping it).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.reaped.is_none() {
            self.reaped = self.child.try_wait().ok().flatten();
        }
        self.reaped
    }

    fn signal_group(&self, signal: libc::c_int) {
        // Never signal after reaping: the pid may belong to someone else by now.
        if self.reaped.is_none() {
            // SAFETY: plain syscall; the group id is the child's pid (setpgid(0, 0)).
            unsafe {
                libc::killpg(self.pid as libc::pid_t, signal);
            }
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if let Some(status) = self.exited() {
            return Ok(status);
        }
        self.signal_group(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::warn!(
            pid = self.pid,
            "dev server ignored SIGTERM for {grace:?}; sending SIGKILL"
        );
        self.kill_now()
    }

    /// SIGKILL and reap, synchronously (usable from `Drop`).
    pub(crate) fn kill_now(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.exited() {
            return Ok(status);
        }
        self.signal_group(libc::SIGKILL);
        let status = self.child.wait()?;
        self.reaped = Some(status);
        Ok(status)
    }
}

impl Drop for TetheredChild {
    fn drop(&mut self) {
        let _ = self.kill_now();
    }
}

/// The dev-server command line shared by both backends. `db_file` is the path as the server
/// sees it.
pub(crate) fn start_dev_args(
    ip: &str,
    ports: &Ports,
    namespace: &str,
    db_file: Option<&str>,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "server",
        "start-dev",
        "--headless",
        "--ip",
        ip,
        "--log-level",
        "warn",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for (flag, port) in [
        ("--port", ports.grpc),
        ("--ui-port", ports.ui),
        ("--http-port", ports.http),
        ("--metrics-port", ports.metrics),
    ] {
        args.extend([flag.to_owned(), port.to_string()]);
    }
    // "default" always exists; naming it again is harmless.
    args.extend(["--namespace".to_owned(), namespace.to_owned()]);
    for value in DYNAMIC_CONFIG {
        args.extend(["--dynamic-config-value".to_owned(), (*value).to_owned()]);
    }
    if let Some(db) = db_file {
        args.extend(["--db-filename".to_owned(), db.to_owned()]);
    }
    args
}

/// Dynamic config the connector's tests rely on (SPEC R-HAR-2):
/// standalone Nexus operations and activity callbacks are off by default, the queue poll
/// rates otherwise impose 50-100 ms latency floors on a single-shard dev server, and task-queue
/// fairness (R-PRX-40) is off by default.
pub(crate) const DYNAMIC_CONFIG: &[&str] = &[
    "nexusoperation.enableStandalone=true",
    "activity.enableCallbacks=true",
    "activity.enableStandalone=true",
    "history.outboundProcessorMaxPollRPS=1000",
    "history.transferProcessorMaxPollRPS=1000",
    "matching.enableFairness=true",
];

/// A dev server run as a [`TetheredChild`] (the process backend).
pub(crate) struct ChildDevServer {
    cli: PathBuf,
    version: ServerVersion,
    ports: Ports,
    namespace: String,
    db_file: Option<PathBuf>,
    startup_timeout: Duration,
    /// Holds the log file; removed when the server is dropped.
    log_dir: tempfile::TempDir,
    log: PathBuf,
    process: Option<TetheredChild>,
}

impl ChildDevServer {
    pub(crate) async fn start(opts: &DevServerOptions) -> Result<Self, HarnessError> {
        let (cli, version) = tokio::task::spawn_blocking(cli::find_cli)
            .await
            .map_err(|e| HarnessError::InvalidState(format!("find_cli task failed: {e}")))??;
        static PRUNED: std::sync::Once = std::sync::Once::new();
        PRUNED.call_once(prune_stale_log_dirs);
        let log_dir = tempfile::Builder::new()
            .prefix(&format!("{LOG_DIR_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for the server log", e))?;
        let log = log_dir.path().join("server.log");
        let mut server = Self {
            cli,
            version,
            ports: Ports::pick_with(opts.grpc_port)
                .map_err(|e| HarnessError::io("picking free ports", e))?,
            namespace: opts.namespace.clone(),
            db_file: opts.db_file.clone(),
            startup_timeout: opts.startup_timeout,
            log_dir,
            log,
            process: None,
        };
        for attempt in 1..=START_ATTEMPTS {
            match server.launch().await {
                Ok(()) => return Ok(server),
                // A port the user fixed stays taken: only freshly picked ports are worth a retry.
                Err(Launch::PortTaken(e))
                    if attempt < START_ATTEMPTS && opts.grpc_port.is_none() =>
                {
                    tracing::warn!("dev server lost a port race ({e}); retrying with fresh ports");
                    server.ports =
                        Ports::pick().map_err(|e| HarnessError::io("picking free ports", e))?;
                }
                Err(Launch::PortTaken(e) | Launch::Failed(e)) => return Err(server.fail(e)),
            }
        }
        unreachable!("the last attempt always returns")
    }

    /// Keeps the log directory (so the path in the error stays valid) and passes `e` on.
    fn fail(self, e: HarnessError) -> HarnessError {
        let Self {
            log_dir, process, ..
        } = self;
        drop(process);
        let _ = log_dir.keep();
        e
    }

    pub(crate) fn grpc_port(&self) -> u16 {
        self.ports.grpc
    }

    pub(crate) fn metrics_port(&self) -> u16 {
        self.ports.metrics
    }

    pub(crate) fn version(&self) -> &ServerVersion {
        &self.version
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(TetheredChild::pid)
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    fn url(&self) -> Url {
        Url::parse(&format!("http://127.0.0.1:{}", self.ports.grpc)).expect("valid url")
    }

    /// Spawns the server on `self.ports` and waits until it answers.
    async fn launch(&mut self) -> Result<(), Launch> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| {
                Launch::Failed(HarnessError::io(
                    format!("opening {}", self.log.display()),
                    e,
                ))
            })?;
        // Only this launch's output matters for errors: remember where it starts.
        let offset = log.seek(SeekFrom::End(0)).unwrap_or(0);
        let stderr = log
            .try_clone()
            .map_err(|e| Launch::Failed(HarnessError::io("duplicating the log handle", e)))?;

        let db = self
            .db_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let mut command = Command::new(&self.cli);
        command
            .args(start_dev_args(
                "127.0.0.1",
                &self.ports,
                &self.namespace,
                db.as_deref(),
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr));
        let child = spawn(command, Tether::DieWithParent).map_err(|source| {
            Launch::Failed(HarnessError::Spawn {
                program: self.cli.clone(),
                source,
            })
        })?;
        let pid = child.id();
        let mut process = TetheredChild {
            child,
            pid,
            reaped: None,
        };

        let url = self.url();
        let result = provision::wait_ready(&url, &self.namespace, self.startup_timeout, || {
            process.exited().map(|s| s.to_string())
        })
        .await;
        match result {
            Ok(()) => {
                self.process = Some(process);
                Ok(())
            }
            Err(not_ready) => {
                // Make sure it is gone before reading its last words.
                let _ = process.kill_now();
                let output = read_from(&self.log, offset);
                let tail = cli::tail_lines(&output, TAIL_LINES);
                let port_taken = ports::mentions_port_in_use(&output);
                let err = match not_ready {
                    NotReady::Exited(status) => HarnessError::ExitedEarly {
                        status,
                        log: self.log.clone(),
                        tail,
                    },
                    NotReady::TimedOut(last_error) => HarnessError::StartupTimeout {
                        address: format!("127.0.0.1:{}", self.ports.grpc),
                        timeout: self.startup_timeout,
                        last_error,
                        log: self.log.display().to_string(),
                        tail,
                    },
                };
                Err(if port_taken {
                    Launch::PortTaken(err)
                } else {
                    Launch::Failed(err)
                })
            }
        }
    }

    pub(crate) async fn stop(&mut self) -> Result<(), HarnessError> {
        if let Some(mut process) = self.process.take() {
            let pid = process.pid();
            process
                .terminate(STOP_GRACE)
                .await
                .map_err(|source| HarnessError::Stop { pid, source })?;
        }
        Ok(())
    }

    /// SIGKILL and reap, synchronously (for `Drop`).
    pub(crate) fn kill_now(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill_now();
        }
    }

    /// Stops, then starts again on the same ports and database file. A port can linger for a
    /// moment after the old process is gone, so port conflicts are retried with a short pause
    /// instead of fresh ports (clients expect the same address).
    pub(crate) async fn restart(&mut self) -> Result<(), HarnessError> {
        if self.db_file.is_none() {
            return Err(HarnessError::RestartWithoutDbFile);
        }
        self.stop().await?;
        self.start_again().await
    }

    /// Starts the server again on the same ports and database file after [`Self::stop`] or a
    /// kill; port conflicts are retried with a short pause (clients expect the same address).
    pub(crate) async fn start_again(&mut self) -> Result<(), HarnessError> {
        if self.db_file.is_none() {
            return Err(HarnessError::RestartWithoutDbFile);
        }
        for attempt in 1..=START_ATTEMPTS {
            match self.launch().await {
                Ok(()) => return Ok(()),
                Err(Launch::PortTaken(_)) if attempt < START_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(Launch::PortTaken(e) | Launch::Failed(e)) => return Err(e),
            }
        }
        unreachable!("the last attempt always returns")
    }
}

/// Log directories are `<tmp>/durable-mcp-temporal-<owner pid>-<random>`.
const LOG_DIR_PREFIX: &str = "durable-mcp-temporal-";
/// How long the log of a finished test binary is kept for post-mortems.
const LOG_RETENTION: Duration = Duration::from_secs(60 * 60);

/// Removes log directories left by test binaries that are gone and finished over an hour ago.
/// They exist because the shared server is never dropped (and failed starts keep their log on
/// purpose); without pruning, every test run would leave one behind.
fn prune_stale_log_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(LOG_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > LOG_RETENTION);
        if old && !process_alive(owner) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// How one launch failed: a lost port race is worth retrying, anything else is not.
enum Launch {
    PortTaken(HarnessError),
    Failed(HarnessError),
}

/// The log from byte `offset` on (lossy UTF-8); empty if unreadable.
fn read_from(path: &Path, offset: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.seek(SeekFrom::Start(offset));
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        Ports {
            grpc: 1,
            ui: 2,
            http: 3,
            metrics: 4,
        }
    }

    #[test]
    fn args_carry_ports_flags_and_dynamic_config() {
        let args = start_dev_args("127.0.0.1", &ports(), "default", None);
        let joined = args.join(" ");
        assert!(joined.starts_with("server start-dev --headless --ip 127.0.0.1"));
        for expected in [
            "--port 1",
            "--ui-port 2",
            "--http-port 3",
            "--metrics-port 4",
            "--log-level warn",
            "--namespace default",
            "--dynamic-config-value nexusoperation.enableStandalone=true",
            "--dynamic-config-value activity.enableCallbacks=true",
            "--dynamic-config-value activity.enableStandalone=true",
            "--dynamic-config-value history.outboundProcessorMaxPollRPS=1000",
            "--dynamic-config-value history.transferProcessorMaxPollRPS=1000",
            "--dynamic-config-value matching.enableFairness=true",
        ] {
            assert!(
                joined.contains(expected),
                "missing {expected:?} in {joined}"
            );
        }
        assert!(!joined.contains("--db-filename"));
    }

    #[test]
    fn args_include_db_file_when_given() {
        let args = start_dev_args("0.0.0.0", &ports(), "ns", Some("/data/t.db"));
        assert!(args.join(" ").ends_with("--db-filename /data/t.db"));
    }

    #[test]
    fn prunes_only_old_log_dirs_of_dead_owners() {
        let make = |owner: u32, age: Duration| {
            let dir = std::env::temp_dir().join(format!(
                "{LOG_DIR_PREFIX}{owner}-{}",
                super::super::unique_name("prune")
            ));
            fs::create_dir(&dir).unwrap();
            let when = std::time::SystemTime::now() - age;
            File::open(&dir).unwrap().set_modified(when).unwrap();
            dir
        };
        let hour = Duration::from_secs(3600);
        let dead_old = make(u32::MAX - 1, 2 * hour);
        let dead_recent = make(u32::MAX - 1, Duration::ZERO);
        let alive_old = make(std::process::id(), 2 * hour);
        prune_stale_log_dirs();
        assert!(!dead_old.exists());
        assert!(
            dead_recent.exists(),
            "recent logs are kept for post-mortems"
        );
        assert!(alive_old.exists(), "a live owner's logs are kept");
        fs::remove_dir_all(dead_recent).unwrap();
        fs::remove_dir_all(alive_old).unwrap();
    }

    #[test]
    fn own_process_is_alive_and_nonexistent_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX - 1));
    }

    #[test]
    fn spawned_child_is_reaped_and_then_not_alive() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let child = spawn(cmd, Tether::DieWithParent).unwrap();
        let pid = child.id();
        let mut process = TetheredChild {
            child,
            pid,
            reaped: None,
        };
        assert!(process_alive(pid));
        // Own process group.
        assert_eq!(
            unsafe { libc::getpgid(pid as libc::pid_t) },
            pid as libc::pid_t
        );
        process.kill_now().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn child_survives_the_thread_that_asked_for_it() {
        // PDEATHSIG is per thread: spawning via a short-lived thread must not kill the child.
        let pid = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            let child = spawn(cmd, Tether::DieWithParent).unwrap();
            let pid = child.id();
            (child, pid)
        })
        .join()
        .unwrap();
        let (child, pid) = pid;
        std::thread::sleep(Duration::from_millis(200));
        assert!(process_alive(pid), "child died with the requesting thread");
        let mut process = TetheredChild {
            child,
            pid,
            reaped: None,
        };
        process.kill_now().unwrap();
    }
}
