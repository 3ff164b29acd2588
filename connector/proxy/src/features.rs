//! Resources, resource templates, prompts and completions of an upstream as reserved operations
//! of its Nexus service (R-PRX-32, R-NXC-8).
//!
//! The lists are discovered outside Activities like the tools (R-PRX-2): each list operation
//! asks the upstream again, following its cursors to the last page, unless an earlier failure's
//! back-off has not passed; a failure keeps the last good list. An upstream that did not declare
//! the capability at `initialize` is not asked: its list is empty. `read_resource`,
//! `get_prompt` and `complete_argument` are read-only by definition, so they run inline in the
//! handler (R-PRX-30's sync path): an upstream that cannot be reached fails the start as
//! retryable, and Temporal starts it again until the caller's schedule-to-close; a JSON-RPC error
//! is the operation's answer, marked, as the upstream wrote it. An answer too large for a
//! Temporal payload is a clear error at once, never retried ([`too_large`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::{Map, Value, json};
use temporalio_protos::temporal::api::common::v1::Payload;
use tracing::warn;

use super::{
    discovery::DISCOVERY_TIMEOUT,
    errors::Backoff,
    inline,
    upstream::{UpstreamClient, UpstreamError, subscriptions::VersionsAsk},
};
use durable_mcp_contract::{
    errors::ToolCallErrorType,
    features::{
        FEATURES, Feature, RESOURCE_VERSIONS, UPSTREAM_CAPABILITIES, VersionsInput,
        supports_subscribe,
    },
    jsonrpc_error::JsonRpcError,
    payload::{self, MAX_PAYLOAD_BYTES},
};
use durable_mcp_runtime::nexus::{
    HandlerError, HandlerErrorKind, OperationError, RetryBehavior, Service, StartContext,
    StartError, StartOutcome, start_fn,
};

/// The longest one inline read waits for the upstream, whatever the caller's deadline.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// One list's last good answer and its failures' back-off.
#[derive(Default)]
struct Kept {
    list: Option<Value>,
    waits: Option<durable_mcp_runtime::nexus::outage::Backoff>,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

/// The discovered lists of one upstream, by operation.
struct Lists {
    client: Arc<UpstreamClient>,
    kept: Mutex<HashMap<&'static str, Kept>>,
}

impl Lists {
    /// The feature's list: asked again unless backing off; the last good one on failure.
    async fn refresh(&self, feature: Feature, items: &str) -> Result<Value, StartError> {
        {
            let kept = self.kept.lock().unwrap();
            if let Some(k) = kept.get(feature.operation)
                && k.retry_at.is_some_and(|at| Instant::now() < at)
            {
                return k.list.clone().ok_or_else(|| unavailable(&k.last_error));
            }
        }
        let asked = self.ask(feature, items).await;
        let mut kept = self.kept.lock().unwrap();
        let k = kept.entry(feature.operation).or_default();
        match asked {
            Ok(list) => {
                *k = Kept {
                    list: Some(list.clone()),
                    ..Kept::default()
                };
                Ok(list)
            }
            Err(e) => {
                let delay = k
                    .waits
                    .get_or_insert_with(|| Backoff::discovery().start())
                    .next_delay();
                k.retry_at = Some(Instant::now() + delay);
                k.last_error = Some(e.to_string());
                warn!(service = %self.client.service(), method = feature.method, error = %e,
                      retry_in = ?delay, keeping_last_list = k.list.is_some(),
                      "listing failed");
                k.list.clone().ok_or_else(|| unavailable(&k.last_error))
            }
        }
    }

