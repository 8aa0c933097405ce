//! Reading a request's body off the wire, within the configured limit. Decoding it (JSON, YAML, protobuf, patches)
//! is [`nest_codec`]'s.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use nest_registry::{ApiError, Result};

/// Reads a request body, refusing more than `limit` bytes (`--max-request-bytes`, [`crate::limits::Limits`]) with
/// 413, in kube-apiserver's words (`limitedReadBody`, `k8s.io/apiserver/pkg/endpoints/handlers/rest.go`, 1.33). No
/// more than `limit` bytes are ever held: the read stops at the first byte beyond.
pub(super) async fn read<B>(body: B, limit: usize) -> Result<Bytes>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            Err(ApiError::too_large(format!("Request entity too large: limit is {limit}")))
        }
        Err(error) => Err(ApiError::bad_request(format!("reading the request body: {error}"))),
    }
}

/// The media type of the body, without parameters, in lower case; empty when the request names none.
pub(super) fn content_type(request: &hyper::http::request::Parts) -> String {
    request
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use http_body_util::Full;
    use hyper::StatusCode;
    use serde_json::{Value, json};

    use super::*;
    use crate::handler::error_response;

    #[tokio::test]
    async fn a_body_over_the_configured_limit_is_a_413_status() {
        let limit = 1024;
        let exactly = read(Full::new(Bytes::from(vec![b'x'; limit])), limit).await.unwrap();
        assert_eq!(exactly.len(), limit, "a body of exactly the limit is read whole");
        let error = read(Full::new(Bytes::from(vec![b'x'; limit + 1])), limit).await.unwrap_err();
        let response = error_response(&error);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let status: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(
            (&status["kind"], &status["status"], &status["reason"], &status["code"]),
            (&json!("Status"), &json!("Failure"), &json!("RequestEntityTooLarge"), &json!(413))
        );
        assert_eq!(status["message"], "Request entity too large: limit is 1024");
        // The server's default is kube-apiserver's.
        let limits = crate::limits::Limits::default();
        assert_eq!(limits.max_request_bytes, 3 * 1024 * 1024);
        let three_mib = read(Full::new(Bytes::from(vec![b'x'; 3 * 1024 * 1024])), limits.max_request_bytes);
        assert!(three_mib.await.is_ok());
    }
}
