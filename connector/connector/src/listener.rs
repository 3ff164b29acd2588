//! The HTTP connector's accept loop (R-CON-19), in place of `axum::serve`, which sets no
//! header-read timeout and caps no connections: a client that sends its request headers a
//! byte at a time (slowloris) or opens connections and never speaks used to be held forever.
//!
//! - Each connection must send a request's headers within [`ConnectionLimits::header_read`];
//!   hyper's timer runs whenever the connection waits for a request head, so a keep-alive
//!   connection idle between requests is closed after the same time. Response streams (a
//!   session's event stream, a long call's answer) are not reads and are never cut.
//! - At most [`ConnectionLimits::max_connections`] connections are served at once; further
//!   ones wait in the kernel's accept queue until one closes.
//! - At most [`ConnectionLimits::max_per_address`] of them come from one IP address (an IPv6
//!   peer counted by its /64, [`address_key`]), so one client (authenticated or not) cannot
//!   hold every slot; a connection over that gets a 503
//!   naming the flag and is closed, without taking a slot. An IPv6 /48 (one site, which
//!   holds 65,536 /64s) holds at most four addresses' worth ([`network_cap`]), refused alike.
//! - A connection must send its first request within [`ConnectionLimits::first_request`] (5 s
//!   by default, shorter than the header timeout, which then bounds keep-alive idling), and
//!   connections that have not yet carried a request (under inbound auth: a verified caller's)
//!   hold at most half the places ([`unproven_share`]): when that share is full, the oldest of
//!   them is closed for a new one ([`Unproven`]). So silent or unauthenticated connections
//!   never hold every place, and a client that sends its request at once is served.
//! - Behind a reverse proxy named by `--trusted-proxy` (R-CON-50), a connection from it is
//!   not counted under the proxy's address when it is accepted: its first request's client
//!   address (the proxy's header, [`crate::forwarded`]) takes that place instead, under the
//!   same per-address and /48 caps (without inbound auth; with it the per-caller cap of
//!   R-CON-38 counts it), and every request carries its client address ([`ClientAddr`]) for
//!   the other per-address shares. A trusted proxy's header that names no client is answered
//!   400.
//! - Shutdown stops accepting, and the returned future ends when every connection has closed
//!   (hyper's graceful shutdown: idle keep-alive connections close at once, busy ones after
//!   their response).

use std::{
    collections::VecDeque,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::{
    fair::{ClientAddr, Counts, PeerAddr, Slot, address_key, network_key},
    forwarded::TrustedProxies,
    task_ref::CallerScope,
};

/// Bounds on the connections the HTTP connector serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a connection has to send a request's headers, also the idle time after which a
    /// keep-alive connection is closed.
    pub header_read: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one IP address; 0 for no such cap (behind a reverse
    /// proxy that brings every client from one address, the proxy should bound them instead).
    pub max_per_address: usize,
    /// Time a new connection has to send its first request's headers (at most `header_read`).
    pub first_request: Duration,
    /// Whether a connection proves itself only by a verified caller's request (inbound auth),
    /// not by any request, for the share of connections yet to prove themselves.
    pub proven_by_verified_caller: bool,
}

/// Default [`ConnectionLimits::header_read`]: generous for a slow client on a slow link,
/// short enough that idle and stalled connections do not pile up.
pub const DEFAULT_HEADER_READ: Duration = Duration::from_secs(30);
/// Default [`ConnectionLimits::first_request`]: a client sends its request as soon as it
/// connects; a connection that stays silent this long is closed.
pub const DEFAULT_FIRST_REQUEST: Duration = Duration::from_secs(5);
/// Default [`ConnectionLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default [`ConnectionLimits::max_per_address`] with the default connection cap: 64 of 1024.
pub const DEFAULT_MAX_PER_ADDRESS: usize = default_per_address(DEFAULT_MAX_CONNECTIONS);

/// The per-address cap when the operator sets none (R-CON-19): a sixteenth of
/// `max_connections` (at least 1), so that one address (or IPv6 /64) holds a fair share, and
/// filling every place takes sixteen addresses (a quarter let four IPv4 addresses, or one
/// IPv6 /62, take them all).
pub const fn default_per_address(max_connections: usize) -> usize {
    if max_connections < 16 {
        1
    } else {
        max_connections / 16
    }
}

/// Connections one IPv6 /48 may hold ([`network_key`]): four addresses' worth, so a site
/// that spreads its connections over its /64s still holds a bounded share; 0 (no cap) when
/// the per-address cap is off.
pub const fn network_cap(max_per_address: usize) -> usize {
    max_per_address.saturating_mul(4)
}

/// Connections that have not yet carried a request (under inbound auth, a verified one) may
/// hold half the places (at least 1), so they can never hold them all (R-CON-19).
pub const fn unproven_share(max_connections: usize) -> usize {
    if max_connections < 2 {
        1
    } else {
        max_connections / 2
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read: DEFAULT_HEADER_READ,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
            first_request: DEFAULT_FIRST_REQUEST,
            proven_by_verified_caller: false,
        }
    }
}

