//! Third-party mode: checks someone else's MCP server through the durable path.
//!
//! `durable-mcp-conformance run --upstream-stdio "CMD ARGS"` or `--upstream-http URL`:
//! 1. **discovery**: lists the upstream's tools directly (rmcp client);
//! 2. **retry-policy**: per tool, the retry policy the proxy infers from its annotations, and why
//!    ([`durable_mcp::outbound::retry::infer`]);
//! 3. **fidelity**: for the tools allowed (read-only by default, plus `--allow-tool`), calls each
//!    directly and through the durable path (a Nexus operation on a proxy fronting the upstream,
//!    on a dev server) and compares the two results as JSON.
//!
//! Cancellation and reattachment checks are not implemented in this version; the report says so.
//!
//! The stdio command line is split on whitespace only (no quotes, no escapes): `"npx -y pkg"`
//! works, `"node 'my dir/server.js'"` does not.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::Path,
    time::Duration,
};

use anyhow::Context;
use durable_mcp::{
    nexus::{OperationClient, OperationOutcome, StartOperation},
    outbound::{
        ProxyOptions, TransportConfig, UpstreamConfig,
        retry::{ToolHints, infer},
    },
    payload,
};
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, JsonObject},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::harness::{DevServer, unique_name};

/// The Nexus service name the third-party upstream is registered under.
const SERVICE: &str = "upstream";
/// Limit for one call (direct or durable).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The server under test.
#[derive(Debug, Clone)]
pub enum Upstream {
    Stdio {
        command: String,
        args: Vec<String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl Upstream {
    /// `--upstream-stdio "CMD ARGS"`: split on whitespace (no shell quoting).
    pub fn stdio(command_line: &str) -> anyhow::Result<Self> {
        let mut words = command_line.split_whitespace().map(str::to_owned);
        let command = words.next().context("--upstream-stdio needs a command")?;
        Ok(Upstream::Stdio {
            command,
            args: words.collect(),
        })
    }

    /// `--upstream-http URL --header K:V ...`.
    pub fn http(url: &str, headers: &[String]) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        for h in headers {
            let (k, v) = h
                .split_once(':')
                .with_context(|| format!("--header {h:?} is not NAME:VALUE"))?;
            map.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        Ok(Upstream::Http {
            url: url.to_owned(),
            headers: map,
        })
    }

    fn describe(&self) -> String {
        match self {
            Upstream::Stdio { command, args } => format!("stdio: {command} {}", args.join(" "))
                .trim_end()
                .to_owned(),
            // Header values may be secrets: names only.
            Upstream::Http { url, headers } => {
                let names: Vec<_> = headers.keys().cloned().collect();
                if names.is_empty() {
                    format!("http: {url}")
                } else {
                    format!("http: {url} (headers: {})", names.join(", "))
                }
            }
        }
    }
}

/// What to check.
#[derive(Debug, Clone)]
pub struct ThirdPartyOptions {
    pub upstream: Upstream,
    /// Tools to call besides the read-only ones.
    pub allow_tools: Vec<String>,
    /// Tool name -> arguments (from `--args FILE`).
    pub arguments: BTreeMap<String, Value>,
}

impl ThirdPartyOptions {
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            allow_tools: Vec::new(),
            arguments: BTreeMap::new(),
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

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail(String),
    Skipped(String),
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `discovery`, `retry-policy/<tool>`, `fidelity/<tool>`, `cancellation`, `reattachment`.
    pub name: String,
    pub status: Status,
    /// What was seen (for a pass, or extra context).
    pub detail: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Status::Pass => write!(f, "pass     {}: {}", self.name, self.detail),
            Status::Fail(why) => write!(f, "FAIL     {}: {why}", self.name),
            Status::Skipped(why) => write!(f, "skipped  {}: {why}", self.name),
        }
    }
}

/// A third-party run.
#[derive(Debug, Clone, Serialize)]
pub struct ThirdPartyReport {
    pub upstream: String,
    pub checks: Vec<Check>,
}

