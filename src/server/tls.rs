//! Listener TLS: PEM files named by a `TlsConfig` in; a rustls server
//! configuration that is swapped whole on reload, each certificate's expiry,
//! and the verified client certificate's subject out.
//!
//! A reload builds a complete new configuration from the files first and
//! swaps it in only if every file parses and every key matches its
//! certificate, so a bad new certificate is refused and the old one keeps
//! serving. Connections already open keep the configuration they shook
//! hands with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use crate::config::{ClientAuth, TlsConfig};

/// ALPN protocols offered, in preference order.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A certificate file, key file or CA bundle could not be used. Names the
/// file and what is wrong; never holds key material.
#[derive(Debug, thiserror::Error)]
#[error("TLS {what} {}: {message}", path.display())]
pub struct TlsError {
    /// `certificate`, `key` or `client CA bundle`.
    pub what: &'static str,
    /// The file that failed to load.
    pub path: PathBuf,
    /// What is wrong with it (never its content).
    pub message: String,
}

/// One served certificate and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertExpiry {
    /// `default` or the SNI name it is served for.
    pub name: String,
    /// The leaf's notAfter, Unix seconds.
    pub not_after: i64,
}

impl CertExpiry {
    /// Seconds from now until expiry (negative once expired).
    pub fn seconds_left(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.not_after.saturating_sub(now)
    }
}

/// The verified client certificate's subject common name, attached to each
/// request of an mTLS connection as a request extension.
#[derive(Debug, Clone)]
pub struct ClientIdentity(pub Arc<str>);

/// A TLS configuration read from its files, not yet serving.
#[derive(Debug)]
pub struct Staged {
    config: Arc<rustls::ServerConfig>,
    expiry: Vec<CertExpiry>,
}

/// A listener's TLS configuration, replaceable while it serves.
#[derive(Debug)]
pub struct Tls {
    /// Which listener (`proxy` or `admin`), for logs and the expiry gauge.
    pub listener: &'static str,
    current: ArcSwap<rustls::ServerConfig>,
    expiry: ArcSwap<Vec<CertExpiry>>,
}

impl Tls {
    /// Load `cfg`'s files; an error names the file at fault.
    pub fn load(listener: &'static str, cfg: &TlsConfig) -> Result<Arc<Tls>, TlsError> {
        let (config, expiry) = build(cfg)?;
        Ok(Arc::new(Tls {
            listener,
            current: ArcSwap::from(config),
            expiry: ArcSwap::from_pointee(expiry),
        }))
    }

    /// Read `cfg`'s files into a configuration ready to [`Tls::install`];
    /// an error leaves everything as it is.
    pub fn prepare(cfg: &TlsConfig) -> Result<Staged, TlsError> {
        build(cfg).map(|(config, expiry)| Staged { config, expiry })
    }

    /// Serve `staged` to new connections; open ones keep theirs.
    pub fn install(&self, staged: Staged) {
        self.current.store(staged.config);
        self.expiry.store(Arc::new(staged.expiry));
    }

    /// The configuration new handshakes use.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.current.load_full()
    }

    /// The served certificates and their expiry.
    pub fn expiry(&self) -> Arc<Vec<CertExpiry>> {
        self.expiry.load_full()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(cfg: &TlsConfig) -> Result<(Arc<rustls::ServerConfig>, Vec<CertExpiry>), TlsError> {
    let provider = provider();
    let default = certified(&cfg.cert, &cfg.key, &provider)?;
    let mut expiry = vec![CertExpiry {
        name: "default".into(),
        not_after: not_after(&default, &cfg.cert)?,
    }];
    let mut by_name = HashMap::new();
    for s in &cfg.sni {
        let key = certified(&s.cert, &s.key, &provider)?;
        expiry.push(CertExpiry {
            name: s.name.clone(),
            not_after: not_after(&key, &s.cert)?,
        });
        by_name.insert(s.name.clone(), Arc::new(key));
    }
    let resolver = Arc::new(Certs {
        default: Arc::new(default),
        by_name,
    });
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError {
            what: "certificate",
            path: cfg.cert.clone(),
            message: e.to_string(),
        })?;
    let builder = match (&cfg.client_ca, cfg.client_auth) {
        (Some(ca), auth @ (ClientAuth::Optional | ClientAuth::Required)) => {
            let roots = client_roots(ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| TlsError {
                what: "client CA bundle",
                path: ca.clone(),
                message: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok((Arc::new(config), expiry))
}

/// The chain in `cert` with the key in `key`, checked to belong together.
fn certified(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs(cert, "certificate")?;
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError {
        what: "key",
        path: key.to_path_buf(),
        // The pki-types error names the problem, never the key bytes.
        message: format!("no usable PEM private key ({e})"),
    })?;
    CertifiedKey::from_der(chain, der, provider).map_err(|e| TlsError {
        what: "key",
        path: key.to_path_buf(),
        message: format!("does not fit the certificate {}: {e}", cert.display()),
    })
}

fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |message: String| TlsError {
        what,
        path: path.to_path_buf(),
        message,
    };
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad PEM ({e})")))?;
    if certs.is_empty() {
        return Err(err("holds no PEM CERTIFICATE block".into()));
    }
    Ok(certs)
}

fn client_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path, "client CA bundle")? {
        roots.add(cert).map_err(|e| TlsError {
            what: "client CA bundle",
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

fn not_after(key: &CertifiedKey, path: &Path) -> Result<i64, TlsError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let leaf = key.cert.first().map(|c| c.as_ref()).unwrap_or_default();
    X509Certificate::from_der(leaf)
        .map(|(_, c)| c.validity().not_after.timestamp())
        .map_err(|e| TlsError {
            what: "certificate",
            path: path.to_path_buf(),
            message: format!("cannot read the leaf certificate: {e}"),
        })
}

/// The subject common name of a (verified) client certificate, if it has one.
pub fn subject_cn(cert: &CertificateDer<'_>) -> Option<Arc<str>> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, c) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let cn = c.subject().iter_common_name().next()?.as_str().ok()?;
    let cn = cn.trim();
    // A tenant label: printable, bounded (cardinality caps bound the count).
    (!cn.is_empty() && cn.len() <= 256 && cn.chars().all(|c| !c.is_control()))
        .then(|| Arc::from(cn))
}

/// Certificates by SNI name, with a default for clients that send none or
/// an unknown one.
#[derive(Debug)]
struct Certs {
    default: Arc<CertifiedKey>,
    by_name: HashMap<String, Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = hello
            .server_name()
            .and_then(|n| self.by_name.get(&n.to_ascii_lowercase()));
        Some(named.unwrap_or(&self.default).clone())
    }
}
