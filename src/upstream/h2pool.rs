//! HTTP/2 upstream connections by capacity: a request in, a stream slot
//! ([`Lease`]) on a connection with room out, or word to open another
//! connection, or to speak HTTP/1.1 to this host. Each connection counts
//! its streams against the peer's SETTINGS_MAX_CONCURRENT_STREAMS (read by
//! `tap`, later changes included); when every connection is full another
//! is opened, up to `upstream.http2_max_connections_per_host`; past that,
//! requests queue for at most `upstream.http2_queue_timeout`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper::client::conn::http2;
use tokio::sync::Notify;

use super::UpstreamBody;
use super::conn::{Key, expire_every};
use super::tap::Peer;

/// The pool's limits (from `[upstream]`).
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// Connections per host (and serving thread).
    pub max_connections: usize,
    /// Our own cap on streams per connection, below the peer's.
    pub max_streams: u32,
    /// Longest wait for a stream slot.
    pub queue_timeout: Duration,
    /// An extra connection idle this long is closed.
    pub idle_timeout: Duration,
}

/// Streams assumed for a connection still opening to a host whose limit
/// is not known yet: RFC 9113 §6.5.2 recommends servers allow at least 100.
const FIRST_GUESS: u32 = 100;

/// HTTP/2 connections by destination (and serving thread).
#[derive(Debug)]
pub(super) struct H2Pool {
    hosts: Mutex<HashMap<Key, Arc<Host>>>,
    limits: Limits,
}

/// What a host speaks, once a first connection has shown it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Proto {
    #[default]
    Unknown,
    H1,
    H2,
}

/// One destination's connections and waiters.
#[derive(Debug)]
pub(super) struct Host {
    state: Mutex<HostState>,
    /// Woken (all) when a connection opens, fails, or its peer changes its
    /// settings or goes away; (one) when a stream slot frees.
    changed: Arc<Notify>,
}

#[derive(Debug, Default)]
struct HostState {
    proto: Proto,
    conns: Vec<Entry>,
    /// Connections being opened for this host.
    opening: usize,
    /// Requests waiting for a connection being opened.
    promised: usize,
    /// Requests waiting because every connection is full at the cap.
    queued: usize,
    /// The stream limit the host's last connection reported.
    guess: Option<u32>,
    next_id: u64,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    sender: http2::SendRequest<UpstreamBody>,
    peer: Arc<Peer>,
    in_flight: usize,
    idle_since: Instant,
}

impl Entry {
    /// New streams may go on this connection (no GOAWAY, not closed).
    fn usable(&self) -> bool {
        !self.peer.gone_away() && !self.sender.is_closed()
    }

    fn capacity(&self, max: u32) -> usize {
        self.peer.limit().min(max) as usize
    }

    fn has_room(&self, max: u32) -> bool {
        self.usable() && self.in_flight < self.capacity(max)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a request should do next.
#[derive(Debug)]
pub(super) enum Step {
    /// Send on this stream slot.
    Go(Lease),
    /// Open a connection (and report it through [`Opening`]).
    Open(Opening),
    /// The host speaks HTTP/1.1: use the HTTP/1 pool.
    Http1,
}

/// No stream slot came free within the queue timeout.
#[derive(Debug)]
pub(super) struct QueueTimeout;

/// Counts a waiting request in its host's `promised` or `queued` until it
/// stops waiting (also when the request is dropped meanwhile).
struct Waiting<'a> {
    host: &'a Host,
    promised: bool,
    queued: bool,
}

impl Waiting<'_> {
    fn clear(&mut self, st: &mut HostState) {
        if std::mem::take(&mut self.promised) {
            st.promised -= 1;
        }
        if std::mem::take(&mut self.queued) {
            st.queued -= 1;
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.promised || self.queued {
            let host = self.host;
            self.clear(&mut lock(&host.state));
        }
    }
}

impl H2Pool {
    /// An empty pool and a task that closes idle extra connections (it
    /// ends with the pool). Must run inside the tokio runtime.
    pub(super) fn new(limits: Limits) -> Arc<H2Pool> {
        let period = (limits.idle_timeout / 2).max(Duration::from_millis(50));
        let pool = Arc::new(H2Pool {
            hosts: Mutex::new(HashMap::new()),
            limits,
        });
        expire_every(&pool, period, H2Pool::expire);
        pool
    }

