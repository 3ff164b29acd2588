//! Strategies the property tests of the wire's parsers share (R-CON-51): JSON trees whose keys
//! are the ones a parser looks for (so the tests reach past its first `get`), JSON-RPC
//! envelopes of any shape, header values of any bytes HTTP can carry, and byte mutations.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// The keys the connector's parsers read, so arbitrary trees take the paths they take.
pub const WIRE_KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "_meta",
    "progressToken",
    "notifications",
    "resourceSubscriptions",
    "toolsListChanged",
    "cursor",
    "nextCursor",
    "tools",
    "name",
    "arguments",
    "task",
    "taskId",
    "requestState",
    "inputResponses",
    "idempotencyKey",
    "idempotency_key",
    "io.modelcontextprotocol/related-task",
    "resultType",
    "content",
];

/// Methods a caller may name (and some it may not).
pub const METHODS: &[&str] = &[
    "initialize",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/update",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "prompts/list",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "ping",
    "",
    "no/such",
];

/// A leaf: every JSON scalar, numbers at their extremes included.
fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(METHODS).prop_map(Value::from),
    ]
}

/// An object key: one a parser reads, or any text.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(WIRE_KEYS).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
}

/// Any JSON tree up to 5 levels deep, its keys mostly those of [`WIRE_KEYS`].
pub fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON-RPC message of any shape: each member present or not, of the right type or any.
pub fn envelope() -> impl Strategy<Value = Value> {
    let member = |right: BoxedStrategy<Value>| prop_oneof![1 => Just(None), 2 => right.prop_map(Some), 1 => json().prop_map(Some)];
    (
        member(Just(Value::from("2.0")).boxed()),
        member(
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                "\\PC{0,8}".prop_map(Value::from)
            ]
            .boxed(),
        ),
        member(prop::sample::select(METHODS).prop_map(Value::from).boxed()),
        member(json().boxed()),
    )
        .prop_map(|(jsonrpc, id, method, params)| {
            let mut m = Map::new();
            for (k, v) in [
                ("jsonrpc", jsonrpc),
                ("id", id),
                ("method", method),
                ("params", params),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

/// A body: bytes of any kind, JSON text cut short, or a whole message.
pub fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        (envelope(), any::<prop::sample::Index>()).prop_map(|(m, cut)| {
            let text = m.to_string().into_bytes();
            let at = cut.index(text.len() + 1);
            text[..at].to_vec()
        }),
        envelope().prop_map(|m| m.to_string().into_bytes()),
        json().prop_map(|m| m.to_string().into_bytes()),
    ]
}

/// A header value HTTP can carry: any bytes but controls (obs-text included), or text made of
/// the pieces header parsers split at.
pub fn header_value() -> impl Strategy<Value = http::HeaderValue> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80),
        prop::collection::vec(
            prop::sample::select(
                &[
                    "for=",
                    "\"",
                    "[",
                    "]",
                    ":",
                    ",",
                    ";",
                    "\\",
                    " ",
                    "1.2.3.4",
                    "::1",
                    "10.0.0.1",
                    "_hidden",
                    "unknown",
                    "Bearer",
                    "bearer ",
                    "x",
                    "é",
                    "by=",
                    "2001:db8::1",
                    "8080",
                    "=",
                ][..]
            ),
            0..12,
        )
        .prop_map(|parts| parts.concat().into_bytes()),
    ]
    .prop_filter_map("not a header value", |b| {
        http::HeaderValue::from_bytes(&b).ok()
    })
}

/// A change of one byte of a text: replaced, dropped, or inserted.
#[derive(Debug, Clone)]
pub enum Mutation {
    Replace(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Insert(prop::sample::Index, u8),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

/// `text` changed by `m`; `None` when the change leaves it as it was or not UTF-8 (which never
/// reaches a parser of `&str`).
pub fn mutate(text: &str, m: &Mutation) -> Option<String> {
    let mut bytes = text.as_bytes().to_vec();
    match m {
        Mutation::Replace(i, b) if !bytes.is_empty() => {
            let at = i.index(bytes.len());
            bytes[at] = *b;
        }
        Mutation::Remove(i) if !bytes.is_empty() => {
            bytes.remove(i.index(bytes.len()));
        }
        Mutation::Insert(i, b) => bytes.insert(i.index(bytes.len() + 1), *b),
        _ => return None,
    }
    String::from_utf8(bytes).ok().filter(|m| m != text)
}
