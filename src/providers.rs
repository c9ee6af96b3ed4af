//! Provider adapters: frames in, metering events out.
//!
//! An adapter knows one API family's wire format and nothing about HTTP.
//! It decides cheaply, per frame, whether the frame carries output content,
//! usage, a model name or an error, without building a `serde_json::Value`.

pub mod anthropic;
pub mod batch;
pub mod bedrock;
pub mod cohere;
pub mod compat;
mod event;
pub mod gemini;
pub mod ollama;
pub mod openai;
pub mod realtime;
pub(crate) mod scan;
pub mod spec;
pub mod tgi;
mod wire;

/// `service_tier` as a lenient serde field (the request sniffer reads it too).
pub(crate) use wire::service_tier as deserialize_service_tier;

pub use event::{
    AdapterError, ContentKind, Event, ParseError, ReportedCost, ServerTool, ServiceTier,
    UpstreamTiming, Usage,
};
pub(crate) use event::{Identity, millis, seconds};
pub use spec::{ContentType, FrameAdapter, JsonBody, ProviderSpec, ResponseFormat, Wire};

use std::borrow::Cow;

use crate::framing::eventstream::EventStreamDecoder;
use crate::framing::json_array::JsonArrayDecoder;
use crate::framing::ndjson::NdjsonDecoder;
use crate::framing::{Decoder, Frame, FramingError, sse::SseDecoder};

/// The registry: one line per provider, in documentation order. It
/// declares `ProviderKind` (whose serde name is the lowercase variant, the
/// spec's `config_name`) and `REGISTRY`, the specs in the same order.
macro_rules! registry {
    ($($(#[$doc:meta])* $kind:ident => $spec:expr,)*) => {
        /// The API family a route speaks; picks the adapter and the
        /// `gen_ai.provider.name` value. OpenAI-compatible servers have their
        /// own kind so that spans name the real provider; they share the
        /// OpenAI adapter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum ProviderKind {
            $($(#[$doc])* $kind,)*
        }

        impl ProviderKind {
            /// Every kind, in documentation order.
            pub const ALL: [ProviderKind; [$(stringify!($kind)),*].len()] =
                [$(ProviderKind::$kind),*];
        }

        /// Every provider's spec, in `ProviderKind` order.
        pub static REGISTRY: &[&ProviderSpec] = &[$(&$spec),*];
    };
}

registry! {
    /// OpenAI (and any OpenAI-compatible server without a kind of its own).
    Openai => openai::SPEC,
    /// Anthropic Messages API.
    Anthropic => anthropic::SPEC,
    /// Google Gemini API (`generativelanguage.googleapis.com`).
    Gemini => gemini::SPEC,
    /// Google Vertex AI (`aiplatform.googleapis.com`): Gemini, and Claude
    /// through `rawPredict`.
    Vertex => gemini::VERTEX,
    /// Ollama's native API (`/api/chat`, `/api/generate`) and its `/v1`.
    Ollama => ollama::SPEC,
    /// AWS Bedrock Runtime: Converse and InvokeModel, streamed or not.
    Bedrock => bedrock::SPEC,
    /// Azure OpenAI: deployment paths, content-filter annotations.
    Azure => compat::AZURE,
    /// Cohere v2 chat.
    Cohere => cohere::SPEC,
    /// vLLM's OpenAI-compatible server.
    Vllm => compat::openai_compatible(ProviderKind::Vllm, "vllm", "vllm"),
    /// llama.cpp's `llama-server`.
    Llamacpp => compat::openai_compatible(ProviderKind::Llamacpp, "llamacpp", "llamacpp"),
    /// Hugging Face Text Generation Inference (`/generate_stream`, `/v1`).
    Tgi => tgi::SPEC,
    /// Mistral AI.
    Mistral => compat::openai_compatible(ProviderKind::Mistral, "mistral_ai", "mistral")
        .priced_as("mistral"),
    /// Groq.
    Groq => compat::openai_compatible(ProviderKind::Groq, "groq", "groq")
        .priced_as("groq"),
    /// DeepSeek.
    Deepseek => compat::openai_compatible(ProviderKind::Deepseek, "deepseek", "deepseek")
        .priced_as("deepseek"),
    /// OpenRouter.
    Openrouter => compat::openai_compatible(ProviderKind::Openrouter, "openrouter", "openrouter")
        .priced_as("openrouter"),
    /// Together AI.
    Together => compat::openai_compatible(ProviderKind::Together, "together", "together")
        .priced_as("together"),
    /// LM Studio.
    Lmstudio => compat::openai_compatible(ProviderKind::Lmstudio, "lmstudio", "lmstudio"),
    /// Perplexity.
    Perplexity => compat::openai_compatible(ProviderKind::Perplexity, "perplexity", "perplexity")
        .priced_as("perplexity"),
    /// xAI.
    Xai => compat::openai_compatible(ProviderKind::Xai, "x_ai", "xai")
        .priced_as("x-ai"),
}

impl ProviderKind {
    /// This kind's spec.
    pub fn spec(self) -> &'static ProviderSpec {
        // The registry and the enum come from the same list, in order.
        REGISTRY[self as usize]
    }

    /// The `gen_ai.provider.name` value: the GenAI conventions' well-known
    /// value where one exists, else a plain lowercase name.
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The name used in configuration (`provider = "..."`).
    pub fn config_name(self) -> &'static str {
        self.spec().config_name
    }

    /// Request-time detection from the request path (after the route
    /// prefix is stripped; a query string is ignored). `None` when the path
    /// names no known endpoint: then `detect_response` may still decide.
    pub fn detect(path: &str) -> Option<ProviderKind> {
        ProviderKind::detect_operation(path, Operation::from_path(path))
    }

    /// `detect` for a path whose operation is already known
    /// (`Operation::from_path`).
    pub fn detect_operation(path: &str, operation: Option<Operation>) -> Option<ProviderKind> {
        let path = strip_query(path);
        REGISTRY
            .iter()
            .find(|s| (s.detect_path)(path, operation))
            .map(|s| s.kind)
    }

    /// Response-time detection from the `Content-Type`, for requests whose
    /// path said nothing (no configured provider, `detect` gave `None`).
    pub fn detect_response(content_type: &str) -> Option<ProviderKind> {
        ProviderKind::detect_format(&ContentType::parse(content_type))
    }

    /// `detect_response` on an already parsed `Content-Type`.
    pub fn detect_format(content_type: &ContentType<'_>) -> Option<ProviderKind> {
        REGISTRY
            .iter()
            .find(|s| (s.detect_response)(content_type))
            .map(|s| s.kind)
    }
}

/// Declares an enum of unit variants as written, plus its `ALL`: every
/// variant in declaration order, so no hand-written list can go stale.
macro_rules! with_all {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$doc:meta])* $variant:ident,)* }) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),*].len()] =
                [$($name::$variant),*];
        }
    };
}

