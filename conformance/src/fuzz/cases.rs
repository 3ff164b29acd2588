//! What the wire fuzzer sends (R-CNF-26): one case per index, drawn from a generator seeded by
//! the run's seed and the index, so a seed replays a run and `--start I --count 1` replays one
//! case. A case is built around an MCP method (every client method of 2025-11-25 and
//! 2026-07-28, notifications, responses and made-up names) with params of the right shape and
//! random content, then spoiled by its family: wrong types, broken nesting, bad UTF-8, oversize
//! bodies or odd headers.

use proptest::prelude::RngExt as _;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::{Map, Value, json};

/// How a case spoils its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// The request as a client would send it, with random content (cursors, task IDs, URIs).
    Methods,
    /// One place (the id, `jsonrpc`, `method`, `params`, a param, `_meta`) of another type.
    WrongTypes,
    /// Deep nesting, truncated or unbalanced JSON, batches, trailing bytes, duplicate keys.
    BrokenNesting,
    /// Bytes that are not UTF-8, lone surrogates and NULs in strings.
    BadUtf8,
    /// A large string, array or object (some over the 4 MiB request limit).
    Oversize,
    /// HTTP headers at odds with the body: `Mcp-Method`, `Mcp-Name`, protocol versions,
    /// `Accept`, `Content-Type`, session ids; GET and DELETE.
    OddHeaders,
}

impl Family {
    pub const ALL: [Family; 6] = [
        Family::Methods,
        Family::WrongTypes,
        Family::BrokenNesting,
        Family::BadUtf8,
        Family::Oversize,
        Family::OddHeaders,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Methods => "methods",
            Family::WrongTypes => "wrong-types",
            Family::BrokenNesting => "broken-nesting",
            Family::BadUtf8 => "bad-utf8",
            Family::Oversize => "oversize",
            Family::OddHeaders => "odd-headers",
        }
    }
}

/// The HTTP verb of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Post,
    Get,
    Delete,
}

/// Which MCP session a case's HTTP request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Session {
    /// None: a 2026-07-28 stateless request (or an `initialize`).
    None,
    /// The run's own session (opened with `initialize` at the start).
    Own,
    /// A session id that was never issued.
    Made(Vec<u8>),
    /// A session opened for this case alone (its `initialize` first).
    Fresh,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Case {
    pub index: u64,
    pub family: Family,
    /// The method the case is built around (the body may say otherwise).
    pub method: String,
    pub verb: Verb,
    /// HTTP headers besides `Host`, `Content-Length` and the session's.
    pub headers: Vec<(String, Vec<u8>)>,
    pub session: Session,
    pub body: Vec<u8>,
}

/// The methods a case is built around: 2025-11-25's and 2026-07-28's client requests, the
/// tasks extension's and 2025-11-25's task methods, client notifications, a response, and
/// names no server knows.
pub const METHODS: &[&str] = &[
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
    "tasks/cancel",
    "tasks/update",
    "tasks/result",
    "tasks/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "(response)",
    "(unknown)",
];

/// The seeded generator of case `index` of a run with `seed`.
pub fn rng_of(seed: u64, index: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&index.to_le_bytes());
    bytes[16..24].copy_from_slice(b"durable-");
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The headers a client of that era sends with `message`.
pub(super) fn standard_headers(message: &Value, modern: bool) -> Vec<(String, Vec<u8>)> {
    let mut headers = vec![
        ("Content-Type".to_owned(), b"application/json".to_vec()),
        (
            "Accept".to_owned(),
            b"application/json, text/event-stream".to_vec(),
        ),
    ];
    let version = if modern { "2026-07-28" } else { "2025-06-18" };
    headers.push(("MCP-Protocol-Version".into(), version.into()));
    if let (true, Some(method)) = (modern, message.get("method").and_then(Value::as_str)) {
        headers.push(("Mcp-Method".into(), method.into()));
        if let Some(name) = mcp_name(message) {
            headers.push(("Mcp-Name".into(), name.into_bytes()));
        }
    }
    headers
}

/// The `Mcp-Name` a 2026-07-28 client sends: the tool, prompt, resource or task named.
fn mcp_name(message: &Value) -> Option<String> {
    let params = message.get("params")?;
    ["name", "uri", "taskId"]
        .iter()
        .find_map(|k| params.get(*k)?.as_str().map(str::to_owned))
}

