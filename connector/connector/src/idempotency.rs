//! Idempotency keys: the same caller, tool and key are the same execution.
//!
//! A client puts a key in the `tools/call` request's `_meta` (`idempotencyKey`, or
//! `idempotency_key` as other SDKs spell it). The connector then derives the Nexus operation ID
//! from (caller scope, tool, key) instead of the request ID ([`operation_id`]), so a retry, from
//! a reconnected client or after a connector restart, reaches the same operation: Temporal
//! attaches to it whether it is running or finished.
//!
//! Temporal attaches silently, even when the arguments differ. The connector therefore stores
//! [`arguments_fingerprint`] with the first call and compares it on every reattach
//! ([`fingerprint_matches`], which also reads the first form that earlier builds stored); a
//! mismatch is an `IdempotencyConflict` tool error and the first execution is left alone.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use durable_mcp_contract::json::json_kind;
use hmac::{Hmac, KeyInit as _, Mac as _};
use serde_json::{Map, Value};
use sha2::Sha256;

use super::task_ref::SigningKey;
use crate::operation_id::OPERATION_MARK;

/// The key of argument fingerprints and keyed operation IDs, derived from the task signing key
/// (so every replica with that key agrees). Both are visible in Temporal (request ids, a Nexus
/// header, operation ids) even when a codec encrypts the payloads: unkeyed, a low-entropy
/// argument or idempotency key could be recovered from them by trying candidates (R-CON-7).
#[derive(Clone)]
pub struct FingerprintKey([u8; 32]);

impl FingerprintKey {
    pub fn derive(signing: &SigningKey) -> Self {
        Self(signing.derive("idempotency"))
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }
}

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintKey(***)")
    }
}

/// The `_meta` field clients should send.
pub const META_FIELD: &str = "idempotencyKey";
/// The snake_case spelling, also accepted.
pub const META_FIELD_SNAKE: &str = "idempotency_key";
/// Longest key, in characters (Unicode scalar values, not bytes).
pub const MAX_KEY_CHARS: usize = 256;

/// A validated key: 1 to [`MAX_KEY_CHARS`] characters, no control characters.
///
/// Keys may carry meaning a client would rather not log (an order number, an email), so
/// `Debug` hides the text; [`IdempotencyKey::as_str`] gives it to code that needs it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl std::fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdempotencyKey(***)")
    }
}

