//! The interposed functions: each finds the real libc function (`dlsym(RTLD_NEXT)`,
//! once) and runs it between the replay gate's and the recorder's hooks. With
//! neither mode on, a wrapper is one load and a jump to the real function.
//!
//! Where each event is recorded matches the eBPF probes: releases, signals, posts
//! and barrier arrivals before the real call (their sequence number is taken while
//! the effect has not happened yet); acquisitions, waits, joins and creations after
//! it returns, with its result.
//!
//! # Safety
//!
//! Every exported wrapper (`pub unsafe extern "C-unwind" fn`, named after the libc
//! function it interposes) has that libc function's own contract: it forwards its
//! arguments, unchanged, to the real function, and uses the object pointers only as
//! addresses (a condvar wait's gate may unlock and relock the mutex the wait returned
//! with held, as the program could). A caller that keeps libc's contract keeps the
//! wrapper's; the `// SAFETY:` comments on the forwarding calls refer to this.
//!
//! The wrappers are exported under libc's names only outside `cargo test`: the
//! crate's unit-test binary would otherwise interpose them on its own test harness
//! (a release build of it crashed in the `syscall` wrapper, called by std's futex
//! wake: the wrappers are built to run in a program the agent was preloaded into).

use std::ffi::{c_char, c_int, c_long, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering::*};

use crate::gate::{enter, shared, thread_begin, thread_end, Caller, GateObject, ME, NONE};
use crate::probe_common::inproc::futex_extra;
use crate::probe_common::via;
use crate::record;
use crate::shm::*;
use crate::{die, dlsym, dlvsym, errno, free, malloc, set_errno, SYS_FUTEX};

const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The next definition of a libc function after this library's (NUL-terminated name).
fn resolve(name: &'static str, version: Option<&'static str>) -> usize {
    // SAFETY: NUL-terminated names; dlsym/dlvsym are thread-safe.
    let p = unsafe {
        let mut p = null_mut();
        if let Some(v) = version {
            p = dlvsym(RTLD_NEXT, name.as_ptr().cast(), v.as_ptr().cast());
        }
        if p.is_null() {
            p = dlsym(RTLD_NEXT, name.as_ptr().cast::<c_char>());
        }
        p
    };
    if p.is_null() {
        die(&format!(
            "cannot find the real {}",
            name.trim_end_matches('\0')
        ));
    }
    p as usize
}

/// The real function behind a wrapper, resolved once.
macro_rules! real {
    ($name:literal $(@ $version:literal)?, fn($($arg:ty),*) -> $ret:ty) => {{
        static PTR: AtomicUsize = AtomicUsize::new(0);
        let mut p = PTR.load(Relaxed);
        if p == 0 {
            #[allow(
                unused_mut,
                unused_assignments,
                reason = "`version` is reassigned only when the call names a symbol version"
            )]
            let mut version: Option<&'static str> = None;
            $(version = Some(concat!($version, "\0"));)?
            p = resolve(concat!($name, "\0"), version);
            PTR.store(p, Relaxed);
        }
        // SAFETY: `p` is the address of the libc function with this signature.
        unsafe { std::mem::transmute::<usize, unsafe extern "C-unwind" fn($($arg),*) -> $ret>(p) }
    }};
}

/// The call site: the wrapper's return address, read from its frame (the agent is
/// built with frame pointers); behind a sanitizer's interceptor, the program's
/// return address above the interceptor's frame (`frames`). Must be used in the
/// wrapper's own body.
///
/// Only the copy `ordo` embeds is built with frame pointers (agent/build.rs passes
/// `--cfg ordo_frame_pointers` with them). Cargo's own build of this workspace
/// member (`target/*/libordo_preload.so`, for clippy and the unit tests) has none:
/// there `rbp` may hold anything, so it reports no site rather than read through it.
#[cfg(ordo_frame_pointers)]
macro_rules! site {
    () => {{
        let frame: *const u64;
        // SAFETY: reads the frame pointer register; [rbp + 8] is the return address,
        // and the caller's frames lie above [rbp + 16].
        unsafe {
            std::arch::asm!("mov {}, rbp", out(reg) frame, options(nomem, nostack, preserves_flags));
            let ret = *frame.add(1);
            if crate::frames::in_runtime(ret) {
                crate::frames::program_site(frame.add(2), ret)
            } else {
                ret
            }
        }
    }};
}

/// The call site, unknown without frame pointers (see above).
#[cfg(not(ordo_frame_pointers))]
macro_rules! site {
    () => {
        0u64
    };
}

type P = *mut c_void;

/// A real libc function taking one object (a mutex's lock, trylock, unlock).
type MutexFn = unsafe extern "C-unwind" fn(P) -> c_int;

/// Runs `call`, an event of `kind` on `addr` that takes effect inside it and lets
/// others proceed (a release, signal, post): gated, stamped and numbered before the
/// call, recorded after it.
#[inline(always)]
fn release(kind: u16, via: u8, addr: P, site: u64, call: impl FnOnce() -> c_int) -> c_int {
    let addr = addr as u64;
    let gate = enter();
    let mut stamp = None;
    if let Some(c) = gate {
        c.gate(kind, addr, GateObject::Addr);
        stamp = c.stamp_before(kind);
    }
    // The number and the time are taken while the effect has not happened (as the
    // eBPF path's entry probe takes them); the record is written after the call,
    // which keeps it out of the program's critical section. Stamped before the
    // call, the clock's read (`rdtsc`, whose result the record waits for) overlaps
    // the call rather than following it; the site's dictionary line is fetched
    // meanwhile too (`record::prefetch_site`).
    let numbered = if !record::on() {
        None
    } else {
        record::prefetch_site(site);
        let seq = if kind == kind::MUTEX_UNLOCK {
            record::next_seq_held(addr)
        } else {
            record::next_seq(addr)
        };
        Some((seq, record::stamp_now(kind, via, addr)))
    };
    let r = call();
    if let Some((seq, ts)) = numbered {
        record::emit_at(ts, kind, via, addr, site, seq, 0, 0);
    }
    if let Some(c) = gate {
        let saved = errno();
        c.happened(kind, addr, stamp);
        set_errno(saved);
    }
    r
}

