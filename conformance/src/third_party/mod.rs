//! Third-party mode: checks someone else's MCP server through the durable path.
//!
//! `durable-mcp-conformance run --upstream-stdio "CMD ARGS"` or `--upstream-http URL`:
//! 1. **discovery**: lists the upstream's tools directly (rmcp client);
//! 2. **retry-policy/<tool>**: the retry policy the proxy infers from each tool's annotations,
//!    and why ([`durable_mcp::proxy::retry::infer`]); **unannotated-tools**: the tools whose
//!    policy rests on hints they do not give, and what that means (R-PRX-38);
//! 3. **fidelity/<tool>**: for the tools allowed (read-only by default, plus `--allow-tool`),
//!    calls each directly and through the durable path (a Nexus operation on a proxy fronting
//!    the upstream, on a dev server) and compares the two results as JSON;
//!    **notifications/<tool>**: where the tool sends progress or log messages, those a direct
//!    call got against those that travelled with the durable result, in order;
//! 4. **reattachment/<tool>**: delivers one start twice with the same Nexus request id to the
//!    proxy's handler, as the server does when it retries a start, and checks that both attach
//!    to one activity run that completes once with the direct result (`--reattach-tool`, else
//!    the first read-only tool whose fidelity check passed);
//! 5. **cancellation/<tool>**: for each `--cancel-tool`, starts it through the durable path,
//!    cancels it after `--cancel-after`, and checks that the operation ends canceled and that the
//!    cancel reached the tool call (its activity ended CANCELED).
//!
//! 6. **tasks-and-input**: one line for the server: whether its task-only tools and its tools
//!    that ask for input survived the durable path ([`features`]), and how a host sees them
//!    through a connector ([`host`]): the slowest read-only tool (or `--task-tool`) called as a
//!    task and followed with `tasks/get` to its result, its task ID within what Claude Code
//!    takes, and each tool that asks for input answered with `tasks/update` (R-CNF-19);
//!    **host-limits**: whether any answer is one a current host would refuse ([`host_limits`]).
//! 7. **resources-and-prompts**: one line for the server: its resource, template and prompt
//!    lists, its first resources read and its first prompts got, directly and through the
//!    durable path, each item equal or different ([`resources`], R-CNF-20).
//!
//! Every check that could not apply is reported as skipped, with why.

mod chaos;
mod compare;
mod durable;
mod features;
mod host;
pub mod host_limits;
mod report;
mod resources;
pub mod synth;
mod upstream;

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::Context;
use durable_mcp::{
    contract::call::CallNotifications,
    proxy::{
        retry::{ToolHints, infer, unannotated_note},
        upstream::UpstreamClient,
    },
};
use rmcp::model::JsonObject;
use serde_json::Value;

pub use durable::{CALL_TIMEOUT, DurablePath, UPSTREAM_SERVICE};
pub use report::{Check, Status, ThirdPartyReport};
pub use upstream::{DirectClient, Upstream};

use crate::harness::DevServer;

/// What a `retry-policy/<tool>` line adds for a tool whose policy rests on hints it does not
/// give (R-PRX-38).
const UNANNOTATED: &str = "; it gives no hint whether it is read-only, idempotent or \
    destructive: MCP reads it as destructive, the proxy retries it and runs it inline only when \
    its own override says execution = \"inline\" (missing_hints = \"mcp_defaults\" gives it one \
    attempt)";

/// What to check.
#[derive(Debug, Clone)]
pub struct ThirdPartyOptions {
    pub upstream: Upstream,
    /// Tools to call besides the read-only ones.
    pub allow_tools: Vec<String>,
    /// Tool name -> arguments (from `--args FILE`).
    pub arguments: BTreeMap<String, Value>,
    /// Tools that run long enough to be cancelled, and honour it (`--cancel-tool`).
    pub cancel_tools: Vec<String>,
    /// How long a cancellation check lets the call run before cancelling it.
    pub cancel_after: Duration,
    /// The tool for the reattachment check; `None`: the first tool whose fidelity check passed.
    pub reattach_tool: Option<String>,
    /// The tool a host calls as a task (`--task-tool`); `None`: the slowest read-only tool.
    pub task_tool: Option<String>,
    /// `--fuzz N`: call each tool of the fidelity check with N more inputs generated from its
    /// input schema, seeded with `seed`.
    pub fuzz: usize,
    /// `--chaos`: cut calls of each tool of the fidelity check mid-call (R-CNF-25).
    pub chaos: bool,
    /// `--wire-fuzz N`: send the upstream itself N malformed requests with the wire fuzzer
    /// (R-CNF-26), seeded with `seed`.
    pub wire_fuzz: u64,
    /// The seed for `--fuzz` and `--chaos` (printed in the report, so a run can be replayed).
    pub seed: u64,
}

