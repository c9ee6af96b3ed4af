//! The real binary: flags, config errors, graceful SIGTERM drain, and the
//! logs it writes (which must hold no secrets).
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, Instant};

use support::client::{self, Req};
use support::otlp::Collector;
use support::proxy::{Bin, Scratch, Toml, q, run_bin};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Upstream};
use support::{STEP_TIMEOUT, assert_bytes_eq};

use support::CHAT;

#[tokio::test]
async fn upstream_and_listen_flags_give_a_one_route_proxy() {
    let up = Upstream::fixed(script::openai_chat_json("m", "flags", (1, 1))).await;
    let bin = Bin::start_args(
        &["--upstream", &up.url(), "--listen", "127.0.0.1:0"],
        &[("OTEL_SDK_DISABLED", "true")],
    )
    .await;
    let got = client::fetch(
        &client::http1(),
        &Req::post_json(bin.addr, CHAT, script::openai_request("m", false, None)),
    )
    .await;
    assert_eq!(
        got.status,
        200,
        "proxied through the --upstream route: {}",
        got.text()
    );
    assert_eq!(up.only().await.path_and_query, CHAT, "path forwarded as is");
    let out = bin.stop().await;
    assert!(
        out.contains("listening on"),
        "startup line printed; output:\n{out}"
    );
}

#[tokio::test]
async fn unknown_config_key_is_an_error_naming_key_and_file() {
    let scratch = Scratch::new("cfg");
    let text = Toml::openai("http://127.0.0.1:9")
        .set("upstream", "conect_timeout", &q("5s"))
        .render();
    let path = scratch.write("typo.toml", &text);
    let (status, out) = run_bin(&["--config", path.to_str().unwrap()], &[]).await;
    assert!(
        !status.success(),
        "an unknown key must fail startup; exited {status:?}, output:\n{out}"
    );
    assert!(
        out.contains("conect_timeout"),
        "the error names the unknown key; output:\n{out}"
    );
    assert!(
        out.contains("typo.toml"),
        "the error names the file; output:\n{out}"
    );
    assert!(
        !out.contains("listening on"),
        "must fail before binding; output:\n{out}"
    );
}

#[tokio::test]
async fn bad_duration_and_bad_url_are_errors_naming_the_key() {
    let scratch = Scratch::new("cfg");
    let cases = [
        (
            "bad-duration.toml",
            Toml::openai("http://127.0.0.1:9")
                .set("upstream", "connect_timeout", &q("five seconds"))
                .render(),
            "connect_timeout",
        ),
        (
            "bad-url.toml",
            Toml::openai("not a url").render(),
            "upstream",
        ),
    ];
    for (name, text, key) in cases {
        let path = scratch.write(name, &text);
        let (status, out) = run_bin(&["--config", path.to_str().unwrap()], &[]).await;
        assert!(
            !status.success(),
            "{name}: startup must fail; output:\n{out}"
        );
        assert!(
            out.contains(key),
            "{name}: the error names `{key}`; output:\n{out}"
        );
    }
}

#[tokio::test]
async fn missing_config_file_is_an_error() {
    let (status, out) = run_bin(&["--config", "/nonexistent/tokentap-test.toml"], &[]).await;
    assert!(
        !status.success(),
        "a missing config file must fail; output:\n{out}"
    );
    assert!(
        out.contains("tokentap-test.toml"),
        "the error names the file; output:\n{out}"
    );
}

