//! CPU pinning for the suite: core lists in (`0`, `0,2`, `0-3,8`), a split of
//! the cores this process may use into the proxy's and the load's out, and
//! `taskset` (util-linux) to apply it: the proxies are started under
//! `taskset -c PROXY`, and the suite pins its own threads (load generator,
//! OTLP sink) with `taskset -a -p -c LOAD` before starting anything, so the
//! simulators it spawns inherit the load cores.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The most cores a list may name (a typo like `0-99999` is refused).
const MAX_CORE: usize = 4095;

/// A set of CPU numbers, in ascending order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Cores(BTreeSet<usize>);

impl Cores {
    /// Parse `0`, `0,2`, `0-3`, `0-3,8-9` (the `taskset -c` syntax without strides).
    pub(crate) fn parse(s: &str) -> Result<Cores, String> {
        let mut set = BTreeSet::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!("core list `{s}`: empty item"));
            }
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (num(a, s)?, num(b, s)?),
                None => {
                    let n = num(part, s)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(format!("core list `{s}`: range `{part}` runs backwards"));
            }
            if hi > MAX_CORE {
                return Err(format!("core list `{s}`: core {hi} is above {MAX_CORE}"));
            }
            set.extend(lo..=hi);
        }
        Ok(Cores(set))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The first `n` cores.
    pub(crate) fn first(&self, n: usize) -> Cores {
        Cores(self.0.iter().copied().take(n).collect())
    }

    /// The list in `taskset -c` form, ranges folded (`0-3,8`).
    pub(crate) fn list(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut it = self.0.iter().copied().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi += 1;
                it.next();
            }
            out.push(if hi == lo {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            });
        }
        out.join(",")
    }
}

fn num(s: &str, whole: &str) -> Result<usize, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("core list `{whole}`: `{s}` is not a core number"))
}

/// Where the proxies and where everything else runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pinning {
    pub proxy: Cores,
    pub load: Cores,
}

impl Pinning {
    /// Check `proxy` and `load` against the cores this process may use
    /// (`allowed`); without `load`, the load gets every allowed core the
    /// proxy does not.
    pub(crate) fn split(
        allowed: &Cores,
        proxy: &Cores,
        load: Option<&Cores>,
    ) -> Result<Pinning, String> {
        if proxy.len() == 0 {
            return Err("--proxy-cores names no core".into());
        }
        let outside = |c: &Cores, what: &str| -> Result<(), String> {
            let bad: Vec<String> =
                c.0.difference(&allowed.0)
                    .map(ToString::to_string)
                    .collect();
            if bad.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{what} names cores this process may not use ({}); allowed: {}",
                    bad.join(","),
                    allowed.list()
                ))
            }
        };
        outside(proxy, "--proxy-cores")?;
        let load = match load {
            Some(l) => {
                outside(l, "--load-cores")?;
                let shared: Vec<String> =
                    l.0.intersection(&proxy.0)
                        .map(ToString::to_string)
                        .collect();
                if !shared.is_empty() {
                    return Err(format!(
                        "--proxy-cores and --load-cores share cores ({}): the point is to keep them apart",
                        shared.join(",")
                    ));
                }
                l.clone()
            }
            None => Cores(allowed.0.difference(&proxy.0).copied().collect()),
        };
        if load.len() == 0 {
            return Err(format!(
                "no core left for the load generator and upstreams (allowed: {}, proxy: {})",
                allowed.list(),
                proxy.list()
            ));
        }
        Ok(Pinning {
            proxy: proxy.clone(),
            load,
        })
    }
}

/// The cores this process may run on (`Cpus_allowed_list` in `/proc/self/status`).
pub(crate) fn allowed() -> Result<Cores, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or("no Cpus_allowed_list in /proc/self/status")?;
    Cores::parse(list.trim())
}

/// Pin every thread of this process to `cores` (children started later
/// inherit it).
pub(crate) fn pin_self(cores: &Cores) -> Result<(), String> {
    let status = Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &cores.list(),
            &std::process::id().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("taskset (util-linux) is needed for pinning: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset -a -p -c {} failed: {status}",
            cores.list()
        ))
    }
}

/// `program` started under `taskset -c cores` (taskset execs it, so the
/// child's PID is the program's), or as is without pinning.
pub(crate) fn command(program: &Path, cores: Option<&Cores>) -> Command {
    match cores {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c.list()).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cores {
        Cores::parse(s).expect(s)
    }

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(c("0").0.into_iter().collect::<Vec<_>>(), [0]);
        assert_eq!(
            c("0-3,8, 10-11").0.into_iter().collect::<Vec<_>>(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(c("3,1,1-2").len(), 3, "duplicates count once");
        for bad in ["", "a", "1,", "3-1", "1-", "-1", "0-5000"] {
            assert!(Cores::parse(bad).is_err(), "`{bad}` should be refused");
        }
    }

    #[test]
    fn lists_fold_ranges_back() {
        assert_eq!(c("0,1,2,3,8,10,11").list(), "0-3,8,10-11");
        assert_eq!(c("5").list(), "5");
        assert_eq!(c("0-15").first(4).list(), "0-3");
    }

    #[test]
    fn load_defaults_to_every_other_allowed_core() {
        let p = Pinning::split(&c("0-15"), &c("0-3"), None).expect("split");
        assert_eq!(p.proxy.list(), "0-3");
        assert_eq!(p.load.list(), "4-15");
        let p = Pinning::split(&c("0-1"), &c("0"), Some(&c("1"))).expect("split");
        assert_eq!((p.proxy.list(), p.load.list()), ("0".into(), "1".into()));
    }

    #[test]
    fn split_refuses_overlap_foreign_cores_and_no_load_core() {
        let e = Pinning::split(&c("0-3"), &c("0-1"), Some(&c("1-2"))).expect_err("overlap");
        assert!(e.contains("share cores (1)"), "{e}");
        let e = Pinning::split(&c("0-1"), &c("2"), None).expect_err("not allowed");
        assert!(e.contains("may not use (2)"), "{e}");
        let e = Pinning::split(&c("0-1"), &c("0"), Some(&c("1,7"))).expect_err("not allowed");
        assert!(e.contains("may not use (7)"), "{e}");
        let e = Pinning::split(&c("0-1"), &c("0-1"), None).expect_err("nothing left");
        assert!(e.contains("no core left"), "{e}");
        assert!(Pinning::split(&c("0-1"), &Cores::default(), None).is_err());
    }
}
