//! A benchmark target: `URL,FAMILY,MODEL[,KEY_ENV]` in; the streamed
//! request each prompt becomes, and what the server says it runs
//! (serving software, version, context length) from its info endpoints.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};

use super::prompts::Prompt;
use crate::providers::{Operation, ProviderKind};
use crate::upstream::Client;

/// API family: how requests are shaped and responses parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// OpenAI Chat Completions (`{base}/chat/completions`, base ends in `/v1`).
    Openai,
    /// Anthropic Messages (`{base}/v1/messages`).
    Anthropic,
    /// Ollama's native chat (`{base}/api/chat`, NDJSON).
    Ollama,
}

impl Family {
    /// The name `--target` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Openai => "openai",
            Family::Anthropic => "anthropic",
            Family::Ollama => "ollama",
        }
    }

    fn parse(s: &str) -> Option<Family> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Some(Family::Openai),
            "anthropic" => Some(Family::Anthropic),
            "ollama" => Some(Family::Ollama),
            _ => None,
        }
    }

    /// The provider whose adapter meters the answers.
    pub fn provider(self) -> ProviderKind {
        match self {
            Family::Openai => ProviderKind::Openai,
            Family::Anthropic => ProviderKind::Anthropic,
            Family::Ollama => ProviderKind::Ollama,
        }
    }

    /// The operation the request performs.
    pub fn operation(self) -> Operation {
        match self {
            Family::Openai => Operation::ChatCompletions,
            Family::Anthropic => Operation::Messages,
            Family::Ollama => Operation::OllamaChat,
        }
    }

    /// The key variable used when the target names none.
    fn default_key_env(self) -> Option<&'static str> {
        match self {
            Family::Openai => Some("OPENAI_API_KEY"),
            Family::Anthropic => Some("ANTHROPIC_API_KEY"),
            Family::Ollama => None,
        }
    }

    /// Whether the family's servers accept `ignore_eos` (OpenAI-compatible
    /// servers such as vLLM, llama.cpp, TGI, SGLang).
    pub fn takes_ignore_eos(self) -> bool {
        self == Family::Openai
    }
}

/// One server and model to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Base URL without a trailing `/`.
    pub base: String,
    /// API family.
    pub family: Family,
    /// Model as requested.
    pub model: String,
    /// Environment variable holding the key, when named.
    pub key_env: Option<String>,
    /// The built-in simulator (`--simulate`).
    pub simulated: bool,
}

/// What a request needs besides the prompt.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// `max_tokens` (`num_predict`).
    pub max_tokens: u32,
    /// Send `ignore_eos` where the family takes it.
    pub ignore_eos: bool,
    /// The API key, when there is one.
    pub key: Option<&'a str>,
}

