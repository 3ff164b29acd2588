//! What the HTTP client behind a Streamable HTTP upstream (`TapHttpClient`) does
//! to its errors before rmcp sees them: the upstream's URL is taken out, since rmcp logs
//! transport errors as they are and reqwest's quote the URL, query and all (R-PRX-1).

use std::sync::Arc;

use futures::{StreamExt as _, stream::BoxStream};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;

use super::config::UrlSecrets;

type Error = StreamableHttpError<reqwest::Error>;
type SseStream = BoxStream<'static, Result<Sse, SseError>>;

/// `error` without the upstream's URL: the type stays (the proxy reads connect errors from
/// it), the URL goes, and a response stream's body error loses the secrets in its text.
pub fn clean(secrets: &UrlSecrets, error: Error) -> Error {
    match error {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(e.without_url()),
        StreamableHttpError::Sse(e) => StreamableHttpError::Sse(clean_sse(secrets, e)),
        other => other,
    }
}

/// A response stream whose errors are [`clean`]ed.
pub fn clean_stream(secrets: &Arc<UrlSecrets>, stream: SseStream) -> SseStream {
    let secrets = secrets.clone();
    stream
        .map(move |item| item.map_err(|e| clean_sse(&secrets, e)))
        .boxed()
}

/// A POST's answer, its error or its event stream [`clean`]ed.
pub fn clean_response(
    secrets: &Arc<UrlSecrets>,
    response: Result<StreamableHttpPostResponse, Error>,
) -> Result<StreamableHttpPostResponse, Error> {
    match response {
        Ok(StreamableHttpPostResponse::Sse(stream, session)) => Ok(
            StreamableHttpPostResponse::Sse(clean_stream(secrets, stream), session),
        ),
        Ok(other) => Ok(other),
        Err(e) => Err(clean(secrets, e)),
    }
}

/// A body error of a response stream, with the secrets taken out of its text.
fn clean_sse(secrets: &UrlSecrets, error: SseError) -> SseError {
    match error {
        SseError::Body(inner) => {
            let text = inner.to_string();
            let scrubbed = secrets.scrub(&text);
            if scrubbed == text {
                SseError::Body(inner)
            } else {
                SseError::Body(Box::new(std::io::Error::other(scrubbed)))
            }
        }
        other => other,
    }
}
