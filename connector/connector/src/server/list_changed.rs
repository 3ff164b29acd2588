//! Tool-list changes reach connected callers (R-CON-42). Each replica notices on its own: a
//! route's listing that differs from its last good one (any listing: a caller's `tools/list`,
//! a call of an unknown tool, or the re-listing below) moves the connector's tools version, and
//! every session told about it gets `notifications/tools/list_changed`. While a caller
//! listens, the connector re-lists its routes every `--list-cache` (at least
//! [`MIN_RELIST_PERIOD`]), so a change shows without anyone asking; no table is shared between
//! replicas.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use rmcp::{
    Peer, RoleServer,
    model::{ServerNotification, SubscriptionFilter, ToolListChangedNotification},
    service::SubscriptionContext,
};
use serde_json::Value;
use tokio::sync::watch;

use super::{Connector, Inner};

/// The least time between two re-listings for listeners.
pub const MIN_RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How often a listener whose session went away without a change is noticed and dropped.
const GONE_CHECK: Duration = Duration::from_secs(5);

/// Whether a route's new listing changes its tools: a listing after a good one that differs
/// from it (tool order included). A first listing changes nothing a caller was told.
pub fn tools_changed(last_good: Option<&Vec<Value>>, new: &[Value]) -> bool {
    last_good.is_some_and(|old| old.as_slice() != new)
}

/// The connector's tools version and its re-listing task.
#[derive(Debug)]
pub(super) struct ToolChanges {
    version: watch::Sender<u64>,
    relisting: std::sync::Once,
}

impl Default for ToolChanges {
    fn default() -> Self {
        Self {
            version: watch::channel(0).0,
            relisting: std::sync::Once::new(),
        }
    }
}

impl ToolChanges {
    /// A route's tools changed.
    pub(super) fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }
}

impl Connector {
    /// A receiver of the tools version, with the re-listing task running.
    fn tool_changes(&self) -> watch::Receiver<u64> {
        let changes = &self.inner.tool_changes;
        changes.relisting.call_once(|| {
            let period = self.inner.options.list_cache.max(MIN_RELIST_PERIOD);
            tokio::spawn(relist(Arc::downgrade(&self.inner), period));
        });
        changes.version.subscribe()
    }

    /// Tells the session behind `peer` of every tool-list change until it goes away.
    pub(super) fn follow_for_session(&self, peer: Peer<RoleServer>) {
        let mut changes = self.tool_changes();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    _ = tokio::time::sleep(GONE_CHECK) => {
                        if peer.is_transport_closed() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// Runs a 2026-07-28 `subscriptions/listen` stream: a tool-list change is sent on it, when
    /// the caller asked for them, until the caller cancels it.
    pub(super) async fn listen_for_changes(&self, context: SubscriptionContext) {
        if context.accepted().tools_list_changed != Some(true) {
            return context.cancelled().await;
        }
        let mut changes = self.tool_changes();
        loop {
            tokio::select! {
                _ = context.cancelled() => return,
                changed = changes.changed() => {
                    let notice = ServerNotification::ToolListChangedNotification(
                        ToolListChangedNotification::default(),
                    );
                    if changed.is_err() || context.sink().send(notice).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// What the connector offers on a `subscriptions/listen` stream: tool-list changes.
pub fn offered_subscriptions() -> SubscriptionFilter {
    SubscriptionFilter::builder().tools_list_changed().build()
}

/// Re-lists every route each `period` while someone listens, until the connector is gone.
async fn relist(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.tool_changes.version.receiver_count() == 0 {
            continue;
        }
        let connector = Connector {
            inner,
            log_level: Default::default(),
            keyed_calls: Default::default(),
        };
        if let Err(e) = connector.refresh_tools().await {
            tracing::debug!(error = %e.message, "re-listing the routes for listeners");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_listing_that_differs_from_the_last_good_one_is_a_change() {
        let old = vec![json!({"name": "a"})];
        assert!(!tools_changed(None, &old));
        assert!(!tools_changed(Some(&old), &old.clone()));
        assert!(tools_changed(
            Some(&old),
            &[json!({"name": "a"}), json!({"name": "b"})]
        ));
        assert!(tools_changed(
            Some(&old),
            &[json!({"name": "a", "title": "A"})]
        ));
        assert!(tools_changed(Some(&old), &[]));
    }
}
