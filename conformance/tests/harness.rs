//! Integration tests of the Temporal dev-server harness, against the real CLI (installed into the
//! cache by the harness itself when missing).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use durable_mcp_conformance::{
    harness::{
        self, Backend, DevServer, DevServerOptions, HarnessError, MIN_CLI_VERSION, process_alive,
        unique_name,
    },
    skip::{Need, skip},
};
use temporalio_client::tonic::Request;
use temporalio_protos::temporal::api::workflowservice::v1::DescribeNamespaceRequest;

/// Env var that turns [`orphan_child`] from a no-op into the child half of the orphan test.
const ORPHAN_CHILD_ENV: &str = "DURABLE_MCP_ORPHAN_CHILD";
/// The same for [`container_orphan_child`].
const CONTAINER_CHILD_ENV: &str = "DURABLE_MCP_CONTAINER_ORPHAN_CHILD";

fn process_options() -> DevServerOptions {
    DevServerOptions {
        backend: Backend::Process,
        ..DevServerOptions::default()
    }
}

async fn describe_namespace(server: &DevServer, namespace: &str) -> Result<(), String> {
    let conn = server.connect().await.map_err(|e| e.to_string())?;
    conn.workflow_service()
        .describe_namespace(Request::new(DescribeNamespaceRequest {
            namespace: namespace.to_owned(),
            ..Default::default()
        }))
        .await
        .map(drop)
        .map_err(|s| s.to_string())
}

/// Waits until `pid` is gone (or a zombie), up to `timeout`.
fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    !process_alive(pid)
}

#[test]
fn find_cli_reports_a_supported_version() {
    let (path, version) = harness::find_cli().expect("find or install the Temporal CLI");
    eprintln!("Temporal CLI at {}: {version}", path.display());
    assert!(path.is_file());
    assert!(version.cli_at_least(MIN_CLI_VERSION), "{version:?}");
    assert!(!version.server.is_empty());
}

#[tokio::test]
async fn process_server_lifecycle() {
    let mut server = DevServer::start(process_options())
        .await
        .expect("start dev server");
    let pid = server.pid().expect("process backend has a pid");
    assert!(process_alive(pid));
    assert_eq!(
        server.address(),
        format!("127.0.0.1:{}", server.target_url().port().unwrap())
    );
    assert_eq!(
        server.target_url().as_str(),
        format!("http://{}/", server.address())
    );
    assert_eq!(server.namespace(), "default");
    let version = server.version().expect("process backend knows its version");
    assert!(version.cli_at_least(MIN_CLI_VERSION), "{version:?}");

    // Connect and read the server's own idea of its version.
    let conn = server.connect().await.expect("connect");
    let info = conn
        .workflow_service()
        .get_system_info(Request::new(Default::default()))
        .await
        .expect("GetSystemInfo")
        .into_inner();
    assert_eq!(
        info.server_version, version.server,
        "CLI and server disagree on the version"
    );

    // Namespaces: create, create again.
    let ns = unique_name("ns");
    server
        .create_namespace(&ns)
        .await
        .expect("create namespace");
    server
        .create_namespace(&ns)
        .await
        .expect("second create is idempotent");
    describe_namespace(&server, &ns)
        .await
        .expect("namespace is usable");

    // Nexus endpoints: create, create again, conflicting create.
    let ep = unique_name("ep");
    let tq = unique_name("tq");
    server
        .create_nexus_endpoint(&ep, &ns, &tq)
        .await
        .expect("create endpoint");
    server
        .create_nexus_endpoint(&ep, &ns, &tq)
        .await
        .expect("second create is idempotent");
    match server
        .create_nexus_endpoint(&ep, &ns, "another_queue")
        .await
    {
        Err(HarnessError::Conflict { .. }) => {}
        other => panic!("expected a conflict for a different target, got {other:?}"),
    }

    // No db file: restart must refuse instead of silently losing state.
    assert!(matches!(
        server.restart().await,
        Err(HarnessError::RestartWithoutDbFile)
    ));

    let started = Instant::now();
    server.stop().await.expect("stop");
    eprintln!("stop took {:?}", started.elapsed());
    assert!(
        !process_alive(pid),
        "server pid {pid} still alive after stop()"
    );
    assert_eq!(server.pid(), None);
    server.stop().await.expect("stop is idempotent");
}

