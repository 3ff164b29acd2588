//! Retry inference from MCP tool annotations.
//!
//! When no explicit retry policy is configured for a tool, its annotations decide. Only a tool
//! that *explicitly* says it is destructive and does not say it is idempotent gets a single
//! attempt: running it twice could do its damage twice. Every other tool gets Temporal's default
//! retry policy with no attempt cap (bounded by the timeouts), which is what makes a call
//! durable across worker and upstream failures.
//!
//! MCP's own defaults for absent hints are pessimistic (`destructiveHint` defaults to true), but
//! most servers annotate nothing; treating every unannotated tool as destructive would give
//! almost every tool a single attempt, so an absent hint counts as "not said". An upstream (or
//! a tool) can ask for MCP's reading instead (`missing_hints = "mcp_defaults"`,
//! [`ToolHints::with_mcp_defaults`]); the proxy names the tools whose retries rest on a missing
//! hint when it starts ([`unannotated_note`]).
//! `readOnlyHint: true` wins over the other hints, as MCP defines `destructiveHint` and
//! `idempotentHint` as meaningful only for tools that are not read-only. `openWorldHint` does not
//! affect retries.
//!
//! | `readOnlyHint` | `destructiveHint` | `idempotentHint` | attempts  | reason                                              |
//! |----------------|-------------------|------------------|-----------|-----------------------------------------------------|
//! | `true`         | any               | any              | unlimited | `read-only tool`                                    |
//! | not `true`     | `true`            | not `true`       | **1**     | `destructive, not idempotent tool: never run twice` |
//! | not `true`     | `true`            | `true`           | unlimited | `destructive but idempotent tool`                   |
//! | not `true`     | not `true`        | any              | unlimited | `not marked destructive`                            |
//!
//! "not `true`" means `false` or absent; "unlimited" is Temporal's default retry policy.
//! An explicit retry policy in the call options replaces this table.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use temporalio_protos::temporal::api::common::v1::RetryPolicy;

use durable_mcp_runtime::temporal::proto_duration;

/// A Temporal retry policy; an absent key means the server's default for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicySpec {
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub initial_interval: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_coefficient: Option<f64>,
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub maximum_interval: Option<Duration>,
    /// 0 means unlimited (bounded only by the timeouts); 1 means no retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_attempts: Option<i32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub non_retryable_error_types: Vec<String>,
}

impl RetryPolicySpec {
    /// Exactly one attempt: for tools that must never run twice.
    pub fn one_attempt() -> Self {
        Self {
            maximum_attempts: Some(1),
            ..Self::default()
        }
    }

    /// Temporal's default policy: every key left to the server (1 s initial interval, factor 2,
    /// 100 s cap) and no attempt cap.
    pub fn temporal_default() -> Self {
        Self::default()
    }

    /// The protobuf policy; absent keys become zero, which the server reads as its default.
    pub fn to_proto(&self) -> RetryPolicy {
        RetryPolicy {
            initial_interval: self.initial_interval.map(proto_duration),
            backoff_coefficient: self.backoff_coefficient.unwrap_or(0.0),
            maximum_interval: self.maximum_interval.map(proto_duration),
            maximum_attempts: self.maximum_attempts.unwrap_or(0),
            non_retryable_error_types: self.non_retryable_error_types.clone(),
        }
    }
}

/// The behaviour hints of an MCP tool's `annotations`; `None` when absent or not a boolean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// Reads `annotations.readOnlyHint`, `destructiveHint`, `idempotentHint` and `openWorldHint`
    /// from an MCP Tool JSON object. Anything missing or malformed is `None`: a hint that cannot
    /// be read was not given.
    pub fn from_tool_json(tool: &serde_json::Value) -> Self {
        let annotations = tool.get("annotations");
        let hint = |key: &str| annotations?.get(key)?.as_bool();
        Self {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
            open_world: hint("openWorldHint"),
        }
    }
}

impl ToolHints {
    /// These hints with each the tool did not give read as MCP's default for it:
    /// `readOnlyHint: false`, `destructiveHint: true`, `idempotentHint: false`,
    /// `openWorldHint: true` (the `missing_hints = "mcp_defaults"` reading, R-PRX-38).
    pub fn with_mcp_defaults(self) -> Self {
        Self {
            read_only: self.read_only.or(Some(false)),
            destructive: self.destructive.or(Some(true)),
            idempotent: self.idempotent.or(Some(false)),
            open_world: self.open_world.or(Some(true)),
        }
    }

