use super::*;
use crate::idempotency::{FingerprintKey, IdempotencyKey, operation_id};
use crate::operation_id::call_operation_id;
use durable_mcp_contract::input::{MAX_ROUNDS, round_id};
use proptest::prelude::*;

fn key(byte: u8) -> SigningKey {
    SigningKey(vec![byte; 32])
}

const RUN: &str = "019a7c3e-5b2d-7f10-8e4a-6c9d0b1a2f3e";

fn deployment() -> Deployment<'static> {
    Deployment {
        namespace: "default",
        connector_name: "conn",
    }
}

fn alice() -> CallerScope {
    CallerScope::Subject {
        issuer: "https://idp".into(),
        subject: "alice".into(),
    }
}

fn bob() -> CallerScope {
    CallerScope::Subject {
        issuer: "https://idp".into(),
        subject: "bob".into(),
    }
}

/// A call's reference as the connector makes it, owned by alice under `key`.
fn sample(key: &SigningKey) -> (TaskRef, String) {
    let op = call_operation_id("conn", "x", uuid::Uuid::new_v4());
    let r = TaskRef::new("default", op, RUN, caller_hash(key, &alice()));
    let id = sign(key, "conn", &r);
    (r, id)
}

/// Known answers, computed from the module doc's layout with Python's hmac module: IDs signed
/// by earlier builds and by this one, whatever HMAC crate version they used, still verify, and
/// new ones are the same.
#[test]
fn signatures_are_pinned() {
    let k = SigningKey((0..32).collect());
    let d = Deployment {
        namespace: "ns",
        connector_name: "durable-mcp",
    };
    let legacy_id = "eyJucyI6Im5zIiwib3AiOiJvcCIsInJ1biI6InJ1biIsIm93bmVyIjoib3duZXIiLCJ2IjoxfQ\
                     .d5VyG4JRcBQLdZGhmQ7NNrE6RmDR8h9GGqFP8flhCgw";
    let r = TaskRef::new("ns", "op", "run", "owner");
    assert_eq!(legacy::sign(&k, &r, false), legacy_id);
    assert_eq!(verify(&k, legacy_id, &d, "owner"), Ok(r));

    let call = TaskRef::new(
        "ns",
        "durable-mcp-p7-00112233-4455-6677-8899-aabbccddeeff~r3",
        RUN,
        "owner",
    );
    let call_id = "ApMAAZp8PlstfxCOSmydCxovPgMCcDcAESIzRFVmd4iZqrvM3e7_qgGjLOkEhlo_1Gev8m0oWA";
    assert_eq!(sign(&k, "durable-mcp", &call), call_id);
    assert_eq!(verify(&k, call_id, &d, "owner"), Ok(call));
    let keyed = TaskRef::new(
        "ns",
        "durable-mcp-idem-ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1-f4CBgoM",
        RUN,
        "owner",
    );
    let keyed_id = "ApMBAZp8PlstfxCOSmydCxovPgFkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5_gIGCg2UVOU7hPRx-vj0on7QSZe4";
    assert_eq!(sign(&k, "durable-mcp", &keyed), keyed_id);
    assert_eq!(verify(&k, keyed_id, &d, "owner"), Ok(keyed));

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
    assert_eq!(caller_hash(&k, &alice()), "sXAlYImwj99ke688G9Pj3Y");
}

/// Every host keeps it: 114 characters of base64url (`!`..`~`, the characters Claude Code
/// allows, and a valid `Mcp-Name` header value).
#[test]
fn the_longest_task_id_the_connector_issues_is_114_characters() {
    let id = longest_task_id();
    assert_eq!(id.len(), 114);
    assert!(id.len() <= MAX_COMPACT_TASK_ID_LEN);
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    assert!(axum::http::HeaderValue::from_str(&id).is_ok());
}

#[test]
fn round_trip() {
    let k = key(7);
    let (r, id) = sample(&k);
    assert_eq!(verify(&k, &id, &deployment(), &r.owner), Ok(r));
}

