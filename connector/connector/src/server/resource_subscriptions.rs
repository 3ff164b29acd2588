//! Who subscribes to which resource, and whether a route's version token moved (R-CON-49):
//! the pure parts of the connector's resource subscriptions.
//!
//! - [`Registry`]: each subscriber (a session, or a 2026-07-28 listen stream) and the URIs it
//!   subscribes to, each with the route serving it; at most [`MAX_URIS_PER_SUBSCRIBER`] per
//!   subscriber, [`MAX_URIS_PER_CALLER`] per caller across its sessions and streams, and
//!   [`MAX_SUBSCRIPTIONS`] in all, so no caller grows the connector's memory without bound or
//!   takes the proxy's watched URIs (R-PRX-34) from everyone.
//! - [`Seen`]: per route and URI, the tokens seen of each proxy epoch (R-PRX-34). A token of a
//!   known epoch whose serial moved is an update; one of a new epoch (the proxy reconnected to
//!   its upstream, or another proxy replica answered) is an update too, once, unless it is the
//!   first token seen: the spec makes `notifications/resources/updated` a hint to read again, so
//!   one spurious hint is harmless and a missed update is not.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::fair::Share;
use durable_mcp_contract::features::{parse_version_token, template_matches};
use serde_json::Value;

/// The most URIs one subscriber (a session, or a listen stream) subscribes to.
pub const MAX_URIS_PER_SUBSCRIBER: usize = 100;
/// The most URIs one caller (R-CON-38's share: its token subject, else its address) subscribes
/// to across its sessions and streams: a fifth of what the proxy watches per upstream.
pub const MAX_URIS_PER_CALLER: usize = 200;
/// The most subscriptions the connector keeps in all.
pub const MAX_SUBSCRIPTIONS: usize = 10_000;
/// The most proxy epochs remembered per resource (proxy replicas and reconnections).
const EPOCHS_KEPT: usize = 8;

/// See the module.
#[derive(Debug)]
pub struct Registry<N> {
    next: u64,
    total: usize,
    subscribers: HashMap<u64, Subscriber<N>>,
    /// Subscriptions per caller, across its subscribers.
    callers: HashMap<Share, usize>,
}

#[derive(Debug)]
struct Subscriber<N> {
    notify: N,
    /// Whose share it counts in (none over stdio: one caller).
    caller: Option<Share>,
    /// URI -> index of the route serving it.
    uris: BTreeMap<String, usize>,
}

impl<N> Default for Registry<N> {
    fn default() -> Self {
        Self {
            next: 0,
            total: 0,
            subscribers: HashMap::new(),
            callers: HashMap::new(),
        }
    }
}

impl<N: Clone> Registry<N> {
    /// A new subscriber of `caller`, told of updates through `notify`.
    pub fn join(&mut self, notify: N, caller: Option<Share>) -> u64 {
        self.next += 1;
        let uris = BTreeMap::new();
        let subscriber = Subscriber {
            notify,
            caller,
            uris,
        };
        self.subscribers.insert(self.next, subscriber);
        self.next
    }

    /// Whether subscriber `id` is still here.
    pub fn has(&self, id: u64) -> bool {
        self.subscribers.contains_key(&id)
    }

    /// `caller`'s count moves by `added` subscriptions (negative: fewer).
    fn count(&mut self, caller: Option<&Share>, added: isize) {
        self.total = self.total.saturating_add_signed(added);
        let Some(caller) = caller else { return };
        let held = self.callers.entry(caller.clone()).or_default();
        *held = held.saturating_add_signed(added);
        if *held == 0 {
            self.callers.remove(caller);
        }
    }