/// The connections that have not yet proven themselves (R-CON-19), oldest first: at most `cap`;
/// one more closes the oldest (its token is cancelled), so they never hold every place and a
/// new client still gets in.
#[derive(Debug)]
pub struct Unproven {
    cap: usize,
    waiting: Mutex<VecDeque<(u64, CancellationToken)>>,
    next: AtomicU64,
}

impl Unproven {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            waiting: Mutex::default(),
            next: AtomicU64::new(0),
        })
    }

    /// Counts a new connection: its id, and the token cancelled when it is evicted. When the
    /// share is full, the oldest is evicted first.
    pub fn admit(&self) -> (u64, CancellationToken) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        let mut waiting = self.waiting.lock().unwrap();
        while waiting.len() >= self.cap {
            if let Some((_, oldest)) = waiting.pop_front() {
                oldest.cancel();
            }
        }
        waiting.push_back((id, evicted.clone()));
        (id, evicted)
    }

    /// Connection `id` proved itself or closed: it no longer counts (nothing if it did not).
    pub fn leave(&self, id: u64) {
        let mut waiting = self.waiting.lock().unwrap();
        if let Some(at) = waiting.iter().position(|(held, _)| *held == id) {
            waiting.remove(at);
        }
    }
}

/// The caller a connection serves, for the per-caller connection cap (R-CON-38): put in each
/// request's extensions (`Arc<ConnectionOwner>`) by [`serve`]; inbound auth claims it for the
/// first verified caller on the connection, and its place is given back when the connection
/// closes. A connection stays counted for that first caller: another caller's request on it
/// is served without moving it (moving it would let one token free another's places).
#[derive(Debug, Default)]
pub struct ConnectionOwner {
    owner: Mutex<Option<Slot<CallerScope>>>,
    /// Without inbound auth, behind a trusted proxy: the places of the client its first
    /// request came from, under the per-address caps (R-CON-50).
    client: Mutex<Option<PeerPlaces>>,
    /// Its place among the connections yet to prove themselves, until they do (R-CON-19).
    unproven: Option<(Arc<Unproven>, u64)>,
}

/// A peer's (or a proxied client's) places under the per-address cap and its /48's cap.
type PeerPlaces = (Slot<IpAddr>, Option<Slot<IpAddr>>);

impl ConnectionOwner {
    /// Whether this connection may serve `caller`: it is counted for a caller already (the
    /// first, whoever asks now), or `caller` holds fewer than `cap` (non-zero) connections and
    /// this one now counts as one of them.
    pub fn claim(
        &self,
        counts: &Arc<Counts<CallerScope>>,
        caller: &CallerScope,
        cap: usize,
    ) -> bool {
        let mut owner = self.owner.lock().unwrap();
        if owner.is_none() {
            *owner = match counts.admit(caller, cap) {
                Some(slot) => Some(slot),
                None => return false,
            };
        }
        self.prove();
        true
    }

    /// Whether this connection from a trusted proxy may serve client `ip`: it is counted for
    /// a client already (the first, whoever asks now, as [`Self::claim`] does for callers), or
    /// `ip` is under the per-address caps and this connection now counts as one of its own.
    fn claim_client(&self, caps: &AddressCaps, ip: IpAddr) -> bool {
        let mut client = self.client.lock().unwrap();
        if client.is_none() {
            *client = match caps.admit(ip) {
                Some(places) => Some(places),
                None => return false,
            };
        }
        true
    }

    /// The connection carried a request (under inbound auth, a verified caller's, see
    /// [`Self::claim`]): it leaves the share of connections yet to prove themselves.
    pub fn prove(&self) {
        if let Some((unproven, id)) = &self.unproven {
            unproven.leave(*id);
        }
    }
}

