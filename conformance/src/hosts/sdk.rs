//! The TypeScript and Python SDK clients and the Inspector CLI as hosts (R-CNF-23): each runs
//! its driver against each upstream twice, through durable-mcp and directly, and the reports
//! are compared case by case.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{
    Case, bounded_output,
    compare::{difference, listing_difference, short},
    stack::Stack,
};

/// A client library with a driver script under `conformance/hosts/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    TypeScript,
    Python,
}

impl Sdk {
    /// The case ids' middle part: `hosts/<slug>/<case>`.
    pub fn slug(self) -> &'static str {
        match self {
            Sdk::TypeScript => "typescript-sdk",
            Sdk::Python => "python-sdk",
        }
    }

    /// The installed client: `node_modules` (TypeScript) or the virtualenv's python; the error
    /// is the reason its cases are skipped.
    pub async fn install(self) -> Result<PathBuf, String> {
        match self {
            Sdk::TypeScript => {
                if let Some(reason) = super::install::node_missing() {
                    return Err(reason);
                }
                tokio::task::spawn_blocking(super::install::ts_sdk)
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("installing the TypeScript SDK: {e:#}"))
            }
            Sdk::Python => crate::kit::python::python_mcp().await,
        }
    }

    fn command(self, installed: &Path, url: &str, plan: &Value) -> tokio::process::Command {
        let scripts = super::scripts_dir();
        let mut command = match self {
            Sdk::TypeScript => {
                let mut c = tokio::process::Command::new("node");
                c.arg(scripts.join("ts_client.cjs"))
                    .env("NODE_PATH", installed);
                c
            }
            Sdk::Python => {
                let mut c = tokio::process::Command::new(installed);
                c.arg(scripts.join("py_client.py"));
                c
            }
        };
        command.args(["--url", url, "--plan", &plan.to_string()]);
        command
    }
}

/// What a driver runs against one upstream.
pub fn plan(upstream: &str) -> Value {
    let confirm = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    match upstream {
        "everything" => json!({
            "calls": [
                {"label": "echo", "tool": "echo", "arguments": {"message": "hello from a host"}},
                {"label": "get-sum", "tool": "get-sum", "arguments": {"a": 2, "b": 40}},
            ],
            "tasks": [{"label": "long", "tool": "trigger-long-running-operation",
                       "arguments": {"duration": 3, "steps": 3}}],
            "features": true,
        }),
        _ => json!({
            "calls": [
                {"label": "echo", "tool": "echo", "arguments": {"key": "sdk-echo"}},
                {"label": "refuse", "tool": "refuse", "arguments": {"key": "sdk-refuse"}},
            ],
            "tasks": [
                {"label": "slow", "tool": "slow", "arguments": {"key": "sdk-slow", "sleep_ms": 3000}},
                {"label": "ask", "tool": "ask_task", "arguments": {"key": "sdk-ask"}, "answers": confirm},
            ],
            "features": true,
        }),
    }
}

/// One upstream's two reports.
pub struct Pair {
    pub upstream: &'static str,
    pub durable: Value,
    pub direct: Value,
}

/// Runs `sdk`'s driver against both upstreams, durably and directly: four runs at once (each
/// bounded; none depends on another, and most of a run is waiting for its calls).
pub async fn reports(sdk: Sdk, installed: &Path, stack: &Stack) -> Result<Vec<Pair>, String> {
    let upstreams = [("everything", &stack.everything), ("mock", &stack.mock)];
    let runs = upstreams.iter().flat_map(|&(upstream, endpoints)| {
        let plan = plan(upstream);
        [
            (
                upstream,
                "through durable-mcp",
                endpoints.durable.clone(),
                plan.clone(),
            ),
            (upstream, "directly", endpoints.direct.clone(), plan),
        ]
    });
    let reports =
        futures::future::try_join_all(runs.map(|(upstream, path, url, plan)| async move {
            let what = format!("the {} driver against {upstream} {path}", sdk.slug());
            parse(&bounded_output(sdk.command(installed, &url, &plan), what).await?)
        }))
        .await?;
    Ok(upstreams
        .iter()
        .zip(reports.chunks_exact(2))
        .map(|(&(upstream, _), pair)| Pair {
            upstream,
            durable: pair[0].clone(),
            direct: pair[1].clone(),
        })
        .collect())
}