/// The JSON-RPC message of `method` with params of the right shape and random content.
pub(super) fn message(rng: &mut TestRng, method: &str, index: u64, modern: bool) -> Value {
    let id = json!(index + 1);
    match method {
        "(response)" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        "(unknown)" => {
            let name = text(rng);
            json!({"jsonrpc": "2.0", "id": id, "method": name, "params": {}})
        }
        _ => {
            let mut params = params(rng, method);
            if modern && method != "initialize" {
                params.insert("_meta".into(), meta(rng));
            }
            let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
            if !method.starts_with("notifications/")
                && let Some(fields) = message.as_object_mut()
            {
                fields.insert("id".into(), id);
            }
            message
        }
    }
}

/// A 2026-07-28 request's `_meta`: version, capabilities, client info, maybe a log level and
/// an idempotency key or progress token.
fn meta(rng: &mut TestRng) -> Value {
    let mut meta = Map::new();
    meta.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        json!("2026-07-28"),
    );
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}});
    let capabilities = if rng.random_bool(0.5) {
        tasks
    } else {
        json!({})
    };
    meta.insert(
        "io.modelcontextprotocol/clientCapabilities".into(),
        capabilities,
    );
    meta.insert(
        "io.modelcontextprotocol/clientInfo".into(),
        json!({"name": "durable-mcp-fuzz", "version": "0"}),
    );
    if rng.random_bool(0.3) {
        meta.insert("io.modelcontextprotocol/logLevel".into(), json!("debug"));
    }
    if rng.random_bool(0.3) {
        meta.insert("idempotencyKey".into(), json!(text(rng)));
    }
    if rng.random_bool(0.3) {
        meta.insert("progressToken".into(), scalar(rng));
    }
    Value::Object(meta)
}

/// Params of `method`'s shape with random content.
fn params(rng: &mut TestRng, method: &str) -> Map<String, Value> {
    let fields = match method {
        "initialize" => json!({
            "protocolVersion": pick(rng, &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28", "1999-01-01"]),
            "capabilities": {"roots": {}, "sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "durable-mcp-fuzz", "version": "0"},
        }),
        "tools/call" => json!({
            "name": name(rng),
            "arguments": value(rng, 3),
            "task": if rng.random_bool(0.3) { json!({"ttl": 60000}) } else { Value::Null },
            "inputResponses": if rng.random_bool(0.3) { value(rng, 2) } else { Value::Null },
            "requestState": if rng.random_bool(0.3) { json!(text(rng)) } else { Value::Null },
        }),
        "tools/list"
        | "resources/list"
        | "resources/templates/list"
        | "prompts/list"
        | "tasks/list" => json!({"cursor": cursor(rng)}),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            json!({"uri": uri(rng)})
        }
        "prompts/get" => json!({"name": name(rng), "arguments": value(rng, 2)}),
        "completion/complete" => json!({
            "ref": if rng.random_bool(0.5) { json!({"type": "ref/prompt", "name": name(rng)}) } else { json!({"type": "ref/resource", "uri": uri(rng)}) },
            "argument": {"name": name(rng), "value": text(rng)},
            "context": {"arguments": value(rng, 2)},
        }),
        "logging/setLevel" => {
            json!({"level": pick(rng, &["debug", "info", "warning", "error", "emergency", "loud"])})
        }
        "subscriptions/listen" => json!({"notifications": {
            "toolsListChanged": rng.random_bool(0.5),
            "resourcesListChanged": rng.random_bool(0.5),
            "resourceSubscriptions": [uri(rng)],
        }}),
        "tasks/get" | "tasks/cancel" | "tasks/result" => json!({"taskId": task_id(rng)}),
        "tasks/update" => {
            json!({"taskId": task_id(rng), "inputResponses": value(rng, 2)})
        }
        "notifications/cancelled" => json!({"requestId": scalar(rng), "reason": text(rng)}),
        "notifications/progress" => json!({"progressToken": scalar(rng), "progress": scalar(rng)}),
        _ => json!({}),
    };
    let mut params = match fields {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    params.retain(|_, v| !v.is_null());
    params
}

fn pick(rng: &mut TestRng, from: &[&str]) -> Value {
    json!(from[rng.random_range(0..from.len())])
}

/// A tool, prompt or argument name: a usual one, or random text.
fn name(rng: &mut TestRng) -> String {
    const USUAL: &[&str] = &["echo", "add", "get-sum", "task_status", "task_result", "x"];
    if rng.random_bool(0.5) {
        USUAL[rng.random_range(0..USUAL.len())].to_owned()
    } else {
        text(rng)
    }
}

/// A cursor: a page cursor of the connector's form with any offset, base64 of anything, or text.
fn cursor(rng: &mut TestRng) -> Value {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    match rng.random_range(0..4) {
        0 => Value::Null,
        1 => json!(b64.encode(format!("durable-mcp-page:{}", rng.random::<i64>()))),
        2 => json!(b64.encode(text(rng))),
        _ => json!(text(rng)),
    }
}

/// A task ID: dotted base64url parts as the connector signs them, or text.
fn task_id(rng: &mut TestRng) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    if rng.random_bool(0.5) {
        let parts: Vec<String> = (0..rng.random_range(1..4))
            .map(|_| b64.encode(text(rng)))
            .collect();
        parts.join(".")
    } else {
        text(rng)
    }
}

fn uri(rng: &mut TestRng) -> String {
    let schemes = ["file:///", "test://", "https://example.test/", "", "x:"];
    format!(
        "{}{}",
        schemes[rng.random_range(0..schemes.len())],
        text(rng)
    )
}

/// Random text: empty, ASCII, any Unicode (controls, NUL, astral), or long.
pub fn text(rng: &mut TestRng) -> String {
    let len = match rng.random_range(0..10) {
        0 => 0,
        1 => rng.random_range(256..20_000),
        _ => rng.random_range(1..24),
    };
    let unicode = rng.random_bool(0.4);
    (0..len)
        .map(|_| {
            if unicode {
                char::from_u32(rng.random_range(0..0x11_0000)).unwrap_or('\u{fffd}')
            } else {
                char::from(rng.random_range(0x20u8..0x7f))
            }
        })
        .collect()
}

/// A random scalar: null, a boolean, an integer at an edge, a float, or text.
pub fn scalar(rng: &mut TestRng) -> Value {
    match rng.random_range(0..8) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random::<i64>()),
        3 => json!(pick_number(rng)),
        4 => json!(rng.random::<f64>() * 1e300),
        _ => json!(text(rng)),
    }
}

