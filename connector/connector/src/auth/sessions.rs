//! Who opened which MCP session (R-CON-9): a session id is a handle to the session's streams
//! and requests, so only the caller that opened it may use it. The table fails closed (an id
//! it does not hold, because it was never opened here, was pruned or evicted, is refused like
//! another caller's), forgets sessions idle for [`SESSION_IDLE`], and holds at most
//! [`MAX_SESSIONS`] and at most [`MAX_SESSIONS_PER_CALLER`] per caller (R-CON-28). A session
//! is idle when no request or stream of it is open ([`SessionOwners::begin`] to
//! [`SessionOwners::end`]), for as long as since the last one ended. Opening one more than a
//! caller's share evicts that caller's own longest idle session, never a busy one; when the
//! caller has none idle, the new session is refused instead. When the whole table is full, the
//! longest idle session of the caller holding the most goes, if that caller holds more than the
//! newcomer would; otherwise the new session is refused. A busy session is never closed for a
//! new one (closing one cancels its running calls), nor one of a caller holding no more.
//! [`SessionOwners::open`] answers the ids to close in the MCP server too (their memory goes
//! with them).

use std::{
    collections::HashMap,
    hash::Hash,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::task_ref::CallerScope;

/// How long a session may go unused before it is forgotten (rmcp ends sessions idle for 5
/// minutes that have no open stream; a session listening on its stream may live longer).
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);

/// How long a session must have gone unused before a full table may close it for another
/// caller's new one (R-CON-28).
pub const STALE: Duration = Duration::from_secs(60);

/// The most sessions remembered at once.
pub const MAX_SESSIONS: usize = 10_000;

/// The most sessions one caller may hold at once (an MCP client needs one; a few for
/// reconnects and parallel agents).
pub const MAX_SESSIONS_PER_CALLER: usize = 64;

/// One session: its owner, when it was last used, how many of its requests and streams are
/// open now.
#[derive(Debug)]
struct Entry<O> {
    owner: O,
    used: Instant,
    open: usize,
}

/// Why a new session was refused (R-CON-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The caller holds its share, each session with a request or stream open.
    CallerBusy(usize),
    /// The connector holds its most sessions.
    TableFull(usize),
    /// The caller's network (an IPv6 /48) holds its sessions, each busy.
    NetworkBusy(usize),
}

impl Refused {
    /// What the refused client is told (`whose`: "this caller" or "this address").
    pub fn message(self, whose: &str) -> String {
        match self {
            Refused::CallerBusy(n) => format!(
                "no MCP session was opened: {whose} already holds {n} sessions, its share \
                 (--max-sessions-per-caller {n}), each with a request or stream open; end one \
                 (or close it with DELETE) and try again, or ask the operator to raise \
                 --max-sessions-per-caller\n"
            ),
            Refused::NetworkBusy(n) => format!(
                "no MCP session was opened: the network {whose} belongs to (its IPv6 /48) \
                 already holds {n} sessions, four times --max-sessions-per-caller, each with a \
                 request or stream open; end one and try again, or ask the operator to raise \
                 --max-sessions-per-caller\n"
            ),
            Refused::TableFull(n) => format!(
                "no MCP session was opened: this connector holds {n} sessions, its most, each \
                 busy or of a caller holding no more than this one; try again later (idle \
                 sessions end after 5 minutes), or ask the operator to lower \
                 --max-sessions-per-caller so more callers fit\n"
            ),
        }
    }
}

/// What [`SessionOwners::open`] decided: the sessions to close in the MCP server, and whether
/// the new one was refused (then it is among those to close).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opened {
    pub close: Vec<String>,
    pub refused: Option<Refused>,
}

/// The network (an IPv6 /48) a session's owner belongs to, if any.
pub type NetworkOf<O> = fn(&O) -> Option<IpAddr>;

/// Session id -> its owner and use. The owner is a verified caller under inbound auth; without
/// it, the address a session was opened from (R-CON-38), so one address cannot fill the MCP
/// server with sessions either.
#[derive(Debug)]
pub struct SessionOwners<O = CallerScope> {
    owners: HashMap<String, Entry<O>>,
    idle: Duration,
    max: usize,
    per_caller: usize,
    /// The network a caller belongs to, and how many sessions one network may hold.
    network: Option<(NetworkOf<O>, usize)>,
}

impl<O: Eq + Hash> Default for SessionOwners<O> {
    fn default() -> Self {
        Self::new(SESSION_IDLE, MAX_SESSIONS)
    }
}

