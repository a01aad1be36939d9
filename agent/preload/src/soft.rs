//! Software breakpoints on memory-access instructions: how `ordo record --discover`
//! (and every run of `ordo hunt`) sees the program's plain loads and stores with no
//! variable named and no kernel trap per site.
//!
//! The recorder hands the agent a table of instructions of the main executable
//! (`ordo_recorder::discover`: every one with a memory operand that may reach shared
//! data). At start-up, before the program's own constructors run, the agent:
//! - copies each instruction *out of line* into a page it maps within ±2 GiB of the
//!   executable, followed by a `jmp` back to the instruction after it (a
//!   RIP-relative operand's displacement is rewritten for the copy's address), the
//!   way the kernel's uprobes step an instruction out of line, but in user space;
//! - plants an `int3` on each instruction (its code pages stay writable for the
//!   run, so a breakpoint can be removed from a signal handler without a race on
//!   page protections).
//!
//! A thread reaching one traps (`SIGTRAP`, `si_code` `SI_KERNEL`, the saved `rip`
//! just past the `int3`). The handler finds the site, counts the thread's arrivals
//! at it (the `#N` of `T:at(function+OFFSET)#N`, the number replay's gates count),
//! computes the address the instruction reaches from the saved registers, records
//! the access in the thread's ring (kind, address, instruction, arrival count,
//! per-address sequence number), and resumes the thread at the copy: the original
//! instruction runs there, unchanged, and jumps back. After `budget` traps of all
//! threads together a site's `int3` is replaced by the original byte: the rest of
//! the run goes at full speed, and discovery costs at most `budget` traps a site.
//!
//! A site may also be a replay gate (`SoftSite::gate`): a schedule naming more
//! program points in a thread than x86 has debug registers has the extra points
//! gated here, by the same code as a hardware breakpoint's (`trap::access_trap`),
//! before the thread resumes at the copy; such a breakpoint is never removed.
//!
//! Everything in the handler is async-signal-safe: atomics, raw syscalls, the
//! agent's own thread-local cells and the recording ring.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering::*};

use crate::probe_common::inproc::RingHeader;
use crate::probe_common::inproc::{
    SoftHeader, SoftSite, SOFT_MAGIC, SOFT_NO_GATE, SOFT_PL_COND_LEAVE, SOFT_PL_COND_WAIT,
    SOFT_PL_LOCK_LEAVE, SOFT_PL_NOTIFY_ALL_CHECK, SOFT_PL_NOTIFY_ALL_SLOW,
    SOFT_PL_NOTIFY_ONE_CHECK, SOFT_PL_NOTIFY_ONE_SLOW, SOFT_PL_READ_SLOW, SOFT_PL_SLOW_ENTER,
    SOFT_PL_SLOW_LEAVE, SOFT_PL_TRY_LOCK_CHECK, SOFT_PL_TRY_LOCK_FAST, SOFT_PL_TRY_READ_LEAVE,
    SOFT_PL_TRY_READ_SLOW, SOFT_PL_TRY_WRITE_ONCE, SOFT_PL_WRITE_SLOW, SOFT_RUST_BARRIER_LEAVE,
    SOFT_RUST_BARRIER_WAIT, SOFT_RUST_CHAN_RECEIVED, SOFT_RUST_CHAN_RECV, SOFT_RUST_CHAN_SEND,
    SOFT_RUST_COND_BROADCAST, SOFT_RUST_COND_SIGNAL, SOFT_RUST_COND_WAIT,
    SOFT_RUST_COND_WAIT_TIMED, SOFT_RUST_LOCK_FAST, SOFT_RUST_LOCK_GATE, SOFT_RUST_LOCK_SLOW,
    SOFT_RUST_ONCE_CHECK, SOFT_RUST_ONCE_DONE, SOFT_RUST_ONCE_ENTER, SOFT_RUST_ONCE_LEAVE,
    SOFT_RUST_ONCE_LOAD, SOFT_RUST_PARK_LEAVE, SOFT_RUST_PARK_TOKEN, SOFT_RUST_READ_CONTENDED,
    SOFT_RUST_READ_FAST, SOFT_RUST_READ_GATE, SOFT_RUST_RW_UNLOCK, SOFT_RUST_TRY_FAST,
    SOFT_RUST_TRY_GATE, SOFT_RUST_TRY_READ_CHECK, SOFT_RUST_TRY_READ_FAST,
    SOFT_RUST_TRY_WRITE_CHECK, SOFT_RUST_TRY_WRITE_FAST, SOFT_RUST_UNLOCK, SOFT_RUST_UNPARK,
    SOFT_RUST_WRITE_CONTENDED, SOFT_RUST_WRITE_FAST, SOFT_RUST_WRITE_GATE, SOFT_VERSION,
};
use crate::probe_common::{kind, reg, via};
use crate::trap::{greg, GREG_OF_REG, GREG_RIP};
use crate::{close, dl_iterate_phdr, mmap, DlPhdrInfo};

/// Bytes of one out-of-line slot: the instruction (≤ 15) and a 5-byte `jmp`.
const SLOT: usize = 32;
const PAGE: usize = 4096;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const PROT_EXEC: c_int = 4;
const MAP_PRIVATE: c_int = 2;
const MAP_ANONYMOUS: c_int = 0x20;
const MAP_NORESERVE: c_int = 0x4000;
const MAP_FIXED_NOREPLACE: c_int = 0x10_0000;
const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
const SYS_MPROTECT: isize = 10;
const SYS_MUNMAP: isize = 11;

/// The sites in force for this process.
struct Table {
    /// The sites, in ascending `ip` order.
    sites: *const SoftSite,
    n: usize,
    /// Load bias of the main executable.
    bias: u64,
    /// Out-of-line copies, [`SLOT`] bytes each, in the sites' order.
    xol: *mut u8,
    /// Traps taken per site.
    hits: *const AtomicU32,
    /// Traps a site takes before its breakpoint is removed (0: never).
    budget: u32,
}

static TABLE: AtomicPtr<Table> = AtomicPtr::new(null_mut());

thread_local! {
    /// This thread's arrivals per site (mapped at its first trap; the pages it
    /// touched stay when it exits: a few per thread).
    static ARRIVALS: Cell<*mut u32> = const { Cell::new(null_mut()) };
    /// The Rust lock this thread's inlined fast path failed to take, which the
    /// slow path is taking ([`SOFT_RUST_LOCK_SLOW`]), with the kind of the
    /// acquisition (`mutex_lock`, `rwlock_rdlock`, `rwlock_wrlock`).
    static CONTENDED: Cell<(u64, u16)> = const { Cell::new((0, 0)) };
    /// The ring whose pending slot notes [`CONTENDED`]'s acquisition while it
    /// waits (`crate::record::block_begin`), cleared with it.
    static LOCK_PENDING: Cell<Option<&'static RingHeader>> = const { Cell::new(None) };
    /// The same for an untimed condvar wait ([`COND_WAITING`]), cleared when the
    /// wait has retaken its mutex.
    static COND_PENDING: Cell<Option<&'static RingHeader>> = const { Cell::new(None) };
    /// Replaying: the gate this thread passed at a Rust mutex's `cmpxchg`, told
    /// when the acquisition happened (at the branch, or the slow path's return).
    static GATED: Cell<Option<crate::gate::Caller>> = const { Cell::new(None) };
    /// The Rust condvar wait this thread is in, from its entry until it has the
    /// mutex back ([`SOFT_RUST_COND_WAIT`]).
    static COND_WAITING: Cell<CondWait> = const { Cell::new(CondWait::NONE) };
    /// The Rust barrier this thread waits at, and where it called `wait`.
    static AT_BARRIER: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// The Rust lock or condvar this thread just released or notified: the wake
    /// that follows is that operation's.
    static WAKING: Cell<u64> = const { Cell::new(0) };
    /// The `Once` state words of the `Once::call`s this thread is in, innermost
    /// last ([`SOFT_RUST_ONCE_ENTER`]).
    static IN_ONCE_CALL: Cell<OnceCalls> = const { Cell::new(OnceCalls::NONE) };
    /// The `Once`s this thread has seen complete since [`ONCE_COMPLETIONS`] last
    /// changed ([`SOFT_RUST_ONCE_CHECK`]).
    static ONCES_SEEN: Cell<OncesSeen> = const { Cell::new(OncesSeen::NONE) };
    /// The parker state word this thread's `thread::park` is taking the token of
    /// ([`SOFT_RUST_PARK_TOKEN`]), until `park` returns.
    static PARKING: Cell<u64> = const { Cell::new(0) };
    /// The channel this thread's `list::Channel::recv` receives from
    /// ([`SOFT_RUST_CHAN_RECV`]), until it returns.
    static RECEIVING: Cell<u64> = const { Cell::new(0) };
    /// How deep the thread is in `parking_lot`'s slow paths and condvar waits
    /// ([`SOFT_PL_SLOW_ENTER`]; a wait's mutex may take its own inside), whose
    /// futex calls are the operation's own.
    static IN_PARKING_LOT: Cell<u32> = const { Cell::new(0) };
    /// The `parking_lot::RwLock` whose `try_read` this thread's
    /// `try_lock_shared_slow` is trying ([`SOFT_PL_TRY_READ_SLOW`]), until it
    /// returns.
    static TRYING_READ: Cell<u64> = const { Cell::new(0) };
}

