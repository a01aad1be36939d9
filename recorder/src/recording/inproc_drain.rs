//! The drain of a recording with the in-process source (see `crate::inproc`), in two
//! threads, so that recording costs the program as little CPU as possible:
//!
//! - **the drain** (`ordo-drain`, high priority) makes the passes: it copies the
//!   agent rings' records and the eBPF ring buffer's events, as they are, into a
//!   [`RawPass`] and hands it on — a memcpy of 32 bytes an event — so the rings never
//!   fill and the agents never wait;
//! - **the converter** (`ordo-convert`, idle priority while the program runs) takes
//!   the passes in order and does the expensive part: merging each thread's two
//!   sources by time ([`Merger`]), the per-event bookkeeping and, in the writer
//!   thread it feeds (idle priority too), encoding and compression — tens of
//!   nanoseconds of CPU an event, which a program that keeps every CPU busy would
//!   otherwise pay for. By default ([`Conversion::Auto`]) it does none of it
//!   while the program runs: the drain writes every pass to the spill file
//!   (`crate::spill`, one direct write of a reused buffer) and the converter
//!   waits for the program's end, then converts at normal priority. Converting
//!   even on a CPU the program leaves spare took from it: on the 2-vCPU VMs
//!   here the recorder took ~0.017 CPU while memcached's load ran, against
//!   ~0.29 converting on a spare CPU, and memcached served 3.3 % ± 1.6 fewer
//!   requests a run against 3.5 % ± 2.4 (20 interleaved runs, 2026-12-05; no
//!   throughput difference resolved). Without a spill file (a file system that refuses `O_TMPFILE` or
//!   `O_DIRECT`) it converts only when the machine has a CPU to spare
//!   (`spare_cpu`; [`Conversion::OnSpareCpu`]), since a backlog in memory costs
//!   a fresh page every 4 KiB; otherwise it leaves the passes in the backlog
//!   ([`Inbox`]) and what it has not done when the program ends it finishes
//!   then, at normal priority. [`Conversion::Live`] converts at normal priority
//!   throughout instead.
//!
//! The merge works on the passes exactly as they were read (pass boundaries
//! included), so the trace is the same whenever it runs. In the other modes,
//! once [`spill_after`] bytes wait in memory, the drain writes each further
//! pass's units to the spill file (`crate::spill`) and copies the next pass
//! into the same buffer, so a long
//! deferral allocates no memory; the converter reads them back in order. The
//! backlog is bounded: past [`Backlog::normal`] bytes in memory (an eighth of the
//! memory available when the recording starts, 256 MiB to 4 GiB), or
//! [`SPILL_BOUND`] times that in the spill file, the converter runs at normal
//! priority (it then takes its share of the CPU, as before), past [`Backlog::full`]
//! (twice that) in memory the drain stops copying
//! (still counting passes, so the agents wait for room rather than drop events).
//! Events not converted yet are lost if the recorder itself is SIGKILLed; what was
//! written stays readable. Nor does it defer when the trace's file system is nearly
//! full ([`LOW_SPACE`]): a write that fails there must fail, and be said, while the
//! program runs, not when it ends (`watch_free_space`).

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use aya::maps::{MapData, RingBuf};
use ordo_probe_common::RawEvent;
use ordo_trace::schema::ModuleRecord;
use ordo_trace::symbolize::modules_of_process;
use tokio::sync::{mpsc, oneshot};

use super::attach::Probes;
use super::drain::{raise_priority, KnownRanges, FLUSH_INTERVAL};
use super::spare_cpu::{SpareCpu, SPARE_WINDOW};
use super::{DrainState, RecordSummary};
use crate::inproc::{Conversion, InprocMapping, Merger, RawPass, RingReader, Spilling};
use crate::prefault::PrefaultPool;
use crate::spill::{Spill, SpillReader};

/// How long the drain sleeps between passes when no ring fills up, while passes
/// find events …
const PASS_INTERVAL: Duration = Duration::from_millis(5);
/// … and at most, after passes that found few (the interval doubles after each;
/// one pass with more resets it). A program that makes few events is then woken
/// for 50 passes a second instead of 200 — on a machine whose CPUs the program
/// keeps busy, each of the drain's wake-ups (it runs at high priority) takes one
/// from it. The agents ring the doorbell when a ring is half full whatever the
/// interval, and the eBPF ring (4 MiB, ~87 000 events) holds a burst of more than
/// four million events a second for that long.
const IDLE_PASS_INTERVAL: Duration = Duration::from_millis(20);
/// Events in a pass below which the next pass may wait longer.
const FEW_EVENTS: usize = 4096;

