//! The store client: `[state]` in; a connection manager to Redis or
//! Valkey, one task that sends the queued ledger claims and session adds
//! as one pipeline per round trip, and the reads `/api/sessions` makes,
//! out. Every operation is bounded by `state.timeout` and skipped while
//! backing off after a failure.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo, Value};
use tokio::sync::mpsc;

use super::StateError;
use super::health::Health;
use super::scripts::{self, ADD, LIST};
use crate::config::state::shown_url;
use crate::config::{SessionLimits, StateConfig};
use crate::meter::ledger::{ClaimDone, LedgerKey, SharedLedger};
use crate::watch::rollups::{SessionFigures, SessionList, SessionView, SharedSessions, SortBy};

/// Operations queued for the store at most; past it a claim is decided
/// in process and a session add is left to the replica's own rollups.
const QUEUE: usize = 8192;
/// Operations sent in one pipeline at most.
const MAX_BATCH: usize = 256;
/// How long the task waits after a first operation for more to join its
/// pipeline: off the request path, it turns one round trip (and its
/// syscalls and wake-ups) per request into one per batch.
const LINGER: Duration = Duration::from_millis(2);

/// The fleet's state on a Redis or Valkey store.
#[derive(Debug)]
pub struct Store {
    tx: mpsc::Sender<Job>,
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: ConnectionManager,
    keys: Keys,
    timeout: Duration,
    limits: SessionLimits,
    ledger_expiry_ms: u64,
    health: Health,
    /// A pipeline is on its way to the store.
    busy: std::sync::atomic::AtomicBool,
}

/// One queued operation.
enum Job {
    Claim(LedgerKey, ClaimDone),
    Add(Arc<str>, SessionFigures, Box<dyn FnOnce(bool) + Send>),
}

impl Job {
    /// The store did not answer: a claim is decided in process, a session
    /// add stays in the replica's own rollups.
    fn unanswered(self) {
        match self {
            Job::Claim(_, done) => done(None),
            Job::Add(_, _, done) => done(false),
        }
    }
}

