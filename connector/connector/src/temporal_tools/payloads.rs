//! Values in and out of Temporal for the tools, through the remote codec when one is set
//! (R-OPS-4).
//!
//! Values sent (Workflow inputs, signal and query arguments) become `json/plain` payloads and
//! are encoded by the codec with the call's namespace in `X-Namespace`. Values read back are
//! decoded the same way only when the operator opted in (R-OPS-7): a Temporal principal
//! without codec access can copy any ciphertext into a Workflow it owns, so decoding what a
//! Workflow holds decrypts whatever anyone put there. Protobuf messages are shown as JSON; inside them a payload is shown as
//! its JSON value when it is `json/plain`, else as its encoding and size, and an encoded failure
//! (`encodedAttributes`) gets its message and stack trace back when the codec can decode it.

use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::{Map, Value, json};
use temporalio_protos::temporal::api::common::v1::{Payload, Payloads};

use super::error::ToolError;
use durable_mcp_contract::payload::{self, PayloadCodec};
use durable_mcp_runtime::temporal::codec::RemoteCodec;

/// What to decode inside a protobuf message shown as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// Payloads and failures (one event).
    Everything,
    /// Failure messages and stack traces only (a whole history).
    FailuresOnly,
}

/// The tools that show values read back, decoded with [`PayloadIo::decoding`] (and then
/// needing the `decode` scope under inbound OAuth, R-OPS-7).
pub const DECODING_TOOLS: [&str; 6] = [
    "get_workflow_result",
    "get_workflow_event",
    "get_workflow_history",
    "describe_workflow",
    "query_workflow",
    "describe_schedule",
];

/// Encodes and decodes the tools' payloads, per namespace.
#[derive(Clone, Default)]
pub struct PayloadIo {
    codec: Option<RemoteCodec>,
    /// Whether values read back go through the codec (R-OPS-7).
    decode_reads: bool,
}

impl PayloadIo {
    /// Encodes values sent through `codec`; values read back are shown as stored.
    pub fn new(codec: Option<RemoteCodec>) -> Self {
        Self {
            codec,
            decode_reads: false,
        }
    }

    /// Also decodes values read back (R-OPS-7).
    pub fn decoding(self) -> Self {
        Self {
            decode_reads: true,
            ..self
        }
    }

    /// Whether values read back are decoded through a codec.
    pub fn decodes(&self) -> bool {
        self.decode_reads && self.codec.is_some()
    }

    /// JSON values as payloads for Temporal, encoded for `namespace`. None when there are none.
    pub async fn encode(
        &self,
        namespace: &str,
        values: &[Value],
    ) -> Result<Option<Payloads>, ToolError> {
        if values.is_empty() {
            return Ok(None);
        }
        let payloads = values
            .iter()
            .map(payload::to_payload)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ToolError::invalid(e.to_string()))?;
        let payloads = match &self.codec {
            Some(codec) => codec
                .with_namespace(namespace)
                .encode(payloads)
                .await
                .map_err(ToolError::codec)?,
            None => payloads,
        };
        Ok(Some(Payloads { payloads }))
    }

    /// Payloads from Temporal as displayable JSON values, decoded for `namespace`.
    pub async fn decode(
        &self,
        namespace: &str,
        payloads: Option<Payloads>,
    ) -> Result<Vec<Value>, ToolError> {
        let payloads = payloads.map(|p| p.payloads).unwrap_or_default();
        Ok(self
            .decode_raw(namespace, payloads)
            .await?
            .iter()
            .map(display)
            .collect())
    }

    async fn decode_raw(
        &self,
        namespace: &str,
        payloads: Vec<Payload>,
    ) -> Result<Vec<Payload>, ToolError> {
        match &self.codec {
            Some(codec) if self.decode_reads && !payloads.is_empty() => codec
                .with_namespace(namespace)
                .decode(payloads)
                .await
                .map_err(ToolError::codec),
            _ => Ok(payloads),
        }
    }

    /// Rewrites a protobuf message's JSON in place: failures decoded (with a codec), payloads
    /// shown as values ([`Decode::Everything`] decodes them through the codec first).
    pub async fn show(
        &self,
        namespace: &str,
        tree: &mut Value,
        what: Decode,
    ) -> Result<(), ToolError> {
        // Failures first: their encoded attributes look like payloads too.
        let mut failures = Vec::new();
        find(tree, String::new(), &mut |path, v| {
            if v.as_object()
                .is_some_and(|o| o.contains_key("encodedAttributes"))
            {
                failures.push(path.to_owned());
                true
            } else {
                false
            }
        });
        if self.decodes() && !failures.is_empty() {
            let raw: Vec<Payload> = failures
                .iter()
                .filter_map(|p| {
                    tree.pointer(&format!("{p}/encodedAttributes"))
                        .and_then(wire_payload)
                })
                .collect();
            if raw.len() == failures.len() {
                let decoded = self.decode_raw(namespace, raw).await?;
                for (path, p) in failures.iter().zip(decoded) {
                    if let (Some(Value::Object(f)), Ok(attrs)) =
                        (tree.pointer_mut(path), payload::to_json(&p))
                    {
                        f.remove("encodedAttributes");
                        for (from, to) in [("message", "message"), ("stack_trace", "stackTrace")] {
                            if let Some(v) = attrs.get(from) {
                                f.insert(to.into(), v.clone());
                            }
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        find(tree, String::new(), &mut |path, v| {
            if let Some(p) = wire_payload(v) {
                found.push((path.to_owned(), p));
                true
            } else {
                false
            }
        });
        let (paths, raw): (Vec<String>, Vec<Payload>) = found.into_iter().unzip();
        let shown = match what {
            Decode::Everything => self.decode_raw(namespace, raw).await?,
            Decode::FailuresOnly => raw,
        };
        for (path, p) in paths.iter().zip(shown) {
            if let Some(slot) = tree.pointer_mut(path) {
                *slot = display(&p);
            }
        }
        Ok(())
    }
}

/// A payload as a JSON value to show: its value when it is JSON, else what it is.
pub fn display(p: &Payload) -> Value {
    match payload::to_json(p) {
        Ok(v) => v,
        Err(_) => json!({
            "encoding": payload::encoding(p).unwrap_or("<none>"),
            "size_bytes": p.data.len(),
            "note": "not JSON (encoded, or another converter); the connector decodes values only with --codec-endpoint and --temporal-tools-decode",
        }),
    }
}

/// A payload in protobuf JSON (`{"metadata": {k: base64}, "data": base64}`), if `v` is one.
fn wire_payload(v: &Value) -> Option<Payload> {
    let o = v.as_object()?;
    let metadata = o.get("metadata")?.as_object()?;
    if !o
        .keys()
        .all(|k| matches!(k.as_str(), "metadata" | "data" | "externalPayloads"))
    {
        return None;
    }
    let b64 = |s: &Value| s.as_str().and_then(|s| STANDARD.decode(s).ok());
    Some(Payload {
        metadata: metadata
            .iter()
            .map(|(k, v)| Some((k.clone(), b64(v)?)))
            .collect::<Option<_>>()?,
        data: match o.get("data") {
            Some(d) => b64(d)?,
            None => Vec::new(),
        },
        ..Default::default()
    })
}

/// Calls `hit` on every node (depth first, JSON-pointer paths); a node it accepts is not
/// descended into.
fn find(v: &Value, path: String, hit: &mut impl FnMut(&str, &Value) -> bool) {
    if hit(&path, v) {
        return;
    }
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                find(
                    child,
                    format!("{path}/{}", k.replace('~', "~0").replace('/', "~1")),
                    hit,
                );
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                find(child, format!("{path}/{i}"), hit);
            }
        }
        _ => {}
    }
}

/// A protobuf message (with serde derives) as JSON, or a note why not.
pub fn proto_json<T: serde::Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or_else(|e| json!({"unrenderable": e.to_string()}))
}