    /// Subscribes `id` to `uri` (served by `route`): whether it is a new subscription
    /// (subscribing again to a URI is none), or an error saying why when a cap is reached.
    pub fn add(&mut self, id: u64, uri: &str, route: usize) -> Result<bool, String> {
        let Some(subscriber) = self.subscribers.get_mut(&id) else {
            return Err("the subscriber is gone".into());
        };
        if subscriber.uris.contains_key(uri) {
            return Ok(false);
        }
        if subscriber.uris.len() >= MAX_URIS_PER_SUBSCRIBER {
            return Err(format!(
                "a caller subscribes to at most {MAX_URIS_PER_SUBSCRIBER} resources at once; \
                 unsubscribe from one first"
            ));
        }
        let caller = subscriber.caller.clone();
        if caller
            .as_ref()
            .is_some_and(|c| self.callers.get(c).copied().unwrap_or(0) >= MAX_URIS_PER_CALLER)
        {
            return Err(format!(
                "a caller subscribes to at most {MAX_URIS_PER_CALLER} resources across its \
                 sessions and streams; unsubscribe from one first, or try again later"
            ));
        }
        if self.total >= MAX_SUBSCRIPTIONS {
            return Err(format!(
                "the connector holds {MAX_SUBSCRIPTIONS} resource subscriptions, its most; \
                 try again later"
            ));
        }
        if let Some(subscriber) = self.subscribers.get_mut(&id) {
            subscriber.uris.insert(uri.to_owned(), route);
        }
        self.count(caller.as_ref(), 1);
        Ok(true)
    }

    /// Unsubscribes `id` from `uri`; whether it was subscribed.
    pub fn remove(&mut self, id: u64, uri: &str) -> bool {
        let Some(subscriber) = self.subscribers.get_mut(&id) else {
            return false;
        };
        let removed = subscriber.uris.remove(uri).is_some();
        let caller = subscriber.caller.clone();
        if removed {
            self.count(caller.as_ref(), -1);
        }
        removed
    }

    /// Ends every subscription to `uri` on `route`; how many there were.
    pub fn remove_everywhere(&mut self, route: usize, uri: &str) -> usize {
        let ids: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(_, s)| s.uris.get(uri) == Some(&route))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            self.remove(*id, uri);
        }
        ids.len()
    }

    /// The subscriber is gone, with its subscriptions.
    pub fn leave(&mut self, id: u64) {
        if let Some(gone) = self.subscribers.remove(&id) {
            let held = isize::try_from(gone.uris.len()).unwrap_or(isize::MAX);
            self.count(gone.caller.as_ref(), -held);
        }
    }

    /// Drops every subscriber `gone` says is gone; the releases to tell the proxy.
    pub fn leave_if(&mut self, gone: impl Fn(&N) -> bool) -> Vec<Released> {
        let left: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(_, s)| gone(&s.notify))
            .map(|(id, _)| *id)
            .collect();
        left.into_iter()
            .flat_map(|id| self.leave_releasing(id))
            .collect()
    }

    /// The subscribed URIs by route: what one poll asks.
    pub fn by_route(&self) -> BTreeMap<usize, BTreeSet<String>> {
        let mut routes: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for subscriber in self.subscribers.values() {
            for (uri, route) in &subscriber.uris {
                routes.entry(*route).or_default().insert(uri.clone());
            }
        }
        routes
    }

    /// The subscribers of `uri` on `route`, to tell of an update.
    pub fn subscribers_of(&self, route: usize, uri: &str) -> Vec<(u64, N)> {
        self.subscribers
            .iter()
            .filter(|(_, s)| s.uris.get(uri) == Some(&route))
            .map(|(id, s)| (*id, s.notify.clone()))
            .collect()
    }
}

/// A subscription whose end the proxy is told of (R-PRX-36): the last one of its caller to
/// `uri` on `route` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub route: usize,
    pub caller: Option<Share>,
    pub uri: String,
}

impl<N> Registry<N> {
    /// Whether a subscriber of `caller` subscribes to `uri` on `route`.
    fn held(&self, caller: &Option<Share>, route: usize, uri: &str) -> bool {
        self.subscribers
            .values()
            .any(|s| s.caller == *caller && s.uris.get(uri) == Some(&route))
    }