impl ThirdPartyOptions {
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            allow_tools: Vec::new(),
            arguments: BTreeMap::new(),
            cancel_tools: Vec::new(),
            cancel_after: Duration::from_secs(1),
            reattach_tool: None,
            task_tool: None,
            fuzz: 0,
            chaos: false,
            wire_fuzz: 0,
            seed: 0,
        }
    }
}

/// Reads `--args FILE`: a JSON object mapping tool names to argument objects.
pub fn load_arguments(path: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Value::Object(map) = value else {
        anyhow::bail!(
            "{}: expected a JSON object of tool name -> arguments",
            path.display()
        );
    };
    for (tool, args) in &map {
        anyhow::ensure!(
            args.is_object(),
            "{}: the arguments for {tool:?} are not a JSON object",
            path.display()
        );
    }
    Ok(map.into_iter().collect())
}

/// One tool as discovery saw it, and what the checks may do with it.
struct ToolPlan {
    name: String,
    /// Marked read-only: safe to call once more to tell its own variation apart.
    read_only: bool,
    /// The arguments to call it with, or why it is not called.
    arguments: Result<JsonObject, String>,
    /// Its `execution.taskSupport`, when `required` or `optional` (R-CNF-19).
    task_support: Option<String>,
}

/// The report as it is built: `on_check` hears of each check as it finishes (live progress).
struct Live<F> {
    report: ThirdPartyReport,
    on_check: F,
}

impl<F: FnMut(&Check)> Live<F> {
    fn push(&mut self, name: impl Into<String>, status: Status, detail: impl Into<String>) {
        self.report.push(name, status, detail);
        if let Some(check) = self.report.checks.last() {
            (self.on_check)(check);
        }
    }
}

/// Checks the upstream. Never panics on a failed check (it becomes a `FAIL` line).
pub async fn run(server: &DevServer, options: &ThirdPartyOptions) -> ThirdPartyReport {
    run_with_progress(server, options, |_| {}).await
}

