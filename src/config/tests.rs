//! Config tests: layer precedence, error messages (key + source), OTEL env.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

const ROUTES: &str = r#"
[[routes]]
name = "openai"
prefix = "/openai/"
upstream = "https://api.openai.com/v1/"
provider = "openai"
"#;

/// A TOML file in the temp dir, removed on drop.
struct TempToml(PathBuf);

impl TempToml {
    fn new(body: &str) -> TempToml {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("tokentap-config-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, body).expect("write temp config");
        TempToml(path)
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempToml {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Flags as the CLI hands them over (`--name value` pairs, `--watch-config`);
/// parsing itself is tested in `crate::cli`.
pub(super) fn cli(args: &[&str]) -> Overrides {
    let mut o = Overrides::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if *flag == "--watch-config" {
            o.watch_config = true;
            continue;
        }
        let v = (*it.next().expect("flag value")).to_owned();
        let de = || serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&v);
        match *flag {
            "--config" => o.config = Some(v.into()),
            "--upstream" => o.upstream = Some(v),
            "--provider" => o.provider = Some(v),
            "--listen" => o.listen = Some(v.parse().expect("listen address")),
            "--admin-listen" => o.admin_listen = Some(v),
            "--log-format" => {
                o.log_format = Some(serde::Deserialize::deserialize(de()).expect("flag value"))
            }
            "--otlp-endpoint" => o.otlp_endpoint = Some(v),
            "--otlp-protocol" => {
                o.otlp_protocol = Some(serde::Deserialize::deserialize(de()).expect("flag value"))
            }
            other => panic!("no such flag in these tests: {other}"),
        }
    }
    o
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load_ok(args: &[&str], vars: &[(&str, &str)]) -> Config {
    load_with_env(&cli(args), &env(vars))
        .unwrap_or_else(|e| panic!("expected a valid config, got: {e}"))
}

fn load_err(args: &[&str], vars: &[(&str, &str)]) -> String {
    match load_with_env(&cli(args), &env(vars)) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

/// Each `(body, key, words)`: `section` holding `body` is refused with an
/// error that names `key` and says `words`.
fn assert_refused(section: &str, cases: &[(&str, &str, &str)]) {
    for (body, key, words) in cases {
        let e = from_toml(&format!("{ROUTES}\n{section}\n{body}\n"))
            .expect_err(&format!("{section} {body} must be refused"));
        assert_mentions(&e.to_string(), &[key, words]);
    }
}

/// The error from loading `--upstream` with one environment variable set.
fn env_err(var: &str, value: &str) -> String {
    load_err(&["--upstream", "http://127.0.0.1:9"], &[(var, value)])
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(
            msg.contains(p),
            "expected the error to mention `{p}`, got: {msg}"
        );
    }
}

#[test]
fn config_defaults_with_upstream_flag() {
    let c = load_ok(&["--upstream", "https://api.openai.com"], &[]);
    assert_eq!(c.listen, "127.0.0.1:8080".parse().expect("addr"));
    assert_eq!(
        c.admin_listen,
        Some("127.0.0.1:9464".parse().expect("addr")),
        "admin listener on loopback by default"
    );
    assert!(c.admin_listen_default);
    assert_eq!(c.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(c.server.max_header_bytes, 65536);
    assert_eq!(c.server.max_connections, 10_000);
    assert_eq!(
        c.server.shutdown_grace,
        Duration::from_secs(600),
        "ten minutes: reasoning streams finish during a drain"
    );
    assert_eq!(c.server.threads, 0, "one serving thread per CPU");
    assert_eq!(c.upstream.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.upstream.idle_timeout, None);
    assert_eq!(c.upstream.total_timeout, None);
    assert_eq!(c.upstream.pool_idle_timeout, Duration::from_secs(90));
    assert_eq!(c.upstream.pool_max_idle_per_host, 64);
    assert_eq!(c.sniff.max_body_bytes, 8 << 20);
    assert_eq!(c.meter.max_frame_bytes, 4 << 20);
    assert_eq!(
        c.tenant.sources,
        vec![
            TenantSource::Header,
            TenantSource::Body,
            TenantSource::ApiKey
        ]
    );
    assert_eq!(c.tenant.header.as_str(), "x-tenant-id");
    assert_eq!(c.tenant.salt, "tokentap");
    assert_eq!(
        c.sessions.sources,
        vec![crate::config::SessionSource::Agents]
    );
    assert_eq!(
        (c.sessions.max_id_length, c.sessions.max_sessions),
        (128, 10_000)
    );
    assert_eq!(c.sessions.body_field.to_string(), "metadata.session_id");
    assert_eq!(c.telemetry.sessions, c.sessions.limits());
    let t = &c.telemetry;
    assert!(
        t.otlp_enabled != Some(true) && t.access_log,
        "export off without an endpoint; access log on by default"
    );
    assert_eq!(t.otlp_protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(t.service_name, "tokentap");
    assert_eq!(t.metrics_export_interval, Duration::from_secs(10));
    assert_eq!((t.max_models, t.max_tenants), (100, 100));
    assert_eq!(t.log_format, LogFormat::Text);
    assert_eq!(c.routes.len(), 1, "one route from --upstream");
    let r = &c.routes[0];
    assert_eq!((r.name.as_str(), r.prefix.as_str()), ("default", "/"));
    assert_eq!(r.upstream.to_string(), "https://api.openai.com/");
    assert_eq!(r.provider, None);
}

#[test]
fn config_provider_flag_sets_route_provider() {
    let c = load_ok(
        &[
            "--upstream",
            "http://127.0.0.1:9",
            "--provider",
            "anthropic",
        ],
        &[],
    );
    assert_eq!(c.routes[0].provider, Some(ProviderKind::Anthropic));
    let e = load_err(
        &["--upstream", "http://127.0.0.1:9", "--provider", "bard"],
        &[],
    );
    assert_mentions(&e, &["--provider", "bard", "openai"]);
}

#[test]
fn config_precedence_file_env_flag() {
    let f = TempToml::new(&format!(
        "listen = \"127.0.0.1:1001\"\n[server]\nmax_connections = 5\nshutdown_grace = \"1s\"\n{ROUTES}"
    ));
    let file_only = load_ok(&["--config", &f.path()], &[]);
    assert_eq!(file_only.listen.port(), 1001, "file beats default");
    assert_eq!(file_only.server.max_connections, 5);
    assert_eq!(
        file_only.server.header_read_timeout,
        Duration::from_secs(10),
        "untouched default"
    );

    let vars = [
        ("TOKENTAP_LISTEN", "127.0.0.1:1002"),
        ("TOKENTAP_SERVER__MAX_CONNECTIONS", "100"),
        ("TOKENTAP_UPSTREAM__CONNECT_TIMEOUT", "2s"),
    ];
    let with_env = load_ok(&["--config", &f.path()], &vars);
    assert_eq!(with_env.listen.port(), 1002, "env beats file");
    assert_eq!(with_env.server.max_connections, 100, "env beats file");
    assert_eq!(
        with_env.server.shutdown_grace,
        Duration::from_secs(1),
        "file value kept"
    );
    assert_eq!(with_env.upstream.connect_timeout, Duration::from_secs(2));

    let with_flag = load_ok(
        &["--config", &f.path(), "--listen", "127.0.0.1:1003"],
        &vars,
    );
    assert_eq!(with_flag.listen.port(), 1003, "flag beats env");
}

#[test]
fn config_file_from_tokentap_config_env_is_not_a_key() {
    let f = TempToml::new(ROUTES);
    let c = load_ok(&[], &[("TOKENTAP_CONFIG", &f.path())]);
    assert_eq!(
        c.routes[0].name, "openai",
        "file named by TOKENTAP_CONFIG is read"
    );
    assert_eq!(c.routes[0].prefix, "/openai", "trailing slash normalised");
    assert_eq!(
        c.routes[0].upstream.to_string(),
        "https://api.openai.com/v1"
    );
}

#[test]
fn config_otel_env_mapping() {
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=se%20cret,x-team=llm"),
        ("OTEL_SERVICE_NAME", "gateway"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod,service.name=ignored",
        ),
        ("OTEL_METRIC_EXPORT_INTERVAL", "2500"),
        ("OTEL_SDK_DISABLED", "true"),
    ];
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &vars);
    let t = &c.telemetry;
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(t.otlp_protocol, OtlpProtocol::Grpc);
    assert_eq!(
        t.otlp_headers,
        vec![
            ("api-key".into(), "se cret".into()),
            ("x-team".into(), "llm".into())
        ]
    );
    assert_eq!(
        t.service_name, "gateway",
        "OTEL_SERVICE_NAME beats service.name attribute"
    );
    assert_eq!(
        t.resource_attributes,
        vec![("deployment.environment".into(), "prod".into())]
    );
    assert_eq!(
        t.metrics_export_interval,
        Duration::from_millis(2500),
        "milliseconds"
    );
    assert!(
        t.otlp_enabled != Some(true),
        "OTEL_SDK_DISABLED=true turns export off"
    );
}

#[test]
fn config_otel_env_below_file_and_tokentap_env() {
    let f = TempToml::new(&format!(
        "[telemetry]\nservice_name = \"from-file\"\n[telemetry.resource_attributes]\nteam = \"file\"\n{ROUTES}"
    ));
    let vars = [
        ("OTEL_SERVICE_NAME", "from-otel"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team=otel,region=eu"),
    ];
    let c = load_ok(&["--config", &f.path()], &vars);
    assert_eq!(c.telemetry.service_name, "from-file", "file beats OTEL_*");
    assert_eq!(
        c.telemetry.otlp_endpoint.as_deref(),
        Some("http://otel:4318"),
        "OTEL_* beats default"
    );
    assert_eq!(
        c.telemetry.resource_attributes,
        vec![
            ("region".into(), "eu".into()),
            ("team".into(), "file".into())
        ],
        "tables merge key by key"
    );
    let mut vars = vars.to_vec();
    vars.push(("TOKENTAP_TELEMETRY__SERVICE_NAME", "from-env"));
    let c = load_ok(
        &["--config", &f.path(), "--otlp-endpoint", "http://flag:4318"],
        &vars,
    );
    assert_eq!(
        c.telemetry.service_name, "from-env",
        "TOKENTAP_* beats file"
    );
    assert_eq!(
        c.telemetry.otlp_endpoint.as_deref(),
        Some("http://flag:4318"),
        "flag beats all"
    );
}

#[test]
fn config_env_lists_and_bools() {
    let vars = [
        ("TOKENTAP_TENANT__SOURCES", "api_key, header"),
        (
            "TOKENTAP_TELEMETRY__REDACT_HEADERS",
            "[\"X-Secret\", \"x-other\"]",
        ),
        ("TOKENTAP_TELEMETRY__ACCESS_LOG", "false"),
        ("TOKENTAP_SNIFF__MAX_BODY_BYTES", "1000"),
        ("TOKENTAP_TENANT__SALT", "12345"),
    ];
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &vars);
    assert_eq!(
        c.tenant.sources,
        vec![TenantSource::ApiKey, TenantSource::Header]
    );
    let redact: Vec<&str> = c
        .telemetry
        .redact_headers
        .iter()
        .map(|h| h.as_str())
        .collect();
    assert_eq!(redact, ["x-secret", "x-other"]);
    assert!(!c.telemetry.access_log);
    assert_eq!(c.sniff.max_body_bytes, 1000);
    assert_eq!(
        c.tenant.salt, "12345",
        "numeric-looking strings stay strings"
    );
}

#[test]
fn server_threads_are_bounded() {
    let c = load_ok(
        &["--upstream", "http://127.0.0.1:1"],
        &[("TOKENTAP_SERVER__THREADS", "3")],
    );
    assert_eq!(c.server.threads, 3);
    let e = load_err(
        &["--upstream", "http://127.0.0.1:1"],
        &[("TOKENTAP_SERVER__THREADS", "5000")],
    );
    assert_mentions(&e, &["server.threads", "5000", "1024", "0 for one per CPU"]);
}

#[test]
fn config_unknown_key_in_file_names_key_and_file() {
    let f = TempToml::new(&format!("[server]\nmax_conections = 5\n{ROUTES}"));
    let err = load_with_env(&cli(&["--config", &f.path()]), &[]).expect_err("unknown key");
    assert_eq!(err.key(), Some("server.max_conections"), "got: {err}");
    assert_mentions(&err.to_string(), &[&f.path(), "max_connections"]);
    let f = TempToml::new(&format!("{ROUTES}colour = \"red\"\n"));
    let e = load_err(&["--config", &f.path()], &[]);
    assert_mentions(&e, &["routes[0].colour", &f.path()]);
}

#[test]
fn config_unknown_env_key_names_the_variable() {
    let e = env_err("TOKENTAP_SERVR__X", "1");
    assert_mentions(&e, &["servr", "environment variable TOKENTAP_SERVR__X"]);
}

#[test]
fn config_bad_duration_in_env_names_the_variable() {
    let e = env_err("TOKENTAP_UPSTREAM__CONNECT_TIMEOUT", "5");
    assert_mentions(
        &e,
        &[
            "upstream.connect_timeout",
            "environment variable TOKENTAP_UPSTREAM__CONNECT_TIMEOUT",
            "unit",
        ],
    );
    let e = env_err("OTEL_METRIC_EXPORT_INTERVAL", "often");
    assert_mentions(
        &e,
        &[
            "telemetry.metrics_export_interval",
            "OTEL_METRIC_EXPORT_INTERVAL",
        ],
    );
}

#[test]
fn config_bad_values_in_file_name_key_and_file() {
    let cases = [
        (
            "[[routes]]\nname = \"a\"\nupstream = \"https://a.example\"\n[[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"ftp://b.example\"\n",
            "routes[1].upstream",
        ),
        (
            "[server]\nheader_read_timeout = 10\n",
            "server.header_read_timeout",
        ),
        (
            "[sniff]\nmax_body_bytes = \"8 parsecs\"\n",
            "sniff.max_body_bytes",
        ),
        ("listen = \"localhost\"\n", "listen"),
        ("[tenant]\nsources = [\"cookie\"]\n", "tenant.sources"),
        ("[tenant]\nheader = \"bad header\"\n", "tenant.header"),
        ("[sessions]\nsources = [\"cookie\"]\n", "sessions.sources"),
        (
            "[sessions]\nsources = [\"agents\", \"agents\"]\n",
            "sessions.sources",
        ),
        ("[sessions]\nheader = \"bad header\"\n", "sessions.header"),
        (
            "[sessions]\nbody_field = \"metadata..id\"\n",
            "sessions.body_field",
        ),
        ("[sessions]\nbody_field = \"\"\n", "sessions.body_field"),
        ("[sessions]\nmax_id_length = 8\n", "sessions.max_id_length"),
        ("[sessions]\nmax_sessions = 0\n", "sessions.max_sessions"),
        (
            "[sessions]\nmax_sessions = 10000001\n",
            "sessions.max_sessions",
        ),
        (
            "[sessions]\nidle_timeout = \"0s\"\n",
            "sessions.idle_timeout",
        ),
        (
            "[sessions]\nsession_header = \"x\"\n",
            "sessions.session_header",
        ),
        (
            "[telemetry]\nlog_format = \"xml\"\n",
            "telemetry.log_format",
        ),
        (
            "[telemetry]\notlp_protocol = \"http/json\"\n",
            "telemetry.otlp_protocol",
        ),
        (
            "[[routes]]\nname = \"a\"\nprefix = \"a\"\nupstream = \"https://a.example\"\n",
            "routes[0].prefix",
        ),
        (
            "[[routes]]\nname = \"a\"\nupstream = \"https://a.example\"\nprovider = \"bard\"\n",
            "routes[0].provider",
        ),
        (
            "[[routes]]\nname = \"a\"\nupstream = \"https://a.example\"\n[[routes]]\nname = \"a\"\nprefix = \"/x\"\nupstream = \"https://a.example\"\n",
            "routes[1].name",
        ),
    ];
    for (body, key) in cases {
        let body = if body.contains("[[routes]]") {
            body.to_string()
        } else {
            format!("{body}{ROUTES}")
        };
        let f = TempToml::new(&body);
        let err = load_with_env(&cli(&["--config", &f.path()]), &[]).expect_err(key);
        assert_eq!(err.key(), Some(key), "wrong key in: {err}");
        assert_mentions(&err.to_string(), &[key, &f.path()]);
    }
}

#[test]
fn config_source_lists_parse_in_order_and_name_every_allowed_source() {
    let f = TempToml::new(&format!(
        "[tenant]\nsources = [\" client_cert\", \"api_key\"]\n[sessions]\nsources = [\"agents\", \"header\"]\n{ROUTES}"
    ));
    let c = load_ok(&["--config", &f.path()], &[]);
    assert_eq!(
        c.tenant.sources,
        [TenantSource::ClientCert, TenantSource::ApiKey]
    );
    assert_eq!(
        c.sessions.sources,
        [SessionSource::Agents, SessionSource::Header]
    );
    for (body, words) in [
        (
            "[tenant]\nsources = [\"cookie\"]\n",
            "unknown tenant source `cookie`; expected `header`, `body`, `api_key` or `client_cert`",
        ),
        (
            "[sessions]\nsources = [\" cookie \"]\n",
            "unknown session source `cookie`; expected `header`, `body` or `agents`",
        ),
        (
            "[sessions]\nsources = [\"agents\", \"agents\"]\n",
            "`agents` is listed twice",
        ),
        (
            "[tenant]\nsources = [\" body\", \"body\"]\n",
            "`body` is listed twice",
        ),
    ] {
        let f = TempToml::new(&format!("{body}{ROUTES}"));
        let err = load_with_env(&cli(&["--config", &f.path()]), &[]).expect_err(body);
        assert_mentions(&err.to_string(), &[words]);
    }
}

#[test]
fn config_bad_url_from_flag_names_the_flag() {
    let e = load_err(&["--upstream", "api.openai.com"], &[]);
    assert_mentions(&e, &["routes[0].upstream", "flag --upstream", "http"]);
}

#[test]
fn config_missing_routes() {
    let e = load_err(&[], &[]);
    assert_eq!(
        e,
        "no routes: pass --upstream URL or add [[routes]] to the config file"
    );
}

#[test]
fn config_upstream_and_routes_conflict() {
    let f = TempToml::new(ROUTES);
    let e = load_err(
        &["--config", &f.path(), "--upstream", "http://127.0.0.1:9"],
        &[],
    );
    assert_mentions(&e, &["--upstream", &f.path(), "one or the other"]);
}

#[test]
fn config_unreadable_or_malformed_file() {
    let e = load_err(&["--config", "/nonexistent/tokentap.toml"], &[]);
    assert_mentions(&e, &["/nonexistent/tokentap.toml"]);
    let f = TempToml::new("listen = \n");
    let e = load_err(&["--config", &f.path()], &[]);
    assert_mentions(&e, &[&f.path()]);
}

#[test]
fn config_cli_flags() {
    let c = load_ok(
        &[
            "--upstream",
            "http://127.0.0.1:9",
            "--admin-listen",
            "127.0.0.1:9091",
            "--log-format",
            "json",
            "--otlp-protocol",
            "grpc",
        ],
        &[],
    );
    assert_eq!(
        c.admin_listen,
        Some("127.0.0.1:9091".parse().expect("addr"))
    );
    assert_eq!(c.telemetry.log_format, LogFormat::Json);
    assert_eq!(c.telemetry.otlp_protocol, OtlpProtocol::Grpc);
}

#[test]
fn config_shipped_file_loads() {
    let c = from_toml(include_str!("../../config/tokentap.toml"))
        .unwrap_or_else(|e| panic!("shipped config must load: {e}"));
    let routes: Vec<_> = c
        .routes
        .iter()
        .map(|r| (r.prefix.as_str(), r.upstream.to_string(), r.provider))
        .collect();
    assert_eq!(
        routes,
        vec![
            (
                "/openai",
                "https://api.openai.com/".to_string(),
                Some(ProviderKind::Openai)
            ),
            (
                "/anthropic",
                "https://api.anthropic.com/".to_string(),
                Some(ProviderKind::Anthropic)
            ),
        ]
    );
}

#[test]
fn config_from_toml_reports_unknown_keys() {
    let err = from_toml(&format!("{ROUTES}\n[meter]\nmax_frame = 1\n")).expect_err("unknown key");
    assert_eq!(err.key(), Some("meter.max_frame"), "got: {err}");
}

#[test]
fn config_redacted_toml_round_trips_without_secrets() {
    let body = format!(
        "admin_listen = \"127.0.0.1:9090\"\n[upstream]\ntotal_timeout = \"1h30m\"\n[tenant]\nsalt = \"pepper\"\n\
         [telemetry.otlp_headers]\nauthorization = \"Bearer abc\"\n{ROUTES}"
    );
    let c = from_toml(&body).expect("valid");
    let shown = c.redacted_toml();
    assert!(
        !shown.contains("pepper") && !shown.contains("Bearer"),
        "secrets leaked:\n{shown}"
    );
    assert!(
        shown.contains("<redacted>"),
        "redaction marker missing:\n{shown}"
    );
    let back =
        from_toml(&shown).unwrap_or_else(|e| panic!("redacted TOML must load: {e}\n{shown}"));
    assert_eq!(back.upstream.total_timeout, Some(Duration::from_secs(5400)));
    assert_eq!(back.admin_listen, c.admin_listen);
    assert_eq!(back.routes[0].upstream, c.routes[0].upstream);
    assert_eq!(back.sniff.max_body_bytes, c.sniff.max_body_bytes);
}

#[test]
#[ignore = "prints sample messages for docs/CONFIG.md"]
fn config_print_sample_errors() {
    let f = TempToml::new(&format!(
        "[server]\nmax_conections = 5\n[upstream]\nconnect_timeout = 5\n{ROUTES}"
    ));
    let samples = [
        load_err(&["--config", &f.path()], &[]),
        load_err(&["--upstream", "http://x"], &[("TOKENTAP_UPSTREAM__CONNECT_TIMEOUT", "5")]),
        load_err(&["--upstream", "api.openai.com"], &[]),
        load_err(&["--upstream", "http://x"], &[("TOKENTAP_SERVER__MAX_CONNECTIONS", "many")]),
        load_err(&["--upstream", "http://x"], &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
        load_err(&["--upstream", "http://x", "--config", &f.path()], &[]),
        load_err(&[], &[]),
        from_toml("[[routes]]\nname = \"a\"\nupstream = \"https://a\"\n[[routes]]\nname=\"b\"\nupstream=\"https://b?x=1\"").expect_err("x").to_string(),
        from_toml("[[routes]]\nupstream = \"https://a\"").expect_err("x").to_string(),
        from_toml("listen = ").expect_err("x").to_string(),
    ];
    for s in samples {
        println!("{s}");
    }
}

#[test]
fn config_admin_listen_off_default_and_clash() {
    let up = ["--upstream", "http://127.0.0.1:9"];
    let c = load_ok(&[&up[..], &["--admin-listen", "off"]].concat(), &[]);
    assert_eq!(c.admin_listen, None, "--admin-listen off disables admin");
    let c = load_ok(&up, &[("TOKENTAP_ADMIN_LISTEN", "off")]);
    assert_eq!(
        c.admin_listen, None,
        "TOKENTAP_ADMIN_LISTEN=off disables admin"
    );
    let c = from_toml(&format!("admin_listen = \"off\"\n{ROUTES}")).expect("valid");
    assert_eq!(
        c.admin_listen, None,
        "admin_listen = \"off\" disables admin"
    );
    assert!(
        c.redacted_toml().contains("admin_listen = \"off\""),
        "off must survive the redacted round trip:\n{}",
        c.redacted_toml()
    );
    let c = from_toml(&format!("admin_listen = \"127.0.0.1:9100\"\n{ROUTES}")).expect("valid");
    assert!(
        !c.admin_listen_default,
        "a configured address is not the default"
    );
    let e = from_toml(&format!("admin_listen = \"nope\"\n{ROUTES}")).expect_err("bad address");
    assert_eq!(e.key(), Some("admin_listen"), "got: {e}");
    let e = from_toml(&format!("listen = \"127.0.0.1:9464\"\n{ROUTES}"))
        .expect_err("default admin address equals listen");
    assert_mentions(&e.to_string(), &["admin_listen", "off"]);
    let c = from_toml(&format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{ROUTES}"
    ))
    .expect("two port-0 listeners do not clash");
    assert_eq!(c.admin_listen.map(|a| a.port()), Some(0));
}

#[test]
fn config_live_defaults_overrides_and_bounds() {
    let c = load_ok(&["--upstream", "https://api.openai.com"], &[]);
    assert_eq!(c.telemetry.live, LiveConfig::default(), "[live] defaults");
    assert_eq!(c.telemetry.live.window, Duration::from_secs(600));
    assert_eq!(c.telemetry.live.bucket, Duration::from_secs(5));

    let c = from_toml(&format!(
        "[live]\nwindow = \"30m\"\nbucket = \"10s\"\nmax_series = 7\nrecent = 0\n{ROUTES}"
    ))
    .expect("valid [live]");
    let live = &c.telemetry.live;
    assert_eq!(
        (live.window, live.bucket, live.max_series, live.recent),
        (Duration::from_secs(1800), Duration::from_secs(10), 7, 0)
    );
    let back = from_toml(&c.redacted_toml()).expect("redacted config reads back");
    assert_eq!(back.telemetry.live, c.telemetry.live, "[live] round-trips");

    let env_set = load_ok(
        &["--upstream", "https://api.openai.com"],
        &[("TOKENTAP_LIVE__MAX_SERIES", "3")],
    );
    assert_eq!(
        env_set.telemetry.live.max_series, 3,
        "env layer sets [live]"
    );

    assert_refused(
        "[live]",
        &[
            ("bucket = \"0s\"", "live.bucket", "longer than zero"),
            ("bucket = \"10ms\"", "live.bucket", "100ms"),
            ("window = \"1s\"", "live.window", "live.bucket"),
            (
                "window = \"1d\"\nbucket = \"1s\"",
                "live.window",
                "10000 buckets",
            ),
            ("max_series = 0", "live.max_series", "at least 1"),
            ("max_series = 20000", "live.max_series", "at most"),
            ("recent = 20000", "live.recent", "at most"),
            ("windows = \"5m\"", "live.windows", "unknown key"),
        ],
    );
}

const SLO_LIVE: &str = "[live]\nwindow = \"1h\"\nbucket = \"15s\"\n";

#[test]
fn config_slo_defaults_and_objectives() {
    let c = load_ok(&["--upstream", "https://api.openai.com"], &[]);
    assert_eq!(
        c.telemetry.slo,
        SloSettings::default(),
        "no SLOs by default"
    );

    let c = from_toml(&format!(
        "{ROUTES}\n[[slo]]\nname = \"chat\"\nroute = \"openai\"\nmodel = \"gpt-4o*\"\nttft_p95 = \"800ms\"\n\
         decode_tps_p50_min = 20\nmax_stall = \"5s\"\nerror_ratio = 0.05\n\
         [[slo]]\nname = \"drop\"\ndecode_tps_drop = 0.3\nwindow = \"2m\"\nmin_requests = 3\n{SLO_LIVE}"
    ))
    .unwrap_or_else(|e| panic!("valid [[slo]]: {e}"));
    let [chat, drop] = c.telemetry.slo.slos.as_slice() else {
        panic!("two SLOs expected: {:?}", c.telemetry.slo.slos);
    };
    assert_eq!(
        (
            chat.name.as_str(),
            chat.route.as_deref(),
            chat.model.as_deref()
        ),
        ("chat", Some("openai"), Some("gpt-4o*"))
    );
    assert_eq!(
        chat.window,
        Duration::from_secs(300),
        "window defaults to 5m"
    );
    assert_eq!(chat.min_requests, 10, "min_requests defaults to 10");
    assert_eq!(chat.ttft_p95, Some(Duration::from_millis(800)));
    assert_eq!(chat.decode_tps_p50_min, Some(20.0));
    assert_eq!(chat.max_stall, Some(Duration::from_secs(5)));
    assert_eq!(chat.error_ratio, Some(0.05));
    assert_eq!(chat.decode_tps_drop, None);
    assert_eq!((drop.route.as_deref(), drop.model.as_deref()), (None, None));
    assert_eq!(drop.decode_tps_drop, Some(0.3));
    assert_eq!(
        drop.baseline_window,
        Duration::from_secs(3600),
        "baseline 1h"
    );
    assert_eq!(
        (drop.window, drop.min_requests),
        (Duration::from_secs(120), 3)
    );
    assert_eq!(c.telemetry.slo.alerts, None, "no [alerts] = no webhook");

    let back = from_toml(&c.redacted_toml()).expect("redacted config reads back");
    assert_eq!(back.telemetry.slo, c.telemetry.slo, "[[slo]] round-trips");

    let env = load_ok(
        &["--upstream", "https://api.openai.com"],
        &[("TOKENTAP_SLO", "[{name = \"e\", error_ratio = 0.1}]")],
    );
    assert_eq!(
        env.telemetry.slo.slos[0].error_ratio,
        Some(0.1),
        "env sets [[slo]]"
    );
}

#[test]
fn config_slo_errors_name_the_key() {
    assert_refused(
        "[[slo]]",
        &[
            ("name = \"x\"", "slo[0].name", "no objective"),
            (
                "name = \"a b\"\nerror_ratio = 0.1",
                "slo[0].name",
                "letters",
            ),
            (
                "name = \"x\"\nroute = \"nope\"\nerror_ratio = 0.1",
                "slo[0].route",
                "openai",
            ),
            (
                "name = \"x\"\nwindow = \"20m\"\nerror_ratio = 0.1",
                "slo[0].window",
                "live.window (10m)",
            ),
            (
                "name = \"x\"\nwindow = \"1s\"\nerror_ratio = 0.1",
                "slo[0].window",
                "live.bucket",
            ),
            (
                "name = \"x\"\nerror_ratio = 1.5",
                "slo[0].error_ratio",
                "from 0 to 1",
            ),
            (
                "name = \"x\"\ndecode_tps_drop = 1",
                "slo[0].decode_tps_drop",
                "below 1",
            ),
            (
                "name = \"x\"\ndecode_tps_p50_min = -1",
                "slo[0].decode_tps_p50_min",
                "positive",
            ),
            (
                "name = \"x\"\nttft_p95 = \"0s\"",
                "slo[0].ttft_p95",
                "longer than zero",
            ),
            ("name = \"x\"\nttft_p95 = 5", "slo[0].ttft_p95", "no unit"),
            (
                "name = \"x\"\nmin_requests = 0\nerror_ratio = 0.1",
                "slo[0].min_requests",
                "at least 1",
            ),
            (
                "name = \"x\"\nerror_ratio = 0.1\nwindows = \"5m\"",
                "slo[0].windows",
                "unknown key",
            ),
            // The default 1h baseline does not fit the default 10m live window.
            (
                "name = \"x\"\ndecode_tps_drop = 0.3",
                "slo[0].baseline_window",
                "raise live.window",
            ),
            (
                "name = \"x\"\ndecode_tps_drop = 0.3\nbaseline_window = \"5m\"",
                "slo[0].baseline_window",
                "longer than the SLO's window",
            ),
        ],
    );
    let e = from_toml(&format!(
        "{ROUTES}\n[[slo]]\nname = \"x\"\nerror_ratio = 0.1\n[[slo]]\nname = \"x\"\nerror_ratio = 0.2\n"
    ))
    .expect_err("duplicate SLO names");
    assert_mentions(&e.to_string(), &["slo[1].name", "duplicate"]);
}

#[test]
fn config_alerts_defaults_bounds_and_redaction() {
    let c = from_toml(&format!(
        "{ROUTES}\n[alerts]\nwebhook_url = \"https://hooks.example.com/services/T0/B0/SECRETPATH\"\n\
         format = \"slack\"\n[alerts.headers]\nauthorization = \"Bearer SECRETTOKEN\"\n"
    ))
    .unwrap_or_else(|e| panic!("valid [alerts]: {e}"));
    let a = c.telemetry.slo.alerts.as_ref().expect("[alerts] set");
    assert_eq!(a.format, AlertFormat::Slack);
    assert_eq!(a.min_interval, Duration::from_secs(60), "min_interval 1m");
    assert_eq!(a.timeout, Duration::from_secs(10), "timeout 10s");
    assert_eq!(a.max_retries, 5, "max_retries 5");
    assert_eq!(a.headers.len(), 1);
    let shown = c.redacted_toml();
    for secret in ["SECRETPATH", "SECRETTOKEN"] {
        assert!(!shown.contains(secret), "/config leaks {secret}:\n{shown}");
    }
    assert!(
        shown.contains("https://hooks.example.com/"),
        "/config keeps the webhook host:\n{shown}"
    );
    let back =
        from_toml(&shown).unwrap_or_else(|e| panic!("redacted [alerts] loads: {e}\n{shown}"));
    let b = back.telemetry.slo.alerts.expect("[alerts] survives");
    assert_eq!((b.format, b.max_retries), (a.format, a.max_retries));

    assert_refused(
        "[alerts]",
        &[
            ("format = \"json\"", "alerts.webhook_url", "required"),
            (
                "webhook_url = \"ftp://x.org/h\"",
                "alerts.webhook_url",
                "http://",
            ),
            (
                "webhook_url = \"https://u:p@x.org/h\"",
                "alerts.webhook_url",
                "credentials",
            ),
            (
                "webhook_url = \"https://x.org\"\nformat = \"xml\"",
                "alerts.format",
                "slack",
            ),
            (
                "webhook_url = \"https://x.org\"\ntimeout = \"0s\"",
                "alerts.timeout",
                "longer than zero",
            ),
            (
                "webhook_url = \"https://x.org\"\nmax_retries = 99",
                "alerts.max_retries",
                "at most",
            ),
            (
                "webhook_url = \"https://x.org\"\nheaders = { \"a b\" = \"1\" }",
                "alerts.headers",
                "header name",
            ),
            (
                "webhook_url = \"https://x.org\"\nretries = 1",
                "alerts.retries",
                "unknown key",
            ),
        ],
    );
}

#[test]
fn config_shipped_slo_and_alerts_examples_load_when_uncommented() {
    let shipped = include_str!("../../config/tokentap.toml");
    let at = shipped
        .find("# [[slo]]")
        .expect("commented [[slo]] example");
    let (head, tail) = shipped.split_at(at);
    let uncommented: Vec<&str> = tail
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[') || rest.contains(" = ") && !rest.starts_with('#') =>
            {
                rest
            }
            _ => l,
        })
        .collect();
    let text = format!("{head}{}\n", uncommented.join("\n"));
    let c = from_toml(&text).unwrap_or_else(|e| panic!("uncommented examples load: {e}\n{text}"));
    let s = &c.telemetry.slo;
    assert_eq!(s.slos.len(), 1, "the [[slo]] example is active");
    assert_eq!(s.slos[0].decode_tps_drop, Some(0.3));
    assert!(s.alerts.is_some(), "the [alerts] example is active");
}

#[test]
fn config_server_max_headers_default_env_and_bounds() {
    let up = ["--upstream", "https://a.example"];
    assert_eq!(load_ok(&up, &[]).server.max_headers, 100, "default");
    let c = load_ok(&up, &[("TOKENTAP_SERVER__MAX_HEADERS", "20")]);
    assert_eq!(c.server.max_headers, 20, "from the environment");
    for bad in ["0", "10001"] {
        let e = load_err(&up, &[("TOKENTAP_SERVER__MAX_HEADERS", bad)]);
        assert_mentions(
            &e,
            &[
                "server.max_headers",
                "TOKENTAP_SERVER__MAX_HEADERS",
                "between 1 and 10000",
            ],
        );
    }
}

#[test]
fn config_export_timeout_and_span_queue() {
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &[]);
    assert_eq!(c.telemetry.otlp_timeout, Duration::from_secs(5), "default");
    assert_eq!(c.telemetry.span_queue_size, 2048, "default");
    let vars = [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
    ];
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &vars);
    assert_eq!(
        c.telemetry.otlp_timeout,
        Duration::from_millis(1500),
        "OTEL_EXPORTER_OTLP_TIMEOUT is milliseconds"
    );
    assert_eq!(c.telemetry.span_queue_size, 64, "OTEL_BSP_MAX_QUEUE_SIZE");
    let f = TempToml::new(&format!("[telemetry]\nspan_queue_size = 0\n{ROUTES}"));
    let e = load_err(&["--config", &f.path()], &[]);
    assert_mentions(&e, &["telemetry.span_queue_size", "at least 1"]);
    let e = env_err("OTEL_BSP_MAX_QUEUE_SIZE", "lots");
    assert_mentions(
        &e,
        &["telemetry.span_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE"],
    );
    let e = env_err("TOKENTAP_TELEMETRY__OTLP_TIMEOUT", "0s");
    assert_mentions(&e, &["telemetry.otlp_timeout", "longer than zero"]);
    assert_eq!(c.telemetry.max_series, 2000, "default");
    let f = TempToml::new(&format!("[telemetry]\nmax_series = 20001\n{ROUTES}"));
    let e = load_err(&["--config", &f.path()], &[]);
    assert_mentions(&e, &["telemetry.max_series", "at most 20000"]);
}