/// Buffers kept faulted in for the drain's copies, and the size in records the
/// first ones get (64 KiB, a new thread's ring): the pool sizes the later ones by
/// the passes the drain asks for. Starting at 4 MiB each (a busy thread's half
/// ring is 1 MiB) faulted in 16-32 MiB at every start, ~30 ms of CPU on this VM
/// that a 1-ms program's recording waited for (page faults and the unmaps at the
/// end contend with the recorder's own).
const PREFAULT_BUFFERS: usize = 8;
const PREFAULT_RECORDS: usize = (64 << 10) / std::mem::size_of::<ordo_probe_common::inproc::Unit>();

/// How much unconverted backlog the recording holds, in bytes of ring units.
///
/// The longer a busy program's burst the converter can leave for later, the less
/// of the program's CPU it takes: memcached under memcaslap makes ~3.5 M events
/// (~120 MB of 32-byte slots, before short units) a second, and with a fixed 1 GiB the converter went to normal
/// priority ~8 s into a 10-s load (6 s with 48-byte records), visibly in the
/// throughput. Memory is what bounds it, so the limits scale with the memory
/// available when the recording starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Backlog {
    /// Past this, the converter stops yielding to the program (normal priority)
    /// until the backlog is down to a quarter of it.
    normal: usize,
    /// Past this, the drain stops copying until the converter caught up (the agents
    /// wait for room meanwhile: nothing is dropped).
    full: usize,
}

impl Default for Backlog {
    /// The limits of a machine with 8 GiB available: 1 GiB and 2 GiB.
    fn default() -> Backlog {
        Backlog::for_memory(8 << 30)
    }
}

impl Backlog {
    /// An eighth of `available` bytes, 256 MiB to 4 GiB, and twice that.
    fn for_memory(available: u64) -> Backlog {
        let normal = (available / 8).clamp(256 << 20, 4 << 30) as usize;
        Backlog {
            normal,
            full: 2 * normal,
        }
    }

    /// For the memory this machine has available now (`MemAvailable`; 8 GiB
    /// assumed when /proc/meminfo does not say, giving the former 1 GiB).
    fn for_this_machine() -> Backlog {
        let available = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemAvailable:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(8 << 30, |kib| kib * 1024);
        Backlog::for_memory(available)
    }
}

/// Free space on the trace's file system below which the converter stops yielding.
const LOW_SPACE: u64 = 64 << 20;
/// How often the free space is checked.
const SPACE_CHECK: Duration = Duration::from_millis(200);

/// What the drain hands the converter.
#[allow(
    clippy::large_enum_variant,
    reason = "one message a pass, the pass itself: boxing would allocate for each"
)]
enum ToConverter {
    Pass(RawPass),
    /// The last pass was sent: finish the trace.
    Finish {
        dropped: u64,
        exit: Option<ExitStatus>,
    },
}

/// State shared by the drain and the converter.
#[derive(Default)]
struct Shared {
    /// Bytes of events copied and not converted yet (also read by
    /// `Recording::finish` for its progress bar).
    backlog: Arc<AtomicUsize>,
    /// The program ended: convert the rest at normal priority.
    finishing: AtomicBool,
    /// The trace's file system is nearly full: convert at normal priority.
    low_space: AtomicBool,
    /// The backlog's limits.
    limits: Backlog,
    /// The converter's and the writer's kernel tids (0 until known, -1 none).
    converter_tid: AtomicI32,
    writer_tid: AtomicI32,
    /// Passes and bytes the drain spilled to the spill file (`ORDO_PHASES`).
    spilled_passes: AtomicUsize,
    spilled_bytes: AtomicUsize,
    /// The part of `backlog` that lies in the spill file, not in memory.
    spilled_unconverted: AtomicUsize,
    /// What [`Conversion::Auto`] came to: [`Conversion::AtEnd`] with a spill
    /// file, else [`Conversion::OnSpareCpu`] (any other mode as asked).
    conversion: Conversion,
    /// The drain spills every pass while the program runs: the converter waits
    /// for its end ([`Conversion::Auto`] with a spill file).
    spill_while_deferring: bool,
}

impl Shared {
    /// Unconverted bytes held in memory: what the backlog's bounds limit.
    fn in_memory(&self) -> usize {
        let all = self.backlog.load(Ordering::Relaxed);
        all.saturating_sub(self.spilled_unconverted.load(Ordering::Relaxed))
    }
}

