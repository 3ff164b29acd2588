//! The version table behind `~~resource_versions` (R-PRX-34): one entry per resource URI a
//! connector asked about, each with a serial that moves when the upstream says the resource was
//! updated, under the epoch of the upstream connection the subscriptions were made on.
//!
//! One counter numbers every entry and every update, so a token is never answered twice for
//! different states within an epoch: a URI dropped for idleness and asked again gets a new
//! serial (its caller sees one update more, never one less). A new connection is a new epoch:
//! updates may have been missed while there was none, and callers see one update for each URI.
//!
//! Shares are counted here, where the table is (R-PRX-36): each URI is held by the callers that
//! asked about it (the connector names its caller), and a caller holds at most a fifth of the
//! table ([`VersionTable::share`]), counting the URIs it let go of (`release`) until their idle
//! time would have ended, so that subscribing and unsubscribing in a loop takes only the
//! churner's own share. A URI is dropped once no caller holds it: released by its last holder,
//! or asked by none for `idle`. The table holds at most `cap` URIs, and its last
//! [`VersionTable::reserve`] places go only to callers holding fewer than
//! [`VersionTable::floor`] URIs, so that a few callers at their full shares cannot take the
//! whole table from everyone else. Holds (a URI asked by a caller) are bounded the same way:
//! at most [`VersionTable::max_holds`], the last [`VersionTable::hold_reserve`] of them only for
//! callers under the floor, so that callers at their full shares of URIs others already watch
//! cannot answer everyone else `Full`.

use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    time::{Duration, Instant},
};

use durable_mcp_contract::features::version_token;

/// The most URIs the proxy watches for one upstream by default (`[worker]
/// max_watched_resources`).
pub const MAX_WATCHED_URIS: usize = 1000;
/// How long a URI nobody asks about stays watched (the connector asks every few seconds while
/// anyone subscribes, R-CON-49), and how long a released URI counts against its caller.
pub const WATCH_IDLE: Duration = Duration::from_secs(300);
/// A caller holds at most this fraction of the table: `cap / SHARES`.
pub const SHARES: usize = 5;
/// How many holds (a URI asked by a caller) the table keeps in all, per URI it may watch.
const HOLDS_PER_URI: usize = 10;

/// Why a URI was not watched for a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The table holds `cap` URIs (or its holds are all taken).
    Full,
    /// The caller holds its share already, released URIs included.
    OverShare,
    /// Only the reserve is left, and the caller holds at least its floor.
    Reserved,
}

/// See the module.
#[derive(Debug)]
pub struct VersionTable {
    epoch: String,
    serial: u64,
    cap: usize,
    entries: HashMap<String, Entry>,
    /// Per caller: its holds and its released URIs still counted.
    held: HashMap<String, usize>,
    holds: usize,
    /// Released URIs still counted against their caller, oldest first: (caller, until).
    released: VecDeque<(String, Instant)>,
}

#[derive(Debug, Clone)]
struct Entry {
    serial: u64,
    /// The callers holding the URI, with when each last asked.
    holders: HashMap<String, Instant>,
}

impl VersionTable {
    pub fn new(epoch: String, cap: usize) -> Self {
        Self {
            epoch,
            serial: 0,
            cap: cap.max(1),
            entries: HashMap::new(),
            held: HashMap::new(),
            holds: 0,
            released: VecDeque::new(),
        }
    }

    /// The most URIs one caller holds, released ones included.
    pub fn share(&self) -> usize {
        (self.cap / SHARES).max(1)
    }

    /// The table's last places, kept for callers holding fewer than [`Self::floor`] URIs: a
    /// share's worth.
    pub fn reserve(&self) -> usize {
        self.share()
    }

    /// How many URIs a caller may hold and still take a reserved place: a tenth of a share.
    pub fn floor(&self) -> usize {
        (self.share() / 10).max(1)
    }

    /// The most holds the table keeps in all.
    pub fn max_holds(&self) -> usize {
        self.cap * HOLDS_PER_URI
    }

    /// The last holds, kept for callers holding fewer than [`Self::floor`] URIs, as the last
    /// places are: a fifth of them, so that callers at their full shares of URIs others watch
    /// cannot take every hold either.
    pub fn hold_reserve(&self) -> usize {
        self.max_holds() / SHARES
    }

