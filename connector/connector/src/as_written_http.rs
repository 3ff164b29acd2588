//! Answers over Streamable HTTP as written, byte for byte as the tool service wrote them
//! (R-CON-12).
//!
//! rmcp's HTTP service serves the connector's typed handler, so it writes rmcp's typed view of
//! `tools/list` and `tools/call` answers (`"priority": 1` would become `1.0`, unknown keys would
//! be dropped). This layer wraps that service: before rmcp sees a POST it puts an empty
//! [`HttpAnswers`] into the request's extensions; the handler, which gets the request's HTTP
//! parts from rmcp, keeps each answer as it is to be written there, by JSON-RPC id; and as the
//! response body goes out (one JSON body, or the events of an event stream, each passed on as
//! soon as it is complete so progress and log messages stay live) the response with that id is
//! written with [`written_result`] instead, keeping what rmcp decided for the peer. Everything
//! else passes byte for byte. A stateless request's answers live as long as the request: nothing
//! is kept once its response was written.
//!
//! Replays: rmcp keeps a session request's events (typed) for a `GET` with `Last-Event-ID`, the
//! way a client resumes a stream it lost, for a minute after the request completed. So a
//! session's answers are kept beside them (while the request runs and [`REPLAY_KEPT`]
//! after) and a replay is written with them too. Without a session (stateless
//! 2026-07-28 requests) rmcp keeps nothing to replay, and neither does this.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        Arc, LazyLock, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, Method, header::CONTENT_TYPE},
    middleware::Next,
    response::Response,
};
use futures::StreamExt as _;
use serde_json::Value;

use rmcp::{RoleServer, service::RequestContext};

pub use super::server::{as_written::written_result, result_type::typed_result};
use super::{
    fair::{Share, share_of},
    server::as_written::{self, HttpAnswers},
};

/// Keeps `value` (a `tools/list` answer's tools array, or a `CallToolResult`) as the answer to
/// `context`'s request as it is to be written, when the request came through
/// [`write_answers_as_written`]; otherwise does nothing. For any rmcp handler served behind the
/// layer (the connector's, or a test's MCP server that must write JSON rmcp's model would
/// change).
pub fn keep_answer(context: &RequestContext<RoleServer>, value: Value) {
    as_written::keep(None, context, value);
}

/// Keeps `raw` (a resource, prompt or completion result, R-CON-45) as the answer to `context`'s
/// request as it is to be written, whole, with only what rmcp decided for the peer
/// (`resultType`, `ttlMs`, `cacheScope`) taken from the typed answer; like [`keep_answer`], it
/// does nothing outside [`write_answers_as_written`].
pub fn keep_feature_answer(context: &RequestContext<RoleServer>, raw: Value) {
    as_written::keep(None, context, as_written::feature_written(raw));
}

/// Axum middleware (`axum::middleware::from_fn(write_answers_as_written)`) around rmcp's
/// `StreamableHttpService` serving [`super::server::Connector::typed`]: its `tools/list` and
/// `tools/call` answers are written as the tool service gave them, also when a session's stream
/// is replayed. A library host mounting the connector itself adds it the same way; its
/// answers kept for replays share one process-wide store within the default
/// [`ReplayLimits`]. `durable-mcp-connector` mounts [`write_answers_as_written_within`] with a
/// store of its own.
pub async fn write_answers_as_written(request: Request, next: Next) -> Response {
    static REPLAYS: LazyLock<Arc<Replays>> =
        LazyLock::new(|| Arc::new(Replays::new(ReplayLimits::default())));
    write_answers_as_written_within(REPLAYS.clone(), request, next).await
}