with_all! {
/// The operation a request performs (`gen_ai.operation.name`), with the
/// endpoint shape the adapter needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// OpenAI `/chat/completions` (also Azure deployments and every
    /// OpenAI-compatible server).
    ChatCompletions,
    /// OpenAI legacy `/completions`.
    Completions,
    /// OpenAI `/responses`.
    Responses,
    /// OpenAI `GET /responses/{id}`: a stored or background response read
    /// again, whole (a poll) or streamed (`?stream=true`, a resume).
    FetchResponse,
    /// OpenAI `POST /responses/{id}/cancel` (a background response).
    CancelResponse,
    /// OpenAI `DELETE /responses/{id}`.
    DeleteResponse,
    /// OpenAI `GET /responses/{id}/input_items`.
    ResponseInputItems,
    /// OpenAI `/embeddings`.
    Embeddings,
    /// OpenAI `GET /files/{id}/content`: a file downloaded, metered when it
    /// is a Batch output file.
    FileContent,
    /// Anthropic `GET /messages/batches/{id}/results`: a Message Batch's
    /// results downloaded.
    BatchResults,
    /// Anthropic `/messages`.
    Messages,
    /// Gemini / Vertex `models/{model}:generateContent`.
    GenerateContent,
    /// Gemini / Vertex `models/{model}:streamGenerateContent` (SSE with
    /// `alt=sse`, else a streamed JSON array).
    StreamGenerateContent,
    /// Gemini / Vertex `:embedContent`, `:batchEmbedContents`.
    EmbedContent,
    /// Vertex `publishers/anthropic/models/{model}:rawPredict` (Anthropic JSON).
    RawPredict,
    /// Vertex `:streamRawPredict` (Anthropic SSE).
    StreamRawPredict,
    /// Ollama `/api/chat`.
    OllamaChat,
    /// Ollama `/api/generate`.
    OllamaGenerate,
    /// Ollama `/api/embed` and the older `/api/embeddings`.
    OllamaEmbed,
    /// Bedrock `/model/{id}/converse`.
    Converse,
    /// Bedrock `/model/{id}/converse-stream`.
    ConverseStream,
    /// Bedrock `/model/{id}/invoke`.
    InvokeModel,
    /// Bedrock `/model/{id}/invoke-with-response-stream`.
    InvokeModelStream,
    /// Cohere `/v2/chat`.
    CohereChat,
    /// TGI `/generate`.
    TgiGenerate,
    /// TGI `/generate_stream`.
    TgiGenerateStream,
}
}

