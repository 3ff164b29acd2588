//! The inline path (R-PRX-30): a short, re-runnable tool call runs inside the Nexus handler,
//! which answers synchronously, instead of in a standalone Activity.
//!
//! Where a call runs is the `execution` key of the call options: the tool's override, else the
//! upstream's `activity_options`, else [`DEFAULT_EXECUTION`] (`activity`):
//!
//! | `execution` | runs inline when |
//! |---|---|
//! | `activity` | never (every call is an Activity, R-PRX-3) |
//! | `auto` | the tool is re-runnable ([`rerunnable`]: read-only or idempotent, not one attempt) and its attempt timeout plus [`DEADLINE_MARGIN`] fits in what is left of the Nexus request deadline |
//! | `inline` on the upstream | the tool is re-runnable ([`rerunnable`]): a tool that annotates nothing stays in its Activity |
//! | `inline` on the tool | always: the operator says so for this tool |
//!
//! A tool the upstream runs as a task (`taskSupport: "required"`, R-PRX-28) is always an
//! Activity: following a task needs heartbeats.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, SystemTime},
};

pub use super::options::Execution;
use super::{options::ResolvedCallOptions, retry::ToolHints};

/// Where calls run when no layer says: in an Activity (R-PRX-3); `auto` is opt-in.
pub const DEFAULT_EXECUTION: Execution = Execution::Activity;

/// Room left between an inline call's cut-off and the Nexus request deadline, for the answer
/// to reach the server.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(2);

/// What [`listed_inline`] judges `auto` by, since a listing knows no start: the Nexus request
/// deadline (about 8 s, R-NEX-6) less a second for the start's way through the server. Erring
/// short only costs look-ups of a call that went inline; erring long would leave a tool that
/// usually runs in an Activity without live progress.
pub const NOMINAL_REQUEST_DEADLINE: Duration = Duration::from_secs(7);

/// How many times an inline call of a re-runnable tool is started when its retry policy sets
/// no attempt cap: the server re-sends a start that failed retryably, and each re-send is one
/// attempt.
pub const INLINE_ATTEMPTS: u32 = 3;

/// Where one call runs, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub inline: bool,
    pub reason: &'static str,
}

/// Whether running the tool again is harmless, by its annotations (R-PRX-4's hints): it says
/// it is read-only or idempotent, and its policy allows more than one attempt. A hint the tool
/// does not give counts as not said: MCP's defaults for both are `false`.
pub fn rerunnable(hints: &ToolHints, one_attempt: bool) -> bool {
    !one_attempt && (hints.read_only == Some(true) || hints.idempotent == Some(true))
}

/// Where a call runs (the module's table). `remaining` is what is left of the Nexus request
/// deadline (none for a start delivered without one).
pub fn place(
    (upstream, tool): (Option<Execution>, Option<Execution>),
    hints: &ToolHints,
    options: &ResolvedCallOptions,
    upstream_task: bool,
    remaining: Option<Duration>,
) -> Placement {
    let at = |inline, reason| Placement { inline, reason };
    if upstream_task {
        return at(false, "the upstream runs the call as a task");
    }
    match (tool, upstream.unwrap_or(DEFAULT_EXECUTION)) {
        (Some(Execution::Inline), _) => at(true, "the tool's execution is inline"),
        (Some(Execution::Activity), _) | (None, Execution::Activity) => {
            at(false, "execution is activity")
        }
        (None, Execution::Inline) if !rerunnable(hints, options.one_attempt) => at(
            false,
            "under the upstream's execution = \"inline\", only a tool that says it is read-only or idempotent runs inline; name the tool to force it",
        ),
        (None, Execution::Inline) => at(true, "the upstream's execution is inline"),
        (Some(Execution::Auto), _) | (None, Execution::Auto) => auto(hints, options, remaining),
    }
}

