//! The Gemini Live dialect of a WebSocket session (`BidiGenerateContent`):
//! one complete JSON message in, realtime events out, with the turn state
//! only this dialect needs (`GeminiTurn`).

use super::*;
/// `LiveClientMessage`: exactly one of these is set per message.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveClient<'a> {
    #[serde(borrow)]
    setup: Option<ModelOnly<'a>>,
    client_content: Option<ClientContent>,
    #[serde(borrow)]
    realtime_input: Option<RealtimeInput<'a>>,
    tool_response: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientContent {
    turn_complete: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RealtimeInput<'a> {
    activity_end: Option<IgnoredAny>,
    audio_stream_end: Option<bool>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// `LiveServerMessage`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveServer<'a> {
    #[serde(borrow)]
    server_content: Option<ServerContent<'a>>,
    #[serde(borrow)]
    tool_call: Option<ToolCall<'a>>,
    usage_metadata: Option<LiveUsage>,
    go_away: Option<IgnoredAny>,
    #[serde(borrow)]
    voice_activity: Option<VoiceActivity<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerContent<'a> {
    model_turn: Option<ModelTurn>,
    #[serde(borrow)]
    output_transcription: Option<Transcription<'a>>,
    turn_complete: Option<bool>,
    interrupted: Option<bool>,
    #[serde(borrow)]
    turn_complete_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ModelTurn {
    parts: Option<PartCounts>,
}

#[derive(Deserialize)]
struct Transcription<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCall<'a> {
    #[serde(borrow)]
    function_calls: Option<Vec<LiveCall<'a>>>,
}

/// A `FunctionCall` of a Live `toolCall`, as far as counting goes.
#[derive(Deserialize)]
struct LiveCall<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VoiceActivity<'a> {
    #[serde(borrow)]
    voice_activity_type: Option<Str<'a>>,
}

/// `UsageMetadata`; `promptTokenCount` includes the cached part.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveUsage {
    prompt_token_count: Option<u64>,
    response_token_count: Option<u64>,
    /// Vertex's name for `responseTokenCount`.
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    total_token_count: Option<u64>,
    prompt_tokens_details: Option<Modalities>,
    response_tokens_details: Option<Modalities>,
    candidates_tokens_details: Option<Modalities>,
    cache_tokens_details: Option<Modalities>,
}

impl LiveUsage {
    /// Like the `generateContent` adapter: output = response + thoughts
    /// (the response count excludes thinking), input = prompt + tool-use
    /// prompt.
    fn to_usage(&self) -> RealtimeUsage {
        let response = self.response_token_count.or(self.candidates_token_count);
        let output = match (response, self.thoughts_token_count) {
            (None, None) => None,
            (r, t) => Some(r.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        let input = self
            .prompt_token_count
            .map(|p| p.saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)));
        let prompt = self.prompt_tokens_details.unwrap_or_default();
        let cached = self.cache_tokens_details.unwrap_or_default();
        let resp = self
            .response_tokens_details
            .or(self.candidates_tokens_details)
            .unwrap_or_default();
        RealtimeUsage {
            input,
            output,
            total: self.total_token_count,
            cached_input: self.cached_content_token_count,
            cached_input_text: cached.text,
            cached_input_audio: cached.audio,
            input_text: prompt.text,
            input_audio: prompt.audio,
            output_text: resp.text,
            output_audio: resp.audio,
            reasoning: self.thoughts_token_count,
        }
    }
}

/// A `ModalityTokenCount` list folded while parsing: TEXT and AUDIO counts.
#[derive(Debug, Clone, Copy, Default)]
struct Modalities {
    text: Option<u64>,
    audio: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModalityCount<'a> {
    #[serde(borrow)]
    modality: Option<Str<'a>>,
    token_count: Option<u64>,
}

impl<'de> Fold<'de> for Modalities {
    type Item = ModalityCount<'de>;
    const EXPECTING: &'static str = "a list of modality token counts";
    fn add(&mut self, c: ModalityCount<'de>) {
        let n = c.token_count.unwrap_or(0);
        let slot = match c.modality.as_ref().map(Str::as_str) {
            Some("TEXT") => &mut self.text,
            Some("AUDIO") => &mut self.audio,
            _ => return,
        };
        *slot = Some(slot.unwrap_or(0).saturating_add(n));
    }
}

deserialize_by_fold!(Modalities);

/// `modelTurn.parts` folded while parsing: non-empty parts per kind.
#[derive(Debug, Clone, Copy, Default)]
struct PartCounts {
    text: u32,
    audio: u32,
    reasoning: u32,
    tool: u32,
    other: u32,
}

/// One `Part`: only what tells its kind and whether it is empty.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    thought: Option<bool>,
    #[serde(borrow)]
    inline_data: Option<Blob<'a>>,
    function_call: Option<IgnoredAny>,
    executable_code: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    #[serde(borrow)]
    mime_type: Option<Str<'a>>,
    /// Base64 audio: borrowed raw, only checked for emptiness.
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'de> Fold<'de> for PartCounts {
    type Item = Part<'de>;
    const EXPECTING: &'static str = "a list of parts";
    fn add(&mut self, part: Part<'de>) {
        let slot = if non_empty(part.text) {
            if part.thought == Some(true) {
                &mut self.reasoning
            } else {
                &mut self.text
            }
        } else if let Some(blob) = part.inline_data.filter(|b| non_empty(b.data)) {
            let mime = blob.mime_type.as_ref().map_or("", Str::as_str);
            if mime.starts_with("audio/") {
                &mut self.audio
            } else {
                &mut self.other
            }
        } else if part.function_call.is_some() {
            &mut self.tool
        } else if part.executable_code.is_some() {
            &mut self.other
        } else {
            return;
        };
        *slot = slot.saturating_add(1);
    }
}

