//! How listing grows with an upstream's tools (R-CNF-18): `--scaling tools` starts, on the full
//! path's server, a mock upstream with 1, 100 and 1,000 tools behind a proxy of its own and an
//! HTTP connector, and reports the first listing through the connector (cold: the connector asks
//! the proxy through Temporal), the p50 of the next ones with the CPU each took in the connector
//! and in this driver, and the proxy's resident set. The CPU is the figure to judge growth by:
//! on a busy machine a listing's wall time also holds the time it waited for a core, and a long
//! listing waits more than in proportion (it spans more of the scheduler's slices).

use std::{path::Path, time::Instant};

use crate::{
    DevServer,
    fixtures::{Ledger, UpstreamSpec},
    harness::Slice,
    kit::{
        mcp::{McpClient, session_http_client},
        process::CONNECTOR_LISTENING,
        process::http_connector_command,
        upstreams::mock_stdio_upstream_with_args,
    },
};

use super::{
    measure,
    paths::{UPSTREAM_SERVICE, proxy_child, signing_key, spawn_until},
    procstat,
};

/// Why the section has no peer row (R-CNF-18).
pub const NO_PEER: &str = "peer: no row: temporalio-mcp lists tools only inside a Workflow (a \
    list-tools Activity on a worker built for its upstreams), so a row would need a peer worker \
    per tool count; not measured";

/// The tool counts measured.
pub const COUNTS: [usize; 3] = [1, 100, 1_000];
/// Listings after the first, for the p50 and the CPU per listing.
const WARM_LISTINGS: usize = 10;

/// One tool count.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCountPoint {
    pub tools: usize,
    /// Tools the connector listed (all of them, when nothing went wrong).
    pub listed: usize,
    pub first_list_ms: f64,
    pub warm_list_p50_ms: f64,
    /// CPU per later listing in the connector (user + system, clock-tick resolution).
    #[serde(default)]
    pub connector_cpu_ms_per_list: f64,
    /// CPU per later listing in this driver (the MCP client reading the listing).
    #[serde(default)]
    pub driver_cpu_ms_per_list: f64,
    pub proxy_rss_mib: f64,
    pub proxy_peak_rss_mib: f64,
    pub error: Option<String>,
}

/// A spec of `n` echo tools named `tool0000`, ...
pub fn spec_with(n: usize) -> UpstreamSpec {
    let standard = UpstreamSpec::standard();
    let echo = standard
        .tools
        .iter()
        .find(|t| t.name == "echo")
        .cloned()
        .expect("the standard spec has echo");
    UpstreamSpec {
        name: format!("tools-{n}"),
        tools: (0..n)
            .map(|i| {
                let mut tool = echo.clone();
                tool.name = format!("tool{i:04}");
                tool
            })
            .collect(),
        instructions: None,
    }
}

/// Every count in turn, each with its own upstream, proxy and connector.
pub async fn run(server: &DevServer, dir: &Path, ledger: &Ledger) -> Vec<ToolCountPoint> {
    let failed = |n, error| ToolCountPoint {
        tools: n,
        error: Some(error),
        ..ToolCountPoint::default()
    };
    let show = |point: &ToolCountPoint| {
        format!(
            "{} tools: listed {}, first listing {:.1} ms, then p50 {:.1} ms (CPU per listing: connector {:.1} ms, driver {:.1} ms), proxy VmRSS {:.1} MiB{}",
            point.tools,
            point.listed,
            point.first_list_ms,
            point.warm_list_p50_ms,
            point.connector_cpu_ms_per_list,
            point.driver_cpu_ms_per_list,
            point.proxy_rss_mib,
            super::scaling::error_suffix(point.error.as_deref())
        )
    };
    each(&COUNTS, |n| one(server, dir, ledger, n), failed, show).await
}

/// `one` for each count in turn, a failure becoming the point `failed` makes (with its error);
/// each point is printed as `show` writes it.
pub(super) async fn each<P, F: std::future::Future<Output = anyhow::Result<P>>>(
    counts: &[usize],
    one: impl Fn(usize) -> F,
    failed: impl Fn(usize, String) -> P,
    show: impl Fn(&P) -> String,
) -> Vec<P> {
    let mut points = Vec::new();
    for &n in counts {
        let point = one(n).await.unwrap_or_else(|e| failed(n, format!("{e:#}")));
        super::progress(format_args!("{}", show(&point).trim_end()));
        points.push(point);
    }
    points
}