/// Whether the tool's listing says its calls are answered inline ([`INLINE_META_KEY`], which
/// spares the connector's progress look-ups, R-CON-26): [`place`] with the whole
/// [`NOMINAL_REQUEST_DEADLINE`] left. So `inline` on the tool, `inline` on the upstream for a
/// re-runnable tool, and `auto` for a re-runnable tool whose `start_to_close`
/// plus [`DEADLINE_MARGIN`] is at most 7 s; never a tool the upstream runs as a task. A start
/// that waited in the server's queue may leave an `auto` tool less than that: such a call runs
/// in an Activity after all, and its progress still travels with its result (R-CON-10).
///
/// [`INLINE_META_KEY`]: durable_mcp_contract::listing::INLINE_META_KEY
pub fn listed_inline(
    layers: (Option<Execution>, Option<Execution>),
    hints: &ToolHints,
    options: &ResolvedCallOptions,
    upstream_task: bool,
) -> bool {
    place(
        layers,
        hints,
        options,
        upstream_task,
        Some(NOMINAL_REQUEST_DEADLINE),
    )
    .inline
}

/// `auto`: inline for a re-runnable tool whose attempt fits the request deadline.
fn auto(
    hints: &ToolHints,
    options: &ResolvedCallOptions,
    remaining: Option<Duration>,
) -> Placement {
    let at = |inline, reason| Placement { inline, reason };
    if !rerunnable(hints, options.one_attempt) {
        return at(false, "auto: the tool is not read-only or idempotent");
    }
    match remaining {
        None => at(false, "auto: the start has no request deadline"),
        Some(left) if options.start_to_close + DEADLINE_MARGIN > left => at(
            false,
            "auto: the attempt timeout does not fit the request deadline",
        ),
        Some(_) => at(true, "auto: a short, re-runnable call"),
    }
}