impl ThirdPartyReport {
    pub fn all_passed(&self) -> bool {
        !self
            .checks
            .iter()
            .any(|c| matches!(c.status, Status::Fail(_)))
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    fn push(&mut self, name: impl Into<String>, status: Status, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            status,
            detail: detail.into(),
        });
    }

    /// The printed report: one line per check, then totals.
    pub fn render(&self) -> String {
        let mut out = format!("third-party upstream ({})\n", self.upstream);
        for c in &self.checks {
            out.push_str(&format!("  {c}\n"));
        }
        let count = |f: fn(&Status) -> bool| self.checks.iter().filter(|c| f(&c.status)).count();
        out.push_str(&format!(
            "{} passed, {} failed, {} skipped\n",
            count(|s| matches!(s, Status::Pass)),
            count(|s| matches!(s, Status::Fail(_))),
            count(|s| matches!(s, Status::Skipped(_))),
        ));
        out
    }
}

type Client = RunningService<RoleClient, ()>;

async fn connect_direct(upstream: &Upstream) -> anyhow::Result<Client> {
    match upstream {
        Upstream::Stdio { command, args } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args);
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::null())
                .spawn()
                .with_context(|| format!("spawning {command}"))?;
            Ok(().serve(transport).await?)
        }
        Upstream::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in headers {
                let name = axum::http::HeaderName::try_from(k.as_str())
                    .with_context(|| format!("header name {k:?}"))?;
                let value = axum::http::HeaderValue::try_from(v.as_str())
                    .map_err(|_| anyhow::anyhow!("header {k} has an invalid value"))?;
                custom.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            Ok(
                ().serve(StreamableHttpClientTransport::from_config(config))
                    .await?,
            )
        }
    }
}

