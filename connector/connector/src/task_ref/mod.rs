//! Signed, caller-scoped task IDs (R-CON-6).
//!
//! The connector keeps no task table. A task ID is the whole reference to a Nexus operation's
//! run: any replica with the signing key reads it without asking anyone, and only its caller
//! may use it. Hosts keep task IDs as short strings (Claude Code refuses one longer than 128
//! characters, or with a character outside `!`..`~`), so the ID is binary, base64url without
//! padding, at most [`MAX_COMPACT_TASK_ID_LEN`] characters for every operation the connector
//! makes:
//!
//! ```text
//! base64url( 2 | kid hint | form | run | op | tag )
//! ```
//!
//! The run ID and the operation ID are held in a few bytes each (see the `compact` module: a
//! call's UUID and prefix, a keyed call's HMAC, the input round). Everything a replica knows
//! anyway stays out of the text and goes into the MAC: `tag` is the first 16 bytes (128 bits)
//! of HMAC-SHA256(key, `"task-id:v2\0"`, the bytes before it, the namespace, the caller's
//! [`caller_hash`], the connector name), each length-prefixed. So an ID is good only in its
//! namespace, for its caller, under its connector name and key; every failure is the same
//! [`TaskRefError::Invalid`], so a caller cannot tell a forged ID from someone else's, and
//! [`verify_with_ring`] decides before the connector makes any Temporal call, comparing tags
//! in constant time. The text is not secret and not hidden; the MAC stops a caller from
//! changing it.
//!
//! Keys rotate (R-CON-18): the kid hint is the first byte of the key's [`key_id`] MAC, and
//! [`verify_with_ring`] tries each key of the ring ([`KeyRing`]: the current one and the
//! previous ones still listed) with that hint, so a task started before a rotation can still be
//! followed and cancelled. New task IDs are always compact and signed with the current key.
//!
//! Task IDs of earlier builds (`base64url(JSON) "." base64url(MAC)`, the `legacy` module) still
//! verify, so tasks in flight across an upgrade are followed; none is issued any more.
//!
//! The caller hash ([`caller_hash`]) is keyed with the same secret, so it cannot be computed,
//! or reversed to an identity, without the key. It lives only inside task ID MACs, in
//! version-1 task IDs and in idempotency operation IDs (hashed once more there); it is never
//! sent to Temporal as such.

mod compact;
pub mod legacy;

use std::ffi::OsString;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit as _, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;
use temporalio_protos::temporal::api::common::v1::Payload;

pub use compact::MAX_PREFIX_LEN as MAX_OPERATION_ID_PREFIX_LEN;

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
/// Longest task ID a host keeps: Claude Code's `CreateTaskResult` schema allows 128
/// characters. Every task ID the connector issues for its own operations is at most this
/// long, whatever the namespace, connector name, key or round.
pub const MAX_COMPACT_TASK_ID_LEN: usize = 128;
/// Longest task ID [`verify_with_ring`] looks at. Checked before decoding or hashing, so an
/// oversized input costs nothing. Temporal IDs are at most 1000 bytes by default; 4 KiB leaves
/// room for an earlier build's JSON IDs, with escaping and base64 growth.
pub const MAX_TASK_ID_LEN: usize = 4096;
/// Length of a [`caller_hash`]: 22 base64url characters, 132 bits of the HMAC.
pub const CALLER_HASH_LEN: usize = 22;
/// Starts the MAC input of a compact task ID: never `{` (version 1), `owner:`, `derive:` or
/// `kid`, the other MACs under the same key.
const COMPACT_DOMAIN: &[u8] = b"task-id:v2\0";

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
    /// `{` or `task-id:`) and owner hashes (`owner:`); nothing derived reveals this key.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"derive:");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// What a task ID refers to. `owner` is a [`caller_hash`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TaskRef {
    /// Temporal namespace of the operation.
    pub ns: String,
    /// Standalone Nexus operation ID.
    pub op: String,
    /// Run ID of that operation (an ID can be reused; the run pins one execution).
    pub run: String,
    /// [`caller_hash`] of the caller that started it.
    pub owner: String,
}

impl TaskRef {
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
        }
    }
}

