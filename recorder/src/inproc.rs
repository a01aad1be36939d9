//! The in-process source: the mapping the preloaded agent records into, the drain
//! that empties its per-thread rings, and the merge of those events with the eBPF
//! ring buffer's into one stream per thread in program order.
//!
//! **The mapping** (layout in `ordo_probe_common::inproc`) is a memfd this process
//! creates, sizes and maps before the program starts; the program inherits the
//! descriptor (close-on-exec is cleared in the forked child only) and finds its
//! number in `ORDO_RECORD_FD`. Because the recorder owns it, what a crashing or
//! SIGKILLed program published stays readable here.
//!
//! **The merge.** eBPF still records what only the kernel sees in this mode — thread
//! start (clone returning in the child), exit, the clone in the parent (which
//! carries the child's tid), and watches — so one thread's events come from two
//! sources, each in program order. `OrderMerger` needs each thread's events in
//! program order, so they are interleaved by timestamp (both CLOCK_MONOTONIC) before
//! anything is written. A drain *pass* reads the agent rings first, then the eBPF
//! ring. An event of thread T read in pass k−1 or earlier is released, together with
//! everything of T no later than it, at the end of pass k:
//! - an eBPF event of T read in pass k−1 was committed by T after every agent event
//!   of T with a smaller timestamp was published, so pass k's ring read (which comes
//!   after pass k−1's eBPF read) has them;
//! - an agent event of T read in pass k−1 was published after every eBPF event of T
//!   with a smaller timestamp was committed, so pass k−1's eBPF read, which came
//!   after it, has them — unless another CPU's reserved-but-uncommitted record hid
//!   them for the length of a whole pass (milliseconds), which a BPF program cannot
//!   take without being preempted for that long.
//!
//! **Thread creation** must carry the child's tid (from the kernel's clone, in the
//! parent) and the pthread_t handle (from the agent, after pthread_create returns)
//! exactly once. In T's merged stream the clone's THREAD_CREATE comes right before
//! the agent's (nothing T records happens between the clone returning and
//! pthread_create returning), so the two are folded into one event: the agent's,
//! with the child's tid. A clone no pthread_create wrapper saw (glibc-internal
//! threads) stays as the kernel reported it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Result};
use ordo_probe_common::inproc::{
    decode, encode, fold_pair_parts, mapping_size, ring_header_offset, ring_records_offset,
    seq_table_offset, DecodeState, Event, Header, RingHeader, SiteScan, Unit, CLOCK_MONOTONIC_NS,
    CLOCK_SPARSE, CLOCK_TSC, ENV_FD, MAGIC, MAX_RINGS, RING_FREE, RING_START_UNITS, RING_UNITS,
    VERSION,
};
use ordo_probe_common::{kind, RawEvent};

use crate::prefault::{PassBuf, PrefaultPool, StreamOut};

/// The shared mapping, owned by the recorder.
pub struct InprocMapping {
    fd: OwnedFd,
    base: *mut u8,
    /// Rings whose start is allocated already.
    prefaulted: std::sync::atomic::AtomicUsize,
    /// Per ring: whether all its pages are allocated (its thread got busy).
    whole: Vec<std::sync::atomic::AtomicBool>,
    /// With TSC time stamps: the calibration point taken before the program
    /// started (the first segment's start).
    tsc_start: Option<ClockPoint>,
    /// When the converter works while the program runs.
    conversion: Conversion,
    /// When the drain spills passes to a file.
    spilling: Spilling,
    /// The drain folds lock/release pairs as it copies ([`ENV_RING_UNITS`]).
    fold: bool,
}

// SAFETY: the mapping is shared memory accessed through atomics (headers) and plain
// reads of records published with release stores; the pointer is never freed while
// the value lives.
unsafe impl Send for InprocMapping {}
// SAFETY: as above.
unsafe impl Sync for InprocMapping {}

impl std::fmt::Debug for InprocMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InprocMapping(fd {})", self.fd.as_raw_fd())
    }
}

/// What the drain learns from a ring's units as it copies them
/// ([`RingCopy::copy`]): the call sites carried in full, in order (`sites`),
/// and, when `folds`, each lock taken and released at once as one folded pair
/// ([`ordo_probe_common::inproc::fold_pair`]).
struct RingCopy<'a> {
    scan: SiteScan,
    sites: &'a mut Vec<u64>,
    folds: bool,
}

/// Units ahead of the copy whose line [`RingCopy::copy`] fetches: a ring's
/// lines were last written on the producer's CPU, and fetching 8 lines (of
/// 16-byte units) ahead overlaps their transfers — in a hot loop of recorded
/// pairs the drain took ~13 % less time an event (by hand, 2026-12-07). Never
/// past the slice: the line at the ring's head may be the one its producer is
/// writing, and fetching it would take it away from that CPU.
const PREFETCH_AHEAD: usize = 32;

impl RingCopy<'_> {
    /// Copies `units`, a run of a ring's published units that goes on from
    /// the last run copied, into `out` (one unit for each, or one for each
    /// folded pair), noting the call sites carried in full.
    ///
    /// One loop over locals: the scan's state and the output's position stay
    /// in registers (with the buffer's length behind a pointer, the length was
    /// incremented in memory for every unit), and
    /// a short unit that starts an event (97 % of memcached's) is tried
    /// against the next with one test of the whole fold ([`fold_pair_parts`]).
    /// In a hot loop of recorded pairs the drain took 6.4–7.5 ns an event
    /// against 6.9–9.4 before (medians 6.7 and 9.1; 5 interleaved runs each,
    /// 2026-12-07); under memcached's load, unchanged within noise (its cost
    /// there is the memory traffic: docs/ARCHITECTURE.md §2b).
    fn copy(&mut self, units: &[Unit], out: &mut StreamOut<Unit>) {
        if self.folds {
            self.copy_folding::<true>(units, out)
        } else {
            self.copy_folding::<false>(units, out)
        }
    }

    /// [`RingCopy::copy`], folding pairs if `FOLDS`: a loop of its own for each
    /// choice, out of line and with the room in a local, so that its state and
    /// the output's position have the registers to themselves.
    #[inline(never)]
    fn copy_folding<const FOLDS: bool>(&mut self, units: &[Unit], room: &mut StreamOut<Unit>) {
        // Each unit is stored once or folded into the one before: at most one
        // record a unit.
        assert!(
            units.len() <= room.room_left(),
            "a ring's units past the pass's room"
        );
        let mut out = std::mem::take(room);
        let mut scan = self.scan;
        let n = units.len();
        let mut i = 0;
        while i < n {
            #[cfg(target_arch = "x86_64")]
            if let Some(ahead) = units.get(i + PREFETCH_AHEAD) {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                // SAFETY: a prefetch of a unit in the slice.
                unsafe { _mm_prefetch::<_MM_HINT_T0>((ahead as *const Unit).cast()) };
            }
            let unit = units[i];
            if scan.at_event_start() && unit.is_short() {
                // A later unit of a longer event can look like a short one: only
                // a unit that starts an event may start a pair. The run's last
                // unit pairs with none.
                let next = units.get(i + 1).copied().unwrap_or(NOT_SHORT);
                let (pair, fits) = fold_pair_parts(&unit, &next);
                let fold = fits & FOLDS;
                // SAFETY: one record for this unit, or for it and the next
                // (checked above).
                unsafe { out.push_unchecked(if fold { pair } else { unit }) };
                i += 1 + fold as usize;
                continue;
            }
            if let Some(site) = scan.see(&unit) {
                self.note_site(site);
            }
            // SAFETY: one record for this unit (checked above).
            unsafe { out.push_unchecked(unit) };
            i += 1;
        }
        self.scan = scan;
        *room = out;
    }

    /// Notes a call site carried in full, once for each run of events at it.
    #[inline(never)]
    fn note_site(&mut self, site: u64) {
        if self.sites.last() != Some(&site) {
            self.sites.push(site);
        }
    }
}

