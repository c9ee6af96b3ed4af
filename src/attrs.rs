//! Names: every metric name, attribute key and fixed value telemetry emits,
//! in one place. GenAI names follow the OpenTelemetry GenAI semantic
//! conventions (Development stability); `tokentap.*` names are our own.

// Metric names.
// The current GenAI names (semantic-conventions-genai; `telemetry.semconv`
// = `latest`, the default, or `both`).
/// Histogram: duration of an inference request, t_end − t_req (s).
pub const M_INFERENCE_DURATION: &str = "gen_ai.client.inference.duration";
/// Histogram: duration of an embeddings request, t_end − t_req (s).
pub const M_EMBEDDINGS_DURATION: &str = "gen_ai.client.embeddings.duration";
/// Histogram: time to the first content chunk of a stream (s).
pub const M_INFERENCE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.inference.time_to_first_chunk";
/// Histogram: each gap between consecutive content chunks of a stream (s).
pub const M_INFERENCE_TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.inference.time_per_output_chunk";
/// Counter: input tokens, cached ones included ({token}).
pub const M_USAGE_INPUT: &str = "gen_ai.client.inference.usage.input_tokens";
/// Counter: output tokens, reasoning ones included ({token}).
pub const M_USAGE_OUTPUT: &str = "gen_ai.client.inference.usage.output_tokens";
/// Counter: input tokens served from the provider's cache ({token}).
pub const M_USAGE_CACHE_READ: &str = "gen_ai.client.inference.usage.cache_read.input_tokens";
/// Counter: input tokens written to the provider's cache ({token}).
pub const M_USAGE_CACHE_WRITE: &str = "gen_ai.client.inference.usage.cache_write.input_tokens";
/// Counter: output tokens spent on reasoning ({token}).
pub const M_USAGE_REASONING: &str = "gen_ai.client.inference.usage.reasoning.output_tokens";
/// Histogram: input tokens per inference request ({token}).
pub const M_OPERATION_INPUT_TOKENS: &str = "gen_ai.client.inference.operation.input_tokens";
/// Histogram: output tokens per inference request ({token}).
pub const M_OPERATION_OUTPUT_TOKENS: &str = "gen_ai.client.inference.operation.output_tokens";
/// Histogram: input tokens per embeddings request ({token}).
pub const M_EMBEDDINGS_INPUT_TOKENS: &str = "gen_ai.client.embeddings.operation.input_tokens";
/// Histogram: request duration, t_end − t_req (s). Under `latest`, only
/// requests to an unrecognised endpoint (`gen_ai.operation.name =
/// unknown`), as the conventions keep it for operations other than
/// inference and embeddings; under `legacy`, every request.
pub const M_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
// The semantic-conventions v1.41.0 names (`telemetry.semconv` = `legacy`
// or `both`).
/// Histogram: input and output token counts per request ({token}).
pub const M_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// Histogram: time to the first content chunk of a stream (s).
pub const M_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// Histogram: each gap between consecutive content chunks of a stream (s).
pub const M_TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";
/// Histogram: time to the first content chunk, or to the whole body when not streaming (s).
pub const M_SERVER_TTFT: &str = "gen_ai.server.time_to_first_token";
/// Histogram: (t_last − t_first) / (n − 1) over a stream's output tokens (s).
pub const M_SERVER_TPOT: &str = "gen_ai.server.time_per_output_token";
/// Histogram: request duration, t_end − t_req, under the server convention's name (s).
pub const M_SERVER_REQUEST_DURATION: &str = "gen_ai.server.request.duration";
/// Histogram: decode rate of streamed output ({token}/s).
pub const M_DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
/// Histogram: each gap between consecutive content chunks, with buckets fine enough for 1–50 ms (s).
pub const M_CHUNK_GAP: &str = "tokentap.chunk.gap";
/// Histogram: largest gap between content chunks of one stream (s).
pub const M_MAX_STALL: &str = "tokentap.stream.max_stall";
/// Histogram: time to the first visible output (text, audio, tool call; not reasoning) (s).
pub const M_TIME_TO_FIRST_VISIBLE: &str = "tokentap.time_to_first_visible_token";
/// Histogram: thinking time, first reasoning output to first visible output (s).
pub const M_REASONING_DURATION: &str = "tokentap.reasoning.duration";
/// Histogram: reasoning tokens per response ({token}).
pub const M_REASONING_TOKENS: &str = "tokentap.reasoning.tokens";
/// Counter: finished requests, by outcome ({request}).
pub const M_REQUESTS: &str = "tokentap.requests";
/// Up-down counter: requests in flight ({request}).
pub const M_STREAMS_ACTIVE: &str = "tokentap.streams.active";
/// Observable counter: spans and metric items dropped on full queues ({item}).
pub const M_TELEMETRY_DROPPED: &str = "tokentap.telemetry.dropped";
/// Counter: SLO objectives going from met to breached ({breach}).
pub const M_SLO_BREACHES: &str = "tokentap.slo.breaches";
/// Observable gauge: 1 while an SLO objective is breached, else 0.
pub const M_SLO_BREACHED: &str = "tokentap.slo.breached";
/// Counter: SLO webhook events, by result ({event}).
pub const M_SLO_WEBHOOK: &str = "tokentap.slo.webhook.events";
/// Counter: configuration reload attempts, by result ({reload}).
pub const M_CONFIG_RELOADS: &str = "tokentap.config.reloads";
/// Gauge: upstream bodies still read after their client left ({drain}).
pub const M_DRAINS_ACTIVE: &str = "tokentap.drains.active";
/// Counter: state store operations that failed or timed out.
pub const M_STATE_ERRORS: &str = "tokentap.state.errors";
/// Seconds until a served TLS certificate expires (gauge).
pub const M_TLS_CERT_EXPIRY: &str = "tokentap.tls.certificate.expiry";
/// Gauge: WebSocket sessions being relayed ({session}).
pub const M_WEBSOCKET_SESSIONS_ACTIVE: &str = "tokentap.websocket.sessions.active";
/// Counter: tokens by `gen_ai.token.type`, `gen_ai.token.modality` and
/// (input) `gen_ai.token.cache`, where the provider splits them ({token}).
/// Only under `telemetry.semconv = legacy | both`: the usage counters carry
/// the split under `latest`.
pub const M_MODALITY_TOKENS: &str = "tokentap.token.modality.usage";

