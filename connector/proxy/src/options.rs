//! Per-call Activity options.
//!
//! Options come in layers: the upstream's `activity_options`, then the tool's entry in
//! `overrides`. A layer changes only the keys it supplies ([`ActivityOptions::overlay`]); a
//! key is replaced whole, so an override's `retry_policy`, `priority` or `search_attributes`
//! replaces the upstream's rather than merging into it. [`resolve`] then fills what no layer
//! supplied: a one-minute attempt timeout, a short heartbeat timeout, and the retry policy
//! inferred from the tool's annotations ([`retry::infer`]) unless a layer gave one.
//!
//! Durations are written as humantime strings (`"30s"`, `"48h"`, `"1m 30s"`) in TOML and JSON.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::Priority;

pub use super::retry::RetryPolicySpec;
use super::retry::{self, ToolHints};

/// Timeout for one attempt when no layer sets `start_to_close_timeout`.
pub const DEFAULT_START_TO_CLOSE: Duration = Duration::from_secs(60);
/// Heartbeat timeout when no layer sets one. The activity heartbeats while the upstream call is
/// in flight, and a cancel reaches it with a heartbeat's answer: so a short timeout makes a
/// cancel land within seconds, and a lost worker is noticed as fast.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// Activity options as written by the user: every key optional, and only supplied keys change
/// when layered with [`overlay`](Self::overlay).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivityOptions {
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub start_to_close_timeout: Option<Duration>,
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub schedule_to_close_timeout: Option<Duration>,
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub schedule_to_start_timeout: Option<Duration>,
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<Duration>,
    /// Replaces retry inference when given, whatever the tool's annotations say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicySpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<PrioritySpec>,
    /// Search attributes for the Activity, by name; values as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_attributes: Option<BTreeMap<String, serde_json::Value>>,
    /// A one-line summary for the Temporal UI. Never put secrets here: it is recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Where the call runs: `auto`, `inline` or `activity` (R-PRX-30).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// How a hint the tool does not give is read for its retry policy (R-PRX-38).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_hints: Option<MissingHints>,
}

impl ActivityOptions {
    /// `self` with every key that `over` supplies replaced by `over`'s value.
    pub fn overlay(&self, over: &ActivityOptions) -> ActivityOptions {
        fn pick<T: Clone>(over: &Option<T>, base: &Option<T>) -> Option<T> {
            over.as_ref().or(base.as_ref()).cloned()
        }
        ActivityOptions {
            start_to_close_timeout: pick(
                &over.start_to_close_timeout,
                &self.start_to_close_timeout,
            ),
            schedule_to_close_timeout: pick(
                &over.schedule_to_close_timeout,
                &self.schedule_to_close_timeout,
            ),
            schedule_to_start_timeout: pick(
                &over.schedule_to_start_timeout,
                &self.schedule_to_start_timeout,
            ),
            heartbeat_timeout: pick(&over.heartbeat_timeout, &self.heartbeat_timeout),
            retry_policy: pick(&over.retry_policy, &self.retry_policy),
            priority: pick(&over.priority, &self.priority),
            search_attributes: pick(&over.search_attributes, &self.search_attributes),
            summary: pick(&over.summary, &self.summary),
            execution: pick(&over.execution, &self.execution),
            missing_hints: pick(&over.missing_hints, &self.missing_hints),
        }
    }