impl IdempotencyKey {
    /// Validates a key as if it came in `_meta.idempotencyKey`.
    pub fn new(key: impl Into<String>) -> Result<Self, IdempotencyError> {
        let key = key.into();
        validate(META_FIELD, &key)?;
        Ok(Self(key))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a request's idempotency key was refused. Messages never repeat the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyError {
    #[error("`_meta.{field}` must be a string of 1 to {MAX_KEY_CHARS} characters; got {found}")]
    NotAString {
        field: &'static str,
        found: &'static str,
    },
    #[error("`_meta.{field}` must be 1 to {MAX_KEY_CHARS} characters long; got {chars} characters")]
    Length { field: &'static str, chars: usize },
    #[error("`_meta.{field}` must not contain control characters; found one at character {index}")]
    ControlCharacter { field: &'static str, index: usize },
    #[error(
        "`_meta.{META_FIELD}` and `_meta.{META_FIELD_SNAKE}` are both set and differ; send one key"
    )]
    Conflicting,
}

fn validate(field: &'static str, key: &str) -> Result<(), IdempotencyError> {
    let chars = key.chars().count();
    if !(1..=MAX_KEY_CHARS).contains(&chars) {
        return Err(IdempotencyError::Length { field, chars });
    }
    if let Some(index) = key.chars().position(char::is_control) {
        return Err(IdempotencyError::ControlCharacter { field, index });
    }
    Ok(())
}

/// The idempotency key of a request's `_meta`, if it has one.
///
/// `idempotencyKey` wins over `idempotency_key`; both present with different values is an
/// error rather than a guess. A present key that is not a valid string (null included) is an
/// error, never "no key": silently running the call again is what the client sent a key to avoid.
pub fn key_from_meta(
    meta: &Map<String, Value>,
) -> Result<Option<IdempotencyKey>, IdempotencyError> {
    let (field, value) = match (meta.get(META_FIELD), meta.get(META_FIELD_SNAKE)) {
        (None, None) => return Ok(None),
        (Some(a), Some(b)) if a != b => return Err(IdempotencyError::Conflicting),
        (Some(a), _) => (META_FIELD, a),
        (None, Some(b)) => (META_FIELD_SNAKE, b),
    };
    let Value::String(key) = value else {
        return Err(IdempotencyError::NotAString {
            field,
            found: json_kind(value),
        });
    };
    validate(field, key)?;
    Ok(Some(IdempotencyKey(key.clone())))
}

/// The operation ID for a keyed call:
/// `<connector>-idem-<base64url(HMAC-SHA256(fingerprint key, owner \0 tool \0 key))>`.
///
/// Same caller, tool and key give the same ID on every replica and after restarts; the raw key
/// never appears in it (operation IDs are visible in Temporal). The encoding is unambiguous:
/// the owner hash is base64url and a key has no control characters, so neither contains `\0`.
pub fn operation_id(
    fingerprint_key: &FingerprintKey,
    connector_name: &str,
    owner_hash: &str,
    tool: &str,
    key: &IdempotencyKey,
) -> String {
    let mut h = fingerprint_key.mac();
    h.update(owner_hash.as_bytes());
    h.update(&[0]);
    h.update(tool.as_bytes());
    h.update(&[0]);
    h.update(key.0.as_bytes());
    format!(
        "{connector_name}-{OPERATION_MARK}-{}",
        URL_SAFE_NO_PAD.encode(h.finalize().into_bytes())
    )
}

/// Marks a fingerprint of the current form ([`arguments_fingerprint`]); a fingerprint without
/// it is of the first form ([`legacy_arguments_fingerprint`]), as stored by earlier builds. `.`
/// is not in base64url, so the two forms cannot be mistaken for each other.
pub const FINGERPRINT_V2_PREFIX: &str = "v2.";

/// `v2.` base64url(HMAC-SHA256(fingerprint key, RFC 8785 (JCS) canonical form of `args`)):
/// equal for equal arguments whatever their key order and however their numbers are written
/// (`1`, `1.0` and `1e0` are one number), and meaningless without the key.
///
/// JCS reads every number as an IEEE 754 double, so integers beyond 2^53 that differ could
/// share a form; arguments holding one also hash their exact [`canonical_json`] (after a NUL,
/// which JCS text never holds), so different arguments never share a fingerprint. Callers
/// should fingerprint absent arguments as `{}` so that omitting them and sending `{}` agree.
pub fn arguments_fingerprint(fingerprint_key: &FingerprintKey, args: &Value) -> String {
    let mut h = fingerprint_key.mac();
    let jcs = serde_json_canonicalizer::to_string(args)
        .expect("a serde_json value holds only finite numbers, which JCS always writes");
    h.update(jcs.as_bytes());
    if has_inexact_integer(args) {
        h.update(&[0]);
        h.update(canonical_json(args).as_bytes());
    }
    format!(
        "{FINGERPRINT_V2_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(h.finalize().into_bytes())
    )
}

/// The first form, which idempotent calls started by earlier builds carry:
/// base64url(HMAC-SHA256(fingerprint key, [`canonical_json`] of `args`)), in which `1` and
/// `1.0` differ. Only compared against, never written ([`fingerprint_matches`]).
pub fn legacy_arguments_fingerprint(fingerprint_key: &FingerprintKey, args: &Value) -> String {
    let mut h = fingerprint_key.mac();
    h.update(canonical_json(args).as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize().into_bytes())
}

/// Whether `stored`, the fingerprint an existing execution was started with, is that of `args`,
/// in the form `stored` is in: a key taken before the JCS form still reattaches.
pub fn fingerprint_matches(fingerprint_key: &FingerprintKey, stored: &str, args: &Value) -> bool {
    if stored.starts_with(FINGERPRINT_V2_PREFIX) {
        stored == arguments_fingerprint(fingerprint_key, args)
    } else {
        stored == legacy_arguments_fingerprint(fingerprint_key, args)
    }
}

/// Whether `v` holds an integer that an IEEE 754 double cannot hold exactly (beyond 2^53).
fn has_inexact_integer(v: &Value) -> bool {
    const EXACT: u64 = 1 << 53;
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(|u| u > EXACT)
            .or_else(|| n.as_i64().map(|i| i.unsigned_abs() > EXACT))
            .unwrap_or(false),
        Value::Array(items) => items.iter().any(has_inexact_integer),
        Value::Object(map) => map.values().any(has_inexact_integer),
        _ => false,
    }
}

