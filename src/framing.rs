//! Framing decoders: response body bytes in, complete frames out.
//!
//! Decoders are pure and incremental: they know nothing about providers,
//! read no clocks, keep only an incomplete tail between chunks, and cap the
//! size of a single frame.

pub mod eventstream;
pub mod json_array;
pub mod ndjson;
pub mod sse;
pub mod websocket;

/// One complete frame, borrowed from the decoder's input or scratch space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A server-sent event. `event` is empty when the stream named none
    /// (the WHATWG default type "message").
    Sse {
        /// The event type, empty when the stream named none.
        event: &'a [u8],
        /// The event's data (its `data:` lines joined).
        data: &'a [u8],
    },
    /// One whole JSON document: a non-streaming body, one NDJSON line, or one
    /// element of a streamed JSON array.
    Json(&'a [u8]),
    /// One AWS eventstream message (`application/vnd.amazon.eventstream`).
    AwsEvent {
        /// The `:message-type` header (`event`, `exception`, `error`).
        message_type: &'a [u8],
        /// `:event-type`, or `:exception-type` / `:error-code` for failures.
        event_type: &'a [u8],
        /// The raw message payload.
        payload: &'a [u8],
    },
}

/// Why a decoder gave up on a stream. The bytes still pass through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// A single frame grew past the configured maximum.
    #[error("frame larger than the {limit}-byte limit")]
    TooLarge {
        /// The configured maximum frame size (bytes).
        limit: usize,
    },
    /// The bytes do not follow the framing's grammar.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

/// A decoder's first failure, returned by every later call: a decoder
/// that lost its place in the grammar does not find it again. Each decoder
/// keeps one (`failed`); `Decoder::feed` runs its `feed_inner` through
/// it, and its `finish` checks and keeps it too.
#[derive(Debug, Clone, Default)]
struct Sticky(Option<FramingError>);

impl Sticky {
    /// `Err` with the failure, once there is one.
    fn check(&self) -> Result<(), FramingError> {
        self.0.as_ref().map_or(Ok(()), |e| Err(e.clone()))
    }

    /// Keep `result`'s error, if any, for every later call; `result` back.
    fn keep(&mut self, result: Result<(), FramingError>) -> Result<(), FramingError> {
        if let Err(e) = &result {
            self.0 = Some(e.clone());
        }
        result
    }
}

/// An incremental framing decoder: bytes in any pieces, complete frames out.
pub trait Decoder {
    /// Feed the next piece of the body.
    fn feed(&mut self, chunk: &[u8], on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError>;
    /// The body ended: flush or reject what is left.
    fn finish(&mut self, on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError>;
}

/// `Decoder` for each decoder type: `feed` runs the type's `feed_inner`
/// through its `Sticky` (one place for "the first failure stays").
macro_rules! impl_decoder {
    ($($t:ty),*) => {$(
        impl Decoder for $t {
            /// Feed one chunk; `on` is called for every frame completed by it.
            fn feed(&mut self, chunk: &[u8], on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
                self.failed.check()?;
                let result = self.feed_inner(chunk, on);
                self.failed.keep(result)
            }
            fn finish(&mut self, on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
                <$t>::finish(self, on)
            }
        }
    )*};
}

impl_decoder!(
    sse::SseDecoder,
    ndjson::NdjsonDecoder,
    json_array::JsonArrayDecoder,
    eventstream::EventStreamDecoder
);

/// Test driver shared by every decoder: the same input fed whole, split in
/// two at every offset, and byte by byte must give the same frames.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Decoder, Frame, FramingError};

    /// Feed `pieces` in order, then finish; frames rendered by `render`, and the first error.
    pub(crate) fn decode<D: Decoder, T>(
        mut dec: D,
        pieces: &[&[u8]],
        render: fn(Frame<'_>) -> T,
    ) -> (Vec<T>, Result<(), FramingError>) {
        let mut frames = Vec::new();
        let mut on = |f: Frame<'_>| frames.push(render(f));
        for piece in pieces {
            if let Err(e) = dec.feed(piece, &mut on) {
                return (frames, Err(e));
            }
        }
        let result = dec.finish(&mut on);
        (frames, result)
    }

    /// Decode `input` whole, at every two-piece split, and byte by byte;
    /// all must agree. Returns the whole-input result.
    pub(crate) fn decode_all_ways<D: Decoder, T: PartialEq + std::fmt::Debug>(
        make: impl Fn() -> D,
        input: &[u8],
        render: fn(Frame<'_>) -> T,
    ) -> (Vec<T>, Result<(), FramingError>) {
        all_ways(input, |pieces| decode(make(), pieces, render))
    }

    /// `run` over `input` whole, at every two-piece split, and byte by
    /// byte; all must agree. Returns the whole-input result.
    #[track_caller]
    pub(crate) fn all_ways<T: PartialEq + std::fmt::Debug>(
        input: &[u8],
        run: impl Fn(&[&[u8]]) -> T,
    ) -> T {
        let whole = run(&[input]);
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            assert_eq!(
                run(&[a, b]),
                whole,
                "split at {at} differs from whole input"
            );
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(&bytes), whole, "byte-by-byte differs from whole input");
        whole
    }

    /// `decode_all_ways`, asserting the input decodes without error.
    #[track_caller]
    pub(crate) fn frames_ok<D: Decoder, T: PartialEq + std::fmt::Debug>(
        make: impl Fn() -> D,
        input: &[u8],
        render: fn(Frame<'_>) -> T,
    ) -> Vec<T> {
        let (frames, result) = decode_all_ways(make, input, render);
        assert_eq!(result, Ok(()), "expected no error for {:?}", text(input));
        frames
    }

    /// Feed `chunk` whole: every byte slice of every frame it completes
    /// must borrow from the chunk (nothing copied). The number of frames.
    pub(crate) fn borrowed_frames<D: Decoder>(dec: &mut D, chunk: &[u8]) -> usize {
        let range = chunk.as_ptr_range();
        let mut borrowed = 0;
        dec.feed(chunk, &mut |f| {
            let parts = match f {
                Frame::Sse { event, data } => vec![event, data],
                Frame::Json(doc) => vec![doc],
                Frame::AwsEvent {
                    message_type,
                    event_type,
                    payload,
                } => vec![message_type, event_type, payload],
            };
            for part in parts.into_iter().filter(|p| !p.is_empty()) {
                assert!(
                    range.contains(&part.as_ptr()),
                    "frame should borrow the chunk"
                );
            }
            borrowed += 1;
        })
        .expect("valid stream");
        borrowed
    }

    /// `first` fails `dec` with `err`; a later `feed` of `second` and
    /// `finish` return that same failure.
    #[track_caller]
    pub(crate) fn assert_stays_failed<D: Decoder>(
        dec: &mut D,
        first: &[u8],
        second: &[u8],
        err: FramingError,
    ) {
        let mut on = |_: Frame<'_>| {};
        assert_eq!(dec.feed(first, &mut on), Err(err.clone()), "fails");
        assert_eq!(dec.feed(second, &mut on), Err(err.clone()), "stays failed");
        assert_eq!(dec.finish(&mut on), Err(err), "finish too");
    }

    /// A `Frame::Json` as text (NDJSON lines, JSON array elements).
    pub(crate) fn json(f: Frame<'_>) -> String {
        match f {
            Frame::Json(doc) => text(doc),
            other => panic!("expected a JSON frame, got {other:?}"),
        }
    }

    /// Owned copies of `items`, to compare with frames rendered as text.
    pub(crate) fn strs(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Lossy text of a byte slice, for readable assertions.
    pub(crate) fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }
}