/// [`run`], calling `on_check` as each check finishes.
pub async fn run_with_progress(
    server: &DevServer,
    options: &ThirdPartyOptions,
    on_check: impl FnMut(&Check),
) -> ThirdPartyReport {
    let mut report = Live {
        report: ThirdPartyReport::new(options.upstream.describe()),
        on_check,
    };

    // 1. Discovery.
    let client = match tokio::time::timeout(CALL_TIMEOUT, options.upstream.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            report.push("discovery", Status::Fail(format!("connecting: {e:#}")), "");
            return report.report;
        }
        Err(_) => {
            report.push("discovery", Status::Fail("connecting timed out".into()), "");
            return report.report;
        }
    };
    let tools = match tokio::time::timeout(CALL_TIMEOUT, client.list_all_tools()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            report.push("discovery", Status::Fail(format!("tools/list: {e}")), "");
            let _ = client.cancel().await;
            return report.report;
        }
        Err(_) => {
            report.push("discovery", Status::Fail("tools/list timed out".into()), "");
            let _ = client.cancel().await;
            return report.report;
        }
    };
    // Calls go through a client that keeps each answer as the server wrote it (the proxy's own
    // upstream client), so a number the durable path kept is not compared with one rmcp's typed
    // model changed (an integer `priority` read as f32 comes back as 1.0).
    let raw = match options.upstream.transport() {
        Ok(transport) => UpstreamClient::new("direct", transport),
        Err(e) => {
            report.push("discovery", Status::Fail(format!("{e:#}")), "");
            let _ = client.cancel().await;
            return report.report;
        }
    };
    // `execution` as the server wrote it: rmcp's typed listing drops it (R-CNF-19).
    let as_written = raw.list_tools(CALL_TIMEOUT).await.unwrap_or_default();
    let tool_json: Vec<Value> = tools
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    report.push(
        "discovery",
        Status::Pass,
        format!("{} tool(s): {}", names.len(), names.join(", ")),
    );
    let named = options
        .allow_tools
        .iter()
        .map(|n| ("--allow-tool", n))
        .chain(options.cancel_tools.iter().map(|n| ("--cancel-tool", n)))
        .chain(options.reattach_tool.iter().map(|n| ("--reattach-tool", n)))
        .chain(options.task_tool.iter().map(|n| ("--task-tool", n)));
    for (flag, name) in named {
        if !names.contains(name) {
            report.push(
                format!("{}/{name}", flag.trim_start_matches("--")),
                Status::Fail(format!("{flag} {name}: the upstream has no such tool")),
                "",
            );
        }
    }

    // 2. Retry policy per tool, and what the calling checks may do with it.
    let mut plan = Vec::new();
    let mut unannotated = Vec::new();
    for (name, json) in names.iter().zip(&tool_json) {
        let hints = ToolHints::from_tool_json(json);
        let decision = infer(&hints);
        let attempts = match decision.policy.maximum_attempts {
            Some(n) if n > 0 => format!("max {n} attempt{}", if n == 1 { "" } else { "s" }),
            _ => "retried (unlimited attempts, bounded by timeouts)".to_owned(),
        };
        let mut why = format!("{attempts}: {}", decision.reason);
        if hints.rerun_unsaid() {
            why.push_str(UNANNOTATED);
            unannotated.push(name.clone());
        }
        report.push(format!("retry-policy/{name}"), Status::Pass, why);
        let read_only = hints.read_only == Some(true);
        let allowed = read_only || options.allow_tools.contains(name);
        plan.push(ToolPlan {
            name: name.clone(),
            read_only,
            arguments: if allowed {
                arguments_for(name, json, &options.arguments)
            } else {
                Err("not read-only (add --allow-tool to call it)".to_owned())
            },
            task_support: features::task_support(name, &as_written),
        });
    }

    if let Some(note) = unannotated_note(&unannotated, false) {
        report.push("unannotated-tools", Status::Pass, note);
    }

    // 3. Fidelity: direct calls first, then the durable path.
    let mut direct: BTreeMap<String, Result<Value, String>> = BTreeMap::new();
    let mut direct_notes: BTreeMap<String, CallNotifications> = BTreeMap::new();
    let mut elapsed: BTreeMap<String, Duration> = BTreeMap::new();
    for tool in &plan {
        if let Ok(args) = &tool.arguments {
            let began = std::time::Instant::now();
            let (result, notes) = if tool.task_support.as_deref() == Some("required") {
                // Only a task caller may call it: followed to its result (R-CNF-19).
                let result = features::call_direct_task(&raw, &tool.name, args).await;
                (result, CallNotifications::default())
            } else {
                call_direct_reporting(&raw, &tool.name, args).await
            };
            elapsed.insert(tool.name.clone(), began.elapsed());
            direct.insert(tool.name.clone(), result);
            direct_notes.insert(tool.name.clone(), notes);
        }
    }
    let has_features = raw
        .served_capabilities(CALL_TIMEOUT)
        .await
        .is_ok_and(|d| d.contains_key("resources") || d.contains_key("prompts"));
    let needs_durable = !direct.is_empty() || !options.cancel_tools.is_empty() || has_features;
    let durable = if needs_durable {
        Some(DurablePath::start(server, &options.upstream).await)
    } else {
        None
    };
    let mut reattach_candidates = Vec::new();
    let mut seen = Vec::new();
    for tool in &plan {
        let check = format!("fidelity/{}", tool.name);
        let args = match &tool.arguments {
            Ok(args) => args,
            Err(why) => {
                report.push(check, Status::Skipped(why.clone()), "");
                continue;
            }
        };
        let (durable_result, durable_notes) = match &durable {
            Some(Ok(path)) => path.call_reporting(&tool.name, args).await,
            Some(Err(e)) => (
                Err(format!("durable path unavailable: {e:#}")),
                CallNotifications::default(),
            ),
            None => unreachable!("a tool to call means a durable path"),
        };
        // A tool that asks for input must ask the same through the durable path (R-CNF-19).
        if let Ok(asked) = &direct[&tool.name]
            && features::asks_for_input(asked)
        {
            let (status, detail) = features::input_verdict(asked, &durable_result);
            seen.push(features::Seen {
                kind: "input",
                tool: tool.name.clone(),
                status: status.clone(),
                note: None,
            });
            report.push(check, status, detail);
            continue;
        }
        // A mismatch on a read-only tool: call it directly once more to tell the tool's own
        // variation (timestamps, ids) from what the durable path changed.
        let again = match (&direct[&tool.name], &durable_result) {
            (Ok(a), Ok(b)) if a != b && tool.read_only => {
                Some(call_direct(&raw, &tool.name, args).await)
            }
            _ => None,
        };
        let (status, detail) =
            compare::verdict(&direct[&tool.name], &durable_result, again.as_ref());
        // The reattachment check runs the tool once more: by default only a read-only one.
        if status == Status::Pass && direct[&tool.name].is_ok() && tool.read_only {
            reattach_candidates.push(tool.name.clone());
        }
        if tool.task_support.is_some() {
            let kind = "tasks";
            let (tool, status) = (tool.name.clone(), status.clone());
            seen.push(features::Seen {
                kind,
                tool,
                status,
                note: None,
            });
        }
        report.push(check, status, detail);
        if tool.task_support.as_deref() == Some("required") {
            // Followed directly with tasks/get, whose status messages are no notifications:
            // nothing to compare with the progress the durable path made of them.
            continue;
        }

        // Progress and log messages: what a direct call got against what travelled with the
        // durable result (what the connector replays to its caller), where the tool sends any.
        let notes = &direct_notes[&tool.name];
        let again = if compare::notifications_verdict(notes, &durable_notes, None)
            .is_some_and(|(s, _)| matches!(s, Status::Fail(_)))
        {
            Some(call_direct_reporting(&raw, &tool.name, args).await.1)
        } else {
            None
        };
        if let Some((status, detail)) =
            compare::notifications_verdict(notes, &durable_notes, again.as_ref())
        {
            report.push(format!("notifications/{}", tool.name), status, detail);
        }
    }

    let uncalled: Vec<String> = plan
        .iter()
        .filter(|t| t.task_support.is_some() && t.arguments.is_err())
        .map(|t| t.name.clone())
        .collect();
    let tools = Tools {
        plan: &plan,
        json: &tool_json,
        direct: &direct,
        elapsed: &elapsed,
    };
    let (host_seen, limits) = match &durable {
        Some(Ok(path)) => host_checks(path, &tools, options).await,
        _ => (Vec::new(), host_limits_line(&tools, &[])),
    };
    seen.extend(host_seen);
    let (status, detail) = features::summary(&seen, &uncalled);
    report.push("tasks-and-input", status, detail);
    report.push("host-limits", limits.0, limits.1);

    // 3a. Resources and prompts, read-only by nature: lists and a few reads, both ways.
    let (status, detail) = match &durable {
        Some(Ok(path)) => resources::check(&raw, path).await,
        Some(Err(e)) => Some((
            Status::Fail(format!("durable path unavailable: {e:#}")),
            String::new(),
        )),
        None => None,
    }
    .unwrap_or_else(|| {
        let why = "the server declares neither resources nor prompts";
        (Status::Skipped(why.into()), String::new())
    });
    report.push("resources-and-prompts", status, detail);

    // 3b. Fuzzing: more valid inputs per tool, compared the same way.
    if options.fuzz > 0 {
        for (tool, json) in plan.iter().zip(&tool_json) {
            if tool.arguments.is_err() || options.arguments.contains_key(&tool.name) {
                continue; // Not called at all, or the user fixed its arguments.
            }
            let check = format!("fuzz/{}", tool.name);
            let (status, detail) = match (&durable, json.get("inputSchema")) {
                (Some(Ok(path)), Some(schema)) => {
                    fuzz_tool(&raw, path, tool, schema, options).await
                }
                (Some(Err(e)), _) => (
                    Status::Fail(format!("durable path unavailable: {e:#}")),
                    String::new(),
                ),
                _ => (Status::Skipped("no input schema".into()), String::new()),
            };
            report.push(check, status, detail);
        }
    }

    let _ = client.cancel().await;
    raw.close().await;

    // 4. Reattachment.
    let reattach = options
        .reattach_tool
        .clone()
        .or_else(|| reattach_candidates.first().cloned());
    match (&durable, reattach) {
        (_, None) => report.push(
            "reattachment",
            Status::Skipped(
                "no tool to use: no read-only tool passed fidelity with a result; name one \
                 with --reattach-tool (arguments from --args)"
                    .into(),
            ),
            "",
        ),
        (Some(Ok(path)), Some(tool)) => {
            let check = format!("reattachment/{tool}");
            let args = plan
                .iter()
                .find(|t| t.name == tool)
                .map(|t| match &t.arguments {
                    Ok(a) => Ok(a.clone()),
                    // Named explicitly: the user allows calling it.
                    Err(_) => options
                        .arguments
                        .get(&tool)
                        .and_then(|v| v.as_object().cloned())
                        .ok_or_else(|| format!("--args gives no arguments for {tool}")),
                });
            match (args, direct.get(&tool)) {
                (Some(Ok(args)), Some(Ok(expected))) => {
                    let (status, detail) = path.reattach_check(&tool, &args, expected).await;
                    report.push(check, status, detail);
                }
                (Some(Err(why)), _) => report.push(check, Status::Skipped(why), ""),
                _ => report.push(
                    check,
                    Status::Skipped(
                        "its direct call gave no result to compare with (allow it with --allow-tool)"
                            .into(),
                    ),
                    "",
                ),
            }
        }
        (Some(Err(e)), Some(tool)) => report.push(
            format!("reattachment/{tool}"),
            Status::Fail(format!("durable path unavailable: {e:#}")),
            "",
        ),
        (None, Some(tool)) => report.push(
            format!("reattachment/{tool}"),
            Status::Skipped("no durable path was started".into()),
            "",
        ),
    }

    // 5. Cancellation.
    if options.cancel_tools.is_empty() {
        report.push(
            "cancellation",
            Status::Skipped(
                "no tool named: pass --cancel-tool NAME for a tool that runs long enough to be \
                 cancelled (arguments from --args)"
                    .into(),
            ),
            "",
        );
    }
    for tool in &options.cancel_tools {
        let check = format!("cancellation/{tool}");
        let Some((_, json)) = names.iter().zip(&tool_json).find(|(n, _)| *n == tool) else {
            continue; // Already reported as unknown.
        };
        let args = match arguments_for(tool, json, &options.arguments) {
            Ok(a) => a,
            Err(why) => {
                report.push(check, Status::Skipped(why), "");
                continue;
            }
        };
        match &durable {
            Some(Ok(path)) => {
                let (status, detail) = path.cancel_check(tool, &args, options.cancel_after).await;
                report.push(check, status, detail);
            }
            Some(Err(e)) => report.push(
                check,
                Status::Fail(format!("durable path unavailable: {e:#}")),
                "",
            ),
            None => unreachable!("a cancel tool means a durable path"),
        }
    }
    // 6. Chaos: calls cut mid-call, against what each tool's annotations promise.
    if options.chaos {
        let tools = chaos_tools(&plan, &tool_json, &direct);
        cut_tools(server, options, durable.as_ref(), &tools, &mut report).await;
    }
    if let Some(Ok(path)) = durable {
        path.stop().await;
    }
    // 7. The wire fuzzer against the upstream itself (a stdio server of its own).
    if options.wire_fuzz > 0 {
        wire_fuzz(options, &mut report).await;
    }
    report.report
}

