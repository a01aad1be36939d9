//! A recording session: load the probes, attach them to one process, drain the ring
//! buffer into a trace file until told to stop.
//!
//! The drain runs on its own thread with a single-threaded tokio runtime: the ring
//! buffer's fd is registered with `AsyncFd`, so the thread sleeps until the kernel
//! has events, and a timer flushes a chunk at least every 100 ms so a crash loses
//! little.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{
    BreakpointConfig, PerfBreakpointLength, PerfBreakpointType, PerfEventConfig, PerfEventScope,
    SamplePolicy,
};
use aya::programs::uprobe::UProbeLinkId;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{PerfEvent, RawTracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use ordo_probe_common::{
    config, kind, RawEvent, WatchSite, CONFIG_MAP, DROPS_MAP, EVENTS_MAP, MAX_WATCH_SITES,
    WATCH_SITES_MAP,
};
use ordo_trace::schema::{Footer, Header, ModuleRecord, ThreadRecord};
use ordo_trace::symbolize::modules_of_process;
use ordo_trace::{Event, LogicalIdAssigner, TraceWriter};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use crate::probes;

/// The compiled eBPF programs (built by build.rs).
static PROBE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ordo-probes.o"));

/// Default ring buffer size.
pub const DEFAULT_BUFFER_SIZE: usize = 16 << 20;
/// Events per chunk before it is written.
pub(crate) const CHUNK_EVENTS: usize = 65536;
/// Longest time events wait in memory before being written.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

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
    /// Hardware-watched runtime addresses and their sizes (1, 2, 4 or 8).
    pub hw_watches: Vec<(u64, u8)>,
    /// Record the pthread API in process, through the preloaded agent writing into
    /// this mapping (the launched program must have it and `ORDO_RECORD_FD`); the
    /// pthread uprobes are then not attached. `None`: everything by eBPF.
    pub inproc: Option<std::sync::Arc<crate::inproc::InprocMapping>>,
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
            inproc: None,
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
    /// Lines worth saying after the totals (e.g. what the in-process path did not follow).
    pub notes: Vec<String>,
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
    stop: Option<oneshot::Sender<Option<ExitStatus>>>,
    drain: Option<std::thread::JoinHandle<Result<RecordSummary>>>,
}

impl Recording {
    /// Loads the probes, attaches them to `pid`'s threads (current and future), and
    /// starts draining events into `options.output`.
    pub fn start(pid: u32, options: &RecordOptions) -> Result<Recording> {
        check_privileges()?;
        let pid_nz = NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0 is not a process"))?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(EVENTS_MAP, options.buffer_size as u32)
            .load(PROBE_OBJECT)
            .map_err(|e| load_error(e.into()))?;
        {
            let mut config: Array<_, u64> =
                Array::try_from(ebpf.map_mut(CONFIG_MAP).context("CONFIG map")?)?;
            config
                .set(config::TARGET_TGID, pid as u64, 0)
                .context("write probe config")?;
        }
        let libc = probes::system_libc()?;
        let table = probes::resolve(&libc)?;
        let mut links: Vec<(&'static str, UProbeLinkId)> = Vec::new();
        // In process, the agent records the pthread API: no uprobes on it.
        let uprobes: &[(&str, bool)] = if options.inproc.is_some() {
            &[]
        } else {
            &[("ordo_entry", false), ("ordo_return", true)]
        };
        for &(program, ret) in uprobes {
            let prog: &mut UProbe = ebpf.program_mut(program).context(program)?.try_into()?;
            prog.load().map_err(|e| load_error(e.into()))?;
            for probe in table.iter().filter(|p| !ret || p.row.on_return) {
                let offset = if ret {
                    probe.function_offset
                } else {
                    probe.entry_offset
                };
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(offset),
                    cookie: Some(probe.cookie),
                };
                let link = prog
                    .attach(point, &libc, UProbeScope::OneProcess(pid_nz))
                    .with_context(|| {
                        format!(
                            "attach {} probe to {}",
                            if ret { "return" } else { "entry" },
                            probe.row.function
                        )
                    })?;
                links.push((program, link));
            }
        }
        for (program, tracepoint) in [
            ("ordo_sys_enter", "sys_enter"),
            ("ordo_sys_exit", "sys_exit"),
            ("ordo_thread_exit", "sched_process_exit"),
        ] {
            let prog: &mut RawTracePoint =
                ebpf.program_mut(program).context(program)?.try_into()?;
            prog.load().map_err(|e| load_error(e.into()))?;
            prog.attach(tracepoint)
                .with_context(|| format!("attach raw tracepoint {tracepoint}"))?;
        }

        links.extend(attach_watches(&mut ebpf, pid_nz, options)?);

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
            ..Default::default()
        };
        let writer = TraceWriter::create(&options.output, &header)
            .with_context(|| format!("create {}", options.output.display()))?;
        let ring: RingBuf<MapData> =
            RingBuf::try_from(ebpf.take_map(EVENTS_MAP).context("EVENTS map")?)?;
        let mut state = DrainState::new(pid, writer, options.output.clone());
        if options.attached {
            state.adopt_existing_threads();
        }
        let (stop_tx, stop_rx) = oneshot::channel();
        let inproc = options.inproc.clone();
        let drain = std::thread::Builder::new()
            .name("ordo-drain".into())
            .spawn(move || -> Result<RecordSummary> {
                if let Some(mapping) = inproc {
                    return crate::inproc::drain(ebpf, links, ring, state, stop_rx, mapping);
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(drain(ebpf, links, ring, state, stop_rx))
            })?;
        Ok(Recording {
            stop: Some(stop_tx),
            drain: Some(drain),
        })
    }

