//! The remote codec client's bounds (R-PAY-5), against real HTTP servers that misbehave: one
//! that never answers, one that answers without end. Neither needs Temporal.

use std::time::Duration;

use axum::{Router, body::Body, routing::post};
use durable_mcp::{
    contract::payload::{self, PayloadCodec},
    temporal::codec::{CodecOptions, MAX_CODEC_RESPONSE_BYTES, RemoteCodec},
};

/// A server whose `/stuck/*` never answers and whose `/endless/*` streams zeros forever (no
/// Content-Length), and `/huge/*` announces a body over the cap.
async fn misbehaving_codec() -> (String, tokio::task::JoinHandle<()>) {
    let endless = || async {
        let chunk = bytes_of(1024 * 1024);
        Body::from_stream(futures::stream::repeat_with(move || {
            Ok::<_, std::io::Error>(chunk.clone())
        }))
    };
    let app = Router::new()
        .route(
            "/stuck/encode",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                "never"
            }),
        )
        .route("/endless/decode", post(endless))
        .route(
            "/huge/decode",
            post(|| async { "x".repeat(MAX_CODEC_RESPONSE_BYTES + 1) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, task)
}

fn bytes_of(n: usize) -> axum::body::Bytes {
    axum::body::Bytes::from(vec![b'0'; n])
}

#[tokio::test]
async fn a_codec_that_never_answers_times_out_and_an_endless_answer_is_cut_off() {
    let (base, _server) = misbehaving_codec().await;
    let one = || vec![payload::to_payload(&serde_json::json!({"a": 1})).unwrap()];

    // Without a timeout this would wait for an hour; the outer bound only keeps a broken build
    // from hanging the suite.
    let stuck = RemoteCodec::with_options(
        &format!("{base}/stuck"),
        "default",
        CodecOptions {
            timeout: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    )
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(120), stuck.encode(one()))
        .await
        .expect("the codec request was not bounded by its timeout")
        .unwrap_err()
        .to_string();
    assert!(err.contains("codec /encode unreachable"), "{err}");
    assert!(!err.contains("/stuck"), "the error repeats the URL: {err}");

    for (path, what) in [
        ("endless", "a stream without end"),
        ("huge", "a large body"),
    ] {
        let codec = RemoteCodec::new(&format!("{base}/{path}"), "default").unwrap();
        let err = tokio::time::timeout(Duration::from_secs(120), codec.decode(one()))
            .await
            .unwrap_or_else(|_| panic!("{what} was read without a bound"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("more than {MAX_CODEC_RESPONSE_BYTES} bytes")),
            "{what}: {err}"
        );
    }
}
