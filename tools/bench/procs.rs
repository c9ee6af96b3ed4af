//! Processes the suite starts: a command in, a child we can measure (CPU
//! time and peak RSS from `/proc`) and stop by its own PID out. Nothing
//! else on the machine is touched.

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process the suite started; stopped (by PID) when dropped.
pub(crate) struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Start `cmd` with its output appended to `log`.
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Proc, String> {
        let out = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name} ({:?}): {e}", cmd.get_program()))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process and its direct children (nginx workers).
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.pid()];
        pids.extend(children(self.pid()));
        pids
    }

    /// Still running?
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM by PID and wait up to `grace` for a clean exit; returns the
    /// exit status, or `None` when it had to be killed (or is gone already).
    pub(crate) fn terminate(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// SIGTERM by PID, then SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if !self.alive() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Direct children of `pid`, from `/proc/*/stat`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            stat_fields(p).is_some_and(|f| f.get(1).map(String::as_str) == Some(&pid.to_string()))
        })
        .collect()
}

/// `/proc/PID/stat` fields after the command name: index 0 is the state
/// (field 3), so field N is at N − 3.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Clock ticks per second for `/proc/PID/stat` times.
pub(crate) fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// This process's soft and hard limits on open files (`RLIMIT_NOFILE`,
/// from `/proc/self/limits`); the processes the suite starts inherit them.
pub(crate) fn open_files_limit() -> Option<(u64, u64)> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut n = rest.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((n.next()??, n.next()??))
}

/// User + system CPU time of `pids`, in clock ticks.
pub(crate) fn cpu_ticks(pids: &[u32]) -> u64 {
    let (user, system) = cpu_ticks_split(pids);
    user + system
}

/// User and system CPU time of `pids`, apart, in clock ticks.
pub(crate) fn cpu_ticks_split(pids: &[u32]) -> (u64, u64) {
    pids.iter()
        .filter_map(|&p| {
            let f = stat_fields(p)?;
            // utime is field 14, stime field 15.
            Some((
                f.get(11)?.parse::<u64>().ok()?,
                f.get(12)?.parse::<u64>().ok()?,
            ))
        })
        .fold((0, 0), |(u, s), (a, b)| (u + a, s + b))
}

/// Sum of a `/proc/PID/status` field (`VmRSS`, `VmHWM`) over `pids`, in KiB.
pub(crate) fn status_kib(pids: &[u32], field: &str) -> u64 {
    pids.iter()
        .filter_map(|&p| {
            let s = fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

/// Reset the peak-RSS mark (`VmHWM`) of `pids` (Linux ≥ 4.0; needs to own them).
pub(crate) fn reset_peak(pids: &[u32]) {
    for p in pids {
        let _ = fs::write(format!("/proc/{p}/clear_refs"), "5");
    }
}

/// A free port on 127.0.0.1 (released again, so there is a small race).
pub(crate) fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Wait until something accepts on `addr`.
pub(crate) fn wait_port(
    addr: SocketAddr,
    timeout: Duration,
    proc: &mut Proc,
) -> Result<(), String> {
    let until = Instant::now() + timeout;
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if !proc.alive() {
            return Err(format!("{} exited before listening on {addr}", proc.name));
        }
        if Instant::now() > until {
            return Err(format!(
                "{} did not listen on {addr} within {timeout:?}",
                proc.name
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
