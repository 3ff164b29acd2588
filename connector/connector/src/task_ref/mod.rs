//! Signed, caller-scoped task IDs.
//!
//! The connector keeps no task table. A task ID is the whole reference: the Temporal namespace,
//! the operation ID, the run ID and a hash of the caller's scope, as JSON, followed by an
//! HMAC-SHA256 over that JSON under [`SigningKey`]:
//!
//! ```text
//! base64url(json) "." base64url(hmac_sha256(key, json))      (both without padding)
//! ```
//!
//! The JSON is readable on purpose (a task ID is not a secret and hiding it would suggest it
//! is); the MAC stops a caller from changing it. [`verify`] checks the MAC and then the owner
//! before the connector makes any Temporal call, both in constant time, and every failure is
//! the same [`TaskRefError::Invalid`], so a caller cannot tell a forged ID from someone else's.
//!
//! Keys rotate (R-CON-18): each task ID names its key by a [`key_id`] (`kid`, a MAC of a
//! constant, which reveals nothing about the key), and [`verify_with_ring`] checks it with the
//! current key or any previous key still listed ([`KeyRing`]), so a task started before a
//! rotation can still be followed and cancelled. New task IDs are always signed with the current
//! key.
//!
//! The caller hash ([`caller_hash`]) is keyed with the same secret, so it cannot be computed,
//! or reversed to an identity, without the key. It lives only inside task IDs and in
//! idempotency operation IDs (hashed once more there); it is never sent to Temporal as such.

use std::ffi::OsString;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit as _, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// Environment variable holding the base64 task signing key.
pub const SIGNING_KEY_ENV: &str = "MCP_TASK_SIGNING_KEY";
/// Environment variable listing earlier signing keys (base64, separated by commas or
/// whitespace) whose task IDs still verify after a rotation (R-CON-18).
pub const PREVIOUS_KEYS_ENV: &str = "MCP_TASK_SIGNING_KEYS_PREVIOUS";
/// Length of a [`key_id`].
pub const KEY_ID_LEN: usize = 8;
/// Fewest key bytes accepted: HMAC-SHA256's own block of security, 256 bits.
pub const MIN_KEY_BYTES: usize = 32;
/// Longest task ID [`verify`] looks at. Checked before decoding or hashing, so an oversized
/// input costs nothing. Temporal IDs are at most 1000 bytes by default; 4 KiB leaves room for
/// JSON escaping and base64 growth of a namespace, an operation ID and a run ID.
pub const MAX_TASK_ID_LEN: usize = 4096;
/// The [`TaskRef::v`] this build writes and accepts.
pub const TASK_REF_VERSION: u8 = 1;
/// Length of a [`caller_hash`]: 22 base64url characters, 132 bits of the HMAC.
pub const CALLER_HASH_LEN: usize = 22;

/// Secret key that signs task IDs and keys caller hashes.
///
/// Its bytes never leave this type: `Debug` prints `SigningKey(***)` and there is no accessor.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

/// Why a signing key was refused. Messages never contain key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "{SIGNING_KEY_ENV} is set but empty; set it to at least {MIN_KEY_BYTES} random bytes in base64 (for example `openssl rand -base64 32`) or unset it"
    )]
    Empty,
    #[error("{SIGNING_KEY_ENV} is not valid UTF-8; it must be base64 text")]
    NotUnicode,
    #[error(
        "the task signing key is not valid base64 (standard or URL-safe alphabet expected); generate one with `openssl rand -base64 32`"
    )]
    NotBase64,
    #[error(
        "the task signing key decodes to {bytes} bytes; at least {MIN_KEY_BYTES} random bytes are required (for example `openssl rand -base64 32`)"
    )]
    TooShort { bytes: usize },
    #[error("the operating system's random number generator failed: {0}")]
    Random(String),
    #[error("entry {position} of {PREVIOUS_KEYS_ENV} is unusable: {reason}")]
    Previous {
        position: usize,
        reason: Box<KeyError>,
    },
}

/// Standard and URL-safe base64, padded or not: `openssl rand -base64` and every other tool
/// people use to make keys must just work.
const LENIENT: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);

