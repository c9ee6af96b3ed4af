//! Per-session rollups: every finished request of an agent session (its
//! `Measurement` and the cost its span carries) in; what the session cost,
//! used and waited, out, for `/api/sessions` and the dashboard.
//!
//! Session ids are unbounded, so they are never metric labels; here they
//! live in a table of at most `sessions.max_sessions` entries, least
//! recently seen evicted first, and sessions idle for
//! `sessions.idle_timeout` are forgotten. A finished request takes one
//! lock, does one hash lookup and allocates nothing when its session is
//! already known (a new session stores the request's own `Arc<str>`).
//!
//! With a state store (`[state] url`), each request's figures also go to
//! [`SharedSessions`], which adds up the fleet's; `/api/sessions` reads
//! the fleet's figures from it, and this table when the store is away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::SessionLimits;
use crate::meter::Measurement;
use crate::pricing::CostRecord;

/// A slot that is no slot (ends of the recency list).
const NIL: u32 = u32::MAX;

/// The agent-session rollups of one tokentap instance.
#[derive(Debug)]
pub struct SessionRollups {
    limits: SessionLimits,
    table: Mutex<Table>,
    /// The fleet's rollups, when a state store is configured.
    shared: OnceLock<Arc<dyn SharedSessions>>,
}

/// A session's figures as plain numbers: one finished request's (what a
/// store adds up), or a whole session's (what a store or a state file
/// gives back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFigures {
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Cache read input tokens.
    pub cache_read: u64,
    /// Cache creation input tokens.
    pub cache_write: u64,
    /// Reasoning output tokens.
    pub reasoning: u64,
    /// Cost, USD.
    pub cost_usd: f64,
    /// Requests without a price.
    pub unpriced: u64,
    /// Client tool calls.
    pub tool_calls: u64,
    /// Provider-run tool uses.
    pub server_tool_uses: u64,
    /// Requests whose outcome is an error.
    pub errors: u64,
    /// Earliest request start, milliseconds since the Unix epoch.
    pub first_seen_ms: u64,
    /// Latest request end, milliseconds since the Unix epoch.
    pub last_seen_ms: u64,
    /// Sum of the requests' durations, nanoseconds.
    pub wait_ns: u64,
    /// TTFT counts per bucket ([`TTFT_BUCKETS`] of them).
    pub ttft: Vec<u32>,
}

/// One request's figures still to be added to the fleet's rollups.
#[derive(Debug)]
pub struct Share {
    shared: Arc<dyn SharedSessions>,
    id: Arc<str>,
    figures: SessionFigures,
}

impl Share {
    /// Queue them for the store; `done` runs once, with whether the store
    /// took them.
    pub fn send(self, done: Box<dyn FnOnce(bool) + Send>) {
        self.shared.add(&self.id, self.figures, done);
    }
}

/// `/api/sessions`' list as a store gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionList {
    /// Up to the limit, in order.
    pub sessions: Vec<SessionView>,
    /// Sessions kept now.
    pub kept: usize,
    /// Sessions evicted to make room.
    pub evicted: u64,
}

/// The fleet's agent-session rollups on a state store. `add` never waits (it
/// queues the figures); the reads answer `None` when the store cannot.
#[async_trait::async_trait]
pub trait SharedSessions: Send + Sync + std::fmt::Debug {
    /// Add one finished request's figures to session `id`; `done` runs
    /// once, with whether the store took them.
    fn add(&self, id: &Arc<str>, request: SessionFigures, done: Box<dyn FnOnce(bool) + Send>);
    /// Up to `limit` sessions in `order`.
    async fn list(&self, order: SortBy, limit: usize) -> Option<SessionList>;
    /// One session (`Some(None)`: not known to the store).
    async fn get(&self, id: &str) -> Option<Option<SessionView>>;
}

/// Slots in a recency list (most recently seen at `head`) with an index by id.
#[derive(Debug, Default)]
struct Table {
    index: HashMap<Arc<str>, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    head: Option<u32>,
    tail: Option<u32>,
    /// Sessions dropped to make room (not counting idle ones).
    evicted: u64,
}

#[derive(Debug)]
struct Slot {
    id: Arc<str>,
    prev: u32,
    next: u32,
    /// Monotonic end of the latest request, for idle expiry.
    last: Instant,
    rollup: Rollup,
}

