//! The upstream's answers as it wrote them (R-PRX-6). rmcp's typed model changes what it
//! reads: numbers take the field's type (a content annotation's `"priority": 1` becomes
//! `1.0`), and fields it has no place for are dropped (a tool's `execution`, unknown annotation
//! keys). The proxy therefore reads each message twice: rmcp parses it to drive the protocol,
//! and [`WrittenResults`] keeps every response's `result` exactly as written, by request id, for
//! the request that asked. Taps sit under rmcp: [`TapReader`] on a stdio child's stdout and
//! [`TapHttpClient`] on Streamable HTTP event streams. An HTTP upstream that answers a POST
//! with a plain JSON body (not an event stream) is parsed by rmcp before any tap sees it; such
//! answers fall back to rmcp's typed view.

use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use futures::{StreamExt as _, stream::BoxStream};
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ProgressToken, RequestId},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use serde_json::Value;
use sse_stream::Sse;
use tokio::io::{AsyncRead, ReadBuf};

use super::{
    auth::{AuthError, AuthProvider},
    config::UrlSecrets,
    flights::{Flights, ForCaller},
    http_client as scrub,
    progress::{Following, ProgressRoutes, Routes},
};
use durable_mcp_contract::call::ToolLog;

/// How long an answer nobody claimed is kept (the request's caller gave up, or it was rmcp's
/// own request such as `initialize`). Claimed answers leave at once.
const UNCLAIMED_FOR: Duration = Duration::from_secs(60);

/// At most this many answers wait to be claimed, and at most [`KEPT_BYTES`] of them (as
/// written): an upstream that writes answers to requests nobody made cannot grow the proxy
/// without bound; the oldest go first (R-PRX-10).
const KEPT_MAX: usize = 1024;
const KEPT_BYTES: usize = 64 * 1024 * 1024;

/// Answers waiting for their call: (when, request id, result, bytes as written), oldest first.
#[derive(Default)]
struct Kept {
    answers: VecDeque<(Instant, String, Value, usize)>,
    bytes: usize,
}

impl Kept {
    /// Keeps one answer, dropping what outlived [`UNCLAIMED_FOR`] and then the oldest while
    /// over a bound.
    fn keep(&mut self, now: Instant, id: String, result: Value, bytes: usize) {
        self.answers.push_back((now, id, result, bytes));
        self.bytes += bytes;
        let over = |at: &Instant, kept: &Self| {
            now.duration_since(*at) > UNCLAIMED_FOR
                || kept.answers.len() > KEPT_MAX
                || kept.bytes > KEPT_BYTES
        };
        while let Some((at, ..)) = self.answers.front()
            && over(at, self)
        {
            if let Some((.., dropped)) = self.answers.pop_front() {
                self.bytes = self.bytes.saturating_sub(dropped);
            }
        }
    }

    fn take(&mut self, id: &str) -> Option<Value> {
        let at = self.answers.iter().position(|(_, k, ..)| k == id)?;
        let (_, _, result, bytes) = self.answers.remove(at)?;
        self.bytes -= bytes;
        Some(result)
    }
}

/// Responses' `result` values as the upstream wrote them, by request id, and the progress and
/// log messages of the calls, by the progress token of their request; what is in flight, for
/// the log messages that name no request. Clones share them.
#[derive(Clone, Default)]
pub struct WrittenResults {
    kept: Arc<Mutex<Kept>>,
    logs: Arc<Mutex<Routes<ToolLog>>>,
    progress: Arc<Mutex<ProgressRoutes>>,
    flights: Arc<Mutex<Flights>>,
}

impl WrittenResults {
    /// Looks at one JSON-RPC message as the upstream wrote it, read where nothing ties it to a
    /// request (stdout, the session's standalone stream): see [`Self::observe_on`].
    pub fn observe(&self, text: &[u8]) {
        self.observe_on(text, None);
    }

