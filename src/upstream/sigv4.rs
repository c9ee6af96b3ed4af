//! AWS Signature Version 4 re-signing: an upstream request head and its
//! body bytes in, the same head signed for the upstream's host out.
//!
//! A client pointed at tokentap signs for tokentap's host, so Bedrock would
//! reject the forwarded request. A route with `[routes.sigv4]` drops the
//! client's signature and signs again with credentials tokentap holds,
//! through the AWS SDK's own signer (`aws-sigv4`). Bedrock API keys
//! (`Authorization: Bearer …`) are not SigV4 and pass through untouched.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign as aws_sign};
use aws_sigv4::sign::v4;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};

pub use crate::config::sigv4::{SigV4Config, SigV4Error};

/// Sign `parts` (whose URI is already the absolute upstream URI) and
/// `body` for `cfg` at time `now`: the client's `Authorization` and
/// `x-amz-*` signing headers are replaced by new ones. A bearer token
/// (Bedrock API key) is left alone and nothing is signed. Call this last,
/// after every other header change: only `host`, `content-type` and the
/// `x-amz-*` / `x-amzn-*` headers are signed, so proxies on the way may
/// still add or drop others.
pub fn sign(
    parts: &mut http::request::Parts,
    body: &[u8],
    cfg: &SigV4Config,
    now: SystemTime,
) -> Result<(), SigV4Error> {
    let bearer = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "));
    if bearer {
        return Ok(());
    }
    if parts.uri.host().is_none_or(str::is_empty) {
        return Err(SigV4Error::NoHost);
    }
    parts.headers.remove(AUTHORIZATION);
    for name in STALE {
        parts.headers.remove(name);
    }
    let uri = parts.uri.to_string();
    let signed = parts.headers.iter().filter_map(|(name, value)| {
        let n = name.as_str();
        let keep = n == "content-type" || n.starts_with("x-amz-") || n.starts_with("x-amzn-");
        keep.then(|| Some((n, value.to_str().ok()?))).flatten()
    });
    let request = SignableRequest::new(
        parts.method.as_str(),
        uri.as_str(),
        signed,
        SignableBody::Bytes(body),
    )
    .map_err(|e| SigV4Error::Signing(e.to_string()))?;
    let identity = Credentials::new(
        cfg.access_key_id.clone(),
        cfg.secret_access_key.clone(),
        cfg.session_token.clone(),
        None,
        "tokentap",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&cfg.region)
        .name(&cfg.service)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SigV4Error::Signing(e.to_string()))?
        .into();
    let (instructions, _signature) = aws_sign(request, &params)
        .map_err(|e| SigV4Error::Signing(e.to_string()))?
        .into_parts();
    let (headers, _query) = instructions.into_parts();
    for h in headers {
        let name = HeaderName::from_static(h.name());
        let mut value =
            HeaderValue::from_str(h.value()).map_err(|e| SigV4Error::Signing(e.to_string()))?;
        value.set_sensitive(h.sensitive());
        parts.headers.insert(name, value);
    }
    Ok(())
}

/// Headers whose signature the client made and that would be stale.
const STALE: [&str; 3] = ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// The AWS SigV4 test suite's fixed time, key and scope.
    fn suite() -> (SigV4Config, SystemTime) {
        let cfg = SigV4Config {
            region: "us-east-1".into(),
            service: "service".into(),
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        // 2015-08-30T12:36:00Z
        (cfg, UNIX_EPOCH + Duration::from_secs(1_440_938_160))
    }

    fn signed(
        method: &str,
        cfg: &SigV4Config,
        now: SystemTime,
        client_auth: Option<&str>,
    ) -> http::request::Parts {
        let mut b = http::Request::builder()
            .method(method)
            .uri("https://example.amazonaws.com/");
        if let Some(auth) = client_auth {
            b = b
                .header("authorization", auth)
                .header("x-amz-date", "20991231T000000Z");
        }
        let (mut parts, ()) = b.body(()).expect("valid request").into_parts();
        sign(&mut parts, b"", cfg, now).expect("signed");
        parts
    }

    fn header<'a>(p: &'a http::request::Parts, name: &str) -> &'a str {
        p.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    #[test]
    fn get_vanilla_matches_the_aws_test_suite() {
        let (cfg, now) = suite();
        let p = signed("GET", &cfg, now, Some("AWS4-HMAC-SHA256 Credential=stale"));
        assert_eq!(header(&p, "x-amz-date"), "20150830T123600Z");
        assert_eq!(
            header(&p, "authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn post_vanilla_matches_the_aws_test_suite() {
        let (cfg, now) = suite();
        let p = signed("POST", &cfg, now, None);
        assert!(
            header(&p, "authorization").ends_with(
                "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
            ),
            "{}",
            header(&p, "authorization")
        );
    }

    #[test]
    fn session_token_matches_the_aws_test_suite() {
        let (mut cfg, now) = suite();
        cfg.session_token =
            Some("6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267".into());
        let p = signed("GET", &cfg, now, None);
        assert_eq!(
            header(&p, "x-amz-security-token"),
            cfg.session_token.as_deref().unwrap_or_default()
        );
        assert!(
            header(&p, "authorization").ends_with(
                "SignedHeaders=host;x-amz-date;x-amz-security-token, \
                 Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
            ),
            "{}",
            header(&p, "authorization")
        );
    }

    #[test]
    fn bearer_api_keys_pass_through() {
        let (cfg, now) = suite();
        let p = signed("POST", &cfg, now, Some("Bearer ABSKQmVkcm9ja0FQSUtleQ=="));
        assert_eq!(
            header(&p, "authorization"),
            "Bearer ABSKQmVkcm9ja0FQSUtleQ=="
        );
        assert_eq!(header(&p, "x-amz-date"), "20991231T000000Z", "untouched");
    }

    #[test]
    fn a_uri_without_host_is_an_error() {
        let (cfg, now) = suite();
        let (mut parts, ()) = http::Request::builder()
            .uri("/model/x/converse")
            .body(())
            .expect("valid")
            .into_parts();
        assert_eq!(sign(&mut parts, b"{}", &cfg, now), Err(SigV4Error::NoHost));
    }
}
