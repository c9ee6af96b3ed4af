//! Reload rules: the running configuration and a newly loaded one in; the
//! first key that differs but cannot change without a restart (if any) out.

use toml::Value;

use super::Config;
use super::raw::RawConfig;

/// Keys (whole sections or dotted paths) bound at start-up: the sockets and
/// their limits, the telemetry pipeline (exporters, resource, cardinality
/// caps, live windows, SLOs and their webhook, log format) and the tokenizer
/// thread. A reload that changes one of them is refused; everything else
/// (routes, `[upstream]`, `[sniff]`, `meter.max_frame_bytes`, `[tenant]`,
/// `watch_config`) is swapped in. Keys added later to these sections are
/// restart-only too, which is the safe default; a key of a reloadable
/// section that is read only at start-up needs its own entry here.
pub const RESTART_ONLY: &[&str] = &[
    "listen",
    "admin_listen",
    "admin",
    "server",
    "meter.tokenizer",
    "meter.max_counted_ids",
    "upstream.max_drains",
    "sessions.max_sessions",
    "sessions.idle_timeout",
    "state",
    "telemetry",
    "live",
    "compare",
    "slo",
    "alerts",
];

/// The first restart-only key whose value differs between `old` and `new`,
/// as shown to users (`server.max_connections`, `slo[0].ttft_p95`).
pub(super) fn restart_only_change(old: &Config, new: &Config) -> Option<String> {
    let (a, b) = (rendered(old), rendered(new));
    for key in RESTART_ONLY {
        if let Some(at) = first_difference(key, lookup(&a, key), lookup(&b, key)) {
            return Some(at);
        }
    }
    hidden_change(old, new)
}

/// Differences the redacted rendering cannot show: secret values, and
/// fields a rendering does not (yet) carry.
fn hidden_change(old: &Config, new: &Config) -> Option<String> {
    let (t, u) = (&old.telemetry, &new.telemetry);
    if t.otlp_headers != u.otlp_headers {
        return Some("telemetry.otlp_headers".into());
    }
    // The shown URL hides the password.
    if old.state.url != new.state.url {
        return Some("state.url".into());
    }
    if let (Some(a), Some(b)) = (&t.slo.alerts, &u.slo.alerts) {
        if a.headers != b.headers {
            return Some("alerts.headers".into());
        }
        if a.webhook_url != b.webhook_url {
            return Some("alerts.webhook_url".into());
        }
    }
    // Certificate files are read again on every reload; turning TLS on or
    // off changes what the socket speaks.
    if old.tls.is_some() != new.tls.is_some() {
        return Some("tls".into());
    }
    if old.admin != new.admin {
        return Some("admin".into());
    }
    // Every field, including any a rendering does not show.
    if old.server != new.server {
        return Some("server".into());
    }
    if t != u {
        return Some("telemetry".into());
    }
    None
}

fn rendered(c: &Config) -> Option<Value> {
    Value::try_from(RawConfig::redacted(c)).ok()
}

fn lookup<'a>(root: &'a Option<Value>, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .try_fold(root.as_ref()?, |v, seg| v.as_table()?.get(seg))
}

/// The path of the first leaf where `a` and `b` differ.
fn first_difference(path: &str, a: Option<&Value>, b: Option<&Value>) -> Option<String> {
    if a == b {
        return None;
    }
    match (a, b) {
        (Some(Value::Table(x)), Some(Value::Table(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|k| first_difference(&format!("{path}.{k}"), x.get(k), y.get(k)))
                .or_else(|| Some(path.to_owned()))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(&format!("{path}[{i}]"), Some(p), Some(q)))
            .or_else(|| Some(path.to_owned())),
        _ => Some(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::cli;
    use super::super::{from_toml, load_with_env};

    const ROUTE: &str = "[[routes]]\nname = \"a\"\nupstream = \"http://127.0.0.1:9\"\n";

    fn change(before: &str, after: &str) -> Option<String> {
        let old = from_toml(&format!("{before}\n{ROUTE}")).expect("old config");
        let new = from_toml(&format!("{after}\n{ROUTE}")).expect("new config");
        old.restart_required(&new)
    }

    #[test]
    fn restart_only_keys_are_named() {
        let cases = [
            ("", "listen = \"127.0.0.1:9999\"", "listen"),
            ("", "admin_listen = \"off\"", "admin_listen"),
            (
                "",
                "[server]\nmax_connections = 5",
                "server.max_connections",
            ),
            ("", "[meter]\ntokenizer = false", "meter.tokenizer"),
            ("", "[upstream]\nmax_drains = 3", "upstream.max_drains"),
            ("", "[sessions]\nmax_sessions = 3", "sessions.max_sessions"),
            (
                "",
                "[sessions]\nidle_timeout = \"1m\"",
                "sessions.idle_timeout",
            ),
            (
                "[telemetry]\notlp_enabled = true",
                "[telemetry]\notlp_enabled = true\notlp_endpoint = \"http://127.0.0.1:4318\"",
                "telemetry.otlp_endpoint",
            ),
            (
                "[telemetry.otlp_headers]\nauthorization = \"a\"",
                "[telemetry.otlp_headers]\nauthorization = \"b\"",
                "telemetry.otlp_headers",
            ),
            (
                "[[slo]]\nname = \"s\"\nttft_p95 = \"1s\"",
                "[[slo]]\nname = \"s\"\nttft_p95 = \"2s\"",
                "slo[0].ttft_p95",
            ),
            (
                "[alerts]\nwebhook_url = \"https://h.example/a\"",
                "[alerts]\nwebhook_url = \"https://h.example/b\"",
                "alerts.webhook_url",
            ),
        ];
        for (before, after, key) in cases {
            assert_eq!(
                change(before, after).as_deref(),
                Some(key),
                "{after:?} must be refused naming `{key}`"
            );
        }
    }

    #[test]
    fn live_keys_may_change() {
        for after in [
            "[upstream]\nconnect_timeout = \"1s\"",
            "[sniff]\nmax_body_bytes = \"1KiB\"",
            "[meter]\nmax_frame_bytes = \"1KiB\"",
            "[tenant]\nsalt = \"other\"\nheader = \"x-team\"",
            "[sessions]\nsources = [\"header\"]\nheader = \"x-run\"\nmax_id_length = 64",
            "watch_config = true",
        ] {
            assert_eq!(change("", after), None, "{after:?} reloads live");
        }
        let old = from_toml(ROUTE).expect("old");
        let new = from_toml("[[routes]]\nname = \"b\"\nupstream = \"http://127.0.0.1:8\"\n")
            .expect("new");
        assert_eq!(old.restart_required(&new), None, "routes reload live");
    }

    #[test]
    fn watch_config_from_flag_and_key() {
        let load = |args: &[&str], env: &[(&str, &str)]| {
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            load_with_env(&cli(args), &env).expect("valid config")
        };
        let up = ["--upstream", "http://127.0.0.1:9"];
        assert!(!load(&up, &[]).watch_config, "off by default");
        assert!(load(&[&up[..], &["--watch-config"]].concat(), &[]).watch_config);
        assert!(load(&up, &[("TOKENTAP_WATCH_CONFIG", "true")]).watch_config);
        let shown = load(&[&up[..], &["--watch-config"]].concat(), &[]).redacted_toml();
        assert!(shown.contains("watch_config = true"), "{shown}");
    }
}