#[test]
fn the_text_holds_the_run_and_the_operation_but_not_the_namespace_owner_or_connector() {
    let k = key(7);
    let (r, id) = sample(&k);
    let bytes = URL_SAFE_NO_PAD.decode(&id).unwrap();
    let uuid = |s: &str| uuid::Uuid::parse_str(s).unwrap().into_bytes();
    let op_uuid = uuid(r.op.rsplit_once("x-").unwrap().1);
    let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(holds(&uuid(RUN)) && holds(&op_uuid));
    for absent in ["default", r.owner.as_str(), "conn"] {
        assert!(!holds(absent.as_bytes()), "{absent}");
    }
    assert_eq!(bytes[0], 2, "the version comes first");
}

/// Every other deployment, owner or key is the same unknown task.
#[test]
fn an_id_is_good_only_in_its_namespace_for_its_owner_under_its_connector_name_and_key() {
    let k = key(7);
    let (r, id) = sample(&k);
    let bob = caller_hash(&k, &bob());
    let other_ns = Deployment {
        namespace: "other",
        ..deployment()
    };
    let other_name = Deployment {
        connector_name: "conn2",
        ..deployment()
    };
    let results = [
        verify(&k, &id, &deployment(), &bob),
        verify(&k, &id, &other_ns, &r.owner),
        verify(&k, &id, &other_name, &r.owner),
        verify(&key(8), &id, &deployment(), &r.owner),
        verify(&k, "garbage", &deployment(), &r.owner),
    ];
    for result in results {
        assert_eq!(result, Err(TaskRefError::Invalid));
    }
    let err = TaskRefError::Invalid;
    assert_eq!(err.to_string(), "unknown task");
}

#[test]
fn foreign_owner_gets_the_same_error_as_garbage() {
    let k = key(7);
    let (_, id) = sample(&k);
    let bob = caller_hash(&k, &bob());
    let foreign = verify(&k, &id, &deployment(), &bob).unwrap_err();
    let garbage = verify(&k, "garbage", &deployment(), &bob).unwrap_err();
    assert_eq!(foreign, garbage);
    assert_eq!(format!("{foreign:?}"), format!("{garbage:?}"));
}

#[test]
fn unicode_whitespace_and_oversized_inputs_are_rejected() {
    let k = key(7);
    let (r, id) = sample(&k);
    let legacy = legacy::sign(&k, &r, true);
    for id in [id, legacy] {
        for bad in [
            format!(" {id}"),
            format!("{id}\n"),
            format!("{id} "),
            format!("é{id}"),
            format!("{id}="),
            format!("{id}。"),
            String::new(),
            ".".into(),
            format!("{id}.{id}"),
            format!("{}{}", "A".repeat(MAX_TASK_ID_LEN), id),
        ] {
            assert_eq!(
                verify(&k, &bad, &deployment(), &r.owner),
                Err(TaskRefError::Invalid),
                "{bad:?}"
            );
        }
    }
}

#[test]
fn other_versions_are_rejected_even_when_signed() {
    let k = key(7);
    let (r, id) = sample(&k);
    // A compact ID whose version byte says 3, with a valid tag over it.
    let mut bytes = URL_SAFE_NO_PAD.decode(&id).unwrap();
    bytes.truncate(bytes.len() - compact::TAG_LEN);
    bytes[0] = 3;
    let t = tag(&k, &bytes, &deployment(), &r.owner);
    bytes.extend_from_slice(&t);
    let forged = URL_SAFE_NO_PAD.encode(bytes);
    assert_eq!(
        verify(&k, &forged, &deployment(), &r.owner),
        Err(TaskRefError::Invalid)
    );
    // A JSON ID whose `v` says 2.
    let json = serde_json::to_vec(&serde_json::json!({
        "ns": "default", "op": r.op, "run": RUN, "owner": r.owner, "v": 2
    }))
    .unwrap();
    let mut mac = k.mac();
    mac.update(&json);
    let forged = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&json),
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(
        verify(&k, &forged, &deployment(), &r.owner),
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
    let k = SigningKey::from_env_value(Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()));
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

/// A task ID as the connector makes it: owned by alice under the ring's current key.
fn ring_id(ring: &KeyRing) -> String {
    let owner = caller_hash(&ring.current, &alice());
    let op = call_operation_id("conn", "x", uuid::Uuid::new_v4());
    sign(
        &ring.current,
        "conn",
        &TaskRef::new("default", op, RUN, owner),
    )
}

