//! The state file of a single instance (`[state] path`, no store): the
//! ledger's keys and the session rollups out on drain, back in at start.
//! A missing, torn or foreign file is reported and ignored, never fatal.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::meter::ledger::Ledger;
use crate::watch::rollups::{SessionFigures, SessionRollups};

/// What the file says it is.
const FORMAT: &str = "tokentap-state";
/// The layout this tokentap writes and reads.
const VERSION: u32 = 1;

/// Why a state file was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// It could not be read or written.
    #[error("state.path `{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// It is not whole JSON (a write cut short, another program's file).
    #[error("state.path `{path}` is torn or not a tokentap state file: {message}")]
    Torn {
        /// The file.
        path: String,
        /// Where the JSON broke.
        message: String,
    },
    /// It is JSON, but not a state file of this tokentap's layout.
    #[error("state.path `{path}` is {what}, not a tokentap state file of version {VERSION}")]
    Foreign {
        /// The file.
        path: String,
        /// What it says it is.
        what: String,
    },
}

#[derive(Serialize, Deserialize)]
struct Contents {
    format: String,
    version: u32,
    /// The ledger's keys, oldest first.
    #[serde(default)]
    ledger: Vec<u64>,
    /// Sessions, least recently seen first.
    #[serde(default)]
    sessions: Vec<(String, SessionFigures)>,
}

/// A single instance's state file.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The file at `path`.
    pub fn new(path: &Path) -> StateFile {
        StateFile {
            path: path.to_owned(),
        }
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// Read the file into `ledger` and `rollups`: the keys and sessions
    /// taken back, or `None` when there is no file yet.
    pub fn load(
        &self,
        ledger: &Ledger,
        rollups: &SessionRollups,
    ) -> Result<Option<(usize, usize)>, StateFileError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateFileError::Io {
                    path: self.shown(),
                    source,
                });
            }
        };
        let head: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| StateFileError::Torn {
                path: self.shown(),
                message: e.to_string(),
            })?;
        let format = head.get("format").and_then(|v| v.as_str());
        let version = head.get("version").and_then(|v| v.as_u64());
        if format != Some(FORMAT) || version != Some(u64::from(VERSION)) {
            let what = match (format, version) {
                (Some(f), Some(v)) => format!("{f:?} version {v}"),
                (Some(f), None) => format!("{f:?} without a version"),
                _ => "JSON of another program".into(),
            };
            return Err(StateFileError::Foreign {
                path: self.shown(),
                what,
            });
        }
        let c: Contents = serde_json::from_value(head).map_err(|e| StateFileError::Torn {
            path: self.shown(),
            message: e.to_string(),
        })?;
        let keys = c.ledger.len();
        ledger.restore(c.ledger);
        let sessions = rollups.restore(c.sessions);
        Ok(Some((keys, sessions)))
    }

    /// Write `ledger` and `rollups` to the file (through a temporary file
    /// beside it, so a crash leaves the old file or the new one): the
    /// keys and sessions written.
    pub fn save(
        &self,
        ledger: &Ledger,
        rollups: &SessionRollups,
    ) -> Result<(usize, usize), StateFileError> {
        let c = Contents {
            format: FORMAT.into(),
            version: VERSION,
            ledger: ledger.snapshot(),
            sessions: rollups.snapshot(),
        };
        let counts = (c.ledger.len(), c.sessions.len());
        let io = |source| StateFileError::Io {
            path: self.shown(),
            source,
        };
        let bytes = serde_json::to_vec(&c).map_err(|e| io(std::io::Error::other(e)))?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionLimits;
    use crate::meter::ledger::LedgerKey;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tokentap-state-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d.join("state.json")
    }

    #[test]
    fn the_ledger_round_trips_and_bad_files_are_named() {
        let path = dir("file");
        let f = StateFile::new(&path);
        let (ledger, rollups) = (
            Ledger::new(8),
            SessionRollups::new(SessionLimits::default()),
        );
        assert!(
            f.load(&ledger, &rollups)
                .expect("missing is fine")
                .is_none()
        );
        let key = LedgerKey::new("openai", "response", "resp_1");
        assert!(ledger.first(&key));
        assert_eq!(f.save(&ledger, &rollups).expect("written"), (1, 0));
        let again = Ledger::new(8);
        assert_eq!(f.load(&again, &rollups).expect("read"), Some((1, 0)));
        assert!(!again.first(&key), "the counted response is still counted");

        std::fs::write(&path, b"{\"format\":\"tokentap-state\",\"vers").expect("write");
        let e = f.load(&again, &rollups).expect_err("torn").to_string();
        assert!(e.contains("torn") && e.contains("state.json"), "{e}");
        std::fs::write(&path, b"{\"name\":\"other\"}").expect("write");
        let e = f.load(&again, &rollups).expect_err("foreign").to_string();
        assert!(e.contains("another program"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