/// Drops empty values (null, "", 0, false, [], {}) from a JSON object tree, as protobuf JSON
/// would: defaults carry no information and make answers long.
pub fn prune(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for child in o.values_mut() {
                prune(child);
            }
            o.retain(|_, c| !is_empty(c));
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `value` with `more` fields when it is an object (an answer being built), else as it is.
pub fn with_fields(mut value: Value, more: impl IntoIterator<Item = (String, Value)>) -> Value {
    if let Value::Object(fields) = &mut value {
        fields.extend(more);
    }
    value
}

/// An object from pairs, for building answers.
pub fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Map<_, _>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(p: &Payload) -> Value {
        json!({
            "metadata": p.metadata.iter().map(|(k, v)| (k.clone(), json!(STANDARD.encode(v)))).collect::<Map<_, _>>(),
            "data": STANDARD.encode(&p.data),
        })
    }

    #[tokio::test]
    async fn payloads_inside_messages_are_shown_as_values() {
        let p = payload::to_payload(&json!({"order": 7})).unwrap();
        let mut tree = json!({"attributes": {"input": {"payloads": [wire(&p)]}, "identity": "w"}});
        PayloadIo::default()
            .show("default", &mut tree, Decode::Everything)
            .await
            .unwrap();
        assert_eq!(
            tree["attributes"]["input"]["payloads"][0],
            json!({"order": 7})
        );
        assert_eq!(tree["attributes"]["identity"], "w");
    }

    #[test]
    fn non_json_payloads_say_what_they_are() {
        let p = Payload {
            metadata: [("encoding".to_owned(), b"binary/encrypted".to_vec())].into(),
            data: vec![1, 2, 3],
            ..Default::default()
        };
        let shown = display(&p);
        assert_eq!(shown["encoding"], "binary/encrypted");
        assert_eq!(shown["size_bytes"], 3);
    }

    #[test]
    fn only_payload_shaped_objects_are_payloads() {
        assert!(
            wire_payload(&json!({"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "MQ=="}))
                .is_some()
        );
        assert!(wire_payload(&json!({"metadata": {}, "other": 1})).is_none());
        assert!(wire_payload(&json!({"metadata": {"k": "%%%"}})).is_none());
        assert!(wire_payload(&json!("x")).is_none());
    }

    #[test]
    fn pruning_drops_defaults_only() {
        let mut v = json!({"a": 0, "b": "", "c": [], "d": {"e": null}, "f": 1, "g": [{"h": false, "i": "x"}]});
        prune(&mut v);
        assert_eq!(v, json!({"f": 1, "g": [{"i": "x"}]}));
    }
}
