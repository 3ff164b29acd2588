//! `durable-mcp-conformance`: checks the durable MCP path against a real Temporal dev server.

use anyhow::Context as _;
use std::time::Duration;

use clap::{Parser, Subcommand};
use durable_mcp_conformance::{
    DevServerOptions, harness::DevServer, report, run, scenario, smoke, third_party,
};

/// Conformance runner for durable-mcp: starts a real Temporal dev server (installing the
/// Temporal CLI with pip when none is found) and checks the durable MCP path against it.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once at startup: the size of the `run` variant's options does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Runs the conformance scenarios (all, or those the filters select) and reports.
    ///
    /// Starts one Temporal dev server for the run; each scenario gets a fresh task queue and
    /// Nexus endpoint, its own mock upstream (stdio child or in-process HTTP) and its own proxy.
    /// Prints `PASS`/`FAIL` per scenario as it finishes, then a summary table. Exits non-zero when
    /// any scenario fails; failure messages name the SPEC.md rules that were violated.
    ///
    /// Examples:
    ///   durable-mcp-conformance run
    ///   durable-mcp-conformance run --family retry-inference --junit target/conformance.xml
    ///   durable-mcp-conformance run --rule R-PRX-7
    ///   INSTA_UPDATE=always durable-mcp-conformance run --family fidelity   (re-records snapshots)
    ///   durable-mcp-conformance run --backend container --jobs 2
    ///
    /// Against a Temporal server you already run (TLS and API key from Temporal's environment
    /// configuration: TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE):
    /// only uniquely named endpoints and task queues are used and the endpoints are deleted
    /// afterwards; scenarios that restart the server are skipped.
    ///   durable-mcp-conformance run --temporal-address staging.example.com:7233 --namespace ci
    ///
    /// Third-party mode (--upstream-stdio or --upstream-http; the bundled scenarios are then not
    /// run): discovers the server's tools, prints the retry policy inferred for each and why,
    /// and compares each allowed tool's result called directly and through the durable path.
    ///   durable-mcp-conformance run --upstream-stdio "npx -y @modelcontextprotocol/server-everything@2026.8.31 stdio"
    ///   durable-mcp-conformance run --upstream-http http://127.0.0.1:3000/mcp --header "Authorization: Bearer T" --allow-tool add --args args.json
    #[command(verbatim_doc_comment)]
    Run {
        #[command(flatten)]
        select: Select,
        /// Write a JUnit XML report here (one suite per family).
        #[arg(long, value_name = "FILE")]
        junit: Option<std::path::PathBuf>,
        /// Write a JSON report here.
        #[arg(long, value_name = "FILE")]
        json: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: Target,
        /// Run this many scenarios at once (default: the number of CPU cores). Each has its own
        /// task queue, Nexus endpoint, upstream and proxy.
        #[arg(long, short = 'j', value_name = "N")]
        jobs: Option<usize>,
        /// Fail a scenario still running after this long, naming the step it hung in.
        #[arg(long, value_name = "DURATION", default_value = "180s", value_parser = humantime::parse_duration)]
        timeout: Duration,
        #[command(flatten)]
        third_party: ThirdParty,
    },
    /// Runs the official MCP conformance suite's server scenarios through the durable path.
    ///
    /// Installs the pinned @modelcontextprotocol/conformance releases (0.1.16: its tools
    /// scenarios; 0.2.0-alpha.12: its tools, tasks-extension and server-stateless scenarios)
    /// and Node 22 when PATH has none, with npm, into ~/.cache/durable-mcp; then, per
    /// transport, a dev server
    /// slice, a proxy fronting the suite's fixture tools (the mock upstream over stdio or Streamable
    /// HTTP) and durable-mcp-connector over Streamable HTTP (--task-after 0), and runs each
    /// scenario against the connector's URL. Prints PASS/FAIL per scenario with the failing
    /// checks; skips with the reason when Node or the suite cannot be installed. Needs
    /// `cargo build --workspace --bins` first.
    ///
    /// Examples:
    ///   durable-mcp-conformance official
    ///   durable-mcp-conformance official --release 0.1.16 --transport stdio --junit out.xml
    ///   durable-mcp-conformance official --scenario tools-call-with-logging
    #[command(verbatim_doc_comment)]
    Official {
        /// Only this release of the suite (repeatable): 0.1.16 or 0.2.0-alpha.12.
        #[arg(long, value_name = "VERSION")]
        release: Vec<String>,
        /// Only this transport to the fixture (repeatable; default: both).
        #[arg(long, value_enum)]
        transport: Vec<durable_mcp_conformance::official::Transport>,
        /// Only this scenario (repeatable; default: every scenario of the release's list).
        #[arg(long, value_name = "NAME")]
        scenario: Vec<String>,
        /// Front this Streamable HTTP server instead of the mock fixture (the suite's own
        /// reference server, run from a checkout of its repository); implies --transport http.
        #[arg(long, value_name = "URL")]
        upstream_http: Option<String>,
        /// Write a JUnit XML report here.
        #[arg(long, value_name = "FILE")]
        junit: Option<std::path::PathBuf>,
        /// Write a JSON report here.
        #[arg(long, value_name = "FILE")]
        json: Option<std::path::PathBuf>,
    },
    /// Lists the bundled scenarios (id, rules, description) without running anything.
    List {
        #[command(flatten)]
        select: Select,
        /// Instead, list each SPEC.md rule with the tests and scenarios that check it.
        #[arg(long, alias = "list-rules")]
        rules: bool,
    },
    /// One durable round trip on a fresh dev server, narrated step by step.
    ///
    /// Starts the server, registers a Nexus endpoint, runs a Nexus worker, completes one
    /// standalone Nexus operation through it, and stops everything. Exit code 0 on success.
    Smoke,
    /// Measures the full path against the bare floor, a direct call and temporalio-mcp.
    ///
    /// Paths: (a) rmcp straight to the mock upstream; (b) a standalone Nexus operation
    /// completed by a standalone Activity, no MCP; (c) an rmcp client over Streamable HTTP and
    /// over stdio -> durable-mcp-connector -> Temporal -> durable-mcp-proxy -> upstream; (d)
    /// temporalio-mcp 0.2.0 (pip-installed into the cache; skipped when Python is missing).
    /// Each Temporal path gets a fresh dev server. Per row: p50/p90/p99, calls/s, errors,
    /// lost and duplicated calls, CPU ms per call of every process, peak RSS and the server's
    /// RPCs and database operations per call. Then the connector's memory: its VmRSS idle and
    /// with --tasks-in-flight MCP tasks open. Build with --release for real figures.
    ///
    /// Examples:
    ///   durable-mcp-conformance load
    ///   durable-mcp-conformance load --short --json target/load.json
    ///   durable-mcp-conformance load --paths floor,full-http --concurrency 16 --count 10000
    ///   durable-mcp-conformance load --paths full-http --concurrency 1 --tasks-in-flight 1000
    #[command(verbatim_doc_comment)]
    Load(durable_mcp_conformance::load::LoadArgs),
    /// A seeded fault campaign at load, checked against what durable-mcp promises.
    ///
    /// Stands up a dev server on a database file, two mock upstreams (over Streamable HTTP,
    /// reached through a fault-injecting TCP relay of the runner's own, and over stdio), two
    /// durable-mcp-proxy workers on one task queue, two durable-mcp-connector replicas over
    /// HTTP with one signing key, and a Workflow worker. Clients run a mixed workload (read-only,
    /// idempotent, destructive calls with and without idempotency keys, long calls as tasks
    /// followed from alternating replicas, tasks asking for input answered on the other
    /// replica, cancels, calls from a Workflow) while a seeded nemesis SIGKILLs and restarts
    /// proxies, connectors, upstreams and the dev server, SIGSTOPs a proxy past its heartbeat
    /// timeout, and stalls, resets or blackholes the proxy's connection to the HTTP upstream;
    /// faults overlap. Then a checker reads the history: every call got a final answer within
    /// --bound after the last heal, no destructive non-idempotent tool ran twice for one call,
    /// a keyed re-issue got the first execution's result, every unknown outcome overlaps a
    /// fault that explains it, read-only results equal direct ones, nothing is left open in
    /// Temporal, each process's memory returns near its start. Exits 1 on any violation,
    /// printing the seed and the fault schedule that replays it.
    ///
    /// Examples:
    ///   durable-mcp-conformance chaos --short
    ///   durable-mcp-conformance chaos --duration 10m --json target/chaos.json
    ///   durable-mcp-conformance chaos --seed 42 --faults kill-proxy,relay-reset --duration 2m
    #[command(verbatim_doc_comment)]
    Chaos(durable_mcp_conformance::chaos::ChaosArgs),
    /// Sends malformed, odd and oversized requests to an MCP server and reports what broke.
    ///
    /// Each request is built around an MCP method (every client method of 2025-11-25 and
    /// 2026-07-28) and spoiled one way: wrong types, broken nesting, bad UTF-8, oversize bodies,
    /// odd headers (Mcp-Method/Mcp-Name mismatches, protocol versions, sessions). A request must
    /// get an answer: a JSON-RPC response under its id, or an HTTP refusal (4xx, 503). Reported:
    /// every request that got no answer, a 5xx other than 503, a malformed answer or a hang; the
    /// server's memory (VmRSS) before and after (a --stdio server, or --pid); panics in a
    /// --stdio server's log. Loopback only; bounded by --count and --duration. The seed is
    /// printed: the same --seed sends the same requests, and --seed S --start I --count 1
    /// replays request I. Exits 1 when anything was found.
    ///
    /// Examples:
    ///   durable-mcp-conformance fuzz --url http://127.0.0.1:8080/mcp --count 5000
    ///   durable-mcp-conformance fuzz --stdio "target/debug/durable-mcp-connector --route '{service: s, endpoint: e}'"
    ///   durable-mcp-conformance fuzz --url http://127.0.0.1:8080/mcp --seed 42 --start 1234 --count 1
    ///   durable-mcp-conformance fuzz --url http://localhost:3000/mcp --pid 4242 --junit fuzz.xml --json fuzz.json
    #[command(verbatim_doc_comment)]
    Fuzz(durable_mcp_conformance::fuzz::FuzzArgs),
    /// The load run's floor worker (started by `load` itself).
    #[command(hide = true)]
    LoadFloorWorker {
        #[arg(long)]
        address: String,
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        task_queue: String,
    },
    /// Serves the encrypting test codec server until Ctrl-C, to try the connector and the proxy
    /// with a codec: Temporal's remote codec protocol (POST /encode, /decode) at
    /// http://ADDR/codec, AES-256-GCM. A test fixture, not a key manager: the key comes from
    /// DURABLE_MCP_CODEC_KEY (32 bytes, base64), else a random one that dies with the process
    /// (payloads it sealed cannot be read after a restart).
    ///
    /// Example:
    ///   durable-mcp-conformance codec-server --addr 127.0.0.1:8081
    ///   durable-mcp-connector --codec-endpoint http://127.0.0.1:8081/codec ...
    #[command(verbatim_doc_comment)]
    CodecServer {
        /// Where to listen (keep it on loopback: payloads arrive in clear).
        #[arg(long, default_value = "127.0.0.1:8081")]
        addr: std::net::SocketAddr,
        /// Require this Authorization header value (e.g. "Bearer ..."); read from the
        /// environment by default.
        #[arg(long, env = "DURABLE_MCP_CODEC_AUTH", hide_env_values = true)]
        authorization: Option<String>,
    },
    /// Runs a dev server with the flags durable-mcp needs, for manual use, until Ctrl-C.
    ///
    /// Prints the address to export as TEMPORAL_ADDRESS. State lives in --db-filename when
    /// given, so it survives restarts.
    Temporal {
        /// Keep state in this SQLite file.
        #[arg(long)]
        db_filename: Option<std::path::PathBuf>,
        /// Listen for clients on 127.0.0.1:PORT (e.g. 7233, Temporal's usual port, so tools
        /// that default to localhost:7233 find it). Default: a free port, printed at start.
        /// The server runs headless: there is no web UI port.
        #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
        port: Option<u16>,
    },
}