    /// Whether the tool's retries rest on hints it does not give: it says neither that it is
    /// read-only, nor that it is idempotent, nor whether it is destructive. Such a tool is
    /// retried and never runs inline unless named (R-PRX-38, R-PRX-30), where MCP's defaults
    /// would give it one attempt; the proxy names such tools when it starts.
    pub fn rerun_unsaid(&self) -> bool {
        self.read_only != Some(true) && self.idempotent != Some(true) && self.destructive.is_none()
    }
}

/// What a listing's tools that say nothing of reruns ([`ToolHints::rerun_unsaid`]) mean, for
/// the proxy's start-up log and third-party mode: `None` when there are none.
pub fn unannotated_note(names: &[String], read_as_mcp_defaults: bool) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let which = names.join(", ");
    Some(if read_as_mcp_defaults {
        format!(
            "{which}: no hint says whether they are destructive; read as MCP's defaults \
             (missing_hints = \"mcp_defaults\"), each gets one attempt"
        )
    } else {
        format!(
            "{which}: no hint says whether they are read-only, idempotent or destructive. \
             MCP's defaults read such a tool as destructive and not idempotent; the proxy \
             retries each until its timeouts run out (a failed attempt may have run the tool) \
             and runs none inline unless its own override says execution = \"inline\". \
             Annotate them, or set missing_hints = \"mcp_defaults\" on the upstream to give \
             each one attempt"
        )
    })
}

/// An inferred retry policy and the table row that chose it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryDecision {
    pub policy: RetryPolicySpec,
    pub reason: &'static str,
}