/// One session's totals.
#[derive(Debug, Clone)]
struct Rollup {
    requests: u64,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    reasoning: u64,
    cost_usd: f64,
    unpriced: u64,
    tool_calls: u64,
    server_tool_uses: u64,
    errors: u64,
    first_seen: SystemTime,
    last_seen: SystemTime,
    wait: Duration,
    ttft: TtftHistogram,
}

/// What pricing said about a request, as its span carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RequestCost {
    /// `tokentap.cost.amount`, in USD.
    Priced(f64),
    /// Tokens were used but the model has no price (`tokentap.cost.unpriced`).
    Unpriced,
    /// Nothing to price, or no price book.
    None,
}

impl RequestCost {
    /// The cost `record_cost` worked out for the span and the counters.
    pub(crate) fn of(cost: Option<CostRecord>) -> RequestCost {
        match cost {
            Some(CostRecord::Priced { usd, .. }) => RequestCost::Priced(usd),
            Some(CostRecord::Unpriced) => RequestCost::Unpriced,
            None => RequestCost::None,
        }
    }
}

/// Which order `list` gives sessions in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Last seen, newest first.
    LastSeen,
    /// Cost, highest first.
    Cost,
    /// Time waited on the model, longest first.
    Wait,
}

impl SortBy {
    /// The `?sort=` value.
    pub fn parse(s: &str) -> Option<SortBy> {
        match s {
            "last_seen" => Some(SortBy::LastSeen),
            "cost" => Some(SortBy::Cost),
            "wait" => Some(SortBy::Wait),
            _ => None,
        }
    }
}

/// One agent session as `/api/sessions` shows it (docs/METRICS.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    /// The session id (`gen_ai.conversation.id`).
    pub id: String,
    /// Requests (and WebSocket responses) finished in the session.
    pub requests: u64,
    /// Sum of the spans' `gen_ai.usage.input_tokens`.
    pub input_tokens: u64,
    /// Sum of the spans' `gen_ai.usage.output_tokens`.
    pub output_tokens: u64,
    /// Sum of the spans' `gen_ai.usage.cache_read.input_tokens`.
    pub cache_read_tokens: u64,
    /// Sum of the spans' `gen_ai.usage.cache_creation.input_tokens`.
    pub cache_write_tokens: u64,
    /// Sum of the spans' `gen_ai.usage.reasoning.output_tokens`.
    pub reasoning_tokens: u64,
    /// Sum of the spans' `tokentap.cost.amount` (USD).
    pub cost_usd: f64,
    /// Requests that could not be priced (no cost, not 0).
    pub unpriced_requests: u64,
    /// Tool calls the model asked the client to run.
    pub tool_calls: u64,
    /// Provider-run tool uses (web search, file search, ...).
    pub server_tool_uses: u64,
    /// Requests whose outcome counts as an error.
    pub errors: u64,
    /// When the session's earliest request arrived (RFC 3339, UTC).
    pub first_seen: String,
    /// When the session's latest request ended (RFC 3339, UTC).
    pub last_seen: String,
    /// Sum of the requests' durations (t_req to t_end), seconds.
    pub wait_seconds: f64,
    /// Median TTFT of the requests that had one, estimated (within 13 %).
    pub ttft_p50_seconds: Option<f64>,
}

impl SessionRollups {
    /// An empty table bounded by `limits`.
    pub fn new(limits: SessionLimits) -> SessionRollups {
        SessionRollups {
            limits,
            table: Mutex::new(Table::default()),
            shared: OnceLock::new(),
        }
    }

    /// Add every request to the fleet's rollups in `shared` too (once, at
    /// start-up).
    pub fn share(&self, shared: Arc<dyn SharedSessions>) {
        let _ = self.shared.set(shared);
    }

    /// The fleet's rollups, when a store is configured.
    pub fn shared(&self) -> Option<&Arc<dyn SharedSessions>> {
        self.shared.get()
    }

    /// Every session kept, least recently seen first (for the state file).
    pub fn snapshot(&self) -> Vec<(String, SessionFigures)> {
        let t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::with_capacity(t.index.len());
        let mut at = t.tail;
        while let Some(i) = at {
            let s = &t.slots[i as usize];
            out.push((s.id.to_string(), s.rollup.figures()));
            at = (s.prev != NIL).then_some(s.prev);
        }
        out
    }

