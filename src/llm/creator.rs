//! The run that records a batch before its create call: who it is, and whether it is gone.
//!
//! A record still `creating` may be another run's create call in flight, which a later run
//! waits for; a run killed during the call leaves the same record. The record names its
//! process (host, pid, start time), so a later run on the same machine that finds the process
//! gone (no such pid, or the pid reused by a process started at another time) stops waiting at
//! once. Where it cannot tell (another machine, no `/proc`), it waits as before.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A process, as a run on the same machine can look it up in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Process {
    /// The host name.
    host: String,
    /// What must be the same for its pid to be visible from here and to mean the same
    /// process: the boot, the pid namespace and the user.
    space: String,
    /// Its pid.
    pid: u32,
    /// When it started, in clock ticks since boot (`/proc/PID/stat` field 22).
    started: u64,
}

/// What became of the process that made a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    /// It runs (on this machine).
    Alive,
    /// It is gone: it was on this machine, and its pid is free or names another process.
    Gone,
    /// Cannot tell (another machine, or no `/proc` to read).
    Unknown,
}

impl Process {
    /// This process, where `/proc` tells (Linux); `None` elsewhere.
    pub(super) fn current() -> Option<Self> {
        let proc = Path::new("/proc");
        let read = |path: &str| fs_err::read_to_string(proc.join(path)).ok();
        let host = read("sys/kernel/hostname")?.trim().to_owned();
        let boot = read("sys/kernel/random/boot_id")?.trim().to_owned();
        let namespace = std::fs::read_link(proc.join("self/ns/pid")).ok()?;
        let user = read("self/status")?
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())?
            .to_owned();
        let (_, started) = stat(&read("self/stat")?)?;
        let space = format!("{boot} {} uid {user}", namespace.display());
        let seen = std::fs::read_link(proc.join("self")).ok();
        let pid = visible_pid(
            seen.as_deref().and_then(Path::to_str).and_then(|p| p.parse().ok()),
            std::process::id(),
        )?;
        Some(Self { host, space, pid, started })
    }

    /// Its pid.
    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// The same process with another pid (for tests: a process of this machine that is gone).
    #[cfg(test)]
    pub(super) fn with_pid(&self, pid: u32) -> Self {
        Self { pid, ..self.clone() }
    }

    /// Whether it still runs, as far as this process can see.
    pub(super) fn liveness(&self) -> Liveness {
        match Self::current() {
            Some(me) if me.host == self.host && me.space == self.space => self.look_up(),
            _ => Liveness::Unknown,
        }
    }

    /// Looks its pid up in `/proc` (on this machine, seen from the same namespace).
    fn look_up(&self) -> Liveness {
        const NO_SUCH_PROCESS: i32 = 3;
        match fs_err::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(text) => match stat(&text) {
                // A zombie has finished: only its exit status is left for its parent.
                Some((state, started)) if started == self.started && !matches!(state, 'Z' | 'X') => {
                    Liveness::Alive
                }
                Some(_) => Liveness::Gone,
                None => Liveness::Unknown,
            },
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(NO_SUCH_PROCESS) =>
            {
                Liveness::Gone
            }
            Err(_) => Liveness::Unknown,
        }
    }

    /// As the cache stores it.
    pub(super) fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// From the cache's text (`None` for a record without one, or one it cannot read).
    pub(super) fn from_text(text: Option<&str>) -> Option<Self> {
        serde_json::from_str(text?).ok()
    }
}

/// The pid under which `/proc` shows this process (`seen`, what `/proc/self` links to) if it
/// is the one `getpid()` gives (`own`); `None` (no creator recorded: a later run waits as for
/// one it cannot see) where they differ, e.g. a `/proc` mounted from another pid namespace,
/// or where `/proc/self` cannot be read.
fn visible_pid(seen: Option<u32>, own: u32) -> Option<u32> {
    seen.filter(|&pid| pid == own)
}

/// The state (field 3) and start time (field 22) of a `/proc/PID/stat` line. The name (field
/// 2) is in parentheses and may hold spaces and parentheses itself: fields are counted after
/// the last `)`.
fn stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some((state, started))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_state_and_start_time_after_the_name() {
        let line =
            "15735 (a (b) c) R 15733 15733 13446 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 5645499 3133440 382";
        assert_eq!(stat(line), Some(('R', 5_645_499)));
        assert_eq!(stat("15735 (cat) R 1 2"), None);
        assert_eq!(stat("no parenthesis"), None);
    }

    #[test]
    fn a_pid_is_recorded_only_where_proc_shows_this_process_under_it() {
        assert_eq!(visible_pid(Some(42), 42), Some(42));
        assert_eq!(visible_pid(Some(7), 42), None, "/proc of another pid namespace");
        assert_eq!(visible_pid(None, 42), None, "/proc/self unreadable");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_runs_and_a_finished_one_or_a_reused_pid_is_gone() {
        let me = Process::current().unwrap_or_else(|| panic!("no /proc"));
        assert_eq!(me.liveness(), Liveness::Alive);
        let reused = Process { started: me.started + 1, ..me.clone() };
        assert_eq!(reused.liveness(), Liveness::Gone, "the pid names a process started at another time");
        let mut child = std::process::Command::new("true").spawn().unwrap_or_else(|e| panic!("{e}"));
        let zombie = Process { pid: child.id(), ..me.clone() };
        child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(zombie.liveness(), Liveness::Gone, "a finished child");
        let elsewhere = Process { host: format!("{}-elsewhere", me.host), ..reused };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown, "another machine's pid says nothing here");
        assert_eq!(Process::from_text(Some(&me.to_text())), Some(me));
        assert_eq!(Process::from_text(Some("not json")), None);
    }
}
