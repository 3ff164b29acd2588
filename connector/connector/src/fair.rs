//! Fair shares (R-CON-38): whom a per-caller limit counts a request under, and the counters
//! those limits keep. Under inbound auth a caller is its verified token subject
//! ([`CallerScope`]); without auth, it is the address the request came from (an IPv6 peer by
//! its /64, which one client usually holds whole): behind a trusted reverse proxy the client
//! address its header names ([`ClientAddr`], R-CON-50), else the peer's. Over stdio there is
//! one caller and no share.

use std::{
    collections::HashMap,
    hash::Hash,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::{Arc, Mutex},
};

use crate::task_ref::CallerScope;

/// Whom a per-caller limit counts a request under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Share {
    /// A verified caller (inbound auth).
    Caller(CallerScope),
    /// An unauthenticated peer's address, as [`address_key`] groups it.
    Address(IpAddr),
}

/// The peer address of an HTTP request, put in its extensions by the accept loop
/// (the connector's accept loop); a host serving the router itself may insert it the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The address of the client a request is from, when the accept loop read it from a trusted
/// reverse proxy's header (R-CON-50; [`crate::forwarded`]); it stands in for [`PeerAddr`] in
/// every per-address share. A host serving the router itself may insert it the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// What per-address limits count a peer under: its IPv4 address (also when it arrives
/// IPv4-mapped), or its IPv6 /64, since one IPv6 client usually holds a whole /64 and could
/// otherwise spread its connections over many addresses.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// The IPv6 network (/48, a site: what one tunnel account or one customer gets) an IPv6 peer
/// belongs to, for the network cap beside the per-address one; `None` for IPv4 (an IPv4
/// address is costly, and its /24 is often many unrelated clients).
pub fn network_key(ip: IpAddr) -> Option<IpAddr> {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 80) - 1);
            Some(IpAddr::V6(Ipv6Addr::from(bits)))
        }
        IpAddr::V4(_) => None,
    }
}

/// The share of an HTTP request: its verified caller, else its client's address (behind a
/// trusted proxy, R-CON-50), else its peer's; `None` when the request carries none of them (a
/// library host that inserts no [`PeerAddr`]).
pub fn share_of(extensions: &http::Extensions) -> Option<Share> {
    if let Some(caller) = extensions.get::<CallerScope>() {
        return Some(Share::Caller(caller.clone()));
    }
    let client = extensions.get::<ClientAddr>().map(|client| client.0);
    client
        .or_else(|| extensions.get::<PeerAddr>().map(|peer| peer.0.ip()))
        .map(|ip| Share::Address(address_key(ip)))
}

/// How many of something each key holds, each capped.
#[derive(Debug)]
pub struct Counts<K: Eq + Hash>(Mutex<HashMap<K, usize>>);

impl<K: Eq + Hash> Default for Counts<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + Hash + Clone> Counts<K> {
    /// Counts one more for `key`, unless `cap` (non-zero) are held already; the place is given
    /// back when the returned slot drops.
    pub fn admit(self: &Arc<Self>, key: &K, cap: usize) -> Option<Slot<K>> {
        let mut held = self.0.lock().unwrap();
        let count = held.entry(key.clone()).or_default();
        if cap != 0 && *count >= cap {
            if *count == 0 {
                held.remove(key);
            }
            return None;
        }
        *count += 1;
        Some(Slot {
            counts: self.clone(),
            key: key.clone(),
        })
    }

    /// How many `key` holds now.
    pub fn held(&self, key: &K) -> usize {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    /// How many keys hold something (a key is forgotten when its last slot drops).
    pub fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// One place in [`Counts`], given back when dropped.
#[derive(Debug)]
pub struct Slot<K: Eq + Hash> {
    counts: Arc<Counts<K>>,
    key: K,
}

impl<K: Eq + Hash> Slot<K> {
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.counts.0.lock().unwrap();
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_at_most_its_cap_and_a_dropped_slot_frees_its_place() {
        let counts = Arc::new(Counts::default());
        let (a, b) = ("a", "b");
        let first = counts.admit(&a, 2).unwrap();
        let _second = counts.admit(&a, 2).unwrap();
        assert!(counts.admit(&a, 2).is_none(), "a third is refused");
        assert!(counts.admit(&b, 2).is_some(), "another key is not affected");
        drop(first);
        assert!(
            counts.admit(&a, 2).is_some(),
            "a dropped slot frees its place"
        );
        let unlimited: Vec<_> = (0..1000).map(|_| counts.admit(&b, 0).unwrap()).collect();
        assert_eq!(unlimited.len(), 1000, "0 is no cap");
        drop(unlimited);
        assert_eq!(counts.held(&b), 0);
        assert_eq!(counts.keys(), 1, "only a's places are left");
    }

    #[test]
    fn ipv6_peers_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let key = |s: &str| address_key(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::2"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
    }

    #[test]
    fn a_verified_caller_is_its_share_else_its_address() {
        let mut extensions = http::Extensions::new();
        assert_eq!(share_of(&extensions), None);
        extensions.insert(PeerAddr("[2001:db8::1]:5000".parse().unwrap()));
        assert_eq!(
            share_of(&extensions),
            Some(Share::Address("2001:db8::".parse().unwrap()))
        );
        // Behind a trusted proxy, the client its header names.
        extensions.insert(ClientAddr("198.51.100.1".parse().unwrap()));
        assert_eq!(
            share_of(&extensions),
            Some(Share::Address("198.51.100.1".parse().unwrap()))
        );
        let alice = CallerScope::Subject {
            issuer: "https://idp".into(),
            subject: "alice".into(),
        };
        extensions.insert(alice.clone());
        assert_eq!(share_of(&extensions), Some(Share::Caller(alice)));
    }
}
