//! `proxy.toml` parsing end to end: every documented key, expansion, validation, redaction.

use std::time::Duration;

use super::{expand::expand, *};
use crate::options::RetryPolicySpec;

pub(super) const SECRET: &str = "s3cr3t-t0ken";

pub(super) fn env(name: &str) -> Option<String> {
    match name {
        "WEATHER_TOKEN" => Some(SECRET.into()),
        "EMPTY" => Some(String::new()),
        "BAD_URL" => Some(format!("not a url {SECRET}")),
        "CRLF" => Some(format!("{SECRET}\r\nX-Injected: 1")),
        _ => None,
    }
}

pub(super) const EXAMPLE: &str = r#"
[worker]
task_queue = "mcp-proxy"
max_concurrent_calls = 100
max_watched_resources = 1000

[temporal]
address = "localhost:7233"
namespace = "default"

[health]
addr = "0.0.0.0:8081"

[metrics]
addr = "0.0.0.0:9464"

[[upstream]]
service = "weather-tools"
transport = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${WEATHER_TOKEN}" }
[upstream.activity_options]
start_to_close_timeout = "30s"
[upstream.overrides.get_forecast_report]
start_to_close_timeout = "48h"
retry_policy = { maximum_attempts = 3 }

[[upstream]]
service = "files"
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything", "stdio"]
env = { LOG_LEVEL = "warn" }
cwd = "/tmp"
"#;

/// The error message for `text`, which must fail.
fn error(text: &str) -> String {
    parse(text, &env)
        .expect_err("config should be rejected")
        .to_string()
}

/// A minimal config with one upstream whose body is `upstream`.
fn with_upstream(upstream: &str) -> String {
    format!("[worker]\ntask_queue = \"q\"\n[[upstream]]\n{upstream}\n")
}

fn http(extra: &str) -> String {
    with_upstream(&format!(
        "service = \"s\"\ntransport = \"http\"\nurl = \"https://h/mcp\"\n{extra}"
    ))
}

fn stdio(extra: &str) -> String {
    with_upstream(&format!(
        "service = \"s\"\ntransport = \"stdio\"\ncommand = \"server\"\n{extra}"
    ))
}

#[test]
fn full_example_parses() {
    let config = parse(EXAMPLE, &env).unwrap();
    assert_eq!(
        config.health,
        Some(HealthSection {
            addr: "0.0.0.0:8081".parse().unwrap()
        })
    );
    assert_eq!(
        config.metrics,
        Some(MetricsSection {
            addr: "0.0.0.0:9464".parse().unwrap()
        })
    );
    assert_eq!(
        config.worker,
        WorkerSection {
            task_queue: "mcp-proxy".into(),
            max_concurrent_calls: Some(100),
            max_watched_resources: Some(1000),
        }
    );
    assert_eq!(
        config.temporal,
        Some(TemporalSection {
            address: Some("localhost:7233".into()),
            namespace: Some("default".into()),
            ..Default::default()
        })
    );
    let [weather, files] = &config.upstreams[..] else {
        panic!("two upstreams expected")
    };

    assert_eq!(weather.service, "weather-tools");
    assert_eq!(
        weather.transport,
        TransportConfig::Http {
            url: Url::parse("https://mcp.example.com/mcp").unwrap(),
            headers: BTreeMap::from([("Authorization".into(), format!("Bearer {SECRET}"))]),
            unavailable_means_not_run: false,
            oauth: None,
        }
    );
    assert_eq!(
        weather.activity_options.start_to_close_timeout,
        Some(Duration::from_secs(30))
    );
    let report = &weather.overrides["get_forecast_report"];
    assert_eq!(
        report.start_to_close_timeout,
        Some(Duration::from_secs(48 * 3600))
    );
    assert_eq!(
        report.retry_policy,
        Some(RetryPolicySpec {
            maximum_attempts: Some(3),
            ..Default::default()
        })
    );

    assert_eq!(files.service, "files");
    assert_eq!(
        files.transport,
        TransportConfig::Stdio {
            command: "npx".into(),
            args: vec![
                "-y".into(),
                "@modelcontextprotocol/server-everything".into(),
                "stdio".into()
            ],
            env: BTreeMap::from([("LOG_LEVEL".into(), "warn".into())]),
            cwd: Some(PathBuf::from("/tmp")),
            inherit_env: false,
            discover_wait: None,
        }
    );
    assert_eq!(files.activity_options, ActivityOptions::default());
    assert!(files.overrides.is_empty());
}

