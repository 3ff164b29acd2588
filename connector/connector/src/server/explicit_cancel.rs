//! Which end of a keyed call's request cancels it (R-CON-5): a caller that sent an idempotency
//! key is told to re-issue the call if its answer is lost, so only an explicit cancel
//! (`notifications/cancelled`, or `tasks/cancel` once it is a task) cancels its operation; its
//! response stream or session closing only stops the wait, and the re-issue reattaches.
//!
//! rmcp cancels a request's token for both signals alike, then hands the notification to the
//! handler, so the handler keeps the keyed calls it waits for by request id and marks the one a
//! `notifications/cancelled` names; a wait whose token ended looks for that mark for
//! [`EXPLICIT_GRACE`] before it treats the end as a dropped stream.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::model::RequestId;
use tokio_util::sync::CancellationToken;

/// How long a keyed call's wait, whose request token ended, waits for the explicit cancel
/// that may have ended it: rmcp cancels the token and then spawns the notification's handler,
/// so the mark follows within scheduling delay.
pub(super) const EXPLICIT_GRACE: Duration = Duration::from_secs(1);

/// The keyed calls a caller (one session, one stdio client) is waiting for, by request id, each
/// with the token its explicit cancel fires and a serial of its own (a client may reuse an id
/// while a call under it still runs: each call forgets only its own entry). Clones share them.
#[derive(Clone, Default)]
pub(super) struct KeyedCalls(Arc<Mutex<Calls>>);

#[derive(Default)]
struct Calls {
    next: u64,
    by_id: HashMap<RequestId, Vec<(u64, CancellationToken)>>,
}

impl KeyedCalls {
    /// Keeps request `id` as a keyed call until the returned guard drops.
    pub(super) fn register(&self, id: RequestId) -> Registered {
        let explicit = CancellationToken::new();
        let mut calls = self.0.lock().unwrap();
        let serial = calls.next;
        calls.next += 1;
        let entry = (serial, explicit.clone());
        calls.by_id.entry(id.clone()).or_default().push(entry);
        Registered {
            calls: self.clone(),
            id,
            serial,
            explicit,
        }
    }

    /// A `notifications/cancelled` for request `id`: marks it cancelled explicitly, if it is a
    /// keyed call being waited for (every one under that id, if the client reused it).
    pub(super) fn cancel(&self, id: &RequestId) {
        for (_, explicit) in self.0.lock().unwrap().by_id.get(id).into_iter().flatten() {
            explicit.cancel();
        }
    }
}

/// A keyed call being waited for; forgotten when dropped.
pub(super) struct Registered {
    calls: KeyedCalls,
    id: RequestId,
    serial: u64,
    explicit: CancellationToken,
}

impl Registered {
    /// The token an explicit cancel of this call fires.
    pub(super) fn explicit(&self) -> CancellationToken {
        self.explicit.clone()
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut calls = self.calls.0.lock().unwrap();
        if let Some(entries) = calls.by_id.get_mut(&self.id) {
            entries.retain(|(serial, _)| *serial != self.serial);
            if entries.is_empty() {
                calls.by_id.remove(&self.id);
            }
        }
    }
}

/// What ends a call's wait, and whether that end cancels its operation (R-CON-5).
pub(crate) enum CallCancel {
    /// Any end of the request cancels the operation: calls without an idempotency key, and
    /// library callers.
    Any(CancellationToken),
    /// The request's end (`ended`) stops the wait; only `explicit` cancels the operation.
    Explicit {
        ended: CancellationToken,
        explicit: CancellationToken,
    },
}

impl CallCancel {
    /// The token that ends the wait.
    pub(crate) fn ended(&self) -> &CancellationToken {
        match self {
            Self::Any(token) => token,
            Self::Explicit { ended, .. } => ended,
        }
    }

    /// Whether the wait, now ended, is to cancel the operation.
    pub(crate) async fn cancels(&self) -> bool {
        match self {
            Self::Any(_) => true,
            Self::Explicit { explicit, .. } => {
                tokio::time::timeout(EXPLICIT_GRACE, explicit.cancelled())
                    .await
                    .is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_an_explicit_cancel_cancels_a_keyed_call() {
        let calls = KeyedCalls::default();
        let id = RequestId::Number(7);
        let registered = calls.register(id.clone());
        let ended = CancellationToken::new();
        let cancel = CallCancel::Explicit {
            ended: ended.clone(),
            explicit: registered.explicit(),
        };
        ended.cancel();
        assert!(!cancel.cancels().await, "a dropped stream is no cancel");
        calls.cancel(&RequestId::Number(8));
        assert!(
            !cancel.cancels().await,
            "another request's cancel is not this one's"
        );
        calls.cancel(&id);
        assert!(cancel.cancels().await);
        drop(registered);
        assert!(calls.0.lock().unwrap().by_id.is_empty());
        assert!(CallCancel::Any(CancellationToken::new()).cancels().await);
    }

    #[tokio::test]
    async fn a_reused_request_id_keeps_each_calls_own_entry() {
        let calls = KeyedCalls::default();
        let id = RequestId::Number(7);
        let first = calls.register(id.clone());
        let second = calls.register(id.clone());
        let second_cancel = CallCancel::Explicit {
            ended: CancellationToken::new(),
            explicit: second.explicit(),
        };
        drop(first);
        calls.cancel(&id);
        assert!(
            second_cancel.cancels().await,
            "the first call's end forgot the second's entry: its explicit cancel was lost"
        );
        drop(second);
        assert!(calls.0.lock().unwrap().by_id.is_empty());
    }
}
