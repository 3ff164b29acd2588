//! The version table behind `~~resource_versions` (R-PRX-34): one entry per resource URI a
//! connector asked about, each with a serial that moves when the upstream says the resource was
//! updated, under the epoch of the upstream connection the subscriptions were made on.
//!
//! One counter numbers every entry and every update, so a token is never answered twice for
//! different states within an epoch: a URI dropped for idleness and asked again gets a new
//! serial (its caller sees one update more, never one less). A new connection is a new epoch:
//! updates may have been missed while there was none, and callers see one update for each URI.
//! The table holds at most `cap` URIs, and a URI nobody asked for during `idle` is dropped.

use std::{
    collections::{BTreeSet, HashMap},
    time::{Duration, Instant},
};

use durable_mcp_contract::features::version_token;

/// The most URIs the proxy watches for one upstream.
pub const MAX_WATCHED_URIS: usize = 1000;
/// How long a URI nobody asks about stays watched (the connector asks every few seconds while
/// anyone subscribes, R-CON-49).
pub const WATCH_IDLE: Duration = Duration::from_secs(300);

/// See the module.
#[derive(Debug)]
pub struct VersionTable {
    epoch: String,
    serial: u64,
    cap: usize,
    entries: HashMap<String, Entry>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    serial: u64,
    asked: Instant,
}

impl VersionTable {
    pub fn new(epoch: String, cap: usize) -> Self {
        Self {
            epoch,
            serial: 0,
            cap,
            entries: HashMap::new(),
        }
    }

    fn next(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// The most URIs the table holds.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A new upstream connection: every token changes once.
    pub fn new_epoch(&mut self, epoch: String) {
        self.epoch = epoch;
    }

    /// Marks `uris` asked `now`, adding the new ones while under the cap; answers the URIs
    /// refused for the cap.
    pub fn ask(&mut self, uris: &[String], now: Instant) -> Vec<String> {
        let mut refused = Vec::new();
        for uri in uris {
            if let Some(entry) = self.entries.get_mut(uri) {
                entry.asked = now;
            } else if self.entries.len() < self.cap {
                let serial = self.next();
                self.entries
                    .insert(uri.clone(), Entry { serial, asked: now });
            } else {
                refused.push(uri.clone());
            }
        }
        refused
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

    /// Drops the URIs not asked for during `idle` before `now`; answers them.
    pub fn expire(&mut self, now: Instant, idle: Duration) -> Vec<String> {
        let old: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.asked) >= idle)
            .map(|(uri, _)| uri.clone())
            .collect();
        for uri in &old {
            self.entries.remove(uri);
        }
        old
    }

    /// Stops watching `uri` (the upstream refused its subscription).
    pub fn remove(&mut self, uri: &str) {
        self.entries.remove(uri);
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
        assert!(table.ask(&uris(&["a", "b"]), now).is_empty());
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
        let mut table = VersionTable::new("e".into(), 2);
        assert_eq!(table.ask(&uris(&["a", "b", "c"]), now), ["c"]);
        let a = table.token("a").unwrap();
        let later = now + WATCH_IDLE;
        table.ask(&uris(&["b"]), later);
        assert_eq!(table.expire(later, WATCH_IDLE), ["a"]);
        assert_eq!(table.uris(), BTreeSet::from(["b".to_owned()]));
        assert!(table.ask(&uris(&["a"]), later).is_empty());
        assert_ne!(
            table.token("a").unwrap(),
            a,
            "a re-added URI never repeats a token"
        );
        table.remove("a");
        assert_eq!(table.token("a"), None);
    }
}