/// A call that acquires (`ok_kind` on success) or fails (`failed_kind`): gated as
/// either before the call (which one it is is known only afterwards), recorded
/// after it returns.
///
/// A call that may block forever notes itself in the ring's pending slot
/// (`record::block_begin`) — unless `took_without_waiting`, the non-blocking
/// form of the same call (`pthread_mutex_trylock` for `pthread_mutex_lock`),
/// succeeds first: a call that has already returned cannot hang, and an
/// uncontended lock then writes no slot. Those stores, followed at once by the
/// real lock's `lock`-prefixed instruction that must wait for them, were ~8 %
/// of the lock wrapper's samples in a `perf` of memcached, whose networking
/// evicts the slot's line between calls. A try that succeeds leaves the mutex
/// as the lock would (held once more by this thread, whatever its type); one
/// that fails changes nothing, and the lock follows. Not while a schedule is
/// enforced: the gate's blocked state stays as it was.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "everything one acquisition is gated and recorded with; inlined into each wrapper"
)]
fn acquire(
    ok_kind: u16,
    failed_kind: u16,
    via: u8,
    addr: P,
    blocking: u32,
    site: u64,
    took_without_waiting: impl FnOnce() -> bool,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let addr = addr as u64;
    let gate = enter();
    if let Some(c) = gate {
        c.gate(ok_kind, addr, GateObject::Addr);
        c.gate(failed_kind, addr, GateObject::Addr);
        if blocking != STATE_RUNNING {
            c.set_state(blocking, ok_kind as u32);
        }
    }
    // The counter is taken once the call returns; fetched now, its line's miss
    // (memcached's 8 192 item locks) overlaps the mutex's own.
    let recording = record::on();
    if recording {
        record::prefetch_counter(addr);
        record::prefetch_site(site);
    }
    let r = if recording && blocking == STATE_BLOCKED {
        if gate.is_none() && took_without_waiting() {
            0
        } else {
            let pending = record::block_begin(ok_kind, addr, site);
            let r = call();
            record::block_end(pending);
            r
        }
    } else {
        call()
    };
    if let Some(c) = gate {
        if blocking != STATE_RUNNING {
            c.set_state(STATE_RUNNING, 0);
        }
    }
    acquired(ok_kind, failed_kind, via, addr, site, r, gate)
}

/// After an acquisition call returned `r`: records it and counts it as the kind it
/// turned out to be (errno preserved).
#[inline(always)]
fn acquired(
    ok_kind: u16,
    failed_kind: u16,
    via: u8,
    addr: u64,
    site: u64,
    r: c_int,
    gate: Option<Caller>,
) -> c_int {
    // Recording leaves errno as it is (`record::keeping_errno`); the gate may not.
    if record::on() {
        if r == 0 {
            let seq = if ok_kind == kind::MUTEX_LOCK {
                record::next_seq_held(addr)
            } else {
                record::next_seq(addr)
            };
            record::emit(ok_kind, via, addr, site, seq, 0, 0);
        } else {
            record::emit(failed_kind, via, addr, site, 0, 0, r);
        }
    }
    if let Some(c) = gate {
        let saved = errno();
        c.happened(if r == 0 { ok_kind } else { failed_kind }, addr, None);
        set_errno(saved);
    }
    r
}

/// A non-blocking acquisition (`trylock`, `trywait`): tried first, because a failed
/// try is no acquisition and must not wait for the gates of the thread's next one
/// (a thread that tries a mutex it already holds fails with EBUSY and goes on).
/// A named failure is gated before the try. A success that came too early for the
/// thread's next gated acquisition is backed out (`undo`), held at that gate, and
/// tried again, whose result the program gets: a try may fail at any moment.
#[inline(always)]
fn try_acquire(
    ok_kind: u16,
    failed_kind: u16,
    via: u8,
    addr: P,
    site: u64,
    call: impl Fn() -> c_int,
    undo: impl FnOnce(),
) -> c_int {
    let addr = addr as u64;
    let gate = enter();
    if let Some(c) = gate {
        c.gate(failed_kind, addr, GateObject::Addr);
    }
    // As in `acquire` (memcached's LRU maintainer tries item locks all over).
    if record::on() {
        record::prefetch_counter(addr);
        record::prefetch_site(site);
    }
    let mut r = call();
    if let Some(c) = gate {
        if r == 0 && c.would_wait(ok_kind, addr) {
            undo();
            c.gate(ok_kind, addr, GateObject::Addr);
            r = call();
        }
    }
    acquired(ok_kind, failed_kind, via, addr, site, r, gate)
}

// ---------------------------------------------------------------------------------
// Mutexes
// ---------------------------------------------------------------------------------

