//! The connector over Streamable HTTP, mounted in axum.
//!
//! One rmcp [`StreamableHttpService`] with rmcp's `LocalSessionManager` (counted per caller
//! or address as it makes sessions, [`crate::counted_sessions`]) and legacy session mode on
//! serves both kinds of MCP clients at one path:
//!
//! - older clients (protocol up to 2025-11-25) do the `initialize` handshake and get an
//!   `Mcp-Session-Id`; `notifications/cancelled` on the session cancels the call;
//! - current clients (2026-07-28, `server/discover` and per-request `_meta`) are routed by rmcp
//!   to its stateless path whatever the session manager is; closing the response stream cancels
//!   the call.
//!
//! `NeverSessionManager` with `with_legacy_session_mode(false)` would serve only the second kind,
//! so it is not used.
//!
//! DNS-rebinding protection stays on: rmcp checks the `Host` header against an allow-list that
//! defaults to loopback (`localhost`, `127.0.0.1`, `::1`); [`HttpOptions::allowed_hosts`] adds to
//! it, never replaces it (an empty list would make rmcp accept every host). A browser `Origin`
//! header, when present, must name one of the same hosts (any port); requests without `Origin`
//! (non-browser clients) pass.
//!
//! `GET /healthz` answers `200 ok` without any Host check, for load balancers and probes;
//! `GET /readyz` answers 200 or 503 with what failed (R-RUN-4, [`super::health`]). Neither
//! needs a token nor counts against a caller's caps; both are under the connection caps.
//!
//! With [`HttpOptions::auth`], every request to the MCP path needs a bearer token (checked
//! before rmcp sees the request), and the RFC 9728 metadata is served, publicly, at
//! `/.well-known/oauth-protected-resource<path>` and `/.well-known/oauth-protected-resource`.
//!
//! Shutdown: cancelling the `shutdown` token stops accepting connections, then waits up to
//! [`HttpOptions::shutdown_grace`] for in-flight MCP requests (POSTs whose response has not
//! ended) to finish. When none are left, rmcp's own token closes the sessions and their idle
//! event streams. When some are still running after the grace period, nothing is cancelled: the
//! server stops waiting and the process is expected to exit, so their Nexus operations keep
//! running in Temporal (cancelling rmcp's token or dropping stateless response streams would
//! cancel the handlers, and the connector turns a cancelled request into a cancelled operation).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::response::IntoResponse as _;
use futures::StreamExt as _;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    as_written_http::{ReplayLimits, Replays as ReplayStore, write_answers_as_written_within},
    auth::{Authenticator, InUse, SESSION_HEADER, SESSION_IDLE, SessionOwners},
    counted_sessions::{CountedSessions, SessionTable, open_sessions_as},
    fair::Share,
    listener::{self, ConnectionLimits, hold_until_body_ends},
    server::{CatchPanics, Connector, Typed},
    session_requests::{
        DEFAULT_REQUESTS_PER_SESSION_MINUTE, RequestsPerSession, limit_session_requests,
    },
};
use axum::http::StatusCode;

/// Whether serving at `addr` is allowed (R-CON-14): without authentication, only on a loopback
/// address, unless the operator said `--allow-unauthenticated` (for a deployment that
/// authenticates in front of the connector). The Host check cannot stand in for
/// authentication: a client that is not a browser sends whatever `Host` it likes.
pub fn check_exposure(
    addr: &SocketAddr,
    authenticated: bool,
    allow_unauthenticated: bool,
) -> Result<(), String> {
    if authenticated || allow_unauthenticated || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to serve MCP without authentication on {addr}, which is not a loopback \
         address: anyone who can reach it could call every tool and read or cancel every \
         caller's tasks. Add --auth-config FILE, listen on 127.0.0.1, or, if something in front \
         of the connector authenticates callers, pass --allow-unauthenticated"
    ))
}

/// Where the health check is served.
pub const HEALTH_PATH: &str = "/healthz";