    /// Why `uri` would be refused to `caller` now, if it would.
    fn refusal(&self, uri: &str, caller: &str) -> Option<Refused> {
        let new = !self.entries.contains_key(uri);
        let held = self.held_by(caller);
        let reserved_place = new && self.entries.len() + self.reserve() >= self.cap;
        let reserved_hold = self.holds + self.hold_reserve() >= self.max_holds();
        if held >= self.share() {
            Some(Refused::OverShare)
        } else if self.holds >= self.max_holds() || (new && self.entries.len() >= self.cap) {
            Some(Refused::Full)
        } else if held >= self.floor() && (reserved_place || reserved_hold) {
            Some(Refused::Reserved)
        } else {
            None
        }
    }

    fn next(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn count(&mut self, caller: &str, added: isize) {
        let held = self.held.entry(caller.to_owned()).or_default();
        *held = held.saturating_add_signed(added);
        if *held == 0 {
            self.held.remove(caller);
        }
    }

    fn held_by(&self, caller: &str) -> usize {
        self.held.get(caller).copied().unwrap_or(0)
    }

    /// A new upstream connection: every token changes once.
    pub fn new_epoch(&mut self, epoch: String) {
        self.epoch = epoch;
    }

    /// Marks `uris` asked by `caller` `now`, adding the new ones (and the caller's hold on URIs
    /// others watch) while under the cap and the caller's share; answers the URIs refused.
    pub fn ask(&mut self, uris: &[String], caller: &str, now: Instant) -> Vec<(String, Refused)> {
        self.forget_released(now);
        let mut refused = Vec::new();
        for uri in uris {
            if let Some(asked) = self
                .entries
                .get_mut(uri)
                .and_then(|e| e.holders.get_mut(caller))
            {
                *asked = now;
                continue;
            }
            if let Some(why) = self.refusal(uri, caller) {
                refused.push((uri.clone(), why));
                continue;
            }
            if !self.entries.contains_key(uri) {
                let serial = self.next();
                let holders = HashMap::new();
                self.entries.insert(uri.clone(), Entry { serial, holders });
            }
            if let Some(entry) = self.entries.get_mut(uri) {
                entry.holders.insert(caller.to_owned(), now);
            }
            self.holds += 1;
            self.count(caller, 1);
        }
        refused
    }

    /// `caller` lets go of `uris` (its subscriptions ended): each still counts against it
    /// until `idle` from `now`; answers the URIs no caller holds any more, which are dropped.
    pub fn release(
        &mut self,
        uris: &[String],
        caller: &str,
        now: Instant,
        idle: Duration,
    ) -> Vec<String> {
        let mut dropped = Vec::new();
        for uri in uris {
            let Some(entry) = self.entries.get_mut(uri) else {
                continue;
            };
            if entry.holders.remove(caller).is_none() {
                continue;
            }
            self.holds -= 1;
            // The hold becomes a released URI: the caller's count stays.
            self.released.push_back((caller.to_owned(), now + idle));
            if entry.holders.is_empty() {
                self.entries.remove(uri);
                dropped.push(uri.clone());
            }
        }
        while self.released.len() > self.cap {
            if let Some((caller, _)) = self.released.pop_front() {
                self.count(&caller, -1);
            }
        }
        dropped
    }

    /// Released URIs whose time is up stop counting against their callers.
    fn forget_released(&mut self, now: Instant) {
        while self
            .released
            .front()
            .is_some_and(|(_, until)| *until <= now)
        {
            if let Some((caller, _)) = self.released.pop_front() {
                self.count(&caller, -1);
            }
        }
    }

    /// Drops the holds not renewed during `idle` before `now`, and the URIs no caller holds
    /// any more; answers those URIs.
    pub fn expire(&mut self, now: Instant, idle: Duration) -> Vec<String> {
        self.forget_released(now);
        let mut ended = Vec::new();
        let mut dropped = Vec::new();
        for (uri, entry) in &mut self.entries {
            entry.holders.retain(|caller, asked| {
                let live = now.saturating_duration_since(*asked) < idle;
                if !live {
                    ended.push(caller.clone());
                }
                live
            });
            if entry.holders.is_empty() {
                dropped.push(uri.clone());
            }
        }
        for caller in ended {
            self.holds -= 1;
            self.count(&caller, -1);
        }
        for uri in &dropped {
            self.entries.remove(uri);
        }
        dropped
    }

    /// The upstream said `uri` was updated; false when it is not watched.
    pub fn bump(&mut self, uri: &str) -> bool {
        let serial = self.serial + 1;
        match self.entries.get_mut(uri) {
            Some(entry) => {
                entry.serial = serial;
                self.serial = serial;
                true
            }
            None => false,
        }
    }

    /// Stops watching `uri` (the upstream refused its subscription): its holds end uncounted.
    pub fn remove(&mut self, uri: &str) {
        let Some(entry) = self.entries.remove(uri) else {
            return;
        };
        for caller in entry.holders.keys() {
            self.holds -= 1;
            self.count(caller, -1);
        }
    }

    /// The token of a watched `uri`.
    pub fn token(&self, uri: &str) -> Option<String> {
        let entry = self.entries.get(uri)?;
        Some(version_token(&self.epoch, entry.serial))
    }

    /// Every watched URI.
    pub fn uris(&self) -> BTreeSet<String> {
        self.entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uris(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_update_moves_only_its_uris_token_and_a_new_epoch_moves_all() {
        let now = Instant::now();
        let mut table = VersionTable::new("e1".into(), 10);
        assert!(table.ask(&uris(&["a", "b"]), "c", now).is_empty());
        let (a, b) = (table.token("a").unwrap(), table.token("b").unwrap());
        assert_ne!(a, b);
        assert!(table.bump("a") && !table.bump("unwatched"));
        assert_ne!(table.token("a").unwrap(), a);
        assert_eq!(table.token("b").unwrap(), b);
        table.new_epoch("e2".into());
        assert!(table.token("b").unwrap().starts_with("e2."));
        assert_eq!(table.token("zzz"), None);
    }

    #[test]
    fn the_table_is_capped_and_idle_uris_are_dropped_and_come_back_with_a_new_token() {
        let now = Instant::now();
        let mut table = VersionTable::new("e".into(), 10);
        assert!(table.ask(&uris(&["a", "b"]), "x", now).is_empty());
        let more: Vec<String> = (0..8).map(|i| format!("u{i}")).collect();
        for (i, chunk) in more.chunks(2).enumerate() {
            assert!(
                table
                    .ask(&chunk[..1], &format!("caller-{i}"), now)
                    .is_empty()
            );
            assert!(
                table
                    .ask(&chunk[1..], &format!("other-{i}"), now)
                    .is_empty()
            );
        }
        assert_eq!(
            table.ask(&uris(&["c"]), "y", now),
            [("c".to_owned(), Refused::Full)]
        );
        let a = table.token("a").unwrap();
        let later = now + WATCH_IDLE;
        table.ask(&uris(&["b"]), "x", later);
        for i in 0..4 {
            table.ask(&more[i * 2..i * 2 + 1], &format!("caller-{i}"), later);
            table.ask(&more[i * 2 + 1..i * 2 + 2], &format!("other-{i}"), later);
        }
        assert_eq!(table.expire(later, WATCH_IDLE), ["a"]);
        assert!(!table.uris().contains("a") && table.uris().contains("b"));
        assert!(table.ask(&uris(&["a"]), "z", later).is_empty());
        assert_ne!(
            table.token("a").unwrap(),
            a,
            "a re-added URI never repeats a token"
        );
        table.remove("a");
        assert_eq!(table.token("a"), None);
    }

    #[test]
    fn a_caller_churning_subscriptions_fills_only_its_own_share() {
        let (now, idle) = (Instant::now(), WATCH_IDLE);
        let mut table = VersionTable::new("e".into(), 20);
        assert_eq!(table.share(), 4);
        let mut refused = 0;
        for i in 0..40 {
            let uri = uris(&[&format!("mock://items/{i}")]);
            refused += table.ask(&uri, "mallory", now).len();
            // Its unsubscribe reaches the table: the URI goes, the share stays counted.
            table.release(&uri, "mallory", now, idle);
        }
        assert_eq!(
            refused, 36,
            "mallory's share is four URIs, released ones included"
        );
        assert!(table.uris().is_empty());
        // Every other caller is served; a URI two callers hold stays while one holds it.
        assert!(
            table
                .ask(&uris(&["mock://items/alice", "shared"]), "alice", now)
                .is_empty()
        );
        assert!(table.ask(&uris(&["shared"]), "bob", now).is_empty());
        assert!(
            table
                .release(&uris(&["shared"]), "bob", now, idle)
                .is_empty()
        );
        assert!(table.uris().contains("shared"));
        assert_eq!(
            table.release(&uris(&["shared"]), "alice", now, idle),
            ["shared"]
        );
        // Once the idle time has passed, the released URIs no longer count.
        let later = now + idle;
        assert!(
            table
                .ask(&uris(&["mock://items/again"]), "mallory", later)
                .is_empty()
        );
        // A caller that vanished without releasing holds its URIs until they go idle.
        assert!(
            table
                .ask(&uris(&["d1", "d2", "d3"]), "gone", now)
                .is_empty()
        );
        assert_eq!(table.ask(&uris(&["d4", "d5"]), "gone", now).len(), 1);
        assert_eq!(
            table.expire(later, idle).len(),
            5,
            "alice's and the four of gone"
        );
        assert!(table.ask(&uris(&["d6"]), "gone", later).is_empty());
    }

    #[test]
    fn callers_at_their_shares_leave_the_last_places_to_callers_holding_little() {
        let now = Instant::now();
        let mut table = VersionTable::new("e".into(), 20);
        assert_eq!((table.share(), table.floor(), table.reserve()), (4, 1, 4));
        // Five callers each ask for a full share: together they stop short of the reserve.
        let mut refused = Vec::new();
        for hog in 0..5 {
            let asked: Vec<String> = (0..4).map(|i| format!("h{hog}/{i}")).collect();
            refused.extend(table.ask(&asked, &format!("hog-{hog}"), now));
        }
        // The fifth got one place of the reserve: it held less than its floor.
        assert_eq!(
            table.uris().len(),
            17,
            "cap 20 less the reserve, plus hog-4's first"
        );
        assert_eq!(refused.len(), 3);
        assert!(refused.iter().all(|(_, why)| *why == Refused::Reserved));
        // A newcomer past its floor is refused a reserved place; newcomers under it get one
        // each until the table is full.
        assert!(table.ask(&uris(&["n/0"]), "new-0", now).is_empty());
        assert_eq!(
            table.ask(&uris(&["n/0b"]), "new-0", now),
            [("n/0b".to_owned(), Refused::Reserved)]
        );
        for newcomer in 1..3 {
            let uri = format!("n/{newcomer}");
            assert!(
                table
                    .ask(&uris(&[&uri]), &format!("new-{newcomer}"), now)
                    .is_empty()
            );
        }
        assert_eq!(table.uris().len(), 20);
        assert_eq!(
            table.ask(&uris(&["late"]), "late", now),
            [("late".to_owned(), Refused::Full)]
        );
        // A URI already watched is shared whatever is left.
        assert!(table.ask(&uris(&["h0/0"]), "late", now).is_empty());
    }

    #[test]
    fn callers_at_their_shares_of_watched_uris_leave_holds_to_others() {
        let now = Instant::now();
        let mut table = VersionTable::new("e".into(), 20);
        assert_eq!((table.max_holds(), table.hold_reserve()), (200, 40));
        // Fifty callers each ask for a full share of URIs already watched: they take the holds
        // short of the reserve, and then one reserved hold each (they held less than the floor).
        let watched = uris(&["w0", "w1", "w2", "w3"]);
        let mut refused = Vec::new();
        for hog in 0..50 {
            refused.extend(table.ask(&watched, &format!("hog-{hog}"), now));
        }
        assert_eq!(table.uris().len(), 4);
        assert_eq!(refused.len(), 30, "hogs 40 to 49 got one hold each");
        assert!(refused.iter().all(|(_, why)| *why == Refused::Reserved));
        // Callers holding little are still served a URI others watch.
        for newcomer in 0..30 {
            let caller = format!("new-{newcomer}");
            assert!(
                table.ask(&watched[..1], &caller, now).is_empty(),
                "{caller}"
            );
        }
        assert_eq!(
            table.ask(&watched[..1], "late", now),
            [("w0".to_owned(), Refused::Full)]
        );
    }

    #[test]
    fn released_uris_are_bounded_in_all() {
        let now = Instant::now();
        let mut table = VersionTable::new("e".into(), 5);
        for i in 0..20 {
            let caller = format!("caller-{i}");
            let uri = uris(&[&format!("u{i}")]);
            assert!(table.ask(&uri, &caller, now).is_empty());
            table.release(&uri, &caller, now, WATCH_IDLE);
        }
        assert!(
            table.released.len() <= 5 && table.held.len() <= 5,
            "{table:?}"
        );
    }
}