impl<O: Eq + Hash> SessionOwners<O> {
    pub fn new(idle: Duration, max: usize) -> Self {
        Self {
            owners: HashMap::new(),
            idle,
            max: max.max(1),
            per_caller: MAX_SESSIONS_PER_CALLER,
            network: None,
        }
    }

    /// At most `cap` sessions for the callers of one network (`network_of`; `None`: the
    /// caller belongs to none), beside each caller's share: one IPv6 /48 spreading sessions
    /// over its /64s (R-CON-38).
    pub fn with_network_cap(mut self, network_of: NetworkOf<O>, cap: usize) -> Self {
        self.network = Some((network_of, cap.max(1)));
        self
    }

    /// At most `per_caller` sessions for one caller (at least 1).
    pub fn with_per_caller(mut self, per_caller: usize) -> Self {
        self.per_caller = per_caller.max(1);
        self
    }

    /// `caller`'s longest idle session with nothing open.
    fn longest_idle(&self, caller: &O) -> Option<String> {
        self.owners
            .iter()
            .filter(|(_, e)| e.owner == *caller && e.open == 0)
            .min_by_key(|(_, e)| e.used)
            .map(|(id, _)| id.clone())
    }

    /// When the table is full: the longest idle session of the caller holding the most, if that
    /// caller holds more than `newcomer` will with its new one (R-CON-28). A full table is then
    /// one the largest holders pay for, not a refusal for everyone: callers holding many idle
    /// sessions from many addresses cannot lock others out, and nobody loses a busy session or
    /// one of a share no larger than the newcomer's.
    fn fair_victim(&self, newcomer: &O, now: Instant) -> Option<String> {
        let mut held: HashMap<&O, usize> = HashMap::new();
        for e in self.owners.values() {
            *held.entry(&e.owner).or_default() += 1;
        }
        let floor = held.get(newcomer).copied().unwrap_or(0) + 1;
        let largest = self
            .owners
            .iter()
            .filter(|(_, e)| e.open == 0 && held[&e.owner] > floor)
            .max_by_key(|(_, e)| (held[&e.owner], std::cmp::Reverse(e.used)));
        // Else the longest idle session unused for a minute: holding a place then costs a
        // request a minute per session, so callers with one session each (many addresses or
        // tokens) cannot keep every newcomer out either.
        let stale = || {
            self.owners
                .iter()
                .filter(|(_, e)| e.open == 0 && now.duration_since(e.used) >= STALE)
                .min_by_key(|(_, e)| e.used)
        };
        largest.or_else(stale).map(|(id, _)| id.clone())
    }

    /// `caller`'s network, when it holds its cap of sessions: the longest idle session of the
    /// network to give up (`Err` when every one is busy).
    fn network_victim(&self, caller: &O) -> Option<Result<String, usize>> {
        let (network_of, cap) = self.network?;
        let net = network_of(caller)?;
        let held: Vec<_> = self
            .owners
            .iter()
            .filter(|(_, e)| network_of(&e.owner) == Some(net))
            .collect();
        if held.len() < cap {
            return None;
        }
        let idle = held
            .iter()
            .filter(|(_, e)| e.open == 0)
            .min_by_key(|(_, e)| e.used);
        Some(idle.map(|(id, _)| (*id).clone()).ok_or(cap))
    }

    /// Starts a request or stream on session `id`, when `caller` may use it (`None`: anyone
    /// may, the table only counts sessions); until [`Self::end`] the session is busy and
    /// neither forgotten nor evicted. False for an id the table does not hold (or another's).
    pub fn begin(&mut self, id: &str, caller: Option<&O>, now: Instant) -> bool {
        let idle = self.idle;
        match self.owners.get_mut(id) {
            Some(e)
                if caller.is_none_or(|c| e.owner == *c)
                    && (e.open > 0 || now.duration_since(e.used) < idle) =>
            {
                e.open += 1;
                e.used = now;
                true
            }
            _ => false,
        }
    }

    /// Ends a request or stream [`Self::begin`] started; its session is idle from `now` when
    /// nothing else of it is open.
    pub fn end(&mut self, id: &str, now: Instant) {
        if let Some(e) = self.owners.get_mut(id) {
            e.open = e.open.saturating_sub(1);
            e.used = now;
        }
    }

