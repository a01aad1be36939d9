//! Loading the probes and attaching them to one process, switched off until every
//! probe is in place.
//!
//! Every program first checks `config::ENABLED`; [`Probes::enable`] sets it once
//! all uprobes, tracepoints and watchpoints are attached, so the trace never starts
//! with a half-attached probe set (e.g. unlocks recorded before the lock probe went
//! live). Uprobes are attached with one multi-uprobe link per file and program
//! (see `multi_uprobe`); kernels without them get one perf-event uprobe per site.

use std::num::NonZeroU32;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{
    BreakpointConfig, PerfBreakpointLength, PerfBreakpointType, PerfEventConfig, PerfEventScope,
    SamplePolicy,
};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{PerfEvent, RawTracePoint, TracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use ordo_probe_common::{
    config, ProbeSite, WatchSite, CONFIG_MAP, DROPS_MAP, EVENTS_MAP, EXECS_MAP, FORKS_MAP,
    MAX_WATCH_SITES, PROBE_SITES_MAP, SEQ_COUNTERS, SEQ_CREATED_MAP, SEQ_MAP, STASH_ENTRIES,
    STASH_MAP, WATCH_SITES_MAP,
};

use super::multi_uprobe::{self, MultiUprobePrograms};
use super::{HwWatch, RecordOptions, MAX_HW_WATCHES};
use crate::probes::{self, Program};

/// The compiled eBPF programs (built by build.rs).
pub(crate) static PROBE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ordo-probes.o"));

/// A loader [`prepare_loader`] is making, or one a recording used and gave back.
enum Prepared {
    Making(std::thread::JoinHandle<EbpfLoader<'static>>),
    Ready(Box<EbpfLoader<'static>>),
}

/// The loaders no recording holds now (a hunt records several replays at once:
/// each takes one). A loader is reusable, and keeps the kernel's BTF it parsed:
/// after its first recordings a process parses it no more.
static PREPARED: std::sync::Mutex<Vec<Prepared>> = std::sync::Mutex::new(Vec::new());

/// Starts making the eBPF loader on a thread of its own, unless one is ready or
/// being made: the first load probes the kernel's features, a fixed cost of every
/// recording that overlaps this way with the recorder's other start-up work
/// (planning the program's sites, the in-process mapping, the launch).
pub fn prepare_loader() {
    let Ok(mut prepared) = PREPARED.lock() else {
        return;
    };
    if prepared.is_empty() {
        prepared.push(Prepared::Making(std::thread::spawn(|| {
            let _ = aya::features();
            loader_without_kernel_btf()
        })));
    }
}

/// A loader from [`prepare_loader`]'s pool, or a new one.
fn loader() -> EbpfLoader<'static> {
    let taken = PREPARED.lock().ok().and_then(|mut p| p.pop());
    match taken {
        Some(Prepared::Ready(loader)) => *loader,
        Some(Prepared::Making(handle)) => handle.join().unwrap_or_default(),
        None => std::thread::spawn(loader_without_kernel_btf)
            .join()
            .unwrap_or_default(),
    }
}

/// A loader that has not read the kernel's BTF, made on the calling thread,
/// which it leaves in a mount namespace of its own (call it on a thread made
/// for it).
///
/// aya 0.14's `EbpfLoader::new` reads and parses `/sys/kernel/btf/vmlinux`
/// unconditionally (several MB, ~20 ms here, on the critical path of every
/// recording: the probes must be attached before the program starts) and has no
/// way to skip it. The kernel's BTF serves only CO-RE relocations, which ordo's
/// probes have none of (`tests::the_probes_need_no_kernel_btf`). So the thread
/// hides the file from itself: a private mount namespace (nothing propagates
/// back to the host's) in which `/dev/null` is bound over it, where aya's read
/// finds no BTF and goes on without. Where that is not allowed (no
/// CAP_SYS_ADMIN: a recorder with only CAP_BPF and CAP_PERFMON) the loader
/// parses it as before.
fn loader_without_kernel_btf() -> EbpfLoader<'static> {
    const VMLINUX: &std::ffi::CStr = c"/sys/kernel/btf/vmlinux";
    // SAFETY: unshare and mount take NUL-terminated strings or null and change
    // only this thread's view of the file systems (CLONE_NEWNS implies CLONE_FS).
    unsafe {
        let _ = libc::unshare(libc::CLONE_NEWNS) == 0
            && libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0
            && libc::mount(
                c"/dev/null".as_ptr(),
                VMLINUX.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) == 0;
    }
    EbpfLoader::new()
}

/// Puts a loader back into the pool for the process's next recording.
fn give_back(loader: EbpfLoader<'static>) {
    if let Ok(mut prepared) = PREPARED.lock() {
        prepared.push(Prepared::Ready(Box::new(loader)));
    }
}

/// Map sizes of a recording's probes: what a loaded object is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSizes {
    /// The pthread API is recorded in process: the kernel side needs no
    /// syscall tracepoint (`attach_tracepoints`).
    inproc: bool,
    /// Bytes of the ring buffer (`--buffer-size`).
    buffer: u32,
    /// Entries of the argument stash.
    stash: u32,
    /// Counters of the sequence table.
    seq: u32,
}

