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
    Connector, Inner,
    feature_changes::{Category, FeatureChanges},
    resource_subscriptions::MAX_URIS_PER_SUBSCRIBER,
    subscriptions::Notify,
};
use durable_mcp_contract::features::{
    Feature, LIST_PROMPTS, LIST_RESOURCE_TEMPLATES, LIST_RESOURCES,
};

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

/// Which list changes someone follows, or a listener asked for: only those are re-listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Kinds {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
}

impl Kinds {
    const ALL: Self = Self {
        tools: true,
        resources: true,
        prompts: true,
    };

    fn any(self) -> bool {
        self.tools || self.resources || self.prompts
    }
}

/// A follower's receivers of the versions of the kinds it follows; none for the others, so
/// that they are not re-listed on its behalf.
struct Receivers {
    tools: Option<watch::Receiver<u64>>,
    resources: Option<watch::Receiver<u64>>,
    prompts: Option<watch::Receiver<u64>>,
}

impl Receivers {
    fn of(tools: &ToolChanges, features: &FeatureChanges, kinds: Kinds) -> Self {
        Self {
            tools: kinds.tools.then(|| tools.version.subscribe()),
            resources: kinds
                .resources
                .then(|| features.subscribe(Category::Resources)),
            prompts: kinds.prompts.then(|| features.subscribe(Category::Prompts)),
        }
    }
}

/// The kinds someone follows now: those with a receiver alive.
fn followed(tools: &ToolChanges, features: &FeatureChanges) -> Kinds {
    Kinds {
        tools: tools.version.receiver_count() > 0,
        resources: features.followed(Category::Resources),
        prompts: features.followed(Category::Prompts),
    }
}

/// The lists re-listed for the kinds `followed`, where a route declares them (`declared`):
/// resources and templates for resource followers, prompts for prompt followers.
fn features_to_relist(followed: Kinds, declared: &serde_json::Map<String, Value>) -> Vec<Feature> {
    let wanted = [
        (LIST_RESOURCES, followed.resources),
        (LIST_RESOURCE_TEMPLATES, followed.resources),
        (LIST_PROMPTS, followed.prompts),
    ];
    wanted
        .into_iter()
        .filter(|(feature, wanted)| *wanted && declared.contains_key(feature.capability))
        .map(|(feature, _)| feature)
        .collect()
}

