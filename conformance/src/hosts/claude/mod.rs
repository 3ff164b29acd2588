//! Claude Code as a host (R-CNF-22): the real binary, interactive on a pseudo-terminal (the
//! mode in which it declares the tasks extension), its model played by a scripted stand-in on
//! loopback. One Claude Code process holds four MCP servers, each upstream directly and through
//! durable-mcp, and plays one turn per call; each case compares what reached the model through
//! durable-mcp with what reached it from the upstream itself.

mod pty;
mod screen;
mod standin;
mod turn;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use self::{
    pty::Pty,
    standin::{Notification, StandIn, Turn},
    turn::Cancel,
};
use super::{Case, stack::Stack};
use crate::fixtures::{Ledger, LedgerEvent};

/// A fake key: the stand-in accepts anything, and Claude Code must not ask about it.
const API_KEY: &str = "sk-ant-durable-mcp-stand-in-000000000000";
/// How long the whole Claude Code run may take (its turns take about 30 s together): turns
/// still to play after it fail at once, and Claude Code is killed.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// One call, played through durable-mcp (server `<upstream>`) and directly (`<upstream>d`).
struct Call {
    case: &'static str,
    upstream: &'static str,
    tool: &'static str,
    input: Value,
    /// The mock's ledger key, for a call the host cancels.
    cancel_key: Option<&'static str>,
}

fn calls() -> Vec<Call> {
    let call = |case, upstream, tool, input| Call {
        case,
        upstream,
        tool,
        input,
        cancel_key: None,
    };
    vec![
        call(
            "short-call",
            "ev",
            "echo",
            json!({"message": "hello from Claude Code"}),
        ),
        call(
            "long-call-becomes-a-task",
            "ev",
            "trigger-long-running-operation",
            json!({"duration": 4, "steps": 4}),
        ),
        call(
            "confirmation-inside-a-task",
            "mock",
            "ask",
            json!({"key": "cc-ask", "sleep_ms": 2500}),
        ),
        call(
            "failing-tool",
            "mock",
            "refuse",
            json!({"key": "cc-refuse"}),
        ),
        Call {
            cancel_key: Some("cc-cancel"),
            ..call(
                "cancelled-by-the-host",
                "mock",
                "slow",
                json!({"sleep_ms": 60000}),
            )
        },
    ]
}

/// What the model got from one played call.
#[derive(Debug, Default)]
pub struct Played {
    /// The `tool_result` text; `None` when the turn was interrupted before one.
    pub text: Option<String>,
    pub is_error: bool,
    /// Claude Code's id of the background task the call moved to, if it did.
    pub background: Option<String>,
    pub notification: Option<Notification>,
    /// The `TaskStop` result, for a stopped task.
    pub stopped: Option<String>,
    pub dialogs_answered: usize,
    pub interrupted: bool,
    /// How many times the prompt was typed and Enter pressed (more than once each when Claude
    /// Code was not ready for them, or its MCP servers still connecting).
    pub typed: usize,
    pub enters: usize,
    /// Why the turn could not be played to its end (a hang, Claude Code gone).
    pub error: Option<String>,
}

impl Played {
    /// What finally reached the model as the call's answer.
    fn answer(&self) -> Option<&str> {
        match (&self.background, &self.notification) {
            (Some(_), Some(n)) => Some(&n.result),
            (Some(_), None) => None,
            (None, _) => self.text.as_deref(),
        }
    }
}

/// The cases `wanted` selects (by id), each from two turns of one Claude Code run that plays
/// only their calls.
pub async fn cases(binary: &Path, stack: &Stack, wanted: impl Fn(&str) -> bool) -> Vec<Case> {
    let started = Instant::now();
    let calls: Vec<Call> = calls()
        .into_iter()
        .filter(|c| wanted(&id(c.case)))
        .collect();
    let played = match play(binary, stack, &calls).await {
        Ok(played) => played,
        Err(e) => {
            return calls
                .iter()
                .map(|c| Case::failed(id(c.case), e.clone(), started.elapsed()))
                .collect();
        }
    };
    calls
        .iter()
        .zip(played)
        .map(|(call, (durable, direct, log))| {
            let mut case = judge(call, &durable, &direct, &stack.ledger);
            case.lines.extend(log);
            case
        })
        .collect()
}

fn id(case: &str) -> String {
    format!("hosts/claude-code/{case}")
}

const DURABLY: &str = "through durable-mcp";
const DIRECTLY: &str = "directly";

