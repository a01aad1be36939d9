//! In-process recording: each interposed call becomes one [`Event`] — one
//! 16-byte ring unit when the event repeats a call site the ring knows, two
//! when it is otherwise compact, four for the rare event that is not
//! ([`encode`]) — in the calling thread's ring, in a mapping the recorder owns.
//!
//! - **Rings**: a thread claims a free ring on its first event (compare-exchange on
//!   the ring's state) and is its only producer; the recorder's drain is the only
//!   consumer. Publishing is a release store of `head`; the drain's acquire load of
//!   it makes the record visible, so whatever a crashing or SIGKILLed program
//!   published stays readable in the recorder's mapping. Each publication fetches
//!   the ring's line two lines ahead for writing ([`prefetch_for_write`]), so an
//!   event's store does not miss where the program's next locked instruction
//!   would wait for it.
//! - **Order**: a per-object sequence number from a shared table of atomic counters
//!   (open addressing keyed by address), taken at the moment the call takes effect —
//!   a release or wake before the real call, an acquisition after it returns — the
//!   same rule as the eBPF probes', so the order of events on one object is exact.
//! - **Time**: the time stamp counter (`rdtsc`, ~10 ns) when the recorder asks for
//!   it (the kernel's clocksource is the TSC and no watches are recorded); the
//!   recorder converts it to CLOCK_MONOTONIC, the clock `bpf_ktime_get_ns` reads,
//!   so a thread's agent and eBPF events interleave by time. Otherwise
//!   CLOCK_MONOTONIC through the vDSO (~27 ns). Taken when the number is
//!   ([`stamp_now`], [`emit_at`]): a release before its call, an acquisition
//!   after, so across threads the times agree with the order.
//! - **Nothing silently lost**: a full ring rings the drain's doorbell (a futex in
//!   the mapping) and waits for room as long as the drain keeps making passes; only
//!   when it made none for [`FULL_WAIT_NS`] (the recorder is gone) is the event
//!   counted in the ring's `dropped`.
//! - **fork/exec**: a forked child stops recording (the atfork handler) and is
//!   counted in `Header::forks`; the mapping's descriptor was closed at start-up
//!   and the environment restored, so an exec'd image has no agent.

use std::cell::Cell;
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU8, Ordering::*};

use crate::probe_common::inproc::*;
use crate::probe_common::{kind, via};
use crate::{clock_gettime, futex, futex_wait_ns, getpid, pthread_atfork, tid, FUTEX_WAKE};

static HEADER: AtomicPtr<Header> = AtomicPtr::new(null_mut());
/// The per-object sequence counters ([`seq_slot`]): private memory of this
/// process in transparent huge pages when it can have them, else the table in
/// the recorder's mapping.
static SEQ_TABLE: AtomicPtr<SeqSlot> = AtomicPtr::new(null_mut());
static RECORDING: AtomicBool = AtomicBool::new(false);
/// How this recording writes events ([`WRITES_TSC`], [`WRITES_SPARSE`],
/// [`WRITES_SHORT`]), set before [`RECORDING`]: one byte, so [`emit`] reads all
/// three with one load (each atomic load is an instruction the compiler may not
/// merge with another).
static WRITES: AtomicU8 = AtomicU8::new(0);
/// Records carry TSC ticks rather than nanoseconds (`Header::clock`).
const WRITES_TSC: u8 = 1;
/// The clock is read sparsely ([`CLOCK_SPARSE`]).
const WRITES_SPARSE: u8 = 2;
/// Events are written as short units where they can be (`Header::short_units`).
const WRITES_SHORT: u8 = 4;

const NO_RING: u32 = u32::MAX;

/// How many recordings this process has started ([`start`]): 1 for a launched
/// one; one more each time a recorder attaches to the running process again,
/// with a new mapping.
static ATTACHMENT: AtomicU32 = AtomicU32::new(0);

/// The calling thread's ring in the current recording, [`NO_RING`] if none yet.
#[inline(always)]
fn my_ring() -> u32 {
    my_ring_in(ATTACHMENT.load(Relaxed))
}

/// The calling thread's ring if it was claimed in `attachment`, else [`NO_RING`].
#[inline(always)]
fn my_ring_in(attachment: u32) -> u32 {
    let mine = RING.with(|r| r.get());
    if mine.attachment == attachment {
        mine.ring
    } else {
        NO_RING
    }
}

/// Makes `i` the calling thread's ring in the current recording (with no room
/// known in it yet).
fn set_my_ring(i: u32) {
    RING.with(|r| {
        r.set(MyRing {
            ring: i,
            attachment: ATTACHMENT.load(Relaxed),
            room_until: 0,
        })
    });
}

/// How far the calling thread's ring is known to have room: [`publish`] may
/// write while its `head` after the write stays at or below this, without
/// reading the ring's `tail`.
///
/// Why: the drain writes `tail` after each pass, so reading it was a load of
/// another CPU's line on every event; with the last `tail` read kept here, the
/// owner reads it again about once every half ring ([`make_room`]).
#[inline(always)]
fn room_until() -> u64 {
    RING.with(|r| r.get().room_until)
}

/// Notes that the ring has room up to `head` `until` ([`room_until`]).
#[inline(always)]
fn set_room_until(until: u64) {
    RING.with(|r| {
        let mut mine = r.get();
        mine.room_until = until;
        r.set(mine)
    });
}

/// What [`RING`] holds.
#[derive(Clone, Copy)]
struct MyRing {
    /// The ring, [`NO_RING`] until the thread's first event.
    ring: u32,
    /// The [`ATTACHMENT`] it was claimed in (a ring of an earlier one is not
    /// this thread's any more).
    attachment: u32,
    /// See [`room_until`].
    room_until: u64,
}

