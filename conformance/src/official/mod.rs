//! The official MCP conformance suite (`@modelcontextprotocol/conformance`) through the durable
//! path (R-CNF-21): its server scenarios run against a `durable-mcp-connector` (Streamable HTTP)
//! in front of a proxy fronting [`fixture`], the mock upstream serving the tools those scenarios
//! call, once over stdio and once over Streamable HTTP, on a dev server. Each scenario is one
//! case, `<version>/<transport>/<scenario>`, failed when any of its checks fails (naming them),
//! skipped with the reason when Node or the suite cannot be had.
//!
//! Two pinned releases: 0.1.16's tools scenarios (at 2025-11-25, a session client without the
//! tasks extension) and 0.2.0-alpha.12's tools scenarios and tasks-extension scenarios (SEP-2663
//! at 2026-07-28).
//! The connector runs with `--task-after 0`, so every call of a caller that declares the
//! tasks extension becomes a task: the durable path's own choice, which the 0.2 checks that
//! assume a fixture's tool is never a task do not expect (docs/conformance.md names them).

pub mod fixture;
pub mod suite;

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::{
    fixtures::{Ledger, SpecSource, server::serve_mock_upstream_http},
    harness::{DevServer, Slice},
    kit::{
        process::HttpConnectorProcess,
        upstreams::{http_upstream, mock_stdio_upstream_with_args},
    },
    report::{CaseOutcome, Verdict},
};

/// The Nexus service the fixture is fronted as.
const SERVICE: &str = "official";

/// The tools scenarios both releases have: listing, each content type, a tool error, progress.
pub const TOOL_CALL_SCENARIOS: [&str; 8] = [
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
];

/// 0.1.16's other server scenarios whose requirements are tools (all but resources, prompts and
/// transport scenarios), and three that need nothing of a fixture.
pub const V0116_SCENARIOS: [&str; 9] = [
    "server-initialize",
    "ping",
    "logging-set-level",
    "tools-call-with-logging",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
];

/// 0.2.0-alpha.12's one-round `input-required-result` scenarios the fixture serves, its
/// tasks-extension server scenarios, and `server-stateless` (SEP-2575: `server/discover`,
/// per-request `_meta`, what a 2026-07-28 server answers and declares).
pub const V02_SCENARIOS: [&str; 20] = [
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-multiple-input-requests",
    "input-required-result-missing-input-response",
    "input-required-result-result-type",
    "input-required-result-tampered-state",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
    "server-stateless",
];

/// Checks that hold only for the suite's own fixture server, by scenario: a call of `greet`
/// must not become a task. Through the durable path any tool may become a task for a caller
/// that declared the tasks extension (`--task-after`, here 0), so these fail by design; they
/// are reported by name in the scenario's output and do not fail it (docs/conformance.md).
pub const FIXTURE_ASSUMPTIONS: [(&str, &str); 4] = [
    ("tasks-lifecycle", "tasks-sync-tool-call"),
    (
        "tasks-request-headers",
        "tasks-headers-tolerate-mcp-method-on-tools-call",
    ),
    (
        "tasks-dispatch-and-envelope",
        "sep-2663-legacy-task-param-ignored",
    ),
    (
        "tasks-dispatch-and-envelope",
        "tasks-result-type-complete-on-non-task-responses",
    ),
];

/// Scenarios the fixture cannot serve, and why: skipped, not run.
pub const UNSERVED: [(&str, &str); 1] = [(
    "tasks-mrtr-composition",
    "its test_tool_with_task asks for input in a first round and becomes the upstream's own \
     task in the second; the mock upstream has no behavior that does both",
)];

/// A pinned release of the suite and the scenarios run from it, in groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub version: &'static str,
    pub scenarios: &'static [&'static [&'static str]],
}

/// The releases run by default.
pub const RELEASES: [Release; 2] = [
    Release {
        version: "0.1.16",
        scenarios: &[&TOOL_CALL_SCENARIOS, &V0116_SCENARIOS],
    },
    Release {
        version: "0.2.0-alpha.12",
        scenarios: &[&TOOL_CALL_SCENARIOS, &V02_SCENARIOS],
    },
];

/// How the proxy reaches the fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Stdio,
    Http,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct OfficialOptions {
    pub releases: Vec<Release>,
    pub transports: Vec<Transport>,
    /// Only these scenarios (of the releases' lists), when not empty.
    pub scenarios: Vec<String>,
    /// Another fixture server over Streamable HTTP instead of the mock (the suite's reference
    /// server from a checkout of its repository): the `http` transport only.
    pub upstream_http: Option<String>,
}

impl Default for OfficialOptions {
    fn default() -> Self {
        Self {
            releases: RELEASES.to_vec(),
            transports: vec![Transport::Stdio, Transport::Http],
            scenarios: Vec::new(),
            upstream_http: None,
        }
    }
}

impl OfficialOptions {
    /// The cases this run plans, in order: `<version>/<transport>/<scenario>`.
    pub fn planned(&self) -> Vec<(Release, Transport, &'static str)> {
        let mut cases = Vec::new();
        for transport in &self.transports {
            for release in &self.releases {
                for scenario in release.scenarios.iter().flat_map(|group| group.iter()) {
                    if self.scenarios.is_empty() || self.scenarios.iter().any(|s| s == scenario) {
                        cases.push((release.clone(), *transport, *scenario));
                    }
                }
            }
        }
        cases
    }
}

/// The case name of a scenario.
pub fn case_name(release: &Release, transport: Transport, scenario: &str) -> String {
    format!("{}/{}/{scenario}", release.version, transport.name())
}