#[test]
fn optional_sections_may_be_left_out() {
    let config = parse(&stdio(""), &env).unwrap();
    assert_eq!(config.temporal, None);
    assert_eq!(config.health, None);
    assert_eq!(config.worker.max_concurrent_calls, None);
    assert_eq!(
        config.upstreams[0].transport,
        TransportConfig::stdio("server", vec![])
    );
}

#[test]
fn expansion_with_default_and_escape() {
    let expand = |s: &str| expand(s, "f", &env);
    assert_eq!(
        expand("Bearer ${WEATHER_TOKEN}").unwrap(),
        format!("Bearer {SECRET}")
    );
    assert_eq!(expand("${UNSET:-fallback}/x").unwrap(), "fallback/x");
    assert_eq!(expand("${UNSET:-}").unwrap(), "");
    assert_eq!(
        expand("${EMPTY:-used when empty}").unwrap(),
        "used when empty"
    );
    assert_eq!(expand("${EMPTY}").unwrap(), "");
    assert_eq!(expand("${WEATHER_TOKEN:-unused}").unwrap(), SECRET);
    assert_eq!(
        expand("cost: $$5 and $${NOT_EXPANDED}").unwrap(),
        "cost: $5 and ${NOT_EXPANDED}"
    );
    assert_eq!(expand("no variables").unwrap(), "no variables");
    assert_eq!(expand("${UNSET:-a:-b}").unwrap(), "a:-b");
    for bad in [
        "$HOME",
        "trailing $",
        "${UNCLOSED",
        "${}",
        "${1X}",
        "${A-B}",
    ] {
        let message = expand(bad).unwrap_err().to_string();
        assert!(message.starts_with("f: "), "{bad}: {message}");
    }
}

#[test]
fn expansion_applies_to_every_documented_field() {
    let text = with_upstream(
        r#"service = "s"
transport = "stdio"
command = "${UNSET:-npx}"
args = ["--token-file", "${UNSET:-/run}/t"]
env = { TOKEN = "${WEATHER_TOKEN}" }
cwd = "${UNSET:-/srv}""#,
    );
    let TransportConfig::Stdio {
        command,
        args,
        env: vars,
        cwd,
        ..
    } = parse(&text, &env).unwrap().upstreams.remove(0).transport
    else {
        panic!("stdio expected")
    };
    assert_eq!(
        (command.as_str(), args[1].as_str(), vars["TOKEN"].as_str()),
        ("npx", "/run/t", SECRET)
    );
    assert_eq!(cwd, Some(PathBuf::from("/srv")));

    let text = with_upstream(
        "service = \"s\"\ntransport = \"http\"\nurl = \"https://${UNSET:-h.example}/mcp\"",
    );
    let TransportConfig::Http { url, .. } = &parse(&text, &env).unwrap().upstreams[0].transport
    else {
        panic!("http expected")
    };
    assert_eq!(url.as_str(), "https://h.example/mcp");
}

#[test]
fn missing_variable_names_the_field_and_variable() {
    let text = EXAMPLE.replace("WEATHER_TOKEN", "NO_SUCH_TOKEN");
    assert_eq!(
        error(&text),
        "upstream[0].headers.Authorization: environment variable NO_SUCH_TOKEN is not set"
    );
    assert_eq!(
        error(&stdio("args = [\"a\", \"${NOPE}\"]")),
        "upstream[0].args[1]: environment variable NOPE is not set"
    );
    assert_eq!(
        error(&stdio("env = { K = \"${NOPE}\" }")),
        "upstream[0].env.K: environment variable NOPE is not set"
    );
}

