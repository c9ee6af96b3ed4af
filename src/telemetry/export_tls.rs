//! Secure OTLP export: `TelemetryConfig` and the per-signal
//! `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_*` variables in; each signal's
//! endpoint and TLS material, a tonic TLS configuration (gRPC) and an HTTPS
//! client for OTLP/HTTP out.
//!
//! The OTLP exporter crate reads the endpoint and header variables itself
//! but none of the certificate ones, and its default HTTP client has no
//! TLS; so tokentap reads the certificate variables here and, for https
//! collectors, hands the exporter a hyper + rustls client of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TelemetryError;
use crate::config::TelemetryConfig;
use crate::config::proxy::{ProxyEnv, RouteProxy};
use crate::upstream::Egress;
use crate::upstream::egress::Dial;

/// Largest collector response read (they are a few bytes).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// One signal of OTLP export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    fn var(self, name: &str) -> String {
        let s = match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        };
        format!("OTEL_EXPORTER_OTLP_{s}_{name}")
    }

    /// The OTLP/HTTP path of this signal.
    pub(crate) fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
        }
    }
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Certificate files for one signal's export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExportTls {
    /// CA bundle the collector is verified against (beside the webpki roots).
    pub ca: Option<PathBuf>,
    /// Client certificate chain and key (mTLS).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ExportTls {
    /// `signal`'s files: its own variables over the general configuration.
    pub(crate) fn for_signal(
        cfg: &TelemetryConfig,
        signal: Signal,
    ) -> Result<ExportTls, TelemetryError> {
        let path = |name: &str, general: &Option<PathBuf>| {
            env(&signal.var(name))
                .map(PathBuf::from)
                .or_else(|| general.clone())
        };
        let ca = path("CERTIFICATE", &cfg.otlp_certificate);
        let cert = path("CLIENT_CERTIFICATE", &cfg.otlp_client_certificate);
        let key = path("CLIENT_KEY", &cfg.otlp_client_key);
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(TelemetryError(format!(
                    "{} and {} must be set together",
                    signal.var("CLIENT_CERTIFICATE"),
                    signal.var("CLIENT_KEY")
                )));
            }
        };
        Ok(ExportTls { ca, identity })
    }

    /// Whether any TLS material is configured.
    pub(crate) fn is_set(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }

    /// The tonic TLS configuration: webpki roots, the CA bundle, the identity.
    pub(crate) fn tonic(&self) -> Result<ClientTlsConfig, TelemetryError> {
        let mut tls = ClientTlsConfig::new().with_webpki_roots();
        if let Some(ca) = &self.ca {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca, "CA certificate")?));
        }
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(
                read(cert, "client certificate")?,
                read(key, "client key")?,
            ));
        }
        Ok(tls)
    }

    /// A rustls client configuration for OTLP/HTTP.
    fn rustls(&self) -> Result<rustls::ClientConfig, TelemetryError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(ca) = &self.ca {
            for cert in certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| file_error(ca, "CA certificate", &e))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TelemetryError(format!("OTLP TLS: {e}")))?
            .with_root_certificates(roots);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| file_error(key, "client key", &e))?;
                builder
                    .with_client_auth_cert(certs(cert)?, der)
                    .map_err(|e| file_error(key, "client key", &e))
            }
        }
    }
}

/// Never echoes file content: the key's bytes must not reach a log.
fn file_error(path: &Path, what: &str, e: &dyn std::fmt::Display) -> TelemetryError {
    TelemetryError(format!("OTLP {what} {}: {e}", path.display()))
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, TelemetryError> {
    std::fs::read(path).map_err(|e| file_error(path, what, &e))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TelemetryError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(path, "certificate", &e))?;
    if certs.is_empty() {
        return Err(file_error(path, "certificate", &"no PEM CERTIFICATE block"));
    }
    Ok(certs)
}

/// `signal`'s collector URL for OTLP/HTTP: its own variable as given, else
/// the configured base with the signal's path, else the spec's default.
pub(crate) fn http_endpoint(cfg: &TelemetryConfig, signal: Signal) -> String {
    env(&signal.var("ENDPOINT")).unwrap_or_else(|| {
        let base = cfg
            .otlp_endpoint
            .as_deref()
            .unwrap_or("http://localhost:4318");
        format!("{}{}", base.trim_end_matches('/'), signal.http_path())
    })
}

