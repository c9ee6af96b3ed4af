//! Watching: finished requests (handed over by `telemetry` when each one
//! is recorded) in; what the proxy shows about itself while it runs out:
//! live rolling windows (`/api/live`, the dashboard, `tokentap demo`),
//! slowdown detection against `[[slo]]` with its webhook, per-session
//! rollups (`/api/sessions`), and the comparison windows per route and
//! model (`/api/compare`). `admin` reads from it; nothing here is on the
//! forwarding path.

pub mod compare;
pub mod live;
pub mod rollups;
pub mod slo;