/// Sends the upstream `options.wire_fuzz` malformed requests (R-CNF-26): a stdio upstream is
/// started once more for them; an HTTP one must be on loopback. One check per family, the
/// server's memory and (stdio) its panics, as `wire-fuzz/...`.
async fn wire_fuzz<F: FnMut(&Check)>(options: &ThirdPartyOptions, report: &mut Live<F>) {
    let (target, replay) = match &options.upstream {
        Upstream::Stdio { command, args } => {
            let mut process = std::process::Command::new(command);
            process.args(args);
            let line = shlex::try_join(
                std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)),
            )
            .unwrap_or_default();
            (
                crate::fuzz::TargetSpec::Stdio(crate::fuzz::stdio::Command::of(&process)),
                format!(
                    "durable-mcp-conformance fuzz --stdio {}",
                    shlex::try_quote(&line).unwrap_or_default()
                ),
            )
        }
        Upstream::Http { url, headers } => (
            crate::fuzz::TargetSpec::Url {
                url: url.clone(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            format!("durable-mcp-conformance fuzz --url {url}"),
        ),
    };
    let fuzz = crate::fuzz::FuzzOptions {
        target,
        seed: options.seed,
        start: 0,
        count: options.wire_fuzz,
        duration: Duration::from_secs(600),
        timeout: Duration::from_secs(10),
        pid: None,
        concurrency: 1,
        warmup: options.wire_fuzz / 2,
    };
    let fuzzed = match crate::fuzz::run(fuzz).await {
        Ok(fuzzed) => fuzzed,
        Err(e) => {
            report.push("wire-fuzz", Status::Fail(format!("{e:#}")), "");
            return;
        }
    };
    for outcome in fuzzed.outcomes(&replay) {
        let status = match outcome.verdict {
            crate::report::Verdict::Pass => Status::Pass,
            crate::report::Verdict::Fail(why) => Status::Fail(why),
            crate::report::Verdict::Skip(why) => Status::Skipped(why),
        };
        let name = outcome.name.replacen("fuzz/", "wire-fuzz/", 1);
        report.push(name, status, outcome.output);
    }
}