    /// Records that `caller` opened session `id`. Forgets sessions idle too long; beyond the
    /// caller's share evicts its own longest idle; refuses the new one when the caller has no
    /// idle one to give up or the table is full. Answers the ids to close in the MCP server.
    pub fn open(&mut self, id: &str, caller: O, now: Instant) -> Opened {
        self.open_within(id, caller, now, true)
    }

    /// Records session `id` under `caller` with no share of its own: only the table's total
    /// binds (R-CON-38: a library host that inserts no peer address still gets a bounded table).
    pub fn open_unshared(&mut self, id: &str, caller: O, now: Instant) -> Opened {
        self.open_within(id, caller, now, false)
    }

    fn open_within(&mut self, id: &str, caller: O, now: Instant, shared: bool) -> Opened {
        let mut opened = Opened::default();
        let idle = self.idle;
        self.owners.retain(|id, e| {
            let keep = e.open > 0 || now.duration_since(e.used) < idle;
            if !keep {
                opened.close.push(id.clone());
            }
            keep
        });
        while shared
            && self.owners.values().filter(|e| e.owner == caller).count() >= self.per_caller
        {
            match self.longest_idle(&caller) {
                Some(old) => {
                    self.owners.remove(&old);
                    opened.close.push(old);
                }
                None => {
                    opened.refused = Some(Refused::CallerBusy(self.per_caller));
                    break;
                }
            }
        }
        while shared && opened.refused.is_none() {
            match self.network_victim(&caller) {
                None => break,
                Some(Ok(old)) => {
                    self.owners.remove(&old);
                    opened.close.push(old);
                }
                Some(Err(cap)) => opened.refused = Some(Refused::NetworkBusy(cap)),
            }
        }
        if opened.refused.is_none() && self.owners.len() >= self.max {
            match self.fair_victim(&caller, now) {
                Some(old) => {
                    self.owners.remove(&old);
                    opened.close.push(old);
                }
                None => opened.refused = Some(Refused::TableFull(self.max)),
            }
        }
        match opened.refused {
            Some(_) => opened.close.push(id.to_owned()),
            None => {
                let entry = Entry {
                    owner: caller,
                    used: now,
                    open: 0,
                };
                self.owners.insert(id.to_owned(), entry);
            }
        }
        opened
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

/// A request or stream open on a session of a shared table: the session is busy until this
/// drops (with the response body, so a stream counts as long as it is open).
#[derive(Debug)]
pub struct InUse<O: Eq + Hash> {
    owners: Arc<Mutex<SessionOwners<O>>>,
    id: String,
}

impl<O: Eq + Hash> InUse<O> {
    /// Begins a use of session `id` by `caller` (see [`SessionOwners::begin`]); `None` when
    /// the table refuses it.
    pub fn begin(
        owners: &Arc<Mutex<SessionOwners<O>>>,
        id: &str,
        caller: Option<&O>,
    ) -> Option<Self> {
        let begun = owners.lock().unwrap().begin(id, caller, Instant::now());
        begun.then(|| Self {
            owners: owners.clone(),
            id: id.to_owned(),
        })
    }
}

impl<O: Eq + Hash> Drop for InUse<O> {
    fn drop(&mut self) {
        self.owners.lock().unwrap().end(&self.id, Instant::now());
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

    /// One use of session `id` by `caller`, ended at once.
    fn used(owners: &mut SessionOwners, id: &str, caller: &str, at: Instant) -> bool {
        let begun = owners.begin(id, Some(&who(caller)), at);
        owners.end(id, at);
        begun
    }

    #[test]
    fn only_the_owner_may_use_a_session_and_unknown_ids_are_refused() {
        let mut owners = SessionOwners::default();
        let t = Instant::now();
        owners.open("s1", who("alice"), t);
        assert!(used(&mut owners, "s1", "alice", t));
        assert!(!used(&mut owners, "s1", "mallory", t));
        // Fails closed: an id the table does not hold is nobody's to use.
        assert!(!used(&mut owners, "lost", "alice", t));
        assert!(
            owners.begin("s1", None, t),
            "without an owner check anyone may"
        );
        owners.close("s1");
        assert!(!used(&mut owners, "s1", "alice", t));
    }

    #[test]
    fn idle_sessions_are_forgotten_and_use_keeps_them() {
        let idle = Duration::from_secs(60);
        let mut owners = SessionOwners::new(idle, 10);
        let t = Instant::now();
        owners.open("s1", who("alice"), t);
        assert!(used(
            &mut owners,
            "s1",
            "alice",
            t + Duration::from_secs(50)
        ));
        assert!(used(
            &mut owners,
            "s1",
            "alice",
            t + Duration::from_secs(100)
        ));
        assert!(!used(
            &mut owners,
            "s1",
            "alice",
            t + Duration::from_secs(200)
        ));
        // A session with a stream open is not idle, however long the stream lasts.
        owners.open("s2", who("alice"), t);
        assert!(owners.begin("s2", Some(&who("alice")), t));
        let later = t + Duration::from_secs(500);
        assert_eq!(owners.open("s3", who("bob"), later).close, ["s1"]);
        assert!(owners.begin("s2", Some(&who("alice")), later));
    }

    #[test]
    fn a_full_table_prunes_idle_sessions_then_refuses_new_ones() {
        let idle = Duration::from_secs(60);
        let mut owners = SessionOwners::new(idle, 3);
        let t = Instant::now();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            owners.open(id, who(id), t + Duration::from_secs(i as u64));
        }
        // Another caller's session is never closed for a new one (R-CON-28).
        let refused = owners.open("d", who("d"), t + Duration::from_secs(10));
        assert_eq!(refused.refused, Some(Refused::TableFull(3)));
        assert_eq!(refused.close, ["d"], "only the new one is closed");
        assert_eq!(owners.len(), 3);
        for id in ["a", "b", "c"] {
            assert!(
                used(&mut owners, id, id, t + Duration::from_secs(10)),
                "{id}"
            );
        }
        // Much later, everything is idle: the next one prunes them all and is kept.
        let opened = owners.open("e", who("e"), t + Duration::from_secs(500));
        assert_eq!(
            (opened.close.len(), opened.refused),
            (3, None),
            "{opened:?}"
        );
        assert_eq!(owners.len(), 1);
    }

    #[test]
    fn a_full_table_takes_the_largest_holders_longest_idle_session() {
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 5);
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        for i in 0..4u64 {
            owners.open(&format!("m-{i}"), who("mallory"), at(i));
        }
        owners.open("bob-1", who("bob"), at(4));
        // mallory's oldest is busy: her longest idle one goes for carol's first session.
        assert!(owners.begin("m-0", Some(&who("mallory")), at(5)));
        let opened = owners.open("carol-1", who("carol"), at(6));
        assert_eq!((opened.close, opened.refused), (vec!["m-1".into()], None));
        // mallory still holds 3: more than carol with a second (2), so she pays again.
        let opened = owners.open("carol-2", who("carol"), at(7));
        assert_eq!((opened.close, opened.refused), (vec!["m-2".into()], None));
        // Now mallory 2, carol 2, bob 1: nobody holds more than carol would with a third.
        let refused = owners.open("carol-3", who("carol"), at(8));
        assert_eq!(refused.refused, Some(Refused::TableFull(5)));
        assert_eq!(refused.close, ["carol-3"]);
        // dave holds none: mallory's last idle one goes (her busy m-0 stays).
        let opened = owners.open("dave-1", who("dave"), at(9));
        assert_eq!(opened.close, ["m-3"]);
        assert!(used(&mut owners, "bob-1", "bob", at(10)), "bob keeps his");
        assert_eq!(owners.len(), 5);
    }

    #[test]
    fn a_full_table_of_single_sessions_gives_up_one_unused_for_a_minute() {
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 3);
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        for (i, who_) in ["a", "b", "c"].iter().enumerate() {
            owners.open(who_, who(who_), at(i as u64));
        }
        // Everyone holds one, all used within the minute: refused.
        assert!(used(&mut owners, "a", "a", at(30)));
        let refused = owners.open("d", who("d"), at(40));
        assert_eq!(refused.refused, Some(Refused::TableFull(3)));
        // b's went unused for a minute (c's too, but b's is older): it goes; a's, used, stays.
        let opened = owners.open("d", who("d"), at(61));
        assert_eq!((opened.close, opened.refused), (vec!["b".into()], None));
        // A busy session is never taken, however long it has been open.
        assert!(owners.begin("c", Some(&who("c")), at(62)));
        assert!(used(&mut owners, "a", "a", at(100)));
        assert!(used(&mut owners, "d", "d", at(100)));
        let refused = owners.open("e", who("e"), at(150));
        assert_eq!(refused.refused, Some(Refused::TableFull(3)));
    }