/// A unit no fold takes for a release: what the last unit of a run is paired
/// with.
const NOT_SHORT: Unit = Unit { a: 0, b: 0 };

impl InprocMapping {
    /// A zeroed, sparse mapping with its header filled in. The descriptor is
    /// close-on-exec here; [`crate::launch`] clears that in the forked child only.
    /// `tsc_allowed`: the agent may stamp records with the TSC (used when the
    /// kernel's clocksource is the TSC); `sparse`: it reads the clock sparsely
    /// ([`CLOCK_SPARSE`]).
    pub fn create(tsc_allowed: bool, sparse: bool) -> Result<InprocMapping> {
        // SAFETY: a plain syscall; the result is checked.
        let fd = unsafe { libc::memfd_create(c"ordo-record".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            bail!(
                "memfd_create for the in-process recording: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a descriptor just created, owned by nobody else.
        Self::over(unsafe { OwnedFd::from_raw_fd(fd) }, tsc_allowed, sparse)
    }

    /// As [`InprocMapping::create`], over an empty memfd made elsewhere (in a
    /// process being attached to, which keeps its own descriptor of it).
    pub fn over(fd: OwnedFd, tsc_allowed: bool, sparse: bool) -> Result<InprocMapping> {
        let ring_units = ring_units_wanted()?;
        let conversion = conversion_wanted()?;
        let spilling = spilling_wanted()?;
        let size = mapping_size();
        // SAFETY: plain syscalls on values we own; results are checked.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
                bail!(
                    "size the in-process recording's mapping ({size} bytes): {}",
                    std::io::Error::last_os_error()
                );
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                bail!(
                    "map the in-process recording's mapping: {}",
                    std::io::Error::last_os_error()
                );
            }
            let header = p as *mut Header;
            (*header).magic = MAGIC;
            (*header).version = VERSION;
            let tsc = tsc_allowed && tsc_is_the_kernel_clock();
            (*header).clock = if tsc { CLOCK_TSC } else { CLOCK_MONOTONIC_NS }
                | if sparse { CLOCK_SPARSE } else { 0 };
            (*header).recorder_pid = std::process::id();
            (*header).short_units = (ring_units != RingUnits::Wide) as u32;
            let mapping = InprocMapping {
                fd,
                base: p.cast(),
                prefaulted: 0.into(),
                whole: (0..MAX_RINGS).map(|_| false.into()).collect(),
                tsc_start: tsc.then(ClockPoint::now),
                conversion,
                spilling,
                fold: ring_units == RingUnits::Folded,
            };
            mapping.prefault_starts(RINGS_AHEAD);
            Ok(mapping)
        }
    }

    /// When the converter works while the program runs ([`ENV_CONVERT`]).
    pub fn conversion(&self) -> Conversion {
        self.conversion
    }

    /// For a recording that ends before its program does (`--pid`): there the
    /// default converts on a spare CPU ([`Conversion::OnSpareCpu`]), since a
    /// conversion deferred to the recording's end would run at normal priority
    /// beside a server that goes on serving.
    pub fn converting_while_attached(&mut self) {
        if self.conversion == Conversion::Auto {
            self.conversion = Conversion::OnSpareCpu;
        }
    }

    /// Converts as the passes come, at normal priority ([`Conversion::Live`],
    /// `ordo record --keep-trace-current`), whatever [`ENV_CONVERT`] says: the
    /// trace on disk keeps up with the program.
    pub fn keep_trace_current(&mut self) {
        self.conversion = Conversion::Live;
    }

    /// When the drain spills passes to a file ([`ENV_SPILL`]).
    pub fn spilling(&self) -> Spilling {
        self.spilling
    }

    /// Whether the agent reads the clock sparsely ([`CLOCK_SPARSE`]).
    pub fn sparse_times(&self) -> bool {
        self.header().clock & CLOCK_SPARSE != 0
    }

    /// Allocates pages ahead of the threads (from the converter, at idle
    /// priority), so a thread does not wait for the kernel to allocate and clear
    /// them: the start of the rings after the ones in use, which the next threads
    /// claim, and the rest of every ring in use whose thread got busy (wrote past
    /// half its start).
    pub(crate) fn prefault_ahead(&self) {
        let used = (self.header().rings_used.load(Ordering::Relaxed) as usize).min(MAX_RINGS);
        self.prefault_starts(used + RINGS_AHEAD);
        for (i, whole) in self.whole.iter().enumerate().take(used) {
            if !whole.load(Ordering::Relaxed)
                && self.ring(i).head.0.load(Ordering::Relaxed) >= RING_START_UNITS as u64 / 2
            {
                let start = ring_records_offset(i);
                self.populate(start, ring_records_offset(i + 1) - start);
                whole.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Allocates the start of the rings below `upto` (see [`RING_START_UNITS`]).
    fn prefault_starts(&self, upto: usize) {
        let upto = upto.min(MAX_RINGS);
        let from = self.prefaulted.load(Ordering::Relaxed);
        for i in from..upto {
            self.populate(
                ring_records_offset(i),
                RING_START_UNITS * std::mem::size_of::<Unit>(),
            );
        }
        self.prefaulted.store(upto.max(from), Ordering::Relaxed);
    }

    /// Allocates the pages of `len` bytes at `offset` in the mapping.
    fn populate(&self, offset: usize, len: usize) {
        // SAFETY: a range inside our mapping; MADV_POPULATE_WRITE only allocates.
        unsafe {
            libc::madvise(
                self.base.add(offset).cast(),
                len,
                23, /* MADV_POPULATE_WRITE */
            )
        };
    }

    /// The descriptor the program inherits.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The environment telling the agent where the mapping is.
    pub fn env(&self) -> (OsString, OsString) {
        (ENV_FD.into(), self.raw_fd().to_string().into())
    }

    fn header(&self) -> &Header {
        // SAFETY: the header is at the start of the live mapping.
        unsafe { &*(self.base as *const Header) }
    }

    fn ring(&self, i: usize) -> &RingHeader {
        // SAFETY: i < MAX_RINGS, inside the mapping.
        unsafe { &*(self.base.add(ring_header_offset(i)) as *const RingHeader) }
    }

    /// Whether an agent took the mapping (the program loaded it and started).
    pub fn attached(&self) -> bool {
        self.header().attached.load(Ordering::Acquire) != 0
    }

    /// Events the agent could not record: rings that stayed full, no free ring.
    pub fn dropped(&self) -> u64 {
        let h = self.header();
        let used = (h.rings_used.load(Ordering::Acquire) as usize).min(MAX_RINGS);
        h.no_ring.load(Ordering::Relaxed)
            + (0..used)
                .map(|i| self.ring(i).dropped.load(Ordering::Relaxed))
                .sum::<u64>()
    }

    /// Child processes the program forked (not followed).
    pub fn forks(&self) -> u64 {
        self.header().forks.load(Ordering::Relaxed)
    }

    /// Milliseconds the agent's start-up waited for the module map to be read
    /// before it let the program go on without (0: it did not give up).
    pub fn modules_waited_out(&self) -> u32 {
        self.header().modules_waited_out.load(Ordering::Acquire)
    }

    /// Events whose object found no sequence counter (the table was full).
    pub fn unsequenced(&self) -> u64 {
        self.header().seq_full.load(Ordering::Relaxed)
    }

    /// Copies every published record out of the rings into `pass` (one batch per
    /// ring, in each ring's order) and hands the space back to the agents at once;
    /// frees the rings of threads in `exited` once they are empty, if they were seen
    /// before this pass (`first_seen`, see [`RingReader`]). Only a copy: the
    /// records are expanded, merged and encoded later, off the program's CPU.
    fn copy_rings(
        &self,
        pass: &mut RawPass,
        exited: &HashSet<u32>,
        first_seen: &mut [(u32, u64)],
        pass_number: u64,
        pool: Option<&PrefaultPool<Unit>>,
    ) {
        let used = (self.header().rings_used.load(Ordering::Acquire) as usize).min(MAX_RINGS);
        // Heads first, so the whole pass is reserved at once (`PassBuf` never grows
        // by copying in the middle of a pass); records published after this point
        // wait for the next pass.
        let mut heads = std::mem::take(&mut pass.heads);
        heads.clear();
        let mut total = pass.records.len();
        for i in 0..used {
            let ring = self.ring(i);
            if ring.state.0.load(Ordering::Acquire) == RING_FREE {
                continue;
            }
            // `head` first: its release store orders the owner's `tid` before it.
            let head = ring.head.0.load(Ordering::Acquire);
            total += (head - ring.tail.0.load(Ordering::Relaxed)) as usize;
            heads.push((i, head));
        }
        if pass.records.is_empty() && !pass.records.has_room(total) {
            if let Some(ready) = pool.and_then(|p| p.take(total)) {
                pass.records = ready;
            }
        }
        if !pass.records.reserve_total(total) {
            // No memory for a copy: the records stay in the rings (their agents wait
            // for room) until a later pass finds some.
            pass.heads = heads;
            pass.copied = false;
            return;
        }
        pass.records.populate_to(total);
        pass.copied = true;
        for &(i, head) in &heads {
            let ring = self.ring(i);
            let tail = ring.tail.0.load(Ordering::Relaxed);
            let tid = ring.tid.load(Ordering::Relaxed);
            let seen = &mut first_seen[i];
            if seen.0 != tid || seen.1 == 0 {
                *seen = (tid, pass_number);
            }
            if head > tail {
                // SAFETY: units in [tail, head) are published and not rewritten
                // until `tail` moves past them; the ring is RING_UNITS long.
                let units = unsafe {
                    std::slice::from_raw_parts(
                        self.base.add(ring_records_offset(i)) as *const Unit,
                        RING_UNITS,
                    )
                };
                let from = tail as usize & (RING_UNITS - 1);
                let n = (head - tail) as usize;
                let mut copy = RingCopy {
                    scan: SiteScan::default(),
                    sites: &mut pass.full_sites,
                    folds: self.fold,
                };
                pass.ring_units += n as u64;
                pass.records.append_streaming(n, |out| {
                    if from + n <= RING_UNITS {
                        copy.copy(&units[from..from + n], out);
                    } else {
                        copy.copy(&units[from..], out);
                        copy.copy(&units[..from + n - RING_UNITS], out);
                    }
                });
                pass.batches.push(Batch {
                    tid,
                    ring: i as u32,
                    end: pass.records.len(),
                });
                ring.tail.0.store(head, Ordering::Release);
                if ring.waiting.swap(0, Ordering::AcqRel) != 0 {
                    // SAFETY: a futex word in the shared mapping.
                    unsafe { futex_wake(ring.waiting.as_ptr()) };
                }
            } else if exited.contains(&tid) && seen.1 < pass_number {
                // The thread is gone and everything it published is drained. Gone
                // from inside a blocking call (the program was killed, or the
                // thread cancelled): that is its last event.
                if let Some(event) = self.blocked_event(i, self.now_stamp()) {
                    push_event(pass, tid, event);
                }
                *seen = (0, 0);
                ring.tid.store(0, Ordering::Relaxed);
                ring.state.0.store(RING_FREE, Ordering::Release);
            }
        }
        pass.heads = heads;
    }

    /// Now, in the unit of the records' time stamps.
    fn now_stamp(&self) -> u64 {
        if self.tsc_start.is_some() {
            ClockPoint::now().tsc
        } else {
            crate::recording::monotonic_ns()
        }
    }

    /// A [`kind::BLOCKED`] event for ring `i`'s thread when it is inside a
    /// blocking call (its pending slot set), stamped like its last event (it has
    /// been blocked since then), or `now` when it has none.
    fn blocked_event(&self, i: usize, now: u64) -> Option<Event> {
        let ring = self.ring(i);
        let pending = &ring.pending.0;
        let waited = pending.kind.load(Ordering::Acquire);
        if waited == 0 {
            return None;
        }
        // The owner stores its last event's time stamp before publishing the
        // event (`head`'s release store), and not again while it is inside the
        // blocking call.
        let ts = if ring.head.0.load(Ordering::Acquire) == 0 {
            now
        } else {
            ring.codec.0.last_ts.load(Ordering::Relaxed)
        };
        Some(Event {
            ts,
            seq: 0,
            addr: pending.addr.load(Ordering::Relaxed),
            site: pending.site.load(Ordering::Relaxed),
            extra: waited as u64,
            result: 0,
            kind: kind::BLOCKED as u8,
            via: 0,
        })
    }

    /// Appends a [`kind::BLOCKED`] record for every thread still inside a blocking
    /// call. Only at the end of a recording: then the program is gone or
    /// finishing, and whatever is still pending never returned while it was
    /// recorded.
    fn pending_blocked(&self, pass: &mut RawPass, now: u64) {
        let used = (self.header().rings_used.load(Ordering::Acquire) as usize).min(MAX_RINGS);
        for i in 0..used {
            let ring = self.ring(i);
            if ring.state.0.load(Ordering::Acquire) == RING_FREE {
                continue;
            }
            let tid = ring.tid.load(Ordering::Relaxed);
            if let Some(event) = self.blocked_event(i, now) {
                push_event(pass, tid, event);
            }
        }
    }

    /// With TSC time stamps, the calibration point before the program started.
    pub(crate) fn tsc_start(&self) -> Option<ClockPoint> {
        self.tsc_start
    }

    /// Counts a drain pass without reading anything: the drain is alive but holds
    /// off (its backlog is full), so waiting agents keep waiting instead of
    /// dropping.
    pub(crate) fn count_idle_pass(&self) {
        self.header().passes.fetch_add(1, Ordering::Release);
    }

    /// Sleeps until an agent rings the doorbell or `timeout` passes.
    pub(crate) fn wait_doorbell(&self, seen: u32, timeout: Duration) {
        let h = self.header();
        h.drain_sleeping.store(1, Ordering::SeqCst);
        if h.doorbell.load(Ordering::SeqCst) == seen {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: a futex word in the shared mapping; the timeout bounds the wait.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    h.doorbell.as_ptr(),
                    libc::FUTEX_WAIT,
                    seen,
                    &ts as *const libc::timespec,
                )
            };
        }
        h.drain_sleeping.store(0, Ordering::SeqCst);
    }

    /// Tells the agent its modules were read (it waits for that at start-up).
    /// Gives the mapping's memory back to the system, its size kept (a hole
    /// punched over all of it): an attached process keeps the mapping after the
    /// recorder detached (a thread may still be in the agent's last write), and
    /// would otherwise keep every page its threads' rings touched, at every
    /// attach. A late write lands in a fresh zero page.
    pub fn release_pages(&self) {
        // SAFETY: a plain syscall on our descriptor; failure only keeps the pages.
        unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                mapping_size() as libc::off_t,
            );
        }
    }

