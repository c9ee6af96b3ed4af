//! AWS Signature Version 4 re-signing: an upstream request head and its
//! body bytes in, the same head signed for the upstream's host out.
//!
//! A client pointed at tokentap signs for tokentap's host, so Bedrock would
//! reject the forwarded request. A route with `[routes.sigv4]` drops the
//! client's signature and signs again with credentials tokentap holds,
//! through the AWS SDK's own signer (`aws-sigv4`). Bedrock API keys
//! (`Authorization: Bearer …`) are not SigV4 and pass through untouched.

use std::fmt;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign as aws_sign};
use aws_sigv4::sign::v4;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};

/// `[routes.sigv4]` as written in the configuration. Unset credentials are
/// read from the standard `AWS_*` environment variables at start-up.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SigV4Settings {
    /// Region to sign for; default `AWS_REGION`, then `AWS_DEFAULT_REGION`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Signing name of the service; default `bedrock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Default `AWS_ACCESS_KEY_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// Default `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing)]
    pub secret_access_key: Option<String>,
    /// Default `AWS_SESSION_TOKEN` (temporary credentials).
    #[serde(default, skip_serializing)]
    pub session_token: Option<String>,
}

impl fmt::Debug for SigV4Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigV4Settings")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl SigV4Settings {
    /// Fill unset fields from `env` (normally `std::env::var`) and check
    /// that region and credentials are known.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<SigV4Config, SigV4Error> {
        let pick = |v: &Option<String>, names: &[&str]| {
            v.clone()
                .or_else(|| names.iter().find_map(|n| env(n)))
                .filter(|s| !s.is_empty())
        };
        let region = pick(&self.region, &["AWS_REGION", "AWS_DEFAULT_REGION"])
            .ok_or(SigV4Error::Missing("region (or AWS_REGION)"))?;
        let access_key_id = pick(&self.access_key_id, &["AWS_ACCESS_KEY_ID"])
            .ok_or(SigV4Error::Missing("access_key_id (or AWS_ACCESS_KEY_ID)"))?;
        let secret_access_key = pick(&self.secret_access_key, &["AWS_SECRET_ACCESS_KEY"]).ok_or(
            SigV4Error::Missing("secret_access_key (or AWS_SECRET_ACCESS_KEY)"),
        )?;
        Ok(SigV4Config {
            region,
            service: self.service.clone().unwrap_or_else(|| "bedrock".into()),
            access_key_id,
            secret_access_key,
            session_token: pick(&self.session_token, &["AWS_SESSION_TOKEN"]),
        })
    }
}

/// Validated signing settings for one route.
#[derive(Clone, PartialEq, Eq)]
pub struct SigV4Config {
    pub region: String,
    pub service: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for SigV4Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets never leave: not even through `/config` or a debug log.
        f.debug_struct("SigV4Config")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigV4Error {
    /// A required setting is neither configured nor in the environment.
    #[error("sigv4: no {0}")]
    Missing(&'static str),
    /// The request URI has no host to sign for.
    #[error("sigv4: the upstream URI has no host")]
    NoHost,
    /// The signer refused the request.
    #[error("sigv4: {0}")]
    Signing(String),
}

/// Headers whose signature the client made and that would be stale.
const STALE: [&str; 3] = ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];

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
    fn settings_resolve_from_env_and_hide_secrets() {
        let env = |k: &str| match k {
            "AWS_DEFAULT_REGION" => Some("eu-west-1".to_owned()),
            "AWS_ACCESS_KEY_ID" => Some("AKIDENV".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret-from-env".to_owned()),
            _ => None,
        };
        let cfg = SigV4Settings::default().resolve(env).expect("complete");
        assert_eq!(
            (cfg.region.as_str(), cfg.service.as_str()),
            ("eu-west-1", "bedrock")
        );
        assert_eq!(cfg.session_token, None);
        assert!(
            !format!("{cfg:?}").contains("secret-from-env"),
            "Debug hides the secret"
        );
        let err = SigV4Settings::default().resolve(|_| None);
        assert_eq!(err, Err(SigV4Error::Missing("region (or AWS_REGION)")));
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