/// What the fidelity check learnt of each tool: its plan, its listing, its direct answer and how
/// long that took.
struct Tools<'a> {
    plan: &'a [ToolPlan],
    json: &'a [Value],
    direct: &'a BTreeMap<String, Result<Value, String>>,
    elapsed: &'a BTreeMap<String, Duration>,
}

impl Tools<'_> {
    fn listing(&self, name: &str) -> &Value {
        let at = self.plan.iter().position(|t| t.name == name);
        at.and_then(|i| self.json.get(i)).unwrap_or(&Value::Null)
    }

    /// The tool a host calls as a task: `--task-tool`, else the read-only tool whose direct
    /// call took longest (one that answered a result, not a question); with its arguments.
    fn task_tool(&self, options: &ThirdPartyOptions) -> Result<(String, JsonObject), String> {
        if let Some(name) = &options.task_tool {
            // Named: the author allows calling it, read-only or not.
            let args = arguments_for(name, self.listing(name), &options.arguments)?;
            return Ok((name.clone(), args));
        }
        let answered = |t: &&ToolPlan| {
            t.read_only
                && matches!(self.direct.get(&t.name), Some(Ok(r)) if !features::asks_for_input(r))
        };
        let slowest = self
            .plan
            .iter()
            .filter(answered)
            .max_by_key(|t| self.elapsed.get(&t.name).copied().unwrap_or_default());
        match slowest {
            Some(tool) => Ok((tool.name.clone(), tool.arguments.clone()?)),
            None => Err(
                "no read-only tool answered directly; name one with --task-tool \
                         (arguments from --args)"
                    .into(),
            ),
        }
    }
}

