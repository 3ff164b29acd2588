//! Resource subscriptions (R-CON-49): a session's `resources/subscribe` and a 2026-07-28
//! listen stream's `resourceSubscriptions` register the URI with the route serving it
//! ([`resource_subscriptions::Registry`]); the subscription starts with one
//! `~~resource_versions` of that route (R-PRX-34), which makes the proxy subscribe upstream and
//! gives the baseline token. While any subscription lives, one task asks each route's
//! versions of all its subscribed URIs every `--resource-poll`, and a token that moved
//! ([`resource_subscriptions::Seen`]) sends `notifications/resources/updated` to the URI's
//! subscribers. A session's subscriptions end with the session, a stream's with the stream.
//!
//! Every asking names its caller ([`Connector::caller_key`]), so the proxy counts each caller's
//! share of what it watches, and the end of a caller's last subscription to a URI is told to
//! the proxy (`released`), which lets go of it at once (R-PRX-36).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{ResourceUpdatedNotificationParam, ServerNotification},
    service::SubscriptionSink,
};
use serde_json::{Map, Value, json};

use crate::fair::Share;

use super::{
    Connector, Inner,
    call::jsonrpc_error,
    feature_cache::Reserved,
    internal::internal,
    resource_subscriptions::{self, Registry, Released, Seen},
};
use durable_mcp_contract::{
    features::{
        LIST_RESOURCE_TEMPLATES, LIST_RESOURCES, MAX_VERSION_URIS, READ_RESOURCE,
        RESOURCE_VERSIONS, VersionsInput, supports_subscribe,
    },
    jsonrpc_error::JsonRpcError,
    payload,
};

/// How the connector asks its routes' resource versions by default (R-CON-49).
pub const DEFAULT_RESOURCE_POLL: Duration = Duration::from_secs(5);
/// The least time between two polls.
pub const MIN_RESOURCE_POLL: Duration = Duration::from_secs(1);

/// How a subscriber is told of an update.
#[derive(Clone)]
pub(super) enum Notify {
    Session(Peer<RoleServer>),
    Listener(SubscriptionSink),
}

impl Notify {
    /// Sends `notifications/resources/updated` for `uri`; false when the subscriber is gone.
    pub(super) async fn updated(&self, uri: &str) -> bool {
        let params = ResourceUpdatedNotificationParam::new(uri);
        match self {
            Self::Session(peer) => peer.notify_resource_updated(params).await.is_ok(),
            Self::Listener(sink) => {
                let notice = ServerNotification::ResourceUpdatedNotification(
                    rmcp::model::ResourceUpdatedNotification::new(params),
                );
                sink.send(notice).await.is_ok()
            }
        }
    }

    fn gone(&self) -> bool {
        match self {
            Self::Session(peer) => peer.is_transport_closed(),
            Self::Listener(_) => false,
        }
    }
}

/// The connector's subscriptions, the tokens seen, and the polling task.
pub(super) struct ResourceSubscriptions {
    registry: Mutex<Registry<Notify>>,
    seen: Mutex<Seen>,
    polling: std::sync::Once,
}

impl Default for ResourceSubscriptions {
    fn default() -> Self {
        Self {
            registry: Default::default(),
            seen: Default::default(),
            polling: std::sync::Once::new(),
        }
    }
}

/// A session's subscriber id, once it subscribed (one per session, like its log level).
pub(super) type SessionSubscriber = Arc<Mutex<Option<u64>>>;

/// How often the routes' versions are asked for `--resource-poll`: never for zero (the
/// connector then declares no `resources.subscribe`), else at least [`MIN_RESOURCE_POLL`].
pub fn resource_poll_period(poll: Duration) -> Option<Duration> {
    (!poll.is_zero()).then(|| poll.max(MIN_RESOURCE_POLL))
}

impl Connector {
    /// Whether the connector serves resource subscriptions: a route's upstream declares
    /// `resources.subscribe` and `--resource-poll` is not zero.
    pub(super) fn serves_subscriptions(&self) -> bool {
        resource_poll_period(self.inner.options.resource_poll).is_some()
            && self.inner.declared.any(supports_subscribe)
    }

    /// Each route's resource and template lists as last listed, as [`Self::cached_subscribable`]
    /// reads them: taken once for all the URIs of a stream, not once per URI.
    pub(super) fn cached_lists(&self) -> Vec<resource_subscriptions::RouteLists> {
        (0..self.inner.options.routes.len())
            .map(|i| {
                let resources = self.last_good_list(i, LIST_RESOURCES);
                (
                    i,
                    resources,
                    self.last_good_list(i, LIST_RESOURCE_TEMPLATES),
                )
            })
            .collect()
    }