#[test]
fn config_connect_retries_default_off_and_bounded() {
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &[]);
    assert_eq!(
        c.upstream.connect_retries, 0,
        "no connect retries by default"
    );
    assert_eq!(c.upstream.connect_retry_backoff, Duration::from_millis(100));
    let c = load_ok(
        &["--upstream", "http://127.0.0.1:9"],
        &[
            ("TOKENTAP_UPSTREAM__CONNECT_RETRIES", "3"),
            ("TOKENTAP_UPSTREAM__CONNECT_RETRY_BACKOFF", "250ms"),
        ],
    );
    assert_eq!(c.upstream.connect_retries, 3);
    assert_eq!(c.upstream.connect_retry_backoff, Duration::from_millis(250));
    let e = env_err("TOKENTAP_UPSTREAM__CONNECT_RETRIES", "11");
    assert_mentions(
        &e,
        &[
            "upstream.connect_retries",
            "environment variable TOKENTAP_UPSTREAM__CONNECT_RETRIES",
            "at most 10",
        ],
    );
    let e = env_err("TOKENTAP_UPSTREAM__CONNECT_RETRY_BACKOFF", "0s");
    assert_mentions(&e, &["upstream.connect_retry_backoff", "longer than zero"]);
}

#[test]
fn on_client_disconnect_defaults_to_cancel_and_drain_takes_its_bound() {
    let c = from_toml(ROUTES).expect("valid");
    assert_eq!(
        c.routes[0].disconnect(c.upstream.drain_timeout),
        OnClientDisconnect::Cancel
    );
    assert_eq!(c.upstream.drain_timeout, Duration::from_secs(30));
    assert_eq!(c.upstream.drain_max_bytes, 16 << 20);
    assert_eq!(c.upstream.max_drains, 256);

    let two = format!(
        "[upstream]\ndrain_timeout = \"45s\"\n{ROUTES}on_client_disconnect = \"drain\"\n\
         [[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"http://b\"\n\
         on_client_disconnect = \"drain\"\ndrain_timeout = \"2m\"\n"
    );
    let c = from_toml(&two).expect("valid");
    assert_eq!(
        c.routes[0].disconnect(c.upstream.drain_timeout),
        OnClientDisconnect::Drain {
            timeout: Duration::from_secs(45)
        },
        "the global drain_timeout"
    );
    assert_eq!(
        c.routes[1].disconnect(c.upstream.drain_timeout),
        OnClientDisconnect::Drain {
            timeout: Duration::from_secs(120)
        },
        "the route's own drain_timeout"
    );
    let back = from_toml(&c.redacted_toml()).expect("the shown config reads back");
    assert_eq!(
        back.routes[1].disconnect(back.upstream.drain_timeout),
        c.routes[1].disconnect(c.upstream.drain_timeout)
    );
    assert_eq!(back.upstream.drain_timeout, Duration::from_secs(45));
}

