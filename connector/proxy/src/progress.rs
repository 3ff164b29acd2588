//! An upstream's `notifications/progress`, routed to the call whose request carried the token
//! (R-PRX-9). rmcp hands each notification to a task of its own while the answer goes straight
//! to the caller, so a tool that reports progress just before it returns can have its last
//! updates arrive after the call ended. The taps under rmcp (the `as_written` module) see every
//! message in wire order before rmcp delivers the answer: progress is taken from there, and
//! from rmcp's dispatcher only for transports without a tap, keeping each value once. The
//! same [`Routes`] carry the log messages the upstream tied to a call's token (R-PRX-10).

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{FutureExt as _, StreamExt as _};
use rmcp::{handler::client::progress::ProgressSubscriber, model::ProgressToken};
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use durable_mcp_contract::call::ToolProgress;

/// How long progress (or a log message) for a token no call follows is kept: rmcp picks the
/// token inside the send, so the call registers it only after the request may already have been
/// written.
const UNCLAIMED_FOR: Duration = Duration::from_secs(60);
/// At most this many unclaimed notifications are kept (late ones for calls that ended), and at
/// most this many bytes of them (as the upstream wrote them): the oldest go first.
const UNCLAIMED_MAX: usize = 256;
const UNCLAIMED_BYTES: usize = 1024 * 1024;

/// The calls following one kind of notification on one connection, by progress token, and what
/// no call claimed yet. A token names one request of one connection, so nothing routed here
/// can reach another call.
pub struct Routes<T> {
    routes: HashMap<String, UnboundedSender<T>>,
    /// When each arrived, its token's key, its size in bytes, and the item.
    unclaimed: VecDeque<(Instant, String, usize, T)>,
    unclaimed_bytes: usize,
}

impl<T> Default for Routes<T> {
    fn default() -> Self {
        Self {
            routes: HashMap::new(),
            unclaimed: VecDeque::new(),
            unclaimed_bytes: 0,
        }
    }
}

/// The progress routes of a connection (R-PRX-9).
pub type ProgressRoutes = Routes<ToolProgress>;

/// A token as a map key: its JSON text, so `1` and `"1"` stay apart.
fn token_key(token: &Value) -> String {
    token.to_string()
}

impl<T> Routes<T> {
    /// `item` (`bytes` as written), which the upstream tied to `token`: to the call that
    /// follows it, or kept for a while (bounded in count, bytes and age; one item larger than
    /// the byte bound is not kept).
    pub fn deliver_to(&mut self, token: &Value, item: T, bytes: usize) {
        let key = token_key(token);
        if let Some(call) = self.routes.get(&key) {
            let _ = call.send(item);
            return;
        }
        if bytes > UNCLAIMED_BYTES {
            return;
        }
        let now = Instant::now();
        while self.unclaimed.len() >= UNCLAIMED_MAX
            || self.unclaimed_bytes + bytes > UNCLAIMED_BYTES
            || self
                .unclaimed
                .front()
                .is_some_and(|(at, ..)| now.duration_since(*at) > UNCLAIMED_FOR)
        {
            let Some((_, _, gone, _)) = self.unclaimed.pop_front() else {
                break;
            };
            self.unclaimed_bytes -= gone;
        }
        self.unclaimed_bytes += bytes;
        self.unclaimed.push_back((now, key, bytes, item));
    }

    /// Routes `token`'s items to the returned receiver, starting with what arrived before.
    fn follow(&mut self, key: String) -> UnboundedReceiver<T> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut others = VecDeque::with_capacity(self.unclaimed.len());
        for (at, k, bytes, item) in self.unclaimed.drain(..) {
            if k == key {
                self.unclaimed_bytes -= bytes;
                let _ = tx.send(item);
            } else {
                others.push_back((at, k, bytes, item));
            }
        }
        self.unclaimed = others;
        self.routes.insert(key, tx);
        rx
    }
}