    /// Whether the routes' `lists` ([`Self::cached_lists`]) show `uri` served by a route whose
    /// upstream supports subscriptions: what a listen stream's acknowledgement names, since
    /// rmcp sends it before the stream's subscriptions are made (R-CON-49).
    pub(super) fn cached_subscribable(
        &self,
        uri: &str,
        lists: &[resource_subscriptions::RouteLists],
    ) -> bool {
        resource_subscriptions::listed_route(uri, lists)
            .is_some_and(|i| self.inner.declared.of_route(i, supports_subscribe))
    }

    /// The index of the route serving `uri`, when its upstream supports subscriptions; else
    /// the caller's error: -32002 for a URI no route serves, -32602 for one whose route does
    /// not support subscriptions.
    async fn subscribable_route(&self, uri: &str) -> Result<usize, McpError> {
        if resource_poll_period(self.inner.options.resource_poll).is_none() {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "this connector runs with --resource-poll 0s: it serves no resource subscriptions; read the resource again instead",
                None,
            ));
        }
        let route = self.route_for(READ_RESOURCE, uri, READ_RESOURCE).await?;
        let routes = &self.inner.options.routes;
        let index = routes.iter().position(|r| *r == route).unwrap_or_default();
        let declared = self.declared().await?;
        if declared
            .get(index)
            .and_then(Option::as_ref)
            .is_some_and(supports_subscribe)
        {
            return self.listed_by(index, uri).await.map(|()| index);
        }
        Err(McpError::invalid_params(
            format!(
                "resource {uri:?} is served by {:?}, whose upstream does not support \
                 subscriptions (no resources.subscribe); read it again instead",
                route.service
            ),
            Some(json!({"uri": uri, "service": route.service})),
        ))
    }

    /// Whether route `index`'s resource or template lists show `uri`: with one route declaring
    /// resources, `resources/read` goes to it without listing, but a subscription to a URI no
    /// route serves is -32002 all the same (R-CON-49).
    async fn listed_by(&self, index: usize, uri: &str) -> Result<(), McpError> {
        let resources = self.cached_feature_list(index, LIST_RESOURCES).await.ok();
        let templates = self.cached_feature_list(index, LIST_RESOURCE_TEMPLATES);
        let lists = [(index, resources, templates.await.ok())];
        if lists[0].1.is_none() && lists[0].2.is_none() {
            let why = "the route's resource lists could not be read; try again later";
            return Err(internal("resources/subscribe", why));
        }
        match resource_subscriptions::listed_route(uri, &lists) {
            Some(_) => Ok(()),
            None => Err(not_found(uri)),
        }
    }

    /// Subscribes `id` to `uri`: the route is found, the subscription registered, and its
    /// route's version asked at once (the proxy subscribes upstream; the baseline token).
    pub(super) async fn subscribe_resource(
        &self,
        id: u64,
        uri: &str,
        share: Option<&Share>,
    ) -> Result<(), McpError> {
        let route = self.subscribable_route(uri).await?;
        let subs = &self.inner.resource_subs;
        let added = subs.registry.lock().unwrap().add(id, uri, route);
        let added =
            added.map_err(|why| McpError::invalid_params(why, Some(json!({"uri": uri}))))?;
        self.start_resource_poll();
        // The subscribing asking counts in the caller's share, like a read (R-CON-38).
        let started = self
            .inner
            .call_starts
            .try_start("resources/subscribe", share);
        let asked = match started {
            Ok(()) => {
                let key = self.caller_key(share);
                self.ask_versions(route, &[uri.to_owned()], share, key)
                    .await
            }
            Err(e) => Err(e),
        };
        let refused = match asked {
            Ok((_, errors)) => errors.get(uri).map(refusal),
            Err(e) => Some(e),
        };
        if let Some(error) = refused {
            // A subscription made before stays: only this asking's new one is undone.
            if added {
                subs.registry.lock().unwrap().remove(id, uri);
            }
            return Err(error);
        }
        Ok(())
    }

    /// Unsubscribes `id` from `uri` (acknowledged whether or not it was subscribed); the proxy
    /// is told when it was its caller's last subscription to it (R-PRX-36).
    pub(super) fn unsubscribe_resource(&self, id: u64, uri: &str) {
        let registry = &self.inner.resource_subs.registry;
        let released = registry.lock().unwrap().unsubscribe(id, uri);
        self.release(released.into_iter().collect());
    }

    /// Tells each route's proxy, in the background, which URIs a caller let go of (R-PRX-36);
    /// a proxy not told (unreachable, or of an earlier build) drops them when they go idle.
    fn release(&self, released: Vec<Released>) {
        let mut by_caller: HashMap<(usize, Option<Share>), Vec<String>> = HashMap::new();
        for r in released {
            by_caller
                .entry((r.route, r.caller))
                .or_default()
                .push(r.uri);
        }
        for ((route, caller), uris) in by_caller {
            let connector = Connector::of(self.inner.clone());
            let key = self.caller_key(caller.as_ref());
            tokio::spawn(async move {
                let service = &connector.inner.options.routes[route];
                for chunk in uris.chunks(MAX_VERSION_URIS) {
                    let input = VersionsInput {
                        uris: Vec::new(),
                        caller: Some(key.clone()),
                        released: chunk.to_vec(),
                    };
                    let input = serde_json::to_value(input).unwrap_or_default();
                    let told = connector
                        .run_in_place(service, RESOURCE_VERSIONS, input, None)
                        .await;
                    if told.is_err() {
                        tracing::debug!(service = %service.service, "telling the proxy of ended resource subscriptions failed; they end when idle");
                    }
                }
            });
        }
    }

    /// A new subscriber of `caller`.
    pub(super) fn join_subscribers(&self, notify: Notify, caller: Option<Share>) -> u64 {
        let registry = &self.inner.resource_subs.registry;
        registry.lock().unwrap().join(notify, caller)
    }

    /// The subscriber is gone; the proxy is told of the URIs its caller no longer holds.
    pub(super) fn leave_subscribers(&self, id: u64) {
        let registry = &self.inner.resource_subs.registry;
        let released = registry.lock().unwrap().leave_releasing(id);
        self.release(released);
    }

    /// The session's subscriber id, made on its first subscription (again when its subscriber
    /// was dropped, as one that did not take an update in time is).
    pub(super) fn session_subscriber(
        &self,
        session: &SessionSubscriber,
        peer: Peer<RoleServer>,
        caller: Option<Share>,
    ) -> u64 {
        let mut id = session.lock().unwrap();
        let registry = &self.inner.resource_subs.registry;
        match *id {
            Some(known) if registry.lock().unwrap().has(known) => known,
            _ => *id.insert(self.join_subscribers(Notify::Session(peer), caller)),
        }
    }

    /// Asks `route` the versions of `uris` for the caller `key` (in `share`'s in-flight part);
    /// each token is compared with the ones seen, and the URIs' subscribers are told of a move.
    /// Answers the versions and the per-URI errors.
    async fn ask_versions(
        &self,
        route: usize,
        uris: &[String],
        share: Option<&Share>,
        key: String,
    ) -> Result<(Map<String, Value>, Map<String, Value>), McpError> {
        let service = &self.inner.options.routes[route];
        let input = VersionsInput {
            uris: uris.to_vec(),
            caller: Some(key),
            released: Vec::new(),
        };
        let input = serde_json::to_value(input).map_err(|e| internal("resources/subscribe", e))?;
        let asked = self
            .run_in_place(service, RESOURCE_VERSIONS, input, share)
            .await;
        let answered = match asked {
            Ok(p) => payload::to_json(&p).map_err(|e| internal("resources/subscribe", e))?,
            Err(Reserved::OverCap(e)) => return Err(e),
            Err(Reserved::Failed(why)) => return Err(internal("resources/subscribe", why)),
        };
        let field = |key: &str| {
            answered
                .get(key)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (versions, errors) = (field("versions"), field("errors"));
        for (uri, token) in &versions {
            let moved = token.as_str().is_some_and(|token| {
                let mut seen = self.inner.resource_subs.seen.lock().unwrap();
                seen.observe(route, uri, token)
            });
            if moved {
                self.tell_updated(route, uri).await;
            }
        }
        Ok((versions, errors))
    }

    /// Sends `notifications/resources/updated` to the subscribers of `uri` on `route`, all at
    /// once; a subscriber that is gone, or does not take the notification within
    /// [`NOTIFY_TIMEOUT`], is dropped, so one slow subscriber holds up no other (R-CON-49).
    async fn tell_updated(&self, route: usize, uri: &str) {
        let subs = &self.inner.resource_subs;
        let told = subs.registry.lock().unwrap().subscribers_of(route, uri);
        let sends = told
            .into_iter()
            .map(|(id, notify)| (id, async move { notify.updated(uri).await }));
        for id in untold(sends, NOTIFY_TIMEOUT).await {
            tracing::warn!(
                uri,
                "a resource subscriber did not take an update in time; its subscriptions end"
            );
            self.leave_subscribers(id);
        }
    }

    /// A poll answered errors for these URIs of `route` (the proxy no longer watches them): their
    /// subscribers get one update hint, to read the resource again, and their subscriptions
    /// end, which is logged, rather than staying with no updates and no sign (R-CON-49).
    async fn drop_refused(&self, route: usize, errors: Map<String, Value>) {
        for (uri, error) in errors {
            self.tell_updated(route, &uri).await;
            let registry = &self.inner.resource_subs.registry;
            let dropped = registry.lock().unwrap().remove_everywhere(route, &uri);
            if dropped > 0 {
                tracing::warn!(uri, %error, dropped,
                    "the proxy answered an error for a subscribed resource; its subscriptions end");
            }
        }
    }

    /// Starts the polling task, once.
    fn start_resource_poll(&self) {
        self.inner.resource_subs.polling.call_once(|| {
            if let Some(period) = resource_poll_period(self.inner.options.resource_poll) {
                tokio::spawn(poll(Arc::downgrade(&self.inner), period));
            }
        });
    }
}

