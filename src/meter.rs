//! The meter: clock readings folded into one `Measurement` per request.
//!
//! `body` tees the response body (bytes pass untouched, a view feeds the
//! parser); `Meter` owns the clock and derives the figures defined in
//! DESIGN.md; `measurement` holds the vocabulary (`Measurement` and
//! friends). Only this module reads the clock.

pub mod body;
pub mod decompress;
pub mod drain;
pub mod ledger;
mod measurement;
pub mod shutdown;
pub mod tokenize;
pub mod ws_session;
pub mod ws_sessions;

pub use self::measurement::*;
