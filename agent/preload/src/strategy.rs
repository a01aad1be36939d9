//! Scheduling strategies the agent enforces at every synchronization event, for
//! `ordo hunt`'s baselines: **PCT** (Burckhardt et al., "A randomized scheduler with
//! probabilistic guarantees of finding bugs", ASPLOS 2010) and a **random walk**.
//!
//! Both give every thread a priority and let a thread that reaches a synchronization
//! event (any interposed pthread call, a thread's start or exit) go on only when no
//! *enabled* thread has a higher priority. Enabled means: waiting at such an event
//! itself, or running program code. A thread held at a schedule gate, inside a
//! pthread call that can block, in a timed call, asleep in the kernel (`sleep`,
//! I/O, a lock inside glibc) or gone is not enabled — the same per-thread states the
//! driver's stall detection reads from the shared page ([`Slot::state`]), plus the
//! kernel's view from `/proc/self/task/TID/stat`.
//!
//! - PCT: initial priorities are random and distinct (drawn from the seed and the
//!   thread's logical id, so they do not depend on which thread started first) and
//!   all above `DEPTH`; `DEPTH − 1` change points are steps drawn at random from
//!   `1..=K`, K the number of synchronization events the recorded run had. The thread
//!   that takes step `k_i` drops to priority `i`, below every initial priority.
//! - Random walk: a thread draws a fresh random priority at every event, so among
//!   the threads at events the one that goes on is a random one.
//!
//! The program cannot be deadlocked by this: a wait ends as soon as the higher
//! threads stop being enabled, when none of them made progress for [`STALL_NS`]
//! (one spinning in code the agent does not see, or about to block), and in any
//! case after [`MAX_WAIT_NS`] (one spinning on `trylock` forever would otherwise
//! starve the lower thread it waits for). Waits sleep on a futex word with a short
//! timeout: no lock of the agent's own.

use std::cell::Cell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

use crate::gate::{on, thread_asleep, NONE};
use crate::shm::{Shared, Slot, MAX_DEPTH, MAX_SLOTS, STATE_RUNNING};
use crate::{clock_gettime, futex, futex_wait_ns, getenv, unsetenv, FUTEX_WAKE};

/// No strategy: synchronization events run freely (or as a schedule says).
const MODE_NONE: u32 = 0;
/// PCT.
const MODE_PCT: u32 = 1;
/// Random walk.
const MODE_RANDOM: u32 = 2;

/// Change points PCT can use (`--depth` at most this plus one).
pub const MAX_CHANGE_POINTS: usize = 64;
/// A waiting thread goes on when the threads it waits for made no progress this long.
const STALL_NS: i64 = 20_000_000;
/// ...and after this long in any case.
const MAX_WAIT_NS: i64 = 50_000_000;
/// How long one futex sleep of a waiting thread lasts before it looks again (blocking
/// and sleeping are seen by polling: the threads that block do not announce it).
const POLL_NS: i64 = 100_000;

static MODE: AtomicU32 = AtomicU32::new(MODE_NONE);
static SEED: AtomicU64 = AtomicU64::new(0);
/// Steps (1-based) at which PCT lowers the stepping thread's priority, sorted; 0 unused.
static CHANGE_POINTS: [AtomicU64; MAX_CHANGE_POINTS] =
    [const { AtomicU64::new(0) }; MAX_CHANGE_POINTS];
/// Synchronization events taken so far (PCT's step counter).
static STEP: AtomicU64 = AtomicU64::new(0);
/// Each slot's current priority; 0 until the thread's first event.
static PRIORITY: [AtomicU64; MAX_SLOTS] = [const { AtomicU64::new(0) }; MAX_SLOTS];
/// 1 while the slot's thread waits at an event (it is enabled, though asleep).
static WAITING: [AtomicU32; MAX_SLOTS] = [const { AtomicU32::new(0) }; MAX_SLOTS];
/// Futex word bumped whenever a thread goes on past an event.
static TURN: AtomicU32 = AtomicU32::new(0);
/// Threads sleeping on `TURN` (a passing thread wakes them only when there are some).
static SLEEPERS: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// Events this thread has had: the random walk's draw counter.
    static DRAWS: Cell<u64> = const { Cell::new(0) };
}

