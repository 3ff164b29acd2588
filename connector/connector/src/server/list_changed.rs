//! Tool-list changes reach connected callers (R-CON-42). Each replica notices on its own: a
//! route's listing that differs from its last good one (any listing: a caller's `tools/list`,
//! a call of an unknown tool, or the re-listing below) moves the connector's tools version, and
//! every session told about it gets `notifications/tools/list_changed`. While a caller
//! listens, the connector re-lists its routes every `--list-changed-poll` (at least
//! [`MIN_RELIST_PERIOD`]; `0s` never), so a change shows without anyone asking; no table is
//! shared between replicas. Resource and prompt list changes go the same way (`feature_changes`).

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use rmcp::{
    Peer, RoleServer,
    model::{ServerNotification, SubscriptionFilter},
    service::SubscriptionContext,
};
use serde_json::Value;
use tokio::sync::watch;

use super::{
    Connector, Inner, feature_changes::Category, resource_subscriptions::MAX_URIS_PER_SUBSCRIBER,
    subscriptions::Notify,
};
use durable_mcp_contract::features::{LIST_PROMPTS, LIST_RESOURCE_TEMPLATES, LIST_RESOURCES};

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
    /// Starts the re-listing task for listeners, once (never with `--list-changed-poll 0s`).
    fn start_relisting(&self) {
        self.inner.tool_changes.relisting.call_once(|| {
            if let Some(period) = relist_period(self.inner.options.list_changed_poll) {
                tokio::spawn(relist(Arc::downgrade(&self.inner), period));
            }
        });
    }

    /// A receiver of the tools version, with the re-listing task running.
    fn tool_changes(&self) -> watch::Receiver<u64> {
        self.start_relisting();
        self.inner.tool_changes.version.subscribe()
    }

    /// A receiver of the resources or prompts version, with the re-listing task running.
    fn feature_changes(&self, category: Category) -> watch::Receiver<u64> {
        self.start_relisting();
        self.inner.feature_changes.subscribe(category)
    }

    /// Tells the session behind `peer` of every tool, resource and prompt list change until it
    /// goes away.
    pub(super) fn follow_for_session(&self, peer: Peer<RoleServer>) {
        let mut tools = self.tool_changes();
        let mut resources = self.feature_changes(Category::Resources);
        let mut prompts = self.feature_changes(Category::Prompts);
        tokio::spawn(async move {
            loop {
                let told = tokio::select! {
                    changed = tools.changed() => changed.is_ok()
                        && peer.notify_tool_list_changed().await.is_ok(),
                    changed = resources.changed() => changed.is_ok()
                        && peer.notify_resource_list_changed().await.is_ok(),
                    changed = prompts.changed() => changed.is_ok()
                        && peer.notify_prompt_list_changed().await.is_ok(),
                    _ = tokio::time::sleep(GONE_CHECK) => !peer.is_transport_closed(),
                };
                if !told {
                    return;
                }
            }
        });
    }

    /// Runs a 2026-07-28 `subscriptions/listen` stream: each list change of a category the
    /// caller asked for (tools, resources, prompts) is sent on it until the caller cancels it.
    pub(super) async fn listen_for_changes(&self, context: SubscriptionContext) {
        let accepted = context.accepted();
        let _subscribed = self.follow_resources(&context).await;
        let wants = |asked: Option<bool>| asked == Some(true);
        let (want_tools, want_resources, want_prompts) = (
            wants(accepted.tools_list_changed),
            wants(accepted.resources_list_changed),
            wants(accepted.prompts_list_changed),
        );
        if !(want_tools || want_resources || want_prompts) {
            return context.cancelled().await;
        }
        let mut tools = self.tool_changes();
        let mut resources = self.feature_changes(Category::Resources);
        let mut prompts = self.feature_changes(Category::Prompts);
        loop {
            let notice = tokio::select! {
                _ = context.cancelled() => return,
                changed = tools.changed(), if want_tools => changed.map(|_| {
                    ServerNotification::ToolListChangedNotification(Default::default())
                }),
                changed = resources.changed(), if want_resources => changed.map(|_| {
                    ServerNotification::ResourceListChangedNotification(Default::default())
                }),
                changed = prompts.changed(), if want_prompts => changed.map(|_| {
                    ServerNotification::PromptListChangedNotification(Default::default())
                }),
            };
            let Ok(notice) = notice else { return };
            if context.sink().send(notice).await.is_err() {
                return;
            }
        }
    }
}