impl ProbeSizes {
    /// The sizes a recording with a `buffer`-byte ring uses, in process or not.
    pub fn new(buffer: usize, inproc: bool) -> ProbeSizes {
        let (stash, seq) = match inproc {
            true => (INPROC_STASH_ENTRIES, INPROC_SEQ_ENTRIES),
            false => (STASH_ENTRIES, SEQ_COUNTERS),
        };
        ProbeSizes {
            inproc,
            buffer: buffer as u32,
            stash,
            seq,
        }
    }
}

/// The probe object loaded into the kernel with its system-call tracepoints
/// attached: everything of a recording that does not depend on the target.
/// The programs return at once until `config::ENABLED` is set, and
/// `config::TARGET_TGID` is set only once the target is known, so this can be
/// made before the target exists.
struct Loaded {
    ebpf: Ebpf,
    /// The ring buffer, mapped into this process (~2 ms for 16 MiB: the kernel
    /// maps every page at once).
    ring: RingBuf<MapData>,
    /// Why syscalls are seen through the raw tracepoints, if they are.
    syscall_note: Option<String>,
}

impl Loaded {
    fn new(sizes: ProbeSizes) -> Result<Loaded> {
        crate::phase("preload: start");
        let mut loader = loader();
        crate::phase("preload: loader");
        // Every size set each time: the loader may come back for another recording.
        loader
            .map_max_entries(EVENTS_MAP, sizes.buffer)
            .map_max_entries(STASH_MAP, sizes.stash)
            .map_max_entries(SEQ_MAP, sizes.seq);
        let loaded = loader.load(PROBE_OBJECT);
        give_back(loader);
        let mut ebpf = loaded.map_err(|e| load_error(e.into()))?;
        crate::phase("preload: object loaded");
        let raw_syscalls = match attach_tracepoints(&mut ebpf, sizes.inproc) {
            Ok(()) => None,
            Err(e) => {
                for (program, tracepoint) in [
                    ("ordo_sys_enter", "sys_enter"),
                    ("ordo_sys_exit", "sys_exit"),
                ] {
                    load_raw_tracepoint(&mut ebpf, program, tracepoint)?;
                }
                Some(format!(
                    "per-syscall tracepoints unavailable ({e:#}); every syscall of every process runs a BPF program while recording"
                ))
            }
        };
        let ring = RingBuf::try_from(ebpf.take_map(EVENTS_MAP).context("EVENTS map")?)?;
        crate::phase("preload: attached");
        Ok(Loaded {
            ebpf,
            ring,
            syscall_note: raw_syscalls,
        })
    }
}

/// Probes [`prepare_probes`] is loading, for the sizes they are made for.
type Preloading = (ProbeSizes, std::thread::JoinHandle<Result<Loaded>>);

/// At most one: loaded probes hold kernel memory (the ring buffer) until used.
static PRELOADED: std::sync::Mutex<Option<Preloading>> = std::sync::Mutex::new(None);

