//! Hot reload: a trigger (SIGHUP, or a changed config file when
//! `watch_config` is on) in; the configuration loaded again from the same
//! sources as at start-up (file, env, flags) and handed to
//! [`Running::reload`] out. A refused reload leaves the running
//! configuration serving and says which key was wrong.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::app::Running;
use crate::config::{self, Overrides};

/// How often the config file is polled when `watch_config` is on.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// A changed file is read again after this long and reloaded only if it
/// did not change in between (editors write in several steps).
const SETTLE: Duration = Duration::from_millis(200);

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// The watched config file changed.
    FileChanged,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChanged => "config file changed",
        })
    }
}

/// The config file's content as last loaded, to notice a change.
#[derive(Debug)]
pub struct FileWatch {
    path: PathBuf,
    seen: Option<Vec<u8>>,
}

impl FileWatch {
    /// Watch `path`, taking its current content as loaded.
    pub fn new(path: PathBuf) -> FileWatch {
        let seen = std::fs::read(&path).ok();
        FileWatch { path, seen }
    }

    /// The watched file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// True when the file's content differs from what was last loaded and
    /// stayed the same for [`SETTLE`]. A missing file is no change (an
    /// editor may be replacing it).
    pub async fn changed(&self) -> bool {
        let Ok(now) = tokio::fs::read(&self.path).await else {
            return false;
        };
        if self.seen.as_ref() == Some(&now) {
            return false;
        }
        tokio::time::sleep(SETTLE).await;
        tokio::fs::read(&self.path).await.ok().as_ref() == Some(&now)
    }

    /// The content about to be loaded becomes the baseline.
    pub fn mark_loaded(&mut self) {
        self.seen = std::fs::read(&self.path).ok();
    }
}

/// Reload `running` on every SIGHUP, and on every change of the config file
/// while `watch_config` is on. Runs until dropped. `watch` is the config
/// file (`None` when there is none); create it before the configuration
/// is first loaded so a change in between is not missed.
pub async fn run(
    running: &Running,
    cli: &Overrides,
    mut hangup: Hangup,
    mut watch: Option<FileWatch>,
) {
    let mut tick = tokio::time::interval(WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if running.watch_config() && watch.is_none() {
        tracing::warn!("watch_config is on but there is no config file to watch");
    }
    loop {
        let trigger = tokio::select! {
            () = hangup.recv() => Trigger::Signal,
            _ = tick.tick() => match &watch {
                Some(w) if running.watch_config() && w.changed().await => Trigger::FileChanged,
                _ => continue,
            },
        };
        if let Some(w) = &mut watch {
            w.mark_loaded();
        }
        match running.reload(config::load(cli)) {
            Ok(()) => tracing::info!(%trigger, "configuration reloaded"),
            // The running configuration keeps serving: a warning, not an error.
            Err(e) => tracing::warn!(
                %trigger,
                error = %e,
                "configuration reload refused; the previous configuration keeps serving"
            ),
        }
    }
}

/// SIGHUP as a stream; never fires where there is no such signal. Create
/// it before start-up: from then on a SIGHUP is held for [`run`] instead of
/// ending the process (the signal's default action).
#[derive(Debug)]
pub struct Hangup {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangup {
    /// Start listening for SIGHUP.
    pub fn new() -> Hangup {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signal = signal(SignalKind::hangup())
                .inspect_err(|e| tracing::warn!(error = %e, "cannot listen for SIGHUP"))
                .ok();
            Hangup { signal }
        }
        #[cfg(not(unix))]
        Hangup {}
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(s) = &mut self.signal {
            if s.recv().await.is_some() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

impl Default for Hangup {
    fn default() -> Self {
        Hangup::new()
    }
}
