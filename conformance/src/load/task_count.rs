//! How the connector grows with MCP tasks in flight (R-CNF-18): `--scaling tasks` runs the
//! connector-memory measurement (R-CNF-16, [`super::tasks`]) with 1,000 and then 10,000 calls
//! opened at once, each with a connector of its own, every task followed to its end; the
//! connector's `VmRSS` with the tasks in flight is charted and judged.

use std::{fmt::Write as _, path::Path};

use crate::{fixtures::Ledger, harness::Slice};

use super::tasks::{self, TasksRun};

/// The task counts measured.
pub const COUNTS: [usize; 2] = [1_000, 10_000];

/// The task counts measured with `--short`.
pub const SHORT_COUNTS: [usize; 2] = [tasks::SHORT_TASKS, 4 * tasks::SHORT_TASKS];

/// One task count: its run, or why it failed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TaskCountPoint {
    pub tasks: usize,
    pub run: Option<TasksRun>,
    pub error: Option<String>,
}

impl TaskCountPoint {
    /// No task lost or run twice (a failed count says nothing either way).
    pub fn clean(&self) -> bool {
        self.run
            .as_ref()
            .is_none_or(|r| r.tally.lost == 0 && r.tally.duplicated == 0)
    }
}

/// Every count in turn on the full path's `slice`.
pub async fn run(
    slice: &Slice,
    counts: &[usize],
    prefix: &str,
    ledger: &Ledger,
    dir: &Path,
) -> Vec<TaskCountPoint> {
    let mut points = Vec::new();
    for &n in counts {
        let at = dir.join(format!("tasks-{n}"));
        let _ = std::fs::create_dir_all(&at);
        let prefix = format!("{prefix}{n}-");
        let point = match tasks::run(slice, n, &prefix, ledger, &at).await {
            Ok(run) => TaskCountPoint {
                tasks: n,
                run: Some(run),
                error: None,
            },
            Err(e) => TaskCountPoint {
                tasks: n,
                run: None,
                error: Some(format!("{e:#}")),
            },
        };
        eprint!("load: {}", line(&point));
        points.push(point);
    }
    points
}

/// One count's figures, or its failure.
fn line(p: &TaskCountPoint) -> String {
    match (&p.run, &p.error) {
        (Some(r), _) => format!(
            "{:>6} tasks: {} became tasks in {:.1} s; connector VmRSS idle {:.1} MiB, in flight {:.1} MiB (VmHWM {:.1}); {} cancelled, {} completed; {} errors, {} lost, {} duplicated\n",
            p.tasks,
            r.created,
            r.open_s,
            r.idle_rss_mib,
            r.in_flight_rss_mib,
            r.hwm_mib,
            r.cancelled,
            r.completed,
            r.tally.errors,
            r.tally.lost,
            r.tally.duplicated
        ),
        (None, e) => format!(
            "{:>6} tasks: failed: {}\n",
            p.tasks,
            e.as_deref().unwrap_or("no figures")
        ),
    }
}

/// Why the section has no peer row (R-CNF-18).
pub const NO_PEER: &str = "peer: no row: temporalio-mcp serves no MCP tasks (its caller is a \
    Workflow, not an MCP client), so there is no connector memory to compare";

/// The task-count section: in-flight `VmRSS` as a chart, the verdicts (on the resident set and
/// on its growth over idle), then each count's figures.
pub fn render(points: &[TaskCountPoint]) -> String {
    use super::linearity::verdict;
    let mut out = String::from(
        "\nTASKS IN FLIGHT (a connector of its own per count; every task followed to its end)\n",
    );
    out.push_str(NO_PEER);
    out.push_str("\nconnector VmRSS with the tasks in flight:\n");
    let ran: Vec<(usize, &TasksRun)> = points
        .iter()
        .filter_map(|p| p.run.as_ref().map(|r| (p.tasks, r)))
        .collect();
    let labels: Vec<String> = ran.iter().map(|(n, _)| format!("{n} tasks")).collect();
    let chart: Vec<(String, f64)> = (labels.iter().cloned())
        .zip(ran.iter().map(|(_, r)| r.in_flight_rss_mib))
        .collect();
    out.push_str(&super::scaling::chart(&chart, "MiB", 40));
    let curve = |f: fn(&TasksRun) -> f64| -> Vec<(f64, f64)> {
        ran.iter().map(|(n, r)| (*n as f64, f(r))).collect()
    };
    let _ = write!(
        out,
        "{}{}",
        verdict("VmRSS", &curve(|r| r.in_flight_rss_mib), &labels, 1.0),
        verdict(
            "VmRSS over idle",
            &curve(|r| r.in_flight_rss_mib - r.idle_rss_mib),
            &labels,
            1.0
        )
    );
    for p in points {
        out.push_str(&line(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(tasks: usize, idle: f64, in_flight: f64, lost: usize) -> TaskCountPoint {
        let mut run = TasksRun {
            tasks,
            created: tasks,
            idle_rss_mib: idle,
            in_flight_rss_mib: in_flight,
            cancelled: tasks,
            ..TasksRun::default()
        };
        run.tally.lost = lost;
        TaskCountPoint {
            tasks,
            run: Some(run),
            error: None,
        }
    }

    #[test]
    fn the_task_count_section_charts_memory_judges_growth_and_names_losses() {
        let text = render(&[
            ran(1_000, 18.8, 79.3, 0),
            ran(10_000, 18.8, 1_500.0, 2),
            TaskCountPoint {
                tasks: 20_000,
                run: None,
                error: Some("the connector exited".into()),
            },
        ]);
        assert!(
            text.contains(NO_PEER),
            "the section says why no peer row:\n{text}"
        );
        for part in [
            "TASKS IN FLIGHT",
            "10000 tasks |",
            "VmRSS over idle: grows faster than linearly: 1000 tasks to 10000 tasks",
            "  1000 tasks: 1000 became tasks",
            "0 errors, 2 lost, 0 duplicated",
            " 20000 tasks: failed: the connector exited",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        assert!(!text.contains("20000 tasks |"), "{text}");
    }

    #[test]
    fn a_count_that_lost_a_task_is_not_clean() {
        assert!(ran(50, 1.0, 2.0, 0).clean());
        assert!(!ran(50, 1.0, 2.0, 1).clean());
        assert!(TaskCountPoint::default().clean());
    }
}
