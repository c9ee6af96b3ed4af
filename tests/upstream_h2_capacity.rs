//! HTTP/2 upstream connections by capacity (`src/upstream/h2pool.rs`),
//! against a real HTTP/2 server (the `h2` crate over TLS) that allows few
//! streams per connection.
//!
//! - `forty_two_second_streams_see_direct_ttft`: 40 concurrent 2-second
//!   streams through one serving thread to a server allowing 4 streams per
//!   connection: every TTFT under 1 s (queued in batches of 4 it would be
//!   2 s and more), about 10 connections, never more than 4 streams on one.
//! - `past_the_cap_a_request_queues_then_gets_503`: one stream per
//!   connection, two connections at most: the third concurrent request waits
//!   `http2_queue_timeout` and gets a 503 tokentap JSON error.
//! - `past_the_cap_a_request_waits_for_a_slot`: with a longer queue timeout
//!   the third request is served once a slot frees, and its wait shows on
//!   `tokentap_upstream_pool_wait_seconds`.
//! - `goaway_mid_load_finishes_streams_and_moves_new_ones`: a graceful
//!   GOAWAY while streams run: they all finish whole, and later requests go
//!   on a fresh connection.
//! - `refused_stream_is_retried_once_on_another_connection`: REFUSED_STREAM
//!   on the first stream: the client still gets its whole answer; a stream
//!   refused twice is a 502 `upstream_reset` after exactly two attempts.
//! - `a_stalled_reader_stalls_nobody_else`: three clients stop reading
//!   32 MiB responses while three others stream on the same upstream
//!   connection: the others keep their pace.
//! - `http2_never_speaks_http1_to_an_h2_capable_upstream`: the route key.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]

mod support;

use std::time::{Duration, Instant};

use support::client::{self, Req};
use support::h2up::{H2Up, Plan};
use support::proxy::{InProc, Scratch, Toml, q};
use support::script;
use support::tls::TestCa;
use support::within;
use tokio::io::AsyncWriteExt;

use support::CHAT;

/// The two tests that measure time run one at a time: the stalled-reader
/// test pushes tens of MiB through debug-build TLS, which would otherwise
/// eat the CPU the 40 handshakes of the other need.
static TIMED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn chat(proxy: &InProc, i: usize) -> Req {
    Req::post_json(
        proxy.addr,
        CHAT,
        script::openai_request(&format!("m{i}"), true, None),
    )
}

/// A proxy with one serving thread in front of `up`, trusting `ca`.
async fn proxy(ca: &TestCa, up: &H2Up, extra: &[(&str, &str, &str)]) -> (InProc, Scratch) {
    let scratch = Scratch::new("h2-capacity");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let mut toml = Toml::openai(&up.url())
        .set("upstream", "ca_file", &q(&ca_file.display().to_string()))
        .set("server", "threads", "1");
    for (section, key, value) in extra {
        toml = toml.set(section, key, value);
    }
    (InProc::start(&toml).await, scratch)
}