    pub(crate) fn modules_read(&self) {
        let h = self.header();
        h.modules_read.store(1, Ordering::Release);
        // SAFETY: a futex word in the shared mapping.
        unsafe { futex_wake(h.modules_read.as_ptr()) };
    }

    /// Wakes the drain as an agent does: the recording stops, and a drain asleep
    /// for its idle interval would leave the stop waiting that long.
    pub(crate) fn ring_doorbell(&self) {
        let h = self.header();
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        // SAFETY: a futex word in the shared mapping.
        unsafe { futex_wake(h.doorbell.as_ptr()) };
    }

    pub(crate) fn doorbell(&self) -> u32 {
        self.header().doorbell.load(Ordering::Acquire)
    }
}

impl Drop for InprocMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.base.cast(), mapping_size()) };
    }
}

/// Whether the kernel keeps CLOCK_MONOTONIC with the TSC: then the TSC is
/// synchronized across CPUs (the kernel checked) and CLOCK_MONOTONIC is a linear
/// function of it between NTP adjustments.
fn tsc_is_the_kernel_clock() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// A TSC reading and CLOCK_MONOTONIC at the same moment (within the few
/// nanoseconds between two `rdtsc`s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClockPoint {
    tsc: u64,
    ns: u64,
}

impl ClockPoint {
    /// The narrowest of a few tries (a try the scheduler interrupted is wide).
    pub(crate) fn now() -> ClockPoint {
        let mut best = (u64::MAX, ClockPoint::default());
        for _ in 0..5 {
            // SAFETY: rdtsc has no preconditions.
            let a = unsafe { std::arch::x86_64::_rdtsc() };
            let ns = crate::recording::monotonic_ns();
            // SAFETY: as above.
            let b = unsafe { std::arch::x86_64::_rdtsc() };
            if b.wrapping_sub(a) < best.0 {
                best = (
                    b.wrapping_sub(a),
                    ClockPoint {
                        tsc: a + (b - a) / 2,
                        ns,
                    },
                );
            }
        }
        best.1
    }
}