    /// Take back `sessions` (least recently seen first) as a state file
    /// kept them, leaving out those idle past the timeout; returns how
    /// many sessions are kept then.
    pub fn restore(&self, sessions: Vec<(String, SessionFigures)>) -> usize {
        #[allow(
            clippy::disallowed_methods,
            reason = "a restored session's idle clock restarts from its wall clock age, at start-up"
        )]
        let (now, wall) = (Instant::now(), SystemTime::now());
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, f) in sessions {
            let last_seen = SystemTime::UNIX_EPOCH + Duration::from_millis(f.last_seen_ms);
            let age = wall.duration_since(last_seen).unwrap_or_default();
            if age >= self.limits.idle_timeout {
                continue;
            }
            let last = now.checked_sub(age).unwrap_or(now);
            let id: Arc<str> = Arc::from(id);
            let i = match t.index.get(&*id) {
                Some(&i) => {
                    t.unlink(i);
                    i
                }
                None => t.insert(id, last, last_seen, self.limits.max_sessions),
            };
            t.push_front(i);
            t.slots[i as usize].rollup = Rollup::from_figures(&f);
        }
        t.index.len()
    }

    /// Add one finished request to its session's rollup, here and in the
    /// fleet's; `cost` is what its span says it cost. Requests without a
    /// session are ignored.
    pub fn record(&self, m: &Measurement, cost: RequestCost) {
        if let Some(share) = self.record_local(m, cost) {
            share.send(Box::new(|_| {}));
        }
    }

    /// Add one finished request to its session's rollup here; what is
    /// still to be added to the fleet's, when a store is configured.
    pub fn record_local(&self, m: &Measurement, cost: RequestCost) -> Option<Share> {
        let id = m.request.session.as_ref()?;
        let end = m.request.start + m.duration;
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        t.expire(end, self.limits.idle_timeout);
        let i = match t.index.get(&**id) {
            Some(&i) => {
                t.unlink(i);
                i
            }
            None => t.insert(
                id.clone(),
                end,
                m.request.start_wall,
                self.limits.max_sessions,
            ),
        };
        t.push_front(i);
        let slot = &mut t.slots[i as usize];
        slot.last = slot.last.max(end);
        slot.rollup.add(m, cost);
        drop(t);
        let shared = self.shared.get()?;
        let mut one = Rollup::new(m.request.start_wall);
        one.add(m, cost);
        Some(Share {
            shared: shared.clone(),
            id: id.clone(),
            figures: one.figures(),
        })
    }

    /// The table, with the sessions idle past the timeout forgotten.
    fn unexpired(&self) -> std::sync::MutexGuard<'_, Table> {
        #[allow(
            clippy::disallowed_methods,
            reason = "idle expiry of the rollups when they are read, off the request path"
        )]
        let now = Instant::now();
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        t.expire(now, self.limits.idle_timeout);
        t
    }

    /// Up to `limit` sessions in `order`, idle ones forgotten first.
    pub fn list(&self, order: SortBy, limit: usize) -> Vec<SessionView> {
        let t = self.unexpired();
        let mut live: Vec<&Slot> = t.live().collect();
        let key = |s: &Slot| match order {
            SortBy::LastSeen => s
                .rollup
                .last_seen
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            SortBy::Cost => s.rollup.cost_usd,
            SortBy::Wait => s.rollup.wait.as_secs_f64(),
        };
        let by = |a: &&Slot, b: &&Slot| key(b).total_cmp(&key(a)).then_with(|| a.id.cmp(&b.id));
        if limit < live.len() {
            if limit == 0 {
                return Vec::new();
            }
            live.select_nth_unstable_by(limit - 1, by);
            live.truncate(limit);
        }
        live.sort_unstable_by(by);
        live.into_iter().map(Slot::view).collect()
    }

    /// One session, when it is known (and not idle past the timeout).
    pub fn get(&self, id: &str) -> Option<SessionView> {
        let t = self.unexpired();
        let i = *t.index.get(id)?;
        Some(t.slots[i as usize].view())
    }

    /// Sessions kept now, and sessions evicted to make room since start-up.
    pub fn counts(&self) -> (usize, u64) {
        let t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        (t.index.len(), t.evicted)
    }

    /// The most sessions kept.
    pub fn max_sessions(&self) -> usize {
        self.limits.max_sessions
    }
}