/// The keys under `state.key_prefix` (layout in `scripts`).
#[derive(Debug)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn counted(&self, key: &LedgerKey) -> String {
        format!("{}counted:{}", self.prefix, key.hex())
    }
    fn sessions(&self) -> String {
        format!("{}session:", self.prefix)
    }
    fn session(&self, id: &str) -> String {
        format!("{}session:{id}", self.prefix)
    }
    fn by(&self, order: &str) -> String {
        format!("{}sessions:{order}", self.prefix)
    }
    fn meta(&self) -> String {
        format!("{}meta", self.prefix)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Wall clock milliseconds `idle` ago: sessions last seen before are idle.
fn idle_cutoff(idle: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    millis(now.saturating_sub(idle))
}

impl Store {
    /// Set up the store of `cfg` (none when `state.url` is unset) and
    /// start its task; `ca_file` is the upstreams' extra CA bundle, also
    /// trusted for `rediss://`. Nothing is sent yet: a store that is down
    /// now is tried when the first operation comes. Must run inside a
    /// tokio runtime.
    pub fn connect(
        cfg: &StateConfig,
        ca_file: Option<&Path>,
        limits: SessionLimits,
    ) -> Result<Option<Arc<Store>>, StateError> {
        let Some(url) = &cfg.url else {
            return Ok(None);
        };
        let mut info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| StateError::url(url, e))?;
        if let Some(p) = &cfg.password_file {
            let password = std::fs::read_to_string(p).map_err(|e| StateError::File {
                key: "state.password_file",
                path: p.display().to_string(),
                message: e.to_string(),
            })?;
            let settings = info
                .redis_settings()
                .clone()
                .set_password(password.trim_end_matches(['\r', '\n']));
            info = info.set_redis_settings(settings);
        }
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let client = match ca_file.filter(|_| tls) {
            Some(ca) => {
                let root_cert = std::fs::read(ca).map_err(|e| StateError::File {
                    key: "upstream.ca_file",
                    path: ca.display().to_string(),
                    message: e.to_string(),
                })?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                };
                redis::Client::build_with_tls(info, certs)
            }
            None => redis::Client::open(info),
        }
        .map_err(|e| StateError::url(url, e))?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.timeout))
            .set_response_timeout(Some(cfg.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(10));
        let conn = ConnectionManager::new_lazy_with_config(client, manager)
            .map_err(|e| StateError::url(url, e))?;
        let inner = Arc::new(Inner {
            conn,
            keys: Keys {
                prefix: cfg.key_prefix.clone(),
            },
            timeout: cfg.timeout,
            limits,
            ledger_expiry_ms: millis(cfg.ledger_expiry),
            health: Health::new(shown_url(url)),
            busy: Default::default(),
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(inner.clone(), rx));
        tracing::info!(store = %shown_url(url), prefix = %cfg.key_prefix, "state store: the counted-once ledger and the session rollups are shared");
        Ok(Some(Arc::new(Store { tx, inner })))
    }

    /// Store operations that failed or timed out since start-up.
    pub fn errors(&self) -> u64 {
        self.inner.health.errors()
    }

    /// Wait (at most `within`) until every queued operation was sent and
    /// answered, for a drain.
    pub async fn flush(&self, within: Duration) {
        let idle = async {
            while self.tx.capacity() < QUEUE || self.inner.busy.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let _ = tokio::time::timeout(within, idle).await;
    }

    fn queue(&self, job: Job) {
        if let Err(e) = self.tx.try_send(job) {
            let job = match e {
                mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => j,
            };
            self.inner.health.failed(1, "its queue is full");
            job.unanswered();
        }
    }
}

/// The store's task: whatever queued up goes as one pipeline.
async fn run(inner: Arc<Inner>, mut rx: mpsc::Receiver<Job>) {
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        inner.busy.store(true, Ordering::Release);
        if jobs.len() < MAX_BATCH {
            tokio::time::sleep(LINGER).await;
            while jobs.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        inner.send(&mut jobs).await;
        // Claims the store did not answer are decided in process.
        for job in jobs.drain(..) {
            job.unanswered();
        }
        inner.busy.store(false, Ordering::Release);
    }
}

/// Whether a server error says the data under a key is not tokentap's.
fn wrong_shape(e: &str) -> bool {
    [
        "WRONGTYPE",
        "WRONGSHAPE",
        "not a valid float",
        "not an integer",
    ]
    .iter()
    .any(|s| e.contains(s))
}

impl Inner {
    /// Send `jobs` as one pipeline; the ones answered are taken out.
    async fn send(&self, jobs: &mut Vec<Job>) {
        if !self.health.may_try() {
            return;
        }
        let cutoff = idle_cutoff(self.limits.idle_timeout);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        if jobs.iter().any(|j| matches!(j, Job::Add(..))) {
            // Cheap when loaded already; spares a NOSCRIPT after a restart.
            pipe.load_script(&ADD).ignore();
        }
        for job in jobs.iter() {
            match job {
                Job::Claim(key, _) => {
                    pipe.cmd("SET")
                        .arg(self.keys.counted(key))
                        .arg(1)
                        .arg("NX")
                        .arg("PX")
                        .arg(self.ledger_expiry_ms);
                }
                Job::Add(id, f, _) => {
                    let mut inv = ADD.prepare_invoke();
                    inv.key(self.keys.session(id))
                        .key(self.keys.by("last"))
                        .key(self.keys.by("cost"))
                        .key(self.keys.by("wait"))
                        .key(self.keys.meta())
                        .arg(&**id)
                        .arg(self.keys.sessions())
                        .arg(self.limits.max_sessions)
                        .arg(cutoff)
                        .arg(millis(self.limits.idle_timeout))
                        .arg(f.cost_usd)
                        .arg(f.first_seen_ms)
                        .arg(f.last_seen_ms);
                    for (field, n) in scripts::increments(f) {
                        inv.arg(field).arg(n);
                    }
                    pipe.invoke_script(&inv);
                }
            }
        }
        let mut conn = self.conn.clone();
        let sent = pipe.query_async::<Vec<Value>>(&mut conn);
        let values = match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(values)) if values.len() == jobs.len() => values,
            Ok(Ok(values)) => {
                let why = format!("{} answers to {} operations", values.len(), jobs.len());
                return self.health.failed(jobs.len() as u64, &why);
            }
            Ok(Err(e)) => return self.health.failed(jobs.len() as u64, &e.to_string()),
            Err(_) => {
                return self
                    .health
                    .failed(jobs.len() as u64, "no answer within state.timeout");
            }
        };
        self.health.ok();
        for (job, v) in jobs.drain(..).zip(values) {
            match (job, v) {
                (Job::Claim(key, done), v) => done(match v {
                    Value::Okay => Some(true),
                    Value::SimpleString(s) if s == "OK" => Some(true),
                    Value::Nil => Some(false),
                    other => {
                        let why = format!("{other:?}");
                        self.health.wrong_shape(&self.keys.counted(&key), &why);
                        None
                    }
                }),
                (Job::Add(id, _, done), Value::ServerError(e)) => {
                    let why = e.to_string();
                    if wrong_shape(&why) {
                        self.health.wrong_shape(&self.keys.session(&id), &why);
                    } else {
                        self.health.failed(1, &why);
                    }
                    done(false);
                }
                (Job::Add(_, _, done), _) => done(true),
            }
        }
    }

    /// Run one read, bounded by the timeout; `None` when the store
    /// cannot answer (then the caller reads the replica's own rollups).
    async fn read<T: redis::FromRedisValue>(
        &self,
        what: &str,
        op: impl Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.timeout, op).await {
            Ok(Ok(v)) => {
                self.health.ok();
                Some(v)
            }
            Ok(Err(e)) if wrong_shape(&e.to_string()) => {
                self.health.wrong_shape(what, &e.to_string());
                None
            }
            Ok(Err(e)) => {
                self.health.failed(1, &e.to_string());
                None
            }
            Err(_) => {
                self.health.failed(1, "no answer within state.timeout");
                None
            }
        }
    }
}

