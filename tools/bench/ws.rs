//! The WebSocket relay benchmark: a scripted WebSocket upstream (run as
//! its own process, `tokentap-bench ws-upstream`) and raw WebSocket client
//! sessions in; messages/s, MB/s and per-message latency of one workload
//! through one target out. Two patterns: realtime-style text (the client
//! sends `response.create`, the upstream answers with JSON text deltas and
//! a `response.done` with usage, as OpenAI Realtime does) and audio-like
//! binary (32 KiB messages echoed, a few in flight per session). Frames are
//! written by hand (RFC 6455): client frames masked, one frame per message.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::hist::Hist;

/// Text deltas the upstream sends per `response.create`.
pub(crate) const DELTAS: usize = 50;
/// Size of one binary (audio-like) message.
pub(crate) const BINARY_BYTES: usize = 32 * 1024;
/// Binary messages a session keeps in flight.
const BINARY_WINDOW: usize = 4;
/// Handshake path: the OpenAI Realtime dialect, so tokentap meters it.
pub(crate) const PATH: &str = "/ws/v1/realtime?model=gpt-realtime-bench";

/// One delta: the shape and size (~170 bytes) of a Realtime text delta.
const DELTA: &str = r#"{"type":"response.output_text.delta","event_id":"event_bench0001","response_id":"resp_bench","item_id":"item_bench","output_index":0,"content_index":0,"delta":" token"}"#;
const DONE: &str = r#"{"type":"response.done","event_id":"event_bench0002","response":{"object":"realtime.response","id":"resp_bench","status":"completed","usage":{"total_tokens":80,"input_tokens":30,"output_tokens":50,"input_token_details":{"text_tokens":20,"audio_tokens":10,"cached_tokens":0},"output_token_details":{"text_tokens":50,"audio_tokens":0}}}}"#;
const CREATE: &str = r#"{"type":"response.create","response":{"output_modalities":["text"]}}"#;

/// The message pattern of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// `response.create` up, `DELTAS` text deltas and `response.done` down.
    Text,
    /// `BINARY_BYTES` binary messages up, each echoed down.
    Binary,
}

/// One WebSocket workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WsWorkload {
    pub name: &'static str,
    pub pattern: Pattern,
    pub sessions: usize,
}

/// Every WebSocket workload, in run order.
pub(crate) const WS_WORKLOADS: [WsWorkload; 2] = [
    WsWorkload {
        name: "ws_text_c16",
        pattern: Pattern::Text,
        sessions: 16,
    },
    WsWorkload {
        name: "ws_binary_c16",
        pattern: Pattern::Binary,
        sessions: 16,
    },
];

/// One run's client-side figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct WsReport {
    pub sessions: usize,
    pub duration_s: f64,
    /// Messages relayed in the window, both directions.
    pub messages: u64,
    /// Payload bytes relayed in the window, both directions.
    pub bytes: u64,
    pub msgs_per_s: f64,
    pub mb_per_s: f64,
    /// Text: `response.create` sent to `response.done` read. Binary: a
    /// message sent to its echo read.
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// Counters shared by a run's sessions.
#[derive(Default)]
struct Shared {
    messages: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    latency: Mutex<Hist>,
}

impl Shared {
    fn fail(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first_error.lock() {
            f.get_or_insert(e);
        }
    }
}