thread_local! {
    /// This thread's ring ([`MyRing`]).
    static RING: Cell<MyRing> = const {
        Cell::new(MyRing {
            ring: NO_RING,
            attachment: 0,
            room_until: 0,
        })
    };
    /// A wait for room timed out (the drain is gone or far behind): drop without
    /// waiting until the ring has room again.
    static GAVE_UP: Cell<bool> = const { Cell::new(false) };
    /// With sparse time stamps: this thread's last time stamp (0: none yet), how
    /// many events in a row have taken it plus one tick since the clock was read,
    /// and the [`ATTACHMENT`] it was taken in (a stamp of an earlier one may be
    /// minutes old).
    static LAST_STAMP: Cell<(u64, u32, u32)> = const { Cell::new((0, 0, 0)) };
}

/// The switch [`on`] reads: an attached recorder clears it to detach
/// (`crate::attach`).
pub(crate) fn switch() -> *const AtomicBool {
    &RECORDING
}

/// Whether this process records (checked first by every wrapper).
#[inline(always)]
pub(crate) fn on() -> bool {
    RECORDING.load(Relaxed)
}

/// Maps the recorder's mapping (descriptor `fd`) and starts recording here.
///
/// # Safety
/// Once, at start-up (before the program's threads run): `fd` must be negative or
/// the agent's own descriptor of the recorder's mapping ([`mapping_size`] bytes,
/// laid out as [`Header`] says), which it takes over and closes.
pub(crate) unsafe fn start(fd: c_int) {
    // SAFETY: the caller's descriptor, of a file of that size (its contract).
    let Some(p) = (unsafe { crate::map_shared(fd, mapping_size()) }) else {
        return;
    };
    // SAFETY: the mapping starts with the header (checked just below: magic and
    // version) and is never unmapped.
    let header = unsafe { &*(p as *const Header) };
    if header.magic != MAGIC || header.version != VERSION {
        crate::die("the recording mapping has the wrong layout (ordo and its agent differ)");
    }
    // Only the first process to load the agent records.
    if header
        .target_pid
        // SAFETY: getpid has no preconditions.
        .compare_exchange(0, unsafe { getpid() } as u32, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    ATTACHMENT.fetch_add(1, Relaxed);
    HEADER.store(p.cast(), Release);
    // SAFETY: the table lies inside the mapping, which is never unmapped.
    let shared_table = unsafe { (p as *mut u8).add(seq_table_offset()) as *mut SeqSlot };
    SEQ_TABLE.store(private_seq_table().unwrap_or(shared_table), Release);
    let mut writes = 0;
    if header.clock & CLOCK_UNIT == CLOCK_TSC {
        writes |= WRITES_TSC;
    }
    if header.clock & CLOCK_SPARSE != 0 {
        writes |= WRITES_SPARSE;
    }
    if header.short_units != 0 {
        writes |= WRITES_SHORT;
    }
    WRITES.store(writes, Relaxed);
    // SAFETY: registers a child handler that only touches atomics.
    unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    RECORDING.store(true, Release);
    header.attached.store(1, Release);
    // Let the recorder read our modules while they are all mapped: wake it and wait.
    // On a loaded machine the recorder's drain can take far longer than usual to
    // get there, and a program that went on and exited meanwhile would leave its
    // code unsymbolized: wait while the recorder lives, up to a bound that only a
    // stopped recorder reaches (and then say so in the header).
    ring_doorbell();
    wait_for_modules_read(header);
}

/// Waits until the recorder has read the program's modules, it is gone, or
/// [`MODULES_WAIT_MS`] have passed; records a wait that gave up.
fn wait_for_modules_read(header: &Header) {
    const SLICE_MS: u32 = 10;
    let mut waited_ms = 0;
    while header.modules_read.load(Acquire) == 0 {
        // SAFETY: kill with signal 0 only checks that the process exists.
        let recorder_gone = header.recorder_pid != 0
            && unsafe { crate::kill(header.recorder_pid as c_int, 0) } != 0
            && crate::errno() == ESRCH;
        if recorder_gone || waited_ms >= MODULES_WAIT_MS {
            header.modules_waited_out.store(waited_ms.max(1), Release);
            return;
        }
        // SAFETY: a futex word in the mapping, which is never unmapped.
        unsafe { futex_wait_ns(&header.modules_read, 0, i64::from(SLICE_MS) * 1_000_000) };
        waited_ms += SLICE_MS;
    }
}

/// The longest the agent's start-up waits for the recorder to read the modules.
const MODULES_WAIT_MS: u32 = 10_000;
const ESRCH: c_int = 3;

/// The sequence table in memory of this process's own, zeroed, made once and
/// emptied for each later attachment; in 4-KiB pages until the program has used
/// [`HUGE_AFTER_OBJECTS`] objects, then collapsed into transparent huge pages
/// ([`collapse_seq_table`]).
///
/// Every recorded event looks up its object's counter at a hashed place in a
/// 16-MiB table: memcached's 8 192 item locks each sit on a page of their own,
/// and the lookup's load was half of the agent's time in `pthread_mutex_lock`
/// (perf annotate) — a TLB miss nearly every event with 4-KiB pages (4 096 of
/// them), 8 huge pages instead. But huge pages from the start made every object
/// of a short program fault in and zero a 2-MiB page of its own (~4 ms of a
/// 20-ms recording of a 1-ms program, and 20 ns more an uncontended lock/unlock
/// pair), while a handful of objects' pages fit the TLB anyway. The recorder's
/// mapping is shared memory, which the kernel here gives no huge pages
/// (`shmem_enabled` is `never`).
fn private_seq_table() -> Option<*mut SeqSlot> {
    let len = SEQ_SLOTS * std::mem::size_of::<SeqSlot>();
    let made = PRIVATE_TABLE.load(Acquire);
    OBJECTS.store(0, Relaxed);
    if !made.is_null() {
        // Another attachment: every thread is stopped (ordo_attach's contract),
        // so the counters start again from zero as in a new mapping.
        // SAFETY: our own private mapping of `len` bytes; advice only.
        unsafe {
            crate::madvise(made.cast(), len, MADV_DONTNEED);
            crate::madvise(made.cast(), len, MADV_NOHUGEPAGE);
        }
        return Some(made);
    }
    // A huge page's alignment: allocate one more and start at the first boundary.
    const HUGE: usize = 2 << 20;
    // SAFETY: a new private anonymous mapping; no existing memory changes.
    let p = unsafe {
        crate::mmap(
            null_mut(),
            len + HUGE,
            3,    /* PROT_READ|PROT_WRITE */
            0x22, /* MAP_PRIVATE|MAP_ANONYMOUS */
            -1,
            0,
        )
    };
    if p as isize == -1 {
        return None;
    }
    let aligned = (p as usize).next_multiple_of(HUGE) as *mut SeqSlot;
    // Small pages even where the system's default is huge ones (see above).
    // SAFETY: inside the mapping just made; advice only.
    unsafe { crate::madvise(aligned.cast(), len, MADV_NOHUGEPAGE) };
    PRIVATE_TABLE.store(aligned, Release);
    Some(aligned)
}

/// The private sequence table, once made.
static PRIVATE_TABLE: AtomicPtr<SeqSlot> = AtomicPtr::new(null_mut());
/// Objects given a counter in this attachment so far.
static OBJECTS: AtomicU32 = AtomicU32::new(0);
/// Objects after which the private table goes to huge pages: by then their 4-KiB
/// pages no longer fit the TLB (64 first-level and 1 536 second-level entries
/// on this machine's CPUs).
const HUGE_AFTER_OBJECTS: u32 = 512;
const MADV_DONTNEED: c_int = 4;
const MADV_HUGEPAGE: c_int = 14;
const MADV_NOHUGEPAGE: c_int = 15;
const MADV_COLLAPSE: c_int = 25;

/// Counts an object that took a counter; the [`HUGE_AFTER_OBJECTS`]th moves the
/// private table into huge pages.
#[cold]
fn object_added(table: *const SeqSlot) {
    if OBJECTS.fetch_add(1, Relaxed) + 1 == HUGE_AFTER_OBJECTS
        && table == PRIVATE_TABLE.load(Relaxed).cast_const()
    {
        collapse_seq_table(table);
    }
}

/// Moves the private table into huge pages: allowed from now on for new faults,
/// and the pages already in collapsed at once (`MADV_COLLAPSE`, Linux 6.1: the
/// kernel copies them under its page-table locks, so other threads' counters
/// carry on unchanged; ~16 MiB zeroed and copied once). On a kernel without it
/// the allowance alone lets `khugepaged` collapse them in its own time.
fn collapse_seq_table(table: *const SeqSlot) {
    let len = SEQ_SLOTS * std::mem::size_of::<SeqSlot>();
    // SAFETY: advice on our own private mapping of `len` bytes.
    keeping_errno(|| unsafe {
        crate::madvise(table.cast_mut().cast(), len, MADV_HUGEPAGE);
        crate::madvise(table.cast_mut().cast(), len, MADV_COLLAPSE);
    });
}

unsafe extern "C" fn after_fork_in_child() {
    if RECORDING.swap(false, Relaxed) {
        header().forks.fetch_add(1, Relaxed);
    }
}

#[inline(always)]
fn header() -> &'static Header {
    // SAFETY: set once before RECORDING, never unmapped.
    unsafe { &*HEADER.load(Relaxed) }
}

