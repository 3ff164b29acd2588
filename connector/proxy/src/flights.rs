//! The call a log message that names no request belongs to (R-PRX-10). The TypeScript and
//! Python SDKs write a tool's log messages on stdio with no `_meta.progressToken`. On a
//! connection read in wire order (a stdio child's stdout, a factory's byte stream) such a
//! message is a call's when that call is the only thing in flight there: the requests the
//! proxy wrote and has not yet seen answered or cancelled, read in the same order as the
//! messages, and the upstream tasks being followed (R-PRX-28), which run between requests.
//!
//! What the old rule guarded against still holds: a trailing line of a call that has ended,
//! or a background line, must not reach another caller. So a request of another caller (or of
//! no caller the proxy knows) that ended there within [`SETTLE`] makes the message nobody's:
//! it may be that request's. A message read after the one call's answer belongs to nobody.
//! Requests that serve no caller's data (the proxy's own, listings, subscriptions, a task's
//! own requests, whose task is tracked instead) count for neither. Plain data, no I/O.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde_json::Value;

/// How long after a request of another caller ended a message naming no request is not given
/// to the one call in flight: it may be that request's trailing line.
pub const SETTLE: Duration = Duration::from_secs(10);

/// How long a request that is no tool call stays in flight unanswered (an upstream that never
/// answers it, a request rmcp gave up on without a cancel): the proxy bounds every such request
/// well below this.
const OTHER_REQUEST_FOR: Duration = Duration::from_secs(300);

/// How long a task an answer created waits for its call to follow it (R-PRX-28).
const UNFOLLOWED_TASK_FOR: Duration = Duration::from_secs(60);

/// Who a call is for, when the connector said (R-PRX-10): the caller's opaque hash. Rides in
/// the `tools/call` request's extensions (never written upstream) to [`Flights::sent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForCaller(pub String);

/// One request or task in flight.
#[derive(Debug, Clone)]
struct Flight {
    /// A tool call's progress token (where its log messages go).
    token: Option<Value>,
    /// The caller a tool call is for; `None` when unknown (and for other requests).
    caller: Option<String>,
    call: bool,
    since: Instant,
    /// A task its call follows (a task an answer created waits for that).
    followed: bool,
}

/// Whether a request's handler serves no caller's data: its end opens no [`SETTLE`] and its
/// flight does not count.
fn neutral(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "logging/setLevel"
            | "server/discover"
            | "subscriptions/listen"
            | "resources/subscribe"
            | "resources/unsubscribe"
    ) || method.ends_with("/list")
        || method.starts_with("tasks/")
}

