//! A remote codec server as the [`PayloadCodec`]: payloads go to `POST <url>/encode` and
//! `<url>/decode` in Temporal's codec-server JSON format (`{"payloads": [{"metadata": {k:
//! base64}, "data": base64}]}`), with the namespace in `X-Namespace` (R-CON-8, R-PAY-4).
//!
//! A codec sees plaintext payloads, so they go only where the operator named: `https`, or plain
//! `http` to a loopback address; redirects are never followed. Every request is bounded in time
//! ([`CODEC_TIMEOUT`]) and every answer in size ([`MAX_CODEC_RESPONSE_BYTES`]), so a stuck or
//! runaway codec server fails a call instead of holding it or exhausting memory (R-PAY-5).
//! [`SdkCodec`] hands the same codec to the Temporal SDK's workers (R-PRX-20).

use std::{collections::HashMap, sync::Arc, time::Duration};

use base64::{Engine, engine::general_purpose::STANDARD};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use temporalio_common::data_converters::{
    self as sdk, PayloadConversionError, SerializationContextData,
};
use temporalio_protos::temporal::api::common::v1::Payload;

use durable_mcp_contract::payload::{PayloadCodec, PayloadError};

use super::direct_http::{client_builder, is_loopback};

/// The longest one codec request may take, connection included.
pub const CODEC_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest codec answer read: a Temporal payload holds at most 2 MiB, base64 makes that
/// under 3 MiB, and a batch of them stays well within this.
pub const MAX_CODEC_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Why a codec endpoint cannot be used. Each message starts with the flag or config field that
/// names the endpoint, so the operator knows what to change.
#[derive(Debug, thiserror::Error)]
pub enum CodecConfigError {
    /// The endpoint is not quoted back: a mistyped URL may still hold a credential.
    #[error("{field} is not a valid URL: {reason}")]
    Url { field: String, reason: String },
    #[error("{field} must be an http or https URL, got scheme {scheme:?}")]
    Scheme { field: String, scheme: String },
    #[error(
        "{field}: plain http is accepted only to a loopback address (localhost, 127.0.0.1, ::1), \
         since payloads travel to the codec in clear; use https for {host:?}"
    )]
    InsecureHttp { field: String, host: String },
    #[error("{field} must not carry credentials in the URL; send them in a header instead")]
    Credentials { field: String },
    #[error("{field}: header {name:?} is not a valid HTTP header (name or value)")]
    Header { field: String, name: String },
}

/// How a [`RemoteCodec`] is reached, besides its URL.
#[derive(Clone, Default)]
pub struct CodecOptions {
    /// Sent with every request (for example `Authorization`). Never logged.
    pub headers: Vec<(String, String)>,
    /// The flag or config field that named the endpoint, for error messages
    /// (default `--codec-endpoint`).
    pub field: Option<String>,
    /// The longest one request may take ([`CODEC_TIMEOUT`] when `None`).
    pub timeout: Option<Duration>,
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

/// Checks a codec endpoint (R-PAY-5) and gives its base URL, ending in `/`.
pub fn check_endpoint(endpoint: &str, field: &str) -> Result<url::Url, CodecConfigError> {
    let mut base = url::Url::parse(endpoint).map_err(|e| CodecConfigError::Url {
        field: field.into(),
        reason: e.to_string(),
    })?;
    match base.scheme() {
        "https" => {}
        "http" => {
            // Only to this machine: the codec sees payloads in clear.
            if !is_loopback(&base) {
                return Err(CodecConfigError::InsecureHttp {
                    field: field.into(),
                    host: base.host_str().unwrap_or_default().into(),
                });
            }
        }
        other => {
            return Err(CodecConfigError::Scheme {
                field: field.into(),
                scheme: other.into(),
            });
        }
    }
    if !base.username().is_empty() || base.password().is_some() {
        return Err(CodecConfigError::Credentials {
            field: field.into(),
        });
    }
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    Ok(base)
}

impl RemoteCodec {
    /// A codec at `endpoint` (named by `--codec-endpoint` in errors) with no extra headers.
    pub fn new(endpoint: &str, namespace: impl Into<String>) -> Result<Self, CodecConfigError> {
        Self::with_options(endpoint, namespace, CodecOptions::default())
    }

