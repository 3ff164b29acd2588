//! The connector over stdio: one JSON-RPC message a line, as rmcp's own transport, except for
//! what a line that is no client message gets (R-CON-30).
//!
//! rmcp answers JSON that is no client message (a request whose `params` do not fit its
//! method, an id of the wrong type) with an "Invalid request" that carries no `id` at all: no
//! client can match it to its request, which then waits for ever. Here, as over HTTP
//! ([`crate::unreadable_body`]), a request gets -32602 under its id, and JSON that is no
//! message -32600 under `"id": null`. A line that is no JSON, a notification and a response
//! get nothing (there is no id to answer, and JSON-RPC answers no notification), as rmcp and
//! the other MCP SDKs do; a line over [`MAX_LINE_BYTES`] is dropped.

use std::sync::Arc;

use futures::{SinkExt as _, StreamExt as _};
use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::Mutex,
};
use tokio_util::{
    bytes::{BufMut as _, BytesMut},
    codec::{Decoder, Encoder, FramedRead, FramedWrite},
};

/// The longest line read (rmcp's own bound, which HTTP's 4 MiB body limit stays under).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// At most what a transport buffer keeps between lines (R-CON-30): a buffer never shrinks by
/// itself, so one line up to [`MAX_LINE_BYTES`] read, or one long answer written, held that
/// much memory for the rest of the process's life, and the next longer one more.
const KEPT_BUFFER_BYTES: usize = 64 << 10;

/// What a buffer let go of starts with again (tokio-util's own first capacity).
const FRESH_BUFFER_BYTES: usize = 8 << 10;

/// The connector's stdio transport on the process's stdin and stdout.
pub fn stdio() -> LineTransport<tokio::io::Stdin, tokio::io::Stdout> {
    LineTransport::new(tokio::io::stdin(), tokio::io::stdout())
}

/// An MCP server transport of one JSON-RPC message a line over `R` and `W`.
pub struct LineTransport<R, W> {
    read: FramedRead<R, Lines>,
    write: Arc<Mutex<FramedWrite<W, Lines>>>,
    /// A refusal not yet handed to the writer (kept when a receive is cancelled).
    pending: Option<Value>,
}

impl<R: AsyncRead, W: AsyncWrite> LineTransport<R, W> {
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: FramedRead::new(read, Lines::default()),
            write: Arc::new(Mutex::new(FramedWrite::new(write, Lines::default()))),
            pending: None,
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let mut write = write.lock().await;
            write.send(Outgoing::Message(Box::new(item))).await?;
            release_written(&mut write);
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(refusal) = &self.pending {
                let mut write = self.write.lock().await;
                write.feed(Outgoing::Raw(refusal.clone())).await.ok()?;
                self.pending = None;
                write.flush().await.ok()?;
                release_written(&mut write);
            }
            let line = match self.read.next().await? {
                Ok(Line::Text(line)) => line,
                Ok(Line::TooLong) => {
                    tracing::warn!("dropped a stdin line over {MAX_LINE_BYTES} bytes");
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading stdin failed");
                    return None;
                }
            };
            let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
                Ok(message) => return Some(message),
                Err(_) => self.pending = refusal_of_line(line),
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.write.lock().await.close().await
    }
}

/// What a line that is no client message gets: R-CON-30's JSON-RPC error, or nothing for a
/// line that is no JSON, a notification (a method, no id) or a response (a result or error).
pub fn refusal_of_line(line: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if let Some(fields) = value.as_object() {
        let method = fields.contains_key("method");
        let notification = method && !fields.contains_key("id");
        let response = !method && (fields.contains_key("result") || fields.contains_key("error"));
        if notification || response {
            return None;
        }
    }
    Some(crate::unreadable_body::refusal(line))
}

/// Lets go of the memory a long line grew `buf` to (`spent`: the bytes just split off it), keeping
/// what it holds; the line split off holds its own part until it is dropped.
fn release_read(buf: &mut BytesMut, spent: usize) {
    if spent + buf.capacity() > KEPT_BUFFER_BYTES && buf.len() <= KEPT_BUFFER_BYTES {
        let mut kept = BytesMut::with_capacity(FRESH_BUFFER_BYTES.max(buf.len()));
        kept.extend_from_slice(buf);
        *buf = kept;
    }
}

/// Lets go of the memory a long message grew the write buffer to, once it is written.
fn release_written<W>(write: &mut FramedWrite<W, Lines>) {
    if write.write_buffer().is_empty()
        && std::mem::take(&mut write.encoder_mut().written) > KEPT_BUFFER_BYTES
    {
        *write.write_buffer_mut() = BytesMut::with_capacity(FRESH_BUFFER_BYTES);
    }
}

/// A line read, or the mark of one dropped for its length.
#[derive(Debug, PartialEq)]
enum Line {
    Text(BytesMut),
    TooLong,
}

/// What the transport writes: rmcp's messages, and its own refusals as they are.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Outgoing {
    Message(Box<ServerJsonRpcMessage>),
    Raw(Value),
}

/// Newline-framed lines, at most [`MAX_LINE_BYTES`] each (longer ones are dropped whole).
#[derive(Default)]
struct Lines {
    /// How far the buffer was searched for a newline already.
    searched: usize,
    /// Dropping the rest of a line that was too long.
    dropping: bool,
    /// The most the write buffer held since it was last let go of ([`release_written`]).
    written: usize,
}