/// Unconverted bytes in memory past which the drain spills its passes
/// ([`Spilling::WhileBehind`]): half the backlog's bound in memory
/// ([`Backlog::normal`]), so the spill file takes over before the converter
/// would have to run at normal priority, and not before: on the 2-vCPU VMs
/// here the spill's disk writes cost the machine more than the memory does. In
/// 10 interleaved pairs of 8-s windows of memcached's load (AMD EPYC VM,
/// 2026-12-02), spilling every pass past 16 MiB (the former rule) took
/// 0.011–0.016 CPU in the drain and 0.041–0.085 CPU of the hypervisor's steal,
/// which a process's own CPU time does not show (native: 0.001–0.006); keeping
/// the passes in memory took 0.024–0.032 in the drain, 0.005–0.012 prefaulting
/// and 0.002–0.005 of steal, and served more in every pair.
fn spill_after(limits: &Backlog) -> usize {
    limits.normal / 2
}

/// How long the drain sleeps between passes while the converter is behind
/// ([`BEHIND`]) or it spills: each wake-up takes a CPU from the program, and a
/// spilled pass is one write, cheaper a page in larger pieces (0.7 µs against
/// 1.6 µs of the writer's CPU a page in 1 MiB and 128 KiB pieces). A ring holds
/// a busy thread's ~100 ms (2 MiB), and its doorbell wakes the drain at half
/// full whatever the interval. With the backlog in memory, 50-ms passes took the
/// drain 0.014–0.019 CPU under memcached's load against 0.022–0.040 with 5-ms
/// ones (4 interleaved 8-s windows each).
const BEHIND_PASS_INTERVAL: Duration = Duration::from_millis(50);

/// Unconverted bytes in memory past which the converter counts as behind (it
/// defers while the program keeps every CPU busy), and the drain passes every
/// [`BEHIND_PASS_INTERVAL`].
const BEHIND: usize = 16 << 20;

/// Whether `free` bytes on the trace's file system may not hold what is still to be
/// written: [`LOW_SPACE`] plus half the `backlog` of unconverted ring units (a
/// trace takes ~5–6 bytes an event, a busy program's event one 16-byte unit: half
/// leaves a margin for events that compress badly).
fn space_is_low(free: u64, backlog: u64) -> bool {
    free < LOW_SPACE + backlog / 2
}

/// Checks the free space on `output`'s file system every [`SPACE_CHECK`] until
/// `stop` ends; when it is low for what is left to write ([`space_is_low`]) it
/// moves the converter and the writer to normal priority at once (they may be
/// starved at idle priority and would not notice), so a write that fails fails
/// while the program runs.
fn watch_free_space(output: &std::path::Path, shared: &Shared, stop: &Receiver<()>) {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let Ok(dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return;
    };
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(SPACE_CHECK) {
        // SAFETY: statvfs fills the zeroed struct; the path is NUL-terminated.
        let free = unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            (libc::statvfs(dir.as_ptr(), &mut st) == 0).then(|| st.f_bavail * st.f_frsize)
        };
        let backlog = shared.backlog.load(Ordering::Relaxed) as u64;
        if free.is_some_and(|free| space_is_low(free, backlog))
            && !shared.low_space.swap(true, Ordering::Relaxed)
        {
            // 0: the converter has not started; it checks `low_space` when it does.
            for tid in [&shared.converter_tid, &shared.writer_tid] {
                let tid = tid.load(Ordering::Relaxed);
                if tid > 0 {
                    set_idle(tid, false);
                }
            }
            return;
        }
    }
}

/// Sets a thread's policy: SCHED_IDLE (runs only on a CPU nothing else wants) or
/// SCHED_OTHER. `tid` 0 is the calling thread, negative none.
fn set_idle(tid: i32, idle: bool) {
    if tid < 0 {
        return;
    }
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: changes one thread's scheduling policy only.
    unsafe { libc::sched_setscheduler(tid, policy, &param) };
}

/// The program's modules as the drain knows them: every site of an event is checked
/// against them while the program is still there to read (the converter may run
/// long after a library was unloaded or the program exited).
struct ModuleWatch {
    pid: u32,
    known: KnownRanges,
    any: bool,
    last_scan: Option<Instant>,
}

impl ModuleWatch {
    fn add(&mut self, snapshot: &[ModuleRecord], pass: &mut RawPass) {
        if snapshot.is_empty() {
            return;
        }
        self.known.extend(snapshot);
        self.any = true;
        pass.modules.push(snapshot.to_vec());
    }

    /// Reads the program's modules (rate-limited, unless `now`) into the pass.
    fn scan(&mut self, pass: &mut RawPass, now: bool) {
        if !now
            && self
                .last_scan
                .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.last_scan = Some(Instant::now());
        let snapshot = modules_of_process(self.pid);
        self.add(&snapshot, pass);
    }