/// Converts TSC stamps to CLOCK_MONOTONIC nanoseconds: linear between the
/// calibration points of consecutive passes (taken before each pass reads the
/// rings), extended past the last one for records written after it; each thread's
/// converted times never go backwards (the merge relies on per-thread order).
struct TscClock {
    from: ClockPoint,
    to: ClockPoint,
    /// Nanoseconds per tick of the segment `from`–`to`, in 32.32 fixed point.
    scale: u64,
    last: HashMap<u32, u64>,
}

impl TscClock {
    fn starting_at(start: ClockPoint) -> TscClock {
        TscClock {
            from: start,
            to: start,
            scale: 0,
            last: HashMap::new(),
        }
    }

    /// Moves to the segment ending at `to`.
    fn advance(&mut self, to: ClockPoint) {
        if to.tsc > self.to.tsc && to.ns > self.to.ns {
            self.from = self.to;
            self.to = to;
            let (dns, dtsc) = (to.ns - self.from.ns, to.tsc - self.from.tsc);
            self.scale =
                ((u128::from(dns) << 32) / u128::from(dtsc)).min(u128::from(u64::MAX)) as u64;
        }
    }

    /// Converts the TSC stamps of `events`, all thread `tid`'s and in its order,
    /// to CLOCK_MONOTONIC nanoseconds, first raising them to `floor`; a thread's
    /// converted times never go backwards. One map lookup a batch and a multiply
    /// an event: this runs for every event a busy program makes.
    fn convert<'a>(
        &mut self,
        tid: u32,
        events: impl IntoIterator<Item = &'a mut RawEvent>,
        floor: u64,
    ) {
        let last = self.last.entry(tid).or_insert(0);
        let (a, scale) = (self.from, self.scale);
        for e in events {
            let tsc = e.ts_ns.max(floor);
            let ns = if scale == 0 {
                a.ns
            } else if tsc >= a.tsc {
                a.ns.saturating_add(((u128::from(tsc - a.tsc) * u128::from(scale)) >> 32) as u64)
            } else {
                a.ns.saturating_sub(((u128::from(a.tsc - tsc) * u128::from(scale)) >> 32) as u64)
            };
            *last = (*last).max(ns);
            e.ts_ns = *last;
        }
    }
}

/// Wakes every thread waiting on the futex word at `word`.
///
/// # Safety
///
/// `word` points to an aligned `u32` in a live mapping (one the waiters share).
unsafe fn futex_wake(word: *mut u32) {
    // SAFETY: FUTEX_WAKE takes no pointer but the word's address, which the caller
    // vouches for; the kernel only uses it to find the waiters (it reads and writes
    // no memory of ours).
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, i32::MAX) };
}

/// Appends one event of thread `tid` as its own batch (a `blocked` event, outside
/// the pass's reserved copy: rare, so it may grow the buffer). It is no ring's:
/// encoded without short units, and decoded without touching a ring's state.
fn push_event(pass: &mut RawPass, tid: u32, event: Event) {
    let (units, n) = encode(&event, None);
    if pass.records.reserve_total(pass.records.len() + n) {
        pass.records.extend_from_slice(&units[..n]);
        pass.full_sites.push(event.site);
        pass.batches.push(Batch {
            tid,
            ring: NOT_A_RING,
            end: pass.records.len(),
        });
    }
}

/// [`Batch::ring`] of events the recorder made itself.
const NOT_A_RING: u32 = u32::MAX;

/// The events of a run of whole ring units, in order (a batch ends with an event:
/// the agent publishes all units of an event at once). `state` follows the ring
/// they come from (see [`decode`]).
fn events<'a>(
    mut units: &'a [Unit],
    mut state: Option<&'a mut DecodeState>,
) -> impl Iterator<Item = Event> + 'a {
    // A folded pair's second event, to give next.
    let mut held: Option<Event> = None;
    std::iter::from_fn(move || {
        if let Some(e) = held.take() {
            return Some(e);
        }
        let decoded = decode(units, state.as_deref_mut())?;
        units = &units[decoded.units..];
        if let [_, second] = decoded.events() {
            held = Some(*second);
        }
        Some(decoded.events()[0])
    })
}

/// A ring event as the eBPF path would have reported it.
fn expand(r: &Event, tid: u32) -> RawEvent {
    let futex = matches!(r.kind as u16, kind::FUTEX_WAIT | kind::FUTEX_WAKE);
    let blocked = r.kind as u16 == kind::BLOCKED;
    // A discovered access carries its size in `extra`.
    let access = matches!(r.kind as u16, kind::READ | kind::WRITE | kind::RMW);
    RawEvent {
        ts_ns: r.ts,
        seq: r.seq,
        addr: r.addr,
        addr2: if futex {
            r.extra & 0xff
        } else if blocked || access {
            0
        } else {
            r.extra
        },
        site: r.site,
        result: r.result as i64,
        value: if futex {
            r.extra >> 32
        } else if blocked {
            r.extra
        } else {
            0
        },
        tid,
        kind: r.kind as u16,
        via: r.via,
        size: if access { r.extra as u8 } else { 0 },
        name: [0; 16],
    }
}

// Keep the table offset in use here too: the recorder never touches the counters,
// but the layout check below covers them.
const _: () = assert!(seq_table_offset() > ring_header_offset(MAX_RINGS - 1));

/// Environment variable choosing the rings' encoding: `short` (the default: an
/// event that repeats a call site its ring knows takes one 16-byte unit, and
/// the drain folds a lock and its release into one as it copies them:
/// `ordo_probe_common::inproc::fold_pair`), `unfolded` (short units, copied as
/// they are) or `wide` (every event two units or four, as before short units).
/// The trace is the same in every case (tests/record_inproc.rs compares them);
/// the others are there to show it and for the bench to measure what short
/// units and folding save.
pub const ENV_RING_UNITS: &str = "ORDO_RING_UNITS";

/// The rings' encoding ([`ENV_RING_UNITS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RingUnits {
    /// Short units, pairs folded in the drain's copy.
    Folded,
    /// Short units, copied as they are.
    Short,
    /// Two units or four an event.
    Wide,
}

/// The encoding [`ENV_RING_UNITS`] asks for.
fn ring_units_wanted() -> Result<RingUnits> {
    match std::env::var_os(ENV_RING_UNITS) {
        None => Ok(RingUnits::Folded),
        Some(v) if v == "short" || v.is_empty() => Ok(RingUnits::Folded),
        Some(v) if v == "unfolded" => Ok(RingUnits::Short),
        Some(v) if v == "wide" => Ok(RingUnits::Wide),
        Some(v) => bail!(
            "{ENV_RING_UNITS}={}: expected `short`, `unfolded` or `wide`",
            v.to_string_lossy()
        ),
    }
}

