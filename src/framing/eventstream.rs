//! AWS eventstream framing: `application/vnd.amazon.eventstream` bytes in,
//! one `Frame::AwsEvent` per message out.
//!
//! A message is a 12-byte prelude (total length, headers length, CRC32 of
//! the first 8 bytes; big-endian), the headers, the payload, and a CRC32 of
//! everything before it (IEEE polynomial). Both CRCs are checked; every
//! header value type is parsed and length-checked, though only
//! `:message-type`, `:event-type`, `:exception-type` and `:error-code` are
//! kept. All slicing is checked: hostile bytes give `Malformed`, never a
//! panic.
//!
//! A message whose prelude is sound but whose message CRC or headers are
//! not is skipped and counted (`skipped`): its length is known, so the next
//! message starts right after it. A bad prelude (CRC, lengths) or an
//! oversized message ends the stream, since nothing says where the next
//! message starts.
//!
//! A message wholly inside the current chunk is borrowed from it. Otherwise
//! its bytes are gathered in a reused buffer, reserved once for the declared
//! length after the prelude passed its CRC and the size cap.

use super::{Frame, FramingError};

const PRELUDE_LEN: usize = 12;
const CRC_LEN: usize = 4;
/// A message with no headers and no payload.
const MIN_MESSAGE_LEN: usize = PRELUDE_LEN + CRC_LEN;

/// `:message-type` when a message carries none.
const DEFAULT_MESSAGE_TYPE: &[u8] = b"event";

/// Incremental AWS eventstream decoder with a cap on message size.
#[derive(Debug)]
pub struct EventStreamDecoder {
    max: usize,
    /// The incomplete message carried over from earlier chunks.
    buf: Vec<u8>,
    /// The buffered message's declared total length, once its prelude is in.
    total: usize,
    /// Set once the decoder failed; every later call returns it.
    pub(super) failed: super::Sticky,
    /// Messages skipped because their CRC or headers were bad.
    skipped: u64,
}

impl EventStreamDecoder {
    /// A decoder that rejects messages whose declared total length exceeds
    /// `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        EventStreamDecoder {
            max: max_message_bytes,
            buf: Vec::new(),
            total: 0,
            failed: super::Sticky::default(),
            skipped: 0,
        }
    }

    /// Messages skipped so far: a sound prelude, but a bad message CRC or
    /// bad headers.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// End of body: a message cut short is malformed. The decoder is reset
    /// for reuse.
    pub fn finish(&mut self, _on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        self.failed.check()?;
        if !self.buf.is_empty() {
            let e = FramingError::Malformed("eventstream message truncated");
            return self.failed.keep(Err(e));
        }
        self.total = 0;
        Ok(())
    }

    /// `Decoder::feed`'s work, before its `Sticky` keeps the outcome.
    pub(super) fn feed_inner(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        let mut rest = chunk;
        if !self.buf.is_empty() {
            rest = self.fill(rest, on)?;
        }
        // Either the buffer is empty now or the chunk is used up.
        while let Some(prelude) = rest.first_chunk::<PRELUDE_LEN>() {
            let total = check_prelude(prelude, self.max)?;
            let Some((message, after)) = rest.split_at_checked(total) else {
                break;
            };
            self.skipped += u64::from(emit(message, on).is_err());
            rest = after;
        }
        if !rest.is_empty() {
            self.fill(rest, on)?;
        }
        Ok(())
    }

    /// Move bytes from `rest` into the buffered message, emitting it when
    /// complete; returns what is left of `rest`.
    fn fill<'c>(
        &mut self,
        mut rest: &'c [u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<&'c [u8], FramingError> {
        if self.buf.len() < PRELUDE_LEN {
            let (head, tail) = rest.split_at(rest.len().min(PRELUDE_LEN - self.buf.len()));
            self.buf.extend_from_slice(head);
            rest = tail;
            let Some(prelude) = self.buf.first_chunk::<PRELUDE_LEN>() else {
                return Ok(rest);
            };
            self.total = check_prelude(prelude, self.max)?;
            self.buf.reserve_exact(self.total - PRELUDE_LEN);
        }
        let (head, tail) = rest.split_at(rest.len().min(self.total - self.buf.len()));
        self.buf.extend_from_slice(head);
        if self.buf.len() == self.total {
            self.skipped += u64::from(emit(&self.buf, on).is_err());
            self.buf.clear();
        }
        Ok(tail)
    }
}

