//! The load table: one row per path and concurrency, then the ratios the targets are stated
//! in, then what the server did per call. Also written as JSON for tools.

use std::{collections::BTreeMap, fmt::Write as _};

use super::{metrics::Counters, paths::PathKind, tasks::TasksRun};

/// One path at one concurrency.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub path: PathKind,
    pub label: String,
    pub concurrency: usize,
    pub calls: usize,
    /// Calls that did not get their own answer: an error was reported, someone else's answer
    /// came, or nothing came within the driver's limit.
    pub errors: usize,
    /// Calls the upstream never ran although no error was reported for them (always 0 for the
    /// floor, whose work never reaches the upstream's ledger).
    pub lost: usize,
    /// Calls the upstream ran more than once (from its invocation ledger) where that is not
    /// allowed: they fail the run.
    pub duplicated: usize,
    /// Calls the upstream ran more than once where R-PRX-30 allows it (inline-path rows): the
    /// server re-sent an inline start. Reported, never a failure.
    #[serde(default)]
    pub rerun: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub calls_per_s: f64,
    /// CPU time per successful call, by process role.
    pub cpu_ms_per_call: BTreeMap<String, f64>,
    /// Peak resident set so far, by process role, in MiB.
    pub peak_rss_mib: BTreeMap<String, f64>,
    /// The dev server's RPC and persistence counters per call (`service/operation`).
    pub server_per_call: BTreeMap<String, f64>,
    pub first_error: Option<String>,
}

impl Row {
    /// CPU per call of every process but the load driver's.
    pub fn cpu_total(&self) -> f64 {
        self.cpu_ms_per_call
            .iter()
            .filter(|(k, _)| *k != "driver")
            .map(|(_, v)| v)
            .sum()
    }

    /// Frontend RPCs per call (what clients and workers asked the server).
    pub fn frontend_rpcs(&self) -> f64 {
        Counters(self.server_per_call.clone()).total("frontend/")
    }

    /// The frontend RPCs per call by name, largest first (`Op 1.00, ...`).
    pub fn frontend_ops(&self) -> String {
        let mut ops: Vec<(&String, &f64)> = self
            .server_per_call
            .iter()
            .filter(|(k, v)| k.starts_with("frontend/") && **v >= 0.05)
            .collect();
        ops.sort_by(|a, b| b.1.total_cmp(a.1));
        ops.iter()
            .map(|(k, v)| format!("{} {v:.2}", k.trim_start_matches("frontend/")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Persistence operations per call (the server's database work).
    pub fn persistence_ops(&self) -> f64 {
        Counters(self.server_per_call.clone()).total("persistence/")
    }
}

/// A whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    pub machine: String,
    pub build: &'static str,
    pub temporal: String,
    pub command: String,
    pub rows: Vec<Row>,
    /// Paths that did not run, with the reason.
    pub skipped: Vec<(PathKind, String)>,
    /// The `--count` run (full path over HTTP), if asked for.
    pub count_run: Option<Row>,
    /// The connector's memory idle and with `--tasks-in-flight` MCP tasks (R-CNF-16).
    pub tasks_run: Option<TasksRun>,
    /// Why the tasks run did not finish, when it did not.
    pub tasks_failed: Option<String>,
    /// The targets of the inline path and of the default configuration, and the Activity path
    /// against `--baseline`, met or missed (R-CNF-17); empty when neither path ran.
    pub targets: Vec<Verdict>,
    /// `--scaling sizes`: the full path's cost by result size (R-CNF-18).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub result_sizes: Vec<super::scaling::SizePoint>,
    /// `--scaling sizes` with the peer: its Workflow's cost by result size (R-CNF-18).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peer_result_sizes: Vec<super::scaling::SizePoint>,
    /// `--scaling tools`: listing latency and proxy memory by tool count (R-CNF-18).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_counts: Vec<super::tool_count::ToolCountPoint>,
    /// `--scaling upstreams`: start-up, listing and proxy memory by upstream count (R-CNF-18).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_counts: Vec<super::upstream_count::UpstreamCountPoint>,
    /// `--scaling tasks`: the connector's memory by MCP tasks in flight (R-CNF-18).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task_counts: Vec<super::task_count::TaskCountPoint>,
    /// How long each path's rows and each section took, in seconds, in the order they ran.
    pub timings: Vec<(String, f64)>,
    /// Sections rendered when the run ended (the inline ratios and targets), printed after the
    /// ratios.
    #[serde(skip)]
    pub sections: Vec<String>,
}

/// One target: what was measured, and whether it met the limit (`None`: not measured).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    pub target: String,
    pub measured: Option<f64>,
    pub met: Option<bool>,
    /// For a miss, the counters that explain it; for an unmeasured target, why.
    pub why: Option<String>,
}

/// `a / b`, or `None` when either is missing or `b` is zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}"))
}

impl LoadReport {
    fn row(&self, path: PathKind, concurrency: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.path == path && r.concurrency == concurrency)
    }