impl Operation {
    /// The `gen_ai.operation.name` value.
    pub fn name(self) -> &'static str {
        match self {
            Operation::ChatCompletions
            | Operation::Responses
            | Operation::Messages
            | Operation::RawPredict
            | Operation::StreamRawPredict
            | Operation::OllamaChat
            | Operation::Converse
            | Operation::ConverseStream
            | Operation::InvokeModel
            | Operation::InvokeModelStream
            | Operation::CohereChat => "chat",
            Operation::Completions
            | Operation::OllamaGenerate
            | Operation::TgiGenerate
            | Operation::TgiGenerateStream => "text_completion",
            Operation::Embeddings | Operation::EmbedContent | Operation::OllamaEmbed => {
                "embeddings"
            }
            Operation::GenerateContent | Operation::StreamGenerateContent => "generate_content",
            Operation::FetchResponse => "fetch_response",
            Operation::CancelResponse => "cancel_response",
            Operation::DeleteResponse => "delete_response",
            Operation::ResponseInputItems => "list_input_items",
            Operation::FileContent => "file_content",
            Operation::BatchResults => "batch_results",
        }
    }

    /// Whether the operation produces no output tokens.
    pub fn is_embeddings(self) -> bool {
        matches!(
            self,
            Operation::Embeddings | Operation::EmbedContent | Operation::OllamaEmbed
        )
    }

    /// Whether the operation runs the model (chat, completions,
    /// embeddings, …) rather than reading or managing what it produced
    /// (fetching, cancelling or deleting a stored response, listing its
    /// input items): those are timed as `gen_ai.client.operation.duration`.
    pub fn is_inference(self) -> bool {
        !matches!(
            self,
            Operation::FetchResponse
                | Operation::CancelResponse
                | Operation::DeleteResponse
                | Operation::ResponseInputItems
                | Operation::FileContent
                | Operation::BatchResults
        )
    }

    /// Whether the response is a batch result file (JSONL, one result per
    /// line, whatever its `Content-Type`): metered per model and counted
    /// once per file or batch id.
    pub fn is_batch_file(self) -> bool {
        matches!(self, Operation::FileContent | Operation::BatchResults)
    }

    /// Whether a response to this operation reports usage that may be
    /// seen again (a stored response read back, a background response
    /// resumed or polled): its usage is counted once per response id.
    pub fn reads_stored_response(self) -> bool {
        matches!(
            self,
            Operation::Responses | Operation::FetchResponse | Operation::CancelResponse
        )
    }

    /// `from_path` for a request with `method`: `DELETE /responses/{id}`
    /// deletes what `GET` fetches.
    pub fn from_request(method: &str, path: &str) -> Option<Operation> {
        match Operation::from_path(path) {
            Some(Operation::FetchResponse) if method.eq_ignore_ascii_case("DELETE") => {
                Some(Operation::DeleteResponse)
            }
            op => op,
        }
    }

    /// Recognise the operation from the request path's last segments (a
    /// query string is ignored). A path naming one stored response
    /// (`/responses/{id}`) is read as `GET`'s `FetchResponse`.
    pub fn from_path(path: &str) -> Option<Operation> {
        let path = strip_query(path).trim_end_matches('/');
        let tail = Tail::of(path);
        if let Some(op) = stored_response(&tail).or_else(|| batch_file_of(&tail).map(|(op, _)| op))
        {
            return Some(op);
        }
        let last = tail.0[0];
        // Bedrock's `/model/{id}/…`: a `model` segment with a `/` on both
        // sides (the first segment has none before it).
        let bedrock = memchr::memmem::find(path.as_bytes(), b"/model/").is_some();
        // Google's custom methods: `models/{model}:{method}`.
        if let Some(colon) = memchr::memchr(b':', last.as_bytes()) {
            if !bedrock {
                return match &last[colon + 1..] {
                    "generateContent" => Some(Operation::GenerateContent),
                    "streamGenerateContent" => Some(Operation::StreamGenerateContent),
                    "embedContent" | "batchEmbedContents" => Some(Operation::EmbedContent),
                    "rawPredict" => Some(Operation::RawPredict),
                    "streamRawPredict" => Some(Operation::StreamRawPredict),
                    _ => None,
                };
            }
        }
        if bedrock {
            match last {
                "converse" => return Some(Operation::Converse),
                "converse-stream" => return Some(Operation::ConverseStream),
                "invoke" => return Some(Operation::InvokeModel),
                "invoke-with-response-stream" => return Some(Operation::InvokeModelStream),
                _ => {}
            }
        }
        const SUFFIXES: [(&str, Operation); 12] = [
            ("/api/chat", Operation::OllamaChat),
            ("/api/generate", Operation::OllamaGenerate),
            ("/api/embed", Operation::OllamaEmbed),
            ("/api/embeddings", Operation::OllamaEmbed),
            ("/v2/chat", Operation::CohereChat),
            ("/generate_stream", Operation::TgiGenerateStream),
            ("/generate", Operation::TgiGenerate),
            ("/chat/completions", Operation::ChatCompletions),
            ("/completions", Operation::Completions),
            ("/responses", Operation::Responses),
            ("/embeddings", Operation::Embeddings),
            ("/messages", Operation::Messages),
        ];
        SUFFIXES
            .iter()
            .find(|(suffix, _)| path.ends_with(suffix))
            .map(|(_, op)| *op)
    }
}

