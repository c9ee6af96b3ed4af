//! Script builders: a token list plus timing in, `Reply`s shaped like real
//! OpenAI and Anthropic responses (streams, JSON bodies, errors, faults) out.

use std::time::Duration;

use serde_json::json;

use super::upstream::{Reply, Step};

/// Model the scripts answer with by default (`gen_ai.response.model`).
pub(crate) const OPENAI_RESPONSE_MODEL: &str = "gpt-4o-mini-2024-07-18";
pub(crate) const ANTHROPIC_RESPONSE_MODEL: &str = "claude-3-5-haiku-20241022";

/// What a scripted stream says and when.
#[derive(Debug, Clone)]
pub(crate) struct StreamSpec {
    pub tokens: Vec<String>,
    /// Delay between the response head (plus any preamble events) and the
    /// first content chunk.
    pub ttft: Duration,
    /// Delay between consecutive content chunks.
    pub gap: Duration,
    /// `(input, output)` usage to report; `None` = the stream carries none.
    pub usage: Option<(u64, u64)>,
    pub model: String,
}

impl StreamSpec {
    /// `n` tokens `tok0 `, `tok1 `, … with the given timing, usage
    /// `(17, n)` and the OpenAI default model.
    pub(crate) fn tokens(n: usize, ttft: Duration, gap: Duration) -> StreamSpec {
        StreamSpec {
            tokens: (0..n).map(|i| format!("tok{i} ")).collect(),
            ttft,
            gap,
            usage: Some((17, n as u64)),
            model: OPENAI_RESPONSE_MODEL.to_owned(),
        }
    }

    /// These exact text pieces, no delays.
    pub(crate) fn text(pieces: &[&str]) -> StreamSpec {
        StreamSpec {
            tokens: pieces.iter().map(|s| (*s).to_owned()).collect(),
            ttft: Duration::ZERO,
            gap: Duration::ZERO,
            usage: Some((11, pieces.len() as u64)),
            model: OPENAI_RESPONSE_MODEL.to_owned(),
        }
    }

    pub(crate) fn without_usage(mut self) -> StreamSpec {
        self.usage = None;
        self
    }

    pub(crate) fn with_usage(mut self, input: u64, output: u64) -> StreamSpec {
        self.usage = Some((input, output));
        self
    }

    pub(crate) fn model(mut self, model: &str) -> StreamSpec {
        self.model = model.to_owned();
        self
    }

    /// The full text the stream carries.
    pub(crate) fn joined(&self) -> String {
        self.tokens.concat()
    }
}

fn sse_data(v: &serde_json::Value) -> String {
    format!("data: {v}\n\n")
}

fn sse_event(name: &str, v: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

fn sse_reply() -> Reply {
    Reply::new(200)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("x-request-id", "req_scripted_0001")
        .header("openai-processing-ms", "42")
}

fn openai_chunk(model: &str, delta: serde_json::Value, finish: Option<&str>) -> serde_json::Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    })
}

/// Steps of an OpenAI chat stream: role chunk at once, the first token after
/// `ttft`, the rest `gap` apart, a finish chunk, a usage chunk when `usage`
/// is set, then `[DONE]`. `cut` stops after that many tokens and returns early.
fn openai_steps(spec: &StreamSpec, cut: Option<usize>) -> Vec<Step> {
    let m = &spec.model;
    let mut steps = vec![Step::Send(
        sse_data(&openai_chunk(
            m,
            json!({"role": "assistant", "content": ""}),
            None,
        ))
        .into(),
    )];
    for (i, t) in spec.tokens.iter().enumerate() {
        if cut == Some(i) {
            return steps;
        }
        steps.push(Step::Sleep(if i == 0 { spec.ttft } else { spec.gap }));
        steps.push(Step::Send(
            sse_data(&openai_chunk(m, json!({"content": t}), None)).into(),
        ));
    }
    if cut.is_some() {
        return steps;
    }
    steps.push(Step::Send(
        sse_data(&openai_chunk(m, json!({}), Some("stop"))).into(),
    ));
    if let Some((i, o)) = spec.usage {
        let u = json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": m, "system_fingerprint": "fp_scripted",
            "choices": [],
            "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}
        });
        steps.push(Step::Send(sse_data(&u).into()));
    }
    steps.push(Step::Send("data: [DONE]\n\n".into()));
    steps
}

/// A complete OpenAI chat-completions stream.
pub(crate) fn openai_chat_sse(spec: &StreamSpec) -> Reply {
    let mut r = sse_reply();
    r.steps = openai_steps(spec, None);
    r
}

/// An OpenAI stream that sends `after` tokens, then breaks the connection.
pub(crate) fn openai_abort_after(spec: &StreamSpec, after: usize) -> Reply {
    let mut r = sse_reply();
    r.steps = openai_steps(spec, Some(after));
    r.steps.push(Step::Sleep(Duration::from_millis(20)));
    r.steps.push(Step::Abort);
    r
}

