//! tokentap: a transparent reverse proxy that meters LLM traffic.
//!
//! The module layout follows one request's path through the proxy:
//! `server` (accept) → `route` (route, tenant) → `sniff` (request body) →
//! `upstream` (forward) → `meter` (tee the response body) → `framing`
//! (frames) → `providers` (events) → `telemetry` (spans, metrics, logs).
//! `app` is the only place that wires the stages together; `admin` serves
//! metrics, health and the dashboard on a separate listener; `reload`
//! swaps in a new configuration on SIGHUP or a changed config file;
//! `bench` drives load through the same `meter` for `tokentap bench`;
//! `compare` keeps, per route and model, repeated windows of finished
//! requests by prompt-size and load class (fed by `telemetry`, read by
//! `admin` as `/api/compare`); `fleet` reads the same cells back from
//! Prometheus for `tokentap compare --prometheus`.

pub mod admin;
pub mod app;
pub mod bench;
pub mod cli;
pub mod compare;
pub mod config;
pub mod demo;
pub mod error;
pub mod fleet;
pub mod framing;
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
pub mod simulate;
pub mod sniff;
pub mod state;
pub mod telemetry;
pub mod upstream;
pub mod websocket;