/// Whether `path` can be the MCP endpoint's path (R-CON-19): it starts with `/`, is not `/`,
/// holds only URL path characters (no `{`, `}` or `*`, which the router would read as
/// patterns, no query, fragment, spaces or control characters), and does not collide with the
/// health check or the OAuth metadata paths (`/.well-known/...`). The error names the path and
/// what to do; the binary names its flag.
pub fn check_mcp_path(path: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("MCP path {path:?} {why}"));
    if !path.starts_with('/') || path == "/" {
        return bad("must start with '/' and not be '/', for example /mcp");
    }
    if path.ends_with('/') || path.contains("//") {
        return bad("must not end with '/' or contain '//'");
    }
    if let Some(c) = path.chars().find(|c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~' | '%' | '@' | ':'))
    }) {
        return bad(&format!(
            "contains {c:?}; use letters, digits and - _ . ~ only"
        ));
    }
    let collides = |reserved: &str| {
        path == reserved
            || path.starts_with(&format!("{reserved}/"))
            || reserved.starts_with(&format!("{path}/"))
    };
    if collides(HEALTH_PATH) || collides(super::health::READY_PATH) || collides("/.well-known") {
        return bad(&format!(
            "collides with the connector's own {HEALTH_PATH}, {} or /.well-known/ paths; choose another, for example /mcp",
            super::health::READY_PATH
        ));
    }
    Ok(())
}

/// Where and how the connector listens for MCP over HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address to bind; port 0 picks a free port.
    pub addr: SocketAddr,
    /// `Host` values accepted beyond loopback (`name` for any port, `name:port` for one port).
    pub allowed_hosts: Vec<String>,
    /// The MCP endpoint's path, `/mcp` by default.
    pub path: String,
    /// How long a shutdown waits for in-flight MCP requests.
    pub shutdown_grace: Duration,
    /// Inbound OAuth: when set, every MCP request needs a valid bearer token, and its caller
    /// scope comes from the token (see [`super::auth`]); the RFC 9728 metadata is served.
    pub auth: Option<Arc<Authenticator>>,
    /// Header-read (and keep-alive idle) timeout and connection cap (R-CON-19).
    pub limits: ConnectionLimits,
    /// Without [`Self::auth`]: the most MCP sessions one address holds at once; opening one
    /// more closes its longest idle, or is refused when none is idle (R-CON-38). With auth, the authenticator's per-caller
    /// share applies instead (R-CON-28).
    pub sessions_per_address: usize,
    /// Bounds on the answers kept for replays of a session's streams (R-CON-38).
    pub replays: ReplayLimits,
    /// The most requests one MCP session starts per minute; 0 for no such cap (R-CON-38).
    pub requests_per_session_minute: usize,
    /// Without [`Self::auth`]: the most MCP sessions in all, whatever their address (also
    /// when a host inserts no peer address); 10,000 by default (R-CON-38).
    pub max_sessions: usize,
    /// The reverse proxies whose header names the client a request is from, which every
    /// per-address share then counts it under (R-CON-50); none by default.
    pub trusted_proxies: super::forwarded::TrustedProxies,
}

impl HttpOptions {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            allowed_hosts: Vec::new(),
            path: "/mcp".into(),
            shutdown_grace: Duration::from_secs(5),
            auth: None,
            limits: ConnectionLimits::default(),
            sessions_per_address: super::auth::MAX_SESSIONS_PER_CALLER,
            replays: ReplayLimits::default(),
            requests_per_session_minute: DEFAULT_REQUESTS_PER_SESSION_MINUTE,
            max_sessions: super::auth::MAX_SESSIONS,
            trusted_proxies: Default::default(),
        }
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)))
    }
}

/// Counts MCP requests whose response has not ended yet.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

struct InFlightGuard(Arc<InFlight>);