/// [`write_answers_as_written`], keeping a session's answers for replays in `replays` (within
/// its limits, R-CON-38).
pub async fn write_answers_as_written_within(
    replays: Arc<Replays>,
    mut request: Request,
    next: Next,
) -> Response {
    let session = session_of(request.headers());
    if request.method() == Method::GET && request.headers().contains_key(LAST_EVENT_ID) {
        let response = next.run(request).await;
        return match session {
            Some(session) => {
                let lookup = move |id: &Value| replays.find(&session, id, Instant::now());
                rewrite_body(response, Arc::new(lookup)).await
            }
            None => response,
        };
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let answers = HttpAnswers::default();
    request.extensions_mut().insert(answers.clone());
    let share = share_of(request.extensions());
    let response = next.run(request).await;
    let lookup: Lookup = match session {
        // Kept only once rmcp accepted the session (a made-up id gets 404 and keeps nothing);
        // the bounds are checked again as each answer arrives (R-CON-38).
        Some(session) if response.status().is_success() => {
            replays.keep(&session, share, &answers, Instant::now());
            Arc::new(move |id: &Value| answers.get(id))
        }
        _ => Arc::new(move |id: &Value| answers.take(id)),
    };
    rewrite_body(response, lookup).await
}

/// Finds the answer as written for a JSON-RPC response id.
type Lookup = Arc<dyn Fn(&Value) -> Option<Value> + Send + Sync>;

/// The response with its answers written from `lookup`: one JSON body, or the events of an
/// event stream, each passed on as soon as it is complete.
async fn rewrite_body(response: Response, lookup: Lookup) -> Response {
    let kind = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (parts, body) = response.into_parts();
    if kind.starts_with("application/json") {
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return Response::from_parts(parts, Body::empty());
        };
        let rewritten = rewrite_message(&bytes, &*lookup).map_or(bytes, Bytes::from);
        let mut parts = parts;
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(rewritten));
    }
    if !kind.starts_with("text/event-stream") {
        return Response::from_parts(parts, body);
    }
    let events = Arc::new(Mutex::new(EventSplitter::default()));
    let rest = events.clone();
    let stream = body
        .into_data_stream()
        .map(move |chunk| {
            chunk.map(|bytes| Bytes::from(events.lock().unwrap().push(&bytes, &*lookup)))
        })
        .chain(futures::stream::once(async move {
            Ok(Bytes::from(rest.lock().unwrap().finish()))
        }));
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Splits an event stream into whole events (ended by a blank line) and writes each one, its
/// answer rewritten, as soon as it is complete.
#[derive(Default)]
struct EventSplitter {
    pending: Vec<u8>,
    /// Where the search for the next blank line resumes: `pending` before it holds none, so an
    /// event arriving in many chunks is scanned once, not once per chunk.
    scanned: usize,
    /// Bytes examined by the searches so far (the unit test bounds it by the bytes pushed).
    examined: usize,
}

impl EventSplitter {
    /// The complete events so far, rewritten; an incomplete one waits for more bytes. Linear in
    /// the bytes pushed however they are cut: each byte is searched once and the events taken
    /// are removed from `pending` in one move.
    fn push(&mut self, bytes: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let rest = &self.pending[self.scanned..];
            let found = rest.windows(2).position(|w| w == b"\n\n");
            self.examined += found.map_or(rest.len(), |at| at + 2);
            let Some(at) = found else { break };
            let end = self.scanned + at + 2;
            let event = &self.pending[start..end];
            out.extend(rewrite_event(event, answers).unwrap_or_else(|| event.to_vec()));
            (start, self.scanned) = (end, end);
        }
        self.pending.drain(..start);
        // The last byte may be the first `\n` of a blank line the next chunk completes.
        self.scanned = self.pending.len().saturating_sub(1);
        out
    }

    /// What is left when the stream ends (an event without its blank line), unchanged.
    fn finish(&mut self) -> Vec<u8> {
        self.scanned = 0;
        std::mem::take(&mut self.pending)
    }
}

/// One event (`field: value` lines and the blank line) with its `data` rewritten, if it is the
/// answer to a request that kept one; `None` leaves it as it is.
fn rewrite_event(event: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let lines: Vec<&str> = text.split('\n').collect();
    let mut data = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("data:"));
    let (at, line) = data.next()?;
    if data.next().is_some() {
        return None; // rmcp writes one data line per message
    }
    let value = &line["data:".len()..];
    let json = value.strip_prefix(' ').unwrap_or(value);
    let rewritten = rewrite_message(json.as_bytes(), answers)?;
    let mut out = String::with_capacity(text.len());
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if i == at {
            out.push_str("data: ");
            out.push_str(std::str::from_utf8(&rewritten).ok()?);
        } else {
            out.push_str(l);
        }
    }
    Some(out.into_bytes())
}

/// A JSON-RPC message rewritten when it answers a request whose answer was kept.
fn rewrite_message(json: &[u8], answers: &dyn Fn(&Value) -> Option<Value>) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(json).ok()?;
    let object = message.as_object_mut()?;
    if object.contains_key("method") {
        return None;
    }
    let typed = object.get("result")?;
    let written = answers(object.get("id")?)?;
    let answer = written_result(typed, written)?;
    object.insert("result".into(), answer);
    serde_json::to_vec(&message).ok()
}

/// The session a request belongs to (`Mcp-Session-Id`), if any.
pub(crate) fn session_of(headers: &HeaderMap) -> Option<String> {
    let id = headers.get("mcp-session-id")?.to_str().ok()?;
    (!id.is_empty()).then(|| id.to_owned())
}

const LAST_EVENT_ID: &str = "last-event-id";

