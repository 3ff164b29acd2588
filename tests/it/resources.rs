//! Resources, resource templates, prompts and completions through the durable path
//! (R-NXC-8, R-PRX-32, R-CON-45): connector (stdio) -> Temporal -> proxy -> mock upstream
//! answers what a direct session with the mock answers, field for field on the wire.

use durable_mcp_conformance::{
    fixtures::{
        Ledger,
        everything::RawStdioClient,
        mock_upstream_bin,
        server::features::{
            ALWAYS_ASKING_PROMPT, ASKING_PROMPT, BLOB_URI, ITEM_TEMPLATE, LARGE_URI,
            REQUEST_META_URI, TEXT_URI,
        },
    },
    kit::{process::connector_route, upstreams::mock_stdio_upstream_with_args},
};
use serde_json::{Value, json};

use crate::support::*;

/// The mock's flag that serves its resources, template, prompt and completions.
const FEATURES: &str = "--resources-and-prompts";

fn featured(service: &str, ledger: &Ledger) -> durable_mcp::proxy::UpstreamConfig {
    mock_stdio_upstream_with_args(service, vec![FEATURES.into()], ledger).unwrap()
}

async fn direct_session() -> RawStdioClient {
    let mut mock = tokio::process::Command::new(mock_upstream_bin().unwrap());
    mock.arg(FEATURES);
    RawStdioClient::spawn(mock).await.unwrap()
}

/// A list request's every page, folded as the durable path folds them (R-NXC-8): the first
/// page's fields, every page's items, no `nextCursor`.
async fn all_pages(client: &mut RawStdioClient, method: &str, items: &str) -> Value {
    let mut first = client.request(method, json!({})).await.unwrap();
    let mut cursor = first.as_object_mut().unwrap().remove("nextCursor");
    while let Some(Value::String(next)) = cursor {
        let page = client
            .request(method, json!({"cursor": next}))
            .await
            .unwrap();
        let more = page[items].as_array().unwrap().clone();
        first[items].as_array_mut().unwrap().extend(more);
        cursor = page.get("nextCursor").cloned();
    }
    first
}

/// The single requests compared, each with its params.
fn reads() -> Vec<(&'static str, Value)> {
    vec![
        ("resources/read", json!({"uri": TEXT_URI})),
        ("resources/read", json!({"uri": BLOB_URI})),
        ("resources/read", json!({"uri": "mock://items/7"})),
        ("resources/read", json!({"uri": "mock://nowhere"})),
        (
            "prompts/get",
            json!({"name": "greet", "arguments": {"who": "ada"}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"},
                   "argument": {"name": "who", "value": "al"}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": ITEM_TEMPLATE},
                   "argument": {"name": "id", "value": "1"}}),
        ),
    ]
}

const LISTS: [(&str, &str); 3] = [
    ("resources/list", "resources"),
    ("resources/templates/list", "resourceTemplates"),
    ("prompts/list", "prompts"),
];

/// What a direct session answers to each list (every page folded, never empty) and each read:
/// `(method, params, {"result": ...} or {"error": ...})`.
async fn direct_answers(direct: &mut RawStdioClient) -> Vec<(&'static str, Value, Value)> {
    let mut answers = Vec::new();
    for (method, items) in LISTS {
        let folded = all_pages(direct, method, items).await;
        assert!(!folded[items].as_array().unwrap().is_empty(), "{method}");
        answers.push((method, json!({}), json!({ "result": folded })));
    }
    for (method, params) in reads() {
        let expected = direct.exchange(method, params.clone()).await.unwrap();
        answers.push((method, params, expected.response));
    }
    answers
}

#[tokio::test]
async fn resources_prompts_and_completions_through_the_connector_equal_a_direct_session() {
    let env = TestEnv::shared("resources").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("featured", &ledger)]);
    let mut direct = direct_session().await;
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "featured"))
        .await
        .unwrap();
    for capability in ["resources", "prompts", "completions"] {
        let mut declared = proxied.initialize["capabilities"][capability].clone();
        let told = declared.as_object_mut().unwrap().remove("listChanged");
        let expected_told = (capability != "completions").then_some(json!(true));
        assert_eq!(
            told, expected_told,
            "{capability}: changes are told (R-CON-42)"
        );
        assert_eq!(
            declared, direct.initialize["capabilities"][capability],
            "{capability} declared as the upstream declares it"
        );
    }
    for (method, params, expected) in direct_answers(&mut direct).await {
        let got = proxied.exchange(method, params.clone()).await.unwrap();
        assert_eq!(got.response, expected, "{method} {params}");
    }
}

