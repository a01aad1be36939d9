//! The analysis' work and memory follow what is live, not what the trace ever
//! had: a thread holding thousands of locks, and tens of thousands of short-lived
//! threads. Bounds are on counters the pass reports (contexts, search steps, clock
//! slots), which are deterministic — never on wall time.

use ordo_analysis::synthetic::{TraceBuilder, MAIN_TID};
use ordo_analysis::{analyze_trace, Analysis, FindingKind};
use ordo_trace::Kind;

const LOCKS: u64 = 0x10_0000;
const VAR: u64 = 0x3000;
const H1: u64 = 0x9000;
const H2: u64 = 0x9008;

fn analyze(b: &TraceBuilder) -> Analysis {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ordo");
    b.write_to(&path).unwrap();
    analyze_trace(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn lock(i: u64) -> u64 {
    LOCKS + 64 * i
}

/// Thread 1 takes `n` locks in order and releases them in reverse, twice; thread 2
/// then takes the last and, holding it, `second` (if any).
fn nested_locks(n: u64, second: Option<u64>) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    b.chunk_events = 1 << 16;
    let t1 = b.spawn(MAIN_TID);
    let t2 = b.spawn(MAIN_TID);
    b.create(MAIN_TID, t1, H1, 0x400010);
    b.create(MAIN_TID, t2, H2, 0x400020);
    for _ in 0..2 {
        for i in 0..n {
            b.lock(t1, lock(i), 0x401000);
        }
        for i in (0..n).rev() {
            b.unlock(t1, lock(i), 0x401010);
        }
    }
    b.lock(t2, lock(n - 1), 0x402000);
    if let Some(s) = second {
        b.lock(t2, lock(s), 0x402010);
        b.unlock(t2, lock(s), 0x402020);
    }
    b.unlock(t2, lock(n - 1), 0x402030);
    b.exit_join(MAIN_TID, t1, H1, 0x400030);
    b.exit_join(MAIN_TID, t2, H2, 0x400040);
    b
}

#[test]
fn five_thousand_nested_locks_cost_linear_work_and_no_false_deadlock() {
    const N: u64 = 5_000;
    let a = analyze(&nested_locks(N, None));
    let lo = a.stats.pass.lock_order;
    assert!(
        a.findings.iter().all(|f| f.kind != FindingKind::Deadlock),
        "one order only: no deadlock"
    );
    // One context per stack prefix: linear in the locks held, not in the n²/2 pairs.
    assert!(lo.contexts <= N + 2, "{lo:?}");
    // The graph is acyclic: the component search is one linear pass.
    assert_eq!(lo.locks_in_cycles, 0, "{lo:?}");
    assert!(lo.search_steps <= 4 * (lo.contexts + N), "{lo:?}");
    assert!(!lo.search_truncated);
}

#[test]
fn a_cycle_through_a_thread_holding_thousands_of_locks_is_still_found() {
    const N: u64 = 2_000;
    // Thread 1 holds lock 0 (and 1 998 others) while taking lock N-1; thread 2
    // holds N-1 while taking 0. The gates ({1..N-2} and {}) are disjoint. Every
    // lock is now in one strongly connected component with N²/2 edges, all but
    // one of thread 1: the search must not walk them as paths.
    let a = analyze(&nested_locks(N, Some(0)));
    let deadlocks: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Deadlock)
        .collect();
    assert_eq!(deadlocks.len(), 1, "{:#?}", a.findings);
    let lo = a.stats.pass.lock_order;
    assert_eq!(lo.locks_in_cycles, N, "{lo:?}");
    // Building the component's edges is n²/2 steps; each cycle length then costs
    // about n² more (thread 1's edges are skipped a group at a time), not n³ or n⁴.
    assert!(lo.search_steps <= 4 * N * N, "{lo:?}");
    assert!(!lo.search_truncated);
}