impl SigningKey {
    /// Decodes a base64 key (standard or URL-safe alphabet, padding optional, surrounding
    /// whitespace ignored) of at least [`MIN_KEY_BYTES`] bytes.
    pub fn from_base64(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        let bytes = STANDARD_LENIENT
            .decode(s)
            .or_else(|_| URL_SAFE_LENIENT.decode(s))
            .map_err(|_| KeyError::NotBase64)?;
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort { bytes: bytes.len() });
        }
        Ok(Self(bytes))
    }

    /// A fresh random key for this process only. Task IDs signed with it die with the process,
    /// which is what a stdio connector without `MCP_TASK_SIGNING_KEY` wants.
    pub fn generate() -> Self {
        Self::try_generate().expect("the operating system's random number generator failed")
    }

    /// [`SigningKey::generate`] that reports a failing random source instead of panicking.
    pub fn try_generate() -> Result<Self, KeyError> {
        let mut bytes = vec![0u8; MIN_KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// The key in [`SIGNING_KEY_ENV`]: `Ok(None)` when unset, an error when set but unusable
    /// (set-but-empty is an error, not "unset": it is almost always a deployment mistake, and
    /// silently generating a key would break task IDs across replicas).
    pub fn from_env() -> Result<Option<Self>, KeyError> {
        Self::from_env_value(std::env::var_os(SIGNING_KEY_ENV))
    }

    fn from_env_value(value: Option<OsString>) -> Result<Option<Self>, KeyError> {
        let Some(value) = value else { return Ok(None) };
        let value = value.into_string().map_err(|_| KeyError::NotUnicode)?;
        Self::from_base64(&value).map(Some)
    }

    /// The earlier keys in [`PREVIOUS_KEYS_ENV`] (none when unset or blank), each checked like
    /// the current key; an error names the entry by position, never by content.
    pub fn previous_from_env() -> Result<Vec<Self>, KeyError> {
        match std::env::var_os(PREVIOUS_KEYS_ENV) {
            None => Ok(Vec::new()),
            Some(value) => {
                Self::parse_previous(&value.into_string().map_err(|_| KeyError::NotUnicode)?)
            }
        }
    }

    fn parse_previous(list: &str) -> Result<Vec<Self>, KeyError> {
        list.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|entry| !entry.is_empty())
            .enumerate()
            .map(|(i, entry)| {
                Self::from_base64(entry).map_err(|reason| KeyError::Previous {
                    position: i + 1,
                    reason: Box::new(reason),
                })
            })
            .collect()
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }

    /// A key for another `purpose`, derived from this one: HMAC-SHA256(key, `"derive:" +
    /// purpose`). The prefix keeps these MACs apart from task ID MACs (input starting with
    /// `{`) and owner hashes (`owner:`); nothing derived reveals this key.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"derive:");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// What a task ID refers to. `owner` is a [`caller_hash`].
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq, Debug)]
#[serde(deny_unknown_fields)]
pub struct TaskRef {
    /// Temporal namespace of the operation.
    pub ns: String,
    /// Standalone Nexus operation ID.
    pub op: String,
    /// Run ID of that operation (an ID can be reused; the run pins one execution).
    pub run: String,
    /// [`caller_hash`] of the caller that started it.
    pub owner: String,
    /// Format version, [`TASK_REF_VERSION`].
    pub v: u8,
    /// The [`key_id`] of the key that signed it; absent in IDs from before rotation existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
}

impl TaskRef {
    /// A reference in the current format version.
    pub fn new(
        ns: impl Into<String>,
        op: impl Into<String>,
        run: impl Into<String>,
        owner: impl Into<String>,
    ) -> Self {
        Self {
            ns: ns.into(),
            op: op.into(),
            run: run.into(),
            owner: owner.into(),
            v: TASK_REF_VERSION,
            kid: None,
        }
    }
}

/// Whose tasks and idempotency keys these are.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum CallerScope {
    /// No identity: every caller of an unauthenticated connector shares this one scope (the
    /// library's default).
    Anonymous,
    /// No identity, in a scope named by the deployment: callers without authentication share
    /// it only with callers of the same name (the binary's `--anonymous-scope`, by default its
    /// transport, so a stdio host and anonymous HTTP callers never share by accident).
    Unauthenticated(String),
    /// One stdio client, named by the connector (for example a per-process ID).
    Process(String),
    /// A verified token's issuer and subject. Token renewal and other replicas keep the scope.
    Subject { issuer: String, subject: String },
}