#[tokio::test]
async fn over_http_the_connector_answers_resources_and_prompts_as_a_direct_session() {
    let env = TestEnv::shared("resources-http").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("featured-http", &ledger)]);
    let mut direct = direct_session().await;
    let connector = HttpConnectorProcess::start(&env, "featured-http", &[])
        .await
        .unwrap();
    let mut proxied = durable_mcp_conformance::fixtures::RawHttpClient::initialize(&connector.url)
        .await
        .unwrap();
    for (method, params, expected) in direct_answers(&mut direct).await {
        let answer = proxied.exchange(method, params.clone()).await.unwrap();
        assert_eq!(answer.response, expected, "over HTTP: {method} {params}");
    }
}

#[tokio::test]
async fn a_uri_or_prompt_two_routes_offer_is_left_out_and_its_read_names_both() {
    let env = TestEnv::shared("resources-collide").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![featured("first", &ledger), featured("second", &ledger)],
    );
    let mut command = connector_command(&env, "first");
    command
        .arg("--route")
        .arg(connector_route("second", &env.endpoint));
    let mut proxied = RawStdioClient::spawn(command).await.unwrap();
    for (method, items) in LISTS {
        let listed = proxied.request(method, json!({})).await.unwrap();
        assert_eq!(
            listed[items],
            json!([]),
            "{method}: every item is offered twice"
        );
    }
    for (method, params) in [
        ("resources/read", json!({"uri": TEXT_URI})),
        (
            "prompts/get",
            json!({"name": "greet", "arguments": {"who": "ada"}}),
        ),
    ] {
        let answer = proxied.exchange(method, params).await.unwrap().response;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            answer["error"]["code"] == -32602
                && message.contains("first")
                && message.contains("second"),
            "{method}: {answer}"
        );
    }
    // Neither route offers it: a resource is not found (-32002), a prompt or a completion's
    // reference is invalid params.
    for (method, params, code) in [
        ("resources/read", json!({"uri": "mock://nope"}), -32002),
        ("prompts/get", json!({"name": "nope"}), -32602),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "nope"},
                   "argument": {"name": "who", "value": "a"}}),
            -32602,
        ),
    ] {
        let answer = proxied.exchange(method, params).await.unwrap().response;
        assert_eq!(answer["error"]["code"], code, "{method}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("nope"), "{method}: {answer}");
    }
}

#[tokio::test]
async fn a_read_never_goes_to_another_route_while_one_never_answered() {
    let env = TestEnv::shared("resources-unknown-route").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("answering", &ledger)]);
    // The second route's service is served by no worker: its capabilities are never known.
    let mut command = connector_command(&env, "answering");
    command
        .arg("--route")
        .arg(connector_route("silent", &env.endpoint));
    let mut proxied = RawStdioClient::spawn(command).await.unwrap();
    let listed = proxied.request("resources/list", json!({})).await.unwrap();
    assert!(
        !listed["resources"].as_array().unwrap().is_empty(),
        "{listed}"
    );
    // The answering route does not list this URI: the silent route might offer it, so the
    // read is not sent to the answering one.
    let answer = proxied
        .exchange("resources/read", json!({"uri": REQUEST_META_URI}))
        .await
        .unwrap()
        .response;
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    let listed_uri = proxied
        .request("resources/read", json!({"uri": TEXT_URI}))
        .await
        .unwrap();
    assert_eq!(listed_uri["contents"][0]["uri"], TEXT_URI, "{listed_uri}");
}