#[test]
fn errors_never_show_expanded_values() {
    let cases = [
        with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"${BAD_URL}\""),
        with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"ftp://${WEATHER_TOKEN}/\""),
        http("headers = { X = \"${CRLF}\" }"),
        http("headers = { X = \"${WEATHER_TOKEN}\", Y = \"${NOPE}\" }"),
    ];
    for text in cases {
        let message = error(&text);
        assert!(message.starts_with("upstream[0]."), "{message}");
        assert!(!message.contains(SECRET), "{message}");
    }
}

#[test]
fn validation_errors_name_their_field() {
    let cases = [
        (
            with_upstream("service = \"\"\ntransport = \"stdio\"\ncommand = \"x\""),
            "upstream[0].service: must not be empty",
        ),
        (
            with_upstream("service = \"a b\"\ntransport = \"stdio\"\ncommand = \"x\""),
            "upstream[0].service: ",
        ),
        (
            format!(
                "{}\n[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"y\"",
                stdio("")
            ),
            "upstream[1].service: duplicate service name \"s\", already used by upstream[0]",
        ),
        (
            with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"ftp://h/\""),
            "upstream[0].url: scheme must be http or https",
        ),
        (
            with_upstream("service = \"s\"\ntransport = \"http\"\nurl = \"/relative\""),
            "upstream[0].url: not a valid URL",
        ),
        (
            with_upstream("service = \"s\"\ntransport = \"http\""),
            "upstream[0].url: required for transport = \"http\"",
        ),
        (
            with_upstream("service = \"s\"\ntransport = \"stdio\"\ncommand = \" \""),
            "upstream[0].command: must not be empty",
        ),
        (
            with_upstream("service = \"s\"\ntransport = \"stdio\""),
            "upstream[0].command: required for transport = \"stdio\"",
        ),
        (
            stdio("url = \"https://h/\""),
            "upstream[0].url: only for transport = \"http\"",
        ),
        (
            stdio("discover_wait = \"11s\""),
            "upstream[0].discover_wait: must be more than zero and at most 10s",
        ),
        (
            stdio("discover_wait = \"0s\""),
            "upstream[0].discover_wait: must be more than zero",
        ),
        (
            with_upstream(
                "service = \"s\"\ntransport = \"http\"\nurl = \"https://h/\"\ndiscover_wait = \"1s\"",
            ),
            "upstream[0].discover_wait: only for transport = \"stdio\"",
        ),
        (
            http("args = []"),
            "upstream[0].args: only for transport = \"stdio\"",
        ),
        (
            http("headers = { \"Bad Name\" = \"v\" }"),
            "upstream[0].headers.Bad Name: not a valid HTTP header name",
        ),
        (stdio("cwd = \"\""), "upstream[0].cwd: must not be empty"),
        (
            stdio("[upstream.activity_options]\nretry_policy = { maximum_attempts = -2 }"),
            "upstream[0].activity_options.retry_policy.maximum_attempts: must be 0 (unlimited) or more",
        ),
        (
            stdio("[upstream.overrides.slow_tool]\nheartbeat_timeout = \"0s\""),
            "upstream[0].overrides.slow_tool.heartbeat_timeout: must be longer than zero",
        ),
        (
            "[worker]\ntask_queue = \"q\"\n".to_owned(),
            "upstream: no upstreams",
        ),
        (
            stdio("").replace("task_queue = \"q\"", "task_queue = \"\""),
            "worker.task_queue: must not be empty",
        ),
        (
            stdio("").replace(
                "task_queue = \"q\"",
                "task_queue = \"q\"\nmax_concurrent_calls = 0",
            ),
            "worker.max_concurrent_calls: ",
        ),
        (
            stdio("").replace(
                "task_queue = \"q\"",
                "task_queue = \"q\"\nmax_watched_resources = 0",
            ),
            "worker.max_watched_resources: must be between 1 and 100000",
        ),
        (
            format!("[temporal]\nnamespace = \"\"\n{}", stdio("")),
            "temporal.namespace: must not be empty",
        ),
        (
            format!("[temporal]\ntls_ca = \"\"\n{}", stdio("")),
            "temporal.tls_ca: must not be empty",
        ),
    ];
    for (text, expected) in cases {
        let message = error(&text);
        assert!(
            message.starts_with(expected),
            "expected {expected:?}, got {message:?}"
        );
    }
}