/// Third-party mode: check someone else's MCP server instead of the bundled scenarios.
#[derive(clap::Args)]
struct ThirdParty {
    /// Check this stdio MCP server: "CMD ARGS", split like a POSIX shell would (quotes and
    /// backslashes work; no shell runs).
    #[arg(long, value_name = "CMD ARGS", conflicts_with = "upstream_http")]
    upstream_stdio: Option<String>,
    /// Check this Streamable HTTP MCP server.
    #[arg(long, value_name = "URL")]
    upstream_http: Option<String>,
    /// A header for --upstream-http, NAME:VALUE (repeatable).
    #[arg(long, value_name = "K:V", requires = "upstream_http")]
    header: Vec<String>,
    /// Also call this tool in the fidelity check (by default only readOnlyHint tools are called).
    #[arg(long, value_name = "NAME")]
    allow_tool: Vec<String>,
    /// JSON object: tool name -> arguments. Tools absent from it get arguments built from their
    /// input schema (required fields, enums, bounds, formats, the schema's examples/default).
    #[arg(long, value_name = "FILE")]
    args: Option<std::path::PathBuf>,
    /// Also call each checked tool (except those given in --args) with N more valid inputs
    /// generated from its input schema, comparing direct and durable results.
    #[arg(long, value_name = "N", default_value_t = 0)]
    fuzz: usize,
    /// Also cut calls of each checked tool while a worker runs them: a stdio server's process
    /// is SIGKILLed, an HTTP server's connection (on this machine) reset, stalled or
    /// blackholed through a relay of the runner's own; one line per tool says what its
    /// annotations promise (retried, or at most one attempt) and what each cut call did.
    #[arg(long)]
    chaos: bool,
    /// Also send the upstream itself N malformed requests with the wire fuzzer (what `fuzz`
    /// does: wrong types, broken nesting, bad UTF-8, oversize bodies, odd headers); a stdio
    /// upstream is started once more for them, an HTTP one must be on loopback.
    #[arg(long, value_name = "N", default_value_t = 0)]
    wire_fuzz: u64,
    /// Seed for --fuzz, --chaos and --wire-fuzz (default: random; the report prints it, so a
    /// run can be replayed).
    #[arg(long, value_name = "SEED")]
    seed: Option<u64>,
    /// Check cancellation on this tool (repeatable): it is started through the durable path and
    /// cancelled after --cancel-after; the check passes when the call ends canceled and the
    /// cancel reached the tool. Name tools that run long enough and honour cancellation.
    #[arg(long, value_name = "NAME")]
    cancel_tool: Vec<String>,
    /// How long a cancellation check lets the tool run before cancelling it.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    cancel_after: std::time::Duration,
    /// The tool for the reattachment check (a retried start must attach to the first run);
    /// default: the first read-only tool whose fidelity check passed.
    #[arg(long, value_name = "NAME")]
    reattach_tool: Option<String>,
    /// The tool a host calls as a task through a connector (tasks-and-input; arguments from
    /// --args); default: the read-only tool whose direct call took longest.
    #[arg(long, value_name = "NAME")]
    task_tool: Option<String>,
}

