//! The wire fuzzer over Streamable HTTP (R-CNF-26): each case is one HTTP request, sent as the
//! case says (verb, headers, body, session), its answer read until the response to its id, the
//! body's end, or the time allowed. A session of the run's own is opened first, for the cases
//! that name one.

use std::time::Duration;

use anyhow::Context as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::cases::{Case, Session, Verb};
use super::judge::{Finding, judge_http, method_of};

/// The most of an answer read (an event stream may go on).
const MAX_ANSWER: usize = 16 << 20;

/// How long a long-lived stream (a GET, a `subscriptions/listen`) is read before it is dropped.
const LONG_LIVED_READ: Duration = Duration::from_secs(2);

/// A Streamable HTTP MCP server under fuzz.
pub struct HttpTarget {
    client: reqwest::Client,
    url: String,
    /// `NAME: VALUE` headers of every request (e.g. an Authorization).
    extra: Vec<(HeaderName, HeaderValue)>,
    /// The run's own session.
    session: Option<String>,
}

impl HttpTarget {
    /// A target at `url` (already checked to be loopback), with `extra` headers on every
    /// request; opens the run's own session (an `initialize` of 2025-06-18).
    pub async fn open(url: &str, extra: &[(String, String)]) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        let extra = extra
            .iter()
            .map(|(n, v)| {
                Ok((
                    HeaderName::try_from(n.as_str())?,
                    HeaderValue::try_from(v.as_str())?,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .context("a --header that is no valid HTTP header")?;
        let mut target = Self {
            client,
            url: url.to_owned(),
            extra,
            session: None,
        };
        target.session = target.initialize().await;
        Ok(target)
    }

    /// The session id of an `initialize` (none when the server gives none).
    async fn initialize(&self) -> Option<String> {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "durable-mcp-fuzz", "version": "0"}}});
        let response = self.post_json(&init, None).await.ok()?;
        let session = response
            .headers()
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_owned();
        let _ = response.bytes().await;
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = self.post_json(&initialized, Some(&session)).await;
        Some(session)
    }

    async fn post_json(
        &self,
        message: &serde_json::Value,
        session: Option<&str>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in &self.extra {
            request = request.header(name, value);
        }
        request.send().await
    }

    /// Sends `case` and judges its answer: its headers within `timeout`, then its body until
    /// the response, the end, or the rest of `timeout` (a long-lived stream: a moment).
    pub async fn send(&self, case: &Case, timeout: Duration) -> Option<Finding> {
        let method = method_of(&case.body);
        let long_lived =
            case.verb == Verb::Get || method.as_deref() == Some("subscriptions/listen");
        let started = tokio::time::Instant::now();
        let request = self.request(case).await;
        let mut response = match tokio::time::timeout(timeout, request.send()).await {
            Err(_) => return Some(Finding::Hang),
            Ok(Err(e)) => return Some(no_answer(e)),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        // A GET or DELETE carries no body: no answer to a request is due.
        let body: &[u8] = if case.verb == Verb::Post {
            &case.body
        } else {
            b""
        };
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let left = timeout.saturating_sub(started.elapsed());
        let wait = if long_lived {
            left.min(LONG_LIVED_READ)
        } else {
            left
        };
        let mut answer = Vec::new();
        let read = async {
            while let Ok(Some(chunk)) = response.chunk().await {
                answer.extend_from_slice(&chunk);
                let event = answer.windows(2).any(|w| w == b"\n\n");
                // A stream is read until its first event (long-lived) or the response.
                let answered = event
                    && (long_lived
                        || judge_http(body, false, status, &content_type, &answer, false)
                            .is_none());
                if answer.len() > MAX_ANSWER || answered {
                    break;
                }
            }
        };
        // A body that broke off is judged on what came.
        let complete = tokio::time::timeout(wait, read).await.is_ok();
        judge_http(body, long_lived, status, &content_type, &answer, complete)
    }

    async fn request(&self, case: &Case) -> reqwest::RequestBuilder {
        let method = match case.verb {
            Verb::Post => reqwest::Method::POST,
            Verb::Get => reqwest::Method::GET,
            Verb::Delete => reqwest::Method::DELETE,
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &case.headers {
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name.as_str()), header_value(value))
            {
                headers.append(name, value);
            }
        }
        let session = match &case.session {
            Session::None => None,
            Session::Own => self.session.as_ref().map(|s| s.clone().into_bytes()),
            Session::Fresh => self.initialize().await.map(String::into_bytes),
            Session::Made(id) => Some(id.clone()),
        };
        if let Some(Ok(id)) = session.map(|s| header_value(&s)) {
            headers.insert("mcp-session-id", id);
        }
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        let request = self.client.request(method, &self.url).headers(headers);
        match case.verb {
            Verb::Post => request.body(case.body.clone()),
            Verb::Get | Verb::Delete => request,
        }
    }
}

/// A header value of `bytes`, control characters turned into `?` (no client can send them).
fn header_value(bytes: &[u8]) -> Result<HeaderValue, reqwest::header::InvalidHeaderValue> {
    let clean: Vec<u8> = bytes
        .iter()
        .map(|b| {
            if *b == b'\t' || (*b >= 0x20 && *b != 0x7f) {
                *b
            } else {
                b'?'
            }
        })
        .collect();
    HeaderValue::from_bytes(&clean)
}

/// A request that got no answer, with the error's causes (no URL: it is the target's).
fn no_answer(e: reqwest::Error) -> Finding {
    let mut causes = String::new();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        causes.push_str(&format!(": {s}"));
        source = s.source();
    }
    Finding::NoAnswer(format!("{}{causes}", e.without_url()))
}