/// Validate a prelude; the message's total length.
fn check_prelude(prelude: &[u8; PRELUDE_LEN], max: usize) -> Result<usize, FramingError> {
    let [t0, t1, t2, t3, h0, h1, h2, h3, c0, c1, c2, c3] = *prelude;
    let crc = u32::from_be_bytes([c0, c1, c2, c3]);
    if crc32fast::hash(&[t0, t1, t2, t3, h0, h1, h2, h3]) != crc {
        return Err(FramingError::Malformed("eventstream prelude CRC mismatch"));
    }
    let total = u32::from_be_bytes([t0, t1, t2, t3]) as usize;
    let headers = u32::from_be_bytes([h0, h1, h2, h3]) as usize;
    if total < MIN_MESSAGE_LEN {
        return Err(FramingError::Malformed(
            "eventstream message shorter than 16 bytes",
        ));
    }
    if total > max {
        return Err(FramingError::TooLarge { limit: max });
    }
    if headers > total - MIN_MESSAGE_LEN {
        return Err(FramingError::Malformed(
            "eventstream headers longer than the message",
        ));
    }
    Ok(total)
}

/// Check a complete message's CRC, parse its headers, and emit it. An
/// error here concerns this message only (its length was already checked).
fn emit(message: &[u8], on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
    const SHORT: FramingError =
        FramingError::Malformed("eventstream message shorter than its prelude says");
    let (covered, crc) = message.split_last_chunk::<CRC_LEN>().ok_or(SHORT)?;
    if crc32fast::hash(covered) != u32::from_be_bytes(*crc) {
        return Err(FramingError::Malformed("eventstream message CRC mismatch"));
    }
    let (prelude, rest) = covered.split_first_chunk::<PRELUDE_LEN>().ok_or(SHORT)?;
    let [_, _, _, _, h0, h1, h2, h3, ..] = *prelude;
    let headers_len = u32::from_be_bytes([h0, h1, h2, h3]) as usize;
    let (headers, payload) = rest.split_at_checked(headers_len).ok_or(SHORT)?;
    let headers = Headers::parse(headers)?;
    let message_type = headers.message_type.unwrap_or(DEFAULT_MESSAGE_TYPE);
    let event_type = match message_type {
        b"exception" => headers.exception_type,
        b"error" => headers.error_code,
        _ => headers.event_type,
    };
    on(Frame::AwsEvent {
        message_type,
        event_type: event_type.unwrap_or_default(),
        payload,
    });
    Ok(())
}

/// The headers a frame needs, borrowed from the message.
#[derive(Default)]
struct Headers<'a> {
    message_type: Option<&'a [u8]>,
    event_type: Option<&'a [u8]>,
    exception_type: Option<&'a [u8]>,
    error_code: Option<&'a [u8]>,
}

const HEADER_TRUNCATED: FramingError = FramingError::Malformed("eventstream header truncated");

