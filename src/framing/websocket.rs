//! WebSocket side view (RFC 6455, RFC 7692): copies of the bytes one peer
//! sent on a relayed WebSocket in, complete messages out.
//!
//! tokentap never terminates a WebSocket: it relays the bytes both ways
//! untouched and feeds a copy of each direction to one [`WsDecoder`], so the
//! provider layer can read the text messages. The decoder walks frames
//! (7/16/64-bit lengths, masking, fragments, interleaved control frames),
//! unmasks, reassembles and inflates (permessage-deflate), and hands out
//! whole messages. A protocol violation is an error after which the decoder
//! refuses further input; the relay keeps relaying and stops metering.
//!
//! Memory is bounded per direction: a frame header (≤ 14 bytes), one control
//! frame body (≤ 125 bytes), and one reassembly buffer that never grows past
//! `max_message + 1` bytes (the extra byte tells an inflated message that
//! overflows from one that fits exactly). A larger data message is walked
//! but not kept and comes out as [`WsMessage::Skipped`]; with deflate context
//! takeover it is still inflated, into a small stack buffer that is thrown
//! away, so the sliding window stays right for the messages after it. The
//! inflater (when deflate was negotiated) is created once, not per message.
//!
//! With [`WsDecoder::skip_opaque_binary`], a binary message whose first
//! payload byte (unmasked, inflated) cannot start a JSON object or array —
//! raw audio, say — is walked the same way, never kept or reassembled,
//! and comes out as [`WsMessage::Opaque`].
//!
//! Inflating always uses a 32 KiB (15-bit) window: the default `flate2`
//! backend (miniz_oxide) cannot be told a smaller one, and a larger window
//! inflates any stream compressed with a smaller one correctly, so the
//! negotiated `max_window_bits` is validated but only costs memory that is
//! already spent.

use flate2::{Decompress, FlushDecompress, Status};

use super::FramingError;

/// Which peer sent the bytes: client frames must be masked (RFC 6455 §5.1),
/// server frames must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The peer that opened the WebSocket (its frames are masked).
    Client,
    /// The upstream (its frames are not masked).
    Server,
}

/// permessage-deflate parameters for inflating the messages ONE sender
/// compressed (RFC 7692).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deflate {
    /// The sender starts a fresh DEFLATE window for every message.
    pub no_context_takeover: bool,
    /// The sender's LZ77 window size, 8..=15 (inflating uses 15 regardless).
    pub max_window_bits: u8,
}

impl Default for Deflate {
    /// What an extension offer without parameters means: context takeover, 15 bits.
    fn default() -> Self {
        Deflate {
            no_context_takeover: false,
            max_window_bits: 15,
        }
    }
}

