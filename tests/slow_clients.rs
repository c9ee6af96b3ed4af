//! Slow clients against the real `tokentap` binary.
//!
//! Guarantees:
//! - Slowloris: a client that trickles its request head (one byte every
//!   half second) is disconnected by `server.header_read_timeout`, no
//!   request reaches the upstream, and 200 such clients at once cost the
//!   proxy a bounded amount of memory (resident set growth is asserted)
//!   while it keeps serving other clients.
//! - Backpressure: when a client reads the response head of a large stream
//!   and then stops reading, the proxy stops reading from the upstream (the
//!   upstream's writes block after a few MB of a 64 MB body) and its memory
//!   stays bounded; when the client resumes, it receives the whole body
//!   byte-identical.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]

mod support;

use std::time::{Duration, Instant};

use support::client::{self, Req};
use support::proxy::{Bin, Toml};
use support::raw::{self, EVENT_BYTES, Firehose};
use support::upstream::Upstream;
use support::{script, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use support::CHAT;

fn pid(bin: &Bin) -> u32 {
    bin.child.id().expect("tokentap still running")
}

/// Send a request head one byte every `every`; return how long the
/// connection lived and whether the server closed it (vs. the test giving up).
async fn slowloris(
    addr: std::net::SocketAddr,
    every: Duration,
    give_up: Duration,
) -> (Duration, bool) {
    let t0 = Instant::now();
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return (t0.elapsed(), true);
    };
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let (mut rd, mut wr) = s.split();
    let write = async {
        for b in head.iter().cycle() {
            if wr.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(every).await;
        }
        std::future::pending::<()>().await;
    };
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let closed = tokio::select! {
        _ = write => false,
        _ = read => true,
        _ = tokio::time::sleep(give_up) => false,
    };
    (t0.elapsed(), closed)
}

#[tokio::test]
async fn slowloris_clients_are_cut_by_header_read_timeout_in_bounded_memory() {
    const CLIENTS: usize = 200;
    let up = Upstream::fixed(script::openai_chat_json("gpt-4o-mini", "hi", (1, 1))).await;
    let toml = Toml::openai(&up.url()).set("server", "header_read_timeout", "\"2s\"");
    let bin = Bin::start(&toml, &[], &[]).await;
    let (addr, pid) = (bin.addr, pid(&bin));
    let http = client::http1();
    let warm = client::fetch(&http, &Req::post_json(addr, CHAT, "{\"model\":\"m\"}")).await;
    assert_eq!(warm.status, 200);
    let baseline = raw::rss_kib(pid);

    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(slowloris(
                addr,
                Duration::from_millis(500),
                Duration::from_secs(30),
            ))
        })
        .collect();
    // While they trickle: sample memory, and check others are still served.
    let mut peak = baseline;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(raw::rss_kib(pid));
    }
    let during = client::fetch(&http, &Req::post_json(addr, CHAT, "{\"model\":\"m\"}")).await;
    assert_eq!(
        during.status, 200,
        "a normal client is served during the attack"
    );

    let mut lifetimes = Vec::new();
    for t in tasks {
        let (lived, closed) = within(Duration::from_secs(40), "a slowloris client", t)
            .await
            .expect("slowloris task");
        assert!(
            closed,
            "the proxy closed a slowloris connection (lived {lived:?})"
        );
        lifetimes.push(lived);
    }
    lifetimes.sort();
    let (first, last) = (lifetimes[0], lifetimes[CLIENTS - 1]);
    eprintln!(
        "slowloris: {CLIENTS} clients closed after {first:?}..{last:?}; RSS baseline {baseline} KiB, peak {peak} KiB (+{} KiB)",
        peak.saturating_sub(baseline)
    );
    assert!(
        first >= Duration::from_secs(1),
        "closed by the 2s header timeout, not at once: {first:?}"
    );
    assert!(
        last <= Duration::from_secs(15),
        "every client was closed well within the test's limit: {last:?}"
    );
    let growth = peak.saturating_sub(baseline);
    assert!(
        growth < 48 * 1024,
        "{CLIENTS} slowloris connections grew the proxy's RSS by {growth} KiB (bound 48 MiB)"
    );
    assert_eq!(
        up.exchanges().len(),
        2,
        "only the two complete requests reached the upstream"
    );
    bin.stop().await;
}

