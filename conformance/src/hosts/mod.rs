//! The `hosts` family (R-CNF-22, R-CNF-23): real MCP clients nobody here wrote drive the
//! durable path (connector -> Temporal -> proxy -> a real upstream), and each answer is
//! compared with the same client's answer from the upstream directly. Claude Code runs
//! interactive under a pseudo-terminal with a stand-in for its model; the TypeScript and
//! Python SDK clients run the driver scripts under `conformance/hosts/`; the Inspector CLI
//! lists and calls. Each host is installed pinned into the harness cache on first use
//! ([`install`]); a host that cannot be installed makes its cases `skipped:` with the reason.
//!
//! Hosts run one at a time (a Claude Code run is heavy), after the bundled scenarios, on one
//! [`stack::Stack`]; every host process is bounded in time and killed when it hangs, and its
//! cases then fail naming the step.

mod claude;
mod compare;
pub mod install;
mod sdk;
pub mod stack;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::{
    harness::DevServer,
    run::ScenarioResult,
    scenario::{Family, Filter},
};

/// A host process still running after this is killed and its step fails.
pub const HOST_TIMEOUT: Duration = Duration::from_secs(240);

/// One case of the family, as `list` shows it.
#[derive(Debug, Clone, Copy)]
pub struct HostCheck {
    pub id: &'static str,
    pub rules: &'static [&'static str],
    pub description: &'static str,
}

const CC: &[&str] = &["R-CNF-22"];
const SDK: &[&str] = &["R-CNF-23"];

/// Every case, in the order they run.
pub const CHECKS: &[HostCheck] = &[
    HostCheck {
        id: "hosts/claude-code/short-call",
        rules: CC,
        description: "Claude Code (interactive, tasks extension declared) calls server-everything's echo through durable-mcp and directly; the model gets the same tool_result.",
    },
    HostCheck {
        id: "hosts/claude-code/long-call-becomes-a-task",
        rules: &["R-CNF-22", "R-CON-6", "R-CON-39"],
        description: "A 4-second server-everything call becomes a task Claude Code moves to the background and follows; the result that reaches the model equals the direct call's.",
    },
    HostCheck {
        id: "hosts/claude-code/confirmation-inside-a-task",
        rules: &["R-CNF-22", "R-CON-40"],
        description: "A tool that asks for a confirmation after 2.5 s: through durable-mcp it is a task when it asks, Claude Code shows the form, the answer goes back with tasks/update, and the model gets the direct call's answer.",
    },
    HostCheck {
        id: "hosts/claude-code/failing-tool",
        rules: &["R-CNF-22", "R-CON-4"],
        description: "A tool that answers isError: the model gets the same error text both ways.",
    },
    HostCheck {
        id: "hosts/claude-code/cancelled-by-the-host",
        rules: &["R-CNF-22", "R-CON-5", "R-CON-6"],
        description: "A 60-second call the host cancels (TaskStop on the background task through durable-mcp, Escape directly): the upstream sees both cancelled and neither completed.",
    },
    HostCheck {
        id: "hosts/typescript-sdk/list",
        rules: SDK,
        description: "The TypeScript SDK client lists both upstreams' tools alike through durable-mcp and directly (the connector's task offer aside).",
    },
    HostCheck {
        id: "hosts/typescript-sdk/call",
        rules: SDK,
        description: "TypeScript SDK: calls (a result and an isError result) give the same answers both ways.",
    },
    HostCheck {
        id: "hosts/typescript-sdk/task-followed-with-tasks-get",
        rules: &["R-CNF-23", "R-CON-6", "R-CON-39"],
        description: "TypeScript SDK, declaring the tasks extension: a long call of each upstream becomes a task, followed with tasks/get to the direct call's result.",
    },
    HostCheck {
        id: "hosts/typescript-sdk/input-answered-with-tasks-update",
        rules: &["R-CNF-23", "R-CON-40"],
        description: "TypeScript SDK: a task that asks for a confirmation reads input_required, is answered with tasks/update and completes with the direct answer.",
    },
    HostCheck {
        id: "hosts/typescript-sdk/resources-and-prompts",
        rules: SDK,
        description: "TypeScript SDK: resources and prompts listed, read and got alike both ways.",
    },
    HostCheck {
        id: "hosts/python-sdk/list",
        rules: SDK,
        description: "The Python SDK client (2026-07-28) lists both upstreams' tools alike through durable-mcp and directly (the connector's task offer aside).",
    },
    HostCheck {
        id: "hosts/python-sdk/call",
        rules: SDK,
        description: "Python SDK: calls (a result and an isError result) give the same answers both ways.",
    },
    HostCheck {
        id: "hosts/python-sdk/task-followed-with-tasks-get",
        rules: &["R-CNF-23", "R-CON-6", "R-CON-39"],
        description: "Python SDK, with a tasks extension of its own: a long call of each upstream becomes a task, followed with tasks/get to the direct call's result.",
    },
    HostCheck {
        id: "hosts/python-sdk/input-answered-with-tasks-update",
        rules: &["R-CNF-23", "R-CON-40"],
        description: "Python SDK: a task that asks for a confirmation reads input_required, is answered with tasks/update and completes with the direct answer.",
    },
    HostCheck {
        id: "hosts/python-sdk/resources-and-prompts",
        rules: SDK,
        description: "Python SDK: resources and prompts listed, read and got alike both ways.",
    },
    HostCheck {
        id: "hosts/inspector-cli/list-and-call",
        rules: SDK,
        description: "The MCP Inspector CLI lists and calls both upstreams alike through durable-mcp and directly.",
    },
];