fn alice_of(k: &SigningKey) -> String {
    caller_hash(k, &alice())
}

#[test]
fn task_ids_signed_before_a_rotation_verify_while_the_old_key_is_listed() {
    let d = deployment();
    let before = ring(7, &[]);
    let legacy_id = legacy::sign(
        &key(7),
        &TaskRef::new("default", "conn-x-1", RUN, alice_of(&key(7))),
        true,
    );
    for id in [ring_id(&before), legacy_id] {
        assert!(verify_with_ring(&before, &id, &d, alice_of).is_ok());
        // Rotated: 8 is current, 7 listed as previous.
        let rotated = ring(8, &[7]);
        let r = verify_with_ring(&rotated, &id, &d, alice_of).unwrap();
        assert_eq!(
            r.owner,
            alice_of(&key(7)),
            "the owner under the key that signed"
        );
        // New IDs are signed with the new key and verify too.
        let new = ring_id(&rotated);
        assert!(verify_with_ring(&rotated, &new, &d, alice_of).is_ok());
        assert_eq!(
            verify_with_ring(&before, &new, &d, alice_of),
            Err(TaskRefError::Invalid)
        );
        // Once the old key is dropped, its IDs are unknown, like any other bad ID.
        assert_eq!(
            verify_with_ring(&ring(8, &[]), &id, &d, alice_of),
            Err(TaskRefError::Invalid)
        );
        // The owner is still checked, under the key that signed.
        let bob_of = |k: &SigningKey| caller_hash(k, &bob());
        assert_eq!(
            verify_with_ring(&rotated, &id, &d, bob_of),
            Err(TaskRefError::Invalid)
        );
    }
}

/// Two keys whose kid hints collide: the verifier tries both.
#[test]
fn keys_sharing_a_kid_hint_are_each_tried() {
    let first = key(7);
    let twin = (0u16..=u16::MAX)
        .map(|n| {
            let mut bytes = vec![9; 32];
            bytes[..2].copy_from_slice(&n.to_be_bytes());
            SigningKey(bytes)
        })
        .find(|k| kid_hint(k) == kid_hint(&first))
        .expect("one in 256 keys shares a hint");
    let d = deployment();
    for (current, previous) in [(&first, &twin), (&twin, &first)] {
        let ring = KeyRing {
            current: current.clone(),
            previous: vec![previous.clone()],
        };
        let id = ring_id(&KeyRing::of(previous));
        assert!(verify_with_ring(&ring, &id, &d, alice_of).is_ok());
    }
}

#[test]
fn legacy_ids_without_a_kid_try_every_key_and_a_changed_kid_breaks_the_mac() {
    let d = deployment();
    let owner = alice_of(&key(7));
    let r = TaskRef::new("default", "op", "run", owner);
    let legacy_id = legacy::sign(&key(7), &r, false);
    assert_eq!(
        verify_with_ring(&ring(8, &[9, 7]), &legacy_id, &d, alice_of),
        Ok(r.clone())
    );
    // Another namespace's legacy ID is unknown too.
    let elsewhere = Deployment {
        namespace: "other",
        ..d
    };
    assert!(verify_with_ring(&ring(7, &[]), &legacy_id, &elsewhere, alice_of).is_err());
    // The kid is covered by the MAC: pointing it at another listed key fails.
    let id = legacy::sign(&key(7), &r, true);
    let (json, tag) = id.split_once('.').unwrap();
    let mut value: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(json).unwrap()).unwrap();
    value["kid"] = key_id(&key(8)).into();
    let forged = format!(
        "{}.{tag}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&value).unwrap())
    );
    assert_eq!(
        verify_with_ring(&ring(8, &[7]), &forged, &d, alice_of),
        Err(TaskRefError::Invalid)
    );
}