/// Expected body bytes `[offset, offset + len)` of the firehose stream.
fn expected(offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + EVENT_BYTES);
    let mut i = offset / EVENT_BYTES as u64;
    let skip = (offset % EVENT_BYTES as u64) as usize;
    while out.len() < len + skip {
        out.extend_from_slice(&raw::firehose_event(i));
        i += 1;
    }
    out[skip..skip + len].to_vec()
}

#[tokio::test]
async fn a_client_that_stops_reading_pushes_back_on_the_upstream() {
    const EVENTS: u64 = 64 * 1024; // 64 MiB of SSE
    let hose = Firehose::start(EVENTS).await;
    let bin = Bin::start(&Toml::openai(&hose.url()), &[], &[]).await;
    let pid = pid(&bin);
    let baseline = raw::rss_kib(pid);

    let socket = TcpSocket::new_v4().expect("client socket");
    socket.set_recv_buffer_size(64 * 1024).expect("SO_RCVBUF");
    let mut s = within(support::STEP_TIMEOUT, "connect", socket.connect(bin.addr))
        .await
        .expect("connect to proxy");
    let body = "{\"model\":\"gpt-4o-mini\",\"stream\":true,\"messages\":[]}";
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes())
        .await
        .expect("write request");
    // Read just the head.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    let head_end = within(support::STEP_TIMEOUT, "the response head", async {
        loop {
            let n = s.read(&mut buf).await.expect("read head");
            assert!(n > 0, "proxy closed before the head");
            got.extend_from_slice(&buf[..n]);
            if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                return p + 4;
            }
        }
    })
    .await;
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", hose.total)),
        "Content-Length passed through: {head}"
    );

    // Stop reading; wait until the upstream's writes stall.
    let stalled_at = within(
        Duration::from_secs(30),
        "the upstream's writes to stall",
        async {
            let mut last = hose.written();
            loop {
                tokio::time::sleep(Duration::from_millis(1000)).await;
                let now = hose.written();
                if now == last {
                    return now;
                }
                last = now;
            }
        },
    )
    .await;
    let rss_stalled = raw::rss_kib(pid);
    eprintln!(
        "backpressure: upstream stalled after {stalled_at} of {} bytes; RSS {baseline} KiB -> {rss_stalled} KiB",
        hose.total
    );
    assert!(
        stalled_at < 24 * 1024 * 1024,
        "the upstream could write {stalled_at} bytes to a client that reads nothing (bound 24 MiB of 64 MiB)"
    );
    assert!(
        rss_stalled.saturating_sub(baseline) < 48 * 1024,
        "proxy RSS grew from {baseline} KiB to {rss_stalled} KiB while the client did not read"
    );

    // Resume: the whole body arrives, byte-identical.
    let mut offset = 0u64;
    let mut pending = got[head_end..].to_vec();
    let read_all = async {
        loop {
            if !pending.is_empty() {
                let want = expected(offset, pending.len());
                if pending != want {
                    let at = pending
                        .iter()
                        .zip(&want)
                        .take_while(|(a, b)| a == b)
                        .count();
                    panic!("body differs at byte {}", offset + at as u64);
                }
                offset += pending.len() as u64;
                pending.clear();
            }
            let n = s.read(&mut buf).await.expect("read body");
            if n == 0 {
                return;
            }
            pending.extend_from_slice(&buf[..n]);
        }
    };
    within(Duration::from_secs(120), "the rest of the body", read_all).await;
    assert_eq!(offset, hose.total, "the whole body arrived");
    assert_eq!(hose.written(), hose.total, "the upstream finished writing");
    bin.stop().await;
}
