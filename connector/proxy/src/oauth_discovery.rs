//! The token endpoint of an upstream whose `[upstream.oauth]` names no `token_url`, found the
//! way MCP authorization has clients find it (R-PRX-15): the upstream's protected-resource
//! metadata (RFC 9728) names its authorization server, whose metadata (RFC 8414, or OpenID
//! discovery) names the token endpoint. The first document is on the upstream's own host, the
//! operator's word; the authorization server and the token endpoint are the upstream's word, so
//! they are learned URLs and reach only what R-PRX-37 allows. The authorization server must be
//! the `issuer` the operator configured: a hostile upstream that names its own server would
//! otherwise receive the client's credentials. Every step is over https, or on loopback.

use serde::Deserialize;
use url::Url;

use super::learned_url::LearnedUrlPolicy;
use durable_mcp_runtime::temporal::direct_http::is_loopback;

/// The largest metadata document read.
const MAX_METADATA: usize = 64 * 1024;

/// Where the upstream's protected-resource metadata may be (RFC 9728 section 3.1, then the
/// root, as MCP authorization has clients try): without the URL's user info or query.
pub fn resource_metadata_urls(upstream: &Url) -> Vec<Url> {
    well_known(upstream, &["oauth-protected-resource"])
}

/// Where an authorization server's metadata may be: RFC 8414 section 3.1 (the suffix before
/// the issuer's path), then OpenID Connect Discovery (both placements).
pub fn issuer_metadata_urls(issuer: &Url) -> Vec<Url> {
    let mut urls = well_known(
        issuer,
        &["oauth-authorization-server", "openid-configuration"],
    );
    let mut appended = issuer.clone();
    let path = issuer.path().trim_end_matches('/');
    appended.set_path(&format!("{path}/.well-known/openid-configuration"));
    if !urls.contains(&appended) {
        urls.push(appended);
    }
    urls
}

/// `/.well-known/<suffix><path>` for each suffix, and `/.well-known/<suffix>` when the URL
/// has a path.
fn well_known(base: &Url, suffixes: &[&str]) -> Vec<Url> {
    let path = base.path().trim_end_matches('/');
    let mut urls = Vec::new();
    for suffix in suffixes {
        for at in [
            format!("/.well-known/{suffix}{path}"),
            format!("/.well-known/{suffix}"),
        ] {
            let mut url = base.clone();
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.set_path(&at);
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
    }
    urls
}

/// The authorization server of the upstream's `named` ones that is the operator's `configured`
/// issuer (compared as URLs, so `https://a.example` is `https://a.example/`), as the upstream
/// wrote it; an upstream that names only others is refused (R-PRX-15), the error naming hosts.
pub fn configured_issuer<'a>(named: &'a [String], configured: &Url) -> Result<&'a str, String> {
    if let Some(found) = named
        .iter()
        .find(|n| Url::parse(n).is_ok_and(|u| &u == configured))
    {
        return Ok(found);
    }
    let host = |text: &str| {
        let url = Url::parse(text).ok();
        (url.as_ref().and_then(Url::host_str).unwrap_or("?")).to_owned()
    };
    let hosts: Vec<String> = named.iter().map(|n| host(n)).collect();
    Err(format!(
        "the upstream's protected-resource metadata names authorization server(s) [{}], not the \
         configured issuer {}: the client's credentials go only to the server the operator \
         named; if the upstream moved, set [upstream.oauth] issuer (or token_url) to its new \
         server",
        hosts.join(", "),
        configured.host_str().unwrap_or("?")
    ))
}

/// The clients discovery uses: `own` for the upstream's host (as configured), `learned` for
/// what it names ([`LearnedUrlPolicy::client_builder`]).
pub struct DiscoveryClients<'a> {
    pub own: &'a reqwest::Client,
    pub learned: &'a reqwest::Client,
    pub policy: &'a LearnedUrlPolicy,
}

/// The token endpoint the upstream at `upstream` names. Its errors name hosts, never a path
/// or query of the configured URL.
pub async fn token_endpoint(
    upstream: &Url,
    configured: &Url,
    clients: &DiscoveryClients<'_>,
) -> Result<Url, String> {
    #[derive(Deserialize)]
    struct Resource {
        #[serde(default)]
        authorization_servers: Vec<String>,
    }
    #[derive(Deserialize)]
    struct Server {
        issuer: Option<String>,
        token_endpoint: Option<String>,
    }
    let own = upstream.host_str().unwrap_or("the upstream");
    over_https("the upstream", upstream)?;
    let resource: Resource = first_document(clients.own, &resource_metadata_urls(upstream))
        .await
        .map_err(|e| format!("the upstream's protected-resource metadata on {own}: {e}"))?;
    let issuer_text = configured_issuer(&resource.authorization_servers, configured)?;
    let issuer = Url::parse(issuer_text).map_err(|_| {
        "the upstream's protected-resource metadata names an authorization server that is \
         not a URL"
            .to_owned()
    })?;
    let server_host = issuer.host_str().unwrap_or("?").to_owned();
    let learned = |what: &str, url: &Url| {
        clients.policy.check_url(url).map_err(|e| {
            format!(
                "{what} {} the upstream named is refused: {e}",
                url.host_str().unwrap_or("?")
            )
        })
    };
    learned("the authorization server", &issuer)?;
    over_https("the authorization server the upstream named", &issuer)?;
    let server: Server = first_document(clients.learned, &issuer_metadata_urls(&issuer))
        .await
        .map_err(|e| format!("the metadata of authorization server {server_host}: {e}"))?;
    if server.issuer.as_deref() != Some(issuer_text) {
        return Err(format!(
            "the metadata of authorization server {server_host} names another issuer \
             (RFC 8414 section 3.3)"
        ));
    }
    let token_url = (server.token_endpoint.as_deref())
        .and_then(|t| Url::parse(t).ok())
        .ok_or_else(|| format!("authorization server {server_host} names no token_endpoint"))?;
    learned("the token endpoint", &token_url)?;
    over_https(
        &format!("the token endpoint authorization server {server_host} named"),
        &token_url,
    )?;
    Ok(token_url)
}