impl InFlightGuard {
    fn new(in_flight: Arc<InFlight>) -> Self {
        in_flight.count.fetch_add(1, Ordering::SeqCst);
        Self(in_flight)
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl InFlight {
    fn current(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.current() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// The rmcp configuration: loopback plus the named hosts, Origin checked against the same hosts.
fn mcp_config(
    options: &HttpOptions,
    bound: SocketAddr,
    ct: CancellationToken,
) -> StreamableHttpServerConfig {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(ct)
        .with_max_request_body_bytes(super::unreadable_body::MAX_REQUEST_BODY_BYTES);
    // Defaults are loopback only; add, never replace (an empty list disables the check).
    let mut hosts = config.allowed_hosts.clone();
    let ip = bound.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        // A literal IP cannot be rebound by DNS.
        hosts.push(ip.to_string());
    }
    hosts.extend(
        options
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty()),
    );
    let mut origins = Vec::new();
    for host in &hosts {
        let authority = match host.parse::<Ipv6Addr>() {
            Ok(v6) => format!("[{v6}]"),
            Err(_) => host.clone(),
        };
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']');
        for scheme in ["http", "https"] {
            origins.push(if has_port {
                format!("{scheme}://{authority}")
            } else {
                format!("{scheme}://{authority}:*")
            });
        }
    }
    config.allowed_hosts = hosts;
    config.with_allowed_origins(origins)
}

/// The axum router: the MCP endpoint at `options.path`, `GET /healthz` and `GET /readyz`.
pub fn router(
    connector: Connector,
    options: &HttpOptions,
    bound: SocketAddr,
    mcp_ct: CancellationToken,
) -> axum::Router {
    router_counting(connector, options, bound, mcp_ct, Arc::default())
}

fn router_counting(
    connector: Connector,
    options: &HttpOptions,
    bound: SocketAddr,
    mcp_ct: CancellationToken,
    in_flight: Arc<InFlight>,
) -> axum::Router {
    let readiness = connector.readiness();
    let (table, by_address) = session_owners(options);
    let sessions = Arc::new(CountedSessions::new(table).with_metrics(connector.metrics()));
    let config = mcp_config(options, bound, mcp_ct);
    let config_hosts: Arc<[String]> = config.allowed_hosts.clone().into();
    let body_limits = (options.limits.header_read, config.max_request_body_bytes);
    let connector_for_listen = connector.clone();
    let service: StreamableHttpService<CatchPanics<Typed>, CountedSessions> =
        StreamableHttpService::new(move || Ok(CatchPanics(connector.typed())), sessions, config);
    let listen = (connector_for_listen, config_hosts);
    let mut mcp = within_bounds(service, listen, options, body_limits);
    if let Some(by_address) = by_address {
        mcp = mcp.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let by_address = by_address.clone();
                async move { by_address.track(request, next).await }
            },
        ));
    }
    if let Some(auth) = &options.auth {
        let auth = auth.clone();
        mcp = mcp.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let auth = auth.clone();
                async move { super::auth::require_bearer(auth, request, next).await }
            },
        ));
    }
    let mcp = mcp
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let in_flight = in_flight.clone();
                async move { count_in_flight(in_flight, request, next).await }
            },
        ))
        .layer(axum::middleware::from_fn(answer_panics));
    let mut router = axum::Router::new()
        .route(HEALTH_PATH, axum::routing::get(|| async { "ok" }))
        .route(
            super::health::READY_PATH,
            axum::routing::get(move || super::health::readyz(readiness.clone())),
        );
    if let Some(auth) = &options.auth {
        // Public: clients read it to find the authorization server. RFC 9728 puts it under the
        // resource's path; many clients also try the bare well-known path.
        let paths: std::collections::BTreeSet<String> = [
            auth.config().metadata_path(),
            super::auth::WELL_KNOWN_RESOURCE.to_owned(),
        ]
        .into();
        for route in &paths {
            let auth = auth.clone();
            router = router.route(
                route,
                axum::routing::get(move || super::auth::metadata(auth.clone())),
            );
        }
    }
    router.nest_service(&options.path, mcp)
}