fn pick_number(rng: &mut TestRng) -> Value {
    let edges = [
        json!(0),
        json!(-1),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1.5),
        json!(-0.0),
    ];
    edges[rng.random_range(0..edges.len())].clone()
}

/// A random JSON value, at most `depth` deep.
pub fn value(rng: &mut TestRng, depth: u32) -> Value {
    if depth == 0 || rng.random_bool(0.4) {
        return scalar(rng);
    }
    let len = rng.random_range(0..5);
    if rng.random_bool(0.5) {
        Value::Array((0..len).map(|_| value(rng, depth - 1)).collect())
    } else {
        Value::Object(
            (0..len)
                .map(|_| (text(rng), value(rng, depth - 1)))
                .collect(),
        )
    }
}

/// `message` with one place replaced by a value of another type.
pub(super) fn wrong_type(rng: &mut TestRng, mut message: Value) -> Value {
    let mut places = vec!["/id", "/jsonrpc", "/method", "/params"];
    let keys: Vec<String> = message
        .get("params")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(|k| format!("/params/{k}")).collect())
        .unwrap_or_default();
    places.extend(keys.iter().map(String::as_str));
    let place = places[rng.random_range(0..places.len())];
    let other = match rng.random_range(0..6) {
        0 => json!(text(rng)),
        1 => json!(rng.random::<i64>()),
        2 => json!([value(rng, 2)]),
        3 => json!({"nested": value(rng, 2)}),
        4 => Value::Null,
        _ => json!(rng.random_bool(0.5)),
    };
    if let Some(slot) = message.pointer_mut(place) {
        *slot = other;
    }
    message
}

#[cfg(test)]
mod tests {
    use super::super::draw::case;
    use super::*;

    #[test]
    fn a_seed_and_an_index_always_give_the_same_case() {
        let same = |a: &Case, b: &Case| {
            (a.family, &a.method, a.verb, &a.headers, &a.session, &a.body)
                == (b.family, &b.method, b.verb, &b.headers, &b.session, &b.body)
        };
        for index in 0..300 {
            assert!(same(&case(42, index), &case(42, index)), "case {index}");
        }
        let differ = (0..300)
            .filter(|i| !same(&case(42, *i), &case(43, *i)))
            .count();
        assert!(differ > 250, "another seed sends other requests: {differ}");
    }

    #[test]
    fn a_few_hundred_cases_cover_every_family_and_method() {
        let cases: Vec<Case> = (0..600).map(|i| case(7, i)).collect();
        for family in Family::ALL {
            assert!(cases.iter().any(|c| c.family == family), "{family:?}");
        }
        for method in METHODS {
            assert!(cases.iter().any(|c| c.method == *method), "{method}");
        }
        assert!(cases.iter().all(|c| c.index < 600));
    }
}
