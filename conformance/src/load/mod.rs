//! `durable-mcp-conformance load`: the full path measured against the bare floor, a direct
//! call and the peer (`temporalio-mcp`), in one run, with every process's CPU time and the dev
//! server's own counters per call. Figures are reported, never asserted; only lost and
//! duplicated calls fail the run.
//!
//! Files: `paths` (what each path runs and how it calls), `floor` (the floor's worker),
//! `peer` (the peer's install, worker and client), `measure` (the driver and percentiles),
//! `loss` (which calls were lost or run twice), `tasks` (the connector's memory with many MCP
//! tasks in flight), `procstat` (CPU and RSS from `/proc`), `metrics` (the server's Prometheus
//! counters), `report` (the table and JSON), `targets` (the inline path's ratios and targets),
//! `scaling` (the optional result-size section, ours beside the peer's), `tool_count` (the optional tool-count section), `linearity` (each scaling curve's verdict).

pub mod floor;
pub mod linearity;
pub mod loss;
pub mod measure;
pub mod metrics;
pub mod paths;
pub mod peer;
pub mod procstat;
pub mod report;
pub mod scaling;
pub mod targets;
pub mod task_count;
pub mod tasks;
pub mod tool_count;
pub mod upstream_count;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use crate::{
    DevServer, DevServerOptions,
    fixtures::{Ledger, LedgerEvent},
};
use paths::{Caller, PathKind};
use report::{LoadReport, Row};

/// Task slots of the proxy (`paths` starts it) and of the floor worker (`floor`), so the two are
/// measured alike: the proxy's default `max_concurrent_calls`.
pub const WORKER_SLOTS: usize = 100;
/// How long the dev server takes to publish what a row did in its Prometheus counters.
const METRICS_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// `load`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Concurrency levels, comma-separated: this many callers in a closed loop per row.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub concurrency: Vec<usize>,
    /// Calls per row (at least twice the row's concurrency).
    #[arg(long, default_value_t = 400)]
    pub calls: usize,
    /// A few hundred calls in all (concurrency 1 and 16, 100 calls a row, 50 tasks in
    /// flight): checks the machinery, as CI does.
    #[arg(long)]
    pub short: bool,
    /// Then this many calls in a row through the full path over HTTP at concurrency 64,
    /// counting lost and duplicated calls (e.g. --count 10000).
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Then, with the full path over HTTP, a connector of its own is read (VmRSS) idle after
    /// initialize and with this many MCP tasks in flight: as many calls of a slow tool opened
    /// at once by a client declaring the tasks extension, each becoming a task; then all are
    /// cancelled and followed to their end (none may be lost or run twice). 0 skips it.
    /// [default: 1000, or 50 with --short]
    #[arg(long, value_name = "N")]
    pub tasks_in_flight: Option<usize>,
    /// Only these paths (comma-separated): direct, floor, full-http, full-stdio, peer,
    /// inline-http.
    #[arg(long, value_delimiter = ',', value_parser = parse_path)]
    pub paths: Vec<PathKind>,
    /// Write the table as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// An earlier run's --json file: the Activity path (full path over HTTP) is judged to cost
    /// no more frontend RPCs per call than there (any build) and no worse in time (against a
    /// run of the same build kind) (R-CNF-17).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Optional scaling sections, comma-separated: `sizes` (results of 1 KB to 4 MB through the
    /// full path over HTTP), `tools` (listing an upstream of 1, 100 and 1,000 tools through a
    /// connector), `upstreams` (one proxy fronting 1, 10 and 50 upstreams), `tasks` (a connector
    /// with 1,000 and 10,000 MCP tasks in flight; 50 and 200 with --short). None by default.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub scaling: Vec<scaling::Scaling>,
}

fn parse_path(s: &str) -> Result<PathKind, String> {
    PathKind::ALL
        .into_iter()
        .find(|p| {
            serde_json::to_value(p)
                .ok()
                .and_then(|v| v.as_str().map(|v| v == s))
                == Some(true)
        })
        .ok_or_else(|| {
            format!(
                "unknown path {s:?}: use direct, floor, full-http, full-stdio, peer or inline-http"
            )
        })
}

impl LoadArgs {
    fn levels(&self) -> Vec<usize> {
        if self.short {
            vec![1, 16]
        } else {
            self.concurrency
                .iter()
                .copied()
                .filter(|c| *c > 0)
                .collect()
        }
    }

    fn tasks(&self) -> usize {
        self.tasks_in_flight.unwrap_or(match self.short {
            true => tasks::SHORT_TASKS,
            false => 1000,
        })
    }