    /// Stops recording: drains what is left, writes the footer (with the target's
    /// exit status if it exited), detaches the probes.
    pub fn finish(mut self, exit: Option<ExitStatus>) -> Result<RecordSummary> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(exit);
        }
        self.drain
            .take()
            .expect("finished once")
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

/// Loads and attaches the variable-watch programs, if any watch was asked for.
fn attach_watches(
    ebpf: &mut Ebpf,
    pid: NonZeroU32,
    options: &RecordOptions,
) -> Result<Vec<(&'static str, UProbeLinkId)>> {
    let mut links = Vec::new();
    if !options.watch_sites.is_empty() {
        if options.watch_sites.len() > MAX_WATCH_SITES as usize {
            bail!(
                "{} watched instruction sites; at most {MAX_WATCH_SITES} are supported",
                options.watch_sites.len()
            );
        }
        {
            let mut sites: Array<_, WatchSite> =
                Array::try_from(ebpf.map_mut(WATCH_SITES_MAP).context("WATCH_SITES map")?)?;
            for (i, (_, _, site)) in options.watch_sites.iter().enumerate() {
                sites.set(i as u32, *site, 0).context("write watch sites")?;
            }
        }
        let prog: &mut UProbe = ebpf
            .program_mut("ordo_watch")
            .context("ordo_watch")?
            .try_into()?;
        prog.load().map_err(|e| load_error(e.into()))?;
        for (i, (module, offset, _)) in options.watch_sites.iter().enumerate() {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(*offset),
                cookie: Some(i as u64),
            };
            let link = prog
                .attach(point, module, UProbeScope::OneProcess(pid))
                .with_context(|| {
                    format!("attach a watch probe at {}+{offset:#x}", module.display())
                })?;
            links.push(("ordo_watch", link));
        }
    }
    if !options.hw_watches.is_empty() {
        if options.hw_watches.len() > MAX_HW_WATCHES {
            bail!(
                "{} hardware watches asked for; x86 has {MAX_HW_WATCHES} debug registers",
                options.hw_watches.len()
            );
        }
        {
            let mut watches: aya::maps::HashMap<_, u64, u64> = aya::maps::HashMap::try_from(
                ebpf.map_mut("HW_WATCHES").context("HW_WATCHES map")?,
            )?;
            for (addr, size) in &options.hw_watches {
                watches
                    .insert(addr, *size as u64, 0)
                    .context("write hardware watches")?;
            }
        }
        let cpus = aya::util::online_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
        let prog: &mut PerfEvent = ebpf
            .program_mut("ordo_hw_watch")
            .context("ordo_hw_watch")?
            .try_into()?;
        prog.load().map_err(|e| load_error(e.into()))?;
        for (addr, size) in &options.hw_watches {
            let length = match size {
                1 => PerfBreakpointLength::Len1,
                2 => PerfBreakpointLength::Len2,
                4 => PerfBreakpointLength::Len4,
                8 => PerfBreakpointLength::Len8,
                other => bail!(
                    "hardware watch of {other} bytes at {addr:#x}: the size must be 1, 2, 4 or 8"
                ),
            };
            if addr % *size as u64 != 0 {
                bail!(
                    "hardware watch at {addr:#x}: the address must be aligned to its size ({size})"
                );
            }
            // One breakpoint per CPU, for every process: it covers threads created
            // later from their first instruction; the program keeps the target's hits.
            for &cpu in &cpus {
                let config = PerfEventConfig::Breakpoint(BreakpointConfig::Data {
                    r#type: PerfBreakpointType::Write,
                    address: *addr,
                    length,
                });
                prog.attach(config, PerfEventScope::AllProcessesOneCpu { cpu }, SamplePolicy::Period(1), false)
                    .with_context(|| format!("set a hardware watchpoint at {addr:#x} on CPU {cpu} (all four debug registers may be in use)"))?;
            }
        }
    }
    Ok(links)
}