#[test]
fn shape_errors_name_the_key_and_line() {
    let cases = [
        (http("colour = \"red\""), "unknown field `colour`"),
        (
            http("[upstream.activity_options]\nstart_to_close = \"30s\""),
            "unknown field `start_to_close`",
        ),
        (
            http("[upstream.overrides.t]\nretry_policy = { max_attempts = 3 }"),
            "unknown field `max_attempts`",
        ),
        (
            http("[upstream.activity_options]\nstart_to_close_timeout = \"soon\""),
            "start_to_close_timeout = \"soon\"",
        ),
        (
            http("[upstream.activity_options]\nstart_to_close_timeout = 30"),
            "start_to_close_timeout = 30",
        ),
        (
            http("").replace("transport = \"http\"", "transport = \"websocket\""),
            "unknown variant `websocket`",
        ),
        (
            format!("[temporal]\ngrpc_compression = \"zstd\"\n{}", stdio("")),
            "unknown variant `zstd`, expected `gzip` or `none`",
        ),
        (
            with_upstream("transport = \"stdio\"\ncommand = \"x\""),
            "missing field `service`",
        ),
        (
            "[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n".to_owned(),
            "missing field `worker`",
        ),
        (
            "[worker]\ntask_queue = \"q\"\nthreads = 4\n".to_owned(),
            "unknown field `threads`",
        ),
        ("[worker\n".to_owned(), "line 1"),
    ];
    for (text, expected) in cases {
        let message = error(&text);
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message}"
        );
        assert!(message.contains("line "), "no line number in {message}");
    }
}

