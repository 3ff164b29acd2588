//! `[upstream.oauth]`: OAuth 2.0 client credentials (RFC 6749 section 4.4) for an HTTP upstream
//! (R-PRX-15). The client secret is read from the environment variable the file names, and a
//! private key from the file it names (at each token request), never written in the config;
//! errors name the field, never a value.

use serde::Deserialize;
use url::Url;

use super::{ConfigError, invalid};
use crate::learned_url::LearnedUrlPolicy;
use durable_mcp_runtime::temporal::direct_http::is_loopback;

/// How the proxy gets the bearer token of an HTTP upstream. `Debug` hides the secrets.
#[derive(Clone, PartialEq)]
pub struct ClientCredentials {
    /// The authorization server's token endpoint (https, or http on loopback); none to find it
    /// from the upstream's metadata by discovery (RFC 9728, RFC 8414).
    pub token_url: Option<Url>,
    /// The authorization server discovery must find (its RFC 8414 `issuer`), required without
    /// `token_url`: the client's credentials go only to a server the operator named, never to
    /// one the upstream chose (R-PRX-15).
    pub issuer: Option<Url>,
    pub client_id: String,
    /// How the client authenticates to the token endpoint, with its secret or key.
    pub client_auth: ClientAuth,
    /// Sent space-separated as `scope`; none when empty.
    pub scopes: Vec<String>,
    /// Sent as `audience` (Auth0, Okta and others use it to pick the token's resource).
    pub audience: Option<String>,
    /// Sent as `resource` (RFC 8707, which MCP authorization requires): the upstream's
    /// canonical URL unless the config names another; none only when built in code without.
    pub resource: Option<Url>,
    /// What the URLs discovery learns may reach: this upstream's `allow_private_urls`
    /// (R-PRX-37).
    pub learned_urls: LearnedUrlPolicy,
}

/// How the client authenticates to the token endpoint (RFC 6749 section 2.3, RFC 7523).
#[derive(Clone, PartialEq)]
pub enum ClientAuth {
    /// `client_secret_basic`: HTTP Basic, id and secret form-encoded first (the default).
    SecretBasic { secret: String },
    /// `client_secret_post`: `client_id` and `client_secret` in the form body.
    SecretPost { secret: String },
    /// `private_key_jwt`: a `client_assertion` JWT (RFC 7523 section 2.2) signed with the PEM
    /// key in this file (read at each token request, so a replaced key is used from the next),
    /// `iss` and `sub` the client id, `aud` the token endpoint.
    PrivateKeyJwt {
        key_file: std::path::PathBuf,
        algorithm: jsonwebtoken::Algorithm,
        key_id: Option<String>,
    },
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SecretBasic { .. } => f.write_str("client_secret_basic(***)"),
            Self::SecretPost { .. } => f.write_str("client_secret_post(***)"),
            Self::PrivateKeyJwt {
                key_file,
                algorithm,
                key_id,
            } => f
                .debug_struct("private_key_jwt")
                .field("key_file", key_file)
                .field("algorithm", algorithm)
                .field("key_id", key_id)
                .finish(),
        }
    }
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field(
                "token_url",
                &self.token_url.as_ref().map(super::redacted_url),
            )
            .field("issuer", &self.issuer.as_ref().map(super::redacted_url))
            .field("client_id", &self.client_id)
            .field("client_auth", &self.client_auth)
            .field("scopes", &self.scopes)
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("learned_urls", &self.learned_urls)
            .finish()
    }
}

