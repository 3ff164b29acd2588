//! Who opened which MCP session (R-CON-9): a session id is a handle to the session's streams
//! and requests, so only the caller that opened it may use it. The table fails closed (an id
//! it does not hold, because it was never opened here, was pruned or evicted, is refused like
//! another caller's), forgets sessions idle for [`SESSION_IDLE`], holds at most
//! [`MAX_SESSIONS`], evicting the longest idle when full, and at most
//! [`MAX_SESSIONS_PER_CALLER`] per caller (R-CON-28): one token opening sessions in a loop
//! evicts its own oldest, not everyone's. [`SessionOwners::open`] answers the evicted ids so
//! the HTTP layer closes them in the MCP server too (their memory goes with them).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::task_ref::CallerScope;

/// How long a session may go unused before it is forgotten (rmcp ends sessions idle for 5
/// minutes that have no open stream; a session listening on its stream may live longer).
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);

/// The most sessions remembered at once.
pub const MAX_SESSIONS: usize = 10_000;

/// The most sessions one caller may hold at once (an MCP client needs one; a few for
/// reconnects and parallel agents).
pub const MAX_SESSIONS_PER_CALLER: usize = 64;

/// Session id -> (owner, last use). The owner is a verified caller under inbound auth; without
/// it, the address a session was opened from (R-CON-38), so one address cannot fill the MCP
/// server with sessions either.
#[derive(Debug)]
pub struct SessionOwners<O = CallerScope> {
    owners: HashMap<String, (O, Instant)>,
    idle: Duration,
    max: usize,
    per_caller: usize,
}

impl<O: PartialEq> Default for SessionOwners<O> {
    fn default() -> Self {
        Self::new(SESSION_IDLE, MAX_SESSIONS)
    }
}

impl<O: PartialEq> SessionOwners<O> {
    pub fn new(idle: Duration, max: usize) -> Self {
        Self {
            owners: HashMap::new(),
            idle,
            max: max.max(1),
            per_caller: MAX_SESSIONS_PER_CALLER,
        }
    }

    /// At most `per_caller` sessions for one caller (at least 1).
    pub fn with_per_caller(mut self, per_caller: usize) -> Self {
        self.per_caller = per_caller.max(1);
        self
    }

    /// The longest idle session among those `keep` holds.
    fn longest_idle(&self, keep: impl Fn(&O) -> bool) -> Option<String> {
        self.owners
            .iter()
            .filter(|(_, (owner, _))| keep(owner))
            .min_by_key(|(_, (_, used))| *used)
            .map(|(id, _)| id.clone())
    }

    /// Whether `caller` may use session `id` now; a use keeps the session alive.
    pub fn admit(&mut self, id: &str, caller: &O, now: Instant) -> bool {
        match self.owners.get_mut(id) {
            Some((owner, used)) if owner == caller && now.duration_since(*used) < self.idle => {
                *used = now;
                true
            }
            _ => false,
        }
    }

    /// Records that `caller` opened session `id`; answers the ids evicted to make room (the
    /// caller's own longest idle beyond its share, else anyone's longest idle when the table
    /// is full), for the caller to close.
    pub fn open(&mut self, id: &str, caller: O, now: Instant) -> Vec<String> {
        let mut evicted = Vec::new();
        let idle = self.idle;
        self.owners.retain(|id, (_, used)| {
            let keep = now.duration_since(*used) < idle;
            if !keep {
                evicted.push(id.clone());
            }
            keep
        });
        while self.owners.values().filter(|(o, _)| *o == caller).count() >= self.per_caller {
            match self.longest_idle(|o| *o == caller) {
                Some(id) => {
                    self.owners.remove(&id);
                    evicted.push(id);
                }
                None => break,
            }
        }
        while self.owners.len() >= self.max {
            match self.longest_idle(|_| true) {
                Some(id) => {
                    self.owners.remove(&id);
                    evicted.push(id);
                }
                None => break,
            }
        }
        self.owners.insert(id.to_owned(), (caller, now));
        evicted
    }

    /// Marks session `id` used now, whoever uses it (without inbound auth nobody owns a
    /// session: the table only counts them).
    pub fn touch(&mut self, id: &str, now: Instant) {
        if let Some((_, used)) = self.owners.get_mut(id) {
            *used = now;
        }
    }

    /// Forgets session `id` (closed, or unknown to the MCP server).
    pub fn close(&mut self, id: &str) {
        self.owners.remove(id);
    }

    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(s: &str) -> CallerScope {
        CallerScope::Subject {
            issuer: "https://idp".into(),
            subject: s.into(),
        }
    }

    #[test]
    fn only_the_owner_may_use_a_session_and_unknown_ids_are_refused() {
        let mut owners = SessionOwners::default();
        let t = Instant::now();
        owners.open("s1", who("alice"), t);
        assert!(owners.admit("s1", &who("alice"), t));
        assert!(!owners.admit("s1", &who("mallory"), t));
        // Fails closed: an id the table does not hold is nobody's to use.
        assert!(!owners.admit("lost", &who("alice"), t));
        owners.close("s1");
        assert!(!owners.admit("s1", &who("alice"), t));
    }

    #[test]
    fn idle_sessions_are_forgotten_and_use_keeps_them() {
        let idle = Duration::from_secs(60);
        let mut owners = SessionOwners::new(idle, 10);
        let t = Instant::now();
        owners.open("s1", who("alice"), t);
        assert!(owners.admit("s1", &who("alice"), t + Duration::from_secs(50)));
        assert!(owners.admit("s1", &who("alice"), t + Duration::from_secs(100)));
        assert!(!owners.admit("s1", &who("alice"), t + Duration::from_secs(200)));
    }

    #[test]
    fn a_full_table_prunes_idle_sessions_then_evicts_the_longest_idle() {
        let idle = Duration::from_secs(60);
        let mut owners = SessionOwners::new(idle, 3);
        let t = Instant::now();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            owners.open(id, who(id), t + Duration::from_secs(i as u64));
        }
        owners.open("d", who("d"), t + Duration::from_secs(10));
        assert_eq!(owners.len(), 3);
        assert!(
            !owners.admit("a", &who("a"), t + Duration::from_secs(10)),
            "the longest idle went"
        );
        assert!(owners.admit("b", &who("b"), t + Duration::from_secs(10)));
        // Much later, everything is idle: the next one prunes them all.
        let evicted = owners.open("e", who("e"), t + Duration::from_secs(500));
        assert_eq!(evicted.len(), 3, "{evicted:?}");
        assert_eq!(owners.len(), 1);
    }

    #[test]
    fn one_caller_opening_sessions_in_a_loop_evicts_only_its_own_oldest() {
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 100).with_per_caller(2);
        let t = Instant::now();
        owners.open("bob-1", who("bob"), t);
        for i in 0..50u64 {
            let at = t + Duration::from_secs(i + 1);
            let evicted = owners.open(&format!("m-{i}"), who("mallory"), at);
            if i >= 2 {
                assert_eq!(evicted, [format!("m-{}", i - 2)], "at {i}");
            }
        }
        assert_eq!(owners.len(), 3, "two of mallory's and bob's");
        let later = t + Duration::from_secs(60);
        assert!(owners.admit("bob-1", &who("bob"), later), "bob keeps his");
        assert!(owners.admit("m-49", &who("mallory"), later));
        assert!(!owners.admit("m-0", &who("mallory"), later));
    }
}
