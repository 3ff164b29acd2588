//! Strategies for property tests of what the binaries read off the wire (R-CON-51), shared by
//! the crates that parse it (feature `props`): JSON trees whose keys are the ones a parser looks
//! for, so that a test reaches past its first `get`, and one-byte changes of a text.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// The keys of a JSON-RPC message, which every parser of the wire reads.
const ENVELOPE_KEYS: &[&str] = &[
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
];

/// Any JSON tree up to 5 levels deep: scalars of every kind (numbers at their extremes, `words`,
/// at least one, among the strings), object keys mostly from `keys` and a JSON-RPC message's.
pub fn json_tree(
    keys: &'static [&'static str],
    words: &'static [&'static str],
) -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(words).prop_map(Value::from),
    ];
    let key = prop_oneof![
        2 => prop::sample::select(keys).prop_map(str::to_owned),
        1 => prop::sample::select(ENVELOPE_KEYS).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
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