    /// Looks at one JSON-RPC message as the upstream wrote it, read on the response stream of
    /// the request whose progress token is `stream` (if any); keeps its `result` if it is a
    /// response; passes log messages and progress on to the calls they belong to. Anything else
    /// (other notifications, requests, errors, garbage) is ignored: rmcp handles those.
    pub fn observe_on(&self, text: &[u8], stream: Option<&Value>) {
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(text) else {
            return;
        };
        if message.get("method").and_then(Value::as_str) == Some("notifications/message") {
            let params = message.remove("params").unwrap_or_default();
            self.attribute_log(params, stream, text.len());
            return;
        }
        if message.get("method").and_then(Value::as_str) == Some("notifications/progress") {
            let params = message.remove("params").unwrap_or_default();
            self.progress.lock().unwrap().deliver(&params);
            return;
        }
        let Some(id) = message.remove("id").filter(|id| !id.is_null()) else {
            return;
        };
        let (id, now) = (id.to_string(), Instant::now());
        let Some(result) = message.remove("result") else {
            if message.contains_key("error") {
                self.flights.lock().unwrap().answered(&id, None, now);
            }
            return;
        };
        let task = crate::flights::created_task_id(&result);
        self.flights.lock().unwrap().answered(&id, task, now);
        self.kept.lock().unwrap().keep(now, id, result, text.len());
    }

    /// A log message goes to the call the upstream tied it to: the request whose progress token
    /// its `_meta.progressToken` names, else the request whose response stream carried it, else,
    /// on a connection read in wire order, the one call in flight there when nothing else could
    /// have written it ([`Flights::owner`]). Any other message is logged here at debug level and
    /// dropped (R-PRX-10).
    fn attribute_log(&self, params: Value, stream: Option<&Value>, bytes: usize) {
        let text = |key: &str| params.get(key).and_then(Value::as_str);
        let log = ToolLog {
            level: text("level").unwrap_or("info").to_owned(),
            logger: text("logger").map(str::to_owned),
            data: params.get("data").cloned().unwrap_or_default(),
            seq: None,
        };
        let named = params
            .pointer("/_meta/progressToken")
            .filter(|t| !t.is_null());
        let alone = match named.or(stream) {
            Some(_) => None,
            None => self.flights.lock().unwrap().owner(Instant::now()),
        };
        match named.or(stream).or(alone.as_ref()) {
            Some(token) => self.logs.lock().unwrap().deliver_to(token, log, bytes),
            // Its level, logger and size only: the data is the callers' (R-CON-33).
            None => tracing::debug!(
                target: "durable_mcp::upstream_log",
                level = %short(&log.level), logger = ?log.logger.as_deref().map(short), bytes,
                "upstream log message tied to no request; dropped"
            ),
        }
    }

    /// The log messages the upstream ties to the request with `token` (R-PRX-10), in wire
    /// order, including what arrived before this call: rmcp picks the token inside the send.
    pub fn follow_logs(&self, token: &ProgressToken) -> Following<ToolLog> {
        Following::new(self.logs.clone(), token)
    }

    /// The progress the upstream reports under `token` (R-PRX-9), in wire order, including
    /// what arrived before this call: rmcp picks the token inside the send.
    pub fn follow_progress(&self, token: &ProgressToken) -> Following {
        Following::new(self.progress.clone(), token)
    }

    /// Notes a message the proxy is about to write upstream (see [`FlightTap`]): a request is in
    /// flight from now, a `notifications/cancelled` ends the request it names.
    pub fn sent(&self, message: &ClientJsonRpcMessage) {
        use rmcp::model::{ClientNotification, GetExtensions as _, GetMeta as _};
        let now = Instant::now();
        let mut flights = self.flights.lock().unwrap();
        match message {
            ClientJsonRpcMessage::Request(r) => {
                let token = r.request.get_meta().get_progress_token();
                let caller = r.request.extensions().get::<ForCaller>();
                flights.sent(
                    id_key(&r.id),
                    r.request.method(),
                    token.and_then(|t| serde_json::to_value(t).ok()),
                    caller.map(|c| c.0.clone()),
                    now,
                );
            }
            ClientJsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    flights.cancelled(&id_key(id), now);
                }
            }
            _ => {}
        }
    }

    /// Upstream task `task` runs for a call of `caller` that follows it (R-PRX-28): in flight
    /// until the returned guard is dropped.
    pub fn follow_task(&self, task: &str, caller: Option<String>) -> TaskFlight {
        let mut flights = self.flights.lock().unwrap();
        flights.follow_task(task, caller, Instant::now());
        TaskFlight {
            flights: self.flights.clone(),
            task: task.to_owned(),
        }
    }

    /// The `result` of the answer to request `id` as written, if a tap saw it. Called after rmcp
    /// delivered the typed answer, which it parsed after the tap saw the bytes.
    pub fn take(&self, id: &RequestId) -> Option<Value> {
        self.kept.lock().unwrap().take(&id_key(id))
    }
}