/// Hands the final close of the probes' perf events to an orphaned grandchild.
///
/// Detaching a uprobe waits for an RCU grace period, and the kernel serializes them:
/// about 90 ms each here, 5 s for ordo's ~55 probes after every recording. When the
/// target is gone the probes can never fire again, so the recorder need not wait:
/// a forked grandchild shares the perf event files, this process's closes become
/// cheap reference drops, and the grandchild's exit does the slow final close in the
/// background. It closes every other descriptor first, so it holds no pipe or file
/// anyone waits on.
pub(crate) fn detach_in_background() {
    // Perf events, BPF links, programs and maps: everything else is closed.
    let keep = |target: &str| target.starts_with("anon_inode:");
    let to_close: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| {
                let e = e.ok()?;
                let fd: i32 = e.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                (!keep(&target.to_string_lossy())).then_some(fd)
            })
            .collect()
        })
        .unwrap_or_default();
    // SAFETY: between fork and _exit the children only call close, fork and _exit,
    // which are async-signal-safe.
    unsafe {
        let child = libc::fork();
        if child == 0 {
            if libc::fork() == 0 {
                for &fd in &to_close {
                    libc::close(fd);
                }
                libc::_exit(0);
            }
            libc::_exit(0);
        } else if child > 0 {
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
    }
}

fn load_error(e: anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("Operation not permitted") || text.contains("EPERM") {
        anyhow!("loading the eBPF programs was refused: recording needs root, or CAP_BPF and CAP_PERFMON ({text})")
    } else {
        e.context("load the eBPF programs")
    }
}

