//! The connector's memory (issue 15's targets: RSS idle, and with many MCP tasks in flight,
//! R-CNF-16). A connector of its own, over HTTP, on the full path's server and proxy: its
//! `VmRSS` once a task-capable client has initialized (idle), then `N` calls of the upstream's
//! `slow` tool opened at once by that client, each of which becomes an MCP task at the
//! connector's `--task-after`; `VmRSS` while all of them are in flight (and the highest
//! `VmRSS` seen meanwhile); then every task is cancelled and followed to its end, and the
//! upstream's ledger tells whether any was lost or run twice.

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, TaskPayload,
};
use serde_json::json;

use super::{
    paths::{Child, UPSTREAM_SERVICE, signing_key, spawn_until},
    procstat,
};
use crate::{
    fixtures::{Ledger, LedgerEvent},
    harness::Slice,
    kit::{
        mcp::{session_http_client, tasks_client_config},
        process::{CONNECTOR_LISTENING, http_connector_command},
    },
};

/// How long each call's tool sleeps: long enough to outlast opening all the calls and reading
/// the connector, below the proxy's one-minute attempt timeout (a timed-out attempt would be
/// retried, and show as a duplicate).
pub const HOLD: Duration = Duration::from_secs(50);

/// `--tasks-in-flight` for `load --short`.
pub const SHORT_TASKS: usize = 50;

/// The connector's flags for `n` tasks: room for all of them under its own caps (each call
/// holds an in-flight slot and an HTTP connection, all from loopback, until it becomes a task),
/// and no per-caller share, start rate or per-session request rate (every call comes from one
/// caller on one session).
pub fn connector_flags(n: usize) -> Vec<String> {
    let max_in_flight = (n + 64).max(durable_mcp::connector::server::DEFAULT_MAX_IN_FLIGHT);
    let max_connections = (n + 64).max(durable_mcp::connector::listener::DEFAULT_MAX_CONNECTIONS);
    vec![
        "--max-in-flight".into(),
        max_in_flight.to_string(),
        "--http-max-connections".into(),
        max_connections.to_string(),
        // Every call comes from loopback: one address.
        "--http-max-connections-per-address".into(),
        max_connections.to_string(),
        "--max-in-flight-per-caller".into(),
        "0".into(),
        "--max-call-starts-per-caller-minute".into(),
        "0".into(),
        // One session opens, cancels and follows every task: thousands of requests a minute.
        "--max-requests-per-session-minute".into(),
        "0".into(),
    ]
}

/// What the tasks run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TasksRun {
    /// Calls opened at once.
    pub tasks: usize,
    /// The flags the dedicated connector ran with (beyond the route and transport).
    pub connector_flags: Vec<String>,
    /// `VmRSS` after start and `initialize`, before any call, in MiB.
    pub idle_rss_mib: f64,
    /// `VmRSS` once every call had answered with a task, in MiB.
    pub in_flight_rss_mib: f64,
    /// The highest `VmRSS` sampled (every 50 ms) while the calls were opened, in MiB.
    pub peak_rss_mib: f64,
    /// `VmHWM` at the end of the run, in MiB.
    pub hwm_mib: f64,
    /// Calls that answered with a task.
    pub created: usize,
    /// Of those, how many the upstream had not finished when the connector was read.
    pub in_flight: usize,
    /// Seconds from the first call opened to the last task answered.
    pub open_s: f64,
    /// Seconds from the first cancel to the last task seen ended.
    pub cancel_s: f64,
    pub cancelled: usize,
    pub completed: usize,
    pub tally: TasksTally,
    pub first_error: Option<String>,
}

/// How one call ended, as its caller saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEnd {
    /// `tasks/get` said cancelled.
    Cancelled,
    /// It completed (inline or as a task) with this key echoed.
    Completed { echoed: Option<String> },
    /// The call or its task reported an error.
    Failed,
    /// Its task was still working when the run stopped following it.
    Unfinished,
}

/// The run's tally (R-CNF-13's rules applied to tasks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TasksTally {
    /// Calls or tasks that reported an error, or completed with someone else's answer.
    pub errors: usize,
    /// Tasks still working long after their cancel (the call, or its cancel, went missing),
    /// and completions the upstream's ledger never saw run.
    pub lost: usize,
    /// Keys the upstream ran more than once.
    pub duplicated: usize,
}

/// Tallies each call's end (by its key) against how often the upstream ran each key. A
/// cancelled task may or may not have reached the upstream (a queued one never does), so only a
/// completion needs a run.
pub fn tally(ends: &[(String, TaskEnd)], runs: &HashMap<String, usize>) -> TasksTally {
    let mut t = TasksTally::default();
    for (key, end) in ends {
        let ran = runs.get(key).copied().unwrap_or(0);
        match end {
            TaskEnd::Cancelled => {}
            TaskEnd::Completed { echoed } if echoed.as_deref() != Some(key) => t.errors += 1,
            TaskEnd::Completed { .. } => {
                if ran == 0 {
                    t.lost += 1;
                }
            }
            TaskEnd::Failed => t.errors += 1,
            TaskEnd::Unfinished => t.lost += 1,
        }
        if ran > 1 {
            t.duplicated += 1;
        }
    }
    t
}

