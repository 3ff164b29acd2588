//! The task ID earlier builds issued (version 1), still verified so that tasks in flight across
//! an upgrade are followed (R-CON-6), never issued any more:
//!
//! ```text
//! base64url(JSON{ns, op, run, owner, v: 1, kid}) "." base64url(HMAC-SHA256(key, json))
//! ```
//!
//! `kid` ([`key_id`]) names the signing key; an ID from before rotation existed has none and
//! tries every key. The MAC's input starts with `{`, so it never meets the compact form's, an
//! owner hash's or a derived key's.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac as _;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;

use super::{Deployment, KeyRing, SigningKey, TaskRef, key_id};

/// The `v` of every version-1 task ID.
const VERSION: u8 = 1;

/// A version-1 task ID's JSON.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Json {
    ns: String,
    op: String,
    run: String,
    owner: String,
    v: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
}

/// `r` as a version-1 task ID under `key`, naming the key when `with_kid`: what earlier builds
/// issued (with the kid since key rotation, R-CON-18). The connector never issues one; tests
/// and upgrade checks make them.
pub fn sign(key: &SigningKey, r: &TaskRef, with_kid: bool) -> String {
    let json = Json {
        ns: r.ns.clone(),
        op: r.op.clone(),
        run: r.run.clone(),
        owner: r.owner.clone(),
        v: VERSION,
        kid: with_kid.then(|| key_id(key)),
    };
    // Strings and numbers always serialize; were they not to, the empty reference signed
    // would name no task.
    let json = serde_json::to_vec(&json).unwrap_or_default();
    let mut mac = key.mac();
    mac.update(&json);
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&json),
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// The reference of a version-1 task ID under whichever ring key signed it: the one its `kid`
/// names, or each in turn without a `kid`. `None` for every kind of bad ID.
pub(super) fn verify(
    ring: &KeyRing,
    task_id: &str,
    deployment: &Deployment<'_>,
    owner_of: impl Fn(&SigningKey) -> String,
) -> Option<TaskRef> {
    let (json_b64, tag_b64) = task_id.split_once('.')?;
    // URL_SAFE_NO_PAD rejects '.', '=', whitespace, non-ASCII and non-zero trailing bits, so
    // no two strings decode alike.
    let json = URL_SAFE_NO_PAD.decode(json_b64).ok()?;
    let tag = URL_SAFE_NO_PAD.decode(tag_b64).ok()?;
    // The kid is read before the MAC is checked: it only chooses keys, and the MAC under the
    // chosen key covers it.
    let kid = serde_json::from_slice::<Json>(&json)
        .ok()
        .and_then(|r| r.kid);
    ring.keys()
        .into_iter()
        .filter(|key| kid.as_ref().is_none_or(|kid| key_id(key) == *kid))
        .find_map(|key| checked(key, &json, &tag, deployment, &owner_of(key)))
}

/// Order: the MAC in constant time, then the JSON, its version and namespace, then the owner
/// in constant time.
fn checked(
    key: &SigningKey,
    json: &[u8],
    tag: &[u8],
    deployment: &Deployment<'_>,
    owner: &str,
) -> Option<TaskRef> {
    let mut mac = key.mac();
    mac.update(json);
    mac.verify_slice(tag).ok()?;
    let r: Json = serde_json::from_slice(json).ok()?;
    let owned = bool::from(r.owner.as_bytes().ct_eq(owner.as_bytes()));
    (r.v == VERSION && r.ns == deployment.namespace && owned).then_some(TaskRef {
        ns: r.ns,
        op: r.op,
        run: r.run,
        owner: r.owner,
    })
}