/// Reads the strategy from the environment (and removes it, so the program and what
/// it runs do not see it). Called once at start-up, before any thread runs.
///
/// # Safety
/// No other thread may read or change the environment meanwhile (start-up).
pub(crate) unsafe fn init() {
    let name = c"ORDO_REPLAY_STRATEGY";
    // SAFETY: a NUL-terminated name; the environment is ours (the caller's contract).
    let text = unsafe { getenv(name.as_ptr()) };
    if text.is_null() {
        return;
    }
    // SAFETY: getenv returned a NUL-terminated value, still in the environment.
    let fields = unsafe { split_fields(text) };
    // SAFETY: as for getenv; `text` is not used after.
    unsafe { unsetenv(name.as_ptr()) };
    match fields {
        Some((MODE_PCT, [seed, depth, k])) => {
            SEED.store(seed, Relaxed);
            let changes = (depth.saturating_sub(1) as usize).min(MAX_CHANGE_POINTS);
            let mut points = [0u64; MAX_CHANGE_POINTS];
            for (i, p) in points.iter_mut().take(changes).enumerate() {
                *p = 1 + mix(seed ^ 0xc4a9_e5d3 ^ ((i as u64) << 32)) % k.max(1);
            }
            // Change point i (1-based) lowers to priority i: keep them in draw order.
            for (i, p) in points.iter().enumerate() {
                CHANGE_POINTS[i].store(*p, Relaxed);
            }
            MODE.store(MODE_PCT, Release);
        }
        Some((MODE_RANDOM, [seed, ..])) => {
            SEED.store(seed, Relaxed);
            MODE.store(MODE_RANDOM, Release);
        }
        _ => crate::die("ORDO_REPLAY_STRATEGY: expected pct:SEED:DEPTH:K or random:SEED"),
    }
}

/// Parses `pct:S:D:K` or `random:S` (decimal numbers).
///
/// # Safety
/// `text` must point to a NUL-terminated string.
unsafe fn split_fields(text: *const c_char) -> Option<(u32, [u64; 3])> {
    let mut bytes = Vec::new();
    let mut p = text;
    // SAFETY: `p` walks the caller's NUL-terminated string, up to its NUL.
    while unsafe { *p } != 0 && bytes.len() < 128 {
        // SAFETY: as above.
        bytes.push(unsafe { *p } as u8);
        // SAFETY: `p` is not at the NUL yet, so the next byte is in the string.
        p = unsafe { p.add(1) };
    }
    let mut parts = bytes.split(|&b| b == b':');
    let mode = match parts.next()? {
        b"pct" => MODE_PCT,
        b"random" => MODE_RANDOM,
        _ => return None,
    };
    let mut numbers = [0u64; 3];
    let wanted = if mode == MODE_PCT { 3 } else { 1 };
    for n in numbers.iter_mut().take(wanted) {
        *n = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    }
    parts.next().is_none().then_some((mode, numbers))
}

/// splitmix64's finalizer: a well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of the slot's logical thread id (stable across runs, unlike the slot).
fn logical_hash(slot: &Slot) -> u64 {
    let depth = slot.depth.load(Relaxed);
    let mut h = mix(depth as u64);
    for p in slot.path.iter().take((depth as usize).min(MAX_DEPTH)) {
        h = mix(h ^ p.load(Relaxed) as u64);
    }
    h
}

/// A random priority above every PCT change-point priority, distinct per slot.
fn draw(hash: u64, slot: u32) -> u64 {
    (1 << 62) | ((hash >> 24) << 12) | (slot as u64 & 0xfff)
}

fn now_ns() -> i64 {
    let mut ts = [0i64; 2];
    // SAFETY: CLOCK_MONOTONIC into our own buffer.
    unsafe { clock_gettime(1, &mut ts) };
    ts[0] * 1_000_000_000 + ts[1]
}

