//! Strategies the connector's property tests share (R-CON-51), beside the contract's: JSON trees
//! with the keys the connector reads, JSON-RPC envelopes of any shape, and header values of any
//! bytes HTTP can carry.

use durable_mcp_contract::props::json_tree;
pub use durable_mcp_contract::props::{mutate, mutation};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// The keys the connector's parsers read, so arbitrary trees take the paths they take.
pub const WIRE_KEYS: &[&str] = &[
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

/// Any JSON tree, its keys mostly those of [`WIRE_KEYS`].
pub fn json() -> impl Strategy<Value = Value> + Clone {
    json_tree(WIRE_KEYS, METHODS)
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
