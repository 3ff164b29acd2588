//! The proxy's config file, `proxy.toml`.
//!
//! ```toml
//! [worker]
//! task_queue = "mcp-proxy"          # required
//! max_concurrent_calls = 100        # optional
//!
//! [temporal]                        # optional; keys left out come from Temporal's environment
//! address = "localhost:7233"        # configuration (TEMPORAL_ADDRESS, temporal.toml profiles, ...)
//! namespace = "default"
//!
//! [[upstream]]
//! service = "weather-tools"         # Nexus service name: required, unique, [A-Za-z0-9_.-]+
//! transport = "http"
//! url = "https://mcp.example.com/mcp"
//! headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
//! [upstream.activity_options]       # see `options::ActivityOptions`
//! start_to_close_timeout = "30s"
//! [upstream.overrides.get_forecast_report]   # per tool; only the keys given change
//! start_to_close_timeout = "48h"
//! retry_policy = { maximum_attempts = 3 }
//!
//! [[upstream]]
//! service = "files"
//! transport = "stdio"
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything", "stdio"]
//! env = { LOG_LEVEL = "warn" }
//! cwd = "/tmp"
//! ```
//!
//! ## Environment variables
//!
//! Keep secrets out of the file: `url`, `headers` values, `command`, `args`, `env` values and
//! `cwd` expand `${NAME}`, and `${NAME:-default}` (the default when `NAME` is unset or empty).
//! `$$` is a literal `$`; any other `$` is an error, so a forgotten brace is not sent as text.
//! A variable that is unset, with no default, is an error naming the field. Errors never show
//! an expanded value, and the `Debug` output of a transport shows `***` for header and `env`
//! values and for a URL's password and query. Command-line `args` are shown: they are visible
//! to every user of the machine in its process list anyway, so pass secrets through `env`.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use url::Url;

use super::options::ActivityOptions;

/// A loaded and validated `proxy.toml`, with environment variables expanded.
///
/// It has no `Deserialize`: [`parse`] is the only way in, so expansion and validation cannot be
/// skipped, and no `Serialize`, so the expanded secrets are not written anywhere.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub worker: WorkerSection,
    /// `None` when the file has no `[temporal]` table: Temporal's environment config is used.
    pub temporal: Option<TemporalSection>,
    /// The `[[upstream]]` tables, in file order; at least one.
    pub upstreams: Vec<UpstreamConfig>,
}

/// `[worker]`: the worker that hosts every upstream's Nexus service.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    pub task_queue: String,
    /// How many tool calls may run at once; the worker's default when absent.
    pub max_concurrent_calls: Option<usize>,
}

/// `[temporal]`: each key given overrides Temporal's environment configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporalSection {
    pub address: Option<String>,
    pub namespace: Option<String>,
}

/// One `[[upstream]]`: an MCP server fronted as the Nexus service `service`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub service: String,
    pub transport: TransportConfig,
    /// Options for every tool of this upstream.
    pub activity_options: ActivityOptions,
    /// Per tool name: options laid over `activity_options`.
    pub overrides: BTreeMap<String, ActivityOptions>,
}

/// How to reach an upstream; in the file, chosen by `transport = "stdio" | "http"`.
/// `Debug` redacts header and `env` values: they are where credentials live.
#[derive(Clone, PartialEq)]
pub enum TransportConfig {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// MCP Streamable HTTP.
    Http {
        url: Url,
        headers: BTreeMap<String, String>,
    },
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &RedactedValues(env))
                .field("cwd", cwd)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", &redacted_url(url))
                .field("headers", &RedactedValues(headers))
                .finish(),
        }
    }
}

const REDACTED: &str = "***";

/// A map shown with its keys and `"***"` for every value.
struct RedactedValues<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, REDACTED)))
            .finish()
    }
}

/// The URL with its password and query (where API keys tend to go) replaced by `***`.
fn redacted_url(url: &Url) -> String {
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some(REDACTED));
    }
    if shown.query().is_some() {
        shown.set_query(Some(REDACTED));
    }
    shown.to_string()
}

