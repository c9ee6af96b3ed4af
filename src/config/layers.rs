//! Figment providers, one per source (defaults, each env var, each flag), so
//! every value carries the name of exactly where it came from.

use figment::providers::{Data, Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Error, Figment, Metadata, Profile, Provider};

use super::parse;
use super::raw::RawConfig;
use super::units::REDACTED;
use super::{ConfigError, Overrides};
use crate::providers::ProviderKind;

/// Prefix of tokentap's own environment variables.
pub(super) const ENV_PREFIX: &str = "TOKENTAP_";
/// Names the config file; read by the CLI, never a config key.
pub(super) const CONFIG_ENV: &str = "TOKENTAP_CONFIG";

/// A fixed set of values from one named source.
pub(super) struct Layer {
    name: String,
    data: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, Error> {
        Ok(Profile::Default.collect(self.data.clone()))
    }
}

impl Layer {
    /// The built-in defaults.
    pub(super) fn defaults() -> Layer {
        let mut data = match Value::serialize(RawConfig::default()) {
            Ok(Value::Dict(_, d)) => d,
            // Serializing a plain struct of strings and numbers cannot fail.
            _ => Dict::new(),
        };
        // Secrets serialise redacted; left out here, serde's `default` fills
        // in their built-in values.
        drop_redacted(&mut data);
        Layer {
            name: "built-in default".into(),
            data,
        }
    }

    /// One value at a dotted key.
    fn key(name: String, key: &str, value: Value) -> Layer {
        let data = match figment::util::nest(key, value) {
            Value::Dict(_, d) => d,
            _ => Dict::new(),
        };
        Layer { name, data }
    }
}

fn drop_redacted(d: &mut Dict) {
    d.retain(|_, v| v.as_str() != Some(REDACTED));
    for v in d.values_mut() {
        if let Value::Dict(_, inner) = v {
            drop_redacted(inner);
        }
    }
}

fn env_source(var: &str) -> String {
    format!("environment variable {var}")
}

/// Env values stay strings (the lossy extractor reads numbers and bools from
/// them) unless they are written as an inline array or table.
fn env_value(v: &str) -> Value {
    let t = v.trim_start();
    if t.starts_with('[') || t.starts_with('{') {
        v.parse()
            .unwrap_or_else(|e: std::convert::Infallible| match e {})
    } else {
        Value::from(v.to_string())
    }
}

/// `TOKENTAP_SERVER__MAX_CONNECTIONS=100` → `server.max_connections`.
/// Empty values count as unset.
pub(super) fn tokentap_env(env: &[(String, String)]) -> Result<Vec<Layer>, ConfigError> {
    let mut layers = Vec::new();
    for (var, val) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if var == CONFIG_ENV || val.is_empty() {
            continue;
        }
        let segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if segments.iter().any(String::is_empty) {
            return Err(ConfigError::Invalid {
                key: var.clone(),
                origin: env_source(var),
                message: "malformed name; nested keys are joined with `__`, e.g. TOKENTAP_SERVER__MAX_CONNECTIONS".into(),
            });
        }
        let key = segments.join(".");
        let value = match STRING_TABLES.contains(&key.as_str()) {
            true => table_value(var, &key, val)?,
            false => env_value(val),
        };
        layers.push(Layer::key(env_source(var), &key, value));
    }
    Ok(layers)
}

/// Tables of strings that a whole `TOKENTAP_*` variable may also set as
/// `k1=v1,k2=v2` (the `OTEL_EXPORTER_OTLP_HEADERS` form): the one way to
/// give a key the variable name cannot spell, such as `x-api-key`.
const STRING_TABLES: [&str; 3] = [
    "telemetry.otlp_headers",
    "telemetry.resource_attributes",
    "alerts.headers",
];

/// An inline table (`{…}`) as it is, else the `k=v,…` list as a table.
fn table_value(var: &str, key: &str, val: &str) -> Result<Value, ConfigError> {
    if val.trim_start().starts_with('{') {
        return Ok(env_value(val));
    }
    let pairs = parse::kv_list(val).map_err(|message| ConfigError::Invalid {
        key: key.to_owned(),
        origin: env_source(var),
        message: format!("{message}; write k1=v1,k2=v2 or an inline table {{k1=\"v1\"}}"),
    })?;
    let d: Dict = pairs
        .into_iter()
        .map(|(k, v)| (k, Value::from(v)))
        .collect();
    Ok(Value::from(d))
}