/// A request ID as the key its answer is read under: its JSON text, so `1` and `"1"` differ.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// An upstream task in flight while its call follows it ([`WrittenResults::follow_task`]).
pub struct TaskFlight {
    flights: Arc<Mutex<Flights>>,
    task: String,
}

impl Drop for TaskFlight {
    fn drop(&mut self) {
        let mut flights = self.flights.lock().unwrap();
        flights.task_ended(&self.task, Instant::now());
    }
}

/// A client transport whose every outgoing message is shown to [`WrittenResults::sent`] as
/// rmcp hands it over, before it is written: so a request is in flight before the upstream can
/// answer it, in the order the tap on the same connection reads the answers (R-PRX-10).
pub struct FlightTap<T> {
    inner: T,
    written: WrittenResults,
}

impl<T> FlightTap<T> {
    pub fn new(inner: T, written: WrittenResults) -> Self {
        Self { inner, written }
    }
}

impl<T: rmcp::transport::Transport<rmcp::RoleClient>> rmcp::transport::Transport<rmcp::RoleClient>
    for FlightTap<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<rmcp::RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.written.sent(&item);
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<rmcp::RoleClient>>> + Send
    {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A stdio child's stdout, passed through unchanged to rmcp; each complete line (one JSON-RPC
/// message) is shown to [`WrittenResults::observe`] first.
/// A line longer than rmcp's own stdio bound is one rmcp refuses too: the tap stops holding it
/// and skips it whole (an upstream writing without newlines cannot grow the proxy).
const MAX_TAP_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

pub struct TapReader<R> {
    inner: R,
    line: Vec<u8>,
    /// The current line passed [`MAX_TAP_LINE`]: its bytes are dropped until its newline.
    overlong: bool,
    written: WrittenResults,
}

impl<R> TapReader<R> {
    pub fn new(inner: R, written: WrittenResults) -> Self {
        Self {
            inner,
            line: Vec::new(),
            overlong: false,
            written,
        }
    }

    /// Takes the next piece of a line (ending with its newline or not).
    fn take_chunk(&mut self, chunk: &[u8]) {
        if !self.overlong && self.line.len() + chunk.len() > MAX_TAP_LINE {
            self.overlong = true;
            self.line = Vec::new();
        }
        if !self.overlong {
            self.line.extend_from_slice(chunk);
        }
        if chunk.ends_with(b"\n") {
            if !self.overlong {
                self.written.observe(&self.line);
            }
            self.line.clear();
            self.overlong = false;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TapReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        for chunk in buf.filled()[before..].split_inclusive(|b| *b == b'\n') {
            this.take_chunk(chunk);
        }
        Poll::Ready(Ok(()))
    }
}

/// rmcp's reqwest client for Streamable HTTP, with every server-sent event shown to
/// [`WrittenResults::observe`] before rmcp parses it.
#[derive(Clone)]
pub struct TapHttpClient {
    inner: reqwest::Client,
    written: WrittenResults,
    /// Taken out of every error before rmcp sees it (R-PRX-1).
    secrets: Arc<UrlSecrets>,
    /// Gives each request its bearer token (R-PRX-15).
    auth: Option<Arc<dyn AuthProvider>>,
}

impl TapHttpClient {
    /// Redirects are not followed (a redirect would replay headers to wherever it points);
    /// idle connections are not pooled, as in rmcp's own default client (it avoids delayed-ACK
    /// stalls on reused connections). Errors lose the upstream's URL and its `secrets`.
    /// With `auth`, every request carries its token. An upstream on loopback is reached
    /// directly, never through a proxy from the environment (R-PAY-7).
    pub fn new(
        endpoint: &url::Url,
        written: WrittenResults,
        secrets: UrlSecrets,
        auth: Option<Arc<dyn AuthProvider>>,
    ) -> Result<Self, reqwest::Error> {
        let inner = durable_mcp_runtime::temporal::direct_http::client_builder(endpoint)
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            inner,
            written,
            secrets: Arc::new(secrets),
            auth,
        })
    }

    /// Sends a request with the provider's token (or `given`, without a provider); after a 401,
    /// tells the provider, and sends it once more with a new token when `again` (a request that
    /// is not a `tools/call`: a 401 to it is taken to mean it never ran). A `tools/call` is
    /// never sent twice: a gateway may answer 401 after forwarding it, so its 401 is the call's
    /// answer (the tool may have run) and the new token serves the next request. A token that
    /// cannot be had fails the request as one that never left (R-PRX-15).
    async fn authorized<T, Fut>(
        &self,
        given: Option<String>,
        again: bool,
        send: impl Fn(Option<String>) -> Fut,
    ) -> HttpResult<T>
    where
        Fut: Future<Output = HttpResult<T>>,
    {
        let Some(auth) = &self.auth else {
            return send(given).await;
        };
        let token = auth.token().await.map_err(no_token)?;
        match send(Some(token.clone())).await {
            Err(e) if unauthorized(&e) => {
                auth.rejected(&token);
                if !again {
                    return Err(e);
                }
                send(Some(auth.token().await.map_err(no_token)?)).await
            }
            other => other,
        }
    }

    /// A POST of `message` through [`Self::authorized`], its answer tapped and scrubbed: what
    /// each `post_message*` of the trait does around its own call of the inner client.
    async fn post<Fut>(
        &self,
        message: &ClientJsonRpcMessage,
        given: Option<String>,
        send: impl Fn(Option<String>) -> Fut,
    ) -> HttpResult<StreamableHttpPostResponse>
    where
        Fut: Future<Output = HttpResult<StreamableHttpPostResponse>>,
    {
        let response = self.authorized(given, !is_tool_call(message), send).await;
        let stream = request_token(message);
        scrub::clean_response(&self.secrets, response.map(|r| self.tap_post(r, stream)))
    }

    /// Events shown to the tap; `stream` is the progress token of the request whose response
    /// stream this is (none for the session's standalone stream).
    fn tap_events(
        &self,
        events: BoxStream<'static, Result<Sse, SseError>>,
        stream: Option<Value>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        let written = self.written.clone();
        events
            .inspect(move |event| {
                if let Ok(Sse {
                    data: Some(data), ..
                }) = event
                {
                    written.observe_on(data.as_bytes(), stream.as_ref());
                }
            })
            .boxed()
    }

    fn tap_post(
        &self,
        response: StreamableHttpPostResponse,
        stream: Option<Value>,
    ) -> StreamableHttpPostResponse {
        match response {
            StreamableHttpPostResponse::Sse(events, session) => {
                StreamableHttpPostResponse::Sse(self.tap_events(events, stream), session)
            }
            other => other,
        }
    }
}

