//! Holding the process's exit: when `ordo hunt` records a run again because the
//! first one ended before its threads acted, the thread that ends the process
//! (`main` returning, or a call to `exit`) waits until every other thread has
//! exited or blocked, so the recording shows what they do after the ending
//! thread's last access (a worker cut short, a flag read before the worker set it).
//!
//! "Blocked" is the kernel's word: a task not running or runnable (`S`, `D`, `T`,
//! `t`, `Z`, `X`, `I` in `/proc/self/task/*/stat`) on three samples a millisecond
//! apart, so a thread between two short sleeps of a polling loop still counts as
//! blocked and one that is merely preempted does not. Bounded by the time the
//! recorder asks for (`inproc::ENV_HOLD_EXIT`, milliseconds): a thread spinning forever
//! delays the exit by that much, no more.

use std::ffi::c_int;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Milliseconds the ending thread may wait (0: no hold).
static HOLD_MS: AtomicU32 = AtomicU32::new(0);

/// Set once a thread has held the exit: `exit` after `main` returned holds no more.
static HELD: AtomicU32 = AtomicU32::new(0);

/// Consecutive samples on which every other thread must be blocked.
const SETTLED_SAMPLES: u32 = 3;

/// Records the hold the recorder asked for (start-up).
pub(crate) fn init(ms: c_int) {
    HOLD_MS.store(ms.max(0) as u32, Relaxed);
}

/// Called by the thread about to end the process: waits until the others have
/// exited or blocked, or the hold's time is spent. Once a process.
pub(crate) fn before_exit() {
    let ms = HOLD_MS.load(Relaxed);
    if ms == 0 || HELD.swap(1, Relaxed) != 0 {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(ms as u64);
    let me = crate::tid();
    let mut settled = 0;
    while Instant::now() < deadline {
        if others_blocked(me) {
            settled += 1;
            if settled >= SETTLED_SAMPLES {
                return;
            }
        } else {
            settled = 0;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of the process but `me` is blocked or gone (a task list
/// that cannot be read counts as settled: the hold is a help, never a hang).
fn others_blocked(me: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return true;
    };
    for task in tasks.flatten() {
        let name = task.file_name();
        let Some(tid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if tid == me {
            continue;
        }
        let Ok(stat) = std::fs::read(task.path().join("stat")) else {
            continue; // exited meanwhile
        };
        if state_of(&stat).is_some_and(|s| matches!(s, b'R' | b'W')) {
            return false;
        }
    }
    true
}

/// The state letter of a `stat` line: the field after the command name's `)` (the
/// name may itself hold parentheses and spaces).
fn state_of(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state_of(b"12 (a) b) R 1 2"), Some(b'R'));
        assert_eq!(state_of(b"12 (worker) S 1"), Some(b'S'));
        assert_eq!(state_of(b"garbage"), None);
    }
}
