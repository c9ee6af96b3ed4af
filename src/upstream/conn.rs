//! HTTP/1 upstream connections driven by the task that reads their
//! response, and the pool that keeps them between requests.
//!
//! hyper's pooled client runs every connection in a task of its own and
//! hands each decoded chunk to the response body through a one-slot
//! channel: two task wake-ups per chunk, and because the serving side then
//! sees one frame at a time, one `writev` to the client per chunk. Here the
//! response body polls its connection itself: every chunk one socket read
//! brought in is handed over in the same task turn, and hyper's server
//! writes them to the client together.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use rustc_hash::FxHashMap;

use super::UpstreamBody;

/// The transport under an upstream connection: TCP, or TLS over TCP.
pub type Io = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;

type Connection = http1::Connection<Io, UpstreamBody>;

/// One HTTP/1 connection: the handle requests go in by and the state
/// machine that must be polled for anything to happen on the socket.
pub struct H1 {
    sender: http1::SendRequest<UpstreamBody>,
    /// `None` once the connection has finished (closed by either side).
    /// Boxed: it is large (buffers and state inline), and the box is made
    /// once per connection, not per request.
    conn: Option<Box<Connection>>,
}

impl std::fmt::Debug for H1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1")
            .field("open", &self.conn.is_some())
            .finish()
    }
}

impl H1 {
    /// Start HTTP/1 on a connected transport.
    pub async fn handshake(io: Io) -> hyper::Result<H1> {
        let (sender, conn) = http1::Builder::new().handshake(io).await?;
        Ok(H1 {
            sender,
            conn: Some(Box::new(conn)),
        })
    }

    /// Let the connection do what it can without waiting: read, decode,
    /// write. It wakes `cx` when the socket has more for it.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = self.conn.as_mut()
            && Pin::new(&mut **conn).poll(cx).is_ready()
        {
            // Finished (closed, or failed: a failure also reaches the
            // response future or body, which report it).
            self.conn = None;
        }
    }

    /// Whether another request may be sent on this connection now.
    fn reusable(&self) -> bool {
        self.conn.is_some() && !self.sender.is_closed() && self.sender.is_ready()
    }

    /// Send `req` and wait for the response head, driving the connection
    /// meanwhile. A request the connection never took (it was found closed)
    /// comes back as `Err(Unsent)`, to go on another connection.
    pub async fn send(
        mut self,
        req: Request<UpstreamBody>,
    ) -> Result<(Response<Incoming>, H1), SendError> {
        let mut head = pin!(self.sender.try_send_request(req));
        let res = poll_fn(|cx| {
            self.drive(cx);
            head.as_mut().poll(cx)
        })
        .await;
        match res {
            Ok(res) => Ok((res, self)),
            Err(mut e) => match e.take_message() {
                Some(req) => Err(SendError::Unsent(Box::new(req))),
                None => Err(SendError::Failed(e.into_error())),
            },
        }
    }
}

/// A request that did not get a response head.
#[derive(Debug)]
pub enum SendError {
    /// The connection was closed before it took the request: nothing was
    /// sent, so it may go on another connection.
    Unsent(Box<Request<UpstreamBody>>),
    /// The request was (at least partly) sent and the exchange failed.
    Failed(hyper::Error),
}

/// The serving thread a request runs on (0 off the serving threads), handed
/// in with each request. Connections are pooled per serving thread: a
/// socket is registered with the runtime of the thread that opened it, so
/// a connection used from another thread would have every read woken
/// across threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Shard(pub usize);

/// Pool key: where a connection goes, the serving thread that uses it,
/// and the forward proxy it goes through (so proxied and direct
/// connections never mix).
pub(super) type Key = (Scheme, Authority, Shard, super::egress::Via);

/// Idle HTTP/1 connections by destination, newest last. Idle connections
/// are not polled; one is checked when it is taken (a connection the peer
/// closed meanwhile reads its end of file then and is dropped) and expired
/// ones are dropped whenever their destination's list is touched.
///
/// Keyed with FxHash, not SipHash: the keys are the configured upstreams
/// (route and webhook URLs), never chosen by a client, and `Authority`
/// hashes byte by byte, which SipHash makes ~700 instructions a lookup. A
/// destination's list stays in the map when it empties (the next checkin
/// reuses it); `expire` drops empty lists.
#[derive(Debug)]
pub struct Pool {
    idle: Mutex<FxHashMap<Key, Vec<Idle>>>,
    max_per_host: usize,
    timeout: Duration,
}

#[derive(Debug)]
struct Idle {
    h1: H1,
    since: Instant,
}

/// How many of `list`'s entries are idle for `timeout` or longer at `now`
/// (`since` reads when an entry was put back). They are its first ones:
/// connections are put back with `since` read under the pool's lock, so a
/// list is in `since` order.
fn stale_prefix<T>(
    list: &[T],
    since: impl Fn(&T) -> Instant,
    now: Instant,
    timeout: Duration,
) -> usize {
    list.partition_point(|i| now.saturating_duration_since(since(i)) >= timeout)
}