// WebSocket session span attributes (no GenAI convention covers sessions).
// The wire names keep `tokentap.session.*`; in code they are `WS_SESSION_*`,
// apart from the agent session (`GEN_AI_CONVERSATION_ID`).
/// WebSocket session span: responses measured in the WebSocket session (int).
pub const WS_SESSION_RESPONSES: &str = "tokentap.session.responses";
/// WebSocket session span: input tokens summed over its responses (int).
pub const WS_SESSION_INPUT_TOKENS: &str = "tokentap.session.input_tokens";
/// WebSocket session span: output tokens summed over its responses (int).
pub const WS_SESSION_OUTPUT_TOKENS: &str = "tokentap.session.output_tokens";
/// WebSocket session span: client tool calls summed over its responses (int).
pub const WS_SESSION_TOOL_CALLS: &str = "tokentap.session.tool_calls";
/// WebSocket session span: cached input tokens summed over its responses (int).
pub const WS_SESSION_CACHE_READ: &str = "tokentap.session.cache_read.input_tokens";
/// WebSocket session span: text input tokens summed over its responses (int).
pub const WS_SESSION_TEXT_INPUT: &str = "tokentap.session.text.input_tokens";
/// WebSocket session span: audio input tokens summed over its responses (int).
pub const WS_SESSION_AUDIO_INPUT: &str = "tokentap.session.audio.input_tokens";
/// WebSocket session span: cached text input tokens summed over its responses (int).
pub const WS_SESSION_CACHE_READ_TEXT: &str = "tokentap.session.cache_read.text.input_tokens";
/// WebSocket session span: cached audio input tokens summed over its responses (int).
pub const WS_SESSION_CACHE_READ_AUDIO: &str = "tokentap.session.cache_read.audio.input_tokens";
/// WebSocket session span: text output tokens summed over its responses (int).
pub const WS_SESSION_TEXT_OUTPUT: &str = "tokentap.session.text.output_tokens";
/// WebSocket session span: audio output tokens summed over its responses (int).
pub const WS_SESSION_AUDIO_OUTPUT: &str = "tokentap.session.audio.output_tokens";
/// WebSocket session span: why the WebSocket session ended (`client_closed`, `idle_timeout`, ...).
pub const WS_SESSION_END: &str = "tokentap.session.end";
/// WebSocket session span: close code the client sent (int).
pub const WS_SESSION_CLOSE_CODE_CLIENT: &str = "tokentap.session.close_code.client";
/// WebSocket session span: close code the upstream sent (int).
pub const WS_SESSION_CLOSE_CODE_UPSTREAM: &str = "tokentap.session.close_code.upstream";
/// WebSocket session span: error events and unreadable or oversized messages (int).
pub const WS_SESSION_ERRORS: &str = "tokentap.session.errors";
/// WebSocket session span: why the WebSocket session's messages were not metered.
pub const WS_SESSION_UNMETERED: &str = "tokentap.session.unmetered";
/// WebSocket session span: bytes relayed from client to upstream (int).
pub const WS_SESSION_BYTES_UP: &str = "tokentap.session.bytes.client_to_upstream";
/// WebSocket session span: bytes relayed from upstream to client (int).
pub const WS_SESSION_BYTES_DOWN: &str = "tokentap.session.bytes.upstream_to_client";
/// Histogram: wait for an upstream connection or HTTP/2 stream slot (s).
pub const M_POOL_WAIT: &str = "tokentap.upstream.pool.wait";
/// Gauge: open HTTP/2 upstream connections taking new streams, per host ({connection}).
pub const M_POOL_CONNECTIONS: &str = "tokentap.upstream.pool.connections";
/// Gauge: HTTP/2 streams in flight on pooled connections, per host ({stream}).
pub const M_POOL_STREAMS: &str = "tokentap.upstream.pool.streams";
/// Gauge: requests waiting for an HTTP/2 connection or stream slot, per host ({request}).
pub const M_POOL_QUEUED: &str = "tokentap.upstream.pool.queued";

