//! The OpenAI dialects of a WebSocket session (Realtime, and the
//! Responses API's WebSocket mode): one complete JSON event in, realtime
//! events out. Shapes and the scan are described in `realtime`'s header.

use super::*;
/// The fields of an OpenAI Realtime or Responses WebSocket event that
/// metering reads, client or server side.
#[derive(Deserialize)]
pub(super) struct OpenAiEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    /// Every `*.delta` event; borrowed raw, never copied or unescaped.
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    /// `response.create` parameters (client) or the response resource.
    #[serde(borrow)]
    response: Option<OpenAiResponse<'a>>,
    #[serde(borrow)]
    session: Option<ModelOnly<'a>>,
    #[serde(borrow)]
    error: Option<OpenAiError<'a>>,
    /// Responses `response.create` names its model at the top level.
    #[serde(borrow)]
    model: Option<Str<'a>>,
    /// Responses WebSocket lane.
    #[serde(borrow)]
    stream_id: Option<Str<'a>>,
    /// The item of `response.output_item.added` (and other item events).
    #[serde(borrow)]
    item: Option<OutputItem<'a>>,
}

#[derive(Deserialize)]
struct OpenAiResponse<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    status: Option<Str<'a>>,
    /// Realtime: `{type, reason, error: {type, code}}`.
    #[serde(borrow)]
    status_details: Option<StatusDetails<'a>>,
    /// Responses: `{reason}`.
    #[serde(borrow)]
    incomplete_details: Option<StatusDetails<'a>>,
    /// Responses: `{code, message}`.
    #[serde(borrow)]
    error: Option<OpenAiError<'a>>,
    usage: Option<OpenAiUsage>,
}

#[derive(Deserialize)]
struct StatusDetails<'a> {
    #[serde(borrow)]
    reason: Option<Str<'a>>,
    #[serde(borrow)]
    error: Option<OpenAiError<'a>>,
}

#[derive(Deserialize)]
struct OpenAiError<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    code: Option<Str<'a>>,
}

impl OpenAiError<'_> {
    /// `type`, else `code`: what becomes `error.type`.
    fn kind(&self) -> Option<&str> {
        [self.kind.as_ref(), self.code.as_ref()]
            .into_iter()
            .flatten()
            .map(Str::as_str)
            .find(|s| !s.is_empty())
    }
}

/// Usage in both namings: Realtime `input_token_details` /
/// `output_token_details`, Responses `input_tokens_details` /
/// `output_tokens_details`.
#[derive(Deserialize)]
struct OpenAiUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    input_token_details: Option<InputDetails>,
    output_token_details: Option<OutputDetails>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<u64>,
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    cached_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize)]
struct CachedDetails {
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

impl OpenAiUsage {
    fn to_usage(&self) -> RealtimeUsage {
        let input = self
            .input_token_details
            .as_ref()
            .or(self.input_tokens_details.as_ref());
        let output = self
            .output_token_details
            .as_ref()
            .or(self.output_tokens_details.as_ref());
        let cached = input.and_then(|d| d.cached_tokens_details.as_ref());
        RealtimeUsage {
            input: self.input_tokens,
            output: self.output_tokens,
            total: self.total_tokens,
            cached_input: input.and_then(|d| d.cached_tokens),
            cached_input_text: cached.and_then(|c| c.text_tokens),
            cached_input_audio: cached.and_then(|c| c.audio_tokens),
            input_text: input.and_then(|d| d.text_tokens),
            input_audio: input.and_then(|d| d.audio_tokens),
            output_text: output.and_then(|d| d.text_tokens),
            output_audio: output.and_then(|d| d.audio_tokens),
            reasoning: output.and_then(|d| d.reasoning_tokens),
        }
    }
}

fn parse_openai(json: &[u8]) -> Result<OpenAiEvent<'_>, AdapterError> {
    let event: OpenAiEvent<'_> = serde_json::from_slice(json)
        .map_err(|_| AdapterError("malformed OpenAI WebSocket message"))?;
    if event.kind.is_none() {
        return Err(AdapterError("OpenAI WebSocket message without a type"));
    }
    Ok(event)
}

/// An OpenAI event as metering reads it, from the scan or from serde.
pub(super) struct OpenAiView<'e> {
    /// The top-level `type`.
    pub(super) kind: &'e str,
    /// The top-level `delta` as raw JSON (never unescaped); `None` when
    /// absent or `null`.
    pub(super) delta: Option<&'e str>,
    /// The Responses WebSocket lane, when present and not empty.
    lane: Option<&'e str>,
    /// The serde parse, for the fields only it reads; `None` when the scan
    /// read the event (it had none of them).
    pub(super) full: Option<&'e OpenAiEvent<'e>>,
}