/// A listen stream's resource subscriptions, which end when it is dropped.
struct Subscribed(Connector, Option<u64>);

impl Drop for Subscribed {
    fn drop(&mut self) {
        if let Some(id) = self.1 {
            self.0.leave_subscribers(id);
        }
    }
}

impl Connector {
    /// Subscribes the stream to the resources it asked for and was granted (R-CON-49); a URI
    /// that cannot be subscribed to (no route serves it, its upstream refuses) gets no updates.
    async fn follow_resources(&self, context: &SubscriptionContext) -> Subscribed {
        let uris = context.accepted().resource_subscriptions.clone();
        let Some(uris) = uris.filter(|u| !u.is_empty()) else {
            return Subscribed(self.clone(), None);
        };
        let id = self.join_subscribers(Notify::Listener(context.sink().clone()));
        for uri in uris {
            if let Err(e) = self.subscribe_resource(id, &uri).await {
                tracing::debug!(uri, error = %e.message, "a listener's resource subscription");
            }
        }
        Subscribed(self.clone(), Some(id))
    }
}

/// What the connector offers on a `subscriptions/listen` stream: tool-list changes, and
/// resource and prompt list changes when a route declares them (`declared`: the union of the
/// routes' capabilities); with `resources` (when it serves subscriptions, R-CON-49), the
/// resource subscriptions requested there, at most [`MAX_URIS_PER_SUBSCRIBER`] of them.
pub fn offered_subscriptions(
    declared: &serde_json::Map<String, Value>,
    resources: Option<&SubscriptionFilter>,
) -> SubscriptionFilter {
    let mut offered = SubscriptionFilter::builder().tools_list_changed().build();
    offered.resource_subscriptions = resources
        .and_then(|r| r.resource_subscriptions.as_ref())
        .map(|uris| uris.iter().take(MAX_URIS_PER_SUBSCRIBER).cloned().collect());
    if declared.contains_key("resources") {
        offered.resources_list_changed = Some(true);
    }
    if declared.contains_key("prompts") {
        offered.prompts_list_changed = Some(true);
    }
    offered
}

/// How often listeners' re-listing runs for `--list-changed-poll`: never for zero, else at
/// least [`MIN_RELIST_PERIOD`].
pub fn relist_period(poll: Duration) -> Option<Duration> {
    (!poll.is_zero()).then(|| poll.max(MIN_RELIST_PERIOD))
}

/// Re-lists every route each `period` while someone listens, until the connector is gone:
/// its tools for tool listeners, its resource, template and prompt lists for theirs (when a
/// route declares them).
async fn relist(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let tools = inner.tool_changes.version.receiver_count() > 0;
        let features = inner.feature_changes.followed();
        if !tools && !features {
            continue;
        }
        let connector = Connector::of(inner);
        if tools && let Err(e) = connector.refresh_tools().await {
            tracing::debug!(error = %e.message, "re-listing the routes for listeners");
        }
        if features {
            relist_features(&connector).await;
        }
    }
}

/// Lists the routes' resources, templates and prompts, where a route declares them, so that
/// a change moves their version.
async fn relist_features(connector: &Connector) {
    let declared = connector.inner.declared.union();
    for feature in [LIST_RESOURCES, LIST_RESOURCE_TEMPLATES, LIST_PROMPTS] {
        if !declared.contains_key(feature.capability) {
            continue;
        }
        if let Err(e) = connector.merged_list(feature).await {
            tracing::debug!(error = %e.message, method = feature.method, "re-listing for listeners");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_poll_period_is_at_least_a_second_and_zero_turns_it_off() {
        assert_eq!(relist_period(Duration::ZERO), None);
        let ms = Duration::from_millis;
        assert_eq!(relist_period(ms(10)), Some(MIN_RELIST_PERIOD));
        assert_eq!(relist_period(ms(60_000)), Some(ms(60_000)));
    }

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
