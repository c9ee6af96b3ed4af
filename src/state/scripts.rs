//! The store's layout and its two Lua scripts: one finished request's
//! session figures in, added atomically (with idle expiry and the
//! `max_sessions` bound enforced on the store); the sessions `/api/sessions`
//! asks for out, read back into [`SessionFigures`].
//!
//! Keys, under `state.key_prefix` (P):
//! - `P counted:<hex>`: a counted response, file or batch (SET NX PX);
//! - `P session:<id>`: a hash of one session's sums (`v` = layout 1);
//! - `P sessions:last`, `P sessions:cost`, `P sessions:wait`: sorted sets
//!   of the session ids by last seen (ms), cost and wait (ns);
//! - `P meta`: a hash with `evicted`, the sessions dropped to make room.
//!
//! The scripts touch session hashes they derive from the sorted sets, so
//! the store must be one Redis or Valkey server (or a primary with
//! replicas), not a Redis Cluster.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Value;

use crate::watch::rollups::{SessionFigures, TTFT_BUCKETS};

/// The layout version written in every session hash (`v`).
pub(super) const LAYOUT: &str = "1";

/// Forgets the sessions `ids`: their hashes and their places in the three
/// sorted sets (`sp`, `zl`, `zc`, `zw`, defined before it by each script).
const FORGET: &str = r#"
local function forget(ids)
  for _, s in ipairs(ids) do
    redis.call('DEL', sp .. s)
    redis.call('ZREM', zl, s)
    redis.call('ZREM', zc, s)
    redis.call('ZREM', zw, s)
  end
end
"#;

/// Adds one request: KEYS session hash, last, cost, wait, meta; ARGV id,
/// session key prefix, max sessions, idle cutoff (ms), idle timeout (ms),
/// cost, first seen (ms), last seen (ms), then field/increment pairs.
pub(super) static ADD: LazyLock<redis::Script> = LazyLock::new(|| {
    let head = r#"
local h, zl, zc, zw, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, sp = ARGV[1], ARGV[2]
local max, cutoff, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
"#;
    let body = r#"
forget(redis.call('ZRANGEBYSCORE', zl, '-inf', '(' .. cutoff, 'LIMIT', 0, 64))
local v = redis.call('HGET', h, 'v')
if v and v ~= '1' then
  return redis.error_reply('WRONGSHAPE session layout ' .. v)
end
local cost = redis.call('HINCRBYFLOAT', h, 'cost', ARGV[6])
local fs = redis.call('HGET', h, 'fs')
if not fs or tonumber(ARGV[7]) < tonumber(fs) then
  redis.call('HSET', h, 'fs', ARGV[7])
end
local ls = tonumber(redis.call('HGET', h, 'ls') or '0')
if tonumber(ARGV[8]) > ls then
  ls = tonumber(ARGV[8])
  redis.call('HSET', h, 'ls', ARGV[8])
end
local wait = 0
for i = 9, #ARGV, 2 do
  local n = redis.call('HINCRBY', h, ARGV[i], ARGV[i + 1])
  if ARGV[i] == 'wait' then wait = n end
end
redis.call('HSET', h, 'v', '1')
redis.call('PEXPIRE', h, ttl)
redis.call('ZADD', zl, ls, id)
redis.call('ZADD', zc, cost, id)
redis.call('ZADD', zw, wait, id)
local over = redis.call('ZCARD', zl) - max
if over > 0 then
  forget(redis.call('ZRANGE', zl, 0, over - 1))
  redis.call('HINCRBY', meta, 'evicted', over)
end
return 1
"#;
    redis::Script::new(&[head, FORGET, body].concat())
});

