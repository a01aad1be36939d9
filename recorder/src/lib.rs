//! ordo's recorder: loads the eBPF probes, launches or attaches to the target,
//! drains the ring buffer and writes the trace.
//!
//! - [`probes`]: the data-driven table of probed libc functions.
//! - [`inject`]: running code in an already running process with ptrace;
//!   [`attach_in_process`] brings the agent into a running program with it.
//! - [`inproc`]: the in-process source (the agent's rings) and its merge with eBPF.
//! - [`empty`]: empty probes, the baseline for measuring a probe site's cost.
//! - [`file_bytes`]: the program's files, read once per recording.
//! - `plan_cache`: code plans kept on disk between recordings of one binary.
//! - [`launch`]: starting a program held before `exec` until probes are attached.
//! - [`recording`]: a recording session ([`Recording`]).
//! - [`progress`]: progress bars for long silent phases, on a terminal only.
//! - [`session`]: `ordo record` end to end (launch or attach, signals, stopping).
//! - [`watch`]: choosing the instructions and addresses of watched variables;
//!   [`watching`] turns `--watch` options into what a recording attaches.

pub mod attach_in_process;
pub mod discover;
pub mod empty;
pub mod file_bytes;
pub mod inject;
pub mod inproc;
pub mod launch;
mod plan_cache;
mod prefault;
pub mod probes;
pub mod progress;
pub mod recording;
pub mod rust_locks;
pub mod session;
mod spill;
pub mod watch;
pub mod watching;

pub use launch::{spawn_stopped, spawn_stopped_inheriting, spawn_stopped_with, StoppedChild};
pub use recording::{
    check_privileges, parse_buffer_size, HwWatch, RecordOptions, RecordSummary, Recording,
    DEFAULT_BUFFER_SIZE, INPROC_BUFFER_SIZE, MAX_HW_WATCHES,
};
pub use session::{
    record_attached, record_launched, snapshot_after_exec, ProbeChoice, SessionEnd, SessionOptions,
    EXIT_WRITE_FAILED, HOLD_EXIT_ENV, HOLD_EXIT_MS,
};

/// When the recorder's start-up began, for [`phase`].
static PHASE_T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// With `ORDO_PHASES` set, prints to stderr how long after the first call the
/// recording reached `name`: where a short recording's fixed cost goes (planning,
/// loading the probes, the launch, finishing the trace), as `cargo xtask bench
/// discover` cannot show it.
pub fn phase(name: &str) {
    if std::env::var_os("ORDO_PHASES").is_some() {
        let t0 = PHASE_T0.get_or_init(std::time::Instant::now);
        eprintln!(
            "ordo: phase {:8.2} ms  {name}",
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// The recorder's own CPU time so far, all its threads (its children's not
/// counted), in words: what [`phase`]'s last line says a recording cost it.
fn own_cpu() -> String {
    // SAFETY: getrusage fills the zeroed struct.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    format!(
        "recorder CPU {:.3} s user, {:.3} s system",
        secs(usage.ru_utime),
        secs(usage.ru_stime)
    )
}