#[inline(always)]
fn base() -> *mut u8 {
    HEADER.load(Relaxed).cast()
}

#[inline(always)]
fn ring_header(i: u32) -> &'static RingHeader {
    // SAFETY: i < MAX_RINGS; the mapping holds every ring header.
    unsafe { &*(base().add(ring_header_offset(i as usize)) as *const RingHeader) }
}

#[inline(always)]
fn ring_units(i: u32) -> *mut Unit {
    // SAFETY: as above.
    unsafe { base().add(ring_records_offset(i as usize)).cast() }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: a valid timespec; the vDSO answers without a syscall.
    unsafe {
        clock_gettime(1 /* CLOCK_MONOTONIC */, &mut ts)
    };
    ts[0] as u64 * 1_000_000_000 + ts[1] as u64
}

/// A record's time stamp, in the unit of `Header::clock` (`writes`: [`WRITES`]).
#[inline(always)]
fn stamp(writes: u8) -> u64 {
    if writes & WRITES_TSC != 0 {
        // SAFETY: rdtsc has no preconditions (the recorder chose this clock only
        // where the kernel itself uses the TSC).
        unsafe { std::arch::x86_64::_rdtsc() }
    } else {
        now_ns()
    }
}

/// Whether an event of `kind` (by way of `via`, on `addr`) cannot have waited
/// since the calling thread's previous event: it neither blocks nor follows a
/// call that blocked. Only such events may skip reading the clock ([`CLOCK_SPARSE`]).
#[inline(always)]
fn cannot_have_waited(kind: u16, via: u8, addr: u64) -> bool {
    match kind {
        kind::MUTEX_UNLOCK
        | kind::COND_SIGNAL
        | kind::COND_BROADCAST
        | kind::RWLOCK_UNLOCK
        | kind::SEM_POST
        | kind::FUTEX_WAKE => true,
        kind::MUTEX_LOCK
        | kind::MUTEX_LOCK_FAILED
        | kind::RWLOCK_RDLOCK
        | kind::RWLOCK_WRLOCK
        | kind::RWLOCK_LOCK_FAILED
        | kind::SEM_WAIT
        | kind::SEM_WAIT_FAILED
            if via == via::TRY =>
        {
            true
        }
        // glibc's lock word is 1 for a mutex taken without contention and 2 once
        // a thread had to wait for it (which may have been this one); owner-based
        // mutexes (robust, priority-inheriting) hold a tid: the clock is read.
        // SAFETY: `addr` is the mutex this thread has just locked, a valid and
        // aligned pthread_mutex_t that starts with that word.
        kind::MUTEX_LOCK if via == via::PLAIN => unsafe {
            (*(addr as *const core::sync::atomic::AtomicI32)).load(Relaxed) == 1
        },
        _ => false,
    }
}