    /// A codec at `endpoint` reached as `options` say.
    pub fn with_options(
        endpoint: &str,
        namespace: impl Into<String>,
        options: CodecOptions,
    ) -> Result<Self, CodecConfigError> {
        let field = options.field.as_deref().unwrap_or("--codec-endpoint");
        let base = check_endpoint(endpoint, field)?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &options.headers {
            let bad = || CodecConfigError::Header {
                field: field.into(),
                name: name.clone(),
            };
            let name_ok =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value_ok = reqwest::header::HeaderValue::from_str(value).map_err(|_| bad())?;
            value_ok.set_sensitive(true);
            headers.insert(name_ok, value_ok);
        }
        // On loopback, never through a proxy from the environment (R-PAY-7).
        let http = client_builder(&base)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout.unwrap_or(CODEC_TIMEOUT))
            .connect_timeout(options.timeout.unwrap_or(CODEC_TIMEOUT))
            .default_headers(headers)
            .build()
            .map_err(|e| CodecConfigError::Url {
                field: field.into(),
                reason: e.to_string(),
            })?;
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

    /// Sends `payloads` through the codec's `/encode` or `/decode` (`op`), counted (R-RUN-6).
    async fn call(&self, op: &str, payloads: Vec<Payload>) -> Result<Vec<Payload>, PayloadError> {
        if payloads.is_empty() {
            return Ok(payloads);
        }
        let answer = self.send(op, payloads).await;
        crate::metrics::count_codec_call(op, answer.is_ok());
        answer
    }

    async fn send(&self, op: &str, payloads: Vec<Payload>) -> Result<Vec<Payload>, PayloadError> {
        let count = payloads.len();
        let resp = self
            .post(op, &WirePayloads::from_payloads(payloads))
            .await?;
        let bytes = read_capped(op, resp).await?;
        let wire: WirePayloads = serde_json::from_slice(&bytes)
            .map_err(|e| PayloadError::Codec(format!("codec /{op} answered invalid JSON: {e}")))?;
        wire.into_payloads(op, count)
    }

