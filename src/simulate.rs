//! The simulated provider: OpenAI- and Anthropic-shaped requests in,
//! realistic streamed answers out (scripted TTFT, token rate, token count,
//! occasional errors and slowdowns). For demos, users' own tests and
//! benchmarks; never part of the proxy's request path.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::time::Sleep;

/// How one simulated model behaves.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Profile {
    /// Median time to first token, in milliseconds (≥ 0)
    #[arg(long = "ttft-ms", default_value_t = 300.0, value_parser = non_negative_arg)]
    pub ttft_ms: f64,
    /// Spread of TTFT and of the token rate, as a share of the median (0..1; 0 = exact)
    #[arg(long, default_value_t = 0.2, value_parser = share_arg)]
    pub jitter: f64,
    /// Decode rate in tokens per second (≥ 0; 0 = as fast as possible)
    #[arg(long = "tokens-per-second", default_value_t = 50.0, value_parser = non_negative_arg)]
    pub tokens_per_second: f64,
    /// Output tokens per answer (when the request sets no max_tokens below it)
    #[arg(long, default_value_t = 100)]
    pub tokens: u32,
    /// Share of requests answered with a 500 error (0..1)
    #[arg(long = "error-rate", default_value_t = 0.0, value_parser = share_arg)]
    pub error_rate: f64,
    /// Share of requests that run 5× slower (0..1)
    #[arg(long = "slow-rate", default_value_t = 0.0, value_parser = share_arg)]
    pub slow_rate: f64,
}

/// A flag that is a share: a number from 0 to 1 (`--error-rate 0.05`).
pub fn share_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is outside 0..1: a share, e.g. 0.05 for 5 %")),
        Err(_) => Err(format!("`{s}` is not a number from 0 to 1")),
    }
}

/// A flag that is a finite number ≥ 0 (a time, a rate).
pub fn non_negative_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("{v} is not a finite number ≥ 0")),
        Err(_) => Err(format!("`{s}` is not a number ≥ 0")),
    }
}

/// A flag that is a count ≥ 1 (`--concurrency`, `--duration` in seconds).
pub fn at_least_one_arg<T: std::str::FromStr + PartialOrd + From<u8>>(
    s: &str,
) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(v) if v >= T::from(1) => Ok(v),
        Ok(_) => Err(format!("{s} is below 1: give a whole number ≥ 1")),
        Err(_) => Err(format!("`{s}` is not a whole number ≥ 1")),
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            ttft_ms: 300.0,
            jitter: 0.2,
            tokens_per_second: 50.0,
            tokens: 100,
            error_rate: 0.0,
            slow_rate: 0.0,
        }
    }
}

/// `tokentap simulate` flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct SimulateArgs {
    /// Listen address
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub listen: SocketAddr,
    /// Timing and content of the simulated responses.
    #[command(flatten)]
    pub profile: Profile,
}

/// Named profiles used by `tokentap demo`; any other model gets the default.
pub fn demo_models() -> Vec<(&'static str, Profile)> {
    let p = |ttft_ms, tokens_per_second, tokens, error_rate, slow_rate| Profile {
        ttft_ms,
        jitter: 0.25,
        tokens_per_second,
        tokens,
        error_rate,
        slow_rate,
    };
    vec![
        ("sim-gpt-fast", p(180.0, 110.0, 60, 0.01, 0.02)),
        ("sim-gpt-large", p(650.0, 38.0, 120, 0.02, 0.05)),
        ("sim-claude", p(420.0, 65.0, 90, 0.02, 0.03)),
    ]
}

/// The simulator's shared state.
#[derive(Debug)]
pub struct Simulator {
    default: Profile,
    models: Vec<(String, Profile)>,
}

impl Simulator {
    /// A simulator answering every model with `default`, except the named ones.
    pub fn new(default: Profile, models: Vec<(String, Profile)>) -> Arc<Simulator> {
        Arc::new(Simulator { default, models })
    }

    fn profile(&self, model: &str) -> &Profile {
        self.models
            .iter()
            .find(|(m, _)| m == model)
            .map_or(&self.default, |(_, p)| p)
    }
}

/// Serve the simulator on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, sim: Arc<Simulator>) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let sim = sim.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let sim = sim.clone();
                async move { Ok::<_, Infallible>(answer(&sim, req).await) }
            });
            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// Run `tokentap simulate` until Ctrl-C.