impl Target {
    /// Parse `URL,FAMILY,MODEL[,KEY_ENV]`.
    pub fn parse_arg(s: &str) -> Result<Target, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [url, family, model, rest @ ..] = parts.as_slice() else {
            return Err(format!(
                "`{s}` is not URL,FAMILY,MODEL[,KEY_ENV] (e.g. http://127.0.0.1:8000/v1,openai,my-model)"
            ));
        };
        let family = Family::parse(family).ok_or_else(|| {
            format!("`{family}` is not an API family: openai, anthropic or ollama")
        })?;
        let base = url.trim_end_matches('/');
        let uri: Uri = base
            .parse()
            .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(format!(
                "`{url}` is not an http:// or https:// URL with a host"
            ));
        }
        if model.is_empty() {
            return Err(format!("`{s}`: the MODEL part is empty"));
        }
        let key_env = match rest {
            [] => None,
            [env] if !env.is_empty() => Some((*env).to_owned()),
            _ => return Err(format!("`{s}`: after MODEL only KEY_ENV may follow")),
        };
        Ok(Target {
            base: base.to_owned(),
            family,
            model: (*model).to_owned(),
            key_env,
            simulated: false,
        })
    }

    /// A model of the built-in simulator at `addr`.
    pub fn simulated(addr: SocketAddr, model: &str) -> Target {
        Target {
            base: format!("http://{addr}/v1"),
            family: Family::Openai,
            model: model.to_owned(),
            key_env: None,
            simulated: true,
        }
    }

    /// How reports name the target.
    pub fn name(&self) -> String {
        if self.simulated {
            return format!("{} (simulated)", self.model);
        }
        let host = self
            .base
            .parse::<Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.to_string()))
            .unwrap_or_else(|| self.base.clone());
        format!("{} @ {host}", self.model)
    }

    /// The API key: from KEY_ENV (which must then be set), else the
    /// family's usual variable when set, else none.
    pub fn key(&self) -> anyhow::Result<Option<String>> {
        if let Some(env) = &self.key_env {
            return match std::env::var(env) {
                Ok(k) if !k.trim().is_empty() => Ok(Some(k.trim().to_owned())),
                _ => {
                    anyhow::bail!("the key variable {env} named in --target is not set (or empty)")
                }
            };
        }
        if self.simulated {
            return Ok(None);
        }
        Ok(self
            .family
            .default_key_env()
            .and_then(|env| std::env::var(env).ok())
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty()))
    }

    /// The streamed request for `prompt`.
    pub fn request(&self, prompt: &Prompt, ask: Ask<'_>) -> Result<Request<Bytes>, http::Error> {
        let messages = &prompt.messages;
        let (path, body) = match self.family {
            Family::Openai => {
                let mut body = serde_json::json!({
                    "model": self.model,
                    "messages": messages,
                    "max_tokens": ask.max_tokens,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                });
                if ask.ignore_eos {
                    body["ignore_eos"] = serde_json::Value::Bool(true);
                }
                ("/chat/completions", body)
            }
            Family::Anthropic => (
                "/v1/messages",
                serde_json::json!({
                    "model": self.model,
                    "messages": messages,
                    "max_tokens": ask.max_tokens,
                    "stream": true,
                }),
            ),
            Family::Ollama => (
                "/api/chat",
                serde_json::json!({
                    "model": self.model,
                    "messages": messages,
                    "stream": true,
                    "options": {"num_predict": ask.max_tokens},
                }),
            ),
        };
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/json");
        match (self.family, ask.key) {
            (Family::Anthropic, Some(key)) => {
                req = req.header("x-api-key", key);
            }
            (_, Some(key)) => {
                req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
            }
            (_, None) => {}
        }
        if self.family == Family::Anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        req.body(Bytes::from(body.to_string()))
    }

    /// `scheme://authority` of the base URL.
    fn origin(&self) -> String {
        match self.base.parse::<Uri>() {
            Ok(u) => match (u.scheme_str(), u.authority()) {
                (Some(s), Some(a)) => format!("{s}://{a}"),
                _ => self.base.clone(),
            },
            Err(_) => self.base.clone(),
        }
    }

    /// Ask the server what it runs: vLLM `/version`, llama.cpp `/props`,
    /// TGI `/info`, Ollama `/api/version`, and the OpenAI-style model list
    /// (context length). Each probe is bounded; none is required.
    pub async fn probe(&self, client: &Client, key: Option<&str>) -> Served {
        let mut served = Served::default();
        if self.simulated {
            served.software = Some("tokentap simulate".to_owned());
            served.software_version = Some(env!("CARGO_PKG_VERSION").to_owned());
            return served;
        }
        let origin = self.origin();
        let probes: &[(&str, &str)] = match self.family {
            Family::Openai => &[
                ("/version", "vllm"),
                ("/props", "llama.cpp"),
                ("/info", "tgi"),
                ("/api/version", "ollama"),
            ],
            Family::Ollama => &[("/api/version", "ollama")],
            Family::Anthropic => &[],
        };
        for (path, software) in probes {
            if let Some(v) = get_json(client, &format!("{origin}{path}"), None).await {
                if served.read_info(software, &v) {
                    break;
                }
            }
        }
        if self.family == Family::Openai && served.context_length.is_none() {
            let models = get_json(client, &format!("{}/models", self.base), key).await;
            served.context_length = models.and_then(|v| context_from_models(&v, &self.model));
        }
        served
    }
}