/// Runs Claude Code and plays each of `calls` twice (durably, then directly); returns both
/// outcomes and a log line per turn.
async fn play(
    binary: &Path,
    stack: &Stack,
    calls: &[Call],
) -> Result<Vec<(Played, Played, Vec<String>)>, String> {
    let standin = StandIn::start()
        .await
        .map_err(|e| format!("starting the stand-in: {e}"))?;
    let home = tempfile::Builder::new()
        .prefix("durable-mcp-claude-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let command = command(binary, home.path(), stack, &standin.url).map_err(|e| e.to_string())?;
    let mut pty =
        Pty::spawn(command, 160, 50).map_err(|e| format!("starting Claude Code: {e:#}"))?;
    let run_until = Instant::now() + RUN_TIMEOUT;
    let mut out = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let mut log = Vec::new();
        let mut pair = Vec::new();
        for (path, server) in [
            (DURABLY, call.upstream.to_owned()),
            (DIRECTLY, format!("{}d", call.upstream)),
        ] {
            // A call the host cancels has a ledger key of its own per path.
            let cancel_key = call.cancel_key.map(|base| format!("{base}-{server}"));
            let mut input = call.input.clone();
            if let Some(key) = &cancel_key {
                input["key"] = json!(key);
            }
            let turn = Turn {
                marker: format!("hosts turn {n} {server}"),
                tool: format!("mcp__{server}__{}", call.tool),
                input,
                stop_task: cancel_key.is_some(),
            };
            let cancel = cancel_key.map(|key| Cancel {
                ledger: &stack.ledger,
                tool: call.tool.to_owned(),
                key,
                escape: path == DIRECTLY,
            });
            let turn_started = Instant::now();
            let played = match turn::play(&mut pty, &standin, turn, cancel, run_until).await {
                Ok(played) => played,
                Err(e) => Played {
                    error: Some(format!(
                        "{path}: {e}\n{}",
                        what_was_seen(&pty, &standin, home.path())
                    )),
                    ..Played::default()
                },
            };
            log.push(format!(
                "{path} ({:.1} s): {}",
                turn_started.elapsed().as_secs_f64(),
                describe(&played)
            ));
            pair.push(played);
        }
        let direct = pair.pop().unwrap_or_default();
        let durable = pair.pop().unwrap_or_default();
        out.push((durable, direct, log));
    }
    Ok(out)
}

/// Claude Code interactive, in a scratch home that says onboarding is done, the key approved
/// and the folder trusted, with the four MCP servers and only the environment it needs (the
/// machine's own keys and proxies never reach it).
fn command(
    binary: &Path,
    home: &Path,
    stack: &Stack,
    base_url: &str,
) -> anyhow::Result<std::process::Command> {
    let project = home.join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        home.join(".claude.json"),
        claude_json(API_KEY, &project).to_string(),
    )?;
    let servers = json!({"mcpServers": {
        "ev": {"type": "http", "url": stack.everything.durable},
        "evd": {"type": "http", "url": stack.everything.direct},
        "mock": {"type": "http", "url": stack.mock.durable},
        "mockd": {"type": "http", "url": stack.mock.direct},
    }});
    let config = home.join("mcp.json");
    std::fs::write(&config, servers.to_string())?;
    let mut command = std::process::Command::new(binary);
    command
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TERM", "xterm-256color")
        .env("LANG", "C.UTF-8")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("ENABLE_TOOL_SEARCH", "false")
        .arg("--mcp-config")
        .arg(&config)
        .args([
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__ev",
            "mcp__evd",
            "mcp__mock",
            "mcp__mockd",
            "TaskStop",
        ]);
    Ok(command)
}

/// `~/.claude.json` for a first run that shows no onboarding, no "use this API key?" and no
/// folder-trust screen.
pub fn claude_json(api_key: &str, project: &Path) -> Value {
    let tail: String = api_key
        .chars()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    json!({
        "hasCompletedOnboarding": true,
        "customApiKeyResponses": {"approved": [tail], "rejected": []},
        "projects": {project.to_string_lossy(): {"hasTrustDialogAccepted": true}},
    })
}

/// Claude Code's id of the background task a `tool_result` says the call moved to.
pub fn background_task(text: &str) -> Option<String> {
    let rest = &text[text.find("moved to the background as task ")? + 32..];
    Some(
        rest.split(|c: char| !c.is_alphanumeric())
            .next()?
            .to_owned(),
    )
    .filter(|t| !t.is_empty())
}

fn describe(played: &Played) -> String {
    let mut parts = Vec::new();
    match (&played.background, &played.text) {
        (Some(task), _) => parts.push(format!("moved to background task {task}")),
        (None, Some(text)) => parts.push(format!(
            "tool_result{} {}",
            if played.is_error { " (error)" } else { "" },
            cut(text)
        )),
        (None, None) => parts.push("no tool_result".into()),
    }
    if let Some(n) = &played.notification {
        parts.push(format!("task {}: {}", n.status, cut(&n.result)));
    }
    if played.dialogs_answered > 0 {
        parts.push(format!("{} form(s) answered", played.dialogs_answered));
    }
    if let Some(stopped) = &played.stopped {
        parts.push(format!("TaskStop: {}", cut(stopped)));
    }
    if played.interrupted {
        parts.push("interrupted with Escape".into());
    }
    if played.typed > 1 || played.enters > 1 {
        parts.push(format!(
            "prompt typed {} time(s), Enter pressed {} time(s)",
            played.typed, played.enters
        ));
    }
    parts.join("; ")
}

