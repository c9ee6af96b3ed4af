//! The way to the collector: `TelemetryConfig` and the per-signal
//! `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_*` variables in; each signal's
//! endpoint and TLS files, the OTLP/HTTP client and the gRPC channel out.
//!
//! The OTLP exporter crate reads the endpoint and header variables itself
//! but none of the certificate ones, and its default HTTP client has no
//! TLS and no proxy; so tokentap reads the certificate variables here and
//! hands the exporter its own upstream client (OTLP/HTTP) or a tonic
//! channel over its own proxy-aware TCP dialer (gRPC).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use opentelemetry_http::{HttpClient, HttpError};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::proxy::{ProxyEnv, RouteProxy};
use crate::config::{Http2Mode, OtlpProtocol, TelemetryConfig};
use crate::telemetry::TelemetryError;
use crate::upstream::egress::Dial;
use crate::upstream::{Client, ClientTls, Egress, SettingFile};

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

/// `signal`'s CA bundle and client identity: its own variables over the
/// general configuration, each named by the setting it came from.
pub(crate) fn signal_tls(
    cfg: &TelemetryConfig,
    signal: Signal,
) -> Result<ClientTls, TelemetryError> {
    let file = |name: &str, key: &str, general: &Option<PathBuf>| {
        let var = signal.var(name);
        match env(&var) {
            Some(p) => Some(SettingFile::new(var, p)),
            None => general.as_ref().map(|p| SettingFile::new(key, p)),
        }
    };
    let ca = file(
        "CERTIFICATE",
        "telemetry.otlp_certificate",
        &cfg.otlp_certificate,
    );
    let cert = file(
        "CLIENT_CERTIFICATE",
        "telemetry.otlp_client_certificate",
        &cfg.otlp_client_certificate,
    );
    let key = file(
        "CLIENT_KEY",
        "telemetry.otlp_client_key",
        &cfg.otlp_client_key,
    );
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
    Ok(ClientTls { ca, identity })
}