/// Lists sessions: KEYS last, cost, wait, meta, the order's set; ARGV
/// session key prefix, idle cutoff (ms), limit. Returns kept, evicted,
/// then id and hash fields per session.
pub(super) static LIST: LazyLock<redis::Script> = LazyLock::new(|| {
    let head = r#"
local zl, zc, zw, meta, zo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local sp, cutoff, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
"#;
    let body = r#"
forget(redis.call('ZRANGEBYSCORE', zl, '-inf', '(' .. cutoff))
local out = {redis.call('ZCARD', zl), redis.call('HGET', meta, 'evicted') or '0'}
if limit > 0 then
  for _, s in ipairs(redis.call('ZREVRANGE', zo, 0, limit - 1)) do
    out[#out + 1] = s
    out[#out + 1] = redis.call('HGETALL', sp .. s)
  end
end
return out
"#;
    redis::Script::new(&[head, FORGET, body].concat())
});

/// The field/increment pairs of one request's figures (zero ones left out).
pub(super) fn increments(f: &SessionFigures) -> Vec<(String, i64)> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut out: Vec<(String, i64)> = [
        ("n", f.requests),
        ("in", f.input),
        ("out", f.output),
        ("cr", f.cache_read),
        ("cw", f.cache_write),
        ("rs", f.reasoning),
        ("unp", f.unpriced),
        ("tc", f.tool_calls),
        ("st", f.server_tool_uses),
        ("err", f.errors),
        ("wait", f.wait_ns),
    ]
    .into_iter()
    .filter(|&(name, n)| n > 0 || name == "wait" || name == "n")
    .map(|(name, n)| (name.to_owned(), int(n)))
    .collect();
    for (i, &n) in f.ttft.iter().enumerate().filter(|&(_, &n)| n > 0) {
        out.push((format!("t{i}"), i64::from(n)));
    }
    out
}

/// A value as text (a bulk or simple string, or a number).
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// A session hash (HGETALL's flat field/value list or a map) read back;
/// `Ok(None)` when the hash is gone, `Err` naming what is wrong when it is
/// not one tokentap wrote.
pub(super) fn figures(v: &Value) -> Result<Option<SessionFigures>, String> {
    let pairs: Vec<(String, String)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
            .collect(),
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        Value::Nil => return Ok(None),
        other => return Err(format!("not a hash: {other:?}")),
    };
    if pairs.is_empty() {
        return Ok(None);
    }
    let fields: HashMap<String, String> = pairs.into_iter().collect();
    match fields.get("v").map(String::as_str) {
        Some(LAYOUT) => {}
        Some(other) => return Err(format!("layout {other:?}, this tokentap writes {LAYOUT}")),
        None => return Err("no layout field `v`".into()),
    }
    let int = |name: &str| -> Result<u64, String> {
        fields.get(name).map_or(Ok(0), |s| {
            s.parse::<u64>()
                .map_err(|_| format!("field `{name}` = {s:?} is not a count"))
        })
    };
    let cost = fields.get("cost").map_or(Ok(0.0), |s| {
        s.parse::<f64>()
            .map_err(|_| format!("field `cost` = {s:?} is not a number"))
    })?;
    let mut ttft = vec![0u32; TTFT_BUCKETS];
    for (i, c) in ttft.iter_mut().enumerate() {
        *c = u32::try_from(int(&format!("t{i}"))?).unwrap_or(u32::MAX);
    }
    Ok(Some(SessionFigures {
        requests: int("n")?,
        input: int("in")?,
        output: int("out")?,
        cache_read: int("cr")?,
        cache_write: int("cw")?,
        reasoning: int("rs")?,
        cost_usd: cost,
        unpriced: int("unp")?,
        tool_calls: int("tc")?,
        server_tool_uses: int("st")?,
        errors: int("err")?,
        first_seen_ms: int("fs")?,
        last_seen_ms: int("ls")?,
        wait_ns: int("wait")?,
        ttft,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_hash_of_another_program_is_refused_with_a_reason() {
        let foreign = Value::Array(vec![bulk("name"), bulk("x")]);
        let e = figures(&foreign).expect_err("no layout field");
        assert!(e.contains("`v`"), "{e}");
        let bad = Value::Array(vec![bulk("v"), bulk("1"), bulk("n"), bulk("many")]);
        let e = figures(&bad).expect_err("a count that is no number");
        assert!(e.contains("`n`") && e.contains("many"), "{e}");
        assert_eq!(figures(&Value::Array(vec![])), Ok(None), "gone");
    }

    #[test]
    fn a_hash_reads_back_as_the_figures_written() {
        let v = Value::Array(
            [
                ("v", "1"),
                ("n", "3"),
                ("in", "30"),
                ("cost", "0.0375"),
                ("fs", "1000"),
                ("ls", "2000"),
                ("wait", "1500000000"),
                ("t5", "2"),
            ]
            .iter()
            .flat_map(|(k, v)| [bulk(k), bulk(v)])
            .collect(),
        );
        let f = figures(&v).expect("well formed").expect("present");
        assert_eq!((f.requests, f.input, f.cost_usd), (3, 30, 0.0375));
        assert_eq!(
            (f.first_seen_ms, f.last_seen_ms, f.wait_ns),
            (1000, 2000, 1_500_000_000)
        );
        assert_eq!(f.ttft[5], 2);
        assert_eq!(f.ttft.iter().sum::<u32>(), 2);
    }
}