/// Samples a process's `VmRSS` every 50 ms and keeps the highest, until dropped.
struct RssWatch {
    highest_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssWatch {
    fn start(pid: u32) -> Self {
        let (highest_kib, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (high, done) = (highest_kib.clone(), stop.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Some(s) = procstat::sample(pid) {
                    high.fetch_max(s.rss_kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { highest_kib, stop }
    }

    fn highest_mib(&self) -> f64 {
        mib(self.highest_kib.load(Ordering::Relaxed))
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The key a result echoed, unless it is a tool error.
fn echoed(is_error: bool, structured: Option<&serde_json::Value>) -> Option<String> {
    structured
        .filter(|_| !is_error)
        .and_then(|v| v["key"].as_str())
        .map(str::to_owned)
}

/// Runs the tasks measurement with `n` calls through the full path's `slice` (its endpoint,
/// served by its proxy); `prefix` starts every call's key in the upstream's `ledger`.
pub async fn run(
    slice: &Slice,
    n: usize,
    prefix: &str,
    ledger: &Ledger,
    dir: &Path,
) -> anyhow::Result<TasksRun> {
    let flags = connector_flags(n);
    let mut command =
        http_connector_command(slice, UPSTREAM_SERVICE, "127.0.0.1:0", &signing_key())?;
    command.args(&flags).env("RUST_LOG", "warn");
    let (connector, url): (Child, String) = spawn_until(
        "tasks connector",
        command,
        &dir.join("tasks-connector.log"),
        CONNECTOR_LISTENING,
    )
    .await?;
    let result = measure(connector.pid, &url, n, prefix, ledger, flags).await;
    connector.stop().await;
    result
}

async fn measure(
    pid: u32,
    url: &str,
    n: usize,
    prefix: &str,
    ledger: &Ledger,
    flags: Vec<String>,
) -> anyhow::Result<TasksRun> {
    // A client that declares the tasks extension, so slow calls become tasks.
    let client = session_http_client(url, tasks_client_config())
        .await
        .context("MCP handshake with the tasks connector")?;
    let idle = procstat::sample(pid).context("the tasks connector is gone")?;
    let mut run = TasksRun {
        tasks: n,
        connector_flags: flags,
        idle_rss_mib: mib(idle.rss_kib),
        ..TasksRun::default()
    };

    // Open every call at once; each answers with a task after the connector's --task-after.
    let watch = RssWatch::start(pid);
    let opened = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let (peer, key) = (client.peer().clone(), format!("{prefix}{i}"));
        calls.spawn(async move {
            let params = CallToolRequestParams::new("slow").with_arguments(
                json!({"key": key, "sleep_ms": HOLD.as_millis() as u64})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
            let answer =
                tokio::time::timeout(Duration::from_secs(120), peer.call_tool_once(params)).await;
            (key, answer)
        });
    }
    let mut ends: Vec<(String, TaskEnd)> = Vec::with_capacity(n);
    let mut tasks: Vec<(String, String)> = Vec::with_capacity(n);
    while let Some(joined) = calls.join_next().await {
        let (key, answer) = joined?;
        match answer {
            Ok(Ok(CallToolResponse::Task(created))) => tasks.push((key, created.task.task_id)),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                let echoed = echoed(
                    result.is_error == Some(true),
                    result.structured_content.as_ref(),
                );
                ends.push((key, TaskEnd::Completed { echoed }));
            }
            Ok(Ok(other)) => {
                run.first_error
                    .get_or_insert_with(|| format!("an unexpected answer: {other:?}"));
                ends.push((key, TaskEnd::Failed));
            }
            Ok(Err(e)) => {
                run.first_error.get_or_insert_with(|| e.to_string());
                ends.push((key, TaskEnd::Failed));
            }
            Err(_) => {
                run.first_error
                    .get_or_insert_with(|| "no answer to a call within 120 s".into());
                ends.push((key, TaskEnd::Failed));
            }
        }
    }
    run.open_s = opened.elapsed().as_secs_f64();
    let now = procstat::sample(pid).context("the tasks connector is gone")?;
    run.in_flight_rss_mib = mib(now.rss_kib);
    run.peak_rss_mib = watch.highest_mib().max(run.in_flight_rss_mib);
    drop(watch);
    run.created = tasks.len();
    let finished: std::collections::HashSet<String> = ledger
        .read()
        .into_iter()
        .filter(|e| e.event != LedgerEvent::Called)
        .filter_map(|e| e.key.filter(|k| k.starts_with(prefix)))
        .collect();
    run.in_flight = tasks.iter().filter(|(k, _)| !finished.contains(k)).count();

    // Cancel them all, then follow each task to its end.
    let cancelling = Instant::now();
    let peer = client.peer().clone();
    for chunk in tasks.chunks(64) {
        let mut cancels = tokio::task::JoinSet::new();
        for (_, id) in chunk {
            let (peer, id) = (peer.clone(), id.clone());
            cancels.spawn(async move { peer.cancel_task(CancelTaskParams::new(id)).await });
        }
        while let Some(done) = cancels.join_next().await {
            if let Err(e) = done? {
                run.first_error
                    .get_or_insert_with(|| format!("tasks/cancel: {e}"));
            }
        }
    }
    let deadline =
        Instant::now() + Duration::from_secs(120) + Duration::from_millis(100) * n as u32;
    let mut pending = tasks;
    while !pending.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for chunk in pending.chunks(64) {
            let mut gets = tokio::task::JoinSet::new();
            for (key, id) in chunk.iter().cloned() {
                let peer = peer.clone();
                gets.spawn(async move {
                    let got = peer.get_task(GetTaskParams::new(&id)).await;
                    (key, id, got)
                });
            }
            while let Some(done) = gets.join_next().await {
                let (key, id, got) = done?;
                match got.map(|g| g.task.payload) {
                    Ok(TaskPayload::Working | TaskPayload::InputRequired { .. }) => {
                        still.push((key, id))
                    }
                    Ok(TaskPayload::Cancelled) => ends.push((key, TaskEnd::Cancelled)),
                    Ok(TaskPayload::Completed { result }) => {
                        let echoed = echoed(
                            result.get("isError") == Some(&json!(true)),
                            result.get("structuredContent"),
                        );
                        ends.push((key, TaskEnd::Completed { echoed }));
                    }
                    Ok(other) => {
                        run.first_error
                            .get_or_insert_with(|| format!("a task ended {other:?}"));
                        ends.push((key, TaskEnd::Failed));
                    }
                    // A passing failure to read the task: ask again next round.
                    Err(e) => {
                        run.first_error
                            .get_or_insert_with(|| format!("tasks/get: {e}"));
                        still.push((key, id));
                    }
                }
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    run.cancel_s = cancelling.elapsed().as_secs_f64();
    ends.extend(pending.into_iter().map(|(k, _)| (k, TaskEnd::Unfinished)));
    run.cancelled = ends
        .iter()
        .filter(|(_, e)| *e == TaskEnd::Cancelled)
        .count();
    run.completed = ends
        .iter()
        .filter(|(_, e)| matches!(e, TaskEnd::Completed { .. }))
        .count();
    let mut runs: HashMap<String, usize> = HashMap::new();
    for entry in ledger.read() {
        if entry.event == LedgerEvent::Called
            && let Some(key) = entry.key.filter(|k| k.starts_with(prefix))
        {
            *runs.entry(key).or_default() += 1;
        }
    }
    run.tally = tally(&ends, &runs);
    run.hwm_mib = procstat::sample(pid).map_or(0.0, |s| mib(s.peak_rss_kib));
    let _ = client.cancel().await;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(list: &[(&str, TaskEnd)]) -> Vec<(String, TaskEnd)> {
        list.iter()
            .map(|(k, e)| ((*k).to_owned(), e.clone()))
            .collect()
    }

    fn done(key: &str) -> TaskEnd {
        TaskEnd::Completed {
            echoed: Some(key.into()),
        }
    }

    #[test]
    fn a_cancelled_task_needs_no_run_and_a_completed_one_does() {
        let runs = HashMap::from([("a".to_owned(), 1)]);
        let t = tally(
            &ends(&[
                ("a", done("a")),
                ("b", TaskEnd::Cancelled),
                ("c", done("c")),
            ]),
            &runs,
        );
        assert_eq!(
            t,
            TasksTally {
                errors: 0,
                lost: 1,
                duplicated: 0
            }
        );
    }

    #[test]
    fn an_unfinished_task_is_lost_and_a_failure_an_error() {
        let t = tally(
            &ends(&[("a", TaskEnd::Unfinished), ("b", TaskEnd::Failed)]),
            &HashMap::new(),
        );
        assert_eq!((t.errors, t.lost), (1, 1));
    }

    #[test]
    fn someone_elses_answer_is_an_error_and_a_second_run_a_duplicate() {
        let runs = HashMap::from([("a".to_owned(), 1), ("b".to_owned(), 2)]);
        let t = tally(&ends(&[("a", done("b")), ("b", TaskEnd::Cancelled)]), &runs);
        assert_eq!((t.errors, t.lost, t.duplicated), (1, 0, 1));
    }

    #[test]
    fn the_connector_gets_room_for_every_task() {
        let flags = connector_flags(1000);
        assert_eq!(
            flags,
            [
                "--max-in-flight",
                "1064",
                "--http-max-connections",
                "1064",
                "--http-max-connections-per-address",
                "1064",
                "--max-in-flight-per-caller",
                "0",
                "--max-call-starts-per-caller-minute",
                "0",
                "--max-requests-per-session-minute",
                "0"
            ]
        );
        // A few tasks keep the defaults.
        let small = connector_flags(50);
        assert_eq!(
            small[1],
            durable_mcp::connector::server::DEFAULT_MAX_IN_FLIGHT.to_string()
        );
        assert_eq!(
            small[3],
            durable_mcp::connector::listener::DEFAULT_MAX_CONNECTIONS.to_string()
        );
    }
}
