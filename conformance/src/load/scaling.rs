//! How a call's cost grows with its result (R-CNF-18): `--scaling sizes` calls the upstream's
//! `large` tool through the full path over HTTP, and as the peer's Workflow when the peer runs,
//! for results of 1 KB, 100 KB, 1 MB and 4 MB, one caller at a time, and reports latency, CPU
//! per call by process and the processes' peak resident set after each size, or the error of a
//! size the path refuses; drawn as a small text chart and kept in the JSON report.

use std::{collections::BTreeMap, fmt::Write as _, time::Instant};

use rmcp::model::CallToolRequestParams;
use serde_json::json;

use super::{measure, paths::Caller, procstat};

/// The result sizes measured, in bytes.
pub const SIZES: [usize; 4] = [1_000, 100_000, 1_000_000, 4_000_000];

/// An optional section of the load run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scaling {
    /// Result sizes through the full path over HTTP.
    Sizes,
    /// Listing an upstream of 1, 100 and 1,000 tools through a connector.
    Tools,
    /// One proxy fronting 1, 10 and 50 upstreams.
    Upstreams,
    /// A connector with 1,000 and 10,000 MCP tasks in flight.
    Tasks,
}

/// One result size.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SizePoint {
    pub bytes: usize,
    /// Calls made: the count asked for, or fewer when one failed.
    pub calls: usize,
    /// Calls answered with the whole result.
    pub ok: usize,
    pub p50_ms: f64,
    /// CPU per answered call, by process role.
    pub cpu_ms_per_call: BTreeMap<String, f64>,
    /// `VmHWM` after this size (sizes grow, so it is this size's peak or an earlier one's).
    pub peak_rss_mib: BTreeMap<String, f64>,
    /// The first error a call of this size got (a size Temporal refuses says so here).
    pub error: Option<String>,
}

/// Calls `large` with `bytes` once, through our MCP path or as the peer's Workflow; answers the
/// text length it got back.
async fn call_large(caller: &Caller, bytes: usize) -> anyhow::Result<usize> {
    let client = match caller {
        Caller::Mcp(client) => client,
        Caller::Peer {
            connection,
            namespace,
            task_queue,
        } => {
            let id = format!("peer-large-{bytes}-{}", uuid::Uuid::new_v4().simple());
            let ids = (super::peer::LARGE_WORKFLOW, id.as_str());
            let value =
                super::peer::run_workflow(connection, namespace, task_queue, ids, json!(bytes))
                    .await?;
            return value
                .as_str()
                .map(str::len)
                .ok_or_else(|| anyhow::anyhow!("the peer's workflow returned no text"));
        }
        Caller::Floor { .. } => anyhow::bail!("result sizes are measured through an MCP path"),
    };
    let args = json!({"bytes": bytes})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("large").with_arguments(args))
        .await?;
    if result.is_error == Some(true) {
        let text: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.chars().take(300).collect()))
            .collect();
        anyhow::bail!("isError: {}", text.join(" "));
    }
    Ok(result
        .content
        .iter()
        .map(|c| c.as_text().map_or(0, |t| t.text.len()))
        .sum())
}

/// `calls` calls of each size in turn, one at a time; a size's first error ends that size.
pub async fn sizes(
    who: &str,
    caller: &Caller,
    procs: &[(String, u32)],
    calls: usize,
) -> Vec<SizePoint> {
    let mut points = Vec::new();
    for bytes in SIZES {
        let before: Vec<_> = procs
            .iter()
            .map(|(_, pid)| procstat::sample(*pid))
            .collect();
        let mut point = SizePoint {
            bytes,
            ..SizePoint::default()
        };
        let mut latencies = Vec::new();
        for _ in 0..calls {
            point.calls += 1;
            let start = Instant::now();
            match call_large(caller, bytes).await {
                Ok(n) if n == bytes => latencies.push(start.elapsed()),
                Ok(n) => point.error = Some(format!("got {n} bytes of text for {bytes}")),
                Err(e) => point.error = Some(format!("{e:#}")),
            }
            if point.error.is_some() {
                break;
            }
        }
        latencies.sort();
        point.ok = latencies.len();
        point.p50_ms = measure::percentile(&latencies, 50.0).as_secs_f64() * 1000.0;
        for ((role, pid), before) in procs.iter().zip(before) {
            if let (Some(b), Some(a)) = (before, procstat::sample(*pid)) {
                let cpu = (a.cpu - b.cpu).as_secs_f64() * 1000.0 / point.ok.max(1) as f64;
                *point.cpu_ms_per_call.entry(role.clone()).or_insert(0.0) += cpu;
                point
                    .peak_rss_mib
                    .insert(role.clone(), a.peak_rss_kib as f64 / 1024.0);
            }
        }
        super::progress(format_args!(
            "{who} result size {bytes} B: {} of {} answered, p50 {:.1} ms{}",
            point.ok,
            point.calls,
            point.p50_ms,
            error_suffix(point.error.as_deref())
        ));
        points.push(point);
    }
    points
}