    /// Whether no call was lost or run twice.
    pub fn clean(&self) -> bool {
        self.rows
            .iter()
            .chain(self.count_run.as_ref())
            .all(|r| r.lost == 0 && r.duplicated == 0)
            && self
                .tasks_run
                .as_ref()
                .is_none_or(|t| t.tally.lost == 0 && t.tally.duplicated == 0)
            && self.task_counts.iter().all(|p| p.clean())
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "machine: {}\nbuild: {}    Temporal: {}\ncommand: {}\n",
            self.machine, self.build, self.temporal, self.command
        );
        let _ = writeln!(
            out,
            "{:<15} {:>4} {:>6} {:>4} {:>4} {:>4} {:>5} {:>8} {:>8} {:>8} {:>8}  {:<44} {:>7} {:>7}  PEAK RSS MiB",
            "PATH",
            "C",
            "CALLS",
            "ERR",
            "LOST",
            "DUP",
            "RERUN",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "calls/s",
            "CPU ms/call: total (by process)",
            "RPC/c",
            "DB/c"
        );
        for r in self.rows.iter().chain(self.count_run.as_ref()) {
            let by: Vec<String> = r
                .cpu_ms_per_call
                .iter()
                .filter(|(k, _)| *k != "driver")
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            let rss: Vec<String> = r
                .peak_rss_mib
                .iter()
                .filter(|(k, _)| *k != "driver")
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect();
            let per_call = |v: f64| match r.server_per_call.is_empty() {
                true => "-".to_owned(),
                false => format!("{v:.1}"),
            };
            let _ = writeln!(
                out,
                "{:<15} {:>4} {:>6} {:>4} {:>4} {:>4} {:>5} {:>8.1} {:>8.1} {:>8.1} {:>8.1}  {:<44} {:>7} {:>7}  {}",
                r.label,
                r.concurrency,
                r.calls,
                r.errors,
                r.lost,
                r.duplicated,
                r.rerun,
                r.p50_ms,
                r.p90_ms,
                r.p99_ms,
                r.calls_per_s,
                format!("{:.1} ({})", r.cpu_total(), by.join(", ")),
                per_call(r.frontend_rpcs()),
                per_call(r.persistence_ops()),
                rss.join(", ")
            );
        }
        for (path, reason) in &self.skipped {
            let _ = writeln!(out, "{:<15} skipped: {reason}", path.label());
        }
        let _ = writeln!(
            out,
            "\nRATIOS (full path over HTTP / other; lower is better except calls/s)"
        );
        let _ = writeln!(
            out,
            "{:>4}  {:>10} {:>10}  {:>10} {:>10} {:>12} {:>12}",
            "C", "p50 c/b", "p99 c/b", "p50 c/d", "p99 c/d", "calls/s c/d", "CPU c/d"
        );
        let mut levels: Vec<usize> = self.rows.iter().map(|r| r.concurrency).collect();
        levels.sort();
        levels.dedup();
        for c in levels {
            let full = self.row(PathKind::FullHttp, c);
            let floor = self.row(PathKind::Floor, c);
            let peer = self.row(PathKind::Peer, c);
            let get = |r: Option<&Row>, f: fn(&Row) -> f64| r.map(f);
            let _ = writeln!(
                out,
                "{:>4}  {:>10} {:>10}  {:>10} {:>10} {:>12} {:>12}",
                c,
                fmt_ratio(ratio(get(full, |r| r.p50_ms), get(floor, |r| r.p50_ms))),
                fmt_ratio(ratio(get(full, |r| r.p99_ms), get(floor, |r| r.p99_ms))),
                fmt_ratio(ratio(get(full, |r| r.p50_ms), get(peer, |r| r.p50_ms))),
                fmt_ratio(ratio(get(full, |r| r.p99_ms), get(peer, |r| r.p99_ms))),
                fmt_ratio(ratio(
                    get(full, |r| r.calls_per_s),
                    get(peer, |r| r.calls_per_s)
                )),
                fmt_ratio(ratio(get(full, Row::cpu_total), get(peer, Row::cpu_total))),
            );
        }
        for section in &self.sections {
            out.push_str(section);
        }
        let _ = writeln!(
            out,
            "\nSERVER WORK PER CALL (dev server counters, the path's highest concurrency)"
        );
        for path in PathKind::ALL {
            let Some(r) = self
                .rows
                .iter()
                .filter(|r| r.path == path)
                .max_by_key(|r| r.concurrency)
            else {
                continue;
            };
            if r.server_per_call.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "{:<15} c={:<4} frontend {:.1}, history {:.1}, matching {:.1}, persistence {:.1}\n{:<15} {}",
                r.label,
                r.concurrency,
                r.frontend_rpcs(),
                Counters(r.server_per_call.clone()).total("history/"),
                Counters(r.server_per_call.clone()).total("matching/"),
                r.persistence_ops(),
                "",
                r.frontend_ops()
            );
        }
        if let Some(t) = &self.tasks_run {
            let _ = write!(out, "\n{}", render_tasks(t));
        }
        if let Some(why) = &self.tasks_failed {
            let _ = writeln!(out, "\nCONNECTOR MEMORY: the tasks run failed: {why}");
        }
        let rows: Vec<&Row> = self.rows.iter().chain(self.count_run.as_ref()).collect();
        let _ = writeln!(out, "\n{}", summary(&rows));
        out
    }
}