/// The tonic TLS configuration for `tls`: webpki roots, the CA bundle, the
/// identity. (tonic builds its rustls set-up from PEM bytes.)
fn tonic_tls(tls: &ClientTls) -> Result<ClientTlsConfig, TelemetryError> {
    let read = |f: &SettingFile| {
        std::fs::read(&f.path)
            .map_err(|e| TelemetryError(format!("{} {}: {e}", f.setting, f.path.display())))
    };
    let mut config = ClientTlsConfig::new().with_webpki_roots();
    if let Some(ca) = &tls.ca {
        config = config.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(config)
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

/// `signal`'s collector URL for the configured protocol, as its exporter
/// uses it (a per-signal variable first).
pub(crate) fn endpoint(cfg: &TelemetryConfig, signal: Signal) -> String {
    match cfg.otlp_protocol {
        OtlpProtocol::Grpc => grpc_endpoint(cfg, signal),
        OtlpProtocol::HttpProtobuf => http_endpoint(cfg, signal),
    }
}

/// `signal`'s collector URL for OTLP/gRPC. Without a scheme it is
/// `https://`, or `http://` when `OTEL_EXPORTER_OTLP[_signal]_INSECURE` is
/// `true` (the OpenTelemetry specification's rule).
pub(crate) fn grpc_endpoint(cfg: &TelemetryConfig, signal: Signal) -> String {
    let endpoint = env(&signal.var("ENDPOINT")).unwrap_or_else(|| {
        cfg.otlp_endpoint
            .clone()
            .unwrap_or_else(|| "http://localhost:4317".into())
    });
    if endpoint.contains("://") {
        return endpoint;
    }
    let insecure = env(&signal.var("INSECURE"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_INSECURE"))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let scheme = if insecure { "http" } else { "https" };
    format!("{scheme}://{endpoint}")
}

/// tokentap's OTLP/HTTP client, for both signals and both schemes: the
/// same pooled client, TLS set-up and egress proxies as upstream traffic,
/// trusting and presenting the signal's CA and client certificate. The
/// exporters call it from their own threads; each request runs on the
/// tokio runtime it was built on, so export needs no runtime of its own.
#[derive(Debug, Clone)]
pub(crate) struct CollectorClient {
    client: Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

/// The forward proxies the environment names (`HTTPS_PROXY`, `NO_PROXY` …).
fn egress() -> Result<Egress, TelemetryError> {
    let proxies = ProxyEnv::from_process()
        .map_err(|(var, m)| TelemetryError(format!("OTLP export: {var}: {m}")))?;
    Ok(Egress::from_env(&proxies))
}

impl CollectorClient {
    /// A client for `signal`'s collector. Must be built inside a tokio
    /// runtime.
    pub(crate) fn new(
        cfg: &TelemetryConfig,
        signal: Signal,
    ) -> Result<CollectorClient, TelemetryError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            TelemetryError("OTLP/HTTP export must be set up inside a tokio runtime".into())
        })?;
        let tls = signal_tls(cfg, signal)?;
        let client = Client::internal(cfg.otlp_timeout, egress()?, &tls)
            .map_err(|e| TelemetryError(format!("OTLP export: {e}")))?;
        Ok(CollectorClient {
            client,
            runtime,
            timeout: cfg.otlp_timeout,
        })
    }
}

/// The gRPC channel to `signal`'s collector: tonic's HTTP/2 and TLS over a
/// TCP connection tokentap opens, straight or through the egress proxy the
/// environment names for it (a CONNECT tunnel). Connects on first use.
pub(crate) fn grpc_channel(
    cfg: &TelemetryConfig,
    signal: Signal,
) -> Result<Channel, TelemetryError> {
    let endpoint = grpc_endpoint(cfg, signal);
    let bad =
        |e: &dyn std::fmt::Display| TelemetryError(format!("OTLP/gRPC endpoint {endpoint:?}: {e}"));
    let uri = endpoint.parse::<http::Uri>().map_err(|e| bad(&e))?;
    let mut channel = Endpoint::from(uri.clone())
        .timeout(cfg.otlp_timeout)
        .connect_timeout(cfg.otlp_timeout);
    if is_https(&endpoint) {
        let tls = signal_tls(cfg, signal)?;
        channel = channel.tls_config(tonic_tls(&tls)?).map_err(|e| bad(&e))?;
    }
    let via = egress()?.via(&RouteProxy::Env, &uri);
    let dial = Dial::new(via, true, cfg.otlp_timeout);
    Ok(channel.connect_with_connector_lazy(dial))
}

/// Read every CA, certificate and key file export is configured with, the
/// way the OTLP/HTTP client reads them (a key must fit its certificate):
/// start-up and `tokentap check` refuse the same files.
pub(crate) fn check_files(cfg: &TelemetryConfig) -> Result<(), TelemetryError> {
    if cfg.otlp_enabled != Some(true) {
        return Ok(());
    }
    for signal in [Signal::Traces, Signal::Metrics] {
        let tls = signal_tls(cfg, signal)?;
        if tls.is_set() {
            tls.config()
                .map_err(|e| TelemetryError(format!("OTLP export: {e}")))?;
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

/// One collector answer: its head, its body (at most
/// `MAX_RESPONSE_BYTES`) and its trailers (gRPC puts its status there).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) head: http::response::Parts,
    pub(crate) body: Bytes,
    pub(crate) trailers: Option<http::HeaderMap>,
}

impl CollectorClient {
    /// Send `request` in the HTTP version `mode` asks for and read the
    /// whole answer, within the export timeout.
    pub(crate) async fn exchange(
        &self,
        request: Request<Bytes>,
        mode: Http2Mode,
    ) -> Result<Answer, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let sent = self.runtime.spawn(async move {
            let exchange = async {
                let (head, body) = client.send_bytes_over(request, mode).await?.into_parts();
                let collected = Limited::new(body, MAX_RESPONSE_BYTES).collect().await?;
                let trailers = collected.trailers().cloned();
                Ok::<_, HttpError>(Answer {
                    head,
                    body: collected.to_bytes(),
                    trailers,
                })
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

#[async_trait::async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let answer = self.exchange(request, Http2Mode::default()).await?;
        Ok(Response::from_parts(answer.head, answer.body))
    }
}
