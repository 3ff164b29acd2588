//! Conformance scenarios: the TOML format and its loader.
//!
//! One scenario per file, `scenarios/<family>/<name>.toml`:
//!
//! ```toml
//! id = "retry-inference/read-only-flaky-is-retried"
//! family = "retry-inference"   # reattach | retry-inference | cancellation | fidelity | faults | owner-scope
//! rules = ["R-PRX-4"]          # SPEC.md rules this scenario checks
//! description = "A read-only tool failing twice is retried until it succeeds."
//!
//! [upstream]                   # the mock upstream (see `fixtures::UpstreamSpec`)
//! transport = "stdio"          # stdio (the mock binary as the proxy's child) | http (in-process)
//! standard = false             # true: start from the standard mock tools (echo, everything, ...)
//! [[upstream.tools]]           # a `fixtures::ToolSpec`; replaces a standard tool of that name
//! name = "t"
//! annotations = { readOnlyHint = true }
//! behavior = { kind = "fail_times", times = 2, error = { kind = "json_rpc", code = -32603, message = "x" } }
//!
//! [[steps]]
//! call = { tool = "t", arguments = { key = "k" } }   # optional: cancel_after_ms, timeout_ms
//! [steps.expect]
//! outcome = "result"           # result | failed | canceled | timed_out | terminated
//! error_type = "..."           # optional: the failure's type (R-NXC-4)
//! message_contains = "..."     # optional: a substring of the failure message
//! is_error = false             # optional: the result's `isError`
//! invocations = { tool = "t", key = "k", count = 3 }  # upstream `called` events (tool and key default to the call's)
//! cancelled_upstream = true    # optional: the upstream saw `notifications/cancelled` for the call
//! snapshot = "name"            # optional: result JSON == fixtures/snapshots/conformance__<name>.snap.json
//! ```
//!
//! Every table rejects unknown keys; errors name the file and the field.

use std::{
    collections::HashSet,
    fmt,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fixtures::{ToolSpec, UpstreamSpec};

/// A check family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    Reattach,
    RetryInference,
    Cancellation,
    Fidelity,
    Faults,
    OwnerScope,
}

impl Family {
    pub const ALL: [Family; 6] = [
        Family::Reattach,
        Family::RetryInference,
        Family::Cancellation,
        Family::Fidelity,
        Family::Faults,
        Family::OwnerScope,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Reattach => "reattach",
            Family::RetryInference => "retry-inference",
            Family::Cancellation => "cancellation",
            Family::Fidelity => "fidelity",
            Family::Faults => "faults",
            Family::OwnerScope => "owner-scope",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Family {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Family::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Family::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown family {s:?}; expected one of {}", names.join(", "))
            })
    }
}

/// One scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// `<family>/<name>`, unique across the suite.
    pub id: String,
    pub family: Family,
    /// SPEC.md rule ids (`R-PRX-4`) this scenario checks; named in failure messages.
    pub rules: Vec<String>,
    #[serde(default)]
    pub description: String,
    pub upstream: UpstreamDef,
    pub steps: Vec<Step>,
    /// The file it was loaded from.
    #[serde(skip)]
    pub path: PathBuf,
}

/// How the upstream is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamTransport {
    /// The mock binary as the proxy's stdio child, reading a spec file.
    #[default]
    Stdio,
    /// The mock served over Streamable HTTP inside the runner.
    Http,
}

/// The mock upstream of a scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamDef {
    #[serde(default)]
    pub transport: UpstreamTransport,
    /// Start from the standard mock tools (`fixtures::UpstreamSpec::standard`).
    #[serde(default)]
    pub standard: bool,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
}