/// The run's last line: calls, lost, duplicated, and, when the inline path ran, its re-runs,
/// which R-PRX-30 allows and which fail nothing.
fn summary(rows: &[&Row]) -> String {
    let sum = |f: fn(&Row) -> usize| rows.iter().map(|r| f(r)).sum::<usize>();
    let (calls, lost, dup) = (sum(|r| r.calls), sum(|r| r.lost), sum(|r| r.duplicated));
    let mut line = format!("{calls} calls: {lost} lost, {dup} duplicated");
    if rows.iter().any(|r| super::loss::reruns_allowed(r.path)) {
        let rerun = sum(|r| r.rerun);
        let _ = write!(line, ", {rerun} re-run inline (allowed, R-PRX-30)");
    }
    line
}

/// The connector's memory section (R-CNF-16).
fn render_tasks(t: &TasksRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "CONNECTOR MEMORY (full path over HTTP; a connector of its own with {})",
        t.connector_flags.join(" ")
    );
    let _ = writeln!(
        out,
        "idle, after initialize: VmRSS {:.1} MiB",
        t.idle_rss_mib
    );
    let _ = writeln!(
        out,
        "{} calls of a slow tool opened at once by a task-capable client: {} became tasks in {:.1} s, {} in flight when read: VmRSS {:.1} MiB (highest while opening {:.1} MiB, VmHWM {:.1} MiB)",
        t.tasks, t.created, t.open_s, t.in_flight, t.in_flight_rss_mib, t.peak_rss_mib, t.hwm_mib
    );
    let _ = writeln!(
        out,
        "then cancelled: {} cancelled, {} completed in {:.1} s; {} errors, {} lost, {} duplicated{}",
        t.cancelled,
        t.completed,
        t.cancel_s,
        t.tally.errors,
        t.tally.lost,
        t.tally.duplicated,
        t.first_error
            .as_ref()
            .map_or(String::new(), |e| format!(" (first error: {e})"))
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_section_names_flags_figures_and_losses() {
        let t = TasksRun {
            tasks: 50,
            connector_flags: vec!["--max-in-flight".into(), "512".into()],
            idle_rss_mib: 12.3,
            in_flight_rss_mib: 30.0,
            peak_rss_mib: 41.0,
            hwm_mib: 41.5,
            created: 50,
            in_flight: 50,
            cancelled: 50,
            ..TasksRun::default()
        };
        let text = render_tasks(&t);
        for part in [
            "--max-in-flight 512",
            "VmRSS 12.3 MiB",
            "50 in flight when read: VmRSS 30.0 MiB",
            "highest while opening 41.0 MiB",
            "50 cancelled",
            "0 lost, 0 duplicated",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
    }

    fn row(path: PathKind, calls: usize, duplicated: usize, rerun: usize) -> Row {
        Row {
            path,
            label: path.label().into(),
            concurrency: 64,
            calls,
            errors: 0,
            lost: 0,
            duplicated,
            rerun,
            p50_ms: 1.0,
            p90_ms: 1.0,
            p99_ms: 1.0,
            calls_per_s: 1.0,
            cpu_ms_per_call: BTreeMap::new(),
            peak_rss_mib: BTreeMap::new(),
            server_per_call: BTreeMap::new(),
            first_error: None,
        }
    }

    #[test]
    fn an_inline_rerun_is_reported_and_fails_nothing_but_a_duplicate_does() {
        let full = row(PathKind::FullHttp, 1000, 0, 0);
        let inline = row(PathKind::InlineHttp, 1712, 0, 1);
        let report = LoadReport {
            rows: vec![full.clone(), inline.clone()],
            ..LoadReport::default()
        };
        assert!(report.clean());
        let text = report.render();
        assert!(
            text.contains("2712 calls: 0 lost, 0 duplicated, 1 re-run inline (allowed, R-PRX-30)"),
            "{text}"
        );
        // Without the inline path, no re-run is mentioned.
        assert_eq!(summary(&[&full]), "1000 calls: 0 lost, 0 duplicated");
        // A duplicate on any other path still fails the run.
        let report = LoadReport {
            rows: vec![row(PathKind::FullHttp, 1000, 1, 0), inline],
            ..LoadReport::default()
        };
        assert!(!report.clean());
    }

    #[test]
    fn ratios_need_both_sides() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(fmt_ratio(Some(1.234)), "1.23");
        assert_eq!(fmt_ratio(None), "-");
    }
}