/// The cases `filter` selects (the family, an id or id prefix, a rule).
pub fn select(filter: &Filter) -> Vec<HostCheck> {
    CHECKS
        .iter()
        .filter(|_| filter.family.is_none_or(|f| f == Family::Hosts))
        .filter(|c| {
            filter
                .scenario
                .as_deref()
                .is_none_or(|id| c.id == id || (id.ends_with('/') && c.id.starts_with(id)))
        })
        .filter(|c| {
            filter
                .rule
                .as_deref()
                .is_none_or(|r| c.rules.iter().any(|x| x.eq_ignore_ascii_case(r)))
        })
        .copied()
        .collect()
}

/// One finished case.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub lines: Vec<String>,
    pub failure: Option<String>,
    pub skipped: Option<String>,
    pub duration: Duration,
}

impl Case {
    fn passed(id: String, lines: Vec<String>) -> Self {
        Self {
            id,
            lines,
            failure: None,
            skipped: None,
            duration: Duration::ZERO,
        }
    }

    fn failing(id: String, why: String) -> Self {
        Self {
            failure: Some(why),
            ..Self::passed(id, Vec::new())
        }
    }

    fn failed(id: String, why: String, duration: Duration) -> Self {
        Self {
            duration,
            ..Self::failing(id, why)
        }
    }

    fn skipped(id: String, why: String) -> Self {
        Self {
            skipped: Some(why),
            ..Self::passed(id, Vec::new())
        }
    }

    /// A case judged on every pair of reports: each judgement a line; failing when any failed.
    fn judged<P>(
        id: String,
        pairs: &[P],
        judge: impl Fn(&P) -> Vec<Result<String, String>>,
    ) -> Self {
        let judged: Vec<_> = pairs.iter().flat_map(judge).collect();
        let failures: Vec<String> = judged.iter().filter_map(|j| j.clone().err()).collect();
        let lines = judged
            .into_iter()
            .map(|j| j.unwrap_or_else(|e| format!("FAILED: {e}")))
            .collect();
        Self {
            failure: (!failures.is_empty()).then(|| failures.join("; ")),
            ..Self::passed(id, lines)
        }
    }