/// Starts loading the probes and attaching their system-call tracepoints on a
/// thread of its own, for the next recording with these sizes to take: ~10 ms
/// of verifying programs, allocating the ring buffer and opening 15 perf events,
/// which no longer wait for the recorder's planning and the program's launch.
pub fn prepare_probes(sizes: ProbeSizes) {
    prepare_loader();
    let Ok(mut slot) = PRELOADED.lock() else {
        return;
    };
    if slot.is_none() {
        *slot = Some((sizes, std::thread::spawn(move || Loaded::new(sizes))));
    }
}

/// The probes [`prepare_probes`] made, if they were made for `sizes`; others are
/// dropped (detached).
fn take_preloaded(sizes: ProbeSizes) -> Option<Result<Loaded>> {
    let (made_for, loading) = PRELOADED.lock().ok()?.take()?;
    let loaded = loading
        .join()
        .unwrap_or_else(|_| Err(anyhow!("loading the probes panicked")));
    (made_for == sizes).then_some(loaded)
}

/// Loads and attaches what the kernel side sees of every recording: thread exits
/// (raw `sched_process_exit`), thread and process creation (`task:task_newtask`),
/// execs (raw `sched_process_exec`) and, recording with eBPF (`inproc` false),
/// direct futex calls (`syscalls:sys_{enter,exit}_futex`), mounting tracefs first
/// if it is not. The programs are verified and attached on threads of their own
/// (~1 ms each to verify: the longest part of a short recording's start). When a
/// tracefs tracepoint fails, none of them stays attached and the error says why:
/// the caller uses the raw `sys_enter`/`sys_exit` tracepoints instead, which see
/// the clones, execs and futex calls but run on every syscall.
///
/// Why no syscall tracepoint in process: any one of them sets a flag on every
/// task of the system that sends each of its syscalls through the kernel's
/// tracing path (`syscall_trace_enter`, `perf_syscall_enter`, …: ~1 % of a
/// saturated memcached machine's CPU samples, the load generator's syscalls
/// included), while `task_newtask` and the raw scheduler tracepoints run only
/// when a task is made, execs or exits.
///
/// `ORDO_SYSCALL_PROBES=raw` forces the fallback (to test it, or to compare).
fn attach_tracepoints(ebpf: &mut Ebpf, inproc: bool) -> Result<()> {
    let forced_raw = std::env::var_os("ORDO_SYSCALL_PROBES").is_some_and(|v| v == "raw");
    if !forced_raw {
        ensure_tracefs();
    }
    let mut exit = None;
    let mut traced = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        match name {
            "ordo_thread_exit" => exit = Some(program),
            "ordo_task_newtask" if !forced_raw => traced.push((name, program)),
            "ordo_syscall_enter" | "ordo_syscall_exit" if !forced_raw && !inproc => {
                traced.push((name, program))
            }
            _ => {}
        }
    }
    let exit = exit.context("ordo_thread_exit")?;
    let (exit, traced) = std::thread::scope(|scope| {
        let on_traced: Vec<_> = traced
            .into_iter()
            .map(|(name, program)| scope.spawn(move || attach_tracefs_program(name, program)))
            .collect();
        let exit = load_raw(exit, "ordo_thread_exit", "sched_process_exit");
        let traced: Vec<Result<()>> = on_traced
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow!("attaching a tracepoint panicked")))
            })
            .collect();
        (exit, traced)
    });
    exit?;
    if forced_raw {
        bail!("ORDO_SYSCALL_PROBES=raw");
    }
    let wanted = if inproc { 1 } else { 3 };
    let failed = if traced.len() != wanted {
        Some(anyhow!(
            "the tracepoint programs are missing from the probe object"
        ))
    } else {
        traced
            .iter()
            .find_map(|r| r.as_ref().err())
            .map(|e| anyhow!("{e:#}"))
    };
    let failed = failed
        .or_else(|| load_raw_tracepoint(ebpf, "ordo_process_exec", "sched_process_exec").err());
    if let Some(e) = failed {
        // Nothing of them stays attached: unloading detaches every link.
        for name in [
            "ordo_task_newtask",
            "ordo_syscall_enter",
            "ordo_syscall_exit",
        ] {
            let program: Option<&mut TracePoint> =
                ebpf.program_mut(name).and_then(|p| p.try_into().ok());
            if let Some(program) = program {
                let _ = program.unload();
            }
        }
        return Err(e);
    }
    Ok(())
}