/// How long a session's answers stay for a replay once their request ended (its handler done
/// and its response written): rmcp keeps its typed copies a minute
/// (`SessionConfig::DEFAULT_COMPLETED_CACHE_TTL`); this outlasts them.
pub const REPLAY_KEPT: Duration = Duration::from_secs(90);

/// Pruned at most this often, so a busy connector does not scan every kept answer per request.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// Bounds on the answers kept for replays (R-CON-38). Past one, the oldest kept answers go
/// first (a session's own, a caller's own, then anyone's); a replay of a request whose answers
/// went gets rmcp's typed copy of the answer instead of the one as written. The bounds are
/// checked whenever a request is kept and whenever a kept request gets an answer: a request
/// still running counts with what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Requests kept per session.
    pub per_session: usize,
    /// Answer bytes kept per session (the memory they hold, not their JSON length).
    pub per_session_bytes: usize,
    /// Requests kept per caller (verified subject, else address), over all its sessions.
    pub per_caller: usize,
    /// Answer bytes kept per caller, over all its sessions.
    pub per_caller_bytes: usize,
    /// Requests kept in all.
    pub total: usize,
    /// Answer bytes kept in all.
    pub total_bytes: usize,
}

const MIB: usize = 1024 * 1024;

/// Default [`ReplayLimits::per_caller_bytes`] (`--max-answer-mib-per-caller`, in MiB).
pub const DEFAULT_ANSWER_BYTES_PER_CALLER: usize = 64 * MIB;

impl Default for ReplayLimits {
    fn default() -> Self {
        Self {
            // A client resumes the stream it lost, usually its last few requests'.
            per_session: 256,
            per_session_bytes: 32 * MIB,
            // A sixteenth of the total: one caller cannot push out everyone's.
            per_caller: 1024,
            per_caller_bytes: DEFAULT_ANSWER_BYTES_PER_CALLER,
            total: 16_384,
            total_bytes: 512 * MIB,
        }
    }
}

/// The answers of session requests, kept for replays. A replay only reads its own session's
/// answers; under inbound auth (R-CON-9, which runs first) only the caller that opened a
/// session can use its id, and session ids are random, so connectors sharing a store never
/// see each other's.
pub struct Replays {
    state: Mutex<ReplayState>,
    limits: ReplayLimits,
}

/// How many requests, holding how many answer bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    count: usize,
    bytes: usize,
}

/// Whose kept requests a bound counts.
#[derive(Clone, Copy)]
enum Whose<'a> {
    All,
    Session(&'a str),
    Share(&'a Share),
}

#[cfg(test)]
impl Whose<'_> {
    fn has(&self, k: &Kept) -> bool {
        match self {
            Whose::All => true,
            Whose::Session(s) => k.session == *s,
            Whose::Share(s) => k.share.as_ref() == Some(*s),
        }
    }
}

#[derive(Default)]
struct ReplayState {
    /// By serial, so oldest first.
    kept: BTreeMap<u64, Kept>,
    next: u64,
    pruned: Option<Instant>,
    /// What is kept in all, per session and per caller: a bound is checked against these.
    all: Tally,
    sessions: HashMap<String, Tally>,
    shares: HashMap<Share, Tally>,
    /// The serials of each session's and each caller's kept requests, oldest first, so the
    /// oldest of one goes in O(1) (R-CON-38); a serial whose request went some other way is
    /// skipped when met and the queues are compacted as they grow.
    session_order: HashMap<String, VecDeque<u64>>,
    share_order: HashMap<Share, VecDeque<u64>>,
}

/// [`Kept::counted`] of a request no longer kept.
const GONE: usize = usize::MAX;

/// One request's answers, whose they are, and when its request was first seen ended.
struct Kept {
    session: String,
    share: Option<Share>,
    answers: HttpAnswers,
    ended: Option<Instant>,
    /// The bytes of it the tallies count (changed only under the store's lock).
    counted: Arc<AtomicUsize>,
}

impl Replays {
    pub fn new(limits: ReplayLimits) -> Self {
        Self {
            state: Mutex::default(),
            limits,
        }
    }

    /// Keeps a session request's answers for replays, within the limits, checked again as
    /// each later answer of it arrives.
    fn keep(
        self: &Arc<Self>,
        session: &str,
        share: Option<Share>,
        answers: &HttpAnswers,
        now: Instant,
    ) {
        let mut state = self.lock();
        state.prune(now);
        let counted = Arc::new(AtomicUsize::new(0));
        let store = Arc::downgrade(self);
        let (id, of, count) = (session.to_owned(), share.clone(), counted.clone());
        // Set under the lock: an answer arriving now is counted once keep is done.
        answers.on_insert(Arc::new(move |bytes| {
            if let Some(store) = store.upgrade() {
                store.grown(&id, of.as_ref(), &count, bytes);
            }
        }));
        state.add(Kept {
            session: session.to_owned(),
            share: share.clone(),
            answers: answers.clone(),
            ended: None,
            counted,
        });
        self.bound(&mut state, session, share.as_ref());
    }

