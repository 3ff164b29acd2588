//! Integration tests of the Temporal dev-server harness, against the real CLI (installed into the
//! cache by the harness itself when missing).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use durable_mcp_conformance::harness::{
    self, Backend, DevServer, DevServerOptions, HarnessError, MIN_CLI_VERSION, process_alive,
    unique_name,
};
use temporalio_client::tonic::Request;
use temporalio_protos::temporal::api::workflowservice::v1::DescribeNamespaceRequest;

/// Env var that turns [`orphan_child`] from a no-op into the child half of the orphan test.
const ORPHAN_CHILD_ENV: &str = "DURABLE_MCP_ORPHAN_CHILD";

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

#[tokio::test]
async fn container_backend_runs_or_reports_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DevServerOptions {
        backend: Backend::Container,
        db_file: Some(dir.path().join("temporal.db")),
        ..DevServerOptions::default()
    };
    let mut server = match DevServer::start(opts).await {
        Ok(server) => server,
        Err(e) => match e.skip_reason() {
            Some(reason) => {
                eprintln!("skipped: {reason}");
                return;
            }
            None => panic!("container backend failed with a Docker engine present: {e}"),
        },
    };
    assert_eq!(server.backend(), Backend::Container);
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
    server.restart().await.expect("restart container");
    describe_namespace(&server, &ns)
        .await
        .expect("namespace survives restart");
    server.stop().await.expect("stop container");
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
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "orphan_child", "--nocapture"])
        .env(ORPHAN_CHILD_ENV, "1")
        .env(harness::BACKEND_ENV, "process")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut pid = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(p) = line.strip_prefix("SERVER_PID=") {
            pid = Some(p.trim().parse::<u32>().unwrap());
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child test was supposed to panic");
    let pid = pid.expect("child printed SERVER_PID=<pid>");
    assert!(
        wait_gone(pid, Duration::from_secs(10)),
        "dev server {pid} outlived its test binary (orphan)"
    );
}
