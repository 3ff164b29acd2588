//! A TLS-terminating front for the dev server (R-RUN-2): on a free loopback port it takes TLS
//! with the certificates of `fixtures/tls` (`scripts/gen-test-certs` makes them) and passes
//! the gRPC traffic on to the plain dev server. As [`Mode::MutualTls`] it requires a client
//! certificate the test CA signed; as [`Mode::ApiKey`] it speaks HTTP/2 itself and answers
//! every request without `authorization: Bearer <key>` with gRPC's UNAUTHENTICATED, the way
//! Temporal Cloud does.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use http_body_util::{BodyExt as _, Empty, combinators::BoxBody};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// What the front checks beyond serving TLS.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Server-authenticated TLS only.
    Tls,
    /// A client certificate signed by the test CA is required.
    MutualTls,
    /// Every gRPC request must carry `authorization: Bearer <key>`.
    ApiKey(String),
}

/// A running front; it stops when dropped.
pub struct TlsFront {
    /// `127.0.0.1:port`.
    pub address: String,
    /// gRPC requests passed on to the server (API-key mode only).
    pub forwarded: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A file of `fixtures/tls`.
pub fn cert_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/tls")
        .join(name)
}

fn certs(name: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(cert_file(name))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn server_config(mode: &Mode) -> ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match mode {
        Mode::MutualTls => {
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(certs("ca.pem"));
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        Mode::Tls | Mode::ApiKey(_) => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::from_pem_file(cert_file("server-key.pem")).unwrap();
    let mut config = builder.with_single_cert(certs("server.pem"), key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

impl TlsFront {
    /// A front for the plain gRPC server at `upstream` (`host:port`).
    pub async fn start(mode: Mode, upstream: &str) -> TlsFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let acceptor = TlsAcceptor::from(Arc::new(server_config(&mode)));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let upstream = upstream.to_owned();
        let counter = forwarded.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, mode, upstream) = (acceptor.clone(), mode.clone(), upstream.clone());
                let counter = counter.clone();
                tokio::spawn(async move {
                    // A failed handshake (wrong CA, no client certificate) just drops it.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    match mode {
                        Mode::ApiKey(key) => serve_checking_key(tls, &upstream, key, counter).await,
                        Mode::Tls | Mode::MutualTls => {
                            let Ok(mut server) = TcpStream::connect(&upstream).await else {
                                return;
                            };
                            let mut tls = tls;
                            let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                        }
                    }
                });
            }
        });
        TlsFront {
            address,
            forwarded,
            task,
        }
    }
}

type Body = BoxBody<hyper::body::Bytes, hyper::Error>;

/// HTTP/2 on `tls`: requests with the right bearer token go to `upstream` on one HTTP/2
/// connection of their own, the others get UNAUTHENTICATED.
async fn serve_checking_key(
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    upstream: &str,
    key: String,
    forwarded: Arc<AtomicUsize>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let Ok((sender, connection)) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(server)).await
    else {
        return;
    };
    tokio::spawn(connection);
    let expected = format!("Bearer {key}");
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let mut sender = sender.clone();
        let authorized = request
            .headers()
            .get("authorization")
            .is_some_and(|v| v.as_bytes() == expected.as_bytes());
        let forwarded = forwarded.clone();
        async move {
            if !authorized {
                return Ok::<_, hyper::Error>(unauthenticated());
            }
            forwarded.fetch_add(1, Ordering::Relaxed);
            let response = sender.send_request(request).await?;
            Ok(response.map(|body| body.boxed()))
        }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

/// gRPC's trailers-only UNAUTHENTICATED answer.
fn unauthenticated() -> Response<Body> {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "16")
        .header("grpc-message", "invalid API key")
        .body(Empty::new().map_err(|never| match never {}).boxed())
        .unwrap()
}