// Semantic-convention attribute keys.
/// Operation the endpoint performs (`chat`, `embeddings`, `unknown`, ...).
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// Provider that served the request (`openai`, `anthropic`, ...).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// Model named in the request body.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// Whether the client asked for a streamed response (bool).
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
/// Model the provider reported in its response.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Response id the provider assigned.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// Span attribute: the agent session the request belongs to (never a
/// metric label: `[sessions]`).
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// Finish reasons the provider reported (string[]).
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Span attribute: time to the first content chunk (s).
pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
/// Whether a `gen_ai.client.token.usage` point counts input or output tokens.
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
/// Input (prompt) tokens of the request (int).
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output (completion) tokens of the response (int).
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Input tokens served from the provider's prompt cache (int).
pub const GEN_AI_USAGE_CACHE_READ: &str = "gen_ai.usage.cache_read.input_tokens";
/// Input tokens written to the provider's prompt cache (int). Named
/// `cache_creation` up to semantic-conventions v1.41.0; renamed in
/// semantic-conventions-genai (PR #440).
pub const GEN_AI_USAGE_CACHE_WRITE: &str = "gen_ai.usage.cache_write.input_tokens";
/// Output tokens spent on reasoning (int).
pub const GEN_AI_USAGE_REASONING: &str = "gen_ai.usage.reasoning.output_tokens";
/// Text-modality input tokens, part of `gen_ai.usage.input_tokens` (int).
pub const GEN_AI_USAGE_TEXT_INPUT: &str = "gen_ai.usage.text.input_tokens";
/// Audio-modality input tokens, part of `gen_ai.usage.input_tokens` (int).
pub const GEN_AI_USAGE_AUDIO_INPUT: &str = "gen_ai.usage.audio.input_tokens";
/// Text-modality output tokens, part of `gen_ai.usage.output_tokens` (int).
pub const GEN_AI_USAGE_TEXT_OUTPUT: &str = "gen_ai.usage.text.output_tokens";
/// Audio-modality output tokens, part of `gen_ai.usage.output_tokens` (int).
pub const GEN_AI_USAGE_AUDIO_OUTPUT: &str = "gen_ai.usage.audio.output_tokens";
/// Cached text input tokens (no GenAI name splits the cache by modality) (int).
pub const USAGE_CACHE_READ_TEXT: &str = "tokentap.usage.cache_read.text.input_tokens";
/// Cached audio input tokens (int).
pub const USAGE_CACHE_READ_AUDIO: &str = "tokentap.usage.cache_read.audio.input_tokens";
/// Modality of the tokens a usage counter (or `tokentap.token.modality.usage`) point counts.
pub const GEN_AI_TOKEN_MODALITY: &str = "gen_ai.token.modality";
/// Cache status of the input tokens a `tokentap.token.modality.usage` point counts.
pub const GEN_AI_TOKEN_CACHE: &str = "gen_ai.token.cache";
/// Host of the route's upstream.
pub const SERVER_ADDRESS: &str = "server.address";
/// Port of the route's upstream.
pub const SERVER_PORT: &str = "server.port";
/// HTTP status code of the response.
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
/// The provider's error kind or the failure class, when the outcome is not `complete`.
pub const ERROR_TYPE: &str = "error.type";