impl OpenAiView<'_> {
    fn response(&self) -> Option<&OpenAiResponse<'_>> {
        self.full.and_then(|e| e.response.as_ref())
    }
}

/// Read one OpenAI message and hand `on` its view: by the scan when it can
/// (`scan` on), else by serde, whose errors are the message's.
pub(super) fn openai_message(
    json: &[u8],
    no_scan: bool,
    on: impl FnOnce(&OpenAiView<'_>),
) -> Result<(), AdapterError> {
    if !no_scan
        && !serde_first(json)
        && let Some(view) = scan_openai(json)
    {
        on(&view);
        return Ok(());
    }
    let event = parse_openai(json)?;
    on(&OpenAiView {
        kind: event.kind.as_ref().map_or("", Str::as_str),
        delta: event.delta.map(RawValue::get).filter(|d| *d != "null"),
        lane: non_empty_str(event.stream_id.as_ref()),
        full: Some(&event),
    });
    Ok(())
}

/// Whether the message opens with `{"type":"…"` naming an event whose
/// metering fields only serde reads (the scan would give up at them, after
/// checking the whole message as UTF-8): then the scan is not tried. Only a
/// shortcut; both paths read every event alike.
fn serde_first(json: &[u8]) -> bool {
    let Some(rest) = json.strip_prefix(br#"{"type":""#) else {
        return false;
    };
    let kind = memchr::memchr(b'"', rest).map_or(&[][..], |end| &rest[..end]);
    matches!(
        kind,
        b"response.done"
            | b"response.output_item.added"
            | b"response.completed"
            | b"response.incomplete"
            | b"response.failed"
            | b"response.created"
            | b"response.in_progress"
            | b"session.created"
            | b"session.updated"
            | b"error"
    )
}

/// The validating scan of an OpenAI message: its view, or `None` (take the
/// serde path) unless it is valid JSON, an object whose `type` is a string
/// without escapes, with no field serde would read into a struct
/// (`response`, `session`, `error`, `model`, `item`: their shapes are
/// serde's to check) and no repeated `type`, `delta` or `stream_id`
/// (serde rejects those). Only top-level keys count: a nested object's own
/// `type` (a `part`'s) is skipped with its value, and key order is free.
pub(super) fn scan_openai(json: &[u8]) -> Option<OpenAiView<'_>> {
    let mut s = Scan::new(json)?;
    let mut seen = Seen::default();
    let (mut kind, mut delta, mut lane) = (None, None, None);
    s.object(0, |s, key| match key {
        "type" => {
            seen.first(0)?;
            kind = s.str_or_null()?;
            Some(())
        }
        "delta" => {
            seen.first(1)?;
            delta = s.raw(1)?;
            Some(())
        }
        "stream_id" => {
            seen.first(2)?;
            lane = s.str_or_null()?;
            Some(())
        }
        "response" | "session" | "error" | "model" | "item" => None,
        _ => s.skip(1),
    })?;
    s.end()?;
    Some(OpenAiView {
        kind: kind?,
        delta,
        lane: lane.filter(|l| !l.is_empty()),
        full: None,
    })
}

pub(super) fn openai_client(event: &OpenAiView<'_>, out: &mut dyn FnMut(RealtimeEvent<'_>)) {
    if event.kind == "response.create" {
        if let Some(lane) = event.lane {
            out(RealtimeEvent::Lane(lane));
        }
        // Responses mode names the model at the top level; Realtime's
        // `response` parameters document none (the WebSocket session's applies), but
        // one is read if present.
        let model = event
            .full
            .and_then(|e| non_empty_str(e.model.as_ref()))
            .or_else(|| {
                event
                    .response()
                    .and_then(|r| non_empty_str(r.model.as_ref()))
            });
        out(RealtimeEvent::ResponseRequested { model });
    }
}