#[tokio::test]
async fn a_modern_upstreams_resource_reads_declare_no_input_capability() {
    let env = TestEnv::shared("resources-meta").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("featured-meta", &ledger)]);
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "featured-meta"))
        .await
        .unwrap();
    let read = proxied
        .request("resources/read", json!({"uri": REQUEST_META_URI}))
        .await
        .unwrap();
    let text = read["contents"][0]["text"].as_str().unwrap_or_default();
    let meta: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {read}"));
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
        "the mock speaks 2026-07-28: {meta}"
    );
    // Nothing could carry a read's input request back to its reader (R-PRX-32).
    assert_eq!(
        meta["io.modelcontextprotocol/clientCapabilities"],
        json!({}),
        "{meta}"
    );
    assert_eq!(meta["io.modelcontextprotocol/logLevel"], "debug", "{meta}");
}

#[tokio::test]
async fn a_prompt_that_needs_input_is_a_clear_error_through_the_connector() {
    let env = TestEnv::shared("resources-asking").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("featured-asking", &ledger)]);
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "featured-asking"))
        .await
        .unwrap();
    // The upstream asks only a request that declared elicitation: without it, -32021 as
    // written.
    let asking = proxied
        .exchange("prompts/get", json!({"name": ASKING_PROMPT}))
        .await
        .unwrap()
        .response;
    assert_eq!(asking["error"]["code"], -32021, "{asking}");
    assert!(
        asking["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{asking}"
    );
    // An upstream that asks anyway: an error naming what happened, not a result.
    let anyway = proxied
        .exchange("prompts/get", json!({"name": ALWAYS_ASKING_PROMPT}))
        .await
        .unwrap()
        .response;
    assert_eq!(anyway["error"]["code"], -32603, "{anyway}");
    assert_eq!(anyway["error"]["data"]["inputRequired"], true, "{anyway}");
    let message = anyway["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("input_required"), "{anyway}");
}

#[tokio::test]
async fn a_resource_over_the_payload_limit_is_a_clear_error_at_once() {
    let env = TestEnv::shared("resources-large").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![featured("featured-large", &ledger)]);
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "featured-large"))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let answer = proxied
        .exchange("resources/read", json!({"uri": LARGE_URI}))
        .await
        .unwrap()
        .response;
    let error = &answer["error"];
    assert_eq!(error["code"], -32603, "{answer:.300}");
    assert_eq!(error["data"]["resultTooLarge"], true, "{answer:.300}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("ask for less"), "{message}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "answered without retrying until the timeout: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn callers_get_the_lists_in_the_connectors_own_pages() {
    let env = TestEnv::shared("resources-pages").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let more = temp_path("more-resources.json");
    let added: Vec<Value> = (0..150)
        .map(|i| json!({"uri": format!("mock://more/{i}"), "name": format!("more {i}")}))
        .collect();
    std::fs::write(&more, Value::Array(added).to_string()).unwrap();
    let args = vec![
        FEATURES.into(),
        "--more-resources".into(),
        more.to_string_lossy().into_owned(),
    ];
    let upstream = mock_stdio_upstream_with_args("paged", args, &ledger).unwrap();
    let _proxy = start_proxy(&env, vec![upstream]);
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "paged"))
        .await
        .unwrap();
    let first = proxied.request("resources/list", json!({})).await.unwrap();
    assert_eq!(first["resources"].as_array().unwrap().len(), 100, "{first}");
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = proxied
        .request("resources/list", json!({"cursor": cursor}))
        .await
        .unwrap();
    assert!(second.get("nextCursor").is_none(), "{second}");
    let uris: Vec<&str> = [&first, &second]
        .iter()
        .flat_map(|page| page["resources"].as_array().unwrap())
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = [TEXT_URI.to_owned(), BLOB_URI.to_owned()]
        .into_iter()
        .chain((0..150).map(|i| format!("mock://more/{i}")))
        .collect();
    assert_eq!(uris, expected, "every item once, in order");
    let unknown = proxied
        .exchange("resources/list", json!({"cursor": "page-2"}))
        .await
        .unwrap()
        .response;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test]
async fn no_route_with_resources_or_prompts_declares_none() {
    let env = TestEnv::shared("resources-none").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(
        &env,
        vec![mock_stdio_upstream_with_args("plain", vec![], &ledger).unwrap()],
    );
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "plain"))
        .await
        .unwrap();
    let capabilities = &proxied.initialize["capabilities"];
    assert!(capabilities["tools"].is_object(), "{capabilities}");
    for capability in ["resources", "prompts", "completions"] {
        assert!(capabilities.get(capability).is_none(), "{capabilities}");
    }
    // What is not declared is not served either: method not found.
    for (method, params) in LISTS
        .iter()
        .map(|(method, _)| (*method, json!({})))
        .chain(reads())
    {
        let answer = proxied.exchange(method, params).await.unwrap().response;
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
}

