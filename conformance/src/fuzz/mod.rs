//! `durable-mcp-conformance fuzz`: a wire fuzzer for any MCP server (R-CNF-26).
//!
//! Sends seeded, malformed and odd requests ([`cases`]) to a Streamable HTTP server on
//! loopback (`--url`) or a stdio server it starts (`--stdio`), one at a time (or
//! `--concurrency` at once over HTTP), bounded by `--count` and `--duration`, and reports every
//! request that got no answer, a 5xx other than 503, a malformed answer or a hang ([`judge`]),
//! the server's memory before and after, and, for a server it started, the panics in its log.
//! The seed is printed; `--seed S` replays a run, `--seed S --start I --count 1` one case.
//! Reports go through the runner's one report model (summary, JUnit, JSON; R-CNF-10).

pub mod cases;
pub mod draw;
pub mod http;
pub mod judge;
pub mod spoil;
pub mod stdio;

use std::{collections::BTreeMap, time::Duration};

use futures::StreamExt as _;

use crate::report::{CaseOutcome, Verdict};
use cases::Family;
use judge::Finding;

/// What to fuzz.
pub enum TargetSpec {
    /// A Streamable HTTP server at this URL, with these headers on every request.
    Url {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// A stdio server the run starts (its stdin, stdout and stderr piped).
    Stdio(stdio::Command),
}

impl TargetSpec {
    /// A stdio target from `"CMD ARGS"`, split like a POSIX shell would.
    pub fn stdio(command_line: &str) -> anyhow::Result<Self> {
        let words = shlex::split(command_line)
            .ok_or_else(|| anyhow::anyhow!("--stdio {command_line:?}: unbalanced quotes"))?;
        let (program, args) = words
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("--stdio names no program"))?;
        let mut command = std::process::Command::new(program);
        command.args(args);
        Ok(Self::Stdio(stdio::Command::of(&command)))
    }

    fn describe(&self) -> String {
        match self {
            TargetSpec::Url { url, .. } => url.clone(),
            TargetSpec::Stdio(command) => format!("stdio: {}", command.describe()),
        }
    }
}

/// `fuzz`'s options.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["url", "stdio"])))]
pub struct FuzzArgs {
    /// Fuzz the Streamable HTTP MCP server at this URL. Loopback only (127.0.0.1, ::1,
    /// localhost): the requests are malformed and oversized on purpose.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Start this stdio MCP server ("CMD ARGS", split like a POSIX shell would; no shell runs)
    /// and fuzz it; its memory and its log's panics are reported.
    #[arg(long, value_name = "CMD ARGS", conflicts_with = "url")]
    pub stdio: Option<String>,
    /// A header sent with every request to --url, NAME:VALUE (repeatable).
    #[arg(long, value_name = "K:V", requires = "url")]
    pub header: Vec<String>,
    /// The seed (default: random). Printed; the same seed sends the same requests.
    #[arg(long, value_name = "SEED")]
    pub seed: Option<u64>,
    /// Send at most this many requests.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub count: u64,
    /// Stop after this long, even with requests left.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The first request's index: `--seed S --start I --count 1` replays request I of seed S.
    #[arg(long, value_name = "I", default_value_t = 0)]
    pub start: u64,
    /// A request without an answer this long is reported as a hang.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// The --url server's process id, to report its memory (VmRSS) before and after.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Requests in flight at once over HTTP (stdio sends one at a time).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub concurrency: usize,
    /// Requests of the warm-up (default: half of --count). The server's memory is read after
    /// every request; memory is flat when its median after the warm-up is no higher than its
    /// median during it (give or take 16 MiB or a tenth): what a server holds once warm
    /// (caches, sessions up to their caps, the allocator's pools) is no leak. Judged when both
    /// parts have at least 1000 requests.
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
    /// Write a JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

impl FuzzArgs {
    /// The run these flags ask for (a random seed when none is given).
    pub fn options(&self) -> anyhow::Result<FuzzOptions> {
        let target = match (&self.url, &self.stdio) {
            (Some(url), _) => TargetSpec::Url {
                url: url.clone(),
                headers: self
                    .header
                    .iter()
                    .map(|h| {
                        let (name, value) = h
                            .split_once(':')
                            .ok_or_else(|| anyhow::anyhow!("--header {h:?} is not NAME:VALUE"))?;
                        Ok((name.trim().to_owned(), value.trim().to_owned()))
                    })
                    .collect::<anyhow::Result<_>>()?,
            },
            (None, Some(command)) => TargetSpec::stdio(command)?,
            (None, None) => anyhow::bail!("give --url URL or --stdio \"CMD ARGS\""),
        };
        Ok(FuzzOptions {
            target,
            seed: self.seed.unwrap_or_else(random_seed),
            start: self.start,
            count: self.count,
            duration: self.duration,
            timeout: self.timeout,
            pid: self.pid,
            concurrency: self.concurrency,
            warmup: self.warmup.unwrap_or(self.count / 2),
        })
    }