    /// A kept request of `session` (of `share`) holds `bytes` now: counts them and checks the
    /// bounds again (its answers arrived after it was kept).
    fn grown(&self, session: &str, share: Option<&Share>, counted: &AtomicUsize, bytes: usize) {
        let mut state = self.lock();
        let old = counted.load(Ordering::Relaxed);
        if old == GONE {
            return;
        }
        counted.store(bytes, Ordering::Relaxed);
        state.tally(session, share, |t| {
            t.bytes = (t.bytes + bytes).saturating_sub(old)
        });
        self.bound(&mut state, session, share);
    }

    /// Evicts the oldest until `session`, `share` and everything are within the limits.
    fn bound(&self, state: &mut ReplayState, session: &str, share: Option<&Share>) {
        let limits = &self.limits;
        let per_session = (limits.per_session, limits.per_session_bytes);
        state.evict_oldest(Whose::Session(session), per_session);
        if let Some(share) = share {
            state.evict_oldest(
                Whose::Share(share),
                (limits.per_caller, limits.per_caller_bytes),
            );
        }
        state.evict_oldest(Whose::All, (limits.total, limits.total_bytes));
    }

    /// The answer as written to the session's request with this JSON-RPC id.
    fn find(&self, session: &str, id: &Value, now: Instant) -> Option<Value> {
        let mut state = self.lock();
        state.prune(now);
        let order = state.session_order.get(session)?;
        order
            .iter()
            .rev()
            .filter_map(|serial| state.kept.get(serial))
            .find_map(|k| k.answers.get(id))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayState> {
        self.state.lock().unwrap()
    }
}

impl ReplayState {
    /// Applies `change` to the tallies of everything, `session` and `share`; forgets the
    /// ones left holding nothing.
    fn tally(&mut self, session: &str, share: Option<&Share>, change: impl Fn(&mut Tally)) {
        change(&mut self.all);
        let tally = self.sessions.entry(session.to_owned()).or_default();
        change(tally);
        if tally.count == 0 {
            self.sessions.remove(session);
            self.session_order.remove(session);
        }
        if let Some(share) = share {
            let tally = self.shares.entry(share.clone()).or_default();
            change(tally);
            if tally.count == 0 {
                self.shares.remove(share);
                self.share_order.remove(share);
            }
        }
    }

    fn add(&mut self, kept: Kept) {
        let bytes = kept.answers.bytes();
        kept.counted.store(bytes, Ordering::Relaxed);
        self.tally(&kept.session, kept.share.as_ref(), |t| {
            t.count += 1;
            t.bytes += bytes;
        });
        let serial = self.next;
        self.next += 1;
        let live = self.sessions[&kept.session].count;
        let order = self.session_order.entry(kept.session.clone()).or_default();
        push_compacted(order, serial, live, &self.kept);
        if let Some(share) = &kept.share {
            let live = self.shares[share].count;
            let order = self.share_order.entry(share.clone()).or_default();
            push_compacted(order, serial, live, &self.kept);
        }
        self.kept.insert(serial, kept);
    }

    /// Takes the requests that went out of the tallies.
    fn forget(&mut self, gone: Vec<Kept>) {
        for k in gone {
            let bytes = k.counted.swap(GONE, Ordering::Relaxed);
            self.tally(&k.session, k.share.as_ref(), |t| {
                t.count -= 1;
                t.bytes = t.bytes.saturating_sub(bytes);
            });
        }
    }

    fn held(&self, whose: Whose) -> Tally {
        match whose {
            Whose::All => self.all,
            Whose::Session(s) => self.sessions.get(s).copied().unwrap_or_default(),
            Whose::Share(s) => self.shares.get(s).copied().unwrap_or_default(),
        }
    }

    /// Drops the answers of requests that ended over [`REPLAY_KEPT`] ago (at once when they
    /// kept none), at most every [`PRUNE_EVERY`].
    fn prune(&mut self, now: Instant) {
        if self
            .pruned
            .is_some_and(|at| now.saturating_duration_since(at) < PRUNE_EVERY)
        {
            return;
        }
        self.pruned = Some(now);
        let mut gone = Vec::new();
        for (serial, mut k) in std::mem::take(&mut self.kept) {
            let stays = k.answers.in_use() || {
                let ended = *k.ended.get_or_insert(now);
                !k.answers.is_empty() && now.saturating_duration_since(ended) < REPLAY_KEPT
            };
            if stays {
                self.kept.insert(serial, k);
            } else {
                gone.push(k);
            }
        }
        self.forget(gone);
        let kept = &self.kept;
        for order in self.session_order.values_mut() {
            order.retain(|serial| kept.contains_key(serial));
        }
        for order in self.share_order.values_mut() {
            order.retain(|serial| kept.contains_key(serial));
        }
    }

