//! How messages name a JSON value's kind: the connector's and the proxy's refusals of a value
//! of the wrong kind say what they got in the same words.

use serde_json::Value;

/// The kind of `v`, as a message names it ("null", "a boolean", "an object", ...).
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_kind_has_its_own_words() {
        for (v, kind) in [
            (json!(null), "null"),
            (json!(true), "a boolean"),
            (json!(5), "a number"),
            (json!(-0.5), "a number"),
            (json!("k"), "a string"),
            (json!(["k"]), "an array"),
            (json!({}), "an object"),
        ] {
            assert_eq!(json_kind(&v), kind, "{v}");
        }
    }
}