/// The last four segments of a path, the last first; `None` past the
/// path's first segment. One backwards pass over the bytes.
struct Tail<'a>([&'a str; 4], usize);

impl<'a> Tail<'a> {
    fn of(path: &'a str) -> Tail<'a> {
        let mut segments = [""; 4];
        let (mut end, mut n) = (path.len(), 0);
        while n < segments.len() {
            match memchr::memrchr(b'/', &path.as_bytes()[..end]) {
                Some(slash) => {
                    segments[n] = &path[slash + 1..end];
                    end = slash;
                    n += 1;
                }
                None => {
                    segments[n] = &path[..end];
                    n += 1;
                    break;
                }
            }
        }
        Tail(segments, n)
    }

    /// Segment `i` from the end (0: the last), if the path has it.
    fn get(&self, i: usize) -> Option<&'a str> {
        (i < self.1).then(|| self.0[i])
    }
}

/// The operation on one stored OpenAI response: `…/responses/{id}`,
/// `…/responses/{id}/cancel`, `…/responses/{id}/input_items`.
fn stored_response(tail: &Tail<'_>) -> Option<Operation> {
    let (last, before) = (tail.get(0)?, tail.get(1)?);
    if before == "responses" && !last.is_empty() {
        return Some(Operation::FetchResponse);
    }
    let op = match last {
        "cancel" => Operation::CancelResponse,
        "input_items" => Operation::ResponseInputItems,
        _ => return None,
    };
    (!before.is_empty() && tail.get(2)? == "responses").then_some(op)
}

/// A batch result file's operation and the id it is counted once under:
/// `…/files/{id}/content` (OpenAI, the file id) and
/// `…/messages/batches/{id}/results` (Anthropic, the batch id).
pub fn batch_file(path: &str) -> Option<(Operation, &str)> {
    batch_file_of(&Tail::of(strip_query(path).trim_end_matches('/')))
}

