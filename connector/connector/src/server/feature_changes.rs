//! Resource and prompt list changes reach connected callers like tool-list changes (R-CON-42):
//! a route's resource, resource template or prompt list that differs from its last good one
//! (whatever asked for it) moves the connector's resources or prompts version, which sessions
//! and `subscriptions/listen` streams follow (`list_changed`). Each replica keeps its own.

use std::{collections::HashMap, sync::Mutex};

use serde_json::Value;
use tokio::sync::watch;

use durable_mcp_contract::features::{Feature, LIST_PROMPTS};

/// The lists a change of which callers are told: resources (and templates), prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Category {
    Resources,
    Prompts,
}

impl Category {
    /// The category a list `feature` belongs to.
    pub(super) fn of(feature: Feature) -> Self {
        if feature == LIST_PROMPTS {
            Self::Prompts
        } else {
            Self::Resources
        }
    }
}

/// The connector's resources and prompts versions, and each route's last good lists.
#[derive(Debug)]
pub(super) struct FeatureChanges {
    resources: watch::Sender<u64>,
    prompts: watch::Sender<u64>,
    /// By (route index, list method): the last good list. By route, not service: two routes
    /// may name one service on different endpoints, with different lists.
    last: Mutex<HashMap<(usize, &'static str), Value>>,
}

impl Default for FeatureChanges {
    fn default() -> Self {
        Self {
            resources: watch::channel(0).0,
            prompts: watch::channel(0).0,
            last: Mutex::default(),
        }
    }
}

impl FeatureChanges {
    fn version(&self, category: Category) -> &watch::Sender<u64> {
        match category {
            Category::Resources => &self.resources,
            Category::Prompts => &self.prompts,
        }
    }

    /// A receiver of `category`'s version.
    pub(super) fn subscribe(&self, category: Category) -> watch::Receiver<u64> {
        self.version(category).subscribe()
    }

    /// Whether anyone follows `category`'s version.
    pub(super) fn followed(&self, category: Category) -> bool {
        self.version(category).receiver_count() > 0
    }

    /// Route `route` (its index) answered `feature`'s list with `list`: its version moves when
    /// that differs from the route's last good list (a first list changes nothing).
    pub(super) fn saw(&self, route: usize, feature: Feature, list: &Value) {
        let key = (route, feature.method);
        let previous = self.last.lock().unwrap().insert(key, list.clone());
        if list_changed(previous.as_ref(), list) {
            self.version(Category::of(feature)).send_modify(|v| *v += 1);
        }
    }
}

/// Whether a route's new list changes what callers were told: a list after a good one that
/// differs from it (every field compared, item order included).
pub fn list_changed(last_good: Option<&Value>, new: &Value) -> bool {
    last_good.is_some_and(|old| old != new)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use durable_mcp_contract::features::{LIST_RESOURCE_TEMPLATES, LIST_RESOURCES};

    #[test]
    fn a_routes_list_that_differs_from_its_last_good_one_moves_its_category() {
        let changes = FeatureChanges::default();
        let resources = changes.subscribe(Category::Resources);
        let prompts = changes.subscribe(Category::Prompts);
        let one = json!({"resources": [{"uri": "a://1"}]});
        changes.saw(0, LIST_RESOURCES, &one);
        changes.saw(1, LIST_RESOURCES, &json!({"resources": []}));
        assert_eq!(*resources.borrow(), 0, "first lists change nothing");
        changes.saw(0, LIST_RESOURCES, &one);
        assert_eq!(*resources.borrow(), 0, "the same list is no change");
        changes.saw(0, LIST_RESOURCES, &json!({"resources": []}));
        assert_eq!(*resources.borrow(), 1);
        changes.saw(
            0,
            LIST_RESOURCE_TEMPLATES,
            &json!({"resourceTemplates": []}),
        );
        changes.saw(
            0,
            LIST_RESOURCE_TEMPLATES,
            &json!({"resourceTemplates": [{}]}),
        );
        assert_eq!(*resources.borrow(), 2, "templates are resources");
        changes.saw(0, LIST_PROMPTS, &json!({"prompts": []}));
        changes.saw(0, LIST_PROMPTS, &json!({"prompts": [{"name": "p"}]}));
        assert_eq!((*resources.borrow(), *prompts.borrow()), (2, 1));
        // Two routes of one service (on two endpoints) with different lists: each is compared
        // with its own last good list, so listing both again and again changes nothing.
        let one_service = FeatureChanges::default();
        let versions = one_service.subscribe(Category::Resources);
        for _ in 0..3 {
            one_service.saw(0, LIST_RESOURCES, &one);
            one_service.saw(1, LIST_RESOURCES, &json!({"resources": []}));
        }
        assert_eq!(*versions.borrow(), 0, "routes are told apart by index");
    }
}