/// Environment variable choosing when the converter works while the program
/// runs: `auto` (the default: when the trace's file system takes a spill file,
/// the drain spills every pass to it and the converter waits for the program's
/// end, within the spill's bound; without one, or attached to a program that
/// outlives the recording, as `spare`), `spare` (only while
/// the machine has a CPU the program leaves unused, else deferred within the
/// backlog's bound until one is, or the program ends), `alongside` (whenever a
/// CPU would be idle, at idle priority) or `live` (at normal priority
/// throughout: the trace on disk keeps up with the program whatever the load, so
/// a recorder that is itself killed, by the OOM killer or a job's time limit,
/// leaves what was recorded until shortly before) or `end` (not while the
/// program runs, within the backlog's bound: all of it at its end, the passes
/// in memory until the spill's usual threshold). The trace is the same either
/// way; the others are there for the bench to measure what each costs.
pub const ENV_CONVERT: &str = "ORDO_CONVERT";

/// When the in-process converter works while the program runs ([`ENV_CONVERT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Conversion {
    /// [`Conversion::AtEnd`] with every pass spilled when there is a spill file
    /// (`crate::spill`), else [`Conversion::OnSpareCpu`]: the drain decides once
    /// it knows (`recording::inproc_drain`). Launch mode only
    /// ([`InprocMapping::converting_while_attached`]).
    #[default]
    Auto,
    /// Only on a CPU the program leaves spare; deferred otherwise.
    OnSpareCpu,
    /// At idle priority, whenever it gets a CPU.
    Alongside,
    /// At normal priority, as the passes come.
    Live,
    /// Not while the program runs, within the backlog's bound: all at its end.
    AtEnd,
}

/// The conversion [`ENV_CONVERT`] asks for.
fn conversion_wanted() -> Result<Conversion> {
    match std::env::var_os(ENV_CONVERT) {
        None => Ok(Conversion::Auto),
        Some(v) if v == "auto" || v.is_empty() => Ok(Conversion::Auto),
        Some(v) if v == "spare" => Ok(Conversion::OnSpareCpu),
        Some(v) if v == "alongside" => Ok(Conversion::Alongside),
        Some(v) if v == "live" => Ok(Conversion::Live),
        Some(v) if v == "end" => Ok(Conversion::AtEnd),
        Some(v) => bail!(
            "{ENV_CONVERT}={}: expected `auto`, `spare`, `alongside`, `live` or `end`",
            v.to_string_lossy()
        ),
    }
}

/// Environment variable choosing when the drain spills a pass's ring units to a
/// file instead of handing them on in memory (`crate::spill`): `auto` (the
/// default: every pass while the converter waits for the program's end
/// ([`Conversion::Auto`]), else once half the backlog's bound in memory waits
/// for the converter, see `recording::inproc_drain`), `always` (every pass, for
/// tests to compare and for the bench to measure what the spill costs) or
/// `never` (memory only). The trace is the same either way.
pub const ENV_SPILL: &str = "ORDO_SPILL";

/// When the drain spills ([`ENV_SPILL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spilling {
    /// Every pass while the converter waits for the program's end by default,
    /// else while it is behind by more than the drain keeps in memory.
    WhileBehind,
    /// Every pass.
    Always,
    /// Never: the backlog stays in memory.
    Never,
}

/// The spilling [`ENV_SPILL`] asks for.
fn spilling_wanted() -> Result<Spilling> {
    match std::env::var_os(ENV_SPILL) {
        None => Ok(Spilling::WhileBehind),
        Some(v) if v == "auto" || v.is_empty() => Ok(Spilling::WhileBehind),
        Some(v) if v == "always" => Ok(Spilling::Always),
        Some(v) if v == "never" => Ok(Spilling::Never),
        Some(v) => bail!(
            "{ENV_SPILL}={}: expected `auto`, `always` or `never`",
            v.to_string_lossy()
        ),
    }
}

/// Rings kept allocated ahead of the ones in use.
const RINGS_AHEAD: usize = 2;

/// Passes a clone's THREAD_CREATE waits for the agent's before it is released alone.
const CREATE_PATIENCE: u64 = 50;

#[derive(Default)]
struct ThreadQueue {
    agent: VecDeque<RawEvent>,
    kernel: VecDeque<RawEvent>,
    /// Events with a timestamp up to this are safe to release (see the module doc).
    safe_ts: u64,
    /// Since which pass a clone's THREAD_CREATE has been waiting at the front for the
    /// agent's, or the agent's for the clone's.
    create_waiting_since: Option<u64>,
    /// Since which pass this thread's own THREAD_CREATE has been waiting for the
    /// thread's creation to be released.
    parent_waiting_since: Option<u64>,
    /// The thread's exit was seen: the queue goes once it is empty.
    exited: bool,
}

/// Interleaves each thread's agent and eBPF events by time (see the module doc).
/// Logical ids are assigned as creations are taken, so a thread's own creations
/// must be taken after its creation: a thread's THREAD_CREATE waits (at most
/// [`CREATE_PATIENCE`] passes) until the creation of the thread itself was released.
///
/// It works on the [`RawPass`]es the drain copied, one after the other, exactly as
/// they were read: what it releases does not depend on when it runs.
#[derive(Default)]
pub(crate) struct Merger {
    threads: HashMap<u32, ThreadQueue>,
    /// Threads whose creation was released (and the main thread).
    pub(crate) created: HashSet<u32>,
    pass: u64,
    /// Events released in one pass, before they are put in time order.
    batch: Vec<RawEvent>,
    /// `batch`'s runs of one thread's events (start, end).
    runs: Vec<(usize, usize)>,
    /// Converts the records' TSC stamps (when the agent uses the TSC).
    tsc: Option<TscClock>,
    /// The agent reads the clock sparsely ([`CLOCK_SPARSE`]).
    sparse: bool,
    /// With sparse stamps: when the last pass that copied the rings read them (in
    /// the records' unit). A record a pass copies was not there at the previous
    /// copy, so it was written after this: its stamp is raised to it, which bounds
    /// how early a stamp taken without reading the clock can be by the passes'
    /// interval (5–20 ms) rather than by the time since its thread last read it.
    floor: Option<u64>,
    /// Per ring: the copy of its encoding state (short units name call sites
    /// and time stamps by it), kept across passes and across the ring's owners.
    codecs: HashMap<u32, Box<DecodeState>>,
    /// Ring units and the events they held, so far (`ORDO_PHASES` shows them).
    pub(crate) units_read: u64,
    /// See `units_read`.
    pub(crate) events_read: u64,
    /// Units the drain read from the rings for them.
    pub(crate) ring_units_read: u64,
}

impl Merger {
    /// A merger for records stamped as `mapping` says.
    pub(crate) fn for_mapping(mapping: &InprocMapping) -> Merger {
        Merger {
            tsc: mapping.tsc_start().map(TscClock::starting_at),
            sparse: mapping.sparse_times(),
            ..Merger::default()
        }
    }

    /// Starts a pass: what was read before it becomes releasable.
    fn begin_pass(&mut self) {
        self.pass += 1;
        for q in self.threads.values_mut() {
            let last = |d: &VecDeque<RawEvent>| d.back().map(|e| e.ts_ns).unwrap_or(0);
            q.safe_ts = q.safe_ts.max(last(&q.agent)).max(last(&q.kernel));
        }
    }

    /// Adds an event from the eBPF ring buffer.
    fn push_kernel(&mut self, e: RawEvent) {
        let q = self.threads.entry(e.tid).or_default();
        q.exited |= e.kind == kind::THREAD_EXIT;
        q.kernel.push_back(e);
    }