    /// The command line that replays a case (its seed and index follow).
    pub fn replay(&self) -> String {
        match (&self.url, &self.stdio) {
            (Some(url), _) => format!("durable-mcp-conformance fuzz --url {url}"),
            (_, Some(command)) => format!(
                "durable-mcp-conformance fuzz --stdio {}",
                shlex::try_quote(command).unwrap_or_default()
            ),
            _ => "durable-mcp-conformance fuzz".into(),
        }
    }
}

/// A fuzz run's bounds and target.
pub struct FuzzOptions {
    pub target: TargetSpec,
    pub seed: u64,
    /// The first case's index.
    pub start: u64,
    /// At most this many cases.
    pub count: u64,
    /// At most this long.
    pub duration: Duration,
    /// A request without an answer this long is a hang.
    pub timeout: Duration,
    /// The server's process, for its memory (a stdio server's is the run's own child).
    pub pid: Option<u32>,
    /// Requests at once (HTTP only; stdio sends one at a time).
    pub concurrency: usize,
    /// Requests of the warm-up: the server's memory during it and after it are compared.
    pub warmup: u64,
}

/// One case that went wrong.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseFinding {
    pub index: u64,
    pub family: Family,
    pub method: String,
    pub finding: Finding,
}

/// What a fuzz run found.
#[derive(Debug, Clone, Default)]
pub struct FuzzReport {
    pub target: String,
    pub seed: u64,
    pub start: u64,
    /// Cases sent, per family.
    pub sent: BTreeMap<Family, u64>,
    pub findings: Vec<CaseFinding>,
    /// The server's VmRSS before and after, in KiB, when its process was known.
    pub rss_kib: Option<(u64, u64)>,
    /// The server's VmRSS read after each request of the warm-up, and after each later one,
    /// in KiB.
    pub readings_kib: (Vec<u64>, Vec<u64>),
    /// Requests of the warm-up.
    pub warmup: u64,
    /// The panic lines of the server's log (a server the run started), else `None`.
    pub panics: Option<Vec<String>>,
    /// Why the run stopped before its count, if it did (the server exited).
    pub stopped: Option<String>,
    pub duration: Duration,
}

