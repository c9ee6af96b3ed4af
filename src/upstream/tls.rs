//! The client side of TLS for every connection tokentap opens (upstreams,
//! OTLP collectors, webhooks): one rustls configuration from the webpki
//! roots, an optional CA bundle and an optional client certificate and key.
//! Errors name the setting and the file, never their content.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A file and the setting that named it (`upstream.ca_file`,
/// `OTEL_EXPORTER_OTLP_CLIENT_KEY` …), so an error can say both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingFile {
    /// The configuration key or environment variable.
    pub setting: String,
    /// The file it names.
    pub path: PathBuf,
}

impl SettingFile {
    /// `path`, as named by `setting`.
    pub fn new(setting: impl Into<String>, path: impl Into<PathBuf>) -> SettingFile {
        SettingFile {
            setting: setting.into(),
            path: path.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> TlsFileError {
        TlsFileError::File {
            setting: self.setting.clone(),
            path: self.path.clone(),
            message: message.into(),
        }
    }
}

/// The client TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    /// A CA, certificate or key file could not be used.
    #[error("{setting} {}: {message}", path.display())]
    File {
        /// The setting that named the file.
        setting: String,
        /// The file.
        path: PathBuf,
        /// What is wrong with it (never its content).
        message: String,
    },
    /// rustls refused the protocol set-up itself.
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

/// What a client trusts and presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA bundle trusted beside the webpki roots.
    pub ca: Option<SettingFile>,
    /// Client certificate chain and its key (mTLS).
    pub identity: Option<(SettingFile, SettingFile)>,
}

impl ClientTls {
    /// Whether anything beyond the webpki roots is configured.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }

    /// The rustls client configuration (no ALPN: callers set their own).
    /// A client key must fit its certificate.
    pub fn config(&self) -> Result<rustls::ClientConfig, TlsFileError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(ca) = &self.ca {
            for cert in certs(ca)? {
                roots.add(cert).map_err(|e| ca.error(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let Some((cert, key)) = &self.identity else {
            return Ok(builder.with_no_client_auth());
        };
        // The pki-types error names the problem, never the key's bytes.
        let der = PrivateKeyDer::from_pem_file(&key.path)
            .map_err(|e| key.error(format!("no usable PEM private key ({e})")))?;
        builder
            .with_client_auth_cert(certs(cert)?, der)
            .map_err(|e| {
                key.error(format!(
                    "does not fit the certificate {}: {e}",
                    cert.path.display()
                ))
            })
    }
}

/// Every PEM certificate in `file`; at least one.
fn certs(file: &SettingFile) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = read_certs(&file.path).map_err(|m| file.error(m))?;
    if certs.is_empty() {
        return Err(file.error("holds no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("tokentap-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let tls = ClientTls {
            ca: Some(SettingFile::new("OTEL_EXPORTER_OTLP_CERTIFICATE", &empty)),
            identity: None,
        };
        let err = tls.config().expect_err("no certificate").to_string();
        assert!(
            err.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE ")
                && err.contains("no PEM CERTIFICATE"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_webpki_roots_alone_build() {
        let config = ClientTls::default().config().expect("webpki roots");
        assert!(config.alpn_protocols.is_empty());
        assert!(!config.client_auth_cert_resolver.has_certs());
    }
}