#[tokio::test]
async fn restart_on_db_file_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("temporal.db");
    let mut server = DevServer::start(DevServerOptions {
        db_file: Some(db.clone()),
        ..process_options()
    })
    .await
    .expect("start dev server");
    assert_eq!(server.db_file(), Some(db.as_path()));
    let address = server.address();
    let old_pid = server.pid().unwrap();

    let ns = unique_name("persisted");
    server
        .create_namespace(&ns)
        .await
        .expect("create namespace");

    let started = Instant::now();
    server.restart().await.expect("restart");
    eprintln!("restart took {:?}", started.elapsed());
    assert_eq!(server.address(), address, "restart must keep the address");
    let new_pid = server.pid().unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(!process_alive(old_pid), "old server {old_pid} still alive");
    assert!(db.is_file());

    describe_namespace(&server, &ns)
        .await
        .expect("namespace created before the restart survives it");

    // A crash (SIGKILL, no shutdown) and a start on the same file keep it too.
    server.kill().expect("kill");
    assert!(
        !process_alive(new_pid),
        "killed server {new_pid} still alive"
    );
    server
        .start_again()
        .await
        .expect("start again after a kill");
    assert_eq!(
        server.address(),
        address,
        "a start after a kill keeps the address"
    );
    describe_namespace(&server, &ns)
        .await
        .expect("namespace created before the kill survives it");
    let new_pid = server.pid().unwrap();

    drop(server); // synchronous kill
    assert!(
        !process_alive(new_pid),
        "Drop left server {new_pid} running"
    );
}

/// A server that dies at startup yields an error with its last output and log path; once the
/// cause is gone, restart works again.
#[tokio::test]
async fn restart_reports_early_exit_with_log_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = DevServer::start(DevServerOptions {
        db_file: Some(dir.path().join("temporal.db")),
        ..process_options()
    })
    .await
    .expect("start dev server");
    server.stop().await.expect("stop");

    let blocker = std::net::TcpListener::bind(server.address()).expect("occupy the grpc port");
    match server.restart().await {
        Err(HarnessError::ExitedEarly { status, log, tail }) => {
            eprintln!(
                "expected failure: exited {status}; log {}\n{tail}",
                log.display()
            );
            assert!(tail.contains("address already in use"), "{tail}");
            assert!(log.is_file(), "log path in the error must exist");
        }
        other => panic!("expected ExitedEarly while the port is taken, got {other:?}"),
    }
    drop(blocker);
    server
        .restart()
        .await
        .expect("restart once the port is free");
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn shared_returns_the_same_server() {
    let a = harness::shared().await.expect("shared server");
    let b = harness::shared().await.expect("shared server");
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.address(), b.address());
    describe_namespace(a, a.namespace())
        .await
        .expect("shared server answers");
}

/// The shared server must outlive the runtime (and thread) of the test that started it.
#[test]
fn shared_server_outlives_the_runtime_that_started_it() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = std::thread::spawn(move || {
        runtime().block_on(async {
            let s = harness::shared().await.expect("shared server");
            (s.address(), s.pid())
        })
    })
    .join()
    .unwrap();
    // That thread and its runtime are gone now.
    std::thread::sleep(Duration::from_millis(300));
    runtime().block_on(async {
        let s = harness::shared().await.expect("shared server");
        assert_eq!((s.address(), s.pid()), first);
        if let Some(pid) = s.pid() {
            assert!(
                process_alive(pid),
                "shared server died with its first runtime"
            );
        }
        describe_namespace(s, s.namespace())
            .await
            .expect("shared server still answers from another runtime");
    });
}

/// Starts a container-backed server, or records a skip (and returns `None`) when no Docker
/// engine answers. Any other failure is a test failure: an engine that cannot run the image
/// (or build it from the pinned CLI) is a bug here, not a reason to skip.
async fn container_server(db_file: Option<std::path::PathBuf>) -> Option<DevServer> {
    let opts = DevServerOptions {
        backend: Backend::Container,
        db_file,
        ..DevServerOptions::default()
    };
    match DevServer::start(opts).await {
        Ok(server) => Some(server),
        Err(e) => match e.skip_reason() {
            Some(reason) => {
                skip(Need::Docker, &reason);
                None
            }
            None => panic!("container backend failed with a Docker engine present: {e}"),
        },
    }
}