/// rmcp's service with what runs between it and the bearer check: answers written as the tool
/// service gave them, not as rmcp's typed view (R-CON-12); unreadable bodies answered with
/// JSON-RPC errors, not rmcp's 415 (R-CON-30); a session's requests per minute capped before
/// rmcp keeps their events (R-CON-38); the body read in time (R-CON-19); innermost, the
/// request's share for the session it may open (R-CON-28).
fn within_bounds(
    service: StreamableHttpService<CatchPanics<Typed>, CountedSessions>,
    listen: (Connector, Arc<[String]>),
    options: &HttpOptions,
    (body_time, body_bytes): (Duration, usize),
) -> axum::Router {
    let replays = Arc::new(ReplayStore::new(options.replays));
    let per_session = Arc::new(RequestsPerSession::new(options.requests_per_session_minute));
    axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let listen = listen.clone();
                async move { before_listen(listen, request, next).await }
            },
        ))
        .layer(axum::middleware::from_fn(open_sessions_as))
        .layer(axum::middleware::from_fn(
            super::unreadable_body::answer_unreadable_bodies,
        ))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let replays = replays.clone();
                async move { write_answers_as_written_within(replays, request, next).await }
            },
        ))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let per_session = per_session.clone();
                async move { limit_session_requests(per_session, request, next).await }
            },
        ))
        // Inside the bearer check: only an authenticated request's body is read (R-CON-19).
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| async move {
                read_body_in_time(body_time, body_bytes, request, next).await
            },
        ))
}

/// Without inbound auth, who opened which MCP session, by address (R-CON-38): rmcp's session
/// manager holds any number of sessions, so one address opening sessions in a loop filled its
/// memory. The session manager enters each session it makes under its request's address
/// ([`CountedSessions`]); an address holds at most its share (opening one more closes its
/// longest idle, or is refused), and the table at most [`HttpOptions::max_sessions`]
/// (R-CON-28), also sessions of requests without an address. Nobody owns a session without
/// auth (every caller shares one scope), so a session is usable from any address, as before.
/// This layer marks a session busy while a request or stream of it is open.
struct AddressSessions {
    owners: Arc<std::sync::Mutex<SessionOwners<Option<Share>>>>,
}

/// The IPv6 /48 an address share belongs to (R-CON-38); none for others.
fn network_of(share: &Option<Share>) -> Option<std::net::IpAddr> {
    match share {
        Some(Share::Address(ip)) => crate::fair::network_key(*ip),
        _ => None,
    }
}

impl AddressSessions {
    fn new(per_address: usize, max: usize) -> Self {
        let owners = SessionOwners::new(SESSION_IDLE, max)
            .with_per_caller(per_address)
            .with_network_cap(network_of, crate::listener::network_cap(per_address));
        Self {
            owners: Arc::new(std::sync::Mutex::new(owners)),
        }
    }

    /// Keeps a session busy while a request or stream of it is open. A session leaves the
    /// table only when rmcp closes it ([`CountedSessions`]), never on a request's answer: a
    /// `DELETE` rmcp refused, or a 404 for an unknown method, leaves the session open in rmcp.
    async fn track(
        &self,
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let session = session_header(request.headers());
        // Busy (never evicted) until the response, a stream too, ends (R-CON-28).
        let in_use = session
            .as_ref()
            .and_then(|id| InUse::begin(&self.owners, id, None));
        let response = next.run(request).await;
        hold_until_body_ends(response, in_use)
    }
}

/// The MCP session header's value, when it is text.
fn session_header(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Where the MCP server's sessions are counted: the authenticator's table by caller
/// (R-CON-28), else a table by address (R-CON-38), whose layer is returned too.
fn session_owners(options: &HttpOptions) -> (Arc<dyn SessionTable>, Option<Arc<AddressSessions>>) {
    match &options.auth {
        Some(auth) => (auth.session_table(), None),
        None => {
            let by_address =
                AddressSessions::new(options.sessions_per_address, options.max_sessions);
            (by_address.owners.clone(), Some(Arc::new(by_address)))
        }
    }
}

/// Runs [`Typed::before_listen`] for a `subscriptions/listen` POST before rmcp, which
/// acknowledges the stream before the handler's `listen` runs (R-CON-42, R-CON-49). A
/// 2026-07-28 request names its method in `Mcp-Method` (SEP-2243, which rmcp checks against the
/// body); the body, already read in full ([`read_body_in_time`]), is read again only then.
/// A request whose `Host` or `Origin` names no allowed host ([`host_may_pass`]) does none of
/// that work: rmcp refuses it (403) after this layer, so a rebinding page cannot make the
/// connector list its routes.
async fn before_listen(
    (connector, allowed): (Connector, Arc<[String]>),
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let listen = request
        .headers()
        .get("mcp-method")
        .is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
    if !listen
        || request.method() != axum::http::Method::POST
        || !host_may_pass(request.headers(), &allowed)
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    connector
        .typed()
        .before_listen(&listen_filter(&bytes))
        .await;
    let body = axum::body::Body::from(bytes);
    next.run(axum::extract::Request::from_parts(parts, body))
        .await
}

/// The notifications a `subscriptions/listen` body asks for (`params.notifications`); none
/// when the body is not such a request. The body is the caller's: it is read without indexing
/// (a `params` that is no object panicked here) and rmcp refuses what does not fit afterwards
/// (R-CON-30, R-CON-51).
fn listen_filter(body: &[u8]) -> rmcp::model::SubscriptionFilter {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|m| {
            let notifications = m.get("params")?.get("notifications")?;
            serde_json::from_value(notifications.clone()).ok()
        })
        .unwrap_or_default()
}