#[test]
fn debug_output_redacts_credentials() {
    let config = parse(
        EXAMPLE
            .replace("/mcp\"", "/mcp?api_key=${WEATHER_TOKEN}\"")
            .as_str(),
        &env,
    )
    .unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains(SECRET), "{debug}");
    assert!(!debug.contains("warn"), "{debug}");
    assert!(
        debug.contains(r#"headers: {"Authorization": "***"}"#),
        "{debug}"
    );
    assert!(debug.contains(r#"env: {"LOG_LEVEL": "***"}"#), "{debug}");
    assert!(debug.contains("https://mcp.example.com/mcp?***"), "{debug}");

    let with_password = TransportConfig::Http {
        url: Url::parse(&format!("https://user:{SECRET}@h/mcp")).unwrap(),
        headers: BTreeMap::new(),
        unavailable_means_not_run: false,
        oauth: None,
    };
    let debug = format!("{with_password:?}");
    assert!(
        !debug.contains(SECRET) && debug.contains("***:***@h"),
        "{debug}"
    );
}

#[test]
fn load_reads_a_file_and_names_it_when_missing() {
    let path = std::env::temp_dir().join(format!("durable-mcp-proxy-{}.toml", std::process::id()));
    std::fs::write(&path, "[worker]\ntask_queue = \"q\"\n[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n")
        .unwrap();
    let loaded = load(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(loaded.unwrap().upstreams[0].service, "s");

    let missing = load(Path::new("/nonexistent/proxy.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.starts_with("cannot read /nonexistent/proxy.toml: "),
        "{missing}"
    );
}

#[test]
fn plain_http_with_credentials_is_refused_off_loopback() {
    let upstream = |url: &str, extra: &str| {
        with_upstream(&format!(
            "service = \"s\"\ntransport = \"http\"\nurl = \"{url}\"\n{extra}"
        ))
    };
    let header = "headers = { Authorization = \"Bearer ${WEATHER_TOKEN}\" }";
    for (url, extra) in [
        ("http://mcp.example.com/mcp", header),
        ("http://10.0.0.5/mcp?key=${WEATHER_TOKEN}", ""),
        ("http://user:${WEATHER_TOKEN}@mcp.example.com/mcp", ""),
        ("http://${WEATHER_TOKEN}@mcp.example.com/mcp", ""),
    ] {
        let error = parse(&upstream(url, extra), &env).unwrap_err().to_string();
        assert!(
            error.starts_with("upstream[0].url: plain http to a host that is not loopback")
                && error.contains("allow_insecure_http = true")
                && !error.contains(SECRET),
            "{url}: {error}"
        );
        let allowed = format!("{extra}\nallow_insecure_http = true");
        parse(&upstream(url, &allowed), &env).unwrap();
    }
    // https, loopback, and plain http without credentials are fine.
    for (url, extra) in [
        ("https://mcp.example.com/mcp?key=${WEATHER_TOKEN}", header),
        ("http://127.0.0.1:3001/mcp?key=${WEATHER_TOKEN}", header),
        ("http://localhost:3001/mcp", header),
        ("http://[::1]:3001/mcp", header),
        ("http://mcp.example.com/mcp", ""),
    ] {
        parse(&upstream(url, extra), &env).unwrap();
    }
    let misplaced = parse(&stdio("allow_insecure_http = true"), &env)
        .unwrap_err()
        .to_string();
    assert!(
        misplaced.starts_with("upstream[0].allow_insecure_http: only for transport = \"http\""),
        "{misplaced}"
    );
}

#[test]
fn url_secrets_are_scrubbed_from_any_text() {
    let url = Url::parse(&format!(
        "https://bot:{SECRET}@h.example/mcp?api_key={SECRET}&v=1&sig=a%2Bb%2Fc%3D%3D"
    ))
    .unwrap();
    let secrets = UrlSecrets::of(&url);
    let text = format!(
        "error sending request for url ({url}): refused; key {SECRET}; sig a+b/c== and a%2Bb%2Fc%3D%3D; version 1"
    );
    let scrubbed = secrets.scrub(&text);
    assert_eq!(
        scrubbed,
        "error sending request for url (https://***:***@h.example/mcp?***): refused; key ***; \
         sig *** and ***; version 1"
    );
    assert!(!format!("{secrets:?}").contains(SECRET));
    // Nothing secret, nothing changed.
    let plain = UrlSecrets::of(&Url::parse("http://127.0.0.1:9/mcp").unwrap());
    assert_eq!(
        plain.scrub("url (http://127.0.0.1:9/mcp)"),
        "url (http://127.0.0.1:9/mcp)"
    );
    // A JSON-RPC error's data: secrets go from every string, numbers and shape stay.
    let data = serde_json::json!({"n": 1, "k": [format!("key {SECRET}"), 2.5], SECRET: null});
    assert_eq!(
        secrets.scrub_json(data.clone()),
        serde_json::json!({"n": 1, "k": ["key ***", 2.5], "***": null})
    );
    assert_eq!(plain.scrub_json(data.clone()), data);
}

#[test]
fn oauth_config_is_validated_field_by_field() {
    let oauth = |body: &str| http(&format!("[upstream.oauth]\n{body}"));
    let good = "token_url = \"https://auth.example/token\"\nclient_id = \"proxy\"\n\
                client_secret_env = \"WEATHER_TOKEN\"\nscopes = [\"tools:call\"]\n\
                audience = \"https://h\"";
    let config = parse(&oauth(good), &env).unwrap();
    let TransportConfig::Http {
        oauth: Some(credentials),
        unavailable_means_not_run,
        ..
    } = &config.upstreams[0].transport
    else {
        panic!("oauth expected")
    };
    assert!(!unavailable_means_not_run, "off by default");
    assert_eq!(
        credentials.client_auth,
        ClientAuth::SecretBasic {
            secret: SECRET.into()
        }
    );
    assert_eq!(credentials.scopes, ["tools:call"]);
    // RFC 8707: the upstream's canonical URL, without its user info, query or fragment.
    assert_eq!(
        credentials.resource.as_ref().map(Url::as_str),
        Some("https://h/mcp")
    );
    assert_eq!(
        canonical_resource(&"HTTPS://u:p@Weather.Example/mcp?k=v#f".parse().unwrap()).as_str(),
        "https://weather.example/mcp"
    );
    let debug = format!("{:?}", config.upstreams[0]);
    assert!(!debug.contains(SECRET), "{debug}");

    for (body, field, problem) in [
        (
            good.replace("https://auth.example", "http://auth.example"),
            "token_url",
            "must be https",
        ),
        (
            good.replace("WEATHER_TOKEN", "UNSET_SECRET"),
            "client_secret_env",
            "UNSET_SECRET is not set",
        ),
        (
            good.replace("client_id = \"proxy\"", "client_id = \" \""),
            "client_id",
            "must not be empty",
        ),
        (
            good.replace("tools:call", "tools call"),
            "scopes[0]",
            "not an OAuth scope token",
        ),
        (
            format!("{good}\nauth_method = \"tls_client_auth\""),
            "auth_method",
            "client_secret_post or private_key_jwt",
        ),
        (
            format!("{good}\nauth_method = \"private_key_jwt\""),
            "client_secret_env",
            "not used by auth_method = \"private_key_jwt\"",
        ),
        (
            good.replace(
                "client_secret_env = \"WEATHER_TOKEN\"",
                "auth_method = \"private_key_jwt\"",
            ),
            "private_key_file",
            "required for private_key_jwt",
        ),
        (
            format!("{good}\nkey_id = \"k\""),
            "key_id",
            "not used by auth_method = \"client_secret_basic\"",
        ),
        (
            format!("{good}\nresource = \"https://h/mcp#x\""),
            "resource",
            "without a fragment",
        ),
    ] {
        let error = parse(&oauth(&body), &env).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("upstream[0].oauth.{field}: ")) && error.contains(problem),
            "{error}"
        );
        assert!(!error.contains(SECRET), "{error}");
    }
    // Loopback token endpoints may be plain http.
    parse(
        &oauth(&good.replace("https://auth.example", "http://127.0.0.1:9")),
        &env,
    )
    .unwrap();
    let both = http(&format!(
        "headers = {{ Authorization = \"Bearer x\" }}\n[upstream.oauth]\n{good}"
    ));
    let error = parse(&both, &env).unwrap_err().to_string();
    assert!(error.starts_with("upstream[0].oauth: "), "{error}");
    let misplaced = parse(&stdio("unavailable_means_not_run = true"), &env)
        .unwrap_err()
        .to_string();
    assert!(
        misplaced.starts_with("upstream[0].unavailable_means_not_run: only for transport"),
        "{misplaced}"
    );
    let flag = parse(&http("unavailable_means_not_run = true"), &env).unwrap();
    assert!(matches!(
        flag.upstreams[0].transport,
        TransportConfig::Http {
            unavailable_means_not_run: true,
            ..
        }
    ));
}

#[test]
fn allow_private_urls_is_read_only_where_discovery_learns_urls() {
    let no_issuer =
        "[upstream.oauth]\nclient_id = \"proxy\"\nclient_secret_env = \"WEATHER_TOKEN\"";
    let discovering = format!("{no_issuer}\nissuer = \"https://auth.example\"");
    let config = parse(
        &http(&format!(
            "allow_private_urls = [\"10.0.0.0/8\", \"fd00::1\"]\n{discovering}"
        )),
        &env,
    )
    .unwrap();
    let TransportConfig::Http {
        oauth: Some(credentials),
        ..
    } = &config.upstreams[0].transport
    else {
        panic!("oauth expected")
    };
    assert_eq!(credentials.token_url, None, "found by discovery");
    assert_eq!(
        credentials.issuer,
        Some("https://auth.example".parse().unwrap())
    );
    assert_eq!(
        credentials.learned_urls.allowed,
        [
            "10.0.0.0/8".parse().unwrap(),
            "fd00::1/128".parse().unwrap()
        ]
    );
    let named = format!("{discovering}\ntoken_url = \"https://auth.example/token\"");
    for (extra, field, problem) in [
        (
            format!("allow_private_urls = [\"10.0.0.0/33\"]\n{discovering}"),
            "allow_private_urls[0]",
            "not a CIDR range",
        ),
        (
            format!("allow_private_urls = [\"10.0.0.0/8\"]\n{named}"),
            "allow_private_urls",
            "only for an oauth table without token_url",
        ),
        (
            no_issuer.to_owned(),
            "oauth.issuer",
            "required without token_url: set issuer",
        ),
        (
            format!(
                "{no_issuer}\ntoken_url = \"https://a.example/t\"\nissuer = \"https://a.example\""
            ),
            "oauth.issuer",
            "only without token_url",
        ),
        (
            format!("{no_issuer}\nissuer = \"http://auth.example\""),
            "oauth.issuer",
            "must be https",
        ),
        (
            "allow_private_urls = [\"10.0.0.0/8\"]".to_owned(),
            "allow_private_urls",
            "only with [upstream.oauth] without token_url",
        ),
    ] {
        let error = parse(&http(&extra), &env).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("upstream[0].{field}: ")) && error.contains(problem),
            "{error}"
        );
    }
    let misplaced = parse(&stdio("allow_private_urls = []"), &env)
        .unwrap_err()
        .to_string();
    assert!(
        misplaced.starts_with("upstream[0].allow_private_urls: only for transport"),
        "{misplaced}"
    );
}