/// `docker inspect`'s answer for a container: `None` once the engine no longer knows it.
fn container_state(id: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["inspect", "--format", "{{.State.Status}}", id])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("the docker CLI runs (the container backend started, so it is installed)");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test]
async fn container_backend_runs_or_reports_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut server) = container_server(Some(dir.path().join("temporal.db"))).await else {
        return;
    };
    assert_eq!(server.backend(), Backend::Container);
    let id = server.container_id().expect("a container id").to_owned();
    assert_eq!(container_state(&id).as_deref(), Some("running"));
    let version = server
        .version()
        .expect("`temporal --version` runs in the image");
    assert!(version.cli_at_least(MIN_CLI_VERSION), "{version:?}");

    let ns = unique_name("ctr");
    server
        .create_namespace(&ns)
        .await
        .expect("create namespace");
    let ep = unique_name("ep");
    server
        .create_nexus_endpoint(&ep, &ns, "tq")
        .await
        .expect("create endpoint");
    let address = server.address();
    server.restart().await.expect("restart container");
    assert_eq!(server.address(), address, "restart must keep the address");
    describe_namespace(&server, &ns)
        .await
        .expect("namespace survives restart");
    assert!(
        dir.path().join("temporal.db").is_file(),
        "the database lives on the bind-mounted host directory"
    );
    server.stop().await.expect("stop container");
    assert_eq!(container_state(&id), None, "stop() removes the container");
}

/// Child half of [`container_is_removed_when_its_test_binary_is_killed`]: a no-op unless the
/// env var is set; otherwise starts a container, prints its id and waits to be killed.
#[tokio::test]
async fn container_orphan_child() {
    if std::env::var_os(CONTAINER_CHILD_ENV).is_none() {
        return;
    }
    let server = container_server(None)
        .await
        .expect("the parent checked that an engine answers");
    println!("CONTAINER_ID={}", server.container_id().unwrap());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// SIGKILL gives the test binary no chance to clean up: the reaper (a process holding the
/// other end of a pipe) must remove the container anyway (R-HAR-5).
#[tokio::test]
async fn container_is_removed_when_its_test_binary_is_killed() {
    // Skips (and counts the skip) when no engine answers.
    let Some(mut probe) = container_server(None).await else {
        return;
    };
    probe.stop().await.expect("stop the probe container");
    let (mut child, id) = run_child(
        "container_orphan_child",
        CONTAINER_CHILD_ENV,
        "CONTAINER_ID=",
    );
    let id = id.expect("child printed CONTAINER_ID=<id>");
    assert_eq!(container_state(&id).as_deref(), Some("running"));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while container_state(&id).is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        container_state(&id),
        None,
        "container {id} outlived its SIGKILLed test binary"
    );
}

/// Runs `test` of this binary in a child process with `env` set, and reads its stdout up to the
/// first line starting with `prefix`; returns the child and the rest of that line.
fn run_child(test: &str, env: &str, prefix: &str) -> (std::process::Child, Option<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(env, "1")
        .env(harness::BACKEND_ENV, "process")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    let value = lines.find_map(|line| line.strip_prefix(prefix).map(|v| v.trim().to_owned()));
    // Keep reading, so the child's later output does not hit a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, value)
}

/// Child half of [`server_dies_with_its_test_binary`]: a no-op unless the env var is set.
#[tokio::test]
async fn orphan_child() {
    if std::env::var_os(ORPHAN_CHILD_ENV).is_none() {
        return;
    }
    let server = harness::shared().await.expect("shared server in child");
    println!("SERVER_PID={}", server.pid().expect("process backend"));
    panic!("orphan child: dying on purpose with the server still running");
}

/// Runs [`orphan_child`] in a separate test process that starts a server and panics; the
/// server must not outlive it.
#[test]
fn server_dies_with_its_test_binary() {
    let (mut child, pid) = run_child("orphan_child", ORPHAN_CHILD_ENV, "SERVER_PID=");
    let pid = pid.map(|p| p.parse::<u32>().unwrap());
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child test was supposed to panic");
    let pid = pid.expect("child printed SERVER_PID=<pid>");
    assert!(
        wait_gone(pid, Duration::from_secs(10)),
        "dev server {pid} outlived its test binary (orphan)"
    );
}

/// `durable-mcp-conformance temporal --port P` serves on 127.0.0.1:P and says so; Ctrl-C stops
/// it.
#[test]
fn the_temporal_command_listens_on_the_port_it_is_given() {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_durable-mcp-conformance"))
        .args(["temporal", "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let wanted = format!("export TEMPORAL_ADDRESS=127.0.0.1:{port}");
    let mut seen = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        let done = line.contains("Press Ctrl-C");
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.trim() == wanted),
        "{wanted:?} in {seen:?}"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // Bounded: a lost Ctrl-C must fail the test, not hang the run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the dev server did not stop within 30 s of Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
}
