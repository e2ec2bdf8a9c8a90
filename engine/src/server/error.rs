//! OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` with the
//! matching HTTP status, for every failure the server reports (including axum's own
//! extractor rejections, unknown routes and wrong methods).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header (429, 503).
    pub retry_after: Option<u64>,
    /// Answer with `Connection: close`: the request body was left unread (it passed the
    /// body limit), so the connection cannot carry another request, and a client that
    /// pools connections must be told rather than race the close (RFC 9112 section 9.6).
    pub close: bool,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
            close: false,
        }
    }

    /// 400 invalid_request_error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending field.
    pub fn bad_field(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::bad_request(message);
        e.param = Some(param.to_owned());
        e
    }

    /// 400 for a field that would change output and is not supported.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::bad_field(param, message);
        e.code = Some("unsupported_parameter");
        e
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message);
        e.code = Some("invalid_api_key");
        e
    }

    /// 404 for an unknown model.
    pub fn model_not_found(model: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist"),
        );
        e.param = Some("model".into());
        e.code = Some("model_not_found");
        e
    }

    /// 404 for an unknown route.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route {path}"),
        )
    }

    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this route",
        )
    }

    /// 413.
    pub fn too_large(param: Option<&str>, message: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            message,
        );
        e.param = param.map(str::to_owned);
        e.code = Some(if param.is_some() {
            "context_length_exceeded"
        } else {
            "request_too_large"
        });
        e
    }

    /// 413 for a request body over `limit` bytes, left unread: says `Connection: close`.
    pub fn body_too_large(limit: usize) -> Self {
        let mut e = Self::too_large(None, format!("request body larger than {limit} bytes"));
        e.close = true;
        e
    }

    /// 429 with `Retry-After`.
    pub fn queue_full(message: impl Into<String>, retry_after: u64) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message);
        e.retry_after = Some(retry_after);
        e
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.retry_after = Some(1);
        e
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.close {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unread_body_closes_the_connection() {
        let r = ApiError::body_too_large(1 << 20).into_response();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(r.headers().get(header::CONNECTION).unwrap(), "close");
        // A prompt over the context was read whole: the connection stays usable.
        let r = ApiError::too_large(Some("prompt"), "prompt too long").into_response();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(r.headers().get(header::CONNECTION).is_none());
        assert!(
            ApiError::bad_request("x")
                .into_response()
                .headers()
                .get(header::CONNECTION)
                .is_none()
        );
    }
}