/// `threads` threads created two at a time by main, each writing `VAR` (under no
/// lock), exiting and joined before the next pair; at `racy_pair_at`, the second
/// of the pair is created (and writes) before the first is joined.
fn short_threads(threads: u32, racy_pair_at: Option<u32>) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    b.chunk_events = 1 << 16;
    let mut n = 0;
    while n < threads {
        let t1 = b.spawn(MAIN_TID);
        let t2 = b.spawn(MAIN_TID);
        b.create(MAIN_TID, t1, H1, 0x400010);
        b.write(t1, VAR, 0x401000);
        if racy_pair_at == Some(n) {
            // Both live at once: their writes are concurrent.
            b.create(MAIN_TID, t2, H2, 0x400020);
            b.write(t2, VAR, 0x401010);
            b.exit_join(MAIN_TID, t1, H1, 0x400030);
        } else {
            b.exit_join(MAIN_TID, t1, H1, 0x400030);
            b.create(MAIN_TID, t2, H2, 0x400020);
            b.write(t2, VAR, 0x401010);
        }
        b.exit_join(MAIN_TID, t2, H2, 0x400040);
        n += 2;
    }
    b
}

#[test]
fn twenty_thousand_short_threads_share_three_clock_slots_and_stay_exact() {
    let a = analyze(&short_threads(20_000, None));
    let p = &a.stats.pass;
    assert_eq!(p.threads_seen, 20_001);
    assert_eq!(p.threads_exited, 20_000);
    // Main, and at most one live child at a time (a reused slot's next thread).
    assert!(p.clock_slots <= 3, "{p:?}");
    // Create/join order every write after the previous one: no race.
    assert!(
        a.findings.iter().all(|f| f.kind != FindingKind::Race),
        "{:#?}",
        a.findings.first()
    );
}

#[test]
fn reused_clock_slots_do_not_hide_a_race_between_live_threads() {
    let a = analyze(&short_threads(20_000, Some(17_000)));
    assert!(a.stats.pass.clock_slots <= 4, "{:?}", a.stats.pass);
    let races: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Race)
        .collect();
    assert_eq!(races.len(), 1, "{:#?}", a.findings);
    // The race is between the pair created at 17 000 (threads 17 001 and 17 002).
    let threads = &races[0].threads;
    assert!(
        threads.contains(&"17001".to_string()) && threads.contains(&"17002".to_string()),
        "{threads:?}"
    );
}

const DONE: u64 = 0x5100;
const M1: u64 = 0x5200;
const M2: u64 = 0x5240;

/// `threads` detached threads (never joined), two live at a time, as a
/// thread-per-task server bounding its concurrency: each writes `VAR` under
/// `lock(0)` and posts `DONE` as its last act; main waits on `DONE` once per thread
/// before creating more. Handles recycle (glibc reuses a detached thread's
/// descriptor). With `unsynchronized_write_at`, that thread also writes `VAR` after
/// its post, under no lock: the next pair's writes race with it.
fn detached_threads(threads: u32, unsynchronized_write_at: Option<u32>) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    b.chunk_events = 1 << 16;
    let mut n = 0;
    while n < threads {
        let pair = [b.spawn(MAIN_TID), b.spawn(MAIN_TID)];
        b.create(MAIN_TID, pair[0], H1, 0x400010);
        b.create(MAIN_TID, pair[1], H2, 0x400020);
        for (i, &t) in pair.iter().enumerate() {
            b.lock(t, lock(0), 0x401000);
            b.write(t, VAR, 0x401008);
            b.unlock(t, lock(0), 0x401010);
            b.push(t, Kind::SemPost, DONE, 0x401018);
            if unsynchronized_write_at == Some(n + i as u32) {
                b.write(t, VAR, 0x401020);
            }
            b.push(t, Kind::ThreadExit, 0, 0);
        }
        for _ in pair {
            b.push(MAIN_TID, Kind::SemWait, DONE, 0x400030);
        }
        n += 2;
    }
    b
}