impl Decoder for Lines {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        let found = buf
            .get(self.searched..)
            .and_then(|rest| rest.iter().position(|b| *b == b'\n'));
        let Some(at) = found.map(|at| at + self.searched) else {
            if buf.len() > MAX_LINE_BYTES {
                buf.clear();
                self.dropping = true;
            }
            self.searched = buf.len();
            return Ok(None);
        };
        let mut line = buf.split_to(at + 1);
        release_read(buf, at + 1);
        self.searched = 0;
        line.truncate(at);
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if std::mem::take(&mut self.dropping) || line.len() > MAX_LINE_BYTES {
            return Ok(Some(Line::TooLong));
        }
        Ok(Some(Line::Text(line)))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        match self.decode(buf)? {
            Some(line) => Ok(Some(line)),
            None if buf.is_empty() || self.dropping => Ok(None),
            None => Ok(Some(Line::Text(buf.split()))),
        }
    }
}

impl Encoder<Outgoing> for Lines {
    type Error = std::io::Error;

    fn encode(&mut self, item: Outgoing, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        serde_json::to_writer(dst.writer(), &item)?;
        dst.put_u8(b'\n');
        self.written = self.written.max(dst.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    use super::*;

    #[test]
    fn lines_that_are_no_message_get_an_error_only_when_an_answer_is_due() {
        let refusal = |line: &str| refusal_of_line(line.as_bytes());
        let code = |line: &str| {
            let r = refusal(line).unwrap();
            (r["id"].clone(), r["error"]["code"].clone())
        };
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"abc"}"#),
            (json!(5), json!(-32602))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#),
            (Value::Null, json!(-32600))
        );
        assert_eq!(code("[1,2]"), (Value::Null, json!(-32600)));
        assert_eq!(refusal("{not json"), None);
        assert_eq!(
            refusal(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}"#),
            None
        );
        assert_eq!(
            refusal(r#"{"jsonrpc":"2.0","id":3,"result":7,"error":1}"#),
            None
        );
    }

    #[test]
    fn long_lines_are_dropped_whole_and_the_next_is_read() {
        let mut lines = Lines::default();
        let mut buf = BytesMut::from(&b"{\"a\":1}\r\n"[..]);
        assert_eq!(
            lines.decode(&mut buf).unwrap(),
            Some(Line::Text(BytesMut::from(&b"{\"a\":1}"[..])))
        );
        let mut buf = BytesMut::from(vec![b'x'; MAX_LINE_BYTES + 1].as_slice());
        assert_eq!(lines.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty(), "an over-long line is not kept in memory");
        buf.extend_from_slice(b"xx\n{}\n");
        assert_eq!(lines.decode(&mut buf).unwrap(), Some(Line::TooLong));
        assert_eq!(
            lines.decode(&mut buf).unwrap(),
            Some(Line::Text(BytesMut::from(&b"{}"[..])))
        );
        let mut tail = BytesMut::from(&b"{\"b\":2}"[..]);
        assert_eq!(lines.decode(&mut tail).unwrap(), None);
        assert_eq!(
            lines.decode_eof(&mut tail).unwrap(),
            Some(Line::Text(BytesMut::from(&b"{\"b\":2}"[..])))
        );
    }

    #[tokio::test]
    async fn a_request_that_does_not_fit_is_refused_under_its_id_and_the_next_line_is_read() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server);
        let mut transport = LineTransport::new(server_read, server_write);
        let (client_read, mut client_write) = tokio::io::split(client);
        let lines = concat!(
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"abc"}"#,
            "\n{oops\n",
            r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
            "\n"
        );
        client_write.write_all(lines.as_bytes()).await.unwrap();
        let ping = transport.receive().await.unwrap();
        assert!(serde_json::to_string(&ping).unwrap().contains("ping"));
        let mut answers = BufReader::new(client_read).lines();
        let refusal: Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(
            (refusal["id"].clone(), refusal["error"]["code"].clone()),
            (json!(5), json!(-32602))
        );
    }

    #[tokio::test]
    async fn a_long_line_or_message_leaves_no_large_buffer_behind() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server);
        let mut transport = LineTransport::new(server_read, server_write);
        let (client_read, mut client_write) = tokio::io::split(client);
        let answers = tokio::spawn(async move {
            let mut answers = BufReader::new(client_read).lines();
            while let Ok(Some(_)) = answers.next_line().await {}
        });
        let long = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(4 << 20));
        let writing = tokio::spawn(async move {
            client_write.write_all(long.as_bytes()).await.unwrap();
            let ping = concat!(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#, "\n");
            client_write.write_all(ping.as_bytes()).await.unwrap();
            client_write
        });
        let ping = transport.receive().await.unwrap();
        assert!(serde_json::to_string(&ping).unwrap().contains("ping"));
        let read = transport.read.read_buffer().capacity();
        assert!(
            read <= KEPT_BUFFER_BYTES,
            "the read buffer kept {read} bytes"
        );
        let long = rmcp::ErrorData::internal_error("x".repeat(4 << 20), None);
        let id = rmcp::model::RequestId::Number(1);
        transport
            .send(ServerJsonRpcMessage::error(long, Some(id.clone())))
            .await
            .unwrap();
        let short = rmcp::ErrorData::internal_error("short", None);
        transport
            .send(ServerJsonRpcMessage::error(short, Some(id)))
            .await
            .unwrap();
        let written = transport.write.lock().await.write_buffer().capacity();
        assert!(
            written <= KEPT_BUFFER_BYTES,
            "the write buffer kept {written} bytes"
        );
        drop(writing.await.unwrap());
        drop(transport);
        answers.await.unwrap();
    }
}