impl ThirdParty {
    fn options(&self) -> anyhow::Result<Option<third_party::ThirdPartyOptions>> {
        let upstream = match (&self.upstream_stdio, &self.upstream_http) {
            (Some(cmd), _) => third_party::Upstream::stdio(cmd)?,
            (None, Some(url)) => third_party::Upstream::http(url, &self.header)?,
            (None, None) => {
                anyhow::ensure!(
                    self.allow_tool.is_empty()
                        && self.args.is_none()
                        && self.fuzz == 0
                        && self.wire_fuzz == 0
                        && !self.chaos
                        && self.cancel_tool.is_empty()
                        && self.reattach_tool.is_none()
                        && self.task_tool.is_none(),
                    "--allow-tool, --args, --fuzz, --wire-fuzz, --chaos, --cancel-tool, \
                     --reattach-tool and --task-tool need --upstream-stdio or --upstream-http"
                );
                return Ok(None);
            }
        };
        anyhow::ensure!(
            self.seed.is_none() || self.fuzz > 0 || self.wire_fuzz > 0 || self.chaos,
            "--seed replays --fuzz, --wire-fuzz or --chaos: give one of them"
        );
        let mut options = third_party::ThirdPartyOptions::new(upstream);
        options.allow_tools = self.allow_tool.clone();
        options.cancel_tools = self.cancel_tool.clone();
        options.cancel_after = self.cancel_after;
        options.reattach_tool = self.reattach_tool.clone();
        options.task_tool = self.task_tool.clone();
        options.fuzz = self.fuzz;
        options.chaos = self.chaos;
        options.wire_fuzz = self.wire_fuzz;
        options.seed = self.seed.unwrap_or_else(|| {
            // Random enough to vary between runs; printed for replay.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ u64::from(std::process::id()).rotate_left(32)
        });
        if let Some(path) = &self.args {
            options.arguments = third_party::load_arguments(path)?;
        }
        Ok(Some(options))
    }
}