#[test]
fn on_client_disconnect_errors_name_the_key() {
    let err = from_toml(&format!("{ROUTES}on_client_disconnect = \"wait\"\n"))
        .expect_err("unknown mode")
        .to_string();
    assert_mentions(&err, &["routes[0].on_client_disconnect", "cancel", "drain"]);
    let err = from_toml(&format!("{ROUTES}drain_timeout = \"5s\"\n"))
        .expect_err("timeout without drain")
        .to_string();
    assert_mentions(&err, &["routes[0].drain_timeout", "on_client_disconnect"]);
    let err = from_toml(&format!("{ROUTES}[upstream]\nmax_drains = 0\n"))
        .expect_err("zero drains")
        .to_string();
    assert_mentions(&err, &["upstream.max_drains"]);
}

/// `toml` plus one route, so the configuration is complete.
fn routed(toml: &str) -> String {
    format!("{toml}\n[[routes]]\nname = \"r\"\nupstream = \"http://127.0.0.1:1\"\n")
}

#[test]
fn otlp_export_follows_the_endpoint_unless_set() {
    let on =
        from_toml(&routed("[telemetry]\notlp_endpoint = \"http://c:4318\"")).expect("endpoint");
    assert!(
        (on.telemetry.otlp_enabled == Some(true)),
        "an endpoint turns export on"
    );
    let off = from_toml(&routed(
        "[telemetry]\notlp_endpoint = \"http://c:4318\"\notlp_enabled = false",
    ))
    .expect("disabled");
    assert!(
        off.telemetry.otlp_enabled != Some(true),
        "otlp_enabled = false wins"
    );
    let default = from_toml(&routed("[telemetry]\notlp_enabled = true")).expect("forced on");
    assert!(
        (default.telemetry.otlp_enabled == Some(true)) && default.telemetry.otlp_endpoint.is_none(),
        "otlp_enabled = true without an endpoint exports to the OTLP default"
    );
    let env = [(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_owned(),
        "http://c:4318/v1/traces".to_owned(),
    )];
    let cli = Overrides {
        upstream: Some("http://127.0.0.1:1".into()),
        ..Overrides::default()
    };
    let c = load_with_env(&cli, &env).expect("per-signal endpoint");
    assert!(
        (c.telemetry.otlp_enabled == Some(true)),
        "a per-signal endpoint turns export on"
    );
}