/// The retry policy for a tool with these hints, per the table in the module doc.
pub fn infer(h: &ToolHints) -> RetryDecision {
    let (policy, reason) = match (h.read_only, h.destructive, h.idempotent) {
        (Some(true), _, _) => (RetryPolicySpec::temporal_default(), "read-only tool"),
        (_, Some(true), Some(true)) => (
            RetryPolicySpec::temporal_default(),
            "destructive but idempotent tool",
        ),
        (_, Some(true), _) => (
            RetryPolicySpec::one_attempt(),
            "destructive, not idempotent tool: never run twice",
        ),
        _ => (
            RetryPolicySpec::temporal_default(),
            "not marked destructive",
        ),
    };
    RetryDecision { policy, reason }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const T: Option<bool> = Some(true);
    const F: Option<bool> = Some(false);
    const N: Option<bool> = None;

    const READ_ONLY: &str = "read-only tool";
    const ONCE: &str = "destructive, not idempotent tool: never run twice";
    const IDEMPOTENT: &str = "destructive but idempotent tool";
    const NOT_DESTRUCTIVE: &str = "not marked destructive";

    #[test]
    fn mcps_defaults_fill_only_missing_hints_and_tools_that_say_nothing_are_named() {
        let none = ToolHints::default();
        let read = none.with_mcp_defaults();
        assert_eq!(
            (read.read_only, read.destructive, read.idempotent),
            (F, T, F)
        );
        assert_eq!(read.open_world, T);
        assert_eq!(infer(&read).policy.maximum_attempts, Some(1));
        let said = ToolHints {
            read_only: F,
            destructive: F,
            idempotent: T,
            open_world: F,
        };
        assert_eq!(said.with_mcp_defaults(), said);
        assert!(none.rerun_unsaid());
        assert!(
            ToolHints {
                read_only: F,
                open_world: T,
                ..none
            }
            .rerun_unsaid()
        );
        assert!(
            !ToolHints {
                read_only: T,
                ..none
            }
            .rerun_unsaid()
        );
        assert!(
            !ToolHints {
                idempotent: T,
                ..none
            }
            .rerun_unsaid()
        );
        assert!(
            !ToolHints {
                destructive: F,
                ..none
            }
            .rerun_unsaid()
        );
        assert!(
            !ToolHints {
                destructive: T,
                ..none
            }
            .rerun_unsaid()
        );
        assert_eq!(unannotated_note(&[], false), None);
        let names = ["a".to_owned(), "b".to_owned()];
        let retried = unannotated_note(&names, false).unwrap();
        assert!(
            retried.starts_with("a, b: ") && retried.contains("retries each"),
            "{retried}"
        );
        assert!(
            retried.contains("missing_hints = \"mcp_defaults\""),
            "{retried}"
        );
        let once = unannotated_note(&names, true).unwrap();
        assert!(once.contains("one attempt"), "{once}");
    }

    #[test]
    fn every_hint_combination_matches_the_table() {
        // (readOnly, destructive, idempotent) => (max attempts: Some(1) or None = unlimited, reason)
        #[rustfmt::skip]
        let table: [_; 27] = [
            (T, T, T, None,    READ_ONLY),
            (T, T, F, None,    READ_ONLY),
            (T, T, N, None,    READ_ONLY),
            (T, F, T, None,    READ_ONLY),
            (T, F, F, None,    READ_ONLY),
            (T, F, N, None,    READ_ONLY),
            (T, N, T, None,    READ_ONLY),
            (T, N, F, None,    READ_ONLY),
            (T, N, N, None,    READ_ONLY),
            (F, T, T, None,    IDEMPOTENT),
            (F, T, F, Some(1), ONCE),
            (F, T, N, Some(1), ONCE),
            (F, F, T, None,    NOT_DESTRUCTIVE),
            (F, F, F, None,    NOT_DESTRUCTIVE),
            (F, F, N, None,    NOT_DESTRUCTIVE),
            (F, N, T, None,    NOT_DESTRUCTIVE),
            (F, N, F, None,    NOT_DESTRUCTIVE),
            (F, N, N, None,    NOT_DESTRUCTIVE),
            (N, T, T, None,    IDEMPOTENT),
            (N, T, F, Some(1), ONCE),
            (N, T, N, Some(1), ONCE),
            (N, F, T, None,    NOT_DESTRUCTIVE),
            (N, F, F, None,    NOT_DESTRUCTIVE),
            (N, F, N, None,    NOT_DESTRUCTIVE),
            (N, N, T, None,    NOT_DESTRUCTIVE),
            (N, N, F, None,    NOT_DESTRUCTIVE),
            (N, N, N, None,    NOT_DESTRUCTIVE),
        ];
        for (read_only, destructive, idempotent, attempts, reason) in table {
            for open_world in [T, F, N] {
                let hints = ToolHints {
                    read_only,
                    destructive,
                    idempotent,
                    open_world,
                };
                let expected_policy = match attempts {
                    Some(1) => RetryPolicySpec::one_attempt(),
                    _ => RetryPolicySpec::temporal_default(),
                };
                assert_eq!(
                    infer(&hints),
                    RetryDecision {
                        policy: expected_policy,
                        reason
                    },
                    "{hints:?}"
                );
            }
        }
    }

    #[test]
    fn hints_are_read_from_tool_json() {
        let tool = json!({
            "name": "delete_file",
            "annotations": { "readOnlyHint": false, "destructiveHint": true, "openWorldHint": "yes" },
        });
        assert_eq!(
            ToolHints::from_tool_json(&tool),
            ToolHints {
                read_only: Some(false),
                destructive: Some(true),
                idempotent: None,
                open_world: None
            }
        );
        let all = json!({ "annotations": {
            "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false,
        }});
        assert_eq!(
            ToolHints::from_tool_json(&all),
            ToolHints {
                read_only: Some(true),
                destructive: Some(false),
                idempotent: Some(true),
                open_world: Some(false)
            }
        );
        for no_hints in [
            json!({ "name": "x" }),
            json!({ "annotations": null }),
            json!({ "annotations": [] }),
            json!(7),
        ] {
            assert_eq!(ToolHints::from_tool_json(&no_hints), ToolHints::default());
        }
    }

    /// Any JSON an annotation might hold, well-formed or not.
    fn annotation_value() -> impl Strategy<Value = serde_json::Value> {
        prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z]{0,6}".prop_map(serde_json::Value::from),
        ]
    }

    proptest! {
        #[test]
        fn read_only_tools_never_get_one_attempt(
            destructive in annotation_value(),
            idempotent in annotation_value(),
            open_world in annotation_value(),
        ) {
            let tool = json!({ "annotations": {
                "readOnlyHint": true,
                "destructiveHint": destructive,
                "idempotentHint": idempotent,
                "openWorldHint": open_world,
            }});
            let decision = infer(&ToolHints::from_tool_json(&tool));
            prop_assert_ne!(decision.policy.maximum_attempts, Some(1));
            prop_assert_eq!(decision.reason, READ_ONLY);
        }
    }
}

/// Property tests: a listed tool of any shape gives hints only from the booleans it wrote
/// (R-PRX-38, R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::answer;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #[test]
        fn a_tool_of_any_shape_gives_the_hints_it_wrote(tool in answer(), hints in any::<[Option<bool>; 4]>()) {
            let _ = infer(&ToolHints::from_tool_json(&tool));
            let names = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];
            let annotations: serde_json::Map<_, _> = names
                .iter()
                .zip(hints)
                .filter_map(|(n, h)| Some(((*n).to_owned(), json!(h?))))
                .collect();
            let written = json!({"name": "t", "annotations": annotations, "_meta": tool});
            let [read_only, destructive, idempotent, open_world] = hints;
            let expected = ToolHints { read_only, destructive, idempotent, open_world };
            prop_assert_eq!(ToolHints::from_tool_json(&written), expected);
        }
    }
}