    /// Scans again if a site of the pass lies in no known module (a library loaded
    /// since).
    fn check(&mut self, pass: &mut RawPass) {
        let unknown = pass.has_site_outside(&mut |site| self.known.contains(site));
        // Nothing known yet and the pass has events: the first scan.
        let first = !(self.any || (pass.records.is_empty() && pass.kernel.is_empty()));
        if unknown || first {
            self.scan(pass, false);
        }
    }
}

/// What the drain reads in a pass, and what it knows about it.
struct Sources {
    reader: RingReader,
    modules: ModuleWatch,
    /// The eBPF ring buffer.
    ring: RingBuf<MapData>,
}

/// The drain of a recording with the in-process source: passes over the agent
/// rings and the eBPF ring until told to stop, then the rest; the converter turns
/// them into the trace.
pub(super) fn drain(
    mut probes: Probes,
    ring: RingBuf<MapData>,
    state: DrainState,
    mut stop: oneshot::Receiver<Option<ExitStatus>>,
    mut snapshots: mpsc::UnboundedReceiver<Vec<ModuleRecord>>,
    mapping: Arc<InprocMapping>,
    backlog: Arc<AtomicUsize>,
) -> Result<RecordSummary> {
    raise_priority();
    let pid = state.pid;
    let (to_converter, passes) = channel();
    let (give_back, spare) = channel();
    let output = state.output.clone();
    let spill_when = mapping.spilling();
    let mut spill = match spill_when {
        Spilling::Never => None,
        _ => match Spill::create_in(output.parent().unwrap_or(std::path::Path::new("."))) {
            Ok(spill) => Some(spill),
            Err(e) => {
                crate::phase(&format!(
                    "spill: no spill file beside the trace ({e}): memory only"
                ));
                None
            }
        },
    };
    let spill_reader = match spill.as_ref().map(Spill::reader).transpose() {
        Ok(reader) => reader,
        Err(e) => {
            crate::phase(&format!(
                "spill: no second handle on the spill file ({e}): memory only"
            ));
            spill = None;
            None
        }
    };
    // The default defers all conversion past the program's end only when the
    // passes can wait in the spill file: in memory each 4 KiB of them costs a
    // fresh page (see `crate::spill`).
    let deferring = mapping.conversion() == Conversion::Auto && spill.is_some();
    let shared = Arc::new(Shared {
        backlog,
        limits: Backlog::for_this_machine(),
        conversion: match mapping.conversion() {
            Conversion::Auto if deferring => Conversion::AtEnd,
            Conversion::Auto => Conversion::OnSpareCpu,
            asked => asked,
        },
        spill_while_deferring: deferring,
        ..Shared::default()
    });
    crate::phase(&format!(
        "conversion: {}",
        match shared.conversion {
            Conversion::AtEnd if deferring => "at the program's end, every pass spilled",
            Conversion::AtEnd => "at the program's end",
            Conversion::OnSpareCpu | Conversion::Auto => "on a spare CPU",
            Conversion::Alongside => "alongside, at idle priority",
            Conversion::Live => "live, at normal priority",
        }
    ));
    let converter = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("ordo-convert".into())
            .spawn({
                let mapping = mapping.clone();
                move || convert(state, passes, give_back, &shared, &mapping, spill_reader)
            })?
    };
    let (stop_space_watch, space_watch_stop) = channel::<()>();
    let space_watch = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("ordo-space".into())
            .spawn(move || watch_free_space(&output, &shared, &space_watch_stop))?
    };
    let mut sources = Sources {
        reader: RingReader::with_pool(
            PrefaultPool::start(PREFAULT_BUFFERS, PREFAULT_RECORDS, || set_idle(0, true)).ok(),
        ),
        modules: ModuleWatch {
            pid,
            known: KnownRanges::default(),
            any: false,
            last_scan: None,
        },
        ring,
    };
    // Buffers the converter gave back come first (their pages are in already).
    let next_pass = |spare: &Receiver<RawPass>| {
        let mut p = spare.try_recv().unwrap_or_default();
        p.clear();
        p
    };
    let mut pass = next_pass(&spare);
    let mut run_pass =
        |pass: &mut RawPass, sources: &mut Sources, probes: &Probes, all: bool| -> Result<usize> {
            let Sources {
                reader,
                modules,
                ring,
            } = sources;
            reader.copy_rings(&mapping, pass);
            if all {
                reader.pending_blocked(&mapping, pass);
            }
            while let Some(item) = ring.next() {
                if item.len() < std::mem::size_of::<RawEvent>() {
                    continue;
                }
                // SAFETY: the probes write whole RawEvent records; read_unaligned copes
                // with the ring buffer's 8-byte record alignment.
                let raw: RawEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                reader.kernel_event(pass, raw);
            }
            modules.check(pass);
            pass.dropped = probes.drops() + mapping.dropped();
            pass.all = all;
            let spilled = match &mut spill {
                Some(file) if !pass.records.is_empty() && spilling(spill_when, &shared) => {
                    match file.write(&pass.records) {
                        Ok(extent) => Some(extent),
                        Err(e) => {
                            // Nothing was appended: this pass and the later ones
                            // stay in memory.
                            crate::phase(&format!("spill: write failed ({e}): memory only"));
                            spill = None;
                            None
                        }
                    }
                }
                _ => None,
            };
            let mut sent = std::mem::replace(pass, next_pass(&spare));
            let events = sent.records.len() + sent.kernel.len();
            let mut spilled_bytes = 0;
            if let Some(extent) = spilled {
                sent.spilled = Some(extent);
                spilled_bytes = extent.bytes();
                shared.spilled_passes.fetch_add(1, Ordering::Relaxed);
                shared
                    .spilled_bytes
                    .fetch_add(spilled_bytes, Ordering::Relaxed);
                // The drain copies the next pass into the same buffer: its pages
                // are in, and nothing else holds them.
                let mut kept = std::mem::take(&mut sent.records);
                kept.clear();
                if kept.capacity() > pass.records.capacity() {
                    pass.records = kept;
                }
            }
            // The spilled part first, so `in_memory` never counts it as memory.
            shared
                .spilled_unconverted
                .fetch_add(spilled_bytes, Ordering::Relaxed);
            shared
                .backlog
                .fetch_add(sent.bytes() + spilled_bytes, Ordering::Relaxed);
            to_converter
                .send(ToConverter::Pass(sent))
                .map_err(|_| anyhow!("the trace converter stopped"))?;
            Ok(events)
        };
    let mut modules_read = false;
    let mut interval = PASS_INTERVAL;
    let mut waking_each = true;
    let mut doorbell = mapping.doorbell();
    let exit = loop {
        while let Ok(snapshot) = snapshots.try_recv() {
            sources.modules.add(&snapshot, &mut pass);
        }
        if waking_each && sources.modules.any {
            // The eBPF side need not wake anyone per record: this drain polls.
            probes.stop_waking_each();
            waking_each = false;
        }
        // The program's modules are read as soon as the agent started in it (all its
        // start-up libraries are mapped then; the agent waits for this), as the eBPF
        // path reads them at the first event: by the time the events are converted a
        // short program may be gone, or its binary replaced on disk.
        if !modules_read && mapping.attached() {
            sources.modules.scan(&mut pass, true);
            modules_read = true;
            mapping.modules_read();
        }
        match stop.try_recv() {
            Ok(exit) => break exit,
            Err(oneshot::error::TryRecvError::Closed) => break None,
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if mapping.doorbell() == doorbell {
            mapping.wait_doorbell(doorbell, interval);
        }
        doorbell = mapping.doorbell();
        if shared.in_memory() > shared.limits.full {
            // Copying more would only grow the backlog: let the rings hold the
            // events (a full ring waits while passes are counted).
            mapping.count_idle_pass();
            continue;
        }
        let spilled_before = shared.spilled_passes.load(Ordering::Relaxed);
        let events = run_pass(&mut pass, &mut sources, &probes, false)?;
        interval = if events < FEW_EVENTS {
            (interval * 2).min(IDLE_PASS_INTERVAL)
        } else if shared.spilled_passes.load(Ordering::Relaxed) > spilled_before
            || shared.in_memory() >= BEHIND
        {
            BEHIND_PASS_INTERVAL
        } else {
            PASS_INTERVAL
        };
    };
    crate::phase("drain: stop seen");
    shared.finishing.store(true, Ordering::Relaxed);
    drop(stop_space_watch);
    let _ = space_watch.join();
    while let Ok(snapshot) = snapshots.try_recv() {
        sources.modules.add(&snapshot, &mut pass);
    }
    // A live target stops paying for the programs' work now, before the detach.
    probes.disable();
    // Everything published or committed belongs to the run: one more ordinary pass
    // (so the last eBPF events meet the agent events before them), then the rest.
    for all in [false, true] {
        run_pass(&mut pass, &mut sources, &probes, all)?;
    }
    let dropped = probes.drops() + mapping.dropped();
    crate::phase("drain: last passes");
    let _ = to_converter.send(ToConverter::Finish { dropped, exit });
    drop(sources);
    // The detach hands the probes to a forked process, and a fork copies the page
    // tables of what this process holds: while that is little (a short run), the
    // fork overlaps the converter's end (naming, the footer, its fsync: ~2 ms);
    // after a large backlog it waits until the backlog is freed and given back.
    let early = resident_bytes().is_some_and(|b| b <= EARLY_HANDOFF_RESIDENT);
    let mut handoff = early.then(super::detach::hand_off).flatten();
    if early {
        crate::phase("drain: forked early");
    }
    let mut summary = converter
        .join()
        .map_err(|_| anyhow!("the trace converter panicked"))?;
    crate::phase("drain: converter joined");
    drop(pass);
    drop(spare);
    // SAFETY: malloc_trim only returns free memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    let kernel_notes = probes.notes(true, mapping.forks());
    crate::phase("drain: trimmed");
    if !early {
        handoff = super::detach::hand_off();
        crate::phase("drain: forked");
    }
    drop(probes);
    drop(handoff);
    crate::phase("drain: probes dropped");
    if let Ok(summary) = &mut summary {
        summary.notes.extend(notes(&mapping));
        summary.notes.extend(kernel_notes);
    }
    summary
}