/// Whether rmcp's Host and Origin checks (R-CON-14's allowed hosts) may let `headers` pass:
/// the `Host` names an allowed host, and an `Origin`, when present, too. Ports are not
/// compared, so this passes all rmcp passes (and a little more, which rmcp then refuses).
fn host_may_pass(headers: &axum::http::HeaderMap, allowed: &[String]) -> bool {
    let host_of = |authority: &str| {
        let authority = authority.parse::<axum::http::uri::Authority>().ok()?;
        Some(
            authority
                .host()
                .trim_matches(['[', ']'])
                .to_ascii_lowercase(),
        )
    };
    // An allowed entry is a host (`::1` unbracketed) or a host and port.
    let allowed_host = |a: &String| match host_of(a) {
        Some(host) if a.starts_with('[') || !a.contains("::") => host,
        _ => a.to_ascii_lowercase(),
    };
    let listed =
        |host: Option<String>| host.is_some_and(|h| allowed.iter().any(|a| allowed_host(a) == h));
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let origin_passes = match header("origin") {
        None => true,
        Some(origin) => {
            let uri = origin.parse::<axum::http::Uri>().ok();
            listed(uri.and_then(|u| u.authority().and_then(|a| host_of(a.as_str()))))
        }
    };
    origin_passes && listed(header("host").and_then(host_of))
}

/// How much of a body over the limit is read and dropped before the 413 (R-CON-19).
const DRAIN_BYTES: usize = 16 << 20;

/// Reads a POST's whole body within `time`, at most `max_bytes` of it, before rmcp sees the
/// request (R-CON-19). hyper's timer covers a request's headers only, so a client that sent
/// its body a byte at a time held its connection, and a place under `--http-max-connections`,
/// for as long as it liked. An MCP request is one JSON message that rmcp reads whole anyway.
/// A body too slow or too large is answered (408, 413) and the connection closed; a body too
/// large is read to its end first (at most [`DRAIN_BYTES`], within `time`), so that a client
/// still writing it reads the 413 instead of a broken pipe.
async fn read_body_in_time(
    time: Duration,
    max_bytes: usize,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let read = async {
        let mut chunks = body.into_data_stream();
        let (mut bytes, mut over) = (Vec::new(), 0usize);
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|_| StatusCode::BAD_REQUEST)?;
            if over > 0 || bytes.len() + chunk.len() > max_bytes {
                // Read on (discarding) so that a client still writing reads the 413 instead
                // of a broken pipe; past the drain bound, answer at once.
                over += chunk.len();
                bytes = Vec::new();
                if over > DRAIN_BYTES {
                    break;
                }
                continue;
            }
            bytes.extend_from_slice(&chunk);
        }
        if over > 0 {
            return Err(StatusCode::PAYLOAD_TOO_LARGE);
        }
        Ok(bytes)
    };
    let refused = |status: StatusCode, why: String| {
        tracing::debug!(%status, "request body refused: {why}");
        (status, [(axum::http::header::CONNECTION, "close")], why).into_response()
    };
    match tokio::time::timeout(time, read).await {
        Ok(Ok(bytes)) => {
            let body = axum::body::Body::from(bytes);
            next.run(axum::extract::Request::from_parts(parts, body))
                .await
        }
        Ok(Err(status)) if status == StatusCode::PAYLOAD_TOO_LARGE => refused(
            status,
            format!("the request body is over {max_bytes} bytes; an MCP request must be smaller"),
        ),
        Ok(Err(status)) => refused(status, "the request body broke off".into()),
        Err(_) => refused(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} (--http-header-timeout); send the whole request at once",
                humantime::format_duration(time)
            ),
        ),
    }
}