    fn calls_at(&self, concurrency: usize) -> usize {
        if self.short {
            100
        } else {
            self.calls.max(2 * concurrency)
        }
    }
}

/// When the run began, for the elapsed time on every progress line.
static RUN_START: OnceLock<Instant> = OnceLock::new();

/// A progress line on stderr, `load [mm:ss]: what`, so a long run can be followed.
pub fn progress(what: std::fmt::Arguments<'_>) {
    let elapsed = RUN_START.get_or_init(Instant::now).elapsed();
    eprintln!("{}", progress_line(elapsed, &what.to_string()));
}

/// `load [mm:ss]: what` (minutes past 59 keep counting: `load [75:02]`).
pub fn progress_line(elapsed: Duration, what: &str) -> String {
    crate::report::elapsed_line("load", elapsed, what)
}

/// Runs `section`, with a progress line when it starts and one with its duration when it
/// ends; the duration is also kept in the report (`timings`).
async fn timed<T>(
    report: &mut LoadReport,
    name: String,
    section: impl std::future::Future<Output = T>,
) -> T {
    progress(format_args!("{name}: starting"));
    let start = Instant::now();
    let out = section.await;
    let took = start.elapsed().as_secs_f64();
    progress(format_args!("{name}: done in {took:.1} s"));
    report.timings.push((name, took));
    out
}

