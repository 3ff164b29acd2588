//! Arguments for a tool nobody wrote `--args` for, from its input schema (R-CNF-3).
//!
//! [`synthesize`] builds one valid instance of a JSON Schema, preferring what the schema's
//! author offered (`const`, `default`, `examples`, `enum`) and otherwise the smallest value that
//! meets the constraints (required properties only, bounds, lengths, formats). [`strategy`]
//! builds a proptest strategy over the same schema for `--fuzz N`: many valid inputs, reproducible
//! from a printed seed. Both follow local `$ref`s (`#/$defs/..`, `#/definitions/..`) and give up,
//! with a reason, on what they cannot satisfy (a `pattern` without an example, `not`).

use proptest::{
    prelude::*,
    strategy::{BoxedStrategy, Just},
};
use serde_json::{Map, Number, Value, json};

/// How deep `$ref`s and nesting may go before giving up (recursive schemas).
const MAX_DEPTH: usize = 12;

/// One valid instance of `schema` (`root` resolves `$ref`s), or why none could be made.
pub fn synthesize(schema: &Value) -> Result<Value, String> {
    instance(schema, schema, 0)
}

fn instance(schema: &Value, root: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("the schema nests too deeply (recursive $ref?)".into());
    }
    let Some(obj) = schema.as_object() else {
        // `true` or a missing schema accepts anything.
        return match schema {
            Value::Bool(false) => Err("a `false` schema accepts nothing".into()),
            _ => Ok(Value::Null),
        };
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        return instance(resolve(r, root)?, root, depth + 1);
    }
    if let Some(v) = obj.get("const") {
        return Ok(v.clone());
    }
    if let Some(v) = obj.get("default") {
        return Ok(v.clone());
    }
    if let Some(v) = obj
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return Ok(v.clone());
    }
    if let Some(v) = obj
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return Ok(v.clone());
    }
    if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
        return instance(&merge_all_of(obj, all, root)?, root, depth + 1);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = obj.get(key).and_then(Value::as_array) {
            let mut why = Vec::new();
            for option in options {
                match instance(option, root, depth + 1) {
                    Ok(v) => return Ok(v),
                    Err(e) => why.push(e),
                }
            }
            return Err(format!("no {key} option can be built: {}", why.join("; ")));
        }
    }
    if obj.contains_key("not") {
        return Err("`not` schemas are not synthesized; give --args".into());
    }
    match primary_type(obj) {
        Some("object") => {
            let mut out = Map::new();
            let props = obj.get("properties").and_then(Value::as_object);
            for name in required(obj) {
                let prop = props
                    .and_then(|p| p.get(name))
                    .unwrap_or(&Value::Bool(true));
                let value = instance(prop, root, depth + 1)
                    .map_err(|e| format!("property {name:?}: {e}"))?;
                // An untyped required property still needs a value.
                out.insert(
                    name.to_owned(),
                    if value.is_null() && prop.get("type").is_none() {
                        json!("x")
                    } else {
                        value
                    },
                );
            }
            Ok(Value::Object(out))
        }
        Some("array") => {
            let min = uint(obj, "minItems").unwrap_or(0);
            let items = obj.get("items").unwrap_or(&Value::Bool(true));
            let item = if min > 0 {
                instance(items, root, depth + 1).map_err(|e| format!("items: {e}"))?
            } else {
                Value::Null
            };
            Ok(Value::Array(vec![item; min as usize]))
        }
        Some("string") => string_instance(obj),
        Some("integer") => {
            let (lo, hi) = int_bounds(obj)?;
            let m = uint(obj, "multipleOf").filter(|m| *m > 0).unwrap_or(1) as i64;
            let start = if lo <= 0 && hi >= 0 { 0 } else { lo };
            let v = (start.div_euclid(m) + i64::from(start.rem_euclid(m) != 0)) * m;
            if v > hi {
                return Err(format!("no multiple of {m} in [{lo}, {hi}]"));
            }
            Ok(json!(v))
        }
        Some("number") => {
            let (lo, hi) = num_bounds(obj);
            let v = if lo <= 0.0 && hi >= 0.0 { 0.0 } else { lo };
            Number::from_f64(v)
                .map(Value::Number)
                .ok_or_else(|| "no finite number within the bounds".into())
        }
        Some("boolean") => Ok(json!(false)),
        Some("null") => Ok(Value::Null),
        Some(other) => Err(format!("unknown type {other:?}")),
        None => Ok(Value::Null),
    }
}

/// The first non-null entry of `type` (a string or an array of them), or `object` when the
/// schema has `properties`.
fn primary_type(obj: &Map<String, Value>) -> Option<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => Some(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .or(Some("null")),
        _ if obj.contains_key("properties") => Some("object"),
        _ => None,
    }
}