/// A client that connected and sent nothing does not hold the shutdown up
/// until `header_read_timeout`: the drain closes it at once.
#[tokio::test]
async fn sigterm_does_not_wait_for_a_connection_that_sent_nothing() {
    let up = Upstream::fixed(script::openai_chat_json("m", "hi", (1, 1))).await;
    let toml = Toml::openai(&up.url())
        .set("server", "header_read_timeout", &q("30s"))
        .set("server", "shutdown_grace", &q("30s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let mut silent = tokio::net::TcpStream::connect(bin.addr)
        .await
        .expect("connect");
    // Let the acceptor hand it to a serving thread.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    bin.sigterm();
    let status = bin.wait_exit(Duration::from_secs(25)).await;
    assert!(status.success(), "exit 0; output:\n{}", bin.output());
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "exited {:?} after SIGTERM: the silent connection held the drain",
        t0.elapsed()
    );
    let mut buf = [0u8; 16];
    let n = tokio::io::AsyncReadExt::read(&mut silent, &mut buf)
        .await
        .unwrap_or(0);
    assert_eq!(n, 0, "the silent connection was closed, not answered");
    assert_eq!(up.connections(), 0);
}

#[tokio::test]
async fn sigterm_drains_in_flight_streams_and_refuses_new_connections() {
    // 30 tokens 50 ms apart: the stream runs ~1.5 s, SIGTERM arrives mid-way.
    let spec = StreamSpec::tokens(30, Duration::from_millis(50), Duration::from_millis(50));
    let reply = script::openai_chat_sse(&spec);
    let want = reply.body_bytes();
    let up = Upstream::fixed(reply).await;
    let toml = Toml::openai(&up.url()).set("server", "shutdown_grace", &q("10s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let addr = bin.addr;

    let c = client::http1();
    let (resp, t0) = client::send(
        &c,
        &Req::post_json(addr, CHAT, script::openai_request("m-drain", true, None)),
    )
    .await;
    let reader = tokio::spawn(client::read_all(resp, t0, Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_millis(400)).await;
    bin.sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let refused =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await;
    let accepted = matches!(refused, Ok(Ok(_)));
    assert!(
        !accepted,
        "after SIGTERM the listener must be closed: new connections refused"
    );

    let got = support::within(STEP_TIMEOUT, "the in-flight stream after SIGTERM", reader)
        .await
        .unwrap();
    assert!(
        got.error.is_none(),
        "the in-flight stream must finish cleanly after SIGTERM, got {:?}",
        got.error
    );
    assert_bytes_eq("drained stream", &got.body, &want);
    assert_eq!(up.only().await.end(), Some(BodyEnd::Completed));
    let status = bin.wait_exit(Duration::from_secs(10)).await;
    assert!(
        status.success(),
        "tokentap exits 0 after a graceful drain, got {status:?}; output:\n{}",
        bin.output()
    );
    // The drain line counts the HTTP/1.1 connection in flight and says the
    // grace period configured; no thread claims zero while one waits.
    let out = bin.output();
    let waiting: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("draining: waiting"))
        .collect();
    assert!(
        waiting.len() == 1
            && waiting[0].contains("connections=1")
            && waiting[0].contains("grace=10s"),
        "one thread drains one HTTP/1.1 connection for at most 10s:\n{out}"
    );
    assert!(
        !out.contains("connections=0"),
        "no drain line counts zero:\n{out}"
    );
}

#[tokio::test]
async fn sigterm_cuts_streams_that_outlive_the_grace_period() {
    let spec = StreamSpec::tokens(3, Duration::ZERO, Duration::from_millis(5));
    let up = Upstream::fixed(script::openai_hang_after(&spec, 2)).await;
    let toml = Toml::openai(&up.url()).set("server", "shutdown_grace", &q("1s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let c = client::http1();
    let (resp, _) = client::send(
        &c,
        &Req::post_json(bin.addr, CHAT, script::openai_request("m-cut", true, None)),
    )
    .await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "tok1").await;
    let t0 = Instant::now();
    bin.sigterm();
    let status = bin.wait_exit(Duration::from_secs(8)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "exit within grace (1 s) plus flush, took {:?}",
        t0.elapsed()
    );
    let _ = status;
    let end = up.only().await.wait_end(Duration::from_secs(3)).await;
    assert_eq!(
        end.map(|e| e.0),
        Some(BodyEnd::Cancelled),
        "the hung upstream stream is cancelled at shutdown"
    );
}

#[tokio::test]
async fn env_layer_overrides_the_file() {
    let up = Upstream::fixed(script::openai_chat_json("m", "ok", (1, 1))).await;
    let col = Collector::start().await;
    let toml = Toml::openai(&up.url()).otlp(&col.endpoint(), "http/protobuf");
    let bin = Bin::start(
        &toml,
        &[],
        &[("TOKENTAP_TELEMETRY__SERVICE_NAME", "svc-from-env")],
    )
    .await;
    let got = client::fetch(
        &client::http1(),
        &Req::post_json(bin.addr, CHAT, script::openai_request("m-env", false, None)),
    )
    .await;
    assert_eq!(got.status, 200);
    let span = col.wait_span_named("chat m-env").await;
    let out = bin.stop().await;
    assert_eq!(
        span.resource.get("service.name").and_then(|v| v.as_str()),
        Some("svc-from-env"),
        "TOKENTAP_TELEMETRY__SERVICE_NAME overrides telemetry.service_name from the file; output:\n{out}"
    );
}

#[tokio::test]
async fn bad_env_value_is_an_error_naming_the_variable() {
    let scratch = Scratch::new("cfg");
    let path = scratch.write("ok.toml", &Toml::openai("http://127.0.0.1:9").render());
    let (status, out) = run_bin(
        &["--config", path.to_str().unwrap()],
        &[("TOKENTAP_UPSTREAM__CONNECT_TIMEOUT", "soon")],
    )
    .await;
    assert!(
        !status.success(),
        "a bad env value must fail startup; output:\n{out}"
    );
    assert!(
        out.contains("connect_timeout") || out.contains("CONNECT_TIMEOUT"),
        "the error names the key; output:\n{out}"
    );
}

/// `check` reads the certificate and key exactly as start-up does: a key
/// that does not fit its certificate, or the two files swapped, fails both
/// with exit code 2, so `check && kill -HUP` never lets one through.
#[tokio::test]
async fn check_refuses_the_tls_files_run_refuses() {
    use support::tls::{TestCa, write_pem};
    let dir = Scratch::new("check-tls");
    let ca = TestCa::new();
    let one = write_pem(&dir, "one", &ca.leaf(&["localhost"]));
    let two = write_pem(&dir, "two", &ca.leaf(&["localhost"]));
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let base = [
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
    ];
    let (status, out) = run_bin(
        &[
            &["check"][..],
            &base,
            &["--tls-cert", &path(&one.cert), "--tls-key", &path(&one.key)],
        ]
        .concat(),
        &[],
    )
    .await;
    assert_eq!(status.code(), Some(0), "a fitting pair is OK:\n{out}");
    for (what, cert, key) in [
        ("a key of another certificate", &one.cert, &two.key),
        ("a swapped pair", &one.key, &one.cert),
    ] {
        let tls = ["--tls-cert", &path(cert), "--tls-key", &path(key)];
        for sub in ["check", "run"] {
            let args = [&[sub][..], &base, &["--admin-listen", "off"], &tls].concat();
            let (status, out) = run_bin(&args, &[("OTEL_SDK_DISABLED", "true")]).await;
            assert_eq!(
                status.code(),
                Some(2),
                "`{sub}` refuses {what} with exit code 2:\n{out}"
            );
            assert!(
                !out.contains("configuration OK") && !out.contains("listening on"),
                "`{sub}` neither accepts nor serves {what}:\n{out}"
            );
        }
    }
}

/// Every stderr line of `stderr` parsed as JSON; panics naming a line that
/// is not a JSON object.
fn json_lines(stderr: &str, what: &str) -> Vec<serde_json::Value> {
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(v) if v.is_object() => v,
            _ => panic!("{what}: a line that is not a JSON object: {l}\nall output:\n{stderr}"),
        })
        .collect();
    assert!(!lines.is_empty(), "{what}: no lines at all");
    lines
}

/// `--log-format json` is JSON on every line: a configuration error, the
/// start-up lines (with `routes` an array) and the drain.
#[tokio::test]
async fn json_log_format_is_json_on_every_line() {
    let (status, out) = run_bin(
        &["--upstream", "http://127.0.0.1:9", "--log-format", "json"],
        &[("TOKENTAP_SERVER__MAX_CONNECTIONS", "lots")],
    )
    .await;
    assert_eq!(status.code(), Some(2), "a bad value stops start-up:\n{out}");
    let lines = json_lines(&out, "a failing start");
    assert!(
        lines
            .iter()
            .any(|l| l.to_string().contains("server.max_connections")),
        "the error names the key, as JSON:\n{out}"
    );
    let (status, out) = run_bin(
        &[
            "check",
            "--upstream",
            "http://127.0.0.1:9",
            "--log-format",
            "json",
        ],
        &[("TOKENTAP_SERVER__MAX_CONNECTIONS", "lots")],
    )
    .await;
    assert_eq!(status.code(), Some(2), "check refuses it too:\n{out}");
    json_lines(&out, "a failing check");
    let bin = Bin::start_args(
        &[
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "off",
            "--log-format",
            "json",
        ],
        &[("OTEL_SDK_DISABLED", "true")],
    )
    .await;
    // SIGTERM is handled once start-up has finished, a moment after the
    // `listening on` line.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = bin.stop().await;
    let lines = json_lines(&out, "a normal start and stop");
    let drains: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("draining"))
        })
        .collect();
    assert!(
        !drains.is_empty()
            && drains
                .iter()
                .all(|l| l["message"] == "draining: no connections open; done"
                    && l.get("grace").is_none()),
        "an idle stop says nothing was open and names no grace period:\n{out}"
    );
    let banner = lines
        .iter()
        .find(|l| l.get("routes").is_some())
        .unwrap_or_else(|| panic!("a start-up line carries routes:\n{out}"));
    let routes = banner["routes"]
        .as_array()
        .unwrap_or_else(|| panic!("routes is an array:\n{out}"));
    assert!(
        routes.len() == 1
            && routes[0]
                .as_str()
                .is_some_and(|r| r.starts_with("default / -> http://127.0.0.1:9")),
        "routes lists the one route:\n{out}"
    );
}