fn cut(text: &str) -> String {
    super::compare::short(&Value::String(text.to_owned()))
}

/// Judges one case from its durable and direct turns.
fn judge(call: &Call, durable: &Played, direct: &Played, ledger: &Ledger) -> Case {
    let verdict = (|| -> Result<String, String> {
        if let Some(e) = durable.error.as_ref().or(direct.error.as_ref()) {
            return Err(e.clone());
        }
        let wants_task = matches!(
            call.case,
            "long-call-becomes-a-task" | "confirmation-inside-a-task" | "cancelled-by-the-host"
        );
        if wants_task && durable.background.is_none() {
            return Err(format!(
                "through durable-mcp the call did not become a task Claude Code follows: the model got {}",
                describe(durable)
            ));
        }
        if call.case == "confirmation-inside-a-task" && durable.dialogs_answered == 0 {
            return Err("through durable-mcp Claude Code showed no confirmation form".into());
        }
        if let Some(base) = call.cancel_key {
            for server in [call.upstream.to_owned(), format!("{}d", call.upstream)] {
                let key = format!("{base}-{server}");
                let completed = ledger.count_key(call.tool, LedgerEvent::Completed, &key);
                let cancelled = ledger.count_key(call.tool, LedgerEvent::Cancelled, &key);
                if completed > 0 || cancelled == 0 {
                    return Err(format!(
                        "the upstream saw {cancelled} cancel(s) and {completed} completion(s) of {key}: the host's cancel did not stop it"
                    ));
                }
            }
            return Ok(format!(
                "both calls were cancelled upstream, neither completed ({})",
                describe(durable)
            ));
        }
        if let Some(n) = &durable.notification
            && n.status != "completed"
        {
            return Err(format!(
                "the background task ended {}: {}",
                n.status,
                cut(&n.result)
            ));
        }
        if durable.is_error != direct.is_error {
            return Err(format!(
                "isError differs: durably {}, directly {}",
                durable.is_error, direct.is_error
            ));
        }
        match (durable.answer(), direct.answer()) {
            (Some(a), Some(b)) if same_answer(a, b) => {
                Ok(format!("the model got the same answer: {}", cut(b)))
            }
            (a, b) => Err(format!(
                "the model got {:?} through durable-mcp and {:?} directly",
                a.map(cut),
                b.map(cut)
            )),
        }
    })();
    match verdict {
        Ok(line) => Case::passed(id(call.case), vec![line]),
        Err(why) => Case::failing(id(call.case), why),
    }
}

/// The same answer: equal text, or equal JSON.
fn same_answer(a: &str, b: &str) -> bool {
    a.trim() == b.trim()
        || matches!((serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)), (Ok(x), Ok(y)) if x == y)
}

/// For a failed turn: Claude Code's screen, the stand-in's last requests and the errors of
/// Claude Code's MCP logs.
fn what_was_seen(pty: &Pty, standin: &StandIn, home: &Path) -> String {
    let requests = standin.with(|r| r.requests.iter().cloned().collect::<Vec<_>>());
    format!(
        "Claude Code's screen:\n{}\nthe stand-in's last requests:\n{}\n{}",
        pty.screen().tail(15),
        requests.join("\n"),
        mcp_errors(home)
    )
}

/// Error lines of Claude Code's MCP logs (`~/.cache/claude-cli-nodejs/<project>/mcp-logs-*`),
/// the last few, for a failure message: why it refused an answer.
fn mcp_errors(home: &Path) -> String {
    let mut lines = Vec::new();
    let root = home.join(".cache").join("claude-cli-nodejs");
    for project in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for logs in std::fs::read_dir(project.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for file in std::fs::read_dir(logs.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let text = std::fs::read_to_string(file.path()).unwrap_or_default();
                lines.extend(text.lines().filter(|l| l.contains("\"error\"")).map(cut));
            }
        }
    }
    let start = lines.len().saturating_sub(5);
    format!(
        "Claude Code's MCP log errors:\n{}",
        lines[start..].join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_task_id_is_read_from_the_tool_result() {
        let text = "MCP tool \"mockd/long_task\" started server-side task 166b. It was moved to the background as task krvijwbv3 and keeps running";
        assert_eq!(background_task(text).as_deref(), Some("krvijwbv3"));
        assert_eq!(background_task("Echo: hi"), None);
    }

    #[test]
    fn the_first_run_config_approves_only_the_keys_tail() {
        let config = claude_json(
            "sk-ant-0123456789abcdefghijKLMNOPQRSTUVWXYZ",
            Path::new("/p"),
        );
        assert_eq!(
            config["customApiKeyResponses"]["approved"],
            json!(["ghijKLMNOPQRSTUVWXYZ"])
        );
        assert_eq!(config["projects"]["/p"]["hasTrustDialogAccepted"], true);
    }

    #[test]
    fn answers_compare_as_text_or_json() {
        assert!(same_answer("{\"a\": 1}", "{\"a\":1}\n"));
        assert!(!same_answer("Echo: a", "Echo: b"));
    }
}
