//! The upstream's resource subscriptions behind `~~resource_versions` (R-PRX-34): the proxy
//! keeps one upstream subscription per URI a connector asks about, on its current connection,
//! and answers each URI's version token ([`crate::resource_versions`]).
//!
//! A legacy upstream gets `resources/subscribe` per new URI and `resources/unsubscribe` per
//! dropped one, and its `notifications/resources/updated` move the tokens (the connection's
//! handler, [`ResourceWatch::updated`]); a 2026-07-28 upstream gets one `subscriptions/listen`
//! stream naming every watched URI, opened again when the set changes. A new connection (or a
//! listen stream that ended) starts a new epoch and subscribes every URI again.
//!
//! Each asking names its caller and the URIs that caller let go of ([`VersionsAsk`]): the table
//! counts each caller's share (R-PRX-36), and a URI its last holder released is unsubscribed
//! upstream at once.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use rmcp::model::{ServerNotification, SubscriptionFilter};
use serde_json::{Map, Value, json};

use super::{Connection, UpstreamClient, UpstreamError, era};
use crate::resource_versions::{MAX_WATCHED_URIS, Refused, VersionTable, WATCH_IDLE};

/// One `~~resource_versions` asking (R-NXC-8): the URIs whose tokens are asked, who asks
/// (the connector's opaque caller key; `""` for a caller that names none), and the URIs that
/// caller no longer subscribes to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionsAsk {
    pub uris: Vec<String>,
    pub caller: String,
    pub released: Vec<String>,
}

/// The watched URIs of one upstream, shared by its connections.
pub struct ResourceWatch {
    table: Mutex<VersionTable>,
    /// How long a URI nobody asks about stays watched ([`WATCH_IDLE`]; shorter in tests).
    idle: Duration,
    /// The task dropping idle URIs ([`sweep`]), started with the first asking.
    sweeping: std::sync::Once,
    /// What is subscribed upstream now; held while subscribing, so askers take turns.
    subscribed: tokio::sync::Mutex<Subscribed>,
}

#[derive(Default)]
struct Subscribed {
    conn: Option<Weak<<Connection as std::ops::Deref>::Target>>,
    uris: BTreeSet<String>,
    /// A 2026-07-28 upstream's listen stream, read by this task.
    listen: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        if let Some(task) = self.listen.take() {
            task.abort();
        }
    }
}

impl Default for ResourceWatch {
    fn default() -> Self {
        Self {
            table: Mutex::new(VersionTable::new(new_epoch(), MAX_WATCHED_URIS)),
            idle: WATCH_IDLE,
            sweeping: std::sync::Once::new(),
            subscribed: Default::default(),
        }
    }
}

fn new_epoch() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

impl ResourceWatch {
    /// A watch of at most `cap` URIs (`[worker] max_watched_resources`).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            table: Mutex::new(VersionTable::new(new_epoch(), cap)),
            ..Self::default()
        }
    }

    /// The upstream said `uri` was updated.
    pub fn updated(&self, uri: &str) {
        self.table.lock().unwrap().bump(uri);
    }
}

impl Subscribed {
    /// Whether the subscriptions are on `conn` and still alive.
    fn on(&self, conn: &Connection) -> bool {
        let same = self
            .conn
            .as_ref()
            .and_then(Weak::upgrade)
            .is_some_and(|c| Arc::ptr_eq(&c, conn));
        same && !self.listen.as_ref().is_some_and(|t| t.is_finished())
    }
}

/// A JSON-RPC error object for a URI the proxy does not watch.
fn refused(message: String) -> Value {
    json!({"code": -32603, "message": message})
}

/// Why the table refused a URI, saying what to do (R-PRX-36).
fn refusal_text(why: Refused, table: &VersionTable) -> String {
    match why {
        Refused::Full => format!(
            "the proxy watches as many resources of this upstream as it may ({} callers' worth); try again later",
            crate::resource_versions::SHARES
        ),
        Refused::Reserved => format!(
            "the proxy keeps its last {} places for resources of this upstream, and its last {} \
             subscriptions to them, for callers holding fewer than {}, and this caller holds more; \
             unsubscribe from others, or try again later",
            table.reserve(),
            table.hold_reserve(),
            table.floor()
        ),
        Refused::OverShare => format!(
            "this caller holds {} resource subscriptions of this upstream at the proxy, its share \
             (those it unsubscribed from count for {} minutes); unsubscribe from others, or try again later",
            table.share(),
            WATCH_IDLE.as_secs() / 60
        ),
    }
}

