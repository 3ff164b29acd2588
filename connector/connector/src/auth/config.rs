//! `--auth-config`: the inbound OAuth resource-server settings, parsed and checked before the
//! connector serves anything.
//!
//! ```yaml
//! auth:
//!   resource: https://mcp.example.com/mcp      # public URL of the MCP endpoint; its path is served
//!   issuer: https://login.example.com/         # trusted issuer, compared exactly with `iss`
//!   audience: https://mcp.example.com/mcp      # optional: `aud` to require (default: resource)
//!   required_scopes: [tools]                    # optional: every token must carry all of these
//!   jwks_uri: https://login.example.com/jwks   # optional: else discovered from the issuer
//!   algorithms: [RS256, ES256]                  # optional: accepted signature algorithms
//!   leeway: 60s                                 # optional: clock skew allowed on exp/nbf
//! ```
//!
//! Plain `http` is accepted only for loopback hosts (local development and tests); anything else
//! must be `https`, as RFC 8414 and RFC 9728 require for issuers and resources.

use std::{path::Path, time::Duration};

use jsonwebtoken::Algorithm;
use serde::Deserialize;
use url::Url;

/// Why an auth configuration was refused. Messages name the field and never echo a secret
/// (the file holds none: only public URLs and names).
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// The OS error is in the message, not a `source`: a caller printing the chain would
    /// otherwise show it twice.
    #[error("--auth-config {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("--auth-config {path}: {message}")]
    Invalid { path: String, message: String },
}

/// The checked settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// The public URL of the MCP endpoint (the RFC 9728 `resource`).
    pub resource: Url,
    /// The trusted issuer, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// The audience tokens must name in `aud`.
    pub audience: String,
    /// Scopes every token must carry (in `scope` or `scp`).
    pub required_scopes: Vec<String>,
    /// Where the signing keys are; `None` means discover it from the issuer's metadata.
    pub jwks_uri: Option<Url>,
    /// Accepted signature algorithms (never `none`, never HMAC: the connector has no shared
    /// secret with the identity provider).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed when checking `exp` and `nbf`.
    pub leeway: Duration,
    /// Also accept tokens typed `JWT`, or untyped, besides RFC 9068's `at+jwt` (for identity
    /// providers that do not type their access tokens).
    pub accept_untyped_tokens: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    auth: Raw,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    resource: String,
    issuer: String,
    #[serde(default)]
    audience: Option<String>,
    #[serde(default)]
    required_scopes: Vec<String>,
    #[serde(default)]
    jwks_uri: Option<String>,
    #[serde(default)]
    algorithms: Option<Vec<String>>,
    #[serde(default, with = "humantime_serde")]
    leeway: Option<Duration>,
    #[serde(default)]
    accept_untyped_tokens: bool,
}

/// The most clock skew `leeway` may forgive on `exp` and `nbf`: more would keep expired tokens
/// working for that long.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// Algorithms accepted when the file names none: the asymmetric ones identity providers use.
pub const DEFAULT_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

impl AuthConfig {
    /// Reads and checks a YAML file.
    pub fn load(path: &Path) -> Result<Self, AuthConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| AuthConfigError::Read {
            path: shown.clone(),
            error,
        })?;
        Self::parse(&text).map_err(|message| AuthConfigError::Invalid {
            path: shown,
            message,
        })
    }

    /// Parses and checks YAML text; the error names the field.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = crate::yaml::from_str(text).map_err(|e| {
            format!(
                "{e} (expected a mapping `auth:` with resource, issuer and optional audience, \
                 required_scopes, jwks_uri, algorithms, leeway, accept_untyped_tokens)"
            )
        })?;
        let raw = file.auth;
        let resource = public_url("auth.resource", &raw.resource)?;
        if resource.path() == "/" || resource.path().is_empty() {
            return Err(format!(
                "auth.resource: {resource} has no path; name the MCP endpoint, e.g. https://host/mcp"
            ));
        }
        if resource.query().is_some() || resource.fragment().is_some() {
            return Err("auth.resource: must not have a query or fragment".into());
        }
        let issuer = raw.issuer.trim().to_owned();
        public_url("auth.issuer", &issuer)?;
        let audience = match raw.audience {
            Some(a) if a.trim().is_empty() => return Err("auth.audience: is empty".into()),
            Some(a) => a.trim().to_owned(),
            None => resource.to_string(),
        };
        let mut required_scopes = Vec::new();
        for s in raw.required_scopes {
            // RFC 6749 scope-token: printable ASCII but '"' and '\\'. It goes into
            // WWW-Authenticate headers, where a control character could not be sent.
            if s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            {
                return Err(format!(
                    "auth.required_scopes: {s:?} is not a scope token (printable ASCII only: no \
                     spaces, control characters, quotes or backslashes)"
                ));
            }
            required_scopes.push(s);
        }
        let jwks_uri = raw
            .jwks_uri
            .map(|u| public_url("auth.jwks_uri", &u))
            .transpose()?;
        let algorithms = match raw.algorithms {
            None => DEFAULT_ALGORITHMS.to_vec(),
            Some(names) if names.is_empty() => return Err("auth.algorithms: is empty".into()),
            Some(names) => names
                .iter()
                .map(|n| parse_algorithm(n))
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            resource,
            issuer,
            audience,
            required_scopes,
            jwks_uri,
            algorithms,
            leeway: match raw.leeway.unwrap_or(Duration::from_secs(60)) {
                leeway if leeway > MAX_LEEWAY => {
                    return Err(format!(
                        "auth.leeway: {} is more clock skew than tokens should be forgiven; at \
                         most {} (fix the clocks instead)",
                        humantime::format_duration(leeway),
                        humantime::format_duration(MAX_LEEWAY)
                    ));
                }
                leeway => leeway,
            },
            accept_untyped_tokens: raw.accept_untyped_tokens,
        })
    }

    /// The path the MCP endpoint is served at: the resource URL's path.
    pub fn mcp_path(&self) -> &str {
        self.resource.path()
    }

    /// The RFC 9728 metadata URL for the resource: `/.well-known/oauth-protected-resource`
    /// inserted between the host and the resource's path.
    pub fn metadata_url(&self) -> String {
        let mut url = self.resource.clone();
        url.set_path(&self.metadata_path());
        url.to_string()
    }

    /// The path part of [`AuthConfig::metadata_url`].
    pub fn metadata_path(&self) -> String {
        format!(
            "{WELL_KNOWN_RESOURCE}{}",
            self.resource.path().trim_end_matches('/')
        )
    }
}