#[test]
fn key_ids_are_short_distinct_and_not_the_key() {
    let (a, b) = (key_id(&key(7)), key_id(&key(8)));
    assert_eq!(a.len(), KEY_ID_LEN);
    assert_ne!(a, b);
    assert!(!URL_SAFE_NO_PAD.encode(&key(7).0).contains(&a));
    let full = URL_SAFE_NO_PAD.decode(format!("{a}AA")).unwrap();
    assert_eq!(
        kid_hint(&key(7)),
        full[0],
        "the hint is the kid's first byte"
    );
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

/// Every single-byte edit of `id` is an unknown task; answers how many were tried.
fn every_single_byte_mutation_fails(k: &SigningKey, id: &str, owner: &str) -> usize {
    let mut tried = 0;
    let mut check = |bytes: Vec<u8>| {
        if let Ok(s) = String::from_utf8(bytes) {
            assert_eq!(
                verify(k, &s, &deployment(), owner),
                Err(TaskRefError::Invalid),
                "{s}"
            );
            tried += 1;
        }
    };
    for at in 0..id.len() {
        for mask in 1..=255u8 {
            check(apply(id, &Mutation::Flip { at, mask }));
        }
        check(apply(id, &Mutation::Delete { at }));
    }
    for at in 0..=id.len() {
        for byte in 0u8..=127 {
            check(apply(id, &Mutation::Insert { at, byte }));
        }
    }
    tried
}

#[test]
fn every_single_byte_mutation_of_one_id_is_rejected_exhaustively() {
    let k = key(9);
    let (r, id) = sample(&k);
    assert!(every_single_byte_mutation_fails(&k, &id, &r.owner) > id.len() * 200);
    let legacy_id = legacy::sign(&k, &r, true);
    assert!(every_single_byte_mutation_fails(&k, &legacy_id, &r.owner) > legacy_id.len() * 200);
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

/// An operation ID the connector can come to hold: a call's or a keyed call's, in any input
/// round. Prefixes are any text of at most [`MAX_OPERATION_ID_PREFIX_LEN`] bytes (the flag's
/// limit), connector names any text at all.
fn connector_operation_id(
    connector: &str,
    prefix: &str,
    keyed: bool,
    seed: u128,
    round: u32,
) -> String {
    let first = if keyed {
        operation_id(
            &FingerprintKey::from_bytes([seed as u8; 32]),
            connector,
            &format!("{seed}"),
            "tool",
            &IdempotencyKey::new(format!("key-{seed}")).unwrap(),
        )
    } else {
        call_operation_id(connector, prefix, uuid::Uuid::from_u128(seed))
    };
    round_id(&first, round)
}

/// Text of at most `max` bytes, drawn from characters of one to four bytes.
fn text_up_to(max: usize) -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._~-]{0,40}|\\PC{0,40}".prop_map(move |s| {
        let mut end = s.len().min(max);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_owned()
    })
}

/// The longest namespace Temporal accepts (its ID limit, 1,000 bytes by default), which the
/// MAC holds, not the text.
fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("default".to_owned()),
        Just("n".repeat(1000)),
        "[a-z0-9._-]{2,255}"
    ]
}