fn batch_file_of<'a>(tail: &Tail<'a>) -> Option<(Operation, &'a str)> {
    let (last, id, parent) = (tail.get(0)?, tail.get(1)?, tail.get(2)?);
    if id.is_empty() {
        return None;
    }
    match (last, parent) {
        ("content", "files") => Some((Operation::FileContent, id)),
        ("results", "batches") if tail.get(3)? == "messages" => Some((Operation::BatchResults, id)),
        _ => None,
    }
}

impl Operation {
    /// The wire format this operation's responses are in.
    pub fn wire(self) -> Option<&'static Wire> {
        REGISTRY
            .iter()
            .map(|s| s.wire)
            .find(|w| w.operations.contains(&self))
    }
}

/// Whether the client asked for a streamed response: the path decides for
/// the APIs that stream by endpoint (Gemini `streamGenerateContent`, Bedrock
/// `converse-stream`, …), Ollama streams unless the body says
/// `"stream": false`, and everyone else streams only with `"stream": true`.
/// Each wire format answers for its own operations.
pub fn request_streams(operation: Option<Operation>, body_stream: Option<bool>) -> bool {
    match operation.and_then(|op| Some((op, op.wire()?))) {
        Some((op, wire)) => (wire.request_streams)(op, body_stream),
        None => body_stream.unwrap_or(false),
    }
}

/// Whether a response `Content-Type` is a streamed format in itself (SSE,
/// NDJSON, AWS eventstream), whatever the request said.
pub fn is_stream_content_type(content_type: &str) -> bool {
    ContentType::parse(content_type).is_stream()
}

/// The model named by the request path, where the API puts it there:
/// Gemini and Vertex (`models/{model}:method`), Bedrock
/// (`/model/{modelId}/converse`, percent-decoded: ids and ARNs carry `:`
/// and `/`) and Azure (`/deployments/{deployment}/...`, the deployment
/// name). `None` for paths without one. Each spec reads its own shape.
pub fn model_from_path(path: &str) -> Option<Cow<'_, str>> {
    let path = strip_query(path).trim_end_matches('/');
    REGISTRY
        .iter()
        .find_map(|s| (s.model_from_path)(path))
        .flatten()
}

/// The path without its query string.
fn strip_query(path: &str) -> &str {
    memchr::memchr(b'?', path.as_bytes()).map_or(path, |q| &path[..q])
}

/// Percent-decode a path segment; borrowed when it has no escapes, and
/// kept as it is when the escapes are not valid UTF-8.
fn percent_decode(s: &str) -> Cow<'_, str> {
    if !s.contains('%') {
        return Cow::Borrowed(s);
    }
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match escaped {
            Some((hi, lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_or(Cow::Borrowed(s), Cow::Owned)
}

/// Adapter state for one response: the wire format's adapter.
#[derive(Debug)]
pub struct Adapter {
    wire: &'static Wire,
    inner: Box<dyn FrameAdapter>,
}

impl Adapter {
    /// The adapter for `kind` answering `operation`. A known operation
    /// decides the wire format (Gemini's and Anthropic's OpenAI-compatible
    /// endpoints speak OpenAI; Vertex `rawPredict` speaks Anthropic); the
    /// kind decides when the operation is unknown.
    pub fn new(kind: ProviderKind, operation: Option<Operation>) -> Adapter {
        let wire = operation
            .and_then(Operation::wire)
            .unwrap_or(kind.spec().wire);
        Adapter {
            wire,
            inner: (wire.adapter)(operation),
        }
    }

    /// The wire format this adapter reads.
    pub fn wire(&self) -> &'static Wire {
        self.wire
    }

    /// Map one frame to zero or more events.
    pub fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        self.inner.on_frame(frame, out)
    }
}

