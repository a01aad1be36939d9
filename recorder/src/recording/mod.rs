//! A recording session: load the probes, attach them to one process, drain the ring
//! buffer into a trace file until told to stop, detach.
//!
//! - `attach`: loading the programs and attaching every probe, switched off until
//!   all are in place (atomic attach); `multi_uprobe` attaches all uprobe sites of a
//!   file with one link, so detaching costs one RCU grace period per link.
//! - `drain`: the drain thread (ring buffer → [`DrainState`] → writer thread).
//! - `detach`: handing the slow final close of the probes to a grandchild.
//!
//! The drain runs on its own thread with a single-threaded tokio runtime: the ring
//! buffer's fd is registered with `AsyncFd`, and a timer flushes a chunk at least
//! every 100 ms so a crash loses little.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use ordo_probe_common::WatchSite;
use ordo_trace::schema::Header;
use ordo_trace::schema::ModuleRecord;
use ordo_trace::symbolize::modules_of_process;
use ordo_trace::TraceWriter;
use tokio::sync::{mpsc, oneshot};

pub(crate) mod attach;
pub use attach::{prepare_loader, prepare_probes, ProbeSizes};
mod detach;
mod drain;
mod inproc_drain;
mod multi_uprobe;
mod spare_cpu;

pub(crate) use drain::DrainState;

/// Default ring buffer size.
pub const DEFAULT_BUFFER_SIZE: usize = 16 << 20;
/// Default ring buffer size of a launch recorded in process without watches:
/// the kernel side sees only threads made and ended there, and the ring,
/// allocated and mapped whole before the program may start, cost a short
/// recording ~4 of its ~23 ms at 16 MiB (52 000 records still hold a burst of
/// 26 000 threads made at once).
pub const INPROC_BUFFER_SIZE: usize = 4 << 20;
/// One hardware watchpoint to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwWatch {
    /// Runtime address of the watched bytes (aligned to `size`).
    pub addr: u64,
    /// 1, 2, 4 or 8 bytes.
    pub size: u8,
    /// The variable's type is atomic: every access is recorded as atomic.
    pub atomic: bool,
}

/// What to record and where.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// The trace file to write.
    pub output: PathBuf,
    /// Ring buffer size in bytes (a power of two, at least one page).
    pub buffer_size: usize,
    /// The command line, for the trace header.
    pub command: Vec<String>,
    /// True when attaching to a process that was already running.
    pub attached: bool,
    /// Instruction sites of watched variables: the module file, the instruction's
    /// file offset, and the site description with link-time addresses.
    pub watch_sites: Vec<(PathBuf, u64, WatchSite)>,
    /// Hardware watchpoints (read or write) at runtime addresses.
    pub hw_watches: Vec<HwWatch>,
    /// Names of watched members and elements (module, link-time address, name):
    /// their events are named so in the trace (`Footer::data_names`).
    pub watch_names: Vec<(PathBuf, u64, String)>,
    /// Record the pthread API in process, through the preloaded agent writing into
    /// this mapping (the launched program must have it and `ORDO_RECORD_FD`); the
    /// pthread uprobes are then not attached. `None`: everything by eBPF.
    pub inproc: Option<std::sync::Arc<crate::inproc::InprocMapping>>,
    /// Files the trace must never be written over (the recorded program).
    pub inputs: Vec<PathBuf>,
    /// Whether an existing file at `output` may be replaced (`ordo record --force`).
    /// True for traces whose path the caller chose itself (replay, hunt).
    pub replace_existing: bool,
    /// The main binary whose DWARF names the members and elements that discovered
    /// accesses touch (`Footer::data_names`): read on a thread of its own from the
    /// start, so the trace's end does not wait for it (a Rust binary's debug info,
    /// std's included, took ~35 ms to read).
    pub name_data_of: Option<PathBuf>,
    /// The launched program ran its `exec` before the recording started (an
    /// in-process launch, whose agent holds it instead), so the probes did not
    /// count that `exec` as one of the program's own.
    pub exec_before_start: bool,
}

impl RecordOptions {
    /// Options with no watches.
    pub fn new(
        output: PathBuf,
        buffer_size: usize,
        command: Vec<String>,
        attached: bool,
    ) -> RecordOptions {
        RecordOptions {
            output,
            buffer_size,
            command,
            attached,
            watch_sites: Vec::new(),
            hw_watches: Vec::new(),
            watch_names: Vec::new(),
            inproc: None,
            inputs: Vec::new(),
            replace_existing: true,
            name_data_of: None,
            exec_before_start: false,
        }
    }
}

/// x86 has four debug registers.
pub const MAX_HW_WATCHES: usize = 4;