impl ProgressRoutes {
    /// One `notifications/progress`'s `params`, as the upstream wrote them: to the call that
    /// follows its token, or kept for a while. Without a token or a numeric progress it is
    /// not MCP progress, and dropped.
    pub fn deliver(&mut self, params: &Value) {
        let (Some(token), Some(progress)) = (
            params.get("progressToken"),
            params.get("progress").and_then(Value::as_f64),
        ) else {
            return;
        };
        let update = ToolProgress {
            progress,
            total: params.get("total").and_then(Value::as_f64),
            message: params
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        let bytes = 64 + update.message.as_ref().map_or(0, String::len);
        self.deliver_to(token, update, bytes);
    }
}

/// One call's items of one kind (progress, log messages) from a tap, until dropped.
pub struct Following<T = ToolProgress> {
    routes: Arc<Mutex<Routes<T>>>,
    key: String,
    updates: UnboundedReceiver<T>,
}

impl<T> Following<T> {
    pub fn new(routes: Arc<Mutex<Routes<T>>>, token: &ProgressToken) -> Self {
        let key = token_key(&serde_json::to_value(token).unwrap_or_default());
        let updates = routes.lock().unwrap().follow(key.clone());
        Self {
            routes,
            key,
            updates,
        }
    }

    /// Where the items arrive, in wire order.
    pub fn receiver(&mut self) -> &mut UnboundedReceiver<T> {
        &mut self.updates
    }
}

impl<T> Drop for Following<T> {
    fn drop(&mut self) {
        self.routes.lock().unwrap().routes.remove(&self.key);
    }
}

/// A call's progress from both sources: the tap (wire order, complete before the answer) and
/// rmcp's dispatcher (for transports without a tap; late for the last updates). MCP's progress
/// increases with each notification for a token, so a value no greater than the last one
/// passed on is the other source's copy, and is dropped.
pub struct CallProgress {
    tapped: Following,
    rmcp: ProgressSubscriber,
    last: Option<f64>,
}

impl CallProgress {
    pub fn new(tapped: Following, rmcp: ProgressSubscriber) -> Self {
        Self {
            tapped,
            rmcp,
            last: None,
        }
    }

    /// Whether `update` is new, remembering it if so.
    fn admit(&mut self, update: &ToolProgress) -> bool {
        let new = self.last.is_none_or(|last| update.progress > last);
        if new {
            self.last = Some(update.progress);
        }
        new
    }

    /// The next new update; cancel-safe. The tap goes first: whatever rmcp delivers, the tap
    /// saw before rmcp parsed it.
    pub async fn next(&mut self) -> ToolProgress {
        loop {
            let update = tokio::select! {
                biased;
                Some(update) = self.tapped.updates.recv() => update,
                Some(p) = self.rmcp.next() => ToolProgress {
                    progress: p.progress,
                    total: p.total,
                    message: p.message,
                },
                else => std::future::pending().await,
            };
            if self.admit(&update) {
                return update;
            }
        }
    }

    /// The new updates already at hand, after the answer arrived: all the tap saw (it saw them
    /// before the answer), then whatever rmcp has delivered so far.
    pub fn drain(&mut self) -> Vec<ToolProgress> {
        let mut updates = Vec::new();
        while let Ok(update) = self.tapped.updates.try_recv() {
            updates.push(update);
        }
        while let Some(Some(p)) = self.rmcp.next().now_or_never() {
            updates.push(ToolProgress {
                progress: p.progress,
                total: p.total,
                message: p.message,
            });
        }
        updates.retain(|update| self.admit(update));
        updates
    }
}

#[cfg(test)]
mod tests {
    use rmcp::{
        handler::client::progress::ProgressDispatcher,
        model::{NumberOrString, ProgressNotificationParam},
    };
    use serde_json::json;

    use super::*;