/// Runs every selected path and answers the report (printing progress to stderr).
// Long: one loop over the paths, each with its rows and the sections that run on its setup.
pub async fn run(args: &LoadArgs, server_options: DevServerOptions) -> anyhow::Result<LoadReport> {
    let _ = RUN_START.set(Instant::now());
    let dir = tempfile::Builder::new()
        .prefix("durable-mcp-load-")
        .tempdir()?;
    let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
    let (upstream, upstream_url) = paths::start_upstream(dir.path(), ledger.path()).await?;
    let selected: Vec<PathKind> = if args.paths.is_empty() {
        PathKind::ALL.to_vec()
    } else {
        args.paths.clone()
    };
    let mut report = LoadReport {
        machine: machine(),
        build: if cfg!(debug_assertions) {
            "debug (figures are not representative: use --release)"
        } else {
            "release"
        },
        temporal: String::new(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..LoadReport::default()
    };
    let baseline = args
        .baseline
        .as_deref()
        .map(targets::read_baseline)
        .transpose()?;
    let peer = if selected.contains(&PathKind::Peer) {
        match peer::python()
            .ok_or_else(|| "no python3 on PATH".to_owned())
            .and_then(|python| peer::ensure_installed().map(|install| (python, install)))
        {
            Ok(found) => Some(found),
            Err(reason) => {
                progress(format_args!("{} skipped: {reason}", PathKind::Peer.label()));
                report.skipped.push((PathKind::Peer, reason));
                None
            }
        }
    } else {
        None
    };
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    for kind in selected {
        if kind == PathKind::Peer && peer.is_none() {
            continue;
        }
        // A fresh server per path: no path inherits another's state or queues.
        let mut server = match kind.needs_temporal() {
            true => Some(DevServer::start(server_options.clone()).await?),
            false => None,
        };
        if let Some(v) = server.as_ref().and_then(|s| s.version()) {
            report.temporal = format!("{} (CLI {})", v.server, v.cli);
        }
        let path_dir = dir.path().join(format!("{kind:?}"));
        std::fs::create_dir_all(&path_dir)?;
        progress(format_args!("{} starting", kind.label()));
        let path_start = Instant::now();
        let setup = match paths::start(
            kind,
            server.as_ref(),
            &upstream_url,
            &path_dir,
            peer.as_ref(),
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                progress(format_args!("{} failed to start: {e:#}", kind.label()));
                report
                    .skipped
                    .push((kind, format!("failed to start: {e:#}")));
                continue;
            }
        };
        let caller = Arc::new(setup.caller);
        let mut procs: Vec<(String, u32)> = vec![
            ("upstream".into(), upstream.pid),
            ("driver".into(), std::process::id()),
        ];
        if let Some(pid) = server.as_ref().and_then(|s| s.pid()) {
            procs.push(("server".into(), pid));
        }
        procs.extend(setup.children.iter().map(|c| (c.role.to_owned(), c.pid)));
        let metrics = server.as_ref().and_then(|s| s.metrics_address());
        let mut rows: Vec<(usize, usize)> = args
            .levels()
            .into_iter()
            .map(|c| (c, args.calls_at(c)))
            .collect();
        if kind == PathKind::FullHttp
            && let Some(n) = args.count
        {
            rows.push((64, n));
        }
        let count_index = args
            .count
            .filter(|_| kind == PathKind::FullHttp)
            .map(|_| rows.len() - 1);
        for (i, (concurrency, calls)) in rows.into_iter().enumerate() {
            let prefix = format!("{run_id}-{kind:?}-{concurrency}-{i}-");
            let row = measure_row(
                kind,
                &caller,
                &prefix,
                concurrency,
                calls,
                &procs,
                metrics.as_deref(),
                &ledger,
            )
            .await;
            progress(format_args!(
                "{} c={concurrency}: {} calls, p50 {:.1} ms, {:.1} calls/s, {} errors",
                kind.label(),
                row.calls,
                row.p50_ms,
                row.calls_per_s,
                row.errors
            ));
            if Some(i) == count_index {
                report.count_run = Some(row);
            } else {
                report.rows.push(row);
            }
        }
        let rows_took = path_start.elapsed().as_secs_f64();
        report
            .timings
            .push((format!("{} rows", kind.label()), rows_took));
        if matches!(kind, PathKind::FullHttp | PathKind::Peer)
            && args.scaling.contains(&scaling::Scaling::Sizes)
        {
            let calls = if args.short { 2 } else { 10 };
            let name = format!("scaling sizes, {}", kind.label());
            let points = timed(
                &mut report,
                name,
                scaling::sizes(kind.label(), &caller, &procs, calls),
            )
            .await;
            match kind {
                PathKind::Peer => report.peer_result_sizes = points,
                _ => report.result_sizes = points,
            }
        }
        if let (PathKind::FullHttp, true, Some(server)) = (
            kind,
            args.scaling.contains(&scaling::Scaling::Tools),
            server.as_ref(),
        ) {
            let name = "scaling tools, (c) full/http".to_owned();
            report.tool_counts = timed(
                &mut report,
                name,
                tool_count::run(server, &path_dir, &ledger),
            )
            .await;
        }
        if let (PathKind::FullHttp, true, Some(server)) = (
            kind,
            args.scaling.contains(&scaling::Scaling::Upstreams),
            server.as_ref(),
        ) {
            let name = "scaling upstreams, (c) full/http".to_owned();
            report.upstream_counts = timed(
                &mut report,
                name,
                upstream_count::run(server, &path_dir, &ledger),
            )
            .await;
        }
        if let Ok(caller) = Arc::try_unwrap(caller) {
            caller.close().await;
        }
        if let (PathKind::FullHttp, Some(slice), n @ 1..) =
            (kind, setup.full.as_ref(), args.tasks())
        {
            let prefix = format!("{run_id}-tasks-");
            let name = format!("{} with {n} tasks in flight", kind.label());
            let run = tasks::run(slice, n, &prefix, &ledger, &path_dir);
            match timed(&mut report, name, run).await {
                Ok(run) => {
                    progress(format_args!(
                        "connector VmRSS idle {:.1} MiB, with {} tasks in flight {:.1} MiB",
                        run.idle_rss_mib, run.in_flight, run.in_flight_rss_mib
                    ));
                    report.tasks_run = Some(run);
                }
                Err(e) => {
                    progress(format_args!("the tasks run failed: {e:#}"));
                    report.tasks_failed = Some(format!("{e:#}"));
                }
            }
        }
        if let (PathKind::FullHttp, Some(slice), true) = (
            kind,
            setup.full.as_ref(),
            args.scaling.contains(&scaling::Scaling::Tasks),
        ) {
            let counts = match args.short {
                true => &task_count::SHORT_COUNTS,
                false => &task_count::COUNTS,
            };
            let prefix = format!("{run_id}-scaling-tasks-");
            let name = "scaling tasks, (c) full/http".to_owned();
            let run = task_count::run(slice, counts, &prefix, &ledger, &path_dir);
            report.task_counts = timed(&mut report, name, run).await;
        }
        for child in setup.children {
            child.stop().await;
        }
        if let Some(server) = server.as_mut() {
            let _ = server.stop().await;
        }
        progress(format_args!(
            "{} done in {:.1} s",
            kind.label(),
            path_start.elapsed().as_secs_f64()
        ));
    }
    upstream.stop().await;
    let judged = [PathKind::InlineHttp, PathKind::FullHttp];
    if report.rows.iter().any(|r| judged.contains(&r.path)) {
        report.targets = targets::verdicts(&report, baseline.as_ref());
        report.sections.push(targets::render(&report));
    }
    if !report.result_sizes.is_empty() || !report.peer_result_sizes.is_empty() {
        let section = scaling::render_sizes(&report.result_sizes, &report.peer_result_sizes);
        report.sections.push(section);
    }
    if !report.tool_counts.is_empty() {
        report
            .sections
            .push(tool_count::render(&report.tool_counts));
    }
    if !report.task_counts.is_empty() {
        report
            .sections
            .push(task_count::render(&report.task_counts));
    }
    if !report.upstream_counts.is_empty() {
        report
            .sections
            .push(upstream_count::render(&report.upstream_counts));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report)
}