/// An event's time stamp: the clock, or with [`CLOCK_SPARSE`] the thread's previous
/// stamp plus one tick when the event cannot have waited and the run of such
/// stamps is shorter than [`SPARSE_RUN`].
#[inline(always)]
fn event_stamp(writes: u8, kind: u16, via: u8, addr: u64) -> u64 {
    if writes & WRITES_SPARSE == 0 {
        return stamp(writes);
    }
    sparse_stamp(writes, kind, via, addr)
}

/// [`event_stamp`] with [`CLOCK_SPARSE`]: out of line, so that the wrappers'
/// path with exact times (the default) stays short in the instruction cache.
#[inline(never)]
fn sparse_stamp(writes: u8, kind: u16, via: u8, addr: u64) -> u64 {
    sparse_stamp_in(ATTACHMENT.load(Relaxed), writes, kind, via, addr)
}

/// A sparse stamp of an event in `attachment`: [`sparse_step`], else
/// [`sparse_clock`]. In line, so that where `kind` and `via` are constants
/// ([`Lane::stamp`]) only the event's own test is left of [`cannot_have_waited`].
#[inline(always)]
fn sparse_stamp_in(attachment: u32, writes: u8, kind: u16, via: u8, addr: u64) -> u64 {
    sparse_step(attachment, cannot_have_waited(kind, via, addr))
        .unwrap_or_else(|| sparse_clock(writes, attachment))
}

/// The rule of [`CLOCK_SPARSE`] without the clock: the thread's previous stamp
/// plus one tick, if the event `may_skip` the clock ([`cannot_have_waited`]),
/// the previous stamp was taken in the same `attachment` and the run of such
/// stamps is shorter than [`SPARSE_RUN`]; otherwise none, and the caller reads
/// the clock ([`sparse_clock`]).
#[inline(always)]
fn sparse_step(attachment: u32, may_skip: bool) -> Option<u64> {
    let (last, run, stamped_in) = LAST_STAMP.with(|s| s.get());
    if may_skip && last != 0 && stamped_in == attachment && run < SPARSE_RUN {
        LAST_STAMP.with(|s| s.set((last + 1, run + 1, attachment)));
        return Some(last + 1);
    }
    None
}

/// The clock's read with [`CLOCK_SPARSE`], where [`sparse_step`] gave none: it
/// starts a new run in `attachment`. Cold, so that the step stays short where
/// it is in line ([`Lane::stamp`]).
#[cold]
#[inline(never)]
fn sparse_clock(writes: u8, attachment: u32) -> u64 {
    let now = stamp(writes);
    LAST_STAMP.with(|s| s.set((now, 0, attachment)));
    now
}

/// The next sequence number of the object at `addr`.
#[inline(always)]
pub(crate) fn next_seq(addr: u64) -> u64 {
    match seq_slot(addr) {
        Some(slot) => slot.next.fetch_add(1, AcqRel),
        None => 0,
    }
}

/// The next sequence number of a mutex the calling thread holds (taken after its
/// lock returned, or before its unlock): every holder's number is taken inside the
/// mutex, whose acquisition and release order them, so a plain read-modify-write
/// does — without the `lock` prefix, which costs ~9 ns here, a tenth of a recorded
/// lock/unlock pair. (A program that unlocks a mutex it does not hold races on
/// the counter as on the mutex: a duplicated number costs order precision only.)
#[inline(always)]
pub(crate) fn next_seq_held(addr: u64) -> u64 {
    let Some(slot) = seq_slot(addr) else {
        return 0;
    };
    let mut n: u64 = 1;
    // SAFETY: `next` is a valid, aligned u64 in the mapping; the mutex orders every
    // access to it (see above), so the unlocked exchange-and-add is not torn by
    // another thread's.
    unsafe {
        std::arch::asm!(
            "xadd qword ptr [{p}], {n}",
            p = in(reg) slot.next.as_ptr(),
            n = inout(reg) n,
            options(nostack),
        )
    };
    n
}

/// Fetches the line of the counter at `addr`'s home ahead ([`prefetch_for_write`]),
/// so that its miss overlaps the real call's.
#[inline(always)]
pub(crate) fn prefetch_counter(addr: u64) {
    prefetch_for_write((SEQ_TABLE.load(Relaxed) as *const SeqSlot).wrapping_add(seq_home(addr)));
}

/// Fetches the line of the calling thread's site dictionary where an event at
/// `site` will be looked up (`Codec::against`), so that a wrapper's miss on it
/// overlaps the real call rather than following it. The dictionary's 32
/// lines are the owner's alone, but the program's own data evicts those of
/// sites it calls rarely.
#[inline(always)]
pub(crate) fn prefetch_site(site: u64) {
    prefetch_site_in(my_ring(), site);
}

/// [`prefetch_site`] in ring `i` ([`NO_RING`]: none to fetch).
#[inline(always)]
fn prefetch_site_in(i: u32, site: u64) {
    if i != NO_RING {
        prefetch_for_write(&ring_header(i).codec.0.sites[site_set(site)]);
    }
}

/// The counter slot of the object at `addr` (`None`, counted, when the table is full).
///
/// Where it looks: first at the object's *home*, one slot for every 32 bytes
/// of the address space ([`seq_home`]), so the counters of objects that lie
/// side by side lie side by side too — memcached's 8 192 item locks, an array
/// of 40-byte mutexes, take 160 KiB of the table, three counters to a cache
/// line, where a hashed place gave each a line of its own somewhere in 16 MiB;
/// its LRU maintainer's trylocks, which meet those locks at random, missed the
/// cache on the counter as well as on the mutex (the counter's load was 82 %
/// of the trylock wrapper's samples in a `perf` of memcached under load, 35 %
/// with homes; the agent's share of memcached's CPU time an operation fell by a
/// fifth). When another object holds the home (two within 32 bytes: an array of
/// 4-byte futex words), the search goes on at a place hashed from the address
/// ([`seq_overflow`]), so dense small objects spread over the table rather than
/// pile up around their homes and push their neighbours' counters away.
#[inline(always)]
fn seq_slot(addr: u64) -> Option<&'static SeqSlot> {
    let table = SEQ_TABLE.load(Relaxed) as *const SeqSlot;
    // SAFETY: the home is masked into the table.
    let home = unsafe { &*table.add(seq_home(addr)) };
    if home.key.load(Acquire) == addr {
        return Some(home);
    }
    seq_slot_claimed_or_elsewhere(addr, table, home)
}