impl Table {
    /// The slots in use.
    fn live(&self) -> impl Iterator<Item = &Slot> {
        self.index.values().map(|&i| &self.slots[i as usize])
    }

    /// Forget sessions whose latest request ended `idle` or longer before
    /// `now`, from the least recently seen on.
    fn expire(&mut self, now: Instant, idle: Duration) {
        while let Some(tail) = self.tail {
            let slot = &self.slots[tail as usize];
            if now.saturating_duration_since(slot.last) < idle {
                break;
            }
            self.remove(tail);
        }
    }

    /// A new session's slot (unlinked), evicting the least recently seen
    /// when the table is full.
    fn insert(&mut self, id: Arc<str>, last: Instant, start: SystemTime, max: usize) -> u32 {
        if self.index.len() >= max
            && let Some(tail) = self.tail
        {
            self.remove(tail);
            self.evicted += 1;
        }
        let slot = Slot {
            id: id.clone(),
            prev: NIL,
            next: NIL,
            last,
            rollup: Rollup::new(start),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                // `sessions.max_sessions` is at most 10^7, far below `NIL`.
                u32::try_from(self.slots.len() - 1).unwrap_or(NIL - 1)
            }
        };
        self.index.insert(id, i);
        i
    }

    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let id = self.slots[i as usize].id.clone();
        self.index.remove(&id);
        self.free.push(i);
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = (next != NIL).then_some(next),
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = (prev != NIL).then_some(prev),
            n => self.slots[n as usize].prev = prev,
        }
        let s = &mut self.slots[i as usize];
        (s.prev, s.next) = (NIL, NIL);
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head.unwrap_or(NIL);
        self.slots[i as usize].next = old;
        if old != NIL {
            self.slots[old as usize].prev = i;
        }
        self.head = Some(i);
        if self.tail.is_none() {
            self.tail = Some(i);
        }
    }
}

impl Slot {
    fn view(&self) -> SessionView {
        self.rollup.figures().view(&self.id)
    }
}