type Headers = HashMap<HeaderName, HeaderValue>;
type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// The progress token of a request (rmcp gives every request one), which names the request's
/// response stream; none for notifications and responses.
fn request_token(message: &ClientJsonRpcMessage) -> Option<Value> {
    use rmcp::model::GetMeta as _;
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    let token = request.request.get_meta().get_progress_token()?;
    serde_json::to_value(token).ok()
}

/// Whether `message` asks a tool to run: such a request is never sent twice (R-PRX-15).
fn is_tool_call(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        ClientJsonRpcMessage::Request(r) if matches!(r.request, rmcp::model::ClientRequest::CallToolRequest(_))
    )
}

/// A 401 answer, with or without a `WWW-Authenticate` challenge.
fn unauthorized(e: &StreamableHttpError<reqwest::Error>) -> bool {
    match e {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::HttpStatus(s) => s.status == 401,
        _ => false,
    }
}

/// A request that could not get its token: it never left (see `upstream::classify`).
fn no_token(e: AuthError) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::Io(std::io::Error::other(e))
}

impl StreamableHttpClient for TapHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(&message, auth_header, |auth| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(&message, auth_header, |auth| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(&message, auth_header, |auth| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<()> {
        self.authorized(auth_header, true, |auth| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                auth,
                custom_headers.clone(),
            )
        })
        .await
        .map_err(|e| scrub::clean(&self.secrets, e))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let events = self
            .authorized(auth_header, true, |auth| {
                self.inner.get_stream(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    custom_headers.clone(),
                )
            })
            .await
            .map_err(|e| scrub::clean(&self.secrets, e))?;
        Ok(scrub::clean_stream(
            &self.secrets,
            self.tap_events(events, None),
        ))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let events = self
            .authorized(auth_header, true, |auth| {
                self.inner.get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    custom_headers.clone(),
                    max_sse_event_size,
                )
            })
            .await
            .map_err(|e| scrub::clean(&self.secrets, e))?;
        Ok(scrub::clean_stream(
            &self.secrets,
            self.tap_events(events, None),
        ))
    }
}