/// The body's framing, chosen from the response `Content-Type`, the
/// provider and the operation.
#[derive(Debug)]
pub enum Framing {
    /// `text/event-stream`.
    Sse(SseDecoder),
    /// `application/x-ndjson`, and Ollama's `application/json`.
    Ndjson(NdjsonDecoder),
    /// Gemini `streamGenerateContent` without `alt=sse`.
    JsonArray(JsonArrayDecoder),
    /// `application/vnd.amazon.eventstream` (Bedrock).
    EventStream(EventStreamDecoder),
    /// A Gemini `application/json` body that may be a streamed array or a
    /// single object (an error, or `generateContent`): the first
    /// non-whitespace byte decides.
    ArrayOrJson {
        /// Largest frame accepted (bytes).
        limit: usize,
    },
    /// A downloaded file that may hold batch results (whatever its
    /// `Content-Type`): read line by line into per-model totals.
    Batch(Box<batch::BatchFile>),
    /// A whole JSON body, collected up to the frame limit.
    Json {
        /// Body bytes collected so far.
        buf: Vec<u8>,
        /// Largest body accepted (bytes).
        limit: usize,
    },
}

/// Framing plus adapter: response body chunks in, events out.
///
/// A frame the adapter cannot read (bad JSON in one event) and a message
/// the framing can skip (an eventstream message with a bad CRC) are
/// counted in `malformed_events` and skipped: metering goes on with the
/// next frame. Only a framing error it cannot resynchronise after (an
/// oversized frame, a broken eventstream prelude, a broken JSON array),
/// or a whole JSON body that does not parse, ends the parse.
#[derive(Debug)]
pub struct Parser {
    framing: Framing,
    adapter: Adapter,
    provider: ProviderKind,
    /// Frames the adapter could not read.
    bad_frames: u64,
}

impl Parser {
    /// A parser for a response with the given `Content-Type`, or `None`
    /// when the body is in a format tokentap does not meter.
    pub fn new(
        kind: ProviderKind,
        operation: Option<Operation>,
        content_type: &str,
        max_frame: usize,
    ) -> Option<Parser> {
        let format = ContentType::parse(content_type).format;
        Parser::for_format(kind, operation, format, max_frame)
    }

    /// A parser for a response in `format` (read once from its
    /// `Content-Type`), or `None` when tokentap does not meter the format.
    pub fn for_format(
        kind: ProviderKind,
        operation: Option<Operation>,
        format: ResponseFormat,
        max_frame: usize,
    ) -> Option<Parser> {
        let adapter = Adapter::new(kind, operation);
        let framing = match format {
            ResponseFormat::Sse => Framing::Sse(SseDecoder::new(max_frame)),
            ResponseFormat::EventStream => Framing::EventStream(EventStreamDecoder::new(max_frame)),
            ResponseFormat::Ndjson => Framing::Ndjson(NdjsonDecoder::new(max_frame)),
            ResponseFormat::Json => match (adapter.wire().json_body)(operation) {
                JsonBody::Lines => Framing::Ndjson(NdjsonDecoder::new(max_frame)),
                JsonBody::ArrayOrWhole => Framing::ArrayOrJson { limit: max_frame },
                JsonBody::Whole => Framing::Json {
                    buf: Vec::new(),
                    limit: max_frame,
                },
            },
            ResponseFormat::Other => return None,
        };
        Some(Parser {
            framing,
            adapter,
            provider: kind,
            bad_frames: 0,
        })
    }

    /// A parser for a downloaded file (`Operation::is_batch_file`), whatever
    /// its `Content-Type`: it meters the file when its first line is a
    /// batch result line and leaves anything else alone. At most
    /// `max_line` bytes of a line are held; longer lines are counted and
    /// skipped.
    pub fn for_batch_file(kind: ProviderKind, operation: Operation, max_line: usize) -> Parser {
        Parser {
            framing: Framing::Batch(Box::new(batch::BatchFile::new(max_line))),
            adapter: Adapter::new(kind, Some(operation)),
            provider: kind,
            bad_frames: 0,
        }
    }

    /// The batch result totals so far, when this parser reads a batch
    /// result file and the file holds batch results.
    pub fn batch(&self) -> Option<&batch::BatchTally> {
        match &self.framing {
            Framing::Batch(file) => file.tally(),
            _ => None,
        }
    }

    /// Whether this parser reads a downloaded file now known to hold no
    /// batch results (it is passed on unmetered).
    pub fn is_other_file(&self) -> bool {
        matches!(&self.framing, Framing::Batch(file) if file.is_other())
    }

    /// The provider whose response this parser reads (the label it is
    /// metered under).
    pub fn provider(&self) -> ProviderKind {
        self.provider
    }