/// tokentap (export off, no admin listener) in front of a port nothing
/// listens on, with `extra` flags and environment.
async fn in_front_of_a_dead_upstream(extra: &[&str], env: &[(&str, &str)]) -> Bin {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut args = vec![
        "--upstream",
        &dead,
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "off",
    ];
    args.extend_from_slice(extra);
    let mut vars = vec![("OTEL_SDK_DISABLED", "true")];
    vars.extend_from_slice(env);
    Bin::start_args(&args, &vars).await
}

/// A dead upstream: each access-log line says why (connection refused), not
/// only `upstream_unreachable`, and a WARN says so too, once for three
/// failures in a row (rate-limited), even with `RUST_LOG=warn`.
#[tokio::test]
async fn a_dead_upstream_is_explained_in_the_access_log_and_one_warning() {
    let bin = in_front_of_a_dead_upstream(&[], &[("RUST_LOG", "warn,tokentap::access=info")]).await;
    let c = client::http1();
    for _ in 0..3 {
        let got = client::fetch(
            &c,
            &Req::post_json(bin.addr, CHAT, script::openai_request("m", false, None)),
        )
        .await;
        assert_eq!(got.status, 502, "a dead upstream is a 502: {}", got.text());
    }
    let out = bin.stop().await;
    let access: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("upstream_unreachable") && l.contains("request"))
        .filter(|l| l.contains("tokentap::access"))
        .collect();
    assert_eq!(access.len(), 3, "three access-log lines:\n{out}");
    for line in &access {
        assert!(
            line.contains("cause=") && line.to_lowercase().contains("refused"),
            "the access log says the connection was refused: {line}"
        );
        assert!(
            line.contains("span_exported=false"),
            "export is off, so no span is exported: {line}"
        );
    }
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("upstream request failed"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one WARN for three failures within the interval:\n{out}"
    );
    assert!(
        warnings[0].to_lowercase().contains("refused"),
        "the WARN names the cause: {}",
        warnings[0]
    );
}