// tokentap attribute keys.
/// Name of the configured route that matched.
pub const ROUTE: &str = "tokentap.route";
/// Prefix of an operator label of the route (`routes[].labels`):
/// `tokentap.route.label.<key>`, a string, on spans only.
pub const ROUTE_LABEL: &str = "tokentap.route.label.";
/// Tenant the request was attributed to (capped label).
pub const TENANT: &str = "tokentap.tenant";
/// How the request ended (`complete`, `client_cancelled`, ...).
pub const OUTCOME: &str = "tokentap.outcome";
/// Span: why the span was exported (`error`, `slow_ttft`, `ratio`, …).
pub const SAMPLING_REASON: &str = "tokentap.sampling.reason";
/// Span: how many requests an exported span stands for (1 / probability).
pub const SAMPLING_WEIGHT: &str = "tokentap.sampling.weight";
/// `tokentap.outcome` of a request that matched no route (answered 404,
/// never forwarded, so it has no route, provider or measurement).
pub const OUTCOME_NO_ROUTE: &str = "no_route";
/// Whether the output count came from chunks, not the provider (bool).
pub const TOKENS_ESTIMATED: &str = "tokentap.tokens.estimated";
/// Where the output count came from: `provider` or `chunks`.
pub const TOKENS_SOURCE: &str = "tokentap.tokens.source";
/// Span attribute: whether a stored, background or batch response's usage
/// was counted by this request (`first`), already counted (`repeat`) or not
/// final yet (`withheld`); absent for requests whose usage always counts.
pub const USAGE_COUNTED: &str = "tokentap.usage.counted";
/// Span attribute, with a state store only: `store` when the request's
/// counted-once decision and session rollup went to the store, `local`
/// when the store did not answer and this replica decided alone.
pub const STATE: &str = "tokentap.state";
/// Span attribute: the models of a batch result file, in order of first
/// appearance, capped (string array).
pub const BATCH_MODELS: &str = "tokentap.batch.models";
/// Span attribute: a batch result file's result lines (int).
pub const BATCH_LINES: &str = "tokentap.batch.lines";
/// Span attribute: result lines that succeeded (int).
pub const BATCH_SUCCEEDED: &str = "tokentap.batch.succeeded";
/// Span attribute: result lines that errored (int).
pub const BATCH_ERRORED: &str = "tokentap.batch.errored";
/// Span attribute: result lines canceled (Anthropic; int).
pub const BATCH_CANCELED: &str = "tokentap.batch.canceled";
/// Span attribute: result lines expired (Anthropic; int).
pub const BATCH_EXPIRED: &str = "tokentap.batch.expired";
/// Span attribute: lines that were not batch results (int).
pub const BATCH_UNREADABLE: &str = "tokentap.batch.unreadable_lines";
/// Span attribute: lines over the line cap, skipped (int).
pub const BATCH_OVERSIZE: &str = "tokentap.batch.oversize_lines";
/// Span attribute: decode rate of streamed output ({token}/s).
pub const DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
/// Span attribute: largest gap between content chunks (s).
pub const MAX_STALL: &str = "tokentap.max_stall";
/// Span attribute: events skipped because they could not be read (int).
pub const MALFORMED_EVENTS: &str = "tokentap.malformed_events";
/// Span attribute: time to the first visible output (s).
pub const TIME_TO_FIRST_VISIBLE: &str = "tokentap.time_to_first_visible_token";
/// Span attribute: time to the first reasoning output (s).
pub const TIME_TO_FIRST_REASONING: &str = "tokentap.time_to_first_reasoning_token";
/// Span attribute: thinking time, first reasoning to first visible output (s).
pub const REASONING_DURATION: &str = "tokentap.reasoning.duration";
/// Whether the reasoning token count was counted from reasoning chunks (bool).
pub const REASONING_ESTIMATED: &str = "tokentap.reasoning.tokens.estimated";
/// Span attribute: time to the first response body byte (s).
pub const TTFB: &str = "tokentap.ttfb";
/// Time waited for an upstream connection or HTTP/2 stream slot (s).
pub const POOL_WAIT: &str = "tokentap.upstream.pool.wait";
/// The upstream destination a pool gauge describes (`scheme://authority`).
pub const UPSTREAM_HOST: &str = "tokentap.upstream.host";
/// What became of the request body (`sniffed`, `empty`, `too_large`, ...).
pub const REQUEST_BODY: &str = "tokentap.request.body";
/// Why the response body was not metered: `unknown_format` or `encoding`.
pub const UNMETERED: &str = "tokentap.unmetered";
/// Content type or encoding that could not be metered.
pub const UNMETERED_DETAIL: &str = "tokentap.unmetered.detail";
/// Server-reported time to first token (s), beside tokentap's own.
pub const UPSTREAM_TTFT: &str = "tokentap.upstream.ttft";
/// Server-reported total duration (s).
pub const UPSTREAM_DURATION: &str = "tokentap.upstream.duration";
/// Server-reported prompt evaluation duration (s).
pub const UPSTREAM_PROMPT_EVAL: &str = "tokentap.upstream.prompt_eval_duration";
/// Server-reported decode duration (s).
pub const UPSTREAM_DECODE: &str = "tokentap.upstream.decode_duration";
/// Server-reported time queued before processing (s).
pub const UPSTREAM_QUEUE: &str = "tokentap.upstream.queue_duration";
/// Server-reported model load duration (s).
pub const UPSTREAM_LOAD: &str = "tokentap.upstream.load_duration";
/// TTFT the server's own timings do not account for (s).
pub const TTFT_NETWORK_AND_QUEUE: &str = "tokentap.ttft.network_and_queue";
/// Share of TTFT spent in network and queueing (0..1).
pub const NETWORK_QUEUE_SHARE: &str = "tokentap.network_queue_share";
/// Which telemetry signal a `tokentap.telemetry.dropped` point counts.
pub const SIGNAL: &str = "signal";
/// Name of the SLO a `tokentap.slo.*` point describes.
pub const SLO_NAME: &str = "tokentap.slo.name";
/// Objective of the SLO a `tokentap.slo.*` point describes.
pub const SLO_OBJECTIVE: &str = "tokentap.slo.objective";
/// Span attribute: names of the SLOs breached for the request's route and
/// model when it finished.
pub const SLO_BREACHED: &str = "tokentap.slo.breached";
/// `tokentap.slo.webhook.events` result.
pub const SLO_WEBHOOK_RESULT: &str = "tokentap.slo.webhook.result";
/// `tokentap.config.reloads` result: `success` or `failure`.
pub const RELOAD_RESULT: &str = "result";

