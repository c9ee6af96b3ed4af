//! Names: every metric name, attribute key and fixed value telemetry emits,
//! in one place. GenAI names follow the OpenTelemetry GenAI semantic
//! conventions (Development stability); `tokentap.*` names are our own.

// Metric names.
pub const M_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
pub const M_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
pub const M_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
pub const M_TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";
pub const M_SERVER_TTFT: &str = "gen_ai.server.time_to_first_token";
pub const M_SERVER_TPOT: &str = "gen_ai.server.time_per_output_token";
pub const M_SERVER_REQUEST_DURATION: &str = "gen_ai.server.request.duration";
pub const M_DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
pub const M_CHUNK_GAP: &str = "tokentap.chunk.gap";
pub const M_MAX_STALL: &str = "tokentap.stream.max_stall";
pub const M_REQUESTS: &str = "tokentap.requests";
pub const M_STREAMS_ACTIVE: &str = "tokentap.streams.active";
pub const M_TELEMETRY_DROPPED: &str = "tokentap.telemetry.dropped";
pub const M_SLO_BREACHES: &str = "tokentap.slo.breaches";
pub const M_SLO_BREACHED: &str = "tokentap.slo.breached";
pub const M_SLO_WEBHOOK: &str = "tokentap.slo.webhook.events";
pub const M_CONFIG_RELOADS: &str = "tokentap.config.reloads";
pub const M_DRAINS_ACTIVE: &str = "tokentap.drains.active";
/// Seconds until a served TLS certificate expires (gauge).
pub const M_TLS_CERT_EXPIRY: &str = "tokentap.tls.certificate.expiry";
pub const M_WEBSOCKET_SESSIONS_ACTIVE: &str = "tokentap.websocket.sessions.active";

// WebSocket session span attributes (no GenAI convention covers sessions).
pub const SESSION_RESPONSES: &str = "tokentap.session.responses";
pub const SESSION_INPUT_TOKENS: &str = "tokentap.session.input_tokens";
pub const SESSION_OUTPUT_TOKENS: &str = "tokentap.session.output_tokens";
pub const SESSION_END: &str = "tokentap.session.end";
pub const SESSION_CLOSE_CODE_CLIENT: &str = "tokentap.session.close_code.client";
pub const SESSION_CLOSE_CODE_UPSTREAM: &str = "tokentap.session.close_code.upstream";
pub const SESSION_ERRORS: &str = "tokentap.session.errors";
pub const SESSION_UNMETERED: &str = "tokentap.session.unmetered";
pub const SESSION_BYTES_UP: &str = "tokentap.session.bytes.client_to_upstream";
pub const SESSION_BYTES_DOWN: &str = "tokentap.session.bytes.upstream_to_client";
pub const M_POOL_WAIT: &str = "tokentap.upstream.pool.wait";
pub const M_POOL_CONNECTIONS: &str = "tokentap.upstream.pool.connections";
pub const M_POOL_STREAMS: &str = "tokentap.upstream.pool.streams";
pub const M_POOL_QUEUED: &str = "tokentap.upstream.pool.queued";

// Semantic-convention attribute keys.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_USAGE_CACHE_READ: &str = "gen_ai.usage.cache_read.input_tokens";
pub const GEN_AI_USAGE_CACHE_CREATION: &str = "gen_ai.usage.cache_creation.input_tokens";
pub const GEN_AI_USAGE_REASONING: &str = "gen_ai.usage.reasoning.output_tokens";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
pub const ERROR_TYPE: &str = "error.type";

// tokentap attribute keys.
pub const ROUTE: &str = "tokentap.route";
pub const TENANT: &str = "tokentap.tenant";
pub const OUTCOME: &str = "tokentap.outcome";
/// `tokentap.outcome` of a request that matched no route (answered 404,
/// never forwarded, so it has no route, provider or measurement).
pub const OUTCOME_NO_ROUTE: &str = "no_route";
pub const TOKENS_ESTIMATED: &str = "tokentap.tokens.estimated";
pub const TOKENS_SOURCE: &str = "tokentap.tokens.source";
pub const DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
pub const MAX_STALL: &str = "tokentap.max_stall";
pub const TTFB: &str = "tokentap.ttfb";
/// Time waited for an upstream connection or HTTP/2 stream slot (s).
pub const POOL_WAIT: &str = "tokentap.upstream.pool.wait";
/// The upstream destination a pool gauge describes (`scheme://authority`).
pub const UPSTREAM_HOST: &str = "tokentap.upstream.host";
pub const REQUEST_BODY: &str = "tokentap.request.body";
pub const UNMETERED: &str = "tokentap.unmetered";
pub const UNMETERED_DETAIL: &str = "tokentap.unmetered.detail";
/// Server-reported timings (seconds), beside tokentap's own.
pub const UPSTREAM_TTFT: &str = "tokentap.upstream.ttft";
pub const UPSTREAM_DURATION: &str = "tokentap.upstream.duration";
pub const UPSTREAM_PROMPT_EVAL: &str = "tokentap.upstream.prompt_eval_duration";
pub const UPSTREAM_DECODE: &str = "tokentap.upstream.decode_duration";
pub const UPSTREAM_QUEUE: &str = "tokentap.upstream.queue_duration";
pub const UPSTREAM_LOAD: &str = "tokentap.upstream.load_duration";
/// TTFT the server's own timings do not account for (seconds), and its
/// share of TTFT (0..1).
pub const TTFT_NETWORK_AND_QUEUE: &str = "tokentap.ttft.network_and_queue";
pub const NETWORK_QUEUE_SHARE: &str = "tokentap.network_queue_share";
pub const SIGNAL: &str = "signal";
/// SLO name and objective (`tokentap.slo.*` metrics).
pub const SLO_NAME: &str = "tokentap.slo.name";
pub const SLO_OBJECTIVE: &str = "tokentap.slo.objective";
/// Span attribute: names of the SLOs breached for the request's route and
/// model when it finished.
pub const SLO_BREACHED: &str = "tokentap.slo.breached";
/// `tokentap.slo.webhook.events` result.
pub const SLO_WEBHOOK_RESULT: &str = "tokentap.slo.webhook.result";
/// `tokentap.config.reloads` result: `success` or `failure`.
pub const RELOAD_RESULT: &str = "result";

// Fixed values.
pub const TOKEN_INPUT: &str = "input";
pub const TOKEN_OUTPUT: &str = "output";
/// `gen_ai.operation.name` when the endpoint was not recognised.
pub const OPERATION_UNKNOWN: &str = "unknown";
/// A capped label's value once its cap is reached.
pub const OTHER: &str = "other";
pub const SIGNAL_SPANS: &str = "spans";
pub const SIGNAL_METRICS: &str = "metrics";
/// `tokentap.slo.breaches` model value for SLOs that name no model.
pub const SLO_ALL_MODELS: &str = "*";
pub const RESULT_SENT: &str = "sent";
pub const RESULT_FAILED: &str = "failed";
pub const RESULT_QUEUE_FULL: &str = "queue_full";
pub const RESULT_SUPERSEDED: &str = "superseded";

/// Span event at the first content chunk.
pub const EVENT_FIRST_TOKEN: &str = "first_token";
/// Instrumentation scope name for the tracer and meter.
pub const SCOPE: &str = "tokentap";