pub async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("simulate --listen {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    eprintln!(
        "tokentap simulate listening on http://{addr} (OpenAI: /v1/chat/completions, /v1/completions, /v1/embeddings; Anthropic: /v1/messages)"
    );
    let sim = Simulator::new(
        args.profile,
        demo_models()
            .into_iter()
            .map(|(m, p)| (m.to_owned(), p))
            .collect(),
    );
    tokio::select! {
        _ = serve(listener, sim) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Completions,
    Messages,
    Embeddings,
}

#[derive(serde::Deserialize, Default)]
struct Ask {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
}

#[derive(serde::Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

async fn answer(sim: &Simulator, req: Request<Incoming>) -> Response<SimBody> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let api = match (req.method(), path.as_str()) {
        (&Method::GET, p) if p.ends_with("/models") => return models(sim),
        (&Method::POST, p) if p.ends_with("/chat/completions") => Api::Chat,
        (&Method::POST, p) if p.ends_with("/completions") => Api::Completions,
        (&Method::POST, p) if p.ends_with("/messages") => Api::Messages,
        (&Method::POST, p) if p.ends_with("/embeddings") => Api::Embeddings,
        _ => {
            return json(
                StatusCode::NOT_FOUND,
                error_json(api_for_errors(&path), "not_found", "unknown endpoint"),
            );
        }
    };
    // Echo the caller's request id as the response id, so repeated runs
    // produce identical bytes.
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return json(
                StatusCode::BAD_REQUEST,
                error_json(api, "invalid_request_error", "unreadable body"),
            );
        }
    };
    let Ok(ask) = serde_json::from_slice::<Ask>(&body) else {
        return json(
            StatusCode::BAD_REQUEST,
            error_json(
                api,
                "invalid_request_error",
                "body is not the JSON this endpoint expects",
            ),
        );
    };
    let model = ask
        .model
        .clone()
        .unwrap_or_else(|| "sim-default".to_owned());
    let profile = sim.profile(&model).clone();
    if fastrand::f64() < profile.error_rate {
        return json(
            StatusCode::INTERNAL_SERVER_ERROR,
            error_json(api, "server_error", "simulated failure"),
        );
    }
    if api == Api::Embeddings {
        let prompt = (body.len() / 4).max(1);
        return json(
            StatusCode::OK,
            format!(
                r#"{{"object":"list","data":[{{"object":"embedding","index":0,"embedding":[0.0023,-0.0091,0.0154]}}],"model":"{model}","usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt}}}}}"#
            ),
        );
    }
    let limit = ask
        .max_completion_tokens
        .or(ask.max_tokens)
        .unwrap_or(u32::MAX);
    let mut script = Script::new(
        api,
        model,
        &profile,
        limit,
        body.len(),
        ask.stream_options.is_some_and(|o| o.include_usage),
        request_id,
    );
    if let Some(tool) = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| Tool::pick(api, &v))
    {
        script.tokens = u32::try_from(tool.pieces.len()).unwrap_or(u32::MAX);
        script.tool = Some(tool);
    }
    if ask.stream {
        let mut res = Response::new(SimBody::stream(script));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        res.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        res
    } else {
        let mut res = Response::new(SimBody::delayed(script));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        res
    }
}

fn api_for_errors(path: &str) -> Api {
    if path.ends_with("/messages") {
        Api::Messages
    } else {
        Api::Chat
    }
}

fn models(sim: &Simulator) -> Response<SimBody> {
    let mut out = String::from(r#"{"object":"list","data":["#);
    for (i, (m, _)) in sim.models.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            r#"{{"id":"{m}","object":"model","created":1700000000,"owned_by":"tokentap"}}"#
        );
    }
    out.push_str("]}");
    json(StatusCode::OK, out)
}

fn error_json(api: Api, kind: &str, message: &str) -> String {
    match api {
        Api::Messages => {
            format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)
        }
        _ => format!(
            r#"{{"error":{{"message":"{message}","type":"{kind}","param":null,"code":null}}}}"#
        ),
    }
}