/// At most 64 printable characters of a name an upstream wrote, for a log line.
fn short(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    #[test]
    fn results_are_kept_as_written_and_taken_once() {
        let written = WrittenResults::default();
        written.observe(br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"x","annotations":{"priority":1}}],"extra":true}}"#);
        written.observe(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#);
        written.observe(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#);
        written.observe(b"not json");
        let got = written.take(&RequestId::Number(3)).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"content":[{"type":"text","text":"x","annotations":{"priority":1}}],"extra":true})
        );
        assert!(
            got["content"][0]["annotations"]["priority"].is_u64(),
            "{got}"
        );
        assert_eq!(written.take(&RequestId::Number(3)), None);
        assert_eq!(written.take(&RequestId::Number(4)), None);
    }

    #[test]
    fn a_fraction_is_kept_to_its_last_digit() {
        // serde_json without float_roundtrip read this one unit in the last place off.
        let written = WrittenResults::default();
        written
            .observe(br#"{"jsonrpc":"2.0","id":0,"result":[{"jsonrpc":3.4813964455278078e-6}]}"#);
        let got = written.take(&RequestId::Number(0)).unwrap();
        let number = got.pointer("/0/jsonrpc").and_then(Value::as_f64);
        assert_eq!(number, Some(3.4813964455278078e-6_f64));
    }

    #[test]
    fn a_line_past_the_bound_is_skipped_whole_and_the_next_one_seen() {
        let written = WrittenResults::default();
        let mut tap = TapReader::new(tokio::io::empty(), written.clone());
        let huge = vec![b' '; MAX_TAP_LINE / 4];
        tap.take_chunk(br#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#);
        for _ in 0..8 {
            tap.take_chunk(&huge);
        }
        assert!(tap.overlong && tap.line.is_empty(), "nothing of it is held");
        tap.take_chunk(b"\n");
        tap.take_chunk(br#"{"jsonrpc":"2.0","id":2,"result":{"b":2}}"#);
        tap.take_chunk(b"\n");
        assert_eq!(written.take(&RequestId::Number(1)), None);
        assert_eq!(
            written.take(&RequestId::Number(2)),
            Some(serde_json::json!({"b": 2}))
        );
    }

    #[test]
    fn answers_nobody_claims_are_bounded_in_count_and_bytes_oldest_first() {
        let mut kept = Kept::default();
        let now = Instant::now();
        for i in 0..KEPT_MAX + 10 {
            kept.keep(now, i.to_string(), Value::Null, 10);
        }
        assert_eq!(kept.answers.len(), KEPT_MAX);
        assert_eq!(kept.bytes, KEPT_MAX * 10);
        assert_eq!(kept.take("0"), None, "the oldest went first");
        assert_eq!(kept.take("10"), Some(Value::Null));
        kept.keep(now, "big".into(), Value::Bool(true), KEPT_BYTES);
        assert_eq!(kept.answers.len(), 1, "bytes bound the store too");
        assert_eq!(kept.take("big"), Some(Value::Bool(true)));
        assert_eq!((kept.answers.len(), kept.bytes), (0, 0));
        let later = now + UNCLAIMED_FOR + Duration::from_secs(1);
        kept.keep(now, "old".into(), Value::Null, 1);
        kept.keep(later, "new".into(), Value::Null, 1);
        assert_eq!(kept.take("old"), None, "unclaimed past its time");
    }

    fn log(meta: &str) -> Vec<u8> {
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"warning","logger":"l","data":{{"n":1}}{meta}}}}}"#).into_bytes()
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    /// A buffer the test's log lines go to, at every level.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A message tied to no request is dropped with a line at `debug` that names its level,
    /// logger and size, never its data: an upstream's log data is its callers' (R-CON-33).
    #[test]
    fn an_untied_messages_data_never_reaches_the_proxys_log() {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let written = WrittenResults::default();
            let secret = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","logger":"db","data":"password=hunter2"}}"#;
            written.observe(secret.as_bytes());
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("tied to no request"), "{text}");
        assert!(text.contains("logger=") && text.contains("db"), "{text}");
        assert!(text.contains("bytes="), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    /// A log message reaches the call the upstream tied it to (its `_meta.progressToken`, or
    /// the response stream it came on); one tied to no request, where the proxy wrote nothing
    /// it knows to be in flight (as on HTTP), is nobody's, even with a call following its token.
    #[test]
    fn log_messages_go_to_the_call_they_are_tied_to_or_nowhere() {
        let written = WrittenResults::default();
        let mut alone = written.follow_logs(&token(1));
        written.observe(&log("")); // tied to no request, and nothing noted in flight: nobody's
        assert!(alone.receiver().try_recv().is_err());
        written.observe(&log(r#","_meta":{"progressToken":1}"#));
        let got = alone.receiver().try_recv().unwrap();
        assert_eq!(
            (got.level.as_str(), got.logger.as_deref()),
            ("warning", Some("l"))
        );
        assert_eq!(got.data, serde_json::json!({"n": 1}));
        // On a request's own response stream a message is that request's; its token wins.
        let mut other = written.follow_logs(&token(2));
        written.observe_on(&log(""), Some(&serde_json::json!(2)));
        written.observe_on(
            &log(r#","_meta":{"progressToken":1}"#),
            Some(&serde_json::json!(2)),
        );
        assert!(other.receiver().try_recv().is_ok());
        assert!(other.receiver().try_recv().is_err());
        assert!(alone.receiver().try_recv().is_ok());
        // Written before the call followed its token: kept for it.
        written.observe(&log(r#","_meta":{"progressToken":3}"#));
        assert!(written.follow_logs(&token(3)).receiver().try_recv().is_ok());
        // A late message of a call that ended reaches nobody else.
        drop(alone);
        written.observe(&log(r#","_meta":{"progressToken":1}"#));
        assert!(other.receiver().try_recv().is_err());
    }

    /// On a connection read in wire order, a message naming no request is the one call's that
    /// was written and not yet answered; read after its answer (or its cancel) it is nobody's.
    #[test]
    fn an_untied_message_goes_to_the_one_call_written_and_not_yet_answered() {
        let written = WrittenResults::default();
        let call = |id: u32| -> ClientJsonRpcMessage {
            serde_json::from_value(serde_json::json!({"jsonrpc": "2.0", "id": id,
                "method": "tools/call", "params": {"name": "x", "_meta": {"progressToken": id}}}))
            .unwrap()
        };
        written.sent(&call(1));
        // Read before the call followed its token: kept for it.
        written.observe(&log(""));
        let mut first = written.follow_logs(&token(1));
        written.observe(&log(""));
        written.observe(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#);
        written.observe(&log(""));
        assert_eq!(
            std::iter::from_fn(|| first.receiver().try_recv().ok()).count(),
            2
        );
        written.sent(&call(2));
        let mut second = written.follow_logs(&token(2));
        let cancel: ClientJsonRpcMessage = serde_json::from_value(serde_json::json!({"jsonrpc":
            "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}))
        .unwrap();
        written.sent(&cancel);
        written.observe(&log(""));
        assert!(
            second.receiver().try_recv().is_err(),
            "read after its cancel"
        );
    }

    /// A POST's response stream is named by its request's progress token; only `tools/call`
    /// is never sent twice (R-PRX-10, R-PRX-15).
    #[test]
    fn a_posted_request_is_named_by_its_token_and_a_tool_call_is_told_apart() {
        let message = |value: serde_json::Value| -> ClientJsonRpcMessage {
            serde_json::from_value(value).unwrap()
        };
        let call = message(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "x", "_meta": {"progressToken": 5}}}),
        );
        assert_eq!(request_token(&call), Some(serde_json::json!(5)));
        assert!(is_tool_call(&call));
        let list = message(
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
            "params": {"_meta": {"progressToken": "t"}}}),
        );
        assert_eq!(request_token(&list), Some(serde_json::json!("t")));
        assert!(!is_tool_call(&list));
        let note =
            message(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(request_token(&note), None);
        assert!(!is_tool_call(&note));
    }

    #[test]
    fn string_and_number_ids_are_told_apart() {
        let written = WrittenResults::default();
        written.observe(br#"{"id":"7","result":{"a":"string id"}}"#);
        written.observe(br#"{"id":7,"result":{"a":"number id"}}"#);
        assert_eq!(
            written.take(&RequestId::Number(7)).unwrap()["a"],
            "number id"
        );
        assert_eq!(
            written.take(&RequestId::String("7".into())).unwrap()["a"],
            "string id"
        );
    }

    #[tokio::test]
    async fn the_reader_passes_bytes_through_and_sees_lines_split_anywhere() {
        let written = WrittenResults::default();
        let wire =
            b"{\"id\":1,\"result\":{\"n\":1}}\n{\"id\":2,\"result\":{\"n\":2.50}}\n".to_vec();
        // A reader that hands out 5 bytes at a time, so messages arrive in pieces.
        let (mut tx, rx) = tokio::io::duplex(5);
        let sent = wire.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            tx.write_all(&sent).await.unwrap();
        });
        let mut reader = TapReader::new(rx, written.clone());
        let mut read = Vec::new();
        reader.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, wire);
        assert_eq!(
            written.take(&RequestId::Number(1)).unwrap().to_string(),
            r#"{"n":1}"#
        );
        assert_eq!(
            written.take(&RequestId::Number(2)).unwrap().to_string(),
            r#"{"n":2.5}"#
        );
    }
}

/// Property tests of the tap that reads an upstream's messages as written (R-PRX-10,
/// R-CON-51): any bytes are kept, passed on or ignored, never a panic; an answer's `result`
/// is kept as written under its id.
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::answer;
    use proptest::prelude::*;
    use serde_json::json;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            answer().prop_map(|a| a.to_string().into_bytes()),
            (
                prop::sample::select(
                    &[
                        "notifications/message",
                        "notifications/progress",
                        "tools/call"
                    ][..]
                ),
                answer()
            )
                .prop_map(|(method, params)| {
                    json!({"jsonrpc": "2.0", "method": method, "params": params})
                        .to_string()
                        .into_bytes()
                }),
        ]
    }

    proptest! {
        #[test]
        fn any_bytes_from_an_upstream_are_read_without_a_panic(
            messages in prop::collection::vec(bytes(), 1..6),
            stream in prop::option::of(answer()),
        ) {
            let written = WrittenResults::default();
            for m in &messages {
                written.observe_on(m, stream.as_ref());
            }
        }

        #[test]
        fn an_answers_result_is_kept_as_written_under_its_id(id in any::<i64>(), text_id in any::<bool>(), result in answer()) {
            let written = WrittenResults::default();
            let request_id = if text_id {
                RequestId::String(id.to_string().into())
            } else {
                RequestId::Number(id)
            };
            let text = json!({"jsonrpc": "2.0", "id": request_id, "result": result}).to_string();
            written.observe(text.as_bytes());
            prop_assert_eq!(written.take(&request_id), Some(result));
        }
    }
}