/// `Once`s completed in the run so far: a thread's list of `Once`s seen complete
/// is void once another completes (its state word may be a new `Once`'s, at a
/// freed one's address).
static ONCE_COMPLETIONS: AtomicU64 = AtomicU64::new(0);

/// The `Once::call`s a thread is in (a `Once` initializer may use another).
#[derive(Clone, Copy)]
struct OnceCalls {
    words: [u64; 4],
    /// Calls entered; those past `words.len()` are not remembered.
    depth: usize,
}

impl OnceCalls {
    const NONE: OnceCalls = OnceCalls {
        words: [0; 4],
        depth: 0,
    };
}

/// The `Once`s a thread has seen complete in one completion generation.
#[derive(Clone, Copy)]
struct OncesSeen {
    generation: u64,
    words: [u64; 8],
    n: usize,
}

impl OncesSeen {
    const NONE: OncesSeen = OncesSeen {
        generation: 0,
        words: [0; 8],
        n: 0,
    };
}

/// A completion check found the `Once` whose state word is at `addr` complete at
/// `site`: the thread's first observation of it (since the last completion
/// anywhere) is recorded as an atomic read of the word, which acquires what the
/// completing thread's write released. Later ones add no order and are not
/// recorded (a `LazyLock` read in a loop checks at every access).
fn once_seen_complete(addr: u64, site: u64) {
    if !crate::record::on() {
        return;
    }
    let generation = ONCE_COMPLETIONS.load(Acquire);
    let first = ONCES_SEEN.with(|c| {
        let mut seen = c.get();
        if seen.generation != generation {
            seen = OncesSeen {
                generation,
                ..OncesSeen::NONE
            };
        }
        if seen.words[..seen.n].contains(&addr) {
            return false;
        }
        if seen.n < seen.words.len() {
            seen.words[seen.n] = addr;
            seen.n += 1;
        }
        c.set(seen);
        true
    });
    if first {
        once_access(kind::READ, addr, site);
    }
}

/// A Rust `Mutex::try_lock` on `addr` at `site` succeeded (`ok`) or failed:
/// recorded as `pthread_mutex_trylock`'s (a `mutex_lock` via `try`, numbered
/// while held, or a `mutex_lock_failed`), and told to a replay's gate.
fn tried(addr: u64, ok: bool, site: u64, recording: bool) {
    let gated = GATED.with(|g| g.take());
    if recording {
        if ok {
            let seq = crate::record::next_seq_held(addr);
            crate::record::emit(kind::MUTEX_LOCK, via::TRY, addr, site, seq, 0, 0);
        } else {
            crate::record::emit(kind::MUTEX_LOCK_FAILED, via::TRY, addr, site, 0, 0, EBUSY);
        }
    }
    if let Some(c) = gated.or_else(crate::gate::enter) {
        let which = if ok {
            kind::MUTEX_LOCK
        } else {
            kind::MUTEX_LOCK_FAILED
        };
        c.happened(which, addr, None);
    }
}

/// An inlined `RwLock::try_read`/`try_write` of the lock at `addr` fails at `site`
/// (its check found it held): a replay holds the failure until its turn, then it
/// is recorded as `pthread_rwlock_tryrdlock`'s `EBUSY`.
fn try_rw_failed(addr: u64, site: u64, recording: bool) {
    try_failed(kind::RWLOCK_LOCK_FAILED, addr, site, recording);
}

/// An inlined try of the lock at `addr` fails at `site` (`failed`:
/// `rwlock_lock_failed` or `mutex_lock_failed`): held in a replay until its
/// turn, then recorded with `EBUSY`.
fn try_failed(failed: u16, addr: u64, site: u64, recording: bool) {
    // A gate passed at an earlier round's `cmpxchg` belonged to a success that did
    // not come.
    GATED.with(|g| g.take());
    let caller = crate::gate::enter();
    if let Some(c) = caller {
        c.gate(failed, addr, crate::gate::GateObject::Addr);
    }
    if recording {
        crate::record::emit(failed, via::TRY, addr, site, 0, 0, EBUSY);
    }
    if let Some(c) = caller {
        c.happened(failed, addr, None);
    }
}

/// `pthread_mutex_trylock`'s result when the mutex is held.
const EBUSY: i32 = 16;
/// `pthread_mutex_timedlock`'s result when the time ran out.
const ETIMEDOUT: i32 = 110;
/// std's futex calls on its own words are process-private.
const FUTEX_PRIVATE_FLAG: i32 = 128;

/// An `Thread::unpark` at `site` is about to set the parker state word at `addr`
/// to "notified": recorded first (a release), so the `park` that takes the token
/// comes after it; the wake-up that follows is the unpark's.
fn unparking(addr: u64, site: u64) {
    WAKING.with(|w| w.set(addr));
    if crate::record::on() {
        once_access(kind::RMW, addr, site);
    }
}

/// An atomic access (`kind` READ, WRITE or RMW) of the 4-byte `Once` or parker
/// state word at `addr`, recorded as a discovered access is (its size where a
/// watched access has its value).
fn once_access(which: u16, addr: u64, site: u64) {
    crate::record::emit(
        which,
        via::ATOMIC,
        addr,
        site,
        crate::record::next_seq(addr),
        4,
        0,
    );
}

/// Whether a futex call on `uaddr` (a wake when `wake`) is part of a Rust
/// operation this thread is in the middle of: a lock's slow path (its word, or an
/// `RwLock`'s writer-notify word after it), a condvar wait (the condvar's word,
/// the mutex's when it is retaken), a barrier, or the wake-up right after a
/// release or a notify. Those are recorded as the operation's events; the futex
/// calls would add orders of their own that no schedule could reverse (a waker
/// before the woken, which the lock's order already says).
pub(crate) fn internal_futex(uaddr: u64, wake: bool) -> bool {
    let near = |base: u64, span: u64| base != 0 && uaddr >= base && uaddr < base + span;
    let (contended, _) = CONTENDED.with(|c| c.get());
    let waiting = COND_WAITING.with(|w| w.get());
    let (barrier, _) = AT_BARRIER.with(|b| b.get());
    let once = IN_ONCE_CALL.with(|c| c.get());
    near(contended, 8)
        || near(PARKING.with(|p| p.get()), 4)
        || once.words[..once.depth.min(once.words.len())].contains(&uaddr)
        || (waiting.mutex != 0 && (uaddr == waiting.cond || uaddr == waiting.mutex))
        || near(barrier, 64)
        || (wake && near(WAKING.with(|w| w.get()), 8))
        || IN_PARKING_LOT.with(|p| p.get()) != 0
}

/// A Rust condvar wait in progress: the mutex's release and reacquisition inside
/// it are the wait's.
#[derive(Clone, Copy)]
struct CondWait {
    cond: u64,
    /// 0: no wait.
    mutex: u64,
    /// `via::PLAIN`, or `via::TIMED` for `wait_timeout`.
    via: u8,
    /// The caller of `wait`: where the program waits.
    site: u64,
    /// The mutex's inlined release inside the wait has run.
    released: bool,
}

impl CondWait {
    const NONE: CondWait = CondWait {
        cond: 0,
        mutex: 0,
        via: 0,
        site: 0,
        released: false,
    };
}

