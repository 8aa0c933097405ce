//! Watches: how long one lasts, and its framing: HTTP 200, chunked, one JSON event per line, each flushed as it
//! comes.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::HeaderValue;
use nest_registry::{ApiError, ListOptions, Result};
use serde_json::Value;

use super::Body;
use super::verbs::ResourceRequest;

/// How long a watch lasts when the client does not say.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
/// The longest a watch may ask to last (`timeoutSeconds`): twice the default, the top of the range kube-apiserver
/// picks its own timeouts from (`--min-request-timeout` 1800 s, times one to two). Clients start a new watch when
/// one ends; no timeout a client can send overflows a clock.
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often a quiet watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);

/// How long a watch asking for `timeoutSeconds` lasts: 0, like no value, means the server's default (as
/// kube-apiserver's watch handler reads it); more than [`MAX_WATCH_TIMEOUT`] is that.
fn watch_timeout(asked: Option<&str>) -> Result<Duration> {
    match asked.filter(|t| !t.is_empty() && *t != "0") {
        Some(t) => {
            let seconds: u64 = t.parse().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?;
            Ok(Duration::from_secs(seconds).min(MAX_WATCH_TIMEOUT))
        }
        None => Ok(DEFAULT_WATCH_TIMEOUT),
    }
}

/// A watch of the collection `request` names, its events in the negotiated form.
pub(super) async fn serve(request: ResourceRequest<'_>, options: ListOptions) -> Result<Response<Body>> {
    let timeout = watch_timeout(request.query.get("timeoutSeconds"))?;
    let bookmarks = options.allow_watch_bookmarks.then_some(BOOKMARK_EVERY);
    let scope = request.target.namespace.as_deref();
    let events = request.state.registry.watch(&request.target.resource, scope, &options, bookmarks).await?;
    let (form, table) = (request.form, request.table);
    let events = events.map(move |event| form.event(event, &table)).boxed();
    Ok(response(events, timeout))
}

/// A watch's answer: one JSON event per line, each flushed as it comes; ends after `timeout`.
fn response(events: BoxStream<'static, Value>, timeout: Duration) -> Response<Body> {
    let deadline = tokio::time::Instant::now() + timeout;
    let lines = events.take_until(tokio::time::sleep_until(deadline)).map(|event| {
        let mut line = event.to_string();
        line.push('\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(line)))
    });
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(lines)));
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache, private"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_lasts_at_most_an_hour_whatever_it_asks() {
        assert_eq!(watch_timeout(Some("18446744073709551615")).unwrap(), MAX_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("86400")).unwrap(), MAX_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("5")).unwrap(), Duration::from_secs(5));
        assert_eq!(watch_timeout(Some("0")).unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(None).unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(watch_timeout(Some("-1")).unwrap_err().code, 400);
        assert_eq!(watch_timeout(Some("18446744073709551616")).unwrap_err().code, 400);
    }
}