/// A peer's places under the per-address cap and, for IPv6, its /48's cap; `None` (nothing
/// taken) when either is full.
fn admit_peer(
    per_address: &Arc<Counts<IpAddr>>,
    per_network: &Arc<Counts<IpAddr>>,
    ip: IpAddr,
    cap: usize,
) -> Option<PeerPlaces> {
    let network = match network_key(ip) {
        Some(key) => Some(per_network.admit(&key, network_cap(cap))?),
        None => None,
    };
    Some((per_address.admit(&address_key(ip), cap)?, network))
}

/// The per-address connection caps (R-CON-19) with what they count, shared by the accept loop
/// (peers) and the requests of trusted proxies' connections (their clients, R-CON-50).
struct AddressCaps {
    per_address: Arc<Counts<IpAddr>>,
    per_network: Arc<Counts<IpAddr>>,
    cap: usize,
}

impl AddressCaps {
    fn admit(&self, ip: IpAddr) -> Option<PeerPlaces> {
        admit_peer(&self.per_address, &self.per_network, ip, self.cap)
    }
}

/// Who a request is from, as each of a connection's requests learns it (R-CON-50): the caps
/// its client is counted under, the proxies trusted to name it, whether inbound auth counts
/// connections per caller instead, and where refusals are counted.
struct Clients {
    caps: AddressCaps,
    trusted: TrustedProxies,
    by_caller: bool,
    metrics: Option<crate::metrics::Metrics>,
}

impl Clients {
    /// Puts the request's client address in its extensions and, for a connection from a
    /// trusted proxy without inbound auth, counts the connection for that client. `Some`
    /// answer instead when the header names no client (400) or the client holds its share
    /// (503).
    fn admit<B>(
        &self,
        peer: std::net::SocketAddr,
        owner: &ConnectionOwner,
        request: &mut http::Request<B>,
    ) -> Option<axum::response::Response> {
        use axum::response::IntoResponse as _;
        if !self.trusted.trusts(peer.ip()) {
            return None;
        }
        let client = match self.trusted.client_address(peer.ip(), request.headers()) {
            Ok(client) => client,
            Err(malformed) => {
                tracing::debug!(peer = %peer.ip(), why = malformed.why, "refused a request: its trusted proxy named no client");
                let close = [(http::header::CONNECTION, "close")];
                let text = format!("{malformed}\n");
                return Some((http::StatusCode::BAD_REQUEST, close, text).into_response());
            }
        };
        request.extensions_mut().insert(ClientAddr(client));
        if self.by_caller || owner.claim_client(&self.caps, client) {
            return None;
        }
        if let Some(metrics) = &self.metrics {
            metrics.count_refusal("--http-max-connections-per-address");
        }
        tracing::debug!(
            cap = self.caps.cap,
            "refused a request: its proxied client holds its share of connections"
        );
        let headers = [
            (http::header::CONNECTION, "close"),
            (http::header::RETRY_AFTER, "1"),
        ];
        let status = http::StatusCode::SERVICE_UNAVAILABLE;
        Some((status, headers, OVER_CAP_TEXT).into_response())
    }
}

/// What a connection over [`ConnectionLimits::max_per_address`] is told before it is closed.
const OVER_ADDRESS_CAP: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 95\r\n\r\n\
too many connections from this address; close some or raise --http-max-connections-per-address\n";

/// The body of that answer, also given to a trusted proxy's client over its share (R-CON-50).
const OVER_CAP_TEXT: &str = "too many connections from this address; close some or raise --http-max-connections-per-address\n";

/// Serves `app` on `listener` within `limits` until `stop` is cancelled, then until every
/// connection has closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    serve_counting(listener, app, limits, stop, None, TrustedProxies::default()).await;
}

