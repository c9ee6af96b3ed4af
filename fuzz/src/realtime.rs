//! WebSocket session harness: raw fuzzer input in, assertions about
//! `providers::realtime::RealtimeParser` out.
//!
//! The first byte picks the dialect (modulo 3); the rest is a session, one
//! message per `\n`-separated line, whose first byte says the direction
//! (`c` = client, anything else = server). Invariants:
//! - nothing panics, for any dialect and any bytes;
//! - a rejected message yields no events (the caller counts it and goes on);
//! - every `Output` carries at least one piece;
//! - the OpenAI dialects keep no state between messages: each message
//!   parsed by a fresh parser gives the events it gave inside the session.

use tokentap::providers::realtime::{Dialect, RealtimeEvent, RealtimeParser};

/// Every dialect, indexed by the control byte.
pub const DIALECTS: [Dialect; 3] = [
    Dialect::OpenaiRealtime,
    Dialect::OpenaiResponses,
    Dialect::GeminiLive,
];

/// One message's events, in `Debug` form, or `None` when it was rejected.
type Result1 = Option<Vec<String>>;

fn feed(parser: &mut RealtimeParser, line: &[u8]) -> Result1 {
    let (client, json) = match line.split_first() {
        Some((b'c', json)) => (true, json),
        Some((_, json)) => (false, json),
        None => (false, line),
    };
    let mut events = Vec::new();
    let mut on = |e: RealtimeEvent<'_>| {
        if let RealtimeEvent::Output { pieces, .. } = e {
            assert!(pieces >= 1, "an Output event with no pieces");
        }
        events.push(format!("{e:?}"));
    };
    match parser.message(!client, json, &mut on) {
        Ok(()) => Some(events),
        Err(_) => {
            assert!(events.is_empty(), "a rejected message yielded {events:?}");
            None
        }
    }
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let Some((control, session)) = input.split_first() else {
        return;
    };
    let dialect = DIALECTS[usize::from(*control) % DIALECTS.len()];
    let mut parser = RealtimeParser::new(dialect);
    for line in session.split(|b| *b == b'\n') {
        let in_session = feed(&mut parser, line);
        if dialect != Dialect::GeminiLive {
            let alone = feed(&mut RealtimeParser::new(dialect), line);
            assert_eq!(alone, in_session, "OpenAI messages do not depend on state");
        }
    }
}

/// A fuzz input for a transcript fixture (`{"dir": …, "msg": …}` lines).
pub fn seed_from_transcript(dialect: Dialect, transcript: &str) -> Vec<u8> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        dir: &'a str,
        #[serde(borrow)]
        msg: &'a serde_json::value::RawValue,
    }
    let index = DIALECTS.iter().position(|d| *d == dialect).unwrap_or(0);
    let mut out = vec![index as u8];
    for (n, text) in transcript.lines().enumerate() {
        let Ok(line) = serde_json::from_str::<Line<'_>>(text) else {
            continue;
        };
        if n > 0 {
            out.push(b'\n');
        }
        out.push(if line.dir == "client" { b'c' } else { b's' });
        out.extend_from_slice(line.msg.get().as_bytes());
    }
    out
}