impl UpstreamClient {
    /// Each URI's version token, subscribing upstream to the ones not yet watched (see the
    /// module), for the asking caller; its released URIs are let go of (and unsubscribed
    /// upstream once nobody holds them): `{"versions": {uri: token}, "errors": {uri: error}}`.
    pub async fn resource_versions(
        self: &Arc<Self>,
        asked: &VersionsAsk,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        let conn = self.connect_within(timeout).await?;
        let watch = &self.resources;
        watch.sweeping.call_once(|| {
            tokio::spawn(sweep(Arc::downgrade(self), watch.idle / SWEEPS_PER_IDLE));
        });
        let mut subscribed = watch.subscribed.lock().await;
        if !subscribed.on(&conn) {
            *subscribed = Subscribed::default();
            subscribed.conn = Some(Arc::downgrade(&conn));
            watch.table.lock().unwrap().new_epoch(new_epoch());
        }
        let mut errors = Map::new();
        let dropped = {
            let mut table = watch.table.lock().unwrap();
            let now = Instant::now();
            let mut dropped = table.release(&asked.released, &asked.caller, now, watch.idle);
            for (uri, why) in table.ask(&asked.uris, &asked.caller, now) {
                errors.insert(uri, refused(refusal_text(why, &table)));
            }
            dropped.extend(table.expire(now, watch.idle));
            dropped
        };
        if era::Upstream::of(conn.peer()).modern {
            self.listen_for(&conn, &mut subscribed, &mut errors, timeout)
                .await?;
        } else {
            self.subscribe_each(&conn, &mut subscribed, dropped, &mut errors, timeout)
                .await?;
        }
        let table = watch.table.lock().unwrap();
        let versions: Map<String, Value> = asked
            .uris
            .iter()
            .filter_map(|uri| Some((uri.clone(), Value::String(table.token(uri)?))))
            .collect();
        Ok(json!({"versions": versions, "errors": errors}))
    }

    /// A legacy upstream: `resources/subscribe` for each new URI, `resources/unsubscribe` for
    /// each dropped one. A URI the upstream refuses is not watched, and its error answered.
    async fn subscribe_each(
        &self,
        conn: &Connection,
        subscribed: &mut Subscribed,
        expired: Vec<String>,
        errors: &mut Map<String, Value>,
        timeout: Duration,
    ) -> Result<(), UpstreamError> {
        for uri in expired {
            if subscribed.uris.remove(&uri) {
                let _ = self
                    .request_on(conn, "resources/unsubscribe", json!({"uri": uri}), timeout)
                    .await;
            }
        }
        let wanted = self.resources.table.lock().unwrap().uris();
        for uri in wanted.difference(&subscribed.uris.clone()) {
            let asked = json!({"uri": uri});
            match self
                .request_on(conn, "resources/subscribe", asked, timeout)
                .await
            {
                Ok(_) => {
                    subscribed.uris.insert(uri.clone());
                }
                Err(UpstreamError::JsonRpc {
                    code,
                    message,
                    data,
                    ..
                }) => {
                    self.resources.table.lock().unwrap().remove(uri);
                    let error = json!({"code": code, "message": message, "data": data});
                    errors.insert(uri.clone(), error);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A 2026-07-28 upstream: one `subscriptions/listen` stream naming every watched URI,
    /// opened again (before the old one is dropped) when the set changed. When the new stream
    /// cannot be opened, the old one and its URIs stay, and the URIs new in this asking are
    /// dropped and answered in `errors` (so the next asking does not try them again).
    async fn listen_for(
        &self,
        conn: &Connection,
        subscribed: &mut Subscribed,
        errors: &mut Map<String, Value>,
        timeout: Duration,
    ) -> Result<(), UpstreamError> {
        let wanted = self.resources.table.lock().unwrap().uris();
        if wanted == subscribed.uris && (wanted.is_empty() || subscribed.listen.is_some()) {
            return Ok(());
        }
        if wanted.is_empty() {
            subscribed.uris.clear();
            if let Some(old) = subscribed.listen.take() {
                old.abort();
            }
            return Ok(());
        }
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(wanted.iter().cloned())
            .build();
        let listening = tokio::time::timeout(timeout, conn.peer().listen(filter)).await;
        let stream = match listening {
            Ok(Ok(stream)) => stream,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => self.failed(conn, e).to_string(),
                    _ => format!("no acknowledgment of subscriptions/listen within {timeout:?}"),
                };
                let mut table = self.resources.table.lock().unwrap();
                for uri in wanted.difference(&subscribed.uris) {
                    table.remove(uri);
                    let why = format!(
                        "the upstream's subscriptions/listen failed ({why}); try again later"
                    );
                    errors.insert(uri.clone(), refused(why));
                }
                return Ok(());
            }
        };
        let accepted: BTreeSet<String> = stream
            .acknowledged()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        for uri in wanted.difference(&accepted) {
            self.resources.table.lock().unwrap().remove(uri);
            let why = "the upstream did not accept a subscription to this resource".into();
            errors.insert(uri.clone(), refused(why));
        }
        subscribed.uris = accepted;
        let follower = tokio::spawn(follow(stream, self.resources_weak()));
        if let Some(old) = subscribed.listen.replace(follower) {
            old.abort();
        }
        Ok(())
    }

    /// Drops the URIs nobody asked about for the watch's idle time, with their subscriptions on
    /// the connection they were made on (a connection that is gone holds none).
    async fn sweep_idle(&self, timeout: Duration) {
        let watch = &self.resources;
        let mut subscribed = watch.subscribed.lock().await;
        let expired = watch
            .table
            .lock()
            .unwrap()
            .expire(Instant::now(), watch.idle);
        let conn = subscribed.conn.as_ref().and_then(Weak::upgrade);
        let (false, Some(conn)) = (expired.is_empty(), conn) else {
            return;
        };
        let mut errors = Map::new();
        let dropped = if era::Upstream::of(conn.peer()).modern {
            self.listen_for(&conn, &mut subscribed, &mut errors, timeout)
                .await
        } else {
            self.subscribe_each(&conn, &mut subscribed, expired, &mut errors, timeout)
                .await
        };
        if let Err(e) = dropped {
            tracing::debug!(service = %self.service, error = %e, "dropping idle resource subscriptions");
        }
    }

    /// One request on `conn` (with its era's `_meta`), its result as written.
    async fn request_on(
        &self,
        conn: &Connection,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        let mut options = rmcp::service::PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        options.meta = era::request_meta(era::Upstream::of(conn.peer()), false);
        let request = rmcp::model::ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(
            method,
            Some(params),
        ));
        self.send_as_written(conn, request, options).await
    }

    fn resources_weak(&self) -> Weak<ResourceWatch> {
        Arc::downgrade(&self.resources)
    }
}

/// How many sweeps run per idle time: a URI stays watched at most a fifth longer than it.
const SWEEPS_PER_IDLE: u32 = 5;

/// Drops idle URIs every `every` (R-PRX-34: a URI nobody asked about for 5 minutes is
/// dropped, also when nobody asks anything), until the client is gone.
async fn sweep(client: Weak<UpstreamClient>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(client) = client.upgrade() else {
            return;
        };
        client.sweep_idle(every.max(Duration::from_secs(1))).await;
    }
}