// Fixed values.
/// `gen_ai.token.type` value for input tokens.
pub const TOKEN_INPUT: &str = "input";
/// `gen_ai.token.type` value for output tokens.
pub const TOKEN_OUTPUT: &str = "output";
/// `gen_ai.token.modality` value for text tokens.
pub const MODALITY_TEXT: &str = "text";
/// `gen_ai.token.modality` value for audio tokens.
pub const MODALITY_AUDIO: &str = "audio";
/// `gen_ai.token.modality` value when the provider does not split usage.
pub const MODALITY_UNKNOWN: &str = "unknown";
/// `gen_ai.token.cache` value for input tokens served from cache.
pub const CACHE_READ: &str = "read";
/// `gen_ai.token.cache` value for input tokens not served from cache.
pub const CACHE_NONE: &str = "none";
/// `gen_ai.operation.name` when the endpoint was not recognised.
pub const OPERATION_UNKNOWN: &str = "unknown";
/// A capped label's value once its cap is reached.
pub const OTHER: &str = "other";
/// `signal` value for dropped spans.
pub const SIGNAL_SPANS: &str = "spans";
/// `signal` value for dropped metric items.
pub const SIGNAL_METRICS: &str = "metrics";
/// `tokentap.slo.breaches` model value for SLOs that name no model.
pub const SLO_ALL_MODELS: &str = "*";
/// `tokentap.slo.webhook.result` value: the webhook accepted the event.
pub const RESULT_SENT: &str = "sent";
/// `tokentap.slo.webhook.result` value: delivery failed.
pub const RESULT_FAILED: &str = "failed";
/// `tokentap.slo.webhook.result` value: dropped because the queue was full.
pub const RESULT_QUEUE_FULL: &str = "queue_full";
/// `tokentap.slo.webhook.result` value: replaced by a newer event before it was sent.
pub const RESULT_SUPERSEDED: &str = "superseded";