/// The next change of a followed version; never for a kind not followed.
async fn changed(
    receiver: &mut Option<watch::Receiver<u64>>,
) -> Result<(), watch::error::RecvError> {
    match receiver {
        Some(receiver) => receiver.changed().await,
        None => std::future::pending().await,
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

    /// Receivers of the versions of `kinds`, with the re-listing task running.
    fn changes(&self, kinds: Kinds) -> Receivers {
        self.start_relisting();
        Receivers::of(&self.inner.tool_changes, &self.inner.feature_changes, kinds)
    }

    /// Tells the session behind `peer` of every tool, resource and prompt list change until it
    /// goes away.
    pub(super) fn follow_for_session(&self, peer: Peer<RoleServer>) {
        let Receivers {
            mut tools,
            mut resources,
            mut prompts,
        } = self.changes(Kinds::ALL);
        tokio::spawn(async move {
            loop {
                let told = tokio::select! {
                    changed = changed(&mut tools) => changed.is_ok()
                        && peer.notify_tool_list_changed().await.is_ok(),
                    changed = changed(&mut resources) => changed.is_ok()
                        && peer.notify_resource_list_changed().await.is_ok(),
                    changed = changed(&mut prompts) => changed.is_ok()
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
    /// It follows only those, so only those are re-listed for it.
    pub(super) async fn listen_for_changes(&self, context: SubscriptionContext) {
        let accepted = context.accepted();
        let _subscribed = self.follow_resources(&context).await;
        let wants = |asked: Option<bool>| asked == Some(true);
        let kinds = Kinds {
            tools: wants(accepted.tools_list_changed),
            resources: wants(accepted.resources_list_changed),
            prompts: wants(accepted.prompts_list_changed),
        };
        if !kinds.any() {
            return context.cancelled().await;
        }
        let Receivers {
            mut tools,
            mut resources,
            mut prompts,
        } = self.changes(kinds);
        loop {
            let notice = tokio::select! {
                _ = context.cancelled() => return,
                changed = changed(&mut tools) => changed.map(|_| {
                    ServerNotification::ToolListChangedNotification(Default::default())
                }),
                changed = changed(&mut resources) => changed.map(|_| {
                    ServerNotification::ResourceListChangedNotification(Default::default())
                }),
                changed = changed(&mut prompts) => changed.map(|_| {
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
    /// Subscribes the stream to the resources it was granted (R-CON-49). rmcp acknowledged the
    /// stream before this runs, and an update before a URI's baseline token would be lost, so
    /// each subscribed URI gets one `notifications/resources/updated` once its baseline is
    /// known (a spurious hint is harmless, a missed one is not). A URI its upstream then refuses
    /// gets no updates, which is logged.
    async fn follow_resources(&self, context: &SubscriptionContext) -> Subscribed {
        let uris = context.accepted().resource_subscriptions.clone();
        let Some(uris) = uris.filter(|u| !u.is_empty()) else {
            return Subscribed(self.clone(), None);
        };
        let notify = Notify::Listener(context.sink().clone());
        let share = super::scope::request_share(context.request_context());
        let id = self.join_subscribers(notify.clone(), share.clone());
        for uri in uris {
            match self.subscribe_resource(id, &uri, share.as_ref()).await {
                Ok(()) => {
                    notify.updated(&uri).await;
                }
                Err(e) => tracing::warn!(uri, error = %e.message,
                    "an acknowledged resource subscription of a listen stream failed; it gets no updates"),
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
/// its tools for tool listeners, its resource and template lists for resource listeners, its
/// prompt lists for prompt listeners (when a route declares them); nothing a listener did not
/// ask for.
async fn relist(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let followed = followed(&inner.tool_changes, &inner.feature_changes);
        if !followed.any() {
            continue;
        }
        let connector = Connector::of(inner);
        if followed.tools
            && let Err(e) = connector.refresh_tools().await
        {
            tracing::debug!(error = %e.message, "re-listing the routes for listeners");
        }
        if followed.resources || followed.prompts {
            relist_features(&connector, followed).await;
        }
    }
}

/// Lists the routes' lists of the kinds `followed`, where a route declares them, so that a
/// change moves their version.
async fn relist_features(connector: &Connector, followed: Kinds) {
    let declared = connector.inner.declared.union();
    for feature in features_to_relist(followed, &declared) {
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

    /// A listener that asked for tool changes only makes the connector re-list tools only;
    /// resource and prompt listers are re-listed only for kinds someone follows.
    #[test]
    fn only_the_kinds_a_listener_asked_for_are_relisted() {
        let (tools, features) = (ToolChanges::default(), FeatureChanges::default());
        assert_eq!(followed(&tools, &features), Kinds::default());
        let declared = json!({"resources": {}, "prompts": {}, "tools": {}});
        let declared = declared.as_object().unwrap();
        let only_tools = Kinds {
            tools: true,
            ..Kinds::default()
        };
        let listener = Receivers::of(&tools, &features, only_tools);
        assert_eq!(followed(&tools, &features), only_tools);
        assert!(features_to_relist(followed(&tools, &features), declared).is_empty());
        let prompts = Kinds {
            prompts: true,
            ..Kinds::default()
        };
        let prompt_listener = Receivers::of(&tools, &features, prompts);
        assert_eq!(
            features_to_relist(followed(&tools, &features), declared),
            vec![LIST_PROMPTS]
        );
        drop((listener, prompt_listener));
        assert_eq!(followed(&tools, &features), Kinds::default());
        let session = Receivers::of(&tools, &features, Kinds::ALL);
        assert_eq!(followed(&tools, &features), Kinds::ALL);
        assert_eq!(
            features_to_relist(Kinds::ALL, declared),
            vec![LIST_RESOURCES, LIST_RESOURCE_TEMPLATES, LIST_PROMPTS]
        );
        let only_prompts_declared = json!({"prompts": {}});
        assert_eq!(
            features_to_relist(Kinds::ALL, only_prompts_declared.as_object().unwrap()),
            vec![LIST_PROMPTS],
            "a list no route declares is not asked"
        );
        drop(session);
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
