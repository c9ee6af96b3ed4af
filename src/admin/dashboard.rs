//! The live dashboard: `GET /` gives one self-contained HTML page embedded in
//! the binary (no CDN, no external fonts: it works offline); `GET /api/live`
//! gives the latest live-statistics `Snapshot` as JSON, which the page polls
//! every second, with the WebSocket sessions relayed now added;
//! `GET /api/sessions` gives the agent sessions' rollups, which the page's
//! sessions view reads. See docs/METRICS.md for the JSON.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde::Serialize;

use super::{AdminState, respond};
use crate::error::error_response;
use crate::watch::live::Snapshot;
use crate::watch::rollups::{SessionView, SortBy};

const PAGE: &str = include_str!("dashboard.html");
const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
/// The page loads nothing from anywhere; its only request is `/api/live`.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the dashboard page.
pub(super) fn page() -> Response<Full<Bytes>> {
    let mut res = respond(StatusCode::OK, HTML, Bytes::from_static(PAGE.as_bytes()));
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

/// `/api/live`'s JSON: the snapshot's fields, the session count, whether
/// spans are exported and the cost note.
#[derive(Serialize)]
struct LiveJson<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    /// WebSocket sessions relayed now, read when the JSON is served.
    websocket_sessions: usize,
    /// OTLP span export is on; off, no trace id leads to a trace.
    span_export: bool,
    /// What the cost figures rest on, when it is worth saying (the demo's
    /// made-up prices).
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_note: Option<&'a str>,
}

/// `GET /api/live`: the latest snapshot as JSON.
pub(super) fn live(state: &AdminState) -> Response<Full<Bytes>> {
    let live = state.telemetry.live();
    let snapshot = live.snapshot();
    let json = LiveJson {
        snapshot: &snapshot,
        websocket_sessions: state.ws_sessions.active(),
        span_export: state.telemetry.exports_spans(),
        cost_note: live.cost_note(),
    };
    match serde_json::to_vec(&json) {
        Ok(body) => respond(StatusCode::OK, JSON, body),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render the live statistics: {e}"),
            "live_unavailable",
        ),
    }
}

/// Sessions `/api/sessions` lists when no `limit` is given.
const DEFAULT_SESSION_LIMIT: usize = 100;

/// `/api/sessions`' list.
#[derive(Serialize)]
struct SessionsJson {
    sessions: Vec<SessionView>,
    /// Sessions kept now (before `limit`).
    kept: usize,
    /// `sessions.max_sessions`.
    max_sessions: usize,
    /// Sessions evicted to make room since start-up.
    evicted: u64,
    /// `store`: the fleet's figures from the state store; `replica`: this
    /// replica's own (no store, or it did not answer).
    source: &'static str,
}

/// `GET /api/sessions[?id=…|?sort=last_seen|cost|wait&limit=N]`: the
/// per-session rollups as JSON (docs/METRICS.md), or one session by id;
/// the fleet's from the state store when there is one and it answers,
/// else this replica's.
pub(super) async fn sessions(state: &AdminState, query: Option<&str>) -> Response<Full<Bytes>> {
    let rollups = state.telemetry.sessions();
    let (mut id, mut order, mut limit) = (None, SortBy::LastSeen, DEFAULT_SESSION_LIMIT);
    for (key, value) in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('='))
    {
        let bad = |what: &str| {
            error_response(
                StatusCode::BAD_REQUEST,
                &format!("`{key}` must be {what}"),
                "bad_request",
            )
        };
        match key {
            "id" => id = Some(percent_decode(value)),
            "sort" => match SortBy::parse(value) {
                Some(o) => order = o,
                None => return bad("`last_seen`, `cost` or `wait`"),
            },
            "limit" => match value.parse() {
                Ok(n) => limit = n,
                Err(_) => return bad("a count"),
            },
            _ => {}
        }
    }
    let shared = rollups.shared();
    let found = match (&id, shared) {
        (Some(id), Some(store)) => store.get(id).await,
        _ => None,
    };
    let listed = match (&id, shared) {
        (None, Some(store)) => store.list(order, limit).await,
        _ => None,
    };
    let body = match (id, listed) {
        (Some(id), _) => match found.unwrap_or_else(|| rollups.get(&id)) {
            Some(one) => serde_json::to_vec(&one),
            None => {
                let shown: String = id.chars().take(200).collect();
                return error_response(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "no session {shown:?} (unknown, idle past sessions.idle_timeout, or evicted)"
                    ),
                    "unknown_session",
                );
            }
        },
        (None, Some(fleet)) => serde_json::to_vec(&SessionsJson {
            sessions: fleet.sessions,
            kept: fleet.kept,
            max_sessions: rollups.max_sessions(),
            evicted: fleet.evicted,
            source: "store",
        }),
        (None, None) => {
            // Listing expires idle sessions first; count after it.
            let sessions = rollups.list(order, limit);
            let (kept, evicted) = rollups.counts();
            serde_json::to_vec(&SessionsJson {
                sessions,
                kept,
                max_sessions: rollups.max_sessions(),
                evicted,
                source: "replica",
            })
        }
    };
    match body {
        Ok(body) => respond(StatusCode::OK, JSON, body),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render the sessions: {e}"),
            "sessions_unavailable",
        ),
    }
}

/// A query value with `%XX` escapes and `+` decoded (bytes that do not
/// form UTF-8 are replaced, so such an id matches nothing).
pub(super) fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        let b = bytes[i];
        if b == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|&b| hex(b)),
                bytes.get(i + 2).and_then(|&b| hex(b)),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(if b == b'+' { b' ' } else { b });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(percent_decode("a%20b+c%2Fd%zz%4"), "a b c/d%zz%4");
    }

    #[test]
    fn page_is_self_contained() {
        // The SVG namespace is a name, not a fetch.
        let text = PAGE.replace("http://www.w3.org/2000/svg", "");
        for external in ["http://", "https://", "//cdn", "@import", "<link", "src=\""] {
            assert!(
                !text.contains(external),
                "dashboard.html must load nothing external, found {external:?}"
            );
        }
        assert!(PAGE.contains("api/live"), "the page polls api/live");
        let res = page();
        assert_eq!(res.headers()[header::CONTENT_TYPE], HTML);
        assert!(res.headers().contains_key(header::CONTENT_SECURITY_POLICY));
    }
}
