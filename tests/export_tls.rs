//! OTLP export from the real binary: secure export and a quiet first run.
//! - `first_run_without_a_collector_is_quiet`: no endpoint anywhere: export
//!   stays off, one INFO line says how to turn it on, and nothing is logged
//!   at WARN or ERROR while requests are served.
//! - `unreachable_collector_warns_once`: a configured collector that
//!   refuses connections gives one WARN at the first failure and none of
//!   the SDK's per-interval lines.
//! - `otlp_over_mtls_reaches_a_tls_receiver_{http,grpc}`: export to a TLS
//!   receiver that requires a client certificate, configured only with the
//!   standard `OTEL_EXPORTER_OTLP_*` variables; the header and key never
//!   show in the log or on `/config`.
//! - `a_client_key_of_another_certificate_is_refused_by_name`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::otlp::Collector;
use support::proxy::{Bin, Scratch, Toml, q};
use support::tls::{TestCa, write_pem};
use support::upstream::Upstream;
use support::{STEP_TIMEOUT, within};

const BODY: &str = r#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
const REQUEST_BODY: &str = r#"{"model":"gpt-4o","messages":[],"user":"u1"}"#;

async fn upstream() -> Upstream {
    Upstream::fixed_json(BODY).await
}

async fn chat(bin: &Bin) -> u16 {
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{REQUEST_BODY}",
        REQUEST_BODY.len()
    );
    let raw = support::client::raw_http1(bin.addr, req.as_bytes(), STEP_TIMEOUT).await;
    support::client::parse_raw_response(&raw).0
}

fn lines_with(out: &str, needle: &str) -> usize {
    out.lines().filter(|l| l.contains(needle)).count()
}

#[tokio::test]
async fn first_run_without_a_collector_is_quiet() {
    let up = upstream().await;
    let url = up.url();
    let bin = Bin::start_args(
        &[
            "--upstream",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[("OTEL_METRIC_EXPORT_INTERVAL", "200")],
    )
    .await;
    for _ in 0..3 {
        assert_eq!(chat(&bin).await, 200);
    }
    // Several export intervals pass.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let out = bin.output();
    assert_eq!(lines_with(&out, "OTLP export is off"), 1, "{out}");
    assert!(
        out.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "says how: {out}"
    );
    assert_eq!(
        lines_with(&out, "WARN"),
        0,
        "no WARN on a first run:\n{out}"
    );
    assert_eq!(
        lines_with(&out, "ERROR"),
        0,
        "no ERROR on a first run:\n{out}"
    );
}

#[tokio::test]
async fn unreachable_collector_warns_once() {
    let up = upstream().await;
    let refused = Collector::refused_endpoint();
    let toml = Toml::openai(&up.url())
        .otlp(&refused, "http/protobuf")
        .set("telemetry", "otlp_timeout", &q("300ms"))
        .top("admin_listen", &q("off"));
    let bin = Bin::start(&toml, &[], &[]).await;
    for _ in 0..3 {
        assert_eq!(chat(&bin).await, 200);
    }
    // Metrics export every 200 ms: many failed exports in this time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = bin.output();
    assert_eq!(
        lines_with(&out, "OTLP export failed"),
        1,
        "one WARN at the first failure:\n{out}"
    );
    let warn = out
        .lines()
        .find(|l| l.contains("OTLP export failed"))
        .unwrap_or_default();
    assert!(
        warn.contains(&refused),
        "the WARN names the collector it failed to reach ({refused}): {warn}"
    );
    assert_eq!(
        lines_with(&out, "ERROR"),
        0,
        "no ERROR per interval:\n{out}"
    );
    assert_eq!(
        lines_with(&out, "opentelemetry"),
        0,
        "the SDK's own per-export lines are filtered:\n{out}"
    );
}

/// A TLS OTLP receiver requiring client certificates from `ca`.
async fn mtls_collector(ca: &TestCa) -> Collector {
    let (chain, key) = ca.leaf(&["localhost"]);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Collector::start_tls(Arc::new(cfg)).await
}

async fn otlp_over_mtls(protocol: &str) {
    let (ca, dir, up) = (TestCa::new(), Scratch::new("otlp-tls"), upstream().await);
    let collector = mtls_collector(&ca).await;
    let ca_file = dir.write("ca.pem", ca.pem());
    let client = write_pem(&dir, "client", &ca.client("tokentap", false));
    let (cert_file, key_file, key_text) = (client.cert, client.key, client.key_pem);
    let secret = "Bearer otlp-header-secret-4711";
    let path = |p: &std::path::Path| p.display().to_string();
    let (ca_s, cert_s, key_s) = (path(&ca_file), path(&cert_file), path(&key_file));
    let endpoint = collector.https_endpoint();
    let headers = format!("authorization={}", secret.replace(' ', "%20"));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_s.as_str()),
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert_s.as_str()),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", key_s.as_str()),
        ("OTEL_EXPORTER_OTLP_HEADERS", headers.as_str()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ("RUST_LOG", "debug"),
    ];
    let toml = Toml::openai(&up.url())
        .set("telemetry", "otlp_enabled", "true")
        .top("admin_listen", &q("127.0.0.1:0"));
    // Toml::new turns export off explicitly; the env decides here.
    let toml_text = toml.render().replace("otlp_enabled = false\n", "");
    assert!(!toml_text.contains("otlp_enabled = false"));
    let scratch = Scratch::new("otlp-tls-bin");
    let file = scratch.write("tokentap.toml", &toml_text);
    let bin = Bin::start_args(&["--config", &file.display().to_string()], &env).await;
    assert_eq!(chat(&bin).await, 200);
    let span = within(
        STEP_TIMEOUT,
        "a span over TLS",
        collector.wait_span(STEP_TIMEOUT, "over mTLS", |_| true),
    )
    .await;
    assert!(span.name.contains("gpt-4o"), "{}", span.name);

    let out = bin.output();
    for (what, s) in [
        ("the export header", "otlp-header-secret-4711"),
        ("the client key", key_text.lines().nth(1).unwrap()),
    ] {
        assert!(!out.contains(s), "{what} must not be logged:\n{out}");
    }
    let admin = out
        .lines()
        .filter(|l| l.contains("admin listening on"))
        .find_map(support::proxy::listening_addr)
        .expect("admin address in the log");
    let raw = support::client::raw_http1(
        admin,
        b"GET /config HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        STEP_TIMEOUT,
    )
    .await;
    let config = String::from_utf8_lossy(&raw);
    assert!(config.contains("otlp_client_key"), "{config}");
    assert!(!config.contains("otlp-header-secret"), "{config}");
    assert!(
        !config.contains(key_text.lines().nth(1).unwrap()),
        "{config}"
    );
}