/// Which Temporal server to use.
#[derive(clap::Args)]
struct Target {
    /// Start the dev server this way: `process` (the Temporal CLI as a child) or `container`
    /// (testcontainers). Default: $DURABLE_MCP_TEMPORAL, else process.
    #[arg(long, value_name = "BACKEND", conflicts_with = "temporal_address")]
    backend: Option<String>,
    /// Use the Temporal server at HOST:PORT instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    temporal_address: Option<String>,
    /// The namespace on --temporal-address (it must exist). Default: $TEMPORAL_NAMESPACE, else
    /// `default`.
    #[arg(long, value_name = "NS", requires = "temporal_address")]
    namespace: Option<String>,
}

impl Target {
    /// The server the run uses: started here, or the existing one.
    async fn server(&self, mut options: DevServerOptions) -> anyhow::Result<DevServer> {
        if let Some(address) = &self.temporal_address {
            let namespace = self
                .namespace
                .clone()
                .or_else(|| std::env::var("TEMPORAL_NAMESPACE").ok())
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| "default".to_owned());
            return Ok(DevServer::existing(address, &namespace).await?);
        }
        if let Some(backend) = &self.backend {
            options.backend = durable_mcp_conformance::Backend::parse(Some(backend))?;
        }
        Ok(DevServer::start(options).await?)
    }
}