/// [`serve`], counting the connections refused at the per-address cap in `metrics` (R-RUN-6),
/// with the clients of the `trusted` reverse proxies counted as their own (R-CON-50).
pub async fn serve_counting(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
    metrics: Option<crate::metrics::Metrics>,
    trusted: TrustedProxies,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(Clients {
        caps: AddressCaps {
            per_address: Arc::default(),
            per_network: Arc::default(),
            cap: limits.max_per_address,
        },
        trusted,
        by_caller: limits.proven_by_verified_caller,
        metrics,
    });
    let unproven = Unproven::new(unproven_share(limits.max_connections));
    let limits = ConnectionLimits {
        first_request: limits.first_request.min(limits.header_read),
        ..limits
    };
    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // the semaphore is never closed
            },
        };
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        // A trusted proxy's connection is counted for its first request's client instead.
        let address_places = match clients.trusted.trusts(peer.ip()) {
            true => None,
            false => match clients.caps.admit(peer.ip()) {
                Some(places) => Some(places),
                None => {
                    drop(slot);
                    refuse_over_address_cap(stream, peer, &clients);
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let accepted = Accepted {
            stream,
            peer,
            places: (slot, address_places),
        };
        spawn_connection(accepted, &app, (&limits, &clients), &unproven, &graceful);
    }
    graceful.shutdown().await;
}

/// Answers a connection over the per-address cap with a 503 naming the flag and closes it,
/// without taking a place.
fn refuse_over_address_cap(
    mut stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    clients: &Clients,
) {
    if let Some(metrics) = &clients.metrics {
        metrics.count_refusal("--http-max-connections-per-address");
    }
    // Debug, not warn: a client hammering the cap must not flood the log.
    tracing::debug!(
        peer = %peer.ip(),
        cap = clients.caps.cap,
        "refused an HTTP connection: too many from this address"
    );
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            let _ = stream.write_all(OVER_ADDRESS_CAP).await;
            let _ = stream.shutdown().await;
        })
        .await;
    });
}

/// A connection the loop accepted, with its places under the caps (given back when it ends).
struct Accepted<P> {
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    places: P,
}

/// Serves one accepted connection on its own task: closed at the first-request deadline when
/// it sent no request, or when it is evicted from the connections yet to prove themselves.
fn spawn_connection<P: Send + 'static>(
    accepted: Accepted<P>,
    app: &axum::Router,
    (limits, clients): (&ConnectionLimits, &Arc<Clients>),
    unproven: &Arc<Unproven>,
    graceful: &GracefulShutdown,
) {
    let Accepted {
        stream,
        peer,
        places,
    } = accepted;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let (id, evicted) = unproven.admit();
    let spoke = CancellationToken::new();
    // Each request learns its peer and client (per-address limits) and its connection
    // (per-caller).
    let owner = Arc::new(ConnectionOwner {
        unproven: Some((unproven.clone(), id)),
        ..ConnectionOwner::default()
    });
    let (proven_by_any, first) = (!limits.proven_by_verified_caller, spoke.clone());
    let (app, clients) = (app.clone(), clients.clone());
    let app = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        first.cancel();
        if proven_by_any {
            owner.prove();
        }
        request.extensions_mut().insert(PeerAddr(peer));
        request.extensions_mut().insert(owner.clone());
        let refused = clients.admit(peer, &owner, &mut request);
        let app = app.clone();
        async move {
            match refused {
                None => app.oneshot(request).await,
                Some(refusal) => Ok(refusal),
            }
        }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let connection = graceful.watch(connection);
    let (unproven, first_request) = (unproven.clone(), limits.first_request);
    tokio::spawn(async move {
        tokio::select! {
            ended = connection => if let Err(e) = ended {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            },
            () = silent_past(first_request, &spoke) => tracing::debug!(
                "closed an HTTP connection that sent no request within {first_request:?}"
            ),
            () = evicted.cancelled() => tracing::debug!(
                "closed the oldest of too many HTTP connections that carried no request yet"
            ),
        }
        unproven.leave(id);
        drop(places);
    });
}

/// Ends `limit` after now unless `spoke` was cancelled by then (then never).
async fn silent_past(limit: Duration, spoke: &CancellationToken) {
    tokio::time::sleep(limit).await;
    if spoke.is_cancelled() {
        std::future::pending::<()>().await;
    }
}