    /// `released` (URI, route) of `caller`, less those another of its subscribers still holds.
    fn releases(&self, caller: &Option<Share>, released: Vec<(String, usize)>) -> Vec<Released> {
        released
            .into_iter()
            .filter(|(uri, route)| !self.held(caller, *route, uri))
            .map(|(uri, route)| Released {
                route,
                caller: caller.clone(),
                uri,
            })
            .collect()
    }
}

impl<N: Clone> Registry<N> {
    /// Unsubscribes `id` from `uri`; the release to tell the proxy when it was its caller's
    /// last subscription to it (R-PRX-36).
    pub fn unsubscribe(&mut self, id: u64, uri: &str) -> Option<Released> {
        let subscriber = self.subscribers.get(&id)?;
        let (caller, route) = (subscriber.caller.clone(), *subscriber.uris.get(uri)?);
        self.remove(id, uri);
        self.releases(&caller, vec![(uri.to_owned(), route)]).pop()
    }

    /// The subscriber is gone, with its subscriptions; the releases to tell the proxy.
    pub fn leave_releasing(&mut self, id: u64) -> Vec<Released> {
        let Some(gone) = self.subscribers.get(&id) else {
            return Vec::new();
        };
        let caller = gone.caller.clone();
        let held: Vec<(String, usize)> = gone.uris.clone().into_iter().collect();
        self.leave(id);
        self.releases(&caller, held)
    }

    /// The subscribed URIs by route and caller: what one poll asks, each caller's in its share.
    pub fn by_route_and_caller(&self) -> HashMap<(usize, Option<Share>), BTreeSet<String>> {
        let mut asked: HashMap<(usize, Option<Share>), BTreeSet<String>> = HashMap::new();
        for subscriber in self.subscribers.values() {
            for (uri, route) in &subscriber.uris {
                let key = (*route, subscriber.caller.clone());
                asked.entry(key).or_default().insert(uri.clone());
            }
        }
        asked
    }
}

/// One route's lists: its index, its resource list and its template list, where known.
pub type RouteLists = (usize, Option<Value>, Option<Value>);

/// The route serving `uri` by the routes' lists, as `resources/read` finds it (R-CON-45): the
/// one route listing the resource, else the one route with a template matching it; `None` for
/// none or several. `lists`: per route index, its resource and template lists as answered
/// (`{"resources": [..]}`, `{"resourceTemplates": [..]}`), where known.
pub fn listed_route(uri: &str, lists: &[RouteLists]) -> Option<usize> {
    // The `field` text of each item of the list's `key` array (the lists are the routes'),
    // borrowed: a stream's acknowledgement asks this for each of its URIs.
    fn texts<'l>(
        list: &'l Option<Value>,
        key: &str,
        field: &'l str,
    ) -> impl Iterator<Item = &'l str> {
        let items = list.as_ref().and_then(|l| l.get(key)?.as_array());
        items
            .into_iter()
            .flatten()
            .filter_map(move |i| i.get(field)?.as_str())
    }
    let routes = |test: &dyn Fn(&RouteLists) -> bool| -> Vec<usize> {
        lists
            .iter()
            .filter(|l| test(l))
            .map(|(i, _, _)| *i)
            .collect()
    };
    let mut found = routes(&|(_, r, _)| texts(r, "resources", "uri").any(|u| u == uri));
    if found.is_empty() {
        found = routes(&|(_, _, t)| {
            texts(t, "resourceTemplates", "uriTemplate")
                .any(|t| t == uri || template_matches(t, uri))
        });
    }
    match found[..] {
        [only] => Some(only),
        _ => None,
    }
}

/// See the module.
#[derive(Debug, Default)]
pub struct Seen(HashMap<(usize, String), VecDeque<(String, u64)>>);

impl Seen {
    /// Records `token` for `uri` on `route`; whether it tells of an update.
    pub fn observe(&mut self, route: usize, uri: &str, token: &str) -> bool {
        let known = self.0.entry((route, uri.to_owned())).or_default();
        token_moved(known, token)
    }

    /// Forgets the URIs no longer subscribed.
    pub fn retain(&mut self, subscribed: &BTreeMap<usize, BTreeSet<String>>) {
        self.0
            .retain(|(route, uri), _| subscribed.get(route).is_some_and(|uris| uris.contains(uri)));
    }
}