/// [`seq_slot`] when the home does not hold the object's counter yet, or holds
/// another's: out of line, so that the common case stays short in every wrapper.
#[cold]
#[inline(never)]
fn seq_slot_claimed_or_elsewhere(
    addr: u64,
    table: *const SeqSlot,
    home: &'static SeqSlot,
) -> Option<&'static SeqSlot> {
    if let Some(slot) = find_or_claim(home, addr, table) {
        return Some(slot);
    }
    let mask = SEQ_SLOTS - 1;
    let (mut i, step) = seq_overflow(addr);
    for _ in 0..SEQ_PROBES {
        // SAFETY: i is masked into the table.
        let slot = unsafe { &*table.add(i) };
        if let Some(slot) = find_or_claim(slot, addr, table) {
            return Some(slot);
        }
        i = (i + step) & mask;
    }
    header().seq_full.fetch_add(1, Relaxed);
    None
}

/// Places an object's counter may be looked for after its home.
const SEQ_PROBES: usize = 63;

/// The object's home slot: its address in 32-byte units, folded into the table
/// by XOR with the address's higher bits, so that the objects of one 32-MiB
/// region keep their order and distances and regions 32 MiB apart do not land
/// on each other. No two synchronization objects start within the same 32
/// bytes but futex words (4 bytes), which overflow.
#[inline(always)]
fn seq_home(addr: u64) -> usize {
    ((addr >> 5) ^ (addr >> 25)) as usize & (SEQ_SLOTS - 1)
}

/// Where the search goes on when the home is another object's, and by what
/// stride: both hashed from the address (double hashing; the stride is odd, so
/// the search can reach every slot). Not one slot after another: homes of dense
/// objects make runs of full slots, and a search that started inside one would
/// find only full slots.
#[inline(always)]
fn seq_overflow(addr: u64) -> (usize, usize) {
    let h = addr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (
        (h >> 44) as usize & (SEQ_SLOTS - 1),
        (h >> 24) as usize & (SEQ_SLOTS - 1) | 1,
    )
}

/// `slot` if it is the object's or was free and is now (claimed with a
/// compare-exchange, so two threads adding one object agree); `None` if it is
/// another object's.
#[inline(always)]
fn find_or_claim(
    slot: &'static SeqSlot,
    addr: u64,
    table: *const SeqSlot,
) -> Option<&'static SeqSlot> {
    let key = slot.key.load(Acquire);
    if key == addr {
        return Some(slot);
    }
    if key != 0 {
        return None;
    }
    match slot.key.compare_exchange(0, addr, AcqRel, Acquire) {
        Ok(_) => {
            object_added(table);
            Some(slot)
        }
        Err(k) if k == addr => Some(slot),
        Err(_) => None,
    }
}

/// Claims a free ring for the calling thread.
#[cold]
fn claim_ring() -> u32 {
    let h = header();
    for i in 0..MAX_RINGS as u32 {
        let r = ring_header(i);
        if r.state.0.load(Relaxed) == RING_FREE
            && r.state
                .0
                .compare_exchange(RING_FREE, RING_OWNED, Acquire, Relaxed)
                .is_ok()
        {
            // Visible to the drain before any record: it reads `head` (released
            // after each record) before `tid`.
            r.tid.store(tid(), Relaxed);
            // A cancelled thread may have left its blocking call without clearing it.
            r.pending.0.kind.store(0, Relaxed);
            h.rings_used.fetch_max(i + 1, AcqRel);
            // Fault the ring's start in now, once, rather than a page every 128
            // events on the program's path (the recorder pre-allocates the pages of
            // the rings next in line, so this mostly fills page tables). Only the
            // start: the whole ring (12 MiB then, 2 MiB now) per new thread made a
            // program creating 200 short threads take 4 s instead of 0.1 s; the rest
            // faults in as a busy thread writes it.
            // SAFETY: the ring lies inside our mapping.
            keeping_errno(|| unsafe {
                crate::madvise(
                    ring_units(i).cast(),
                    RING_UNITS.min(RING_START_UNITS) * std::mem::size_of::<Unit>(),
                    23, /* MADV_POPULATE_WRITE */
                )
            });
            return i;
        }
    }
    NO_RING
}

/// Claims a ring; when every ring is taken, waits for the drain to free one (it
/// frees the rings of exited threads once they are drained: a program churning
/// through short threads can get ahead of it on a loaded machine) for as long as
/// it keeps making passes, as a full ring waits for room ([`wait_for_drain`]).
/// The caller counts the event in `no_ring` when none came.
#[cold]
fn claim_ring_waiting() -> u32 {
    let mut i = claim_ring();
    if i != NO_RING {
        return i;
    }
    let claimed = wait_for_drain(
        || {
            i = claim_ring();
            i != NO_RING
        },
        || {
            ring_doorbell();
            // A 1 ms sleep: nobody wakes this word.
            let asleep = AtomicU32::new(0);
            // SAFETY: a valid futex word that outlives the call.
            unsafe { futex_wait_ns(&asleep, 0, 1_000_000) };
        },
    );
    if claimed {
        i
    } else {
        NO_RING
    }
}

