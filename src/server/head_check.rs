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
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_head_bytes: 4096,
        max_headers: 10,
    };

    /// Feed `stream` split at `at` and return the verdicts of `n` requests.
    fn verdicts_split(stream: &[u8], at: usize, n: usize) -> Vec<Result<(), Refusal>> {
        let v = Arc::new(Verdicts::default());
        let mut t = Tracker::new(LIMITS, v.clone());
        t.feed(&stream[..at]);
        t.feed(&stream[at..]);
        (0..n).map(|_| v.next()).collect()
    }

    /// The same verdicts at every split offset.
    fn verdicts(stream: &[u8], n: usize) -> Vec<Result<(), Refusal>> {
        let whole = verdicts_split(stream, stream.len(), n);
        for at in 0..stream.len() {
            assert_eq!(
                verdicts_split(stream, at, n),
                whole,
                "split at {at} of {:?}",
                String::from_utf8_lossy(stream)
            );
        }
        whole
    }

    #[test]
    fn keep_alive_requests_with_every_framing_pass() {
        let stream = b"\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n\
            POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
            POST /c HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n\
            5;ext=1\r\nGET /\r\n10 \r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n\
            GET /d HTTP/1.1\r\n\r\n";
        assert_eq!(
            verdicts(stream, 5),
            [Ok(()), Ok(()), Ok(()), Ok(()), Err(Refusal::Unverified)]
        );
    }

    #[test]
    fn a_smuggled_head_inside_a_body_is_not_a_head() {
        let inner = "GET /b HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n";
        let stream = format!(
            "POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}GET /c HTTP/1.1\r\n\r\n",
            inner.len()
        );
        assert_eq!(verdicts(stream.as_bytes(), 2), [Ok(()), Ok(())]);
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        let cases: [(&[u8], Refusal); 9] = [
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", Refusal::LengthAndChunked),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", Refusal::LengthAndChunked),
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", Refusal::DuplicateContentLength),
            (b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n", Refusal::BadContentLength),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Refusal::TransferEncoding),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", Refusal::TransferEncoding),
            (b"GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n", Refusal::ObsFold),
            (b"GET / HTTP/1.1\nHost: x\n\n", Refusal::BareLf),
            (b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", Refusal::Connect),
        ];
        for (head, want) in cases {
            assert_eq!(
                verdicts(head, 1),
                [Err(want)],
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn limits_are_enforced() {
        let many: String = (0..11).map(|i| format!("X-{i}: v\r\n")).collect();
        let head = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(verdicts(head.as_bytes(), 1), [Err(Refusal::TooManyHeaders)]);
        let sized = |n: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(n));
        let exact = sized(4096 - sized(0).len());
        assert_eq!(exact.len(), LIMITS.max_head_bytes);
        assert_eq!(
            verdicts(exact.as_bytes(), 1),
            [Ok(())],
            "a head of exactly the limit"
        );
        let over = sized(4096 - sized(0).len() + 1);
        assert_eq!(verdicts(over.as_bytes(), 1), [Err(Refusal::HeadTooLarge)]);
    }

    #[test]
    fn http2_preface_stops_tracking() {
        let v = Arc::new(Verdicts::default());
        let mut t = Tracker::new(LIMITS, v.clone());
        t.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04");
        assert_eq!(t.state, State::Off);
        assert_eq!(v.refused.load(Ordering::Acquire), 0, "no refusal recorded");
    }

    /// The tracker as it was before heads were checked in place (copied
    /// and split into lines byte by byte): the reference the differential
    /// tests hold the current one to. Verdicts only.
    mod reference {
        use super::super::{Chunk, Framing, Limits, Refusal, State, chunk_step, decimal};

        pub(super) struct Old {
            state: Option<State>,
            line: usize,
            head: Vec<u8>,
            limits: Limits,
            pub(super) passed: u64,
            pub(super) refused: Option<Refusal>,
        }

        impl Old {
            pub(super) fn new(limits: Limits) -> Old {
                Old {
                    state: None,
                    line: 0,
                    head: Vec::new(),
                    limits,
                    passed: 0,
                    refused: None,
                }
            }

            pub(super) fn feed(&mut self, mut bytes: &[u8]) {
                while !bytes.is_empty() {
                    let used = match self.state {
                        Some(State::Off) => return,
                        None | Some(State::Head) => self.head_bytes(bytes),
                        Some(State::Fixed(rem)) => {
                            let n = rem.min(bytes.len() as u64);
                            self.state = match rem - n {
                                0 => None,
                                left => Some(State::Fixed(left)),
                            };
                            n as usize
                        }
                        Some(State::Chunked(c)) => {
                            let (next, used) = chunk_step(c, bytes);
                            self.state = Some(next);
                            used
                        }
                    };
                    bytes = &bytes[used..];
                }
            }

            fn head_bytes(&mut self, bytes: &[u8]) -> usize {
                let mut used = 0;
                if self.head.is_empty() {
                    used = bytes
                        .iter()
                        .position(|b| !matches!(b, b'\r' | b'\n'))
                        .unwrap_or(bytes.len());
                }
                while used < bytes.len() {
                    let rest = &bytes[used..];
                    let (seg, ends_line) = match memchr::memchr(b'\n', rest) {
                        Some(nl) => (&rest[..=nl], true),
                        None => (rest, false),
                    };
                    if self.head.len() + seg.len() > self.limits.max_head_bytes {
                        self.refuse(Refusal::HeadTooLarge);
                        return bytes.len();
                    }
                    self.head.extend_from_slice(seg);
                    used += seg.len();
                    self.line += seg.iter().filter(|b| !matches!(b, b'\r' | b'\n')).count();
                    if ends_line && self.line == 0 {
                        let verdict = inspect(&self.head, self.limits);
                        self.head.clear();
                        match verdict {
                            Err(r) => self.refuse(r),
                            Ok(framing) => {
                                self.state = match framing {
                                    Framing::Http2 => Some(State::Off),
                                    Framing::Empty | Framing::Fixed(0) => None,
                                    Framing::Fixed(n) => Some(State::Fixed(n)),
                                    Framing::Chunked => Some(State::Chunked(Chunk::Start)),
                                };
                                if framing != Framing::Http2 {
                                    self.passed += 1;
                                }
                            }
                        }
                        return used;
                    }
                    if ends_line {
                        self.line = 0;
                    }
                }
                self.state = Some(State::Head);
                bytes.len()
            }

            fn refuse(&mut self, why: Refusal) {
                self.refused = Some(why);
                self.state = Some(State::Off);
            }
        }

        pub(super) fn inspect(head: &[u8], limits: Limits) -> Result<Framing, Refusal> {
            for (i, _) in head.iter().enumerate().filter(|(_, b)| **b == b'\n') {
                if i == 0 || head[i - 1] != b'\r' {
                    return Err(Refusal::BareLf);
                }
            }
            let mut lines = head
                .split(|b| *b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .filter(|l| !l.is_empty());
            let request_line = lines.next().unwrap_or_default();
            if request_line == b"PRI * HTTP/2.0" {
                return Ok(Framing::Http2);
            }
            if request_line.starts_with(b"CONNECT ") {
                return Err(Refusal::Connect);
            }
            let (mut fields, mut lengths, mut codings) = (0usize, Vec::new(), Vec::new());
            for line in lines {
                if line.starts_with(b" ") || line.starts_with(b"\t") {
                    return Err(Refusal::ObsFold);
                }
                fields += 1;
                let Some(colon) = line.iter().position(|b| *b == b':') else {
                    continue;
                };
                let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
                if name.eq_ignore_ascii_case(b"content-length") {
                    lengths.push(value);
                } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    codings.push(value);
                }
            }
            if fields > limits.max_headers {
                return Err(Refusal::TooManyHeaders);
            }
            match (lengths.as_slice(), codings.as_slice()) {
                ([], []) => Ok(Framing::Empty),
                ([_, _, ..], _) => Err(Refusal::DuplicateContentLength),
                ([_], [_, ..]) => Err(Refusal::LengthAndChunked),
                ([len], []) => decimal(len).map(Framing::Fixed),
                ([], [te]) if te.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
                ([], _) => Err(Refusal::TransferEncoding),
            }
        }
    }

    /// What a tracker said after `reads`: heads passed, and the refusal.
    fn outcome_of(reads: &[&[u8]], limits: Limits) -> (u64, Option<Refusal>) {
        let v = Arc::new(Verdicts::default());
        let mut t = Tracker::new(limits, v.clone());
        reads.iter().for_each(|r| t.feed(r));
        let passed = v.passed.load(Ordering::Acquire);
        (passed, Refusal::from_u8(v.refused.load(Ordering::Acquire)))
    }

    fn reference_of(reads: &[&[u8]], limits: Limits) -> (u64, Option<Refusal>) {
        let mut old = reference::Old::new(limits);
        reads.iter().for_each(|r| old.feed(r));
        (old.passed, old.refused)
    }

    /// Connection streams that exercise every verdict: keep-alive with
    /// each framing, every refusal, CRs inside lines, lines of only CRs,
    /// heads near the size limit, empty lines before a request line.
    fn streams() -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = vec![
            b"\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
              POST /c HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5;ext=1\r\nGET /\r\n0\r\nX-T: 1\r\n\r\n\
              GET /d HTTP/1.1\r\n\r\n"
                .to_vec(),
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\r\nGET / HTTP/1.1\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nX: a\r\n\r\r\r\n".to_vec(),
            b"GET / HTTP/1.1\r\n\r\r\nX: 1\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nX: 1\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nX: 1\r\n\n".to_vec(),
            b"\n\r\n\rGET / HTTP/1.1\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nNoColon\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\n\tX: 1\r\nContent-Length: 1\nY\r\n\r\n".to_vec(),
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            b"PRI * HTTP/2.0\n\n".to_vec(),
            b"CONNECT x:1 HTTP/1.1\r\n X: 1\r\n\r\n".to_vec(),
            b"POST / HTTP/1.1\r\ncontent-length:  007 \r\n\r\n1234567GET / HTTP/1.1\r\n\r\n".to_vec(),
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(),
            b"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n".to_vec(),
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nHost: x".to_vec(),
        ];
        let many: String = (0..11).map(|i| format!("X-{i}: v\r\n")).collect();
        out.push(format!("GET / HTTP/1.1\r\n{many}\r\n").into_bytes());
        let sized = |n: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(n));
        let base = sized(0).len();
        for n in [
            LIMITS.max_head_bytes - base - 1,
            LIMITS.max_head_bytes - base,
            LIMITS.max_head_bytes - base + 1,
        ] {
            out.push(format!("{}GET / HTTP/1.1\r\n\r\n", sized(n)).into_bytes());
        }
        out.push(format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(5000)).into_bytes());
        out
    }

    /// Byte edits of `data` that matter to the tracker (seeded).
    fn edits(data: &[u8], rng: &mut fastrand::Rng) -> Vec<u8> {
        crate::providers::scan::differential::edited(data, b"\r\n: \tCc0;", 3, rng)
    }

    #[test]
    fn verdicts_match_the_copying_tracker_at_every_split() {
        let mut rng = fastrand::Rng::with_seed(17);
        let mut cases = streams();
        for s in streams() {
            let n = if s.len() < 300 { 40 } else { 4 };
            cases.extend((0..n).map(|_| edits(&s, &mut rng)));
        }
        for limits in [
            LIMITS,
            Limits {
                max_head_bytes: 40,
                max_headers: 2,
            },
        ] {
            for s in &cases {
                let want = reference_of(&[s], limits);
                assert_eq!(
                    outcome_of(&[s], limits),
                    want,
                    "{:?}",
                    String::from_utf8_lossy(s)
                );
                // Every split of the short streams; of the long ones (near
                // the size limit), every 7th and those around the limit.
                let splits = (0..=s.len()).filter(|at| {
                    s.len() < 300 || at % 7 == 0 || at.abs_diff(LIMITS.max_head_bytes) < 3
                });
                for at in splits {
                    let reads: [&[u8]; 2] = [&s[..at], &s[at..]];
                    assert_eq!(
                        reference_of(&reads, limits),
                        want,
                        "reference, split at {at}"
                    );
                    assert_eq!(
                        outcome_of(&reads, limits),
                        want,
                        "split at {at} of {:?}",
                        String::from_utf8_lossy(s)
                    );
                }
                let bytes: Vec<&[u8]> = s.chunks(1).collect();
                assert_eq!(outcome_of(&bytes, limits), want, "byte by byte");
                let thirds: Vec<&[u8]> = s.chunks(s.len().div_ceil(3).max(1)).collect();
                assert_eq!(outcome_of(&thirds, limits), want, "in three reads");
            }
        }
    }

    #[test]
    fn inspect_matches_the_line_splitting_reference() {
        let mut rng = fastrand::Rng::with_seed(18);
        for s in streams() {
            for m in std::iter::once(s.clone()).chain((0..200).map(|_| edits(&s, &mut rng))) {
                // Heads as the tracker hands them over: from the first
                // byte that is not CR or LF to the end of the empty line.
                let Some(start) = m.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
                    continue;
                };
                let Some(end) = head_end(&m[start..], 0) else {
                    continue;
                };
                let head = &m[start..start + end];
                for limits in [
                    LIMITS,
                    Limits {
                        max_head_bytes: 4096,
                        max_headers: 1,
                    },
                ] {
                    assert_eq!(
                        inspect(head, limits),
                        reference::inspect(head, limits),
                        "{:?}",
                        String::from_utf8_lossy(head)
                    );
                }
            }
        }
    }

    #[test]
    fn a_head_within_one_read_is_not_copied() {
        let v = Arc::new(Verdicts::default());
        let mut t = Tracker::new(LIMITS, v.clone());
        t.feed(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\nHo");
        assert_eq!(v.passed.load(Ordering::Acquire), 1);
        assert_eq!(
            t.head, b"GET / HTTP/1.1\r\nHo",
            "only the split head is kept"
        );
        t.feed(b"st: x\r\n\r\n");
        assert_eq!(v.passed.load(Ordering::Acquire), 2);
        assert!(t.head.is_empty() && t.state == State::Head);
    }

    #[test]
    fn a_broken_chunked_body_fails_closed() {
        let stream = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(verdicts(stream, 2), [Ok(()), Err(Refusal::Unverified)]);
    }
}