#[test]
fn unprotected_admin_beyond_loopback_is_refused_with_the_way_out() {
    let err = from_toml(&routed("admin_listen = \"0.0.0.0:9464\"")).expect_err("must refuse");
    let msg = err.to_string();
    assert_eq!(err.key(), Some("admin_listen"), "{msg}");
    for hint in ["admin.token", "admin.allow_unprotected = true", "127.0.0.1"] {
        assert!(msg.contains(hint), "the message must mention {hint}: {msg}");
    }
    from_toml(&routed(
        "admin_listen = \"0.0.0.0:9464\"\n[admin]\nallow_unprotected = true",
    ))
    .expect("explicitly allowed");
    let c = from_toml(&routed(
        "admin_listen = \"0.0.0.0:9464\"\n[admin]\ntoken = \"0123456789abcdef\"",
    ))
    .expect("a token protects it");
    assert!(
        c.redacted_toml().contains("<redacted>") && !c.redacted_toml().contains("0123456789abcdef")
    );
    let pasted = from_toml(&c.redacted_toml()).expect_err("the placeholder is no token");
    assert_eq!(pasted.key(), Some("admin.token"));
    assert!(
        pasted.to_string().contains("put the real token back"),
        "{pasted}"
    );
    let short = from_toml(&routed("[admin]\ntoken = \"short\"")).expect_err("short token");
    assert_eq!(short.key(), Some("admin.token"));
}

