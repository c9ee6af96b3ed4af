//! Raw-socket helpers for hostile-input and slow-peer tests: an exchange
//! that reports whether the server closed the connection, a listener that
//! only counts who connects (a stand-in for addresses that must never be
//! contacted), a "firehose" upstream that counts how many body bytes the
//! kernel accepted from it, and a process's resident memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// What a raw exchange got back.
#[derive(Debug)]
pub(crate) struct RawReply {
    /// Every byte read.
    pub bytes: Vec<u8>,
    /// The server closed the connection (EOF or reset) within the limit.
    pub closed: bool,
}

impl RawReply {
    /// The status code of the first response (0 when there is none).
    pub(crate) fn status(&self) -> u16 {
        let line = self.bytes.split(|b| *b == b'\n').next().unwrap_or_default();
        String::from_utf8_lossy(line)
            .split(' ')
            .nth(1)
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Everything read, as text (lossy).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Write `request` as it is, then read until the server closes or `limit`.
pub(crate) async fn exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> RawReply {
    let mut s = TcpStream::connect(addr).await.expect("connect to proxy");
    // The server may close before reading everything; that is an answer too.
    let _ = s.write_all(request).await;
    read_until_closed(&mut s, limit).await
}

/// Read from `s` until EOF, a reset, or `limit`.
pub(crate) async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> RawReply {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let read = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    };
    let closed = tokio::time::timeout(limit, read).await.is_ok();
    RawReply { bytes, closed }
}

/// A listener that accepts and counts connections and answers nothing.
pub(crate) struct Canary {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    _task: super::Background,
}

impl Canary {
    pub(crate) async fn start() -> Canary {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind canary");
        let addr = listener.local_addr().expect("canary addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let task = super::Background::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
        Canary {
            addr,
            connections,
            _task: task,
        }
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Bytes per firehose event.
pub(crate) const EVENT_BYTES: usize = 1024;

/// Event `i` of the firehose body: one OpenAI-shaped SSE chunk padded to
/// exactly [`EVENT_BYTES`], carrying its own index so a reordered or
/// dropped event cannot compare equal.
pub(crate) fn firehose_event(i: u64) -> Vec<u8> {
    let head = format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{i:010} ");
    let tail = "\"}}]}\n\n";
    let pad = EVENT_BYTES - head.len() - tail.len();
    let mut e = Vec::with_capacity(EVENT_BYTES);
    e.extend_from_slice(head.as_bytes());
    e.extend(std::iter::repeat_n(b'x', pad));
    e.extend_from_slice(tail.as_bytes());
    e
}

/// An upstream that answers every request with `events` firehose events
/// (SSE, with a Content-Length) written as fast as the socket takes them,
/// and counts the body bytes the kernel accepted. Its socket send buffer
/// is kept small so that the count is close to what the peer took.
pub(crate) struct Firehose {
    pub addr: SocketAddr,
    pub total: u64,
    written: Arc<AtomicU64>,
    requests: Arc<AtomicUsize>,
    _task: super::Background,
}

impl Firehose {
    pub(crate) async fn start(events: u64) -> Firehose {
        let socket = TcpSocket::new_v4().expect("firehose socket");
        // Accepted sockets inherit the listener's buffer sizes.
        socket.set_send_buffer_size(64 * 1024).expect("SO_SNDBUF");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind firehose");
        let listener = socket.listen(64).expect("listen firehose");
        let addr = listener.local_addr().expect("firehose addr");
        let total = events * EVENT_BYTES as u64;
        let written = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (w, r) = (written.clone(), requests.clone());
        let task = super::Background::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let (w, r) = (w.clone(), r.clone());
                tokio::spawn(async move {
                    let _ = serve_firehose(s, events, &w, &r).await;
                });
            }
        });
        Firehose {
            addr,
            total,
            written,
            requests,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Body bytes the kernel has accepted so far (all responses together).
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// Requests whose head arrived.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn serve_firehose(
    mut s: TcpStream,
    events: u64,
    written: &AtomicU64,
    requests: &AtomicUsize,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = head.len() - end;
    while have < length {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        have += n;
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let total = events * EVENT_BYTES as u64;
    s.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {total}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    // 64 events per write: large writes, like a fast provider's.
    let mut batch = Vec::with_capacity(64 * EVENT_BYTES);
    for i in 0..events {
        batch.extend_from_slice(&firehose_event(i));
        if batch.len() == batch.capacity() || i + 1 == events {
            s.write_all(&batch).await?;
            written.fetch_add(batch.len() as u64, Ordering::SeqCst);
            batch.clear();
        }
    }
    s.flush().await
}

/// Resident set size of process `pid` in KiB (`VmRSS` in /proc/PID/status).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS line in /proc/{pid}/status:\n{status}"))
}