#[test]
fn detached_threads_hand_their_clock_slots_on_once_their_creator_learned_their_end() {
    let a = analyze(&detached_threads(20_000, None));
    let p = &a.stats.pass;
    assert_eq!(p.threads_exited, 20_000);
    // Main and the two live workers: every later pair continues the slots of the
    // pair main waited for.
    assert!(p.clock_slots <= 4, "{p:?}");
    assert!(
        a.findings.iter().all(|f| f.kind != FindingKind::Race),
        "{:#?}",
        a.findings.first()
    );
}

#[test]
fn a_detached_threads_access_after_its_last_release_keeps_its_slot_and_its_race() {
    // Thread 1001 writes VAR after its post, which main's wait does not cover:
    // the next pair's writes (threads 1003 and 1004) race with it.
    let a = analyze(&detached_threads(2_000, Some(1_000)));
    assert!(a.stats.pass.clock_slots <= 6, "{:?}", a.stats.pass);
    let races: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Race)
        .collect();
    assert!(!races.is_empty(), "{:#?}", a.findings);
    for race in &races {
        assert!(
            race.threads.contains(&"1001".to_string()),
            "{:?}",
            race.threads
        );
    }
}

#[test]
fn a_detached_thread_nobody_synchronized_with_keeps_its_slot() {
    // Thread 1 writes VAR and exits; main, knowing nothing of it, creates thread 2,
    // which writes VAR too: a race, whatever slot thread 2 gets.
    let mut b = TraceBuilder::new();
    let t1 = b.spawn(MAIN_TID);
    let t2 = b.spawn(MAIN_TID);
    b.create(MAIN_TID, t1, H1, 0x400010);
    b.write(t1, VAR, 0x401000);
    b.push(t1, Kind::ThreadExit, 0, 0);
    b.create(MAIN_TID, t2, H1, 0x400020);
    b.write(t2, VAR, 0x401010);
    b.push(t2, Kind::ThreadExit, 0, 0);
    let a = analyze(&b);
    assert_eq!(a.stats.pass.clock_slots, 3, "{:?}", a.stats.pass);
    assert!(
        a.findings.iter().any(|f| f.kind == FindingKind::Race),
        "{:#?}",
        a.findings
    );
}

#[test]
fn a_lock_cycle_with_a_detached_thread_main_waited_for_is_still_reported() {
    // Thread 1 takes M1 then M2, posts DONE and exits; main waits for it, then
    // creates thread 2, which takes M2 then M1. Only a semaphore orders them, not
    // fork/join: the lock-order cycle stays a finding (thread 1's slot, which
    // left lock-order edges, is not handed on by that wait).
    let mut b = TraceBuilder::new();
    let t1 = b.spawn(MAIN_TID);
    let t2 = b.spawn(MAIN_TID);
    b.create(MAIN_TID, t1, H1, 0x400010);
    b.lock(t1, M1, 0x401000);
    b.lock(t1, M2, 0x401008);
    b.unlock(t1, M2, 0x401010);
    b.unlock(t1, M1, 0x401018);
    b.push(t1, Kind::SemPost, DONE, 0x401020);
    b.push(t1, Kind::ThreadExit, 0, 0);
    b.push(MAIN_TID, Kind::SemWait, DONE, 0x400018);
    b.create(MAIN_TID, t2, H1, 0x400020);
    b.lock(t2, M2, 0x402000);
    b.lock(t2, M1, 0x402008);
    b.unlock(t2, M1, 0x402010);
    b.unlock(t2, M2, 0x402018);
    b.push(t2, Kind::ThreadExit, 0, 0);
    let a = analyze(&b);
    assert_eq!(a.stats.pass.clock_slots, 3, "{:?}", a.stats.pass);
    assert!(
        a.findings.iter().any(|f| f.kind == FindingKind::Deadlock),
        "{:#?}",
        a.findings
    );
}