/// How a host sees the server through a connector (R-CNF-19): the task tool followed as a task,
/// every tool that asked for input answered in its task; and the `host-limits` line.
async fn host_checks(
    path: &DurablePath,
    tools: &Tools<'_>,
    options: &ThirdPartyOptions,
) -> (Vec<features::Seen>, (Status, String)) {
    let host = match host::HostPath::start(path).await {
        Ok(host) => host,
        Err(e) => {
            let why = format!("a connector in front of the durable path did not start: {e:#}");
            let seen = features::Seen {
                kind: "tasks",
                tool: "(connector)".into(),
                status: Status::Fail(why),
                note: None,
            };
            return (vec![seen], host_limits_line(tools, &[]));
        }
    };
    let mut seen = Vec::new();
    let mut targets = Vec::new();
    match tools.task_tool(options) {
        Ok((tool, args)) => targets.push(("tasks", tool, Ok(args))),
        Err(why) => seen.push(features::Seen {
            kind: "tasks",
            tool: "(none)".into(),
            status: Status::Skipped(why),
            note: None,
        }),
    }
    for tool in tools.plan {
        if matches!(tools.direct.get(&tool.name), Some(Ok(r)) if features::asks_for_input(r)) {
            targets.push(("input", tool.name.clone(), tool.arguments.clone()));
        }
    }
    let mut results = Vec::new();
    for (kind, tool, args) in targets {
        let followed = match args {
            Ok(args) => host.follow(&tool, &args).await,
            Err(why) => Err(why),
        };
        if let Ok(f) = &followed {
            results.push((tool.clone(), f.result.clone()));
        }
        let (status, note) = host::verdict(&followed, kind == "input");
        seen.push(features::Seen {
            kind,
            tool,
            status,
            note: Some(note),
        });
    }
    (seen, host_limits_line(tools, &results))
}

