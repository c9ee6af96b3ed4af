//! Shared state: the `[state]` settings in; the fleet's counted-once
//! ledger and session rollups on a Redis or Valkey store out (a
//! [`SharedLedger`] for `meter`, a [`SharedSessions`] for telemetry's
//! rollups), or, without a store, a state file one instance keeps them in
//! across restarts.
//!
//! The store is never in the way (DESIGN.md rule 4): everything it does
//! happens after a response's last byte, on one task that sends what
//! queued up as one pipelined round trip, bounded by `state.timeout`. When
//! the store is slow, full of another program's keys or gone, each replica
//! goes on with its in-process ledger and rollups, says so on the spans
//! (`tokentap.state = local`), counts `tokentap.state.errors`, warns at
//! most once a minute naming the store (password redacted), and tries the
//! store again after a backoff.

mod file;
mod health;
mod scripts;
mod store;

pub use self::file::{StateFile, StateFileError};
pub use self::store::Store;

use crate::config::state::shown_url;
use crate::meter::ledger::{Ledger, SharedLedger};
use crate::watch::rollups::{SessionRollups, SharedSessions};

/// Why the store cannot be set up at start-up (a bad URL, an unreadable
/// password file or CA bundle). A store that is merely down is no error.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `state.url` cannot be read as a store address.
    #[error("state.url `{url}`: {message}")]
    Url {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file the store needs cannot be read.
    #[error("{key} `{path}`: {message}")]
    File {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// Why it cannot be read.
        message: String,
    },
}

impl StateError {
    fn url(url: &str, message: impl std::fmt::Display) -> StateError {
        StateError::Url {
            url: shown_url(url),
            message: message.to_string(),
        }
    }
}

/// The store seen as the meter's fleet ledger.
pub fn as_ledger(store: &std::sync::Arc<Store>) -> std::sync::Arc<dyn SharedLedger> {
    store.clone()
}

/// The store seen as telemetry's fleet agent-session rollups.
pub fn as_sessions(store: &std::sync::Arc<Store>) -> std::sync::Arc<dyn SharedSessions> {
    store.clone()
}

/// Read the state file into `ledger` and `rollups`, saying what came
/// back; a missing, torn or foreign file is reported, never fatal.
pub fn load(file: &StateFile, ledger: &Ledger, rollups: &SessionRollups) {
    match file.load(ledger, rollups) {
        Ok(Some((keys, sessions))) => {
            tracing::info!(counted_ids = keys, sessions, "state file read back");
        }
        Ok(None) => tracing::info!("no state file yet; it is written on drain"),
        Err(e) => tracing::warn!("{e}; starting with an empty ledger and no sessions"),
    }
}

/// Write the state file on drain, saying what was written.
pub fn save(file: &StateFile, ledger: &Ledger, rollups: &SessionRollups) {
    match file.save(ledger, rollups) {
        Ok((keys, sessions)) => {
            tracing::info!(counted_ids = keys, sessions, "state file written");
        }
        Err(e) => tracing::warn!("{e}; this instance's ledger and sessions are not kept"),
    }
}
