//! Client factories (R-PRX-27): an upstream that a program reaches its own way (an in-process
//! server, a socket, a transport with its own authentication) instead of a config file's stdio
//! command or URL. The proxy calls the factory for its first connection and again after every
//! transport failure (R-PRX-8), so a factory that mints a credential per connection refreshes it
//! there. Everything else (discovery, retry inference, the call Activity) is the same as for a
//! configured upstream: a factory goes into `TransportConfig::Custom`.
//!
//! The trait is one method returning an [`UpstreamTransport`]: either a byte stream
//! ([`UpstreamTransport::io`], read beside rmcp so answers pass as the upstream wrote them,
//! R-PRX-6) or any rmcp client transport ([`UpstreamTransport::transport`], answers as rmcp's
//! typed model reads them).

use std::{fmt, future::Future, sync::Arc};

use futures::future::BoxFuture;
use rmcp::{
    RoleClient,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{IntoTransport, Transport},
};
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a factory could not open a connection; its text reaches the log and, as a connect
/// failure, the caller: keep credentials out of it.
pub type FactoryError = Box<dyn std::error::Error + Send + Sync>;

/// Opens connections to one upstream MCP server.
///
/// Implemented for every `Fn() -> impl Future<Output = Result<UpstreamTransport, E>>`, so a
/// closure is a factory.
pub trait UpstreamFactory: Send + Sync + 'static {
    /// A new connection, ready for rmcp's `initialize` handshake.
    fn connect(&self) -> BoxFuture<'static, Result<UpstreamTransport, FactoryError>>;
}

impl<F, Fut, E> UpstreamFactory for F
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<UpstreamTransport, E>> + Send + 'static,
    E: Into<FactoryError>,
{
    fn connect(&self) -> BoxFuture<'static, Result<UpstreamTransport, FactoryError>> {
        let opening = self();
        Box::pin(async move { opening.await.map_err(Into::into) })
    }
}

/// A `TransportConfig::Custom` value: the factory, compared by
/// identity (two configs are equal when they share one factory).
#[derive(Clone)]
pub struct CustomTransport(pub Arc<dyn UpstreamFactory>);

impl CustomTransport {
    pub fn new(factory: impl UpstreamFactory) -> Self {
        Self(Arc::new(factory))
    }
}

impl PartialEq for CustomTransport {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for CustomTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomTransport(..)")
    }
}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// One connection a factory opened.
pub struct UpstreamTransport(Opened);

enum Opened {
    Io(BoxRead, BoxWrite),
    Transport(BoxedTransport),
}

impl UpstreamTransport {
    /// MCP as newline-delimited JSON over a byte stream (a pipe, a socket, `tokio::io::duplex`).
    /// The proxy reads it beside rmcp, so results and listings keep the upstream's own JSON
    /// and its log messages reach the calls they belong to (R-PRX-6, R-PRX-10).
    pub fn io(
        read: impl AsyncRead + Send + Unpin + 'static,
        write: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Self {
        Self(Opened::Io(Box::new(read), Box::new(write)))
    }

    /// Any rmcp client transport (e.g. a `StreamableHttpClientTransport` with its own HTTP
    /// client or auth). The proxy sees only what rmcp parsed: answers are rmcp's typed view, and
    /// a failed send counts as possibly delivered (R-PRX-5).
    pub fn transport<T, E, A>(transport: T) -> Self
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        Self(Opened::Transport(BoxedTransport(Box::new(
            transport.into_transport(),
        ))))
    }

    /// The transport rmcp serves on; a byte stream is read through `tap` (the caller's reader
    /// that keeps answers as written) and its transport wrapped by `wrap` (which notes its
    /// requests in flight, R-PRX-10), any other transport is used as it is.
    pub(super) fn into_tapped<R, W>(
        self,
        tap: impl FnOnce(BoxRead) -> R,
        wrap: impl FnOnce(BoxedTransport) -> W,
    ) -> BoxedTransport
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: Transport<RoleClient> + 'static,
    {
        match self.0 {
            Opened::Io(read, write) => {
                let transport = BoxedTransport(Box::new((tap(read), write).into_transport()));
                BoxedTransport(Box::new(wrap(transport)))
            }
            Opened::Transport(t) => t,
        }
    }
}

/// A failure of a factory-made transport.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CustomTransportError(FactoryError);

/// [`Transport`] is not object safe (its methods return `impl Future`); this is the same
/// contract with boxed futures, implemented for every client transport.
trait DynTransport: Send {
    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> BoxFuture<'static, Result<(), FactoryError>>;
    fn receive(&mut self) -> BoxFuture<'_, Option<RxJsonRpcMessage<RoleClient>>>;
    fn close(&mut self) -> BoxFuture<'_, Result<(), FactoryError>>;
}

impl<T: Transport<RoleClient> + 'static> DynTransport for T {
    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> BoxFuture<'static, Result<(), FactoryError>> {
        let sending = Transport::send(self, item);
        Box::pin(async move { sending.await.map_err(|e| Box::new(e) as FactoryError) })
    }
    fn receive(&mut self) -> BoxFuture<'_, Option<RxJsonRpcMessage<RoleClient>>> {
        Box::pin(Transport::receive(self))
    }
    fn close(&mut self) -> BoxFuture<'_, Result<(), FactoryError>> {
        Box::pin(async move {
            Transport::close(self)
                .await
                .map_err(|e| Box::new(e) as FactoryError)
        })
    }
}

/// A client transport of any type, boxed.
pub struct BoxedTransport(Box<dyn DynTransport>);

impl Transport<RoleClient> for BoxedTransport {
    type Error = CustomTransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sending = self.0.send(item);
        async move { sending.await.map_err(CustomTransportError) }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.0.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let closing = self.0.close();
        async move { closing.await.map_err(CustomTransportError) }
    }
}