macro_rules! mutex_acquire {
    ($name:ident, $real:literal, $via:expr, $state:expr $(, $arg:ident : $ty:ty)*) => {
        #[doc = concat!("`", $real, "`, interposed: gated and recorded as a mutex acquisition.")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C-unwind" fn $name(m: P $(, $arg: $ty)*) -> c_int {
            let real = real!($real, fn(P $(, $ty)*) -> c_int);
            if !record::on() && !crate::gate::on() {
                // SAFETY: the caller's arguments, forwarded (module doc).
                return unsafe { real(m $(, $arg)*) };
            }
            let site = site!();
            // SAFETY: the caller's arguments, forwarded (module doc).
            acquire(kind::MUTEX_LOCK, kind::MUTEX_LOCK_FAILED, $via, m, $state, site, || false, || unsafe { real(m $(, $arg)*) })
        }
    };
}

/// `pthread_mutex_lock`, interposed: gated and recorded as a mutex acquisition,
/// tried first without waiting (see [`acquire`]).
///
/// The three mutex wrappers keep their path while recording with no schedule
/// enforced (`record::Lane`) in line and everything else out of line (the gated
/// path, a lock that has to wait), so that the path a server takes millions of
/// times a second is a short run of code: a network server's kernel side evicts
/// the instruction cache between its calls.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_lock(m: P) -> c_int {
    let real = real!("pthread_mutex_lock", fn(P) -> c_int);
    if !record::on() && !crate::gate::on() {
        // SAFETY: the caller's argument, forwarded (module doc).
        return unsafe { real(m) };
    }
    let site = site!();
    let try_lock = real!("pthread_mutex_trylock", fn(P) -> c_int);
    if crate::gate::on() {
        // SAFETY: the caller's argument, forwarded.
        return unsafe { mutex_lock_gated(m, site, real, try_lock) };
    }
    let lane = record::lane();
    let addr = m as u64;
    lane.fetch_ahead(addr, site);
    // SAFETY: the caller's argument, forwarded (module doc).
    let r = if unsafe { try_lock(m) } == 0 {
        0
    } else {
        // SAFETY: as above.
        unsafe { mutex_lock_waiting(m, site, real) }
    };
    mutex_acquired(lane, via::PLAIN, addr, site, r)
}

/// `pthread_mutex_lock`'s real call after its first try failed: noted in the
/// ring's pending slot while it may block (`record::block_begin`).
///
/// # Safety
/// `pthread_mutex_lock`'s contract (module doc).
#[cold]
#[inline(never)]
unsafe fn mutex_lock_waiting(m: P, site: u64, real: MutexFn) -> c_int {
    let pending = record::block_begin(kind::MUTEX_LOCK, m as u64, site);
    // SAFETY: the caller's argument, forwarded (module doc).
    let r = unsafe { real(m) };
    record::block_end(pending);
    r
}

/// `pthread_mutex_lock` while a schedule is enforced (the generic path, see
/// [`acquire`]).
///
/// # Safety
/// `pthread_mutex_lock`'s contract (module doc).
#[cold]
#[inline(never)]
unsafe fn mutex_lock_gated(m: P, site: u64, real: MutexFn, try_lock: MutexFn) -> c_int {
    acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        via::PLAIN,
        m,
        STATE_BLOCKED,
        site,
        // SAFETY: the caller's argument, forwarded (module doc).
        || unsafe { try_lock(m) } == 0,
        // SAFETY: as above.
        || unsafe { real(m) },
    )
}

/// `pthread_mutex_trylock`, interposed: see `try_acquire` (and, for the path
/// while recording, `pthread_mutex_lock`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_trylock(m: P) -> c_int {
    let real = real!("pthread_mutex_trylock", fn(P) -> c_int);
    if !record::on() && !crate::gate::on() {
        // SAFETY: the caller's argument, forwarded (module doc).
        return unsafe { real(m) };
    }
    let site = site!();
    if crate::gate::on() {
        // SAFETY: the caller's argument, forwarded.
        return unsafe { mutex_trylock_gated(m, site, real) };
    }
    let lane = record::lane();
    let addr = m as u64;
    lane.fetch_ahead(addr, site);
    // SAFETY: the caller's argument, forwarded (module doc).
    let r = unsafe { real(m) };
    mutex_acquired(lane, via::TRY, addr, site, r)
}

/// `pthread_mutex_trylock` while a schedule is enforced (see `try_acquire`).
///
/// # Safety
/// `pthread_mutex_trylock`'s contract (module doc).
#[cold]
#[inline(never)]
unsafe fn mutex_trylock_gated(m: P, site: u64, real: MutexFn) -> c_int {
    let unlock = real!("pthread_mutex_unlock", fn(P) -> c_int);
    try_acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        via::TRY,
        m,
        site,
        // SAFETY: the caller's argument, forwarded (module doc).
        || unsafe { real(m) },
        || {
            // SAFETY: backs out a trylock that succeeded: this thread holds `m`.
            unsafe { unlock(m) };
        },
    )
}
mutex_acquire!(pthread_mutex_timedlock, "pthread_mutex_timedlock", via::TIMED, STATE_TIMED, ts: P);
mutex_acquire!(pthread_mutex_clocklock, "pthread_mutex_clocklock", via::TIMED, STATE_TIMED, clock: c_int, ts: P);

/// `pthread_mutex_unlock`, interposed: gated and recorded as a release.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_mutex_unlock(m: P) -> c_int {
    let real = real!("pthread_mutex_unlock", fn(P) -> c_int);
    if !record::on() && !crate::gate::on() {
        // SAFETY: the caller's argument, forwarded (module doc).
        return unsafe { real(m) };
    }
    let site = site!();
    if crate::gate::on() {
        // SAFETY: the caller's argument, forwarded.
        return unsafe { mutex_unlock_gated(m, site, real) };
    }
    // `release`'s path without a gate, on one lookup of the recording.
    let lane = record::lane();
    let addr = m as u64;
    lane.fetch_site(site);
    let seq = record::next_seq_held(addr);
    let ts = lane.stamp(kind::MUTEX_UNLOCK, via::PLAIN, addr);
    // SAFETY: the caller's argument, forwarded (module doc).
    let r = unsafe { real(m) };
    lane.emit_at(ts, kind::MUTEX_UNLOCK, via::PLAIN, addr, site, seq, 0);
    r
}