    fn host(&self, key: &Key) -> Arc<Host> {
        lock(&self.hosts)
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Host {
                    state: Mutex::new(HostState::default()),
                    changed: Arc::new(Notify::new()),
                })
            })
            .clone()
    }

    /// A place for a connection already being opened outside the pool's
    /// say-so (the HTTP/1 path found HTTP/2): counted, whatever the cap.
    pub(super) fn adopt(&self, key: &Key) -> Opening {
        let host = self.host(key);
        lock(&host.state).opening += 1;
        Opening { host, done: false }
    }

    /// Whether `key` is known to speak HTTP/2 (or not yet known at all).
    pub(super) fn may_be_h2(&self, key: &Key) -> bool {
        match lock(&self.hosts).get(key) {
            Some(host) => lock(&host.state).proto != Proto::H1,
            None => true,
        }
    }

    /// A stream slot for a request to `key`, or what to do instead. Waits
    /// for a connection being opened, or (past the connection cap) for a
    /// slot, at most the queue timeout. `always_h2`: the route wants HTTP/2
    /// whatever an earlier connection showed.
    pub(super) async fn acquire(&self, key: &Key, always_h2: bool) -> Result<Step, QueueTimeout> {
        let host = self.host(key);
        #[allow(
            clippy::disallowed_methods,
            reason = "queue timeout deadline, not a measurement"
        )]
        let deadline = tokio::time::Instant::now() + self.limits.queue_timeout;
        let mut waiting = Waiting {
            host: &host,
            promised: false,
            queued: false,
        };
        loop {
            let mut notified = pin!(host.changed.notified());
            notified.as_mut().enable();
            {
                let mut st = lock(&host.state);
                waiting.clear(&mut st);
                if st.proto == Proto::H1 && !always_h2 {
                    return Ok(Step::Http1);
                }
                if let Some(lease) = self.take_slot(&host, &mut st) {
                    return Ok(Step::Go(lease));
                }
                let live = st.conns.iter().filter(|e| e.usable()).count();
                let guess = st.guess.unwrap_or(FIRST_GUESS).min(self.limits.max_streams);
                if st.promised < st.opening * guess.max(1) as usize {
                    st.promised += 1;
                    waiting.promised = true;
                } else if live + st.opening < self.limits.max_connections.max(1) {
                    st.opening += 1;
                    return Ok(Step::Open(Opening {
                        host: host.clone(),
                        done: false,
                    }));
                } else {
                    st.queued += 1;
                    waiting.queued = true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(QueueTimeout);
            }
        }
    }

    /// A slot on the oldest connection with room: filling the oldest first
    /// leaves the newer ones idle when the load falls, and they close.
    fn take_slot(&self, host: &Arc<Host>, st: &mut HostState) -> Option<Lease> {
        st.conns.retain(|e| e.usable() || e.in_flight > 0);
        let max = self.limits.max_streams;
        let entry = st.conns.iter_mut().find(|e| e.has_room(max))?;
        entry.in_flight += 1;
        Some(Lease {
            host: host.clone(),
            id: entry.id,
            sender: entry.sender.clone(),
        })
    }

    /// Close idle extra connections (one idle connection per host stays),
    /// and forget connections that are closed.
    fn expire(&self) {
        let hosts: Vec<Arc<Host>> = lock(&self.hosts).values().cloned().collect();
        let timeout = self.limits.idle_timeout;
        for host in hosts {
            let closed: Vec<Entry> = {
                let mut st = lock(&host.state);
                let mut out = Vec::new();
                let mut kept_idle = false;
                let mut i = 0;
                while i < st.conns.len() {
                    let e = &st.conns[i];
                    let idle = e.in_flight == 0;
                    let stale = idle && e.idle_since.elapsed() >= timeout;
                    let drop_it = (idle && !e.usable()) || (stale && kept_idle);
                    if drop_it {
                        out.push(st.conns.remove(i));
                        continue;
                    }
                    kept_idle |= idle && e.usable();
                    i += 1;
                }
                out
            };
            // Dropped outside the lock: hyper closes a connection whose
            // last handle is gone.
            drop(closed);
        }
    }

    /// Figures per destination (summed over serving threads): `(scheme://authority,
    /// connections, streams in flight, queued requests)`.
    pub(super) fn figures(&self) -> Vec<(String, u64, u64, u64)> {
        let mut out: HashMap<String, (u64, u64, u64)> = HashMap::new();
        let hosts: Vec<(Key, Arc<Host>)> = lock(&self.hosts)
            .iter()
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        for ((scheme, authority, _, _), host) in hosts {
            let st = lock(&host.state);
            if st.proto == Proto::H1 {
                continue;
            }
            let f = out.entry(format!("{scheme}://{authority}")).or_default();
            f.0 += st.conns.iter().filter(|e| e.usable()).count() as u64;
            f.1 += st.conns.iter().map(|e| e.in_flight as u64).sum::<u64>();
            f.2 += (st.queued + st.promised) as u64;
        }
        let mut v: Vec<_> = out.into_iter().map(|(h, (c, s, q))| (h, c, s, q)).collect();
        v.sort();
        v
    }
}