/// Whether two callers are known to be the same one.
fn same(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

/// When requests last ended, enough to say when one of a caller other than a given one did:
/// the latest end, and the latest end of a caller other than the latest end's.
#[derive(Debug, Default)]
struct Ends {
    last: Option<(Instant, Option<String>)>,
    other_than_last: Option<Instant>,
}

impl Ends {
    fn record(&mut self, at: Instant, caller: Option<String>) {
        match &mut self.last {
            Some((when, last)) if same(last, &caller) => *when = at,
            _ => {
                self.other_than_last = self.last.as_ref().map(|(when, _)| *when);
                self.last = Some((at, caller));
            }
        }
    }

    /// When a request of a caller other than `caller` (unknown callers are all others) last
    /// ended.
    fn other_than(&self, caller: &Option<String>) -> Option<Instant> {
        match &self.last {
            Some((when, last)) if !same(last, caller) => Some(*when),
            Some(_) => self.other_than_last,
            None => None,
        }
    }
}

/// What is in flight on one connection, as the proxy wrote it and read the answers.
#[derive(Debug, Default)]
pub struct Flights {
    /// By request ID (its JSON text).
    requests: HashMap<String, Flight>,
    /// By upstream task ID.
    tasks: HashMap<String, Flight>,
    ends: Ends,
}

impl Flights {
    /// A request written upstream: `method`, its progress token, and for a tool call the
    /// caller it is for.
    pub fn sent(
        &mut self,
        id: String,
        method: &str,
        token: Option<Value>,
        caller: Option<String>,
        now: Instant,
    ) {
        if neutral(method) {
            return;
        }
        let call = method == "tools/call";
        let flight = Flight {
            token: token.filter(|_| call),
            caller: caller.filter(|_| call),
            call,
            since: now,
            followed: false,
        };
        self.requests.insert(id, flight);
    }

    /// The answer to request `id` was read; `task` is the upstream task it created, if any,
    /// which stays in flight for its call to follow.
    pub fn answered(&mut self, id: &str, task: Option<String>, now: Instant) {
        let Some(flight) = self.requests.remove(id) else {
            return;
        };
        match task.filter(|_| flight.call) {
            Some(task) => {
                let waiting = Flight {
                    since: now,
                    ..flight
                };
                self.tasks.entry(task).or_insert(waiting);
            }
            None => self.ends.record(now, flight.caller),
        }
    }

    /// The proxy cancelled request `id`: it ends here, whatever its handler still writes.
    pub fn cancelled(&mut self, id: &str, now: Instant) {
        if let Some(flight) = self.requests.remove(id) {
            self.ends.record(now, flight.caller);
        }
    }

    /// A call follows upstream task `task` for `caller` (R-PRX-28), until [`Self::task_ended`].
    pub fn follow_task(&mut self, task: &str, caller: Option<String>, now: Instant) {
        let flight = self.tasks.entry(task.to_owned()).or_insert(Flight {
            token: None,
            caller: caller.clone(),
            call: true,
            since: now,
            followed: true,
        });
        flight.followed = true;
        flight.caller = caller;
    }

    /// The call stopped following upstream task `task`.
    pub fn task_ended(&mut self, task: &str, now: Instant) {
        if let Some(flight) = self.tasks.remove(task) {
            self.ends.record(now, flight.caller);
        }
    }

    /// The progress token of the call a message naming no request, read now, belongs to: the
    /// one thing in flight, a tool call, when no request of another caller ended within
    /// [`SETTLE`]. `None`: nobody's.
    pub fn owner(&mut self, now: Instant) -> Option<Value> {
        self.forget_stale(now);
        if !self.tasks.is_empty() {
            return None;
        }
        let mut flights = self.requests.values();
        let (Some(only), None) = (flights.next(), flights.next()) else {
            return None;
        };
        let settled = self
            .ends
            .other_than(&only.caller)
            .is_none_or(|ended| now.duration_since(ended) >= SETTLE);
        only.token.clone().filter(|_| only.call && settled)
    }

    /// Drops what can no longer be in flight: a request that is no tool call past
    /// [`OTHER_REQUEST_FOR`], a task nobody followed past [`UNFOLLOWED_TASK_FOR`]. Each ends
    /// as for no known caller.
    fn forget_stale(&mut self, now: Instant) {
        let old = |f: &Flight, age: Duration| now.duration_since(f.since) > age;
        let before = (self.requests.len(), self.tasks.len());
        self.requests
            .retain(|_, f| f.call || !old(f, OTHER_REQUEST_FOR));
        self.tasks
            .retain(|_, f| f.followed || !old(f, UNFOLLOWED_TASK_FOR));
        if before != (self.requests.len(), self.tasks.len()) {
            self.ends.record(now, None);
        }
    }
}

/// The task object an answer to `tools/call` creates, if it is one: `resultType: "task"` with
/// the task's fields at the top level (SEP-2663), or a `task` object and no `content`
/// (2025-11-25).
pub fn created_task(answer: &Value) -> Option<&serde_json::Map<String, Value>> {
    let answer = answer.as_object()?;
    if answer.get("resultType").and_then(Value::as_str) == Some("task") {
        Some(answer)
    } else if !answer.contains_key("content") {
        answer.get("task")?.as_object()
    } else {
        None
    }
}

/// The ID of the upstream task an answer to `tools/call` creates, if it creates one.
pub fn created_task_id(answer: &Value) -> Option<String> {
    Some(created_task(answer)?.get("taskId")?.as_str()?.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(flights: &mut Flights, id: u32, caller: &str, now: Instant) {
        let caller = Some(caller.to_owned()).filter(|c| !c.is_empty());
        flights.sent(id.to_string(), "tools/call", Some(json!(id)), caller, now);
    }

    #[test]
    fn an_untied_message_is_the_one_calls_in_flight_and_nobodys_after_its_answer() {
        let t0 = Instant::now();
        let mut flights = Flights::default();
        assert_eq!(flights.owner(t0), None, "nothing in flight");
        call(&mut flights, 1, "alice", t0);
        assert_eq!(flights.owner(t0), Some(json!(1)));
        // The proxy's own requests do not count; a read of a resource does.
        flights.sent("2".into(), "tools/list", None, None, t0);
        assert_eq!(flights.owner(t0), Some(json!(1)));
        flights.sent("3".into(), "resources/read", Some(json!(3)), None, t0);
        assert_eq!(flights.owner(t0), None, "two requests in flight");
        flights.answered("3", None, t0);
        // The read ended for no caller the proxy knows: it may write a trailing line.
        assert_eq!(flights.owner(t0 + SETTLE / 2), None);
        assert_eq!(flights.owner(t0 + SETTLE), Some(json!(1)));
        flights.answered("1", None, t0 + SETTLE);
        assert_eq!(flights.owner(t0 + SETTLE), None, "read after the answer");
    }

    #[test]
    fn another_callers_trailing_line_reaches_nobody_and_the_same_callers_next_call_gets_its_own() {
        let t0 = Instant::now();
        let mut flights = Flights::default();
        call(&mut flights, 1, "alice", t0);
        flights.answered("1", None, t0);
        // Bob's call is alone in flight, but Alice's call just ended.
        call(&mut flights, 2, "bob", t0);
        assert_eq!(flights.owner(t0 + SETTLE / 2), None);
        assert_eq!(flights.owner(t0 + SETTLE), Some(json!(2)));
        flights.answered("2", None, t0 + SETTLE);
        // Bob again right after his own call: his lines are his.
        call(&mut flights, 3, "bob", t0 + SETTLE);
        assert_eq!(flights.owner(t0 + SETTLE), Some(json!(3)));
        flights.cancelled("3", t0 + SETTLE);
        // A caller the connector did not name is another caller to everyone, itself included.
        call(&mut flights, 4, "", t0 + SETTLE);
        assert_eq!(flights.owner(t0 + SETTLE), None);
        assert_eq!(flights.owner(t0 + SETTLE * 2), Some(json!(4)));
        // Two calls of one caller in flight: which one wrote is in doubt.
        call(&mut flights, 5, "bob", t0 + SETTLE * 2);
        assert_eq!(flights.owner(t0 + SETTLE * 3), None);
    }

    #[test]
    fn an_upstream_task_stays_in_flight_from_its_creation_until_its_call_stops_following_it() {
        let t0 = Instant::now();
        let mut flights = Flights::default();
        call(&mut flights, 1, "alice", t0);
        flights.answered("1", Some("task-1".into()), t0);
        call(&mut flights, 2, "alice", t0);
        assert_eq!(flights.owner(t0), None, "the task runs beside the call");
        flights.follow_task("task-1", Some("alice".into()), t0);
        // Its polls do not count; the task does, however long it runs.
        flights.sent("3".into(), "tasks/get", None, None, t0);
        assert_eq!(flights.owner(t0 + UNFOLLOWED_TASK_FOR * 2), None);
        flights.task_ended("task-1", t0 + UNFOLLOWED_TASK_FOR * 2);
        assert_eq!(flights.owner(t0 + UNFOLLOWED_TASK_FOR * 2), Some(json!(2)));
        // A task its call never followed is forgotten after a while, as for no known caller.
        flights.answered("2", Some("task-2".into()), t0);
        call(&mut flights, 4, "alice", t0);
        let later = t0 + UNFOLLOWED_TASK_FOR + Duration::from_secs(1);
        assert_eq!(flights.owner(later), None);
        assert_eq!(flights.owner(later + SETTLE), Some(json!(4)));
    }

    #[test]
    fn ends_say_when_another_caller_last_ended() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let (alice, bob) = (Some("alice".to_owned()), Some("bob".to_owned()));
        let mut ends = Ends::default();
        assert_eq!(ends.other_than(&alice), None);
        ends.record(at(1), alice.clone());
        ends.record(at(2), alice.clone());
        assert_eq!(ends.other_than(&alice), None);
        assert_eq!(ends.other_than(&bob), Some(at(2)));
        ends.record(at(3), bob.clone());
        assert_eq!(ends.other_than(&alice), Some(at(3)));
        assert_eq!(ends.other_than(&bob), Some(at(2)));
        ends.record(at(4), None);
        assert_eq!(ends.other_than(&bob), Some(at(4)));
        assert_eq!(ends.other_than(&None), Some(at(4)));
    }
}