/// `pthread_mutex_unlock` while a schedule is enforced (see [`release`]).
///
/// # Safety
/// `pthread_mutex_unlock`'s contract (module doc).
#[cold]
#[inline(never)]
unsafe fn mutex_unlock_gated(m: P, site: u64, real: MutexFn) -> c_int {
    // SAFETY: the caller's argument, forwarded (module doc).
    release(kind::MUTEX_UNLOCK, via::PLAIN, m, site, || unsafe {
        real(m)
    })
}

/// `acquired`'s path without a gate for a mutex lock or trylock (`via`) that
/// returned `r`, on the [`record::Lane`] looked up before the call.
#[inline(always)]
fn mutex_acquired(lane: record::Lane, via: u8, addr: u64, site: u64, r: c_int) -> c_int {
    // A recorder may have detached during the call.
    if record::on() {
        if r == 0 {
            let seq = record::next_seq_held(addr);
            let ts = lane.stamp(kind::MUTEX_LOCK, via, addr);
            lane.emit_at(ts, kind::MUTEX_LOCK, via, addr, site, seq, 0);
        } else {
            let ts = lane.stamp(kind::MUTEX_LOCK_FAILED, via, addr);
            lane.emit_at(ts, kind::MUTEX_LOCK_FAILED, via, addr, site, 0, r);
        }
    }
    r
}

// ---------------------------------------------------------------------------------
// Condition variables
// ---------------------------------------------------------------------------------

/// `pthread_cond_*wait`: the start of the wait (which releases the mutex) is gated
/// and recorded before the call; the wake-up and the reacquisition happen inside
/// it, so its gate can only hold the thread after it returns (with the mutex held),
/// and they are recorded then. The mutex release and reacquisition are recorded
/// (`via` = cond_wait) but are no `mutex_*` events for schedules: they count in no
/// `mutex_unlock#N`/`mutex_lock#N` (`ordo_schedule::namer`), the condvar's
/// `cond_wait_begin`/`cond_wait` name them.
///
/// # Safety
/// `call` must be a condvar wait on `c` with the mutex `m`, which the calling thread
/// holds (as the wait requires).
unsafe fn cond_wait(
    c: P,
    m: P,
    via_: u8,
    blocking: u32,
    site: u64,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let (cond, mutex) = (c as u64, m as u64);
    let gate = enter();
    let recording = record::on();
    cond_wait_begins(gate, cond, mutex, via_, site, recording);
    if let Some(me) = gate {
        me.set_state(blocking, kind::COND_WAIT as u32);
    }
    let pending = if recording && blocking == STATE_BLOCKED {
        record::block_begin(kind::COND_WAIT, cond, site)
    } else {
        None
    };
    let r = call();
    record::block_end(pending);
    let saved = errno();
    if let Some(me) = gate {
        me.set_state(STATE_RUNNING, 0);
        me.finish_in_progress();
        if me.would_wait(kind::COND_WAIT, cond) {
            // The wait returned too early for the schedule: give the mutex back, wait
            // at the gate, and take it again, as if the wake-up had come later (which
            // a wait may always do). So `X -> T:cond_wait(cv)#k` can order another
            // thread's critical section on the mutex between the wake-up and the
            // reacquisition.
            let unlock = real!("pthread_mutex_unlock", fn(P) -> c_int);
            let lock = real!("pthread_mutex_lock", fn(P) -> c_int);
            // SAFETY: the wait returned with `m` held by this thread.
            unsafe { unlock(m) };
            me.gate(kind::COND_WAIT, cond, GateObject::Addr);
            me.set_state(STATE_BLOCKED, kind::MUTEX_LOCK as u32);
            // SAFETY: takes back the mutex this thread gave back just above.
            unsafe { lock(m) };
            me.set_state(STATE_RUNNING, 0);
        }
    }
    // Recorded once the mutex is held for good (after a gate's give-back too).
    if record::on() {
        record_cond_pair(
            kind::COND_WAIT,
            kind::MUTEX_LOCK,
            via_,
            cond,
            mutex,
            site,
            r,
        );
    }
    if let Some(me) = gate {
        me.happened(kind::COND_WAIT, cond, None);
    }
    set_errno(saved);
    r
}

/// A condvar wait on `cond` with `mutex` begins (a `pthread_cond_wait` or a Rust
/// `Condvar::wait`): gated, counted as taking effect inside the call (done for
/// others once the thread sleeps in it), and recorded with the mutex's release.
pub(crate) fn cond_wait_begins(
    gate: Option<Caller>,
    cond: u64,
    mutex: u64,
    via_: u8,
    site: u64,
    recording: bool,
) {
    if let Some(me) = gate {
        me.gate(kind::COND_WAIT_BEGIN, cond, GateObject::Addr);
        let stamp = me.stamp_before(kind::COND_WAIT_BEGIN);
        me.begins(kind::COND_WAIT_BEGIN, cond, stamp);
    }
    if recording {
        record_cond_pair(
            kind::COND_WAIT_BEGIN,
            kind::MUTEX_UNLOCK,
            via_,
            cond,
            mutex,
            site,
            0,
        );
    }
}

