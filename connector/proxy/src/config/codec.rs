//! `[codec]`: the remote codec server the proxy encodes payloads with (R-PRX-20). The endpoint
//! and header values expand `${NAME}` like every other value (R-PRX-1), so a codec's credential
//! lives in the environment; `Debug` shows header names only.

use std::{collections::BTreeMap, fmt, time::Duration};

use serde::Deserialize;

use super::{ConfigError, expand::expand, invalid};
use durable_mcp_runtime::temporal::codec::{
    CodecConfigError, CodecOptions, RemoteCodec, check_endpoint,
};

/// A validated `[codec]` table, variables expanded.
#[derive(Clone, PartialEq)]
pub struct CodecConfig {
    /// `https`, or `http` to a loopback address (R-PAY-5).
    pub endpoint: String,
    /// Sent with every codec request (for example `Authorization`).
    pub headers: BTreeMap<String, String>,
    /// The longest one codec request may take; the client's default when absent.
    pub timeout: Option<Duration>,
}

impl fmt::Debug for CodecConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodecConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl CodecConfig {
    /// The codec client for `namespace`.
    pub fn client(&self, namespace: &str) -> Result<RemoteCodec, CodecConfigError> {
        RemoteCodec::with_options(
            &self.endpoint,
            namespace,
            CodecOptions {
                headers: self.headers.clone().into_iter().collect(),
                field: Some("codec.endpoint".into()),
                timeout: self.timeout,
            },
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCodec {
    endpoint: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
}

pub(super) fn codec(
    raw: RawCodec,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<CodecConfig, ConfigError> {
    let endpoint = expand(&raw.endpoint, "codec.endpoint", env)?;
    // The endpoint's own error starts with the field's name.
    // The endpoint's own errors start with the field's name; a bad URL is not quoted back
    // (it may hold an expanded variable).
    check_endpoint(&endpoint, "codec.endpoint").map_err(|e| match e {
        CodecConfigError::Url { reason, .. } => {
            invalid("codec.endpoint", format!("not a valid URL: {reason}"))
        }
        other => {
            let text = other.to_string();
            let problem = text.strip_prefix("codec.endpoint").unwrap_or(&text);
            invalid("codec.endpoint", problem.trim_start_matches([':', ' ']))
        }
    })?;
    let mut headers = BTreeMap::new();
    for (name, value) in raw.headers {
        let field = format!("codec.headers.{name}");
        let value = expand(&value, &field, env)?;
        if http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || http::HeaderValue::from_str(&value).is_err()
        {
            return Err(invalid(field, "not a valid HTTP header name or value"));
        }
        headers.insert(name, value);
    }
    if raw.timeout.is_some_and(|t| t.is_zero()) {
        return Err(invalid("codec.timeout", "must be more than zero"));
    }
    Ok(CodecConfig {
        endpoint,
        headers,
        timeout: raw.timeout,
    })
}