/// The standard `OTEL_*` variables mapped onto `[telemetry]`. Empty values
/// count as unset, as the OpenTelemetry spec asks.
pub(super) fn otel_env(env: &[(String, String)]) -> Result<Vec<Layer>, ConfigError> {
    let get = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_string())
    };
    let mut layers = Vec::new();
    let mut put = |var: &str, key: &str, value: Value| {
        layers.push(Layer::key(
            env_source(var),
            &format!("telemetry.{key}"),
            value,
        ));
    };
    let simple = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "otlp_protocol"),
        ("OTEL_SERVICE_NAME", "service_name"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "otlp_certificate"),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            "otlp_client_certificate",
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "otlp_client_key"),
    ];
    for (var, key) in simple {
        if let Some(v) = get(var) {
            put(var, key, Value::from(v));
        }
    }
    let list = |var: &str, key: &str| -> Result<Option<Vec<(String, String)>>, ConfigError> {
        let Some(v) = get(var) else { return Ok(None) };
        parse::kv_list(&v)
            .map(Some)
            .map_err(|message| ConfigError::Invalid {
                key: format!("telemetry.{key}"),
                origin: env_source(var),
                message,
            })
    };
    let dict = |pairs: &[(String, String)]| {
        let d: Dict = pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        Value::from(d)
    };
    if let Some(h) = list("OTEL_EXPORTER_OTLP_HEADERS", "otlp_headers")? {
        put("OTEL_EXPORTER_OTLP_HEADERS", "otlp_headers", dict(&h));
    }
    if let Some(attrs) = list("OTEL_RESOURCE_ATTRIBUTES", "resource_attributes")? {
        // The spec lets OTEL_SERVICE_NAME win over a `service.name` attribute.
        let named = attrs.iter().find(|(k, _)| k == "service.name");
        if let (Some((_, name)), None) = (named, get("OTEL_SERVICE_NAME")) {
            put(
                "OTEL_RESOURCE_ATTRIBUTES",
                "service_name",
                Value::from(name.clone()),
            );
        }
        let rest: Vec<_> = attrs
            .iter()
            .filter(|(k, _)| k != "service.name")
            .cloned()
            .collect();
        put(
            "OTEL_RESOURCE_ATTRIBUTES",
            "resource_attributes",
            dict(&rest),
        );
    }
    // Milliseconds per the spec; anything else is passed on to fail validation.
    let millis = |v: String| {
        if v.bytes().all(|b| b.is_ascii_digit()) {
            format!("{v}ms")
        } else {
            v
        }
    };
    for (var, key) in [
        ("OTEL_METRIC_EXPORT_INTERVAL", "metrics_export_interval"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "otlp_timeout"),
    ] {
        if let Some(v) = get(var) {
            put(var, key, Value::from(millis(v)));
        }
    }
    if let Some(v) = get("OTEL_BSP_MAX_QUEUE_SIZE") {
        // A count; a non-number is passed on to fail validation, naming the key.
        let value = v
            .parse::<u64>()
            .map_or_else(|_| Value::from(v), Value::from);
        put("OTEL_BSP_MAX_QUEUE_SIZE", "span_queue_size", value);
    }
    // A per-signal endpoint (read by the exporter itself) also turns export on.
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ] {
        if get(var).is_some() {
            put(var, "otlp_enabled", Value::from(true));
        }
    }
    // The GenAI conventions' transition switch, a comma-separated list of
    // categories: only `gen_ai_latest_experimental` concerns tokentap (they
    // define no value that asks for the old names).
    if get("OTEL_SEMCONV_STABILITY_OPT_IN").is_some_and(|v| {
        v.split(',')
            .any(|c| c.trim() == "gen_ai_latest_experimental")
    }) {
        put(
            "OTEL_SEMCONV_STABILITY_OPT_IN",
            "semconv",
            Value::from("latest"),
        );
    }
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        put("OTEL_SDK_DISABLED", "otlp_enabled", Value::from(false));
    }
    if let Some(sampler) = get("OTEL_TRACES_SAMPLER") {
        let arg = get("OTEL_TRACES_SAMPLER_ARG");
        let (ratio, parent, from) =
            otel_sampler(&sampler, arg).map_err(|(var, message)| ConfigError::Invalid {
                key: "telemetry.sampling.ratio".into(),
                origin: env_source(var),
                message,
            })?;
        // A ratio out of range fails validation naming the variable it came from.
        put(from, "sampling.ratio", Value::from(ratio));
        put(
            "OTEL_TRACES_SAMPLER",
            "sampling.respect_parent",
            Value::from(parent),
        );
    }
    Ok(layers)
}