/// Which scenarios to use.
#[derive(clap::Args)]
struct Select {
    /// Only this family: reattach, retry-inference, cancellation, fidelity, faults, owner-scope, operations, security, tasks, hosts (real MCP clients: Claude Code, the TypeScript and Python SDKs, the Inspector CLI).
    #[arg(long, value_name = "FAMILY")]
    family: Option<scenario::Family>,
    /// Only this scenario id (or every id under a prefix ending in `/`).
    #[arg(long, value_name = "ID")]
    scenario: Option<String>,
    /// Only scenarios that check this SPEC.md rule, e.g. R-PRX-4.
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// Directory of scenario files. Default: ./scenarios, else the source tree's.
    #[arg(long, value_name = "DIR")]
    scenarios: Option<std::path::PathBuf>,
}

impl Select {
    fn filter(&self) -> scenario::Filter {
        scenario::Filter {
            family: self.family,
            scenario: self.scenario.clone(),
            rule: self.rule.clone(),
        }
    }

    /// The selected scenarios and the selected cases of the hosts family; at least one.
    fn load(
        &self,
    ) -> anyhow::Result<(
        std::path::PathBuf,
        Vec<scenario::Scenario>,
        Vec<durable_mcp_conformance::hosts::HostCheck>,
    )> {
        let root = scenario::default_root();
        let dir = self
            .scenarios
            .clone()
            .unwrap_or_else(|| root.join("scenarios"));
        let filter = self.filter();
        let all = scenario::load_dir(&dir)?;
        let selected: Vec<_> = all.into_iter().filter(|s| filter.matches(s)).collect();
        let hosts = durable_mcp_conformance::hosts::select(&filter);
        anyhow::ensure!(
            !selected.is_empty() || !hosts.is_empty(),
            "no scenario in {} and no hosts case matches the filters",
            dir.display()
        );
        Ok((root, selected, hosts))
    }
}