/// What is left of a request deadline now.
pub fn remaining(deadline: Option<SystemTime>) -> Option<Duration> {
    deadline.map(|at| at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// How many starts of each inline call (by Nexus request id) this process has seen, the latest
/// [`MAX_REMEMBERED`] calls: a start the server re-sends is the call's next attempt.
#[derive(Default)]
pub struct Attempts(Mutex<VecDeque<(String, u32)>>);

/// How many inline calls' attempt counts are remembered.
const MAX_REMEMBERED: usize = 4096;

impl Attempts {
    /// Counts one more start of the call `request_id` and answers its number (1 for the first).
    pub fn next(&self, request_id: &str) -> u32 {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = seen.iter_mut().find(|(id, _)| id == request_id) {
            *n += 1;
            return *n;
        }
        if seen.len() >= MAX_REMEMBERED {
            seen.pop_front();
        }
        seen.push_back((request_id.to_owned(), 1));
        1
    }
}

/// How many starts an inline call gets: its retry policy's cap, else [`INLINE_ATTEMPTS`].
pub fn allowed_attempts(options: &ResolvedCallOptions) -> u32 {
    match options.retry_policy.maximum_attempts {
        Some(n) if n > 0 => n.unsigned_abs(),
        _ => INLINE_ATTEMPTS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{ActivityOptions, resolve};

    fn hints(annotations: serde_json::Value) -> ToolHints {
        ToolHints::from_tool_json(&serde_json::json!({ "annotations": annotations }))
    }

    fn options(start_to_close: &str, h: &ToolHints) -> ResolvedCallOptions {
        let o: ActivityOptions =
            serde_json::from_value(serde_json::json!({ "start_to_close_timeout": start_to_close }))
                .unwrap();
        resolve(&o, None, h)
    }

    const LEFT: Option<Duration> = Some(Duration::from_secs(9));

    #[test]
    fn auto_runs_short_read_only_or_idempotent_calls_inline() {
        use Execution::*;
        let ro = hints(serde_json::json!({"readOnlyHint": true}));
        let idem = hints(serde_json::json!({"idempotentHint": true}));
        let plain = hints(serde_json::json!({}));
        let auto_place = |h: &ToolHints, t: &str, left| {
            place((Some(Auto), None), h, &options(t, h), false, left).inline
        };
        assert!(auto_place(&ro, "5s", LEFT));
        assert!(auto_place(&idem, "5s", LEFT));
        assert!(!auto_place(&plain, "5s", LEFT), "not said re-runnable");
        assert!(!auto_place(&ro, "8s", LEFT), "8 s + margin > 9 s");
        assert!(!auto_place(&ro, "60s", LEFT));
        assert!(!auto_place(&ro, "5s", None), "no deadline known");
        let h = &ro;
        assert!(
            !place((Some(Auto), None), h, &options("1s", h), true, LEFT).inline,
            "an upstream task is followed in an Activity"
        );
    }

    #[test]
    fn inline_for_a_destructive_tool_only_by_its_own_override() {
        use Execution::*;
        let d = hints(serde_json::json!({"destructiveHint": true}));
        let o = options("1s", &d);
        assert!(o.one_attempt);
        assert!(!place((Some(Inline), None), &d, &o, false, LEFT).inline);
        assert!(!place((Some(Auto), None), &d, &o, false, LEFT).inline);
        assert!(place((None, Some(Inline)), &d, &o, false, None).inline);
        assert!(place((Some(Activity), Some(Inline)), &d, &o, false, None).inline);
        let ro = hints(serde_json::json!({"readOnlyHint": true}));
        let o = options("60s", &ro);
        assert!(place((Some(Inline), None), &ro, &o, false, None).inline);
        assert!(!place((Some(Inline), Some(Activity)), &ro, &o, false, LEFT).inline);
        assert!(!place((None, None), &ro, &options("1s", &ro), false, LEFT).inline);
    }

    #[test]
    fn a_tool_that_says_nothing_of_reruns_stays_an_activity_under_the_upstreams_inline() {
        use Execution::*;
        let unannotated = hints(serde_json::json!({}));
        let not_read_only = hints(serde_json::json!({"readOnlyHint": false, "title": "x"}));
        let not_destructive = hints(serde_json::json!({"destructiveHint": false}));
        for h in [&unannotated, &not_read_only, &not_destructive] {
            let o = options("1s", h);
            assert!(!o.one_attempt, "{h:?}: retried, so not one attempt");
            let placed = place((Some(Inline), None), h, &o, false, LEFT);
            assert!(!placed.inline, "{h:?}: {placed:?}");
            assert!(
                placed.reason.contains("read-only or idempotent")
                    && placed.reason.contains("name the tool"),
                "{}",
                placed.reason
            );
            assert!(!listed_inline((Some(Inline), None), h, &o, false));
            // The operator names the tool: inline.
            assert!(place((Some(Inline), Some(Inline)), h, &o, false, LEFT).inline);
        }
        let idem = hints(serde_json::json!({"idempotentHint": true}));
        assert!(
            place(
                (Some(Inline), None),
                &idem,
                &options("60s", &idem),
                false,
                None
            )
            .inline
        );
    }

    #[test]
    fn the_listing_marks_the_tools_whose_calls_go_inline() {
        use Execution::*;
        let ro = hints(serde_json::json!({"readOnlyHint": true}));
        let d = hints(serde_json::json!({"destructiveHint": true}));
        let listed =
            |layers, h: &ToolHints, t: &str, task| listed_inline(layers, h, &options(t, h), task);
        // The tool's own override: always, one-attempt or not.
        assert!(listed((None, Some(Inline)), &d, "60s", false));
        assert!(listed((Some(Activity), Some(Inline)), &ro, "60s", false));
        // The upstream's: not for a one-attempt tool.
        assert!(listed((Some(Inline), None), &ro, "60s", false));
        assert!(!listed((Some(Inline), None), &d, "1s", false));
        // auto: re-runnable, and the attempt plus the margin fits the nominal deadline.
        assert!(
            listed((Some(Auto), None), &ro, "5s", false),
            "5 s + 2 s = 7 s"
        );
        assert!(
            !listed((Some(Auto), None), &ro, "6s", false),
            "6 s + 2 s > 7 s"
        );
        assert!(!listed((Some(Auto), None), &d, "1s", false));
        // activity, or nothing said.
        assert!(!listed((None, None), &ro, "1s", false));
        assert!(!listed((Some(Inline), Some(Activity)), &ro, "1s", false));
        // An upstream task is followed in an Activity, whatever the options say.
        assert!(!listed((None, Some(Inline)), &ro, "1s", true));
        assert!(!listed((Some(Auto), None), &ro, "1s", true));
    }

    #[test]
    fn attempts_are_counted_per_request_and_capped_by_the_policy() {
        let a = Attempts::default();
        assert_eq!(a.next("r1"), 1);
        assert_eq!(a.next("r2"), 1);
        assert_eq!(a.next("r1"), 2);
        let ro = hints(serde_json::json!({"readOnlyHint": true}));
        assert_eq!(allowed_attempts(&options("1s", &ro)), INLINE_ATTEMPTS);
        let mut o = options("1s", &ro);
        o.retry_policy.maximum_attempts = Some(2);
        assert_eq!(allowed_attempts(&o), 2);
    }
}
