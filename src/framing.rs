//! Framing decoders: response body bytes in, complete frames out.
//!
//! Decoders are pure and incremental: they know nothing about providers,
//! read no clocks, keep only an incomplete tail between chunks, and cap the
//! size of a single frame.

pub mod eventstream;
pub mod json_array;
pub mod ndjson;
pub mod sse;

/// One complete frame, borrowed from the decoder's input or scratch space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A server-sent event. `event` is empty when the stream named none
    /// (the WHATWG default type "message").
    Sse { event: &'a [u8], data: &'a [u8] },
    /// One whole JSON document: a non-streaming body, one NDJSON line, or one
    /// element of a streamed JSON array.
    Json(&'a [u8]),
    /// One AWS eventstream message (`application/vnd.amazon.eventstream`).
    /// `message_type` is the `:message-type` header (`event`, `exception`,
    /// `error`); `event_type` is `:event-type`, or `:exception-type` /
    /// `:error-code` for failures; `payload` is the raw message payload.
    AwsEvent {
        message_type: &'a [u8],
        event_type: &'a [u8],
        payload: &'a [u8],
    },
}

/// Why a decoder gave up on a stream. The bytes still pass through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// A single frame grew past the configured maximum.
    #[error("frame larger than the {limit}-byte limit")]
    TooLarge { limit: usize },
    /// The bytes do not follow the framing's grammar.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}