/// What the replicas that serve each other's tasks share besides the key (docs/deployment.md):
/// a task ID's MAC covers both, its text holds neither.
#[derive(Clone, Copy, Debug)]
pub struct Deployment<'a> {
    /// The Temporal namespace of its operations.
    pub namespace: &'a str,
    /// `--connector-name`, the first part of its operation IDs.
    pub connector_name: &'a str,
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
        // JSON strings, quoted and escaped as JSON writes them.
        let parts: Vec<String> = parts
            .iter()
            .map(|p| serde_json::Value::from(*p).to_string())
            .collect();
        format!("[{}]", parts.join(","))
    }
}

/// The caller's owner hash: HMAC-SHA256(key, `"owner:" + canonical scope`), base64url,
/// truncated to [`CALLER_HASH_LEN`] characters.
///
/// Keyed so that nobody without the key can link a hash to an identity. The `owner:` prefix
/// separates these MACs from task ID MACs (whose input starts with `{` or `task-id:`).
pub fn caller_hash(key: &SigningKey, scope: &CallerScope) -> String {
    let mut mac = key.mac();
    mac.update(b"owner:");
    mac.update(scope.canonical().as_bytes());
    let mut hash = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    hash.truncate(CALLER_HASH_LEN);
    hash
}

/// The Nexus header a round after the first carries (R-CON-40): its [`round_seal`].
pub const ROUND_SEAL_HEADER: &str = "x-durable-mcp-round-seal";

/// What a later round's seal covers (R-CON-40): the round as the connector starts it, and as
/// the server describes it (with its input).
///
/// The input is covered because a round's ID can be started again once the round closed (the
/// reuse policy is the new start's own), and whoever may describe operations reads the seal
/// from the round's Nexus headers: a seal over the ID alone would vouch for that second run
/// and whatever input it carries. Covering the input costs no RPC (the describe that reads the
/// seal asks for the input too). A run started again with the very same input is still
/// followed: it is the owner's own round run again, which whoever may start operations could
/// cause under any other ID. Telling it from the first run would need the ID's run history
/// (a visibility query per round, and eventually consistent): whoever may describe the round
/// reads every value a start sets, so no seal over them can tell the runs apart, and only the
/// server's own (run ID, times) differ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SealedRound<'a> {
    pub operation_id: &'a str,
    /// Two routes may name one service on two endpoints: the seal tells them apart.
    pub endpoint: &'a str,
    pub service: &'a str,
    pub operation: &'a str,
    /// The round's input as the connector made it (before any codec): its metadata and data.
    pub input: &'a Payload,
}

/// A later round's seal: HMAC-SHA256(key, `"round:v2\0"` and the round's operation ID,
/// endpoint, service, operation, its input's metadata entries (sorted by key) and its input's
/// data, each length-prefixed), base64url. Round IDs follow from the call's own (`<id>~r<n>`),
/// so anyone who may start operations on the endpoint could start one first; the connector
/// follows only rounds sealed with its key ([`SealedRound`], R-CON-40).
pub fn round_seal(key: &SigningKey, round: SealedRound<'_>) -> String {
    seal(key, b"round:v2\0", round)
}

/// Whether `seal` is the [`round_seal`] of `round` under one of `keys` (compared in constant
/// time).
pub fn round_sealed<'k>(
    keys: impl IntoIterator<Item = &'k SigningKey>,
    seal: &str,
    round: SealedRound<'_>,
) -> bool {
    sealed_by(keys, seal, |key| round_seal(key, round))
}

/// The Nexus header a keyed call's operation carries (R-CON-7): its [`keyed_seal`].
pub const KEYED_SEAL_HEADER: &str = "x-durable-mcp-keyed-seal";

/// A keyed call's seal: as [`round_seal`] over the keyed operation (a [`SealedRound`] of its
/// first round), in a domain of its own (`"keyed:v1\0"`), so neither seal stands for the
/// other. A keyed operation's ID is listed to whoever may list operations and can be started
/// again once it closed; a retry follows only a run this seal vouches for (R-CON-7).
pub fn keyed_seal(key: &SigningKey, start: SealedRound<'_>) -> String {
    seal(key, b"keyed:v1\0", start)
}