/// Whether `url` names a loopback host: the fuzzer sends malformed requests to loopback only.
pub fn check_loopback(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("--url {url:?} is no URL: {e}"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if loopback && matches!(parsed.scheme(), "http" | "https") {
        return Ok(());
    }
    Err(format!(
        "refusing to fuzz {url}: the fuzzer sends malformed and oversized requests, so it only \
         targets a server on this machine (http://127.0.0.1:PORT/..., http://[::1]:PORT/... or \
         http://localhost:PORT/...). Run the server on loopback, or --stdio \"CMD ARGS\""
    ))
}

/// A random seed (printed by the caller, so the run can be replayed).
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// Runs the fuzzer as `options` say.
pub async fn run(options: FuzzOptions) -> anyhow::Result<FuzzReport> {
    let started = std::time::Instant::now();
    let mut report = FuzzReport {
        target: options.target.describe(),
        seed: options.seed,
        start: options.start,
        ..FuzzReport::default()
    };
    match &options.target {
        TargetSpec::Url { url, headers } => {
            check_loopback(url).map_err(anyhow::Error::msg)?;
            let target = http::HttpTarget::open(url, headers).await?;
            let before = rss(options.pid);
            fuzz_http(&target, &options, started, &mut report).await;
            report.rss_kib = before.zip(settled_rss(options.pid).await);
        }
        TargetSpec::Stdio(command) => {
            let mut target = stdio::StdioTarget::start(command, options.timeout).await?;
            let pid = options.pid.or(target.pid());
            let before = rss(pid);
            fuzz_stdio(&mut target, &options, started, &mut report).await;
            report.rss_kib = before.zip(settled_rss(pid).await);
            report.panics = Some(target.log.panics());
        }
    }
    report.duration = started.elapsed();
    Ok(report)
}

fn indices(options: &FuzzOptions) -> std::ops::Range<u64> {
    options.start..options.start.saturating_add(options.count)
}

async fn fuzz_http(
    target: &http::HttpTarget,
    options: &FuzzOptions,
    started: std::time::Instant,
    report: &mut FuzzReport,
) {
    let sends = futures::stream::iter(indices(options))
        .take_while(|_| std::future::ready(started.elapsed() < options.duration))
        .map(|index| async move {
            let case = draw::case(options.seed, index);
            let finding = target.send(&case, options.timeout).await;
            (case, finding)
        })
        .buffer_unordered(options.concurrency.max(1));
    futures::pin_mut!(sends);
    while let Some((case, finding)) = sends.next().await {
        report.record(&case, finding);
        report.note_memory(options.warmup, options.pid);
    }
}

async fn fuzz_stdio(
    target: &mut stdio::StdioTarget,
    options: &FuzzOptions,
    started: std::time::Instant,
    report: &mut FuzzReport,
) {
    let pid = options.pid.or(target.pid());
    for index in indices(options) {
        if started.elapsed() >= options.duration {
            break;
        }
        let case = draw::case(options.seed, index);
        let finding = target.send(&case, options.timeout).await;
        report.record(&case, finding);
        report.note_memory(options.warmup, pid);
        if !target.running() {
            report.stopped = Some(format!("the server exited after case {index}"));
            break;
        }
    }
}

/// The VmRSS of `pid`, in KiB.
fn rss(pid: Option<u32>) -> Option<u64> {
    crate::load::procstat::sample(pid?).map(|s| s.rss_kib)
}

/// The VmRSS of `pid` after a moment for the last answers to be freed.
async fn settled_rss(pid: Option<u32>) -> Option<u64> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    rss(pid)
}

impl FuzzReport {
    fn record(&mut self, case: &cases::Case, finding: Option<Finding>) {
        *self.sent.entry(case.family).or_default() += 1;
        if let Some(finding) = finding {
            self.findings.push(CaseFinding {
                index: case.index,
                family: case.family,
                method: case.method.clone(),
                finding,
            });
        }
    }

    /// Reads the server's memory after a request, into the warm-up's readings or the later ones.
    fn note_memory(&mut self, warmup: u64, pid: Option<u32>) {
        let Some(now) = rss(pid) else {
            return;
        };
        self.warmup = warmup;
        if self.total() <= warmup {
            self.readings_kib.0.push(now);
        } else {
            self.readings_kib.1.push(now);
        }
    }

    /// The median and the peak of the warm-up's readings and of the later ones.
    pub fn memory_figures(&self) -> Option<[(u64, u64); 2]> {
        Some([
            median_and_peak(&self.readings_kib.0)?,
            median_and_peak(&self.readings_kib.1)?,
        ])
    }

    /// Cases sent in all.
    pub fn total(&self) -> u64 {
        self.sent.values().sum()
    }

    /// Whether memory stayed flat after the warm-up: `None` when it was not judged (memory
    /// unread, or too few requests).
    pub fn memory_flat(&self) -> Option<bool> {
        Some(matches!(self.memory_verdict()?, Verdict::Pass))
    }

    /// [`memory_verdict`] of this run's medians, when both parts were long enough to judge.
    fn memory_verdict(&self) -> Option<Verdict> {
        let [(warm, _), (after, _)] = self.memory_figures()?;
        let judged = self.warmup >= MIN_JUDGED && self.total() >= self.warmup + MIN_JUDGED;
        judged.then(|| memory_verdict(warm, after))
    }

    /// Whether nothing went wrong: no finding, no panic, the server still up.
    pub fn clean(&self) -> bool {
        self.findings.is_empty()
            && self.stopped.is_none()
            && self.panics.as_ref().is_none_or(Vec::is_empty)
    }

    /// The run as report cases: one per family, the server's memory and its panics.
    pub fn outcomes(&self, replay: &str) -> Vec<CaseOutcome> {
        let mut outcomes: Vec<CaseOutcome> = Family::ALL
            .iter()
            .map(|family| self.family_outcome(*family, replay))
            .collect();
        outcomes.push(self.memory_outcome());
        outcomes.push(self.panics_outcome());
        outcomes
    }