/// What the target says it runs. Every field is optional: servers tell
/// what they tell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Served {
    /// Model (and version) the responses named (the first seen, and any other).
    pub models: Vec<String>,
    /// Serving software, from its info endpoint (`vllm`, `llama.cpp`,
    /// `tgi`, `ollama`).
    pub software: Option<String>,
    /// Its version, when it says.
    pub software_version: Option<String>,
    /// The model's context length, when the server says.
    pub context_length: Option<u64>,
    /// The answers' `Server` header (the serving software, or a CDN or
    /// proxy in front of it: kept apart from `software`).
    #[serde(default)]
    pub server_header: Option<String>,
}

impl Served {
    /// Fold in an info endpoint's answer; `true` when it identified the software.
    fn read_info(&mut self, software: &str, v: &serde_json::Value) -> bool {
        let str_at = |path: &[&str]| {
            let mut at = v;
            for p in path {
                at = at.get(p)?;
            }
            at.as_str().map(str::to_owned)
        };
        let u64_at = |path: &[&str]| {
            let mut at = v;
            for p in path {
                at = at.get(p)?;
            }
            at.as_u64()
        };
        let (version, context) = match software {
            "llama.cpp" => (
                str_at(&["build_info"]),
                u64_at(&["default_generation_settings", "n_ctx"]).or_else(|| u64_at(&["n_ctx"])),
            ),
            "tgi" => (str_at(&["version"]), u64_at(&["max_total_tokens"])),
            _ => (str_at(&["version"]), None),
        };
        // llama.cpp's /props is recognised by its settings, the others by a version.
        let known = match software {
            "llama.cpp" => v.get("default_generation_settings").is_some(),
            "tgi" => v.get("model_id").is_some() && version.is_some(),
            // TGI's /info has a version too, beside its model_id.
            _ => version.is_some() && v.get("model_id").is_none(),
        };
        if known {
            self.software = Some(software.to_owned());
            self.software_version = version;
            self.context_length = self.context_length.or(context);
        }
        known
    }

    /// Note a model name a response carried.
    pub fn saw_model(&mut self, model: &str) {
        if !self.models.iter().any(|m| m == model) {
            self.models.push(model.to_owned());
        }
    }

    /// Note the first `Server` header the answers carried.
    pub fn saw_server_header(&mut self, server: &str) {
        if self.server_header.is_none() && !server.is_empty() {
            self.server_header = Some(server.to_owned());
        }
    }
}

/// The context length an OpenAI-style model list gives `model` (vLLM
/// `max_model_len`, llama.cpp `meta.n_ctx_train`, `context_length`).
fn context_from_models(v: &serde_json::Value, model: &str) -> Option<u64> {
    let entry = v
        .get("data")?
        .as_array()?
        .iter()
        .find(|m| m.get("id").and_then(|i| i.as_str()) == Some(model))?;
    entry
        .get("max_model_len")
        .or_else(|| entry.get("context_length"))
        .or_else(|| entry.get("meta").and_then(|m| m.get("n_ctx_train")))
        .and_then(serde_json::Value::as_u64)
}

/// Longest a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest info answer read.
const PROBE_MAX_BYTES: usize = 1 << 20;