/// Most resident memory at which the detach is handed off before the trace is
/// finished (a fork's copy of the page tables of 64 MiB is well under the ~2 ms
/// the converter's end takes).
const EARLY_HANDOFF_RESIDENT: u64 = 64 << 20;

/// This process's resident memory, from `/proc/self/statm`.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Whether the drain spills the pass it has just copied: always or never as
/// asked, else while the converter waits for the program's end (the default
/// with a spill file) or is [`spill_after`] behind, and the program runs — not
/// when the trace's file system runs out of room (the spill file takes from it
/// until converted) nor at the end (the converter is busy then).
fn spilling(when: Spilling, shared: &Shared) -> bool {
    match when {
        Spilling::Always => true,
        Spilling::Never => false,
        Spilling::WhileBehind => {
            (shared.spill_while_deferring || shared.in_memory() >= spill_after(&shared.limits))
                && !shared.low_space.load(Ordering::Relaxed)
                && !shared.finishing.load(Ordering::Relaxed)
        }
    }
}

/// The converter's body: merges and takes the passes in order, at idle priority
/// while the program runs (see the module doc), and finishes the trace. Passes
/// the drain spilled are read back from `spill` (into one buffer kept for it).
fn convert(
    mut state: DrainState,
    passes: Receiver<ToConverter>,
    give_back: Sender<RawPass>,
    shared: &Shared,
    mapping: &InprocMapping,
    spill: Option<SpillReader>,
) -> Result<RecordSummary> {
    // -1: no writer thread (it stopped), nothing to change.
    let writer = match state.writer_tid() {
        0 => -1,
        tid => tid,
    };
    // `live`: normal priority throughout, never idle.
    let live = shared.conversion == Conversion::Live;
    let mut idle = !live;
    set_idle(0, idle);
    set_idle(writer, idle);
    // SAFETY: gettid has no preconditions.
    shared
        .converter_tid
        .store(unsafe { libc::gettid() }, Ordering::Relaxed);
    shared.writer_tid.store(writer, Ordering::Relaxed);
    if shared.low_space.load(Ordering::Relaxed) {
        idle = false;
        set_idle(0, false);
        set_idle(writer, false);
    }
    let mut merger = Merger::for_mapping(mapping);
    merger.created.insert(state.pid);
    let mut last_flush = Instant::now();
    let mut dropped = 0;
    let mut failed = None;
    let mut inbox = Inbox::new(passes, shared.conversion, mapping, writer);
    // Spilled passes are read back into this buffer, one after the other.
    let mut read_back = crate::prefault::PassBuf::default();
    loop {
        let want_idle = !live && !must_convert(shared, idle);
        if want_idle != idle {
            idle = want_idle;
            set_idle(0, idle);
            set_idle(writer, idle);
            if idle {
                inbox.restart_spare();
            }
        }
        // Not idle: the program ended, the space runs out or the backlog is past
        // its bound.
        let Some(message) = inbox.next(|| !idle || must_convert(shared, idle)) else {
            break;
        };
        let mut pass = match message {
            ToConverter::Pass(pass) => pass,
            ToConverter::Finish {
                dropped: total,
                exit,
            } => {
                if let Some(e) = failed {
                    return Err(e);
                }
                crate::phase(&format!(
                    "ring units: {} events in {} units of 16 bytes, {} read from the rings",
                    merger.events_read, merger.units_read, merger.ring_units_read
                ));
                crate::phase(&format!(
                    "conversion: deferred {} times while the program ran, {} passes held at most",
                    inbox.deferrals, inbox.most_held
                ));
                crate::phase(&format!(
                    "spill: {} passes, {} bytes",
                    shared.spilled_passes.load(Ordering::Relaxed),
                    shared.spilled_bytes.load(Ordering::Relaxed)
                ));
                return state.finish(total, exit);
            }
        };
        let from_spill = pass.spilled.take();
        let spilled_bytes = from_spill.map_or(0, |e| e.bytes());
        shared
            .backlog
            .fetch_sub(pass.bytes() + spilled_bytes, Ordering::Relaxed);
        shared
            .spilled_unconverted
            .fetch_sub(spilled_bytes, Ordering::Relaxed);
        if let Some(extent) = from_spill {
            std::mem::swap(&mut pass.records, &mut read_back);
            let read = match &spill {
                Some(file) => file.read(extent, &mut pass.records),
                None => Err(std::io::Error::other("no handle on the spill file")),
            };
            if let Err(e) = read {
                // Its events cannot reach the trace: the recording fails, saying so.
                failed.get_or_insert(anyhow!(
                    "reading back {} bytes of events from the spill file: {e}",
                    extent.bytes()
                ));
            }
        }
        if failed.is_some() {
            // Keep receiving (the drain must not block on us) until Finish.
            continue;
        }
        if state.write_failed() {
            // Nothing more reaches the trace: count the records instead of
            // converting them (at normal priority, with the space running out).
            state.skip(pass.agent_events() + pass.kernel.len() as u64);
            if from_spill.is_some() {
                std::mem::swap(&mut pass.records, &mut read_back);
            }
            let _ = give_back.send(pass);
            continue;
        }
        for snapshot in &pass.modules {
            state.add_modules(snapshot.clone());
        }
        dropped = dropped.max(pass.dropped);
        let mut result = Ok(());
        merger.take_pass(&pass, &mut |e| {
            state.take(e);
            if result.is_ok() && state.chunk_full() {
                result = state.flush(dropped, false);
            }
        });
        if result.is_ok() && last_flush.elapsed() >= FLUSH_INTERVAL {
            result = state.flush(dropped, false);
            last_flush = Instant::now();
        }
        if let Err(e) = result {
            failed = Some(e);
        }
        if from_spill.is_some() {
            std::mem::swap(&mut pass.records, &mut read_back);
        }
        let _ = give_back.send(pass);
        mapping.prefault_ahead();
    }
    match failed {
        Some(e) => Err(e),
        None => Err(anyhow!("the drain stopped without finishing the trace")),
    }
}