/// One row: `calls` calls at `concurrency`, with the processes' CPU and the server's counters
/// read before and after, and the upstream's ledger read for runs and re-runs.
#[allow(clippy::too_many_arguments)]
async fn measure_row(
    kind: PathKind,
    caller: &Arc<Caller>,
    prefix: &str,
    concurrency: usize,
    calls: usize,
    procs: &[(String, u32)],
    metrics: Option<&str>,
    ledger: &Ledger,
) -> Row {
    let before: Vec<_> = procs
        .iter()
        .map(|(_, pid)| procstat::sample(*pid))
        .collect();
    let counters_before = match metrics {
        Some(m) => metrics::scrape(m).await.ok(),
        None => None,
    };
    let (c, p) = (caller.clone(), prefix.to_owned());
    let samples = measure::drive(concurrency, calls, move |i| {
        let (caller, key) = (c.clone(), format!("{p}{i}"));
        async move {
            let echoed = caller.call(&key).await?;
            anyhow::ensure!(echoed == key, "got {echoed:?} for {key:?}");
            Ok(())
        }
    })
    .await;
    let counters_after = match metrics {
        Some(m) => {
            // The server publishes its counters about once a second: wait for this row's.
            tokio::time::sleep(METRICS_SETTLE).await;
            metrics::scrape(m).await.ok()
        }
        None => None,
    };
    let ok = samples.latencies.len().max(1) as f64;
    let mut cpu = BTreeMap::new();
    let mut rss = BTreeMap::new();
    for ((role, pid), before) in procs.iter().zip(before) {
        if let (Some(b), Some(a)) = (before, procstat::sample(*pid)) {
            *cpu.entry(role.clone()).or_insert(0.0) += (a.cpu - b.cpu).as_secs_f64() * 1000.0 / ok;
            rss.insert(role.clone(), a.peak_rss_kib as f64 / 1024.0);
        }
    }
    let server_per_call = match (counters_before, counters_after) {
        (Some(b), Some(a)) => a
            .since(&b)
            .0
            .into_iter()
            .map(|(k, v)| (k, v / ok))
            .collect(),
        _ => BTreeMap::new(),
    };
    // The upstream's ledger: how often each of this row's keys ran.
    let mut runs: HashMap<String, usize> = HashMap::new();
    for entry in ledger.read() {
        if entry.event == LedgerEvent::Called
            && let Some(key) = entry.key.filter(|k| k.starts_with(prefix))
        {
            *runs.entry(key).or_default() += 1;
        }
    }
    let failed: std::collections::HashSet<usize> = samples.failed.iter().copied().collect();
    let unanswered: std::collections::HashSet<usize> = samples.unanswered.iter().copied().collect();
    let ended: Vec<(String, loss::Ended)> = (0..calls)
        .map(|i| {
            let how = if failed.contains(&i) {
                loss::Ended::Failed
            } else if unanswered.contains(&i) {
                loss::Ended::Unanswered
            } else {
                loss::Ended::Answered
            };
            (format!("{prefix}{i}"), how)
        })
        .collect();
    // The floor's Activity echoes by itself: its calls never reach the upstream's ledger.
    let ledger = (kind != PathKind::Floor).then_some(&runs);
    let tally = loss::tally(&ended, ledger, loss::reruns_allowed(kind));
    let ms = |p: f64| measure::percentile(&samples.latencies, p).as_secs_f64() * 1000.0;
    Row {
        path: kind,
        label: kind.label().to_owned(),
        concurrency,
        calls,
        errors: tally.errors,
        lost: tally.lost,
        duplicated: tally.duplicated,
        rerun: tally.rerun,
        p50_ms: ms(50.0),
        p90_ms: ms(90.0),
        p99_ms: ms(99.0),
        calls_per_s: samples.latencies.len() as f64 / samples.wall.as_secs_f64().max(1e-9),
        cpu_ms_per_call: cpu,
        peak_rss_mib: rss,
        server_per_call,
        first_error: samples.first_error,
    }
}

/// CPU model, cores and kernel, for the report's header.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {}", kernel.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_says_the_elapsed_minutes_and_seconds() {
        let line = |s| progress_line(Duration::from_secs(s), "(d) peer starting");
        assert_eq!(line(0), "load [00:00]: (d) peer starting");
        assert_eq!(line(65), "load [01:05]: (d) peer starting");
        assert_eq!(line(75 * 60 + 2), "load [75:02]: (d) peer starting");
    }
}