/// Outermost: a panic in a layer between the connection and rmcp (rmcp's handlers catch their
/// own, [`CatchPanics`]) is answered 500 with a JSON-RPC -32603 error under no id, and the
/// connection carries on (R-CON-51). The method label is the `Mcp-Method` header's, when it
/// names an MCP method.
async fn answer_panics(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = request
        .headers()
        .get("mcp-method")
        .and_then(|m| m.to_str().ok())
        .map_or(durable_mcp_runtime::panics::OTHER_METHOD, |m| {
            durable_mcp_runtime::panics::mcp_method(m)
        });
    match durable_mcp_runtime::panics::catching(method, next.run(request)).await {
        Ok(response) => response,
        Err(panicked) => {
            let error = rmcp::ErrorData::internal_error(panicked.caller_message(), None);
            let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": error});
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
        }
    }
}

/// Counts POSTs (MCP requests) until their response body ends or is dropped. GETs are the
/// long-lived session event streams and do not hold a shutdown back.
async fn count_in_flight(
    in_flight: Arc<InFlight>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let guard = InFlightGuard::new(in_flight);
    let response = next.run(request).await;
    hold_until_body_ends(response, guard)
}

/// A running HTTP connector.
#[derive(Debug)]
pub struct HttpServerHandle {
    /// The bound address (the real port when port 0 was asked for).
    pub local_addr: SocketAddr,
    /// `http://<loopback or bound ip>:<port><path>`.
    pub url: String,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl HttpServerHandle {
    /// Waits until the server has shut down (after the `shutdown` token was cancelled).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the HTTP server task failed")?
    }
}

