//! One `[[upstream]]` table: its raw shape and its validation into an [`UpstreamConfig`]. Every
//! error names its field (`upstream[i].key`), never an expanded value (R-PRX-1).

use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;
use url::Url;

use super::{
    ClientCredentials, ConfigError, TransportConfig, UpstreamConfig,
    expand::expand,
    invalid,
    oauth::{RawClientCredentials, client_credentials},
};
use crate::{
    learned_url::{IpNet, LearnedUrlPolicy},
    options::ActivityOptions,
};
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
    #[serde(default, with = "humantime_serde")]
    discover_wait: Option<std::time::Duration>,
    allow_insecure_http: Option<bool>,
    unavailable_means_not_run: Option<bool>,
    oauth: Option<RawClientCredentials>,
    allow_private_urls: Option<Vec<String>>,
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

/// Validates one `[[upstream]]` table (the `i`th) into an [`UpstreamConfig`], expanding
/// `${VAR}` references through `env`.
pub(super) fn upstream(
    i: usize,
    raw: RawUpstream,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamConfig, ConfigError> {
    let at = |key: &str| format!("upstream[{i}].{key}");
    check_service(&raw.service, &at)?;
    check_no_misplaced_keys(&raw, &at)?;
    let transport = match raw.transport {
        TransportKind::Http => http_transport(&raw, &at, env)?,
        TransportKind::Stdio => stdio_transport(&raw, &at, env)?,
    };
    check_activity_options(&raw, &at)?;
    Ok(UpstreamConfig {
        service: raw.service,
        transport,
        activity_options: raw.activity_options,
        overrides: raw.overrides,
    })
}

/// The field name an error points at, e.g. `upstream[2].url`.
type FieldName<'a> = &'a dyn Fn(&str) -> String;

fn check_service(service: &str, at: FieldName) -> Result<(), ConfigError> {
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
    Ok(())
}

/// Keys of the other transport are a mistake, not something to ignore.
fn check_no_misplaced_keys(raw: &RawUpstream, at: FieldName) -> Result<(), ConfigError> {
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
                ("discover_wait", raw.discover_wait.is_some()),
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
                ("allow_private_urls", raw.allow_private_urls.is_some()),
            ],
        ),
    };
    match misplaced.iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(invalid(
            at(key),
            format!("only for transport = \"{other}\", this upstream is \"{kind}\""),
        )),
        None => Ok(()),
    }
}

