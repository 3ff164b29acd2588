//! How a transport is shown in logs and `Debug` output: header and `env` values, a URL's
//! password and query become `***` (R-PRX-1).

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
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &RedactedValues(env))
                .field("cwd", cwd)
                .field("inherit_env", inherit_env)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", &redacted_url(url))
                .field("headers", &RedactedValues(headers))
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
