//! How a proxy grows with its upstreams (R-CNF-18): `--scaling upstreams` starts, on the full
//! path's server, one proxy fronting 1, 10 and 50 mock upstreams (stdio, two tools each, named
//! apart so no name is ambiguous) and an HTTP connector routing every one of their services,
//! and reports the start-up time until the connector lists every upstream's tools, the proxy's
//! resident set then, and the p50 of later listings with the connector's CPU per listing.

use std::{path::Path, process::Command, time::Instant};

use crate::{
    DevServer,
    fixtures::{Ledger, UpstreamSpec},
    harness::{Slice, TetheredChild},
    kit::{
        mcp::session_http_client,
        process::{CONNECTOR_LISTENING, connector_route, http_connector_command},
    },
};

use super::{
    paths::{Child, signing_key, spawn_until},
    procstat,
    tool_count::{each, first_listing, later_listings},
};

/// The upstream counts measured.
pub const COUNTS: [usize; 3] = [1, 10, 50];
/// Tools per upstream.
const TOOLS_EACH: usize = 2;

/// One upstream count.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UpstreamCountPoint {
    pub upstreams: usize,
    pub listed: usize,
    /// From starting the proxy and the connector until the connector listed every tool.
    pub ready_ms: f64,
    pub warm_list_p50_ms: f64,
    pub connector_cpu_ms_per_list: f64,
    pub proxy_rss_mib: f64,
    pub proxy_peak_rss_mib: f64,
    pub error: Option<String>,
}

/// Upstream `i`'s service and spec: two echo tools named `u<i>_tool<j>`.
pub fn upstream(i: usize) -> (String, UpstreamSpec) {
    let mut spec = super::tool_count::spec_with(TOOLS_EACH);
    spec.name = format!("upstream-{i}");
    for (j, tool) in spec.tools.iter_mut().enumerate() {
        tool.name = format!("u{i:02}_tool{j}");
    }
    (format!("svc-{i:02}"), spec)
}

/// The proxy's configuration: `n` stdio upstreams, each its own service, on `slice`.
pub fn config_toml(slice: &Slice, dir: &Path, ledger: &Ledger, n: usize) -> anyhow::Result<String> {
    let bin = crate::fixtures::mock_upstream_bin()?;
    let mut upstreams = Vec::new();
    for i in 0..n {
        let (service, spec) = upstream(i);
        let file = dir.join(format!("spec-{i}.json"));
        std::fs::write(&file, serde_json::to_string(&spec)?)?;
        let args = vec!["--spec".to_owned(), file.to_string_lossy().into_owned()];
        let transport = crate::kit::upstreams::mock_stdio_transport(&bin, args, ledger);
        upstreams.push(crate::harness::upstream(&service, transport));
    }
    crate::run::proxy_process::proxy_toml(
        &slice.address,
        &slice.namespace,
        &slice.task_queue,
        &upstreams,
    )
}

/// Every count in turn, each with its own proxy and connector.
pub async fn run(server: &DevServer, dir: &Path, ledger: &Ledger) -> Vec<UpstreamCountPoint> {
    let failed = |upstreams, error| UpstreamCountPoint {
        upstreams,
        error: Some(error),
        ..UpstreamCountPoint::default()
    };
    let at = |n: usize| dir.join(format!("upstreams-{n}"));
    let one = |n| async move { one(server, &at(n), ledger, n).await };
    each(&COUNTS, one, failed, line).await
}

/// One count, its files in `dir`.
async fn one(
    server: &DevServer,
    dir: &Path,
    ledger: &Ledger,
    n: usize,
) -> anyhow::Result<UpstreamCountPoint> {
    std::fs::create_dir_all(dir)?;
    let slice = Slice::on(server, &format!("upstreams{n}")).await?;
    let config = dir.join("proxy.toml");
    std::fs::write(&config, config_toml(&slice, dir, ledger, n)?)?;
    let start = Instant::now();
    let log = std::fs::File::create(dir.join("proxy.log"))?;
    let mut command = Command::new(crate::harness::proxy_bin()?);
    command
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let proxy = Child::spawned("proxy", TetheredChild::spawn(command)?);
    let (service, _) = upstream(0);
    let mut command = http_connector_command(&slice, &service, "127.0.0.1:0", &signing_key())?;
    for i in 1..n {
        command
            .arg("--route")
            .arg(connector_route(&upstream(i).0, &slice.endpoint));
    }
    command.env("RUST_LOG", "warn");
    let log = dir.join("connector.log");
    let (connector, url) = spawn_until("connector", command, &log, CONNECTOR_LISTENING).await?;
    let client = session_http_client(&url, ()).await?;
    let listed = first_listing(&client, n * TOOLS_EACH, start).await?;
    let ready_ms = start.elapsed().as_secs_f64() * 1000.0;
    let proxy_stat = procstat::sample(proxy.pid).unwrap_or_default();
    let later = later_listings(&client, connector.pid).await?;
    let _ = client.cancel().await;
    connector.stop().await;
    proxy.stop().await;
    Ok(UpstreamCountPoint {
        upstreams: n,
        listed,
        ready_ms,
        warm_list_p50_ms: later.p50_ms,
        connector_cpu_ms_per_list: later.connector_cpu_ms,
        proxy_rss_mib: proxy_stat.rss_kib as f64 / 1024.0,
        proxy_peak_rss_mib: proxy_stat.peak_rss_kib as f64 / 1024.0,
        error: None,
    })
}