    /// Merges one pass the drain copied and releases what is safe to `out` (all of
    /// it on the last pass).
    pub(crate) fn take_pass(&mut self, pass: &RawPass, out: &mut impl FnMut(&RawEvent)) {
        self.begin_pass();
        self.ring_units_read += pass.ring_units;
        let mut start = 0;
        if let (Some(clock), Some(point)) = (&mut self.tsc, pass.clock) {
            clock.advance(point);
        }
        for &Batch { tid, ring, end } in &pass.batches {
            // An event the recorder added has no short unit and no ring state.
            let state = (ring != NOT_A_RING).then(|| &mut **self.codecs.entry(ring).or_default());
            // Decoded straight into the thread's queue and stamped there: each
            // event is ~80 bytes, and a scratch buffer in between copied it once more.
            let queue = &mut self.threads.entry(tid).or_default().agent;
            let before = queue.len();
            queue.extend(events(&pass.records[start..end], state).map(|e| expand(&e, tid)));
            self.events_read += (queue.len() - before) as u64;
            self.units_read += (end - start) as u64;
            let floor = self.floor.unwrap_or(0);
            if let Some(clock) = &mut self.tsc {
                clock.convert(tid, queue.range_mut(before..), floor);
            } else if floor != 0 {
                for e in queue.range_mut(before..) {
                    e.ts_ns = e.ts_ns.max(floor);
                }
            }
            start = end;
        }
        if self.sparse && pass.copied {
            if let Some(point) = pass.clock {
                self.floor = Some(if self.tsc.is_some() {
                    point.tsc
                } else {
                    point.ns
                });
            }
        }
        for e in &pass.kernel {
            self.push_kernel(*e);
        }
        self.release(pass.all, out);
    }

    /// Releases, per thread in time order, every event that is safe (all of them when
    /// `all`), folding each clone's THREAD_CREATE into the agent's.
    fn release(&mut self, all: bool, out: &mut impl FnMut(&RawEvent)) {
        let mut batch = std::mem::take(&mut self.batch);
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        // Each thread's events come in a run, in time order: where they do, the
        // runs are merged as they are handed on rather than sorted first (moving
        // every ~80-byte event through a sort's buffers).
        let mut in_order = true;
        let mut push = |e: &RawEvent| {
            match runs.last_mut() {
                Some(run) if batch.last().is_some_and(|l: &RawEvent| l.tid == e.tid) => {
                    in_order &= batch.last().is_some_and(|l| l.ts_ns <= e.ts_ns);
                    run.1 += 1;
                }
                _ => runs.push((batch.len(), batch.len() + 1)),
            }
            batch.push(*e);
        };
        self.release_once(all, false, &mut push);
        if all
            && self
                .threads
                .values()
                .any(|q| !q.agent.is_empty() || !q.kernel.is_empty())
        {
            // Threads whose creation never came (lost): release them anyway.
            self.release_once(all, true, &mut push);
        }
        // Across threads, in time order, as the eBPF ring delivers them: joins are
        // matched to creations of a reused pthread_t in arrival order. Stable, so
        // each thread keeps its order (its timestamps only grow).
        if in_order && runs.len() <= MERGED_RUNS {
            merge_runs(&batch, &mut runs, out);
        } else {
            batch.sort_by_key(|e| e.ts_ns);
            batch.iter().for_each(&mut *out);
        }
        batch.clear();
        self.batch = batch;
        self.runs = runs;
    }

    /// One round of [`Merger::release`]; `force` ignores the wait for a thread's
    /// creation.
    fn release_once(&mut self, all: bool, force: bool, out: &mut impl FnMut(&RawEvent)) {
        let pass = self.pass;
        let created = &mut self.created;
        // Releasing a creation can let the new thread's own creations go: repeat
        // while anything was released.
        let mut progress = true;
        while progress {
            progress = false;
            for (&tid, q) in self.threads.iter_mut() {
                let limit = if all { u64::MAX } else { q.safe_ts };
                let mut out = |e: &RawEvent, created: &mut HashSet<u32>| {
                    progress = true;
                    if e.kind == kind::THREAD_CREATE && e.value != 0 {
                        created.insert(e.value as u32);
                    } else if e.kind == kind::THREAD_EXIT {
                        // The tid may be handed out again: a later thread with it
                        // waits for its own creation.
                        created.remove(&e.tid);
                    }
                    out(e)
                };
                loop {
                    let a = q.agent.front().map(|e| e.ts_ns);
                    let k = q.kernel.front().map(|e| e.ts_ns);
                    let take_kernel = match (a, k) {
                        (None, None) => break,
                        (Some(_), None) => false,
                        (None, Some(_)) => true,
                        (Some(a), Some(k)) => k <= a,
                    };
                    let ts = if take_kernel { k } else { a }.unwrap();
                    if ts > limit {
                        break;
                    }
                    let next_kind = if take_kernel {
                        q.kernel.front().unwrap().kind
                    } else {
                        q.agent.front().unwrap().kind
                    };
                    if next_kind == kind::THREAD_CREATE && !force && !created.contains(&tid) {
                        let since = *q.parent_waiting_since.get_or_insert(pass);
                        if all || pass - since < CREATE_PATIENCE {
                            break;
                        }
                    }
                    q.parent_waiting_since = None;
                    if !take_kernel {
                        let front = q.agent.front().unwrap();
                        if front.kind == kind::THREAD_CREATE && front.result == 0 && !all {
                            // A pthread_create whose clone (an earlier kernel event) has not
                            // been read yet: it cannot be far behind.
                            let since = *q.create_waiting_since.get_or_insert(pass);
                            if pass - since < CREATE_PATIENCE {
                                break;
                            }
                        }
                        q.create_waiting_since = None;
                        let e = q.agent.pop_front().unwrap();
                        out(&e, created);
                        continue;
                    }
                    let front = *q.kernel.front().unwrap();
                    if front.kind == kind::THREAD_CREATE && front.site == 0 {
                        // The clone of a pthread_create? The agent's event comes next.
                        match q.agent.front() {
                            Some(next) if next.kind == kind::THREAD_CREATE => {
                                if next.ts_ns > limit {
                                    break;
                                }
                                let mut next = q.agent.pop_front().unwrap();
                                q.kernel.pop_front();
                                next.value = front.value;
                                // At the clone's time: the child exists from then on,
                                // and every event of its own comes later.
                                next.ts_ns = front.ts_ns;
                                q.create_waiting_since = None;
                                out(&next, created);
                                continue;
                            }
                            Some(_) => {}
                            None if !all => {
                                let since = *q.create_waiting_since.get_or_insert(pass);
                                if pass - since < CREATE_PATIENCE {
                                    break;
                                }
                            }
                            None => {}
                        }
                        q.create_waiting_since = None;
                    }
                    let e = q.kernel.pop_front().unwrap();
                    out(&e, created);
                }
            }
        }
        // Queues of live threads are kept with their buffers: freeing and growing
        // them again every pass cost a page fault per few dozen events.
        self.threads
            .retain(|_, q| !q.agent.is_empty() || !q.kernel.is_empty() || !q.exited);
    }
}

/// Runs of events [`Merger::release`] merges as it hands them on, at most: past
/// that it sorts them (a merge looks at every run's next event in turn).
const MERGED_RUNS: usize = 32;

/// Hands on `batch`'s events in time order, as a stable sort by time would put
/// them: `runs` (start, end) are in time order each and cover `batch` in order, so
/// of equal times the earlier run's go first. Takes a stretch of the run whose
/// next event is earliest at a time, up to where another run's comes first.
fn merge_runs(batch: &[RawEvent], runs: &mut [(usize, usize)], out: &mut impl FnMut(&RawEvent)) {
    loop {
        let mut best: Option<usize> = None;
        for (r, run) in runs.iter().enumerate() {
            if run.0 < run.1 && best.is_none_or(|b| batch[run.0].ts_ns < batch[runs[b].0].ts_ns) {
                best = Some(r);
            }
        }
        let Some(b) = best else { return };
        // How far run `b` goes before another's next event: an earlier run's
        // wins ties, a later run's loses them.
        let mut before = u64::MAX;
        let mut before_or_at = u64::MAX;
        for (r, run) in runs.iter().enumerate() {
            if r != b && run.0 < run.1 {
                let ts = batch[run.0].ts_ns;
                if r < b {
                    before = before.min(ts);
                } else {
                    before_or_at = before_or_at.min(ts);
                }
            }
        }
        let run = &mut runs[b];
        while run.0 < run.1 {
            let e = &batch[run.0];
            if e.ts_ns >= before || e.ts_ns > before_or_at {
                break;
            }
            out(e);
            run.0 += 1;
        }
    }
}