/// The `host-limits` line: every direct answer, and every answer a host got through the
/// connector (`through`), against what current hosts refuse ([`host_limits`]).
fn host_limits_line(tools: &Tools<'_>, through: &[(String, Value)]) -> (Status, String) {
    let direct = tools.direct.iter().filter_map(|(name, r)| match r {
        Ok(r) if !features::asks_for_input(r) => Some((name.clone(), r)),
        _ => None,
    });
    let connector = through
        .iter()
        .map(|(name, r)| (format!("{name} through the connector"), r));
    let mut checked = 0;
    let mut refused = Vec::new();
    for (what, result) in direct.chain(connector) {
        checked += 1;
        let tool = tools.listing(what.split(' ').next().unwrap_or(&what));
        refused.extend(
            host_limits::result_refusals(tool, result)
                .into_iter()
                .map(|why| format!("{what}: {why}")),
        );
    }
    let whose = "the TypeScript SDK 1.32.2 client's result schemas, which hosts built on it share";
    if checked == 0 {
        return (Status::Skipped("no answer to check".into()), String::new());
    }
    if refused.is_empty() {
        (
            Status::Pass,
            format!("{checked} answer(s) checked against {whose}: none would be refused"),
        )
    } else {
        (
            Status::Fail(format!(
                "a host would refuse {} (by {whose})",
                refused.join("; ")
            )),
            String::new(),
        )
    }
}

/// The tools `--chaos` cuts: those the fidelity check called, with the direct result and the
/// attempts the proxy allows each (tools only a task caller may call are followed as tasks,
/// which a cut does not end: they are left out).
fn chaos_tools(
    plan: &[ToolPlan],
    tool_json: &[Value],
    direct: &BTreeMap<String, Result<Value, String>>,
) -> Vec<chaos::ChaosTool> {
    plan.iter()
        .zip(tool_json)
        .filter(|(tool, _)| tool.task_support.as_deref() != Some("required"))
        .filter_map(|(tool, json)| {
            let args = tool.arguments.as_ref().ok()?.clone();
            let policy = infer(&ToolHints::from_tool_json(json)).policy;
            Some(chaos::ChaosTool {
                name: tool.name.clone(),
                args,
                direct: direct.get(&tool.name)?.clone(),
                one_attempt: policy.maximum_attempts == Some(1),
            })
        })
        .collect()
}

/// Cuts each tool's calls: a stdio server's process killed through the fidelity check's
/// durable path, an HTTP server's connection cut through a relay and a durable path of its own.
async fn cut_tools<F: FnMut(&Check)>(
    server: &DevServer,
    options: &ThirdPartyOptions,
    durable: Option<&anyhow::Result<DurablePath>>,
    tools: &[chaos::ChaosTool],
    report: &mut Live<F>,
) {
    if tools.is_empty() {
        let why = "no tool to cut: the fidelity check called none (allow one with --allow-tool)";
        report.push("chaos", Status::Skipped(why.into()), "");
        return;
    }
    let mut rng = crate::chaos::schedule::rng(options.seed, 0);
    let relayed = match &options.upstream {
        Upstream::Stdio { .. } => None,
        http => Some(chaos::relayed(http).await),
    };
    let own_path = match &relayed {
        Some(Ok((_, through))) => Some(DurablePath::start(server, through).await),
        _ => None,
    };
    let (path, cutter) = match (&relayed, &own_path, durable) {
        (None, _, Some(Ok(path))) => (path, chaos::Cutter::Kill),
        (Some(Ok((relay, _))), Some(Ok(path)), _) => (path, chaos::Cutter::Relay(relay.clone())),
        (Some(Err(why)), _, _) => {
            report.push("chaos", Status::Skipped(why.clone()), "");
            return;
        }
        (_, Some(Err(e)), _) | (None, _, Some(Err(e))) => {
            let why = format!("durable path unavailable: {e:#}");
            report.push("chaos", Status::Fail(why), "");
            return;
        }
        _ => unreachable!("a tool to cut means a durable path"),
    };
    for tool in tools {
        let cuts = chaos::cut_calls(path, &cutter, tool, &mut rng).await;
        let (status, detail) = chaos::verdict(tool, &cuts);
        report.push(format!("chaos/{}", tool.name), status, detail);
    }
    if let Some(Ok(path)) = own_path {
        path.stop().await;
    }
}

