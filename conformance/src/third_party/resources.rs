//! The `resources-and-prompts` check (R-CNF-20): the server's resources, resource templates and
//! prompts are read-only by nature, so each list, and a few of the items listed (reads of the
//! first resources, gets of the first prompts), is asked directly (raw, as the server wrote it)
//! and through the durable path (the proxy's feature operations, R-NXC-8, R-PRX-32); each item
//! is equal or different, and one line for the server sums them up.

use durable_mcp::{
    contract::features::{self, Feature},
    proxy::upstream::{UpstreamClient, UpstreamError},
};
use serde_json::{Map, Value, json};

use super::{CALL_TIMEOUT, DurablePath, Status};
use crate::fixtures::as_written;

/// How many resources are read and prompts got, at most.
pub const ITEMS_READ: usize = 3;

/// One request compared: what it asked, and the two answers.
struct Compared {
    what: String,
    direct: Result<Value, String>,
    durable: Result<Value, String>,
}

/// A direct answer as the durable path holds one: a JSON-RPC error as `{"error": ...}`.
fn direct_answer(answer: Result<Value, UpstreamError>) -> Result<Value, String> {
    match answer {
        Ok(v) => Ok(v),
        Err(UpstreamError::JsonRpc {
            code,
            message,
            data,
            ..
        }) => {
            let mut error = json!({"code": code, "message": message});
            if let Some(data) = data {
                error["data"] = data;
            }
            Ok(json!({ "error": error }))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// `equal` or `different (why)` for one compared request; `None` when they are equal.
pub fn item_difference(
    direct: &Result<Value, String>,
    durable: &Result<Value, String>,
) -> Option<String> {
    match (direct, durable) {
        (Ok(d), Ok(t)) => as_written::difference(d, t),
        (Err(d), Err(t)) => Some(format!("both failed: directly {d}; durably {t}")),
        (Ok(_), Err(t)) => Some(format!("the durable path failed: {t}")),
        (Err(d), Ok(_)) => Some(format!("the direct request failed: {d}")),
    }
}

/// The server's line: pass when every item is equal, else a failure naming the different
/// ones; the detail lists every item as `equal` or `different`.
pub fn verdict(items: &[(String, Option<String>)]) -> (Status, String) {
    let detail: Vec<String> = items
        .iter()
        .map(|(what, diff)| match diff {
            None => format!("{what}: equal"),
            Some(_) => format!("{what}: different"),
        })
        .collect();
    let different: Vec<String> = items
        .iter()
        .filter_map(|(what, diff)| diff.as_ref().map(|d| format!("{what}: {d}")))
        .collect();
    let detail = format!("{} item(s): {}", items.len(), detail.join("; "));
    match different.is_empty() {
        true => (Status::Pass, detail),
        false => (Status::Fail(different.join("; ")), detail),
    }
}

/// The params of a `prompts/get` of `prompt` as listed: each required argument given `"x"`.
pub fn prompt_params(prompt: &Value) -> Value {
    let arguments: Map<String, Value> = prompt["arguments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["required"] == true)
        .filter_map(|a| Some((a["name"].as_str()?.to_owned(), json!("x"))))
        .collect();
    json!({"name": prompt["name"], "arguments": arguments})
}

async fn compare(
    raw: &UpstreamClient,
    durable: &DurablePath,
    feature: Feature,
    params: Value,
    what: String,
) -> Compared {
    let direct = match feature.items {
        Some(items) => {
            raw.list_all_pages(feature.method, items, CALL_TIMEOUT)
                .await
        }
        None => {
            raw.request_as_written(feature.method, params.clone(), CALL_TIMEOUT)
                .await
        }
    };
    Compared {
        what,
        direct: direct_answer(direct),
        durable: durable.feature(feature.operation, params).await,
    }
}

/// The items of a compared list's direct answer.
fn listed(compared: &Compared, items: &str) -> Vec<Value> {
    match &compared.direct {
        Ok(v) => v[items].as_array().cloned().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Lists and reads the server's resources and prompts both ways; `None` when it declares
/// neither.
pub async fn check(raw: &UpstreamClient, durable: &DurablePath) -> Option<(Status, String)> {
    let declared = match raw.served_capabilities(CALL_TIMEOUT).await {
        Ok(d) => d,
        Err(e) => {
            return Some((
                Status::Fail(format!("its capabilities: {e}")),
                String::new(),
            ));
        }
    };
    let mut compared = Vec::new();
    if declared.contains_key("resources") {
        let list = compare(
            raw,
            durable,
            features::LIST_RESOURCES,
            json!({}),
            "resources/list".into(),
        )
        .await;
        let uris: Vec<Value> = listed(&list, "resources")
            .iter()
            .filter_map(|r| r.get("uri").cloned())
            .take(ITEMS_READ)
            .collect();
        compared.push(list);
        let what = "resources/templates/list".to_owned();
        compared.push(
            compare(
                raw,
                durable,
                features::LIST_RESOURCE_TEMPLATES,
                json!({}),
                what,
            )
            .await,
        );
        for uri in uris {
            let what = format!("resources/read {}", uri.as_str().unwrap_or_default());
            compared.push(
                compare(
                    raw,
                    durable,
                    features::READ_RESOURCE,
                    json!({"uri": uri}),
                    what,
                )
                .await,
            );
        }
    }
    if declared.contains_key("prompts") {
        let list = compare(
            raw,
            durable,
            features::LIST_PROMPTS,
            json!({}),
            "prompts/list".into(),
        )
        .await;
        let prompts: Vec<Value> = listed(&list, "prompts")
            .into_iter()
            .take(ITEMS_READ)
            .collect();
        compared.push(list);
        for prompt in prompts {
            let what = format!(
                "prompts/get {}",
                prompt["name"].as_str().unwrap_or_default()
            );
            compared.push(
                compare(
                    raw,
                    durable,
                    features::GET_PROMPT,
                    prompt_params(&prompt),
                    what,
                )
                .await,
            );
        }
    }
    if compared.is_empty() {
        return None;
    }
    let items: Vec<(String, Option<String>)> = compared
        .into_iter()
        .map(|c| {
            let diff = item_difference(&c.direct, &c.durable);
            (c.what, diff)
        })
        .collect();
    Some(verdict(&items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_item_is_equal_or_different_and_the_line_fails_on_any_difference() {
        let same =
            Ok(json!({"contents": [{"uri": "a", "text": "x", "annotations": {"priority": 1}}]}));
        assert_eq!(item_difference(&same, &same), None);
        let float =
            Ok(json!({"contents": [{"uri": "a", "text": "x", "annotations": {"priority": 1.0}}]}));
        assert!(item_difference(&same, &float).is_some(), "1 is not 1.0");
        assert!(
            item_difference(&same, &Err("timed out".into()))
                .unwrap()
                .contains("durable path failed")
        );
        let (status, detail) = verdict(&[("resources/list".into(), None)]);
        assert_eq!(status, Status::Pass);
        assert_eq!(detail, "1 item(s): resources/list: equal");
        let (status, detail) = verdict(&[
            ("resources/list".into(), None),
            ("resources/read a".into(), Some("they differ at /x".into())),
        ]);
        assert_eq!(
            status,
            Status::Fail("resources/read a: they differ at /x".into())
        );
        assert!(detail.ends_with("resources/read a: different"), "{detail}");
    }

    #[test]
    fn a_direct_jsonrpc_error_reads_as_the_durable_path_holds_it() {
        let error = UpstreamError::JsonRpc {
            service: "direct".into(),
            code: -32002,
            message: "resource not found".into(),
            data: Some(json!({"uri": "x"})),
        };
        assert_eq!(
            direct_answer(Err(error)),
            Ok(
                json!({"error": {"code": -32002, "message": "resource not found", "data": {"uri": "x"}}})
            )
        );
    }

    #[test]
    fn a_prompt_is_got_with_its_required_arguments() {
        let prompt = json!({"name": "greet", "arguments": [{"name": "who", "required": true}, {"name": "tone"}]});
        assert_eq!(
            prompt_params(&prompt),
            json!({"name": "greet", "arguments": {"who": "x"}})
        );
    }
}