/// Discovery reads metadata and sends the client's credentials only over https, or on loopback
/// (R-PRX-15): over plain http an on-path attacker could rewrite a document to name its own
/// https token endpoint and receive them. The refusal says to configure `token_url`.
fn over_https(what: &str, url: &Url) -> Result<(), String> {
    if url.scheme() == "https" || is_loopback(url) {
        return Ok(());
    }
    Err(format!(
        "{what}, {}, is not https: discovery over plain http could be rewritten on the way \
         to send the client's credentials elsewhere; use https, or set this upstream's \
         [upstream.oauth] token_url",
        url.host_str().unwrap_or("?")
    ))
}

/// The first of `urls` that answers 200 with a JSON document of type `T`; a 404 tries the
/// next, anything else stops.
async fn first_document<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    urls: &[Url],
) -> Result<T, String> {
    for url in urls {
        let mut response = http
            .get(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("the request failed: {}", describe(&e)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            continue;
        }
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("the answer broke off: {}", describe(&e)))?
        {
            if body.len() + chunk.len() > MAX_METADATA {
                return Err(format!("the document is over {MAX_METADATA} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        return serde_json::from_slice(&body).map_err(|_| "not a JSON metadata document".into());
    }
    Err("not found at any well-known place".into())
}

/// A request error with its causes (a refusal by the guarded resolver is one) and without
/// its URL.
fn describe(error: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut cause: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        cause = e.source();
    }
    match error.url() {
        Some(url) => text
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "the URL"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: Vec<Url>) -> Vec<String> {
        list.into_iter().map(String::from).collect()
    }

    #[test]
    fn discovery_goes_over_https_or_stays_on_loopback() {
        let check = |u: &str| over_https("the upstream", &Url::parse(u).unwrap());
        for fine in [
            "https://mcp.example/mcp",
            "http://127.0.0.1:8080/mcp",
            "http://[::1]/mcp",
            "http://localhost/mcp",
        ] {
            assert_eq!(check(fine), Ok(()), "{fine}");
        }
        let error = check("http://mcp.example/mcp?key=secret").unwrap_err();
        assert!(
            error.contains("mcp.example")
                && error.contains("not https")
                && error.contains("token_url")
                && !error.contains("secret"),
            "{error}"
        );
    }

    /// R-PRX-15: discovery goes only to the issuer the operator configured, however the
    /// upstream spells it and wherever it lists it; an upstream naming only other servers
    /// is refused, the error naming hosts and the key to set.
    #[test]
    fn discovery_accepts_only_the_configured_issuer() {
        let configured = Url::parse("https://auth.example").unwrap();
        let named = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let list = named(&["https://evil.example", "https://auth.example/"]);
        assert_eq!(
            configured_issuer(&list, &configured),
            Ok("https://auth.example/")
        );
        let list = named(&["https://auth.example"]);
        assert_eq!(
            configured_issuer(&list, &configured),
            Ok("https://auth.example")
        );
        for others in [
            named(&["https://evil.example/path?x=secret"]),
            named(&["https://auth.example/tenant", "not a url"]),
            named(&["https://auth.example:8443"]),
            named(&["http://auth.example"]),
            named(&[]),
        ] {
            let error = configured_issuer(&others, &configured).unwrap_err();
            assert!(
                error.contains("not the configured issuer auth.example")
                    && error.contains("[upstream.oauth] issuer")
                    && !error.contains("secret"),
                "{others:?}: {error}"
            );
        }
    }

    #[test]
    fn metadata_is_looked_for_where_rfc_9728_rfc_8414_and_openid_put_it() {
        let upstream = Url::parse("https://user:pw@mcp.example/v1/mcp?key=secret").unwrap();
        assert_eq!(
            urls(resource_metadata_urls(&upstream)),
            [
                "https://mcp.example/.well-known/oauth-protected-resource/v1/mcp",
                "https://mcp.example/.well-known/oauth-protected-resource",
            ]
        );
        let issuer = Url::parse("https://auth.example/tenant").unwrap();
        assert_eq!(
            urls(issuer_metadata_urls(&issuer)),
            [
                "https://auth.example/.well-known/oauth-authorization-server/tenant",
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration/tenant",
                "https://auth.example/.well-known/openid-configuration",
                "https://auth.example/tenant/.well-known/openid-configuration",
            ]
        );
        let root = Url::parse("https://auth.example").unwrap();
        assert_eq!(
            urls(issuer_metadata_urls(&root)),
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration",
            ]
        );
    }
}
