//! A panic while serving a request ends that request, not the worker (R-CON-51).
//!
//! No request should panic (product code neither indexes input nor unwraps it), but a bug that
//! does must cost one answer, not a worker, a connection or the process. [`catching`] runs a
//! request's future and turns a panic into [`Panicked`], which the caller of a transport turns
//! into the answer its protocol has for an internal failure (JSON-RPC -32603, a Nexus INTERNAL
//! error, a failed Activity). Every panic is counted in `panics_total{method}` in the
//! registries that [`register_panics`] (the connector's and the proxy's), and logged once at
//! `error` with the request's method and where it panicked, never the request's content:
//! [`install_hook`] replaces Rust's default report (which prints the panic's message, often a
//! piece of the input) with one that logs a message only when it is a literal of the source.

use std::{
    any::Any,
    cell::{Cell, RefCell},
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::OnceLock,
    task::{Context, Poll},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// The method label of a panic outside any request (a background task).
pub const OUTSIDE_A_REQUEST: &str = "_background";

/// The method label of a notification (it has no answer to give).
pub const NOTIFICATION: &str = "_notification";

/// The method label of a request whose method is none of [`MCP_METHODS`].
pub const OTHER_METHOD: &str = "_other";

/// Every MCP method a client sends (2024-11-05 to 2026-07-28, the tasks extension's included):
/// the bounded set of a panic's `method` label.
pub const MCP_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "tasks/update",
];

/// `method` as a label: itself when it is an MCP method, else [`OTHER_METHOD`].
pub fn mcp_method(method: &str) -> &'static str {
    MCP_METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or(OTHER_METHOD)
}

/// A request's future panicked; it was counted and logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    /// The request's method, as labelled.
    pub method: &'static str,
    /// Where in the source it panicked (`file:line:column`), when the hook saw it.
    pub location: Option<String>,
}

impl Panicked {
    /// What a caller reads: an internal failure, nothing of the request or the panic.
    pub fn caller_message(&self) -> String {
        format!(
            "internal error: the server failed while answering this {} request (a bug, logged \
             for its operator); nothing else was affected",
            self.method
        )
    }
}

/// The method label of a panic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

type Panics = Family<MethodLabels, Counter>;

/// The process's panics: every registry that registers them shows the same counts.
fn panics() -> &'static Panics {
    static PANICS: OnceLock<Panics> = OnceLock::new();
    PANICS.get_or_init(Panics::default)
}

/// Registers the process's panics in `registry` as `panics` (`{prefix}_panics_total{method}`).
pub fn register_panics(registry: &mut Registry) {
    let help = "Panics, by the method of the request that panicked (_background: outside one)";
    registry.register("panics", help, panics().clone());
}

fn count(method: &'static str) {
    panics().get_or_create(&MethodLabels { method }).inc();
}

/// The panics counted so far under `method` (for tests and reports).
pub fn counted(method: &'static str) -> u64 {
    panics().get_or_create(&MethodLabels { method }).get()
}

thread_local! {
    /// How many [`catching`] polls this thread is inside: the hook stays quiet there.
    static GUARDED: Cell<usize> = const { Cell::new(0) };
    /// Where the last guarded panic on this thread happened, for its one log line.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook (once; later calls do nothing): a panic inside
/// [`catching`] only notes where it happened (the catch logs it with its request's method); one
/// outside is counted under [`OUTSIDE_A_REQUEST`] and logged at `error` with its location and,
/// when it is a literal of the source, its message. The binaries install it at start-up; a
/// library host may keep its own hook.
pub fn install_hook() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            if GUARDED.get() > 0 {
                LOCATION.set(location);
                return;
            }
            count(OUTSIDE_A_REQUEST);
            let message = info.payload().downcast_ref::<&'static str>().copied();
            tracing::error!(
                location = location.as_deref().unwrap_or("unknown"),
                message = message.unwrap_or("(not shown: it may hold input)"),
                "a task panicked outside any request"
            );
        }));
    });
}

/// Runs `future` (the answer to one `method` request); a panic while it runs becomes
/// `Err(Panicked)`, counted under `method` and logged once at `error`, without the request's
/// content or the panic's message. The future is dropped after the panic.
pub async fn catching<F: Future>(method: &'static str, future: F) -> Result<F::Output, Panicked> {
    Catching {
        method,
        future: Box::pin(future),
    }
    .await
}

struct Catching<F> {
    method: &'static str,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Catching<F> {
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        GUARDED.set(GUARDED.get() + 1);
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| self.future.as_mut().poll(cx)));
        GUARDED.set(GUARDED.get().saturating_sub(1));
        match polled {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(self.panicked(payload))),
        }
    }
}

impl<F> Catching<F> {
    fn panicked(&self, payload: Box<dyn Any + Send>) -> Panicked {
        // The payload may hold formatted input: drop it, and forget only what a panicking
        // drop leaves (dropping that could panic again).
        if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
        let location = LOCATION.take();
        count(self.method);
        tracing::error!(
            method = self.method,
            location = location.as_deref().unwrap_or("unknown"),
            "a request panicked; it was answered as an internal error (R-CON-51)"
        );
        Panicked {
            method: self.method,
            location,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_an_error_of_its_request_counted_by_method() {
        // The hook is not installed here: it would hide other tests' failure messages.
        let before = counted("tools/call");
        let answered = catching("tools/call", async {
            tokio::task::yield_now().await;
            let input = serde_json::json!("a string where an object was expected");
            if input.is_string() {
                panic!("cannot read {input}");
            }
            1
        })
        .await;
        let panicked = answered.unwrap_err();
        assert_eq!(panicked.method, "tools/call");
        assert!(!panicked.caller_message().contains("a string where"));
        assert!(panicked.caller_message().contains("tools/call"));
        assert_eq!(counted("tools/call"), before + 1);
        assert_eq!(catching("ping", async { 7 }).await, Ok(7));
    }

    #[test]
    fn methods_outside_mcp_share_one_label() {
        assert_eq!(mcp_method("tools/call"), "tools/call");
        assert_eq!(mcp_method("subscriptions/listen"), "subscriptions/listen");
        assert_eq!(mcp_method("tools/call\u{0}x"), OTHER_METHOD);
        assert_eq!(mcp_method(&"x".repeat(10_000)), OTHER_METHOD);
    }

    #[test]
    fn panics_show_in_every_registry_that_registers_them() {
        let (mut a, mut b) = (Registry::with_prefix("a"), Registry::with_prefix("b"));
        register_panics(&mut a);
        register_panics(&mut b);
        count("tasks/get");
        for (registry, prefix) in [(&a, "a"), (&b, "b")] {
            let line = format!("{prefix}_panics_total{{method=\"tasks/get\"}} ");
            let text = crate::metrics::encode(registry);
            assert!(text.contains(&line), "{line} missing from {text}");
        }
    }
}

/// Property tests: an `Mcp-Method` header of any text labels a panic with an MCP method or
/// [`OTHER_METHOD`], never with the caller's text (R-CON-51's bounded labels).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_method_header_of_any_text_is_an_mcp_method_or_other(
            text in prop_oneof!["\\PC{0,30}", prop::sample::select(MCP_METHODS).prop_map(str::to_owned)],
        ) {
            let label = mcp_method(&text);
            prop_assert!(label == OTHER_METHOD || MCP_METHODS.contains(&label));
            prop_assert_eq!(
                label == text && label != OTHER_METHOD,
                MCP_METHODS.contains(&text.as_str())
            );
        }
    }
}