/// `gregs` index of `rsp` in a `ucontext_t`.
const GREG_RSP: usize = 15;
/// `gregs` index of `eflags`.
const GREG_EFL: usize = 17;
/// The zero flag.
const EFLAGS_ZF: i64 = 1 << 6;
/// The carry flag.
const EFLAGS_CF: i64 = 1;

/// Whether a site records a Rust mutex (never removed, not an access).
fn is_rust_lock(s: &SoftSite) -> bool {
    matches!(
        s.access,
        SOFT_RUST_LOCK_FAST
            | SOFT_RUST_LOCK_SLOW
            | SOFT_RUST_UNLOCK
            | SOFT_RUST_LOCK_GATE
            | SOFT_RUST_COND_WAIT
            | SOFT_RUST_COND_WAIT_TIMED
            | SOFT_RUST_COND_SIGNAL
            | SOFT_RUST_COND_BROADCAST
            | SOFT_RUST_READ_FAST
            | SOFT_RUST_WRITE_FAST
            | SOFT_RUST_READ_GATE
            | SOFT_RUST_WRITE_GATE
            | SOFT_RUST_RW_UNLOCK
            | SOFT_RUST_READ_CONTENDED
            | SOFT_RUST_WRITE_CONTENDED
            | SOFT_RUST_BARRIER_WAIT
            | SOFT_RUST_BARRIER_LEAVE
            | SOFT_RUST_ONCE_CHECK
            | SOFT_RUST_ONCE_DONE
            | SOFT_RUST_ONCE_ENTER
            | SOFT_RUST_ONCE_LEAVE
            | SOFT_RUST_UNPARK
            | SOFT_RUST_PARK_TOKEN
            | SOFT_RUST_PARK_LEAVE
            | SOFT_RUST_TRY_GATE
            | SOFT_RUST_TRY_FAST
            | SOFT_RUST_CHAN_SEND
            | SOFT_RUST_CHAN_RECV
            | SOFT_RUST_CHAN_RECEIVED
            | SOFT_RUST_TRY_READ_FAST
            | SOFT_RUST_TRY_WRITE_FAST
            | SOFT_RUST_TRY_READ_CHECK
            | SOFT_RUST_TRY_WRITE_CHECK
            | SOFT_PL_SLOW_ENTER
            | SOFT_PL_SLOW_LEAVE
            | SOFT_PL_READ_SLOW
            | SOFT_PL_WRITE_SLOW
            | SOFT_PL_COND_WAIT
            | SOFT_PL_COND_LEAVE
            | SOFT_PL_NOTIFY_ONE_CHECK
            | SOFT_PL_NOTIFY_ALL_CHECK
            | SOFT_PL_NOTIFY_ONE_SLOW
            | SOFT_PL_NOTIFY_ALL_SLOW
            | SOFT_PL_TRY_LOCK_FAST
            | SOFT_PL_TRY_LOCK_CHECK
            | SOFT_PL_TRY_WRITE_ONCE
            | SOFT_PL_TRY_READ_SLOW
            | SOFT_PL_TRY_READ_LEAVE
            | SOFT_PL_LOCK_LEAVE
    )
}

/// The acquisition a Rust lock site makes: `mutex_lock`, `rwlock_rdlock` or
/// `rwlock_wrlock`.
fn acquisition_of(access: u8) -> u16 {
    match access {
        SOFT_RUST_READ_FAST
        | SOFT_RUST_READ_GATE
        | SOFT_RUST_READ_CONTENDED
        | SOFT_PL_READ_SLOW => kind::RWLOCK_RDLOCK,
        SOFT_RUST_WRITE_FAST
        | SOFT_RUST_WRITE_GATE
        | SOFT_RUST_WRITE_CONTENDED
        | SOFT_PL_WRITE_SLOW => kind::RWLOCK_WRLOCK,
        _ => kind::MUTEX_LOCK,
    }
}

/// The thread's condvar wait on the mutex at `addr`, if it is in one.
fn waiting_on(addr: u64) -> Option<CondWait> {
    let w = COND_WAITING.with(|w| w.get());
    (w.mutex != 0 && w.mutex == addr).then_some(w)
}

/// The thread enters a `parking_lot` slow path or condvar wait.
fn parking_lot_enters() {
    IN_PARKING_LOT.with(|p| p.set(p.get() + 1));
}

/// The thread leaves the innermost `parking_lot` slow path or wait it is in (a
/// std slow path's return leaves none).
fn parking_lot_leaves() {
    IN_PARKING_LOT.with(|p| p.set(p.get().saturating_sub(1)));
}

/// The event a `parking_lot` notify site records: `pthread_cond_signal`'s or
/// `pthread_cond_broadcast`'s.
fn notify_kind(access: u8) -> u16 {
    match access {
        SOFT_PL_NOTIFY_ONE_CHECK | SOFT_PL_NOTIFY_ONE_SLOW => kind::COND_SIGNAL,
        _ => kind::COND_BROADCAST,
    }
}

/// The condvar at `cond` is notified (`which`: signal or broadcast) at `site`:
/// gated (unless its inlined check's gate was passed), recorded, and told to a
/// replay.
fn notified(cond: u64, which: u16, site: u64, recording: bool) {
    let caller = GATED.with(|g| g.take()).or_else(|| {
        let c = crate::gate::enter()?;
        c.gate(which, cond, crate::gate::GateObject::Addr);
        Some(c)
    });
    let stamp = caller.and_then(|c| c.stamp_before(which));
    if recording {
        let seq = crate::record::next_seq(cond);
        crate::record::emit(which, via::PLAIN, cond, site, seq, 0, 0);
    }
    if let Some(c) = caller {
        c.happened(which, cond, stamp);
    }
}

/// The Rust lock at `addr` was acquired (`which`: `mutex_lock`, `rwlock_rdlock`,
/// `rwlock_wrlock`; site `site`; `how`: `via::PLAIN`, or `via::TRY` for a
/// `try_read`/`try_write`): recorded, and told to a replay's gate passed at
/// its `cmpxchg`. A mutex's inside a condvar wait is the wait's return, recorded
/// as `pthread_cond_wait`'s (the condvar's event and the mutex's reacquisition,
/// via `cond_wait`).
fn acquired(addr: u64, which: u16, site: u64, recording: bool, how: u8) {
    let gated = GATED.with(|g| g.take());
    if let Some(w) = waiting_on(addr).filter(|_| which == kind::MUTEX_LOCK) {
        COND_WAITING.with(|c| c.set(CondWait::NONE));
        crate::record::block_end(COND_PENDING.with(|p| p.take()));
        if recording {
            crate::interpose::record_cond_pair(
                kind::COND_WAIT,
                kind::MUTEX_LOCK,
                w.via,
                w.cond,
                addr,
                w.site,
                0,
            );
        }
        if let Some(c) = gated.or_else(crate::gate::enter) {
            c.set_state(crate::shm::STATE_RUNNING, 0);
            c.finish_in_progress();
            c.happened(kind::COND_WAIT, w.cond, None);
        }
        return;
    }
    if recording {
        // A read lock is shared: its number needs the atomic counter.
        let seq = if which == kind::MUTEX_LOCK {
            crate::record::next_seq_held(addr)
        } else {
            crate::record::next_seq(addr)
        };
        crate::record::emit(which, how, addr, site, seq, 0, 0);
    }
    if let Some(c) = gated.or_else(crate::gate::enter) {
        c.set_state(crate::shm::STATE_RUNNING, 0);
        c.happened(which, addr, None);
    }
}