/// Why the config could not be loaded. Its `Display` is the message for the user: it names the
/// field and says what is wrong, and never contains an environment variable's value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not valid TOML, or a key or value of the wrong shape (unknown key, bad duration, ...);
    /// the message gives the line and column and quotes that line of the file (as written,
    /// before any expansion).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// `field` is a path such as `upstream[0].headers.Authorization`.
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Reads and parses `path`, expanding variables from the process environment.
pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, &|name| std::env::var(name).ok())
}

/// Parses and validates a config, expanding variables with `env` (a name to its value).
pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyConfig, ConfigError> {
    let raw: RawConfig = toml::from_str(text)?;
    if raw.worker.task_queue.trim().is_empty() {
        return Err(invalid("worker.task_queue", "must not be empty"));
    }
    if raw.worker.max_concurrent_calls == Some(0) {
        return Err(invalid("worker.max_concurrent_calls", "must be at least 1"));
    }
    if let Some(t) = &raw.temporal {
        for (key, value) in [("address", &t.address), ("namespace", &t.namespace)] {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                return Err(invalid(
                    format!("temporal.{key}"),
                    "must not be empty (leave it out to use the environment)",
                ));
            }
        }
    }
    if raw.upstream.is_empty() {
        return Err(invalid(
            "upstream",
            "no upstreams: add at least one [[upstream]] table",
        ));
    }
    let mut seen = BTreeMap::new();
    let mut upstreams = Vec::with_capacity(raw.upstream.len());
    for (i, raw) in raw.upstream.into_iter().enumerate() {
        let upstream = upstream(i, raw, env)?;
        if let Some(first) = seen.insert(upstream.service.clone(), i) {
            return Err(invalid(
                format!("upstream[{i}].service"),
                format!(
                    "duplicate service name {:?}, already used by upstream[{first}]",
                    upstream.service
                ),
            ));
        }
        upstreams.push(upstream);
    }
    Ok(ProxyConfig {
        worker: raw.worker,
        temporal: raw.temporal,
        upstreams,
    })
}

/// The file's shape. Transport keys are flat and optional here, and strings unexpanded, so
/// that serde rejects unknown keys and every later error can name its field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    worker: WorkerSection,
    temporal: Option<TemporalSection>,
    #[serde(default)]
    upstream: Vec<RawUpstream>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    service: String,
    transport: TransportKind,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    #[serde(default)]
    activity_options: ActivityOptions,
    #[serde(default)]
    overrides: BTreeMap<String, ActivityOptions>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TransportKind {
    Stdio,
    Http,
}

