//! A remote codec server as the [`PayloadCodec`]: payloads go to `POST <url>/encode` and
//! `<url>/decode` in Temporal's codec-server JSON format (`{"payloads": [{"metadata": {k:
//! base64}, "data": base64}]}`), with the namespace in `X-Namespace`.
//!
//! Only `http` and `https` URLs are accepted, and redirects are never followed: a codec sees
//! plaintext payloads, so they must not be sent anywhere the operator did not name.

use std::collections::HashMap;

use base64::{Engine, engine::general_purpose::STANDARD};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::Payload;

use super::payload::{PayloadCodec, PayloadError};

/// Why a codec endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CodecConfigError {
    #[error("--codec-endpoint {0:?} is not a valid URL: {1}")]
    Url(String, String),
    #[error("--codec-endpoint must be an http or https URL, got scheme {0:?}")]
    Scheme(String),
}

/// A remote codec server.
#[derive(Clone)]
pub struct RemoteCodec {
    base: url::Url,
    namespace: String,
    http: reqwest::Client,
}

impl std::fmt::Debug for RemoteCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCodec")
            .field("endpoint", &self.base.origin().ascii_serialization())
            .finish()
    }
}

#[derive(Serialize, Deserialize)]
struct WirePayloads {
    payloads: Vec<WirePayload>,
}

#[derive(Serialize, Deserialize)]
struct WirePayload {
    #[serde(default)]
    metadata: HashMap<String, String>,
    #[serde(default)]
    data: String,
}

impl RemoteCodec {
    pub fn new(endpoint: &str, namespace: impl Into<String>) -> Result<Self, CodecConfigError> {
        let mut base = url::Url::parse(endpoint)
            .map_err(|e| CodecConfigError::Url(endpoint.into(), e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(CodecConfigError::Scheme(base.scheme().into()));
        }
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| CodecConfigError::Url(endpoint.into(), e.to_string()))?;
        Ok(Self {
            base,
            namespace: namespace.into(),
            http,
        })
    }

    /// The same codec server for another namespace (its `X-Namespace` header): tools that
    /// reach several namespaces send each payload with its own.
    pub fn with_namespace(&self, namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            ..self.clone()
        }
    }

    async fn call(&self, op: &str, payloads: Vec<Payload>) -> Result<Vec<Payload>, PayloadError> {
        let body = WirePayloads {
            payloads: payloads
                .into_iter()
                .map(|p| WirePayload {
                    metadata: p
                        .metadata
                        .into_iter()
                        .map(|(k, v)| (k, STANDARD.encode(v)))
                        .collect(),
                    data: STANDARD.encode(p.data),
                })
                .collect(),
        };
        let url = self
            .base
            .join(op)
            .map_err(|e| PayloadError::Codec(e.to_string()))?;
        let resp = self
            .http
            .post(url)
            .header("X-Namespace", &self.namespace)
            .json(&body)
            .send()
            .await
            .map_err(|e| PayloadError::Codec(format!("codec /{op} unreachable: {e}")))?;
        if !resp.status().is_success() {
            return Err(PayloadError::Codec(format!(
                "codec /{op} answered HTTP {}",
                resp.status()
            )));
        }
        let wire: WirePayloads = resp
            .json()
            .await
            .map_err(|e| PayloadError::Codec(format!("codec /{op} answered invalid JSON: {e}")))?;
        wire.payloads
            .into_iter()
            .map(|p| {
                let decode = |s: &str| {
                    STANDARD
                        .decode(s)
                        .map_err(|e| PayloadError::Codec(format!("codec /{op}: {e}")))
                };
                Ok(Payload {
                    metadata: p
                        .metadata
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), decode(v)?)))
                        .collect::<Result<_, PayloadError>>()?,
                    data: decode(&p.data)?,
                    ..Default::default()
                })
            })
            .collect()
    }
}

impl PayloadCodec for RemoteCodec {
    fn encode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>> {
        Box::pin(self.call("encode", payloads))
    }
    fn decode(&self, payloads: Vec<Payload>) -> BoxFuture<'_, Result<Vec<Payload>, PayloadError>> {
        Box::pin(self.call("decode", payloads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_endpoints() {
        assert!(RemoteCodec::new("http://127.0.0.1:8888", "default").is_ok());
        assert!(RemoteCodec::new("https://codec.example.com/base", "default").is_ok());
        let err = RemoteCodec::new("file:///etc/passwd", "default").unwrap_err();
        assert!(err.to_string().contains("http or https"), "{err}");
        assert!(RemoteCodec::new("not a url", "default").is_err());
    }
}
