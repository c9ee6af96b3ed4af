//! A real HTTP/2 upstream for pool tests: the `h2` crate's server over TLS
//! (ALPN h2) with a chosen SETTINGS_MAX_CONCURRENT_STREAMS. Each stream is
//! answered by a plan the test picks from the connection and stream number;
//! the server counts connections, streams, and the most streams one
//! connection had open at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use tokio::task::JoinSet;

use super::tls::{TestCa, TlsUpstream};

/// How one stream is answered.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// An OpenAI-style SSE stream: one content chunk at once, then `more`
    /// chunks `gap` apart, then `[DONE]`.
    Sse { more: usize, gap: Duration },
    /// `200 application/octet-stream` with `bytes` bytes, as fast as flow
    /// control lets them go.
    Large { bytes: usize },
    /// RST_STREAM(REFUSED_STREAM) before anything else.
    Refuse,
    /// A graceful GOAWAY for the connection, then the stream is served as `then`.
    GoAwayThen(Box<Plan>),
}

/// Counters the server keeps.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub connections: AtomicUsize,
    pub streams: AtomicUsize,
    pub refused: AtomicUsize,
    /// The most streams open at once on any one connection.
    pub max_open_per_conn: AtomicUsize,
}

/// The running server.
pub(crate) struct H2Up {
    pub tls: TlsUpstream,
    pub seen: Arc<Seen>,
}

impl H2Up {
    /// Serve h2 over TLS for `localhost`, at most `max_streams` streams per
    /// connection; `plan(connection, stream)` (both from 0) picks each answer.
    pub(crate) async fn start(
        ca: &TestCa,
        max_streams: u32,
        plan: impl Fn(usize, usize) -> Plan + Send + Sync + 'static,
    ) -> H2Up {
        let seen = Arc::new(Seen::default());
        let plan = Arc::new(plan);
        let s = seen.clone();
        let tls = TlsUpstream::start(ca.server_config(&["localhost"], &[b"h2"]), 0, move |io| {
            let (seen, plan) = (s.clone(), plan.clone());
            async move {
                let conn_no = seen.connections.fetch_add(1, Ordering::SeqCst);
                let Ok(mut conn) = h2::server::Builder::new()
                    .max_concurrent_streams(max_streams)
                    .handshake::<_, Bytes>(io)
                    .await
                else {
                    return;
                };
                let open = Arc::new(AtomicUsize::new(0));
                let mut streams = JoinSet::new();
                let mut n = 0;
                while let Some(Ok((_req, respond))) = conn.accept().await {
                    seen.streams.fetch_add(1, Ordering::SeqCst);
                    let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.max_open_per_conn.fetch_max(now, Ordering::SeqCst);
                    let mut p = plan(conn_no, n);
                    n += 1;
                    if let Plan::GoAwayThen(then) = p {
                        conn.graceful_shutdown();
                        p = *then;
                    }
                    let (open, seen) = (open.clone(), seen.clone());
                    streams.spawn(async move {
                        serve(respond, p, &seen).await;
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                // Let in-flight streams finish before the connection drops.
                while streams.join_next().await.is_some() {}
            }
        })
        .await;
        H2Up { tls, seen }
    }

    /// The upstream URL (`https://localhost:PORT`).
    pub(crate) fn url(&self) -> String {
        self.tls.url("localhost")
    }

    pub(crate) fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    pub(crate) fn streams(&self) -> usize {
        self.seen.streams.load(Ordering::SeqCst)
    }

    pub(crate) fn max_open_per_conn(&self) -> usize {
        self.seen.max_open_per_conn.load(Ordering::SeqCst)
    }
}

/// One SSE content chunk in the OpenAI chat format.
pub(crate) fn sse_chunk(i: usize) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i} \"}},\"finish_reason\":null}}]}}\n\n"
    ))
}

async fn serve(mut respond: h2::server::SendResponse<Bytes>, plan: Plan, seen: &Seen) {
    let head = |ct: &str| {
        Response::builder()
            .status(200)
            .header("content-type", ct)
            .body(())
            .unwrap()
    };
    match plan {
        Plan::Refuse => {
            seen.refused.fetch_add(1, Ordering::SeqCst);
            respond.send_reset(h2::Reason::REFUSED_STREAM);
        }
        Plan::Sse { more, gap } => {
            let Ok(mut s) = respond.send_response(head("text/event-stream"), false) else {
                return;
            };
            let _ = s.send_data(sse_chunk(0), false);
            for i in 1..=more {
                tokio::time::sleep(gap).await;
                if s.send_data(sse_chunk(i), false).is_err() {
                    return;
                }
            }
            let end = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
            let _ = s.send_data(Bytes::from_static(end.as_bytes()), true);
        }
        Plan::Large { bytes } => {
            let Ok(mut s) = respond.send_response(head("application/octet-stream"), false) else {
                return;
            };
            let block = Bytes::from(vec![b'x'; 64 * 1024]);
            let mut left = bytes;
            while left > 0 {
                s.reserve_capacity(block.len().min(left));
                let Some(Ok(n)) = std::future::poll_fn(|cx| s.poll_capacity(cx)).await else {
                    return;
                };
                let n = n.min(left);
                if s.send_data(block.slice(..n), false).is_err() {
                    return;
                }
                left -= n;
            }
            let _ = s.send_data(Bytes::new(), true);
        }
        Plan::GoAwayThen(_) => unreachable!("unwrapped by the connection loop"),
    }
}