#[test]
fn admin_token_file_round_trips_through_the_shown_config() {
    let path = std::env::temp_dir().join(format!("tokentap-admin-token-{}", std::process::id()));
    std::fs::write(&path, "0123456789abcdef0123\n").expect("write token file");
    let c = from_toml(&routed(&format!(
        "[admin]\ntoken_file = {:?}",
        path.display().to_string()
    )))
    .expect("token from a file");
    assert_eq!(c.admin.token.as_deref(), Some("0123456789abcdef0123"));
    let shown = c.redacted_toml();
    assert!(
        !shown.contains("0123456789abcdef"),
        "token leaked:\n{shown}"
    );
    let back = from_toml(&shown).unwrap_or_else(|e| panic!("shown config must load: {e}\n{shown}"));
    assert_eq!(
        back.admin.token, c.admin.token,
        "read again from the same file"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tls_keys_need_each_other_and_real_files() {
    let err = from_toml(&routed("[tls]\ncert = \"/nonexistent/cert.pem\"")).expect_err("no key");
    assert!(
        err.key().is_some_and(|k| k.starts_with("tls")) && err.to_string().contains("key"),
        "names the missing key: {err}"
    );
    let err = from_toml(&routed("[tls]\nclient_auth = \"sometimes\"")).expect_err("bad");
    assert!(err.key().is_some_and(|k| k.starts_with("tls")), "{err}");
    let dir = std::env::temp_dir();
    let err = from_toml(&routed(&format!(
        "[tls]\ncert = {:?}\nkey = \"/nonexistent/key.pem\"",
        dir.display().to_string()
    )))
    .expect_err("a directory is no certificate file");
    assert_eq!(err.key(), Some("tls.cert"), "{err}");
}

#[test]
fn config_env_tables_take_hyphenated_keys_as_a_list() {
    let up = ["--upstream", "http://127.0.0.1:9"];
    let c = load_ok(
        &up,
        &[(
            "TOKENTAP_TELEMETRY__OTLP_HEADERS",
            "x-api-key=se%20cret,X-Team=llm",
        )],
    );
    assert_eq!(
        c.telemetry.otlp_headers,
        vec![
            ("X-Team".into(), "llm".into()),
            ("x-api-key".into(), "se cret".into())
        ],
        "k=v list, percent-decoded, hyphens kept"
    );
    let c = load_ok(
        &up,
        &[("TOKENTAP_TELEMETRY__OTLP_HEADERS", r#"{"x-y" = "v"}"#)],
    );
    assert_eq!(c.telemetry.otlp_headers, vec![("x-y".into(), "v".into())]);
    let e = load_err(&up, &[("TOKENTAP_TELEMETRY__OTLP_HEADERS", "novalue")]);
    assert_mentions(
        &e,
        &[
            "telemetry.otlp_headers",
            "TOKENTAP_TELEMETRY__OTLP_HEADERS",
            "k1=v1",
        ],
    );
}

#[test]
fn config_semconv_switch_and_its_otel_variable() {
    let up = ["--upstream", "http://127.0.0.1:9"];
    let c = load_ok(&up, &[]);
    assert_eq!(c.telemetry.semconv, Semconv::Latest, "default");
    let f = TempToml::new(&format!("[telemetry]\nsemconv = \"both\"\n{ROUTES}"));
    let c = load_ok(&["--config", &f.path()], &[]);
    assert_eq!(c.telemetry.semconv, Semconv::Both, "file");
    let c = load_ok(&up, &[("TOKENTAP_TELEMETRY__SEMCONV", "legacy")]);
    assert_eq!(c.telemetry.semconv, Semconv::Legacy, "TOKENTAP_* env");
    // The conventions' switch: a list, of which one category is ours.
    let opt_in = [(
        "OTEL_SEMCONV_STABILITY_OPT_IN",
        "http, gen_ai_latest_experimental",
    )];
    let c = load_ok(&up, &opt_in);
    assert_eq!(c.telemetry.semconv, Semconv::Latest, "opt-in = latest");
    let f = TempToml::new(&format!("[telemetry]\nsemconv = \"legacy\"\n{ROUTES}"));
    let c = load_ok(&["--config", &f.path()], &opt_in);
    assert_eq!(
        c.telemetry.semconv,
        Semconv::Legacy,
        "the file beats OTEL_*, as for every OTEL_* variable"
    );
    let c = load_ok(
        &up,
        &[("OTEL_SEMCONV_STABILITY_OPT_IN", "http/dup,database")],
    );
    assert_eq!(c.telemetry.semconv, Semconv::Latest, "other categories");
    let f = TempToml::new(&format!("[telemetry]\nsemconv = \"newest\"\n{ROUTES}"));
    let e = load_err(&["--config", &f.path()], &[]);
    assert_mentions(
        &e,
        &["telemetry.semconv", "newest", "latest", "legacy", "both"],
    );
    let e = load_err(&up, &[("TOKENTAP_TELEMETRY__SEMCONV", "old")]);
    assert_mentions(
        &e,
        &["telemetry.semconv", "TOKENTAP_TELEMETRY__SEMCONV", "old"],
    );
}

#[test]
fn config_semconv_needs_a_restart() {
    let old = from_toml(ROUTES).expect("valid");
    let new = from_toml(&format!("[telemetry]\nsemconv = \"both\"\n{ROUTES}")).expect("valid");
    assert_eq!(
        old.restart_required(&new).as_deref(),
        Some("telemetry.semconv"),
        "instruments record by the switch read at start-up"
    );
}

#[test]
fn sampling_reads_from_file_env_and_otel_and_names_bad_keys() {
    let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &[]);
    assert_eq!(
        c.telemetry.sampling,
        crate::config::SamplingConfig::default()
    );
    assert_eq!(c.telemetry.sampling.ratio, 1.0, "default: every span");
    let f = TempToml::new(&format!(
        "[telemetry.sampling]\nratio = 0.01\nkeep_ttft_over = \"2s\"\nkeep_stall_over = \"1s\"\n\
         keep_duration_over = \"60s\"\nrespect_parent = true\n{ROUTES}"
    ));
    let c = load_ok(&["--config", &f.path()], &[]);
    let s = &c.telemetry.sampling;
    assert_eq!(s.ratio, 0.01);
    assert_eq!(s.keep_ttft_over, Some(Duration::from_secs(2)));
    assert_eq!(s.keep_stall_over, Some(Duration::from_secs(1)));
    assert_eq!(s.keep_duration_over, Some(Duration::from_secs(60)));
    assert!(s.respect_parent);
    let c = load_ok(
        &["--upstream", "http://127.0.0.1:9"],
        &[
            ("TOKENTAP_TELEMETRY__SAMPLING__RATIO", "0.25"),
            ("TOKENTAP_TELEMETRY__SAMPLING__KEEP_TTFT_OVER", "500ms"),
        ],
    );
    assert_eq!(c.telemetry.sampling.ratio, 0.25);
    assert_eq!(
        c.telemetry.sampling.keep_ttft_over,
        Some(Duration::from_millis(500))
    );
    for (sampler, arg, ratio, parent) in [
        ("always_off", None, 0.0, false),
        ("traceidratio", Some("0.1"), 0.1, false),
        ("parentbased_traceidratio", Some("0.5"), 0.5, true),
        ("parentbased_always_on", None, 1.0, true),
    ] {
        let mut vars = vec![("OTEL_TRACES_SAMPLER", sampler)];
        vars.extend(arg.map(|a| ("OTEL_TRACES_SAMPLER_ARG", a)));
        let c = load_ok(&["--upstream", "http://127.0.0.1:9"], &vars);
        let s = &c.telemetry.sampling;
        assert_eq!((s.ratio, s.respect_parent), (ratio, parent), "{sampler}");
    }
    for (body, words) in [
        (
            "ratio = 1.5",
            &["telemetry.sampling.ratio", "from 0 to 1"][..],
        ),
        ("ratio = -0.1", &["telemetry.sampling.ratio", "from 0 to 1"]),
        (
            "keep_ttft_over = \"soon\"",
            &["telemetry.sampling.keep_ttft_over"],
        ),
        (
            "keep_stall_over = \"0s\"",
            &["telemetry.sampling.keep_stall_over", "longer than zero"],
        ),
        ("keep_duration = \"1s\"", &["keep_duration"]),
    ] {
        let f = TempToml::new(&format!("[telemetry.sampling]\n{body}\n{ROUTES}"));
        let e = load_err(&["--config", &f.path()], &[]);
        assert_mentions(&e, words);
    }
    let e = env_err("TOKENTAP_TELEMETRY__SAMPLING__RATIO", "2");
    assert_mentions(&e, &["telemetry.sampling.ratio", "from 0 to 1"]);
    let e = env_err("OTEL_TRACES_SAMPLER", "jaeger_remote");
    assert_mentions(&e, &["telemetry.sampling.ratio", "OTEL_TRACES_SAMPLER"]);
}

#[test]
fn route_labels_load_show_and_read_back() {
    let c = from_toml(&format!(
        "{ROUTES}labels = {{ hardware = \"H100\", quantization = \"fp8\" }}\n\
         [[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"http://b\"\n"
    ))
    .expect("valid");
    let labels = &c.routes[0].labels;
    assert_eq!(
        labels.iter().collect::<Vec<_>>(),
        [("hardware", "H100"), ("quantization", "fp8")]
    );
    assert!(c.routes[1].labels.is_empty(), "none unless configured");
    let shown = c.redacted_toml();
    assert!(
        shown.contains("H100") && shown.contains("quantization"),
        "{shown}"
    );
    let back = from_toml(&shown).expect("the shown config reads back");
    assert_eq!(back.routes[0].labels, c.routes[0].labels);
    assert!(back.routes[1].labels.is_empty());
}

#[test]
fn route_label_errors_name_the_route_and_the_key() {
    for (labels, key) in [
        ("{ Hardware = \"H100\" }", "label `Hardware`"),
        ("{ gpu = \"\" }", "label `gpu`"),
        ("{ \"a..b\" = \"x\" }", "label `a..b`"),
        ("{ gpu = 8 }", "string"),
    ] {
        let err = from_toml(&format!("{ROUTES}labels = {labels}\n"))
            .expect_err(labels)
            .to_string();
        assert_mentions(&err, &["routes[0].labels", key]);
    }
    let many: Vec<String> = (0..17).map(|i| format!("k{i} = \"v\"")).collect();
    let err = from_toml(&format!("{ROUTES}labels = {{ {} }}\n", many.join(", ")))
        .expect_err("17 labels")
        .to_string();
    assert_mentions(&err, &["routes[0].labels", "at most 16"]);
}