/// The hook the gate calls at every synchronization event of a thread with a slot:
/// under a strategy, takes a step and waits for this thread's turn.
#[inline]
pub(crate) fn at_sync_event(sh: &Shared, slot: u32) {
    if MODE.load(Relaxed) == MODE_NONE || slot == NONE || slot as usize >= MAX_SLOTS {
        return;
    }
    let me = &sh.slots[slot as usize];
    let step = STEP.fetch_add(1, AcqRel) + 1;
    let seed = SEED.load(Relaxed);
    let priority = &PRIORITY[slot as usize];
    if MODE.load(Relaxed) == MODE_RANDOM {
        let n = DRAWS.with(|d| d.replace(d.get() + 1));
        priority.store(draw(mix(seed ^ logical_hash(me) ^ mix(n)), slot), Relaxed);
    } else {
        if priority.load(Relaxed) == 0 {
            priority.store(draw(mix(seed ^ logical_hash(me)), slot), Relaxed);
        }
        for (i, p) in CHANGE_POINTS.iter().enumerate() {
            if p.load(Relaxed) == step {
                priority.store(i as u64 + 1, Relaxed);
            }
        }
    }
    wait_turn(sh, slot);
}

/// Waits until no enabled thread has a higher priority (bounded: see the module doc).
fn wait_turn(sh: &Shared, slot: u32) {
    let mine = PRIORITY[slot as usize].load(Relaxed);
    WAITING[slot as usize].store(1, Release);
    let start = now_ns();
    let mut last_progress = u64::MAX;
    let mut progress_since = start;
    loop {
        if !on() {
            break;
        }
        let turn = TURN.load(Acquire);
        let Some(progress) = higher_enabled(sh, slot, mine) else {
            break;
        };
        let now = now_ns();
        if progress != last_progress {
            last_progress = progress;
            progress_since = now;
        } else if now - progress_since >= STALL_NS {
            break;
        }
        if now - start >= MAX_WAIT_NS {
            break;
        }
        SLEEPERS.fetch_add(1, AcqRel);
        // SAFETY: a static futex word; a changed value returns at once.
        unsafe { futex_wait_ns(&TURN, turn, POLL_NS) };
        SLEEPERS.fetch_sub(1, AcqRel);
    }
    WAITING[slot as usize].store(0, Release);
    TURN.fetch_add(1, Release);
    if SLEEPERS.load(Acquire) > 0 {
        // SAFETY: as above.
        unsafe { futex(&TURN, FUTEX_WAKE, i32::MAX as u32) };
    }
}

/// The summed progress counters of the enabled threads with a priority above
/// `mine`, or `None` when there are none.
fn higher_enabled(sh: &Shared, me: u32, mine: u64) -> Option<u64> {
    let n = (sh.n_slots.load(Acquire) as usize).min(MAX_SLOTS);
    let mut progress = None::<u64>;
    for (i, slot) in sh.slots[..n].iter().enumerate() {
        if i as u32 == me || PRIORITY[i].load(Relaxed) <= mine {
            continue;
        }
        let tid = slot.tid.load(Acquire);
        if tid == 0 {
            continue;
        }
        let enabled = WAITING[i].load(Acquire) != 0
            || (slot.state.load(Acquire) == STATE_RUNNING && !thread_asleep(tid));
        if enabled {
            let p = slot.progress.load(Relaxed);
            progress = Some(progress.unwrap_or(0).wrapping_add(p).wrapping_add(1));
        }
    }
    progress
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_text_parses_and_rejects_junk() {
        // SAFETY: a `CStr` is NUL-terminated.
        let parse = |s: &std::ffi::CStr| unsafe { split_fields(s.as_ptr()) };
        assert_eq!(parse(c"pct:7:3:120"), Some((MODE_PCT, [7, 3, 120])));
        assert_eq!(parse(c"random:42"), Some((MODE_RANDOM, [42, 0, 0])));
        assert_eq!(parse(c"pct:7:3"), None);
        assert_eq!(parse(c"random:1:2"), None);
        assert_eq!(parse(c"fair:1"), None);
        assert_eq!(parse(c"pct:x:3:4"), None);
    }

    #[test]
    fn drawn_priorities_are_above_change_points_and_distinct_per_slot() {
        let a = draw(mix(1), 3);
        let b = draw(mix(1), 4);
        assert_ne!(a, b);
        assert!(a > MAX_CHANGE_POINTS as u64 && b > MAX_CHANGE_POINTS as u64);
    }
}