fn json(status: StatusCode, body: String) -> Response<SimBody> {
    let mut res = Response::new(SimBody::full(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

const WORDS: [&str; 16] = [
    " the",
    " quick",
    " model",
    " streams",
    " tokens",
    " through",
    " a",
    " proxy",
    " that",
    " measures",
    " every",
    " chunk",
    " and",
    " reports",
    " latency",
    ".",
];

/// One answer, fully decided up front.
#[derive(Debug)]
struct Script {
    api: Api,
    model: String,
    id: String,
    tokens: u32,
    prompt_tokens: u32,
    ttft: Duration,
    gap: Duration,
    include_usage: bool,
    /// Answer with this tool call instead of text.
    tool: Option<Tool>,
}

/// A tool call the simulator makes when the request offers tools.
#[derive(Debug)]
struct Tool {
    name: String,
    /// The arguments object as JSON text.
    args: String,
    /// `args` in pieces of about four characters, each JSON-string-escaped.
    pieces: Vec<String>,
}

impl Tool {
    /// The tool to call: the one `tool_choice` names, else the first offered;
    /// none when tools are absent, `tool_choice` is `"none"`, or the last
    /// message already carries a tool result.
    fn pick(api: Api, req: &serde_json::Value) -> Option<Tool> {
        let tools = req.get("tools")?.as_array().filter(|t| !t.is_empty())?;
        let choice = req.get("tool_choice");
        if choice.and_then(|c| c.as_str().or_else(|| c.get("type")?.as_str())) == Some("none") {
            return None;
        }
        let last = req
            .get("messages")
            .and_then(|m| m.as_array())
            .and_then(|m| m.last());
        let answered = last.is_some_and(|m| {
            m.get("role").and_then(|r| r.as_str()) == Some("tool")
                || m.get("content")
                    .and_then(|c| c.as_array())
                    .is_some_and(|blocks| {
                        blocks
                            .iter()
                            .any(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool_result"))
                    })
        });
        if answered {
            return None;
        }
        // OpenAI: {"type":"function","function":{"name","parameters"}}; Anthropic: {"name","input_schema"}.
        let name_of = |t: &serde_json::Value| {
            t.get("function")
                .unwrap_or(t)
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned)
        };
        let wanted = choice
            .and_then(|c| c.get("function").unwrap_or(c).get("name"))
            .and_then(|n| n.as_str());
        let tool = tools
            .iter()
            .find(|t| wanted.is_none_or(|w| name_of(t).as_deref() == Some(w)))
            .or_else(|| tools.first())?;
        let name = name_of(tool)?;
        let schema = if api == Api::Messages {
            tool.get("input_schema")
        } else {
            tool.get("function").and_then(|f| f.get("parameters"))
        };
        let args = Tool::arguments(schema);
        let chars: Vec<char> = args.chars().collect();
        let pieces = chars
            .chunks(4)
            .map(|c| {
                let s: String = c.iter().collect();
                let quoted = serde_json::Value::String(s).to_string();
                quoted[1..quoted.len() - 1].to_owned()
            })
            .collect();
        Some(Tool { name, args, pieces })
    }

    /// An object with every required property: strings "sim", numbers 1, booleans true.
    fn arguments(schema: Option<&serde_json::Value>) -> String {
        let mut args = serde_json::Map::new();
        let props = schema.and_then(|s| s.get("properties"));
        let required = schema
            .and_then(|s| s.get("required"))
            .and_then(|r| r.as_array());
        for key in required.into_iter().flatten().filter_map(|k| k.as_str()) {
            let kind = props
                .and_then(|p| p.get(key))
                .and_then(|p| p.get("type"))
                .and_then(|t| t.as_str());
            let value = match kind {
                Some("number" | "integer") => serde_json::json!(1),
                Some("boolean") => serde_json::json!(true),
                Some("array") => serde_json::json!([]),
                Some("object") => serde_json::json!({}),
                _ => serde_json::json!("sim"),
            };
            args.insert(key.to_owned(), value);
        }
        serde_json::Value::Object(args).to_string()
    }

    fn escaped_args(&self) -> String {
        let quoted = serde_json::Value::String(self.args.clone()).to_string();
        quoted[1..quoted.len() - 1].to_owned()
    }
}

impl Script {
    fn new(
        api: Api,
        model: String,
        p: &Profile,
        limit: u32,
        request_bytes: usize,
        include_usage: bool,
        request_id: Option<String>,
    ) -> Script {
        let slow = if fastrand::f64() < p.slow_rate {
            5.0
        } else {
            1.0
        };
        let jitter = |median: f64| {
            let spread = (fastrand::f64() * 2.0 - 1.0) * p.jitter;
            (median * (1.0 + spread)).max(0.0)
        };
        let ttft = Duration::from_secs_f64(jitter(p.ttft_ms) * slow / 1000.0);
        let gap = if p.tokens_per_second > 0.0 {
            Duration::from_secs_f64(slow / jitter(p.tokens_per_second).max(0.1))
        } else {
            Duration::ZERO
        };
        Script {
            api,
            model,
            id: request_id.unwrap_or_else(|| format!("sim-{:016x}", fastrand::u64(..))),
            tokens: p.tokens.min(limit).max(1),
            prompt_tokens: u32::try_from(request_bytes / 4).unwrap_or(u32::MAX).max(1),
            ttft,
            gap,
            include_usage,
            tool: None,
        }
    }

    fn word(i: u32) -> &'static str {
        WORDS[i as usize % WORDS.len()]
    }

    /// The SSE event carrying token `i`.
    fn token_event(&self, i: u32, out: &mut String) {
        let w = Self::word(i);
        let u = self.null_usage();
        let (id, model) = (&self.id, &self.model);
        if let Some(tool) = &self.tool {
            let piece = tool.pieces.get(i as usize).map_or("", String::as_str);
            let _ = if self.api == Api::Messages {
                write!(
                    out,
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{piece}\"}}}}\n\n"
                )
            } else {
                write!(
                    out,
                    "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{piece}\"}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]{u}}}\n\n"
                )
            };
            return;
        }
        let _ = match self.api {
            Api::Chat => write!(
                out,
                "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{w}\"}},\"logprobs\":null,\"finish_reason\":null}}]{u}}}\n\n"
            ),
            Api::Completions => write!(
                out,
                "data: {{\"id\":\"{id}\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"text\":\"{w}\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}}]{u}}}\n\n"
            ),
            Api::Messages => write!(
                out,
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{w}\"}}}}\n\n"
            ),
            Api::Embeddings => Ok(()),
        };
    }

    /// With `include_usage`, OpenAI adds `"usage":null` to every chunk.
    fn null_usage(&self) -> &'static str {
        if self.include_usage {
            ",\"usage\":null"
        } else {
            ""
        }
    }

    fn stream_head(&self, out: &mut String) {
        let u = self.null_usage();
        let (id, model, p) = (&self.id, &self.model, self.prompt_tokens);
        let _ = match (self.api, &self.tool) {
            (Api::Chat, Some(tool)) => write!(
                out,
                "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\"index\":0,\"id\":\"call_{id}\",\"type\":\"function\",\"function\":{{\"name\":\"{}\",\"arguments\":\"\"}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]{u}}}\n\n",
                tool.name
            ),
            (Api::Messages, Some(tool)) => write!(
                out,
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"{model}\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":{p},\"output_tokens\":1}}}}}}\n\nevent: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_{id}\",\"name\":\"{}\",\"input\":{{}}}}}}\n\n",
                tool.name
            ),
            (Api::Chat, None) => write!(
                out,
                "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]{u}}}\n\n"
            ),
            (Api::Messages, None) => write!(
                out,
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"{model}\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":{p},\"output_tokens\":1}}}}}}\n\nevent: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n"
            ),
            _ => Ok(()),
        };
    }

    fn stream_tail(&self, out: &mut String) {
        let u = self.null_usage();
        let stop = if self.tool.is_some() {
            "tool_use"
        } else {
            "max_tokens"
        };
        let (id, model, p, n) = (&self.id, &self.model, self.prompt_tokens, self.tokens);
        let _ = match self.api {
            Api::Chat | Api::Completions => {
                let object = if self.api == Api::Chat {
                    "chat.completion.chunk"
                } else {
                    "text_completion"
                };
                let reason = if self.tool.is_some() {
                    "tool_calls"
                } else {
                    "length"
                };
                let finish = if self.api == Api::Chat {
                    format!(
                        "{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}"
                    )
                } else {
                    "{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}"
                        .to_owned()
                };
                let _ = write!(
                    out,
                    "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{finish}]{u}}}\n\n"
                );
                if self.include_usage {
                    let _ = write!(
                        out,
                        "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n",
                        p + n
                    );
                }
                write!(out, "data: [DONE]\n\n")
            }
            Api::Messages => write!(
                out,
                "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\nevent: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{n}}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
            ),
            Api::Embeddings => Ok(()),
        };
    }

    fn whole(&self) -> String {
        let text: String = (0..self.tokens).map(Self::word).collect();
        let (id, model, p, n) = (&self.id, &self.model, self.prompt_tokens, self.tokens);
        if let Some(tool) = &self.tool {
            let (name, args) = (&tool.name, tool.escaped_args());
            return if self.api == Api::Messages {
                format!(
                    r#"{{"id":"{id}","type":"message","role":"assistant","model":"{model}","content":[{{"type":"tool_use","id":"toolu_{id}","name":"{name}","input":{}}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{{"input_tokens":{p},"output_tokens":{n}}}}}"#,
                    tool.args
                )
            } else {
                format!(
                    r#"{{"id":"{id}","object":"chat.completion","created":1700000000,"model":"{model}","choices":[{{"index":0,"message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{id}","type":"function","function":{{"name":"{name}","arguments":"{args}"}}}}],"refusal":null}},"logprobs":null,"finish_reason":"tool_calls"}}],"usage":{{"prompt_tokens":{p},"completion_tokens":{n},"total_tokens":{}}}}}"#,
                    p + n
                )
            };
        }
        match self.api {
            Api::Messages => format!(
                r#"{{"id":"{id}","type":"message","role":"assistant","model":"{model}","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{{"input_tokens":{p},"output_tokens":{n}}}}}"#
            ),
            Api::Completions => format!(
                r#"{{"id":"{id}","object":"text_completion","created":1700000000,"model":"{model}","choices":[{{"text":"{text}","index":0,"logprobs":null,"finish_reason":"length"}}],"usage":{{"prompt_tokens":{p},"completion_tokens":{n},"total_tokens":{}}}}}"#,
                p + n
            ),
            _ => format!(
                r#"{{"id":"{id}","object":"chat.completion","created":1700000000,"model":"{model}","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}","refusal":null}},"logprobs":null,"finish_reason":"length"}}],"usage":{{"prompt_tokens":{p},"completion_tokens":{n},"total_tokens":{}}}}}"#,
                p + n
            ),
        }
    }
}

/// The simulator's response body: a whole body, or a timed stream.
#[derive(Debug)]
pub struct SimBody {
    state: State,
    sleep: Option<Pin<Box<Sleep>>>,
}

#[derive(Debug)]
enum State {
    Full(Option<Bytes>),
    /// A non-streaming answer, sent after TTFT + all tokens' time.
    Delayed(Script),
    /// Next token to send; `tokens` = send the tail.
    Stream {
        script: Script,
        next: u32,
    },
    Done,
}

impl SimBody {
    fn full(b: Bytes) -> SimBody {
        SimBody {
            state: State::Full(Some(b)),
            sleep: None,
        }
    }

    fn delayed(script: Script) -> SimBody {
        let wait = script.ttft + script.gap * script.tokens.saturating_sub(1);
        SimBody {
            sleep: Some(Box::pin(tokio::time::sleep(wait))),
            state: State::Delayed(script),
        }
    }

    fn stream(script: Script) -> SimBody {
        let sleep = Some(Box::pin(tokio::time::sleep(script.ttft)));
        SimBody {
            state: State::Stream { script, next: 0 },
            sleep,
        }
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(sleep) = this.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let out = match &mut this.state {
            State::Full(b) => b.take(),
            State::Delayed(script) => Some(Bytes::from(script.whole())),
            State::Done => None,
            State::Stream { script, next } => {
                let mut out = String::with_capacity(256);
                if *next == 0 {
                    script.stream_head(&mut out);
                }
                if *next < script.tokens {
                    script.token_event(*next, &mut out);
                    *next += 1;
                    if script.gap > Duration::ZERO {
                        // From the previous token's due time, not from now:
                        // timer lateness does not add up, so the rate is the
                        // one asked for (`tokentap bench` is checked against it).
                        if let Some(s) = this.sleep.as_mut() {
                            let at = s.deadline() + script.gap;
                            s.as_mut().reset(at);
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                script.stream_tail(&mut out);
                Some(Bytes::from(out))
            }
        };
        if !matches!(this.state, State::Full(_)) {
            this.state = State::Done;
        }
        this.sleep = None;
        Poll::Ready(out.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done | State::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            State::Full(None) | State::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(api: Api, tokens: u32, include_usage: bool) -> Script {
        let p = Profile {
            ttft_ms: 0.0,
            jitter: 0.0,
            tokens_per_second: 0.0,
            tokens,
            error_rate: 0.0,
            slow_rate: 0.0,
        };
        Script::new(api, "m".into(), &p, u32::MAX, 40, include_usage, None)
    }

    async fn drain(body: SimBody) -> String {
        let bytes = body.collect().await.expect("infallible").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn chat_stream_has_tokens_usage_and_done() {
        let text = drain(SimBody::stream(script(Api::Chat, 3, true))).await;
        assert_eq!(text.matches("\"content\":\" ").count(), 3, "{text}");
        assert!(text.contains("\"completion_tokens\":3"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"));
        for event in text
            .split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
        {
            let json = event.strip_prefix("data: ").expect("data line");
            serde_json::from_str::<serde_json::Value>(json).expect("every chunk is JSON");
        }
    }

    #[tokio::test]
    async fn every_simulated_stream_ends_with_its_terminal_event() {
        use crate::providers::{Operation, ProviderKind, tests::run};
        for (api, kind, op) in [
            (Api::Chat, ProviderKind::Openai, Operation::ChatCompletions),
            (
                Api::Completions,
                ProviderKind::Openai,
                Operation::Completions,
            ),
            (Api::Messages, ProviderKind::Anthropic, Operation::Messages),
        ] {
            for usage in [false, true] {
                let text = drain(SimBody::stream(script(api, 3, usage))).await;
                let (s, _, r) = run(kind, Some(op), "text/event-stream", &[text.as_bytes()]);
                assert_eq!(r, Ok(()), "{op:?}: {text}");
                assert_eq!(
                    (s.done, s.malformed),
                    (1, 0),
                    "{op:?} ends properly: {text}"
                );
            }
        }
    }

    #[tokio::test]
    async fn anthropic_stream_and_whole_bodies_are_valid_json() {
        let text = drain(SimBody::stream(script(Api::Messages, 2, false))).await;
        assert!(text.starts_with("event: message_start\n"));
        assert!(text.contains("\"output_tokens\":2"));
        for api in [Api::Chat, Api::Completions, Api::Messages] {
            let whole = drain(SimBody::delayed(script(api, 4, false))).await;
            let v: serde_json::Value = serde_json::from_str(&whole).expect("JSON body");
            let n = if api == Api::Messages {
                &v["usage"]["output_tokens"]
            } else {
                &v["usage"]["completion_tokens"]
            };
            assert_eq!(n, 4, "{whole}");
        }
    }

    #[tokio::test]
    async fn tool_calls_stream_their_arguments_in_pieces() {
        let openai_req = serde_json::json!({
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"]}}}],
            "messages": [{"role": "user", "content": "weather?"}]
        });
        let mut s = script(Api::Chat, 100, false);
        s.tool = Tool::pick(Api::Chat, &openai_req);
        let tool = s.tool.as_ref().expect("a tool call");
        s.tokens = tool.pieces.len() as u32;
        let text = drain(SimBody::stream(s)).await;
        let mut args = String::new();
        for event in text
            .split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
        {
            let v: serde_json::Value =
                serde_json::from_str(event.strip_prefix("data: ").expect("data"))
                    .expect("JSON chunk");
            if let Some(a) =
                v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            {
                args.push_str(a);
            }
        }
        assert_eq!(args, r#"{"city":"sim","days":1}"#);
        assert!(text.contains(r#""finish_reason":"tool_calls""#));

        // A tool result as the last message: answer in text.
        let answered = serde_json::json!({"tools": openai_req["tools"], "messages": [{"role": "tool", "content": "sunny"}]});
        assert!(Tool::pick(Api::Chat, &answered).is_none());
        let declined = serde_json::json!({"tools": openai_req["tools"], "tool_choice": "none"});
        assert!(Tool::pick(Api::Chat, &declined).is_none());

        let anthropic_req = serde_json::json!({
            "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}],
            "messages": [{"role": "user", "content": "find"}]
        });
        let mut s = script(Api::Messages, 100, false);
        s.tool = Tool::pick(Api::Messages, &anthropic_req);
        let whole = drain(SimBody::delayed(s)).await;
        let v: serde_json::Value = serde_json::from_str(&whole).expect("JSON body");
        assert_eq!(v["content"][0]["type"], "tool_use");
        assert_eq!(v["content"][0]["input"]["q"], "sim");
        assert_eq!(v["stop_reason"], "tool_use");
    }
}