/// An OpenAI stream that sends `after` tokens, then goes silent for ever.
pub(crate) fn openai_hang_after(spec: &StreamSpec, after: usize) -> Reply {
    let mut r = sse_reply();
    r.steps = openai_steps(spec, Some(after));
    r.steps.push(Step::Hang);
    r
}

/// An OpenAI stream that sends `after` tokens, then an error object in the
/// stream (as OpenAI does under HTTP 200), then ends.
pub(crate) fn openai_midstream_error(spec: &StreamSpec, after: usize) -> Reply {
    let mut r = sse_reply();
    r.steps = openai_steps(spec, Some(after));
    let err = json!({"error": {"message": "The server had an error while processing your request.",
        "type": "server_error", "param": null, "code": null}});
    r.steps.push(Step::Send(sse_data(&err).into()));
    r
}

/// An OpenAI stream whose chunk after `after` tokens is not valid JSON; the
/// stream then finishes normally (a finish chunk, then `[DONE]`).
pub(crate) fn openai_malformed_after(spec: &StreamSpec, after: usize) -> Reply {
    let mut r = sse_reply();
    r.steps = openai_steps(spec, Some(after));
    r.steps.push(Step::Send(
        "data: {\"id\":\"chatcmpl-scripted\",\"choices\":[{\"delta\":{\"content\":\"x\"\n\n".into(),
    ));
    r.steps.push(Step::Send(
        sse_data(&openai_chunk(&spec.model, json!({}), Some("stop"))).into(),
    ));
    r.steps.push(Step::Send("data: [DONE]\n\n".into()));
    r
}

/// Steps of an Anthropic messages stream: `message_start`,
/// `content_block_start` and `ping` at once, the first text delta after
/// `ttft`, the rest `gap` apart, then `content_block_stop`, `message_delta`
/// (with usage when set) and `message_stop`.
fn anthropic_steps(spec: &StreamSpec, cut: Option<usize>) -> Vec<Step> {
    let (input, output) = spec.usage.unwrap_or((0, 0));
    let start_usage = if spec.usage.is_some() {
        json!({"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1})
    } else {
        json!({})
    };
    let start = json!({"type": "message_start", "message": {
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": spec.model,
        "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}});
    let mut pre = sse_event("message_start", &start);
    pre += &sse_event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    pre += &sse_event("ping", &json!({"type": "ping"}));
    let mut steps = vec![Step::Send(pre.into())];
    for (i, t) in spec.tokens.iter().enumerate() {
        if cut == Some(i) {
            return steps;
        }
        steps.push(Step::Sleep(if i == 0 { spec.ttft } else { spec.gap }));
        let d = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}});
        steps.push(Step::Send(sse_event("content_block_delta", &d).into()));
    }
    if cut.is_some() {
        return steps;
    }
    let mut end = sse_event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    );
    let mut delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}});
    if spec.usage.is_some() {
        delta["usage"] = json!({"output_tokens": output});
    }
    end += &sse_event("message_delta", &delta);
    end += &sse_event("message_stop", &json!({"type": "message_stop"}));
    steps.push(Step::Send(end.into()));
    steps
}

fn anthropic_reply() -> Reply {
    Reply::new(200)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("request-id", "req_scripted_anthropic")
        .header("anthropic-organization-id", "org-scripted")
}

/// A complete Anthropic messages stream.
pub(crate) fn anthropic_sse(spec: &StreamSpec) -> Reply {
    let mut r = anthropic_reply();
    r.steps = anthropic_steps(spec, None);
    r
}

/// An Anthropic stream that sends `after` deltas, then an `error` event.
pub(crate) fn anthropic_midstream_error(spec: &StreamSpec, after: usize) -> Reply {
    let mut r = anthropic_reply();
    r.steps = anthropic_steps(spec, Some(after));
    let e =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    r.steps.push(Step::Send(sse_event("error", &e).into()));
    r
}

/// A JSON reply with an explicit `content-length`, as providers send.
pub(crate) fn json_reply(status: u16, body: serde_json::Value) -> Reply {
    let body = body.to_string();
    Reply::new(status)
        .header("content-type", "application/json")
        .header("content-length", &body.len().to_string())
        .send(body)
}