/// One count's figures, or its failure.
fn line(p: &UpstreamCountPoint) -> String {
    match &p.error {
        Some(e) => format!("{:>3} upstreams: failed: {e}\n", p.upstreams),
        None => format!(
            "{:>3} upstreams: {} tools listed, ready in {:.1} ms, then p50 {:.1} ms (connector CPU {:.1} ms per listing); proxy VmRSS {:.1} MiB (VmHWM {:.1})\n",
            p.upstreams,
            p.listed,
            p.ready_ms,
            p.warm_list_p50_ms,
            p.connector_cpu_ms_per_list,
            p.proxy_rss_mib,
            p.proxy_peak_rss_mib
        ),
    }
}

/// Why the section has no peer row (R-CNF-18).
pub const NO_PEER: &str = "peer: no row: temporalio-mcp has no process fronting upstreams (each \
    upstream is a factory in the caller's own worker), so there is no start-up or routed listing \
    to compare";

/// What start-up is made of, printed beside its verdict when the curve grows faster than
/// linearly (R-CNF-18): measured with the debug build, every process's CPU grows linearly.
pub const START_UP_NOTE: &str = "  why: start-up is bound by CPU, not by a step of the proxy: \
    per upstream the connector's first session runs two standalone Nexus operations \
    (capabilities, tool listing) at 21-31 ms of dev-server CPU each, and the proxy starts one \
    process; each process's CPU grows linearly (server 80, 530-630 and 2,070-2,600 ms for 1, 10 \
    and 50 upstreams, debug), so a step past linear is the 2-core machine saturating (50 \
    upstreams queue 100 operations on the server beside 50 process starts), not more work per \
    upstream (docs/performance.md)";

/// The upstream-count section: start-up time as a chart, each curve's verdict, then each
/// count's figures.
pub fn render(points: &[UpstreamCountPoint]) -> String {
    use super::linearity::verdict;
    let mut out = String::from(
        "\nUPSTREAM COUNT (one proxy fronting N upstreams, one HTTP connector routing them all)\n",
    );
    out.push_str(NO_PEER);
    out.push_str("\nstart-up until every tool is listed:\n");
    let ok: Vec<&UpstreamCountPoint> = points.iter().filter(|p| p.error.is_none()).collect();
    let labels: Vec<String> = ok
        .iter()
        .map(|p| format!("{} upstreams", p.upstreams))
        .collect();
    let chart: Vec<(String, f64)> = labels
        .iter()
        .cloned()
        .zip(ok.iter().map(|p| p.ready_ms))
        .collect();
    out.push_str(&super::scaling::chart(&chart, "ms", 40));
    let curve = |f: fn(&UpstreamCountPoint) -> f64| -> Vec<(f64, f64)> {
        ok.iter().map(|p| (p.upstreams as f64, f(p))).collect()
    };
    for (what, points) in [
        ("start-up", curve(|p| p.ready_ms)),
        ("later listing p50", curve(|p| p.warm_list_p50_ms)),
        (
            "connector CPU per listing",
            curve(|p| p.connector_cpu_ms_per_list),
        ),
        ("proxy VmRSS", curve(|p| p.proxy_rss_mib)),
    ] {
        let said = verdict(what, &points, &labels, 1.0);
        let faster = said.contains("faster than linearly");
        out.push_str(&said);
        if what == "start-up" && faster {
            out.push_str(START_UP_NOTE);
            out.push('\n');
        }
    }
    for p in points {
        out.push_str(&line(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_have_their_own_services_and_tool_names() {
        let (a, spec_a) = upstream(0);
        let (b, spec_b) = upstream(49);
        assert_eq!((a.as_str(), b.as_str()), ("svc-00", "svc-49"));
        spec_a.validate().unwrap();
        let names: Vec<&str> = spec_a
            .tools
            .iter()
            .chain(&spec_b.tools)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["u00_tool0", "u00_tool1", "u49_tool0", "u49_tool1"]);
    }

    /// A measured point: `upstreams` with two tools each, ready after `ready_ms`, `rss` MiB.
    fn point(upstreams: usize, ready_ms: f64, rss: f64) -> UpstreamCountPoint {
        UpstreamCountPoint {
            upstreams,
            listed: upstreams * 2,
            ready_ms,
            warm_list_p50_ms: 3.0,
            connector_cpu_ms_per_list: 1.0,
            proxy_rss_mib: rss,
            proxy_peak_rss_mib: rss,
            error: None,
        }
    }

    #[test]
    fn the_upstream_count_section_charts_start_up_and_judges_each_curve() {
        let text = render(&[
            point(1, 900.0, 48.0),
            point(10, 1500.0, 60.0),
            point(50, 40_000.0, 120.0),
        ]);
        assert!(
            text.contains(NO_PEER),
            "the section says why no peer row:\n{text}"
        );
        for part in [
            "UPSTREAM COUNT",
            "50 upstreams |",
            "start-up: grows faster than linearly: 10 upstreams to 50 upstreams (26.7x for 5.0x)\n  why: start-up is bound by CPU",
            "proxy VmRSS: grows at most linearly",
            " 10 upstreams: 20 tools listed, ready in 1500.0 ms, then p50 3.0 ms",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
        assert_eq!(text.matches(START_UP_NOTE).count(), 1, "once:\n{text}");
    }

    #[test]
    fn the_start_up_note_stands_only_beside_a_start_up_flagged_faster_than_linear() {
        // The debug runs' start-up (linear) with a proxy VmRSS flagged: no note.
        let text = render(&[
            point(1, 315.0, 1.0),
            point(10, 1236.0, 2.0),
            point(50, 3113.0, 100.0),
        ]);
        assert!(
            text.contains("start-up: grows at most linearly")
                && text.contains("proxy VmRSS: grows faster than linearly"),
            "{text}"
        );
        assert!(!text.contains(START_UP_NOTE), "no note:\n{text}");
    }
}
