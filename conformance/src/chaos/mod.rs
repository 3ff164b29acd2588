//! `durable-mcp-conformance chaos`: a seeded fault campaign at load (R-CNF-24), in the manner
//! of Jepsen: clients run a mixed workload through two connector replicas, two proxy workers
//! and a dev server on a database file while a seeded nemesis kills, stops and cuts them; a
//! checker then reads the history (what the clients saw, the upstreams' ledger, Temporal's
//! record) against what durable-mcp promises.
//!
//! Files: `topology` (the processes), `relay` (the fault-injecting TCP relay), `schedule` (the
//! seeded plan), `nemesis` (applying it), `workload` (the clients), `workflows` (calls from a
//! Workflow), `observe` (ledger, open work, memory, direct calls), `history` (the record),
//! `checker` (the promises), `report` (tables, JUnit and JSON).

pub mod checker;
pub mod history;
pub mod nemesis;
pub mod observe;
pub mod relay;
pub mod report;
pub mod schedule;
pub mod topology;
pub mod workflows;
pub mod workload;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use crate::DevServerOptions;
use history::{End, FaultKind, History};
use report::ChaosReport;

/// `chaos`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// The seed of the fault schedule and of the clients' choices (default: random). It is
    /// printed; the same seed with the same --duration, --every and --faults replays the same
    /// faults.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long faults and calls go on.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// A run for CI: 60 s of faults and calls at concurrency 6, the whole run within 3 minutes.
    #[arg(long)]
    pub short: bool,
    /// Clients in a closed loop, each starting its next call when the last one ended.
    #[arg(long, default_value_t = 12)]
    pub concurrency: usize,
    /// One fault begins every this long on average (each gap drawn from half to one and a half
    /// of it); faults overlap.
    #[arg(long, default_value = "2500ms", value_parser = humantime::parse_duration)]
    pub every: Duration,
    /// Only these faults, comma-separated (default: all of them).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub faults: Vec<FaultKind>,
    /// Every call's final answer must come within this long after the last fault before it
    /// healed. Temporal's default retry policy waits up to 100 s between two attempts of a
    /// retried tool, so the default leaves room for one more attempt after the longest wait.
    /// [default: 120s, or 90s with --short, whose 60 s of faults cannot stretch a wait past 64 s]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub bound: Option<Duration>,
    /// Write the JSON report (the report model's cases, with the whole history under `chaos`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report, one case per check.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// How long the run waits for Temporal to close what it holds once every call answered.
const OPEN_WORK_WITHIN: Duration = Duration::from_secs(60);

impl ChaosArgs {
    fn duration(&self) -> Duration {
        if self.short {
            Duration::from_secs(60)
        } else {
            self.duration
        }
    }

    fn bound(&self) -> Duration {
        self.bound
            .unwrap_or(Duration::from_secs(if self.short { 90 } else { 120 }))
    }

    fn concurrency(&self) -> usize {
        if self.short {
            6
        } else {
            self.concurrency.max(1)
        }
    }

    fn kinds(&self) -> Vec<FaultKind> {
        if self.faults.is_empty() {
            FaultKind::ALL.to_vec()
        } else {
            self.faults.clone()
        }
    }

    /// The command that replays this run's faults.
    fn replay(&self, seed: u64) -> String {
        let mut line = format!("durable-mcp-conformance chaos --seed {seed}");
        if self.short {
            line.push_str(" --short");
        } else {
            line.push_str(&format!(
                " --duration {}s --concurrency {}",
                self.duration.as_secs(),
                self.concurrency
            ));
        }
        line.push_str(&format!(" --every {}ms", self.every.as_millis()));
        if !self.faults.is_empty() {
            let names: Vec<&str> = self.faults.iter().map(|k| k.name()).collect();
            line.push_str(&format!(" --faults {}", names.join(",")));
        }
        line
    }
}

static RUN_START: OnceLock<Instant> = OnceLock::new();

/// A progress line on stderr, `chaos [mm:ss]: what`.
pub fn progress(what: std::fmt::Arguments<'_>) {
    let elapsed = RUN_START.get_or_init(Instant::now).elapsed();
    eprintln!(
        "{}",
        crate::report::elapsed_line("chaos", elapsed, &what.to_string())
    );
}

/// A seed that varies between runs.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_000
}

/// Runs the campaign and answers its report; the run's files (logs, database, ledger) are
/// kept in a directory it names when a check failed.
pub async fn run(args: &ChaosArgs, options: DevServerOptions) -> anyhow::Result<ChaosReport> {
    let _ = RUN_START.set(Instant::now());
    let seed = args.seed.unwrap_or_else(random_seed);
    progress(format_args!("seed {seed} (replay: {})", args.replay(seed)));
    let dir = tempfile::Builder::new()
        .prefix("durable-mcp-chaos-")
        .tempdir()?;
    let topology = topology::Topology::start(dir.path(), options).await?;
    progress(format_args!(
        "server, upstreams, 2 proxies and 2 connectors up; files in {}",
        dir.path().display()
    ));
    let outcome = campaign(args, seed, &topology).await;
    topology.stop().await;
    let report = outcome?;
    if report.checks.iter().any(|c| !c.passed) {
        let kept = dir.keep();
        progress(format_args!(
            "the run's files are kept in {}",
            kept.display()
        ));
    }
    Ok(report)
}