/// A minimal config with a `[codec]` table whose body is `codec`.
fn with_codec(codec: &str) -> String {
    format!(
        "[worker]\ntask_queue = \"q\"\n[codec]\n{codec}\n[[upstream]]\nservice = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n"
    )
}

#[test]
fn codec_table_is_expanded_checked_and_redacted() {
    let config = parse(
        &with_codec(
            "endpoint = \"https://codec.example.com/c\"\nheaders = { Authorization = \"Bearer ${WEATHER_TOKEN}\" }\ntimeout = \"3s\"",
        ),
        &env,
    )
    .unwrap();
    let codec = config.codec.clone().unwrap();
    assert_eq!(codec.endpoint, "https://codec.example.com/c");
    assert_eq!(codec.headers["Authorization"], format!("Bearer {SECRET}"));
    assert_eq!(codec.timeout, Some(Duration::from_secs(3)));
    assert!(codec.client("default").is_ok());
    let shown = format!("{config:?}");
    assert!(
        shown.contains("Authorization") && !shown.contains(SECRET),
        "{shown}"
    );
    // Without the table, no codec.
    assert!(
        parse(
            &with_upstream("service = \"s\"\ntransport = \"stdio\"\ncommand = \"x\""),
            &env
        )
        .unwrap()
        .codec
        .is_none()
    );
}