/// Reads a listen stream's updates into the table until it ends.
async fn follow(mut stream: rmcp::service::Subscription, watch: Weak<ResourceWatch>) {
    while let Ok(Some(notification)) = stream.next().await {
        let Some(watch) = watch.upgrade() else { return };
        if let ServerNotification::ResourceUpdatedNotification(update) = notification {
            watch.updated(&update.params.uri);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy stdio upstream that serves resource subscriptions and writes each request it
    /// gets to the file named by its first argument.
    const SUBSCRIBABLE: &str = r#"
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$1"
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"server/discover"'*) printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}\n' "$id" ;;
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"legacy","version":"1"}}}\n' "$id" ;;
    *'"resources/'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done
"#;

    fn asking(uris: &[&str], released: &[&str]) -> VersionsAsk {
        VersionsAsk {
            uris: uris.iter().map(|u| (*u).to_owned()).collect(),
            caller: "alice".into(),
            released: released.iter().map(|u| (*u).to_owned()).collect(),
        }
    }

    fn legacy_client(log: &std::path::Path) -> UpstreamClient {
        let args = vec!["-c".into(), SUBSCRIBABLE.into(), "sh".into()];
        let args = [args, vec![log.to_string_lossy().into_owned()]].concat();
        let transport = crate::config::TransportConfig::stdio("sh", args);
        UpstreamClient::new("legacy", transport)
    }

    #[tokio::test]
    async fn a_uri_its_last_holder_releases_is_unsubscribed_upstream_at_once() {
        let log = std::env::temp_dir().join(format!("released-{}.jsonl", new_epoch()));
        let client = Arc::new(legacy_client(&log));
        let wait = Duration::from_secs(30);
        let asked = client
            .resource_versions(&asking(&["a://1"], &[]), wait)
            .await;
        assert!(asked.unwrap()["versions"]["a://1"].is_string());
        let requests = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!requests().contains(r#""resources/unsubscribe""#));
        let released = client
            .resource_versions(&asking(&[], &["a://1"]), wait)
            .await;
        assert_eq!(released.unwrap()["versions"], json!({}));
        let sent = requests();
        assert!(sent.contains(r#""resources/unsubscribe""#), "{sent}");
        assert!(client.resources.table.lock().unwrap().uris().is_empty());
        let _ = std::fs::remove_file(&log);
        client.close().await;
    }

    #[tokio::test]
    async fn a_uri_nobody_asks_about_is_unsubscribed_upstream_after_the_idle_time() {
        let log = std::env::temp_dir().join(format!("subscribable-{}.jsonl", new_epoch()));
        let mut client = legacy_client(&log);
        let idle = Duration::from_millis(500);
        Arc::get_mut(&mut client.resources).unwrap().idle = idle;
        let client = Arc::new(client);
        let asked = client
            .resource_versions(&asking(&["a://1"], &[]), Duration::from_secs(30))
            .await
            .unwrap();
        assert!(asked["versions"]["a://1"].is_string(), "{asked}");
        let requests = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            requests().contains(r#""resources/subscribe""#),
            "{}",
            requests()
        );
        // Nobody asks again: the sweep drops it within the idle time and a sweep.
        tokio::time::sleep(idle * 2).await;
        let sent = requests();
        assert!(sent.contains(r#""resources/unsubscribe""#), "{sent}");
        assert!(client.resources.table.lock().unwrap().uris().is_empty());
        let _ = std::fs::remove_file(&log);
        client.close().await;
    }
}