/// Whether `seal` is the [`keyed_seal`] of `start` under one of `keys` (constant time).
pub fn keyed_sealed<'k>(
    keys: impl IntoIterator<Item = &'k SigningKey>,
    seal: &str,
    start: SealedRound<'_>,
) -> bool {
    sealed_by(keys, seal, |key| keyed_seal(key, start))
}

/// HMAC-SHA256(key, `domain` and the operation's ID, endpoint, service, operation, its input's
/// metadata entries (sorted by key) and its input's data, each length-prefixed), base64url.
fn seal(key: &SigningKey, domain: &[u8], round: SealedRound<'_>) -> String {
    let mut mac = key.mac();
    let mut part = |bytes: &[u8]| {
        mac.update(&(bytes.len() as u64).to_be_bytes());
        mac.update(bytes);
    };
    part(domain);
    for text in [
        round.operation_id,
        round.endpoint,
        round.service,
        round.operation,
    ] {
        part(text.as_bytes());
    }
    let mut metadata: Vec<_> = round.input.metadata.iter().collect();
    metadata.sort();
    part(&(metadata.len() as u64).to_be_bytes());
    for (name, value) in metadata {
        part(name.as_bytes());
        part(value);
    }
    part(&round.input.data);
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// Whether `seal` is `expected(key)` for one of `keys`, compared in constant time.
fn sealed_by<'k>(
    keys: impl IntoIterator<Item = &'k SigningKey>,
    seal: &str,
    expected: impl Fn(&SigningKey) -> String,
) -> bool {
    keys.into_iter()
        .any(|key| bool::from(expected(key).as_bytes().ct_eq(seal.as_bytes())))
}

/// A key's public name: HMAC-SHA256(key, `"kid"`), base64url, [`KEY_ID_LEN`] characters.
/// Version-1 task IDs carry it, compact ones its first byte, so that the verifier knows which
/// key to try; it cannot be turned back into the key.
pub fn key_id(key: &SigningKey) -> String {
    let mut mac = key.mac();
    mac.update(b"kid");
    let mut id = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    id.truncate(KEY_ID_LEN);
    id
}

/// The first byte of the key's [`key_id`] MAC: which keys of a ring may have signed a compact
/// task ID. Keys that share it are each tried.
fn kid_hint(key: &SigningKey) -> u8 {
    let mut mac = key.mac();
    mac.update(b"kid");
    mac.finalize().into_bytes()[0]
}

/// The current signing key and the earlier ones whose task IDs still verify (R-CON-18).
#[derive(Clone, Debug)]
pub struct KeyRing {
    pub current: SigningKey,
    pub previous: Vec<SigningKey>,
}

impl KeyRing {
    /// A ring of one key.
    pub fn of(key: &SigningKey) -> Self {
        Self {
            current: key.clone(),
            previous: Vec::new(),
        }
    }

    /// Every key once, current first.
    fn keys(&self) -> Vec<&SigningKey> {
        let mut keys: Vec<&SigningKey> = Vec::new();
        for key in std::iter::once(&self.current).chain(&self.previous) {
            if !keys.iter().any(|seen| seen.0 == key.0) {
                keys.push(key);
            }
        }
        keys
    }
}

/// The compact tag: see the module doc.
fn tag(
    key: &SigningKey,
    body: &[u8],
    deployment: &Deployment<'_>,
    owner: &str,
) -> [u8; compact::TAG_LEN] {
    let mut mac = key.mac();
    mac.update(COMPACT_DOMAIN);
    for part in [
        body,
        deployment.namespace.as_bytes(),
        owner.as_bytes(),
        deployment.connector_name.as_bytes(),
    ] {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        mac.update(&len.to_be_bytes());
        mac.update(part);
    }
    let full = mac.finalize().into_bytes();
    let mut tag = [0; compact::TAG_LEN];
    tag.copy_from_slice(&full[..compact::TAG_LEN]);
    tag
}