/// server-everything's own requests compared: the first text and blob resources, a templated
/// resource, every prompt (arguments filled with "x") and a completion of each prompt argument.
fn everything_reads(
    resources: &Value,
    templates: &Value,
    prompts: &Value,
) -> Vec<(&'static str, Value)> {
    let mut reads = Vec::new();
    for resource in resources["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .take(4)
    {
        reads.push(("resources/read", json!({"uri": resource["uri"]})));
    }
    for template in templates["resourceTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(t) = template["uriTemplate"].as_str() {
            let uri = t.split('{').next().unwrap_or_default().to_owned() + "1";
            reads.push(("resources/read", json!({"uri": uri})));
        }
    }
    for prompt in prompts["prompts"].as_array().into_iter().flatten() {
        let arguments: serde_json::Map<String, Value> = prompt["arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| Some((a["name"].as_str()?.to_owned(), json!("1"))))
            .collect();
        for name in arguments.keys() {
            reads.push((
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": prompt["name"]},
                       "argument": {"name": name, "value": ""}}),
            ));
        }
        reads.push((
            "prompts/get",
            json!({"name": prompt["name"], "arguments": arguments}),
        ));
    }
    reads
}

#[tokio::test]
async fn server_everythings_resources_and_prompts_through_the_connector_equal_a_direct_session() {
    use durable_mcp_conformance::fixtures::everything;
    let Some(entry) = everything::entry_or_skip().await else {
        return;
    };
    let env = TestEnv::shared("resources-everything").await;
    let upstream = durable_mcp_conformance::harness::upstream(
        "everything-features",
        durable_mcp::proxy::TransportConfig::stdio(
            "node",
            vec![entry.to_string_lossy().into_owned(), "stdio".into()],
        ),
    );
    let _proxy = start_proxy(&env, vec![upstream]);
    let mut direct = RawStdioClient::start(&entry).await.unwrap();
    let mut proxied = RawStdioClient::spawn(connector_command(&env, "everything-features"))
        .await
        .unwrap();
    for capability in ["resources", "prompts", "completions"] {
        assert_eq!(
            proxied.initialize["capabilities"].get(capability).is_some(),
            direct.initialize["capabilities"].get(capability).is_some(),
            "{capability}: {} vs {}",
            proxied.initialize["capabilities"],
            direct.initialize["capabilities"]
        );
    }
    let mut lists = Vec::new();
    for (method, items) in LISTS {
        let expected = all_pages(&mut direct, method, items).await;
        let got = all_pages(&mut proxied, method, items).await;
        assert_eq!(got, expected, "{method}");
        lists.push(got);
    }
    let reads = everything_reads(&lists[0], &lists[1], &lists[2]);
    eprintln!(
        "compared {} resources, {} templates, {} prompts and {} reads",
        lists[0]["resources"].as_array().map_or(0, Vec::len),
        lists[1]["resourceTemplates"].as_array().map_or(0, Vec::len),
        lists[2]["prompts"].as_array().map_or(0, Vec::len),
        reads.len()
    );
    for (method, params) in reads {
        let expected = direct.exchange(method, params.clone()).await.unwrap();
        let got = proxied.exchange(method, params.clone()).await.unwrap();
        assert_eq!(
            mask_times(&got.response),
            mask_times(&expected.response),
            "{method} {params}"
        );
    }
}

/// server-everything writes the time a dynamic resource was made into its text (and its blob):
/// the text after `created at ` is masked, and a blob is compared by its length.
fn mask_times(value: &Value) -> Value {
    match value {
        Value::String(text) => match text.split_once(" created at ") {
            Some((head, _)) => Value::String(format!("{head} created at <time>")),
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(mask_times).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("blob", Value::String(b)) => {
                        (k.clone(), json!(format!("<{} bytes>", b.len())))
                    }
                    _ => (k.clone(), mask_times(v)),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}