/// The arguments for a tool: from `--args`, else built from its input schema
/// ([`synth::synthesize`]: required fields, enums, bounds, formats, the author's examples).
fn arguments_for(
    name: &str,
    json: &Value,
    given: &BTreeMap<String, Value>,
) -> Result<JsonObject, String> {
    if let Some(args) = given.get(name) {
        return Ok(args.as_object().cloned().unwrap_or_default());
    }
    let Some(schema) = json.get("inputSchema") else {
        return Ok(JsonObject::new());
    };
    match synth::synthesize(schema) {
        Ok(Value::Object(args)) => Ok(args),
        Ok(Value::Null) => Ok(JsonObject::new()),
        Ok(other) => Err(format!(
            "its input schema describes {other}, not an object; give --args"
        )),
        Err(why) => Err(format!(
            "no arguments could be built from its input schema ({why}); give them with --args"
        )),
    }
}

/// Calls `tool` with `options.fuzz` inputs drawn from its schema, directly and durably; the first
/// input whose results differ fails the check, with the input and the seed to replay it.
async fn fuzz_tool(
    client: &UpstreamClient,
    path: &DurablePath,
    tool: &ToolPlan,
    schema: &Value,
    options: &ThirdPartyOptions,
) -> (Status, String) {
    let strategy = match synth::strategy(schema) {
        Ok(s) => s,
        Err(why) => {
            return (
                Status::Skipped(format!("no generator: {why}")),
                String::new(),
            );
        }
    };
    let inputs = synth::sample(&strategy, options.seed, options.fuzz);
    for (i, input) in inputs.iter().enumerate() {
        let Some(args) = input.as_object() else {
            continue;
        };
        let direct = call_direct(client, &tool.name, args).await;
        let durable = path.call(&tool.name, args).await;
        let again = match (&direct, &durable) {
            (Ok(a), Ok(b)) if a != b && tool.read_only => {
                Some(call_direct(client, &tool.name, args).await)
            }
            _ => None,
        };
        let (status, detail) = compare::verdict(&direct, &durable, again.as_ref());
        if status != Status::Pass {
            let replay = format!(
                "input {} of {} (seed {}): {input}",
                i + 1,
                inputs.len(),
                options.seed
            );
            let status = match status {
                Status::Fail(why) => Status::Fail(format!("{why}; {replay}")),
                other => other,
            };
            return (status, detail);
        }
    }
    (
        Status::Pass,
        format!(
            "{} generated input(s) gave the same result both ways (seed {})",
            inputs.len(),
            options.seed
        ),
    )
}

/// [`call_direct`], and the progress and log messages the upstream sent for the call.
async fn call_direct_reporting(
    client: &UpstreamClient,
    name: &str,
    args: &JsonObject,
) -> (Result<Value, String>, CallNotifications) {
    let mut notes = CallNotifications::default();
    let call = client.call_tool_reporting(name, args.clone(), |n| notes.push(n));
    let result = match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("timed out after {} s", CALL_TIMEOUT.as_secs())),
    };
    (result, notes)
}

async fn call_direct(
    client: &UpstreamClient,
    name: &str,
    args: &JsonObject,
) -> Result<Value, String> {
    match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(name, args.clone())).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("timed out after {} s", CALL_TIMEOUT.as_secs())),
    }
}