/// A condvar wait's two records on entry (the wait begins, the mutex is released)
/// or on return (the wait returned, the mutex is reacquired): each object's event,
/// numbered in that order, naming the other object.
pub(crate) fn record_cond_pair(
    cond_kind: u16,
    mutex_kind: u16,
    via_: u8,
    cond: u64,
    mutex: u64,
    site: u64,
    result: c_int,
) {
    let seq = record::next_seq(cond);
    record::emit(cond_kind, via_, cond, site, seq, mutex, result);
    // Before the wait and after it returns, the thread holds the mutex.
    let seq = record::next_seq_held(mutex);
    record::emit(mutex_kind, via::COND_WAIT, mutex, site, seq, cond, 0);
}

/// `pthread_cond_wait`, interposed: see `cond_wait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_wait(c: P, m: P) -> c_int {
    let real = real!("pthread_cond_wait" @ "GLIBC_2.3.2", fn(P, P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc): it holds `m`, and
    // `call` is the real wait on `c` with `m`.
    unsafe { cond_wait(c, m, via::PLAIN, STATE_BLOCKED, site, || real(c, m)) }
}

/// `pthread_cond_timedwait`, interposed: see `cond_wait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_timedwait(c: P, m: P, ts: P) -> c_int {
    let real = real!("pthread_cond_timedwait" @ "GLIBC_2.3.2", fn(P, P, P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc): it holds `m`, and
    // `call` is the real wait on `c` with `m`.
    unsafe { cond_wait(c, m, via::TIMED, STATE_TIMED, site, || real(c, m, ts)) }
}

/// `pthread_cond_clockwait`, interposed: see `cond_wait`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_clockwait(c: P, m: P, clock: c_int, ts: P) -> c_int {
    let real = real!("pthread_cond_clockwait", fn(P, P, c_int, P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc): it holds `m`, and
    // `call` is the real wait on `c` with `m`.
    unsafe {
        cond_wait(c, m, via::TIMED, STATE_TIMED, site, || {
            real(c, m, clock, ts)
        })
    }
}

/// `pthread_cond_signal`, interposed: gated and recorded as a release.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_signal(c: P) -> c_int {
    let real = real!("pthread_cond_signal" @ "GLIBC_2.3.2", fn(P) -> c_int);
    let site = site!();
    // SAFETY: the caller's argument, forwarded (module doc).
    release(kind::COND_SIGNAL, via::PLAIN, c, site, || unsafe {
        real(c)
    })
}

/// `pthread_cond_broadcast`, interposed: gated and recorded as a release.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_cond_broadcast(c: P) -> c_int {
    let real = real!("pthread_cond_broadcast" @ "GLIBC_2.3.2", fn(P) -> c_int);
    let site = site!();
    // SAFETY: the caller's argument, forwarded (module doc).
    release(kind::COND_BROADCAST, via::PLAIN, c, site, || unsafe {
        real(c)
    })
}

// ---------------------------------------------------------------------------------
// Read-write locks
// ---------------------------------------------------------------------------------

macro_rules! rwlock_acquire {
    ($name:ident, $real:literal, $ok:expr, $via:expr, $state:expr $(, $arg:ident : $ty:ty)*) => {
        #[doc = concat!("`", $real, "`, interposed: gated and recorded as a rwlock acquisition.")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C-unwind" fn $name(l: P $(, $arg: $ty)*) -> c_int {
            let real = real!($real, fn(P $(, $ty)*) -> c_int);
            let site = site!();
            // SAFETY: the caller's arguments, forwarded (module doc).
            acquire($ok, kind::RWLOCK_LOCK_FAILED, $via, l, $state, site, || false, || unsafe { real(l $(, $arg)*) })
        }
    };
}

rwlock_acquire!(
    pthread_rwlock_rdlock,
    "pthread_rwlock_rdlock",
    kind::RWLOCK_RDLOCK,
    via::PLAIN,
    STATE_BLOCKED
);
/// `pthread_rwlock_try*lock`: see [`try_acquire`].
macro_rules! rwlock_try {
    ($name:ident, $real:literal, $ok:expr) => {
        #[doc = concat!("`", $real, "`, interposed: see `try_acquire`.")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C-unwind" fn $name(l: P) -> c_int {
            let real = real!($real, fn(P) -> c_int);
            let site = site!();
            let unlock = real!("pthread_rwlock_unlock", fn(P) -> c_int);
            try_acquire(
                $ok,
                kind::RWLOCK_LOCK_FAILED,
                via::TRY,
                l,
                site,
                // SAFETY: the caller's argument, forwarded (module doc).
                || unsafe { real(l) },
                || {
                    // SAFETY: backs out a try that succeeded: this thread holds `l`.
                    unsafe { unlock(l) };
                },
            )
        }
    };
}

rwlock_try!(
    pthread_rwlock_tryrdlock,
    "pthread_rwlock_tryrdlock",
    kind::RWLOCK_RDLOCK
);
rwlock_acquire!(pthread_rwlock_timedrdlock, "pthread_rwlock_timedrdlock", kind::RWLOCK_RDLOCK, via::TIMED, STATE_TIMED, ts: P);
rwlock_acquire!(pthread_rwlock_clockrdlock, "pthread_rwlock_clockrdlock", kind::RWLOCK_RDLOCK, via::TIMED, STATE_TIMED, clock: c_int, ts: P);
rwlock_acquire!(
    pthread_rwlock_wrlock,
    "pthread_rwlock_wrlock",
    kind::RWLOCK_WRLOCK,
    via::PLAIN,
    STATE_BLOCKED
);
rwlock_try!(
    pthread_rwlock_trywrlock,
    "pthread_rwlock_trywrlock",
    kind::RWLOCK_WRLOCK
);
rwlock_acquire!(pthread_rwlock_timedwrlock, "pthread_rwlock_timedwrlock", kind::RWLOCK_WRLOCK, via::TIMED, STATE_TIMED, ts: P);
rwlock_acquire!(pthread_rwlock_clockwrlock, "pthread_rwlock_clockwrlock", kind::RWLOCK_WRLOCK, via::TIMED, STATE_TIMED, clock: c_int, ts: P);