/// Run `wl` against `addr` for `warmup` + `duration`; `on_window` gets the
/// measured window's edges before any session starts.
pub(crate) async fn run(
    addr: SocketAddr,
    wl: WsWorkload,
    warmup: Duration,
    duration: Duration,
    on_window: impl FnOnce(Instant, Instant),
) -> WsReport {
    let start = Instant::now() + warmup;
    let end = start + duration;
    on_window(start, end);
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for _ in 0..wl.sessions {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let r = match wl.pattern {
                Pattern::Text => text_session(addr, start, end, &shared).await,
                Pattern::Binary => binary_session(addr, start, end, &shared).await,
            };
            if let Err(e) = r {
                shared.fail(e);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = duration.as_secs_f64();
    let messages = shared.messages.load(Ordering::Relaxed);
    let bytes = shared.bytes.load(Ordering::Relaxed);
    let hist = shared.latency.lock().map(|h| h.clone()).unwrap_or_default();
    let ms = |q: f64| hist.quantile(q).map(|ns| ns as f64 / 1e6);
    WsReport {
        sessions: wl.sessions,
        duration_s: secs,
        messages,
        bytes,
        msgs_per_s: messages as f64 / secs,
        mb_per_s: bytes as f64 / secs / 1e6,
        latency_p50_ms: ms(0.5),
        latency_p99_ms: ms(0.99),
        errors: shared.errors.load(Ordering::Relaxed),
        first_error: shared.first_error.lock().ok().and_then(|f| f.clone()),
    }
}

/// Open a session: TCP, the upgrade request, a `101` answer.
async fn open(addr: SocketAddr) -> Result<TcpStream, String> {
    let mut tcp = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let key = base64_encode(&fastrand::u128(..).to_le_bytes());
    let req = format!(
        "GET {PATH} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer sk-bench-ws\r\n\r\n"
    );
    tcp.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("handshake write: {e}"))?;
    // Read the head byte by byte: nothing past it may be consumed here.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = tcp
            .read_u8()
            .await
            .map_err(|e| format!("handshake read: {e}"))?;
        head.push(b);
        if head.len() > 16 * 1024 {
            return Err("handshake answer over 16 KiB".into());
        }
    }
    let status = String::from_utf8_lossy(&head[..head.len().min(12)]).into_owned();
    if !status.starts_with("HTTP/1.1 101") {
        return Err(format!("handshake answered `{status}`"));
    }
    let want = accept_key(&key);
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if !head.contains(&format!(
        "sec-websocket-accept: {}",
        want.to_ascii_lowercase()
    )) {
        return Err("wrong or missing Sec-WebSocket-Accept".into());
    }
    Ok(tcp)
}

fn in_window(now: Instant, start: Instant, end: Instant) -> bool {
    now >= start && now < end
}

async fn text_session(
    addr: SocketAddr,
    start: Instant,
    end: Instant,
    shared: &Shared,
) -> Result<(), String> {
    let tcp = open(addr).await?;
    let (r, w) = tcp.into_split();
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut w = BufWriter::new(w);
    let mut payload = Vec::new();
    let mut samples = Vec::new();
    let (mut messages, mut bytes) = (0u64, 0u64);
    while Instant::now() < end {
        let sent = Instant::now();
        write_frame(&mut w, 0x1, CREATE.as_bytes(), true)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let counted = in_window(sent, start, end);
        if counted {
            messages += 1;
            bytes += CREATE.len() as u64;
        }
        loop {
            let op = read_frame(&mut r, &mut payload)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if op != 0x1 {
                return Err(format!("unexpected opcode {op:#x}"));
            }
            let now = Instant::now();
            if in_window(now, start, end) {
                messages += 1;
                bytes += payload.len() as u64;
            }
            if payload.starts_with(b"{\"type\":\"response.done\"") {
                if counted && now < end {
                    samples.push((now - sent).as_nanos() as u64);
                }
                break;
            }
        }
    }
    close(&mut w, &mut r).await;
    flush(shared, messages, bytes, &samples);
    Ok(())
}

async fn binary_session(
    addr: SocketAddr,
    start: Instant,
    end: Instant,
    shared: &Shared,
) -> Result<(), String> {
    let tcp = open(addr).await?;
    let (r, w) = tcp.into_split();
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let permits = Arc::new(Semaphore::new(BINARY_WINDOW));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    // Writer: a message whenever fewer than BINARY_WINDOW are in flight.
    let writer_permits = permits.clone();
    let writer = tokio::spawn(async move {
        let msg: Vec<u8> = (0..BINARY_BYTES).map(|i| (i % 251) as u8).collect();
        let mut sent = 0u64;
        while Instant::now() < end {
            let Ok(p) = writer_permits.acquire().await else {
                break;
            };
            p.forget();
            let at = Instant::now();
            if let Err(e) = write_frame(&mut w, 0x2, &msg, true).await {
                return Err((w, format!("write: {e}")));
            }
            if in_window(at, start, end) {
                sent += 1;
            }
            if tx.send(at).is_err() {
                break;
            }
        }
        Ok((w, sent))
    });
    let mut payload = Vec::new();
    let mut samples = Vec::new();
    let (mut messages, mut bytes) = (0u64, 0u64);
    // Read every echo of what was sent (the writer stops at `end`).
    while let Some(sent) = rx.recv().await {
        let op = read_frame(&mut r, &mut payload)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if op != 0x2 || payload.len() != BINARY_BYTES {
            return Err(format!(
                "unexpected echo: opcode {op:#x}, {} bytes",
                payload.len()
            ));
        }
        let now = Instant::now();
        if in_window(now, start, end) {
            messages += 1;
            bytes += BINARY_BYTES as u64;
            if in_window(sent, start, end) {
                samples.push((now - sent).as_nanos() as u64);
            }
        }
        permits.add_permits(1);
    }
    let (mut w, sent) = writer
        .await
        .map_err(|e| e.to_string())?
        .map_err(|(_, e)| e)?;
    messages += sent;
    bytes += sent * BINARY_BYTES as u64;
    close(&mut w, &mut r).await;
    flush(shared, messages, bytes, &samples);
    Ok(())
}