impl UpstreamDef {
    /// The spec the mock serves: the standard tools (when asked for) with `tools` replacing or
    /// adding to them.
    pub fn spec(&self) -> UpstreamSpec {
        let mut spec = if self.standard {
            UpstreamSpec::standard()
        } else {
            UpstreamSpec {
                name: "durable-mcp-conformance-upstream".into(),
                tools: Vec::new(),
            }
        };
        for tool in &self.tools {
            match spec.tool_mut(&tool.name) {
                Some(existing) => *existing = tool.clone(),
                None => spec.tools.push(tool.clone()),
            }
        }
        spec
    }
}

/// One step: a tool call through the durable path and what must follow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub call: CallStep,
    pub expect: Expect,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallStep {
    pub tool: String,
    /// The tool's arguments (a JSON object); `{}` when absent.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Cancel the operation this many ms after the upstream received the call (or after the
    /// start, when the upstream has not seen it within 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after_ms: Option<u64>,
    /// The operation's schedule-to-close timeout; 60 s by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl CallStep {
    /// The call's string argument `key` (the ledger records it).
    pub fn key(&self) -> Option<&str> {
        self.arguments.get("key").and_then(Value::as_str)
    }
}

/// The operation's end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedOutcome {
    Result,
    Failed,
    Canceled,
    TimedOut,
    Terminated,
}

impl fmt::Display for ExpectedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExpectedOutcome::Result => "result",
            ExpectedOutcome::Failed => "failed",
            ExpectedOutcome::Canceled => "canceled",
            ExpectedOutcome::TimedOut => "timed_out",
            ExpectedOutcome::Terminated => "terminated",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: ExpectedOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocations: Option<Invocations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_upstream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// How many times the upstream's tool was called (`called` ledger events).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invocations {
    /// Defaults to the step's tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Defaults to the step's `key` argument; without either, every call of the tool counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub count: usize,
}

impl Scenario {
    /// Parses one scenario; `path` is used in errors and recorded.
    pub fn parse(text: &str, path: &Path) -> anyhow::Result<Scenario> {
        let mut scenario: Scenario = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        scenario.path = path.to_owned();
        scenario
            .validate()
            .with_context(|| format!("{}", path.display()))?;
        Ok(scenario)
    }

    /// Reads and parses one scenario file.
    pub fn from_file(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading scenario {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Checks what serde cannot: the id's family prefix, rules, steps and the upstream spec.
    pub fn validate(&self) -> anyhow::Result<()> {
        let prefix = format!("{}/", self.family);
        if !self.id.starts_with(&prefix) || self.id.len() == prefix.len() {
            bail!("id: {:?} must be \"{prefix}<name>\"", self.id);
        }
        if self.rules.is_empty() {
            bail!("rules: a scenario must name at least one SPEC.md rule");
        }
        for rule in &self.rules {
            if !rule.starts_with("R-") {
                bail!("rules: {rule:?} is not a rule id like \"R-PRX-4\"");
            }
        }
        if self.steps.is_empty() {
            bail!("steps: a scenario needs at least one step");
        }
        let spec = self.upstream.spec();
        spec.validate().context("upstream")?;
        for (i, step) in self.steps.iter().enumerate() {
            let field = format!("steps[{i}]");
            if step.call.tool != "list_tools" && spec.tool(&step.call.tool).is_none() {
                bail!(
                    "{field}.call.tool: {:?} is not a tool of the upstream",
                    step.call.tool
                );
            }
            let e = &step.expect;
            if e.error_type.is_some() && e.outcome != ExpectedOutcome::Failed {
                bail!("{field}.expect.error_type: only applies to outcome = \"failed\"");
            }
            if (e.snapshot.is_some() || e.is_error.is_some())
                && e.outcome != ExpectedOutcome::Result
            {
                bail!("{field}.expect: snapshot and is_error only apply to outcome = \"result\"");
            }
            if let Some(name) = &e.snapshot
                && (name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            {
                bail!("{field}.expect.snapshot: {name:?} must be [A-Za-z0-9_-]+");
            }
        }
        Ok(())
    }

    /// The call's description for messages: `step 2 (call write_once)`.
    pub fn step_label(&self, index: usize) -> String {
        format!("step {} (call {})", index + 1, self.steps[index].call.tool)
    }
}

/// Every `*.toml` under `dir` (recursively), sorted by id; ids must be unique.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<Scenario>> {
    let mut files = Vec::new();
    collect(dir, &mut files).with_context(|| format!("listing scenarios in {}", dir.display()))?;
    files.sort();
    let mut scenarios = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match Scenario::from_file(&file) {
            Ok(s) => scenarios.push(s),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} invalid scenario file(s):\n  {}",
            errors.len(),
            errors.join("\n  ")
        );
    }
    let mut seen = HashSet::new();
    for s in &scenarios {
        if !seen.insert(s.id.clone()) {
            bail!(
                "{}: id {:?} is used by another scenario",
                s.path.display(),
                s.id
            );
        }
    }
    scenarios.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(scenarios)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
    Ok(())
}