/// Waits until `ready` for as long as the drain keeps making passes (it may be
/// starved of CPU: it runs at idle priority): checks, `nap`s, checks again. Gives
/// up when the drain made no pass for [`FULL_WAIT_NS`] (the recorder is gone), and
/// from then on at once (`GAVE_UP`) until the thread's ring has room again.
#[cold]
fn wait_for_drain(ready: impl FnMut() -> bool, nap: impl FnMut()) -> bool {
    keeping_errno(|| wait_for_drain_unguarded(ready, nap))
}

/// The loop of [`wait_for_drain`], which may change `errno`.
fn wait_for_drain_unguarded(mut ready: impl FnMut() -> bool, mut nap: impl FnMut()) -> bool {
    if GAVE_UP.with(|g| g.get()) {
        return false;
    }
    let h = header();
    let mut passes = h.passes.load(Acquire);
    let mut deadline = now_ns() + FULL_WAIT_NS;
    loop {
        if ready() {
            return true;
        }
        nap();
        if ready() {
            return true;
        }
        let now = now_ns();
        let seen = h.passes.load(Acquire);
        if seen != passes {
            passes = seen;
            deadline = now + FULL_WAIT_NS;
        } else if now > deadline {
            GAVE_UP.with(|g| g.set(true));
            return false;
        }
    }
}

/// Wakes the drain if it sleeps.
#[cold]
fn ring_doorbell() {
    let h = header();
    h.doorbell.fetch_add(1, Release);
    if h.drain_sleeping.load(Acquire) != 0 {
        // SAFETY: a futex word in the shared mapping.
        keeping_errno(|| unsafe { futex(&h.doorbell, FUTEX_WAKE, u32::MAX) });
    }
}

/// Runs `f`, a rare path of the recording that makes system calls, and gives
/// the program its `errno` back: the wrappers' common paths make none, so they
/// need not save it (two calls of libc's `__errno_location` an acquisition).
#[inline(always)]
fn keeping_errno<T>(f: impl FnOnce() -> T) -> T {
    let saved = crate::errno();
    let r = f();
    crate::set_errno(saved);
    r
}

/// The ring has no room for `units` more: wake the drain and wait for room
/// ([`wait_for_drain`]).
#[cold]
fn wait_for_room(r: &RingHeader, head: u64, units: u64) -> bool {
    let room = || head + units - r.tail.0.load(Acquire) <= RING_UNITS as u64;
    wait_for_drain(room, || {
        // Set before the last look, so the drain's clear-and-wake cannot fall
        // between that look and the sleep.
        r.waiting.store(1, SeqCst);
        ring_doorbell();
        if !room() {
            // SAFETY: a futex word in the shared mapping; the drain clears and wakes it.
            unsafe { futex_wait_ns(&r.waiting as *const AtomicU32, 1, 10_000_000) };
        }
    })
}

/// Appends one event to the calling thread's ring, stamped now ([`emit_at`]).
#[inline(always)]
pub(crate) fn emit(kind: u16, via: u8, addr: u64, site: u64, seq: u64, extra: u64, result: i32) {
    emit_at(
        stamp_now(kind, via, addr),
        kind,
        via,
        addr,
        site,
        seq,
        extra,
        result,
    )
}

/// The time stamp of an event of `kind` (by way of `via`, on `addr`) taken now,
/// for [`emit_at`].
#[inline(always)]
pub(crate) fn stamp_now(kind: u16, via: u8, addr: u64) -> u64 {
    event_stamp(WRITES.load(Relaxed), kind, via, addr)
}

/// Appends one event, stamped `ts` ([`stamp_now`]), to the calling thread's
/// ring, in one, two or four units ([`encode`]), and updates the ring's
/// [`Codec`] as the recorder's copy of it expects (`DecodeState::note`).
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the event's fields, inlined into each wrapper rather than built on its stack"
)]
pub(crate) fn emit_at(
    ts: u64,
    kind: u16,
    via: u8,
    addr: u64,
    site: u64,
    seq: u64,
    extra: u64,
    result: i32,
) {
    let mut i = my_ring();
    if i == NO_RING {
        i = claim_ring_waiting();
        if i == NO_RING {
            header().no_ring.fetch_add(1, Relaxed);
            return;
        }
        set_my_ring(i);
    }
    write_event(
        i,
        WRITES.load(Relaxed),
        Event {
            ts,
            seq,
            addr,
            site,
            extra,
            result,
            kind: kind as u8,
            via,
        },
    );
}

/// Writes `event` into ring `i`, this thread's in the current recording,
/// as [`emit_at`] says (`writes`: [`WRITES`]).
#[inline(always)]
fn write_event(i: u32, writes: u8, event: Event) {
    let r = ring_header(i);
    let short = writes & WRITES_SHORT != 0;
    // The common case, one short unit, goes without `encode`'s four zeroed
    // units (their stores showed in a `perf` of the recorded lock/unlock pair).
    match short
        .then(|| r.codec.0.against(event.site))
        .and_then(|against| encode_short(&event, against))
    {
        Some(unit) => publish(i, r, &[unit], &event, short),
        None => publish_long(i, r, event, short),
    }
}

/// The recording as one event's path reads it, looked up once at the wrapper's
/// start: the calling thread's ring in this recording ([`NO_RING`] before its
/// first event), the [`ATTACHMENT`] that ring belongs to, and [`WRITES`].
///
/// Why: the generic path ([`emit`], `interpose::acquire`) looked the ring up
/// twice, read [`WRITES`], [`HEADER`] and the recording switch two or three
/// times each and hashed the call site and the object twice, because each
/// piece reads the atomics itself and the real call between them keeps the
/// compiler from merging the reads: ~190 of the agent's instructions for a
/// lock, ~165 for an unlock (counted by single-stepping a recorded
/// `sync_bench pair`). The mutex wrappers' common path (recording, no schedule
/// enforced: `interpose::pthread_mutex_lock`) takes this one instead.
#[derive(Clone, Copy)]
pub(crate) struct Lane {
    ring: u32,
    attachment: u32,
    writes: u8,
}