fn flush(shared: &Shared, messages: u64, bytes: u64, samples: &[u64]) {
    shared.messages.fetch_add(messages, Ordering::Relaxed);
    shared.bytes.fetch_add(bytes, Ordering::Relaxed);
    if let Ok(mut h) = shared.latency.lock() {
        for s in samples {
            h.record(*s);
        }
    }
}

/// Close handshake (1000), waiting briefly for the peer's close frame.
async fn close<R, W>(w: &mut W, r: &mut R)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if write_frame(w, 0x8, &1000u16.to_be_bytes(), true)
        .await
        .is_err()
    {
        return;
    }
    let mut payload = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(op) = read_frame(r, &mut payload).await {
            if op == 0x8 {
                break;
            }
        }
    })
    .await;
}

/// Write one final frame; `masked` for client frames. Flushes.
async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    opcode: u8,
    payload: &[u8],
    masked: bool,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(14);
    head.push(0x80 | opcode);
    let m = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => head.push(m | n as u8),
        n if n <= 0xffff => {
            head.push(m | 126);
            head.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            head.push(m | 127);
            head.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = fastrand::u32(..).to_be_bytes();
        head.extend_from_slice(&key);
        w.write_all(&head).await?;
        let body: Vec<u8> = payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        w.write_all(&body).await?;
    } else {
        w.write_all(&head).await?;
        w.write_all(payload).await?;
    }
    w.flush().await
}

/// Read one frame into `payload` (unmasked); returns its opcode. Messages
/// here are never fragmented.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, payload: &mut Vec<u8>) -> std::io::Result<u8> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h).await?;
    let opcode = h[0] & 0x0f;
    let masked = h[1] & 0x80 != 0;
    let len = match h[1] & 0x7f {
        126 => u64::from(r.read_u16().await?),
        127 => r.read_u64().await?,
        n => u64::from(n),
    };
    if len > 16 * 1024 * 1024 {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut key = [0u8; 4];
    if masked {
        r.read_exact(&mut key).await?;
    }
    payload.resize(len as usize, 0);
    r.read_exact(payload).await?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
    }
    Ok(opcode)
}

/// Serve the scripted upstream on `listen` until the process is stopped.
pub(crate) async fn serve_upstream(listen: SocketAddr) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("bind {listen}: {e}"))?;
    eprintln!(
        "WebSocket upstream on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    loop {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = upstream_session(tcp).await;
        });
    }
}

async fn upstream_session(mut tcp: TcpStream) -> std::io::Result<()> {
    let _ = tcp.set_nodelay(true);
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await?);
        if head.len() > 16 * 1024 {
            return Ok(());
        }
    }
    let text = String::from_utf8_lossy(&head);
    let key = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("sec-websocket-key")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(&key)
    );
    tcp.write_all(answer.as_bytes()).await?;
    let (r, w) = tcp.into_split();
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let mut payload = Vec::new();
    let created = r#"{"type":"response.created","event_id":"event_bench0000","response":{"object":"realtime.response","id":"resp_bench","status":"in_progress"}}"#;
    loop {
        match read_frame(&mut r, &mut payload).await? {
            0x1 if payload.windows(15).any(|x| x == b"response.create") => {
                // One frame and one flush per event, as a provider streams them.
                write_frame(&mut w, 0x1, created.as_bytes(), false).await?;
                for _ in 0..DELTAS {
                    write_frame(&mut w, 0x1, DELTA.as_bytes(), false).await?;
                }
                write_frame(&mut w, 0x1, DONE.as_bytes(), false).await?;
            }
            0x2 => write_frame(&mut w, 0x2, &payload, false).await?,
            0x8 => {
                let _ = write_frame(&mut w, 0x8, &payload, false).await;
                return Ok(());
            }
            0x9 => write_frame(&mut w, 0xa, &payload, false).await?,
            _ => {}
        }
    }
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
fn accept_key(key: &str) -> String {
    let mut input = key.as_bytes().to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64_encode(&sha1(&input))
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// SHA-1 (FIPS 180-4), only for the handshake's accept key.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
