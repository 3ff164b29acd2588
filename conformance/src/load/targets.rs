//! The inline path's rows (R-PRX-30) beside the Activity path and the peer: its ratios, and the
//! targets it and the default configuration are measured against, each met or missed, a miss
//! with the counters that explain it; and the Activity path against an earlier run (R-CNF-17).

use std::fmt::Write as _;

use super::{
    metrics::Counters,
    paths::PathKind,
    report::{LoadReport, Row, Verdict, ratio},
};

/// Frontend RPCs per inline call, at most.
pub const MAX_INLINE_RPCS: f64 = 5.0;
/// The concurrency and least ratio of inline calls/s to the peer's.
pub const THROUGHPUT: (usize, f64) = (64, 1.5);
/// The concurrency and highest ratio of inline p50 to the peer's.
pub const LATENCY: (usize, f64) = (1, 0.5);
/// How much worse than the baseline the Activity path may measure and still count as no worse
/// (run-to-run noise on a shared machine).
pub const BASELINE_SLACK: f64 = 0.10;
/// Frontend RPCs per call of the default configuration (the full path as installed), at most.
pub const MAX_DEFAULT_RPCS: f64 = 8.0;
/// The concurrency and highest ratio of the default configuration's p50 to the peer's.
pub const DEFAULT_LATENCY: (usize, f64) = (1, 0.6);
/// How many more frontend RPCs per call, of any one name, the Activity path may cost than in
/// the baseline: idle polls move by less between runs, an RPC added to every call adds 1.
pub const RPC_GROWTH: f64 = 0.5;

impl Verdict {
    fn judged(target: String, measured: Option<f64>, met: impl Fn(f64) -> bool) -> Self {
        Verdict {
            target,
            measured,
            met: measured.map(met),
            why: None,
        }
    }

    fn explained(mut self, miss: impl FnOnce() -> String, absent: &str) -> Self {
        self.why = match self.met {
            Some(true) => None,
            Some(false) => Some(miss()),
            None => Some(absent.to_owned()),
        };
        self
    }
}

fn row(report: &LoadReport, path: PathKind, concurrency: usize) -> Option<&Row> {
    report
        .rows
        .iter()
        .find(|r| r.path == path && r.concurrency == concurrency)
}

/// The path's row at its highest concurrency (where its server work per call is least blurred
/// by idle polls).
fn busiest(report: &LoadReport, path: PathKind) -> Option<&Row> {
    report
        .rows
        .iter()
        .filter(|r| r.path == path && !r.server_per_call.is_empty())
        .max_by_key(|r| r.concurrency)
}

/// The server's work per call in `r` against `peer`'s, part by part, the part with the highest
/// ratio first: which part of the floor costs the server more than the peer's.
pub fn server_parts(r: &Row, peer: &Row) -> String {
    let part = |row: &Row, name: &str| match name {
        "server CPU ms" => row.cpu_ms_per_call.get("server").copied().unwrap_or(0.0),
        prefix => Counters(row.server_per_call.clone()).total(&format!("{prefix}/")),
    };
    let mut parts: Vec<(f64, String)> = ["server CPU ms", "frontend", "history", "matching"]
        .into_iter()
        .chain(["persistence"])
        .map(|name| {
            let (ours, theirs) = (part(r, name), part(peer, name));
            let x = ratio(Some(ours), Some(theirs)).unwrap_or(f64::INFINITY);
            (x, format!("{name} {ours:.1} vs {theirs:.1} ({x:.2}x)"))
        })
        .collect();
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    parts
        .into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An earlier run's `--json` file, as far as `--baseline` reads it.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Baseline {
    /// `release`, or `debug (...)`: time is judged only against a run of the same kind.
    #[serde(default)]
    pub build: String,
    pub rows: Vec<Row>,
}

/// Reads `--baseline FILE`.
pub fn read_baseline(path: &std::path::Path) -> anyhow::Result<Baseline> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--baseline {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "--baseline {}: not a load run's --json file ({e})",
            path.display()
        )
    })
}

