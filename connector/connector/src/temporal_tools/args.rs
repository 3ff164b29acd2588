//! Reading a tool's JSON arguments, with errors that name the argument.

use serde_json::{Map, Value};

use super::error::ToolError;

/// A tool call's arguments.
pub struct Args<'a>(pub &'a Map<String, Value>);

impl Args<'_> {
    /// A required non-empty string.
    pub fn string(&self, name: &str) -> Result<String, ToolError> {
        self.opt_string(name)?
            .ok_or_else(|| ToolError::invalid(format!("`{name}` is required")))
    }

    /// An optional string; empty counts as absent.
    pub fn opt_string(&self, name: &str) -> Result<Option<String>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ToolError::invalid(format!(
                "`{name}` must be a string, got {other}"
            ))),
        }
    }

    /// An optional integer within `min..=max`, else `default`.
    pub fn int(&self, name: &str, default: u64, min: u64, max: u64) -> Result<u64, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(ToolError::invalid(format!(
                    "`{name}` must be an integer from {min} to {max}, got {v}"
                ))),
            },
        }
    }

    /// An optional boolean, else `default`.
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(ToolError::invalid(format!(
                "`{name}` must be true or false, got {other}"
            ))),
        }
    }

    /// Values to send as Temporal payloads: `args` as an array (one payload each); absent is none.
    pub fn values(&self, name: &str) -> Result<Vec<Value>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(other) => Err(ToolError::invalid(format!(
                "`{name}` must be an array of JSON values (one per argument), got {other}"
            ))),
        }
    }

    /// A string or a list of strings (e.g. cron expressions), at least one.
    pub fn strings(&self, name: &str) -> Result<Vec<String>, ToolError> {
        let list = match self.0.get(name) {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ToolError::invalid(format!("`{name}` must hold strings")))?,
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                return Err(ToolError::invalid(format!(
                    "`{name}` must be a string or a list of strings, got {other}"
                )));
            }
        };
        let list: Vec<String> = list.into_iter().filter(|s| !s.trim().is_empty()).collect();
        if list.is_empty() {
            return Err(ToolError::invalid(format!("`{name}` is required")));
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn strings_are_named_when_missing_or_mistyped() {
        let m = args(json!({"a": "x", "b": 3, "c": " "}));
        let a = Args(&m);
        assert_eq!(a.string("a").unwrap(), "x");
        assert!(
            a.string("missing")
                .unwrap_err()
                .message
                .contains("`missing` is required")
        );
        assert!(
            a.string("b")
                .unwrap_err()
                .message
                .contains("`b` must be a string")
        );
        assert_eq!(a.opt_string("c").unwrap(), None);
    }

    #[test]
    fn integers_are_bounded() {
        let m = args(json!({"n": 5, "big": 1000, "neg": -1}));
        let a = Args(&m);
        assert_eq!(a.int("n", 1, 1, 10).unwrap(), 5);
        assert_eq!(a.int("absent", 7, 1, 10).unwrap(), 7);
        assert!(a.int("big", 1, 1, 10).is_err());
        assert!(a.int("neg", 1, 0, 10).is_err());
    }

    #[test]
    fn values_and_string_lists() {
        let m = args(
            json!({"args": [1, {"k": "v"}], "one": "0 * * * *", "many": ["a", "b"], "bad": [1]}),
        );
        let a = Args(&m);
        assert_eq!(a.values("args").unwrap().len(), 2);
        assert!(a.values("absent").unwrap().is_empty());
        assert!(a.values("one").is_err());
        assert_eq!(a.strings("one").unwrap(), vec!["0 * * * *"]);
        assert_eq!(a.strings("many").unwrap().len(), 2);
        assert!(a.strings("bad").is_err());
        assert!(a.strings("absent").is_err());
    }
}