    fn family_outcome(&self, family: Family, replay: &str) -> CaseOutcome {
        let sent = self.sent.get(&family).copied().unwrap_or(0);
        let found: Vec<&CaseFinding> = self
            .findings
            .iter()
            .filter(|f| f.family == family)
            .collect();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &found {
            *kinds.entry(f.finding.kind()).or_default() += 1;
        }
        let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let mut output = format!("{sent} request(s)\n");
        for f in found.iter().take(50) {
            output.push_str(&format!(
                "case {} ({}): {}; replay: {replay} --seed {} --start {} --count 1\n",
                f.index, f.method, f.finding, self.seed, f.index
            ));
        }
        let verdict = match (found.first(), &self.stopped) {
            (Some(first), _) => Verdict::Fail(format!(
                "{} of {sent}: {}; first: case {} ({}): {}",
                found.len(),
                counts.join(", "),
                first.index,
                first.method,
                first.finding
            )),
            (None, Some(why)) => Verdict::Fail(why.clone()),
            (None, None) => Verdict::Pass,
        };
        outcome(&format!("fuzz/{}", family.name()), verdict, output)
    }

    fn memory_outcome(&self) -> CaseOutcome {
        let Some((before, after)) = self.rss_kib else {
            return outcome(
                "fuzz/memory",
                Verdict::Skip("the server's process is unknown: give --pid".into()),
                String::new(),
            );
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        let mut output = format!(
            "VmRSS before {:.1} MiB, after {:.1} MiB ({:+.1} MiB) over {} request(s)",
            mib(before),
            mib(after),
            mib(after) - mib(before),
            self.total()
        );
        if let Some([(warm, warm_peak), (after, after_peak)]) = self.memory_figures() {
            output.push_str(&format!(
                "; median {:.1} MiB (peak {:.1}) over the first {} request(s), the warm-up, \
                 {:.1} MiB (peak {:.1}) after ({:+.1} MiB)",
                mib(warm),
                mib(warm_peak),
                self.warmup,
                mib(after),
                mib(after_peak),
                mib(after) - mib(warm)
            ));
        }
        let verdict = self.memory_verdict().unwrap_or_else(|| {
            output.push_str(&format!(
                "; flat is judged with at least {MIN_JUDGED} requests in the warm-up and after it"
            ));
            Verdict::Pass
        });
        outcome("fuzz/memory", verdict, output)
    }

    fn panics_outcome(&self) -> CaseOutcome {
        match &self.panics {
            None => outcome(
                "fuzz/panics",
                Verdict::Skip("the run did not start the server: read its log for panics".into()),
                String::new(),
            ),
            Some(lines) if lines.is_empty() => outcome(
                "fuzz/panics",
                Verdict::Pass,
                "no panic in the server's log".into(),
            ),
            Some(lines) => outcome(
                "fuzz/panics",
                Verdict::Fail(format!("{} panic line(s) in the server's log", lines.len())),
                lines.join("\n"),
            ),
        }
    }
}

/// How much higher the median after the warm-up may be and still count as flat: memory moves
/// with what the requests in flight hold at once (oversize bodies of several MiB, copied in
/// a few layers), and the caches that expire by time (a minute of completed answers kept for
/// resumption) settle at a level that moves with the request rate.
const FLAT_SLACK_KIB: u64 = 16 * 1024;

/// Requests in the warm-up, and after it, for memory to be judged.
const MIN_JUDGED: u64 = 1000;

/// Memory is flat when its median after the warm-up is above the warm-up's by no more than
/// [`FLAT_SLACK_KIB`] or a tenth of it, whichever is more: a leak grows with every request,
/// and the later median with it; a plateau (the allocator keeping freed memory) does not.
/// Medians, not peaks: one oversize body at a bad moment makes a peak.
fn memory_verdict(warm_kib: u64, after_kib: u64) -> Verdict {
    let slack = FLAT_SLACK_KIB.max(warm_kib / 10);
    let growth = after_kib.saturating_sub(warm_kib);
    if growth <= slack {
        Verdict::Pass
    } else {
        Verdict::Fail(format!(
            "memory's median after the warm-up is {} KiB above the warm-up's (flat allows \
             {slack} KiB): a leak, or a hold without a bound",
            growth
        ))
    }
}

/// The median and the largest of `readings` (none when empty).
fn median_and_peak(readings: &[u64]) -> Option<(u64, u64)> {
    let mut sorted = readings.to_vec();
    sorted.sort_unstable();
    Some((*sorted.get(sorted.len() / 2)?, *sorted.last()?))
}

fn outcome(name: &str, verdict: Verdict, output: String) -> CaseOutcome {
    CaseOutcome {
        name: name.to_owned(),
        suite: "fuzz".to_owned(),
        verdict,
        duration: None,
        rules: vec!["R-CNF-26".to_owned()],
        output,
    }
}

/// The names of the cases [`FuzzReport::outcomes`] gives, in order.
pub fn planned() -> Vec<String> {
    let mut names: Vec<String> = Family::ALL
        .iter()
        .map(|f| format!("fuzz/{}", f.name()))
        .collect();
    names.extend(["fuzz/memory".to_owned(), "fuzz/panics".to_owned()]);
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_fuzzed() {
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://127.3.4.5/mcp",
            "http://[::1]:9/mcp",
            "https://LOCALHOST:3000/",
        ] {
            assert_eq!(check_loopback(url), Ok(()), "{url}");
        }
        for url in [
            "http://10.0.0.1:8080/mcp",
            "http://example.com/mcp",
            "http://localhost.example.com/mcp",
            "http://[::2]/mcp",
            "ftp://127.0.0.1/",
            "127.0.0.1:8080",
        ] {
            let refusal = check_loopback(url).unwrap_err();
            assert!(
                refusal.contains(url) || refusal.contains("no URL"),
                "{refusal}"
            );
        }
    }