#[test]
fn codec_errors_name_the_field_and_never_the_value() {
    let plain = error(&with_codec("endpoint = \"http://codec.example.com\""));
    assert!(
        plain.starts_with("codec.endpoint: plain http is accepted only to a loopback address"),
        "{plain}"
    );
    assert!(parse(&with_codec("endpoint = \"http://127.0.0.1:9\""), &env).is_ok());
    let bad = error(&with_codec("endpoint = \"${BAD_URL}\""));
    assert!(
        bad.starts_with("codec.endpoint: not a valid URL") && !bad.contains(SECRET),
        "{bad}"
    );
    let unset = error(&with_codec(
        "endpoint = \"https://c\"\nheaders = { X = \"${NOPE}\" }",
    ));
    assert!(
        unset.starts_with("codec.headers.X: environment variable NOPE"),
        "{unset}"
    );
    let crlf = error(&with_codec(
        "endpoint = \"https://c\"\nheaders = { X = \"${CRLF}\" }",
    ));
    assert!(
        crlf.starts_with("codec.headers.X: ") && !crlf.contains(SECRET),
        "{crlf}"
    );
    let zero = error(&with_codec("endpoint = \"https://c\"\ntimeout = \"0s\""));
    assert!(zero.starts_with("codec.timeout: "), "{zero}");
    let unknown = error(&with_codec("endpoint = \"https://c\"\nauth = \"x\""));
    assert!(unknown.contains("auth"), "{unknown}");
}

#[test]
fn a_stdio_upstreams_discover_wait_is_read() {
    let config = parse(&stdio("discover_wait = \"1500ms\""), &env).unwrap();
    let TransportConfig::Stdio { discover_wait, .. } = &config.upstreams[0].transport else {
        panic!("a stdio upstream")
    };
    assert_eq!(*discover_wait, Some(std::time::Duration::from_millis(1500)));
    let config = parse(&stdio(""), &env).unwrap();
    let TransportConfig::Stdio { discover_wait, .. } = &config.upstreams[0].transport else {
        panic!("a stdio upstream")
    };
    assert_eq!(*discover_wait, None, "the default applies");
}