/// Loads one program of a tracefs tracepoint and attaches it: the creation of
/// tasks, or the futex syscall's entry or exit.
fn attach_tracefs_program(name: &str, program: &mut aya::programs::Program) -> Result<()> {
    let (category, tracepoint) = match name {
        "ordo_task_newtask" => ("task", "task_newtask"),
        "ordo_syscall_enter" => ("syscalls", "sys_enter_futex"),
        _ => ("syscalls", "sys_exit_futex"),
    };
    let prog: &mut TracePoint = program.try_into()?;
    prog.load().map_err(|e| load_error(e.into()))?;
    prog.attach(category, tracepoint)
        .with_context(|| format!("attach tracepoint {category}:{tracepoint}"))?;
    Ok(())
}

/// Loads the raw tracepoint program `name` and attaches it to `tracepoint`.
fn load_raw(program: &mut aya::programs::Program, name: &str, tracepoint: &str) -> Result<()> {
    let prog: &mut RawTracePoint = program.try_into().context(name.to_string())?;
    prog.load().map_err(|e| load_error(e.into()))?;
    prog.attach(tracepoint)
        .with_context(|| format!("attach raw tracepoint {tracepoint}"))?;
    Ok(())
}

/// [`load_raw`] of a program of `ebpf`.
fn load_raw_tracepoint(ebpf: &mut Ebpf, name: &str, tracepoint: &str) -> Result<()> {
    load_raw(
        ebpf.program_mut(name).context(name.to_string())?,
        name,
        tracepoint,
    )
}

/// Entries of the map of arguments saved between a function's entry and its
/// return (`STASH`) and of the per-object sequence counters (`SEQ`) when the
/// program is recorded in process: there the eBPF side sees only threads made
/// and ended and watched accesses, and the maps, allocated whole when
/// created, cost the start-up of every recording their size.
const INPROC_STASH_ENTRIES: u32 = 16_384;
const INPROC_SEQ_ENTRIES: u32 = 32_768;

/// Uprobe sites of one program in one file: file offsets and their cookies.
struct Sites {
    program: &'static str,
    file: PathBuf,
    on_return: bool,
    offsets: Vec<u64>,
    cookies: Vec<u64>,
}