impl SharedLedger for Store {
    fn claim(&self, key: LedgerKey, done: ClaimDone) {
        if !self.inner.health.may_try() {
            return done(None);
        }
        self.queue(Job::Claim(key, done));
    }
}

#[async_trait::async_trait]
impl SharedSessions for Store {
    fn add(&self, id: &Arc<str>, request: SessionFigures, done: Box<dyn FnOnce(bool) + Send>) {
        if !self.inner.health.may_try() {
            return done(false);
        }
        self.queue(Job::Add(id.clone(), request, done));
    }

    async fn list(&self, order: SortBy, limit: usize) -> Option<SessionList> {
        let inner = &self.inner;
        if !inner.health.may_try() {
            return None;
        }
        let by = match order {
            SortBy::LastSeen => "last",
            SortBy::Cost => "cost",
            SortBy::Wait => "wait",
        };
        let k = &inner.keys;
        let mut inv = LIST.prepare_invoke();
        inv.key(k.by("last"))
            .key(k.by("cost"))
            .key(k.by("wait"))
            .key(k.meta())
            .key(k.by(by))
            .arg(k.sessions())
            .arg(idle_cutoff(inner.limits.idle_timeout))
            .arg(limit.min(inner.limits.max_sessions));
        let mut conn = inner.conn.clone();
        let answer: Value = inner.read(&k.by(by), inv.invoke_async(&mut conn)).await?;
        let Value::Array(items) = answer else {
            inner
                .health
                .wrong_shape(&k.by(by), "the list script's answer is no array");
            return None;
        };
        let number = |v: Option<&Value>| scripts::text(v?)?.parse::<u64>().ok();
        let kept = number(items.first()).unwrap_or(0);
        let evicted = number(items.get(1)).unwrap_or(0);
        let mut sessions = Vec::new();
        for pair in items.get(2..).unwrap_or_default().chunks(2) {
            let (Some(id), Some(hash)) = (pair.first().and_then(scripts::text), pair.get(1)) else {
                continue;
            };
            match scripts::figures(hash) {
                Ok(Some(f)) => sessions.push(f.view(&id)),
                Ok(None) => {}
                Err(why) => inner.health.wrong_shape(&k.session(&id), &why),
            }
        }
        sort(&mut sessions, order);
        Some(SessionList {
            sessions,
            kept: usize::try_from(kept).unwrap_or(usize::MAX),
            evicted,
        })
    }

    async fn get(&self, id: &str) -> Option<Option<SessionView>> {
        let inner = &self.inner;
        if !inner.health.may_try() {
            return None;
        }
        let key = inner.keys.session(id);
        let mut conn = inner.conn.clone();
        let hash: Value = inner
            .read(&key, redis::cmd("HGETALL").arg(&key).query_async(&mut conn))
            .await?;
        match scripts::figures(&hash) {
            Ok(Some(f)) if f.last_seen_ms >= idle_cutoff(inner.limits.idle_timeout) => {
                Some(Some(f.view(id)))
            }
            Ok(_) => Some(None),
            Err(why) => {
                inner.health.wrong_shape(&key, &why);
                None
            }
        }
    }
}

/// Highest first, ties by id, as the in-process list orders them.
fn sort(sessions: &mut [SessionView], order: SortBy) {
    let key = |s: &SessionView| match order {
        SortBy::LastSeen => 0.0,
        SortBy::Cost => s.cost_usd,
        SortBy::Wait => s.wait_seconds,
    };
    if order == SortBy::LastSeen {
        sessions.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then_with(|| a.id.cmp(&b.id)));
    } else {
        sessions.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.id.cmp(&b.id)));
    }
}