fn upstream(
    i: usize,
    raw: RawUpstream,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamConfig, ConfigError> {
    let at = |key: &str| format!("upstream[{i}].{key}");
    let service = raw.service;
    if service.is_empty() {
        return Err(invalid(at("service"), "must not be empty"));
    }
    if !service
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(invalid(
            at("service"),
            format!("{service:?} may use only letters, digits, '_', '.' and '-'"),
        ));
    }

    // Keys of the other transport are a mistake, not something to ignore.
    let (kind, other, misplaced): (_, _, &[(&str, bool)]) = match raw.transport {
        TransportKind::Http => (
            "http",
            "stdio",
            &[
                ("command", raw.command.is_some()),
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("cwd", raw.cwd.is_some()),
            ],
        ),
        TransportKind::Stdio => (
            "stdio",
            "http",
            &[
                ("url", raw.url.is_some()),
                ("headers", raw.headers.is_some()),
            ],
        ),
    };
    if let Some((key, _)) = misplaced.iter().find(|(_, given)| *given) {
        return Err(invalid(
            at(key),
            format!("only for transport = \"{other}\", this upstream is \"{kind}\""),
        ));
    }

    let transport = match raw.transport {
        TransportKind::Http => {
            let url_text = raw
                .url
                .ok_or_else(|| invalid(at("url"), "required for transport = \"http\""))?;
            // The URL may hold an expanded secret: describe the problem, never the value.
            let url = Url::parse(&expand(&url_text, &at("url"), env)?)
                .map_err(|e| invalid(at("url"), format!("not a valid URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(at("url"), "scheme must be http or https"));
            }
            let mut headers = BTreeMap::new();
            for (name, value) in raw.headers.unwrap_or_default() {
                let field = at(&format!("headers.{name}"));
                if name.is_empty() || !name.bytes().all(is_header_name_byte) {
                    return Err(invalid(field, "not a valid HTTP header name"));
                }
                let value = expand(&value, &field, env)?;
                if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
                    return Err(invalid(field, "value contains a line break or NUL"));
                }
                headers.insert(name, value);
            }
            TransportConfig::Http { url, headers }
        }
        TransportKind::Stdio => {
            let command_text = raw
                .command
                .ok_or_else(|| invalid(at("command"), "required for transport = \"stdio\""))?;
            let command = expand(&command_text, &at("command"), env)?;
            if command.trim().is_empty() {
                return Err(invalid(at("command"), "must not be empty"));
            }
            let args = (raw.args.unwrap_or_default().iter().enumerate())
                .map(|(n, arg)| expand(arg, &at(&format!("args[{n}]")), env))
                .collect::<Result<_, _>>()?;
            let mut vars = BTreeMap::new();
            for (name, value) in raw.env.unwrap_or_default() {
                let field = at(&format!("env.{name}"));
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(invalid(field, "not a valid environment variable name"));
                }
                vars.insert(name, expand(&value, &field, env)?);
            }
            let cwd = match raw.cwd {
                None => None,
                Some(text) => {
                    let cwd = expand(&text, &at("cwd"), env)?;
                    if cwd.is_empty() {
                        return Err(invalid(
                            at("cwd"),
                            "must not be empty (leave it out to use the worker's)",
                        ));
                    }
                    Some(PathBuf::from(cwd))
                }
            };
            TransportConfig::Stdio {
                command,
                args,
                env: vars,
                cwd,
            }
        }
    };

    raw.activity_options
        .validate()
        .map_err(|(key, problem)| invalid(at(&format!("activity_options.{key}")), problem))?;
    for (tool, options) in &raw.overrides {
        if tool.is_empty() {
            return Err(invalid(at("overrides"), "a tool name must not be empty"));
        }
        options
            .validate()
            .map_err(|(key, problem)| invalid(at(&format!("overrides.{tool}.{key}")), problem))?;
    }
    Ok(UpstreamConfig {
        service,
        transport,
        activity_options: raw.activity_options,
        overrides: raw.overrides,
    })
}

