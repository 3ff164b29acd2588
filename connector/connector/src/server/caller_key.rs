//! The key a proxy counts a caller under (R-PRX-36): the caller's share (R-CON-38: its token
//! subject, else its address, an IPv6 site /48 as one; over stdio, the connector's caller
//! scope) hashed under a key derived from the signing key. The same on every replica sharing
//! `MCP_TASK_SIGNING_KEY`, so one caller is one share across replicas; nothing of the identity
//! can be read back from it, and it never carries the owner hash as such.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use durable_mcp_contract::call::{CALLER_HEADER, CALLER_KEY_HEADER};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

use super::Connector;
use crate::{
    fair::{Share, network_key},
    task_ref::{CallerScope, SigningKey, caller_hash},
};

/// Length of a caller key: 22 base64url characters, 132 bits.
const CALLER_KEY_LEN: usize = 22;

/// The caller key of `share` (none: the connector's own caller, `scope`) under `signing`.
pub fn caller_key(signing: &SigningKey, share: Option<&Share>, scope: &CallerScope) -> String {
    let text = match share {
        Some(Share::Caller(caller)) => format!("caller:{}", caller_hash(signing, caller)),
        // An IPv6 site (/48) is one caller here, as for sessions: its /64s are free to it, and
        // a few of them at full shares would otherwise fill the proxy's table.
        Some(Share::Address(address)) => match network_key(*address) {
            Some(site) => format!("site:{site}"),
            None => format!("address:{address}"),
        },
        None => format!("caller:{}", caller_hash(signing, scope)),
    };
    keyed(signing, &text)
}

/// `text` hashed under the key derived for callers' keys.
fn keyed(signing: &SigningKey, text: &str) -> String {
    let derived = signing.derive("proxy-caller-key");
    let mut mac = Hmac::<Sha256>::new_from_slice(&derived).expect("HMAC takes any key");
    mac.update(text.as_bytes());
    let mut key = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    key.truncate(CALLER_KEY_LEN);
    key
}

/// The caller a tool call's operation names to the tool service (R-PRX-10): the caller key
/// of its `share` when it has one, so that callers the connector tells apart (R-CON-38: two
/// anonymous addresses under one scope) are told apart there too; else its `scope`'s hash.
pub fn call_caller(signing: &SigningKey, scope: &CallerScope, share: Option<&Share>) -> String {
    match share {
        Some(Share::Address(address)) => keyed(signing, &format!("address:{address}")),
        Some(share) => caller_key(signing, Some(share), scope),
        None => caller_hash(signing, scope),
    }
}

/// How a tool call's operation names its caller to the tool service: `call` for the proxy's
/// log attribution ([`call_caller`], R-PRX-10), `key` its caller key ([`caller_key`]), the
/// call's fairness key (R-PRX-40), so that an IPv6 site's /64s are one caller's turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCaller {
    pub call: String,
    pub key: String,
}

impl CallCaller {
    /// The names of a call of `share` (none: the connector's own caller, `scope`).
    pub fn of(signing: &SigningKey, scope: &CallerScope, share: Option<&Share>) -> Self {
        Self {
            call: call_caller(signing, scope, share),
            key: caller_key(signing, share, scope),
        }
    }

    /// Names the caller in a start's Nexus headers.
    pub fn name_in(&self, headers: &mut std::collections::HashMap<String, String>) {
        headers.insert(CALLER_HEADER.into(), self.call.clone());
        headers.insert(CALLER_KEY_HEADER.into(), self.key.clone());
    }
}

impl Connector {
    /// The caller key of a request of `share` (R-PRX-36).
    pub(super) fn caller_key(&self, share: Option<&Share>) -> String {
        let options = &self.inner.options;
        caller_key(&options.signing_key, share, &options.caller_scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_anonymous_addresses_are_two_callers_of_a_tool_service() {
        let key = SigningKey::from_base64(&"QUFB".repeat(11)).unwrap();
        let scope = CallerScope::Anonymous;
        let alice = Share::Address([10, 0, 0, 1].into());
        let bob = Share::Address("::1".parse().unwrap());
        let a = call_caller(&key, &scope, Some(&alice));
        assert_ne!(a, call_caller(&key, &scope, Some(&bob)));
        assert_eq!(a, call_caller(&key, &scope, Some(&alice)));
        assert_eq!(call_caller(&key, &scope, None), caller_hash(&key, &scope));
        // Two /64s of one IPv6 site: two callers of a call, one share of watched resources.
        let one = Share::Address("2001:db8:1:1::".parse().unwrap());
        let two = Share::Address("2001:db8:1:2::".parse().unwrap());
        assert_ne!(
            call_caller(&key, &scope, Some(&one)),
            call_caller(&key, &scope, Some(&two))
        );
        assert_eq!(
            caller_key(&key, Some(&one), &scope),
            caller_key(&key, Some(&two), &scope)
        );
    }

    #[test]
    fn a_sites_64s_are_two_callers_of_a_call_and_one_fairness_key() {
        let key = SigningKey::from_base64(&"QUFB".repeat(11)).unwrap();
        let scope = CallerScope::Anonymous;
        let named = |address: &str| {
            let share = Share::Address(address.parse().unwrap());
            let mut headers = std::collections::HashMap::new();
            CallCaller::of(&key, &scope, Some(&share)).name_in(&mut headers);
            headers
        };
        let (one, two) = (named("2001:db8:1:1::"), named("2001:db8:1:2::"));
        assert_ne!(one[CALLER_HEADER], two[CALLER_HEADER], "R-PRX-10");
        assert_eq!(one[CALLER_KEY_HEADER], two[CALLER_KEY_HEADER], "R-PRX-40");
        let other_site = named("2001:db8:2:1::");
        assert_ne!(one[CALLER_KEY_HEADER], other_site[CALLER_KEY_HEADER]);
        assert!(one.values().all(|v| !v.contains("2001")));
    }

    #[test]
    fn a_caller_key_is_the_same_on_every_replica_and_tells_callers_apart() {
        let key = SigningKey::from_base64(&"QUFB".repeat(11)).unwrap();
        let other_key = SigningKey::from_base64(&"QkJC".repeat(11)).unwrap();
        let scope = CallerScope::Anonymous;
        let alice = Share::Address([10, 0, 0, 1].into());
        let bob = Share::Address([10, 0, 0, 2].into());
        let a = caller_key(&key, Some(&alice), &scope);
        assert_eq!(a.len(), CALLER_KEY_LEN);
        assert_eq!(
            a,
            caller_key(&key.clone(), Some(&alice), &scope),
            "another replica"
        );
        assert_ne!(a, caller_key(&key, Some(&bob), &scope));
        assert_ne!(
            a,
            caller_key(&other_key, Some(&alice), &scope),
            "another deployment"
        );
        assert!(!a.contains("10.0.0.1"));
        let stdio = caller_key(&key, None, &scope);
        assert_ne!(stdio, a);
        assert_eq!(stdio, caller_key(&key, None, &scope));
    }
}