/// Ends a run: the `Ended` event, the summary, the JUnit and JSON reports asked for; exits 1
/// when a case failed.
fn finish(
    mut recorder: report::Recorder,
    started: std::time::Instant,
    junit: Option<&std::path::Path>,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    recorder.print_and_record(report::Event::Ended {
        duration: started.elapsed(),
    });
    let record = recorder.record();
    println!("\n{}", record.summary());
    record.write(junit, json)?;
    if !record.all_passed() {
        std::process::exit(1);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // A conformance or chaos run provokes failures on purpose: the libraries' warnings about
    // them would bury the report, so `run` and `chaos` log nothing unless RUST_LOG asks.
    let default_filter = match cli.command {
        Command::Run { .. } | Command::Chaos(_) => "off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Command::CodecServer {
        addr,
        authorization,
    } = &cli.command
    {
        return codec_server(*addr, authorization.clone()).await;
    }
    if let Command::Fuzz(args) = &cli.command {
        return fuzz(args).await;
    }
    if let Command::List { select, rules } = &cli.command {
        if *rules {
            // Every scenario, so each rule shows all that cite it; --rule narrows the rules.
            let root = scenario::default_root();
            let dir = select
                .scenarios
                .clone()
                .unwrap_or_else(|| root.join("scenarios"));
            let scenarios = scenario::load_dir(&dir)?;
            let spec = root.join("SPEC.md");
            let text = std::fs::read_to_string(&spec)
                .with_context(|| format!("reading {}", spec.display()))?;
            let mut checks = scenario::rules::rule_checks(&text, &scenarios);
            if let Some(rule) = &select.rule {
                checks.retain(|r| r.id.eq_ignore_ascii_case(rule));
            }
            print!("{}", scenario::rules::render(&checks));
            return Ok(());
        }
        let (_, scenarios, hosts) = select.load()?;
        let width = scenarios
            .iter()
            .map(|s| s.id.len())
            .chain(hosts.iter().map(|h| h.id.len()))
            .max()
            .unwrap_or(0);
        let rules_width = scenarios
            .iter()
            .map(|s| s.rules.join(",").len())
            .max()
            .unwrap_or(0);
        for s in &scenarios {
            println!(
                "{:<width$}  {:<rules_width$}  {}",
                s.id,
                s.rules.join(","),
                s.description.trim()
            );
        }
        for h in &hosts {
            println!(
                "{:<width$}  {:<rules_width$}  {}",
                h.id,
                h.rules.join(","),
                h.description
            );
        }
        println!(
            "{} scenario(s), {} hosts case(s)",
            scenarios.len(),
            hosts.len()
        );
        return Ok(());
    }
    let options = DevServerOptions::from_env()?;
    match cli.command {
        Command::List { .. } | Command::CodecServer { .. } | Command::Fuzz(_) => unreachable!(),
        Command::Load(args) => {
            let report = durable_mcp_conformance::load::run(&args, options).await?;
            println!("{}", report.render());
            if let Some(path) = &args.json {
                println!("JSON report: {}", path.display());
            }
            anyhow::ensure!(
                report.clean(),
                "calls were lost or duplicated (see the table)"
            );
        }
        Command::Chaos(args) => {
            let started = std::time::Instant::now();
            let report = durable_mcp_conformance::chaos::run(&args, options).await?;
            println!("{}", report.render());
            let target = format!("chaos seed {} ({})", report.seed, report.machine);
            let record = report::RunRecord::of(&report.events(target, started.elapsed()));
            println!("{}", record.summary());
            if let Some(path) = &args.junit {
                record.write(Some(path), None)?;
            }
            if let Some(path) = &args.json {
                let mut json = record.json();
                json["chaos"] = serde_json::to_value(&report)?;
                std::fs::write(path, serde_json::to_string_pretty(&json)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("JSON report: {}", path.display());
            }
            if !record.all_passed() {
                std::process::exit(1);
            }
        }
        Command::LoadFloorWorker {
            address,
            namespace,
            task_queue,
        } => {
            durable_mcp_conformance::load::floor::run_worker(&address, &namespace, &task_queue)
                .await?
        }
        Command::Run {
            select,
            junit,
            json,
            target,
            jobs,
            timeout,
            third_party,
        } => {
            if let Some(tp) = third_party.options()? {
                println!("durable-mcp conformance: third-party mode");
                if tp.fuzz > 0 {
                    println!(
                        "fuzzing with {} input(s) per tool, seed {} (replay: --fuzz {} --seed {})",
                        tp.fuzz, tp.seed, tp.fuzz, tp.seed
                    );
                }
                if tp.chaos {
                    println!(
                        "cutting calls mid-call, seed {} (replay: --chaos --seed {})",
                        tp.seed, tp.seed
                    );
                }
                if tp.wire_fuzz > 0 {
                    println!(
                        "wire-fuzzing the upstream with {} request(s), seed {} (replay: \
                         --wire-fuzz {} --seed {})",
                        tp.wire_fuzz, tp.seed, tp.wire_fuzz, tp.seed
                    );
                }
                let started = std::time::Instant::now();
                let mut server = target.server(options).await?;
                let version = server
                    .version()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "unknown".into());
                println!("Temporal {version} at {}", server.address());
                // The same event stream and reports as the bundled run (R-CNF-10).
                let mut recorder = report::Recorder::new();
                recorder.print_and_record(report::Event::Started {
                    kind: report::RunKind::ThirdParty,
                    target: format!("{} on Temporal {version}", tp.upstream.describe()),
                    planned: Vec::new(),
                });
                third_party::run_with_progress(&server, &tp, |check| {
                    recorder.print_and_record(report::Event::Finished(check.outcome()));
                })
                .await;
                let _ = server.stop().await;
                finish(recorder, started, junit.as_deref(), json.as_deref())?;
                return Ok(());
            }
            let (root, scenarios, hosts) = select.load()?;
            let mut run_options = run::RunOptions::new(&root);
            run_options.scenario_timeout = timeout;
            run_options.jobs = jobs.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            });
            anyhow::ensure!(run_options.jobs > 0, "--jobs must be at least 1");
            // Fail before starting anything when the mock upstream is missing.
            if scenarios.iter().any(|s| {
                s.tool_service.is_none()
                    && s.upstream.transport == scenario::UpstreamTransport::Stdio
            }) {
                run_options.mock_bin =
                    Some(durable_mcp_conformance::fixtures::mock_upstream_bin()?);
            }
            // The same for the proxy binary that kill-and-restart scenarios run.
            if scenarios
                .iter()
                .any(|s| s.proxy.mode == scenario::ProxyMode::Process)
            {
                run_options.proxy_bin = Some(run::proxy_bin()?);
            }
            // And the native tool service that [tool_service] scenarios run.
            if scenarios.iter().any(|s| s.tool_service.is_some()) {
                run_options.example_tools_bin = Some(run::example_tools_bin()?);
            }
            let started = std::time::Instant::now();
            println!(
                "durable-mcp conformance: {} scenario(s), {} at a time, then {} hosts case(s) one host at a time",
                scenarios.len(),
                run_options.jobs,
                hosts.len()
            );
            let mut server = target.server(options).await?;
            let version = server
                .version()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "unknown".into());
            println!("Temporal {version} at {}", server.address());
            // One event stream feeds the live progress and every report (R-CNF-10).
            let mut recorder = report::Recorder::new();
            recorder.print_and_record(report::Event::Started {
                kind: report::RunKind::Bundled,
                target: format!("Temporal {version}"),
                planned: scenarios
                    .iter()
                    .map(|s| s.id.clone())
                    .chain(hosts.iter().map(|h| h.id.to_owned()))
                    .collect(),
            });
            run::run_all(&server, &scenarios, &run_options, |r| {
                recorder.print_and_record(report::Event::Finished(report::scenario_outcome(r)));
            })
            .await;
            // Real hosts after the scenarios, one at a time (R-CNF-22, R-CNF-23).
            durable_mcp_conformance::hosts::run(&server, &hosts, |r| {
                recorder.print_and_record(report::Event::Finished(report::scenario_outcome(r)));
            })
            .await;
            let _ = server.stop().await;
            finish(recorder, started, junit.as_deref(), json.as_deref())?;
        }
        Command::Official {
            release,
            transport,
            scenario,
            upstream_http,
            junit,
            json,
        } => {
            use durable_mcp_conformance::official;
            let mut run_options = official::OfficialOptions::default();
            if !release.is_empty() {
                run_options
                    .releases
                    .retain(|r| release.iter().any(|v| v == r.version));
                anyhow::ensure!(
                    run_options.releases.len() == release.len(),
                    "--release: known releases are {}",
                    official::RELEASES.map(|r| r.version).join(", ")
                );
            }
            if !transport.is_empty() {
                run_options.transports = transport;
            }
            if upstream_http.is_some() {
                run_options.transports = vec![official::Transport::Http];
            }
            run_options.scenarios = scenario;
            run_options.upstream_http = upstream_http;
            let planned = run_options.planned();
            anyhow::ensure!(
                !planned.is_empty(),
                "--scenario names no scenario of the releases"
            );
            let started = std::time::Instant::now();
            let mut server = DevServer::start(options).await?;
            let mut recorder = report::Recorder::new();
            recorder.print_and_record(report::Event::Started {
                kind: report::RunKind::Official,
                target: "durable-mcp-connector (Streamable HTTP) -> Temporal -> proxy -> fixture"
                    .into(),
                planned: planned
                    .iter()
                    .map(|(r, t, s)| official::case_name(r, *t, s))
                    .collect(),
            });
            official::run(&server, &run_options, |outcome| {
                recorder.print_and_record(report::Event::Finished(outcome));
            })
            .await?;
            let _ = server.stop().await;
            finish(recorder, started, junit.as_deref(), json.as_deref())?;
        }
        Command::Smoke => {
            println!("durable-mcp smoke run: one durable round trip on a real Temporal dev server");
            let report = smoke::run(options, |step, took| {
                println!("  ok  {step} ({})", fmt_duration(took));
            })
            .await
            .map_err(|e| anyhow::anyhow!("smoke run failed: {e:#}"))?;
            let total: Duration = report.steps.iter().map(|(_, d)| *d).sum();
            println!(
                "smoke run passed: {} steps in {} against Temporal {}",
                report.steps.len(),
                fmt_duration(total),
                report.server_version
            );
        }
        Command::Temporal { db_filename, port } => {
            let mut server = DevServer::start(DevServerOptions {
                db_file: db_filename,
                grpc_port: port,
                ..options
            })
            .await?;
            let stop = interrupted()?;
            println!(
                "Temporal dev server ({}) is up.",
                server.version().map(|v| v.to_string()).unwrap_or_default()
            );
            println!("  export TEMPORAL_ADDRESS={}", server.address());
            println!("  export TEMPORAL_NAMESPACE={}", server.namespace());
            println!("Press Ctrl-C to stop.");
            stop.await;
            server.stop().await?;
        }
    }
    Ok(())
}