/// The standard samplers as `[telemetry.sampling]`: the ratio (`always_on`
/// 1, `always_off` 0, `traceidratio` its argument, default 1) and whether
/// a sampled parent keeps the span (`parentbased_*`), with the variable
/// the ratio came from. A ratio outside 0..=1 is passed on to fail
/// validation, naming the key and that variable; an error names its
/// variable too.
fn otel_sampler(
    name: &str,
    arg: Option<String>,
) -> Result<(f64, bool, &'static str), (&'static str, String)> {
    const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
    const ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
    let (parent, base) = match name.strip_prefix("parentbased_") {
        Some(base) => (true, base),
        None => (false, name),
    };
    let (ratio, from) = match base {
        "always_on" => (1.0, SAMPLER),
        "always_off" => (0.0, SAMPLER),
        "traceidratio" => match arg {
            None => (1.0, SAMPLER),
            Some(a) => {
                let ratio = a
                    .parse::<f64>()
                    .map_err(|_| (ARG, format!("{ARG} `{a}` is not a number from 0 to 1")))?;
                (ratio, ARG)
            }
        },
        _ => {
            return Err((
                SAMPLER,
                format!(
                    "{SAMPLER} `{name}` is not one tokentap knows: always_on, always_off, \
                     traceidratio, or one of them after parentbased_"
                ),
            ));
        }
    };
    Ok((ratio, parent, from))
}

/// The config file, checked for syntax here so a typo reports the file.
pub(super) fn toml_file(path: &std::path::Path) -> Result<Data<Toml>, ConfigError> {
    let toml = Toml::file_exact(path);
    match toml.data() {
        Ok(_) => Ok(toml),
        Err(e) => Err(ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// Command-line flags, each its own layer named after the flag.
pub(super) fn cli(cli: &Overrides) -> Result<Vec<Layer>, ConfigError> {
    let flag = |f: &str| format!("flag --{f}");
    let mut layers = Vec::new();
    if let Some(a) = cli.listen {
        layers.push(Layer::key(
            flag("listen"),
            "listen",
            Value::from(a.to_string()),
        ));
    }
    if let Some(a) = &cli.admin_listen {
        layers.push(Layer::key(
            flag("admin-listen"),
            "admin_listen",
            Value::from(a.clone()),
        ));
    }
    if cli.watch_config {
        layers.push(Layer::key(
            flag("watch-config"),
            "watch_config",
            Value::from(true),
        ));
    }
    if let Some(f) = cli.log_format {
        layers.push(Layer::key(
            flag("log-format"),
            "telemetry.log_format",
            serialized(f),
        ));
    }
    if let Some(e) = &cli.otlp_endpoint {
        layers.push(Layer::key(
            flag("otlp-endpoint"),
            "telemetry.otlp_endpoint",
            Value::from(e.clone()),
        ));
    }
    if let Some(p) = cli.otlp_protocol {
        layers.push(Layer::key(
            flag("otlp-protocol"),
            "telemetry.otlp_protocol",
            serialized(p),
        ));
    }
    for (f, key, v) in [
        ("tls-cert", "tls.cert", &cli.tls_cert),
        ("tls-key", "tls.key", &cli.tls_key),
        ("prices", "prices_file", &cli.prices),
    ] {
        if let Some(p) = v {
            layers.push(Layer::key(
                flag(f),
                key,
                Value::from(p.display().to_string()),
            ));
        }
    }
    if let Some(route) = upstream_route(cli)? {
        layers.push(Layer::key(
            flag("upstream"),
            "routes",
            Value::from(vec![route]),
        ));
    }
    Ok(layers)
}

fn serialized<T: serde::Serialize>(v: T) -> Value {
    Value::serialize(v).unwrap_or_else(|e| Value::from(e.to_string()))
}

/// `--upstream URL [--provider P]` as the single route `default` on `/`.
fn upstream_route(cli: &Overrides) -> Result<Option<Value>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        key: "routes[0].provider".into(),
        origin: "flag --provider".into(),
        message,
    };
    let Some(url) = &cli.upstream else {
        return match cli.provider {
            Some(_) => Err(invalid("--provider needs --upstream URL".into())),
            None => Ok(None),
        };
    };
    let mut route = Dict::new();
    route.insert("name".into(), Value::from("default"));
    route.insert("prefix".into(), Value::from("/"));
    route.insert("upstream".into(), Value::from(url.clone()));
    if let Some(p) = &cli.provider {
        let de = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(p);
        let kind: ProviderKind =
            serde::Deserialize::deserialize(de).map_err(|e| invalid(e.to_string()))?;
        route.insert("provider".into(), serialized(kind));
    }
    Ok(Some(Value::from(route)))
}

/// Refuses `--upstream` when routes also come from the file or env.
pub(super) fn check_upstream_conflict(
    fig: &Figment,
    cli: &Overrides,
    origin: impl Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let configured =
        matches!(fig.find_value("routes"), Ok(Value::Array(_, ref a)) if !a.is_empty());
    if cli.upstream.is_some() && configured {
        return Err(ConfigError::UpstreamAndRoutes {
            routes_origin: origin("routes"),
        });
    }
    Ok(())
}
