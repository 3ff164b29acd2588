//! JSON <-> Temporal payload conversion (`json/plain`), in one place.
//!
//! Every component turns JSON values into Temporal [`Payload`]s and back through this module, so
//! the encoding rules live here only. The MCP marker that tells a whole `CallToolResult` from a
//! plain value belongs to the MCP-tool contract one layer up, built on these functions.
//!
//! A [`PayloadCodec`] hook sits between conversion and the wire: the identity codec by default,
//! a remote codec server (encryption, compression) when configured.

use std::collections::HashMap;

use futures::future::BoxFuture;
use serde::{Serialize, de::DeserializeOwned};
use temporalio_protos::temporal::api::common::v1::Payload;

/// Metadata key naming a payload's encoding (Temporal's convention).
pub const ENCODING_KEY: &str = "encoding";
/// The encoding of JSON payloads.
pub const JSON_ENCODING: &str = "json/plain";
/// The encoding of empty (null) payloads.
pub const NULL_ENCODING: &str = "binary/null";

/// Why a payload could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("payload has encoding {found:?}; expected {JSON_ENCODING:?}")]
    UnsupportedEncoding { found: String },
    #[error("payload is not valid JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),
    #[error("value cannot be encoded as JSON: {0}")]
    Unencodable(#[source] serde_json::Error),
    #[error("payload codec failed: {0}")]
    Codec(String),
}

/// Encodes a serializable value as a `json/plain` payload.
pub fn to_payload<T: Serialize + ?Sized>(value: &T) -> Result<Payload, PayloadError> {
    let data = serde_json::to_vec(value).map_err(PayloadError::Unencodable)?;
    Ok(Payload {
        metadata: HashMap::from([(ENCODING_KEY.to_owned(), JSON_ENCODING.as_bytes().to_vec())]),
        data,
        ..Default::default()
    })
}

/// The payload's encoding, if it names one.
pub fn encoding(payload: &Payload) -> Option<&str> {
    payload
        .metadata
        .get(ENCODING_KEY)
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// Decodes a payload into a JSON value. `binary/null` and an empty payload decode to `null`.
pub fn to_json(payload: &Payload) -> Result<serde_json::Value, PayloadError> {
    match encoding(payload) {
        Some(JSON_ENCODING) => {
            serde_json::from_slice(&payload.data).map_err(PayloadError::InvalidJson)
        }
        Some(NULL_ENCODING) => Ok(serde_json::Value::Null),
        None if payload.data.is_empty() => Ok(serde_json::Value::Null),
        other => Err(PayloadError::UnsupportedEncoding {
            found: other.unwrap_or("<none>").to_owned(),
        }),
    }
}

/// Decodes a payload into a typed value.
pub fn from_payload<T: DeserializeOwned>(payload: &Payload) -> Result<T, PayloadError> {
    serde_json::from_value(to_json(payload)?).map_err(PayloadError::InvalidJson)
}

/// A hook that transforms payloads on their way to and from Temporal (encryption,
/// compression). The connector and proxy call it around every payload they send or receive, so a
/// remote codec server plugs in without touching conversion.
pub trait PayloadCodec: Send + Sync + 'static {
    /// Transforms payloads before they are sent to Temporal.
    fn encode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>>;
    /// Reverses [`PayloadCodec::encode`] on payloads received from Temporal.
    fn decode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>>;
}

/// The default codec: payloads pass unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdentityCodec;

impl PayloadCodec for IdentityCodec {
    fn encode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>> {
        Box::pin(async move { Ok(payloads) })
    }
    fn decode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>> {
        Box::pin(async move { Ok(payloads) })
    }
}

/// Encodes one payload through a codec.
pub async fn encode_one(
    codec: &dyn PayloadCodec,
    payload: Payload,
) -> Result<Payload, PayloadError> {
    single(codec.encode(vec![payload]).await?)
}

/// Decodes one payload through a codec.
pub async fn decode_one(
    codec: &dyn PayloadCodec,
    payload: Payload,
) -> Result<Payload, PayloadError> {
    single(codec.decode(vec![payload]).await?)
}

fn single(mut payloads: Vec<Payload>) -> Result<Payload, PayloadError> {
    if payloads.len() != 1 {
        return Err(PayloadError::Codec(format!(
            "codec returned {} payloads for 1",
            payloads.len()
        )));
    }
    Ok(payloads.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn json_round_trip_keeps_value_and_encoding() {
        let value = json!({"a": [1, 2.5, "x", null, true], "b": {"c": "é"}});
        let payload = to_payload(&value).unwrap();
        assert_eq!(encoding(&payload), Some(JSON_ENCODING));
        assert_eq!(to_json(&payload).unwrap(), value);
    }

    #[test]
    fn null_and_empty_payloads_decode_to_null() {
        let null = Payload {
            metadata: HashMap::from([(ENCODING_KEY.into(), NULL_ENCODING.into())]),
            ..Default::default()
        };
        assert_eq!(to_json(&null).unwrap(), serde_json::Value::Null);
        assert_eq!(
            to_json(&Payload::default()).unwrap(),
            serde_json::Value::Null
        );
    }

    #[test]
    fn foreign_encoding_is_a_clear_error() {
        let proto = Payload {
            metadata: HashMap::from([(ENCODING_KEY.into(), b"binary/protobuf".to_vec())]),
            data: vec![1, 2, 3],
            ..Default::default()
        };
        let err = to_json(&proto).unwrap_err();
        assert!(err.to_string().contains("binary/protobuf"), "{err}");
    }

    #[tokio::test]
    async fn identity_codec_passes_payloads_unchanged() {
        let payload = to_payload(&json!({"k": 1})).unwrap();
        let encoded = encode_one(&IdentityCodec, payload.clone()).await.unwrap();
        assert_eq!(encoded, payload);
        assert_eq!(decode_one(&IdentityCodec, encoded).await.unwrap(), payload);
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(".*", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_round_trips(value in arb_json()) {
            let payload = to_payload(&value).unwrap();
            prop_assert_eq!(to_json(&payload).unwrap(), value);
        }
    }
}