/// Run `expire` on `pool` every `period` (the first a period from now)
/// until the pool is dropped. Must run inside the tokio runtime.
pub(super) fn expire_every<P: Send + Sync + 'static>(
    pool: &Arc<P>,
    period: Duration,
    expire: fn(&P),
) {
    let weak = Arc::downgrade(pool);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(pool) = weak.upgrade() else { return };
            expire(&pool);
        }
    });
}

impl Pool {
    /// An empty pool, and a task that closes connections idle for longer
    /// than `timeout` (it ends with the pool). Must run inside the tokio
    /// runtime.
    pub fn new(max_per_host: usize, timeout: Duration) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            idle: Mutex::new(FxHashMap::default()),
            max_per_host,
            timeout,
        });
        expire_every(
            &pool,
            timeout.max(Duration::from_millis(100)) / 2,
            Pool::expire,
        );
        pool
    }

    /// Close every connection idle for longer than the timeout.
    #[allow(
        clippy::disallowed_methods,
        reason = "idle-connection expiry bookkeeping, not a measurement"
    )]
    fn expire(&self) {
        let expired: Vec<Idle> = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let mut out = Vec::new();
            idle.retain(|_, list| {
                let n = stale_prefix(list, |i| i.since, now, self.timeout);
                out.extend(list.drain(..n));
                !list.is_empty()
            });
            out
        };
        // Closed here, outside the lock.
        drop(expired);
    }

    /// The newest live idle connection to `key`, if there is one.
    pub async fn checkout(&self, key: &Key) -> Option<H1> {
        loop {
            let mut h1 = self.pop(key)?;
            // One poll: a connection the server closed finds out here.
            poll_fn(|cx| {
                h1.drive(cx);
                Poll::Ready(())
            })
            .await;
            if h1.reusable() {
                return Some(h1);
            }
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "idle-connection expiry bookkeeping, not a measurement"
    )]
    fn pop(&self, key: &Key) -> Option<H1> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        let n = stale_prefix(list, |i| i.since, Instant::now(), self.timeout);
        list.drain(..n);
        list.pop().map(|i| i.h1)
    }

    /// Keep `h1` for the next request to `key`, if there is room.
    #[allow(
        clippy::disallowed_methods,
        reason = "idle-connection expiry bookkeeping, not a measurement"
    )]
    fn checkin(&self, key: Key, h1: H1) {
        if self.max_per_host == 0 || !h1.reusable() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key).or_default();
        let now = Instant::now();
        let n = stale_prefix(list, |i| i.since, now, self.timeout);
        list.drain(..n);
        if list.len() < self.max_per_host {
            list.push(Idle { h1, since: now });
        }
    }
}

/// A response body that drives its own connection, and gives the
/// connection back to the pool when the body has been read to its end.
/// Dropped before that, it closes the connection: the upstream sees the
/// request cancelled at once.
#[derive(Debug)]
pub struct Driven {
    body: Incoming,
    /// The body was read to its end.
    done: bool,
    h1: Option<H1>,
    home: Option<(Arc<Pool>, Key)>,
}

impl Driven {
    pub fn new(body: Incoming, h1: H1, pool: Arc<Pool>, key: Key) -> Driven {
        Driven {
            body,
            done: false,
            h1: Some(h1),
            home: Some((pool, key)),
        }
    }
}

impl Body for Driven {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(h1) = this.h1.as_mut() {
            h1.drive(cx);
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.done = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        if !(self.done || self.body.is_end_stream()) {
            return;
        }
        if let (Some(mut h1), Some((pool, key))) = (self.h1.take(), self.home.take()) {
            // Let it finish the exchange (it then asks for the next request);
            // the next checkout polls it with a real waker.
            h1.drive(&mut Context::from_waker(Waker::noop()));
            pool.checkin(key, h1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a base instant for made-up idle times"
    )]
    fn stale_entries_are_the_oldest_and_all_of_them_go() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let timeout = Duration::from_millis(100);
        let list = vec![at(0), at(10), at(10), at(50), at(120)];
        let after = |now: u64| {
            let mut l = list.clone();
            let n = stale_prefix(&l, |s| *s, at(now), timeout);
            l.drain(..n);
            // The same as keeping each entry that is still fresh.
            let want: Vec<Instant> = list
                .iter()
                .copied()
                .filter(|s| at(now).saturating_duration_since(*s) < timeout)
                .collect();
            assert_eq!(l, want, "at {now} ms");
            l.len()
        };
        assert_eq!(after(0), 5, "nothing stale");
        assert_eq!(after(99), 5);
        assert_eq!(after(100), 4, "idle for exactly the timeout is stale");
        assert_eq!(after(110), 2);
        assert_eq!(after(149), 2);
        assert_eq!(after(150), 1);
        assert_eq!(after(500), 0);
        let empty: Vec<Instant> = Vec::new();
        assert_eq!(stale_prefix(&empty, |s| *s, at(0), timeout), 0);
    }
}