/// A connection being opened on the pool's say-so. Reports how it went;
/// dropped unreported (the open failed), it frees its place.
#[derive(Debug)]
pub(super) struct Opening {
    host: Arc<Host>,
    done: bool,
}

impl Opening {
    /// The connection turned out to speak HTTP/1.1.
    pub(super) fn http1(mut self) {
        self.done = true;
        let mut st = lock(&self.host.state);
        st.opening -= 1;
        st.proto = Proto::H1;
        drop(st);
        self.host.changed.notify_waiters();
    }

    /// The connection speaks HTTP/2 and its server preface has arrived:
    /// share it, and take its first stream slot.
    #[allow(
        clippy::disallowed_methods,
        reason = "pool idle bookkeeping, not a measurement"
    )]
    pub(super) fn ready(
        mut self,
        sender: http2::SendRequest<UpstreamBody>,
        peer: Arc<Peer>,
    ) -> Lease {
        self.done = true;
        let mut st = lock(&self.host.state);
        st.opening -= 1;
        st.proto = Proto::H2;
        st.guess = Some(peer.limit());
        st.next_id += 1;
        let id = st.next_id;
        st.conns.push(Entry {
            id,
            sender: sender.clone(),
            peer,
            in_flight: 1,
            idle_since: Instant::now(),
        });
        drop(st);
        self.host.changed.notify_waiters();
        Lease {
            host: self.host.clone(),
            id,
            sender,
        }
    }

    /// The notifier the connection's [`Peer`] wakes the host's waiters by.
    pub(super) fn changed(&self) -> Arc<Notify> {
        self.host.changed.clone()
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.host.state).opening -= 1;
            self.host.changed.notify_waiters();
        }
    }
}

/// One stream slot on one connection, held from before the request is
/// sent until its response body ends or is dropped.
#[derive(Debug)]
pub struct Lease {
    host: Arc<Host>,
    id: u64,
    sender: http2::SendRequest<UpstreamBody>,
}

impl Lease {
    /// The connection's handle to send the request by.
    pub fn sender(&mut self) -> &mut http2::SendRequest<UpstreamBody> {
        &mut self.sender
    }

    /// Put no new streams on this connection (it refused a stream): its
    /// streams in flight finish, and it closes when the last one has.
    pub fn retire(&self) {
        let st = lock(&self.host.state);
        if let Some(e) = st.conns.iter().find(|e| e.id == self.id) {
            e.peer.retire();
        }
        drop(st);
        self.host.changed.notify_waiters();
    }
}

impl Drop for Lease {
    #[allow(
        clippy::disallowed_methods,
        reason = "pool idle bookkeeping, not a measurement"
    )]
    fn drop(&mut self) {
        let mut st = lock(&self.host.state);
        if let Some(e) = st.conns.iter_mut().find(|e| e.id == self.id) {
            e.in_flight -= 1;
            if e.in_flight == 0 {
                e.idle_since = Instant::now();
            }
        }
        drop(st);
        self.host.changed.notify_one();
    }
}

/// Run `fut` (a connection task) to its end, logging how it ended.
pub(super) fn spawn_connection<F, E>(fut: F)
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        if let Err(e) = fut.await {
            tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
        }
    });
}