/// Which scenarios to run.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub family: Option<Family>,
    /// Exact id, or a prefix ending in `/`.
    pub scenario: Option<String>,
    pub rule: Option<String>,
}

impl Filter {
    pub fn matches(&self, s: &Scenario) -> bool {
        self.family.is_none_or(|f| s.family == f)
            && self
                .scenario
                .as_deref()
                .is_none_or(|id| s.id == id || (id.ends_with('/') && s.id.starts_with(id)))
            && self
                .rule
                .as_deref()
                .is_none_or(|r| s.rules.iter().any(|x| x.eq_ignore_ascii_case(r)))
    }
}

/// Rule ids defined in SPEC.md text: every `### R-XXX-N:` heading.
pub fn spec_rules(spec_md: &str) -> Vec<String> {
    spec_md
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter(|l| l.starts_with("R-"))
        .map(|l| l.split([':', ' ']).next().unwrap_or_default().to_owned())
        .collect()
}

/// The workspace root (holding `scenarios/` and `fixtures/`): the current directory when it has
/// `scenarios/`, else the directory this crate was built from.
pub fn default_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir()
        && cwd.join("scenarios").is_dir()
        && cwd.join("fixtures").is_dir()
    {
        return cwd;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
        id = "retry-inference/x"
        family = "retry-inference"
        rules = ["R-PRX-4"]
        [upstream]
        [[upstream.tools]]
        name = "t"
        annotations = { readOnlyHint = true }
        behavior = { kind = "fail_times", times = 2, error = { kind = "json_rpc", code = -32603, message = "x" } }
        [[steps]]
        call = { tool = "t", arguments = { key = "k" } }
        [steps.expect]
        outcome = "result"
        invocations = { count = 3 }
    "#;

    #[test]
    fn parses() {
        let s = Scenario::parse(OK, Path::new("x.toml")).unwrap();
        assert_eq!(s.family, Family::RetryInference);
        assert_eq!(s.steps[0].call.key(), Some("k"));
        assert_eq!(s.upstream.spec().tools.len(), 1);
    }

    #[test]
    fn unknown_fields_name_file_and_field() {
        let bad = OK.replace("outcome = \"result\"", "outcome = \"result\"\nbogus = 1");
        let err = format!(
            "{:#}",
            Scenario::parse(&bad, Path::new("dir/bad.toml")).unwrap_err()
        );
        assert!(
            err.contains("dir/bad.toml") && err.contains("bogus"),
            "{err}"
        );
        let bad = OK.replace("tool = \"t\"", "tool = \"nope\"");
        let err = format!(
            "{:#}",
            Scenario::parse(&bad, Path::new("b.toml")).unwrap_err()
        );
        assert!(err.contains("steps[0].call.tool"), "{err}");
    }

    #[test]
    fn spec_rules_are_read_from_headings() {
        let md = "### R-PRX-4: Retry\ntext\n### R-NXC-1: x\n## other";
        assert_eq!(spec_rules(md), ["R-PRX-4", "R-NXC-1"]);
    }
}