/// `fuzz`: runs the wire fuzzer and reports as every run does; exits 1 when it found anything.
async fn fuzz(args: &durable_mcp_conformance::fuzz::FuzzArgs) -> anyhow::Result<()> {
    let options = args.options()?;
    let (seed, start, count) = (options.seed, options.start, options.count);
    println!(
        "durable-mcp conformance: fuzzing {} with seed {seed} (replay: --seed {seed} --start {start} --count {count})",
        args.url
            .as_deref()
            .or(args.stdio.as_deref())
            .unwrap_or_default()
    );
    let started = std::time::Instant::now();
    let report = durable_mcp_conformance::fuzz::run(options).await?;
    let mut recorder = report::Recorder::new();
    recorder.print_and_record(report::Event::Started {
        kind: report::RunKind::Fuzz,
        target: format!(
            "{}, seed {seed}, {} request(s)",
            report.target,
            report.total()
        ),
        planned: durable_mcp_conformance::fuzz::planned(),
    });
    for outcome in report.outcomes(&args.replay()) {
        recorder.print_and_record(report::Event::Finished(outcome));
    }
    finish(
        recorder,
        started,
        args.junit.as_deref(),
        args.json.as_deref(),
    )
}

/// Whether the codec server may listen on `addr`: it decodes any payload for whoever asks, so
/// off loopback only behind an `Authorization` value (R-PAY-6).
fn check_codec_server_exposure(
    addr: std::net::SocketAddr,
    authorization: bool,
) -> Result<(), String> {
    if addr.ip().is_loopback() || authorization {
        return Ok(());
    }
    Err(format!(
        "codec-server on {addr}, which is not a loopback address, without --authorization would \
         decode every payload for anyone who can reach it; set DURABLE_MCP_CODEC_AUTH (or \
         --authorization) or listen on 127.0.0.1"
    ))
}