    /// Drops the oldest of `whose` requests until they are at most `count` holding at most
    /// `bytes`, each in O(1) (amortised) from `whose`'s own queue.
    fn evict_oldest(&mut self, whose: Whose, (count, bytes): (usize, usize)) {
        loop {
            let held = self.held(whose);
            if held.count <= count && held.bytes <= bytes {
                return;
            }
            let Some(serial) = self.oldest_of(whose) else {
                return;
            };
            // oldest_of names a kept one.
            if let Some(k) = self.kept.remove(&serial) {
                self.forget(vec![k]);
            }
        }
    }

    /// The serial of `whose` oldest kept request, taken off its queue.
    fn oldest_of(&mut self, whose: Whose) -> Option<u64> {
        let order = match whose {
            Whose::All => return self.kept.keys().next().copied(),
            Whose::Session(s) => self.session_order.get_mut(s)?,
            Whose::Share(s) => self.share_order.get_mut(s)?,
        };
        while let Some(serial) = order.pop_front() {
            if self.kept.contains_key(&serial) {
                return Some(serial);
            }
        }
        None
    }
}

/// Adds `serial` to one session's or caller's queue, which holds `live` kept requests; drops
/// the serials of requests that went once the queue holds twice as many, so a queue stays
/// within twice its live requests at O(1) amortised per request.
fn push_compacted(order: &mut VecDeque<u64>, serial: u64, live: usize, kept: &BTreeMap<u64, Kept>) {
    if order.len() >= 2 * live + 8 {
        order.retain(|serial| kept.contains_key(serial));
    }
    order.push_back(serial);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answers_with(id: Value, written: Value) -> HttpAnswers {
        let answers = HttpAnswers::default();
        answers.insert_for_test(&id, written);
        answers
    }

    fn taking(answers: &HttpAnswers) -> impl Fn(&Value) -> Option<Value> + '_ {
        move |id| answers.take(id)
    }

