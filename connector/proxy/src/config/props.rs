//! Property tests of `proxy.toml` (R-CON-51): any TOML, and a valid config with any key set to
//! any value anywhere, parses or is refused with an error naming what to fix; neither the
//! error nor the parsed config's debug output shows a secret the environment expanded.

use proptest::prelude::*;
use toml::{Table, Value};

use super::tests::{EXAMPLE, SECRET, env};
use super::{TransportConfig, parse};

/// The keys a config has (and some it has not).
const KEYS: &[&str] = &[
    "worker",
    "task_queue",
    "max_concurrent_calls",
    "max_watched_resources",
    "temporal",
    "address",
    "namespace",
    "profile",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "tls_server_name",
    "grpc_compression",
    "codec",
    "endpoint",
    "health",
    "metrics",
    "addr",
    "traces",
    "otlp_endpoint",
    "upstream",
    "service",
    "transport",
    "url",
    "command",
    "args",
    "env",
    "cwd",
    "headers",
    "Authorization",
    "allow_insecure_http",
    "activity_options",
    "overrides",
    "start_to_close_timeout",
    "schedule_to_close_timeout",
    "schedule_to_start_timeout",
    "heartbeat_timeout",
    "retry_policy",
    "maximum_attempts",
    "initial_interval",
    "backoff_coefficient",
    "non_retryable_error_types",
    "execution",
    "priority",
    "priority_key",
    "fairness_key",
    "fairness_weight",
    "missing_hints",
    "one_attempt",
    "oauth",
    "client_id",
    "client_auth",
    "token_url",
    "issuer",
    "scopes",
    "audience",
    "resource",
    "learned_urls",
    "summary",
    "search_attributes",
    "nope",
];

const WORDS: &[&str] = &[
    "${WEATHER_TOKEN}",
    "${BAD_URL}",
    "${CRLF}",
    "${NOPE}",
    "${WEATHER_TOKEN:-x}",
    "$${WEATHER_TOKEN}",
    "https://u:${WEATHER_TOKEN}@h/mcp?k=${WEATHER_TOKEN}",
    "30s",
    "0s",
    "-1s",
    "48h",
    "inline",
    "activity",
    "http",
    "stdio",
    "https://h/mcp",
    "http://10.0.0.5/mcp",
    "127.0.0.1:0",
    "mcp_defaults",
    "gzip",
    "",
    "q",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::Integer),
        any::<bool>().prop_map(Value::Boolean),
        any::<f64>().prop_map(Value::Float),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.into())),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|kv| {
                Value::Table(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// One change to a config, in the table `path` picks (walking down through tables and
/// arrays of tables by index): one of its keys (or else `key`) set to a value, or removed.
type Edit = (
    Vec<prop::sample::Index>,
    Option<prop::sample::Index>,
    &'static str,
    Option<Value>,
);

fn edit() -> impl Strategy<Value = Edit> {
    (
        prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        prop::option::weighted(0.75, any::<prop::sample::Index>()),
        prop::sample::select(KEYS),
        prop::option::weighted(0.85, value()),
    )
}

/// The table `path` picks: at each step, one of the tables (or a table of an array of them)
/// of the table reached so far; where there is none, that table.
fn table_at<'a>(table: &'a mut Table, path: &[prop::sample::Index]) -> &'a mut Table {
    let Some((step, rest)) = path.split_first() else {
        return table;
    };
    let nested: Vec<(String, Option<usize>)> = table
        .iter()
        .filter_map(|(k, v)| match v {
            Value::Table(_) => Some((k.clone(), None)),
            Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_table) => {
                Some((k.clone(), Some(step.index(items.len()))))
            }
            _ => None,
        })
        .collect();
    if nested.is_empty() {
        return table;
    }
    let (name, item) = &nested[step.index(nested.len())];
    match (table.get_mut(name), item) {
        (Some(Value::Table(t)), None) => table_at(t, rest),
        (Some(Value::Array(items)), Some(i)) => match &mut items[*i] {
            Value::Table(t) => table_at(t, rest),
            _ => unreachable!("only arrays of tables are picked"),
        },
        _ => unreachable!("only tables and arrays of tables are picked"),
    }
}

/// `new` as a value of `old`'s type, mostly: a config's values are mostly of the right type
/// and wrong in what they say, which validation (not the TOML reader) must catch.
fn retyped(old: Option<&Value>, new: Value) -> Value {
    let pick = |n: usize| WORDS[n % WORDS.len()];
    match (old, &new) {
        (Some(Value::String(_)), Value::Integer(n)) => Value::String(pick(*n as usize).into()),
        (Some(Value::String(_)), Value::Boolean(b)) => Value::String(pick(*b as usize + 2).into()),
        (Some(Value::String(_)), Value::Array(a)) => Value::String(pick(a.len() + 5).into()),
        (Some(Value::String(_)), Value::Table(t)) => Value::String(pick(t.len() + 11).into()),
        (Some(Value::Integer(_)), Value::String(w)) => Value::Integer(w.len() as i64 - 2),
        (Some(Value::Boolean(_)), Value::String(w)) => Value::Boolean(w.is_empty()),
        _ => new,
    }
}

fn apply(table: &mut Table, (path, existing, key, value): &Edit) {
    let at = table_at(table, path);
    let keys: Vec<&String> = at.keys().collect();
    let key = match existing {
        Some(i) if !keys.is_empty() => keys[i.index(keys.len())].clone(),
        _ => (*key).to_owned(),
    };
    let value = value.clone().map(|v| retyped(at.get(&key), v));
    match value {
        Some(v) => at.insert(key, v),
        None => at.remove(&key),
    };
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match parse(text, &env) {
        // What R-PRX-1 redacts: headers, `env` and a URL's user info and query (a command,
        // its arguments and directory are shown as written).
        Ok(config) => {
            for upstream in config.upstreams {
                let mut transport = upstream.transport;
                if let TransportConfig::Stdio {
                    command, args, cwd, ..
                } = &mut transport
                {
                    command.clear();
                    args.clear();
                    *cwd = None;
                }
                let shown = format!("{transport:?}");
                prop_assert!(!shown.contains(SECRET), "{}", shown);
            }
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(!message.is_empty());
            prop_assert!(!message.contains(SECRET), "{message}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_config_with_any_key_changed_parses_or_says_why_without_its_secrets(edits in prop::collection::vec(edit(), 1..4)) {
        let mut table: Table = EXAMPLE.parse().unwrap();
        for e in &edits {
            apply(&mut table, e);
        }
        check(&toml::to_string(&table).unwrap_or_default())?;
    }

    #[test]
    fn any_text_as_a_config_parses_or_says_why(text in "\\PC{0,200}", lines in prop::collection::vec((prop::sample::select(KEYS), prop::sample::select(WORDS)), 0..6)) {
        check(&text)?;
        let written: String = lines.iter().map(|(k, w)| format!("{k} = {w:?}\n")).collect();
        check(&format!("{written}{EXAMPLE}"))?;
    }
}