/// `pthread_rwlock_unlock`, interposed: gated and recorded as a release.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_rwlock_unlock(l: P) -> c_int {
    let real = real!("pthread_rwlock_unlock", fn(P) -> c_int);
    let site = site!();
    // SAFETY: the caller's argument, forwarded (module doc).
    release(kind::RWLOCK_UNLOCK, via::PLAIN, l, site, || unsafe {
        real(l)
    })
}

// ---------------------------------------------------------------------------------
// Semaphores and barriers
// ---------------------------------------------------------------------------------

macro_rules! sem_acquire {
    ($name:ident, $real:literal, $via:expr, $state:expr $(, $arg:ident : $ty:ty)*) => {
        #[doc = concat!("`", $real, "`, interposed: gated and recorded as a semaphore wait.")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C-unwind" fn $name(s: P $(, $arg: $ty)*) -> c_int {
            let real = real!($real, fn(P $(, $ty)*) -> c_int);
            let site = site!();
            // SAFETY: the caller's arguments, forwarded (module doc).
            acquire(kind::SEM_WAIT, kind::SEM_WAIT_FAILED, $via, s, $state, site, || false, || unsafe { real(s $(, $arg)*) })
        }
    };
}

sem_acquire!(sem_wait, "sem_wait", via::PLAIN, STATE_BLOCKED);
/// `sem_trywait`, interposed: see `try_acquire`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn sem_trywait(s: P) -> c_int {
    let real = real!("sem_trywait", fn(P) -> c_int);
    let site = site!();
    let post = real!("sem_post", fn(P) -> c_int);
    try_acquire(
        kind::SEM_WAIT,
        kind::SEM_WAIT_FAILED,
        via::TRY,
        s,
        site,
        // SAFETY: the caller's argument, forwarded (module doc).
        || unsafe { real(s) },
        || {
            // SAFETY: backs out a trywait that succeeded: gives its unit back to `s`.
            unsafe { post(s) };
        },
    )
}
sem_acquire!(sem_timedwait, "sem_timedwait", via::TIMED, STATE_TIMED, ts: P);
sem_acquire!(sem_clockwait, "sem_clockwait", via::TIMED, STATE_TIMED, clock: c_int, ts: P);

/// `sem_post`, interposed: gated and recorded as a release.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn sem_post(s: P) -> c_int {
    let real = real!("sem_post", fn(P) -> c_int);
    let site = site!();
    // SAFETY: the caller's argument, forwarded (module doc).
    release(kind::SEM_POST, via::PLAIN, s, site, || unsafe { real(s) })
}

/// `pthread_barrier_wait`, interposed: the arrival gated and recorded before the call,
/// the wait after it returns.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_barrier_wait(b: P) -> c_int {
    let real = real!("pthread_barrier_wait", fn(P) -> c_int);
    let site = site!();
    let addr = b as u64;
    let gate = enter();
    if let Some(c) = gate {
        c.gate(kind::BARRIER_ARRIVE, addr, GateObject::Addr);
        let stamp = c.stamp_before(kind::BARRIER_ARRIVE);
        c.begins(kind::BARRIER_ARRIVE, addr, stamp);
        c.set_state(STATE_BLOCKED, kind::BARRIER_WAIT as u32);
    }
    if record::on() {
        record::emit(
            kind::BARRIER_ARRIVE,
            via::PLAIN,
            addr,
            site,
            record::next_seq(addr),
            0,
            0,
        );
    }
    let recording = record::on();
    let pending = if recording {
        record::block_begin(kind::BARRIER_WAIT, addr, site)
    } else {
        None
    };
    // SAFETY: the caller's argument, forwarded (module doc).
    let r = unsafe { real(b) };
    record::block_end(pending);
    if recording {
        record::emit(
            kind::BARRIER_WAIT,
            via::PLAIN,
            addr,
            site,
            record::next_seq(addr),
            0,
            r,
        );
    }
    if let Some(c) = gate {
        c.set_state(STATE_RUNNING, 0);
        c.finish_in_progress();
        c.gate(kind::BARRIER_WAIT, addr, GateObject::Addr);
        c.happened(kind::BARRIER_WAIT, addr, None);
    }
    r
}

// ---------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------

type StartRoutine = unsafe extern "C-unwind" fn(P) -> P;

/// What a new thread needs to know before running the program's routine.
#[derive(Clone, Copy)]
struct StartArgs {
    routine: StartRoutine,
    arg: P,
    depth: u32,
    path: [u32; MAX_DEPTH],
}

/// The routine every thread created through `pthread_create` runs first when
/// replaying. `C-unwind` and nothing to drop: `pthread_exit` and cancellation unwind
/// through this frame.
///
/// # Safety
/// `p` must be a `StartArgs` block `gated_create` allocated for this thread.
unsafe extern "C-unwind" fn start_thread(p: P) -> P {
    // SAFETY: the block gated_create wrote for this thread alone; copied out, then
    // freed (malloc'd there).
    let args = unsafe { *(p as *const StartArgs) };
    // SAFETY: as above; not used after.
    unsafe { free(p) };
    thread_begin(args.depth, args.path);
    // After its slot is taken: the driver sees it from now on.
    shared().pending_starts.fetch_sub(1, AcqRel);
    // SAFETY: the program's start routine with its argument, as the real
    // pthread_create would have called it.
    let result = unsafe { (args.routine)(args.arg) };
    thread_end();
    result
}