/// Runs the planned scenarios on `server`, calling `on_case` with each outcome as it finishes.
pub async fn run(
    server: &DevServer,
    options: &OfficialOptions,
    mut on_case: impl FnMut(CaseOutcome),
) -> anyhow::Result<()> {
    let planned = options.planned();
    let mut suites = std::collections::BTreeMap::new();
    for release in &options.releases {
        let version = release.version;
        let installed = tokio::task::spawn_blocking(move || suite::Suite::install(version))
            .await
            .context("installing the suite")?;
        suites.insert(version, installed);
    }
    for transport in &options.transports {
        let cases: Vec<_> = planned.iter().filter(|(_, t, _)| t == transport).collect();
        if cases.is_empty() {
            continue;
        }
        let path = match Path::start(server, *transport, options.upstream_http.as_deref()).await {
            Ok(path) => Ok(path),
            Err(e) => Err(format!("the durable path did not start: {e:#}")),
        };
        for (release, transport, scenario) in cases {
            let name = case_name(release, *transport, scenario);
            let began = Instant::now();
            let unserved = UNSERVED.iter().find(|(s, _)| s == scenario);
            let (verdict, output) = match (&suites[release.version], &path, unserved) {
                (Err(why), _, _) => (Verdict::Skip(why.clone()), String::new()),
                (_, _, Some((_, why))) => (Verdict::Skip((*why).to_owned()), String::new()),
                (_, Err(why), _) => (Verdict::Fail(why.clone()), String::new()),
                (Ok(suite), Ok(path), None) => scenario_verdict(suite, scenario, &path.url()).await,
            };
            on_case(CaseOutcome {
                name,
                suite: format!("official-{}", release.version),
                verdict,
                duration: Some(began.elapsed()),
                rules: vec!["R-CNF-21".into()],
                output,
            });
        }
        if let Ok(path) = path {
            path.stop().await;
        }
    }
    Ok(())
}

/// One scenario's verdict from the suite's checks (or why it did not run), and the output
/// naming the fixture's own checks that failed as they must through the durable path.
async fn scenario_verdict(suite: &suite::Suite, scenario: &str, url: &str) -> (Verdict, String) {
    let assumed: Vec<&str> = FIXTURE_ASSUMPTIONS
        .iter()
        .filter(|(s, _)| *s == scenario)
        .map(|(_, check)| *check)
        .collect();
    match suite.run(scenario, url).await {
        Ok(checks) => match suite::verdict(&checks, &assumed) {
            Ok(failed) if failed.is_empty() => (Verdict::Pass, String::new()),
            Ok(failed) => (
                Verdict::Pass,
                format!(
                    "failed as through the durable path they must (they assume the suite's own \
                     fixture, where greet is never a task): {}",
                    failed.join(", ")
                ),
            ),
            Err(failures) => (Verdict::Fail(failures.join("; ")), String::new()),
        },
        Err(e) => (Verdict::Fail(format!("{e:#}")), String::new()),
    }
}

/// The durable path in front of the fixture: a proxy on a slice of the server fronting it,
/// and a connector process serving Streamable HTTP with a route to it.
struct Path {
    connector: HttpConnectorProcess,
    proxy: crate::proxy_thread::ProxyThread,
    _upstream: Option<crate::fixtures::server::HttpUpstream>,
    _dir: tempfile::TempDir,
}

impl Path {
    async fn start(
        server: &DevServer,
        transport: Transport,
        external: Option<&str>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let spec = fixture::spec();
        let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
        let (upstream, http) = match (transport, external) {
            (Transport::Http, Some(url)) => (http_upstream(SERVICE, url)?, None),
            (Transport::Stdio, Some(_)) => {
                anyhow::bail!("--upstream-http fronts an HTTP server: use --transport http")
            }
            (Transport::Stdio, None) => {
                let spec_path = dir.path().join("spec.json");
                std::fs::write(&spec_path, serde_json::to_vec(&spec)?)?;
                let args = vec!["--spec".into(), spec_path.to_string_lossy().into_owned()];
                (mock_stdio_upstream_with_args(SERVICE, args, &ledger)?, None)
            }
            (Transport::Http, None) => {
                let addr = ([127, 0, 0, 1], 0).into();
                let http = serve_mock_upstream_http(SpecSource::Inline(spec), None, addr).await?;
                (http_upstream(SERVICE, &http.url)?, Some(http))
            }
        };
        let slice = Slice::on(server, &format!("official-{}", transport.name())).await?;
        let proxy = slice.start_proxy(vec![upstream], 16);
        let connector = HttpConnectorProcess::start(&slice, SERVICE, &["--task-after", "0s"])
            .await
            .context("starting durable-mcp-connector (cargo build --workspace --bins)")?;
        // The proxy lists the fixture once it has discovered it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(Self {
            connector,
            proxy,
            _upstream: http,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        self.connector.url.clone()
    }

    async fn stop(mut self) {
        let _ = self.connector.child.kill().await;
        self.proxy.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_planned_per_transport_then_release_and_filtered_by_name() {
        let all = OfficialOptions::default().planned();
        let per_transport =
            2 * TOOL_CALL_SCENARIOS.len() + V0116_SCENARIOS.len() + V02_SCENARIOS.len();
        assert_eq!(all.len(), 2 * per_transport);
        let (release, transport, scenario) = &all[0];
        assert_eq!(
            case_name(release, *transport, scenario),
            "0.1.16/stdio/tools-list"
        );
        let one = OfficialOptions {
            transports: vec![Transport::Http],
            scenarios: vec!["tasks-lifecycle".into()],
            ..OfficialOptions::default()
        }
        .planned();
        assert_eq!(one.len(), 1);
        assert_eq!(
            case_name(&one[0].0, one[0].1, one[0].2),
            "0.2.0-alpha.12/http/tasks-lifecycle"
        );
    }
}
