//! Errors that become HTTP responses: which side failed, the status the
//! client gets and a stable code, in; an OpenAI-shaped JSON error response
//! out. A leaf module: every listener (proxy, admin, dashboard) and the
//! request path build their error answers here.

use std::borrow::Cow;
use std::error::Error as StdError;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;

/// The error type bodies and services pass around.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Who caused a request to fail; picks how it is counted and logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something tokentap will not forward (no route, a
    /// bad target, a body that broke off).
    Client,
    /// tokentap itself could not do its part (signing, a full queue).
    Tokentap,
    /// The upstream failed or timed out before a response head arrived.
    Upstream,
}

/// A request that ends with an answer tokentap writes itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProxyError {
    side: Side,
    status: StatusCode,
    code: &'static str,
    message: Cow<'static, str>,
}

impl ProxyError {
    /// An error on `side`, answered with `status`; `code` is stable
    /// (`error.type`, the JSON body's `code`).
    pub fn new(
        side: Side,
        status: StatusCode,
        code: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> ProxyError {
        ProxyError {
            side,
            status,
            code,
            message: message.into(),
        }
    }

    /// The client's fault (4xx).
    pub fn client(
        status: StatusCode,
        code: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> ProxyError {
        ProxyError::new(Side::Client, status, code, message)
    }

    /// tokentap's own failure.
    pub fn tokentap(
        status: StatusCode,
        code: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> ProxyError {
        ProxyError::new(Side::Tokentap, status, code, message)
    }

    /// Which side failed.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The HTTP status the client gets.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The answer the client gets.
    pub fn to_response<B: From<Full<Bytes>>>(&self) -> Response<B> {
        error_response(self.status, &self.message, self.code)
    }
}

/// An error response in the OpenAI error shape, which every OpenAI-style SDK
/// can parse: `{"error":{"message","type","param","code"}}`.
pub fn error_response<B: From<Full<Bytes>>>(
    status: StatusCode,
    message: &str,
    code: &str,
) -> Response<B> {
    let body = serde_json::json!({
        "error": {
            "message": format!("tokentap: {message}"),
            "type": "tokentap_error",
            "param": null,
            "code": code,
        }
    });
    let mut res = Response::new(B::from(Full::new(Bytes::from(body.to_string()))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_openai_shaped() {
        let res: Response<Full<Bytes>> =
            ProxyError::client(StatusCode::NOT_FOUND, "no_route", "no route matches").to_response();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
    }

    #[test]
    fn sides_and_codes_are_kept() {
        let e = ProxyError::tokentap(
            StatusCode::INTERNAL_SERVER_ERROR,
            "sigv4_signing_failed",
            "x",
        );
        assert_eq!(e.side(), Side::Tokentap);
        assert_eq!(e.code(), "sigv4_signing_failed");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.to_string(), "x");
    }
}