/// Recorded after the real call returns, with the handle; the child's tid comes from
/// the kernel's clone event, which the recorder folds in (see recorder/src/inproc.rs).
fn record_create(th: *mut u64, r: c_int, site: u64) {
    if record::on() {
        // Read even on failure, as the eBPF return probe does.
        // SAFETY: the caller's pthread_t pointer.
        let handle = if th.is_null() { 0 } else { unsafe { *th } };
        record::emit(kind::THREAD_CREATE, via::PLAIN, handle, site, 0, 0, r);
    }
}

/// `pthread_create`, interposed: recorded after the call; when replaying, the new
/// thread runs `start_thread` first, which gives it its logical id.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_create(
    th: *mut u64,
    attr: P,
    routine: StartRoutine,
    arg: P,
) -> c_int {
    let real = real!("pthread_create", fn(*mut u64, P, StartRoutine, P) -> c_int);
    let site = site!();
    let Some(c) = enter() else {
        // SAFETY: the caller's arguments, forwarded (module doc).
        let r = unsafe { real(th, attr, routine, arg) };
        let saved = errno();
        record_create(th, r, site);
        set_errno(saved);
        return r;
    };
    // SAFETY: the caller's arguments and the real pthread_create, passed on.
    unsafe { gated_create(c, th, attr, routine, arg, site, real) }
}

/// `pthread_create` when replaying: the child starts in `start_thread` with its
/// logical id and the program's routine.
///
/// # Safety
/// `th`, `attr`, `routine` and `arg` must keep `pthread_create`'s contract, and
/// `real` must be the real `pthread_create`.
unsafe fn gated_create(
    c: Caller,
    th: *mut u64,
    attr: P,
    routine: StartRoutine,
    arg: P,
    site: u64,
    real: unsafe extern "C-unwind" fn(*mut u64, P, StartRoutine, P) -> c_int,
) -> c_int {
    let (depth, mut path, n) = ME.with(|me| (me.depth.get(), me.path.get(), me.children.get() + 1));
    let child_depth = if (depth as usize) < MAX_DEPTH {
        path[depth as usize] = n;
        depth + 1
    } else {
        NONE
    };
    ME.with(|me| me.busy.set(true));
    // SAFETY: malloc has no preconditions (a re-entered wrapper sees `busy`).
    let block = unsafe { malloc(std::mem::size_of::<StartArgs>()) } as *mut StartArgs;
    ME.with(|me| me.busy.set(false));
    if block.is_null() {
        // SAFETY: the caller's arguments, forwarded to the real function.
        let r = unsafe { real(th, attr, routine, arg) };
        record_create(th, r, site);
        return r;
    }
    // SAFETY: a fresh block of StartArgs' size (malloc aligns it for any type).
    unsafe {
        block.write(StartArgs {
            routine,
            arg,
            depth: child_depth,
            path,
        })
    };
    // The handle is unknown until the call returns: gate on the occurrence alone.
    // The child's own `thread_start` is gated in the child (start_thread), before
    // the program's start routine runs: the parent goes on meanwhile.
    c.gate(kind::THREAD_CREATE, 0, GateObject::Any);
    let stamp = c.stamp_before(kind::THREAD_CREATE);
    shared().pending_starts.fetch_add(1, AcqRel);
    // SAFETY: the caller's arguments but the routine: `start_thread`, with the block
    // that runs the program's routine with its argument.
    let r = unsafe { real(th, attr, start_thread, block.cast()) };
    let saved = errno();
    if r == 0 {
        ME.with(|me| me.children.set(n));
    } else {
        shared().pending_starts.fetch_sub(1, AcqRel);
        // SAFETY: no thread was created to take the block: it is still ours.
        unsafe { free(block.cast()) };
    }
    record_create(th, r, site);
    let handle = if r == 0 && !th.is_null() {
        // SAFETY: the call succeeded, so it stored the new thread's handle in `*th`.
        unsafe { *th }
    } else {
        0
    };
    c.happened(kind::THREAD_CREATE, handle, stamp);
    set_errno(saved);
    r
}

/// A join: gated before `call`, recorded after it returns.
///
/// # Safety
/// `call` must be the real join of thread `th`, with the caller's arguments.
unsafe fn join(th: u64, via_: u8, blocking: u32, site: u64, call: impl FnOnce() -> c_int) -> c_int {
    let gate = enter();
    if let Some(c) = gate {
        c.gate(kind::THREAD_JOIN, th, GateObject::Addr);
        c.set_state(blocking, kind::THREAD_JOIN as u32);
    }
    let pending = if blocking == STATE_BLOCKED && record::on() {
        record::block_begin(kind::THREAD_JOIN, th, site)
    } else {
        None
    };
    let r = call();
    record::block_end(pending);
    if record::on() {
        let saved = errno();
        record::emit(kind::THREAD_JOIN, via_, th, site, 0, 0, r);
        set_errno(saved);
    }
    if let Some(c) = gate {
        c.set_state(STATE_RUNNING, 0);
        c.happened(kind::THREAD_JOIN, th, None);
    }
    r
}

/// `pthread_join`, interposed: gated and recorded as a join.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_join(th: u64, ret: *mut P) -> c_int {
    let real = real!("pthread_join", fn(u64, *mut P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc).
    unsafe { join(th, via::PLAIN, STATE_BLOCKED, site, || real(th, ret)) }
}