    #[test]
    fn a_report_names_every_planned_case_and_fails_a_family_with_findings() {
        let mut report = FuzzReport {
            seed: 9,
            ..FuzzReport::default()
        };
        report.record(&draw::case(9, 0), None);
        let bad = draw::case(9, 1);
        report.record(&bad, Some(Finding::NoAnswer("closed".into())));
        let outcomes = report.outcomes("durable-mcp-conformance fuzz --url U");
        let names: Vec<String> = outcomes.iter().map(|o| o.name.clone()).collect();
        assert_eq!(names, planned());
        let failed: Vec<&CaseOutcome> = outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Fail(_)))
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].name, format!("fuzz/{}", bad.family.name()));
        assert!(
            failed[0].output.contains("--seed 9 --start 1 --count 1"),
            "{}",
            failed[0].output
        );
        assert!(!report.clean());
    }

    #[test]
    fn memory_is_flat_when_its_median_after_the_warm_up_is_no_higher() {
        let mib = 1024;
        // A plateau: the second half sits where the first did, give or take the slack.
        assert_eq!(memory_verdict(150 * mib, 160 * mib), Verdict::Pass);
        assert_eq!(memory_verdict(150 * mib, 120 * mib), Verdict::Pass);
        // A tenth of a large warm median is allowed, 16 MiB of a small one.
        assert_eq!(memory_verdict(400 * mib, 435 * mib), Verdict::Pass);
        assert_eq!(memory_verdict(40 * mib, 56 * mib), Verdict::Pass);
        // A leak: memory keeps climbing.
        let Verdict::Fail(why) = memory_verdict(150 * mib, 190 * mib) else {
            panic!("a 40 MiB climb is no plateau");
        };
        assert!(why.contains("a leak"), "{why}");
    }

    #[test]
    fn memory_is_judged_only_with_enough_requests_on_each_side_of_the_warm_up() {
        let mut report = FuzzReport {
            rss_kib: Some((40_000, 200_000)),
            readings_kib: (
                vec![50_000, 100_000, 150_000],
                vec![200_000, 190_000, 210_000],
            ),
            warmup: 1000,
            ..FuzzReport::default()
        };
        report.sent.insert(Family::Methods, 1999);
        assert_eq!(report.memory_flat(), None, "999 requests after the warm-up");
        let memory = report.memory_outcome();
        assert_eq!(memory.verdict, Verdict::Pass);
        assert!(
            memory.output.contains("judged with at least 1000"),
            "{}",
            memory.output
        );
        report.sent.insert(Family::Methods, 2000);
        assert_eq!(report.memory_flat(), Some(false));
        assert!(matches!(report.memory_outcome().verdict, Verdict::Fail(_)));
        // One spike after the warm-up moves the peak, not the median.
        report.readings_kib.1 = vec![105_000, 400_000, 95_000];
        assert_eq!(report.memory_flat(), Some(true));
        assert_eq!(
            report.memory_figures(),
            Some([(100_000, 150_000), (105_000, 400_000)])
        );
    }
}