/// Whether the converter must convert now, at normal priority: the program ended,
/// the trace's file system runs out of space, or the backlog is past its bound
/// (`Backlog::normal` in memory, [`SPILL_BOUND`] times that in the spill file,
/// while the converter is `idle`; once it is not, until the backlog is down to a
/// quarter of that, so it does not flap).
fn must_convert(shared: &Shared, idle: bool) -> bool {
    let bound = if idle {
        shared.limits.normal
    } else {
        shared.limits.normal / 4
    };
    shared.finishing.load(Ordering::Relaxed)
        || shared.low_space.load(Ordering::Relaxed)
        || shared.in_memory() >= bound
        || shared.spilled_unconverted.load(Ordering::Relaxed) >= SPILL_BOUND * bound
}

/// The spill file's bound as a multiple of the memory's (`Backlog::normal`):
/// disk is cheaper than memory, but a recording of hours on a machine that never
/// has a CPU to spare must not fill it (the free-space watch is the last resort).
const SPILL_BOUND: usize = 4;

/// Hands the converter the drain's messages in order, deferring passes while the
/// program runs and no CPU is spare ([`Conversion::OnSpareCpu`], see
/// `spare_cpu`): a deferred pass waits in the backlog, whose bound (`Backlog`)
/// makes the converter urgent.
struct Inbox<'a> {
    passes: Receiver<ToConverter>,
    /// Messages received and not handed out yet, oldest first.
    held: VecDeque<ToConverter>,
    /// `None`: [`Conversion::Alongside`], nothing deferred.
    spare: Option<SpareCpu>,
    /// [`Conversion::AtEnd`]: no CPU counts as spare.
    at_end: bool,
    /// The converter's and the writer's tids (their time is spare time).
    own: [i32; 2],
    mapping: &'a InprocMapping,
    closed: bool,
    /// Waits with passes held back, and the most passes held at once (for
    /// `ORDO_PHASES`).
    deferrals: u64,
    most_held: usize,
}