/// One thing a [`WsDecoder`] saw, borrowed from its input or scratch space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsMessage<'a> {
    /// A complete text message: reassembled from fragments, unmasked,
    /// inflated. Not checked for UTF-8 (the relay forwards it regardless).
    Text(&'a [u8]),
    /// A complete binary message (same treatment).
    Binary(&'a [u8]),
    /// A close frame: status code if present, reason bytes.
    Close {
        /// Status code, when the frame carries one.
        code: Option<u16>,
        /// Reason bytes after the code, possibly empty.
        reason: &'a [u8],
    },
    /// A ping frame (its payload is not kept).
    Ping,
    /// A pong frame (its payload is not kept).
    Pong,
    /// A data message larger than `max_message` (before or after inflating):
    /// not handed out, but its frames are still walked so later messages
    /// decode. `len` = the message's payload bytes on the wire (the
    /// compressed size when compressed).
    Skipped {
        /// Payload bytes of the skipped message on the wire.
        len: u64,
    },
    /// A binary message that is not JSON (its first payload byte is not
    /// `{`, `[` or whitespace; an empty one too), when the decoder was told
    /// to skip those ([`WsDecoder::skip_opaque_binary`]): walked like
    /// [`WsMessage::Skipped`], never kept. `len` as there.
    Opaque {
        /// Payload bytes of the message on the wire.
        len: u64,
    },
}

/// The longest frame header: 2 bytes, a 64-bit length, a masking key.
const MAX_HEADER: usize = 14;
/// The longest control frame payload (RFC 6455 §5.5).
const MAX_CONTROL: usize = 125;
/// What RFC 7692 §7.2.2 strips from the end of each compressed message.
const DEFLATE_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
/// Stack scratch for unmasking compressed bytes and for inflated bytes that
/// are thrown away.
const SCRATCH: usize = 4096;
/// The first size the reassembly buffer grows to for inflated output.
const MIN_INFLATE_GROWTH: usize = 1024;

const FIN: u8 = 0x80;
const RSV1: u8 = 0x40;
const RSV23: u8 = 0x30;
const MASKED: u8 = 0x80;

/// What a frame carries, from its opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Op {
    fn from_opcode(opcode: u8) -> Result<Op, FramingError> {
        Ok(match opcode {
            0x0 => Op::Continuation,
            0x1 => Op::Text,
            0x2 => Op::Binary,
            0x8 => Op::Close,
            0x9 => Op::Ping,
            0xA => Op::Pong,
            _ => {
                return Err(FramingError::Malformed(
                    "websocket frame has a reserved opcode",
                ));
            }
        })
    }

    fn is_control(self) -> bool {
        matches!(self, Op::Close | Op::Ping | Op::Pong)
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy)]
struct Head {
    fin: bool,
    rsv1: bool,
    op: Op,
    mask: Option<[u8; 4]>,
    len: u64,
}

/// The frame whose payload is being read.
#[derive(Debug, Clone, Copy)]
struct FrameState {
    op: Op,
    fin: bool,
    remaining: u64,
    mask: Option<[u8; 4]>,
    /// Payload bytes read so far, modulo 4: where the masking key resumes.
    phase: usize,
}

/// The data message being reassembled (across fragments).
#[derive(Debug, Default)]
struct Message {
    active: bool,
    binary: bool,
    compressed: bool,
    /// Over the cap: bytes are walked (and inflated only to keep the window) but not kept.
    skipping: bool,
    /// A binary message whose first payload byte is still to be seen, with
    /// opaque binary being skipped: nothing is kept until it is.
    undecided: bool,
    /// A binary message that is not JSON: skipped (`skipping` is set too).
    opaque: bool,
    /// Payload bytes on the wire so far.
    wire: u64,
    /// Bytes of the message in the reassembly buffer.
    filled: usize,
    /// The DEFLATE stream hit a final block (BFINAL) inside this message.
    stream_ended: bool,
}

/// The inflater for one sender's compressed messages.
struct Inflater {
    z: Decompress,
    no_context_takeover: bool,
    /// A message ended its DEFLATE stream under context takeover, so the
    /// window cannot be carried to the next compressed message.
    window_lost: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("no_context_takeover", &self.no_context_takeover)
            .field("window_lost", &self.window_lost)
            .finish_non_exhaustive()
    }
}

/// Incremental decoder for one direction of a relayed WebSocket.
#[derive(Debug)]
pub struct WsDecoder {
    sender: Sender,
    max: usize,
    inflater: Option<Inflater>,
    /// A frame header cut by a chunk boundary.
    head: [u8; MAX_HEADER],
    head_len: usize,
    frame: Option<FrameState>,
    msg: Message,
    /// The control frame being read (control frames interleave with fragments).
    ctrl: [u8; MAX_CONTROL],
    ctrl_len: usize,
    /// Reassembly (and unmasking, inflating) buffer; its length is the
    /// high-water mark of initialised bytes, at most `max + 1`.
    buf: Vec<u8>,
    /// Set once the decoder failed; every later call returns it.
    failed: super::Sticky,
    /// Skip binary messages that are not JSON (`skip_opaque_binary`).
    skip_opaque: bool,
}