impl CallerScope {
    /// An unambiguous byte string per scope: JSON arrays, so no choice of issuer or subject
    /// can make two different scopes encode alike.
    fn canonical(&self) -> String {
        let parts: Vec<&str> = match self {
            CallerScope::Anonymous => vec!["anonymous"],
            CallerScope::Unauthenticated(name) => vec!["unauthenticated", name],
            CallerScope::Process(id) => vec!["process", id],
            CallerScope::Subject { issuer, subject } => vec!["subject", issuer, subject],
        };
        serde_json::to_string(&parts).expect("strings always serialize")
    }
}

/// The caller's owner hash: HMAC-SHA256(key, `"owner:" + canonical scope`), base64url,
/// truncated to [`CALLER_HASH_LEN`] characters.
///
/// Keyed so that nobody without the key can link a hash to an identity. The `owner:` prefix
/// separates these MACs from task ID MACs, whose input always starts with `{`.
pub fn caller_hash(key: &SigningKey, scope: &CallerScope) -> String {
    let mut mac = key.mac();
    mac.update(b"owner:");
    mac.update(scope.canonical().as_bytes());
    let mut hash = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    hash.truncate(CALLER_HASH_LEN);
    hash
}

/// A key's public name: HMAC-SHA256(key, `"kid"`), base64url, [`KEY_ID_LEN`] characters. Task
/// IDs carry it so that the verifier knows which key to try; it cannot be turned back into the
/// key.
pub fn key_id(key: &SigningKey) -> String {
    let mut mac = key.mac();
    mac.update(b"kid");
    let mut id = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    id.truncate(KEY_ID_LEN);
    id
}

/// The current signing key and the earlier ones whose task IDs still verify (R-CON-18).
#[derive(Clone, Debug)]
pub struct KeyRing {
    pub current: SigningKey,
    pub previous: Vec<SigningKey>,
}

impl KeyRing {
    /// Every key, current first.
    fn keys(&self) -> impl Iterator<Item = &SigningKey> {
        std::iter::once(&self.current).chain(&self.previous)
    }
}

/// Signs `r` with the ring's current key, naming it in the ID's `kid`.
pub fn sign_current(ring: &KeyRing, r: &TaskRef) -> String {
    let r = TaskRef {
        kid: Some(key_id(&ring.current)),
        ..r.clone()
    };
    sign(&ring.current, &r)
}

/// [`verify`] with whichever ring key signed the ID: the one its `kid` names, or (an ID
/// without `kid`) each key in turn. `owner_of` gives the caller's [`caller_hash`] under a key,
/// since owner hashes are keyed too. Any failure is the one [`TaskRefError::Invalid`].
pub fn verify_with_ring(
    ring: &KeyRing,
    task_id: &str,
    owner_of: impl Fn(&SigningKey) -> String,
) -> Result<TaskRef, TaskRefError> {
    if task_id.len() > MAX_TASK_ID_LEN {
        return Err(TaskRefError::Invalid);
    }
    // The kid is read before the MAC is checked: it only chooses a key, and the MAC under
    // that key then covers it.
    let kid = task_id
        .split_once('.')
        .and_then(|(json, _)| URL_SAFE_NO_PAD.decode(json).ok())
        .and_then(|json| serde_json::from_slice::<TaskRef>(&json).ok())
        .and_then(|r| r.kid);
    let mut candidates: Vec<&SigningKey> = match &kid {
        Some(kid) => ring.keys().filter(|k| key_id(k) == *kid).collect(),
        None => ring.keys().collect(),
    };
    candidates.dedup_by(|a, b| a.0 == b.0);
    candidates
        .into_iter()
        .find_map(|key| verify(key, task_id, &owner_of(key)).ok())
        .ok_or(TaskRefError::Invalid)
}

/// Signs a reference into a task ID (see the module doc for the format).
///
/// An ID longer than [`MAX_TASK_ID_LEN`] would not verify; with Temporal's ID limits that
/// cannot happen for references the connector builds.
pub fn sign(key: &SigningKey, r: &TaskRef) -> String {
    let json = serde_json::to_vec(r).expect("TaskRef always serializes");
    let mut mac = key.mac();
    mac.update(&json);
    let tag = mac.finalize().into_bytes();
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&json),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// The one answer for every task ID that is not the caller's valid task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefError {
    /// Forged, altered, malformed, oversized, another caller's, or from another key: callers
    /// must not learn which, so there is one variant and one message.
    #[error("unknown task")]
    Invalid,
}