/// A non-streaming OpenAI chat completion.
pub(crate) fn openai_chat_json(model: &str, text: &str, usage: (u64, u64)) -> Reply {
    let body = json!({
        "id": "chatcmpl-scripted-json", "object": "chat.completion", "created": 1_700_000_000,
        "model": model, "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    });
    json_reply(200, body).header("x-request-id", "req_scripted_json")
}

/// A non-streaming Anthropic message.
pub(crate) fn anthropic_json(model: &str, text: &str, usage: (u64, u64)) -> Reply {
    let body = json!({
        "id": "msg_scripted_json", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": usage.0, "output_tokens": usage.1}
    });
    json_reply(200, body).header("request-id", "req_scripted_anthropic_json")
}

/// An OpenAI-shaped error response (e.g. 429 rate limit, 500 server error).
pub(crate) fn openai_error(status: u16, kind: &str, code: &str, message: &str) -> Reply {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    let mut r = json_reply(status, body).header("x-request-id", "req_scripted_error");
    if status == 429 {
        r = r
            .header("retry-after", "1")
            .header("x-ratelimit-remaining-requests", "0");
    }
    r
}

/// An Anthropic-shaped error response.
pub(crate) fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    json_reply(status, body)
}

/// A chat-completions request body.
pub(crate) fn openai_request(model: &str, stream: bool, user: Option<&str>) -> Vec<u8> {
    let mut v = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say something scripted."}],
    });
    if stream {
        v["stream"] = json!(true);
        v["stream_options"] = json!({"include_usage": true});
    }
    if let Some(u) = user {
        v["user"] = json!(u);
    }
    serde_json::to_vec(&v).unwrap()
}

/// An Anthropic messages request body.
pub(crate) fn anthropic_request(model: &str, stream: bool, user: Option<&str>) -> Vec<u8> {
    let mut v = json!({
        "model": model,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Say something scripted."}],
    });
    if stream {
        v["stream"] = json!(true);
    }
    if let Some(u) = user {
        v["metadata"] = json!({"user_id": u});
    }
    serde_json::to_vec(&v).unwrap()
}

/// Gzip `data` (for compressed-passthrough tests).
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// An OpenAI Responses API stream: `response.created` at once, text deltas
/// (first after `ttft`), then `response.completed` with usage — or
/// `response.failed` when `fail` is set.
pub(crate) fn openai_responses_sse(spec: &StreamSpec, fail: bool) -> Reply {
    let m = &spec.model;
    let created = json!({"type": "response.created", "sequence_number": 0, "response": {
        "id": "resp_scripted", "object": "response", "status": "in_progress", "model": m,
        "output": [], "usage": null}});
    let mut r = sse_reply().send(sse_event("response.created", &created));
    for (i, t) in spec.tokens.iter().enumerate() {
        r = r.sleep(if i == 0 { spec.ttft } else { spec.gap });
        let d = json!({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_scripted",
            "output_index": 0, "content_index": 0, "delta": t});
        r = r.send(sse_event("response.output_text.delta", &d));
    }
    let (i, o) = spec.usage.unwrap_or((0, 0));
    let end = if fail {
        let f = json!({"type": "response.failed", "response": {"id": "resp_scripted", "status": "failed",
            "model": m, "error": {"code": "server_error", "message": "The model failed"}, "usage": null}});
        sse_event("response.failed", &f)
    } else {
        let c = json!({"type": "response.completed", "response": {"id": "resp_scripted", "status": "completed",
            "model": m, "usage": {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}}});
        sse_event("response.completed", &c)
    };
    r.send(end)
}

/// An OpenAI legacy completions stream with a finish chunk, a usage chunk
/// and `[DONE]`.
pub(crate) fn openai_completions_sse(spec: &StreamSpec) -> Reply {
    let m = &spec.model;
    let mut r = sse_reply();
    for (i, t) in spec.tokens.iter().enumerate() {
        r = r.sleep(if i == 0 { spec.ttft } else { spec.gap });
        let c = json!({"id": "cmpl-scripted", "object": "text_completion", "created": 1_700_000_000,
            "model": m, "choices": [{"text": t, "index": 0, "logprobs": null, "finish_reason": null}]});
        r = r.send(sse_data(&c));
    }
    let finish = json!({"id": "cmpl-scripted", "object": "text_completion", "created": 1_700_000_000,
        "model": m, "choices": [{"text": "", "index": 0, "logprobs": null, "finish_reason": "length"}]});
    r = r.send(sse_data(&finish));
    if let Some((i, o)) = spec.usage {
        let u = json!({"id": "cmpl-scripted", "object": "text_completion", "created": 1_700_000_000,
            "model": m, "choices": [],
            "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}});
        r = r.send(sse_data(&u));
    }
    r.send("data: [DONE]\n\n")
}

/// An OpenAI embeddings response.
pub(crate) fn openai_embeddings_json(model: &str, input_tokens: u64) -> Reply {
    json_reply(
        200,
        json!({"object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.0023, -0.0093, 0.0158]}],
            "usage": {"prompt_tokens": input_tokens, "total_tokens": input_tokens}}),
    )
}
