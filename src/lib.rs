//! tokentap: a transparent reverse proxy that meters LLM traffic.
//!
//! The module layout follows one request's path through the proxy:
//! `server` (accept) → `route` (route, tenant) → `sniff` (request body) →
//! `upstream` (forward) → `meter` (tee the response body) → `framing`
//! (frames) → `providers` (events) → `telemetry` (record: span records,
//! metrics, access log). A finished measurement then goes two ways:
//! `ship` puts what was recorded on the wire (OTLP, Prometheus text, the
//! log), and `watch` keeps the live windows, SLOs and agent-session rollups that
//! `admin` reads (`compare` among them: per route and model, repeated
//! windows of finished requests by prompt-size and load class, read as
//! `/api/compare`). `attrs` (attribute and metric names), `capped_maps`
//! and `labels` (routes[].labels, reading only `attrs`) sit below the
//! three rooms and are shared by them. `app` is the only place that wires
//! the stages together; `admin` serves metrics, health and the dashboard
//! on a separate listener; `reload` swaps in a new configuration on SIGHUP
//! or a changed config file; `bench` drives load through the same `meter`
//! for `tokentap bench`; `fleet` reads the comparison cells back from
//! Prometheus for `tokentap compare --prometheus`.
//!
//! "Session" means an agent session (`[sessions]`, `/api/sessions`,
//! `watch::rollups`); a relayed WebSocket connection is a WebSocket
//! session, and its names say so: `meter::ws_session`,
//! `telemetry::WsSessionTelemetry`, `meter::ws_sessions::WsSessions`,
//! `providers::realtime::RealtimeParser`.

pub mod admin;
pub mod app;
pub mod attrs;
pub mod bench;
mod capped_maps;
pub mod cli;
pub mod config;
pub mod demo;
pub mod error;
pub mod fleet;
pub mod framing;
pub mod labels;
#[allow(
    clippy::disallowed_methods,
    reason = "`meter` is the one clock owner (CONTRIBUTING.md convention 4): it reads the clock for every measurement"
)]
pub mod meter;
pub mod pricing;
pub mod providers;
pub mod read_tap;
pub mod reload;
pub mod rewrite;
pub mod route;
pub mod server;
pub mod ship;
pub mod simulate;
pub mod sniff;
pub mod state;
pub mod telemetry;
pub mod upstream;
pub mod watch;