impl WsDecoder {
    /// `max_message`: the largest (reassembled, inflated) data message
    /// handed out for metering; `deflate`: what this sender negotiated.
    pub fn new(sender: Sender, max_message: usize, deflate: Option<Deflate>) -> WsDecoder {
        WsDecoder {
            sender,
            max: max_message,
            inflater: deflate.map(|d| Inflater {
                z: Decompress::new(false),
                no_context_takeover: d.no_context_takeover,
                window_lost: false,
            }),
            head: [0; MAX_HEADER],
            head_len: 0,
            frame: None,
            msg: Message::default(),
            ctrl: [0; MAX_CONTROL],
            ctrl_len: 0,
            buf: Vec::new(),
            failed: super::Sticky::default(),
            skip_opaque: false,
        }
    }

    /// Skip binary messages that cannot be JSON (first payload byte not
    /// `{`, `[` or whitespace) without copying or reassembling them: they
    /// come out as [`WsMessage::Opaque`]. For readers that only read JSON,
    /// on a session that may carry raw audio frames.
    pub fn skip_opaque_binary(mut self) -> WsDecoder {
        self.skip_opaque = true;
        self
    }

    /// Feed the next bytes seen in this direction (any split); `on` is called
    /// for every message or control frame they complete.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(WsMessage<'_>),
    ) -> Result<(), FramingError> {
        self.failed.check()?;
        let result = self.feed_inner(chunk, on);
        self.failed.keep(result)
    }

    /// Bytes of message data this decoder holds on to (its reassembly
    /// buffer): at most `max_message + 1`.
    pub fn retained_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// The stream ended (the connection closed): an error when it stopped
    /// inside a frame or inside a fragmented message.
    pub fn finish(&mut self) -> Result<(), FramingError> {
        self.failed.check()?;
        if self.head_len > 0 || self.frame.is_some() || self.msg.active {
            let e = FramingError::Malformed("websocket stream ended inside a frame or message");
            return self.failed.keep(Err(e));
        }
        Ok(())
    }

    fn feed_inner(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(WsMessage<'_>),
    ) -> Result<(), FramingError> {
        let mut rest = chunk;
        loop {
            let Some(mut frame) = self.frame else {
                let Some(head) = self.take_head(&mut rest)? else {
                    return Ok(());
                };
                self.check_head(&head)?;
                if let Some(payload) = self.whole_frame(&head, rest) {
                    rest = &rest[payload.len()..];
                    self.emit_whole(&head, payload, on);
                } else {
                    self.start_frame(&head)?;
                }
                continue;
            };
            if frame.remaining == 0 {
                self.frame = None;
                self.end_frame(&frame, on)?;
                continue;
            }
            if rest.is_empty() {
                return Ok(());
            }
            let n = usize::try_from(frame.remaining).map_or(rest.len(), |r| r.min(rest.len()));
            let (part, after) = rest.split_at(n);
            self.payload(&frame, part)?;
            frame.remaining -= n as u64;
            frame.phase = (frame.phase + n) % 4;
            self.frame = Some(frame);
            rest = after;
        }
    }

    /// The next frame header, parsed straight from `rest` when it is all
    /// there, else gathered across chunks; `None` when `rest` ran out first.
    fn take_head(&mut self, rest: &mut &[u8]) -> Result<Option<Head>, FramingError> {
        if self.head_len == 0
            && let Some((head, n)) = parse_head(rest)?
        {
            *rest = &rest[n..];
            return Ok(Some(head));
        }
        loop {
            let need = head_len(&self.head[..self.head_len]);
            if self.head_len >= need {
                break;
            }
            let n = (need - self.head_len).min(rest.len());
            if n == 0 {
                return Ok(None);
            }
            self.head[self.head_len..self.head_len + n].copy_from_slice(&rest[..n]);
            self.head_len += n;
            *rest = &rest[n..];
        }
        let parsed = parse_head(&self.head[..self.head_len])?;
        self.head_len = 0;
        Ok(parsed.map(|(head, _)| head))
    }

    /// Reject what RFC 6455 (and RFC 7692) forbid in this header here.
    fn check_head(&mut self, head: &Head) -> Result<(), FramingError> {
        match (self.sender, head.mask.is_some()) {
            (Sender::Client, false) => {
                return Err(FramingError::Malformed(
                    "websocket client frame is not masked",
                ));
            }
            (Sender::Server, true) => {
                return Err(FramingError::Malformed("websocket server frame is masked"));
            }
            _ => {}
        }
        if head.op.is_control() {
            if !head.fin {
                return Err(FramingError::Malformed(
                    "websocket control frame is fragmented",
                ));
            }
            if head.len > MAX_CONTROL as u64 {
                return Err(FramingError::Malformed(
                    "websocket control frame longer than 125 bytes",
                ));
            }
            if head.rsv1 {
                return Err(FramingError::Malformed(
                    "websocket control frame has RSV1 set",
                ));
            }
            if head.op == Op::Close && head.len == 1 {
                return Err(FramingError::Malformed(
                    "websocket close frame with a 1-byte body",
                ));
            }
            return Ok(());
        }
        if head.op == Op::Continuation {
            if !self.msg.active {
                return Err(FramingError::Malformed(
                    "websocket continuation frame without a message to continue",
                ));
            }
            if head.rsv1 {
                return Err(FramingError::Malformed(
                    "websocket continuation frame has RSV1 set",
                ));
            }
            return Ok(());
        }
        if self.msg.active {
            return Err(FramingError::Malformed(
                "websocket data frame starts a new message inside a fragmented one",
            ));
        }
        if head.rsv1 {
            let Some(inflater) = &self.inflater else {
                return Err(FramingError::Malformed(
                    "websocket frame has RSV1 set but permessage-deflate was not negotiated",
                ));
            };
            if inflater.window_lost {
                return Err(FramingError::Malformed(
                    "permessage-deflate stream ended (BFINAL) under context takeover; \
                     its window cannot be carried to the next message",
                ));
            }
        }
        Ok(())
    }

    /// The payload of a single-frame, uncompressed message that fits the cap
    /// and lies wholly in `rest`: the common case, handed out without copying
    /// (server) or after unmasking into the reused buffer (client).
    fn whole_frame<'c>(&self, head: &Head, rest: &'c [u8]) -> Option<&'c [u8]> {
        let len = usize::try_from(head.len).ok()?;
        let data = matches!(head.op, Op::Text | Op::Binary);
        if !data || !head.fin || head.rsv1 || len > self.max {
            return None;
        }
        rest.get(..len)
    }

    fn emit_whole(&mut self, head: &Head, payload: &[u8], on: &mut dyn FnMut(WsMessage<'_>)) {
        if head.op == Op::Binary && self.skip_opaque {
            let mask = head.mask.map_or(0, |m| m[0]);
            if !payload.first().is_some_and(|&b| json_start(b ^ mask)) {
                on(WsMessage::Opaque { len: head.len });
                return;
            }
        }
        let bytes = match head.mask {
            None => payload,
            Some(mask) => {
                grow(&mut self.buf, payload.len(), self.max);
                let out = &mut self.buf[..payload.len()];
                out.copy_from_slice(payload);
                unmask(out, mask, 0);
                out
            }
        };
        on(if head.op == Op::Binary {
            WsMessage::Binary(bytes)
        } else {
            WsMessage::Text(bytes)
        });
    }

    /// Set up for reading a frame's payload: message state and the cap.
    fn start_frame(&mut self, head: &Head) -> Result<(), FramingError> {
        self.frame = Some(FrameState {
            op: head.op,
            fin: head.fin,
            remaining: head.len,
            mask: head.mask,
            phase: 0,
        });
        if head.op.is_control() {
            self.ctrl_len = 0;
            return Ok(());
        }
        if head.op != Op::Continuation {
            let binary = head.op == Op::Binary;
            self.msg = Message {
                active: true,
                binary,
                compressed: head.rsv1,
                undecided: binary && self.skip_opaque,
                ..Message::default()
            };
        }
        let msg = &mut self.msg;
        msg.wire = msg.wire.saturating_add(head.len);
        if msg.skipping {
            return Ok(());
        }
        // A compressed message is capped on its wire size here and on its
        // inflated size while inflating.
        let kept = if msg.compressed {
            msg.wire
        } else {
            (msg.filled as u64).saturating_add(head.len)
        };
        if kept > self.max as u64 {
            msg.skipping = true;
            msg.filled = 0;
        } else if !msg.compressed && !msg.undecided {
            // Fits the cap, so this stays within `max` bytes.
            grow(&mut self.buf, msg.filled + head.len as usize, self.max);
        }
        Ok(())
    }

    /// Consume part of the current frame's payload.
    fn payload(&mut self, frame: &FrameState, part: &[u8]) -> Result<(), FramingError> {
        if frame.op.is_control() {
            let end = self.ctrl_len + part.len();
            let out = self
                .ctrl
                .get_mut(self.ctrl_len..end)
                .ok_or(FramingError::Malformed("websocket control frame overran"))?;
            out.copy_from_slice(part);
            if let Some(mask) = frame.mask {
                unmask(out, mask, frame.phase);
            }
            self.ctrl_len = end;
            return Ok(());
        }
        if !self.msg.compressed {
            if self.msg.undecided
                && let Some(&first) = part.first()
            {
                self.msg.undecided = false;
                let mask = frame.mask.map_or(0, |m| m[frame.phase]);
                if !json_start(first ^ mask) {
                    self.msg.opaque = true;
                    self.msg.skipping = true;
                } else if !self.msg.skipping {
                    // The frame was checked against the cap when it started.
                    let len = self.msg.filled as u64 + frame.remaining;
                    grow(
                        &mut self.buf,
                        usize::try_from(len).unwrap_or(self.max),
                        self.max,
                    );
                }
            }
            if self.msg.skipping {
                return Ok(());
            }
            let end = self.msg.filled + part.len();
            let out = self
                .buf
                .get_mut(self.msg.filled..end)
                .ok_or(FramingError::Malformed(
                    "websocket message overran its buffer",
                ))?;
            out.copy_from_slice(part);
            if let Some(mask) = frame.mask {
                unmask(out, mask, frame.phase);
            }
            self.msg.filled = end;
            return Ok(());
        }
        let Some(inflater) = self.inflater.as_mut() else {
            return Err(FramingError::Malformed(
                "websocket compressed frame without permessage-deflate",
            ));
        };
        if self.msg.skipping && inflater.no_context_takeover {
            // Nothing later depends on this message's bytes.
            return Ok(());
        }
        match frame.mask {
            None => inflater.inflate(part, &mut self.msg, &mut self.buf, self.max),
            Some(mask) => {
                let mut scratch = [0u8; SCRATCH];
                let mut phase = frame.phase;
                for piece in part.chunks(SCRATCH) {
                    let bytes = &mut scratch[..piece.len()];
                    bytes.copy_from_slice(piece);
                    unmask(bytes, mask, phase);
                    phase = (phase + piece.len()) % 4;
                    inflater.inflate(bytes, &mut self.msg, &mut self.buf, self.max)?;
                }
                Ok(())
            }
        }
    }

    /// A frame's payload is complete.
    fn end_frame(
        &mut self,
        frame: &FrameState,
        on: &mut dyn FnMut(WsMessage<'_>),
    ) -> Result<(), FramingError> {
        let body = &self.ctrl[..self.ctrl_len];
        match frame.op {
            Op::Close => {
                let (code, reason) = match body.split_first_chunk::<2>() {
                    Some((code, reason)) => (Some(u16::from_be_bytes(*code)), reason),
                    None => (None, &[][..]),
                };
                on(WsMessage::Close { code, reason });
            }
            Op::Ping => on(WsMessage::Ping),
            Op::Pong => on(WsMessage::Pong),
            Op::Text | Op::Binary | Op::Continuation if frame.fin => self.end_message(on)?,
            Op::Text | Op::Binary | Op::Continuation => {}
        }
        Ok(())
    }

    /// The last frame of a data message is in: finish inflating, hand it out.
    fn end_message(&mut self, on: &mut dyn FnMut(WsMessage<'_>)) -> Result<(), FramingError> {
        if self.msg.compressed {
            let Some(inflater) = self.inflater.as_mut() else {
                return Err(FramingError::Malformed(
                    "websocket compressed frame without permessage-deflate",
                ));
            };
            let walked = !(self.msg.skipping && inflater.no_context_takeover);
            if walked && !self.msg.stream_ended {
                inflater.inflate(&DEFLATE_TAIL, &mut self.msg, &mut self.buf, self.max)?;
            }
            if inflater.no_context_takeover {
                inflater.z.reset(false);
            } else if self.msg.stream_ended {
                inflater.window_lost = true;
            }
        }
        let msg = std::mem::take(&mut self.msg);
        let bytes = self.buf.get(..msg.filled).unwrap_or_default();
        // Still `undecided` and not skipped: there was no payload byte.
        on(if msg.opaque || (msg.undecided && !msg.skipping) {
            WsMessage::Opaque { len: msg.wire }
        } else if msg.skipping {
            WsMessage::Skipped { len: msg.wire }
        } else if msg.binary {
            WsMessage::Binary(bytes)
        } else {
            WsMessage::Text(bytes)
        });
        Ok(())
    }
}

impl Inflater {
    /// Inflate `input` into the reassembly buffer (up to `max + 1` bytes), or
    /// into a discarded scratch buffer once the message is being skipped.
    fn inflate(
        &mut self,
        mut input: &[u8],
        msg: &mut Message,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), FramingError> {
        let mut discard = [0u8; SCRATCH];
        let mut output_full = false;
        while !input.is_empty() || output_full {
            if msg.stream_ended {
                return Err(FramingError::Malformed(
                    "permessage-deflate data after the final DEFLATE block",
                ));
            }
            let out: &mut [u8] = if msg.skipping {
                &mut discard
            } else {
                let limit = max.saturating_add(1);
                if msg.filled == buf.len() {
                    let grown = buf.len().saturating_mul(2).max(MIN_INFLATE_GROWTH);
                    grow(buf, grown.min(limit), limit);
                }
                let end = buf.len().min(limit);
                buf.get_mut(msg.filled..end).unwrap_or_default()
            };
            let (in_before, out_before) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(input, out, FlushDecompress::None)
                .map_err(|_| {
                    FramingError::Malformed("permessage-deflate data is not valid DEFLATE")
                })?;
            let consumed = (self.z.total_in() - in_before) as usize;
            let produced = (self.z.total_out() - out_before) as usize;
            output_full = produced == out.len();
            input = input.get(consumed..).unwrap_or_default();
            if msg.undecided && produced > 0 {
                // The first inflated byte says whether the message is JSON.
                msg.undecided = false;
                if !out.first().is_some_and(|&b| json_start(b)) {
                    msg.opaque = true;
                    msg.skipping = true;
                    if self.no_context_takeover {
                        return Ok(());
                    }
                }
            }
            if !msg.skipping {
                msg.filled += produced;
                if msg.filled > max {
                    msg.skipping = true;
                    msg.filled = 0;
                    if self.no_context_takeover {
                        return Ok(());
                    }
                }
            }
            if status == Status::StreamEnd {
                msg.stream_ended = true;
                // Trailing bytes after the final block are an error (above);
                // the tail appended per RFC 7692 is never fed after it.
                if input.is_empty() {
                    return Ok(());
                }
                continue;
            }
            if consumed == 0 && produced == 0 {
                // No progress is possible (e.g. an empty output slice): stop
                // rather than spin; the next bytes resume.
                break;
            }
        }
        Ok(())
    }
}

/// Whether a message starting with `byte` may be a JSON object or array.
fn json_start(byte: u8) -> bool {
    matches!(byte, b'{' | b'[' | b' ' | b'\t' | b'\n' | b'\r')
}

/// Make `buf` at least `len` bytes long, growing its capacity geometrically
/// but never past `cap` (or `len`, if larger), so the buffer stays bounded.
fn grow(buf: &mut Vec<u8>, len: usize, cap: usize) {
    if buf.len() >= len {
        return;
    }
    let target = buf.capacity().saturating_mul(2).min(cap).max(len);
    if target > buf.capacity() {
        buf.reserve_exact(target - buf.len());
    }
    buf.resize(len, 0);
}

/// How many header bytes the frame starting with `bytes` needs (2 until
/// the second byte is known).
fn head_len(bytes: &[u8]) -> usize {
    let Some(&b1) = bytes.get(1) else {
        return 2;
    };
    let ext = match b1 & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & MASKED != 0 { 4 } else { 0 };
    2 + ext + mask
}

/// Parse a frame header from the front of `bytes`: the header and its
/// length, or `None` when incomplete.
fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, FramingError> {
    let n = head_len(bytes);
    let Some(raw) = bytes.get(..n) else {
        return Ok(None);
    };
    let (&b0, rest) = raw.split_first().unwrap_or((&0, &[]));
    let (&b1, mut rest) = rest.split_first().unwrap_or((&0, &[]));
    if b0 & RSV23 != 0 {
        return Err(FramingError::Malformed(
            "websocket frame has RSV2 or RSV3 set (no extension defines them)",
        ));
    }
    let op = Op::from_opcode(b0 & 0x0F)?;
    let len = match b1 & 0x7F {
        126 => {
            let (l, after) = rest.split_first_chunk::<2>().ok_or(SHORT_HEAD)?;
            rest = after;
            u64::from(u16::from_be_bytes(*l))
        }
        127 => {
            let (l, after) = rest.split_first_chunk::<8>().ok_or(SHORT_HEAD)?;
            rest = after;
            let len = u64::from_be_bytes(*l);
            if len >> 63 != 0 {
                return Err(FramingError::Malformed(
                    "websocket 64-bit payload length has its top bit set",
                ));
            }
            len
        }
        short => u64::from(short),
    };
    let mask = if b1 & MASKED != 0 {
        Some(*rest.first_chunk::<4>().ok_or(SHORT_HEAD)?)
    } else {
        None
    };
    let head = Head {
        fin: b0 & FIN != 0,
        rsv1: b0 & RSV1 != 0,
        op,
        mask,
        len,
    };
    Ok(Some((head, n)))
}

const SHORT_HEAD: FramingError = FramingError::Malformed("websocket frame header truncated");

/// XOR `bytes` with the masking key, starting `phase` bytes into it.
fn unmask(bytes: &mut [u8], mask: [u8; 4], phase: usize) {
    let key: [u8; 4] = std::array::from_fn(|i| mask[(phase + i) % 4]);
    let wide = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut words = bytes.chunks_exact_mut(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        word.copy_from_slice(&(u64::from_ne_bytes(w) ^ wide).to_ne_bytes());
    }
    // The remainder starts at a multiple of 8, so the key is in phase.
    for (b, k) in words.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *b ^= k;
    }
}

/// Append one frame to `out` (for simulated peers, tests and benches).
/// `opcode` is the raw 4-bit opcode; `mask` makes it a client frame.
pub fn encode_frame(
    fin: bool,
    rsv1: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    out.push(u8::from(fin) << 7 | u8::from(rsv1) << 6 | (opcode & 0x0F));
    let mask_bit = if mask.is_some() { MASKED } else { 0 };
    let len = payload.len();
    if len < 126 {
        out.push(mask_bit | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(mask_bit | 126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(mask_bit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let start = out.len();
    if let Some(mask) = mask {
        out.extend_from_slice(&mask);
    }
    let body = start + if mask.is_some() { 4 } else { 0 };
    out.extend_from_slice(payload);
    if let Some(mask) = mask {
        unmask(&mut out[body..], mask, 0);
    }
}

/// Parse the upstream's `Sec-WebSocket-Extensions` RESPONSE header value(s)
/// (the negotiated result). `Ok(None)` = no permessage-deflate;
/// `Ok(Some((client_sender_params, server_sender_params)))`. `Err` = an
/// extension tokentap cannot read (an unknown extension, or bad parameters).
pub fn negotiated_deflate(
    header_values: &[&str],
) -> Result<Option<(Deflate, Deflate)>, FramingError> {
    let mut found = None;
    for value in header_values {
        for extension in split_quoted(value, b',') {
            let extension = extension.trim();
            if extension.is_empty() {
                // HTTP lists allow empty elements.
                continue;
            }
            let mut params = split_quoted(extension, b';');
            let name = params.next().unwrap_or_default().trim();
            if name.is_empty() {
                return Err(FramingError::Malformed(
                    "Sec-WebSocket-Extensions has an extension without a name",
                ));
            }
            if !name.eq_ignore_ascii_case("permessage-deflate") {
                return Err(FramingError::Malformed(
                    "websocket extension other than permessage-deflate negotiated; its frames cannot be read",
                ));
            }
            if found.is_some() {
                return Err(FramingError::Malformed(
                    "permessage-deflate negotiated more than once",
                ));
            }
            found = Some(deflate_params(params)?);
        }
    }
    Ok(found)
}

/// The (client, server) parameters of one accepted permessage-deflate.
fn deflate_params<'a>(
    params: impl Iterator<Item = &'a str>,
) -> Result<(Deflate, Deflate), FramingError> {
    const DUPLICATE: FramingError =
        FramingError::Malformed("permessage-deflate parameter given twice");
    const NO_VALUE: FramingError =
        FramingError::Malformed("permessage-deflate no_context_takeover parameter has a value");
    let (mut client, mut server) = (Deflate::default(), Deflate::default());
    let mut seen = [false; 4];
    for param in params {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k.trim(), Some(unquote(v.trim())?)),
            None => (param.trim(), None),
        };
        let slot = match key.to_ascii_lowercase().as_str() {
            "client_no_context_takeover" => 0,
            "server_no_context_takeover" => 1,
            "client_max_window_bits" => 2,
            "server_max_window_bits" => 3,
            _ => {
                return Err(FramingError::Malformed(
                    "permessage-deflate has an unknown parameter",
                ));
            }
        };
        if std::mem::replace(&mut seen[slot], true) {
            return Err(DUPLICATE);
        }
        match slot {
            0 | 1 if value.is_some() => return Err(NO_VALUE),
            0 => client.no_context_takeover = true,
            1 => server.no_context_takeover = true,
            2 => client.max_window_bits = window_bits(value)?,
            _ => server.max_window_bits = window_bits(value)?,
        }
    }
    Ok((client, server))
}

/// A `*_max_window_bits` value in a response: required, 8..=15, no leading zero.
fn window_bits(value: Option<&str>) -> Result<u8, FramingError> {
    const BAD: FramingError = FramingError::Malformed(
        "permessage-deflate max_window_bits must be a number from 8 to 15 in a response",
    );
    let value = value.ok_or(BAD)?;
    if value.starts_with('0') || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BAD);
    }
    match value.parse::<u8>() {
        Ok(bits @ 8..=15) => Ok(bits),
        _ => Err(BAD),
    }
}

/// A parameter value without its quotes (RFC 6455 §9.1 allows a quoted
/// token; a token never needs escapes, so a backslash is an error).
fn unquote(value: &str) -> Result<&str, FramingError> {
    let inner = match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').ok_or(FramingError::Malformed(
            "permessage-deflate parameter has an unterminated quote",
        ))?,
        None => value,
    };
    if inner.contains(['\\', '"']) {
        return Err(FramingError::Malformed(
            "permessage-deflate parameter value is not a token",
        ));
    }
    Ok(inner)
}

/// Split `s` at `sep`, except inside double quotes.
fn split_quoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let mut cuts = Vec::new();
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => {
                cuts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cuts.push(&s[start..]);
    cuts.into_iter()
}

#[cfg(test)]
mod tests;