/// Compact JSON with object keys sorted (by UTF-8 bytes) at every level, numbers as serde_json
/// prints them: the first fingerprint form's input ([`legacy_arguments_fingerprint`]).
///
/// Sorted explicitly rather than relying on `serde_json::Map` iteration order, which follows
/// insertion order when any crate in the build enables serde_json's `preserve_order`.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A known answer: fingerprints stay what earlier builds computed (HMAC-SHA256 under the
    /// key derived from the signing key 00 01 .. 1f).
    #[test]
    fn fingerprints_are_pinned() {
        let signing =
            SigningKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap();
        let key = FingerprintKey::derive(&signing);
        // The first form, which keys taken by earlier builds carry.
        assert_eq!(
            legacy_arguments_fingerprint(&key, &json!({"b": 1, "a": [true, null]})),
            "6EKaSbUuLkPIZeKbDdAit8wl1buKirUJbNTbl8lOwYI"
        );
        // The JCS form: the same MAC over RFC 8785 text (checked against Python's hmac over
        // `{"seconds":1}` and `{"a":[1e+21,0.5,0,100]}`).
        for seconds in [json!(1), json!(1.0), serde_json::from_str("1e0").unwrap()] {
            assert_eq!(
                arguments_fingerprint(&key, &json!({ "seconds": seconds })),
                "v2.WOUiUF5Hzmu0YaWGBB_KOsljxYlCela7sogOI_emvTE"
            );
        }
        let numbers: Value = serde_json::from_str(r#"{"a":[1E21,0.50,-0.0,1.0e2]}"#).unwrap();
        assert_eq!(
            arguments_fingerprint(&key, &numbers),
            "v2.2Ztwf0darT7DHw4pGoWaSKMA_8hVW7rciNbQiww3bAg"
        );
    }

    /// A key taken before the JCS form reattaches with the arguments it was taken with, and
    /// conflicts with others; a JCS fingerprint is compared in its own form.
    #[test]
    fn fingerprints_of_either_form_match_their_arguments() {
        let args = json!({"seconds": 1, "path": "/tmp/x"});
        let legacy = legacy_arguments_fingerprint(&fk(), &args);
        assert!(!legacy.starts_with(FINGERPRINT_V2_PREFIX));
        assert!(fingerprint_matches(&fk(), &legacy, &args));
        assert!(!fingerprint_matches(
            &fk(),
            &legacy,
            &json!({"seconds": 2, "path": "/tmp/x"})
        ));
        let current = arguments_fingerprint(&fk(), &args);
        assert!(current.starts_with(FINGERPRINT_V2_PREFIX));
        assert!(fingerprint_matches(&fk(), &current, &args));
        assert!(fingerprint_matches(
            &fk(),
            &current,
            &json!({"path": "/tmp/x", "seconds": 1.0})
        ));
        assert!(!fingerprint_matches(
            &fk(),
            &current,
            &json!({"seconds": 1.5, "path": "/tmp/x"})
        ));
        // Where the two texts differ, a fingerprint of one form is not read as the other.
        let float = json!({"seconds": 1.0});
        let current = arguments_fingerprint(&fk(), &float);
        assert!(!fingerprint_matches(
            &fk(),
            &current[FINGERPRINT_V2_PREFIX.len()..],
            &float
        ));
        let legacy = legacy_arguments_fingerprint(&fk(), &float);
        assert!(!fingerprint_matches(
            &fk(),
            &format!("{FINGERPRINT_V2_PREFIX}{legacy}"),
            &float
        ));
    }

    /// JCS reads numbers as doubles; integers a double cannot hold still tell arguments apart.
    #[test]
    fn integers_beyond_two_to_the_53_still_differ() {
        let big = |n: u64| arguments_fingerprint(&fk(), &json!({"id": n}));
        assert_ne!(big(9_007_199_254_740_993), big(9_007_199_254_740_992));
        assert_ne!(
            arguments_fingerprint(&fk(), &json!([-9_007_199_254_740_993i64])),
            arguments_fingerprint(&fk(), &json!([-9_007_199_254_740_992i64]))
        );
        assert_eq!(
            big(1 << 53),
            arguments_fingerprint(&fk(), &json!({"id": 9007199254740992.0}))
        );
    }

    /// A keyed call's operation id is what a retry reattaches by: a change would run it twice.
    #[test]
    fn operation_ids_are_pinned() {
        let signing =
            SigningKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap();
        let key = FingerprintKey::derive(&signing);
        let id = operation_id(
            &key,
            "durable-mcp",
            "owner",
            "delete_files",
            &IdempotencyKey::new("k-1").unwrap(),
        );
        assert_eq!(
            id,
            "durable-mcp-idem-OwFSvZ08TXkVUIJgg1qRTCaiQLisHmZC4oAUXu8xOog"
        );
    }

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn fk() -> FingerprintKey {
        FingerprintKey::from_bytes([7; 32])
    }

    #[test]
    fn fingerprints_and_operation_ids_need_the_key() {
        use sha2::Digest as _;
        let args = json!({"pin": "1234"});
        let other = FingerprintKey::from_bytes([8; 32]);
        assert_ne!(
            arguments_fingerprint(&fk(), &args),
            arguments_fingerprint(&other, &args)
        );
        // Not the bare digest anyone could compute from a guess.
        let bare = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical_json(&args).as_bytes()));
        assert_ne!(arguments_fingerprint(&fk(), &args), bare);
        assert_ne!(
            operation_id(&fk(), "c", "o", "t", &key("k")),
            operation_id(&other, "c", "o", "t", &key("k"))
        );
        // Derived from the signing key: replicas with one key agree, other keys differ.
        let signing = |b: u8| {
            SigningKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([b; 32]))
                .unwrap()
        };
        let a = FingerprintKey::derive(&signing(1));
        assert_eq!(
            arguments_fingerprint(&a, &args),
            arguments_fingerprint(&FingerprintKey::derive(&signing(1)), &args)
        );
        assert_ne!(
            arguments_fingerprint(&a, &args),
            arguments_fingerprint(&FingerprintKey::derive(&signing(2)), &args)
        );
        assert_eq!(format!("{a:?}"), "FingerprintKey(***)");
    }

    fn key(s: &str) -> IdempotencyKey {
        IdempotencyKey::new(s).unwrap()
    }

    #[test]
    fn both_spellings_are_read() {
        assert_eq!(
            key_from_meta(&meta(json!({"idempotencyKey": "k1"}))),
            Ok(Some(key("k1")))
        );
        assert_eq!(
            key_from_meta(&meta(json!({"idempotency_key": "k2"}))),
            Ok(Some(key("k2")))
        );
        assert_eq!(
            key_from_meta(&meta(
                json!({"idempotencyKey": "k", "idempotency_key": "k"})
            )),
            Ok(Some(key("k")))
        );
        assert_eq!(key_from_meta(&meta(json!({"progressToken": 3}))), Ok(None));
    }

    #[test]
    fn conflicting_spellings_are_an_error() {
        let err = key_from_meta(&meta(
            json!({"idempotencyKey": "a", "idempotency_key": "b"}),
        ))
        .unwrap_err();
        assert_eq!(err, IdempotencyError::Conflicting);
        assert!(
            err.to_string().contains("idempotencyKey")
                && err.to_string().contains("idempotency_key")
        );
        let err =
            key_from_meta(&meta(json!({"idempotencyKey": "a", "idempotency_key": 1}))).unwrap_err();
        assert_eq!(err, IdempotencyError::Conflicting);
    }

    #[test]
    fn non_strings_are_errors_naming_the_field() {
        for (v, found) in [
            (json!(null), "null"),
            (json!(5), "a number"),
            (json!(["k"]), "an array"),
            (json!({}), "an object"),
            (json!(true), "a boolean"),
        ] {
            let err = key_from_meta(&meta(json!({"idempotency_key": v}))).unwrap_err();
            assert_eq!(
                err,
                IdempotencyError::NotAString {
                    field: "idempotency_key",
                    found
                }
            );
            assert!(err.to_string().starts_with(
                "`_meta.idempotency_key` must be a string of 1 to 256 characters; got "
            ));
        }
    }

    #[test]
    fn length_is_counted_in_characters() {
        let get = |s: String| key_from_meta(&meta(json!({"idempotencyKey": s})));
        assert_eq!(
            get(String::new()),
            Err(IdempotencyError::Length {
                field: "idempotencyKey",
                chars: 0
            })
        );
        assert!(get("x".into()).unwrap().is_some());
        assert!(get("x".repeat(256)).unwrap().is_some());
        assert_eq!(
            get("x".repeat(257)),
            Err(IdempotencyError::Length {
                field: "idempotencyKey",
                chars: 257
            })
        );
        // 256 three-byte characters are 768 bytes and still a valid key; 257 are not.
        assert!(get("€".repeat(256)).unwrap().is_some());
        assert_eq!(
            get("€".repeat(257)),
            Err(IdempotencyError::Length {
                field: "idempotencyKey",
                chars: 257
            })
        );
        assert!(get("🦀".repeat(256)).unwrap().is_some());
        assert_eq!(
            get(String::new()).unwrap_err().to_string(),
            "`_meta.idempotencyKey` must be 1 to 256 characters long; got 0 characters"
        );
    }

    #[test]
    fn control_characters_are_rejected() {
        for (s, index) in [("a\nb", 1), ("\0", 0), ("ab\u{7f}", 2), ("é\u{85}", 1)] {
            assert_eq!(
                IdempotencyKey::new(s),
                Err(IdempotencyError::ControlCharacter {
                    field: "idempotencyKey",
                    index
                })
            );
        }
        assert!(IdempotencyKey::new("spaces and ünïcode are fine").is_ok());
    }

    #[test]
    fn errors_and_debug_never_show_the_key() {
        assert_eq!(
            format!("{:?}", key("secret-order-17")),
            "IdempotencyKey(***)"
        );
        let err = IdempotencyKey::new(format!("secret{}", "x".repeat(300))).unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn operation_ids_are_scoped_and_hide_the_key() {
        let id = operation_id(&fk(), "conn", "ownerA", "refund", &key("order-17"));
        assert_eq!(
            id,
            operation_id(&fk(), "conn", "ownerA", "refund", &key("order-17")),
            "deterministic"
        );
        assert!(id.starts_with("conn-idem-"));
        assert_eq!(id.len(), "conn-idem-".len() + 43);
        assert!(!id.contains("order-17"));
        assert_ne!(
            id,
            operation_id(&fk(), "conn", "ownerB", "refund", &key("order-17"))
        );
        assert_ne!(
            id,
            operation_id(&fk(), "conn", "ownerA", "lookup", &key("order-17"))
        );
        assert_ne!(
            id,
            operation_id(&fk(), "conn", "ownerA", "refund", &key("order-18"))
        );
        assert_ne!(
            id,
            operation_id(&fk(), "other", "ownerA", "refund", &key("order-17"))
        );
        // Field boundaries cannot be shifted.
        assert_ne!(
            operation_id(&fk(), "c", "o", "ab", &key("c")),
            operation_id(&fk(), "c", "o", "a", &key("bc"))
        );
    }

    #[test]
    fn fingerprint_ignores_key_order_only() {
        let a = serde_json::from_str::<Value>(r#"{"a":1,"b":{"y":[1,{"q":2,"p":3}],"x":null}}"#)
            .unwrap();
        let b = serde_json::from_str::<Value>(
            r#"{ "b": {"x": null, "y": [1, {"p": 3, "q": 2}]}, "a": 1 }"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":1,"b":{"x":null,"y":[1,{"p":3,"q":2}]}}"#
        );
        assert_eq!(
            arguments_fingerprint(&fk(), &a),
            arguments_fingerprint(&fk(), &b)
        );
        // Numbers by value (RFC 8785); the first form told `1` from `1.0`.
        assert_eq!(
            arguments_fingerprint(&fk(), &json!({"a": 1})),
            arguments_fingerprint(&fk(), &json!({"a": 1.0}))
        );
        assert_ne!(
            legacy_arguments_fingerprint(&fk(), &json!({"a": 1})),
            legacy_arguments_fingerprint(&fk(), &json!({"a": 1.0}))
        );
        assert_ne!(
            arguments_fingerprint(&fk(), &json!([1, 2])),
            arguments_fingerprint(&fk(), &json!([2, 1]))
        );
        assert_ne!(
            arguments_fingerprint(&fk(), &json!({"a": "1"})),
            arguments_fingerprint(&fk(), &json!({"a": 1}))
        );
        assert_eq!(
            canonical_json(&json!({"k\"\n": "é"})),
            "{\"k\\\"\\n\":\"é\"}"
        );
    }

    /// JSON values whose numbers survive a text round trip exactly.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1_000_000i32..1_000_000).prop_map(|n| Value::from(f64::from(n) / 8.0)),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-c\"é]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `v` as JSON text with object keys in a seed-dependent, unsorted order.
    fn shuffled_text(v: &Value, seed: u64) -> String {
        match v {
            Value::Array(items) => {
                let parts: Vec<_> = items.iter().map(|i| shuffled_text(i, seed)).collect();
                format!("[ {} ]", parts.join(" , "))
            }
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                if !entries.is_empty() {
                    let n = entries.len();
                    entries.rotate_left((seed as usize) % n);
                    if seed & 1 == 1 {
                        entries.reverse();
                    }
                }
                let parts: Vec<_> = entries
                    .into_iter()
                    .map(|(k, i)| {
                        format!(
                            "{} : {}",
                            Value::String(k.clone()),
                            shuffled_text(i, seed.rotate_left(7))
                        )
                    })
                    .collect();
                format!("{{ {} }}", parts.join(" , "))
            }
            scalar => scalar.to_string(),
        }
    }

    /// `v` with every number a double where a double holds it exactly: equal for arguments that
    /// differ only in how their numbers are written.
    fn by_value(v: &Value) -> Value {
        match v {
            Value::Number(n) if !has_inexact_integer(v) => {
                Value::from(n.as_f64().expect("serde_json numbers are finite"))
            }
            Value::Array(items) => Value::Array(items.iter().map(by_value).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), by_value(v))).collect())
            }
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn fingerprint_is_invariant_under_key_reordering(v in json_value(), seed in any::<u64>()) {
            let reparsed: Value = serde_json::from_str(&shuffled_text(&v, seed)).unwrap();
            prop_assert_eq!(arguments_fingerprint(&fk(), &reparsed), arguments_fingerprint(&fk(), &v));
        }

        #[test]
        fn different_values_have_different_fingerprints(a in json_value(), b in json_value()) {
            prop_assume!(by_value(&a) != by_value(&b));
            prop_assert_ne!(arguments_fingerprint(&fk(), &a), arguments_fingerprint(&fk(), &b));
        }

        #[test]
        fn canonical_json_parses_back_to_the_same_value(v in json_value()) {
            prop_assert_eq!(serde_json::from_str::<Value>(&canonical_json(&v)).unwrap(), v);
        }

        #[test]
        fn valid_keys_are_accepted_and_scoped(k in "[^\\p{Cc}]{1,256}", owner in "[A-Za-z0-9_-]{22}", tool in "[a-z_]{1,12}") {
            let key = IdempotencyKey::new(k.clone()).unwrap();
            prop_assert_eq!(key.as_str(), k.as_str());
            let id = operation_id(&fk(), "c", &owner, &tool, &key);
            prop_assert_ne!(id, operation_id(&fk(), "c", &owner, &format!("{tool}x"), &key));
        }
    }
}

/// Property tests of a request's `_meta` as the connector reads it (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::json;
    use proptest::prelude::*;

    proptest! {
        /// Any `_meta`: a key, no key, or an error, never a panic; a key is one the meta wrote.
        #[test]
        fn a_meta_of_any_shape_gives_a_key_none_or_an_error(meta in json()) {
            let Value::Object(meta) = meta else { return Ok(()) };
            if let Ok(Some(key)) = key_from_meta(&meta) {
                let written = meta.get(META_FIELD).or_else(|| meta.get(META_FIELD_SNAKE));
                prop_assert_eq!(written.and_then(Value::as_str), Some(key.as_str()));
            }
        }

        /// A valid key reads back under either spelling.
        #[test]
        fn a_written_key_reads_back(key in "[ -~]{1,64}", snake in any::<bool>()) {
            let field = if snake { META_FIELD_SNAKE } else { META_FIELD };
            let meta = Map::from_iter([(field.to_owned(), Value::from(key.clone()))]);
            if let Ok(expected) = IdempotencyKey::new(key) {
                prop_assert_eq!(key_from_meta(&meta), Ok(Some(expected)));
            }
        }
    }
}
