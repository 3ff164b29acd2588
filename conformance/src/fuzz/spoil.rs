//! How a case spoils a well-formed request (R-CNF-26): the families of [`super::cases`] that
//! work on bytes and headers rather than on JSON values.

use proptest::prelude::RngExt as _;
use proptest::test_runner::TestRng;
use serde_json::{Value, json};

use super::cases::{Case, Session, Verb, text};

/// Broken nesting: nested past any parser's depth, cut short, unbalanced, a batch, trailing
/// bytes, duplicate keys, comments, numbers no JSON parser can hold.
pub fn broken(rng: &mut TestRng, message: &Value) -> Vec<u8> {
    let text = message.to_string();
    match rng.random_range(0..9) {
        0 => {
            let depth = rng.random_range(100..20_000);
            let (open, close) = if rng.random_bool(0.5) {
                ("[", "]")
            } else {
                ("{\"a\":", "}")
            };
            let nested = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            splice_params(&text, &nested)
        }
        1 => {
            let cut = rng.random_range(0..text.len().max(1));
            text.as_bytes()[..cut].to_vec()
        }
        2 => format!("{text}{}", "}".repeat(rng.random_range(1..4))).into_bytes(),
        3 => format!("[{text},{text}]").into_bytes(),
        4 => format!("{text} {text}").into_bytes(),
        5 => text
            .replacen("{", "{\"jsonrpc\":\"1.0\",\"id\":{},", 1)
            .into_bytes(),
        6 => format!("/* c */{text}").into_bytes(),
        7 => splice_params(&text, "1e999999"),
        _ => splice_params(
            &text,
            &format!("-{}", "9".repeat(rng.random_range(20..5000))),
        ),
    }
}

/// `text` with its params (or, without params, a new `params` member) as `raw`.
fn splice_params(text: &str, raw: &str) -> Vec<u8> {
    match text.find("\"params\":") {
        Some(at) => {
            let start = at + "\"params\":".len();
            let mut depth = 0i64;
            let mut end = text.len();
            for (i, b) in text.bytes().enumerate().skip(start) {
                match b {
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => depth -= 1,
                    _ => {}
                }
                if depth <= 0 {
                    end = i + 1;
                    break;
                }
            }
            format!(
                "{}{raw}{}",
                &text[..start],
                text.get(end..).unwrap_or_default()
            )
            .into_bytes()
        }
        None => text
            .replacen('{', &format!("{{\"params\":{raw},"), 1)
            .into_bytes(),
    }
}

/// Bytes that are not UTF-8, escapes of lone surrogates, NULs: inside a string of the message.
pub fn bad_utf8(rng: &mut TestRng, message: &Value) -> Vec<u8> {
    let text = message.to_string();
    let bad: &[&[u8]] = &[
        b"\xff\xfe",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\\ud800",
        b"\\udfff\\ud800",
        b"\\u0000",
        b"\x80",
    ];
    let insert = bad[rng.random_range(0..bad.len())];
    // Inside the first string value after the method, else anywhere.
    let at = text
        .find("\"method\":\"")
        .map(|m| m + "\"method\":\"".len())
        .filter(|_| rng.random_bool(0.3))
        .or_else(|| {
            let quotes: Vec<usize> = text.match_indices('"').map(|(i, _)| i + 1).collect();
            (!quotes.is_empty()).then(|| quotes[rng.random_range(0..quotes.len())])
        })
        .unwrap_or(0);
    let mut bytes = text.into_bytes();
    bytes.splice(at..at, insert.iter().copied());
    bytes
}

/// A large string (64 KiB to past the 4 MiB request limit), or a long array or an object of
/// many keys, in the params. Written as text into the serialized message (building it as a
/// JSON value and serializing it cost the runner more than the server).
pub fn oversize(rng: &mut TestRng, mut message: Value) -> Vec<u8> {
    const MARK: &str = "\u{1}durable-mcp-fuzz-big\u{1}";
    let size = match rng.random_range(0..10) {
        0..4 => 64 << 10,
        4..7 => 1 << 20,
        7..9 => (4 << 20) + 1,
        _ => 6 << 20,
    };
    let many = rng.random_range(1_000..100_000);
    let big = match rng.random_range(0..4) {
        0 => format!("[{}1]", "1,".repeat(many)),
        1 => {
            let keys: String = (0..many).map(|i| format!("\"k{i}\":0,")).collect();
            format!("{{{keys}\"k\":0}}")
        }
        _ => format!("\"{}\"", "x".repeat(size)),
    };
    let slot = ["arguments", "cursor", "uri", "name", "_meta", "padding"];
    let slot = slot[rng.random_range(0..slot.len())];
    if let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) {
        params.insert(slot.into(), json!(MARK));
    } else if let Some(fields) = message.as_object_mut() {
        fields.insert("params".into(), json!({ slot: MARK }));
    }
    let text = message.to_string();
    let mark = json!(MARK).to_string();
    text.replacen(&mark, &big, 1).into_bytes()
}

/// Headers at odds with the body, or a verb that is no POST.
pub fn odd_headers(rng: &mut TestRng, case: &mut Case) {
    let set = |case: &mut Case, name: &str, value: Vec<u8>| {
        case.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        case.headers.push((name.to_owned(), value));
    };
    match rng.random_range(0..11) {
        0 => set(case, "Mcp-Method", text(rng).into_bytes()),
        1 => set(case, "Mcp-Name", text(rng).into_bytes()),
        2 => {
            let versions = [
                "2026-07-28",
                "2025-11-25",
                "2024-11-05",
                "2099-01-01",
                "",
                "x",
            ];
            let version = versions[rng.random_range(0..versions.len())];
            set(case, "MCP-Protocol-Version", version.into());
        }
        3 => case
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("Accept")),
        4 => {
            let types = [
                "text/plain",
                "application/json; charset=latin1",
                "multipart/form-data",
                "",
            ];
            let kind = types[rng.random_range(0..types.len())];
            set(case, "Content-Type", kind.into());
        }
        5 => case.session = Session::Made(text(rng).into_bytes()),
        6 => case.session = Session::Made(Vec::new()),
        7 => {
            case.verb = Verb::Get;
            if rng.random_bool(0.5) {
                set(case, "Last-Event-ID", text(rng).into_bytes());
            }
        }
        8 => {
            case.verb = Verb::Delete;
            case.session = Session::Fresh;
        }
        9 => set(case, "Mcp-Method", vec![0xff, b'x', 0x80]),
        _ => set(case, "X-Padding", vec![b'a'; rng.random_range(1..16_000)]),
    }
}