/// Span event at the first content chunk.
pub const EVENT_FIRST_TOKEN: &str = "first_token";
/// Instrumentation scope name for the tracer and meter.
pub const SCOPE: &str = "tokentap";

// Prefill vs decode, served throughput, proxy overhead (issue 14).
/// Histogram: prefill rate, input tokens / TTFT ({token}/s).
pub const M_PREFILL_TPS: &str = "tokentap.prefill.tokens_per_second";
/// Counter: tokens served, by `gen_ai.token.type` ({token}). Only under
/// `telemetry.semconv = legacy | both`: the usage counters count the same.
pub const M_TOKENS: &str = "tokentap.tokens";
/// Gauge: requests in flight per route and model ({request}).
pub const M_IN_FLIGHT: &str = "tokentap.requests.in_flight";
/// Histogram: time tokentap itself adds, by `tokentap.proxy.stage` (s).
pub const M_PROXY_OVERHEAD: &str = "tokentap.proxy.overhead";
/// Prompt-size class of the input tokens (`le_1k` … `gt_128k`, `unknown`).
pub const PROMPT_SIZE_CLASS: &str = "tokentap.prompt.size_class";
/// Load class: requests in flight to the same route and model when the
/// request started (`1`, `2-8`, `9+` by default; `compare.load_classes`).
pub const LOAD_CLASS: &str = "tokentap.load_class";
/// Span: prefill rate, input tokens / TTFT (double, {token}/s).
pub const PREFILL_TPS: &str = "tokentap.prefill.tokens_per_second";
/// Span: requests in flight to the same route and model when this one
/// started, itself included (int).
pub const IN_FLIGHT: &str = "tokentap.requests.in_flight";
/// Span: proxy overhead before the request left, pool wait excluded (s).
pub const OVERHEAD_REQUEST: &str = "tokentap.proxy.overhead.request";
/// `tokentap.proxy.overhead` stage: `request` or `response_frame`.
pub const PROXY_STAGE: &str = "tokentap.proxy.stage";
/// `tokentap.proxy.stage` value: t_req to the request handed upstream.
pub const STAGE_REQUEST: &str = "request";
/// `tokentap.proxy.stage` value: waiting for an upstream connection or
/// HTTP/2 stream slot (the same value as `tokentap.upstream.pool.wait`).
pub const STAGE_POOL_WAIT: &str = "pool_wait";
/// `tokentap.proxy.stage` value: upstream bytes read to handed to the client.
pub const STAGE_RESPONSE_FRAME: &str = "response_frame";
/// `gen_ai.token.type` value for input tokens read from the prompt cache.
pub const TOKEN_CACHE_READ: &str = "cache_read";
/// `gen_ai.token.type` value for input tokens written to the prompt cache.
pub const TOKEN_CACHE_WRITE: &str = "cache_write";
/// `gen_ai.token.type` value for output tokens spent on reasoning.
pub const TOKEN_REASONING: &str = "reasoning";
// Cost (docs/COST.md). The GenAI semantic conventions have no cost
// attribute yet, so these are `tokentap.*`.
/// Counter: spend in USD per route, model and tenant ({USD}).
pub const M_COST: &str = "tokentap.cost.usd";
/// Counter: requests that used tokens but whose model has no price ({request}).
pub const M_COST_UNPRICED: &str = "tokentap.cost.unpriced";
/// Span: the request's cost (a double, in `tokentap.cost.currency`).
pub const COST_AMOUNT: &str = "tokentap.cost.amount";
/// Span: the cost's currency (`USD`).
pub const COST_CURRENCY: &str = "tokentap.cost.currency";
/// Span and metrics: where the cost came from (`table`, `override`, `provider`).
pub const COST_SOURCE: &str = "tokentap.cost.source";
/// Span and metrics: the cost rests on estimated token counts.
pub const COST_ESTIMATED: &str = "tokentap.cost.estimated";
/// Span: the price entry used (`openai/gpt-4o`, `prices[0]`, `provider`).
pub const COST_PRICE_ENTRY: &str = "tokentap.cost.price_entry";
/// Span: tokens were used but the model has no price (no cost is set).
pub const COST_UNPRICED: &str = "tokentap.cost.unpriced";
/// Span: the part of `tokentap.cost.amount` that is provider-run tool
/// fees (web search, grounding, …), when there were any.
pub const COST_TOOLS: &str = "tokentap.cost.tools";
// Tool calls (docs/METRICS.md#tool-calls).
/// Counter: client tool calls, by tool name ({call}).
pub const M_TOOL_CALLS: &str = "tokentap.tool.calls";
/// Counter: provider-run tool calls, by tool ({call}).
pub const M_SERVER_TOOL_CALLS: &str = "tokentap.tool.server_calls";
/// Metric attribute: the tool's name (GenAI `gen_ai.tool.name`), capped.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// Metric attribute: the provider-run tool (`web_search`, …).
pub const SERVER_TOOL: &str = "tokentap.tool.server";
/// Span: client tool calls the response asked for.
pub const TOOL_CALLS: &str = "tokentap.tool.calls";
/// Span: their names, each once, in order of first call (capped).
pub const TOOL_NAMES: &str = "tokentap.tool.names";
/// Span: provider-run web searches.
pub const SERVER_TOOL_WEB_SEARCH: &str = "tokentap.tool.server.web_search";
/// Span: provider-run web fetches.
pub const SERVER_TOOL_WEB_FETCH: &str = "tokentap.tool.server.web_fetch";
/// Span: provider-run file searches.
pub const SERVER_TOOL_FILE_SEARCH: &str = "tokentap.tool.server.file_search";
/// Span: provider-run code interpreter / code execution calls.
pub const SERVER_TOOL_CODE_INTERPRETER: &str = "tokentap.tool.server.code_interpreter";
/// Span: grounding (Google Search) queries.
pub const SERVER_TOOL_GROUNDING: &str = "tokentap.tool.server.grounding";
/// Span: the service tier that priced the request (`default`, `flex`, `priority`, `batch`).
pub const SERVICE_TIER: &str = "tokentap.service_tier";