pub(super) fn openai_server(event: &OpenAiView<'_>, out: &mut dyn FnMut(RealtimeEvent<'_>)) {
    let kind = event.kind;
    // The lane goes first, and only before an event that belongs to it.
    let mut lane = event.lane;
    let out = &mut |e: RealtimeEvent<'_>| {
        if let Some(lane) = lane.take() {
            out(RealtimeEvent::Lane(lane));
        }
        out(e);
    };
    if kind.starts_with("response.") && kind.ends_with(".delta") {
        if event.delta.is_some_and(non_empty_raw) {
            let kind = output_kind(kind);
            out(RealtimeEvent::Output { kind, pieces: 1 });
        }
        return;
    }
    match kind {
        "session.created" | "session.updated" => {
            let session = event.full.and_then(|e| e.session.as_ref());
            if let Some(model) = non_empty_str(session.and_then(|s| s.model.as_ref())) {
                out(RealtimeEvent::Model(model));
            }
        }
        "input_audio_buffer.speech_stopped" | "input_audio_buffer.committed" => {
            out(RealtimeEvent::InputCommitted);
        }
        "response.created" => {
            let response = event.response();
            if let Some(model) = response.and_then(|r| non_empty_str(r.model.as_ref())) {
                out(RealtimeEvent::Model(model));
            }
            let id = response.and_then(|r| non_empty_str(r.id.as_ref()));
            out(RealtimeEvent::ResponseStarted { id });
        }
        "response.output_item.added" => {
            let item = event.full.and_then(|e| e.item.as_ref());
            match item.and_then(OutputItem::tool) {
                Some(ItemTool::Client(name)) => out(RealtimeEvent::ToolCall { name }),
                Some(ItemTool::Server(tool)) => out(RealtimeEvent::ServerToolCall(tool)),
                None => {}
            }
        }
        "response.done" | "response.completed" | "response.incomplete" | "response.failed" => {
            response_done(kind, event.response(), out);
        }
        "error" => {
            let error = event.full.and_then(|e| e.error.as_ref());
            out(RealtimeEvent::Error {
                kind: error.and_then(OpenAiError::kind).unwrap_or("error"),
            });
        }
        _ => {}
    }
}

/// The kind of output a `response.*.delta` event carries, GA and beta names.
fn output_kind(event: &str) -> OutputKind {
    match event {
        "response.output_text.delta" | "response.text.delta" | "response.refusal.delta" => {
            OutputKind::Text
        }
        "response.output_audio.delta" | "response.audio.delta" => OutputKind::Audio,
        "response.output_audio_transcript.delta"
        | "response.audio_transcript.delta"
        | "response.audio.transcript.delta" => OutputKind::Transcript,
        "response.function_call_arguments.delta"
        | "response.mcp_call_arguments.delta"
        | "response.custom_tool_call_input.delta"
        | "response.code_interpreter_call_code.delta" => OutputKind::ToolArgs,
        "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.reasoning.delta"
        | "response.reasoning_summary.delta" => OutputKind::Reasoning,
        _ => OutputKind::Other,
    }
}

/// Usage then the end of a response: Realtime `response.done` (status in
/// the response), Responses `response.completed` / `.incomplete` /
/// `.failed` (status in the event type).
fn response_done(
    event: &str,
    response: Option<&OpenAiResponse<'_>>,
    out: &mut dyn FnMut(RealtimeEvent<'_>),
) {
    if let Some(usage) = response.and_then(|r| r.usage.as_ref()) {
        out(RealtimeEvent::Usage(usage.to_usage()));
    }
    let status = match event {
        "response.completed" => "completed",
        "response.incomplete" => "incomplete",
        "response.failed" => "failed",
        _ => response
            .and_then(|r| non_empty_str(r.status.as_ref()))
            .unwrap_or(""),
    };
    let details = response.and_then(|r| r.status_details.as_ref());
    let reason = details
        .or(response.and_then(|r| r.incomplete_details.as_ref()))
        .and_then(|d| non_empty_str(d.reason.as_ref()));
    let status = match status {
        "completed" => DoneStatus::Completed,
        "cancelled" => DoneStatus::Cancelled { reason },
        "failed" => {
            let error = details
                .and_then(|d| d.error.as_ref())
                .or(response.and_then(|r| r.error.as_ref()));
            DoneStatus::Failed {
                kind: error
                    .and_then(OpenAiError::kind)
                    .unwrap_or("response_failed"),
            }
        }
        "incomplete" => DoneStatus::Incomplete { reason },
        // No status, or one a finished response should not have.
        other => DoneStatus::Incomplete {
            reason: reason.or((!other.is_empty()).then_some(other)),
        },
    };
    let id = response.and_then(|r| non_empty_str(r.id.as_ref()));
    out(RealtimeEvent::ResponseDone { id, status });
}