/// The access log names each request's agent session (`session_id`), so an
/// operator can grep for one, bounded as on the span: an id longer than
/// `sessions.max_id_length` (128) is its first 111 bytes, `~` and a hash.
#[tokio::test]
async fn the_access_log_names_the_session_bounded_like_the_span() {
    let bin = in_front_of_a_dead_upstream(&["--log-format", "json"], &[]).await;
    let long = "s".repeat(300);
    let c = client::http1();
    for id in [None, Some("agent-session-7"), Some(long.as_str())] {
        let mut req = Req::post_json(bin.addr, CHAT, script::openai_request("m", false, None));
        if let Some(id) = id {
            req = req.header("x-claude-code-session-id", id);
        }
        let got = client::fetch(&c, &req).await;
        assert_eq!(got.status, 502, "a dead upstream is a 502: {}", got.text());
    }
    let out = bin.stop().await;
    let sessions: Vec<Option<String>> = json_lines(&out, "the access log")
        .iter()
        .filter(|l| l["target"] == "tokentap::access" && l["route"].is_string())
        .map(|l| {
            l.get("session_id")
                .and_then(|s| s.as_str())
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(sessions.len(), 3, "three access-log lines:\n{out}");
    assert_eq!(
        sessions[0], None,
        "no session header, no session_id:\n{out}"
    );
    assert_eq!(sessions[1].as_deref(), Some("agent-session-7"), "{out}");
    let bounded = sessions[2].as_deref().unwrap_or_default();
    assert!(
        bounded.len() == 128 && bounded.starts_with(&format!("{}~", &long[..111])),
        "a 300-byte id is bounded to 128 bytes as on the span, got {bounded:?}"
    );
}

/// The OTLP start-up line names the protocol as configured
/// (`http/protobuf`), and export turned off on purpose gets no advice to
/// set an endpoint; with nothing configured, the advice is there.
#[tokio::test]
async fn the_otlp_start_up_line_is_plain_and_fits_the_setting() {
    let base = [
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "off",
    ];
    let line = |out: &str| {
        out.lines()
            .find(|l| l.contains("OTLP export"))
            .unwrap_or_else(|| panic!("an OTLP start-up line:\n{out}"))
            .to_owned()
    };
    let on = Bin::start_args(
        &[&base[..], &["--otlp-endpoint", "http://127.0.0.1:9"]].concat(),
        &[],
    )
    .await
    .stop()
    .await;
    let on = line(&on);
    assert!(
        on.contains("OTLP export on")
            && on.contains("http/protobuf")
            && !on.contains("HttpProtobuf"),
        "the protocol as written in config: {on}"
    );
    let off = Bin::start_args(&base, &[("OTEL_SDK_DISABLED", "true")])
        .await
        .stop()
        .await;
    let off = line(&off);
    assert!(
        off.contains("OTLP export is off") && !off.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "turned off on purpose, no advice to turn it on: {off}"
    );
    let unset = Bin::start_args(&base, &[]).await.stop().await;
    let unset = line(&unset);
    assert!(
        unset.contains("no collector endpoint") && unset.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "nothing configured: how to turn it on: {unset}"
    );
    // Only the traces endpoint: the line names where each signal goes.
    let traces = "http://127.0.0.1:9/v1/traces";
    let one = Bin::start_args(&base, &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)])
        .await
        .stop()
        .await;
    let one = line(&one);
    assert!(
        one.contains("OTLP export on")
            && one.contains(traces)
            && one.contains("http://localhost:4318/v1/metrics")
            && !one.contains("OTLP default"),
        "the traces endpoint set, metrics to the specification's default: {one}"
    );
}