fn http_transport(
    raw: &RawUpstream,
    at: FieldName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TransportConfig, ConfigError> {
    let url_text = (raw.url.as_deref())
        .ok_or_else(|| invalid(at("url"), "required for transport = \"http\""))?;
    // The URL may hold an expanded secret: describe the problem, never the value.
    let url = Url::parse(&expand(url_text, &at("url"), env)?)
        .map_err(|e| invalid(at("url"), format!("not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(at("url"), "scheme must be http or https"));
    }
    let headers = http_headers(raw.headers.as_ref(), at, env)?;
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
    let oauth = match &raw.oauth {
        Some(oauth) => Some(oauth_credentials(
            oauth,
            raw.allow_private_urls.as_ref(),
            &url,
            &headers,
            at,
            env,
        )?),
        None if raw.allow_private_urls.is_some() => {
            return Err(invalid(
                at("allow_private_urls"),
                "only with [upstream.oauth] without token_url (the proxy learns no URL \
                 otherwise): leave it out",
            ));
        }
        None => None,
    };
    Ok(TransportConfig::Http {
        url,
        headers,
        unavailable_means_not_run: raw.unavailable_means_not_run.unwrap_or(false),
        oauth,
    })
}

/// Header names are HTTP tokens; expanded values hold no line break or NUL.
fn http_headers(
    given: Option<&BTreeMap<String, String>>,
    at: FieldName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut headers = BTreeMap::new();
    for (name, value) in given.into_iter().flatten() {
        let field = at(&format!("headers.{name}"));
        if name.is_empty() || !name.bytes().all(is_header_name_byte) {
            return Err(invalid(field, "not a valid HTTP header name"));
        }
        let value = expand(value, &field, env)?;
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(invalid(field, "value contains a line break or NUL"));
        }
        headers.insert(name.clone(), value);
    }
    Ok(headers)
}

/// OAuth client credentials, which replace a configured `Authorization` header, never join it.
fn oauth_credentials(
    oauth: &RawClientCredentials,
    allowed: Option<&Vec<String>>,
    url: &Url,
    headers: &BTreeMap<String, String>,
    at: FieldName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ClientCredentials, ConfigError> {
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
    let learned = learned_url_policy(oauth, allowed, at)?;
    client_credentials(oauth.clone(), url, learned, &at_oauth, env)
}

/// `allow_private_urls` (R-PRX-37): CIDR ranges (or single addresses) that the URLs discovery
/// learns may reach. Only token-endpoint discovery learns URLs, so the key is refused where
/// there is none to allow.
fn learned_url_policy(
    oauth: &RawClientCredentials,
    allowed: Option<&Vec<String>>,
    at: FieldName,
) -> Result<LearnedUrlPolicy, ConfigError> {
    let Some(allowed) = allowed else {
        return Ok(LearnedUrlPolicy::default());
    };
    if oauth.names_token_url() {
        return Err(invalid(
            at("allow_private_urls"),
            "only for an oauth table without token_url (the proxy learns no URL otherwise): \
             leave it out",
        ));
    }
    let parse = |(n, text): (usize, &String)| {
        (text.parse::<IpNet>())
            .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| {
                invalid(
                    at(&format!("allow_private_urls[{n}]")),
                    "not a CIDR range or an IP address (e.g. \"10.0.0.0/8\")",
                )
            })
    };
    Ok(LearnedUrlPolicy {
        allowed: allowed
            .iter()
            .enumerate()
            .map(parse)
            .collect::<Result<_, _>>()?,
    })
}

fn stdio_transport(
    raw: &RawUpstream,
    at: FieldName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TransportConfig, ConfigError> {
    let command_text = (raw.command.as_deref())
        .ok_or_else(|| invalid(at("command"), "required for transport = \"stdio\""))?;
    let command = expand(command_text, &at("command"), env)?;
    if command.trim().is_empty() {
        return Err(invalid(at("command"), "must not be empty"));
    }
    let args = (raw.args.iter().flatten().enumerate())
        .map(|(n, arg)| expand(arg, &at(&format!("args[{n}]")), env))
        .collect::<Result<_, _>>()?;
    let mut vars = BTreeMap::new();
    for (name, value) in raw.env.iter().flatten() {
        let field = at(&format!("env.{name}"));
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(invalid(field, "not a valid environment variable name"));
        }
        vars.insert(name.clone(), expand(value, &field, env)?);
    }
    Ok(TransportConfig::Stdio {
        command,
        args,
        env: vars,
        cwd: working_directory(raw.cwd.as_deref(), at, env)?,
        inherit_env: raw.inherit_env.unwrap_or(false),
        discover_wait: discover_wait(raw.discover_wait, at)?,
    })
}

/// A stdio upstream's `discover_wait` (R-PRX-33): more than zero, and at most rmcp's own 10 s.
fn discover_wait(
    wait: Option<std::time::Duration>,
    at: FieldName,
) -> Result<Option<std::time::Duration>, ConfigError> {
    match wait {
        Some(w) if w.is_zero() || w > super::MAX_DISCOVER_WAIT => Err(invalid(
            at("discover_wait"),
            "must be more than zero and at most 10s (e.g. \"3s\")",
        )),
        wait => Ok(wait),
    }
}

fn working_directory(
    cwd: Option<&str>,
    at: FieldName,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(text) = cwd else { return Ok(None) };
    let cwd = expand(text, &at("cwd"), env)?;
    if cwd.is_empty() {
        return Err(invalid(
            at("cwd"),
            "must not be empty (leave it out to use the worker's)",
        ));
    }
    Ok(Some(PathBuf::from(cwd)))
}

fn check_activity_options(raw: &RawUpstream, at: FieldName) -> Result<(), ConfigError> {
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
    Ok(())
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