/// Binds `options.addr` and serves `connector` until `shutdown` is cancelled (see the module
/// documentation for what a shutdown does).
pub async fn serve_connector_http(
    connector: Connector,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<HttpServerHandle> {
    check_mcp_path(&options.path).map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("binding {}", options.addr))?;
    let local_addr = listener.local_addr()?;
    let mcp_ct = CancellationToken::new();
    let in_flight = Arc::new(InFlight::default());
    let metrics = Some(connector.metrics());
    let app = router_counting(
        connector,
        &options,
        local_addr,
        mcp_ct.clone(),
        in_flight.clone(),
    );
    let url_ip = match local_addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let url = format!(
        "http://{}{}",
        SocketAddr::new(url_ip, local_addr.port()),
        options.path
    );
    let grace = options.shutdown_grace;
    let (limits, trusted) = (options.limits, options.trusted_proxies.clone());
    let task = tokio::spawn(async move {
        let stop = shutdown.clone();
        let server = listener::serve_counting(listener, app, limits, stop, metrics, trusted);
        let server = async move {
            server.await;
            anyhow::Ok(())
        };
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return result.context("the HTTP server failed"),
            _ = shutdown.cancelled() => {}
        }
        tracing::info!(
            in_flight = in_flight.current(),
            "HTTP connector shutting down: no new connections"
        );
        let drained = tokio::select! {
            _ = in_flight.wait_idle() => true,
            _ = tokio::time::sleep(grace) => false,
            result = &mut server => return result.context("the HTTP server failed"),
        };
        if !drained {
            tracing::warn!(
                in_flight = in_flight.current(),
                "shutdown grace period over with MCP requests in flight; their Nexus operations keep running in Temporal"
            );
            return Ok(());
        }
        // Nothing in flight: close the sessions (and their idle event streams).
        mcp_ct.cancel();
        match tokio::time::timeout(Duration::from_secs(2), &mut server).await {
            Ok(result) => result.context("the HTTP server failed"),
            Err(_) => {
                tracing::warn!("HTTP connections still open after shutdown; leaving them");
                Ok(())
            }
        }
    });
    tracing::info!(%url, "HTTP connector listening");
    Ok(HttpServerHandle {
        local_addr,
        url,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_named_for_another_host_or_origin_does_no_work_before_rmcp_refuses_it() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1", "::1", "mcp.example.com:8443"]
            .map(String::from)
            .into();
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = axum::http::HeaderMap::new();
            for (name, value) in pairs {
                h.insert(*name, value.parse().unwrap());
            }
            h
        };
        for passes in [
            headers(&[("host", "localhost:8080")]),
            headers(&[("host", "[::1]:8080")]),
            headers(&[("host", "MCP.example.com:8443")]),
            headers(&[("host", "127.0.0.1"), ("origin", "http://localhost:3000")]),
        ] {
            assert!(host_may_pass(&passes, &allowed), "{passes:?}");
        }
        for refused in [
            headers(&[]),
            headers(&[("host", "evil.example")]),
            headers(&[("host", "localhost.evil.example")]),
            headers(&[("host", "localhost"), ("origin", "http://evil.example")]),
            headers(&[("host", "localhost"), ("origin", "null")]),
        ] {
            assert!(!host_may_pass(&refused, &allowed), "{refused:?}");
        }
    }

    #[test]
    fn mcp_paths_that_collide_or_are_patterns_are_refused() {
        for good in [
            "/mcp",
            "/api/v1/mcp",
            "/a.b-c_d~e",
            "/healthzz",
            "/.well-knownx",
        ] {
            assert_eq!(check_mcp_path(good), Ok(()), "{good}");
        }
        for (bad, says) in [
            ("mcp", "must start with '/'"),
            ("/", "must start with '/'"),
            ("/mcp/", "must not end"),
            ("/a//b", "must not end"),
            ("/healthz", "collides"),
            ("/healthz/x", "collides"),
            ("/readyz", "collides"),
            ("/.well-known", "collides"),
            ("/.well-known/oauth-protected-resource", "collides"),
            ("/{id}", "contains '{'"),
            ("/mcp/*rest", "contains '*'"),
            ("/mcp?x=1", "contains '?'"),
            ("/m cp", "contains ' '"),
            ("/m\ncp", "contains '\\n'"),
        ] {
            let err = check_mcp_path(bad).unwrap_err();
            assert!(
                err.contains(says) && err.contains("MCP path"),
                "{bad}: {err}"
            );
        }
    }

    /// A panic in a layer before rmcp is a 500 with a JSON-RPC -32603, and the router (the
    /// connection's service) answers the next request.
    #[tokio::test]
    async fn a_panic_in_a_layer_is_a_json_rpc_internal_error() {
        use tower::ServiceExt as _;
        let router = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::post(|body: String| async move {
                    let mut params: serde_json::Value =
                        serde_json::from_str(&body).unwrap_or_default();
                    params["notifications"].take();
                    "served"
                }),
            )
            .layer(axum::middleware::from_fn(answer_panics));
        let post = |body: &str| {
            axum::http::Request::post("/mcp")
                .header("mcp-method", "subscriptions/listen")
                .body(axum::body::Body::from(body.to_owned()))
                .unwrap()
        };
        let before = durable_mcp_runtime::panics::counted("subscriptions/listen");
        let answer = router.clone().oneshot(post("\"abc\"")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            error.pointer("/error/code"),
            Some(&(-32603).into()),
            "{error}"
        );
        assert_eq!(error.get("id"), Some(&serde_json::Value::Null), "{error}");
        assert!(!error.to_string().contains("abc"), "{error}");
        let counted = durable_mcp_runtime::panics::counted("subscriptions/listen");
        assert_eq!(counted, before + 1);
        let answer = router.oneshot(post("{}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
    }

    #[test]
    fn unauthenticated_http_only_on_loopback_unless_allowed() {
        let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let refused = check_exposure(&public, false, false).unwrap_err();
        assert!(
            refused.contains("0.0.0.0:8080")
                && refused.contains("--auth-config")
                && refused.contains("--allow-unauthenticated"),
            "{refused}"
        );
        assert!(check_exposure(&"[::]:80".parse().unwrap(), false, false).is_err());
        assert!(check_exposure(&"10.1.2.3:80".parse().unwrap(), false, false).is_err());
        for (addr, auth, allow) in [
            ("0.0.0.0:8080", true, false),
            ("0.0.0.0:8080", false, true),
            ("127.0.0.1:8080", false, false),
            ("[::1]:8080", false, false),
        ] {
            assert_eq!(
                check_exposure(&addr.parse().unwrap(), auth, allow),
                Ok(()),
                "{addr}"
            );
        }
    }
}

