//! `GET /api/compare`: the comparison from production traffic as JSON
//! (docs/COMPARING.md): `side=route:model`, repeated, in the order the
//! ratios take them; none lists the sides available.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use super::dashboard::percent_decode;
use super::{AdminState, respond};
use crate::error::error_response;
use crate::watch::compare::report::parse_side;

const JSON: &str = "application/json";
/// Most sides one request may compare.
const MAX_SIDES: usize = 16;

/// The answer for the query's `side` parameters.
pub(super) fn answer(state: &AdminState, query: Option<&str>) -> Response<Full<Bytes>> {
    let bad = |message: String| error_response(StatusCode::BAD_REQUEST, &message, "bad_request");
    let mut sides = Vec::new();
    for (key, value) in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('='))
    {
        if key != "side" {
            continue;
        }
        if sides.len() == MAX_SIDES {
            return bad(format!("at most {MAX_SIDES} `side` parameters"));
        }
        match parse_side(&percent_decode(value)) {
            Ok(side) => sides.push(side),
            Err(e) => return bad(e.0.chars().take(300).collect()),
        }
    }
    let report = state.telemetry.compare().report(&sides);
    match serde_json::to_vec(&report) {
        Ok(body) => respond(StatusCode::OK, JSON, Bytes::from(body)),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render the comparison: {e}"),
            "compare_unavailable",
        ),
    }
}