    /// Checks values the server would reject or misread. On error, answers the offending key's
    /// path within these options (for example `retry_policy.maximum_attempts`) and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let timeouts = [
            ("start_to_close_timeout", self.start_to_close_timeout),
            ("schedule_to_close_timeout", self.schedule_to_close_timeout),
            ("schedule_to_start_timeout", self.schedule_to_start_timeout),
            ("heartbeat_timeout", self.heartbeat_timeout),
        ];
        for (key, value) in timeouts {
            // Temporal reads a zero timeout as "not set", which is not what the user wrote.
            if value == Some(Duration::ZERO) {
                return Err((key, "must be longer than zero".into()));
            }
        }
        if let Some(p) = &self.retry_policy {
            if p.maximum_attempts.is_some_and(|n| n < 0) {
                return Err((
                    "retry_policy.maximum_attempts",
                    "must be 0 (unlimited) or more".into(),
                ));
            }
            if p.backoff_coefficient
                .is_some_and(|c| !(c.is_finite() && c >= 1.0))
            {
                return Err((
                    "retry_policy.backoff_coefficient",
                    "must be a number of at least 1.0".into(),
                ));
            }
            if let (Some(initial), Some(max)) = (p.initial_interval, p.maximum_interval)
                && max < initial
            {
                return Err((
                    "retry_policy.maximum_interval",
                    "must not be shorter than initial_interval".into(),
                ));
            }
        }
        if let Some(p) = &self.priority {
            if p.priority_key.is_some_and(|k| k < 1) {
                return Err((
                    "priority.priority_key",
                    "must be 1 (highest) or more".into(),
                ));
            }
            if p.fairness_key.as_ref().is_some_and(|k| k.len() > 64) {
                return Err(("priority.fairness_key", "must be at most 64 bytes".into()));
            }
            if p.fairness_weight
                .is_some_and(|w| !(w.is_finite() && w > 0.0))
            {
                return Err((
                    "priority.fairness_weight",
                    "must be a number above 0".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Where a call runs, as configured (R-PRX-30, the table in `inline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    Auto,
    Inline,
    Activity,
}

/// How a behaviour hint a tool does not give is read when its retry policy is inferred
/// (R-PRX-38). Where a call runs never rests on a missing hint: only a tool that says it is
/// read-only or idempotent runs inline without being named (R-PRX-30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingHints {
    /// As not said: only a tool that says it is destructive, and not idempotent, gets one
    /// attempt; a tool that annotates nothing is retried.
    #[default]
    NotSaid,
    /// As MCP's defaults (`readOnlyHint: false`, `destructiveHint: true`, `idempotentHint:
    /// false`): a tool that annotates nothing gets one attempt.
    McpDefaults,
}

/// Task priority and fairness; an absent key is inherited or defaulted by the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrioritySpec {
    /// 1 is the highest priority; the server's default is the middle of its range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_key: Option<i32>,
    /// Tasks with different keys are dispatched in proportion to their weights (at most 64 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_weight: Option<f32>,
}

impl PrioritySpec {
    /// The protobuf priority; absent keys become zero or empty, which the server reads as unset.
    pub fn to_proto(&self) -> Priority {
        Priority {
            priority_key: self.priority_key.unwrap_or(0),
            fairness_key: self.fairness_key.clone().unwrap_or_default(),
            fairness_weight: self.fairness_weight.unwrap_or(0.0),
        }
    }
}

/// The caller key a start names (R-PRX-40): its
/// [`CALLER_KEY_HEADER`](durable_mcp_contract::call::CALLER_KEY_HEADER), one per caller (an
/// IPv6 site as one), else, from a connector from before it, its
/// [`CALLER_HEADER`](durable_mcp_contract::call::CALLER_HEADER).
pub fn caller_key_of(headers: &HashMap<String, String>) -> Option<&str> {
    use durable_mcp_contract::call::{CALLER_HEADER, CALLER_KEY_HEADER};
    (headers.get(CALLER_KEY_HEADER))
        .or_else(|| headers.get(CALLER_HEADER))
        .map(String::as_str)
}

/// The priority of one call's Activity (R-PRX-40): the configured one, with the caller key the
/// start names ([`caller_key_of`]) as its fairness key unless the configuration names one;
/// `None` when there is neither. A caller that cannot be a fairness key (empty, or over 64
/// bytes) is no key.
pub fn call_priority(configured: Option<&PrioritySpec>, caller: Option<&str>) -> Option<Priority> {
    let caller = caller.filter(|k| {
        !k.is_empty() && k.len() <= durable_mcp_contract::features::MAX_CALLER_KEY_BYTES
    });
    let mut priority = match (configured, caller) {
        (None, None) => return None,
        (Some(spec), _) => spec.to_proto(),
        (None, Some(_)) => Priority::default(),
    };
    if let Some(key) = caller
        && priority.fairness_key.is_empty()
    {
        priority.fairness_key = key.to_owned();
    }
    Some(priority)
}

/// Concrete options for one call after defaults + inference + overrides. It is recorded with the
/// call, so a retried start keeps these options even if discovery or config changed since.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedCallOptions {
    #[serde(with = "humantime_serde")]
    pub start_to_close: Duration,
    #[serde(with = "humantime_serde")]
    pub schedule_to_close: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub schedule_to_start: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    pub retry_policy: RetryPolicySpec,
    /// Why this retry policy applies, for logs and the SPEC table.
    pub retry_reason: String,
    /// The policy allows exactly one attempt: a failure after which the tool may have run must
    /// not be retried in any way (the transport-failure table in `errors`).
    pub one_attempt: bool,
    pub priority: Option<PrioritySpec>,
    pub search_attributes: Option<BTreeMap<String, serde_json::Value>>,
    pub summary: Option<String>,
}

/// An upstream's call options, as far as they say how its tools' missing hints are read: what
/// the proxy's start-up note about tools that say nothing of reruns is made from (R-PRX-38).
#[derive(Debug, Clone, Default)]
pub struct HintReading {
    pub upstream: ActivityOptions,
    pub overrides: BTreeMap<String, ActivityOptions>,
}

impl HintReading {
    /// The tools of `tools` (listed JSON) whose retries rest on hints they do not give, named
    /// with what that means ([`retry::unannotated_note`]), split by how they are read: as not
    /// said (retried), or as MCP's defaults (one attempt). A tool with an explicit retry policy
    /// is in neither: nothing rests on its hints.
    pub fn notes(&self, tools: &[serde_json::Value]) -> [Option<String>; 2] {
        let (mut retried, mut once) = (Vec::new(), Vec::new());
        for tool in tools {
            if !ToolHints::from_tool_json(tool).rerun_unsaid() {
                continue;
            }
            let name = tool
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            let layered = match self.overrides.get(name) {
                Some(over) => self.upstream.overlay(over),
                None => self.upstream.clone(),
            };
            match (
                layered.retry_policy,
                layered.missing_hints.unwrap_or_default(),
            ) {
                (Some(_), _) => {}
                (None, MissingHints::NotSaid) => retried.push(name.to_owned()),
                (None, MissingHints::McpDefaults) => once.push(name.to_owned()),
            }
        }
        [
            retry::unannotated_note(&retried, false),
            retry::unannotated_note(&once, true),
        ]
    }
}

/// The retry policy [`retry::infer`] gives the tool, its hints read as `missing` says, and why.
fn inferred(annotations: &ToolHints, missing: MissingHints) -> (RetryPolicySpec, String) {
    let said = retry::infer(annotations);
    let decision = match missing {
        MissingHints::NotSaid => said.clone(),
        MissingHints::McpDefaults => retry::infer(&annotations.with_mcp_defaults()),
    };
    let mut reason = decision.reason.to_owned();
    if decision != said {
        reason.push_str(" (missing hints read as MCP's defaults)");
    }
    (decision.policy, reason)
}

/// Resolves one call's options: `tool_override` laid over `upstream_defaults`, then defaults.
///
/// - `start_to_close`: [`DEFAULT_START_TO_CLOSE`] unless set.
/// - `heartbeat`: [`DEFAULT_HEARTBEAT_TIMEOUT`] unless set, then **clamped to half of
///   `start_to_close`** when it is not shorter than it: a heartbeat timeout at or beyond the
///   attempt timeout would never fire first, so a lost worker or a cancel would wait for the
///   whole attempt.
/// - `retry_policy`: the explicit one if a layer supplies it (reason `"explicit retry policy"`),
///   else [`retry::infer`] from the tool's annotations, a missing hint read as `missing_hints`
///   says.
pub fn resolve(
    upstream_defaults: &ActivityOptions,
    tool_override: Option<&ActivityOptions>,
    annotations: &ToolHints,
) -> ResolvedCallOptions {
    let o = match tool_override {
        Some(over) => upstream_defaults.overlay(over),
        None => upstream_defaults.clone(),
    };
    let (retry_policy, retry_reason) = match o.retry_policy {
        Some(policy) => (policy, "explicit retry policy".to_owned()),
        None => inferred(annotations, o.missing_hints.unwrap_or_default()),
    };
    let start_to_close = o.start_to_close_timeout.unwrap_or(DEFAULT_START_TO_CLOSE);
    let mut heartbeat = o.heartbeat_timeout.unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT);
    if heartbeat >= start_to_close {
        heartbeat = start_to_close / 2;
    }
    ResolvedCallOptions {
        start_to_close,
        schedule_to_close: o.schedule_to_close_timeout,
        schedule_to_start: o.schedule_to_start_timeout,
        heartbeat,
        one_attempt: retry_policy.maximum_attempts == Some(1),
        retry_policy,
        retry_reason,
        priority: o.priority,
        search_attributes: o.search_attributes,
        summary: o.summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_protos::temporal::api::common::v1::RetryPolicy;

    #[test]
    fn a_calls_fairness_key_is_its_caller_key_else_its_caller() {
        use durable_mcp_contract::call::{CALLER_HEADER, CALLER_KEY_HEADER};
        let headers = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        // Two /64s of one site: two callers of a call, one key.
        let one = headers(&[(CALLER_HEADER, "per-64-a"), (CALLER_KEY_HEADER, "site")]);
        let two = headers(&[(CALLER_HEADER, "per-64-b"), (CALLER_KEY_HEADER, "site")]);
        let key = |h: &HashMap<String, String>| call_priority(None, caller_key_of(h)).unwrap();
        assert_eq!(key(&one).fairness_key, "site");
        assert_eq!(key(&one), key(&two));
        let older = headers(&[(CALLER_HEADER, "caller")]);
        assert_eq!(key(&older).fairness_key, "caller");
        assert_eq!(caller_key_of(&HashMap::new()), None);
    }

    #[test]
    fn a_calls_fairness_key_is_its_callers_unless_configured() {
        assert_eq!(call_priority(None, None), None);
        assert_eq!(call_priority(None, Some("")), None);
        let callers = call_priority(None, Some("k1")).unwrap();
        assert_eq!(
            (callers.fairness_key.as_str(), callers.priority_key),
            ("k1", 0)
        );
        let keyed = PrioritySpec {
            fairness_key: Some("tenant".into()),
            ..Default::default()
        };
        let configured = call_priority(Some(&keyed), Some("k1")).unwrap();
        assert_eq!(configured.fairness_key, "tenant");
        let weighted = PrioritySpec {
            priority_key: Some(2),
            fairness_weight: Some(3.0),
            ..Default::default()
        };
        let both = call_priority(Some(&weighted), Some("k1")).unwrap();
        assert_eq!((both.fairness_key.as_str(), both.priority_key), ("k1", 2));
        assert_eq!(both.fairness_weight, 3.0);
        let long = "k".repeat(65);
        assert_eq!(
            call_priority(None, Some(&long)),
            None,
            "over 64 bytes: no key"
        );
        assert_eq!(
            call_priority(Some(&weighted), Some(&long))
                .unwrap()
                .fairness_key,
            "",
            "the configured priority, without the key"
        );
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn destructive() -> ToolHints {
        ToolHints {
            destructive: Some(true),
            ..ToolHints::default()
        }
    }

    #[test]
    fn durations_parse_from_humantime_strings() {
        let o: ActivityOptions = serde_json::from_value(serde_json::json!({
            "start_to_close_timeout": "48h",
            "heartbeat_timeout": "1m 30s",
            "retry_policy": { "initial_interval": "250ms", "maximum_attempts": 3 },
        }))
        .unwrap();
        assert_eq!(o.start_to_close_timeout, Some(secs(48 * 3600)));
        assert_eq!(o.heartbeat_timeout, Some(secs(90)));
        let p = o.retry_policy.unwrap();
        assert_eq!(p.initial_interval, Some(Duration::from_millis(250)));
        assert_eq!(p.maximum_attempts, Some(3));
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_rejected() {
        let unknown = serde_json::from_value::<ActivityOptions>(
            serde_json::json!({ "start_to_close": "1s" }),
        );
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown field `start_to_close`")
        );
        let bad = serde_json::from_value::<ActivityOptions>(
            serde_json::json!({ "heartbeat_timeout": "soon" }),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn serializes_only_supplied_keys_as_humantime() {
        let o = ActivityOptions {
            start_to_close_timeout: Some(secs(30)),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&o).unwrap(),
            serde_json::json!({ "start_to_close_timeout": "30s" })
        );
    }

    #[test]
    fn overlay_changes_only_supplied_keys() {
        let base = ActivityOptions {
            start_to_close_timeout: Some(secs(30)),
            heartbeat_timeout: Some(secs(2)),
            summary: Some("base".into()),
            priority: Some(PrioritySpec {
                priority_key: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        };
        let over = ActivityOptions {
            start_to_close_timeout: Some(secs(48 * 3600)),
            retry_policy: Some(RetryPolicySpec {
                maximum_attempts: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        };
        let merged = base.overlay(&over);
        assert_eq!(merged.start_to_close_timeout, Some(secs(48 * 3600)));
        assert_eq!(merged.heartbeat_timeout, Some(secs(2)));
        assert_eq!(merged.summary.as_deref(), Some("base"));
        assert_eq!(merged.priority, base.priority);
        assert_eq!(merged.retry_policy, over.retry_policy);
        assert_eq!(base.overlay(&ActivityOptions::default()), base);
        assert_eq!(ActivityOptions::default().overlay(&base), base);
    }

    #[test]
    fn resolve_applies_defaults_and_inference() {
        let r = resolve(&ActivityOptions::default(), None, &ToolHints::default());
        assert_eq!(r.start_to_close, DEFAULT_START_TO_CLOSE);
        assert_eq!(r.heartbeat, DEFAULT_HEARTBEAT_TIMEOUT);
        assert_eq!(r.retry_policy, RetryPolicySpec::temporal_default());
        assert_eq!(r.retry_reason, "not marked destructive");
        assert!(!r.one_attempt);
        assert_eq!(
            (r.schedule_to_close, r.schedule_to_start, &r.priority),
            (None, None, &None)
        );

        let r = resolve(&ActivityOptions::default(), None, &destructive());
        assert_eq!(r.retry_policy, RetryPolicySpec::one_attempt());
        assert_eq!(
            r.retry_reason,
            "destructive, not idempotent tool: never run twice"
        );
        assert!(r.one_attempt);
    }

    #[test]
    fn missing_hints_can_be_read_as_mcps_defaults() {
        let mcp = ActivityOptions {
            missing_hints: Some(MissingHints::McpDefaults),
            ..Default::default()
        };
        // A tool that annotates nothing: retried, or one attempt under MCP's defaults.
        let r = resolve(&ActivityOptions::default(), None, &ToolHints::default());
        assert!(!r.one_attempt);
        let r = resolve(&mcp, None, &ToolHints::default());
        assert!(r.one_attempt);
        assert_eq!(
            r.retry_reason,
            "destructive, not idempotent tool: never run twice (missing hints read as MCP's defaults)"
        );
        // A tool that says what it is keeps its policy, and the reason says nothing more.
        let said = |read_only, idempotent| ToolHints {
            read_only,
            idempotent,
            destructive: Some(true),
            ..ToolHints::default()
        };
        let r = resolve(&mcp, None, &said(Some(true), Some(false)));
        assert!(!r.one_attempt);
        assert_eq!(r.retry_reason, "read-only tool");
        let r = resolve(&mcp, None, &said(Some(false), Some(true)));
        assert!(!r.one_attempt);
        assert_eq!(r.retry_reason, "destructive but idempotent tool");
        // Only idempotent said: idempotent, so retried.
        let idempotent = ToolHints {
            idempotent: Some(true),
            ..ToolHints::default()
        };
        assert!(!resolve(&mcp, None, &idempotent).one_attempt);
        // A tool's override may set it too, and the explicit policy still wins.
        let r = resolve(
            &ActivityOptions::default(),
            Some(&mcp),
            &ToolHints::default(),
        );
        assert!(r.one_attempt);
        let explicit = ActivityOptions {
            retry_policy: Some(RetryPolicySpec::temporal_default()),
            ..mcp.clone()
        };
        assert!(!resolve(&explicit, None, &ToolHints::default()).one_attempt);
        let parsed: ActivityOptions =
            serde_json::from_value(serde_json::json!({ "missing_hints": "mcp_defaults" })).unwrap();
        assert_eq!(parsed, mcp);
        assert!(
            serde_json::from_value::<ActivityOptions>(
                serde_json::json!({ "missing_hints": "mcp" })
            )
            .is_err()
        );
    }

    #[test]
    fn the_tools_that_say_nothing_of_reruns_are_named_by_how_they_are_read() {
        let tools = [
            serde_json::json!({"name": "plain"}),
            serde_json::json!({"name": "titled", "annotations": {"title": "T", "readOnlyHint": false}}),
            serde_json::json!({"name": "strict"}),
            serde_json::json!({"name": "fixed"}),
            serde_json::json!({"name": "ro", "annotations": {"readOnlyHint": true}}),
            serde_json::json!({"name": "del", "annotations": {"destructiveHint": true}}),
        ];
        let mcp = ActivityOptions {
            missing_hints: Some(MissingHints::McpDefaults),
            ..Default::default()
        };
        let explicit = ActivityOptions {
            retry_policy: Some(RetryPolicySpec::temporal_default()),
            ..Default::default()
        };
        let reading = HintReading {
            upstream: ActivityOptions::default(),
            overrides: [
                ("strict".to_owned(), mcp.clone()),
                ("fixed".to_owned(), explicit),
            ]
            .into(),
        };
        let [retried, once] = reading.notes(&tools);
        let retried = retried.unwrap();
        assert!(retried.starts_with("plain, titled: "), "{retried}");
        assert!(retried.contains("retries each"), "{retried}");
        let once = once.unwrap();
        assert!(
            once.starts_with("strict: ") && once.contains("one attempt"),
            "{once}"
        );
        assert_eq!(HintReading::default().notes(&tools[4..]), [None, None]);
        let all_once = HintReading {
            upstream: mcp,
            overrides: BTreeMap::new(),
        };
        let [retried, once] = all_once.notes(&tools[..2]);
        assert_eq!(retried, None);
        assert!(once.unwrap().starts_with("plain, titled: "));
    }

    #[test]
    fn explicit_retry_policy_replaces_inference() {
        let upstream = ActivityOptions {
            start_to_close_timeout: Some(secs(30)),
            ..Default::default()
        };
        let over = ActivityOptions {
            retry_policy: Some(RetryPolicySpec {
                maximum_attempts: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = resolve(&upstream, Some(&over), &destructive());
        assert_eq!(r.start_to_close, secs(30));
        assert_eq!(r.retry_policy.maximum_attempts, Some(3));
        assert_eq!(r.retry_reason, "explicit retry policy");
        assert!(!r.one_attempt);

        // An explicit single attempt counts as one-attempt even for a read-only tool.
        let once = ActivityOptions {
            retry_policy: Some(RetryPolicySpec::one_attempt()),
            ..Default::default()
        };
        let r = resolve(
            &once,
            None,
            &ToolHints {
                read_only: Some(true),
                ..Default::default()
            },
        );
        assert!(r.one_attempt);
        assert_eq!(r.retry_reason, "explicit retry policy");
    }

    #[test]
    fn heartbeat_is_clamped_below_start_to_close() {
        let short = ActivityOptions {
            start_to_close_timeout: Some(secs(4)),
            ..Default::default()
        };
        assert_eq!(
            resolve(&short, None, &ToolHints::default()).heartbeat,
            secs(2)
        );
        let equal = ActivityOptions {
            start_to_close_timeout: Some(secs(10)),
            heartbeat_timeout: Some(secs(10)),
            ..Default::default()
        };
        assert_eq!(
            resolve(&equal, None, &ToolHints::default()).heartbeat,
            secs(5)
        );
        let fine = ActivityOptions {
            heartbeat_timeout: Some(secs(20)),
            ..Default::default()
        };
        assert_eq!(
            resolve(&fine, None, &ToolHints::default()).heartbeat,
            secs(20)
        );
    }

    #[test]
    fn resolved_options_round_trip_through_json() {
        let over = ActivityOptions {
            schedule_to_close_timeout: Some(secs(3600)),
            priority: Some(PrioritySpec {
                fairness_key: Some("tenant-a".into()),
                ..Default::default()
            }),
            search_attributes: Some(BTreeMap::from([(
                "CustomerId".into(),
                serde_json::json!("c-1"),
            )])),
            summary: Some("report".into()),
            ..Default::default()
        };
        let r = resolve(
            &ActivityOptions::default(),
            Some(&over),
            &ToolHints::default(),
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["start_to_close"], "1m");
        assert_eq!(json["schedule_to_close"], "1h");
        assert_eq!(
            serde_json::from_value::<ResolvedCallOptions>(json).unwrap(),
            r
        );
    }

    #[test]
    fn protos_leave_absent_keys_to_the_server() {
        let p = RetryPolicySpec::temporal_default().to_proto();
        assert_eq!(p, RetryPolicy::default());
        assert_eq!(
            RetryPolicySpec::one_attempt().to_proto().maximum_attempts,
            1
        );
        let p = RetryPolicySpec {
            initial_interval: Some(Duration::from_millis(1500)),
            backoff_coefficient: Some(1.5),
            maximum_interval: Some(secs(60)),
            maximum_attempts: Some(5),
            non_retryable_error_types: vec!["ToolCallOutcomeUnknown".into()],
        }
        .to_proto();
        let initial = p.initial_interval.unwrap();
        assert_eq!((initial.seconds, initial.nanos), (1, 500_000_000));
        assert_eq!(p.maximum_interval.unwrap().seconds, 60);
        assert_eq!((p.backoff_coefficient, p.maximum_attempts), (1.5, 5));
        assert_eq!(p.non_retryable_error_types, ["ToolCallOutcomeUnknown"]);

        assert_eq!(PrioritySpec::default().to_proto(), Priority::default());
        let p = PrioritySpec {
            priority_key: Some(1),
            fairness_key: Some("a".into()),
            fairness_weight: Some(2.0),
        };
        assert_eq!(
            p.to_proto(),
            Priority {
                priority_key: 1,
                fairness_key: "a".into(),
                fairness_weight: 2.0
            }
        );
    }

    #[test]
    fn validate_names_the_offending_key() {
        let check = |json: serde_json::Value| {
            serde_json::from_value::<ActivityOptions>(json)
                .unwrap()
                .validate()
                .err()
                .map(|(key, _)| key)
        };
        assert_eq!(
            check(serde_json::json!({ "start_to_close_timeout": "30s" })),
            None
        );
        assert_eq!(
            check(serde_json::json!({ "heartbeat_timeout": "0s" })),
            Some("heartbeat_timeout")
        );
        assert_eq!(
            check(serde_json::json!({ "retry_policy": { "maximum_attempts": -1 } })),
            Some("retry_policy.maximum_attempts")
        );
        assert_eq!(
            check(serde_json::json!({ "retry_policy": { "backoff_coefficient": 0.5 } })),
            Some("retry_policy.backoff_coefficient")
        );
        assert_eq!(
            check(
                serde_json::json!({ "retry_policy": { "initial_interval": "10s", "maximum_interval": "1s" } })
            ),
            Some("retry_policy.maximum_interval")
        );
        assert_eq!(
            check(serde_json::json!({ "priority": { "priority_key": 0 } })),
            Some("priority.priority_key")
        );
        assert_eq!(
            check(serde_json::json!({ "priority": { "fairness_key": "k".repeat(65) } })),
            Some("priority.fairness_key")
        );
        assert_eq!(
            check(serde_json::json!({ "priority": { "fairness_weight": 0.0 } })),
            Some("priority.fairness_weight")
        );
    }
}