/// The calling thread's [`Lane`].
#[inline(always)]
pub(crate) fn lane() -> Lane {
    let attachment = ATTACHMENT.load(Relaxed);
    Lane {
        ring: my_ring_in(attachment),
        attachment,
        writes: WRITES.load(Relaxed),
    }
}

impl Lane {
    /// Fetches, for writing, the lines an event on `addr` at `site` will
    /// touch after the real call: the object's counter ([`prefetch_counter`])
    /// and the ring's site dictionary set ([`prefetch_site`]).
    #[inline(always)]
    pub(crate) fn fetch_ahead(self, addr: u64, site: u64) {
        prefetch_counter(addr);
        self.fetch_site(site);
    }

    /// Fetches the ring's site dictionary set for `site` ([`prefetch_site`]).
    #[inline(always)]
    pub(crate) fn fetch_site(self, site: u64) {
        prefetch_site_in(self.ring, site);
    }

    /// The event's time stamp taken now ([`stamp_now`]).
    ///
    /// With sparse stamps ([`sparse_stamp_in`]) the step that takes none
    /// ([`sparse_step`]: the thread's previous stamp plus one tick) is here,
    /// in line, where `kind` and `via` are the wrapper's constants, so that
    /// only the event's own test is left of [`cannot_have_waited`]; the
    /// clock's read is out of line ([`sparse_clock`]). A stamp taken in an
    /// attachment that has ended meanwhile is taken again by
    /// [`Lane::emit_at`]'s generic path.
    ///
    /// Why: out of line, with the kinds matched at run time and the attachment
    /// read again, the step took 240 instructions for a lock and 212 for an
    /// unlock against 213 and 185 here (single-stepped; exact stamps 201 and
    /// 178). In a hot loop of pairs it saves 7–24 ns of 45–66; in memcached
    /// neither form measurably lowers the agent's time, whose clock reads
    /// overlap its misses (docs/BENCHMARKS.md).
    #[inline(always)]
    pub(crate) fn stamp(self, kind: u16, via: u8, addr: u64) -> u64 {
        if self.writes & WRITES_SPARSE == 0 {
            return stamp(self.writes);
        }
        sparse_stamp_in(self.attachment, self.writes, kind, via, addr)
    }

    /// [`emit_at`] on this lane, after the real call: if a recorder attached
    /// anew meanwhile (a thread blocked in its lock through a detach and an
    /// attach), the ring looked up before the call is the old recording's and
    /// the generic path claims one in the new.
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the event's fields, as emit_at takes them"
    )]
    pub(crate) fn emit_at(
        self,
        ts: u64,
        kind: u16,
        via: u8,
        addr: u64,
        site: u64,
        seq: u64,
        result: i32,
    ) {
        if self.ring == NO_RING || ATTACHMENT.load(Relaxed) != self.attachment {
            return self.emit_elsewhere(ts, kind, via, addr, site, seq, result);
        }
        write_event(
            self.ring,
            self.writes,
            Event {
                ts,
                seq,
                addr,
                site,
                extra: 0,
                result,
                kind: kind as u8,
                via,
            },
        );
    }

    /// [`Lane::emit_at`] when the thread has no ring in this recording yet
    /// (its first event: claimed here) or a recorder attached anew since the
    /// lane was looked up (`ts` may be in the former recording's unit: stamped
    /// again). Out of line: once a thread's.
    #[cold]
    #[inline(never)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the event's fields, as emit_at takes them"
    )]
    fn emit_elsewhere(
        self,
        ts: u64,
        kind: u16,
        via: u8,
        addr: u64,
        site: u64,
        seq: u64,
        result: i32,
    ) {
        if ATTACHMENT.load(Relaxed) != self.attachment {
            emit(kind, via, addr, site, seq, 0, result)
        } else {
            emit_at(ts, kind, via, addr, site, seq, 0, result)
        }
    }
}

/// [`publish`] of an event that takes two or four units: out of line, so that
/// the wrappers' common path (one unit) keeps its registers, and taking the
/// event by value: given a reference, every event stored its fields to the
/// stack. Cold: in memcached 3 % of the events.
#[cold]
#[inline(never)]
fn publish_long(i: u32, r: &RingHeader, event: Event, short: bool) {
    let (units, n) = encode_long(&event);
    publish(i, r, &units[..n], &event, short);
}

/// Writes `units`, the encoding of `event`, into ring `i` (`r`) and publishes
/// them, waiting for room as [`emit`] says.
#[inline(always)]
fn publish(i: u32, r: &RingHeader, units: &[Unit], event: &Event, short: bool) {
    let n = units.len();
    let head = r.head.0.load(Relaxed);
    if head + n as u64 > room_until() && !make_room(r, head, n as u64) {
        r.dropped.fetch_add(1, Relaxed);
        return;
    }
    let ring = ring_units(i);
    let codec = &r.codec.0;
    // SAFETY: the units lie in this thread's ring and the drain does not read them
    // until `head` is published below.
    unsafe {
        for (k, unit) in units.iter().enumerate() {
            ring.add((head as usize + k) & (RING_UNITS - 1))
                .write(*unit);
        }
        prefetch_for_write(ring.add((head as usize + n + RING_PREFETCH_UNITS) & (RING_UNITS - 1)));
    }
    // The owner's own state (the drain reads only `last_ts`, for a thread found
    // blocked): plain stores, ordered before the records by the release below.
    codec.note(event, n, short);
    r.head.0.store(head + n as u64, Release);
}

/// [`publish`]'s path when the ring is not known to have room for `n` units at
/// `head` ([`room_until`]): reads `tail`; rings the drain's doorbell when the
/// ring is at least half full, so the drain empties it before it fills up;
/// waits for room when it is full ([`wait_for_room`]). Whether there is room
/// now (`false`: the event is to be dropped).
///
/// The room it notes reaches only to where the ring would be half full, so
/// that the doorbell rings then rather than only once the ring is full; past
/// half full, to full.
#[cold]
#[inline(never)]
fn make_room(r: &RingHeader, head: u64, n: u64) -> bool {
    let half = RING_UNITS as u64 / 2;
    let mut tail = r.tail.0.load(Acquire);
    if head + n - tail > RING_UNITS as u64 {
        if !wait_for_room(r, head, n) {
            return false;
        }
        tail = r.tail.0.load(Acquire);
    }
    GAVE_UP.with(|g| g.set(false));
    let until = if head + n - tail < half {
        tail + half - 1
    } else {
        ring_doorbell();
        tail + RING_UNITS as u64
    };
    set_room_until(until);
    true
}