fn required(obj: &Map<String, Value>) -> Vec<&str> {
    obj.get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn uint(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    obj.get(key).and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

/// Inclusive integer bounds from `minimum`/`maximum` and their exclusive forms.
fn int_bounds(obj: &Map<String, Value>) -> Result<(i64, i64), String> {
    let get = |k: &str| obj.get(k).and_then(Value::as_f64);
    let lo = match (get("minimum"), get("exclusiveMinimum")) {
        (_, Some(x)) => x.floor() as i64 + 1,
        (Some(m), None) => m.ceil() as i64,
        _ => i64::MIN / 2,
    };
    let hi = match (get("maximum"), get("exclusiveMaximum")) {
        (_, Some(x)) => x.ceil() as i64 - 1,
        (Some(m), None) => m.floor() as i64,
        _ => i64::MAX / 2,
    };
    if lo > hi {
        return Err(format!("no integer in [{lo}, {hi}]"));
    }
    Ok((lo, hi))
}

/// Number bounds (exclusive ones nudged inwards).
fn num_bounds(obj: &Map<String, Value>) -> (f64, f64) {
    let get = |k: &str| obj.get(k).and_then(Value::as_f64);
    let lo = get("exclusiveMinimum")
        .map(|x| x + x.abs().max(1.0) * 1e-6)
        .or(get("minimum"))
        .unwrap_or(-1e9);
    let hi = get("exclusiveMaximum")
        .map(|x| x - x.abs().max(1.0) * 1e-6)
        .or(get("maximum"))
        .unwrap_or(1e9);
    (lo, hi)
}

/// A sample for a known `format`, else `None`.
fn format_sample(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2026-01-01T00:00:00Z",
        "date" => "2026-01-01",
        "time" => "00:00:00Z",
        "email" => "someone@example.com",
        "uri" | "url" | "iri" => "https://example.com/",
        "uri-reference" => "/example",
        "uuid" => "00000000-0000-4000-8000-000000000000",
        "hostname" => "example.com",
        "ipv4" => "192.0.2.1",
        "ipv6" => "2001:db8::1",
        _ => return None,
    })
}

fn string_instance(obj: &Map<String, Value>) -> Result<Value, String> {
    if let Some(f) = obj.get("format").and_then(Value::as_str)
        && let Some(sample) = format_sample(f)
    {
        return Ok(json!(sample));
    }
    if obj.contains_key("pattern") {
        return Err("a string with a `pattern` and no example; give --args".into());
    }
    let min = uint(obj, "minLength").unwrap_or(0).max(1) as usize;
    let max = uint(obj, "maxLength").map_or(usize::MAX, |m| m as usize);
    if min > max {
        return Err(format!("minLength {min} > maxLength {max}"));
    }
    Ok(json!("x".repeat(min.min(max))))
}

/// Resolves a local `$ref` against `root`.
fn resolve<'a>(reference: &str, root: &'a Value) -> Result<&'a Value, String> {
    let pointer = reference
        .strip_prefix('#')
        .ok_or_else(|| format!("$ref {reference:?} is not local"))?;
    root.pointer(pointer)
        .ok_or_else(|| format!("$ref {reference:?} does not resolve"))
}