/// `GET url` as JSON, when it answers 200 with JSON within the probe timeout.
async fn get_json(client: &Client, url: &str, key: Option<&str>) -> Option<serde_json::Value> {
    let mut req = Request::builder().method(Method::GET).uri(url);
    if let Some(key) = key {
        req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let req = req.body(Bytes::new()).ok()?;
    let fetch = async {
        let res = client.send_bytes(req).await.ok()?;
        if !res.status().is_success() {
            return None;
        }
        let body = http_body_util::Limited::new(res.into_body(), PROBE_MAX_BYTES);
        body.collect().await.ok().map(|b| b.to_bytes())
    };
    let bytes = tokio::time::timeout(PROBE_TIMEOUT, fetch).await.ok()??;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_a_clear_error_per_part() {
        let t = Target::parse_arg("http://127.0.0.1:8000/v1/,openai,llama-3,MY_KEY").expect("ok");
        assert_eq!(t.base, "http://127.0.0.1:8000/v1", "trailing / dropped");
        assert_eq!((t.family, t.model.as_str()), (Family::Openai, "llama-3"));
        assert_eq!(t.key_env.as_deref(), Some("MY_KEY"));
        for (bad, says) in [
            ("http://x/v1,openai", "URL,FAMILY,MODEL"),
            ("http://x/v1,grpc,m", "`grpc` is not an API family"),
            ("ftp://x,openai,m", "http:// or https://"),
            ("http://x,openai,", "MODEL part is empty"),
            ("http://x,openai,m,K,extra", "only KEY_ENV"),
        ] {
            let err = Target::parse_arg(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn requests_follow_the_family() {
        let prompt = Prompt::text("hi", 1);
        let ask = Ask {
            max_tokens: 7,
            ignore_eos: true,
            key: Some("k"),
        };
        let openai = Target::parse_arg("http://h/v1,openai,m").expect("ok");
        let req = openai.request(&prompt, ask).expect("request");
        assert_eq!(req.uri(), "http://h/v1/chat/completions");
        assert_eq!(req.headers()["authorization"], "Bearer k");
        let body: serde_json::Value = serde_json::from_slice(req.body()).expect("json");
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);

        let anthropic = Target::parse_arg("http://h,anthropic,claude").expect("ok");
        let req = anthropic.request(&prompt, ask).expect("request");
        assert_eq!(req.uri(), "http://h/v1/messages");
        assert_eq!(req.headers()["x-api-key"], "k");
        let body: serde_json::Value = serde_json::from_slice(req.body()).expect("json");
        assert!(
            body.get("ignore_eos").is_none(),
            "Anthropic takes no ignore_eos"
        );

        let ollama = Target::parse_arg("http://h:11434,ollama,llama3").expect("ok");
        let req = ollama.request(&prompt, ask).expect("request");
        assert_eq!(req.uri(), "http://h:11434/api/chat");
        let body: serde_json::Value = serde_json::from_slice(req.body()).expect("json");
        assert_eq!(body["options"]["num_predict"], 7);
    }

    #[test]
    fn info_endpoints_name_the_software_and_context() {
        let mut s = Served::default();
        let vllm = serde_json::json!({"version": "0.6.3"});
        assert!(s.read_info("vllm", &vllm));
        assert_eq!(s.software_version.as_deref(), Some("0.6.3"));
        let mut s = Served::default();
        let tgi =
            serde_json::json!({"model_id": "m", "version": "2.4.0", "max_total_tokens": 8192});
        assert!(
            !s.read_info("vllm", &tgi),
            "a TGI /info is not a vLLM /version"
        );
        assert!(s.read_info("tgi", &tgi));
        assert_eq!(s.context_length, Some(8192));
        let mut s = Served::default();
        let props = serde_json::json!({"default_generation_settings": {"n_ctx": 4096}, "build_info": "b4500"});
        assert!(s.read_info("llama.cpp", &props));
        assert_eq!(
            (s.software.as_deref(), s.context_length),
            (Some("llama.cpp"), Some(4096))
        );
        let models =
            serde_json::json!({"data": [{"id": "a"}, {"id": "m", "max_model_len": 32768}]});
        assert_eq!(context_from_models(&models, "m"), Some(32768));
        assert_eq!(context_from_models(&models, "a"), None);
    }
}