async fn one(
    server: &DevServer,
    dir: &Path,
    ledger: &Ledger,
    n: usize,
) -> anyhow::Result<ToolCountPoint> {
    let dir = dir.join(format!("tools-{n}"));
    std::fs::create_dir_all(&dir)?;
    let spec = dir.join("spec.json");
    std::fs::write(&spec, serde_json::to_string(&spec_with(n))?)?;
    let slice = Slice::on(server, &format!("tools{n}")).await?;
    let args = vec!["--spec".to_owned(), spec.to_string_lossy().into_owned()];
    let upstream = mock_stdio_upstream_with_args(UPSTREAM_SERVICE, args, ledger)?;
    let proxy = proxy_child(&slice, upstream, &dir)?;
    let mut command =
        http_connector_command(&slice, UPSTREAM_SERVICE, "127.0.0.1:0", &signing_key())?;
    command.env("RUST_LOG", "warn");
    let (connector, url) = spawn_until(
        "connector",
        command,
        &dir.join("connector.log"),
        CONNECTOR_LISTENING,
    )
    .await?;
    let client = session_http_client(&url, ()).await?;
    let start = Instant::now();
    let listed = first_listing(&client, 1, start).await?;
    let first_list_ms = start.elapsed().as_secs_f64() * 1000.0;
    let later = later_listings(&client, connector.pid).await?;
    let proxy_stat = procstat::sample(proxy.pid).unwrap_or_default();
    let _ = client.cancel().await;
    connector.stop().await;
    proxy.stop().await;
    Ok(ToolCountPoint {
        tools: n,
        listed,
        first_list_ms,
        warm_list_p50_ms: later.p50_ms,
        connector_cpu_ms_per_list: later.connector_cpu_ms,
        driver_cpu_ms_per_list: later.driver_cpu_ms,
        proxy_rss_mib: proxy_stat.rss_kib as f64 / 1024.0,
        proxy_peak_rss_mib: proxy_stat.peak_rss_kib as f64 / 1024.0,
        error: None,
    })
}

/// Lists until the connector lists at least `want` tools (the proxy's workers may still be
/// starting: the first listing waits for them), for at most 120 s from `start`; answers how
/// many it listed.
pub(super) async fn first_listing(
    client: &McpClient,
    want: usize,
    start: Instant,
) -> anyhow::Result<usize> {
    loop {
        match client.peer().list_all_tools().await {
            Ok(tools) if tools.len() >= want.max(1) => return Ok(tools.len()),
            _ if start.elapsed().as_secs() < 120 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            Ok(tools) => anyhow::bail!(
                "the connector listed {} of {want} tools in 120 s",
                tools.len()
            ),
            Err(e) => anyhow::bail!("listing: {e}"),
        }
    }
}

/// [`WARM_LISTINGS`] later listings: their p50 and the CPU each took.
pub(super) struct Later {
    pub p50_ms: f64,
    /// In the connector, and in this driver.
    pub connector_cpu_ms: f64,
    pub driver_cpu_ms: f64,
}

/// Lists [`WARM_LISTINGS`] more times, reading the CPU of `connector` and of this driver.
pub(super) async fn later_listings(client: &McpClient, connector: u32) -> anyhow::Result<Later> {
    let cpu = || {
        let read = |pid| procstat::sample(pid).map_or(0.0, |s| s.cpu.as_secs_f64() * 1000.0);
        (read(connector), read(std::process::id()))
    };
    let mut warm = Vec::new();
    let before = cpu();
    for _ in 0..WARM_LISTINGS {
        let start = Instant::now();
        client.peer().list_all_tools().await?;
        warm.push(start.elapsed());
    }
    let after = cpu();
    warm.sort();
    Ok(Later {
        p50_ms: measure::percentile(&warm, 50.0).as_secs_f64() * 1000.0,
        connector_cpu_ms: (after.0 - before.0) / WARM_LISTINGS as f64,
        driver_cpu_ms: (after.1 - before.1) / WARM_LISTINGS as f64,
    })
}