fn monotonic_ns() -> u64 {
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

fn comm(name: &[u8; 16]) -> String {
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Everything the drain keeps between chunks.
pub(crate) struct DrainState {
    pub(crate) pid: u32,
    writer: TraceWriter,
    output: PathBuf,
    pub(crate) pending: Vec<Event>,
    ids: LogicalIdAssigner,
    names: HashMap<u32, String>,
    seen: HashSet<u32>,
    written_threads: HashMap<u32, ThreadRecord>,
    modules: Vec<ModuleRecord>,
    modules_written: usize,
    last_module_scan: Option<Instant>,
    by_kind: BTreeMap<&'static str, u64>,
    unknown_kinds: u64,
    dropped: u64,
    started: Instant,
}

impl DrainState {
    fn new(pid: u32, writer: TraceWriter, output: PathBuf) -> DrainState {
        DrainState {
            pid,
            writer,
            output,
            pending: Vec::with_capacity(CHUNK_EVENTS),
            ids: LogicalIdAssigner::new(pid),
            names: HashMap::new(),
            seen: HashSet::from([pid]),
            written_threads: HashMap::new(),
            modules: Vec::new(),
            modules_written: 0,
            last_module_scan: None,
            by_kind: BTreeMap::new(),
            unknown_kinds: 0,
            dropped: 0,
            started: Instant::now(),
        }
    }

    /// Threads that existed before attaching get ids in tid order.
    fn adopt_existing_threads(&mut self) {
        let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        for tid in tids {
            if tid != self.pid {
                self.ids.adopt(tid);
            }
            self.seen.insert(tid);
            if let Ok(name) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
            {
                self.names.insert(tid, name.trim().to_string());
            }
        }
    }

    pub(crate) fn take(&mut self, raw: &RawEvent) {
        let Some(event) = Event::from_raw(raw) else {
            self.unknown_kinds += 1;
            return;
        };
        *self.by_kind.entry(event.kind.name()).or_insert(0) += 1;
        self.seen.insert(event.tid);
        match raw.kind {
            kind::THREAD_CREATE => {
                if let Some(child) = event.child_tid() {
                    self.ids.created(event.tid, child);
                    self.seen.insert(child);
                }
            }
            kind::THREAD_START | kind::THREAD_EXIT => {
                let name = comm(&raw.name);
                if !name.is_empty() {
                    self.names.insert(event.tid, name);
                }
            }
            _ => {}
        }
        if self.modules.is_empty() || (event.site != 0 && !self.site_known(event.site)) {
            self.scan_modules();
        }
        self.pending.push(event);
    }

    /// Reads the target's modules now if none are known yet (the in-process drain
    /// holds events back, and a short program may be gone by the time they reach
    /// [`DrainState::take`]).
    pub(crate) fn ensure_modules(&mut self) {
        if self.modules.is_empty() {
            self.scan_modules();
        }
    }

    fn site_known(&self, site: u64) -> bool {
        self.modules.iter().any(|m| {
            m.mappings
                .iter()
                .any(|map| (map.start..map.end).contains(&site))
        })
    }

    /// Re-reads the target's mappings (rate-limited: a site in a module unloaded
    /// since would otherwise trigger a scan per event).
    fn scan_modules(&mut self) {
        if self
            .last_module_scan
            .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.last_module_scan = Some(Instant::now());
        for module in modules_of_process(self.pid) {
            match self.modules.iter_mut().find(|m| m.path == module.path) {
                Some(known) => {
                    for map in module.mappings {
                        if !known.mappings.contains(&map) {
                            known.mappings.push(map);
                        }
                    }
                }
                None => self.modules.push(module),
            }
        }
    }

    fn thread_records(&mut self, finishing: bool) -> Vec<ThreadRecord> {
        let mut out = Vec::new();
        let mut tids: Vec<u32> = self.seen.iter().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let logical = match self.ids.get(tid) {
                Some(id) => id.clone(),
                // A thread whose creation was not seen (yet): only at the end is it
                // adopted, so a late thread_create still gives it its real id.
                None if finishing => self.ids.adopt(tid),
                None => continue,
            };
            let record = ThreadRecord {
                tid,
                logical: logical.0,
                name: self.names.get(&tid).cloned().unwrap_or_default(),
                parent_tid: self.ids.parent(tid).unwrap_or(0),
            };
            if self.written_threads.get(&tid) != Some(&record) {
                self.written_threads.insert(tid, record.clone());
                out.push(record);
            }
        }
        out
    }

    pub(crate) fn flush(&mut self, dropped: u64, finishing: bool) -> Result<()> {
        self.dropped = dropped;
        let threads = self.thread_records(finishing);
        // Modules change rarely: a module record is written whole when first seen,
        // and again if it gained mappings (dlopen of more segments).
        let modules: Vec<ModuleRecord> = self.modules[self.modules_written..].to_vec();
        if self.pending.is_empty() && threads.is_empty() && modules.is_empty() {
            return Ok(());
        }
        self.writer
            .write_chunk(&self.pending, &threads, &modules, dropped)
            .with_context(|| format!("write {}", self.output.display()))?;
        self.modules_written = self.modules.len();
        self.pending.clear();
        Ok(())
    }

    pub(crate) fn finish(
        mut self,
        dropped: u64,
        exit: Option<ExitStatus>,
    ) -> Result<RecordSummary> {
        use std::os::unix::process::ExitStatusExt;
        self.scan_modules_final();
        self.flush(dropped, true)?;
        let footer = Footer {
            dropped,
            end_monotonic_ns: monotonic_ns(),
            exit_code: exit.and_then(|s| s.code()),
            exit_signal: exit.and_then(|s| s.signal()),
            unknown_kinds: self.unknown_kinds,
            ..Default::default()
        };
        let events = self.writer.events_written();
        let threads = self.written_threads.len();
        let bytes = self
            .writer
            .finish(footer)
            .with_context(|| format!("finish {}", self.output.display()))?;
        Ok(RecordSummary {
            output: self.output,
            events,
            dropped,
            by_kind: self.by_kind,
            threads,
            bytes,
            duration: self.started.elapsed(),
            notes: Vec::new(),
        })
    }

    fn scan_modules_final(&mut self) {
        self.last_module_scan = None;
        if self.modules.is_empty() {
            self.scan_modules();
        }
    }
}

pub(crate) fn read_drops(ebpf: &Ebpf) -> u64 {
    let Some(map) = ebpf.map(DROPS_MAP) else {
        return 0;
    };
    let Ok(drops) = PerCpuArray::<_, u64>::try_from(map) else {
        return 0;
    };
    drops
        .get(&0, 0)
        .map(|values| values.iter().sum())
        .unwrap_or(0)
}

async fn drain(
    ebpf: Ebpf,
    links: Vec<(&'static str, UProbeLinkId)>,
    ring: RingBuf<MapData>,
    mut state: DrainState,
    mut stop: oneshot::Receiver<Option<ExitStatus>>,
) -> Result<RecordSummary> {
    // SAFETY: the ring buffer owns its fd and outlives the registration (both are
    // dropped together at the end of this function).
    let mut ring =
        unsafe { AsyncFd::register(ring) }.map_err(|e| anyhow!("poll the ring buffer: {e}"))?;
    let mut ticker = tokio::time::interval(FLUSH_INTERVAL);
    let exit = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard.context("poll the ring buffer")?;
                drain_ready(guard.get_inner_mut(), &mut state, &ebpf)?;
                guard.clear_ready();
            }
            _ = ticker.tick() => {
                drain_ready(ring.get_mut(), &mut state, &ebpf)?;
                state.flush(read_drops(&ebpf), false)?;
            }
            exit = &mut stop => break exit.unwrap_or(None),
        }
    };
    // Events already in the ring buffer belong to the run: take them all.
    drain_ready(ring.get_mut(), &mut state, &ebpf)?;
    let dropped = read_drops(&ebpf);
    drop(ring);
    let target_gone =
        exit.is_some() || !std::path::Path::new(&format!("/proc/{}/task", state.pid)).exists();
    let summary = state.finish(dropped, exit);
    if target_gone {
        detach_in_background();
    }
    drop(links);
    drop(ebpf);
    summary
}

/// Takes every record the ring buffer holds, writing a chunk whenever one fills up.
fn drain_ready(ring: &mut RingBuf<MapData>, state: &mut DrainState, ebpf: &Ebpf) -> Result<()> {
    loop {
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<RawEvent>() {
                continue;
            }
            // SAFETY: the probes write whole RawEvent records; read_unaligned copes
            // with the ring buffer's 8-byte record alignment.
            let raw: RawEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            drop(item);
            state.take(&raw);
            if state.pending.len() >= CHUNK_EVENTS {
                break;
            }
        }
        if state.pending.len() < CHUNK_EVENTS {
            return Ok(());
        }
        state.flush(read_drops(ebpf), false)?;
    }
}