/// `pthread_tryjoin_np`, interposed: gated and recorded as a join.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_tryjoin_np(th: u64, ret: *mut P) -> c_int {
    let real = real!("pthread_tryjoin_np", fn(u64, *mut P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc).
    unsafe { join(th, via::TRY, STATE_RUNNING, site, || real(th, ret)) }
}

/// `pthread_timedjoin_np`, interposed: gated and recorded as a join.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_timedjoin_np(th: u64, ret: *mut P, ts: P) -> c_int {
    let real = real!("pthread_timedjoin_np", fn(u64, *mut P, P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc).
    unsafe { join(th, via::TIMED, STATE_TIMED, site, || real(th, ret, ts)) }
}

/// `pthread_clockjoin_np`, interposed: gated and recorded as a join.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_clockjoin_np(
    th: u64,
    ret: *mut P,
    clock: c_int,
    ts: P,
) -> c_int {
    let real = real!("pthread_clockjoin_np", fn(u64, *mut P, c_int, P) -> c_int);
    let site = site!();
    // SAFETY: the caller's arguments, forwarded (module doc).
    unsafe {
        join(th, via::TIMED, STATE_TIMED, site, || {
            real(th, ret, clock, ts)
        })
    }
}

/// `exit`, interposed: a recording asked to hold the process's end waits for the
/// other threads first (`hold`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    let real = real!("exit", fn(c_int) -> ());
    crate::hold::before_exit();
    // SAFETY: the real `exit`, with the caller's argument.
    unsafe { real(status) };
    die("exit returned")
}

/// `pthread_exit`, interposed: the thread's exit is gated first.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn pthread_exit(ret: P) -> ! {
    let real = real!("pthread_exit", fn(P) -> ());
    thread_end();
    // SAFETY: the caller's argument, forwarded (module doc).
    unsafe { real(ret) };
    die("pthread_exit returned")
}

// ---------------------------------------------------------------------------------
// Direct futex calls through libc's syscall()
// ---------------------------------------------------------------------------------

/// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET,
/// FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2: what the recorder calls a futex wait.
fn is_futex_wait(cmd: c_long) -> bool {
    matches!(cmd, 0 | 6 | 8 | 9 | 11 | 13)
}

/// libc's variadic `syscall`. On x86-64 variadic integer arguments travel exactly
/// like fixed ones (six registers, then the stack), so six fixed parameters after the
/// number see every argument a caller can pass. Futex calls through it (Rust std's
/// locks, C++ atomic wait) are recorded here like the eBPF path's futex tracepoint
/// records them: a wake numbered before it takes effect, a wait after it returns,
/// the result as the kernel returns it (`-errno` on failure).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let real = real!(
        "syscall",
        fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long
    );
    if n != SYS_FUTEX {
        // SAFETY: the caller's arguments, forwarded (module doc).
        return unsafe { real(n, a1, a2, a3, a4, a5, a6) };
    }
    let site = site!();
    let recording = record::on();
    let gate = enter();
    if !recording && gate.is_none() {
        // SAFETY: the caller's arguments, forwarded (module doc).
        return unsafe { real(n, a1, a2, a3, a4, a5, a6) };
    }
    let addr = a1 as u64;
    let cmd = a2 & 0x7f;
    if crate::soft::internal_futex(addr, !is_futex_wait(cmd)) {
        // A Rust lock's, condvar's or barrier's own futex word, inside an
        // operation recorded as such: as glibc's internal futex calls, not an
        // event (the order it makes is the operation's).
        // SAFETY: the caller's arguments, forwarded (module doc).
        return unsafe { real(n, a1, a2, a3, a4, a5, a6) };
    }
    let extra = futex_extra(cmd as u64, a3 as u32);
    let kernel_result = |r: c_long| -> i32 {
        if r == -1 {
            -errno()
        } else {
            r as i32
        }
    };
    let result;
    if is_futex_wait(cmd) {
        if let Some(c) = gate {
            c.gate(kind::FUTEX_WAIT, addr, GateObject::Addr);
            // A wait with a timeout comes back by itself.
            c.set_state(
                if a4 != 0 { STATE_TIMED } else { STATE_BLOCKED },
                kind::FUTEX_WAIT as u32,
            );
        }
        // SAFETY: the caller's arguments, forwarded (module doc).
        result = unsafe { real(n, a1, a2, a3, a4, a5, a6) };
        let saved = errno();
        if recording {
            let seq = record::next_seq(addr);
            record::emit(
                kind::FUTEX_WAIT,
                0,
                addr,
                site,
                seq,
                extra,
                kernel_result(result),
            );
        }
        if let Some(c) = gate {
            c.set_state(STATE_RUNNING, 0);
            c.happened(kind::FUTEX_WAIT, addr, None);
        }
        set_errno(saved);
    } else {
        let seq = if recording { record::next_seq(addr) } else { 0 };
        let mut stamp = None;
        if let Some(c) = gate {
            c.gate(kind::FUTEX_WAKE, addr, GateObject::Addr);
            stamp = c.stamp_before(kind::FUTEX_WAKE);
        }
        // SAFETY: the caller's arguments, forwarded (module doc).
        result = unsafe { real(n, a1, a2, a3, a4, a5, a6) };
        let saved = errno();
        if recording {
            record::emit(
                kind::FUTEX_WAKE,
                0,
                addr,
                site,
                seq,
                extra,
                kernel_result(result),
            );
        }
        if let Some(c) = gate {
            c.happened(kind::FUTEX_WAKE, addr, stamp);
        }
        set_errno(saved);
    }
    result
}