/// Totals of a finished recording.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    /// The trace file.
    pub output: PathBuf,
    /// Events written.
    pub events: u64,
    /// Events lost because the ring buffer was full.
    pub dropped: u64,
    /// Events by kind name.
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Threads seen.
    pub threads: usize,
    /// Trace size in bytes.
    pub bytes: u64,
    /// Wall time recorded.
    pub duration: Duration,
    /// How the launched program ended (None when attached, or not waited for).
    pub exit: Option<ExitStatus>,
    /// Time from starting to load the probes until recording was switched on.
    pub attach_time: Duration,
    /// Lines worth saying after the totals (e.g. what the in-process path did not follow).
    pub notes: Vec<String>,
    /// Writing the trace failed (a full disk): the error, naming the file. The trace
    /// holds the chunks written before it, without footer.
    pub write_error: Option<String>,
    /// Events recorded after the write error and not written.
    pub unwritten: u64,
}

impl RecordSummary {
    /// The human summary printed after `ordo record`.
    pub fn render(&self) -> String {
        let mut s = format!(
            "ordo: recorded {} events from {} threads in {:.2} s into {} ({}), {} dropped\n",
            self.events,
            self.threads,
            self.duration.as_secs_f64(),
            self.output.display(),
            human_bytes(self.bytes),
            self.dropped,
        );
        s.push_str(&format!(
            "ordo: probes attached in {:.0} ms\n",
            self.attach_time.as_secs_f64() * 1e3
        ));
        if self.dropped > 0 {
            s.push_str("ordo: WARNING: the ring buffer overflowed; raise --buffer-size. Lost events are marked in the trace.\n");
        }
        let mut line = String::from("ordo:  ");
        for (kind, n) in &self.by_kind {
            let item = format!(" {kind} {n}");
            if line.len() + item.len() > 100 {
                s.push_str(&line);
                s.push('\n');
                line = String::from("ordo:  ");
            }
            line.push_str(&item);
        }
        if line.len() > 7 {
            s.push_str(&line);
            s.push('\n');
        }
        for note in &self.notes {
            s.push_str("ordo: ");
            s.push_str(note);
            s.push('\n');
        }
        if let Some(sig) = self.exit.and_then(|e| {
            use std::os::unix::process::ExitStatusExt;
            e.signal()
        }) {
            s.push_str(&format!(
                "ordo: the program was killed by signal {sig} ({})\n",
                signal_name(sig)
            ));
        }
        if let Some(error) = &self.write_error {
            if let Some(code) = self.exit.and_then(|e| e.code()) {
                s.push_str(&format!("ordo: the program exited with status {code}\n"));
            }
            s.push_str(&format!(
                "ordo: error: {error}; {} events recorded after it were not written\n",
                self.unwritten
            ));
        }
        s
    }
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Checks that this process may load eBPF programs, with a one-line reason if not.
pub fn check_privileges() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if cap_eff & CAP_SYS_ADMIN != 0 || (cap_eff & CAP_BPF != 0 && cap_eff & CAP_PERFMON != 0) {
        return Ok(());
    }
    bail!("recording needs root, or the CAP_BPF and CAP_PERFMON capabilities, to load eBPF programs and attach uprobes")
}

/// Parses a buffer size like `16M`, `512K` or `1048576`.
pub fn parse_buffer_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 16M, 512K, 1048576)"))?;
    let size = n
        .checked_mul(mult)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if size < 4096 || !size.is_power_of_two() || size > 1 << 30 {
        return Err(format!(
            "`{text}`: the ring buffer size must be a power of two between 4K and 1G"
        ));
    }
    Ok(size)
}

/// A recording in progress.
pub struct Recording {
    /// In process: bytes of events copied from the rings and not converted yet.
    backlog: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<Option<ExitStatus>>>,
    drain: Option<std::thread::JoinHandle<Result<RecordSummary>>>,
    /// Disconnected when the drain thread ends.
    drain_done: std::sync::mpsc::Receiver<()>,
    /// In process: the mapping whose doorbell wakes the drain.
    inproc: Option<Arc<crate::inproc::InprocMapping>>,
    notes: Vec<String>,
    pid: u32,
    snapshots: mpsc::UnboundedSender<Vec<ModuleRecord>>,
}

