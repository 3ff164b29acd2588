//! Requests a caller shapes at will, sent as raw HTTP to the connector binary, are answered,
//! the connection stays open, and nothing panics (R-CON-30).

use std::{net::SocketAddr, time::Duration};

use durable_mcp_conformance::fixtures::Ledger;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader},
    net::TcpStream,
};

use crate::support::*;

/// One HTTP/1.1 answer read off a kept-alive connection: its status and body.
async fn read_answer(stream: &mut BufReader<TcpStream>) -> Option<(u16, String)> {
    let mut status_line = String::new();
    stream.read_line(&mut status_line).await.ok()?;
    let status = status_line.split_whitespace().nth(1)?.parse().ok()?;
    let (mut length, mut chunked) = (0, false);
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.contains("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).await.ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await.ok()?;
            body.extend_from_slice(&chunk[..size]);
            if size == 0 {
                break;
            }
        }
    } else {
        body.resize(length, 0);
        stream.read_exact(&mut body).await.ok()?;
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Sends a POST to `/mcp` with `headers` and `body` on `stream`, keeping the connection open.
async fn post(stream: &mut BufReader<TcpStream>, addr: SocketAddr, headers: &[&str], body: &str) {
    let mut request = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", addr.port());
    for header in headers {
        request.push_str(&format!("{header}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .unwrap();
}

/// The issue's request, as `curl` sent it: a 2026-07-28 `subscriptions/listen` whose `params`
/// is a string. It panicked a Tokio worker in the connector's pre-listen layer and the caller
/// got an empty reply; now it is refused with a JSON-RPC error under its id (R-CON-30), the
/// connection serves the next request, and the log tells of no panic.
#[tokio::test]
async fn a_listen_request_whose_params_is_not_an_object_is_refused_and_panics_nothing() {
    let env = TestEnv::shared("hostile-listen").await;
    let ledger = Ledger::new(temp_path("ledger.jsonl"));
    let _proxy = start_proxy(&env, vec![mock_stdio_upstream("mock", &ledger).unwrap()]);
    let connector = HttpConnectorProcess::start(&env, "mock", &[])
        .await
        .unwrap();
    let headers = [
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2026-07-28",
        "Mcp-Method: subscriptions/listen",
    ];
    let listen = r#"{"jsonrpc":"2.0","id":5,"method":"subscriptions/listen","params":"abc"}"#;
    let stream = TcpStream::connect(connector.addr).await.unwrap();
    let mut stream = BufReader::new(stream);
    post(&mut stream, connector.addr, &headers, listen).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut stream))
        .await
        .expect("an answer within 10 s");
    let (status, body) = answer.expect("an answer, not an empty reply");
    assert_eq!(status, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (error.get("id"), error.pointer("/error/code")),
        (Some(&5.into()), Some(&(-32602).into())),
        "{error}"
    );

    // The same connection serves the next request.
    let discover = r#"{"jsonrpc":"2.0","id":6,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"}}}}"#;
    let headers = [
        headers[0],
        headers[1],
        headers[2],
        "Mcp-Method: server/discover",
    ];
    post(&mut stream, connector.addr, &headers, discover).await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut stream))
        .await
        .expect("an answer within 10 s")
        .expect("the connection stays open");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("durable-mcp-connector"), "{body}");
    assert_eq!(connector.log.panics(), Vec::<String>::new());
}

/// A body over the 4 MiB limit is answered 413 after the connector read the rest of it, so a
/// client still writing reads the refusal instead of a broken pipe (R-CON-19).
#[tokio::test]
async fn an_oversized_body_is_refused_with_413_that_the_client_reads() {
    let env = TestEnv::shared("hostile-oversize").await;
    let connector = HttpConnectorProcess::start(&env, "mock", &[])
        .await
        .unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"cursor":"{}"}}}}"#,
        "x".repeat(6 << 20)
    );
    for _ in 0..3 {
        let answer = client
            .post(&connector.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(big.clone())
            .send()
            .await
            .expect("the refusal, not a broken pipe");
        assert_eq!(answer.status(), 413);
        let text = answer.text().await.unwrap();
        assert!(text.contains("bytes"), "{text}");
    }
    assert_eq!(connector.log.panics(), Vec::<String>::new());
}

/// Over stdio, a line rmcp cannot read as a client message gets R-CON-30's error under its id
/// (rmcp alone answered an "Invalid request" without any id, which no client can match to its
/// request), a line that is no JSON and a notification get none, and the session goes on.
#[tokio::test]
async fn over_stdio_a_request_whose_params_do_not_fit_is_refused_under_its_id() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let env = TestEnv::shared("hostile-stdio").await;
    let mut child = connector_command(&env, "mock")
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    for line in [
        init,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"abc"}"#,
        "{not json",
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}"#,
        r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
    ] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut answers = Vec::new();
    while answers.len() < 4 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .expect("the connector is still running");
        answers.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    let error = |id: serde_json::Value| {
        answers
            .iter()
            .find(|a| a.get("id") == Some(&id))
            .and_then(|a| a.pointer("/error/code"))
            .cloned()
    };
    assert_eq!(error(5.into()), Some((-32602).into()), "{answers:?}");
    assert_eq!(
        error(serde_json::Value::Null),
        Some((-32600).into()),
        "{answers:?}"
    );
    let pong = answers.iter().find(|a| a.get("id") == Some(&6.into()));
    assert_eq!(
        pong.and_then(|a| a.get("result")),
        Some(&serde_json::json!({})),
        "{answers:?}"
    );
}