/// Checks the upstream: discovery and retry policies directly, fidelity through a proxy on
/// `server`. Never panics on a failed check (it becomes a `Fail` line).
pub async fn run(server: &DevServer, options: &ThirdPartyOptions) -> ThirdPartyReport {
    let mut report = ThirdPartyReport {
        upstream: options.upstream.describe(),
        checks: Vec::new(),
    };

    // 1. Discovery.
    let client = match tokio::time::timeout(CALL_TIMEOUT, connect_direct(&options.upstream)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            report.push("discovery", Status::Fail(format!("connecting: {e:#}")), "");
            return finish(report);
        }
        Err(_) => {
            report.push("discovery", Status::Fail("connecting timed out".into()), "");
            return finish(report);
        }
    };
    let tools = match tokio::time::timeout(CALL_TIMEOUT, client.list_all_tools()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            report.push("discovery", Status::Fail(format!("tools/list: {e}")), "");
            let _ = client.cancel().await;
            return finish(report);
        }
        Err(_) => {
            report.push("discovery", Status::Fail("tools/list timed out".into()), "");
            let _ = client.cancel().await;
            return finish(report);
        }
    };
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
    for name in &options.allow_tools {
        if !names.contains(name) {
            report.push(
                format!("allow-tool/{name}"),
                Status::Fail(format!(
                    "--allow-tool {name}: the upstream has no such tool"
                )),
                "",
            );
        }
    }

    // 2. Retry policy per tool.
    let mut plan: Vec<(String, Result<JsonObject, String>)> = Vec::new();
    for (name, json) in names.iter().zip(&tool_json) {
        let hints = ToolHints::from_tool_json(json);
        let decision = infer(&hints);
        let attempts = match decision.policy.maximum_attempts {
            Some(n) if n > 0 => format!("max {n} attempt{}", if n == 1 { "" } else { "s" }),
            _ => "retried (unlimited attempts, bounded by timeouts)".to_owned(),
        };
        report.push(
            format!("retry-policy/{name}"),
            Status::Pass,
            format!("{attempts}: {}", decision.reason),
        );

        // What fidelity will do with it.
        let read_only = hints.read_only == Some(true);
        let allowed = read_only || options.allow_tools.contains(name);
        let args = if !allowed {
            Err("not read-only (add --allow-tool to call it)".to_owned())
        } else if let Some(given) = options.arguments.get(name) {
            Ok(given.as_object().cloned().unwrap_or_default())
        } else {
            let required = json
                .pointer("/inputSchema/required")
                .and_then(Value::as_array)
                .filter(|r| !r.is_empty());
            match required {
                Some(r) => Err(format!(
                    "its input schema requires {} and --args gives none for it",
                    r.iter()
                        .map(|v| v.as_str().unwrap_or("?"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                None => Ok(JsonObject::new()),
            }
        };
        plan.push((name.clone(), args));
    }

    // 3. Fidelity: direct call, then the durable path.
    let to_call: Vec<_> = plan
        .iter()
        .filter_map(|(n, a)| a.as_ref().ok().map(|a| (n.clone(), a.clone())))
        .collect();
    let mut direct: BTreeMap<String, Result<Value, String>> = BTreeMap::new();
    for (name, args) in &to_call {
        let params = CallToolRequestParams::new(name.clone()).with_arguments(args.clone());
        let r = match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await {
            Ok(Ok(result)) => serde_json::to_value(&result).map_err(|e| e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("timed out after {} s", CALL_TIMEOUT.as_secs())),
        };
        direct.insert(name.clone(), r);
    }
    let _ = client.cancel().await;

    let durable = if to_call.is_empty() {
        Ok(BTreeMap::new())
    } else {
        durable_calls(server, &options.upstream, &to_call).await
    };
    for (name, args) in &plan {
        let check = format!("fidelity/{name}");
        if let Err(why) = args {
            report.push(check, Status::Skipped(why.clone()), "");
            continue;
        }
        let d = &direct[name];
        let status_detail = match &durable {
            Err(e) => (
                Status::Fail(format!("durable path unavailable: {e}")),
                String::new(),
            ),
            Ok(results) => match (d, &results[name]) {
                (Ok(a), Ok(b)) if a == b => {
                    (Status::Pass, "results equal (direct vs durable)".to_owned())
                }
                (Ok(a), Ok(b)) => (
                    Status::Fail(format!(
                        "results differ at {}: direct {} vs durable {}",
                        crate::run::first_difference(a, b, String::new()),
                        short(&at(a, b).0),
                        short(&at(a, b).1)
                    )),
                    String::new(),
                ),
                (Err(a), Err(b)) => (
                    Status::Pass,
                    format!("both failed (direct: {}; durable: {})", short(a), short(b)),
                ),
                (Ok(_), Err(b)) => (
                    Status::Fail(format!(
                        "direct call returned a result, durable call failed: {}",
                        short(b)
                    )),
                    String::new(),
                ),
                (Err(a), Ok(_)) => (
                    Status::Fail(format!(
                        "direct call failed ({}), durable call returned a result",
                        short(a)
                    )),
                    String::new(),
                ),
            },
        };
        report.push(check, status_detail.0, status_detail.1);
    }
    finish(report)
}

fn finish(mut report: ThirdPartyReport) -> ThirdPartyReport {
    report.push(
        "cancellation",
        Status::Skipped("not implemented in this version".into()),
        "",
    );
    report.push(
        "reattachment",
        Status::Skipped("not implemented in this version".into()),
        "",
    );
    report
}

/// Starts a proxy fronting `upstream` on a fresh task queue and endpoint of `server`, and calls
/// each tool through a Nexus operation. Per tool: the result JSON, or why the call failed.
async fn durable_calls(
    server: &DevServer,
    upstream: &Upstream,
    calls: &[(String, JsonObject)],
) -> anyhow::Result<BTreeMap<String, Result<Value, String>>> {
    let task_queue = unique_name("tq-third-party");
    let endpoint = unique_name("ep-third-party");
    server
        .create_nexus_endpoint(&endpoint, server.namespace(), &task_queue)
        .await
        .map_err(|e| anyhow::anyhow!("creating the Nexus endpoint: {e}"))?;
    let connection = server
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("connecting: {e}"))?;
    let client = OperationClient::new(connection, server.namespace());
    let transport = match upstream {
        Upstream::Stdio { command, args } => TransportConfig::Stdio {
            command: command.clone(),
            args: args.clone(),
            env: BTreeMap::new(),
            cwd: None,
        },
        Upstream::Http { url, headers } => TransportConfig::Http {
            url: url.parse().with_context(|| format!("URL {url:?}"))?,
            headers: headers.clone(),
        },
    };
    let proxy = crate::proxy_thread::ProxyThread::start(
        server.address(),
        ProxyOptions {
            namespace: server.namespace().to_owned(),
            task_queue,
            max_concurrent_calls: 10,
        },
        vec![UpstreamConfig {
            service: SERVICE.into(),
            transport,
            activity_options: Default::default(),
            overrides: BTreeMap::new(),
        }],
    );
    let mut out = BTreeMap::new();
    for (name, args) in calls {
        let r = durable_call(&client, &endpoint, name, args).await;
        let r = match (r, proxy.error()) {
            (Err(e), Some(p)) => Err(format!("{e} (the proxy stopped: {p})")),
            (r, _) => r,
        };
        out.insert(name.clone(), r);
    }
    proxy.stop().await;
    Ok(out)
}

async fn durable_call(
    client: &OperationClient,
    endpoint: &str,
    tool: &str,
    args: &JsonObject,
) -> Result<Value, String> {
    let payload = payload::to_payload(&Value::Object(args.clone())).map_err(|e| e.to_string())?;
    let mut start = StartOperation::new(
        unique_name(&format!("third-party-{tool}")),
        endpoint,
        SERVICE,
        tool,
        payload,
    );
    start.schedule_to_close = Some(CALL_TIMEOUT);
    let (op, _) = client
        .start(start)
        .await
        .map_err(|e| format!("starting the operation: {e}"))?;
    let outcome = client
        .wait(&op, &CancellationToken::new())
        .await
        .map_err(|e| format!("waiting for the outcome: {e}"))?;
    match outcome {
        OperationOutcome::Succeeded(p) => {
            payload::to_json(&p).map_err(|e| format!("the result is not readable JSON: {e}"))
        }
        OperationOutcome::Failed {
            message,
            error_type,
            ..
        } => Err(format!(
            "failed ({}): {message}",
            error_type.as_deref().unwrap_or("no type")
        )),
        OperationOutcome::Canceled { message } => Err(format!("canceled: {message}")),
        OperationOutcome::TimedOut { message } => Err(format!("timed out: {message}")),
        OperationOutcome::Terminated { message } => Err(format!("terminated: {message}")),
    }
}

/// The two values at the first difference, as compact JSON.
fn at(a: &Value, b: &Value) -> (String, String) {
    let ptr = crate::run::first_difference(a, b, String::new());
    let ptr = ptr.split(' ').next().unwrap_or("");
    let ptr = if ptr == "/" { "" } else { ptr };
    let show = |v: &Value| {
        v.pointer(ptr)
            .map(|x| x.to_string())
            .unwrap_or_else(|| "(absent)".into())
    };
    (show(a), show(b))
}

fn short(s: &str) -> String {
    const MAX: usize = 120;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_command_is_split_on_whitespace() {
        let Upstream::Stdio { command, args } =
            Upstream::stdio("  npx -y  @modelcontextprotocol/server-everything ").unwrap()
        else {
            panic!()
        };
        assert_eq!(command, "npx");
        assert_eq!(args, ["-y", "@modelcontextprotocol/server-everything"]);
        assert!(Upstream::stdio("   ").is_err());
    }

    #[test]
    fn headers_parse() {
        let Upstream::Http { headers, .. } =
            Upstream::http("http://x/mcp", &["Authorization: Bearer a:b".into()]).unwrap()
        else {
            panic!()
        };
        assert_eq!(headers["Authorization"], "Bearer a:b");
        assert!(Upstream::http("http://x", &["nocolon".into()]).is_err());
    }
}
