//! Runs a command with empty uprobes at the given libc file offsets (as printed by
//! `ordo record --list-probes`), for measuring the cost of a bare trap at a site:
//!
//! `empty_probes 0x8c3c7,0x8dd55 -- ./bench lock 100000` launches the command under
//! the probes and exits with its status;
//! `empty_probes 0x8c3c7,0x8dd55 --pid PID [--duration S]` attaches to a running
//! process, prints `attached N probes to PID` once they are in place, and detaches
//! on SIGINT/SIGTERM, after S seconds, or when the process ends.
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

const USAGE: &str =
    "usage: empty_probes OFFSET[,OFFSET...] (-- COMMAND [ARGS...] | --pid PID [--duration S])";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--" || a == "--pid") else {
        bail!("{USAGE}");
    };
    let offsets = args[..split]
        .iter()
        .flat_map(|a| a.split(','))
        .filter(|s| !s.is_empty())
        .map(|s| {
            u64::from_str_radix(s.trim_start_matches("0x"), 16)
                .with_context(|| format!("offset {s}"))
        })
        .collect::<Result<Vec<u64>>>()?;
    let libc = ordo_recorder::probes::system_libc()?;
    if args[split] == "--pid" {
        return attach(&libc, &offsets, &args[split + 1..]);
    }
    let command = &args[split + 1..];
    let child = ordo_recorder::spawn_stopped(command, &[])?;
    let probes = ordo_recorder::empty::attach_empty(child.pid(), &libc, &offsets)?;
    let status = child.release()?.wait()?;
    drop(probes);
    std::process::exit(status.code().unwrap_or(1));
}

/// `--pid PID [--duration S]`: probes on a running process until a signal, the
/// duration or the process's end.
fn attach(libc: &std::path::Path, offsets: &[u64], rest: &[String]) -> Result<()> {
    let pid: u32 = rest
        .first()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("--pid needs a process id; {USAGE}"))?;
    let duration = match rest.get(1..) {
        Some([flag, s]) if flag == "--duration" => Some(Duration::from_secs_f64(
            s.parse::<f64>()
                .ok()
                .filter(|d| *d >= 0.0 && d.is_finite())
                .with_context(|| format!("--duration {s}: expected seconds"))?,
        )),
        Some([]) | None => None,
        Some(other) => bail!("unexpected `{}`; {USAGE}", other.join(" ")),
    };
    // Block the stop signals before attaching, then wait for them with a timeout:
    // the probes are dropped (detached) on the normal path, never mid-attach.
    // SAFETY: plain libc calls on a local signal set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let probes = ordo_recorder::empty::attach_empty(pid, libc, offsets)?;
    // Attaching takes ~0.1 s a probe: whoever waits for the probes reads this line.
    println!("attached {} probes to {pid}", offsets.len());
    std::io::Write::flush(&mut std::io::stdout())?;
    let started = Instant::now();
    loop {
        if duration.is_some_and(|d| started.elapsed() >= d)
            || !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            break;
        }
        let wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: waits for one of the blocked signals in `set`.
        if unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &wait) } > 0 {
            break;
        }
    }
    drop(probes);
    Ok(())
}