fn parse(stdout: &str) -> Result<Value, String> {
    serde_json::from_str(stdout.trim())
        .map_err(|e| format!("the driver printed no JSON report ({e}): {}", stdout.trim()))
}

/// The SDK's cases, from its reports.
pub fn cases(sdk: Sdk, pairs: &[Pair]) -> Vec<Case> {
    let id = |name: &str| format!("hosts/{}/{name}", sdk.slug());
    vec![
        Case::judged(id("list"), pairs, list),
        Case::judged(id("call"), pairs, calls),
        Case::judged(id("task-followed-with-tasks-get"), pairs, |p| {
            tasks(p, false)
        }),
        Case::judged(id("input-answered-with-tasks-update"), pairs, |p| {
            tasks(p, true)
        }),
        Case::judged(id("resources-and-prompts"), pairs, features),
    ]
}

type Judged = Vec<Result<String, String>>;

fn list(pair: &Pair) -> Judged {
    let tools = |r: &Value| r["tools"].as_array().cloned().unwrap_or_default();
    let (durable, direct) = (tools(&pair.durable), tools(&pair.direct));
    vec![match listing_difference(&durable, &direct) {
        None => Ok(format!(
            "{}: {} tools listed alike",
            pair.upstream,
            direct.len()
        )),
        Some(d) => Err(format!("{}: the listings differ: {d}", pair.upstream)),
    }]
}