/// `allOf` branches merged into one schema (properties, required and bounds combined; a later
/// branch overrides a scalar keyword of an earlier one).
fn merge_all_of(base: &Map<String, Value>, all: &[Value], root: &Value) -> Result<Value, String> {
    let mut merged = base.clone();
    merged.remove("allOf");
    for branch in all {
        let branch = match branch.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve(r, root)?,
            None => branch,
        };
        let Some(b) = branch.as_object() else {
            continue;
        };
        for (k, v) in b {
            match (k.as_str(), merged.get_mut(k)) {
                ("properties", Some(Value::Object(p))) => {
                    if let Some(more) = v.as_object() {
                        p.extend(more.clone());
                    }
                }
                ("required", Some(Value::Array(r))) => {
                    if let Some(more) = v.as_array() {
                        r.extend(more.iter().cloned());
                    }
                }
                _ => {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Ok(Value::Object(merged))
}

/// A proptest strategy over valid instances of `schema`, for `--fuzz`: required properties
/// always, optional ones sometimes; values anywhere within bounds, enums and formats. What
/// [`synthesize`] cannot build, this cannot either.
pub fn strategy(schema: &Value) -> Result<BoxedStrategy<Value>, String> {
    strategy_at(schema, schema, 0)
}

fn strategy_at(schema: &Value, root: &Value, depth: usize) -> Result<BoxedStrategy<Value>, String> {
    if depth > MAX_DEPTH {
        return Err("the schema nests too deeply (recursive $ref?)".into());
    }
    let Some(obj) = schema.as_object() else {
        return instance(schema, root, depth).map(|v| Just(v).boxed());
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        return strategy_at(resolve(r, root)?, root, depth + 1);
    }
    if let Some(v) = obj.get("const") {
        return Ok(Just(v.clone()).boxed());
    }
    let mut choices: Vec<Value> = Vec::new();
    for key in ["enum", "examples"] {
        if let Some(values) = obj.get(key).and_then(Value::as_array) {
            choices.extend(values.iter().cloned());
        }
    }
    if let Some(v) = obj.get("default") {
        choices.push(v.clone());
    }
    if obj.contains_key("enum") {
        return Ok(proptest::sample::select(choices).boxed());
    }
    if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
        return strategy_at(&merge_all_of(obj, all, root)?, root, depth + 1);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = obj.get(key).and_then(Value::as_array) {
            let built: Vec<_> = options
                .iter()
                .filter_map(|o| strategy_at(o, root, depth + 1).ok())
                .collect();
            if built.is_empty() {
                return instance(schema, root, depth).map(|v| Just(v).boxed());
            }
            return Ok(proptest::strategy::Union::new(built).boxed());
        }
    }
    let generated = match primary_type(obj) {
        Some("object") => {
            let props = obj.get("properties").and_then(Value::as_object);
            let required = required(obj);
            let mut fields: Vec<BoxedStrategy<Option<(String, Value)>>> = Vec::new();
            for (name, prop) in props.into_iter().flatten() {
                let s = strategy_at(prop, root, depth + 1);
                let name = name.clone();
                if required.contains(&name.as_str()) {
                    let s = s.map_err(|e| format!("property {name:?}: {e}"))?;
                    fields.push(s.prop_map(move |v| Some((name.clone(), v))).boxed());
                } else if let Ok(s) = s {
                    fields
                        .push(proptest::option::of(s.prop_map(move |v| (name.clone(), v))).boxed());
                }
            }
            // Required names without a property schema: whatever `synthesize` puts there.
            let fixed = instance(schema, root, depth)?;
            fields
                .prop_map(move |pairs| {
                    let mut out = fixed.as_object().cloned().unwrap_or_default();
                    out.extend(pairs.into_iter().flatten());
                    Value::Object(out)
                })
                .boxed()
        }
        Some("array") => {
            let min = uint(obj, "minItems").unwrap_or(0) as usize;
            let max = uint(obj, "maxItems")
                .map_or(min + 3, |m| m as usize)
                .max(min);
            let items = obj.get("items").unwrap_or(&Value::Bool(true));
            let item = match strategy_at(items, root, depth + 1) {
                Ok(s) => s,
                Err(_) if min == 0 => return Ok(Just(json!([])).boxed()),
                Err(e) => return Err(format!("items: {e}")),
            };
            proptest::collection::vec(item, min..=max)
                .prop_map(Value::Array)
                .boxed()
        }
        Some("string") => {
            if obj.contains_key("format") || obj.contains_key("pattern") {
                instance(schema, root, depth).map(|v| Just(v).boxed())?
            } else {
                let min = uint(obj, "minLength").unwrap_or(0) as usize;
                let max = uint(obj, "maxLength")
                    .map_or(min + 16, |m| m as usize)
                    .max(min);
                proptest::collection::vec(proptest::char::range(' ', '~'), min..=max)
                    .prop_map(|c| Value::String(c.into_iter().collect()))
                    .boxed()
            }
        }
        Some("integer") => {
            let (lo, hi) = int_bounds(obj)?;
            let m = uint(obj, "multipleOf").filter(|m| *m > 0).unwrap_or(1) as i64;
            let (lo, hi) = (lo.max(-1_000_000), hi.min(1_000_000));
            let (first, last) = (
                lo.div_euclid(m) + i64::from(lo.rem_euclid(m) != 0),
                hi.div_euclid(m),
            );
            if first > last {
                return Err(format!("no multiple of {m} in [{lo}, {hi}]"));
            }
            (first..=last).prop_map(move |k| json!(k * m)).boxed()
        }
        Some("number") => {
            let (lo, hi) = num_bounds(obj);
            (lo..=hi)
                .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number))
                .boxed()
        }
        Some("boolean") => any::<bool>().prop_map(Value::Bool).boxed(),
        _ => instance(schema, root, depth).map(|v| Just(v).boxed())?,
    };
    if choices.is_empty() {
        Ok(generated)
    } else {
        // The author's own examples are the likeliest real inputs: offer them half the time.
        Ok(prop_oneof![proptest::sample::select(choices), generated].boxed())
    }
}