impl<'a> Headers<'a> {
    /// Walk every header, checking each value's length for its type.
    fn parse(mut rest: &'a [u8]) -> Result<Headers<'a>, FramingError> {
        let mut headers = Headers::default();
        while let Some((&name_len, after)) = rest.split_first() {
            if name_len == 0 {
                return Err(FramingError::Malformed("eventstream header name is empty"));
            }
            let (name, after) = take(after, usize::from(name_len))?;
            let (&kind, after) = after.split_first().ok_or(HEADER_TRUNCATED)?;
            let (value, after) = match kind {
                0 | 1 => (&[][..], after),
                2 => take(after, 1)?,
                3 => take(after, 2)?,
                4 => take(after, 4)?,
                5 | 8 => take(after, 8)?,
                9 => take(after, 16)?,
                6 | 7 => {
                    let (len, after) = after.split_first_chunk::<2>().ok_or(HEADER_TRUNCATED)?;
                    take(after, usize::from(u16::from_be_bytes(*len)))?
                }
                _ => {
                    return Err(FramingError::Malformed(
                        "eventstream header has an unknown value type",
                    ));
                }
            };
            if kind == 7 {
                if std::str::from_utf8(value).is_err() {
                    return Err(FramingError::Malformed(
                        "eventstream string header is not UTF-8",
                    ));
                }
                let slot = match name {
                    b":message-type" => Some(&mut headers.message_type),
                    b":event-type" => Some(&mut headers.event_type),
                    b":exception-type" => Some(&mut headers.exception_type),
                    b":error-code" => Some(&mut headers.error_code),
                    _ => None,
                };
                if let Some(slot) = slot {
                    *slot = Some(value);
                }
            }
            rest = after;
        }
        Ok(headers)
    }
}

/// Split `n` bytes off the front of `bytes`.
fn take(bytes: &[u8], n: usize) -> Result<(&[u8], &[u8]), FramingError> {
    bytes.split_at_checked(n).ok_or(HEADER_TRUNCATED)
}

/// A header value, for [`encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderValue<'a> {
    /// `bool`, encoded in the type byte alone.
    Bool(bool),
    /// Signed 8-bit integer.
    Byte(i8),
    /// Signed 16-bit integer.
    Short(i16),
    /// Signed 32-bit integer.
    Integer(i32),
    /// Signed 64-bit integer.
    Long(i64),
    /// Length-prefixed raw bytes.
    ByteArray(&'a [u8]),
    /// Length-prefixed UTF-8 text.
    String(&'a str),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    /// A 16-byte UUID.
    Uuid([u8; 16]),
}

/// A fixed-size header value: its type byte, then its bytes.
fn fixed(head: &mut Vec<u8>, kind: u8, bytes: &[u8]) {
    head.push(kind);
    head.extend_from_slice(bytes);
}

/// Append one eventstream message to `out`; for simulated upstreams and
/// tests. Fails when a header name or value is too long for the format.
pub fn encode(
    headers: &[(&str, HeaderValue<'_>)],
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), FramingError> {
    const TOO_LONG: FramingError = FramingError::Malformed("eventstream header too long to encode");
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(u8::try_from(name.len()).map_err(|_| TOO_LONG)?);
        head.extend_from_slice(name.as_bytes());
        let mut var = |kind: u8, bytes: &[u8]| -> Result<(), FramingError> {
            head.push(kind);
            head.extend_from_slice(
                &u16::try_from(bytes.len())
                    .map_err(|_| TOO_LONG)?
                    .to_be_bytes(),
            );
            head.extend_from_slice(bytes);
            Ok(())
        };
        match *value {
            HeaderValue::ByteArray(b) => var(6, b)?,
            HeaderValue::String(s) => var(7, s.as_bytes())?,
            HeaderValue::Bool(b) => head.push(if b { 0 } else { 1 }),
            HeaderValue::Byte(v) => fixed(&mut head, 2, &v.to_be_bytes()),
            HeaderValue::Short(v) => fixed(&mut head, 3, &v.to_be_bytes()),
            HeaderValue::Integer(v) => fixed(&mut head, 4, &v.to_be_bytes()),
            HeaderValue::Long(v) => fixed(&mut head, 5, &v.to_be_bytes()),
            HeaderValue::Timestamp(v) => fixed(&mut head, 8, &v.to_be_bytes()),
            HeaderValue::Uuid(v) => fixed(&mut head, 9, &v),
        }
    }
    let too_large = FramingError::TooLarge {
        limit: u32::MAX as usize,
    };
    let total = u32::try_from(MIN_MESSAGE_LEN + head.len() + payload.len())
        .map_err(|_| too_large.clone())?;
    let headers_len = u32::try_from(head.len()).map_err(|_| too_large)?;
    let start = out.len();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&headers_len.to_be_bytes());
    let prelude_crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&message_crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests;