    fn note(token: Value, progress: f64) -> Value {
        json!({"progressToken": token, "progress": progress, "total": 3, "message": format!("step {progress}")})
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    fn progress_of(updates: &[ToolProgress]) -> Vec<f64> {
        updates.iter().map(|u| u.progress).collect()
    }

    #[tokio::test]
    async fn progress_before_the_answer_is_all_there_when_the_answer_is() {
        let routes = Arc::new(Mutex::new(ProgressRoutes::default()));
        let dispatcher = ProgressDispatcher::new();
        let mut call = CallProgress::new(
            Following::new(routes.clone(), &token(1)),
            dispatcher.subscribe(token(1)).await,
        );
        // The tap sees three updates, then the answer; rmcp's handler tasks have not run yet.
        for step in 1..=3 {
            routes.lock().unwrap().deliver(&note(json!(1), step.into()));
        }
        routes.lock().unwrap().deliver(&note(json!(2), 1.0)); // another call's
        let got = call.drain();
        assert_eq!(progress_of(&got), [1.0, 2.0, 3.0]);
        assert_eq!(got[0].total, Some(3.0));
        assert_eq!(got[2].message.as_deref(), Some("step 3"));
        // rmcp's copies arrive late: they are duplicates.
        for step in 1..=3 {
            dispatcher
                .handle_notification(ProgressNotificationParam::new(token(1), step.into()))
                .await;
        }
        assert!(call.drain().is_empty());
    }

    #[tokio::test]
    async fn progress_before_the_token_is_followed_is_kept_for_it() {
        let routes = Arc::new(Mutex::new(ProgressRoutes::default()));
        routes.lock().unwrap().deliver(&note(json!(7), 1.0));
        routes.lock().unwrap().deliver(&note(json!("7"), 9.0)); // a string token is another one
        let dispatcher = ProgressDispatcher::new();
        let mut call = CallProgress::new(
            Following::new(routes.clone(), &token(7)),
            dispatcher.subscribe(token(7)).await,
        );
        routes.lock().unwrap().deliver(&note(json!(7), 2.0));
        assert_eq!(call.next().await.progress, 1.0);
        assert_eq!(call.next().await.progress, 2.0);
        drop(call);
        // Once the call is gone its token is followed no more.
        routes.lock().unwrap().deliver(&note(json!(7), 3.0));
        assert!(routes.lock().unwrap().routes.is_empty());
    }

    #[tokio::test]
    async fn without_a_tap_rmcp_delivers_and_only_increasing_values_pass() {
        let routes = Arc::new(Mutex::new(ProgressRoutes::default()));
        let dispatcher = ProgressDispatcher::new();
        let mut call = CallProgress::new(
            Following::new(routes.clone(), &token(3)),
            dispatcher.subscribe(token(3)).await,
        );
        for step in [1.0, 2.0, 2.0, 1.5, 4.0] {
            dispatcher
                .handle_notification(ProgressNotificationParam::new(token(3), step))
                .await;
        }
        assert_eq!(call.next().await.progress, 1.0);
        assert_eq!(progress_of(&call.drain()), [2.0, 4.0]);
    }

    #[test]
    fn unclaimed_progress_is_bounded() {
        let mut routes = ProgressRoutes::default();
        for n in 0..(UNCLAIMED_MAX + 10) {
            routes.deliver(&note(json!(n), 1.0));
        }
        routes.deliver(&json!({"progressToken": 1})); // no progress: not MCP progress
        assert_eq!(routes.unclaimed.len(), UNCLAIMED_MAX);
        // Bytes are bounded too: large items push the oldest out; one too large is not kept.
        let mut logs = Routes::<u32>::default();
        for n in 0..8 {
            logs.deliver_to(&json!(n), n, UNCLAIMED_BYTES / 4);
        }
        assert_eq!(logs.unclaimed.len(), 4);
        assert_eq!(logs.unclaimed_bytes, UNCLAIMED_BYTES);
        assert_eq!(logs.unclaimed.front().map(|u| u.3), Some(4));
        logs.deliver_to(&json!(9), 9, UNCLAIMED_BYTES + 1);
        assert_eq!(logs.unclaimed.len(), 4);
    }
}

/// Property tests: an upstream's `notifications/progress` params of any shape are delivered or
/// dropped, never a panic (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::answer;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn progress_params_of_any_shape_are_delivered_or_dropped(params in prop::collection::vec(answer(), 1..8)) {
            let mut routes = ProgressRoutes::default();
            for p in &params {
                routes.deliver(p);
            }
        }

        /// The progress an upstream writes for a followed token reaches its follower as written.
        #[test]
        fn written_progress_reaches_the_call_that_follows_its_token(
            token in prop_oneof![any::<i64>().prop_map(Value::from), "\\PC{0,20}".prop_map(Value::from)],
            progress in -1e9f64..1e9,
            total in prop::option::of(0f64..1e9),
            message in prop::option::of("\\PC{0,30}"),
        ) {
            let mut routes = ProgressRoutes::default();
            let mut rx = routes.follow(token_key(&token));
            let params = serde_json::json!({"progressToken": token, "progress": progress, "total": total, "message": message});
            routes.deliver(&params);
            prop_assert_eq!(rx.try_recv().ok(), Some(ToolProgress { progress, total, message }));
        }
    }
}