/// Checks a task ID and returns its reference if it was signed with `key` for the caller
/// whose [`caller_hash`] is `caller_owner_hash`.
///
/// Order: size limit, then strict base64url decoding (canonical only, so no two strings decode
/// alike), then the MAC in constant time, then the JSON, then the owner in constant time.
pub fn verify(
    key: &SigningKey,
    task_id: &str,
    caller_owner_hash: &str,
) -> Result<TaskRef, TaskRefError> {
    if task_id.len() > MAX_TASK_ID_LEN {
        return Err(TaskRefError::Invalid);
    }
    let (json_b64, tag_b64) = task_id.split_once('.').ok_or(TaskRefError::Invalid)?;
    // URL_SAFE_NO_PAD rejects '.', '=', whitespace, non-ASCII and non-zero trailing bits.
    let json = URL_SAFE_NO_PAD
        .decode(json_b64)
        .map_err(|_| TaskRefError::Invalid)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag_b64)
        .map_err(|_| TaskRefError::Invalid)?;
    let mut mac = key.mac();
    mac.update(&json);
    mac.verify_slice(&tag).map_err(|_| TaskRefError::Invalid)?;
    let r: TaskRef = serde_json::from_slice(&json).map_err(|_| TaskRefError::Invalid)?;
    if r.v != TASK_REF_VERSION {
        return Err(TaskRefError::Invalid);
    }
    if !bool::from(r.owner.as_bytes().ct_eq(caller_owner_hash.as_bytes())) {
        return Err(TaskRefError::Invalid);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(byte: u8) -> SigningKey {
        SigningKey(vec![byte; 32])
    }

    /// Known answers (HMAC-SHA256 as any implementation computes it): IDs signed by earlier
    /// builds, whatever HMAC crate version they used, still verify, and new ones are the same.
    #[test]
    fn signatures_are_pinned() {
        let k = SigningKey((0..32).collect());
        let id = "eyJucyI6Im5zIiwib3AiOiJvcCIsInJ1biI6InJ1biIsIm93bmVyIjoib3duZXIiLCJ2IjoxfQ\
                  .d5VyG4JRcBQLdZGhmQ7NNrE6RmDR8h9GGqFP8flhCgw";
        let r = TaskRef::new("ns", "op", "run", "owner");
        assert_eq!(sign(&k, &r), id);
        assert_eq!(verify(&k, id, "owner"), Ok(r));
        assert_eq!(key_id(&k), "kzAHpTFM");
        assert_eq!(
            k.derive("idempotency"),
            *b"\x50\x32\x4a\xc3\xd5\xa9\x06\x81\x4e\x6d\x65\xe1\xd1\x45\xc4\x97\
               \xcc\xf4\x02\x98\x41\x35\xf3\xf8\xe0\xc7\xc8\xd3\x11\x04\xad\xbc"
        );
    }

    /// The caller hash scopes every task and idempotency key: a change would orphan them all
    /// (the value is HMAC-SHA256 as Python's hmac module computes it).
    #[test]
    fn caller_hashes_are_pinned() {
        let k = SigningKey((0..32).collect());
        let scope = CallerScope::Subject {
            issuer: "https://idp".into(),
            subject: "alice".into(),
        };
        assert_eq!(caller_hash(&k, &scope), "sXAlYImwj99ke688G9Pj3Y");
    }

    fn sample(key: &SigningKey) -> (TaskRef, String) {
        let owner = caller_hash(
            key,
            &CallerScope::Subject {
                issuer: "https://idp".into(),
                subject: "alice".into(),
            },
        );
        let r = TaskRef::new("default", "conn-x-123", "0197-run", owner);
        let id = sign(key, &r);
        (r, id)
    }

    #[test]
    fn round_trip() {
        let k = key(7);
        let (r, id) = sample(&k);
        assert_eq!(verify(&k, &id, &r.owner), Ok(r));
    }

    #[test]
    fn json_part_is_readable() {
        let k = key(7);
        let (r, id) = sample(&k);
        let json = URL_SAFE_NO_PAD
            .decode(id.split('.').next().unwrap())
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["ns"], "default");
        assert_eq!(value["op"], "conn-x-123");
        assert_eq!(value["run"], "0197-run");
        assert_eq!(value["owner"], r.owner.as_str());
        assert_eq!(value["v"], 1);
    }

    #[test]
    fn foreign_owner_gets_the_same_error_as_garbage() {
        let k = key(7);
        let (_, id) = sample(&k);
        let bob = caller_hash(
            &k,
            &CallerScope::Subject {
                issuer: "https://idp".into(),
                subject: "bob".into(),
            },
        );
        let foreign = verify(&k, &id, &bob).unwrap_err();
        let garbage = verify(&k, "garbage", &bob).unwrap_err();
        assert_eq!(foreign, garbage);
        assert_eq!(foreign.to_string(), "unknown task");
        assert_eq!(format!("{foreign:?}"), format!("{garbage:?}"));
    }

    #[test]
    fn another_key_rejects() {
        let (r, id) = sample(&key(7));
        assert_eq!(verify(&key(8), &id, &r.owner), Err(TaskRefError::Invalid));
    }

    #[test]
    fn unicode_whitespace_and_oversized_inputs_are_rejected() {
        let k = key(7);
        let (r, id) = sample(&k);
        for bad in [
            format!(" {id}"),
            format!("{id}\n"),
            format!("{id} "),
            id.replacen('.', " .", 1),
            format!("é{id}"),
            id.replacen('.', "。", 1),
            format!("{id}="),
            String::new(),
            ".".into(),
            format!("{id}.{id}"),
            format!("{}{}", "A".repeat(MAX_TASK_ID_LEN), id),
        ] {
            assert_eq!(
                verify(&k, &bad, &r.owner),
                Err(TaskRefError::Invalid),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn other_versions_are_rejected_even_when_signed() {
        let k = key(7);
        let (mut r, _) = sample(&k);
        r.v = TASK_REF_VERSION + 1;
        assert_eq!(
            verify(&k, &sign(&k, &r), &r.owner),
            Err(TaskRefError::Invalid)
        );
    }

    #[test]
    fn caller_hash_depends_on_key_and_scope_and_has_fixed_length() {
        let k = key(7);
        let scopes = [
            CallerScope::Anonymous,
            CallerScope::Unauthenticated("stdio".into()),
            CallerScope::Unauthenticated("http".into()),
            CallerScope::Process("p1".into()),
            CallerScope::Process("p2".into()),
            CallerScope::Subject {
                issuer: "a".into(),
                subject: "b".into(),
            },
            CallerScope::Subject {
                issuer: "a\",\"b".into(),
                subject: "".into(),
            },
            CallerScope::Subject {
                issuer: "b".into(),
                subject: "a".into(),
            },
        ];
        let hashes: Vec<_> = scopes.iter().map(|s| caller_hash(&k, s)).collect();
        for (i, h) in hashes.iter().enumerate() {
            assert_eq!(h.len(), CALLER_HASH_LEN);
            assert!(
                h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(h, &caller_hash(&k, &scopes[i]), "deterministic");
            for other in &hashes[i + 1..] {
                assert_ne!(h, other);
            }
        }
        assert_ne!(
            caller_hash(&k, &CallerScope::Anonymous),
            caller_hash(&key(8), &CallerScope::Anonymous)
        );
    }

    #[test]
    fn keys_decode_and_never_print() {
        let k = SigningKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
        assert_eq!(k.0, (0u8..32).collect::<Vec<_>>());
        // URL-safe and unpadded spellings of the same bytes.
        let url = SigningKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap();
        assert_eq!(url.0, k.0);
        let k2 = SigningKey::from_base64("-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_").unwrap();
        assert_eq!(k2.0.len(), 33);
        assert_eq!(format!("{k:?}"), "SigningKey(***)");
        assert_eq!(
            SigningKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==").unwrap_err(),
            KeyError::TooShort { bytes: 31 }
        );
        assert_eq!(
            SigningKey::from_base64("not base64!").unwrap_err(),
            KeyError::NotBase64
        );
        assert_eq!(SigningKey::from_base64("   ").unwrap_err(), KeyError::Empty);
        assert!(
            KeyError::TooShort { bytes: 31 }
                .to_string()
                .contains("at least 32")
        );
    }

    #[test]
    fn env_value_rules() {
        assert!(SigningKey::from_env_value(None).unwrap().is_none());
        assert_eq!(
            SigningKey::from_env_value(Some("".into())).unwrap_err(),
            KeyError::Empty
        );
        let k =
            SigningKey::from_env_value(Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()));
        assert!(k.unwrap().is_some());
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt as _;
            let bad = OsString::from_vec(vec![0xff, 0xfe]);
            assert_eq!(
                SigningKey::from_env_value(Some(bad)).unwrap_err(),
                KeyError::NotUnicode
            );
        }
    }

    fn ring(current: u8, previous: &[u8]) -> KeyRing {
        KeyRing {
            current: key(current),
            previous: previous.iter().map(|&b| key(b)).collect(),
        }
    }

    fn alice() -> CallerScope {
        CallerScope::Subject {
            issuer: "https://idp".into(),
            subject: "alice".into(),
        }
    }

    /// A task ID as the connector makes it: owned by alice under the ring's current key.
    fn ring_id(ring: &KeyRing) -> String {
        let owner = caller_hash(&ring.current, &alice());
        sign_current(ring, &TaskRef::new("default", "conn-x-123", "run", owner))
    }

    #[test]
    fn task_ids_signed_before_a_rotation_verify_while_the_old_key_is_listed() {
        let before = ring(7, &[]);
        let id = ring_id(&before);
        let owner_of = |k: &SigningKey| caller_hash(k, &alice());
        assert!(verify_with_ring(&before, &id, owner_of).is_ok());
        // Rotated: 8 is current, 7 listed as previous.
        let rotated = ring(8, &[7]);
        let r = verify_with_ring(&rotated, &id, owner_of).unwrap();
        assert_eq!(r.op, "conn-x-123");
        assert_eq!(r.kid.as_deref(), Some(key_id(&key(7)).as_str()));
        // New IDs carry the new key's id and verify too.
        assert!(verify_with_ring(&rotated, &ring_id(&rotated), owner_of).is_ok());
        // Once the old key is dropped, its IDs are unknown, like any other bad ID.
        assert_eq!(
            verify_with_ring(&ring(8, &[]), &id, owner_of),
            Err(TaskRefError::Invalid)
        );
        // The owner is still checked, under the key that signed.
        let bob = |k: &SigningKey| {
            caller_hash(
                k,
                &CallerScope::Subject {
                    issuer: "https://idp".into(),
                    subject: "bob".into(),
                },
            )
        };
        assert_eq!(
            verify_with_ring(&rotated, &id, bob),
            Err(TaskRefError::Invalid)
        );
    }

    #[test]
    fn ids_without_a_kid_try_every_key_and_a_changed_kid_breaks_the_mac() {
        let owner_of = |k: &SigningKey| caller_hash(k, &alice());
        let legacy = sign(
            &key(7),
            &TaskRef::new("default", "op", "run", caller_hash(&key(7), &alice())),
        );
        assert!(verify_with_ring(&ring(8, &[9, 7]), &legacy, owner_of).is_ok());
        // The kid is covered by the MAC: pointing it at another listed key fails.
        let id = ring_id(&ring(7, &[]));
        let json = URL_SAFE_NO_PAD
            .decode(id.split('.').next().unwrap())
            .unwrap();
        let mut r: TaskRef = serde_json::from_slice(&json).unwrap();
        r.kid = Some(key_id(&key(8)));
        let forged = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&r).unwrap()),
            id.split('.').nth(1).unwrap()
        );
        assert_eq!(
            verify_with_ring(&ring(8, &[7]), &forged, owner_of),
            Err(TaskRefError::Invalid)
        );
    }

    #[test]
    fn key_ids_are_short_distinct_and_not_the_key() {
        let (a, b) = (key_id(&key(7)), key_id(&key(8)));
        assert_eq!(a.len(), KEY_ID_LEN);
        assert_ne!(a, b);
        assert!(!URL_SAFE_NO_PAD.encode(&key(7).0).contains(&a));
    }

    #[test]
    fn previous_keys_parse_from_a_list_and_errors_name_the_entry_not_the_key() {
        let good = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        assert!(SigningKey::parse_previous("").unwrap().is_empty());
        assert_eq!(
            SigningKey::parse_previous(&format!("{good}, {good}\n{good}"))
                .unwrap()
                .len(),
            3
        );
        let short = "c2hvcnQtc2VjcmV0LWtleQ==";
        let err = SigningKey::parse_previous(&format!("{good},{short}")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("entry 2 of MCP_TASK_SIGNING_KEYS_PREVIOUS") && text.contains("bytes"),
            "{text}"
        );
        assert!(!text.contains(short) && !text.contains(good), "{text}");
    }

    #[test]
    fn generated_keys_differ() {
        let (a, b) = (SigningKey::generate(), SigningKey::generate());
        assert_eq!(a.0.len(), MIN_KEY_BYTES);
        assert_ne!(a.0, b.0);
    }

    #[test]
    fn every_single_byte_mutation_of_one_id_is_rejected_exhaustively() {
        let k = key(9);
        let (r, id) = sample(&k);
        let alphabet: Vec<u8> = (0u8..=127).collect();
        let mut tried = 0;
        let mut check = |bytes: Vec<u8>| {
            if let Ok(s) = String::from_utf8(bytes) {
                assert_eq!(verify(&k, &s, &r.owner), Err(TaskRefError::Invalid), "{s}");
                tried += 1;
            }
        };
        for at in 0..id.len() {
            for mask in 1..=255u8 {
                check(apply(&id, &Mutation::Flip { at, mask }));
            }
            check(apply(&id, &Mutation::Delete { at }));
        }
        for at in 0..=id.len() {
            for &byte in &alphabet {
                check(apply(&id, &Mutation::Insert { at, byte }));
            }
        }
        assert!(tried > id.len() * 200);
    }

    /// One single-byte edit of a task ID: flip bits of a byte, insert a byte, or delete one.
    #[derive(Debug, Clone)]
    enum Mutation {
        Flip { at: usize, mask: u8 },
        Insert { at: usize, byte: u8 },
        Delete { at: usize },
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
            (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
            any::<usize>().prop_map(|at| Mutation::Delete { at }),
        ]
    }

    fn apply(id: &str, m: &Mutation) -> Vec<u8> {
        let mut bytes = id.as_bytes().to_vec();
        match *m {
            Mutation::Flip { at, mask } => bytes[at % id.len()] ^= mask,
            Mutation::Insert { at, byte } => bytes.insert(at % (id.len() + 1), byte),
            Mutation::Delete { at } => {
                bytes.remove(at % id.len());
            }
        }
        bytes
    }

    proptest! {
        #[test]
        fn every_single_byte_mutation_is_rejected(
            ns in "[a-z0-9.-]{1,40}",
            op in "\\PC{1,60}",
            run in "[0-9a-f-]{36}",
            key_byte in any::<u8>(),
            m in mutation(),
        ) {
            let k = key(key_byte);
            let owner = caller_hash(&k, &CallerScope::Anonymous);
            let r = TaskRef::new(ns, op, run, owner.clone());
            let id = sign(&k, &r);
            prop_assert_eq!(verify(&k, &id, &owner), Ok(r));
            let mutated = apply(&id, &m);
            // Bytes that are not UTF-8 never reach `verify` as a &str; the rest must all fail.
            if let Ok(mutated) = String::from_utf8(mutated) {
                prop_assert_eq!(verify(&k, &mutated, &owner), Err(TaskRefError::Invalid));
            }
        }

        #[test]
        fn arbitrary_strings_are_rejected(s in "\\PC{0,200}") {
            let k = key(1);
            prop_assert_eq!(verify(&k, &s, &caller_hash(&k, &CallerScope::Anonymous)), Err(TaskRefError::Invalid));
        }

        #[test]
        fn round_trips_for_any_strings(ns in ".{0,64}", op in ".{0,200}", run in ".{0,64}") {
            let k = key(3);
            let owner = caller_hash(&k, &CallerScope::Process("p".into()));
            let r = TaskRef::new(ns, op, run, owner.clone());
            prop_assert_eq!(verify(&k, &sign(&k, &r), &owner), Ok(r));
        }
    }
}