    fn result(self, check: &HostCheck) -> ScenarioResult {
        ScenarioResult {
            id: self.id,
            family: Family::Hosts.to_string(),
            rules: check.rules.iter().map(|r| r.to_string()).collect(),
            passed: self.failure.is_none() && self.skipped.is_none(),
            skipped: self.skipped,
            message: self
                .failure
                .map(|m| format!("{} violated: {m}", check.rules.join(", "))),
            duration: self.duration,
            steps: self.lines,
        }
    }
}

/// Where the driver scripts are: `conformance/hosts` of the source tree.
pub fn scripts_dir() -> PathBuf {
    let root = crate::scenario::default_root();
    let beside = root.join("conformance").join("hosts");
    if beside.is_dir() {
        return beside;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hosts")
}

/// Runs `command` (in a process group of its own, stdin closed) to its end within
/// [`HOST_TIMEOUT`] and returns its stdout; a failure or a hang (then the whole group is
/// killed) is an error naming `what` with the end of its stderr.
pub async fn bounded_output(
    mut command: tokio::process::Command,
    what: String,
) -> Result<String, String> {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let pid = child.id();
    match tokio::time::timeout(HOST_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(Ok(out)) => Err(format!(
            "{what} failed ({}): {}",
            out.status,
            crate::harness::tail_lines(&String::from_utf8_lossy(&out.stderr), 8)
        )),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => {
            if let Some(pid) = pid {
                // SAFETY: signalling the process group the child leads (process_group(0)).
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            }
            Err(format!(
                "{what} hung and was killed after {} s",
                HOST_TIMEOUT.as_secs()
            ))
        }
    }
}

/// Runs the `selected` cases on `server`, one host at a time, calling `on_done` as each
/// finishes; returns them in catalogue order.
pub async fn run(
    server: &DevServer,
    selected: &[HostCheck],
    mut on_done: impl FnMut(&ScenarioResult),
) -> Vec<ScenarioResult> {
    if selected.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut finish = |cases: Vec<Case>, out: &mut Vec<ScenarioResult>| {
        for case in cases {
            if let Some(check) = selected.iter().find(|c| c.id == case.id) {
                let result = case.result(check);
                on_done(&result);
                out.push(result);
            }
        }
    };
    let all = |prefix: &str, why: &str| -> Vec<Case> {
        selected
            .iter()
            .filter(|c| c.id.starts_with(prefix))
            .map(|c| Case::skipped(c.id.into(), why.into()))
            .collect()
    };
    if let Some(reason) = install::node_missing() {
        finish(
            all(
                "hosts/",
                &format!("Node is needed for server-everything: {reason}"),
            ),
            &mut out,
        );
        return out;
    }
    let stack = match stack::Stack::start(server).await {
        Ok(stack) => stack,
        Err(e) => {
            let why = format!("could not start the hosts' stack: {e:#}");
            let cases = selected
                .iter()
                .map(|c| Case::failed(c.id.into(), why.clone(), Duration::ZERO))
                .collect();
            finish(cases, &mut out);
            return out;
        }
    };
    let wants = |prefix: &str| selected.iter().any(|c| c.id.starts_with(prefix));
    if wants("hosts/claude-code/") {
        let wanted = |id: &str| selected.iter().any(|c| c.id == id);
        finish(claude_code(&stack, wanted).await, &mut out);
    }
    for sdk in [sdk::Sdk::TypeScript, sdk::Sdk::Python] {
        if wants(&format!("hosts/{}/", sdk.slug())) {
            finish(sdk_cases(sdk, &stack).await, &mut out);
        }
    }
    if wants("hosts/inspector-cli/") {
        finish(inspector(&stack).await, &mut out);
    }
    stack.stop(server).await;
    out.sort_by_key(|r| CHECKS.iter().position(|c| c.id == r.id));
    out
}

fn timed(mut cases: Vec<Case>, started: Instant) -> Vec<Case> {
    for case in &mut cases {
        if case.duration.is_zero() {
            case.duration = started.elapsed();
        }
    }
    cases
}

fn prefixed(prefix: &str) -> impl Iterator<Item = &'static HostCheck> + '_ {
    CHECKS.iter().filter(move |c| c.id.starts_with(prefix))
}

async fn claude_code(stack: &stack::Stack, wanted: impl Fn(&str) -> bool) -> Vec<Case> {
    let started = Instant::now();
    match tokio::task::spawn_blocking(install::claude_code).await {
        Ok(Ok(binary)) => timed(claude::cases(&binary, stack, wanted).await, started),
        Ok(Err(e)) => skip_all(
            "hosts/claude-code/",
            format!("installing Claude Code: {e:#}"),
        ),
        Err(e) => skip_all("hosts/claude-code/", e.to_string()),
    }
}

async fn sdk_cases(sdk: sdk::Sdk, stack: &stack::Stack) -> Vec<Case> {
    let started = Instant::now();
    let prefix = format!("hosts/{}/", sdk.slug());
    let installed = match sdk.install().await {
        Ok(installed) => installed,
        Err(reason) => return skip_all(&prefix, reason),
    };
    match sdk::reports(sdk, &installed, stack).await {
        Ok(pairs) => timed(sdk::cases(sdk, &pairs), started),
        Err(e) => prefixed(&prefix)
            .map(|c| Case::failed(c.id.into(), e.clone(), started.elapsed()))
            .collect(),
    }
}

async fn inspector(stack: &stack::Stack) -> Vec<Case> {
    let started = Instant::now();
    let id = "hosts/inspector-cli/list-and-call".to_owned();
    let build = match tokio::task::spawn_blocking(install::inspector_cli).await {
        Ok(Ok(build)) => build,
        Ok(Err(e)) => {
            return vec![Case::skipped(
                id,
                format!("installing the Inspector CLI: {e:#}"),
            )];
        }
        Err(e) => return vec![Case::skipped(id, e.to_string())],
    };
    let case = match sdk::inspector(&build, stack).await {
        Ok(judged) => Case::judged(id, &[judged], |j| j.clone()),
        Err(e) => Case::failing(id, e),
    };
    timed(vec![case], started)
}

fn skip_all(prefix: &str, why: String) -> Vec<Case> {
    prefixed(prefix)
        .map(|c| Case::skipped(c.id.into(), why.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_ids_and_rules_select_cases() {
        let all = select(&Filter {
            family: Some(Family::Hosts),
            scenario: None,
            rule: None,
        });
        assert_eq!(all.len(), CHECKS.len());
        let none = select(&Filter {
            family: Some(Family::Tasks),
            scenario: None,
            rule: None,
        });
        assert!(none.is_empty());
        let claude = select(&Filter {
            family: None,
            scenario: Some("hosts/claude-code/".into()),
            rule: None,
        });
        assert_eq!(claude.len(), 5);
        let input = select(&Filter {
            family: None,
            scenario: None,
            rule: Some("r-con-40".into()),
        });
        assert!(
            input
                .iter()
                .all(|c| c.id.contains("confirmation") || c.id.contains("input")),
            "{input:?}"
        );
    }

    #[test]
    fn every_case_id_is_unique_and_in_the_family() {
        let mut ids: Vec<_> = CHECKS.iter().map(|c| c.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), CHECKS.len());
        assert!(
            CHECKS
                .iter()
                .all(|c| c.id.starts_with("hosts/")
                    && c.rules.iter().any(|r| r.starts_with("R-CNF-")))
        );
    }

    #[tokio::test]
    async fn a_hung_host_is_killed_and_named() {
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", "echo started >&2; exit 3"]);
        let err = bounded_output(command, "the test host".into())
            .await
            .unwrap_err();
        assert!(
            err.contains("the test host failed") && err.contains("started"),
            "{err}"
        );
    }
}