/// How long one subscriber's `notifications/resources/updated` may take (rmcp's session
/// channel is bounded, so a caller that reads nothing blocks the send).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `sends` (each answering whether it was sent) at once; the ids of those that failed or
/// took longer than `timeout`.
async fn untold<F: std::future::Future<Output = bool>>(
    sends: impl IntoIterator<Item = (u64, F)>,
    timeout: Duration,
) -> Vec<u64> {
    let sends = sends.into_iter().map(|(id, send)| async move {
        let sent = tokio::time::timeout(timeout, send).await;
        (id, matches!(sent, Ok(true)))
    });
    let outcomes = futures::future::join_all(sends).await;
    outcomes
        .into_iter()
        .filter(|(_, sent)| !sent)
        .map(|(id, _)| id)
        .collect()
}

/// -32002 for a URI no route serves, as `resources/read` answers it (R-CON-45).
fn not_found(uri: &str) -> McpError {
    let message = format!("no route offers resource {uri:?}");
    let code = rmcp::model::ErrorCode(-32002);
    McpError::new(code, message, Some(json!({"uri": uri})))
}

/// An upstream's JSON-RPC error for one URI, as the caller's error.
fn refusal(error: &Value) -> McpError {
    match serde_json::from_value::<JsonRpcError>(error.clone()) {
        Ok(error) => jsonrpc_error(error),
        Err(_) => internal(
            "resources/subscribe",
            "the proxy answered an unreadable error",
        ),
    }
}