/// Property tests of what the HTTP layers before rmcp read off the wire (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{body, envelope, header_value, json};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// A `notifications` object as a caller may write it, with the filter it means.
    fn filter() -> impl Strategy<Value = (Value, rmcp::model::SubscriptionFilter)> {
        let flag = || prop::option::of(any::<bool>());
        (
            flag(),
            flag(),
            flag(),
            prop::option::of(prop::collection::vec("\\PC{0,12}", 0..4)),
        )
            .prop_map(|(tools, prompts, resources, uris)| {
                let mut m = serde_json::Map::new();
                for (k, v) in [
                    ("toolsListChanged", tools.map(Value::from)),
                    ("promptsListChanged", prompts.map(Value::from)),
                    ("resourcesListChanged", resources.map(Value::from)),
                    ("resourceSubscriptions", uris.map(Value::from)),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), v);
                    }
                }
                let filter = serde_json::from_value(Value::Object(m.clone())).unwrap();
                (Value::Object(m), filter)
            })
    }

    fn headers(pairs: Vec<(&'static str, http::HeaderValue)>) -> axum::http::HeaderMap {
        let mut map = axum::http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, value);
        }
        map
    }

    proptest! {
        /// Any body, of any shape, gives a filter (the default when it is no listen request).
        #[test]
        fn a_listen_body_of_any_shape_reads_as_a_filter_and_panics_nothing(b in body()) {
            let filter = listen_filter(&b);
            let asked = serde_json::from_slice::<Value>(&b)
                .ok()
                .and_then(|m| m.get("params")?.get("notifications").cloned());
            if asked.is_none() {
                prop_assert_eq!(filter, rmcp::model::SubscriptionFilter::default());
            }
        }

        /// The filter a listen request writes is the filter read, whatever the envelope holds.
        #[test]
        fn a_listen_requests_filter_reads_back_as_written(
            (notifications, expected) in filter(),
            mut message in envelope(),
            meta in json(),
        ) {
            let params = json!({"notifications": notifications, "_meta": meta});
            if let Some(m) = message.as_object_mut() {
                m.insert("params".into(), params);
            }
            let read = listen_filter(message.to_string().as_bytes());
            if message.is_object() {
                prop_assert_eq!(read, expected);
            }
        }

        /// `Host`, `Origin` and `Mcp-Session-Id` of any bytes: an answer, never a panic, and no
        /// `Origin` that names no allowed host passes.
        #[test]
        fn host_origin_and_session_headers_of_any_bytes_are_read_without_panic(
            host in header_value(),
            origin in prop::option::of(header_value()),
            session in header_value(),
            allowed in prop::collection::vec(prop::sample::select(&["localhost", "127.0.0.1", "::1", "[::1]:8080", "example.com:443", ""][..]), 0..3),
        ) {
            let allowed: Vec<String> = allowed.into_iter().map(str::to_owned).collect();
            let mut pairs = vec![("host", host), (SESSION_HEADER, session.clone())];
            if let Some(origin) = origin.clone() {
                pairs.push(("origin", origin));
            }
            let map = headers(pairs);
            let passes = host_may_pass(&map, &allowed);
            if allowed.is_empty() {
                prop_assert!(!passes);
            }
            prop_assert_eq!(session_header(&map), session.to_str().ok().map(str::to_owned));
        }
    }
}