/// Mounts tracefs at /sys/kernel/tracing when no tracefs is mounted (a fresh
/// machine has none; the per-syscall tracepoints are found through it). Without
/// the privilege to mount it, the caller falls back to raw tracepoints.
fn ensure_tracefs() {
    let mounted = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .any(|p| Path::new(p).is_dir());
    if !mounted {
        // SAFETY: NUL-terminated strings; mount has no memory effects on us.
        unsafe {
            libc::mount(
                c"tracefs".as_ptr(),
                c"/sys/kernel/tracing".as_ptr(),
                c"tracefs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
    }
}

/// The loaded and attached probes of one recording.
pub(super) struct Probes {
    ebpf: Ebpf,
    /// The ring buffer the programs write into, until the drain takes it.
    ring: Option<RingBuf<MapData>>,
    /// Multi-uprobe links and the programs they run, in that order: dropping a link
    /// detaches all of its sites at once.
    multi: Vec<OwnedFd>,
    /// Why uprobes were attached one at a time, if they were.
    pub(super) fallback_note: Option<String>,
    /// Why syscalls are seen through the raw tracepoints, if they are.
    pub(super) syscall_note: Option<String>,
    /// Execs that are ordo's own: launching, the stopped child execs the program
    /// once recording is on.
    launch_execs: u64,
    /// Counters the kernel side's sequence table (`SEQ`) holds.
    seq_counters: u32,
}

impl Probes {
    /// Loads the programs and attaches every probe to `pid`, with recording still
    /// switched off.
    pub(super) fn attach(pid: u32, options: &RecordOptions) -> Result<Probes> {
        let pid_nz = NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0 is not a process"))?;
        let sizes = ProbeSizes::new(options.buffer_size, options.inproc.is_some());
        let Loaded {
            mut ebpf,
            ring,
            syscall_note,
        } = match take_preloaded(sizes) {
            Some(loaded) => loaded?,
            None => Loaded::new(sizes)?,
        };
        set_config(&mut ebpf, config::TARGET_TGID, pid as u64)?;
        let sites = uprobe_sites(options)?;
        if let Some(sites) = &sites.1 {
            write_watch_sites(&mut ebpf, sites)?;
        }
        write_probe_sites(&mut ebpf, &sites.2)?;
        let mut probes = Probes {
            ebpf,
            ring: Some(ring),
            multi: Vec::new(),
            fallback_note: None,
            syscall_note,
            launch_execs: if options.attached || options.exec_before_start {
                0
            } else {
                1
            },
            seq_counters: sizes.seq,
        };
        let all: Vec<Sites> = sites.0;
        if let Err(e) = probes.attach_multi(pid, &all) {
            // Kernels before 6.6 have no multi-uprobe links.
            probes.multi.clear();
            probes.fallback_note = Some(format!(
                "multi-uprobe links unavailable ({e:#}); attaching one uprobe per site (detaching takes ~90 ms per site)"
            ));
            probes.attach_one_by_one(pid_nz, &all)?;
        }
        attach_hw_watches(&mut probes.ebpf, options)?;
        Ok(probes)
    }

    fn attach_multi(&mut self, pid: u32, all: &[Sites]) -> Result<()> {
        if all.is_empty() {
            return Ok(());
        }
        let ring = self.ring.as_ref().map(|ring| (EVENTS_MAP, ring.as_fd()));
        let programs = MultiUprobePrograms::relocate(PROBE_OBJECT, &self.ebpf, ring.as_slice())?;
        let mut loaded: Vec<(&'static str, OwnedFd)> = Vec::new();
        for sites in all {
            let index = match loaded.iter().position(|(name, _)| *name == sites.program) {
                Some(index) => index,
                None => {
                    loaded.push((sites.program, programs.load(sites.program)?));
                    loaded.len() - 1
                }
            };
            let link = multi_uprobe::attach(
                loaded[index].1.as_fd(),
                &sites.file,
                &sites.offsets,
                &sites.cookies,
                pid,
                sites.on_return,
            )?;
            self.multi.push(link);
        }
        self.multi.extend(loaded.into_iter().map(|(_, fd)| fd));
        Ok(())
    }

    fn attach_one_by_one(&mut self, pid: NonZeroU32, all: &[Sites]) -> Result<()> {
        for sites in all {
            let prog: &mut UProbe = self
                .ebpf
                .program_mut(sites.program)
                .context(sites.program)?
                .try_into()?;
            if prog.fd().is_err() {
                prog.load().map_err(|e| load_error(e.into()))?;
            }
            for (&offset, &cookie) in sites.offsets.iter().zip(&sites.cookies) {
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(offset),
                    cookie: Some(cookie),
                };
                prog.attach(point, &sites.file, UProbeScope::OneProcess(pid))
                    .with_context(|| {
                        format!(
                            "attach {} at {}+{offset:#x}",
                            sites.program,
                            sites.file.display()
                        )
                    })?;
            }
        }
        Ok(())
    }

    /// Switches recording on: the last step of attaching.
    pub(super) fn enable(&mut self) -> Result<()> {
        set_config(&mut self.ebpf, config::WAKE_EACH, 1)?;
        set_config(&mut self.ebpf, config::ENABLED, 1)
    }

    /// Lets the programs wake the drain lazily again (once it knows the modules).
    pub(super) fn stop_waking_each(&mut self) {
        let _ = set_config(&mut self.ebpf, config::WAKE_EACH, 0);
    }

    /// Switches recording off: the programs return at once from then on.
    pub(super) fn disable(&mut self) {
        let _ = set_config(&mut self.ebpf, config::ENABLED, 0);
    }

    /// The ring buffer the programs write into (taken once).
    pub(super) fn take_ring(&mut self) -> Result<RingBuf<MapData>> {
        self.ring
            .take()
            .context("the ring buffer was taken already")
    }

    /// Events lost so far because the ring buffer was full.
    pub(super) fn drops(&self) -> u64 {
        self.per_cpu_total(DROPS_MAP)
    }

    /// Successful execs by the program so far (not counting the launch's).
    pub(super) fn execs(&self) -> u64 {
        self.per_cpu_total(EXECS_MAP)
            .saturating_sub(self.launch_execs)
    }

    /// Child processes the program started so far (fork, vfork, posix_spawn).
    pub(super) fn forks(&self) -> u64 {
        self.per_cpu_total(FORKS_MAP)
    }

    /// The summary's line about child processes, if the program started any:
    /// `also_seen` is what the in-process agent counted (forks that ran the
    /// `pthread_atfork` handlers), in case the kernel saw fewer.
    fn fork_note(&self, also_seen: u64) -> Option<String> {
        let n = self.forks().max(also_seen);
        (n > 0).then(|| {
            format!(
                "warning: {n} forked child process{} not followed: ordo records the launched (or attached) process only; record a child's program on its own",
                if n == 1 { "" } else { "es" }
            )
        })
    }

    /// The summary's line about the kernel side's sequence table, if the program
    /// used more synchronization objects than it holds: evicted counters start again
    /// at 0 when their object is used again, so the order of that object's events
    /// is no longer exact (the in-process agent's table counts its own overflow).
    fn seq_note(&self) -> Option<String> {
        let created = self.per_cpu_total(SEQ_CREATED_MAP);
        let held = self.seq_counters;
        (created > u64::from(held)).then(|| {
            format!(
                "warning: the probes numbered the events of {created} objects, more than their sequence table holds ({held}): an object whose counter was evicted and that was used again numbers its events from 0 anew, so their order on it is only as exact as their timestamps"
            )
        })
    }

    /// The summary's lines the kernel side has to add: execs, child processes not
    /// followed (`forks_seen`: what the in-process agent counted), an overflowed
    /// sequence table.
    pub(super) fn notes(&self, in_process: bool, forks_seen: u64) -> Vec<String> {
        [
            self.exec_note(in_process),
            self.fork_note(forks_seen),
            self.seq_note(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The sum over CPUs of a per-CPU counter map's only slot.
    fn per_cpu_total(&self, name: &str) -> u64 {
        let Some(map) = self.ebpf.map(name) else {
            return 0;
        };
        let Ok(counts) = PerCpuArray::<_, u64>::try_from(map) else {
            return 0;
        };
        counts
            .get(&0, 0)
            .map(|values| values.iter().sum())
            .unwrap_or(0)
    }

    /// The summary's line about execs by the program, if it made any. In process,
    /// the agent ends at exec (the new image has none): only the kernel's thread
    /// events follow; the uprobes of the eBPF path stay on libc in the new image.
    fn exec_note(&self, in_process: bool) -> Option<String> {
        let n = self.execs();
        (n > 0).then(|| {
            let after = if in_process {
                "after it only thread events were recorded (the in-process agent ends at exec)"
            } else {
                "the new image was recorded as the same process"
            };
            format!(
                "{n} exec{} by the program: {after}",
                if n == 1 { "" } else { "s" }
            )
        })
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        // Links before the programs they run (the order of `multi`); aya's links and
        // programs go with `ebpf` afterwards.
        self.multi.clear();
    }
}

fn set_config(ebpf: &mut Ebpf, index: u32, value: u64) -> Result<()> {
    let mut config: Array<_, u64> =
        Array::try_from(ebpf.map_mut(CONFIG_MAP).context("CONFIG map")?)?;
    config.set(index, value, 0).context("write probe config")
}

/// The uprobe sites to attach, grouped by program and file: libc's entry and return
/// probes and placed sites, then the watch probes; the watch site table, if any;
/// and the placed-site table.
#[expect(
    clippy::type_complexity,
    reason = "three tables for the one caller, named by this doc; a type for them would be used once"
)]
fn uprobe_sites(
    options: &RecordOptions,
) -> Result<(Vec<Sites>, Option<Vec<WatchSite>>, Vec<ProbeSite>)> {
    let libc = probes::system_libc()?;
    // In process, the agent records the pthread API: no uprobes on it, and no
    // reading of libc's code to place them (a few ms of every recording's start).
    let plan = match options.inproc {
        Some(_) => probes::ProbePlan::default(),
        None => probes::plan(&libc)?,
    };
    let mut all = Vec::new();
    for program in [Program::Entry, Program::Return, Program::Site] {
        let mut sites = Sites {
            program: program.name(),
            file: libc.clone(),
            on_return: program == Program::Return,
            offsets: Vec::new(),
            cookies: Vec::new(),
        };
        for at in plan.attachments.iter().filter(|a| a.program == program) {
            sites.offsets.push(at.offset);
            sites.cookies.push(at.cookie);
        }
        if !sites.offsets.is_empty() {
            all.push(sites);
        }
    }
    if options.watch_sites.is_empty() {
        return Ok((all, None, plan.sites));
    }
    if options.watch_sites.len() > MAX_WATCH_SITES as usize {
        bail!(
            "{} watched instruction sites; at most {MAX_WATCH_SITES} are supported",
            options.watch_sites.len()
        );
    }
    for (i, (module, offset, _)) in options.watch_sites.iter().enumerate() {
        let index = match all
            .iter()
            .position(|s| s.program == "ordo_watch" && s.file == *module)
        {
            Some(index) => index,
            None => {
                all.push(Sites {
                    program: "ordo_watch",
                    file: module.clone(),
                    on_return: false,
                    offsets: Vec::new(),
                    cookies: Vec::new(),
                });
                all.len() - 1
            }
        };
        all[index].offsets.push(*offset);
        all[index].cookies.push(i as u64);
    }
    let table = options.watch_sites.iter().map(|(_, _, s)| *s).collect();
    Ok((all, Some(table), plan.sites))
}

/// Fills `PROBE_SITES`, which `ordo_site`'s cookies index.
fn write_probe_sites(ebpf: &mut Ebpf, table: &[ProbeSite]) -> Result<()> {
    let mut sites: Array<_, ProbeSite> =
        Array::try_from(ebpf.map_mut(PROBE_SITES_MAP).context("PROBE_SITES map")?)?;
    for (i, site) in table.iter().enumerate() {
        sites.set(i as u32, *site, 0).context("write probe sites")?;
    }
    Ok(())
}

fn write_watch_sites(ebpf: &mut Ebpf, table: &[WatchSite]) -> Result<()> {
    let mut sites: Array<_, WatchSite> =
        Array::try_from(ebpf.map_mut(WATCH_SITES_MAP).context("WATCH_SITES map")?)?;
    for (i, site) in table.iter().enumerate() {
        sites.set(i as u32, *site, 0).context("write watch sites")?;
    }
    Ok(())
}

/// Loads and attaches the hardware-watchpoint program, if any was asked for.
fn attach_hw_watches(ebpf: &mut Ebpf, options: &RecordOptions) -> Result<()> {
    if options.hw_watches.is_empty() {
        return Ok(());
    }
    if options.hw_watches.len() > MAX_HW_WATCHES {
        bail!(
            "{} hardware watches asked for; x86 has {MAX_HW_WATCHES} debug registers",
            options.hw_watches.len()
        );
    }
    {
        let mut watches: aya::maps::HashMap<_, u64, u64> =
            aya::maps::HashMap::try_from(ebpf.map_mut("HW_WATCHES").context("HW_WATCHES map")?)?;
        for watch in &options.hw_watches {
            let value = watch.size as u64
                | if watch.atomic {
                    ordo_probe_common::HW_WATCH_ATOMIC
                } else {
                    0
                };
            watches
                .insert(watch.addr, value, 0)
                .context("write hardware watches")?;
        }
    }
    let cpus = aya::util::online_cpus().map_err(|(what, e)| anyhow!("{what}: {e}"))?;
    let prog: &mut PerfEvent = ebpf
        .program_mut("ordo_hw_watch")
        .context("ordo_hw_watch")?
        .try_into()?;
    prog.load().map_err(|e| load_error(e.into()))?;
    for HwWatch { addr, size, .. } in &options.hw_watches {
        let length = match size {
            1 => PerfBreakpointLength::Len1,
            2 => PerfBreakpointLength::Len2,
            4 => PerfBreakpointLength::Len4,
            8 => PerfBreakpointLength::Len8,
            other => {
                bail!("hardware watch of {other} bytes at {addr:#x}: the size must be 1, 2, 4 or 8")
            }
        };
        if addr % *size as u64 != 0 {
            bail!("hardware watch at {addr:#x}: the address must be aligned to its size ({size})");
        }
        // One breakpoint per CPU, for every process: it covers threads created
        // later from their first instruction; the program keeps the target's hits.
        for &cpu in &cpus {
            // Read or write: x86 debug registers have no read-only mode, and reads
            // matter to races as much as writes (the recorder tells them apart).
            let config = PerfEventConfig::Breakpoint(BreakpointConfig::Data {
                r#type: PerfBreakpointType::ReadWrite,
                address: *addr,
                length,
            });
            // A recording that just ended frees its breakpoints' debug registers
            // only when the kernel tears its BPF links down, a little later (seen:
            // ENOSPC for ~15 % of back-to-back recordings): wait for them a while.
            let deadline = Instant::now() + DEBUG_REGISTERS_WAIT;
            loop {
                match prog.attach(
                    config,
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(1),
                    false,
                ) {
                    Ok(_) => break,
                    Err(e) if is_no_space(&e) && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("set a hardware watchpoint at {addr:#x} on CPU {cpu} (all four debug registers may be in use)"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// How long arming a hardware watchpoint waits for debug registers to come free.
const DEBUG_REGISTERS_WAIT: Duration = Duration::from_secs(2);

/// Whether an error was caused by ENOSPC (no free debug register).
fn is_no_space(e: &(dyn std::error::Error + 'static)) -> bool {
    caused_by_os_error(e, libc::ENOSPC)
}

/// Whether an I/O error with the OS error `code` is in `e`'s chain of causes:
/// branch on the error's kind, never on its text.
fn caused_by_os_error(e: &(dyn std::error::Error + 'static), code: i32) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(code))
        {
            return true;
        }
        cause = c.source();
    }
    false
}

fn load_error(e: anyhow::Error) -> anyhow::Error {
    let cause: &(dyn std::error::Error + 'static) = e.as_ref();
    if caused_by_os_error(cause, libc::EPERM) || caused_by_os_error(cause, libc::EACCES) {
        anyhow!(
            "loading the eBPF programs was refused: recording needs root, or CAP_BPF and CAP_PERFMON ({e:#})"
        )
    } else {
        e.context("load the eBPF programs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused load is told by the error's kind (EPERM/EACCES anywhere in its
    /// chain of causes), whatever the wrapping error's text says.
    #[test]
    fn a_refused_load_is_told_by_its_kind_not_its_text() {
        let refused = anyhow::Error::new(std::io::Error::from_raw_os_error(libc::EPERM))
            .context("a verifier that says nothing about permissions");
        assert!(load_error(refused)
            .to_string()
            .starts_with("loading the eBPF programs was refused: recording needs root"));
        let other = anyhow::Error::new(std::io::Error::from_raw_os_error(libc::EINVAL))
            .context("Operation not permitted, says only the text");
        assert!(load_error(other)
            .to_string()
            .starts_with("load the eBPF programs"));
        let busy = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_no_space(&busy));
        assert!(!is_no_space(&std::io::Error::from_raw_os_error(
            libc::EBUSY
        )));
    }

    /// The loader skips the kernel's BTF ([`loader_without_kernel_btf`]): safe
    /// only while the probes carry no CO-RE relocation, whose record sits in the
    /// `.BTF.ext` section's `core_relo` part (header: magic, version, flags,
    /// hdr_len, then offset/length pairs for func_info, line_info and, when
    /// hdr_len reaches 32, core_relo). A probe that reads a kernel struct's field
    /// through CO-RE fails here, and the loader must then read the BTF again.
    #[test]
    fn the_probes_need_no_kernel_btf() {
        use object::{Object, ObjectSection};
        let elf = object::File::parse(PROBE_OBJECT).expect("the probes' object parses");
        let Some(section) = elf.section_by_name(".BTF.ext") else {
            return;
        };
        let ext = section.data().expect(".BTF.ext is readable");
        let word = |at: usize| u32::from_le_bytes(ext[at..at + 4].try_into().unwrap());
        assert_eq!(
            u16::from_le_bytes([ext[0], ext[1]]),
            0xeb9f,
            "BTF.ext magic"
        );
        let header_len = word(4);
        let core_relo_len = if header_len >= 32 { word(28) } else { 0 };
        assert_eq!(core_relo_len, 0, "the probes carry CO-RE relocations");
    }
}