/// Asks every route the versions of its subscribed URIs each `period` while anyone subscribes,
/// until the connector is gone.
async fn poll(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let (plan, by_caller, released) = {
            let mut registry = inner.resource_subs.registry.lock().unwrap();
            let released = registry.leave_if(Notify::gone);
            (
                registry.by_route(),
                registry.by_route_and_caller(),
                released,
            )
        };
        inner.resource_subs.seen.lock().unwrap().retain(&plan);
        let connector = Connector::of(inner);
        connector.release(released);
        // Each caller's URIs in its own asking: the proxy keeps them in that caller's share.
        for ((route, caller), uris) in by_caller {
            let uris: Vec<String> = uris.into_iter().collect();
            let key = connector.caller_key(caller.as_ref());
            for chunk in uris.chunks(MAX_VERSION_URIS) {
                match connector
                    .ask_versions(route, chunk, None, key.clone())
                    .await
                {
                    Ok((_, errors)) => connector.drop_refused(route, errors).await,
                    Err(e) => tracing::debug!(error = %e.message, "asking resource versions"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_that_takes_no_update_in_time_holds_up_no_other() {
        let took = std::time::Instant::now();
        let sends: Vec<(u64, futures::future::BoxFuture<'static, bool>)> = vec![
            (1, Box::pin(futures::future::pending())),
            (2, Box::pin(async { true })),
            (3, Box::pin(async { false })),
        ];
        let ms = Duration::from_millis;
        assert_eq!(untold(sends, ms(200)).await, [1, 3]);
        assert!(took.elapsed() < ms(2_000), "{:?}", took.elapsed());
    }
}