    /// Posts `body` to `op`; an answer that is not a success is an error.
    async fn post(&self, op: &str, body: &WirePayloads) -> Result<reqwest::Response, PayloadError> {
        let url = self
            .base
            .join(op)
            .map_err(|e| PayloadError::Codec(e.to_string()))?;
        // Errors drop the URL (R-PAY-5): the operator knows it, and logs need not repeat it.
        let resp = self
            .http
            .post(url)
            .header("X-Namespace", &self.namespace)
            .json(body)
            .send()
            .await
            .map_err(|e| {
                PayloadError::Codec(format!("codec /{op} unreachable: {}", e.without_url()))
            })?;
        if !resp.status().is_success() {
            return Err(PayloadError::Codec(format!(
                "codec /{op} answered HTTP {}",
                resp.status()
            )));
        }
        Ok(resp)
    }
}

/// The body of `op`'s answer, refused beyond [`MAX_CODEC_RESPONSE_BYTES`].
async fn read_capped(op: &str, mut resp: reqwest::Response) -> Result<Vec<u8>, PayloadError> {
    let too_large = || {
        PayloadError::Codec(format!(
            "codec /{op} answered more than {MAX_CODEC_RESPONSE_BYTES} bytes"
        ))
    };
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_CODEC_RESPONSE_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        PayloadError::Codec(format!("codec /{op} answer broke off: {}", e.without_url()))
    })? {
        if bytes.len() + chunk.len() > MAX_CODEC_RESPONSE_BYTES {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

impl WirePayloads {
    /// Payloads in the codec-server format: metadata values and data in base64.
    fn from_payloads(payloads: Vec<Payload>) -> Self {
        let wire = |p: Payload| WirePayload {
            metadata: p
                .metadata
                .into_iter()
                .map(|(k, v)| (k, STANDARD.encode(v)))
                .collect(),
            data: STANDARD.encode(p.data),
        };
        Self {
            payloads: payloads.into_iter().map(wire).collect(),
        }
    }

    /// The `count` payloads `op` answered, decoded from base64.
    fn into_payloads(self, op: &str, count: usize) -> Result<Vec<Payload>, PayloadError> {
        if self.payloads.len() != count {
            return Err(PayloadError::Codec(format!(
                "codec /{op} answered {} payloads for {count}",
                self.payloads.len()
            )));
        }
        let decode = |s: &str| {
            STANDARD
                .decode(s)
                .map_err(|e| PayloadError::Codec(format!("codec /{op}: {e}")))
        };
        self.payloads
            .into_iter()
            .map(|p| {
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

/// A [`PayloadCodec`] as the Temporal SDK's codec, so an SDK worker encodes Activity results
/// and heartbeats and decodes Activity inputs through it (R-PRX-20).
#[derive(Clone)]
pub struct SdkCodec(pub Arc<dyn PayloadCodec>);

/// [`PayloadCodec::encode`] or [`PayloadCodec::decode`].
type CodecOp = for<'a> fn(
    &'a dyn PayloadCodec,
    Vec<Payload>,
) -> BoxFuture<'a, Result<Vec<Payload>, PayloadError>>;

impl SdkCodec {
    /// `op` (the codec's encode or decode) on `payloads`, as the SDK calls it: owning the
    /// codec and with the SDK's error.
    fn run(
        &self,
        payloads: Vec<Payload>,
        op: CodecOp,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        let codec = self.0.clone();
        Box::pin(async move {
            op(codec.as_ref(), payloads)
                .await
                .map_err(|e| PayloadConversionError::EncodingError(Box::new(e)))
        })
    }
}

impl sdk::PayloadCodec for SdkCodec {
    fn encode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        self.run(payloads, |codec, payloads| codec.encode(payloads))
    }
    fn decode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        self.run(payloads, |codec, payloads| codec.decode(payloads))
    }
}

/// The SDK's data converter with `codec` in it (JSON payloads, default failures).
pub fn data_converter(codec: Arc<dyn PayloadCodec>) -> sdk::DataConverter {
    sdk::DataConverter::new(
        sdk::PayloadConverter::default(),
        sdk::DefaultFailureConverter::default(),
        SdkCodec(codec),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_and_loopback_http_endpoints() {
        for ok in [
            "http://127.0.0.1:8888",
            "http://localhost:8888/codec",
            "http://[::1]:8888",
            "http://127.3.2.1:1",
            "https://codec.example.com/base",
        ] {
            assert!(RemoteCodec::new(ok, "default").is_ok(), "{ok}");
        }
        let err = RemoteCodec::new("file:///etc/passwd", "default").unwrap_err();
        assert!(err.to_string().contains("http or https"), "{err}");
        assert!(RemoteCodec::new("not a url", "default").is_err());
        for plain in [
            "http://codec.example.com",
            "http://10.0.0.5:8080",
            "http://0.0.0.0:8080",
            "http://localhost.example.com",
        ] {
            let err = RemoteCodec::new(plain, "default").unwrap_err().to_string();
            assert!(
                err.starts_with("--codec-endpoint: plain http") && err.contains("https"),
                "{plain}: {err}"
            );
        }
    }

    #[test]
    fn errors_name_the_field_and_hide_credentials() {
        let options = CodecOptions {
            field: Some("codec.endpoint".into()),
            ..Default::default()
        };
        let err = RemoteCodec::with_options("http://codec.example.com", "d", options.clone())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("codec.endpoint: "), "{err}");
        let err = RemoteCodec::with_options("https://u:s3cret@codec.example.com", "d", options)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("codec.endpoint ") && !err.contains("s3cret"),
            "{err}"
        );
        // A mistyped URL is not quoted back: it may hold a credential too.
        let err = RemoteCodec::new("https://u:s3cret@codec example.com", "d")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--codec-endpoint is not a valid URL") && !err.contains("s3cret"),
            "{err}"
        );
        let bad_header = CodecOptions {
            headers: vec![("Authorization".into(), "Bearer x\ny".into())],
            ..Default::default()
        };
        let err = RemoteCodec::with_options("https://c.example.com", "d", bad_header)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Authorization") && !err.contains("Bearer"),
            "{err}"
        );
    }
}