/// `response` with `guard` held until its body ends or is dropped (a stream's too).
pub(crate) fn hold_until_body_ends<G: Send + 'static>(
    response: axum::response::Response,
    guard: G,
) -> axum::response::Response {
    use futures::StreamExt as _;
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |item| {
        let _ = &guard;
        item
    });
    axum::response::Response::from_parts(parts, axum::body::Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_share_of_an_address_is_a_sixteenth() {
        for (max_connections, per_address) in [(1024, 64), (4096, 256), (100, 6), (16, 1), (3, 1)] {
            assert_eq!(
                default_per_address(max_connections),
                per_address,
                "{max_connections}"
            );
        }
        assert_eq!(DEFAULT_MAX_PER_ADDRESS, 64);
        assert_eq!(ConnectionLimits::default().max_per_address, 64);
    }

    #[test]
    fn an_ipv6_site_holds_four_addresses_worth_and_ipv4_only_its_own() {
        let (addresses, networks) = (Arc::default(), Arc::default());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut held = Vec::new();
        // One /48 spread over its /64s: 2 per /64, 8 in the /48.
        for i in 0..10u16 {
            let peer = ip(&format!("2001:db8:1:{i:x}::1"));
            held.extend(admit_peer(&addresses, &networks, peer, 2));
            held.extend(admit_peer(&addresses, &networks, peer, 2));
        }
        assert_eq!(held.len(), 8);
        // Another site, and IPv4 addresses of one /24, are untouched.
        assert!(admit_peer(&addresses, &networks, ip("2001:db8:2::1"), 2).is_some());
        for i in 1..=10u8 {
            let peer = ip(&format!("192.0.2.{i}"));
            assert!(admit_peer(&addresses, &networks, peer, 2).is_some());
        }
        // A refused network takes no address place; giving places back frees the site.
        held.clear();
        assert!(admit_peer(&addresses, &networks, ip("2001:db8:1:9::1"), 2).is_some());
        assert!(
            network_key(ip("::ffff:192.0.2.1")).is_none(),
            "mapped IPv4 is IPv4"
        );
    }

    #[test]
    fn a_connection_stays_counted_for_its_first_caller() {
        let who = |s: &str| CallerScope::Subject {
            issuer: "https://idp".into(),
            subject: s.into(),
        };
        let counts = Arc::new(Counts::default());
        let connection = ConnectionOwner::default();
        assert!(connection.claim(&counts, &who("alice"), 1));
        assert!(connection.claim(&counts, &who("bob"), 1), "served");
        assert_eq!(counts.held(&who("alice")), 1, "still alice's");
        assert_eq!(counts.held(&who("bob")), 0);
        let other = ConnectionOwner::default();
        assert!(
            !other.claim(&counts, &who("alice"), 1),
            "alice is at her cap"
        );
        drop(connection);
        assert_eq!(counts.keys(), 0, "given back when the connection closes");
    }

    #[test]
    fn unproven_connections_hold_half_the_places_and_the_oldest_goes_first() {
        assert_eq!(unproven_share(DEFAULT_MAX_CONNECTIONS), 512);
        assert_eq!(unproven_share(1), 1);
        let unproven = Unproven::new(2);
        let (a, a_out) = unproven.admit();
        let (b, b_out) = unproven.admit();
        unproven.leave(a);
        let (_, c_out) = unproven.admit();
        assert!(
            !a_out.is_cancelled() && !b_out.is_cancelled(),
            "a proved itself"
        );
        let (_, d_out) = unproven.admit();
        assert!(b_out.is_cancelled(), "the oldest unproven one is closed");
        assert!(!c_out.is_cancelled() && !d_out.is_cancelled());
        let held = |u: &Unproven| u.waiting.lock().unwrap().len();
        assert_eq!(held(&unproven), 2);
        unproven.leave(b);
        assert_eq!(held(&unproven), 2, "leaving twice frees nothing more");
    }

    /// Opens a connection to `addr`, sends `request` (if any) and reads what comes back until
    /// the connection closes or `wait` passes: the text, and whether it closed.
    async fn exchange(
        stream: &mut tokio::net::TcpStream,
        request: &[u8],
        wait: Duration,
    ) -> (String, bool) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        stream.write_all(request).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(wait, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into(), true),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Err(_) => return (String::from_utf8_lossy(&got).into(), false),
            }
        }
    }

    /// A loopback listener, its address, and an app answering `GET /` with `ok`.
    async fn ok_app() -> (tokio::net::TcpListener, std::net::SocketAddr, axum::Router) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        (listener, addr, app)
    }

    #[tokio::test]
    async fn silent_connections_never_hold_every_place_and_close_at_the_first_request_deadline() {
        let (listener, addr, app) = ok_app().await;
        let limits = ConnectionLimits {
            max_connections: 8,
            max_per_address: 0,
            first_request: Duration::from_secs(2),
            ..ConnectionLimits::default()
        };
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, limits, stop.clone()));
        let connect = || tokio::net::TcpStream::connect(addr);
        let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let short = Duration::from_millis(300);
        let mut proven = connect().await.unwrap();
        let (answer, _) = exchange(&mut proven, get, short).await;
        assert!(answer.contains("200 OK"), "{answer}");
        let mut silent = Vec::new();
        for _ in 0..4 {
            silent.push(connect().await.unwrap());
        }
        tokio::time::sleep(short).await;
        // One more silent connection than the share (4 of 8): the oldest silent one is closed.
        silent.push(connect().await.unwrap());
        let (_, closed) = exchange(&mut silent[0], b"", short).await;
        assert!(
            closed,
            "the oldest silent connection stays open past the share"
        );
        let (_, closed) = exchange(&mut silent[1], b"", short).await;
        assert!(!closed, "a younger silent one is closed too");
        // A new client that sends its request is served, and so is the proven connection.
        let mut fresh = connect().await.unwrap();
        let (answer, _) = exchange(&mut fresh, get, short).await;
        assert!(answer.contains("200 OK"), "{answer}");
        let (answer, _) = exchange(&mut proven, get, short).await;
        assert!(answer.contains("200 OK"), "{answer}");
        // Past the first-request deadline every silent connection is closed; served ones stay.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for stream in &mut silent[1..] {
            let (_, closed) = exchange(stream, b"", short).await;
            assert!(
                closed,
                "a silent connection outlived the first-request deadline"
            );
        }
        let (answer, _) = exchange(&mut fresh, get, short).await;
        assert!(answer.contains("200 OK"), "{answer}");
        stop.cancel();
        drop((proven, fresh, silent));
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn each_client_behind_a_trusted_proxy_gets_its_own_connections() {
        let (listener, addr, app) = ok_app().await;
        let limits = ConnectionLimits {
            max_per_address: 1,
            ..ConnectionLimits::default()
        };
        let net = crate::forwarded::parse_trusted_proxy("127.0.0.1").unwrap();
        let trusted = TrustedProxies::new(vec![net], Default::default());
        let stop = CancellationToken::new();
        let served = serve_counting(listener, app, limits, stop.clone(), None, trusted);
        let server = tokio::spawn(served);
        let short = Duration::from_millis(500);
        let from = |client: &str| {
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {client}\r\n\r\n")
        };
        let mut held = Vec::new();
        // The proxy's address holds no place itself: each client holds its own one.
        for (client, expected) in [
            ("198.51.100.1", "200 OK"),
            ("198.51.100.2", "200 OK"),
            ("198.51.100.1", "503 "),
            ("203.0.113.9, 198.51.100.1", "503 "),
            ("198.51.100.3:4711", "200 OK"),
            ("not an address", "400 "),
        ] {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (answer, _) = exchange(&mut stream, from(client).as_bytes(), short).await;
            assert!(answer.contains(expected), "{client}: {answer}");
            if expected == "503 " {
                assert!(
                    answer.contains("--http-max-connections-per-address"),
                    "{answer}"
                );
            }
            if expected == "400 " {
                assert!(answer.contains("--trusted-proxy"), "{answer}");
            }
            held.push(stream);
        }
        // A later request on a client's connection is served, whoever it names.
        let (answer, _) = exchange(&mut held[0], from("198.51.100.9").as_bytes(), short).await;
        assert!(answer.contains("200 OK"), "{answer}");
        stop.cancel();
        drop(held);
        server.abort();
    }

    #[tokio::test]
    async fn connections_refused_at_the_address_cap_are_counted() {
        let (listener, addr, app) = ok_app().await;
        let limits = ConnectionLimits {
            max_per_address: 1,
            ..ConnectionLimits::default()
        };
        let (stop, metrics) = (CancellationToken::new(), crate::metrics::Metrics::new());
        let trusted = TrustedProxies::default();
        let served = serve_counting(
            listener,
            app,
            limits,
            stop.clone(),
            Some(metrics.clone()),
            trusted,
        );
        let server = tokio::spawn(served);
        let _first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (answer, _) = exchange(&mut second, b"", Duration::from_secs(2)).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        let line = r#"cap_refusals_total{reason="--http-max-connections-per-address"} 1"#;
        assert!(metrics.encode().contains(line), "{}", metrics.encode());
        stop.cancel();
        server.abort();
    }

    #[test]
    fn the_refusal_is_a_complete_http_answer_naming_the_flag() {
        let text = std::str::from_utf8(OVER_ADDRESS_CAP).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        assert!(body.contains("--http-max-connections-per-address"));
    }
}