/// `signal`'s collector URL for OTLP/gRPC.
pub(crate) fn grpc_endpoint(cfg: &TelemetryConfig, signal: Signal) -> String {
    env(&signal.var("ENDPOINT")).unwrap_or_else(|| {
        cfg.otlp_endpoint
            .clone()
            .unwrap_or_else(|| "http://localhost:4317".into())
    })
}

/// tokentap's OTLP/HTTP client, for both signals and both schemes: hyper
/// over plain TCP for an `http://` collector, hyper + rustls for `https://`.
/// The exporters call it from their own threads; each request runs on the
/// tokio runtime it was built on, so OTLP/HTTP export needs no client
/// runtime or threads of its own.
#[derive(Debug, Clone)]
pub(crate) struct CollectorClient {
    client: Scheme,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

#[derive(Debug, Clone)]
enum Scheme {
    Plain(Client<Dial, Full<Bytes>>),
    Tls(Client<hyper_rustls::HttpsConnector<Dial>, Full<Bytes>>),
}

/// The connector to `endpoint`: straight, or through the egress proxy the
/// environment names for it (a CONNECT tunnel for either scheme: this
/// client does not write absolute-form requests).
fn dial(endpoint: &str, tcp: HttpConnector, timeout: Duration) -> Result<Dial, TelemetryError> {
    let proxies = ProxyEnv::from_process()
        .map_err(|(var, m)| TelemetryError(format!("OTLP/HTTP export: {var}: {m}")))?;
    let via = endpoint
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| Egress::from_env(&proxies).via(&RouteProxy::Env, &uri));
    Ok(Dial {
        tcp,
        via,
        tunnel_all: true,
        timeout,
    })
}

impl CollectorClient {
    /// A client for `endpoint`: trusting `signal`'s TLS settings when it is
    /// `https://`. Must be built inside a tokio runtime.
    pub(crate) fn new(
        cfg: &TelemetryConfig,
        signal: Signal,
        endpoint: &str,
    ) -> Result<CollectorClient, TelemetryError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            TelemetryError("OTLP/HTTP export must be set up inside a tokio runtime".into())
        })?;
        let timeout = cfg.otlp_timeout;
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeout));
        let client = match is_https(endpoint) {
            false => {
                let dial = dial(endpoint, http, timeout)?;
                Scheme::Plain(Client::builder(TokioExecutor::new()).build(dial))
            }
            true => {
                let tls = ExportTls::for_signal(cfg, signal)?;
                http.enforce_http(false);
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls.rustls()?)
                    .https_only()
                    .enable_http1()
                    .wrap_connector(dial(endpoint, http, timeout)?);
                Scheme::Tls(Client::builder(TokioExecutor::new()).build(connector))
            }
        };
        Ok(CollectorClient {
            client,
            runtime,
            timeout,
        })
    }
}

/// Read every CA, certificate and key file export is configured with, the
/// way the OTLP/HTTP client reads them (a key must fit its certificate):
/// start-up and `tokentap check` refuse the same files.
pub(crate) fn check_files(cfg: &TelemetryConfig) -> Result<(), TelemetryError> {
    if cfg.otlp_enabled != Some(true) {
        return Ok(());
    }
    for signal in [Signal::Traces, Signal::Metrics] {
        let tls = ExportTls::for_signal(cfg, signal)?;
        if tls.is_set() {
            tls.rustls()?;
        }
    }
    Ok(())
}

/// Whether `endpoint` is an `https://` URL (any case).
pub(crate) fn is_https(endpoint: &str) -> bool {
    endpoint
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

#[async_trait::async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let sent = self.runtime.spawn(async move {
            let exchange = async {
                let request = request.map(Full::new);
                let res = match &client {
                    Scheme::Plain(c) => c.request(request).await?,
                    Scheme::Tls(c) => c.request(request).await?,
                };
                let (parts, body) = res.into_parts();
                let body = Limited::new(body, MAX_RESPONSE_BYTES)
                    .collect()
                    .await?
                    .to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(r) => r,
                Err(_) => Err(HttpError::from(format!(
                    "no answer from the collector within {timeout:?}"
                ))),
            }
        });
        sent.await?
    }
}
