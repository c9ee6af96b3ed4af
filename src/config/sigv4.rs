//! `[routes.sigv4]`: the signing settings as written in the configuration
//! in, validated credentials for one route out (unset fields from the
//! standard `AWS_*` environment variables). The signing itself lives with
//! the upstream client (`upstream::sigv4`).

use std::fmt;

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
    /// AWS region to sign for (`us-east-1`).
    pub region: String,
    /// AWS service name to sign for (`bedrock`).
    pub service: String,
    /// Access key id of the signing credentials.
    pub access_key_id: String,
    /// Secret access key of the signing credentials (never logged).
    pub secret_access_key: String,
    /// Session token of temporary credentials, when any.
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