impl<'a> Inbox<'a> {
    /// For the calling thread (the converter) feeding the thread `writer`,
    /// deferring as `conversion` (resolved: not [`Conversion::Auto`]) says.
    fn new(
        passes: Receiver<ToConverter>,
        conversion: Conversion,
        mapping: &'a InprocMapping,
        writer: i32,
    ) -> Inbox<'a> {
        // SAFETY: gettid has no preconditions.
        let own = [unsafe { libc::gettid() }, writer];
        Inbox {
            passes,
            held: VecDeque::new(),
            spare: (conversion == Conversion::OnSpareCpu).then(|| SpareCpu::start(&own)),
            at_end: conversion == Conversion::AtEnd,
            own,
            mapping,
            closed: false,
            deferrals: 0,
            most_held: 0,
        }
    }

    /// Measures spare time afresh (after the converter ran at normal priority).
    fn restart_spare(&mut self) {
        if let Some(spare) = &mut self.spare {
            spare.restart(&self.own);
        }
    }

    /// The next message to convert, once it may be converted: at once when
    /// `urgent()` says so ([`must_convert`]), when the program's end is in sight
    /// (`Finish` arrived) or a CPU is spare. `urgent` is asked again after every
    /// wait: the space can run low or the backlog pass its bound while passes are
    /// deferred (the program filling every CPU is what defers them). `None` once
    /// the drain is gone and everything was handed out.
    fn next(&mut self, urgent: impl Fn() -> bool) -> Option<ToConverter> {
        loop {
            while let Ok(message) = self.passes.try_recv() {
                self.held.push_back(message);
            }
            let end_in_sight = matches!(self.held.back(), Some(ToConverter::Finish { .. }));
            if self.at_end || self.spare.is_some() {
                // Counted on receipt, not only while waiting: a converter the busy
                // program starved (it waits at low priority) finds every pass at
                // once when the program ends, and those were held as well.
                let passes = self.held.len() - usize::from(end_in_sight);
                self.most_held = self.most_held.max(passes);
            }
            let now = urgent()
                || self.closed
                || end_in_sight
                || (!self.at_end && self.spare.as_mut().is_none_or(|s| s.spare(&self.own)));
            if now {
                if let Some(message) = self.held.pop_front() {
                    return Some(message);
                }
                if self.closed {
                    return None;
                }
                match self.passes.recv() {
                    Ok(message) => return Some(message),
                    Err(_) => return None,
                }
            }
            // Deferred: wake for the next message (a `Finish` must not wait) or
            // the next measurement, keeping the next rings' pages ready meanwhile.
            if !self.held.is_empty() {
                self.deferrals += 1;
            }
            match self.passes.recv_timeout(SPARE_WINDOW) {
                Ok(message) => self.held.push_back(message),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.closed = true,
            }
            self.mapping.prefault_ahead();
        }
    }
}

