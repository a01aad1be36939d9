//! Detaching without making anyone wait: the final close of the probes is handed to
//! an orphaned grandchild.
//!
//! Closing a uprobe link waits for an RCU grace period (one per multi-uprobe link,
//! one per probe on the per-probe fallback: ~90 ms each here, serialized by the
//! kernel), and raw tracepoint links wait too. The recording is already complete
//! when the probes go (the programs were switched off first), so the recorder need
//! not wait for that: a forked grandchild shares the links' and programs' files and
//! holds them until the recorder has dropped its own references, which makes the
//! recorder's closes cheap reference drops; the grandchild's exit then does the slow
//! final closes in the background.

use std::os::fd::{AsRawFd, OwnedFd};

/// The recorder's side of a handed-off detach: dropping it (after the recorder
/// dropped its own probe references) lets the grandchild exit and do the final closes.
pub(super) struct DetachHandoff {
    _release: OwnedFd,
    /// The grandchild holding the probes.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the tests"))]
    holder: i32,
}

/// Forks the grandchild that will hold the probes' files. `None` if it could not
/// be started: the caller's own closes then do the detach in the foreground.
pub(super) fn hand_off() -> Option<DetachHandoff> {
    let (hold, release) = pipe()?;
    let (pid_read, pid_write) = pipe()?;
    let hold_fd = hold.as_raw_fd();
    let pid_fd = pid_write.as_raw_fd();
    // Perf events, BPF links, programs and maps are anonymous inodes: everything
    // else (the trace file, pipes others wait on, stdout, the release pipe's write
    // end) is closed in the grandchild, so it keeps nothing alive but the probes.
    let keep = |fd: i32, target: &str| fd == hold_fd || target.starts_with("anon_inode:");
    let to_close: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            (!keep(fd, &target.to_string_lossy())).then_some(fd)
        })
        .collect();
    // SAFETY: between fork and _exit the children only call close, fork, read, write
    // and _exit, which are async-signal-safe.
    let holder = unsafe {
        let child = libc::fork();
        if child == 0 {
            let grandchild = libc::fork();
            if grandchild == 0 {
                for &fd in &to_close {
                    libc::close(fd);
                }
                // Wait until the recorder closes its end (it has then dropped its
                // own references to the probes).
                let mut byte = 0u8;
                while libc::read(hold_fd, (&mut byte as *mut u8).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::_exit(0);
            }
            libc::write(pid_fd, (&grandchild as *const i32).cast(), 4);
            libc::_exit(0);
        }
        if child < 0 {
            return None;
        }
        libc::waitpid(child, std::ptr::null_mut(), 0);
        drop(pid_write);
        let mut holder = -1i32;
        libc::read(pid_read.as_raw_fd(), (&mut holder as *mut i32).cast(), 4);
        holder
    };
    drop(hold);
    if holder <= 0 {
        // The grandchild could not be forked: nobody holds the probes but us.
        return None;
    }
    Some(DetachHandoff {
        _release: release,
        holder,
    })
}

fn pipe() -> Option<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: pipe2 returned two new descriptors we now own.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon_fds(pid: i32) -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .map(|t| t.to_string_lossy().into_owned())
                    .filter(|t| t.starts_with("anon_inode:"))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_holder_keeps_the_probe_files_until_released() {
        // An eventfd stands in for a probe's file: an anonymous inode like them.
        // SAFETY: plain syscall; the descriptor is closed by OwnedFd.
        let event = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(event >= 0);
        // SAFETY: eventfd returned a new descriptor we own.
        let event = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(event) };
        let handoff = hand_off().expect("fork works here");
        let holder = handoff.holder;
        drop(event);
        // Long after a grandchild that did not wait would have exited, it still runs
        // and holds the anonymous files (and nothing else of ours).
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            anon_fds(holder).iter().any(|t| t == "anon_inode:[eventfd]"),
            "{:?}",
            anon_fds(holder)
        );
        drop(handoff);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{holder}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the holder did not exit once released"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