    /// Events skipped so far because they could not be read: frames the
    /// adapter rejected plus messages the framing skipped.
    pub fn malformed_events(&self) -> u64 {
        let skipped = match &self.framing {
            Framing::EventStream(dec) => dec.skipped(),
            Framing::JsonArray(dec) => dec.skipped(),
            Framing::Batch(file) => file.tally().map_or(0, |t| t.unreadable),
            _ => 0,
        };
        self.bad_frames + skipped
    }

    /// Feed one chunk of the (decompressed) response body. An error means
    /// the framing cannot go on; a bad frame is only counted.
    pub fn feed(&mut self, chunk: &[u8], out: &mut dyn FnMut(Event<'_>)) -> Result<(), ParseError> {
        let mut chunk = chunk;
        if let Framing::ArrayOrJson { limit } = self.framing {
            let Some(at) = chunk.iter().position(|b| !b.is_ascii_whitespace()) else {
                return Ok(());
            };
            chunk = &chunk[at..];
            self.framing = if chunk[0] == b'[' {
                Framing::JsonArray(JsonArrayDecoder::new(limit))
            } else {
                Framing::Json {
                    buf: Vec::new(),
                    limit,
                }
            };
        }
        let (adapter, bad) = (&mut self.adapter, &mut self.bad_frames);
        match &mut self.framing {
            Framing::Sse(dec) => drive(adapter, bad, out, |on| dec.feed(chunk, on)),
            Framing::Ndjson(dec) => drive(adapter, bad, out, |on| dec.feed(chunk, on)),
            Framing::JsonArray(dec) => drive(adapter, bad, out, |on| dec.feed(chunk, on)),
            Framing::EventStream(dec) => drive(adapter, bad, out, |on| dec.feed(chunk, on)),
            Framing::ArrayOrJson { .. } => Ok(()),
            Framing::Batch(file) => {
                file.feed(chunk);
                Ok(())
            }
            Framing::Json { buf, limit } => {
                if buf.len() + chunk.len() > *limit {
                    return Err(FramingError::TooLarge { limit: *limit }.into());
                }
                buf.extend_from_slice(chunk);
                Ok(())
            }
        }
    }

    /// The body ended: flush what the framing still holds. A whole JSON
    /// body that parsed is its own terminal event (`Event::Done`); one that
    /// did not is an error, as there is no later frame to go on with.
    pub fn finish(&mut self, out: &mut dyn FnMut(Event<'_>)) -> Result<(), ParseError> {
        let (adapter, bad) = (&mut self.adapter, &mut self.bad_frames);
        match &mut self.framing {
            Framing::Sse(dec) => drive(adapter, bad, out, |on| dec.finish(on)),
            Framing::Ndjson(dec) => drive(adapter, bad, out, |on| dec.finish(on)),
            Framing::JsonArray(dec) => drive(adapter, bad, out, |on| dec.finish(on)),
            Framing::EventStream(dec) => drive(adapter, bad, out, |on| dec.finish(on)),
            Framing::ArrayOrJson { .. } => Ok(()),
            Framing::Batch(file) => {
                file.finish();
                if file.tally().is_some() {
                    // A results file read to its end is whole.
                    out(Event::Done);
                }
                Ok(())
            }
            Framing::Json { buf, .. } => {
                let body = std::mem::take(buf);
                if body.iter().all(u8::is_ascii_whitespace) {
                    return Ok(());
                }
                adapter.on_frame(Frame::Json(&body), out)?;
                out(Event::Done);
                Ok(())
            }
        }
    }
}

/// Run a decoder step, handing each frame to the adapter; a frame the
/// adapter rejects is counted in `bad` and skipped (the adapter goes on
/// with the next one). Only the framing's own error is returned.
fn drive(
    adapter: &mut Adapter,
    bad: &mut u64,
    out: &mut dyn FnMut(Event<'_>),
    step: impl FnOnce(&mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError>,
) -> Result<(), ParseError> {
    step(&mut |frame| {
        if adapter.on_frame(frame, out).is_err() {
            *bad += 1;
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod reasoning_tests;

#[cfg(test)]
pub(crate) mod tests;