/// `codec-server`: serves until Ctrl-C.
async fn codec_server(
    addr: std::net::SocketAddr,
    authorization: Option<String>,
) -> anyhow::Result<()> {
    use base64::Engine as _;
    check_codec_server_exposure(addr, authorization.is_some()).map_err(anyhow::Error::msg)?;
    let key = match std::env::var("DURABLE_MCP_CODEC_KEY") {
        Ok(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| anyhow::anyhow!("DURABLE_MCP_CODEC_KEY is not base64: {e}"))?;
            Some(<[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                anyhow::anyhow!(
                    "DURABLE_MCP_CODEC_KEY must be 32 bytes (e.g. `openssl rand -base64 32`), got {}",
                    bytes.len()
                )
            })?)
        }
        Err(_) => {
            eprintln!("DURABLE_MCP_CODEC_KEY is not set: using a random key for this run");
            None
        }
    };
    let server = durable_mcp_conformance::fixtures::CodecServer::start(addr, key, authorization)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let stop = interrupted()?;
    println!("codec server at {}", server.url);
    println!("Press Ctrl-C to stop.");
    stop.await;
    Ok(())
}

/// Resolves at Ctrl-C (SIGINT). The handler is in place when this returns, so a Ctrl-C sent
/// right after "Press Ctrl-C" is seen (`tokio::signal::ctrl_c` installs it only when first
/// polled, and a SIGINT before that killed the process instead of stopping it cleanly).
fn interrupted() -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    Ok(async move {
        interrupt.recv().await;
    })
}

fn fmt_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codec_server_needs_an_authorization_off_loopback() {
        let public: std::net::SocketAddr = "0.0.0.0:8081".parse().unwrap();
        let err = check_codec_server_exposure(public, false).unwrap_err();
        assert!(
            err.contains("0.0.0.0:8081") && err.contains("DURABLE_MCP_CODEC_AUTH"),
            "{err}"
        );
        assert!(check_codec_server_exposure(public, true).is_ok());
        for local in ["127.0.0.1:8081", "[::1]:8081"] {
            assert!(check_codec_server_exposure(local.parse().unwrap(), false).is_ok());
        }
    }
}