/// `, error: E` for a progress line, or nothing.
pub fn error_suffix(error: Option<&str>) -> String {
    error.map_or(String::new(), |e| format!(", error: {e}"))
}

/// A horizontal bar chart: one line per `(label, value)`, bars scaled to the largest value
/// over `width` characters, the value written after the bar.
pub fn chart(points: &[(String, f64)], unit: &str, width: usize) -> String {
    let most = points.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let label_width = points.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in points {
        let n = match most > 0.0 {
            true => ((value / most) * width as f64).round() as usize,
            false => 0,
        };
        let _ = writeln!(
            out,
            "{label:>label_width$} |{:<width$}| {value:.1} {unit}",
            "#".repeat(n)
        );
    }
    out
}

/// A size in the units people say: `1 KB`, `100 KB`, `1 MB`, `4 MB`.
pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1_000_000 => format!("{} MB", b / 1_000_000),
        b if b >= 1_000 => format!("{} KB", b / 1_000),
        b => format!("{b} B"),
    }
}

/// Why the peer has no row in a scaling section that does not measure it (R-CNF-18).
pub const PEER_NOT_IN_SIZES: &str =
    "peer: not measured (add `peer` to --paths to measure it beside ours)";

/// The result-size section: our path's and the peer's p50 as one chart (answered sizes only),
/// a linearity verdict for each, then CPU and peak RSS per size, ours above the peer's, with
/// the refusal of a size either one refused.
pub fn render_sizes(ours: &[SizePoint], peer: &[SizePoint]) -> String {
    let mut out = String::from(
        "\nRESULT SIZE (the upstream's `large` tool, one caller; ours: full path over HTTP, \
         peer: a temporalio-mcp Workflow returning the text)\np50 latency:\n",
    );
    let answered = |points: &[SizePoint], who: &str| -> Vec<(usize, String, f64)> {
        points
            .iter()
            .filter(|p| p.ok > 0)
            .map(|p| (p.bytes, format!("{} {who}", size_label(p.bytes)), p.p50_ms))
            .collect()
    };
    let (ours_bars, peer_bars) = (answered(ours, "ours"), answered(peer, "peer"));
    let mut bars: Vec<&(usize, String, f64)> = ours_bars.iter().chain(&peer_bars).collect();
    bars.sort_by_key(|(bytes, label, _)| (*bytes, !label.ends_with("ours")));
    let bars: Vec<(String, f64)> = bars.iter().map(|(_, l, v)| (l.clone(), *v)).collect();
    out.push_str(&chart(&bars, "ms", 40));
    for (who, points) in [("ours", &ours_bars), ("peer", &peer_bars)] {
        if points.is_empty() {
            continue;
        }
        let curve: Vec<(f64, f64)> = points.iter().map(|(b, _, v)| (*b as f64, *v)).collect();
        let labels: Vec<String> = points.iter().map(|(b, _, _)| size_label(*b)).collect();
        out.push_str(&super::linearity::verdict(
            &format!("p50 ({who})"),
            &curve,
            &labels,
            1.0,
        ));
    }
    let roles = |m: &BTreeMap<String, f64>, digits: usize| {
        m.iter()
            .filter(|(k, _)| *k != "driver")
            .map(|(k, v)| format!("{k} {v:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines: Vec<(usize, &str, &SizePoint)> =
        ours.iter().map(|p| (p.bytes, "ours", p)).collect();
    lines.extend(peer.iter().map(|p| (p.bytes, "peer", p)));
    lines.sort_by_key(|(bytes, who, _)| (*bytes, *who != "ours"));
    for (_, who, p) in lines {
        let _ = writeln!(
            out,
            "{:>6} {who}: {} of {} answered; CPU ms/call {}; peak RSS MiB {}{}",
            size_label(p.bytes),
            p.ok,
            p.calls,
            roles(&p.cpu_ms_per_call, 1),
            roles(&p.peak_rss_mib, 0),
            p.error
                .as_ref()
                .map_or(String::new(), |e| format!("; refused: {e}"))
        );
    }
    if peer.is_empty() {
        let _ = writeln!(out, "{PEER_NOT_IN_SIZES}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_value() {
        let text = chart(&[("1 KB".into(), 10.0), ("1 MB".into(), 40.0)], "ms", 8);
        assert_eq!(text, "1 KB |##      | 10.0 ms\n1 MB |########| 40.0 ms\n");
        assert_eq!(chart(&[("x".into(), 0.0)], "ms", 4), "x |    | 0.0 ms\n");
    }

    #[test]
    fn sizes_are_labelled_as_people_say_them() {
        let labels: Vec<String> = SIZES.into_iter().map(size_label).collect();
        assert_eq!(labels, ["1 KB", "100 KB", "1 MB", "4 MB"]);
        assert_eq!(size_label(12), "12 B");
    }

    #[test]
    fn the_size_section_charts_answered_sizes_and_names_a_refusal() {
        let point = |bytes, ok, p50, error: Option<&str>| SizePoint {
            bytes,
            calls: 3,
            ok,
            p50_ms: p50,
            cpu_ms_per_call: BTreeMap::from([("proxy".into(), 2.0), ("driver".into(), 9.0)]),
            peak_rss_mib: BTreeMap::from([("proxy".into(), 50.4)]),
            error: error.map(str::to_owned),
        };
        let text = render_sizes(
            &[
                point(1_000, 3, 20.0, None),
                point(4_000_000, 0, 0.0, Some("ResultTooLarge: 4000123 bytes")),
            ],
            &[],
        );
        for part in [
            "RESULT SIZE",
            "1 KB ours |",
            "20.0 ms",
            "  1 KB ours: 3 of 3 answered; CPU ms/call proxy 2.0; peak RSS MiB proxy 50",
            "  4 MB ours: 0 of 3 answered",
            "refused: ResultTooLarge: 4000123 bytes",
            "p50 (ours): grows at most linearly",
            PEER_NOT_IN_SIZES,
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        assert!(
            !text.contains("4 MB ours |"),
            "a refused size has no bar:\n{text}"
        );
        assert!(!text.contains("driver"), "{text}");
        assert!(!text.contains("p50 (peer)"), "{text}");
    }

    #[test]
    fn the_peer_stands_beside_ours_with_its_own_verdict_and_refusal() {
        let point = |bytes, ok, p50, error: Option<&str>| SizePoint {
            bytes,
            calls: 2,
            ok,
            p50_ms: p50,
            cpu_ms_per_call: BTreeMap::from([("server".into(), 1.0)]),
            peak_rss_mib: BTreeMap::from([("server".into(), 80.0)]),
            error: error.map(str::to_owned),
        };
        let ours = [point(1_000, 2, 10.0, None), point(1_000_000, 2, 20.0, None)];
        let peer = [
            point(1_000, 2, 30.0, None),
            point(1_000_000, 0, 0.0, Some("the workflow failed: size limit")),
        ];
        let text = render_sizes(&ours, &peer);
        let bars: Vec<&str> = text.lines().filter(|l| l.contains(" |")).collect();
        assert_eq!(bars.len(), 3, "{text}");
        assert!(bars[0].trim_start().starts_with("1 KB ours"), "{text}");
        assert!(bars[1].trim_start().starts_with("1 KB peer"), "{text}");
        assert!(bars[2].trim_start().starts_with("1 MB ours"), "{text}");
        for part in [
            "p50 (ours): grows at most linearly",
            "p50 (peer): grows at most linearly",
            "  1 MB peer: 0 of 2 answered; CPU ms/call server 1.0; peak RSS MiB server 80; \
             refused: the workflow failed: size limit",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        let (mb_ours, mb_peer) = (
            text.find("  1 MB ours:").unwrap(),
            text.find("  1 MB peer:").unwrap(),
        );
        assert!(mb_ours < mb_peer, "ours first:\n{text}");
        assert!(!text.contains(PEER_NOT_IN_SIZES), "{text}");
    }
}
