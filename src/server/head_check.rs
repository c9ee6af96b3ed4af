//! Request-head screening: the raw bytes of an HTTP/1 connection in, as
//! hyper reads them; one verdict per request head out.
//!
//! hyper accepts a few head shapes that other HTTP parsers in front of or
//! behind tokentap may frame differently (request smuggling): bare LF line
//! ends, a repeated `Content-Length`, `Content-Length` beside
//! `Transfer-Encoding`, codings before `chunked`. By the time a request
//! reaches the service hyper has already normalised those away, so the
//! evidence has to be taken from the bytes. [`Screened`] wraps the socket
//! and runs a small framing tracker over what is read (heads are inspected,
//! bodies are skipped by their length or chunk sizes); the service asks
//! [`Verdicts::next`] before it forwards anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use http::StatusCode;

use crate::read_tap::{Observe, ReadTap};

/// Why a request was refused before anything was forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// A line of the head ends in LF without CR.
    BareLf = 1,
    /// A header line continues the previous one (obsolete line folding).
    ObsFold,
    /// More than one `Content-Length` field.
    DuplicateContentLength,
    /// A `Content-Length` that is not one decimal number.
    BadContentLength,
    /// Both `Content-Length` and `Transfer-Encoding`.
    LengthAndChunked,
    /// A `Transfer-Encoding` other than one plain `chunked`.
    TransferEncoding,
    /// The head is larger than `server.max_header_bytes`.
    HeadTooLarge,
    /// More header fields than `server.max_headers`.
    TooManyHeaders,
    /// CONNECT: tokentap is a reverse proxy, never a tunnel.
    Connect,
    /// An HTTP/2 extended CONNECT (RFC 8441) for a protocol other than
    /// `websocket`, the only one relayed.
    ConnectProtocol,
    /// The head was not seen by the tracker (it lost the framing).
    Unverified,
}

impl Refusal {
    const ALL: [Refusal; 11] = [
        Refusal::BareLf,
        Refusal::ObsFold,
        Refusal::DuplicateContentLength,
        Refusal::BadContentLength,
        Refusal::LengthAndChunked,
        Refusal::TransferEncoding,
        Refusal::HeadTooLarge,
        Refusal::TooManyHeaders,
        Refusal::Connect,
        Refusal::ConnectProtocol,
        Refusal::Unverified,
    ];

    fn from_u8(v: u8) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|r| *r as u8 == v)
    }

    /// 431 for size limits, 405 for CONNECT (plain or extended), 400 otherwise.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            Refusal::Connect | Refusal::ConnectProtocol => StatusCode::METHOD_NOT_ALLOWED,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// Stable machine-readable code for the JSON error body.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => "request_header_too_large",
            Refusal::Connect | Refusal::ConnectProtocol => "method_not_allowed",
            _ => "bad_request",
        }
    }

    /// What was wrong, naming the header or limit.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::BareLf => "request head line ends in a bare LF; lines must end in CRLF",
            Refusal::ObsFold => "obsolete line folding in a request header is not accepted",
            Refusal::DuplicateContentLength => "more than one Content-Length header",
            Refusal::BadContentLength => "Content-Length is not a single decimal number",
            Refusal::LengthAndChunked => {
                "both Content-Length and Transfer-Encoding headers; send exactly one"
            }
            Refusal::TransferEncoding => {
                "Transfer-Encoding must be exactly one `chunked`; other codings are not accepted"
            }
            Refusal::HeadTooLarge => "request head is larger than server.max_header_bytes",
            Refusal::TooManyHeaders => "request has more header fields than server.max_headers",
            Refusal::Connect => "CONNECT is not supported: tokentap is a reverse proxy",
            Refusal::ConnectProtocol => {
                "extended CONNECT is relayed only for :protocol websocket (RFC 8441)"
            }
            Refusal::Unverified => "request framing could not be verified",
        }
    }
}

/// Shared between a connection's tracker (writer) and its service
/// (reader). HTTP/1 serves requests in order, so the `n`th head the tracker
/// passed is the `n`th request hyper hands to the service.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Heads seen and found acceptable.
    passed: AtomicU64,
    /// Why the head after the last passed one was refused (0 = none yet).
    refused: AtomicU8,
    /// Requests the service has asked about.
    taken: AtomicU64,
}

impl Verdicts {
    /// The verdict for the next HTTP/1 request the service receives.
    pub fn next(&self) -> Result<(), Refusal> {
        let n = self.taken.fetch_add(1, Ordering::AcqRel);
        if n < self.passed.load(Ordering::Acquire) {
            return Ok(());
        }
        // Fail closed: a head the tracker did not pass is not forwarded.
        Err(Refusal::from_u8(self.refused.load(Ordering::Acquire)).unwrap_or(Refusal::Unverified))
    }
}