proptest! {
    /// The bound hosts hold task IDs to (R-CON-6): every ID the connector issues for its own
    /// operations is at most 128 characters of base64url, and verifies to what was signed.
    #[test]
    fn every_task_id_the_connector_issues_is_at_most_128_characters_and_round_trips(
        ns in namespace(),
        connector in prop_oneof![Just("durable-mcp".to_owned()), Just("c".repeat(900)), "\\PC{0,64}"],
        prefix in prop_oneof![Just("p".repeat(MAX_OPERATION_ID_PREFIX_LEN)), Just("é".repeat(16)), text_up_to(MAX_OPERATION_ID_PREFIX_LEN)],
        keyed in any::<bool>(),
        seed in any::<u128>(),
        round in 1..=MAX_ROUNDS,
        run in any::<u128>(),
        scope in "\\PC{0,300}",
        key_bytes in proptest::collection::vec(any::<u8>(), 32..128),
        previous in proptest::collection::vec(any::<u8>(), 0..3),
    ) {
        let op = connector_operation_id(&connector, &prefix, keyed, seed, round);
        let run = uuid::Uuid::from_u128(run).hyphenated().to_string();
        let k = SigningKey(key_bytes);
        let owner = caller_hash(&k, &CallerScope::Process(scope.clone()));
        let r = TaskRef::new(ns.clone(), op, run, owner);
        let id = sign(&k, &connector, &r);
        prop_assert!(id.len() <= MAX_COMPACT_TASK_ID_LEN, "{} characters: {id}", id.len());
        prop_assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let ring = KeyRing {
            current: key(1),
            previous: previous.iter().map(|&b| key(b)).chain([k]).collect(),
        };
        let d = Deployment { namespace: &ns, connector_name: &connector };
        let owner_of = |key: &SigningKey| caller_hash(key, &CallerScope::Process(scope.clone()));
        prop_assert_eq!(verify_with_ring(&ring, &id, &d, owner_of), Ok(r));
    }

    #[test]
    fn every_single_byte_mutation_is_rejected(
        connector in "[a-z-]{1,20}",
        prefix in text_up_to(MAX_OPERATION_ID_PREFIX_LEN),
        keyed in any::<bool>(),
        seed in any::<u128>(),
        round in 1..=MAX_ROUNDS,
        key_byte in any::<u8>(),
        legacy_form in any::<bool>(),
        m in mutation(),
    ) {
        let k = key(key_byte);
        let owner = caller_hash(&k, &CallerScope::Anonymous);
        let op = connector_operation_id(&connector, &prefix, keyed, seed, round);
        let r = TaskRef::new("default", op, RUN, owner.clone());
        let id = match legacy_form {
            true => legacy::sign(&k, &r, true),
            false => sign(&k, &connector, &r),
        };
        let d = Deployment { namespace: "default", connector_name: &connector };
        prop_assert_eq!(verify(&k, &id, &d, &owner), Ok(r));
        // Bytes that are not UTF-8 never reach `verify` as a &str; the rest must all fail.
        if let Ok(mutated) = String::from_utf8(apply(&id, &m)) {
            prop_assert_eq!(verify(&k, &mutated, &d, &owner), Err(TaskRefError::Invalid));
        }
    }

    #[test]
    fn arbitrary_strings_are_rejected(s in "\\PC{0,200}") {
        let k = key(1);
        let owner = caller_hash(&k, &CallerScope::Anonymous);
        prop_assert_eq!(verify(&k, &s, &deployment(), &owner), Err(TaskRefError::Invalid));
    }

    /// Operation and run IDs the connector did not make (an earlier build's, a library
    /// host's) are held as text: longer IDs, still signed and still round trips.
    #[test]
    fn round_trips_for_any_strings(ns in ".{0,64}", op in ".{0,200}", run in ".{0,64}") {
        let k = key(3);
        let owner = caller_hash(&k, &CallerScope::Process("p".into()));
        let r = TaskRef::new(ns.clone(), op, run, owner.clone());
        let d = Deployment { namespace: &ns, connector_name: "conn" };
        prop_assert_eq!(verify(&k, &sign(&k, "conn", &r), &d, &owner), Ok(r.clone()));
        prop_assert_eq!(verify(&k, &legacy::sign(&k, &r, true), &d, &owner), Ok(r));
    }
}

/// R-CON-40: a round is followed only when its seal is this connector's, for that round's
/// ID, endpoint, service and operation; earlier keys still verify.
#[test]
fn a_round_seal_binds_its_key_id_endpoint_service_and_operation() {
    let (k, old, other) = (key(1), key(2), key(3));
    let input = durable_mcp_contract::payload::to_payload(&serde_json::json!({"a": 1})).unwrap();
    let round = |operation_id, endpoint, service, operation| SealedRound {
        operation_id,
        endpoint,
        service,
        operation,
        input: &input,
    };
    let sealed = round("conn-p7-abc~r2", "ep", "svc", "tool_op");
    let seal = round_seal(&k, sealed);
    assert!(round_sealed([&k], &seal, sealed));
    assert!(round_sealed([&other, &k], &seal, sealed), "any of the keys");
    assert!(!round_sealed([&other], &seal, sealed), "another key");
    let old_seal = round_seal(&old, sealed);
    assert!(
        round_sealed([&k, &old], &old_seal, sealed),
        "a previous key"
    );
    for forged in [
        round("conn-p7-abc~r3", "ep", "svc", "tool_op"),
        round("conn-p7-xyz~r2", "ep", "svc", "tool_op"),
        round("conn-p7-abc~r2", "ep2", "svc", "tool_op"),
        round("conn-p7-abc~r2", "ep", "svc2", "tool_op"),
        round("conn-p7-abc~r2", "ep", "svc", "other_op"),
        round("conn-p7-abc~r2", "eps", "vc", "tool_op"),
        round("conn-p7-abc~r2e", "p", "svc", "tool_op"),
    ] {
        assert!(!round_sealed([&k], &seal, forged), "{forged:?}");
    }
    assert!(!round_sealed([&k], "", sealed), "an unsealed round");
}