/// What the in-process path did not see, in words.
fn notes(mapping: &InprocMapping) -> Vec<String> {
    let mut notes = Vec::new();
    if !mapping.attached() {
        notes.push("the in-process agent never started in the program: its pthread calls were not recorded (run with --probes ebpf)".to_string());
    }
    let waited_out = mapping.modules_waited_out();
    if waited_out > 0 {
        notes.push(format!("warning: the program went on after waiting {waited_out} ms for the recorder to read its modules: its code and data may be unsymbolized"));
    }
    let unsequenced = mapping.unsequenced();
    if unsequenced > 0 {
        notes.push(format!("{unsequenced} events found the sequence table full: their order on their object is only as exact as their timestamps"));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_limits_scale_with_the_memory_available() {
        let gib = 1u64 << 30;
        assert_eq!(
            Backlog::for_memory(8 * gib),
            Backlog {
                normal: 1 << 30,
                full: 2 << 30
            }
        );
        assert_eq!(
            Backlog::for_memory(22 * gib).normal,
            (22 * gib / 8) as usize
        );
        assert_eq!(Backlog::for_memory(gib).normal, 256 << 20);
        assert_eq!(Backlog::for_memory(1024 * gib).normal, 4 << 30);
        let here = Backlog::for_this_machine();
        assert!(here.normal >= 256 << 20 && here.full == 2 * here.normal);
    }

    #[test]
    fn space_is_low_when_the_backlog_may_not_fit() {
        assert!(space_is_low(LOW_SPACE - 1, 0));
        assert!(!space_is_low(LOW_SPACE, 0));
        // 100 MiB free: enough for a small backlog, not for 1 GiB of records.
        assert!(!space_is_low(100 << 20, 64 << 20));
        // 120 MiB of units hold ~7.5 M events, ~40 MiB of trace: too close to the
        // 64-MiB reserve with 100 MiB free.
        assert!(space_is_low(100 << 20, 120 << 20));
        assert!(space_is_low(100 << 20, 1 << 30));
    }
}