/// The canonical URL of an MCP server (RFC 8707 section 2, MCP authorization): scheme, host,
/// port and path, without user info, query or fragment (the URL's credentials and query
/// secrets never go to the token endpoint). The url crate already lowercases scheme and host.
pub fn canonical_resource(upstream: &Url) -> Url {
    let mut canonical = upstream.clone();
    let _ = canonical.set_username("");
    let _ = canonical.set_password(None);
    canonical.set_query(None);
    canonical.set_fragment(None);
    canonical
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientCredentials {
    token_url: Option<String>,
    issuer: Option<String>,
    client_id: String,
    #[serde(default)]
    auth_method: Option<String>,
    client_secret_env: Option<String>,
    private_key_file: Option<String>,
    signing_algorithm: Option<String>,
    key_id: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    audience: Option<String>,
    resource: Option<String>,
}

impl RawClientCredentials {
    /// Whether the table names its token endpoint (or has the proxy discover it).
    pub(super) fn names_token_url(&self) -> bool {
        self.token_url.is_some()
    }
}

/// Validates `[upstream.oauth]` of the upstream at `upstream`; `at` names a key
/// (`upstream[i].oauth.KEY`). `learned_urls` is the upstream's `allow_private_urls`.
pub(super) fn client_credentials(
    raw: RawClientCredentials,
    upstream: &Url,
    learned_urls: LearnedUrlPolicy,
    at: &dyn Fn(&str) -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ClientCredentials, ConfigError> {
    let token_url = raw
        .token_url
        .as_deref()
        .map(|t| credentials_url(t, "token_url", at))
        .transpose()?;
    let issuer = match (&token_url, raw.issuer.as_deref()) {
        (None, None) => return Err(invalid(at("issuer"), ISSUER_REQUIRED)),
        (Some(_), Some(_)) => {
            return Err(invalid(
                at("issuer"),
                "only without token_url (it names the server discovery must find): leave it out",
            ));
        }
        (_, given) => given
            .map(|i| credentials_url(i, "issuer", at))
            .transpose()?,
    };
    if raw.client_id.trim().is_empty() {
        return Err(invalid(at("client_id"), "must not be empty"));
    }
    let client_auth = client_auth(&raw, at, env)?;
    check_scopes(&raw.scopes, at)?;
    if raw.audience.as_ref().is_some_and(|a| a.trim().is_empty()) {
        return Err(invalid(at("audience"), "must not be empty (leave it out)"));
    }
    let resource = match &raw.resource {
        None => canonical_resource(upstream),
        Some(given) => Url::parse(given)
            .ok()
            .filter(|u| u.fragment().is_none())
            .ok_or_else(|| {
                invalid(
                    at("resource"),
                    "must be an absolute URL without a fragment (RFC 8707); leave it out to send \
                     the upstream's own URL",
                )
            })?,
    };
    Ok(ClientCredentials {
        token_url,
        issuer,
        client_id: raw.client_id,
        client_auth,
        scopes: raw.scopes,
        audience: raw.audience,
        resource: Some(resource),
        learned_urls,
    })
}

/// Why `issuer` is needed when `token_url` is left out (at start-up, and at a token request of
/// credentials built in code without either).
pub const ISSUER_REQUIRED: &str = "required without token_url: set issuer to the authorization \
     server that issued the client's credentials (the URL its metadata names as issuer), or set \
     token_url; discovery sends the client's credentials only to the server the operator named, \
     never to one the upstream names (R-PRX-15)";

/// A configured token endpoint or issuer (`key`): https, or http on loopback (the client's
/// credentials go there).
fn credentials_url(text: &str, key: &str, at: &dyn Fn(&str) -> String) -> Result<Url, ConfigError> {
    let url = Url::parse(text).map_err(|e| invalid(at(key), format!("not a valid URL: {e}")))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        _ => Err(invalid(
            at(key),
            "must be https (http only on a loopback address): the client's credentials go there",
        )),
    }
}

/// RFC 6749 section 3.3: scope tokens are printable ASCII without space, '"' or '\'.
fn check_scopes(scopes: &[String], at: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    for (n, scope) in scopes.iter().enumerate() {
        if scope.is_empty()
            || !scope
                .bytes()
                .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
        {
            return Err(invalid(
                at(&format!("scopes[{n}]")),
                "not an OAuth scope token (printable ASCII, no space, '\"' or '\\')",
            ));
        }
    }
    Ok(())
}

/// `auth_method` and the keys it needs: a secret for the two `client_secret_*` methods, a key
/// file for `private_key_jwt`; a key of another method is an error, not ignored.
fn client_auth(
    raw: &RawClientCredentials,
    at: &dyn Fn(&str) -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ClientAuth, ConfigError> {
    let method = raw.auth_method.as_deref().unwrap_or("client_secret_basic");
    let jwt = method == "private_key_jwt";
    let misplaced = [
        ("client_secret_env", raw.client_secret_env.is_some() && jwt),
        ("private_key_file", raw.private_key_file.is_some() && !jwt),
        ("signing_algorithm", raw.signing_algorithm.is_some() && !jwt),
        ("key_id", raw.key_id.is_some() && !jwt),
    ];
    if let Some((key, _)) = misplaced.iter().find(|(_, wrong)| *wrong) {
        return Err(invalid(
            at(key),
            format!("not used by auth_method = \"{method}\": leave it out"),
        ));
    }
    match method {
        "client_secret_basic" => Ok(ClientAuth::SecretBasic {
            secret: client_secret(raw, at, env)?,
        }),
        "client_secret_post" => Ok(ClientAuth::SecretPost {
            secret: client_secret(raw, at, env)?,
        }),
        "private_key_jwt" => private_key_jwt(raw, at),
        _ => Err(invalid(
            at("auth_method"),
            "must be client_secret_basic (the default), client_secret_post or private_key_jwt",
        )),
    }
}

fn client_secret(
    raw: &RawClientCredentials,
    at: &dyn Fn(&str) -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let name = raw.client_secret_env.as_deref().unwrap_or_default();
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(invalid(
            at("client_secret_env"),
            "must name the environment variable that holds the client secret",
        ));
    }
    env(name).filter(|v| !v.is_empty()).ok_or_else(|| {
        invalid(
            at("client_secret_env"),
            format!("the environment variable {name} is not set (it holds the client secret)"),
        )
    })
}

/// The key file is read at each token request (a key replaced on disk is used from the next):
/// a file that cannot be read or holds no key of the algorithm fails that request, naming the
/// file's field.
fn private_key_jwt(
    raw: &RawClientCredentials,
    at: &dyn Fn(&str) -> String,
) -> Result<ClientAuth, ConfigError> {
    use jsonwebtoken::Algorithm::*;
    let path = raw.private_key_file.as_deref().unwrap_or_default();
    if path.is_empty() {
        return Err(invalid(
            at("private_key_file"),
            "required for private_key_jwt: the path of the PEM private key that signs the \
             client assertion",
        ));
    }
    let algorithm = match raw.signing_algorithm.as_deref().unwrap_or("RS256") {
        "RS256" => RS256,
        "RS384" => RS384,
        "RS512" => RS512,
        "PS256" => PS256,
        "PS384" => PS384,
        "PS512" => PS512,
        "ES256" => ES256,
        "ES384" => ES384,
        "EdDSA" => EdDSA,
        _ => {
            return Err(invalid(
                at("signing_algorithm"),
                "must be RS256 (the default), RS384, RS512, PS256, PS384, PS512, ES256, ES384 \
                 or EdDSA",
            ));
        }
    };
    if raw.key_id.as_ref().is_some_and(|k| k.trim().is_empty()) {
        return Err(invalid(at("key_id"), "must not be empty (leave it out)"));
    }
    Ok(ClientAuth::PrivateKeyJwt {
        key_file: path.into(),
        algorithm,
        key_id: raw.key_id.clone(),
    })
}