/// How far ahead of `head` [`publish`] asks for the ring's line: two lines of
/// short units, a few events' time (a microsecond or more in a server).
const RING_PREFETCH_UNITS: usize = 8;

/// Asks the CPU for the line at `p` in a state it may write (`prefetchw`), without
/// waiting for it.
///
/// Why the ring needs it: a ring's line was last read by the drain, on another
/// CPU or long ago, so the event's store to it misses; the store buffer hides
/// that only until the next `lock`-prefixed instruction — the program's own
/// lock or unlock a few hundred instructions later, or the next counter — which
/// waits for the store. In memcached, whose data fills the caches, that is one
/// exposed miss every four events; fetched ahead, the line is there when the
/// event is written. A hint only: it cannot fault, and where the CPU lacks it
/// the encoding (`0f 0d /1`) is a no-op.
#[inline(always)]
pub(crate) fn prefetch_for_write<T>(p: *const T) {
    // SAFETY: a prefetch reads and writes no memory and cannot fault.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
}

/// Notes that the calling thread enters a call that may block forever (`kind` is
/// what the call records when it returns): two plain stores into its ring's
/// pending slot, no event. The recorder turns a slot still set when the recording
/// ends into a `blocked` event (a deadlock or hang shows who waited for what).
/// Returns the ring noted in, for [`block_end`] (`None`: none could be claimed).
#[inline(always)]
pub(crate) fn block_begin(kind: u16, addr: u64, site: u64) -> Option<&'static RingHeader> {
    let mut i = my_ring();
    if i == NO_RING {
        i = claim_ring();
        if i == NO_RING {
            return None;
        }
        set_my_ring(i);
    }
    let r = ring_header(i);
    let p = &r.pending.0;
    p.addr.store(addr, Relaxed);
    p.site.store(site, Relaxed);
    p.kind.store(kind as u32, Relaxed);
    Some(r)
}

/// The blocking call noted by [`block_begin`] in `ring` returned. The ring is
/// the one noted in even if the recorder detached and another attached
/// meanwhile: mappings are never unmapped, so clearing an earlier
/// recording's slot is harmless, and this one's was never set.
#[inline(always)]
pub(crate) fn block_end(ring: Option<&'static RingHeader>) {
    if let Some(r) = ring {
        r.pending.0.kind.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects side by side get counters side by side; dense 4-byte futex words
    /// overflow without filling up the table; every object keeps its slot and
    /// its own numbers.
    #[test]
    fn counters_keep_their_objects_layout_and_dense_words_overflow() {
        let layout =
            std::alloc::Layout::from_size_align(SEQ_SLOTS * std::mem::size_of::<SeqSlot>(), 4096)
                .unwrap();
        // SAFETY: zeroed memory is a free table and a header of zero counters
        // (atomics and plain integers only); both stay allocated for the test.
        let table = unsafe { std::alloc::alloc_zeroed(layout) } as *mut SeqSlot;
        let header_layout = std::alloc::Layout::new::<Header>();
        // SAFETY: as above.
        let header = unsafe { std::alloc::alloc_zeroed(header_layout) } as *mut Header;
        SEQ_TABLE.store(table, Release);
        HEADER.store(header, Release);
        let index = |slot: &SeqSlot| {
            (slot as *const SeqSlot as usize - table as usize) / std::mem::size_of::<SeqSlot>()
        };

        // 8 192 mutexes of 40 bytes in one array: each counter at its home,
        // spanning the array's length in 32-byte slots.
        let base = 0x5555_0000_1000u64;
        let mutexes: Vec<u64> = (0..8192).map(|i| base + 40 * i).collect();
        let slots: Vec<usize> = mutexes
            .iter()
            .map(|&m| index(seq_slot(m).unwrap()))
            .collect();
        for (&m, &i) in mutexes.iter().zip(&slots) {
            assert_eq!(i, seq_home(m));
        }
        let lines: std::collections::BTreeSet<usize> = slots.iter().map(|i| i / 4).collect();
        assert!(lines.len() <= 8192 * 40 / 64 + 2, "{} lines", lines.len());

        // 100 000 futex words 4 bytes apart elsewhere: all placed, none lost.
        let words: Vec<u64> = (0..100_000).map(|i| 0x7f00_0000_0000u64 + 4 * i).collect();
        for (n, &w) in words.iter().enumerate() {
            assert!(seq_slot(w).is_some(), "word {n} at {w:#x} found no slot");
        }
        // SAFETY: the header allocated above.
        assert_eq!(unsafe { &*header }.seq_full.load(Relaxed), 0);

        // Each object finds the same slot again and numbers its own events.
        for (&m, &i) in mutexes.iter().zip(&slots) {
            assert_eq!(index(seq_slot(m).unwrap()), i);
        }
        assert_eq!(next_seq(words[7]), 0);
        assert_eq!(next_seq(words[7]), 1);
        assert_eq!(next_seq(words[8]), 0);
        assert_eq!(next_seq(mutexes[3]), 0);
        assert_eq!(next_seq_held(mutexes[3]), 1);
        assert_eq!(next_seq(words[7]), 2);

        SEQ_TABLE.store(null_mut(), Release);
        HEADER.store(null_mut(), Release);
        // SAFETY: allocated above with these layouts; nothing refers to them now.
        unsafe {
            std::alloc::dealloc(table.cast(), layout);
            std::alloc::dealloc(header.cast(), header_layout);
        }
    }
}
