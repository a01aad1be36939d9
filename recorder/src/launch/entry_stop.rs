//! Holding a freshly exec'd program at its entry point, once, for a moment.
//!
//! The trace needs the program's module map (which file is loaded where) to name
//! objects and call sites. `/proc/PID/maps` is only readable while the process
//! lives, and a short program can be gone before the recorder's threads get the CPU
//! (issue 15.6: about one eBPF trace in 30 of a two-thread program came out with raw
//! addresses only on a loaded machine). So the launcher traces the child from
//! `exec` to its entry point, as a debugger does: `PTRACE_SEIZE` with exec events, a
//! breakpoint on `AT_ENTRY`, and when it hits, every library the loader mapped is
//! there and no line of `main` has run. The caller reads the maps, the original
//! byte goes back, and the child is detached: it runs on untraced, having paid a
//! few system calls.
//!
//! Every failure (ptrace refused, the child dies first, the entry point is never
//! reached in time) degrades to "not held": the caller then falls back to reading
//! the maps as early as it can.

use std::time::{Duration, Instant};

/// How long to wait for the entry point: a program whose library constructors
/// block (reading input, say) is let go after this and recorded anyway.
const ENTRY_WAIT: Duration = Duration::from_secs(2);

/// Whether the child was held at its entry point while `at_entry` ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryStop {
    /// `at_entry` ran with the child stopped at its first instruction of its own.
    Held,
    /// The child could not be held; `at_entry` did not run.
    NotHeld,
}

/// Starts tracing `pid`, which is blocked before `exec`, so that its `exec` stops
/// it. Must be called on the thread that later calls [`run_to_entry`]: ptrace
/// requests are accepted from the tracing thread only.
pub(crate) fn seize(pid: i32) -> bool {
    // SAFETY: plain ptrace request on our own child.
    unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            libc::PTRACE_O_TRACEEXEC as usize as *mut libc::c_void,
        ) == 0
    }
}

/// After [`seize`] and the release of the child: waits for its `exec`, runs it to
/// its entry point, calls `at_entry`, and detaches. Never reaps the child.
pub(crate) fn run_to_entry(pid: i32, at_entry: &mut dyn FnMut()) -> EntryStop {
    let deadline = Instant::now() + ENTRY_WAIT;
    // 1. The exec event stop (or the child's death if exec failed).
    match wait_stop(pid, deadline) {
        Stop::Exec => {}
        Stop::Gone => return EntryStop::NotHeld,
        Stop::Other(_) | Stop::TimedOut => return give_up(pid, None),
    }
    crate::phase("entry: exec stop");
    let Some(entry) = entry_point(pid) else {
        return give_up(pid, None);
    };
    let Some(original) = peek(pid, entry) else {
        return give_up(pid, None);
    };
    let trap = (original & !0xff) | 0xcc;
    if !poke(pid, entry, trap) {
        return give_up(pid, None);
    }
    let restore = Some((entry, original));
    // 2. Run to the breakpoint, passing on any signal that arrives meanwhile.
    let mut signal = 0;
    loop {
        if !cont(pid, signal) {
            return give_up(pid, restore);
        }
        signal = 0;
        match wait_stop(pid, deadline) {
            Stop::Other(status) => {
                let sig = libc::WSTOPSIG(status);
                if sig == libc::SIGTRAP && status >> 16 == 0 && at_breakpoint(pid, entry) {
                    break;
                }
                // A signal-delivery stop re-injects the signal; event stops don't.
                if status >> 16 == 0 && sig != libc::SIGTRAP {
                    signal = sig;
                }
            }
            Stop::Exec => {} // an exec from a library constructor: ignore
            Stop::Gone => return EntryStop::NotHeld,
            Stop::TimedOut => return give_up(pid, restore),
        }
    }
    crate::phase("entry: reached");
    at_entry();
    crate::phase("entry: modules read");
    // 3. Put the instruction back, step the pc back onto it, let go.
    let ok = poke(pid, entry, original) && rewind_pc(pid, entry);
    detach(pid);
    if ok {
        EntryStop::Held
    } else {
        EntryStop::NotHeld
    }
}

enum Stop {
    Exec,
    Other(i32),
    Gone,
    TimedOut,
}