/// Limits a head is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_head_bytes: usize,
    pub max_headers: usize,
}

/// Where the tracker is in the connection's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a request head (the part of it an earlier read brought
    /// is in `Tracker::head`).
    Head,
    /// Skipping a body of known length.
    Fixed(u64),
    /// Inside a chunked body.
    Chunked(Chunk),
    /// Not tracking: HTTP/2, or after a refusal (the connection closes).
    Off,
}

/// The chunked-body grammar hyper enforces, state by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Start,
    Size(u64),
    Lws(u64),
    Ext(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    EndCr,
    Trailer,
    TrailerLf,
    EndLf,
}

/// The framing tracker for one connection.
#[derive(Debug)]
pub struct Tracker {
    state: State,
    /// The start of a head that did not end in the read that brought it
    /// (empty otherwise: a head within one read is checked where it lies).
    head: Vec<u8>,
    limits: Limits,
    verdicts: Arc<Verdicts>,
}

/// How the body after an accepted head is framed.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Fixed(u64),
    Chunked,
    Http2,
}

impl Tracker {
    pub fn new(limits: Limits, verdicts: Arc<Verdicts>) -> Tracker {
        Tracker {
            state: State::Head,
            head: Vec::new(),
            limits,
            verdicts,
        }
    }

    /// Take in the next bytes read from the client.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let used = match self.state {
                State::Off => return,
                State::Head if self.head.is_empty() => self.head_in(bytes),
                State::Head => self.head_across(bytes),
                State::Fixed(rem) => {
                    let n = rem.min(bytes.len() as u64);
                    self.state = match rem - n {
                        0 => State::Head,
                        left => State::Fixed(left),
                    };
                    n as usize
                }
                State::Chunked(c) => {
                    let (next, used) = chunk_step(c, bytes);
                    self.state = next;
                    used
                }
            };
            bytes = &bytes[used..];
        }
    }

    /// A head that starts in `bytes`: checked in place when it ends there
    /// too, else kept for the next read. Returns how many bytes were used.
    fn head_in(&mut self, bytes: &[u8]) -> usize {
        // Empty lines before the request line are skipped (as httparse does).
        let Some(start) = bytes.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
            return bytes.len();
        };
        let rest = &bytes[start..];
        let room = self.limits.max_head_bytes;
        match head_end(&rest[..rest.len().min(room)], 0) {
            Some(end) => {
                self.finish_head(&rest[..end]);
                start + end
            }
            None if rest.len() > room => {
                self.refuse(Refusal::HeadTooLarge);
                bytes.len()
            }
            None => {
                self.head.extend_from_slice(rest);
                bytes.len()
            }
        }
    }

    /// More of a head an earlier read started: copied after it (up to the
    /// size limit) and checked once its end is there.
    fn head_across(&mut self, bytes: &[u8]) -> usize {
        let had = self.head.len();
        let room = self.limits.max_head_bytes.saturating_sub(had);
        let take = bytes.len().min(room);
        // The end may be the line the earlier read broke off in.
        let line = memchr::memrchr(b'\n', &self.head).map_or(0, |nl| nl + 1);
        self.head.extend_from_slice(&bytes[..take]);
        match head_end(&self.head, line) {
            Some(end) => {
                let head = std::mem::take(&mut self.head);
                self.finish_head(&head[..end]);
                end - had
            }
            None if bytes.len() > room => {
                self.refuse(Refusal::HeadTooLarge);
                bytes.len()
            }
            None => bytes.len(),
        }
    }

    fn finish_head(&mut self, head: &[u8]) {
        match inspect(head, self.limits) {
            Err(r) => self.refuse(r),
            Ok(framing) => {
                self.state = match framing {
                    Framing::Http2 => State::Off,
                    Framing::Empty | Framing::Fixed(0) => State::Head,
                    Framing::Fixed(n) => State::Fixed(n),
                    Framing::Chunked => State::Chunked(Chunk::Start),
                };
                if framing != Framing::Http2 {
                    self.verdicts.passed.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }

    fn refuse(&mut self, why: Refusal) {
        self.verdicts.refused.store(why as u8, Ordering::Release);
        self.state = State::Off;
        self.head = Vec::new();
    }
}

/// The length of the head at the start of `head` (through the LF of the
/// empty line that ends it), if it ends there. `from` is where a line
/// starts; the line before it is not empty. A line of nothing but CRs
/// counts as empty, as it always has here (`inspect` then refuses its
/// bare LF or counts it as a field).
fn head_end(head: &[u8], from: usize) -> Option<usize> {
    let mut line = from;
    for nl in memchr::memchr_iter(b'\n', &head[from..]).map(|i| i + from) {
        if head[line..nl].iter().all(|b| *b == b'\r') {
            return Some(nl + 1);
        }
        line = nl + 1;
    }
    None
}

/// One step of the chunked grammar: the next state and the bytes used.
/// Anything hyper would reject stops tracking (hyper closes the connection).
fn chunk_step(c: Chunk, bytes: &[u8]) -> (State, usize) {
    if let Chunk::Data(rem) = c {
        let n = rem.min(bytes.len() as u64);
        let next = if rem == n {
            Chunk::DataCr
        } else {
            Chunk::Data(rem - n)
        };
        return (State::Chunked(next), n as usize);
    }
    let b = bytes[0];
    let hex = |b: u8| (b as char).to_digit(16).map(u64::from);
    let next = match (c, b) {
        (Chunk::Start, _) => hex(b).map(Chunk::Size),
        (Chunk::Size(n), _) if hex(b).is_some() => n
            .checked_mul(16)
            .and_then(|v| v.checked_add(hex(b).unwrap_or(0)))
            .map(Chunk::Size),
        (Chunk::Size(n) | Chunk::Lws(n), b' ' | b'\t') => Some(Chunk::Lws(n)),
        (Chunk::Size(n) | Chunk::Lws(n) | Chunk::Ext(n), b';') => Some(Chunk::Ext(n)),
        (Chunk::Size(n) | Chunk::Lws(n) | Chunk::Ext(n), b'\r') => Some(Chunk::SizeLf(n)),
        (Chunk::Ext(_), b'\n') => None,
        (Chunk::Ext(n), _) => Some(Chunk::Ext(n)),
        (Chunk::SizeLf(0), b'\n') => Some(Chunk::EndCr),
        (Chunk::SizeLf(n), b'\n') => Some(Chunk::Data(n)),
        (Chunk::DataCr, b'\r') => Some(Chunk::DataLf),
        (Chunk::DataLf, b'\n') => Some(Chunk::Start),
        (Chunk::EndCr, b'\r') => Some(Chunk::EndLf),
        (Chunk::Trailer, b'\r') => Some(Chunk::TrailerLf),
        (Chunk::EndCr | Chunk::Trailer, _) => Some(Chunk::Trailer),
        (Chunk::TrailerLf, b'\n') => Some(Chunk::EndCr),
        (Chunk::EndLf, b'\n') => return (State::Head, 1),
        _ => None,
    };
    (next.map_or(State::Off, State::Chunked), 1)
}

/// Check one complete head (request line, header lines, empty line).
fn inspect(head: &[u8], limits: Limits) -> Result<Framing, Refusal> {
    if memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r') {
        return Err(Refusal::BareLf);
    }
    // Every LF follows a CR: each line is what comes before its CR LF
    // (a line's other CRs stay in it), empty ones left out.
    let mut lines = memchr::memchr_iter(b'\n', head)
        .scan(0, |start, nl| {
            let line = &head[*start..nl - 1];
            *start = nl + 1;
            Some(line)
        })
        .filter(|l| !l.is_empty());
    let request_line = lines.next().unwrap_or_default();
    if request_line == b"PRI * HTTP/2.0" {
        return Ok(Framing::Http2);
    }
    if request_line.starts_with(b"CONNECT ") {
        return Err(Refusal::Connect);
    }
    // How many `Content-Length` and `Transfer-Encoding` fields, and the
    // first value of each.
    let mut fields = 0usize;
    let (mut lengths, mut length) = (0usize, &b""[..]);
    let (mut codings, mut coding) = (0usize, &b""[..]);
    for line in lines {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            return Err(Refusal::ObsFold);
        }
        fields += 1;
        let Some(colon) = memchr::memchr(b':', line) else {
            continue; // hyper rejects it.
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            lengths += 1;
            if lengths == 1 {
                length = value;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            codings += 1;
            if codings == 1 {
                coding = value;
            }
        }
    }
    if fields > limits.max_headers {
        return Err(Refusal::TooManyHeaders);
    }
    match (lengths, codings) {
        (0, 0) => Ok(Framing::Empty),
        (2.., _) => Err(Refusal::DuplicateContentLength),
        (1, 1..) => Err(Refusal::LengthAndChunked),
        (1, 0) => decimal(length).map(Framing::Fixed),
        (0, 1) if coding.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
        (0, _) => Err(Refusal::TransferEncoding),
    }
}

fn decimal(v: &[u8]) -> Result<u64, Refusal> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(Refusal::BadContentLength);
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Refusal::BadContentLength)
}

/// A client socket whose reads go through a [`Tracker`] on their way to
/// hyper.
pub type Screened<T> = ReadTap<T, Tracker>;

impl Observe for Tracker {
    fn observe(&mut self, bytes: &[u8]) {
        self.feed(bytes);
    }
}

#[cfg(test)]
mod tests;