deserialize_by_fold!(PartCounts);

/// Gemini Live's per-WebSocket-session state, on its own parser: Gemini has no
/// response-created event, so a turn opens with its first model content
/// and closes at `turnComplete`.
#[derive(Debug, Default)]
pub(super) struct GeminiTurn {
    /// A turn is open.
    in_turn: bool,
    /// Gemini sends `interrupted` before the `turnComplete` that ends a
    /// cut-short turn.
    interrupted: bool,
    /// The open turn ended in a `toolCall`: the model waits for the
    /// client's `toolResponse`, which closes it and asks for the next one.
    awaiting_tool: bool,
}

impl GeminiTurn {
    /// Map one client → server message to events.
    pub(super) fn client(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(RealtimeEvent<'_>),
    ) -> Result<(), AdapterError> {
        let msg: LiveClient<'_> = serde_json::from_slice(json)
            .map_err(|_| AdapterError("malformed Gemini Live client message"))?;
        if let Some(model) = msg.setup.as_ref().and_then(|s| s.model.as_ref()) {
            // `models/gemini-…`, or Vertex `projects/…/publishers/google/models/gemini-…`.
            let model = model.as_str();
            let model = model.rsplit_once("models/").map_or(model, |(_, m)| m);
            if !model.is_empty() {
                out(RealtimeEvent::Model(model));
            }
        }
        if msg.tool_response.is_some() && self.in_turn && self.awaiting_tool {
            // The turn that asked for the tool gets no `turnComplete`.
            self.in_turn = false;
            self.awaiting_tool = false;
            out(RealtimeEvent::ResponseDone {
                id: None,
                status: DoneStatus::Completed,
            });
        }
        if msg.client_content.and_then(|c| c.turn_complete) == Some(true)
            || msg.tool_response.is_some()
        {
            out(RealtimeEvent::ResponseRequested { model: None });
        }
        if let Some(input) = &msg.realtime_input {
            if input.activity_end.is_some() {
                out(RealtimeEvent::ResponseRequested { model: None });
            } else if input.audio_stream_end == Some(true) || non_empty(input.text) {
                out(RealtimeEvent::InputCommitted);
            }
        }
        Ok(())
    }

    /// Map one server → client message to events.
    pub(super) fn server(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(RealtimeEvent<'_>),
    ) -> Result<(), AdapterError> {
        let msg: LiveServer<'_> = serde_json::from_slice(json)
            .map_err(|_| AdapterError("malformed Gemini Live server message"))?;
        let end = msg
            .voice_activity
            .as_ref()
            .and_then(|v| v.voice_activity_type.as_ref());
        if end.is_some_and(|t| t.as_str() == "ACTIVITY_END") {
            out(RealtimeEvent::InputCommitted);
        }
        let content = msg.server_content.as_ref();
        let parts = content
            .and_then(|c| c.model_turn.as_ref())
            .and_then(|t| t.parts)
            .unwrap_or_default();
        let transcript = content
            .and_then(|c| c.output_transcription.as_ref())
            .is_some_and(|t| non_empty(t.text));
        let calls = msg
            .tool_call
            .as_ref()
            .and_then(|t| t.function_calls.as_deref())
            .unwrap_or_default();
        let turn_complete = content.and_then(|c| c.turn_complete) == Some(true);
        let outputs = [
            (OutputKind::Text, parts.text),
            (OutputKind::Audio, parts.audio),
            (OutputKind::Transcript, u32::from(transcript)),
            (OutputKind::Reasoning, parts.reasoning),
            (OutputKind::ToolArgs, parts.tool),
            (
                OutputKind::ToolArgs,
                u32::try_from(calls.len()).unwrap_or(u32::MAX),
            ),
            (OutputKind::Other, parts.other),
        ];
        let has_output = outputs.iter().any(|(_, n)| *n > 0);
        if !self.in_turn && (has_output || turn_complete || msg.tool_call.is_some()) {
            self.in_turn = true;
            out(RealtimeEvent::ResponseStarted { id: None });
        }
        if msg.tool_call.is_some() {
            self.awaiting_tool = true;
        }
        for (kind, pieces) in outputs {
            if pieces > 0 {
                out(RealtimeEvent::Output { kind, pieces });
            }
        }
        for call in calls {
            let name = non_empty_str(call.name.as_ref());
            out(RealtimeEvent::ToolCall { name });
        }
        if content.and_then(|c| c.interrupted) == Some(true) {
            self.interrupted = true;
        }
        if let Some(usage) = &msg.usage_metadata {
            out(RealtimeEvent::Usage(usage.to_usage()));
        }
        if turn_complete {
            let reason = content
                .and_then(|c| c.turn_complete_reason.as_ref())
                .map(Str::as_str)
                .filter(|r| {
                    !matches!(
                        *r,
                        "" | "TURN_COMPLETE_REASON_UNSPECIFIED" | "NEED_MORE_INPUT"
                    )
                });
            let status = if std::mem::take(&mut self.interrupted) {
                DoneStatus::Cancelled {
                    reason: Some("interrupted"),
                }
            } else if let Some(reason) = reason {
                DoneStatus::Incomplete {
                    reason: Some(reason),
                }
            } else {
                DoneStatus::Completed
            };
            self.in_turn = false;
            self.awaiting_tool = false;
            out(RealtimeEvent::ResponseDone { id: None, status });
        }
        if msg.go_away.is_some() {
            out(RealtimeEvent::Closing);
        }
        Ok(())
    }
}