/// One ring's units in a [`RawPass`], or an event the recorder added.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    /// The thread that owned the ring.
    pub(crate) tid: u32,
    /// The ring ([`NOT_A_RING`] for an event the recorder added).
    pub(crate) ring: u32,
    /// Where its units end in [`RawPass::records`].
    pub(crate) end: usize,
}

/// What one drain pass copied, in the order it was read: the agent rings (one
/// batch per ring), then the eBPF ring buffer. [`Merger::take_pass`] turns it into
/// events later; the copy is all the drain does while the program runs.
#[derive(Default)]
pub(crate) struct RawPass {
    /// One per ring read, and one per event the recorder added.
    pub(crate) batches: Vec<Batch>,
    /// The agents' ring units (see `crate::prefault`).
    pub(crate) records: PassBuf<Unit>,
    /// The call sites `records` carry in full, in order, repeats in a row left
    /// out: noted as the units are copied ([`SiteScan`]).
    pub(crate) full_sites: Vec<u64>,
    /// Where `records` went when the drain spilled them to a file (`crate::spill`;
    /// `records` is empty then until the converter reads them back).
    pub(crate) spilled: Option<crate::spill::Extent>,
    pub(crate) kernel: Vec<RawEvent>,
    /// Scratch for the rings' heads at the start of the copy.
    pub(crate) heads: Vec<(usize, u64)>,
    /// Units read from the rings (`records` holds fewer where the drain folded
    /// pairs).
    pub(crate) ring_units: u64,
    /// Snapshots of the program's modules taken before this pass's events were
    /// read (they describe the events' sites).
    pub(crate) modules: Vec<Vec<ordo_trace::schema::ModuleRecord>>,
    /// Events dropped so far (agent and eBPF), for the chunk headers.
    pub(crate) dropped: u64,
    /// With TSC time stamps or sparse ones: the moment just before the rings were
    /// read (the TSC's calibration point).
    pub(crate) clock: Option<ClockPoint>,
    /// The rings were copied (not left for a later pass for want of memory).
    pub(crate) copied: bool,
    /// The last pass: release everything.
    pub(crate) all: bool,
}

impl RawPass {
    /// Empties it, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.batches.clear();
        self.records.clear();
        self.full_sites.clear();
        self.spilled = None;
        self.kernel.clear();
        self.ring_units = 0;
        self.modules.clear();
        self.dropped = 0;
        self.clock = None;
        self.copied = false;
        self.all = false;
    }

    /// The agents' events it holds.
    pub(crate) fn agent_events(&self) -> u64 {
        events(&self.records, None).count() as u64
    }

    /// Memory its events take.
    pub(crate) fn bytes(&self) -> usize {
        self.records.len() * std::mem::size_of::<Unit>()
            + self.kernel.len() * std::mem::size_of::<RawEvent>()
    }

    /// Whether some event's call site lies outside every range `known` knows. A
    /// short unit's site is one an earlier event of its ring carried in full, in
    /// this pass or an earlier one: only those are looked at, as the copy noted
    /// them (reading the pass back would fetch every line its streaming stores
    /// sent to memory: 14 % of the drain's time under memcached's load).
    pub(crate) fn has_site_outside(&self, known: &mut impl FnMut(u64) -> bool) -> bool {
        let mut last = 0;
        let mut check = |site: u64| {
            if site != last && site != 0 {
                if !known(site) {
                    return true;
                }
                last = site;
            }
            false
        };
        self.full_sites.iter().any(|&site| check(site)) || self.kernel.iter().any(|e| check(e.site))
    }
}

/// The drain's side of the in-process source: copies the rings and remembers which
/// threads exited, so their rings can be freed.
///
/// The kernel hands an exited thread's tid out again, so a ring whose tid exited may
/// belong to a later thread with the same tid. A ring is freed only if its tid's
/// last thread exited with no thread of that tid started since (both as read from
/// the eBPF ring buffer by the previous pass), and the ring was already seen in an
/// earlier pass: a later thread's ring seen then was claimed after that thread
/// started, whose start the previous pass would have read. Rings of an exited
/// thread whose tid came back meanwhile wait for that tid's next exit.
pub(crate) struct RingReader {
    /// Tids whose last thread exited: their rings are freed once drained.
    exited: HashSet<u32>,
    /// Exits (true) and starts of the current pass, in order (effective from the
    /// next one).
    lifecycle_now: Vec<(u32, bool)>,
    /// Per ring: the tid it was first seen owned by, and the pass (0: not seen).
    first_seen: Vec<(u32, u64)>,
    pass: u64,
    /// Memory faulted in ahead for the copies (see `crate::prefault`).
    prefaulted: Option<PrefaultPool<Unit>>,
}

impl Default for RingReader {
    fn default() -> RingReader {
        RingReader {
            exited: HashSet::new(),
            lifecycle_now: Vec::new(),
            first_seen: vec![(0, 0); MAX_RINGS],
            pass: 0,
            prefaulted: None,
        }
    }
}

impl RingReader {
    /// A reader that copies into memory `pool` faulted in ahead, when it has some.
    pub(crate) fn with_pool(pool: Option<PrefaultPool<Unit>>) -> RingReader {
        RingReader {
            prefaulted: pool,
            ..RingReader::default()
        }
    }

    /// Starts a pass: copies the agent rings into `pass` and counts the pass
    /// (waiting agents see the drain is alive).
    /// The eBPF ring buffer is read next, into the same pass
    /// ([`RingReader::kernel_event`]).
    pub(crate) fn copy_rings(&mut self, mapping: &InprocMapping, pass: &mut RawPass) {
        for (tid, exit) in self.lifecycle_now.drain(..) {
            if exit {
                self.exited.insert(tid);
            } else {
                self.exited.remove(&tid);
            }
        }
        self.pass += 1;
        if mapping.tsc_start.is_some() || mapping.sparse_times() {
            pass.clock = Some(ClockPoint::now());
        }
        mapping.copy_rings(
            pass,
            &self.exited,
            &mut self.first_seen,
            self.pass,
            self.prefaulted.as_ref(),
        );
        mapping.header().passes.fetch_add(1, Ordering::Release);
    }

    /// The end of the recording: adds a `blocked` event for each thread still
    /// inside a blocking call (after [`RingReader::copy_rings`] of the last pass).
    pub(crate) fn pending_blocked(&mut self, mapping: &InprocMapping, pass: &mut RawPass) {
        mapping.pending_blocked(pass, mapping.now_stamp());
    }

    /// Adds an event from the eBPF ring buffer to the pass.
    pub(crate) fn kernel_event(&mut self, pass: &mut RawPass, e: RawEvent) {
        if e.kind == kind::THREAD_EXIT || e.kind == kind::THREAD_START {
            self.lifecycle_now
                .push((e.tid, e.kind == kind::THREAD_EXIT));
        }
        pass.kernel.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small generator of numbers below its argument, so that the tests need
    /// no crate and repeat.
    fn below() -> impl FnMut(u64) -> u64 {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        move |n| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        }
    }

