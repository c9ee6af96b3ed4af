//! The live dashboard: `GET /` gives one self-contained HTML page embedded in
//! the binary (no CDN, no external fonts: it works offline); `GET /api/live`
//! gives the latest live-statistics `Snapshot` as JSON, which the page polls
//! every second, with the WebSocket sessions relayed now added. See
//! docs/METRICS.md for the JSON.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde::Serialize;

use super::{AdminState, respond};
use crate::error::error_response;
use crate::telemetry::live::Snapshot;

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

/// `/api/live`'s JSON: the snapshot's fields and the session count.
#[derive(Serialize)]
struct LiveJson<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    /// WebSocket sessions relayed now, read when the JSON is served.
    websocket_sessions: usize,
}

/// `GET /api/live`: the latest snapshot as JSON.
pub(super) fn live(state: &AdminState) -> Response<Full<Bytes>> {
    let snapshot = state.telemetry.live().snapshot();
    let json = LiveJson {
        snapshot: &snapshot,
        websocket_sessions: state.sessions.active(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