impl SessionFigures {
    /// The session as `/api/sessions` shows it.
    pub fn view(&self, id: &str) -> SessionView {
        let r = self;
        let at = |ms: u64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        SessionView {
            id: id.to_owned(),
            requests: r.requests,
            input_tokens: r.input,
            output_tokens: r.output,
            cache_read_tokens: r.cache_read,
            cache_write_tokens: r.cache_write,
            reasoning_tokens: r.reasoning,
            cost_usd: r.cost_usd,
            unpriced_requests: r.unpriced,
            tool_calls: r.tool_calls,
            server_tool_uses: r.server_tool_uses,
            errors: r.errors,
            first_seen: at(r.first_seen_ms),
            last_seen: at(r.last_seen_ms),
            wait_seconds: Duration::from_nanos(r.wait_ns).as_secs_f64(),
            ttft_p50_seconds: TtftHistogram::of(&r.ttft).median(),
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Rollup {
    /// The figures, as a store or a state file keeps them.
    fn figures(&self) -> SessionFigures {
        SessionFigures {
            requests: self.requests,
            input: self.input,
            output: self.output,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            reasoning: self.reasoning,
            cost_usd: self.cost_usd,
            unpriced: self.unpriced,
            tool_calls: self.tool_calls,
            server_tool_uses: self.server_tool_uses,
            errors: self.errors,
            first_seen_ms: epoch_ms(self.first_seen),
            last_seen_ms: epoch_ms(self.last_seen),
            wait_ns: u64::try_from(self.wait.as_nanos()).unwrap_or(u64::MAX),
            ttft: self.ttft.counts.to_vec(),
        }
    }

    fn from_figures(f: &SessionFigures) -> Rollup {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        Rollup {
            requests: f.requests,
            input: f.input,
            output: f.output,
            cache_read: f.cache_read,
            cache_write: f.cache_write,
            reasoning: f.reasoning,
            cost_usd: f.cost_usd,
            unpriced: f.unpriced,
            tool_calls: f.tool_calls,
            server_tool_uses: f.server_tool_uses,
            errors: f.errors,
            first_seen: at(f.first_seen_ms),
            last_seen: at(f.last_seen_ms),
            wait: Duration::from_nanos(f.wait_ns),
            ttft: TtftHistogram::of(&f.ttft),
        }
    }

    fn new(first_seen: SystemTime) -> Rollup {
        Rollup {
            requests: 0,
            input: 0,
            output: 0,
            cache_read: 0,
            cache_write: 0,
            reasoning: 0,
            cost_usd: 0.0,
            unpriced: 0,
            tool_calls: 0,
            server_tool_uses: 0,
            errors: 0,
            first_seen,
            last_seen: first_seen,
            wait: Duration::ZERO,
            ttft: TtftHistogram::default(),
        }
    }

    /// The request's figures, read as `span::finish_attributes` writes the
    /// span's `gen_ai.usage.*` (a unit test holds the two together).
    fn add(&mut self, m: &Measurement, cost: RequestCost) {
        let add = |sum: &mut u64, v: Option<u64>| *sum = sum.saturating_add(v.unwrap_or(0));
        self.requests += 1;
        add(&mut self.input, m.usage.input);
        add(&mut self.output, m.output_tokens.or(m.usage.output));
        add(&mut self.cache_read, m.usage.cache_read);
        add(&mut self.cache_write, m.usage.cache_creation);
        add(&mut self.reasoning, m.reasoning.tokens);
        match cost {
            RequestCost::Priced(usd) => self.cost_usd += usd,
            RequestCost::Unpriced => self.unpriced += 1,
            RequestCost::None => {}
        }
        add(&mut self.tool_calls, Some(u64::from(m.tools.client_calls)));
        add(
            &mut self.server_tool_uses,
            Some(u64::from(m.tools.server.total())),
        );
        if m.outcome.is_error() {
            self.errors += 1;
        }
        self.first_seen = self.first_seen.min(m.request.start_wall);
        self.last_seen = self.last_seen.max(m.request.start_wall + m.duration);
        self.wait = self.wait.saturating_add(m.duration);
        if let Some(ttft) = m.time_to_first_token {
            self.ttft.add(ttft);
        }
    }
}

/// TTFTs in 48 buckets, each 2^(1/3) (≈ 1.26) times as wide as the one
/// before, from 10 ms to 655 s (below and above fold into the ends): the
/// median is the geometric middle of the bucket holding it, within 12.3 %
/// of the true median inside that range. 192 bytes per session.
#[derive(Debug, Clone)]
struct TtftHistogram {
    counts: [u32; TTFT_BUCKETS],
}

impl Default for TtftHistogram {
    fn default() -> Self {
        TtftHistogram {
            counts: [0; TTFT_BUCKETS],
        }
    }
}

/// TTFT buckets per session.
pub const TTFT_BUCKETS: usize = 48;
/// Lower edge of bucket 1 (seconds); bucket 0 holds everything below.
const TTFT_FLOOR: f64 = 0.010;
/// Buckets per doubling.
const TTFT_PER_OCTAVE: f64 = 3.0;

impl TtftHistogram {
    /// A histogram of the counts given (extra ones ignored, missing ones 0).
    fn of(counts: &[u32]) -> TtftHistogram {
        let mut h = TtftHistogram::default();
        for (c, &n) in h.counts.iter_mut().zip(counts) {
            *c = n;
        }
        h
    }

    fn bucket(ttft: Duration) -> usize {
        let secs = ttft.as_secs_f64();
        if secs <= TTFT_FLOOR {
            return 0;
        }
        let i = (secs / TTFT_FLOOR).log2() * TTFT_PER_OCTAVE;
        (i.floor() as usize).min(TTFT_BUCKETS - 1)
    }

    fn add(&mut self, ttft: Duration) {
        let c = &mut self.counts[Self::bucket(ttft)];
        *c = c.saturating_add(1);
    }

    /// The geometric middle of the bucket holding the median (nearest
    /// rank); `None` when nothing was added.
    fn median(&self) -> Option<f64> {
        let n: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        if n == 0 {
            return None;
        }
        let rank = n.div_ceil(2);
        let mut seen = 0u64;
        let i = self.counts.iter().position(|&c| {
            seen += u64::from(c);
            seen >= rank
        })?;
        Some(TTFT_FLOOR * ((i as f64 + 0.5) / TTFT_PER_OCTAVE).exp2())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests build timestamps freely")]
mod tests;
