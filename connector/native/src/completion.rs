//! Completions of a native service's prompt arguments and resource-template variables
//! (R-NAT-8): a prompt or template given a handler with `.completion(..)` answers MCP
//! `completion/complete` for it through R-NXC-8's `complete_argument` operation, bounded as
//! MCP's `CompleteResult` says (at most 100 values, `total` and `hasMore` telling how many
//! there were).
//!
//! ```no_run
//! # use durable_mcp_native::{CompletionRequest, Prompt, PromptMessages, ToolFailure};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)]
//! # struct Topic { topic: String }
//! # async fn summarize(_: Topic) -> Result<PromptMessages, ToolFailure> { Ok(PromptMessages::new()) }
//! async fn topics(asked: CompletionRequest) -> Result<Vec<String>, ToolFailure> {
//!     let known = ["tides", "time", "trees"];
//!     Ok(known.iter().filter(|t| t.starts_with(&asked.value)).map(|t| t.to_string()).collect())
//! }
//! let prompt = Prompt::new("summarize", summarize).completion(topics);
//! ```

use std::{collections::BTreeMap, future::Future, sync::Arc};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::result::ToolFailure;

/// MCP's cap on the values of one `CompleteResult`.
pub const MAX_COMPLETION_VALUES: usize = 100;

/// What a completion handler is asked: MCP `completion/complete`'s argument and context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionRequest {
    /// The prompt argument or template variable being completed.
    pub argument: String,
    /// What the caller has typed of it so far.
    pub value: String,
    /// The other arguments or variables the caller already chose (MCP `context.arguments`).
    pub arguments: BTreeMap<String, String>,
}

/// A completion handler, boxed.
pub(crate) type CompleteFn = Arc<
    dyn Fn(CompletionRequest) -> BoxFuture<'static, Result<Vec<String>, ToolFailure>> + Send + Sync,
>;

/// Boxes `complete`: `async fn(CompletionRequest) -> Result<Vec<String>, ToolFailure>`.
pub(crate) fn complete_fn<F, Fut>(complete: F) -> CompleteFn
where
    F: Fn(CompletionRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<String>, ToolFailure>> + Send + 'static,
{
    Arc::new(move |asked| Box::pin(complete(asked)))
}

/// What `completion/complete`'s `ref` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reference {
    /// `ref/prompt`: a prompt, by name.
    Prompt(String),
    /// `ref/resource`: a resource template, by its URI template.
    Template(String),
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Prompt(name) => write!(f, "prompt {name:?}"),
            Reference::Template(uri) => write!(f, "resource template {uri:?}"),
        }
    }
}

/// The reference and the request of `completion/complete` params, or why they are not one
/// (an invalid-params message).
pub(crate) fn parse(params: &Value) -> Result<(Reference, CompletionRequest), String> {
    let null = Value::Null;
    let reference = params.get("ref").unwrap_or(&null);
    let reference = match (reference.get("type").and_then(Value::as_str), reference) {
        (Some("ref/prompt"), r) => Reference::Prompt(text(r, "name", "ref")?),
        (Some("ref/resource"), r) => Reference::Template(text(r, "uri", "ref")?),
        _ => {
            return Err(
                "completion/complete needs a \"ref\" of type \"ref/prompt\" or \"ref/resource\""
                    .into(),
            );
        }
    };
    let argument = params.get("argument").unwrap_or(&null);
    let arguments = params
        .pointer("/context/arguments")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let asked = CompletionRequest {
        argument: text(argument, "name", "argument")?,
        value: text(argument, "value", "argument")?,
        arguments,
    };
    Ok((reference, asked))
}

/// `object[key]` as a string, or the invalid-params message saying it is missing.
fn text(object: &Value, key: &str, what: &str) -> Result<String, String> {
    object
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("completion/complete needs \"{what}\" with a \"{key}\" string"))
}

/// The `CompleteResult` of `values`: the first [`MAX_COMPLETION_VALUES`], with `total` (how
/// many there were) and `hasMore` (whether some were left out).
pub fn complete_result(mut values: Vec<String>) -> Value {
    let total = values.len();
    values.truncate(MAX_COMPLETION_VALUES);
    json!({"completion": {
        "values": values,
        "total": total,
        "hasMore": total > MAX_COMPLETION_VALUES,
    }})
}

/// The variable names of an RFC 6570 URI template, in order: `{id}`, `{+path}`,
/// `{?q,lang}`, `{list*}` and `{name:3}` name `id`, `path`, `q`, `lang`, `list` and `name`.
pub fn template_variables(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let expression = &rest[open + 1..open + close];
        let expression = expression.trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for spec in expression.split(',') {
            let name = spec.split(':').next().unwrap_or_default();
            let name = name.trim_end_matches('*');
            if !name.is_empty() {
                names.push(name.to_owned());
            }
        }
        rest = &rest[open + close + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_100_values_with_total_and_has_more() {
        let few = complete_result(vec!["a".into(), "b".into()]);
        assert_eq!(
            few,
            json!({"completion": {"values": ["a", "b"], "total": 2, "hasMore": false}})
        );
        let many: Vec<String> = (0..250).map(|i| format!("v{i}")).collect();
        let capped = complete_result(many);
        let values = capped["completion"]["values"].as_array().unwrap();
        assert_eq!(values.len(), MAX_COMPLETION_VALUES);
        assert_eq!(values[0], "v0");
        assert_eq!(values[99], "v99");
        assert_eq!(capped["completion"]["total"], 250);
        assert_eq!(capped["completion"]["hasMore"], true);
        let exactly: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        assert_eq!(complete_result(exactly)["completion"]["hasMore"], false);
    }

    #[test]
    fn params_name_the_reference_argument_and_context() {
        let (reference, asked) = parse(&json!({
            "ref": {"type": "ref/prompt", "name": "review"},
            "argument": {"name": "path", "value": "sr"},
            "context": {"arguments": {"depth": "2", "n": 3}}}))
        .unwrap();
        assert_eq!(reference, Reference::Prompt("review".into()));
        assert_eq!(asked.argument, "path");
        assert_eq!(asked.value, "sr");
        assert_eq!(
            asked.arguments,
            BTreeMap::from([("depth".to_owned(), "2".to_owned())])
        );
        let (reference, _) = parse(&json!({
            "ref": {"type": "ref/resource", "uri": "reports://{id}"},
            "argument": {"name": "id", "value": ""}}))
        .unwrap();
        assert_eq!(reference, Reference::Template("reports://{id}".into()));
        for bad in [
            json!({"ref": {"type": "ref/tool", "name": "x"}, "argument": {"name": "a", "value": ""}}),
            json!({"ref": {"type": "ref/prompt"}, "argument": {"name": "a", "value": ""}}),
            json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"value": ""}}),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn template_variables_are_read_from_every_expression() {
        assert_eq!(template_variables("reports://{id}/text"), ["id"]);
        assert_eq!(
            template_variables("files://{+path}{?q,lang}{#frag}{list*}{name:3}"),
            ["path", "q", "lang", "frag", "list", "name"]
        );
        assert!(template_variables("docs://readme").is_empty());
        assert!(template_variables("broken://{id").is_empty());
    }
}