/// RFC 9728's well-known path.
pub const WELL_KNOWN_RESOURCE: &str = "/.well-known/oauth-protected-resource";

fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    let alg: Algorithm = name
        .parse()
        .map_err(|_| format!("auth.algorithms: unknown algorithm {name:?}"))?;
    if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(format!(
            "auth.algorithms: {name} needs a secret shared with the identity provider; use an \
             asymmetric algorithm (RS256, ES256, PS256, EdDSA, ...)"
        ));
    }
    Ok(alg)
}

/// An absolute `https` URL, or `http` on a loopback host.
pub(super) fn public_url(field: &str, value: &str) -> Result<Url, String> {
    let url =
        Url::parse(value.trim()).map_err(|e| format!("{field}: {value:?} is not a URL: {e}"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(format!("{field}: {value:?} has no host")),
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        "http" => Err(format!(
            "{field}: {value:?} must use https (plain http is allowed only on loopback)"
        )),
        other => Err(format!("{field}: scheme {other:?} is not http(s)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "auth:\n  resource: https://mcp.example.com/mcp\n  issuer: https://login.example.com/\n";

    #[test]
    fn minimal_file_gets_defaults() {
        let c = AuthConfig::parse(GOOD).unwrap();
        assert_eq!(c.audience, "https://mcp.example.com/mcp");
        assert_eq!(c.mcp_path(), "/mcp");
        assert_eq!(
            c.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(c.algorithms, DEFAULT_ALGORITHMS.to_vec());
        assert_eq!(c.leeway, Duration::from_secs(60));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  required_scopes: [\"a\\u0001\"]\n",
                "auth.required_scopes",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  required_scopes: [\"t\u{e9}\"]\n",
                "auth.required_scopes",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  leeway: 2h\n",
                "auth.leeway",
            ),
            (
                "auth:\n  resource: http://mcp.example.com/mcp\n  issuer: https://i/\n",
                "auth.resource",
            ),
            (
                "auth:\n  resource: https://mcp.example.com/\n  issuer: https://i/\n",
                "auth.resource",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: nope\n",
                "auth.issuer",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  algorithms: [HS256]\n",
                "auth.algorithms",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  required_scopes: ['a b']\n",
                "auth.required_scopes",
            ),
            (
                "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  audiense: x\n",
                "audiense",
            ),
            ("resource: https://m/mcp\n", "auth"),
        ];
        for (text, field) in cases {
            let e = AuthConfig::parse(text).unwrap_err();
            assert!(e.contains(field), "{text:?}: {e}");
        }
    }

    #[test]
    fn yaml_errors_say_which_key_and_where() {
        let e = AuthConfig::parse(
            "auth:\n  resource: https://m/mcp\n  issuer: https://i/\n  leeway: 5 parsecs\n",
        )
        .unwrap_err();
        assert!(e.starts_with("auth.leeway: "), "{e}");
        assert!(e.contains("at line 4, column 3"), "{e}");
        let e = AuthConfig::parse("auth:\n  resource: https://m/mcp\n").unwrap_err();
        assert!(e.contains("missing field `issuer`"), "{e}");
    }

    #[test]
    fn the_bundled_example_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/inbound_auth.yaml");
        let c = AuthConfig::load(&path).unwrap();
        assert_eq!(c.mcp_path(), "/mcp");
        assert_eq!(c.required_scopes, ["mcp:tools"]);
    }

    #[test]
    fn http_only_on_loopback() {
        let c = AuthConfig::parse(
            "auth:\n  resource: http://127.0.0.1:8080/mcp\n  issuer: http://localhost:9/\n",
        )
        .unwrap();
        assert_eq!(c.issuer, "http://localhost:9/");
    }

    #[test]
    fn a_missing_file_names_the_os_error_once() {
        let err = AuthConfig::load(Path::new("/nonexistent/auth.yaml")).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(chain.matches("os error").count(), 1, "{chain}");
        assert!(chain.contains("/nonexistent/auth.yaml"), "{chain}");
    }
}