/// HTTP token characters (RFC 9110), the only ones a header name may have.
fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Expands `${NAME}`, `${NAME:-default}` and `$$` in `value`, the text of `field`. Error
/// messages name the field and the variable, never a variable's value.
fn expand(
    value: &str,
    field: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(body_on) = after.strip_prefix('{') else {
            return Err(invalid(
                field,
                "a `$` must start ${NAME} or ${NAME:-default}; write $$ for a literal `$`",
            ));
        };
        let Some(end) = body_on.find('}') else {
            return Err(invalid(field, "`${` without a closing `}`"));
        };
        let body = &body_on[..end];
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        let valid_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(invalid(
                field,
                format!("`${{{body}}}`: not a valid environment variable name"),
            ));
        }
        match (env(name), default) {
            (Some(v), Some(default)) if v.is_empty() => out.push_str(default),
            (Some(v), _) => out.push_str(&v),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(invalid(
                    field,
                    format!("environment variable {name} is not set"),
                ));
            }
        }
        rest = &body_on[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outbound::options::RetryPolicySpec;

    const SECRET: &str = "s3cr3t-t0ken";

    fn env(name: &str) -> Option<String> {
        match name {
            "WEATHER_TOKEN" => Some(SECRET.into()),
            "EMPTY" => Some(String::new()),
            "BAD_URL" => Some(format!("not a url {SECRET}")),
            "CRLF" => Some(format!("{SECRET}\r\nX-Injected: 1")),
            _ => None,
        }
    }

    const EXAMPLE: &str = r#"
[worker]
task_queue = "mcp-proxy"
max_concurrent_calls = 100

[temporal]
address = "localhost:7233"
namespace = "default"

[[upstream]]
service = "weather-tools"
transport = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
[upstream.activity_options]
start_to_close_timeout = "30s"
[upstream.overrides.get_forecast_report]
start_to_close_timeout = "48h"
retry_policy = { maximum_attempts = 3 }

[[upstream]]
service = "files"
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything", "stdio"]
env = { LOG_LEVEL = "warn" }
cwd = "/tmp"
"#;

    /// The error message for `text`, which must fail.
    fn error(text: &str) -> String {
        parse(text, &env)
            .expect_err("config should be rejected")
            .to_string()
    }

    /// A minimal config with one upstream whose body is `upstream`.
    fn with_upstream(upstream: &str) -> String {
        format!("[worker]\ntask_queue = \"q\"\n[[upstream]]\n{upstream}\n")
    }

    fn http(extra: &str) -> String {
        with_upstream(&format!(
            "service = \"s\"\ntransport = \"http\"\nurl = \"https://h/mcp\"\n{extra}"
        ))
    }

    fn stdio(extra: &str) -> String {
        with_upstream(&format!(
            "service = \"s\"\ntransport = \"stdio\"\ncommand = \"server\"\n{extra}"
        ))
    }

    #[test]
    fn full_example_parses() {
        let config = parse(EXAMPLE, &env).unwrap();
        assert_eq!(
            config.worker,
            WorkerSection {
                task_queue: "mcp-proxy".into(),
                max_concurrent_calls: Some(100)
            }
        );
        assert_eq!(
            config.temporal,
            Some(TemporalSection {
                address: Some("localhost:7233".into()),
                namespace: Some("default".into())
            })
        );
        let [weather, files] = &config.upstreams[..] else {
            panic!("two upstreams expected")
        };

        assert_eq!(weather.service, "weather-tools");
        assert_eq!(
            weather.transport,
            TransportConfig::Http {
                url: Url::parse("https://mcp.example.com/mcp").unwrap(),
                headers: BTreeMap::from([("Authorization".into(), format!("Bearer {SECRET}"))]),
            }
        );
        assert_eq!(
            weather.activity_options.start_to_close_timeout,
            Some(Duration::from_secs(30))
        );
        let report = &weather.overrides["get_forecast_report"];
        assert_eq!(
            report.start_to_close_timeout,
            Some(Duration::from_secs(48 * 3600))
        );
        assert_eq!(
            report.retry_policy,
            Some(RetryPolicySpec {
                maximum_attempts: Some(3),
                ..Default::default()
            })
        );

        assert_eq!(files.service, "files");
        assert_eq!(
            files.transport,
            TransportConfig::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-everything".into(),
                    "stdio".into()
                ],
                env: BTreeMap::from([("LOG_LEVEL".into(), "warn".into())]),
                cwd: Some(PathBuf::from("/tmp")),
            }
        );
        assert_eq!(files.activity_options, ActivityOptions::default());
        assert!(files.overrides.is_empty());
    }

    #[test]
    fn optional_sections_may_be_left_out() {
        let config = parse(&stdio(""), &env).unwrap();
        assert_eq!(config.temporal, None);
        assert_eq!(config.worker.max_concurrent_calls, None);
        assert_eq!(
            config.upstreams[0].transport,
            TransportConfig::Stdio {
                command: "server".into(),
                args: vec![],
                env: BTreeMap::new(),
                cwd: None
            }
        );
    }

    #[test]
    fn expansion_with_default_and_escape() {
        let expand = |s: &str| expand(s, "f", &env);
        assert_eq!(
            expand("Bearer ${WEATHER_TOKEN}").unwrap(),
            format!("Bearer {SECRET}")
        );
        assert_eq!(expand("${UNSET:-fallback}/x").unwrap(), "fallback/x");
        assert_eq!(expand("${UNSET:-}").unwrap(), "");
        assert_eq!(
            expand("${EMPTY:-used when empty}").unwrap(),
            "used when empty"
        );
        assert_eq!(expand("${EMPTY}").unwrap(), "");
        assert_eq!(expand("${WEATHER_TOKEN:-unused}").unwrap(), SECRET);
        assert_eq!(
            expand("cost: $$5 and $${NOT_EXPANDED}").unwrap(),
            "cost: $5 and ${NOT_EXPANDED}"
        );
        assert_eq!(expand("no variables").unwrap(), "no variables");
        assert_eq!(expand("${UNSET:-a:-b}").unwrap(), "a:-b");
        for bad in [
            "$HOME",
            "trailing $",
            "${UNCLOSED",
            "${}",
            "${1X}",
            "${A-B}",
        ] {
            let message = expand(bad).unwrap_err().to_string();
            assert!(message.starts_with("f: "), "{bad}: {message}");
        }
    }

    #[test]
    fn expansion_applies_to_every_documented_field() {
        let text = with_upstream(
            r#"service = "s"
transport = "stdio"
command = "${UNSET:-npx}"
args = ["--token-file", "${UNSET:-/run}/t"]
env = { TOKEN = "${WEATHER_TOKEN}" }
cwd = "${UNSET:-/srv}""#,
        );
        let TransportConfig::Stdio {
            command,
            args,
            env: vars,
            cwd,
        } = parse(&text, &env).unwrap().upstreams.remove(0).transport
        else {
            panic!("stdio expected")
        };
        assert_eq!(
            (command.as_str(), args[1].as_str(), vars["TOKEN"].as_str()),
            ("npx", "/run/t", SECRET)
        );
        assert_eq!(cwd, Some(PathBuf::from("/srv")));

        let text = with_upstream(
            "service = \"s\"\ntransport = \"http\"\nurl = \"https://${UNSET:-h.example}/mcp\"",
        );
        let TransportConfig::Http { url, .. } = &parse(&text, &env).unwrap().upstreams[0].transport
        else {
            panic!("http expected")
        };
        assert_eq!(url.as_str(), "https://h.example/mcp");
    }

    #[test]
    fn missing_variable_names_the_field_and_variable() {
        let text = EXAMPLE.replace("WEATHER_TOKEN", "NO_SUCH_TOKEN");
        assert_eq!(
            error(&text),
            "upstream[0].headers.Authorization: environment variable NO_SUCH_TOKEN is not set"
        );
        assert_eq!(
            error(&stdio("args = [\"a\", \"${NOPE}\"]")),
            "upstream[0].args[1]: environment variable NOPE is not set"
        );
        assert_eq!(
            error(&stdio("env = { K = \"${NOPE}\" }")),
            "upstream[0].env.K: environment variable NOPE is not set"
        );
    }

    #[test]
    fn errors_never_show_expanded_values() {
        let cases = [
            with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"${BAD_URL}\""),
            with_upstream(
                "service = \"s\"\ntransport = \"http\"\nurl = \"ftp://${WEATHER_TOKEN}/\"",
            ),
            http("headers = { X = \"${CRLF}\" }"),
            http("headers = { X = \"${WEATHER_TOKEN}\", Y = \"${NOPE}\" }"),
        ];
        for text in cases {
            let message = error(&text);
            assert!(message.starts_with("upstream[0]."), "{message}");
            assert!(!message.contains(SECRET), "{message}");
        }
    }

    #[test]
    fn validation_errors_name_their_field() {
        let cases = [
            (
                with_upstream("service = \"\"\ntransport = \"stdio\"\ncommand = \"x\""),
                "upstream[0].service: must not be empty",
            ),
            (
                with_upstream("service = \"a b\"\ntransport = \"stdio\"\ncommand = \"x\""),
                "upstream[0].service: ",
            ),
            (
                format!(
                    "{}\n[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"y\"",
                    stdio("")
                ),
                "upstream[1].service: duplicate service name \"s\", already used by upstream[0]",
            ),
            (
                with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"ftp://h/\""),
                "upstream[0].url: scheme must be http or https",
            ),
            (
                with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"/relative\""),
                "upstream[0].url: not a valid URL",
            ),
            (
                with_upstream("service = \"s\"\ntransport = \"http\""),
                "upstream[0].url: required for transport = \"http\"",
            ),
            (
                with_upstream("service = \"s\"\ntransport = \"stdio\"\ncommand = \" \""),
                "upstream[0].command: must not be empty",
            ),
            (
                with_upstream("service = \"s\"\ntransport = \"stdio\""),
                "upstream[0].command: required for transport = \"stdio\"",
            ),
            (
                stdio("url = \"https://h/\""),
                "upstream[0].url: only for transport = \"http\"",
            ),
            (
                http("args = []"),
                "upstream[0].args: only for transport = \"stdio\"",
            ),
            (
                http("headers = { \"Bad Name\" = \"v\" }"),
                "upstream[0].headers.Bad Name: not a valid HTTP header name",
            ),
            (stdio("cwd = \"\""), "upstream[0].cwd: must not be empty"),
            (
                stdio("[upstream.activity_options]\nretry_policy = { maximum_attempts = -2 }"),
                "upstream[0].activity_options.retry_policy.maximum_attempts: must be 0 (unlimited) or more",
            ),
            (
                stdio("[upstream.overrides.slow_tool]\nheartbeat_timeout = \"0s\""),
                "upstream[0].overrides.slow_tool.heartbeat_timeout: must be longer than zero",
            ),
            (
                "[worker]\ntask_queue = \"q\"\n".to_owned(),
                "upstream: no upstreams",
            ),
            (
                stdio("").replace("task_queue = \"q\"", "task_queue = \"\""),
                "worker.task_queue: must not be empty",
            ),
            (
                stdio("").replace(
                    "task_queue = \"q\"",
                    "task_queue = \"q\"\nmax_concurrent_calls = 0",
                ),
                "worker.max_concurrent_calls: ",
            ),
            (
                format!("[temporal]\nnamespace = \"\"\n{}", stdio("")),
                "temporal.namespace: must not be empty",
            ),
        ];
        for (text, expected) in cases {
            let message = error(&text);
            assert!(
                message.starts_with(expected),
                "expected {expected:?}, got {message:?}"
            );
        }
    }

    #[test]
    fn shape_errors_name_the_key_and_line() {
        let cases = [
            (http("colour = \"red\""), "unknown field `colour`"),
            (
                http("[upstream.activity_options]\nstart_to_close = \"30s\""),
                "unknown field `start_to_close`",
            ),
            (
                http("[upstream.overrides.t]\nretry_policy = { max_attempts = 3 }"),
                "unknown field `max_attempts`",
            ),
            (
                http("[upstream.activity_options]\nstart_to_close_timeout = \"soon\""),
                "start_to_close_timeout = \"soon\"",
            ),
            (
                http("[upstream.activity_options]\nstart_to_close_timeout = 30"),
                "start_to_close_timeout = 30",
            ),
            (
                http("").replace("transport = \"http\"", "transport = \"websocket\""),
                "unknown variant `websocket`",
            ),
            (
                with_upstream("transport = \"stdio\"\ncommand = \"x\""),
                "missing field `service`",
            ),
            (
                "[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n"
                    .to_owned(),
                "missing field `worker`",
            ),
            (
                "[worker]\ntask_queue = \"q\"\nthreads = 4\n".to_owned(),
                "unknown field `threads`",
            ),
            ("[worker\n".to_owned(), "line 1"),
        ];
        for (text, expected) in cases {
            let message = error(&text);
            assert!(
                message.contains(expected),
                "expected {expected:?} in {message}"
            );
            assert!(message.contains("line "), "no line number in {message}");
        }
    }

    #[test]
    fn debug_output_redacts_credentials() {
        let config = parse(
            EXAMPLE
                .replace("/mcp\"", "/mcp?api_key=${WEATHER_TOKEN}\"")
                .as_str(),
            &env,
        )
        .unwrap();
        let debug = format!("{config:?}");
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(!debug.contains("warn"), "{debug}");
        assert!(
            debug.contains(r#"headers: {"Authorization": "***"}"#),
            "{debug}"
        );
        assert!(debug.contains(r#"env: {"LOG_LEVEL": "***"}"#), "{debug}");
        assert!(debug.contains("https://mcp.example.com/mcp?***"), "{debug}");

        let with_password = TransportConfig::Http {
            url: Url::parse(&format!("https://user:{SECRET}@h/mcp")).unwrap(),
            headers: BTreeMap::new(),
        };
        let debug = format!("{with_password:?}");
        assert!(
            !debug.contains(SECRET) && debug.contains("user:***@h"),
            "{debug}"
        );
    }

    #[test]
    fn load_reads_a_file_and_names_it_when_missing() {
        let path =
            std::env::temp_dir().join(format!("durable-mcp-proxy-{}.toml", std::process::id()));
        std::fs::write(&path, "[worker]\ntask_queue = \"q\"\n[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n")
            .unwrap();
        let loaded = load(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap().upstreams[0].service, "s");

        let missing = load(Path::new("/nonexistent/proxy.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("cannot read /nonexistent/proxy.toml: "),
            "{missing}"
        );
    }
}