/// `n` inputs drawn from `strategy` with a seeded generator: the same seed gives the same inputs.
pub fn sample(strategy: &BoxedStrategy<Value>, seed: u64, n: usize) -> Vec<Value> {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    (0..n)
        .filter_map(|_| strategy.new_tree(&mut runner).ok().map(|t| t.current()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small validator for what these tests build: types, required, enum, bounds, lengths.
    fn valid(schema: &Value, v: &Value, root: &Value) -> bool {
        let Some(obj) = schema.as_object() else {
            return true;
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            return valid(resolve(r, root).unwrap(), v, root);
        }
        if let Some(e) = obj.get("enum").and_then(Value::as_array) {
            return e.contains(v);
        }
        if let Some(options) = obj.get("anyOf").and_then(Value::as_array) {
            return options.iter().any(|o| valid(o, v, root));
        }
        let num = |k: &str| obj.get(k).and_then(Value::as_f64);
        match primary_type(obj) {
            Some("object") => {
                let Some(o) = v.as_object() else { return false };
                let props = obj.get("properties").and_then(Value::as_object);
                required(obj).iter().all(|r| o.contains_key(*r))
                    && o.iter().all(|(k, x)| {
                        props
                            .and_then(|p| p.get(k))
                            .is_none_or(|s| valid(s, x, root))
                    })
            }
            Some("array") => v.as_array().is_some_and(|a| {
                a.len() as u64 >= uint(obj, "minItems").unwrap_or(0)
                    && a.iter().all(|x| valid(&obj["items"], x, root))
            }),
            Some("string") => v.as_str().is_some_and(|s| {
                let n = s.chars().count() as u64;
                n >= uint(obj, "minLength").unwrap_or(0)
                    && n <= uint(obj, "maxLength").unwrap_or(u64::MAX)
            }),
            Some("integer") => v.as_i64().is_some_and(|i| {
                num("minimum").is_none_or(|m| i as f64 >= m)
                    && num("maximum").is_none_or(|m| i as f64 <= m)
                    && num("exclusiveMinimum").is_none_or(|m| i as f64 > m)
                    && uint(obj, "multipleOf").is_none_or(|m| i % m as i64 == 0)
            }),
            Some("number") => v.as_f64().is_some_and(|f| {
                num("minimum").is_none_or(|m| f >= m) && num("maximum").is_none_or(|m| f <= m)
            }),
            Some("boolean") => v.is_boolean(),
            _ => true,
        }
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": 5, "maximum": 9, "multipleOf": 3},
                "b": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 2},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "name": {"type": "string", "minLength": 3, "maxLength": 5},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "nested": {"$ref": "#/$defs/point"},
                "either": {"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "boolean"}]},
                "optional": {"type": "string", "pattern": "^z$"}
            },
            "required": ["a", "b", "mode", "name", "when", "tags", "nested", "either"],
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}
        })
    }

    #[test]
    fn synthesizes_required_fields_within_bounds() {
        let s = schema();
        let v = synthesize(&s).unwrap();
        assert!(valid(&s, &v, &s), "{v}");
        assert_eq!(v["a"], json!(6));
        assert_eq!(v["mode"], json!("fast"));
        assert_eq!(v["name"], json!("xxx"));
        assert_eq!(v["when"], json!("2026-01-01T00:00:00Z"));
        assert_eq!(v["nested"], json!({"x": 0}));
        assert_eq!(v["either"], json!(false));
        assert!(v.get("optional").is_none(), "only required fields: {v}");
    }

    #[test]
    fn prefers_the_authors_default_and_examples() {
        let s = json!({"type": "object", "required": ["q", "n"], "properties": {
            "q": {"type": "string", "pattern": "^[a-z]+$", "examples": ["weather"]},
            "n": {"type": "integer", "default": 7}
        }});
        assert_eq!(synthesize(&s).unwrap(), json!({"q": "weather", "n": 7}));
    }

    #[test]
    fn says_why_it_cannot() {
        let s = json!({"type": "object", "required": ["id"], "properties": {
            "id": {"type": "string", "pattern": "^[0-9a-f]{8}$"}
        }});
        let err = synthesize(&s).unwrap_err();
        assert!(err.contains("\"id\"") && err.contains("pattern"), "{err}");
        let err = synthesize(&json!({"type": "integer", "minimum": 3, "maximum": 2})).unwrap_err();
        assert!(err.contains("no integer"), "{err}");
    }

    #[test]
    fn fuzzed_inputs_are_valid_and_reproducible_from_the_seed() {
        let s = schema();
        let st = strategy(&s).unwrap();
        let a = sample(&st, 42, 25);
        assert_eq!(a.len(), 25);
        for v in &a {
            assert!(valid(&s, v, &s), "{v}");
        }
        assert_eq!(a, sample(&st, 42, 25), "same seed, same inputs");
        assert_ne!(a, sample(&st, 43, 25), "another seed, other inputs");
    }
}