/// `r` as a compact task ID under `key`, for a connector named `connector_name` (see the
/// module doc). At most [`MAX_COMPACT_TASK_ID_LEN`] characters for the connector's own
/// operations (a prefix of at most [`MAX_OPERATION_ID_PREFIX_LEN`] bytes) and Temporal's run
/// IDs; any other operation ID is held as text and makes the ID longer.
pub fn sign(key: &SigningKey, connector_name: &str, r: &TaskRef) -> String {
    let deployment = Deployment {
        namespace: &r.ns,
        connector_name,
    };
    let mut bytes = compact::body(kid_hint(key), connector_name, &r.op, &r.run);
    let tag = tag(key, &bytes, &deployment, &r.owner);
    bytes.extend_from_slice(&tag);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The reference a task ID names, if one of the ring's keys signed it for this deployment and
/// for the caller whose [`caller_hash`] under that key `owner_of` gives (owner hashes are keyed
/// too). Compact IDs and earlier builds' JSON IDs alike; any failure is the one
/// [`TaskRefError::Invalid`].
///
/// Order: the size limit, strict base64url decoding (canonical only, so no two strings decode
/// alike), the version, then per key whose hint matches the tag in constant time, then the
/// fields.
pub fn verify_with_ring(
    ring: &KeyRing,
    task_id: &str,
    deployment: &Deployment<'_>,
    owner_of: impl Fn(&SigningKey) -> String,
) -> Result<TaskRef, TaskRefError> {
    if task_id.len() > MAX_TASK_ID_LEN {
        return Err(TaskRefError::Invalid);
    }
    let verified = if task_id.contains('.') {
        legacy::verify(ring, task_id, deployment, owner_of)
    } else {
        verify_compact(ring, task_id, deployment, owner_of)
    };
    verified.ok_or(TaskRefError::Invalid)
}

fn verify_compact(
    ring: &KeyRing,
    task_id: &str,
    deployment: &Deployment<'_>,
    owner_of: impl Fn(&SigningKey) -> String,
) -> Option<TaskRef> {
    let bytes = URL_SAFE_NO_PAD.decode(task_id).ok()?;
    let (body, given) = bytes.split_at_checked(bytes.len().checked_sub(compact::TAG_LEN)?)?;
    let [version, hint, ..] = *body else {
        return None;
    };
    if version != compact::VERSION {
        return None;
    }
    let owner = ring
        .keys()
        .into_iter()
        .filter(|key| kid_hint(key) == hint)
        .find_map(|key| {
            let owner = owner_of(key);
            bool::from(tag(key, body, deployment, &owner).ct_eq(given)).then_some(owner)
        })?;
    let (op, run) = compact::parse(body, deployment.connector_name)?;
    Some(TaskRef {
        ns: deployment.namespace.to_owned(),
        op,
        run,
        owner,
    })
}

/// [`verify_with_ring`] with one key and the caller's owner hash under it.
pub fn verify(
    key: &SigningKey,
    task_id: &str,
    deployment: &Deployment<'_>,
    caller_owner_hash: &str,
) -> Result<TaskRef, TaskRefError> {
    verify_with_ring(&KeyRing::of(key), task_id, deployment, |_| {
        caller_owner_hash.to_owned()
    })
}

/// The one answer for every task ID that is not the caller's valid task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefError {
    /// Forged, altered, malformed, oversized, another caller's, another deployment's, or from
    /// another key: callers must not learn which, so there is one variant and one message.
    #[error("unknown task")]
    Invalid,
}

/// The longest task ID the connector issues, for tests of the strings that carry one: a call
/// with the longest prefix in the last input round, under a connector name and in a namespace
/// as long as Temporal's IDs (the MAC holds those).
#[cfg(test)]
pub(crate) fn longest_task_id() -> String {
    let name = "c".repeat(900);
    let prefix = "p".repeat(MAX_OPERATION_ID_PREFIX_LEN);
    let first = crate::operation_id::call_operation_id(&name, &prefix, uuid::Uuid::max());
    let op = durable_mcp_contract::input::round_id(&first, durable_mcp_contract::input::MAX_ROUNDS);
    let r = TaskRef::new(
        "n".repeat(1000),
        op,
        uuid::Uuid::max().to_string(),
        "o".repeat(22),
    );
    sign(&SigningKey(vec![0xff; 64]), &name, &r)
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