fn calls(pair: &Pair) -> Judged {
    let labels: Vec<String> = pair.direct["calls"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    labels
        .iter()
        .map(|label| {
            let (durable, direct) = (&pair.durable["calls"][label], &pair.direct["calls"][label]);
            match difference(durable, direct) {
                None => Ok(format!("{}/{label}: equal", pair.upstream)),
                Some(d) => Err(format!("{}/{label}: {d}", pair.upstream)),
            }
        })
        .collect()
}

/// The task steps that ask for input (`asking`) or not: each must become a task through the
/// connector, be followed to `completed` (through `input_required` and a `tasks/update` when
/// it asks), and give the direct call's result.
fn tasks(pair: &Pair, asking: bool) -> Judged {
    let steps = pair.direct["tasks"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    steps
        .keys()
        .filter(|label| (label.as_str() == "ask") == asking)
        .map(|label| {
            let name = format!("{}/{label}", pair.upstream);
            let durable = &pair.durable["tasks"][label];
            let task = &durable["task"];
            if task.is_null() {
                return Err(format!(
                    "{name}: the call did not become a task through the connector; it answered {}",
                    short(durable)
                ));
            }
            let statuses = &task["statuses"];
            if statuses.as_array().and_then(|s| s.last()) != Some(&json!("completed")) {
                return Err(format!(
                    "{name}: the task went {statuses}, not to completed"
                ));
            }
            if asking
                && (task["updates"].as_u64() < Some(1)
                    || !statuses.to_string().contains("input_required"))
            {
                return Err(format!(
                    "{name}: the task never asked for input ({statuses})"
                ));
            }
            match difference(&durable["result"], &pair.direct["tasks"][label]["result"]) {
                None => Ok(format!(
                    "{name}: a task ({statuses}) with the direct call's result"
                )),
                Some(d) => Err(format!(
                    "{name}: the task's result is not the direct one: {d}"
                )),
            }
        })
        .collect()
}

fn features(pair: &Pair) -> Judged {
    vec![
        match difference(&pair.durable["features"], &pair.direct["features"]) {
            None => Ok(format!(
                "{}: {} resources, {} prompts, a read and a prompt alike",
                pair.upstream,
                pair.direct["features"]["resources"]
                    .as_array()
                    .map_or(0, Vec::len),
                pair.direct["features"]["prompts"]
                    .as_array()
                    .map_or(0, Vec::len)
            )),
            Some(d) => Err(format!("{}: {d}", pair.upstream)),
        },
    ]
}

/// The Inspector CLI's case: `tools/list` and `tools/call` against each upstream, durably and
/// directly (its eight runs at once), compared.
pub async fn inspector(build: &Path, stack: &Stack) -> Result<Judged, String> {
    let calls = [
        (
            "everything",
            &stack.everything,
            "echo",
            "message=hello from a host",
        ),
        ("mock", &stack.mock, "echo", "key=inspector"),
    ];
    let run = |url: String, method: Vec<&'static str>| {
        let mut command = tokio::process::Command::new("node");
        command
            .current_dir(build)
            .args(["cli.js", "--cli", &url, "--transport", "http", "--method"])
            .args(&method);
        let what = format!("the Inspector CLI ({})", method.join(" "));
        async move { parse(&bounded_output(command, what).await?) }
    };
    let mut steps = Vec::new();
    for (upstream, endpoints, tool, argument) in calls {
        for method in [
            vec!["tools/list"],
            vec!["tools/call", "--tool-name", tool, "--tool-arg", argument],
        ] {
            let both = futures::future::try_join(
                run(endpoints.durable.clone(), method.clone()),
                run(endpoints.direct.clone(), method.clone()),
            );
            steps.push(async move { Ok::<_, String>((upstream, tool, method[0], both.await?)) });
        }
    }
    let answered = futures::future::try_join_all(steps).await?;
    Ok(answered
        .into_iter()
        .map(|(upstream, tool, method, (durable, direct))| {
            let name = format!("{upstream}: {method}");
            if method == "tools/list" {
                let tools = |r: &Value| r["tools"].as_array().cloned().unwrap_or_default();
                match listing_difference(&tools(&durable), &tools(&direct)) {
                    None => Ok(format!("{name}: alike")),
                    Some(d) => Err(format!("{name}: {d}")),
                }
            } else {
                match difference(&durable, &direct) {
                    None => Ok(format!("{name} {tool}: equal")),
                    Some(d) => Err(format!("{name} {tool}: {d}")),
                }
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(durable: Value, direct: Value) -> Pair {
        Pair {
            upstream: "mock",
            durable,
            direct,
        }
    }

    #[test]
    fn a_task_case_needs_a_task_followed_to_the_direct_result() {
        let result = json!({"content": [{"type": "text", "text": "ok"}], "isError": false});
        let direct = json!({"tasks": {"slow": {"result": result, "task": null}}});
        let followed = json!({"tasks": {"slow": {"result": result,
            "task": {"statuses": ["working", "completed"], "updates": 0}}}});
        assert!(tasks(&pair(followed, direct.clone()), false)[0].is_ok());
        // Answered at once, as a plain result: the connector made no task of it.
        let waited = json!({"tasks": {"slow": {"result": result, "task": null}}});
        let judged = tasks(&pair(waited, direct.clone()), false);
        assert!(
            judged[0]
                .as_ref()
                .unwrap_err()
                .contains("did not become a task")
        );
        let failed = json!({"tasks": {"slow": {"task": {"statuses": ["working", "failed"]}}}});
        assert!(tasks(&pair(failed, direct), false)[0].is_err());
    }

    #[test]
    fn an_input_case_needs_input_required_and_an_update() {
        let result = json!({"content": [{"type": "text", "text": "confirmed"}]});
        let direct =
            json!({"tasks": {"ask": {"result": result, "task": {"statuses": ["working"]}}}});
        let asked = json!({"tasks": {"ask": {"result": result,
            "task": {"statuses": ["working", "input_required", "completed"], "updates": 1}}}});
        assert!(tasks(&pair(asked, direct.clone()), true)[0].is_ok());
        let never = json!({"tasks": {"ask": {"result": result,
            "task": {"statuses": ["working", "completed"], "updates": 0}}}});
        assert!(tasks(&pair(never, direct), true)[0].is_err());
    }

    #[test]
    fn every_plan_names_its_steps() {
        for upstream in ["everything", "mock"] {
            let plan = plan(upstream);
            for step in plan["calls"]
                .as_array()
                .unwrap()
                .iter()
                .chain(plan["tasks"].as_array().unwrap())
            {
                assert!(
                    step["label"].is_string() && step["tool"].is_string(),
                    "{step}"
                );
            }
        }
    }
}