/// The tool-count section: first-listing latency as a chart, then each count's figures.
pub fn render(points: &[ToolCountPoint]) -> String {
    let mut out = String::from(
        "\nTOOL COUNT (an upstream with N tools behind its own proxy and HTTP connector)\n",
    );
    out.push_str(NO_PEER);
    out.push_str("\nfirst listing through the connector:\n");
    let listed: Vec<(String, f64)> = points
        .iter()
        .filter(|p| p.error.is_none())
        .map(|p| (format!("{} tools", p.tools), p.first_list_ms))
        .collect();
    out.push_str(&super::scaling::chart(&listed, "ms", 40));
    out.push_str(&verdicts(points));
    for p in points {
        out.push_str(&match &p.error {
            Some(e) => format!("{:>5} tools: failed: {e}\n", p.tools),
            None => format!(
                "{:>5} tools: {} listed, first {:.1} ms, then p50 {:.1} ms (CPU per listing: connector {:.1} ms, driver {:.1} ms); proxy VmRSS {:.1} MiB (VmHWM {:.1})\n",
                p.tools,
                p.listed,
                p.first_list_ms,
                p.warm_list_p50_ms,
                p.connector_cpu_ms_per_list,
                p.driver_cpu_ms_per_list,
                p.proxy_rss_mib,
                p.proxy_peak_rss_mib
            ),
        });
    }
    out
}

/// Each curve's verdict (R-CNF-18) over the counts that were listed: the CPU per listing is
/// the one to judge by (the wall time also holds the waits for a core).
fn verdicts(points: &[ToolCountPoint]) -> String {
    use super::linearity::verdict;
    let ok: Vec<&ToolCountPoint> = points.iter().filter(|p| p.error.is_none()).collect();
    let labels: Vec<String> = ok.iter().map(|p| format!("{} tools", p.tools)).collect();
    let curve = |f: fn(&ToolCountPoint) -> f64| -> Vec<(f64, f64)> {
        ok.iter().map(|p| (p.tools as f64, f(p))).collect()
    };
    [
        ("first listing", curve(|p| p.first_list_ms)),
        ("later listing p50", curve(|p| p.warm_list_p50_ms)),
        (
            "connector CPU per listing",
            curve(|p| p.connector_cpu_ms_per_list),
        ),
        (
            "driver CPU per listing",
            curve(|p| p.driver_cpu_ms_per_list),
        ),
    ]
    .into_iter()
    .map(|(what, points)| verdict(what, &points, &labels, 1.0))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_of_n_valid_tools_with_distinct_names() {
        let spec = spec_with(1000);
        spec.validate().unwrap();
        assert_eq!(spec.tools.len(), 1000);
        assert_eq!(spec.tools[0].name, "tool0000");
        assert_eq!(spec.tools[999].name, "tool0999");
    }

    #[test]
    fn the_tool_count_section_charts_listings_and_names_a_failure() {
        let text = render(&[
            ToolCountPoint {
                tools: 100,
                listed: 100,
                first_list_ms: 80.0,
                warm_list_p50_ms: 2.5,
                connector_cpu_ms_per_list: 1.5,
                driver_cpu_ms_per_list: 2.0,
                proxy_rss_mib: 48.2,
                proxy_peak_rss_mib: 50.0,
                error: None,
            },
            ToolCountPoint {
                tools: 1000,
                error: Some("listing: timed out".into()),
                ..ToolCountPoint::default()
            },
        ]);
        assert!(
            text.contains(NO_PEER),
            "the section says why no peer row:\n{text}"
        );
        for part in [
            "TOOL COUNT",
            "100 tools |",
            "  100 tools: 100 listed, first 80.0 ms, then p50 2.5 ms (CPU per listing: connector 1.5 ms, driver 2.0 ms); proxy VmRSS 48.2 MiB (VmHWM 50.0)",
            " 1000 tools: failed: listing: timed out",
            "connector CPU per listing: grows at most linearly",
        ] {
            assert!(text.contains(part), "{part:?} missing from:\n{text}");
        }
    }
}