/// Warms up, runs the clients and the nemesis, waits for every answer, and checks.
async fn campaign(
    args: &ChaosArgs,
    seed: u64,
    topology: &topology::Topology,
) -> anyhow::Result<ChaosReport> {
    let driver = workflows::WorkflowDriver::connect(
        &topology.address,
        &topology.namespace,
        &topology.workflows.task_queue,
        &topology.slice.endpoint,
    )
    .await?;
    workload::warm_up(&topology.urls).await?;
    let mut memory_start = Vec::new();
    for (role, pid) in topology.processes().await {
        memory_start.push((role, observe::rss_mib(pid).unwrap_or(0.0)));
    }
    let pace = schedule::Pace {
        duration: args.duration(),
        every: args.every,
        kinds: args.kinds(),
        heartbeat: topology::HEARTBEAT,
    };
    let plan = schedule::schedule(seed, &pace);
    progress(format_args!(
        "{} faults planned over {} s at concurrency {}",
        plan.len(),
        pace.duration.as_secs(),
        args.concurrency()
    ));
    let record = Arc::new(Mutex::new(nemesis::Record::default()));
    let started = Instant::now();
    let workload = Arc::new(workload::Workload::new(
        topology.urls.clone(),
        driver,
        seed,
        started,
    ));
    let until = started + pace.duration;
    let ticker = tokio::spawn(tick(workload.clone(), record.clone(), started));
    let clients = workload.run(args.concurrency(), until);
    let faults = async {
        nemesis::unleash(topology, &plan, started, record.clone()).await;
        progress(format_args!(
            "every fault healed; waiting for the last answers"
        ));
        // Past this, a call still without its answer has none within the bound.
        let give_up = workload.give_up.clone();
        let bound = args.bound() + Duration::from_secs(10);
        let giving_up = tokio::spawn(async move {
            tokio::time::sleep(bound).await;
            give_up.cancel();
        });
        giving_up.abort_handle()
    };
    let ((), giving_up) = tokio::join!(clients, faults);
    giving_up.abort();
    ticker.abort();
    let ended_ms = started.elapsed().as_millis() as u64;
    let record = std::mem::take(&mut *record.lock().unwrap());
    let calls = std::mem::take(&mut *workload.calls.lock().unwrap());
    progress(format_args!(
        "{} calls answered; asking Temporal what is still open",
        calls.len()
    ));
    let connection =
        durable_mcp::temporal::connect_to(&topology.address, "durable-mcp-chaos").await?;
    let open =
        observe::wait_until_nothing_open(&connection, &topology.namespace, OPEN_WORK_WITHIN).await;
    let mut memory = Vec::new();
    for ((role, start), (_, pid)) in memory_start.into_iter().zip(topology.processes().await) {
        let end = observe::rss_mib(pid).unwrap_or(0.0);
        memory.push(history::Memory {
            role,
            start_mib: start,
            end_mib: end,
        });
    }
    let direct = observe::direct_results(&calls, &topology.dir).await;
    let history = History {
        runs: observe::runs(&topology.ledger),
        at_most_once: vec!["h_stamp".into(), "s_stamp".into()],
        direct,
        open,
        memory,
        bound_ms: args.bound().as_millis() as u64,
        ended_ms,
        faults: record.faults,
        calls,
    };
    Ok(build_report(args, seed, plan, record.skipped, history))
}

/// The report of a finished run.
fn build_report(
    args: &ChaosArgs,
    seed: u64,
    plan: Vec<schedule::Planned>,
    skipped: Vec<(schedule::Planned, String)>,
    history: History,
) -> ChaosReport {
    let verdicts = checker::check(&history);
    let failures = |check: &str| {
        verdicts
            .iter()
            .find(|v| v.check == check)
            .map_or(0, |v| v.failures.len())
    };
    ChaosReport {
        seed,
        replay: args.replay(seed),
        machine: crate::load::machine(),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        duration_s: args.duration().as_secs_f64(),
        concurrency: args.concurrency(),
        overlapping: schedule::overlapping(&plan),
        schedule: plan,
        skipped,
        outcomes: report::outcomes(&history.calls),
        lost: failures("nothing-lost")
            + history
                .calls
                .iter()
                .filter(|c| c.end == End::Unanswered)
                .count(),
        duplicated: failures("at-most-once"),
        recovery: report::recoveries(&history.faults, &history.calls),
        throughput: report::throughput(&history.calls, &history.faults, history.ended_ms),
        checks: report::checks_json(&verdicts),
        history,
    }
}

/// A progress line every 10 s while the run goes on.
async fn tick(
    workload: Arc<workload::Workload>,
    record: Arc<Mutex<nemesis::Record>>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (n, ok, unknown, other) = {
            let calls = workload.calls.lock().unwrap();
            let ok = calls.iter().filter(|c| c.end == End::Ok).count();
            let unknown = calls
                .iter()
                .filter(|c| matches!(c.end, End::Unknown { .. }))
                .count();
            (calls.len(), ok, unknown, calls.len() - ok - unknown)
        };
        let (faults, skipped) = {
            let r = record.lock().unwrap();
            (r.faults.len(), r.skipped.len())
        };
        progress(format_args!(
            "{n} calls ({ok} ok, {unknown} unknown, {other} other), {:.1} calls/s; {faults} \
             faults applied, {skipped} skipped",
            n as f64 / started.elapsed().as_secs_f64()
        ));
    }
}