/// Every target, in the order: the inline path's, the default configuration's, then
/// the Activity path against `baseline` (an earlier run), by its RPCs and by its time.
pub fn verdicts(report: &LoadReport, baseline: Option<&Baseline>) -> Vec<Verdict> {
    let mut all = inline_verdicts(report);
    all.extend(default_verdicts(report));
    all.push(rpcs_no_more(report, baseline));
    all.push(no_worse(report, baseline));
    all
}

/// The inline path's targets.
fn inline_verdicts(report: &LoadReport) -> Vec<Verdict> {
    let absent = "the inline path did not run (or the server's counters were not read)";
    path_verdicts(
        report,
        (PathKind::InlineHttp, "inline", absent),
        MAX_INLINE_RPCS,
        LATENCY,
    )
}

/// The default configuration's targets: the full path over HTTP as installed, no option set,
/// against the peer (the "performance by default").
fn default_verdicts(report: &LoadReport) -> Vec<Verdict> {
    let absent = "the full path over HTTP did not run (or the server's counters were not read)";
    path_verdicts(
        report,
        (PathKind::FullHttp, "default", absent),
        MAX_DEFAULT_RPCS,
        DEFAULT_LATENCY,
    )
}

/// `path`'s targets, named `name`: at most `max_rpcs` frontend RPCs per call at its highest
/// concurrency, then [`peer_verdicts`]; `absent` says why the RPCs were not measured.
fn path_verdicts(
    report: &LoadReport,
    (path, name, absent): (PathKind, &str, &str),
    max_rpcs: f64,
    latency: (usize, f64),
) -> Vec<Verdict> {
    let busiest = busiest(report, path);
    let rpcs = Verdict::judged(
        format!("{name} frontend RPCs per call <= {max_rpcs}"),
        busiest.map(Row::frontend_rpcs),
        |v| v <= max_rpcs,
    )
    .explained(
        || {
            format!(
                "frontend per call: {}",
                busiest.map(Row::frontend_ops).unwrap_or_default()
            )
        },
        absent,
    );
    let (throughput, latency) = peer_verdicts(report, (path, name), latency);
    vec![rpcs, throughput, latency]
}

/// A path's calls/s at [`THROUGHPUT`]'s concurrency and its p50 at `latency`'s, over the peer's.
fn peer_verdicts(
    report: &LoadReport,
    (path, name): (PathKind, &str),
    (c1, most): (usize, f64),
) -> (Verdict, Verdict) {
    let (c, least) = THROUGHPUT;
    let throughput = against_peer(
        report,
        (path, c),
        (
            format!("{name} calls/s at c={c} >= {least}x the peer's"),
            |r| r.calls_per_s,
        ),
        |v| v >= least,
        |o, p| format!("per call, {name} vs peer: {}", server_parts(o, p)),
    );
    let latency = against_peer(
        report,
        (path, c1),
        (format!("{name} p50 at c={c1} <= {most}x the peer's"), |r| {
            r.p50_ms
        }),
        |v| v <= most,
        latency_parts,
    );
    (throughput, latency)
}

/// The target `name`: `path`'s row's `figure` over the peer's at concurrency `c`, judged by
/// `met`, a miss explained by `why` of the two rows.
fn against_peer(
    report: &LoadReport,
    (path, c): (PathKind, usize),
    (name, figure): (String, fn(&Row) -> f64),
    met: impl Fn(f64) -> bool,
    why: impl FnOnce(&Row, &Row) -> String,
) -> Verdict {
    let (ours, peer) = (row(report, path, c), row(report, PathKind::Peer, c));
    let which = match path {
        PathKind::InlineHttp => "inline",
        _ => "full/http",
    };
    Verdict::judged(name, ratio(ours.map(figure), peer.map(figure)), met).explained(
        || match (ours, peer) {
            (Some(o), Some(p)) => why(o, p),
            _ => String::new(),
        },
        &format!("needs the {which} and peer rows at c={c}"),
    )
}