/// A Rust mutex site trapped (see `recorder/src/rust_locks.rs`): records the
/// acquisition or release and moves the thread on — past an emulated `jne` or
/// `ret`, or (an unlock) to the `xchg`'s copy out of line. The sequence number is
/// taken while the thread holds the mutex, as for `pthread_mutex_lock`.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of the trap of site `s` (index `i`) at `ip`.
unsafe fn rust_lock(t: &Table, s: &SoftSite, i: usize, ip: u64, ctx: *mut c_void) {
    let recording = crate::record::on();
    match s.access {
        SOFT_RUST_LOCK_GATE | SOFT_RUST_READ_GATE | SOFT_RUST_WRITE_GATE => {
            // Replaying: held here, before the attempt, like `pthread_mutex_lock`
            // before the real call; then the `cmpxchg` runs out of line.
            if let Some(c) = crate::gate::enter() {
                // SAFETY: the trap's context (the caller's contract).
                let addr = unsafe { effective_address(s, t.bias, ctx) };
                let which = acquisition_of(s.access);
                if let Some(w) = waiting_on(addr).filter(|_| which == kind::MUTEX_LOCK) {
                    // A condvar wait woke and is about to take its mutex back:
                    // `cond_wait`'s gate holds it between the two, as a
                    // `pthread_cond_wait`'s gate holds the wait's return.
                    c.set_state(crate::shm::STATE_RUNNING, 0);
                    c.finish_in_progress();
                    c.gate(kind::COND_WAIT, w.cond, crate::gate::GateObject::Addr);
                } else {
                    c.gate(which, addr, crate::gate::GateObject::Addr);
                }
                GATED.with(|g| g.set(Some(c)));
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_LOCK_FAST | SOFT_RUST_READ_FAST | SOFT_RUST_WRITE_FAST => {
            let which = acquisition_of(s.access);
            // The flags and registers are the `lock cmpxchg`'s, just before: ZF set
            // is success. A RIP-relative operand's link-time target is in `disp`.
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let acquired = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if acquired {
                self::acquired(addr, which, ip, recording, via::PLAIN);
            } else {
                contended(addr, which, ip, recording);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, acquired) as i64 };
        }
        SOFT_RUST_ONCE_CHECK => {
            // The flags are the check's `test`/`cmp`: ZF set is complete, and the
            // registers still hold the load's address.
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let complete = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if complete {
                once_seen_complete(addr, ip);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, complete) as i64 };
        }
        SOFT_RUST_ONCE_DONE => {
            // The completion guard's store, about to run out of line: recorded
            // first, so every thread that sees its value comes after it.
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            ONCE_COMPLETIONS.fetch_add(1, Release);
            if recording {
                once_access(kind::WRITE, addr, ip);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_ONCE_ENTER => {
            // SAFETY: the trap's context (the caller's contract): the state word
            // is the first argument.
            let word = unsafe { *greg(ctx, GREG_OF_REG[reg::RDI as usize]) } as u64;
            IN_ONCE_CALL.with(|c| {
                let mut calls = c.get();
                if calls.depth < calls.words.len() {
                    calls.words[calls.depth] = word;
                }
                calls.depth += 1;
                c.set(calls);
            });
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_ONCE_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            let ret = unsafe { emulate_ret(ctx) };
            let word = IN_ONCE_CALL.with(|c| {
                let mut calls = c.get();
                let Some(depth) = calls.depth.checked_sub(1) else {
                    return 0;
                };
                calls.depth = depth;
                c.set(calls);
                calls.words.get(depth).copied().unwrap_or(0)
            });
            if word != 0 && recording {
                // Returned: complete, run here or waited for.
                once_access(kind::READ, word, ret);
            }
        }
        SOFT_RUST_TRY_GATE => {
            // Replaying: a failure the schedule names is held here, before the
            // try, as `pthread_mutex_trylock`'s; then the `cmpxchg` runs out of line.
            if let Some(c) = crate::gate::enter() {
                // SAFETY: the trap's context (the caller's contract).
                let addr = unsafe { effective_address(s, t.bias, ctx) };
                c.gate(kind::MUTEX_LOCK_FAILED, addr, crate::gate::GateObject::Addr);
                GATED.with(|g| g.set(Some(c)));
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_TRY_FAST => {
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let ok = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            let early = ok
                && GATED
                    .with(|g| g.get())
                    .is_some_and(|c| c.would_wait(kind::MUTEX_LOCK, addr));
            // SAFETY: `n` sites, never unmapped; `i` is this site's index.
            let sites = unsafe { std::slice::from_raw_parts(t.sites, t.n) };
            let cas = i.checked_sub(1).map(|k| &sites[k]);
            if let (true, Some(cas)) = (early, cas.filter(|c| c.access == SOFT_RUST_TRY_GATE)) {
                // A success that came too early for the schedule: given back,
                // held at the acquisition's gate, and tried again (a try may fail
                // at any moment), as `pthread_mutex_trylock`'s.
                // SAFETY: this thread holds the Rust mutex whose word is `addr`.
                let word = unsafe { &*(addr as *const AtomicU32) };
                if word.swap(0, Release) == 2 {
                    // SAFETY: a live futex word; wakes one waiter, as std's unlock.
                    unsafe { crate::futex(word, crate::FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1) };
                }
                if let Some(c) = GATED.with(|g| g.get()) {
                    c.gate(kind::MUTEX_LOCK, addr, crate::gate::GateObject::Addr);
                }
                // SAFETY: as above: back to the `cmpxchg` (its breakpoint), whose
                // registers still hold the expected 0 and the new value.
                unsafe { *greg(ctx, GREG_RIP) = t.bias.wrapping_add(cas.ip) as i64 };
                return;
            }
            tried(addr, ok, ip, recording);
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, ok) as i64 };
        }
        SOFT_RUST_UNPARK => {
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            unparking(addr, ip);
            // SAFETY: as above: the `xchg` runs out of line.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_PARK_TOKEN => {
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            PARKING.with(|p| p.set(addr));
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_TRY_READ_FAST | SOFT_RUST_TRY_WRITE_FAST => {
            // The flags are the loop's `lock cmpxchg`'s: ZF set is a success; clear,
            // the loop checks the state it found again.
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let acquired = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if acquired {
                let which = if s.access == SOFT_RUST_TRY_READ_FAST {
                    kind::RWLOCK_RDLOCK
                } else {
                    kind::RWLOCK_WRLOCK
                };
                // As `pthread_rwlock_tryrdlock`'s success is.
                self::acquired(addr, which, ip, recording, via::TRY);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, acquired) as i64 };
        }
        SOFT_RUST_TRY_READ_CHECK | SOFT_RUST_TRY_WRITE_CHECK => {
            // The flags are the check's (`cmp` then `ja`, or `test` then `jne`):
            // taken, the lock cannot be had and the try fails.
            // SAFETY: the trap's context (the caller's contract).
            let flags = unsafe { *greg(ctx, GREG_EFL) };
            let zf = flags & EFLAGS_ZF != 0;
            let failing = if s.access == SOFT_RUST_TRY_READ_CHECK {
                !zf && flags & EFLAGS_CF == 0
            } else {
                !zf
            };
            if failing {
                // SAFETY: as above.
                let addr = unsafe { effective_address(s, t.bias, ctx) };
                try_rw_failed(addr, ip, recording);
            }
            let next = ip + s.len as u64;
            let to = if failing {
                next.wrapping_add(branch_displacement(s) as u64)
            } else {
                next
            };
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = to as i64 };
        }
        SOFT_PL_TRY_LOCK_FAST => {
            // The flags are the loop's `lock cmpxchg`'s: ZF set is a success;
            // clear, the loop checks the byte it found again.
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let ok = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if ok {
                self::acquired(addr, kind::MUTEX_LOCK, ip, recording, via::TRY);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, ok) as i64 };
        }
        SOFT_PL_TRY_LOCK_CHECK => {
            // The flags are the check's `test`: ZF clear is held, the try fails.
            // SAFETY: the trap's context (the caller's contract).
            let held = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF == 0;
            if held {
                // SAFETY: as above.
                let addr = unsafe { effective_address(s, t.bias, ctx) };
                try_failed(kind::MUTEX_LOCK_FAILED, addr, ip, recording);
            }
            // SAFETY: as above (a `jne`: taken when ZF is clear).
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, !held) as i64 };
        }
        SOFT_PL_TRY_WRITE_ONCE => {
            // The flags are the one `lock cmpxchg`'s (a `sete` in between).
            // SAFETY: the trap's context (the caller's contract).
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            // SAFETY: as above.
            let ok = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if ok {
                self::acquired(addr, kind::RWLOCK_WRLOCK, ip, recording, via::TRY);
            } else {
                try_rw_failed(addr, ip, recording);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, ok) as i64 };
        }
        SOFT_PL_TRY_READ_SLOW => {
            parking_lot_enters();
            // SAFETY: the trap's context (the caller's contract): the lock in `rdi`
            // (first instruction).
            let addr = unsafe { *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64 };
            if GATED.with(|g| g.get()).is_none() {
                if let Some(c) = crate::gate::enter() {
                    c.gate(kind::RWLOCK_RDLOCK, addr, crate::gate::GateObject::Addr);
                    GATED.with(|g| g.set(Some(c)));
                }
            }
            TRYING_READ.with(|t| t.set(addr));
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_PL_TRY_READ_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`; `al`
            // holds whether the read lock was taken.
            let ok = unsafe { *greg(ctx, GREG_OF_REG[reg::RAX as usize]) } & 0xff != 0;
            // SAFETY: as above.
            let ret = unsafe { emulate_ret(ctx) };
            parking_lot_leaves();
            let addr = TRYING_READ.with(|t| t.replace(0));
            if addr != 0 {
                if ok {
                    self::acquired(addr, kind::RWLOCK_RDLOCK, ret, recording, via::TRY);
                } else {
                    try_rw_failed(addr, ret, recording);
                }
            }
        }
        SOFT_RUST_CHAN_SEND => {
            // Before the message is published: what the sender did before the
            // send is released to every receive after it.
            // SAFETY: the trap's context (the caller's contract); the plan names
            // the register holding the channel.
            let chan = unsafe { *greg(ctx, GREG_OF_REG[s.base as usize]) } as u64;
            if recording && chan != 0 {
                once_access(kind::RMW, chan, ip);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_CHAN_RECV => {
            // SAFETY: as above.
            let chan = unsafe { *greg(ctx, GREG_OF_REG[s.base as usize]) } as u64;
            RECEIVING.with(|r| r.set(chan));
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_CHAN_RECEIVED => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            let ret = unsafe { emulate_ret(ctx) };
            let chan = RECEIVING.with(|r| r.replace(0));
            if chan != 0 && recording {
                // A message taken (or the channel found empty and closed, which
                // this over-orders): after every send recorded before it.
                once_access(kind::READ, chan, ret);
            }
        }
        SOFT_RUST_PARK_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            let ret = unsafe { emulate_ret(ctx) };
            let word = PARKING.with(|p| p.replace(0));
            if word != 0 && recording {
                // Back from `park`: the token taken (or a spurious return, which
                // this over-orders), after the unpark that set it.
                once_access(kind::RMW, word, ret);
            }
        }
        SOFT_PL_SLOW_ENTER => {
            parking_lot_enters();
            // SAFETY: the trap's context (the caller's contract).
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_PL_SLOW_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            unsafe { emulate_ret(ctx) };
            parking_lot_leaves();
        }
        SOFT_PL_COND_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            let ret = unsafe { emulate_ret(ctx) };
            parking_lot_leaves();
            let w = COND_WAITING.with(|w| w.get());
            if w.mutex != 0 {
                // Handed the mutex by its releaser: the wait ends here, holding it.
                if GATED.with(|g| g.get()).is_none() {
                    if let Some(c) = crate::gate::enter() {
                        c.set_state(crate::shm::STATE_RUNNING, 0);
                        c.finish_in_progress();
                        c.gate(kind::COND_WAIT, w.cond, crate::gate::GateObject::Addr);
                        GATED.with(|g| g.set(Some(c)));
                    }
                }
                acquired(w.mutex, kind::MUTEX_LOCK, ret, recording, via::PLAIN);
            }
        }
        SOFT_PL_NOTIFY_ONE_CHECK | SOFT_PL_NOTIFY_ALL_CHECK => {
            // SAFETY: the trap's context (the caller's contract).
            let cond = unsafe { effective_address(s, t.bias, ctx) };
            let which = notify_kind(s.access);
            // The flags are the `test` of the state loaded into `rsi`: ZF set is
            // no waiters, a notify the slow path will not see.
            // SAFETY: as above.
            let mut nobody = unsafe { *greg(ctx, GREG_EFL) } & EFLAGS_ZF != 0;
            if let Some(c) = crate::gate::enter() {
                // Replaying: held before it looks for waiters, then looks again.
                c.gate(which, cond, crate::gate::GateObject::Addr);
                GATED.with(|g| g.set(Some(c)));
                // SAFETY: the condvar's state word, a live `AtomicPtr`.
                let state = unsafe { (*(cond as *const AtomicU64)).load(Relaxed) };
                nobody = state == 0;
                // SAFETY: the trap's context, as above.
                unsafe {
                    *greg(ctx, GREG_OF_REG[reg::RSI as usize]) = state as i64;
                    let flags = greg(ctx, GREG_EFL);
                    *flags = if nobody {
                        *flags | EFLAGS_ZF
                    } else {
                        *flags & !EFLAGS_ZF
                    };
                }
            }
            if nobody {
                notified(cond, which, ip, recording);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = branch_destination(s, ip, nobody) as i64 };
        }
        SOFT_PL_NOTIFY_ONE_SLOW | SOFT_PL_NOTIFY_ALL_SLOW => {
            parking_lot_enters();
            // SAFETY: the trap's context (the caller's contract): the condvar in
            // `rdi`, the caller at `rsp` (first instruction).
            let (cond, site) = unsafe {
                (
                    *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64,
                    *(*greg(ctx, GREG_RSP) as u64 as *const u64),
                )
            };
            notified(cond, notify_kind(s.access), site, recording);
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_PL_LOCK_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`; `al`
            // holds whether the lock was taken.
            let ok = unsafe { *greg(ctx, GREG_OF_REG[reg::RAX as usize]) } & 0xff != 0;
            // SAFETY: as above.
            let ret = unsafe { emulate_ret(ctx) };
            parking_lot_leaves();
            let (addr, which) = CONTENDED.with(|c| c.replace((0, 0)));
            crate::record::block_end(LOCK_PENDING.with(|p| p.take()));
            if addr != 0 {
                if ok {
                    acquired(addr, which, ret, recording, via::PLAIN);
                } else {
                    let failed = if which == kind::MUTEX_LOCK {
                        kind::MUTEX_LOCK_FAILED
                    } else {
                        kind::RWLOCK_LOCK_FAILED
                    };
                    // A timed lock's deadline passed, as `pthread_mutex_timedlock`'s.
                    let gated = GATED.with(|g| g.take());
                    if recording {
                        crate::record::emit(failed, via::TIMED, addr, ret, 0, 0, ETIMEDOUT);
                    }
                    if let Some(c) = gated.or_else(crate::gate::enter) {
                        c.set_state(crate::shm::STATE_RUNNING, 0);
                        c.happened(failed, addr, None);
                    }
                }
            }
        }
        SOFT_RUST_LOCK_SLOW => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`.
            let ret = unsafe { emulate_ret(ctx) };
            parking_lot_leaves();
            let (addr, which) = CONTENDED.with(|c| c.replace((0, 0)));
            crate::record::block_end(LOCK_PENDING.with(|p| p.take()));
            if addr != 0 {
                // The site is the caller's: where its slow path returns.
                acquired(addr, which, ret, recording, via::PLAIN);
            }
        }
        SOFT_RUST_COND_WAIT | SOFT_RUST_COND_WAIT_TIMED | SOFT_PL_COND_WAIT => {
            // SAFETY: the trap's context (the caller's contract): the arguments
            // are in `rdi` and `rsi` (and a parking_lot deadline's nanoseconds in
            // `ecx`), the return address at `rsp` (first instruction).
            let (cond, mutex, site, nanos) = unsafe {
                (
                    *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64,
                    *greg(ctx, GREG_OF_REG[reg::RSI as usize]) as u64,
                    *(*greg(ctx, GREG_RSP) as u64 as *const u64),
                    *greg(ctx, GREG_OF_REG[reg::RCX as usize]) as u32,
                )
            };
            let untimed = match s.access {
                SOFT_PL_COND_WAIT => {
                    parking_lot_enters();
                    // `Option<Instant>`'s `None`: the nanoseconds' niche.
                    nanos == 1_000_000_000
                }
                access => access == SOFT_RUST_COND_WAIT,
            };
            let (via_, state) = if untimed {
                (via::PLAIN, crate::shm::STATE_BLOCKED)
            } else {
                (via::TIMED, crate::shm::STATE_TIMED)
            };
            let caller = crate::gate::enter();
            crate::interpose::cond_wait_begins(caller, cond, mutex, via_, site, recording);
            if recording && untimed {
                // As `pthread_cond_wait`'s: a run that ends with the thread still
                // waiting shows it `blocked` on the condvar (a lost wakeup).
                COND_PENDING
                    .with(|p| p.set(crate::record::block_begin(kind::COND_WAIT, cond, site)));
            }
            COND_WAITING.with(|w| {
                w.set(CondWait {
                    cond,
                    mutex,
                    via: via_,
                    site,
                    released: false,
                })
            });
            if let Some(c) = caller {
                c.set_state(state, kind::COND_WAIT as u32);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_READ_CONTENDED
        | SOFT_RUST_WRITE_CONTENDED
        | SOFT_PL_READ_SLOW
        | SOFT_PL_WRITE_SLOW => {
            if matches!(s.access, SOFT_PL_READ_SLOW | SOFT_PL_WRITE_SLOW) {
                parking_lot_enters();
            }
            // SAFETY: the trap's context (the caller's contract): the lock in `rdi`
            // and the caller at `rsp` (first instruction).
            let (addr, site) = unsafe {
                (
                    *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64,
                    *(*greg(ctx, GREG_RSP) as u64 as *const u64),
                )
            };
            let which = acquisition_of(s.access);
            // A read that found the lock not readable comes here without trying
            // the fast path (and its gate): a replay gates it here.
            if GATED.with(|g| g.get()).is_none() {
                if let Some(c) = crate::gate::enter() {
                    c.gate(which, addr, crate::gate::GateObject::Addr);
                    GATED.with(|g| g.set(Some(c)));
                }
            }
            contended(addr, which, site, recording);
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_BARRIER_WAIT => {
            // As `pthread_barrier_wait`'s wrapper on entry.
            // SAFETY: the trap's context (the caller's contract): the barrier in
            // `rdi`, the caller at `rsp` (first instruction).
            let (addr, site) = unsafe {
                (
                    *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64,
                    *(*greg(ctx, GREG_RSP) as u64 as *const u64),
                )
            };
            if let Some(c) = crate::gate::enter() {
                c.gate(kind::BARRIER_ARRIVE, addr, crate::gate::GateObject::Addr);
                let stamp = c.stamp_before(kind::BARRIER_ARRIVE);
                c.begins(kind::BARRIER_ARRIVE, addr, stamp);
                c.set_state(crate::shm::STATE_BLOCKED, kind::BARRIER_WAIT as u32);
            }
            if recording {
                let seq = crate::record::next_seq(addr);
                crate::record::emit(kind::BARRIER_ARRIVE, via::PLAIN, addr, site, seq, 0, 0);
            }
            AT_BARRIER.with(|b| b.set((addr, site)));
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_BARRIER_LEAVE => {
            // SAFETY: the trap's context (the caller's contract), at a `ret`; `al`
            // holds whether this thread is the leader.
            let leader = unsafe { *greg(ctx, GREG_OF_REG[reg::RAX as usize]) } & 0xff != 0;
            // SAFETY: as above.
            let _ = unsafe { emulate_ret(ctx) };
            let (addr, site) = AT_BARRIER.with(|b| b.replace((0, 0)));
            if addr != 0 {
                if recording {
                    let seq = crate::record::next_seq(addr);
                    // The leader's result as pthread's: PTHREAD_BARRIER_SERIAL_THREAD.
                    let result = if leader { -1 } else { 0 };
                    crate::record::emit(kind::BARRIER_WAIT, via::PLAIN, addr, site, seq, 0, result);
                }
                if let Some(c) = crate::gate::enter() {
                    c.set_state(crate::shm::STATE_RUNNING, 0);
                    c.finish_in_progress();
                    c.gate(kind::BARRIER_WAIT, addr, crate::gate::GateObject::Addr);
                    c.happened(kind::BARRIER_WAIT, addr, None);
                }
            }
        }
        SOFT_RUST_RW_UNLOCK => {
            // Gated and recorded while still held, then released by the `xadd`'s
            // copy.
            // SAFETY: as above.
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            rw_released(addr, ip, recording);
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        SOFT_RUST_COND_SIGNAL | SOFT_RUST_COND_BROADCAST => {
            // SAFETY: as above: the condvar in `rdi`, the caller at `rsp`.
            let (cond, site) = unsafe {
                (
                    *greg(ctx, GREG_OF_REG[reg::RDI as usize]) as u64,
                    *(*greg(ctx, GREG_RSP) as u64 as *const u64),
                )
            };
            let which = if s.access == SOFT_RUST_COND_SIGNAL {
                kind::COND_SIGNAL
            } else {
                kind::COND_BROADCAST
            };
            WAKING.with(|w| w.set(cond));
            let caller = crate::gate::enter();
            let mut stamp = None;
            if let Some(c) = caller {
                c.gate(which, cond, crate::gate::GateObject::Addr);
                stamp = c.stamp_before(which);
            }
            if recording {
                let seq = crate::record::next_seq(cond);
                crate::record::emit(which, via::PLAIN, cond, site, seq, 0, 0);
            }
            if let Some(c) = caller {
                // Told before the wake: a waiter it lets go still sleeps until the
                // wake arrives.
                c.happened(which, cond, stamp);
            }
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
        _ => {
            // SOFT_RUST_UNLOCK: gated and recorded while still held, then
            // released by the `xchg`'s copy.
            // SAFETY: as above.
            let addr = unsafe { effective_address(s, t.bias, ctx) };
            released(addr, ip, recording);
            // SAFETY: as above.
            unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
        }
    }
}

/// The Rust mutex at `addr` is about to be released at `site`: gated and recorded
/// while still held. Inside a condvar wait, the wait's own release, recorded at
/// its entry already.
fn released(addr: u64, site: u64, recording: bool) {
    WAKING.with(|w| w.set(addr));
    if let Some(w) = waiting_on(addr).filter(|w| !w.released) {
        COND_WAITING.with(|c| {
            c.set(CondWait {
                released: true,
                ..w
            })
        });
        return;
    }
    let caller = crate::gate::enter();
    if let Some(c) = caller {
        c.gate(kind::MUTEX_UNLOCK, addr, crate::gate::GateObject::Addr);
    }
    if recording {
        let seq = crate::record::next_seq_held(addr);
        crate::record::emit(kind::MUTEX_UNLOCK, via::PLAIN, addr, site, seq, 0, 0);
    }
    if let Some(c) = caller {
        // Told a moment before the `xchg` runs: a thread it lets go tries the
        // lock, finds it still held and waits in the slow path.
        c.happened(kind::MUTEX_UNLOCK, addr, None);
    }
}

/// The Rust `RwLock` at `addr` is about to be released (read or write) at
/// `site`: gated and recorded while still held.
fn rw_released(addr: u64, site: u64, recording: bool) {
    WAKING.with(|w| w.set(addr));
    let caller = crate::gate::enter();
    if let Some(c) = caller {
        c.gate(kind::RWLOCK_UNLOCK, addr, crate::gate::GateObject::Addr);
    }
    if recording {
        let seq = crate::record::next_seq(addr);
        crate::record::emit(kind::RWLOCK_UNLOCK, via::PLAIN, addr, site, seq, 0, 0);
    }
    if let Some(c) = caller {
        c.happened(kind::RWLOCK_UNLOCK, addr, None);
    }
}

/// A Rust lock operation reached through its jump patch (`crate::tramp`, when
/// recording): site `index` of the table, `acquired` the outcome of an
/// acquisition's `cmpxchg`, `reg` the thread's registers as they were.
pub(crate) fn patched_operation(index: usize, acquired: bool, reg: &dyn Fn(u8) -> u64) {
    let table = TABLE.load(Acquire);
    if table.is_null() {
        return;
    }
    // SAFETY: a published table is never freed.
    let t = unsafe { &*table };
    if index >= t.n {
        return;
    }
    // SAFETY: `index` < n sites.
    let s = unsafe { &*t.sites.add(index) };
    let recording = crate::record::on();
    let addr = effective_address_with(s, t.bias, reg);
    let ip = t.bias + s.ip;
    match s.access {
        SOFT_RUST_LOCK_FAST | SOFT_RUST_READ_FAST | SOFT_RUST_WRITE_FAST => {
            let which = acquisition_of(s.access);
            if acquired {
                self::acquired(addr, which, ip, recording, via::PLAIN);
            } else {
                contended(addr, which, ip, recording);
            }
        }
        SOFT_RUST_RW_UNLOCK => rw_released(addr, ip, recording),
        SOFT_RUST_UNLOCK => released(addr, ip, recording),
        SOFT_RUST_ONCE_CHECK if acquired => once_seen_complete(addr, ip),
        SOFT_RUST_UNPARK => unparking(addr, ip),
        SOFT_RUST_TRY_FAST => tried(addr, acquired, ip, recording),
        _ => {}
    }
}

/// The thread's acquisition (`which`) of the Rust lock at `addr` goes the slow
/// way, which may sleep for good (a deadlock): its slow path's return records it,
/// and the driver sees the thread blocked, as in `pthread_mutex_lock`. Recording,
/// the ring's pending slot says so meanwhile (`site`: where the program locks),
/// so a run that ends with the thread still waiting shows a `blocked` event on
/// the lock, as a pthread lock's does — but not for a condvar wait's
/// reacquisition of its mutex, which is the wait's.
fn contended(addr: u64, which: u16, site: u64, recording: bool) {
    CONTENDED.with(|c| c.set((addr, which)));
    if recording && waiting_on(addr).is_none() {
        LOCK_PENDING.with(|p| p.set(crate::record::block_begin(which, addr, site)));
    }
    if let Some(c) = crate::gate::enter() {
        c.set_state(crate::shm::STATE_BLOCKED, which as u32);
    }
}

/// Where the `je` or `jne` of site `s`, trapped at `ip`, goes when the zero flag is
/// `zf` (a `je` is taken when it is set, a `jne` when it is clear).
fn branch_destination(s: &SoftSite, ip: u64, zf: bool) -> u64 {
    let next = ip + s.len as u64;
    let je = s.bytes[0] == 0x74 || (s.bytes[0] == 0x0f && s.bytes[1] == 0x84);
    if je == zf {
        next.wrapping_add(branch_displacement(s) as u64)
    } else {
        next
    }
}

/// Emulates the `ret` a trap stopped at (`ret` traps before it pops: `rsp` points
/// at the return address): the thread goes on in its caller, at the address
/// returned.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of a trap at a `ret` of the program.
unsafe fn emulate_ret(ctx: *mut c_void) -> u64 {
    // SAFETY: the caller's contract: `rsp` points at the return address.
    unsafe {
        let rsp = *greg(ctx, GREG_RSP) as u64;
        let ret = *(rsp as *const u64);
        *greg(ctx, GREG_RSP) = rsp.wrapping_add(8) as i64;
        *greg(ctx, GREG_RIP) = ret as i64;
        ret
    }
}

/// The displacement of a conditional branch (`7x rel8`, `0f 8x rel32`).
fn branch_displacement(s: &SoftSite) -> i64 {
    match s.bytes[0] {
        0x70..=0x7f => s.bytes[1] as i8 as i64,
        _ => i32::from_le_bytes([s.bytes[2], s.bytes[3], s.bytes[4], s.bytes[5]]) as i64,
    }
}

/// Reads the table from descriptor `fd` (closing it) and plants the breakpoints
/// (the Rust mutex gates only when `replaying`).
///
/// # Safety
/// Once, at start-up, on the only thread, with the descriptor the recorder passed
/// (negative: nothing to do).
pub(crate) unsafe fn start(fd: c_int, replaying: bool) {
    if fd < 0 {
        return;
    }
    // SAFETY: the recorder's descriptor (the caller's contract); a private,
    // read-only mapping of its first page.
    let head = unsafe { mmap(null_mut(), PAGE, PROT_READ, MAP_PRIVATE, fd, 0) };
    if head == MAP_FAILED {
        // SAFETY: our descriptor.
        unsafe { close(fd) };
        crate::die("cannot map the --discover site table");
    }
    // SAFETY: the mapping starts with the header the recorder wrote.
    let header = unsafe { *(head as *const SoftHeader) };
    // SAFETY: the mapping we just made.
    unsafe { crate::raw_syscall3(SYS_MUNMAP, head as isize, PAGE as isize, 0) };
    if header.magic != SOFT_MAGIC || header.version != SOFT_VERSION {
        crate::die("the --discover site table has the wrong layout (ordo and its agent differ)");
    }
    let n = header.n_sites as usize;
    let len = std::mem::size_of::<SoftHeader>() + n * std::mem::size_of::<SoftSite>();
    // SAFETY: as above, the whole table.
    let all = unsafe { mmap(null_mut(), len, PROT_READ, MAP_PRIVATE, fd, 0) };
    // SAFETY: our descriptor, not used after.
    unsafe { close(fd) };
    if all == MAP_FAILED || n == 0 {
        return;
    }
    // SAFETY: the sites follow the header in the mapping (`len` bytes long).
    let sites =
        unsafe { (all as *const u8).add(std::mem::size_of::<SoftHeader>()) } as *const SoftSite;
    // SAFETY: `n` sites lie there, and the mapping is never unmapped.
    let list = unsafe { std::slice::from_raw_parts(sites, n) };
    let mut bias = 0u64;
    // SAFETY: the callback writes one u64 through `data`, which points to `bias`.
    unsafe { dl_iterate_phdr(main_bias, (&mut bias as *mut u64).cast()) };
    let lo = bias + list[0].ip;
    let hi = bias + list[n - 1].ip + 16;
    let xol_len = (n * SLOT).div_ceil(PAGE) * PAGE;
    let Some(xol) = map_near(lo, hi, xol_len) else {
        crate::die("--discover: no room within 2 GiB of the program for the out-of-line copies");
    };
    for (i, s) in list.iter().enumerate() {
        // SAFETY: slot i lies inside the `xol_len` bytes just mapped read-write.
        unsafe { fill_slot(xol.add(i * SLOT), s, bias) };
    }
    // SAFETY: our own mapping.
    unsafe {
        crate::raw_syscall3(
            SYS_MPROTECT,
            xol as isize,
            xol_len as isize,
            (PROT_READ | PROT_EXEC) as isize,
        )
    };
    // SAFETY: an anonymous mapping for the counters, never unmapped.
    let hits = unsafe {
        mmap(
            null_mut(),
            (n * 4).div_ceil(PAGE) * PAGE,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if hits == MAP_FAILED {
        crate::die("--discover: cannot map the site counters");
    }
    let table = Table {
        sites,
        n,
        bias,
        xol,
        hits: hits as *const AtomicU32,
        budget: header.budget,
    };
    // SAFETY: malloc at start-up; the table lives for the whole run.
    let boxed = unsafe { crate::malloc(std::mem::size_of::<Table>()) } as *mut Table;
    if boxed.is_null() {
        crate::die("--discover: out of memory");
    }
    // SAFETY: fresh, suitably aligned memory of the right size.
    unsafe { boxed.write(table) };
    crate::trap::install_handler();
    TABLE.store(boxed, Release);
    // Plant the breakpoints: each code page writable (and kept so: see the module
    // doc), then the `int3`.
    // A recording reaches the Rust lock operations it can through jumps to
    // trampolines (a call, not a signal); a replay keeps every breakpoint, where
    // its gates hold threads.
    let patched = if replaying {
        crate::tramp::Patched::NONE
    } else {
        // SAFETY: at start-up, on the only thread, before any breakpoint.
        unsafe { crate::tramp::install(list, bias) }
    };
    let mut page_done = 0u64;
    for s in list {
        if matches!(
            s.access,
            SOFT_RUST_LOCK_GATE | SOFT_RUST_READ_GATE | SOFT_RUST_WRITE_GATE | SOFT_RUST_TRY_GATE
        ) && !replaying
        {
            // Only a replay gates: a recording spares the trap.
            continue;
        }
        if s.access == SOFT_RUST_ONCE_LOAD {
            // Run by its check's jump patch; the check's breakpoint sees the rest.
            continue;
        }
        let ip = bias + s.ip;
        if patched.contains(ip) {
            continue;
        }
        let page = ip & !(PAGE as u64 - 1);
        let last = (ip + s.len as u64 - 1) & !(PAGE as u64 - 1);
        if page != page_done || last != page_done {
            // SAFETY: pages of the program's own code (the caller's contract).
            if !unsafe { make_writable(ip, s.len as usize) } {
                crate::die("--discover: cannot make the program's code writable (mprotect)");
            }
            page_done = last;
        }
        // SAFETY: the instruction's first byte, in a page just made writable; the
        // program's threads do not run yet.
        unsafe { (ip as *mut u8).write_volatile(0xcc) };
    }
}

/// Makes the pages of the program's code holding `[at, at + len)` writable as well
/// (they stay so for the run: a breakpoint is removed from a signal handler).
///
/// # Safety
/// The range must be the program's code.
pub(crate) unsafe fn make_writable(at: u64, len: usize) -> bool {
    let page = at & !(PAGE as u64 - 1);
    let last = (at + len.max(1) as u64 - 1) & !(PAGE as u64 - 1);
    // SAFETY: the caller's contract; the protection only grows.
    let r = unsafe {
        crate::raw_syscall3(
            SYS_MPROTECT,
            page as isize,
            (last - page) as isize + PAGE as isize,
            (PROT_READ | PROT_WRITE | PROT_EXEC) as isize,
        )
    };
    r == 0
}

/// Makes a mapping of the agent's own (`len` bytes at `at`) read-only and
/// executable.
///
/// # Safety
/// `at` must start a mapping of at least `len` bytes the agent made.
pub(crate) unsafe fn make_executable(at: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        crate::raw_syscall3(
            SYS_MPROTECT,
            at as isize,
            len as isize,
            (PROT_READ | PROT_EXEC) as isize,
        )
    };
}

/// `dl_iterate_phdr`'s callback: the first module's (the main program's) load bias.
///
/// # Safety
/// `info` must be glibc's module description and `data` point to a writable `u64`.
unsafe extern "C" fn main_bias(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: both pointers are valid for the call (the caller's contract).
    unsafe { *(data as *mut u64) = (*info).addr };
    1
}

/// Maps `len` bytes read-write within ±2 GiB of every address in `[lo, hi)`.
pub(crate) fn map_near(lo: u64, hi: u64, len: usize) -> Option<*mut u8> {
    const STEP: u64 = 16 << 20;
    const REACH: u64 = (1 << 31) - (64 << 20);
    let below = (lo & !(STEP - 1)).saturating_sub(len as u64);
    let above = (hi + STEP) & !(STEP - 1);
    for k in 0..64u64 {
        for hint in [below.checked_sub(k * STEP), Some(above + k * STEP)] {
            let Some(hint) = hint else { continue };
            if hint < (1 << 20) || hint.abs_diff(lo).max((hint + len as u64).abs_diff(hi)) > REACH {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let p = unsafe {
                mmap(
                    hint as *mut c_void,
                    len,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == hint as *mut c_void {
                return Some(p as *mut u8);
            }
            if p != MAP_FAILED {
                // SAFETY: a mapping of our own that is not where we asked.
                unsafe { crate::raw_syscall3(SYS_MUNMAP, p as isize, len as isize, 0) };
            }
        }
    }
    None
}

/// Writes the out-of-line copy of `s` at `slot`: the instruction (its RIP-relative
/// displacement rewritten for the new place) and a `jmp` back after the original.
///
/// # Safety
/// `slot` must point to [`SLOT`] writable bytes within ±2 GiB of the program.
unsafe fn fill_slot(slot: *mut u8, s: &SoftSite, bias: u64) {
    let len = s.len as usize;
    // SAFETY: `len` ≤ 15 < SLOT bytes, in the slot (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(s.bytes.as_ptr(), slot, len) };
    if s.disp_at != 0 {
        let target = bias.wrapping_add(s.disp as u64);
        let disp = target.wrapping_sub(slot as u64 + len as u64) as i64 as i32;
        // SAFETY: the displacement's 4 bytes lie inside the copied instruction.
        unsafe { (slot.add(s.disp_at as usize) as *mut [u8; 4]).write(disp.to_le_bytes()) };
    }
    let back = bias + s.ip + len as u64;
    let rel = back.wrapping_sub(slot as u64 + len as u64 + 5) as i64 as i32;
    // SAFETY: 5 more bytes, still inside the slot.
    unsafe {
        slot.add(len).write(0xe9);
        (slot.add(len + 1) as *mut [u8; 4]).write(rel.to_le_bytes());
    }
}

/// A software breakpoint at `ip` trapped: records the access and resumes the
/// thread at the instruction's copy. `false` when `ip` is not one of ours.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of the trap.
pub(crate) unsafe fn trap(ip: u64, ctx: *mut c_void) -> bool {
    let table = TABLE.load(Acquire);
    if table.is_null() {
        return false;
    }
    // SAFETY: set once at start-up, never freed.
    let t = unsafe { &*table };
    // SAFETY: `n` sites, never unmapped.
    let sites = unsafe { std::slice::from_raw_parts(t.sites, t.n) };
    let Some(link) = ip.checked_sub(t.bias) else {
        return false;
    };
    let Ok(i) = sites.binary_search_by_key(&link, |s| s.ip) else {
        return false;
    };
    let s = &sites[i];
    if is_rust_lock(s) {
        // SAFETY: the trap's context (the caller's contract).
        unsafe { rust_lock(t, s, i, ip, ctx) };
        return true;
    }
    // SAFETY: one counter per site.
    let hits = unsafe { &*t.hits.add(i) }.fetch_add(1, Relaxed) + 1;
    if t.budget != 0 && hits == t.budget && s.gate == SOFT_NO_GATE {
        // The last trap this site takes: the original byte back (the page stayed
        // writable). A thread already past the fetch of the `int3` still traps and
        // is handled like any other.
        // SAFETY: the instruction's first byte in the program's writable code.
        unsafe { (ip as *mut u8).write_volatile(s.bytes[0]) };
    }
    if s.gate != SOFT_NO_GATE {
        // A replay gate with more points than the thread has debug registers:
        // held here like at a hardware breakpoint (`trap::access_trap`), which
        // sets the trap flag when others wait for this point: the single step after
        // the copy below marks it done.
        // SAFETY: the trap's context (the caller's contract).
        unsafe { crate::trap::access_trap(s.gate, ctx) };
    }
    let arrivals = arrival(i, t.n);
    if crate::record::on() {
        // SAFETY: the trap's context (the caller's contract).
        let addr = unsafe { effective_address(s, t.bias, ctx) };
        crate::record::emit(
            s.access as u16,
            s.via,
            addr,
            ip,
            crate::record::next_seq(addr),
            s.size as u64,
            arrivals as i32,
        );
    }
    // SAFETY: the saved rip of the trap's context: resume at the copy.
    unsafe { *greg(ctx, GREG_RIP) = t.xol.add(i * SLOT) as i64 };
    true
}

/// The calling thread's arrivals at site `i`, this one included.
fn arrival(i: usize, n: usize) -> u32 {
    let mut counts = ARRIVALS.with(|a| a.get());
    if counts.is_null() {
        // SAFETY: a fresh anonymous mapping (pages appear as the thread touches them).
        let p = unsafe {
            mmap(
                null_mut(),
                (n * 4).div_ceil(PAGE) * PAGE,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == MAP_FAILED {
            return 0;
        }
        counts = p as *mut u32;
        ARRIVALS.with(|a| a.set(counts));
    }
    // SAFETY: `n` counters in this thread's own mapping; i < n.
    unsafe {
        let c = counts.add(i);
        *c += 1;
        *c
    }
}

/// The runtime address the site's instruction reaches, from the trapped registers.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of the trap.
unsafe fn effective_address(s: &SoftSite, bias: u64, ctx: *mut c_void) -> u64 {
    let reg = |r: u8| -> u64 {
        match GREG_OF_REG.get(r as usize) {
            // SAFETY: the trap's context (the caller's contract); `g` is a gregs index.
            Some(&g) => unsafe { *greg(ctx, g) as u64 },
            None => 0,
        }
    };
    effective_address_with(s, bias, &reg)
}

/// The address site `s`'s memory operand reaches, the registers read by `reg`
/// (`ordo_probe_common::reg` numbers).
fn effective_address_with(s: &SoftSite, bias: u64, reg: &dyn Fn(u8) -> u64) -> u64 {
    if s.disp_at != 0 || (s.base == reg::NONE && s.index == reg::NONE) {
        // RIP-relative: its link-time target is in `disp`.
        return bias.wrapping_add(s.disp as u64);
    }
    let mut ea = s.disp as u64;
    if s.base != reg::NONE {
        ea = ea.wrapping_add(reg(s.base));
    }
    if s.index != reg::NONE {
        ea = ea.wrapping_add(reg(s.index).wrapping_mul(s.scale.max(1) as u64));
    }
    ea
}