    #[test]
    fn one_network_holds_its_cap_over_all_its_addresses() {
        fn net(o: &CallerScope) -> Option<IpAddr> {
            match o {
                CallerScope::Subject { issuer, .. } => issuer.parse().ok(),
                _ => None,
            }
        }
        let from = |network: &str, s: &str| CallerScope::Subject {
            issuer: network.into(),
            subject: s.into(),
        };
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 100)
            .with_per_caller(2)
            .with_network_cap(net, 3);
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        for i in 0..3u64 {
            let opened = owners.open(
                &format!("s{i}"),
                from("2001:db8::", &format!("a{i}")),
                at(i),
            );
            assert_eq!(opened, Opened::default(), "{i}");
        }
        // A fourth address of the network: the network's longest idle session goes.
        let opened = owners.open("s3", from("2001:db8::", "a3"), at(10));
        assert_eq!((opened.close, opened.refused), (vec!["s0".into()], None));
        // Another network is untouched by it.
        assert_eq!(
            owners.open("o", from("2001:db9::", "b"), at(11)),
            Opened::default()
        );
        // Every session of the network busy: refused, naming the flag.
        for id in ["s1", "s2", "s3"] {
            let owner = owners.owners[id].owner.clone();
            assert!(owners.begin(id, Some(&owner), at(12)));
        }
        let refused = owners.open("s4", from("2001:db8::", "a4"), at(13));
        assert_eq!(refused.refused, Some(Refused::NetworkBusy(3)));
        assert_eq!(refused.close, ["s4"]);
        let message = Refused::NetworkBusy(3).message("this address");
        assert!(message.contains("--max-sessions-per-caller"), "{message}");
    }

    #[test]
    fn one_caller_opening_sessions_in_a_loop_evicts_only_its_own_oldest() {
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 100).with_per_caller(2);
        let t = Instant::now();
        owners.open("bob-1", who("bob"), t);
        for i in 0..50u64 {
            let at = t + Duration::from_secs(i + 1);
            let opened = owners.open(&format!("m-{i}"), who("mallory"), at);
            if i >= 2 {
                assert_eq!(opened.close, [format!("m-{}", i - 2)], "at {i}");
            }
        }
        assert_eq!(owners.len(), 3, "two of mallory's and bob's");
        let later = t + Duration::from_secs(60);
        assert!(used(&mut owners, "bob-1", "bob", later), "bob keeps his");
        assert!(used(&mut owners, "m-49", "mallory", later));
        assert!(!used(&mut owners, "m-0", "mallory", later));
    }

    #[test]
    fn a_session_with_a_request_or_stream_open_is_never_evicted() {
        let mut owners = SessionOwners::new(Duration::from_secs(3600), 100).with_per_caller(2);
        let t = Instant::now();
        let later = |s: u64| t + Duration::from_secs(s);
        owners.open("long-call", who("alice"), t);
        owners.open("stream", who("alice"), later(1));
        // The long call started first (the oldest use) and is still running.
        assert!(owners.begin("long-call", Some(&who("alice")), later(2)));
        assert!(owners.begin("stream", Some(&who("alice")), later(3)));
        let refused = owners.open("third", who("alice"), later(4));
        assert_eq!(refused.refused, Some(Refused::CallerBusy(2)));
        assert_eq!(refused.close, ["third"]);
        let message = Refused::CallerBusy(2).message("this caller");
        assert!(message.contains("--max-sessions-per-caller 2"), "{message}");
        // The stream ends: that session is idle now and goes for the next one.
        owners.end("stream", later(5));
        let opened = owners.open("fourth", who("alice"), later(6));
        assert_eq!(
            (opened.close, opened.refused),
            (vec!["stream".into()], None)
        );
        owners.end("long-call", later(7));
        assert!(used(&mut owners, "long-call", "alice", later(8)));
        assert!(used(&mut owners, "fourth", "alice", later(8)));
    }

    #[test]
    fn a_shared_use_ends_when_dropped() {
        let owners = Arc::new(Mutex::new(SessionOwners::new(Duration::from_secs(60), 10)));
        owners
            .lock()
            .unwrap()
            .open("s", who("alice"), Instant::now());
        let use_ = InUse::begin(&owners, "s", Some(&who("alice"))).unwrap();
        assert!(InUse::begin(&owners, "s", Some(&who("bob"))).is_none());
        assert_eq!(owners.lock().unwrap().owners["s"].open, 1);
        drop(use_);
        assert_eq!(owners.lock().unwrap().owners["s"].open, 0);
    }
}