/// `check` prints values as the docs write them: a share given as `0.01`
/// as `0.01`, the upstream without the trailing `/`, durations in hours
/// at most; a sampler argument out of range is blamed on its variable;
/// `--watch-config` without a config file warns as `run` does; the OTLP
/// certificate files must exist with export off too.
#[tokio::test]
async fn check_shows_values_as_written_and_blames_the_right_input() {
    let base = [
        "check",
        "--upstream",
        "http://127.0.0.1:9/",
        "--listen",
        "127.0.0.1:0",
    ];
    let (status, out) = run_bin(&base, &[("TOKENTAP_TELEMETRY__SAMPLING__RATIO", "0.01")]).await;
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains("ratio = 0.01\n") && !out.contains("0.00999"),
        "the ratio as written: {out}"
    );
    assert!(
        out.contains("upstream = \"http://127.0.0.1:9\"\n"),
        "no trailing slash: {out}"
    );
    assert!(
        out.contains("idle_timeout = \"24h\"") && !out.contains("day\""),
        "durations in hours at most: {out}"
    );
    assert!(!out.contains("no config file to watch"), "{out}");
    let sampler = [
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
    ];
    let (status, out) = run_bin(&base, &sampler).await;
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("ratio = 0.25\n"), "{out}");
    let (status, out) = run_bin(
        &base,
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ],
    )
    .await;
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("environment variable OTEL_TRACES_SAMPLER_ARG")
            && !out.contains("environment variable OTEL_TRACES_SAMPLER)"),
        "the argument is out of range, not the sampler: {out}"
    );
    let (status, out) = run_bin(&[&base[..], &["--watch-config"]].concat(), &[]).await;
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains("watch_config is on but there is no config file to watch"),
        "warns as run does: {out}"
    );
    let (status, out) = run_bin(
        &base,
        &[
            ("OTEL_SDK_DISABLED", "true"),
            (
                "TOKENTAP_TELEMETRY__OTLP_CERTIFICATE",
                "/nonexistent/ca.pem",
            ),
        ],
    )
    .await;
    assert_eq!(
        status.code(),
        Some(2),
        "export off, the file still checked: {out}"
    );
    assert!(out.contains("telemetry.otlp_certificate"), "{out}");
}
