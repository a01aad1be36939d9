//! Whether the machine has a CPU the recorded program leaves unused: the test the
//! in-process converter makes before it converts while the program runs (see
//! `inproc_drain`). Converting on CPUs the program fills costs it throughput even
//! at idle priority (the converter is preempted as the program's threads wake, and
//! its megabytes of passes push the program's data out of the caches), so the
//! converter defers its work, within the backlog's bound, until a CPU is spare or
//! the program ends.
//!
//! Spare time over a window is the machine's idle time (`/proc/stat`'s idle and
//! iowait) plus the converter's and the writer's own CPU time (time they took was
//! spare when they took it, or they could not have run at idle priority), read
//! from `/proc/self/task/TID/stat`.

use std::time::{Duration, Instant};

/// How long a measurement of spare time lasts (and the decision made from it).
pub(crate) const SPARE_WINDOW: Duration = Duration::from_millis(200);

/// CPUs' worth of spare time over a window from which the converter converts.
const SPARE_CPUS: f64 = 0.75;

/// Spare time measured window by window.
pub(crate) struct SpareCpu {
    /// Start of the current window, and the spare ticks counted until then.
    since: Instant,
    ticks: Option<u64>,
    /// What the last whole window said.
    spare: bool,
    /// Clock ticks a second (`sysconf(_SC_CLK_TCK)`).
    hz: f64,
}

impl SpareCpu {
    /// Starts measuring now; until a first window has passed, no CPU is spare.
    pub(crate) fn start(own: &[i32]) -> SpareCpu {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        SpareCpu {
            since: Instant::now(),
            ticks: spare_ticks(own),
            spare: false,
            hz: if hz > 0 { hz as f64 } else { 100.0 },
        }
    }

    /// Starts a new window now, forgetting the last one's answer (after the
    /// converter ran at normal priority, whose time was not spare).
    pub(crate) fn restart(&mut self, own: &[i32]) {
        self.since = Instant::now();
        self.ticks = spare_ticks(own);
        self.spare = false;
    }

    /// Whether the last whole window had [`SPARE_CPUS`] of spare time, measuring
    /// anew once a window has passed. `own` are the tids whose CPU time counts as
    /// spare (the converter's and the writer's; non-positive ones are skipped).
    pub(crate) fn spare(&mut self, own: &[i32]) -> bool {
        let elapsed = self.since.elapsed();
        if elapsed < SPARE_WINDOW {
            return self.spare;
        }
        let now = spare_ticks(own);
        if let (Some(before), Some(now)) = (self.ticks, now) {
            let cpus = now.saturating_sub(before) as f64 / self.hz / elapsed.as_secs_f64();
            self.spare = cpus >= SPARE_CPUS;
        }
        self.ticks = now;
        self.since = Instant::now();
        self.spare
    }
}

/// The machine's idle and iowait ticks since boot plus `own` threads' CPU ticks.
fn spare_ticks(own: &[i32]) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut total = idle_ticks(&stat)?;
    for &tid in own.iter().filter(|&&t| t > 0) {
        let task = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        total += task_ticks(&task)?;
    }
    Some(total)
}

/// Idle plus iowait ticks from `/proc/stat`'s first line
/// (`cpu  user nice system idle iowait irq softirq …`).
fn idle_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some(fields.get(3)? + fields.get(4).copied().unwrap_or(0))
}

/// User plus system ticks of a `/proc/…/task/TID/stat` line (fields 14 and 15,
/// counted after the command name, which may hold spaces and parentheses).
fn task_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_idle_and_iowait_from_the_first_line() {
        let stat = "cpu  100 5 50 7000 30 1 2 0 0 0\ncpu0 50 2 25 3500 15 0 1 0 0 0\n";
        assert_eq!(idle_ticks(stat), Some(7030));
        assert_eq!(idle_ticks("cpu0 1 2 3 4\n"), None);
        assert_eq!(idle_ticks("cpu  1 2 x 4 5\n"), None);
        assert_eq!(idle_ticks(""), None);
    }

    #[test]
    fn reads_a_threads_cpu_ticks_past_an_odd_name() {
        let stat = "4242 (ordo) (x y) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 3 0";
        assert_eq!(task_ticks(stat), Some(22));
        assert_eq!(task_ticks("4242 (ordo) S 1"), None);
    }

    #[test]
    fn this_machine_and_this_thread_are_readable() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        assert!(spare_ticks(&[me, -1, 0]).is_some());
        let mut spare = SpareCpu::start(&[me]);
        // A window has not passed: nothing is spare yet.
        assert!(!spare.spare(&[me]));
    }
}