    async fn ask(&self, feature: Feature, items: &str) -> Result<Value, UpstreamError> {
        let declared = self.client.served_capabilities(DISCOVERY_TIMEOUT).await?;
        if !declared.contains_key(feature.capability) {
            return Ok(json!({ items: [] }));
        }
        self.client
            .list_all_pages(feature.method, items, DISCOVERY_TIMEOUT)
            .await
    }
}

fn unavailable(why: &Option<String>) -> StartError {
    let why = why.as_deref().unwrap_or("no attempt yet");
    HandlerError::new(HandlerErrorKind::Unavailable, why.to_owned())
        .with_retry(RetryBehavior::Retryable)
        .into()
}

/// Adds the feature operations and `upstream_capabilities` to the upstream's service.
pub fn add_operations(mut service: Service, client: Arc<UpstreamClient>) -> Service {
    let lists = Arc::new(Lists {
        client: client.clone(),
        kept: Mutex::default(),
    });
    let asked = client.clone();
    service = service.operation(
        UPSTREAM_CAPABILITIES,
        start_fn(move |_, _| {
            let client = asked.clone();
            async move {
                let declared = client
                    .served_capabilities(DISCOVERY_TIMEOUT)
                    .await
                    .map_err(|e| retryable(&e))?;
                Ok(StartOutcome::Sync(answer(&Value::Object(declared))?))
            }
        }),
    );
    let watched = client.clone();
    service = service.operation(
        RESOURCE_VERSIONS,
        start_fn(move |start, input| {
            let client = watched.clone();
            async move { versions(&client, &start, &input).await }
        }),
    );
    for feature in FEATURES {
        service = match feature.items {
            Some(items) => {
                let lists = lists.clone();
                service.operation(
                    feature.operation,
                    start_fn(move |_, _| {
                        let lists = lists.clone();
                        async move {
                            let list = answer(&lists.refresh(feature, items).await?)?;
                            match too_large(feature, &list) {
                                Some(error) => Err(OperationError::Failed {
                                    message: error.message,
                                    error_type: ToolCallErrorType::ResultTooLarge.as_str().into(),
                                    details: None,
                                }
                                .into()),
                                None => Ok(StartOutcome::Sync(list)),
                            }
                        }
                    }),
                )
            }
            None => {
                let client = client.clone();
                service.operation(
                    feature.operation,
                    start_fn(move |start, input| {
                        let client = client.clone();
                        async move { read(&client, feature, &start, &input).await }
                    }),
                )
            }
        };
    }
    service
}

/// One inline read: the caller's params sent upstream, the result (or JSON-RPC error) as
/// written.
async fn read(
    client: &UpstreamClient,
    feature: Feature,
    start: &StartContext,
    input: &Payload,
) -> Result<StartOutcome, StartError> {
    let params = match payload::to_json(input) {
        Ok(Value::Null) => Value::Object(Map::new()),
        Ok(params @ Value::Object(_)) => params,
        Ok(_) => return Err(HandlerError::bad_request("params must be a JSON object").into()),
        Err(e) => return Err(HandlerError::bad_request(e.to_string()).into()),
    };
    let timeout = inline::remaining(start.deadline)
        .map_or(READ_TIMEOUT, |left| left.min(READ_TIMEOUT))
        .max(Duration::from_millis(100));
    match client
        .request_as_written(feature.method, params, timeout)
        .await
    {
        Ok(result) if durable_mcp_contract::input::is_input_required(&result) => {
            Ok(StartOutcome::Sync(answer_error(&asks_for_input(feature))?))
        }
        Ok(result) => {
            let answered = answer(&result)?;
            match too_large(feature, &answered) {
                Some(error) => Ok(StartOutcome::Sync(answer_error(&error)?)),
                None => Ok(StartOutcome::Sync(answered)),
            }
        }
        Err(UpstreamError::JsonRpc {
            code,
            message,
            data,
            ..
        }) => {
            let error = JsonRpcError {
                code,
                message,
                data,
            };
            Ok(StartOutcome::Sync(answer_error(&error)?))
        }
        Err(e @ UpstreamError::Protocol { .. }) => Err(protocol_failure(&e)),
        Err(e) => Err(retryable(&e)),
    }
}

/// `resource_versions` (R-PRX-34): the URIs' tokens, for an upstream that declares
/// `resources.subscribe`. An upstream that cannot be reached fails the start as retryable.
async fn versions(
    client: &Arc<UpstreamClient>,
    start: &StartContext,
    input: &Payload,
) -> Result<StartOutcome, StartError> {
    let asked = version_ask(input).map_err(HandlerError::bad_request)?;
    let timeout = inline::remaining(start.deadline)
        .map_or(READ_TIMEOUT, |left| left.min(READ_TIMEOUT))
        .max(Duration::from_millis(100));
    let declared = client
        .served_capabilities(timeout)
        .await
        .map_err(|e| retryable(&e))?;
    if !supports_subscribe(&declared) {
        let why = format!(
            "upstream {:?} does not declare resources.subscribe, so its resources have no \
             versions to follow; read them again instead",
            client.service()
        );
        return Err(HandlerError::bad_request(why).into());
    }
    match client.resource_versions(&asked, timeout).await {
        Ok(answered) => Ok(StartOutcome::Sync(answer(&answered)?)),
        Err(e @ UpstreamError::Protocol { .. }) => Err(protocol_failure(&e)),
        Err(e) => Err(retryable(&e)),
    }
}

/// What a `resource_versions` input asks (R-PRX-34, R-PRX-36): its URIs, caller and released
/// URIs, bounded ([`VersionsInput::read`]).
fn version_ask(input: &Payload) -> Result<VersionsAsk, String> {
    let value = payload::to_json(input).map_err(|e| e.to_string())?;
    let input = VersionsInput::read(value)?;
    Ok(VersionsAsk {
        uris: input.uris,
        caller: input.caller.unwrap_or_default(),
        released: input.released,
    })
}

/// An upstream answer that is not MCP: a final failure (R-PRX-32), never retried.
fn protocol_failure(e: &UpstreamError) -> StartError {
    OperationError::Failed {
        message: e.to_string(),
        error_type: ToolCallErrorType::UpstreamProtocolError.as_str().into(),
        details: None,
    }
    .into()
}

fn retryable(e: &UpstreamError) -> StartError {
    HandlerError::new(HandlerErrorKind::Unavailable, e.to_string())
        .with_retry(RetryBehavior::Retryable)
        .into()
}

fn answer(value: &Value) -> Result<Payload, HandlerError> {
    payload::to_payload(value).map_err(|e| HandlerError::internal(e.to_string()))
}

fn answer_error(error: &JsonRpcError) -> Result<Payload, HandlerError> {
    error
        .to_payload()
        .map_err(|e| HandlerError::internal(e.to_string()))
}

/// The error for an answer larger than a Temporal payload may hold (R-PRX-32), which would
/// otherwise be retried until the caller's timeout: a read answers it as its JSON-RPC error
/// (-32603, `data.resultTooLarge`), a list fails with it (`ResultTooLarge`, not retried).
fn too_large(feature: Feature, answered: &Payload) -> Option<JsonRpcError> {
    let bytes = answered.data.len();
    (bytes > MAX_PAYLOAD_BYTES).then(|| JsonRpcError {
        code: -32603,
        message: format!(
            "the upstream's {} answer is {bytes} bytes of JSON, more than the \
             {MAX_PAYLOAD_BYTES} bytes a Temporal payload may hold (its 2 MiB limit, less room \
             for metadata); ask for less (another resource, a smaller page), or serve it from \
             the upstream directly",
            feature.method
        ),
        data: Some(json!({"resultTooLarge": true, "bytes": bytes, "maxBytes": MAX_PAYLOAD_BYTES})),
    })
}

/// The error a read answers when the upstream asked for input (`resultType:
/// "input_required"`, SEP-2322) although the request declared no input capability (R-PRX-32):
/// nothing carries the input request to the reader, and passed on it would be a result the
/// connector cannot parse. Not retried: the upstream would ask again.
fn asks_for_input(feature: Feature) -> JsonRpcError {
    JsonRpcError {
        code: -32603,
        message: format!(
            "the upstream answered {} with an input request (resultType \"input_required\") \
             although the request declared no input capability; a read cannot ask its reader \
             for input through the durable path: the upstream should answer it without input, \
             or -32021",
            feature.method
        ),
        data: Some(json!({"upstreamProtocolError": true, "inputRequired": true})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_contract::features::{GET_PROMPT, MAX_VERSION_URIS, READ_RESOURCE};

    #[test]
    fn a_read_answered_with_an_input_request_is_a_clear_error() {
        let error = asks_for_input(GET_PROMPT);
        assert_eq!(error.code, -32603);
        assert!(
            error.message.contains("prompts/get") && error.message.contains("input_required"),
            "{}",
            error.message
        );
        assert_eq!(error.data.unwrap()["inputRequired"], true);
    }

    #[test]
    fn version_inputs_name_a_bounded_list_of_uris() {
        let input = |v: Value| answer(&v).unwrap();
        let asked = version_ask(&input(json!({"uris": ["a://1", "b://2"]}))).unwrap();
        assert_eq!(asked.uris, ["a://1", "b://2"]);
        assert_eq!((asked.caller.as_str(), asked.released.len()), ("", 0));
        let named = json!({"uris": [], "caller": "k1", "released": ["a://1"]});
        let asked = version_ask(&input(named)).unwrap();
        assert_eq!(
            (asked.caller.as_str(), asked.released),
            ("k1", vec!["a://1".to_owned()])
        );
        assert!(version_ask(&input(json!({"uris": "a://1"}))).is_err());
        assert!(version_ask(&input(json!({"uris": [], "other": 1}))).is_err());
        let many: Vec<String> = (0..=MAX_VERSION_URIS).map(|i| format!("a://{i}")).collect();
        for key in ["uris", "released"] {
            let refused = version_ask(&input(json!({ "uris": [], key: many }))).unwrap_err();
            assert!(refused.contains("at most 100"), "{refused}");
        }
        let long = json!({"uris": [], "caller": "k".repeat(65)});
        assert!(version_ask(&input(long)).unwrap_err().contains("64 bytes"));
    }

    #[test]
    fn an_answer_over_the_payload_limit_is_a_clear_error_not_a_retry() {
        let text = "x".repeat(MAX_PAYLOAD_BYTES);
        let big = answer(&json!({"contents": [{"uri": "a://1", "text": text}]})).unwrap();
        let error = too_large(READ_RESOURCE, &big).expect("too large");
        assert_eq!(error.code, -32603);
        assert!(
            error.message.contains("resources/read answer is")
                && error.message.contains("ask for less"),
            "{}",
            error.message
        );
        assert_eq!(error.data.unwrap()["resultTooLarge"], true);
        let small = answer(&json!({"contents": []})).unwrap();
        assert!(too_large(READ_RESOURCE, &small).is_none());
    }
}
