//! The upstream the official suite's server scenarios call through the durable path: the mock
//! upstream serving the tools those scenarios name, built from the requirements each scenario
//! states ("Server Implementation Requirements"), not from the suite's own reference server,
//! whose code is neither published to a registry nor ours to ship (R-CNF-21).
//!
//! Tools for 0.1.16's tools scenarios (`test_simple_text` ... `json_schema_2020_12_tool`) and
//! for 0.2's tasks scenarios (`greet`, `slow_compute`, `failing_job`, `protocol_error_job`,
//! `confirm_delete`, `multi_input`) and its `input-required-result-*` scenarios that a tool
//! asking one round serves (`test_input_required_result_elicitation` and four more), and the
//! diagnostic tools of 0.2's `server-stateless` (`test_missing_capability`,
//! `test_streaming_elicitation`, `test_logging_tool`). `test_tool_with_task` (round 1 asks,
//! round 2 becomes the upstream's task) has no mock behavior, so `tasks-mrtr-composition` finds
//! no such tool.

use serde_json::{Value, json};

use crate::fixtures::{
    Behavior, ToolSpec, UpstreamSpec,
    server::{TINY_PNG_BASE64, tiny_wav_base64},
};

/// The fixture's spec.
pub fn spec() -> UpstreamSpec {
    let mut tools: Vec<ToolSpec> = tools_scenario_tools();
    tools.extend(tasks_scenario_tools());
    tools.extend(input_required_tools());
    tools.extend(stateless_scenario_tools());
    UpstreamSpec {
        name: "official-suite-fixture".into(),
        tools,
        instructions: None,
    }
}

/// A tool named `name` with `behavior`, an input schema and a description (which the suite's
/// `tools-list` requires of every tool).
fn tool(name: &str, description: &str, input_schema: Value, behavior: Behavior) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        title: None,
        description: Some(description.into()),
        annotations: None,
        input_schema: Some(input_schema),
        output_schema: None,
        meta: None,
        execution: None,
        icons: None,
        behavior,
    }
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

fn strings(names: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| ((*n).to_owned(), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": properties, "required": names})
}

fn written(content: Value) -> Behavior {
    Behavior::Written {
        result: json!({"content": content}),
        ms: 0,
    }
}

fn asks(key: &str, request: Value) -> Behavior {
    Behavior::AskWritten {
        requests: [(key.to_owned(), request)].into_iter().collect(),
    }
}

fn elicitation(message: &str, schema: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
                                                       "requestedSchema": schema}})
}

fn tools_scenario_tools() -> Vec<ToolSpec> {
    let text = json!({"type": "text", "text": "This is a simple text response for testing."});
    let image = json!({"type": "image", "data": TINY_PNG_BASE64, "mimeType": "image/png"});
    let audio = json!({"type": "audio", "data": tiny_wav_base64(), "mimeType": "audio/wav"});
    let resource = json!({"type": "resource", "resource": {"uri": "test://embedded-resource",
        "mimeType": "text/plain", "text": "This is an embedded resource content."}});
    let prompt = json!({"role": "user",
        "content": {"type": "text", "text": "Test prompt for sampling"}});
    let sampling = json!({"method": "sampling/createMessage",
        "params": {"messages": [prompt], "maxTokens": 100}});
    let user = json!({"type": "object", "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"}},
        "required": ["username", "email"]});
    vec![
        tool(
            "test_simple_text",
            "Returns simple text",
            no_arguments(),
            written(json!([text])),
        ),
        tool(
            "test_image_content",
            "Returns an image",
            no_arguments(),
            written(json!([image])),
        ),
        tool(
            "test_audio_content",
            "Returns audio",
            no_arguments(),
            written(json!([audio])),
        ),
        tool(
            "test_embedded_resource",
            "Returns an embedded resource",
            no_arguments(),
            written(json!([resource])),
        ),
        tool(
            "test_multiple_content_types",
            "Returns text, an image and a resource",
            no_arguments(),
            written(json!([text, image, resource])),
        ),
        tool(
            "test_tool_with_logging",
            "Logs three messages while it runs",
            no_arguments(),
            Behavior::UntiedLog {
                messages: [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .map(String::from)
                .to_vec(),
                every_ms: 50,
            },
        ),
        tool(
            "test_error_handling",
            "Always fails",
            no_arguments(),
            Behavior::IsError {
                text: "This tool intentionally returns an error for testing".into(),
            },
        ),
        tool(
            "test_tool_with_progress",
            "Reports progress",
            no_arguments(),
            Behavior::Progress { steps: 3, ms: 50 },
        ),
        tool(
            "test_sampling",
            "Asks the client's model",
            strings(&["prompt"]),
            asks("sample", sampling),
        ),
        tool(
            "test_elicitation",
            "Asks the user",
            strings(&["message"]),
            asks("user", elicitation("Please provide your information", user)),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Asks with defaults",
            no_arguments(),
            asks("defaults", elicitation("Defaults", defaults_form())),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Asks with every enum form",
            no_arguments(),
            asks("enums", elicitation("Enums", enums_form())),
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json_schema_2020_12(),
            Behavior::Echo,
        ),
    ]
}

/// SEP-1034: a default for every primitive type.
fn defaults_form() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"],
                   "default": "active"},
        "verified": {"type": "boolean", "default": true}}})
}

/// SEP-1330: the five enum forms.
fn enums_form() -> Value {
    let titled = |prefix: &str, titles: [&str; 3]| {
        let items: Vec<Value> = titles
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"const": format!("{prefix}{}", i + 1), "title": t}))
            .collect();
        Value::Array(items)
    };
    json!({"type": "object", "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string",
            "oneOf": titled("value", ["First Option", "Second Option", "Third Option"])},
        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array",
            "items": {"anyOf":
                titled("value", ["First Choice", "Second Choice", "Third Choice"])}}}})
}

fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": false
    })
}

fn tasks_scenario_tools() -> Vec<ToolSpec> {
    let confirm = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}},
        "required": ["confirm"]});
    let name_and_confirm = json!({"type": "object", "properties": {"name": {"type": "string"},
        "confirm": {"type": "boolean"}}, "required": ["name", "confirm"]});
    let seconds = json!({"type": "object", "properties": {"seconds": {"type": "integer"},
        "label": {"type": "string"}}});
    let mut failing = tool(
        "failing_job",
        "Fails as a tool error",
        no_arguments(),
        Behavior::IsError {
            text: "failing_job failed".into(),
        },
    );
    failing.execution = Some(json!({"taskSupport": "required"}));
    let mut slow = tool(
        "slow_compute",
        "Sleeps `seconds`, then answers",
        seconds,
        Behavior::Sleep { ms: 0 },
    );
    slow.execution = Some(json!({"taskSupport": "optional"}));
    let mut broken = tool(
        "protocol_error_job",
        "Fails with a protocol error",
        no_arguments(),
        Behavior::JsonRpcError {
            code: -32603,
            message: "internal failure".into(),
            data: None,
        },
    );
    broken.execution = Some(json!({"taskSupport": "optional"}));
    let both = [("first", "First?"), ("second", "Second?")].map(|(key, message)| {
        (
            key.to_owned(),
            elicitation(message, name_and_confirm.clone()),
        )
    });
    vec![
        tool(
            "greet",
            "Says hello",
            strings(&["name"]),
            written(json!([{"type": "text", "text": "Hello, World!"}])),
        ),
        slow,
        failing,
        broken,
        tool(
            "confirm_delete",
            "Asks before it deletes",
            strings(&["filename"]),
            asks("confirm", elicitation("Delete the file?", confirm)),
        ),
        tool(
            "multi_input",
            "Asks two questions at once",
            no_arguments(),
            Behavior::AskWritten {
                requests: both.into_iter().collect(),
            },
        ),
    ]
}

/// 0.2's `input-required-result-*` tools (SEP-2322 at 2026-07-28): each asks in its first round
/// and answers its content once every key is answered.
fn input_required_tools() -> Vec<ToolSpec> {
    let name = json!({"type": "object", "properties": {"name": {"type": "string"}},
        "required": ["name"]});
    let user_name = || elicitation("What is your name?", name.clone());
    let question = json!({"role": "user",
        "content": {"type": "text", "text": "What is the capital of France?"}});
    let capital = json!({"method": "sampling/createMessage",
        "params": {"messages": [question], "maxTokens": 100}});
    let roots = json!({"method": "roots/list"});
    let all = [
        ("user_name", user_name()),
        ("capital_question", capital.clone()),
        ("client_roots", roots.clone()),
    ]
    .map(|(key, request)| (key.to_owned(), request));
    vec![
        tool(
            "test_input_required_result_elicitation",
            "Asks the user's name",
            no_arguments(),
            asks("user_name", user_name()),
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model",
            no_arguments(),
            asks("capital_question", capital),
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks the client's roots",
            no_arguments(),
            asks("client_roots", roots),
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks the user, the model and the roots at once",
            no_arguments(),
            Behavior::AskWritten {
                requests: all.into_iter().collect(),
            },
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks the user's name; its round state is the connector's, signed",
            no_arguments(),
            asks("user_name", user_name()),
        ),
    ]
}

/// The diagnostic tools 0.2's `server-stateless` calls: one that needs the `sampling` client
/// capability (a caller that did not declare it gets -32021), one that asks the user (its
/// answer is an `InputRequiredResult`, never a request on the stream), and one that logs
/// (nothing reaches a request that named no `logLevel`). Its `test_trigger_*_change` hooks are
/// left out: the checks that use them are warnings (SHOULD), and the mock's tools do not change.
fn stateless_scenario_tools() -> Vec<ToolSpec> {
    let prompt = json!({"role": "user", "content": {"type": "text", "text": "Say hello"}});
    let sampling = json!({"method": "sampling/createMessage",
        "params": {"messages": [prompt], "maxTokens": 10}});
    let name = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    vec![
        tool(
            "test_missing_capability",
            "Asks the client's model, which needs the sampling capability",
            no_arguments(),
            asks("sample", sampling),
        ),
        tool(
            "test_streaming_elicitation",
            "Asks the user's name",
            no_arguments(),
            asks("user_name", elicitation("What is your name?", name)),
        ),
        tool(
            "test_logging_tool",
            "Logs at info, then answers",
            no_arguments(),
            Behavior::Log {
                levels: vec!["info".into()],
                ms: 0,
                every_ms: 0,
                untied: false,
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_has_every_tool_the_scenarios_call_once() {
        let spec = spec();
        let mut names: Vec<&str> = spec.tools.iter().map(|t| t.name.as_str()).collect();
        for name in [
            "test_simple_text",
            "test_tool_with_logging",
            "test_elicitation",
            "json_schema_2020_12_tool",
            "greet",
            "slow_compute",
            "multi_input",
            "test_missing_capability",
            "test_streaming_elicitation",
            "test_logging_tool",
        ] {
            assert!(names.contains(&name), "{name}: {names:?}");
        }
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "unique names");
        assert!(
            spec.tools
                .iter()
                .all(|t| t.description.is_some() && t.input_schema.is_some())
        );
        // The spec travels as JSON to the mock upstream's --spec.
        let back: UpstreamSpec =
            serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(back.tools.len(), count);
    }
}