/// R-CON-40: a seal copied from a round's Nexus headers vouches for no run of its ID with other
/// input: another argument or answer, the same data under other metadata, or the bytes moved
/// between metadata and data.
#[test]
fn a_round_seal_binds_its_input() {
    use durable_mcp_contract::payload::to_payload;
    use serde_json::json;
    let k = key(1);
    let round = |input| SealedRound {
        operation_id: "conn-p7-abc~r2",
        endpoint: "ep",
        service: "svc",
        operation: "tool_op",
        input,
    };
    let owners = to_payload(&json!({"arguments": {"path": "/data"}})).unwrap();
    let seal = round_seal(&k, round(&owners));
    assert!(round_sealed([&k], &seal, round(&owners)));
    let foreign = to_payload(&json!({"arguments": {"path": "/evil"}})).unwrap();
    let mut relabelled = owners.clone();
    relabelled
        .metadata
        .insert("encoding".into(), b"binary/plain".to_vec());
    let mut marked = owners.clone();
    marked
        .metadata
        .insert("mcp-type".into(), b"InputRound".to_vec());
    let mut moved = owners.clone();
    moved.metadata.insert("x".into(), moved.data.clone());
    moved.data.clear();
    for other in [&foreign, &relabelled, &marked, &moved] {
        assert!(!round_sealed([&k], &seal, round(other)), "{other:?}");
    }
}

/// R-CON-40: the seal's form is pinned. Rounds sealed in another form are not followed
/// (docs/deployment.md says so for upgrades), so a change must be deliberate.
#[test]
fn round_seals_are_pinned() {
    let input = durable_mcp_contract::payload::to_payload(&serde_json::json!({"a": 1})).unwrap();
    let round = SealedRound {
        operation_id: "conn-p7-abc~r2",
        endpoint: "ep",
        service: "svc",
        operation: "tool_op",
        input: &input,
    };
    assert_eq!(
        round_seal(&key(1), round),
        "epkl7-nOj8m7_J4itFnEHkimuVNx_nlj_JmFw_tS170"
    );
}

/// R-CON-7: a keyed call's seal binds what a round's does, in a domain of its own (neither
/// seal stands for the other), and its form is pinned: keyed runs sealed in another form are
/// not followed (docs/deployment.md says so for upgrades).
#[test]
fn keyed_seals_bind_the_start_and_are_not_round_seals() {
    let (k, other) = (key(1), key(2));
    let input = durable_mcp_contract::payload::to_payload(&serde_json::json!({"a": 1})).unwrap();
    let forged = durable_mcp_contract::payload::to_payload(&serde_json::json!({"a": 2})).unwrap();
    let start = |endpoint, input| SealedRound {
        operation_id: "conn-idem-abc",
        endpoint,
        service: "svc",
        operation: "tool_op",
        input,
    };
    let seal = keyed_seal(&k, start("ep", &input));
    assert!(keyed_sealed([&other, &k], &seal, start("ep", &input)));
    assert!(!keyed_sealed([&other], &seal, start("ep", &input)));
    assert!(
        !keyed_sealed([&k], &seal, start("ep", &forged)),
        "other input"
    );
    assert!(
        !keyed_sealed([&k], &seal, start("elsewhere", &input)),
        "other endpoint"
    );
    assert!(!keyed_sealed([&k], "", start("ep", &input)), "unsealed");
    let round = round_seal(&k, start("ep", &input));
    assert!(
        !keyed_sealed([&k], &round, start("ep", &input)),
        "a round's seal"
    );
    assert!(
        !round_sealed([&k], &seal, start("ep", &input)),
        "a keyed seal"
    );
    assert_eq!(seal, "odM6Q0q4s-8kEUmoNH8lfKvyh83Ma7LYJ2NDC84cJ5E");
}
