//! One `[[upstream]]` table: its raw shape and its validation into an [`UpstreamConfig`]. Every
//! error names its field (`upstream[i].key`), never an expanded value (R-PRX-1).

use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;
use url::Url;

use super::{
    ConfigError, TransportConfig, UpstreamConfig,
    expand::expand,
    invalid,
    oauth::{RawClientCredentials, client_credentials},
};
use crate::options::ActivityOptions;
use durable_mcp_runtime::temporal::direct_http::is_loopback;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    service: String,
    transport: TransportKind,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    inherit_env: Option<bool>,
    allow_insecure_http: Option<bool>,
    unavailable_means_not_run: Option<bool>,
    oauth: Option<RawClientCredentials>,
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

pub(super) fn upstream(
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
                ("inherit_env", raw.inherit_env.is_some()),
            ],
        ),
        TransportKind::Stdio => (
            "stdio",
            "http",
            &[
                ("url", raw.url.is_some()),
                ("headers", raw.headers.is_some()),
                ("allow_insecure_http", raw.allow_insecure_http.is_some()),
                (
                    "unavailable_means_not_run",
                    raw.unavailable_means_not_run.is_some(),
                ),
                ("oauth", raw.oauth.is_some()),
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
            if !raw.allow_insecure_http.unwrap_or(false)
                && sends_credentials_in_clear(&url, !headers.is_empty() || raw.oauth.is_some())
            {
                return Err(invalid(
                    at("url"),
                    "plain http to a host that is not loopback would send the credentials \
                     (headers, user info or query) in clear: use https, or set \
                     allow_insecure_http = true",
                ));
            }
            let oauth = match raw.oauth {
                Some(oauth) => {
                    if headers
                        .keys()
                        .any(|h| h.eq_ignore_ascii_case("authorization"))
                    {
                        return Err(invalid(
                            at("oauth"),
                            "the upstream has an Authorization header already: use one or the other",
                        ));
                    }
                    let at_oauth = |key: &str| at(&format!("oauth.{key}"));
                    Some(client_credentials(oauth, &at_oauth, env)?)
                }
                None => None,
            };
            TransportConfig::Http {
                url,
                headers,
                unavailable_means_not_run: raw.unavailable_means_not_run.unwrap_or(false),
                oauth,
            }
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
                inherit_env: raw.inherit_env.unwrap_or(false),
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

/// Whether a request to `url` would carry credentials (configured headers, user info, a
/// query) unencrypted over a network: `http` to anything but a loopback address.
fn sends_credentials_in_clear(url: &Url, has_headers: bool) -> bool {
    let carries = has_headers
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some();
    url.scheme() == "http" && carries && !is_loopback(url)
}

/// HTTP token characters (RFC 9110), the only ones a header name may have.
fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
