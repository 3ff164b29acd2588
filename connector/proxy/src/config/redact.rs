//! How a transport is shown in logs and `Debug` output: header and `env` values, a URL's
//! user info and query become `***`; and [`UrlSecrets`], which takes a URL's secrets out of
//! any error text (R-PRX-1).

use std::{collections::BTreeMap, fmt};

use url::Url;

use super::TransportConfig;

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
                inherit_env,
                discover_wait,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &RedactedValues(env))
                .field("cwd", cwd)
                .field("inherit_env", inherit_env)
                .field("discover_wait", discover_wait)
                .finish(),
            Self::Http {
                url,
                headers,
                unavailable_means_not_run,
                oauth,
            } => f
                .debug_struct("Http")
                .field("url", &redacted_url(url))
                .field("headers", &RedactedValues(headers))
                .field("unavailable_means_not_run", unavailable_means_not_run)
                .field("oauth", oauth)
                .finish(),
            Self::Custom(custom) => custom.fmt(f),
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

/// The URL with its user info and query (where API keys tend to go) replaced by `***`.
pub fn redacted_url(url: &Url) -> String {
    let mut shown = url.clone();
    if !shown.username().is_empty() {
        let _ = shown.set_username(REDACTED);
    }
    if shown.password().is_some() {
        let _ = shown.set_password(Some(REDACTED));
    }
    if shown.query().is_some() {
        shown.set_query(Some(REDACTED));
    }
    shown.to_string()
}

/// The secret parts of an upstream URL, to take out of any text before it is logged, put in a
/// failure (and so in Temporal history) or shown to a caller: HTTP client errors quote the URL
/// they failed on (R-PRX-1).
#[derive(Clone, Default)]
pub struct UrlSecrets {
    /// (text to find, what to put instead), longest first.
    replacements: Vec<(String, String)>,
}

/// Query values shorter than this are replaced only as part of the whole query or URL, so
/// that `?v=1` does not turn every `1` of a message into `***`.
const SHORTEST_SECRET: usize = 6;

impl UrlSecrets {
    /// The secrets of `url`: the whole URL (as written and as shown), its user name, password
    /// and query, and each query value, raw and percent-decoded.
    pub fn of(url: &Url) -> Self {
        let mut replacements = Vec::new();
        let shown = redacted_url(url);
        if shown == url.as_str() {
            return Self::default();
        }
        replacements.push((url.as_str().to_owned(), shown.clone()));
        replacements.push((url.as_str().trim_end_matches('/').to_owned(), shown));
        let mut piece = |raw: &str, short_ok: bool| {
            let decoded = percent_decode(raw);
            for text in [raw.to_owned(), decoded] {
                if !text.is_empty() && (short_ok || text.chars().count() >= SHORTEST_SECRET) {
                    replacements.push((text, REDACTED.to_owned()));
                }
            }
        };
        piece(url.username(), false);
        if let Some(password) = url.password() {
            piece(password, true);
        }
        if let Some(query) = url.query() {
            piece(query, true);
            for pair in query.split('&') {
                piece(pair.split_once('=').map_or(pair, |(_, v)| v), false);
            }
        }
        replacements.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
        replacements.dedup();
        Self { replacements }
    }

    /// `text` with every secret replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (find, put) in &self.replacements {
            if text.contains(find.as_str()) {
                text = text.replace(find.as_str(), put);
            }
        }
        text
    }

    /// `value` with every secret replaced in its strings (keys included); nothing else changes.
    pub fn scrub_json(&self, value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.replacements.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.scrub(&s)),
            Value::Array(items) => items.into_iter().map(|v| self.scrub_json(v)).collect(),
            Value::Object(map) => map
                .into_iter()
                .map(|(k, v)| (self.scrub(&k), self.scrub_json(v)))
                .collect(),
            other => other,
        }
    }
}

impl fmt::Debug for UrlSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UrlSecrets({} redactions)", self.replacements.len())
    }
}

fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