impl Recording {
    /// Loads the probes, attaches them to `pid`'s threads (current and future),
    /// switches them on once all are attached, and starts draining events into
    /// `options.output`.
    pub fn start(pid: u32, options: &RecordOptions) -> Result<Recording> {
        check_privileges()?;
        let attaching = std::time::Instant::now();
        let boost = NiceBoost::raise();
        let mut probes = attach::Probes::attach(pid, options)?;
        drop(boost);
        crate::phase("probes attached");
        let header = Header {
            command: options.command.clone(),
            pid,
            start_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            start_monotonic_ns: monotonic_ns(),
            kernel_release: kernel_release(),
            ordo_version: env!("CARGO_PKG_VERSION").to_string(),
            attached: options.attached,
            buffer_size: options.buffer_size as u64,
            sparse_times: options.inproc.as_ref().is_some_and(|m| m.sparse_times()),
            ..Default::default()
        };
        let inputs: Vec<&std::path::Path> = options.inputs.iter().map(PathBuf::as_path).collect();
        let writer =
            TraceWriter::create_with(&options.output, &header, options.replace_existing, &inputs)
                .with_context(|| format!("create {}", options.output.display()))?;
        crate::phase("writer created");
        let ring = probes.take_ring()?;
        crate::phase("ring mapped");
        let mut state = DrainState::new(pid, writer, options.output.clone())?;
        crate::phase("state made");
        state.name_watches(&options.watch_names);
        if let Some(binary) = &options.name_data_of {
            state.prepare_data_names(binary);
        }
        // A launch that ran its `exec` already may have threads a library's
        // constructor started before the probes were on: they are adopted as an
        // attach adopts a running program's.
        if options.attached || options.exec_before_start {
            state.adopt_existing_threads();
        }
        let notes = [probes.fallback_note.take(), probes.syscall_note.take()]
            .into_iter()
            .flatten()
            .collect();
        // Last: no event is recorded before every probe is attached.
        crate::phase("writer ready");
        probes.enable()?;
        crate::phase("enabled");
        state.attach_time = attaching.elapsed();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (snapshots, snapshots_rx) = mpsc::unbounded_channel();
        let inproc = options.inproc.clone();
        let (drain_running, drain_done) = std::sync::mpsc::channel::<()>();
        let backlog = Arc::new(AtomicUsize::new(0));
        let converting = backlog.clone();
        let drain = std::thread::Builder::new()
            .name("ordo-drain".into())
            .spawn(move || -> Result<RecordSummary> {
                let _running = drain_running;
                if let Some(mapping) = inproc {
                    return inproc_drain::drain(
                        probes,
                        ring,
                        state,
                        stop_rx,
                        snapshots_rx,
                        mapping,
                        converting,
                    );
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(drain::drain(probes, ring, state, stop_rx, snapshots_rx))
            })?;
        Ok(Recording {
            backlog,
            stop: Some(stop_tx),
            drain: Some(drain),
            drain_done,
            inproc: options.inproc.clone(),
            notes,
            pid,
            snapshots,
        })
    }

    /// Reads the target's loaded modules now and hands them to the trace. A launched
    /// program's modules are otherwise read when the drain meets their first event,
    /// which can be after a short program has exited and its mappings are gone.
    pub fn snapshot_modules(&self) {
        let modules = modules_of_process(self.pid);
        if !modules.is_empty() {
            let _ = self.snapshots.send(modules);
        }
    }

    /// Things the user should know about how the probes were attached.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Stops recording: switches the probes off, drains what is left, writes the
    /// footer (with the target's exit status if it exited), hands the detach off.
    ///
    /// In process, events the converter had not caught up with are converted
    /// now, which can take a while: on a terminal a progress bar shows it.
    pub fn finish(mut self, exit: Option<ExitStatus>) -> Result<RecordSummary> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(exit);
        }
        if let Some(mapping) = &self.inproc {
            mapping.ring_doorbell();
        }
        let drain = self.drain.take().expect("finished once");
        let progress = crate::progress::Progress::bytes("finishing the trace");
        let mut total = 0;
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            self.drain_done.recv_timeout(Duration::from_millis(50))
        {
            let left = self.backlog.load(Ordering::Relaxed) as u64;
            total = total.max(left);
            progress.set(total - left, total);
        }
        drop(progress);
        drain
            .join()
            .map_err(|_| anyhow!("the drain thread panicked"))?
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(None);
        }
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}

/// Runs the calling thread at nice -20 while it lives (when permitted): loading and
/// verifying the programs is CPU work, and an attached target that keeps every CPU
/// busy stretched attaching to a second and more.
struct NiceBoost {
    tid: libc::id_t,
    before: i32,
}

impl NiceBoost {
    fn raise() -> Option<NiceBoost> {
        // SAFETY: plain syscalls on the calling thread.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let before = libc::getpriority(libc::PRIO_PROCESS, tid);
            if *libc::__errno_location() != 0 || before <= -20 {
                return None;
            }
            (libc::setpriority(libc::PRIO_PROCESS, tid, -20) == 0)
                .then_some(NiceBoost { tid, before })
        }
    }
}

impl Drop for NiceBoost {
    fn drop(&mut self) {
        // SAFETY: plain syscall on the thread that raised its priority.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, self.tid, self.before) };
    }
}

/// The name of a signal number, for messages.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