#[tokio::test]
async fn otlp_over_mtls_reaches_a_tls_receiver_http() {
    otlp_over_mtls("http/protobuf").await;
}

#[tokio::test]
async fn otlp_over_mtls_reaches_a_tls_receiver_grpc() {
    otlp_over_mtls("grpc").await;
}

/// `check` and start-up refuse an OTLP client key that does not fit its
/// certificate, naming the variable that set it and the file, never the
/// key's content; the per-signal variable wins over the general one.
#[tokio::test]
async fn a_client_key_of_another_certificate_is_refused_by_name() {
    let (ca, dir) = (TestCa::new(), Scratch::new("otlp-tls-mismatch"));
    let one = write_pem(&dir, "one", &ca.client("tokentap", false));
    let two = write_pem(&dir, "two", &ca.client("other", false));
    let path = |p: &std::path::Path| p.display().to_string();
    let (cert, key) = (path(&one.cert), path(&two.key));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://localhost:4318"),
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert.as_str()),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", key.as_str()),
        (
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            cert.as_str(),
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", key.as_str()),
    ];
    let base = [
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
    ];
    for sub in ["check", "run"] {
        let args = [&[sub][..], &base, &["--admin-listen", "off"]].concat();
        let (status, out) = support::proxy::run_bin(&args, &env).await;
        assert_eq!(status.code(), Some(2), "`{sub}` refuses the pair:\n{out}");
        assert!(
            out.contains(&format!("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY {key}"))
                && out.contains("does not fit the certificate"),
            "`{sub}` names the variable and the file:\n{out}"
        );
        assert!(
            !out.contains(two.key_pem.lines().nth(1).unwrap()),
            "the key's content never shows:\n{out}"
        );
    }
}