    #[test]
    fn answers_in_events_are_rewritten_and_everything_else_passes_byte_for_byte() {
        let written = json!({"content": [{"type": "text", "text": "x",
            "annotations": {"priority": 1}}], "x-extra": true});
        let answers = answers_with(json!(7), written);
        let progress = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1.0}}\nid: 0\n\n";
        let typed = b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\",\"annotations\":{\"priority\":1.0}}],\"resultType\":\"complete\"}}\nid: 1\n\n";
        let mut stream: Vec<u8> = Vec::new();
        stream.extend(b": keep-alive\n\n");
        stream.extend(progress);
        stream.extend(typed);
        let mut splitter = EventSplitter::default();
        let mut out = Vec::new();
        // Cut anywhere: events are written whole, as soon as they are complete.
        for chunk in stream.chunks(5) {
            out.extend(splitter.push(chunk, &taking(&answers)));
        }
        out.extend(splitter.finish());
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(events[0], ": keep-alive");
        assert_eq!(
            format!("{}\n\n", events[1]).as_bytes(),
            progress,
            "notifications pass unchanged"
        );
        let (data, id) = events[2].split_once('\n').unwrap();
        assert_eq!(id, "id: 1", "the event id stays");
        let message: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert!(message["result"]["content"][0]["annotations"]["priority"].is_u64());
        assert_eq!(message["result"]["x-extra"], true);
        assert_eq!(message["result"]["resultType"], "complete", "rmcp's choice");
        assert_eq!(message["id"], 7);
        assert!(answers.take(&json!(7)).is_none(), "taken once");
    }

    #[test]
    fn events_cut_into_small_chunks_are_scanned_once() {
        // A 40 KB answer (a long tool listing) in 64-byte chunks, then two events in one chunk.
        let big = format!("data: {}\nid: 0\n\n", "x".repeat(40_000));
        let small = b"data: a\n\ndata: b\n\n";
        let mut splitter = EventSplitter::default();
        let mut out = Vec::new();
        for chunk in big.as_bytes().chunks(64) {
            out.extend(splitter.push(chunk, &|_| None));
        }
        out.extend(splitter.push(small, &|_| None));
        let pushed = big.len() + small.len();
        assert_eq!(
            out,
            [big.as_bytes(), small].concat(),
            "every event, unchanged"
        );
        // Each chunk rescanning what waits would examine about 12.5 MB here.
        assert!(
            splitter.examined <= pushed + 2 * pushed / 64,
            "{} bytes examined for {pushed} pushed",
            splitter.examined
        );
        assert!(splitter.finish().is_empty());
    }

    #[test]
    fn only_the_answer_with_the_kept_id_is_rewritten() {
        let answers = answers_with(json!("7"), json!({"content": [], "n": 1}));
        let other = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert!(
            rewrite_message(other, &taking(&answers)).is_none(),
            "a number id is not the string id"
        );
        let error = br#"{"jsonrpc":"2.0","id":"7","error":{"code":-32603,"message":"m"}}"#;
        assert!(rewrite_message(error, &taking(&answers)).is_none());
        let body = br#"{"jsonrpc":"2.0","id":"7","result":{"content":[]}}"#;
        let rewritten: Value =
            serde_json::from_slice(&rewrite_message(body, &taking(&answers)).unwrap()).unwrap();
        assert_eq!(rewritten["result"], json!({"content": [], "n": 1}));
    }

    #[test]
    fn a_sessions_answers_stay_for_replays_while_in_use_and_a_while_after() {
        let replays = Arc::new(Replays::new(ReplayLimits::default()));
        let t0 = Instant::now();
        let answers = answers_with(json!(3), json!({"content": [], "n": 1}));
        replays.keep("s1", None, &answers, t0);
        replays.keep("s1", None, &HttpAnswers::default(), t0);
        assert_eq!(
            replays.find("s1", &json!(3), t0),
            Some(json!({"content": [], "n": 1}))
        );
        assert_eq!(replays.find("s2", &json!(3), t0), None, "another session's");
        // The request is still in flight (the handler holds its answers): kept however long.
        let later = t0 + REPLAY_KEPT * 3;
        assert!(replays.find("s1", &json!(3), later).is_some());
        drop(answers);
        let ended = later + PRUNE_EVERY;
        assert!(
            replays.find("s1", &json!(3), ended).is_some(),
            "kept after it ended"
        );
        assert_eq!(
            replays.lock().kept.len(),
            1,
            "a request that kept no answer is dropped at once"
        );
        let gone = ended + REPLAY_KEPT + PRUNE_EVERY;
        assert_eq!(replays.find("s1", &json!(3), gone), None);
        assert!(replays.lock().kept.is_empty());
        assert_tallies(&replays.lock());
        assert_eq!(replays.lock().all.count, 0);
    }

    /// Answers kept for requests that ended (nothing else holds them).
    fn ended(id: u64, bytes: usize) -> HttpAnswers {
        answers_with(json!(id), json!("x".repeat(bytes)))
    }

    #[test]
    fn kept_answers_are_bounded_per_session_per_caller_and_overall_oldest_first() {
        let limits = ReplayLimits {
            per_session: 3,
            per_session_bytes: 1000,
            per_caller: 100,
            per_caller_bytes: 1500,
            total: 5,
            total_bytes: 100_000,
        };
        let replays = Arc::new(Replays::new(limits));
        let t = Instant::now();
        let (alice, bob) = (
            Some(Share::Address("10.0.0.1".parse().unwrap())),
            Some(Share::Address("10.0.0.2".parse().unwrap())),
        );
        let has = |session: &str, id: u64| replays.find(session, &json!(id), t).is_some();
        // One session looping: only its last 3 stay.
        for id in 0..20 {
            replays.keep("a1", alice.clone(), &ended(id, 10), t);
        }
        assert!(!has("a1", 16) && has("a1", 17) && has("a1", 19));
        // Bytes per session: two of 400 fit, a third pushes the oldest out.
        for id in 20..23 {
            replays.keep("a2", alice.clone(), &ended(id, 400), t);
        }
        assert!(!has("a2", 20) && has("a2", 21) && has("a2", 22));
        // Bytes per caller, over its sessions: a1's 30 + a2's 800 + 800 more is over 1500.
        replays.keep("a3", alice.clone(), &ended(23, 800), t);
        assert!(has("a3", 23), "the newest stays");
        assert!(!has("a1", 17) && !has("a2", 21), "alice's oldest went");
        // Bob is untouched by alice's bounds, and the total count evicts the oldest of all.
        replays.keep("b1", bob.clone(), &ended(30, 10), t);
        assert!(has("b1", 30));
        let kept = replays.lock().kept.len();
        assert!(kept <= 5, "{kept}");
        for id in 31..40 {
            replays.keep(&format!("b{id}"), bob.clone(), &ended(id, 10), t);
        }
        assert_eq!(replays.lock().kept.len(), 5, "the total count");
        assert_tallies(&replays.lock());
        assert!(!has("a3", 23), "the oldest of all went first");
        // A looping session's memory stays flat however long it loops.
        let big = Arc::new(Replays::new(ReplayLimits::default()));
        for id in 0..20_000 {
            big.keep("s", alice.clone(), &ended(id, 2_000), t);
        }
        let state = big.lock();
        let bytes: usize = state.kept.values().map(|k| k.answers.bytes()).sum();
        assert_eq!(state.kept.len(), ReplayLimits::default().per_session);
        assert!(
            bytes <= ReplayLimits::default().per_session_bytes,
            "{bytes}"
        );
    }

    /// A kept request in [`scan_model`]: its keep's index, session, caller and bytes.
    type Modelled<'a> = (usize, &'a String, &'a Option<Share>, usize);

    /// Drops the oldest of `kept` that `of` counts until they are within `(n, b)`.
    fn bound_model(
        kept: &mut Vec<Modelled>,
        of: &dyn Fn(&Modelled) -> bool,
        (n, b): (usize, usize),
    ) {
        while kept.iter().filter(|k| of(k)).count() > n
            || kept.iter().filter(|k| of(k)).map(|k| k.3).sum::<usize>() > b
        {
            let at = kept.iter().position(of).unwrap();
            kept.remove(at);
        }
    }

    /// The victims the scan over every kept request picked (the store before its per-session
    /// and per-caller queues): for each bound in turn, the oldest of whose it counts.
    fn scan_model(
        keeps: &[(String, Option<Share>, usize)],
        limits: ReplayLimits,
    ) -> Vec<(String, usize)> {
        let mut kept: Vec<Modelled> = Vec::new();
        for (i, (session, share, bytes)) in keeps.iter().enumerate() {
            kept.push((i, session, share, *bytes));
            let per_session = (limits.per_session, limits.per_session_bytes);
            bound_model(&mut kept, &|k| k.1 == session, per_session);
            if share.is_some() {
                let per_caller = (limits.per_caller, limits.per_caller_bytes);
                bound_model(&mut kept, &|k| k.2 == share, per_caller);
            }
            bound_model(&mut kept, &|_| true, (limits.total, limits.total_bytes));
        }
        kept.into_iter().map(|k| (k.1.clone(), k.0)).collect()
    }

    #[test]
    fn eviction_from_the_queues_picks_the_victims_the_scan_picked() {
        let limits = ReplayLimits {
            per_session: 4,
            per_session_bytes: 300,
            per_caller: 9,
            per_caller_bytes: 700,
            total: 15,
            total_bytes: 1_200,
        };
        // A fixed pseudo-random mix of sessions, callers (and none) and sizes.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let keeps: Vec<(String, Option<Share>, usize)> = (0..600)
            .map(|_| {
                let caller = next(4);
                let session = format!("c{caller}-s{}", next(3));
                let share = (caller != 0).then(|| address(caller as u8).unwrap());
                (session, share, 10 + next(120) as usize)
            })
            .collect();
        let replays = Arc::new(Replays::new(limits));
        let t = Instant::now();
        for (i, (session, share, bytes)) in keeps.iter().enumerate() {
            replays.keep(session, share.clone(), &ended(i as u64, *bytes), t);
            let mut got: Vec<(String, usize)> = Vec::new();
            for (j, (session, _, _)) in keeps[..=i].iter().enumerate() {
                if replays.find(session, &json!(j), t).is_some() {
                    got.push((session.clone(), j));
                }
            }
            assert_eq!(got, scan_model(&keeps[..=i], limits), "after keep {i}");
            assert_tallies(&replays.lock());
        }
        let state = replays.lock();
        let queued: usize = state.session_order.values().map(VecDeque::len).sum();
        assert!(queued <= 2 * state.kept.len() + 8 * state.session_order.len());
    }

    /// The tallies are what a scan of the kept requests counts.
    fn assert_tallies(state: &ReplayState) {
        let scan = |whose: Whose| {
            let of = state.kept.values().filter(|k| whose.has(k));
            of.fold((0, 0), |(n, b), k| (n + 1, b + k.answers.bytes()))
        };
        let tally = |whose| {
            let t = state.held(whose);
            (t.count, t.bytes)
        };
        assert_eq!(tally(Whose::All), scan(Whose::All));
        for session in state.sessions.keys() {
            assert_eq!(
                tally(Whose::Session(session)),
                scan(Whose::Session(session))
            );
        }
        for share in state.shares.keys() {
            assert_eq!(tally(Whose::Share(share)), scan(Whose::Share(share)));
        }
        let sessions: std::collections::HashSet<_> =
            state.kept.values().map(|k| &k.session).collect();
        assert_eq!(sessions.len(), state.sessions.len(), "none left over");
    }

    /// A store within the default limits, changed by `change`.
    fn store_with(change: impl FnOnce(&mut ReplayLimits)) -> Arc<Replays> {
        let mut limits = ReplayLimits::default();
        change(&mut limits);
        Arc::new(Replays::new(limits))
    }

    /// The share of address 10.0.0.`last`.
    fn address(last: u8) -> Option<Share> {
        Some(Share::Address([10, 0, 0, last].into()))
    }

    #[test]
    fn kept_answers_are_bounded_in_count_per_caller() {
        let replays = store_with(|limits| limits.per_caller = 4);
        let (t, alice) = (Instant::now(), address(1));
        replays.keep("b", address(2), &ended(0, 10), t);
        // Alice over many sessions keeps at most 4, and bob's stays.
        for id in 1..50 {
            replays.keep(&format!("a{id}"), alice.clone(), &ended(id, 10), t);
        }
        assert_eq!(replays.lock().kept.len(), 5);
        assert_tallies(&replays.lock());
        assert!(replays.find("b", &json!(0), t).is_some(), "bob's stays");
        assert!(replays.find("a49", &json!(49), t).is_some());
        assert!(replays.find("a45", &json!(45), t).is_none());
    }

    #[test]
    fn answers_that_arrive_after_their_request_was_kept_are_bounded_too() {
        let replays = store_with(|limits| limits.per_caller_bytes = 1000);
        let (t, alice) = (Instant::now(), address(1));
        // Requests still running hold nothing yet when they are kept.
        let running: Vec<HttpAnswers> = (0..4).map(|_| HttpAnswers::default()).collect();
        for (i, answers) in running.iter().enumerate() {
            replays.keep(&format!("s{i}"), alice.clone(), answers, t);
        }
        for (i, answers) in running.iter().enumerate() {
            answers.insert_for_test(&json!(i), json!("x".repeat(400)));
        }
        let state = replays.lock();
        let bytes: usize = state.kept.values().map(|k| k.answers.bytes()).sum();
        assert!(bytes <= 1000, "{bytes}");
        assert_eq!(
            state.kept.len(),
            2,
            "the oldest went as the answers arrived"
        );
        assert_tallies(&state);
    }

    #[tokio::test]
    async fn a_request_the_mcp_server_refused_keeps_nothing() {
        use tower::ServiceExt as _;
        let replays = Arc::new(Replays::new(ReplayLimits::default()));
        let store = replays.clone();
        let app = axum::Router::new()
            .fallback(|request: Request| async move {
                let answers = request.extensions().get::<HttpAnswers>().unwrap();
                answers.insert_for_test(&json!(1), json!({"content": []}));
                let known = request.headers()["mcp-session-id"] == "known";
                let status = if known { 200 } else { 404 };
                axum::http::StatusCode::from_u16(status).unwrap()
            })
            .layer(axum::middleware::from_fn(move |request, next| {
                write_answers_as_written_within(store.clone(), request, next)
            }));
        for session in ["made-up", "known"] {
            let request = Request::post("/")
                .header("mcp-session-id", session)
                .body(Body::empty())
                .unwrap();
            app.clone().oneshot(request).await.unwrap();
        }
        let state = replays.lock();
        let sessions: Vec<&str> = state.kept.values().map(|k| k.session.as_str()).collect();
        assert_eq!(sessions, ["known"]);
    }
}

/// Property tests: the answers rmcp wrote are rewritten from events of any bytes without a
/// panic, and `Mcp-Session-Id` of any bytes is read as text or none (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{body, header_value, json};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn events_and_messages_of_any_bytes_are_rewritten_or_left_as_they_are(
            b in body(),
            written in json(),
            event_prefix in prop::sample::select(&["data: ", "data:", "event: message\ndata: ", "id: 1\n"][..]),
        ) {
            let answers = |_: &Value| Some(written.clone());
            let _ = rewrite_message(&b, &answers);
            let mut event = event_prefix.as_bytes().to_vec();
            event.extend_from_slice(&b);
            if let Some(out) = rewrite_event(&event, &answers) {
                prop_assert!(std::str::from_utf8(&out).is_ok());
            }
        }

        #[test]
        fn a_session_header_of_any_bytes_is_its_text_or_none(value in header_value()) {
            let mut headers = HeaderMap::new();
            headers.insert("mcp-session-id", value.clone());
            let expected = value.to_str().ok().filter(|v| !v.is_empty()).map(str::to_owned);
            prop_assert_eq!(session_of(&headers), expected);
        }
    }
}