/// Whether `token` tells of an update after the `known` tokens (per epoch, newest last), which
/// it joins. Text no proxy wrote counts as an epoch of its own.
pub fn token_moved(known: &mut VecDeque<(String, u64)>, token: &str) -> bool {
    let (epoch, serial) = parse_version_token(token).unwrap_or((token, 0));
    if let Some(entry) = known.iter_mut().find(|(e, _)| e == epoch) {
        let moved = entry.1 != serial;
        entry.1 = serial;
        return moved;
    }
    let first = known.is_empty();
    if known.len() >= EPOCHS_KEPT {
        known.pop_front();
    }
    known.push_back((epoch.to_owned(), serial));
    !first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_moves_within_its_epoch_and_a_new_epoch_is_one_update() {
        let mut seen = Seen::default();
        assert!(
            !seen.observe(0, "a://1", "e1.4"),
            "the first token is the baseline"
        );
        assert!(!seen.observe(0, "a://1", "e1.4"));
        assert!(seen.observe(0, "a://1", "e1.9"));
        assert!(
            seen.observe(0, "a://1", "e2.1"),
            "another replica or connection"
        );
        // Replicas answering in turn are not updates once each is known.
        assert!(!seen.observe(0, "a://1", "e1.9"));
        assert!(!seen.observe(0, "a://1", "e2.1"));
        assert!(
            !seen.observe(1, "a://1", "e1.1"),
            "another route is another resource"
        );
        let mut subscribed = BTreeMap::new();
        subscribed.insert(1, BTreeSet::from(["a://1".to_owned()]));
        seen.retain(&subscribed);
        assert!(
            !seen.observe(0, "a://1", "e1.10"),
            "forgotten: a baseline again"
        );
    }

    #[test]
    fn a_uri_is_served_by_the_one_route_listing_it_else_the_one_template_matching_it() {
        use serde_json::json;
        let listed = |uris: &[&str]| {
            let resources: Vec<Value> = uris.iter().map(|u| json!({"uri": u})).collect();
            Some(json!({"resources": resources}))
        };
        let templates = |t: &str| Some(json!({"resourceTemplates": [{"uriTemplate": t}]}));
        let lists = [
            (0, listed(&["a://1", "both://1"]), templates("t://{id}")),
            (1, listed(&["both://1"]), None),
            (2, None, templates("t://{id}")),
            (3, listed(&[]), templates("u://{id}")),
        ];
        assert_eq!(listed_route("a://1", &lists), Some(0));
        assert_eq!(listed_route("u://9", &lists), Some(3));
        assert_eq!(listed_route("both://1", &lists), None, "listed twice");
        assert_eq!(listed_route("t://9", &lists), None, "two templates match");
        assert_eq!(listed_route("nothing://1", &lists), None);
        assert_eq!(listed_route("a://1", &[]), None, "nothing listed yet");
    }

    #[test]
    fn one_caller_holds_a_bounded_number_of_subscriptions_across_its_sessions() {
        let mut registry = Registry::default();
        let caller = Some(Share::Address([10, 0, 0, 1].into()));
        let sessions: Vec<u64> = (0..3).map(|_| registry.join((), caller.clone())).collect();
        for i in 0..MAX_URIS_PER_CALLER {
            let session = sessions[i % sessions.len()];
            registry.add(session, &format!("u://{i}"), 0).unwrap();
        }
        let refused = registry.add(sessions[0], "u://more", 0).unwrap_err();
        assert!(refused.contains("across its sessions"), "{refused}");
        let other = registry.join((), Some(Share::Address([10, 0, 0, 2].into())));
        assert!(
            registry.add(other, "u://more", 0).unwrap(),
            "another caller"
        );
        let stdio = registry.join((), None);
        assert!(
            registry.add(stdio, "u://more", 0).unwrap(),
            "no share over stdio"
        );
        registry.leave(sessions[1]);
        assert!(registry.add(sessions[0], "u://more", 0).unwrap());
        assert!(registry.remove(sessions[0], "u://more"));
        assert_eq!(registry.remove_everywhere(0, "u://more"), 2);
        for id in [sessions[0], sessions[2], other, stdio] {
            registry.leave(id);
        }
        assert!(registry.callers.is_empty() && registry.total == 0);
    }

    #[test]
    fn the_proxy_is_told_when_a_callers_last_subscription_to_a_uri_ends() {
        let mut registry = Registry::default();
        let alice = Some(Share::Address([10, 0, 0, 1].into()));
        let bob = Some(Share::Address([10, 0, 0, 2].into()));
        let (a1, a2, b) = (
            registry.join((), alice.clone()),
            registry.join((), alice.clone()),
            registry.join((), bob.clone()),
        );
        for id in [a1, a2, b] {
            registry.add(id, "u://1", 0).unwrap();
        }
        registry.add(a1, "u://2", 1).unwrap();
        // Alice's other session still holds u://1: nothing to tell; bob's own is his.
        assert_eq!(registry.unsubscribe(a1, "u://1"), None);
        assert_eq!(registry.unsubscribe(a1, "u://1"), None, "not subscribed");
        let bobs = Released {
            route: 0,
            caller: bob.clone(),
            uri: "u://1".into(),
        };
        assert_eq!(registry.unsubscribe(b, "u://1"), Some(bobs));
        let polled = registry.by_route_and_caller();
        assert_eq!(
            polled[&(0, alice.clone())],
            BTreeSet::from(["u://1".to_owned()])
        );
        assert_eq!(
            polled[&(1, alice.clone())],
            BTreeSet::from(["u://2".to_owned()])
        );
        assert!(!polled.contains_key(&(0, bob)));
        let mut left = registry.leave_releasing(a1);
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].route, left[0].uri.as_str()), (1, "u://2"));
        left = registry.leave_releasing(a2);
        assert_eq!((left.len(), left[0].caller.clone()), (1, alice));
        assert!(registry.leave_releasing(a2).is_empty());
    }

    #[test]
    fn epochs_kept_per_resource_are_bounded() {
        let mut known = VecDeque::new();
        for e in 0..20 {
            token_moved(&mut known, &format!("e{e}.1"));
        }
        assert_eq!(known.len(), EPOCHS_KEPT);
        assert!(token_moved(&mut known, "not-a-token"));
    }

    #[test]
    fn subscriptions_are_capped_per_subscriber_and_end_with_it() {
        let mut registry = Registry::default();
        let (a, b) = (registry.join("a", None), registry.join("b", None));
        for i in 0..MAX_URIS_PER_SUBSCRIBER {
            assert!(registry.add(a, &format!("u://{i}"), 0).unwrap());
        }
        assert!(!registry.add(a, "u://0", 0).unwrap(), "already subscribed");
        let refused = registry.add(a, "u://more", 0).unwrap_err();
        assert!(refused.contains("unsubscribe from one first"), "{refused}");
        registry.add(b, "u://0", 0).unwrap();
        registry.add(b, "v://x", 1).unwrap();
        let mut to_tell: Vec<_> = registry.subscribers_of(0, "u://0");
        to_tell.sort();
        assert_eq!(to_tell, [(a, "a"), (b, "b")]);
        assert!(registry.subscribers_of(1, "u://0").is_empty());
        assert!(registry.remove(b, "u://0") && !registry.remove(b, "u://0"));
        assert_eq!(
            registry.by_route()[&1],
            BTreeSet::from(["v://x".to_owned()])
        );
        assert_eq!(registry.remove_everywhere(1, "v://x"), 1);
        assert_eq!(registry.remove_everywhere(1, "v://x"), 0);
        assert!(!registry.by_route().contains_key(&1));
        registry.leave_if(|n| *n == "a");
        assert_eq!(registry.total, 0);
        assert!(!registry.by_route().contains_key(&0));
        registry.leave(b);
        assert!(registry.by_route().is_empty() && registry.total == 0);
    }
}