/// Send `n` streamed requests at once; each result with its TTFT (the
/// first content chunk).
async fn concurrent(
    proxy: &InProc,
    n: usize,
    limit: Duration,
) -> Vec<(client::Streamed, Option<Duration>)> {
    let c = client::http1();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (c, req) = (c.clone(), chat(proxy, i));
            tokio::spawn(async move {
                let (resp, t0) = client::send(&c, &req).await;
                let got = client::read_all(resp, t0, limit).await;
                let ttft = got.first_containing("\"content\":\"t0 \"");
                (got, ttft)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn two_second_stream() -> Plan {
    Plan::Sse {
        more: 20,
        gap: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn forty_two_second_streams_see_direct_ttft() {
    let _one_at_a_time = TIMED.lock().await;
    let ca = TestCa::new();
    let up = H2Up::start(&ca, 4, |_, _| two_second_stream()).await;
    let (proxy, _s) = proxy(&ca, &up, &[]).await;
    let results = concurrent(&proxy, 40, Duration::from_secs(20)).await;
    let mut ttfts = Vec::new();
    for (i, (got, ttft)) in results.iter().enumerate() {
        assert_eq!(got.status, 200, "stream {i}: {}", got.text());
        assert!(
            got.text().contains("[DONE]"),
            "stream {i} whole: {}",
            got.text()
        );
        ttfts.push(ttft.unwrap_or_else(|| panic!("stream {i} had no content")));
    }
    ttfts.sort();
    let (median, max) = (ttfts[ttfts.len() / 2], ttfts[ttfts.len() - 1]);
    eprintln!(
        "TTFT min {:?} median {median:?} max {max:?}; {} upstream connections",
        ttfts[0],
        up.connections()
    );
    assert!(
        max < Duration::from_secs(1),
        "every TTFT under 1 s (queued behind 4-stream batches it would be >= 2 s): median {median:?}, max {max:?}"
    );
    assert!(
        (10..=16).contains(&up.connections()),
        "40 streams at 4 per connection need 10 connections (cap 16); opened {}",
        up.connections()
    );
    assert!(
        up.max_open_per_conn() <= 4,
        "the server's limit was respected"
    );
    assert_eq!(up.streams(), 40, "no stream was refused or sent twice");
}

#[tokio::test]
async fn past_the_cap_a_request_queues_then_gets_503() {
    let ca = TestCa::new();
    let long = Plan::Sse {
        more: 15,
        gap: Duration::from_millis(100),
    };
    let up = H2Up::start(&ca, 1, move |_, _| long.clone()).await;
    let extra = [
        ("upstream", "http2_max_connections_per_host", "2"),
        ("upstream", "http2_queue_timeout", "\"300ms\""),
    ];
    let (proxy, _s) = proxy(&ca, &up, &extra).await;
    let results = concurrent(&proxy, 3, Duration::from_secs(10)).await;
    let mut statuses: Vec<u16> = results.iter().map(|(g, _)| g.status.as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 503], "two served, one past the cap");
    let (refused, _) = results.iter().find(|(g, _)| g.status == 503).unwrap();
    let body = refused.json();
    assert_eq!(body["error"]["code"], "upstream_queue_timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("http2_queue_timeout"), "{message}");
    assert!(
        refused.head_after >= Duration::from_millis(250),
        "it waited: {:?}",
        refused.head_after
    );
    assert_eq!(up.connections(), 2, "the cap held");
}

#[tokio::test]
async fn past_the_cap_a_request_waits_for_a_slot() {
    let ca = TestCa::new();
    let short = Plan::Sse {
        more: 5,
        gap: Duration::from_millis(100),
    };
    let up = H2Up::start(&ca, 1, move |_, _| short.clone()).await;
    let extra = [
        ("upstream", "http2_max_connections_per_host", "2"),
        ("upstream", "http2_queue_timeout", "\"5s\""),
    ];
    let (proxy, _s) = proxy(&ca, &up, &extra).await;
    let results = concurrent(&proxy, 3, Duration::from_secs(10)).await;
    let mut ttfts: Vec<Duration> = results
        .iter()
        .map(|(g, t)| {
            assert_eq!(g.status, 200, "{}", g.text());
            t.unwrap()
        })
        .collect();
    ttfts.sort();
    assert!(
        ttfts[2] >= Duration::from_millis(400),
        "the third waited for a slot (a stream lasts 0.5 s): {ttfts:?}"
    );
    assert_eq!(up.connections(), 2, "the cap held");
    assert_eq!(up.streams(), 3);
}

#[tokio::test]
async fn goaway_mid_load_finishes_streams_and_moves_new_ones() {
    let ca = TestCa::new();
    let stream = Plan::Sse {
        more: 10,
        gap: Duration::from_millis(50),
    };
    let up = H2Up::start(&ca, 100, move |conn, n| {
        if conn == 0 && n == 2 {
            Plan::GoAwayThen(Box::new(stream.clone()))
        } else {
            stream.clone()
        }
    })
    .await;
    let (proxy, _s) = proxy(&ca, &up, &[]).await;
    // Warm up: the first connection is open and known to speak HTTP/2.
    let first = concurrent(&proxy, 1, Duration::from_secs(10)).await;
    assert_eq!(first[0].0.status, 200);
    let during = concurrent(&proxy, 6, Duration::from_secs(10)).await;
    for (i, (got, _)) in during.iter().enumerate() {
        assert_eq!(got.status, 200, "stream {i} during GOAWAY: {}", got.text());
        assert!(got.error.is_none(), "stream {i} broke off: {:?}", got.error);
        assert!(
            got.text().contains("[DONE]"),
            "stream {i} whole: {}",
            got.text()
        );
    }
    let after = concurrent(&proxy, 3, Duration::from_secs(10)).await;
    for (got, _) in &after {
        assert_eq!(got.status, 200, "after GOAWAY: {}", got.text());
        assert!(got.text().contains("[DONE]"));
    }
    assert!(
        up.connections() >= 2,
        "new streams went on a fresh connection after the GOAWAY ({} connections)",
        up.connections()
    );
}

#[tokio::test]
async fn refused_stream_is_retried_once_on_another_connection() {
    let ca = TestCa::new();
    let up = H2Up::start(&ca, 100, |conn, n| {
        if conn == 0 && n == 0 {
            Plan::Refuse
        } else {
            Plan::Sse {
                more: 2,
                gap: Duration::from_millis(10),
            }
        }
    })
    .await;
    let (proxy, _s) = proxy(&ca, &up, &[]).await;
    let got = &concurrent(&proxy, 1, Duration::from_secs(10)).await[0].0;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.text().contains("[DONE]"), "{}", got.text());
    assert_eq!(up.seen.refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(up.streams(), 2, "refused once, sent once more");
    assert_eq!(up.connections(), 2, "the retry went on another connection");

    // Refused every time: one retry, then the client hears of it.
    let ca = TestCa::new();
    let always = H2Up::start(&ca, 100, |_, _| Plan::Refuse).await;
    let (proxy, _s) = self::proxy(&ca, &always, &[]).await;
    let got = &concurrent(&proxy, 1, Duration::from_secs(10)).await[0].0;
    assert_eq!(got.status, 502, "{}", got.text());
    assert_eq!(got.json()["error"]["code"], "upstream_reset");
    assert_eq!(always.streams(), 2, "exactly one retry");
}

#[tokio::test]
async fn a_stalled_reader_stalls_nobody_else() {
    let _one_at_a_time = TIMED.lock().await;
    let ca = TestCa::new();
    const STALLED: usize = 3;
    let up = H2Up::start(&ca, 100, |_, n| {
        if n < STALLED {
            Plan::Large {
                bytes: 32 * 1024 * 1024,
            }
        } else {
            Plan::Sse {
                more: 30,
                gap: Duration::from_millis(50),
            }
        }
    })
    .await;
    let (proxy, _s) = proxy(&ca, &up, &[]).await;
    // Clients that send a request and never read: a small receive buffer
    // so the backpressure reaches tokentap quickly.
    let body = script::openai_request("big", false, None);
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut conn = sock.connect(proxy.addr).await.unwrap();
        let head = format!(
            "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(&body).await.unwrap();
        stalled.push(conn);
    }
    within(
        Duration::from_secs(10),
        "the stalled streams reach the upstream",
        async {
            while up.streams() < STALLED {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    // Give the stalled streams time to fill every buffer they can.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let results = concurrent(&proxy, 3, Duration::from_secs(10)).await;
    for (i, (got, _)) in results.iter().enumerate() {
        assert_eq!(got.status, 200, "stream {i}: {}", got.text());
        assert!(got.text().contains("[DONE]"), "stream {i} whole");
        let gaps: Vec<Duration> = got.chunks.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let max_gap = gaps.iter().max().copied().unwrap_or_default();
        assert!(
            max_gap < Duration::from_millis(750),
            "stream {i} kept its 50 ms pace beside the stalled readers: max gap {max_gap:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "1.5 s streams took {:?}",
        started.elapsed()
    );
    assert_eq!(
        up.connections(),
        1,
        "every stream shared one upstream connection"
    );
    drop(stalled);
}

#[tokio::test]
async fn http2_never_speaks_http1_to_an_h2_capable_upstream() {
    let ca = TestCa::new();
    // The server offers only h2 by ALPN and speaks only h2: a route that
    // must not speak HTTP/2 cannot be served by it at all.
    let up = H2Up::start(&ca, 100, |_, _| Plan::Sse {
        more: 1,
        gap: Duration::ZERO,
    })
    .await;
    let scratch = Scratch::new("h2-never");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let toml = Toml::new()
        .set("upstream", "ca_file", &q(&ca_file.display().to_string()))
        .raw_route(&format!(
            "[[routes]]\nname = \"never\"\nprefix = \"/\"\nupstream = \"{}\"\nprovider = \"openai\"\nhttp2 = \"never\"\n",
            up.url()
        ));
    let proxy = InProc::start(&toml).await;
    let got = &concurrent(&proxy, 1, Duration::from_secs(10)).await[0].0;
    assert_ne!(
        got.status,
        200,
        "http2 = never must not speak HTTP/2: {}",
        got.text()
    );
    assert_eq!(up.streams(), 0, "no HTTP/2 stream was opened");
}