/// Waits for the next stop of the tracee without ever reaping it: its exit status
/// belongs to whoever waits for the program (`std::process::Child::wait`).
fn wait_stop(pid: i32, deadline: Instant) -> Stop {
    let mut pause = Duration::from_micros(20);
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child; WNOWAIT leaves the state reportable.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL,
            )
        };
        if r != 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Stop::Gone;
        }
        // SAFETY: waitid filled the child fields (or left si_pid 0: nothing yet).
        let (who, code) = unsafe { (info.si_pid(), info.si_code) };
        if who == pid {
            if code == libc::CLD_EXITED || code == libc::CLD_KILLED || code == libc::CLD_DUMPED {
                return Stop::Gone;
            }
            // A stop: consume it (this cannot reap, the child is stopped).
            let mut status = 0;
            // SAFETY: waitpid on our own stopped child.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
            if got != pid {
                return Stop::Gone;
            }
            if libc::WIFSTOPPED(status) {
                if status >> 8 == libc::SIGTRAP | (libc::PTRACE_EVENT_EXEC << 8) {
                    return Stop::Exec;
                }
                return Stop::Other(status);
            }
            return Stop::Gone;
        }
        if Instant::now() >= deadline {
            return Stop::TimedOut;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// Stops a running tracee (if needed), restores the entry instruction and detaches.
fn give_up(pid: i32, restore: Option<(u64, u64)>) -> EntryStop {
    // SAFETY: ptrace requests on our own tracee; a failure leaves it as it was.
    unsafe {
        libc::ptrace(
            libc::PTRACE_INTERRUPT,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    let mut signal = 0;
    loop {
        match wait_stop(pid, Instant::now() + Duration::from_millis(500)) {
            Stop::Other(status) => {
                let sig = libc::WSTOPSIG(status);
                if status >> 16 == libc::PTRACE_EVENT_STOP {
                    break;
                }
                if status >> 16 == 0 {
                    // A signal on its way in: deliver it after detaching.
                    signal = sig;
                    break;
                }
            }
            Stop::Exec => break,
            Stop::Gone => return EntryStop::NotHeld,
            Stop::TimedOut => break,
        }
    }
    if let Some((entry, original)) = restore {
        poke(pid, entry, original);
        if at_breakpoint(pid, entry) {
            rewind_pc(pid, entry);
        }
    }
    // SAFETY: detaching our own tracee, passing on a pending signal.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as usize as *mut libc::c_void,
        )
    };
    EntryStop::NotHeld
}

fn detach(pid: i32) {
    // SAFETY: detaching our own stopped tracee.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
}

fn cont(pid: i32, signal: i32) -> bool {
    // SAFETY: resuming our own stopped tracee.
    unsafe {
        libc::ptrace(
            libc::PTRACE_CONT,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as usize as *mut libc::c_void,
        ) == 0
    }
}

/// The program's entry point (`AT_ENTRY`, run-time address) from `/proc/PID/auxv`.
fn entry_point(pid: i32) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|pair| {
        let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
        let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
        (key == libc::AT_ENTRY).then_some(value)
    })
}

fn peek(pid: i32, addr: u64) -> Option<u64> {
    // SAFETY: errno is thread-local; PEEKTEXT returns the word or sets errno.
    unsafe {
        *libc::__errno_location() = 0;
        let word = libc::ptrace(
            libc::PTRACE_PEEKTEXT,
            pid,
            addr as *mut libc::c_void,
            std::ptr::null_mut::<libc::c_void>(),
        );
        (*libc::__errno_location() == 0).then_some(word as u64)
    }
}

fn poke(pid: i32, addr: u64, word: u64) -> bool {
    // SAFETY: writing one word of our stopped tracee's text (copy-on-write).
    unsafe {
        libc::ptrace(
            libc::PTRACE_POKETEXT,
            pid,
            addr as *mut libc::c_void,
            word as *mut libc::c_void,
        ) == 0
    }
}

fn registers(pid: i32) -> Option<libc::user_regs_struct> {
    // SAFETY: GETREGS fills a user_regs_struct of our stopped tracee.
    unsafe {
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        (libc::ptrace(
            libc::PTRACE_GETREGS,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut regs as *mut libc::user_regs_struct as *mut libc::c_void,
        ) == 0)
            .then_some(regs)
    }
}

/// Whether the tracee stopped right after executing the breakpoint at `entry`.
fn at_breakpoint(pid: i32, entry: u64) -> bool {
    registers(pid).is_some_and(|r| r.rip == entry + 1)
}

fn rewind_pc(pid: i32, entry: u64) -> bool {
    let Some(mut regs) = registers(pid) else {
        return false;
    };
    regs.rip = entry;
    // SAFETY: SETREGS with the registers we just read, pc moved back by one.
    unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGS,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut regs as *mut libc::user_regs_struct as *mut libc::c_void,
        ) == 0
    }
}