    /// The drain's copy of a ring, in the pieces passes and the ring's wrap cut
    /// it into (at event boundaries, and at the wrap inside an event too),
    /// folds pairs, keeps every other unit and notes each site carried in
    /// full: decoded, the copy gives back exactly what the owner encoded, with
    /// or without folding.
    #[test]
    fn the_drains_copy_in_pieces_decodes_to_what_the_owner_encoded() {
        use ordo_probe_common::inproc::{Codec, DecodeState};
        use ordo_probe_common::{kind, via};
        let mut next = below();
        let codec = Codec::new();
        let (mut units, mut events, mut boundaries) = (Vec::new(), Vec::new(), vec![0]);
        let mut ts = 1_000u64;
        let mut seqs = [0u64; 16];
        let mut emit = |e: Event, units: &mut Vec<Unit>, events: &mut Vec<Event>| {
            let (encoded, n) = encode(&e, Some(codec.against(e.site)));
            units.extend_from_slice(&encoded[..n]);
            codec.note(&e, n, true);
            events.push(e);
            boundaries.push(units.len());
        };
        for _ in 0..20_000 {
            let object = next(16);
            let addr = 0x7fff_0000_1000 + 40 * object;
            let site = 0x5555_0000_2000 + 0x10 * next(40);
            ts += 1 + next(50);
            let seq = &mut seqs[object as usize];
            let lock = Event {
                ts,
                seq: *seq,
                addr,
                site,
                kind: kind::MUTEX_LOCK as u8,
                via: if next(6) == 0 { via::TRY } else { via::PLAIN },
                ..Event::default()
            };
            *seq += 1;
            match next(10) {
                // A lock and its release: a pair.
                0..=5 => {
                    ts += 1 + next(30);
                    let unlock = Event {
                        ts,
                        seq: *seq,
                        site: site + 8,
                        kind: kind::MUTEX_UNLOCK as u8,
                        via: via::PLAIN,
                        ..lock
                    };
                    *seq += 1;
                    emit(lock, &mut units, &mut events);
                    emit(unlock, &mut units, &mut events);
                }
                // A lone event, short or compact as the site cache has it.
                6 | 7 => emit(lock, &mut units, &mut events),
                // A compact event (a result), its second unit's `b` the site,
                // which may look like a short unit.
                8 => emit(
                    Event {
                        result: 0x4000,
                        site: 0x4000_0000_0000 | site,
                        ..lock
                    },
                    &mut units,
                    &mut events,
                ),
                // An extended one: a futex call.
                _ => emit(
                    Event {
                        kind: kind::FUTEX_WAKE as u8,
                        extra: 0x81 | 3 << 32,
                        ..lock
                    },
                    &mut units,
                    &mut events,
                ),
            }
        }
        let mut full_sites: Vec<u64> = Vec::new();
        let mut scan = SiteScan::default();
        for u in &units {
            if let Some(site) = scan.see(u) {
                if full_sites.last() != Some(&site) {
                    full_sites.push(site);
                }
            }
        }
        for folds in [true, false] {
            // Cuts at event boundaries as heads are published, and a few inside
            // an event where a ring would wrap.
            let mut cuts = vec![0];
            while *cuts.last().unwrap() < units.len() {
                let last = *cuts.last().unwrap();
                let cut = if next(8) == 0 {
                    last + 1 + next(7) as usize
                } else {
                    let b = boundaries.partition_point(|&b| b <= last + next(300) as usize);
                    boundaries[b.min(boundaries.len() - 1)].max(last + 1)
                };
                cuts.push(cut.min(units.len()));
            }
            let mut out = PassBuf::<Unit>::default();
            assert!(out.reserve_total(units.len()));
            let mut sites = Vec::new();
            let mut copy = RingCopy {
                scan: SiteScan::default(),
                sites: &mut sites,
                folds,
            };
            for piece in cuts.windows(2) {
                let piece = &units[piece[0]..piece[1]];
                out.append_streaming(piece.len(), |room| copy.copy(piece, room));
            }
            let pairs = out.iter().filter(|u| u.is_pair()).count();
            if folds {
                assert!(pairs > 8_000, "{pairs} pairs");
            } else {
                assert_eq!(&out[..], &units[..]);
            }
            let mut state = DecodeState::default();
            let mut rest = &out[..];
            let mut decoded = Vec::new();
            while let Some(d) = decode(rest, Some(&mut state)) {
                decoded.extend_from_slice(d.events());
                rest = &rest[d.units..];
            }
            assert!(rest.is_empty(), "{} units left over", rest.len());
            assert_eq!(decoded.len(), events.len());
            assert!(
                decoded == events,
                "folds {folds}: the copy decodes to other events"
            );
            assert!(sites == full_sites, "folds {folds}: other sites noted");
        }
    }

    #[test]
    fn merging_runs_gives_what_a_stable_sort_by_time_does() {
        let mut next = below();
        for round in 0..500 {
            let mut batch = Vec::new();
            let mut runs = Vec::new();
            for run in 0..1 + next(6) {
                // Few distinct times, so that runs tie often.
                let mut ts = next(4);
                let start = batch.len();
                for _ in 0..next(8) {
                    ts += next(3);
                    let seq = batch.len() as u64;
                    batch.push(RawEvent {
                        ts_ns: ts,
                        seq,
                        tid: run as u32,
                        ..RawEvent::default()
                    });
                }
                runs.push((start, batch.len()));
            }
            let mut merged = Vec::new();
            merge_runs(&batch, &mut runs, &mut |e| merged.push(e.seq));
            let mut sorted = batch.clone();
            sorted.sort_by_key(|e| e.ts_ns);
            let sorted: Vec<u64> = sorted.iter().map(|e| e.seq).collect();
            assert_eq!(merged, sorted, "round {round}");
        }
    }
    use ordo_probe_common::inproc::Codec;

    /// The events the merger releases for passes that carry `events` (ring,
    /// tid, event), each pass cut after every `cut`th event, a `blocked` event
    /// the recorder adds in the middle.
    fn merged(events: &[(u32, u32, Event)], short: bool, cut: usize) -> Vec<RawEvent> {
        let mut owners: HashMap<u32, Codec> = HashMap::new();
        let mut merger = Merger::default();
        let mut out = Vec::new();
        for (k, chunk) in events.chunks(cut).enumerate() {
            let mut pass = RawPass::default();
            // One batch per ring, in ring order, as the drain copies them.
            let mut rings: Vec<u32> = chunk.iter().map(|e| e.0).collect();
            rings.sort();
            rings.dedup();
            for ring in rings {
                let mut units = Vec::new();
                let mut tid = 0;
                for (_, t, e) in chunk.iter().filter(|e| e.0 == ring) {
                    // As the agent's `emit` does.
                    let codec = owners.entry(ring).or_default();
                    let (encoded, n) = encode(e, short.then(|| codec.against(e.site)));
                    units.extend_from_slice(&encoded[..n]);
                    codec.note(e, n, short);
                    tid = *t;
                }
                assert!(pass.records.reserve_total(pass.records.len() + units.len()));
                pass.records.extend_from_slice(&units);
                pass.batches.push(Batch {
                    tid,
                    ring,
                    end: pass.records.len(),
                });
            }
            if k == events.len().div_ceil(cut) / 2 {
                push_event(
                    &mut pass,
                    99,
                    Event {
                        ts: 5,
                        addr: 0x10,
                        site: chunk[0].2.site,
                        extra: kind::MUTEX_LOCK as u64,
                        kind: kind::BLOCKED as u8,
                        ..Event::default()
                    },
                );
            }
            pass.all = k == events.len().div_ceil(cut) - 1;
            merger.take_pass(&pass, &mut |e| out.push(*e));
        }
        out
    }

    #[test]
    fn short_units_merge_into_the_events_wide_ones_do() {
        let mut events = Vec::new();
        let mut ts = 1_000u64;
        for i in 0..3_000u64 {
            // Ring 0 is thread 7's, then (from event 2 000) thread 8's, which
            // takes the ring over with its state; ring 3 is thread 9's.
            let (ring, tid) = match i % 3 {
                0 | 1 => (0, if i < 2_000 { 7 } else { 8 }),
                _ => (3, 9),
            };
            ts += if i % 500 == 499 { 1 << 31 } else { 1 + i % 4 };
            events.push((
                ring,
                tid,
                Event {
                    ts,
                    seq: i,
                    addr: 0x7f00_0000_0000 + (i % 17) * 64,
                    site: 0x5555_0000_0000 + (i % 300) * 24,
                    kind: [kind::MUTEX_LOCK, kind::MUTEX_UNLOCK][i as usize % 2] as u8,
                    result: if i % 97 == 0 { 16 } else { 0 },
                    ..Event::default()
                },
            ));
        }
        for cut in [1, 7, 700, 3_000] {
            let wide = merged(&events, false, cut);
            assert_eq!(wide.len(), events.len() + 1);
            assert_eq!(merged(&events, true, cut), wide, "passes of {cut}");
        }
    }
}