/// Why a c=1 call takes as long as it does: its round trips to the server and each process's
/// CPU, beside the peer's.
fn latency_parts(o: &Row, p: &Row) -> String {
    let cpu = |r: &Row| {
        r.cpu_ms_per_call
            .iter()
            .filter(|(k, _)| *k != "driver")
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "p50 {:.1} vs {:.1} ms; frontend RPCs per call {:.1} vs {:.1} ({}); CPU ms per call {} vs {}",
        o.p50_ms,
        p.p50_ms,
        o.frontend_rpcs(),
        p.frontend_rpcs(),
        o.frontend_ops(),
        cpu(o),
        cpu(p)
    )
}

fn not_judged(target: String, why: &str) -> Verdict {
    Verdict {
        target,
        measured: None,
        met: None,
        why: Some(format!("not judged: {why}")),
    }
}

const GIVE_A_BASELINE: &str = "give --baseline FILE (an earlier run's --json)";

/// The progress look-ups of R-CON-26, whose count per call grows with how long calls wait (the
/// machine's load), not with what a call needs: left out of [`rpcs_no_more`].
fn grows_with_queueing(rpc: &str) -> bool {
    rpc.starts_with("Describe")
}

/// The Activity path (full path over HTTP) costs no more frontend RPCs per call, of any one
/// name, than in the baseline (within [`RPC_GROWTH`]), at the highest concurrency both ran
/// with the server's counters. Counts, not time: a debug run on a busy machine is judged
/// against a quiet release run as well, so CI's short run catches an RPC added to every call.
pub fn rpcs_no_more(report: &LoadReport, baseline: Option<&Baseline>) -> Verdict {
    let target = format!(
        "Activity path frontend RPCs per call, by RPC, no more than the baseline's (+{RPC_GROWTH}; progress look-ups aside)"
    );
    let Some(baseline) = baseline else {
        return not_judged(target, GIVE_A_BASELINE);
    };
    let counted = |rows: &[Row]| {
        rows.iter()
            .filter(|r| r.path == PathKind::FullHttp && !r.server_per_call.is_empty())
            .map(|r| r.concurrency)
            .collect::<Vec<_>>()
    };
    let before_levels = counted(&baseline.rows);
    let common = counted(&report.rows)
        .into_iter()
        .filter(|c| before_levels.contains(c))
        .max();
    let pair = common.and_then(|c| {
        let before = baseline
            .rows
            .iter()
            .find(|r| r.path == PathKind::FullHttp && r.concurrency == c)?;
        Some((c, row(report, PathKind::FullHttp, c)?, before))
    });
    let Some((c, now, before)) = pair else {
        return not_judged(
            target,
            "the baseline and this run share no full-path concurrency with server counters",
        );
    };
    let per_call = |r: &Row, name: &str| r.server_per_call.get(name).copied().unwrap_or(0.0);
    let worst = now
        .server_per_call
        .keys()
        .filter_map(|k| Some((k, k.strip_prefix("frontend/")?)))
        .filter(|(_, rpc)| !grows_with_queueing(rpc))
        .map(|(k, rpc)| {
            let (is, was) = (per_call(now, k), per_call(before, k));
            (
                is - was,
                format!("c={c} {rpc}: {was:.2} -> {is:.2} per call"),
            )
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let measured = worst.as_ref().map(|(g, _)| g.max(0.0));
    let why = worst.map(|(_, t)| t).unwrap_or_default();
    Verdict::judged(target, measured, |g| g <= RPC_GROWTH).explained(|| why, "")
}

/// The kind of build a run's `build` names: `release` or `debug`.
fn build_kind(build: &str) -> &str {
    build.split_whitespace().next().unwrap_or_default()
}

/// The Activity path (full path over HTTP) against an earlier run's: calls/s and p50 at every
/// concurrency both ran, within [`BASELINE_SLACK`]; only against a run of the same kind of
/// build (a debug run's time is no measure of a release one's).
pub fn no_worse(report: &LoadReport, baseline: Option<&Baseline>) -> Verdict {
    let target = format!(
        "Activity path no worse than the baseline (calls/s and p50 within {:.0}%)",
        BASELINE_SLACK * 100.0
    );
    let Some(baseline) = baseline else {
        return not_judged(target, GIVE_A_BASELINE);
    };
    let (now_kind, then_kind) = (build_kind(report.build), build_kind(&baseline.build));
    if now_kind != then_kind {
        let why = format!("this is a {now_kind} run and the baseline a {then_kind} one");
        return not_judged(target, &why);
    }
    let mut worst: Option<(f64, String)> = None;
    for before in baseline
        .rows
        .iter()
        .filter(|r| r.path == PathKind::FullHttp)
    {
        let Some(now) = row(report, PathKind::FullHttp, before.concurrency) else {
            continue;
        };
        let c = before.concurrency;
        let slower = ratio(Some(now.p50_ms), Some(before.p50_ms));
        let fewer = ratio(Some(before.calls_per_s), Some(now.calls_per_s));
        for (x, what) in [(slower, "p50"), (fewer, "calls/s")] {
            let Some(x) = x else { continue };
            if worst.as_ref().is_none_or(|(w, _)| x > *w) {
                let text = format!(
                    "c={c} {what}: now p50 {:.1} ms, {:.1} calls/s; before p50 {:.1} ms, {:.1} calls/s; frontend RPCs per call {:.1} vs {:.1}",
                    now.p50_ms,
                    now.calls_per_s,
                    before.p50_ms,
                    before.calls_per_s,
                    now.frontend_rpcs(),
                    before.frontend_rpcs()
                );
                worst = Some((x, text));
            }
        }
    }
    let measured = worst.as_ref().map(|(x, _)| *x);
    let why = worst.as_ref().map(|(_, t)| t.clone()).unwrap_or_default();
    Verdict::judged(target, measured, |x| x <= 1.0 + BASELINE_SLACK).explained(
        || why,
        "the baseline and this run share no full-path concurrency",
    )
}

/// The inline section of the load table: ratios at each concurrency, then the targets (as
/// [`verdicts`] judged them when the run ended).
pub fn render(report: &LoadReport) -> String {
    let mut out = String::new();
    if report.rows.iter().any(|r| r.path == PathKind::InlineHttp) {
        out.push_str(&render_inline(report));
    }
    if report.targets.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nTARGETS");
    for v in report.targets.iter().cloned() {
        let state = match v.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        let measured = v.measured.map_or(String::new(), |m| format!(" ({m:.2})"));
        let why = v.why.map_or(String::new(), |w| format!(": {w}"));
        let _ = writeln!(out, "{state:<12} {}{measured}{why}", v.target);
    }
    out
}

/// The inline path's ratios at each concurrency.
fn render_inline(report: &LoadReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nINLINE RATIOS (inline over HTTP e / Activity path c, e / peer d; lower is better except calls/s)"
    );
    let _ = writeln!(
        out,
        "{:>4}  {:>8} {:>8} {:>8} {:>8} {:>12} {:>8} {:>8} {:>8}",
        "C",
        "p50 e/c",
        "p50 e/d",
        "p99 e/d",
        "CPU e/d",
        "calls/s e/d",
        "RPC e/d",
        "DB e/d",
        "RPC e/c"
    );
    let mut levels: Vec<usize> = report.rows.iter().map(|r| r.concurrency).collect();
    levels.sort();
    levels.dedup();
    for c in levels {
        let Some(e) = row(report, PathKind::InlineHttp, c) else {
            continue;
        };
        let (full, peer) = (
            row(report, PathKind::FullHttp, c),
            row(report, PathKind::Peer, c),
        );
        let x = |f: fn(&Row) -> f64, other: Option<&Row>| {
            ratio(Some(f(e)), other.map(f)).map_or("-".into(), |v| format!("{v:.2}"))
        };
        let _ = writeln!(
            out,
            "{:>4}  {:>8} {:>8} {:>8} {:>8} {:>12} {:>8} {:>8} {:>8}",
            c,
            x(|r| r.p50_ms, full),
            x(|r| r.p50_ms, peer),
            x(|r| r.p99_ms, peer),
            x(Row::cpu_total, peer),
            x(|r| r.calls_per_s, peer),
            x(Row::frontend_rpcs, peer),
            x(Row::persistence_ops, peer),
            x(Row::frontend_rpcs, full),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn row(path: PathKind, c: usize, p50: f64, per_s: f64, counters: &[(&str, f64)]) -> Row {
        Row {
            path,
            label: path.label().into(),
            concurrency: c,
            calls: 100,
            errors: 0,
            lost: 0,
            duplicated: 0,
            rerun: 0,
            p50_ms: p50,
            p90_ms: p50,
            p99_ms: 2.0 * p50,
            calls_per_s: per_s,
            cpu_ms_per_call: BTreeMap::from([("server".into(), 4.0), ("proxy".into(), 1.0)]),
            peak_rss_mib: BTreeMap::new(),
            server_per_call: counters.iter().map(|(k, v)| ((*k).into(), *v)).collect(),
            first_error: None,
        }
    }

    fn report(rows: Vec<Row>) -> LoadReport {
        LoadReport {
            build: "release",
            rows,
            ..LoadReport::default()
        }
    }

    const INLINE: &[(&str, f64)] = &[
        ("frontend/StartNexusOperationExecution", 1.0),
        ("frontend/PollNexusTaskQueue", 1.0),
        ("frontend/RespondNexusTaskCompleted", 1.0),
        ("matching/PollNexusTaskQueue", 1.0),
        ("persistence/CreateWorkflowExecution", 3.0),
    ];
    const PEER: &[(&str, f64)] = &[
        ("frontend/StartWorkflowExecution", 7.0),
        ("matching/AddWorkflowTask", 4.7),
        ("persistence/UpdateWorkflowExecution", 21.3),
    ];

    #[test]
    fn targets_are_met_or_missed_and_a_miss_names_its_counters() {
        let many_polls = [INLINE, &[("frontend/PollNexusTaskQueue", 5.0)]].concat();
        let rows = vec![
            row(PathKind::InlineHttp, 1, 10.0, 90.0, INLINE),
            row(PathKind::Peer, 1, 30.0, 30.0, PEER),
            row(PathKind::InlineHttp, 64, 50.0, 300.0, &many_polls),
            row(PathKind::Peer, 64, 100.0, 250.0, PEER),
        ];
        let got = verdicts(&report(rows), None);
        assert_eq!(got.len(), 8);
        let [rpcs, throughput, latency, .., by_rpc, baseline] = &got[..] else {
            unreachable!()
        };
        assert_eq!(by_rpc.met, None);
        // The busiest row counts (its polls replace the 1.0): 2 + 5.
        assert_eq!(rpcs.met, Some(false));
        assert_eq!(rpcs.measured, Some(7.0));
        let why = rpcs.why.as_deref().unwrap();
        assert!(
            why.starts_with("frontend per call: PollNexusTaskQueue 5.00"),
            "{why}"
        );
        assert_eq!(throughput.met, Some(false), "300 / 250 < 1.5");
        let why = throughput.why.as_deref().unwrap();
        assert!(why.contains("frontend 7.0 vs 7.0 (1.00x)"), "{why}");
        assert!(why.contains("server CPU ms 4.0 vs 4.0"), "{why}");
        assert_eq!(latency.met, Some(true), "10 / 30 <= 0.5");
        assert_eq!(latency.why, None);
        assert_eq!(baseline.met, None);
        assert!(baseline.why.as_deref().unwrap().contains("--baseline FILE"));
    }

    #[test]
    fn without_the_peer_a_target_is_not_measured_and_says_what_it_needs() {
        let got = verdicts(
            &report(vec![row(PathKind::InlineHttp, 1, 10.0, 90.0, INLINE)]),
            None,
        );
        assert_eq!(got[0].met, Some(true), "3 RPCs per call");
        assert_eq!(got[1].met, None);
        assert_eq!(
            got[1].why.as_deref(),
            Some("needs the inline and peer rows at c=64")
        );
    }

    #[test]
    fn the_activity_path_is_judged_against_the_baseline_with_slack() {
        let before = Baseline {
            build: "release".into(),
            rows: vec![row(PathKind::FullHttp, 16, 20.0, 100.0, INLINE)],
        };
        let now = |p50, per_s| report(vec![row(PathKind::FullHttp, 16, p50, per_s, INLINE)]);
        let v = no_worse(&now(21.0, 95.0), Some(&before));
        assert_eq!(v.met, Some(true), "{v:?}");
        let v = no_worse(&now(20.0, 80.0), Some(&before));
        assert_eq!(v.met, Some(false));
        assert_eq!(v.measured, Some(1.25));
        assert!(
            v.why.as_deref().unwrap().starts_with("c=16 calls/s"),
            "{v:?}"
        );
        let v = no_worse(&report(vec![]), Some(&before));
        assert_eq!(v.met, None);
        // A debug run's time is no measure of a release one's.
        let mut debug = now(200.0, 10.0);
        debug.build = "debug (figures are not representative: use --release)";
        let v = no_worse(&debug, Some(&before));
        assert_eq!(v.met, None);
        assert_eq!(
            v.why.as_deref(),
            Some("not judged: this is a debug run and the baseline a release one")
        );
    }

    /// The Activity path's frontend RPCs, one per step of a call.
    const ACTIVITY: &[(&str, f64)] = &[
        ("frontend/StartNexusOperationExecution", 1.0),
        ("frontend/PollNexusOperationExecution", 1.0),
        ("frontend/PollNexusTaskQueue", 1.0),
        ("frontend/StartNexusOperation", 1.0),
        ("frontend/RespondNexusTaskCompleted", 1.0),
        ("frontend/StartActivityExecution", 1.0),
        ("frontend/PollActivityTaskQueue", 1.0),
        ("frontend/RespondActivityTaskCompleted", 1.0),
        ("frontend/CompleteNexusOperation", 1.0),
    ];

    #[test]
    fn the_default_configuration_is_judged_against_the_peer() {
        let rows = vec![
            row(PathKind::FullHttp, 1, 20.0, 50.0, ACTIVITY),
            row(PathKind::Peer, 1, 30.0, 30.0, PEER),
            row(PathKind::FullHttp, 64, 600.0, 60.0, ACTIVITY),
            row(PathKind::Peer, 64, 500.0, 50.0, PEER),
        ];
        let got = verdicts(&report(rows), None);
        let [rpcs, throughput, latency] = &got[3..6] else {
            unreachable!()
        };
        assert_eq!(rpcs.target, "default frontend RPCs per call <= 8");
        assert_eq!((rpcs.measured, rpcs.met), (Some(9.0), Some(false)));
        assert!(
            rpcs.why
                .as_deref()
                .unwrap()
                .contains("StartActivityExecution 1.00"),
            "{rpcs:?}"
        );
        assert_eq!(throughput.met, Some(false), "60 / 50 < 1.5");
        assert!(throughput.target.starts_with("default calls/s at c=64"));
        assert!(
            throughput
                .why
                .as_deref()
                .unwrap()
                .contains("default vs peer")
        );
        assert_eq!(latency.target, "default p50 at c=1 <= 0.6x the peer's");
        assert_eq!(latency.met, Some(false), "20 / 30 > 0.6");
        // The inline path did not run: its targets say what they need.
        assert_eq!(got[1].met, None);
        let alone = verdicts(
            &report(vec![row(PathKind::FullHttp, 1, 9.0, 9.0, ACTIVITY)]),
            None,
        );
        assert_eq!(
            alone[4].why.as_deref(),
            Some("needs the full/http and peer rows at c=64")
        );
    }

    #[test]
    fn the_activity_paths_rpcs_are_judged_against_the_baseline_by_name_whatever_the_build() {
        let before = Baseline {
            build: "release".into(),
            rows: vec![
                row(PathKind::FullHttp, 16, 20.0, 100.0, ACTIVITY),
                row(PathKind::FullHttp, 64, 20.0, 100.0, ACTIVITY),
            ],
        };
        let mut now = report(vec![row(PathKind::FullHttp, 16, 900.0, 5.0, ACTIVITY)]);
        now.build = "debug (figures are not representative: use --release)";
        let v = rpcs_no_more(&now, Some(&before));
        assert_eq!((v.measured, v.met), (Some(0.0), Some(true)), "{v:?}");
        // Progress look-ups grow with queueing, not with what a call needs: left out.
        let queued = [ACTIVITY, &[("frontend/DescribeActivityExecution", 2.0)]].concat();
        now.rows = vec![row(PathKind::FullHttp, 16, 900.0, 5.0, &queued)];
        assert_eq!(rpcs_no_more(&now, Some(&before)).met, Some(true));
        // An RPC added to every call is caught and named.
        let more = [
            &queued[..],
            &[("frontend/GetWorkflowExecutionHistory", 1.0)],
        ]
        .concat();
        now.rows = vec![row(PathKind::FullHttp, 16, 900.0, 5.0, &more)];
        let v = rpcs_no_more(&now, Some(&before));
        assert_eq!((v.measured, v.met), (Some(1.0), Some(false)));
        assert_eq!(
            v.why.as_deref(),
            Some("c=16 GetWorkflowExecutionHistory: 0.00 -> 1.00 per call")
        );
        assert_eq!(rpcs_no_more(&now, None).met, None);
        now.rows.clear();
        let v = rpcs_no_more(&now, Some(&before));
        assert!(v.why.unwrap().contains("share no full-path concurrency"));
    }

    #[test]
    fn the_inline_section_shows_ratios_and_targets() {
        let mut r = report(vec![
            row(PathKind::FullHttp, 1, 20.0, 45.0, INLINE),
            row(PathKind::InlineHttp, 1, 10.0, 90.0, INLINE),
            row(PathKind::Peer, 1, 40.0, 25.0, PEER),
        ]);
        r.targets = verdicts(&r, None);
        let text = render(&r);
        for part in [
            "INLINE RATIOS",
            "   1      0.50     0.25     0.25     1.00         3.60     0.43     0.14     1.00",
            "TARGETS",
            "met          inline frontend RPCs per call <= 5 (3.00)",
            "not measured inline calls/s at c=64",
            "met          inline p50 at c=1 <= 0.5x the peer's (0.25)",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        assert_eq!(render(&report(vec![])), "", "no inline rows, no section");
    }

    /// The release run README's figures come from is kept for `--baseline` (R-CNF-17).
    #[test]
    fn the_kept_baseline_is_a_load_runs_json_with_the_activity_path() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/baseline/load.json");
        let baseline = read_baseline(&path).unwrap();
        assert_eq!(build_kind(&baseline.build), "release");
        assert!(
            baseline.rows.iter().any(|r| r.path == PathKind::FullHttp),
            "no full/http row in {}",
            path.display()
        );
    }

    #[test]
    fn a_baseline_is_read_from_a_json_report_and_a_bad_file_names_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("before.json");
        let mut r = report(vec![row(PathKind::FullHttp, 16, 20.0, 100.0, INLINE)]);
        r.targets = verdicts(&r, None);
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        let rows = read_baseline(&path).unwrap().rows;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].path, PathKind::FullHttp);
        std::fs::write(&path, "{}").unwrap();
        let err = read_baseline(&path).unwrap_err().to_string();
        assert!(
            err.starts_with("--baseline ") && err.contains("--json"),
            "{err}"
        );
    }
}
