//! Each detector on hand-made traces: it finds its bug, and stays silent on the
//! correct version of the same program. Traces go through the real file format and
//! the whole streaming pipeline.

use ordo_analysis::synthetic::{TraceBuilder, MAIN_TID};
use ordo_analysis::{analyze_trace, Analysis, Finding, FindingKind};
use ordo_trace::Kind;

const A: u64 = 0x1000;
const B: u64 = 0x1040;
const G: u64 = 0x1080;
const M: u64 = 0x10c0;
const C: u64 = 0x2000;
const V: u64 = 0x3000;
const R: u64 = 0x4000;
const H1: u64 = 0x9000;
const H2: u64 = 0x9008;
const H3: u64 = 0x9010;

fn analyze(b: &TraceBuilder) -> Analysis {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ordo");
    b.write_to(&path).unwrap();
    let a = analyze_trace(&path).unwrap_or_else(|e| panic!("{e}"));
    // Every emitted schedule is valid schedule-language text that prints back the same.
    for f in &a.findings {
        let parsed = ordo_schedule::Schedule::parse(&f.schedule)
            .unwrap_or_else(|e| panic!("{e}: {}", f.schedule));
        assert_eq!(parsed.to_string(), f.schedule);
        assert!(!parsed.is_empty(), "{f:#?}");
    }
    a
}

fn of(a: &Analysis, kind: FindingKind) -> Vec<&Finding> {
    a.findings.iter().filter(|f| f.kind == kind).collect()
}

/// Main creates two threads; `body` gives them events; main joins them.
fn two_threads(body: impl FnOnce(&mut TraceBuilder, u32, u32)) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t1 = b.spawn(MAIN_TID);
    let t2 = b.spawn(MAIN_TID);
    b.create(MAIN_TID, t1, H1, 0x400010);
    b.create(MAIN_TID, t2, H2, 0x400020);
    body(&mut b, t1, t2);
    b.exit_join(MAIN_TID, t1, H1, 0x400030);
    b.exit_join(MAIN_TID, t2, H2, 0x400040);
    b
}

fn nested(b: &mut TraceBuilder, t: u32, first: u64, second: u64, site: u64) {
    b.lock(t, first, site);
    b.lock(t, second, site + 1);
    b.unlock(t, second, site + 2);
    b.unlock(t, first, site + 3);
}

#[test]
fn ab_ba_deadlock_is_found_though_the_run_did_not_deadlock() {
    let b = two_threads(|b, t1, t2| {
        nested(b, t1, A, B, 0x500);
        nested(b, t2, B, A, 0x600);
    });
    let a = analyze(&b);
    let d = of(&a, FindingKind::Deadlock);
    assert_eq!(d.len(), 1, "{:#?}", a.findings);
    assert_eq!(d[0].threads, ["1", "2"]);
    assert_eq!((d[0].rank.v, d[0].rank.t), (2, 2));
    assert_eq!(
        d[0].schedule,
        "1:mutex_lock(@1)#1 && 2:mutex_lock(@1)#1 -> 1:mutex_lock(@2)#1\n\
         1:mutex_lock(@1)#1 && 2:mutex_lock(@1)#1 -> 2:mutex_lock(@2)#1\n"
    );
    assert_eq!(
        d[0].objects.iter().map(|o| o.addr).collect::<Vec<_>>(),
        [A, B]
    );
    assert_eq!(d[0].sites.len(), 4);
}

#[test]
fn three_thread_cycle_is_found() {
    let mut b = TraceBuilder::new();
    let ts: Vec<u32> = (0..3).map(|_| b.spawn(MAIN_TID)).collect();
    for (i, &t) in ts.iter().enumerate() {
        b.create(MAIN_TID, t, H1 + 8 * i as u64, 0x400010);
    }
    nested(&mut b, ts[0], A, B, 0x500);
    nested(&mut b, ts[1], B, G, 0x600);
    nested(&mut b, ts[2], G, A, 0x700);
    let a = analyze(&b);
    let d = of(&a, FindingKind::Deadlock);
    assert_eq!(d.len(), 1, "{:#?}", a.findings);
    assert_eq!((d[0].rank.v, d[0].rank.t), (3, 3));
    assert_eq!(d[0].schedule.lines().count(), 3);
}

#[test]
fn no_deadlock_with_a_common_gate_lock() {
    let b = two_threads(|b, t1, t2| {
        b.lock(t1, G, 0x400);
        nested(b, t1, A, B, 0x500);
        b.unlock(t1, G, 0x401);
        b.lock(t2, G, 0x400);
        nested(b, t2, B, A, 0x600);
        b.unlock(t2, G, 0x401);
    });
    assert!(of(&analyze(&b), FindingKind::Deadlock).is_empty());
}

#[test]
fn no_deadlock_within_one_thread() {
    let b = two_threads(|b, t1, _| {
        nested(b, t1, A, B, 0x500);
        nested(b, t1, B, A, 0x600);
    });
    assert!(of(&analyze(&b), FindingKind::Deadlock).is_empty());
}

#[test]
fn no_deadlock_when_one_order_uses_trylock() {
    let b = two_threads(|b, t1, t2| {
        nested(b, t1, A, B, 0x500);
        b.lock(t2, B, 0x600);
        b.trylock(t2, A, 0x601);
        b.unlock(t2, A, 0x602);
        b.unlock(t2, B, 0x603);
    });
    assert!(of(&analyze(&b), FindingKind::Deadlock).is_empty());
}

#[test]
fn no_deadlock_when_thread_creation_orders_the_two() {
    // Main takes A then B before it creates the thread that takes B then A.
    let mut b = TraceBuilder::new();
    let t1 = b.spawn(MAIN_TID);
    nested(&mut b, MAIN_TID, A, B, 0x500);
    b.create(MAIN_TID, t1, H1, 0x400010);
    nested(&mut b, t1, B, A, 0x600);
    b.exit_join(MAIN_TID, t1, H1, 0x400030);
    assert!(of(&analyze(&b), FindingKind::Deadlock).is_empty());
}

fn rw_cycle(second_mode: Kind) -> TraceBuilder {
    two_threads(|b, t1, t2| {
        b.push(t1, Kind::RwlockRdlock, R, 0x500);
        b.lock(t1, M, 0x501);
        b.unlock(t1, M, 0x502);
        b.push(t1, Kind::RwlockUnlock, R, 0x503);
        b.lock(t2, M, 0x600);
        b.push(t2, second_mode, R, 0x601);
        b.push(t2, Kind::RwlockUnlock, R, 0x602);
        b.unlock(t2, M, 0x603);
    })
}

#[test]
fn rwlocks_take_part_but_read_read_does_not_conflict() {
    assert!(of(
        &analyze(&rw_cycle(Kind::RwlockRdlock)),
        FindingKind::Deadlock
    )
    .is_empty());
    let a = analyze(&rw_cycle(Kind::RwlockWrlock));
    let d = of(&a, FindingKind::Deadlock);
    assert_eq!(d.len(), 1, "{:#?}", a.findings);
    assert!(
        d[0].schedule.contains("2:rwlock_wrlock(@1)#1"),
        "{}",
        d[0].schedule
    );
    assert!(
        d[0].schedule.contains("1:rwlock_rdlock(@1)#1 &&"),
        "{}",
        d[0].schedule
    );
}

#[test]
fn lost_wakeup_when_the_signal_finds_no_waiter_and_nothing_orders_the_wait_after_it() {
    // The signaller sets the flag and signals without the mutex; the waiter checked
    // the flag before and waits after: the wakeup is gone.
    let b = two_threads(|b, t1, t2| {
        b.lock(t2, M, 0x600);
        b.signal(t1, C, 0x500);
        b.wait_begin(t2, C, M, 0x601);
        b.signal(t1, C, 0x502);
        b.wait_end(t2, C, M, 0, 0x601);
        b.unlock(t2, M, 0x602);
    });
    let a = analyze(&b);
    let l = of(&a, FindingKind::LostWakeup);
    let observed = l
        .iter()
        .find(|f| f.message.contains("found no waiter"))
        .unwrap_or_else(|| panic!("{:#?}", a.findings));
    assert_eq!(
        observed.schedule,
        "1:cond_signal(@1)#1 -> 2:cond_wait_begin(@1)#1\n"
    );
    assert_eq!(observed.threads, ["2", "1"]);
}

#[test]
fn lost_wakeup_predicted_when_the_signal_could_precede_the_wait() {
    // The waiter waited first in this run; the unlocked signal could have come first.
    let b = two_threads(|b, t1, t2| {
        b.lock(t2, M, 0x600);
        b.wait_begin(t2, C, M, 0x601);
        b.signal(t1, C, 0x500);
        b.wait_end(t2, C, M, 0, 0x601);
        b.unlock(t2, M, 0x602);
    });
    let a = analyze(&b);
    let l = of(&a, FindingKind::LostWakeup);
    assert_eq!(l.len(), 1, "{:#?}", a.findings);
    assert_eq!(
        l[0].schedule,
        "1:cond_signal(@1)#1 -> 2:cond_wait_begin(@1)#1\n"
    );
}

#[test]
fn no_lost_wakeup_when_the_signaller_holds_the_mutex() {
    // Both orders of the correct pattern: signal under the mutex.
    let waits_first = two_threads(|b, t1, t2| {
        b.lock(t2, M, 0x600);
        b.wait_begin(t2, C, M, 0x601);
        b.lock(t1, M, 0x500);
        b.signal(t1, C, 0x501);
        b.unlock(t1, M, 0x502);
        b.wait_end(t2, C, M, 0, 0x601);
        b.unlock(t2, M, 0x602);
    });
    let signals_first = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.signal(t1, C, 0x501);
        b.unlock(t1, M, 0x502);
        // A producer/consumer: the queue is empty again later, the consumer waits
        // and is woken by the next signal.
        b.lock(t2, M, 0x600);
        b.wait_begin(t2, C, M, 0x601);
        b.lock(t1, M, 0x500);
        b.signal(t1, C, 0x501);
        b.unlock(t1, M, 0x502);
        b.wait_end(t2, C, M, 0, 0x601);
        b.unlock(t2, M, 0x602);
    });
    for b in [waits_first, signals_first] {
        let a = analyze(&b);
        assert!(
            of(&a, FindingKind::LostWakeup).is_empty(),
            "{:#?}",
            a.findings
        );
    }
}

#[test]
fn no_lost_wakeup_for_signal_after_unlock_with_a_predicate_loop() {
    // `lock; ready = 1; unlock; signal` against `lock; while (!ready) wait; unlock`:
    // the waiter takes the mutex after the predicate changed, so no order loses
    // the wakeup. The signal finds no waiter (the next round's wait comes later)
    // or a waiter that began after the unlock: neither is reported.
    let signal_finds_no_waiter = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x502);
        b.signal(t1, C, 0x503);
        b.lock(t2, M, 0x600);
        b.wait_begin(t2, C, M, 0x601);
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x502);
        b.signal(t1, C, 0x503);
        b.wait_end(t2, C, M, 0, 0x601);
        b.unlock(t2, M, 0x602);
    });
    // The signaller releases `released`, the waiter waits, then the signal.
    let unlock_wait_signal = |released: u64| {
        two_threads(|b, t1, t2| {
            b.lock(t1, released, 0x500);
            b.unlock(t1, released, 0x502);
            b.lock(t2, M, 0x600);
            b.wait_begin(t2, C, M, 0x601);
            b.signal(t1, C, 0x503);
            b.wait_end(t2, C, M, 0, 0x601);
            b.unlock(t2, M, 0x602);
        })
    };
    for b in [signal_finds_no_waiter, unlock_wait_signal(M)] {
        let a = analyze(&b);
        assert!(
            of(&a, FindingKind::LostWakeup).is_empty(),
            "{:#?}",
            a.findings
        );
    }
    // The same unlocked signal when the signaller's unlock is of another mutex (or
    // none): the predicate may not be published, still reported.
    let other_mutex = analyze(&unlock_wait_signal(G));
    assert_eq!(of(&other_mutex, FindingKind::LostWakeup).len(), 1);
}

/// Waiter (1) waits on C; signaller (2) signals under M; a third thread (3) takes M.
fn barging(third_before_reacquire: bool, rewait: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let (w, s, x) = (b.spawn(MAIN_TID), b.spawn(MAIN_TID), b.spawn(MAIN_TID));
    b.create(MAIN_TID, w, H1, 0x400010);
    b.create(MAIN_TID, s, H2, 0x400020);
    b.create(MAIN_TID, x, H3, 0x400030);
    b.lock(w, M, 0x500);
    b.wait_begin(w, C, M, 0x501);
    b.lock(s, M, 0x600);
    b.signal(s, C, 0x601);
    b.unlock(s, M, 0x602);
    if third_before_reacquire {
        b.lock(x, M, 0x700);
        b.unlock(x, M, 0x701);
    }
    b.wait_end(w, C, M, 0, 0x501);
    if rewait {
        // The waiter re-checks its condition and waits again: a `while` loop.
        b.wait_begin(w, C, M, 0x501);
        b.lock(s, M, 0x600);
        b.signal(s, C, 0x601);
        b.unlock(s, M, 0x602);
        b.wait_end(w, C, M, 0, 0x501);
    }
    b.unlock(w, M, 0x502);
    if !third_before_reacquire {
        b.lock(x, M, 0x700);
        b.unlock(x, M, 0x701);
    }
    b
}

#[test]
fn barging_is_predicted_between_signal_and_reacquire() {
    let a = analyze(&barging(false, false));
    let g = of(&a, FindingKind::Barging);
    assert_eq!(g.len(), 1, "{:#?}", a.findings);
    // The wait began before the signaller's section (else there is no wait to
    // barge into), then the third thread's section between signal and reacquire.
    assert_eq!(
        g[0].schedule,
        "1:cond_wait_begin(@1)#1 -> 2:mutex_lock(@1)#1\n\
         2:cond_signal(@1)#1 -> 3:mutex_lock(@1)#1\n\
         3:mutex_lock(@1)#1 -> 1:cond_wait(@1)#1\n"
    );
    assert_eq!((g[0].rank.v, g[0].rank.t), (2, 3));
}

/// The `if`-instead-of-`while` consumers: two wait, the producer broadcasts in one
/// section and refills in the next before either woken consumer reacquires.
#[test]
fn barging_by_a_woken_waiter_keeps_the_refill_after_the_reacquire() {
    let mut b = TraceBuilder::new();
    let (p, c1, c2) = (b.spawn(MAIN_TID), b.spawn(MAIN_TID), b.spawn(MAIN_TID));
    b.create(MAIN_TID, p, H1, 0x400010);
    b.create(MAIN_TID, c1, H2, 0x400020);
    b.create(MAIN_TID, c2, H3, 0x400030);
    b.lock(c1, M, 0x700);
    b.wait_begin(c1, C, M, 0x701);
    b.lock(c2, M, 0x700);
    b.wait_begin(c2, C, M, 0x701);
    for _ in 0..2 {
        b.lock(p, M, 0x600);
        b.push(p, Kind::CondBroadcast, C, 0x601);
        b.unlock(p, M, 0x602);
    }
    b.wait_end(c1, C, M, 0, 0x701);
    b.unlock(c1, M, 0x702);
    b.wait_end(c2, C, M, 0, 0x701);
    b.unlock(c2, M, 0x702);
    let a = analyze(&b);
    let schedules: Vec<&str> = of(&a, FindingKind::Barging)
        .iter()
        .map(|f| f.schedule.as_str())
        .collect();
    // Thread 3's reacquire before thread 2's, both waits begun before the first
    // broadcast's section, and the refill after thread 2 acted: 2 then finds the
    // queue thread 3 emptied.
    assert!(
        schedules.contains(
            &"2:cond_wait_begin(@1)#1 && 3:cond_wait_begin(@1)#1 -> 1:mutex_lock(@1)#1\n\
              1:cond_broadcast(@1)#1 -> 3:cond_wait(@1)#1\n\
              3:cond_wait(@1)#1 -> 2:cond_wait(@1)#1\n\
              2:cond_wait(@1)#1 -> 1:mutex_lock(@1)#2\n"
        ),
        "{schedules:#?}"
    );
}

#[test]
fn barging_that_happened_is_reported() {
    let a = analyze(&barging(true, false));
    let g = of(&a, FindingKind::Barging);
    assert_eq!(g.len(), 1, "{:#?}", a.findings);
    assert!(
        g[0].message.contains("happened in this run"),
        "{}",
        g[0].message
    );
}

#[test]
fn no_barging_report_for_a_wait_that_rechecks_in_a_loop() {
    let a = analyze(&barging(true, true));
    assert!(of(&a, FindingKind::Barging).is_empty(), "{:#?}", a.findings);
}

#[test]
fn race_on_unsynchronized_accesses_and_none_under_a_lock() {
    let racy = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.read(t2, V, 0x600);
    });
    let a = analyze(&racy);
    let r = of(&a, FindingKind::Race);
    assert_eq!(r.len(), 1, "{:#?}", a.findings);
    assert_eq!(r[0].schedule, "2:read(@1)#1 -> 1:write(@1)#1\n");
    let locked = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.write(t1, V, 0x501);
        b.unlock(t1, M, 0x502);
        b.lock(t2, M, 0x600);
        b.read(t2, V, 0x601);
        b.unlock(t2, M, 0x602);
    });
    assert!(of(&analyze(&locked), FindingKind::Race).is_empty());
}

#[test]
fn a_run_of_reads_racing_with_one_write_is_one_candidate_with_the_last_read() {
    // A two-field struct written field by field, then read field by field by a
    // thread unordered with the writer: holding the second write until after the
    // second read is what shows the torn state deterministically.
    let torn = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.write(t1, V, 0x501);
        b.read(t2, V, 0x600);
        b.read(t2, V, 0x601);
    });
    let a = analyze(&torn);
    let r = of(&a, FindingKind::Race);
    assert_eq!(r.len(), 1, "{:#?}", a.findings);
    assert_eq!(r[0].schedule, "2:read(@1)#2 -> 1:write(@1)#2\n");
    // A new write in between: the reads before it and after it are two candidates.
    let split = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.read(t2, V, 0x600);
        b.write(t1, V, 0x501);
        b.read(t2, V, 0x601);
    });
    let a = analyze(&split);
    let schedules: Vec<&str> = of(&a, FindingKind::Race)
        .iter()
        .map(|f| f.schedule.as_str())
        .collect();
    assert!(
        schedules.contains(&"2:read(@1)#1 -> 1:write(@1)#1\n")
            && schedules.contains(&"2:read(@1)#2 -> 1:write(@1)#2\n"),
        "{schedules:?}"
    );
}

#[test]
fn atomic_read_modify_writes_do_not_race_with_each_other_but_plain_ones_do() {
    let atomic = two_threads(|b, t1, t2| {
        b.rmw(t1, V, 0x500, true);
        b.rmw(t2, V, 0x600, true);
        b.rmw(t1, V, 0x500, true);
    });
    let a = analyze(&atomic);
    assert!(of(&a, FindingKind::Race).is_empty(), "{:#?}", a.findings);
    let plain = two_threads(|b, t1, t2| {
        b.rmw(t1, V, 0x500, false);
        b.rmw(t2, V, 0x600, false);
    });
    assert_eq!(of(&analyze(&plain), FindingKind::Race).len(), 1);
    // An atomic increment still races with a plain access of another thread.
    let mixed = two_threads(|b, t1, t2| {
        b.rmw(t1, V, 0x500, true);
        b.read(t2, V, 0x600);
        b.rmw(t1, V, 0x501, true);
    });
    assert_eq!(of(&analyze(&mixed), FindingKind::Race).len(), 2);
}

/// Release/acquire through atomics, as ThreadSanitizer models them: an atomic write
/// or read-modify-write orders what came before it in its thread before a later
/// atomic read or read-modify-write of the same variable in another thread.
#[test]
fn atomics_order_the_plain_accesses_around_them() {
    const FLAG: u64 = 0x3100;
    // Message passing: data written, flag published; the reader sees the flag, reads data.
    let published = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.atomic(t1, Kind::Write, FLAG, 0x501);
        b.atomic(t2, Kind::Read, FLAG, 0x600);
        b.read(t2, V, 0x601);
    });
    let a = analyze(&published);
    assert!(of(&a, FindingKind::Race).is_empty(), "{:#?}", a.findings);
    // The same with a plain flag: both the flag and the data race.
    let plain = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.write(t1, FLAG, 0x501);
        b.read(t2, FLAG, 0x600);
        b.read(t2, V, 0x601);
    });
    assert_eq!(of(&analyze(&plain), FindingKind::Race).len(), 2);
    // Reading the data before the acquire is still a race (the edge is not global).
    let early = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.atomic(t1, Kind::Write, FLAG, 0x501);
        b.read(t2, V, 0x601);
        b.atomic(t2, Kind::Read, FLAG, 0x600);
    });
    assert_eq!(of(&analyze(&early), FindingKind::Race).len(), 1);
    // What the publisher writes after its release is not covered either.
    let late = two_threads(|b, t1, t2| {
        b.atomic(t1, Kind::Write, FLAG, 0x501);
        b.write(t1, V, 0x502);
        b.atomic(t2, Kind::Read, FLAG, 0x600);
        b.read(t2, V, 0x601);
    });
    assert_eq!(of(&analyze(&late), FindingKind::Race).len(), 1);
    // A reference count: each thread uses the object, then decrements; the one that
    // drops the count to zero frees (writes) the object after its decrement.
    let refcount = two_threads(|b, t1, t2| {
        b.read(t1, V, 0x500);
        b.atomic(t1, Kind::Rmw, FLAG, 0x501);
        b.read(t2, V, 0x600);
        b.atomic(t2, Kind::Rmw, FLAG, 0x601);
        b.write(t2, V, 0x602);
    });
    let a = analyze(&refcount);
    assert!(of(&a, FindingKind::Race).is_empty(), "{:#?}", a.findings);
    // Two atomic reads order nothing: a plain write before one still races.
    let reads = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.atomic(t1, Kind::Read, FLAG, 0x501);
        b.atomic(t2, Kind::Read, FLAG, 0x600);
        b.read(t2, V, 0x601);
    });
    assert_eq!(of(&analyze(&reads), FindingKind::Race).len(), 1);
}

#[test]
fn every_synchronization_kind_orders_accesses() {
    // Each pair writes V in one thread and reads it in the other after a
    // synchronization that must order them; none is a race.
    type Sync = fn(&mut TraceBuilder, u32, u32);
    let syncs: [(&str, Sync); 5] = [
        ("cond", |b, t1, t2| {
            b.lock(t2, M, 0x600);
            b.wait_begin(t2, C, M, 0x601);
            b.write(t1, V, 0x500);
            b.signal(t1, C, 0x501);
            b.wait_end(t2, C, M, 0, 0x601);
            b.unlock(t2, M, 0x602);
            b.read(t2, V, 0x603);
        }),
        ("sem", |b, t1, t2| {
            b.write(t1, V, 0x500);
            b.push(t1, Kind::SemPost, 0x7000, 0x501);
            b.push(t2, Kind::SemWait, 0x7000, 0x600);
            b.read(t2, V, 0x601);
        }),
        ("barrier", |b, t1, t2| {
            b.write(t1, V, 0x500);
            b.push(t1, Kind::BarrierArrive, 0x7100, 0x501);
            b.push(t2, Kind::BarrierArrive, 0x7100, 0x600);
            b.push(t2, Kind::BarrierWait, 0x7100, 0x600).result = -1;
            b.push(t1, Kind::BarrierWait, 0x7100, 0x501);
            b.read(t2, V, 0x601);
        }),
        ("futex", |b, t1, t2| {
            b.write(t1, V, 0x500);
            b.push(t1, Kind::FutexWake, 0x7200, 0x501).result = 1;
            b.push(t2, Kind::FutexWait, 0x7200, 0x600);
            b.read(t2, V, 0x601);
        }),
        ("rwlock", |b, t1, t2| {
            b.push(t1, Kind::RwlockWrlock, R, 0x500);
            b.write(t1, V, 0x501);
            b.push(t1, Kind::RwlockUnlock, R, 0x502);
            b.push(t2, Kind::RwlockRdlock, R, 0x600);
            b.read(t2, V, 0x601);
            b.push(t2, Kind::RwlockUnlock, R, 0x602);
        }),
    ];
    for (name, sync) in syncs {
        let b = two_threads(sync);
        let a = analyze(&b);
        assert!(
            of(&a, FindingKind::Race).is_empty(),
            "{name}: {:#?}",
            a.findings
        );
    }
    // Create and join order the main thread's accesses with the child's.
    let mut b = TraceBuilder::new();
    let t1 = b.spawn(MAIN_TID);
    b.write(MAIN_TID, V, 0x400);
    b.create(MAIN_TID, t1, H1, 0x401);
    b.read(t1, V, 0x500);
    b.write(t1, V, 0x501);
    b.exit_join(MAIN_TID, t1, H1, 0x402);
    b.read(MAIN_TID, V, 0x403);
    assert!(of(&analyze(&b), FindingKind::Race).is_empty());
    // A futex wake that woke nobody orders nothing.
    let b = two_threads(|b, t1, t2| {
        b.write(t1, V, 0x500);
        b.push(t1, Kind::FutexWake, 0x7200, 0x501).result = 0;
        b.push(t2, Kind::FutexWait, 0x7200, 0x600).result = -11;
        b.read(t2, V, 0x601);
    });
    assert_eq!(of(&analyze(&b), FindingKind::Race).len(), 1);
}

#[test]
fn check_then_act_is_an_atomicity_candidate_and_one_section_is_not() {
    let split = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500); // check
        b.read(t1, V, 0x501);
        b.unlock(t1, M, 0x502);
        b.lock(t1, M, 0x510); // act
        b.write(t1, V, 0x511);
        b.unlock(t1, M, 0x512);
        b.lock(t2, M, 0x600);
        b.write(t2, V, 0x601);
        b.unlock(t2, M, 0x602);
    });
    let a = analyze(&split);
    let at = of(&a, FindingKind::Atomicity);
    assert_eq!(at.len(), 1, "{:#?}", a.findings);
    assert_eq!(
        at[0].schedule,
        "1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#1\n2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n"
    );
    let whole = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.read(t1, V, 0x501);
        b.write(t1, V, 0x511);
        b.unlock(t1, M, 0x512);
        b.lock(t2, M, 0x600);
        b.write(t2, V, 0x601);
        b.unlock(t2, M, 0x602);
    });
    let a = analyze(&whole);
    assert!(
        of(&a, FindingKind::Atomicity).is_empty(),
        "{:#?}",
        a.findings
    );
    assert!(of(&a, FindingKind::Race).is_empty());
}

#[test]
fn adjacent_sections_swap_unless_something_else_orders_them() {
    let free = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.lock(t2, M, 0x600);
        b.unlock(t2, M, 0x601);
    });
    let a = analyze(&free);
    let r = of(&a, FindingKind::Reorder);
    assert_eq!(r.len(), 1, "{:#?}", a.findings);
    assert_eq!(r[0].schedule, "2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1\n");
    assert_eq!(r[0].rank.distance, 2);
    // Thread 2 only starts its section after thread 1 posted a semaphore it waits for.
    let ordered = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.push(t1, Kind::SemPost, 0x7000, 0x502);
        b.push(t2, Kind::SemWait, 0x7000, 0x600);
        b.lock(t2, M, 0x601);
        b.unlock(t2, M, 0x602);
    });
    assert!(of(&analyze(&ordered), FindingKind::Reorder).is_empty());
}

#[test]
fn a_section_fits_after_a_release_unless_it_knows_what_follows() {
    // Thread 2's whole section can fall between thread 1's unlock and its next
    // statement: thread 1 is held right after the unlock returned.
    let free = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.lock(t2, M, 0x600);
        b.unlock(t2, M, 0x601);
    });
    let a = analyze(&free);
    let r = of(&a, FindingKind::AfterRelease);
    assert_eq!(r.len(), 1, "{:#?}", a.findings);
    assert_eq!(
        r[0].schedule,
        "1:mutex_unlock(@1)#1 -> 2:mutex_lock(@1)#1\n\
         2:mutex_unlock(@1)#1 -> 1:after(mutex_unlock(@1)#1)\n"
    );
    assert_eq!(FindingKind::AfterRelease.tier(), 1);
    // Thread 2 waits for a post thread 1 makes after its unlock: thread 1 cannot
    // be held before that post.
    let ordered = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.push(t1, Kind::SemPost, 0x7000, 0x502);
        b.push(t2, Kind::SemWait, 0x7000, 0x600);
        b.lock(t2, M, 0x601);
        b.unlock(t2, M, 0x602);
    });
    assert!(of(&analyze(&ordered), FindingKind::AfterRelease).is_empty());
    // Thread 1 reached a marked point (`--mark`) after its unlock: the window
    // bounded by it comes first, naming the point; the after() one stays.
    let marked = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.push(t1, Kind::At, 0x900, 0x900);
        b.lock(t2, M, 0x600);
        b.unlock(t2, M, 0x601);
    });
    let a = analyze(&marked);
    let r = of(&a, FindingKind::AfterRelease);
    assert_eq!(r.len(), 2, "{:#?}", a.findings);
    assert_eq!(
        r[0].schedule,
        "1:mutex_unlock(@1)#1 -> 2:mutex_lock(@1)#1\n\
         2:mutex_unlock(@1)#1 -> 1:at(@1)#1\n"
    );
    assert_eq!(r[0].rank.v, 1, "a program point is not a shared object");
    assert!(r[1].schedule.contains("1:after(mutex_unlock(@1)#1)"));
    // Thread 1's next step after its unlock is a lock of its own: a gate at that
    // lock expresses the window, no after() point is proposed.
    let then_lock = two_threads(|b, t1, t2| {
        b.lock(t1, M, 0x500);
        b.unlock(t1, M, 0x501);
        b.lock(t1, A, 0x502);
        b.unlock(t1, A, 0x503);
        b.lock(t2, M, 0x600);
        b.unlock(t2, M, 0x601);
    });
    let a = analyze(&then_lock);
    assert!(
        of(&a, FindingKind::AfterRelease)
            .iter()
            .all(|f| !f.schedule.contains("after(mutex_unlock(@1)#1)")),
        "{:#?}",
        a.findings
    );
}

#[test]
fn findings_are_ordered_by_rank_and_deduplicated() {
    let b = two_threads(|b, t1, t2| {
        for _ in 0..20 {
            b.lock(t1, M, 0x500);
            b.unlock(t1, M, 0x501);
            b.lock(t2, M, 0x600);
            b.unlock(t2, M, 0x601);
        }
        nested(b, t1, A, B, 0x700);
        nested(b, t2, B, A, 0x800);
    });
    let a = analyze(&b);
    // By (v, t), harmful shapes first, then sections after a release, then distance.
    let ranks: Vec<_> = a
        .findings
        .iter()
        .map(|f| (f.rank.v, f.rank.t, f.kind.tier(), f.rank.distance))
        .collect();
    let mut sorted = ranks.clone();
    sorted.sort();
    assert_eq!(ranks, sorted);
    // 40 swaps of the same two code sites on M, in both directions: two candidates.
    let on_m = of(&a, FindingKind::Reorder)
        .into_iter()
        .filter(|f| f.objects[0].addr == M)
        .count();
    assert_eq!(on_m, 2, "{:#?}", a.findings);
}

#[test]
fn dropped_events_are_reported_and_mark_later_findings() {
    let mut b = two_threads(|b, t1, t2| {
        nested(b, t1, A, B, 0x500);
        for _ in 0..10 {
            b.lock(t1, G, 0x550);
            b.unlock(t1, G, 0x551);
        }
        nested(b, t2, B, A, 0x600);
    });
    b.chunk_events = 8;
    b.drops_after_chunk = vec![(3, 5)];
    let a = analyze(&b);
    assert_eq!(a.stats.dropped, 5);
    assert_eq!(a.losses.len(), 1);
    assert_eq!(
        (
            a.losses[0].first_chunk,
            a.losses[0].last_chunk,
            a.losses[0].events
        ),
        (2, 3, 5)
    );
    let d = of(&a, FindingKind::Deadlock);
    assert_eq!(d.len(), 1);
    assert!(d[0].possibly_affected_by_drops);
    let text = a.to_text(10);
    assert!(text.contains("5 events were lost"), "{text}");
    assert!(text.contains("[drops]"), "{text}");
    let json = a.to_json();
    assert_eq!(json["stats"]["dropped"], 5);
    assert_eq!(json["findings"][0]["possibly_affected_by_drops"], true);
}

#[test]
fn bad_traces_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ordo");
    let b = two_threads(|b, t1, t2| {
        for _ in 0..200 {
            b.lock(t1, M, 0x500);
            b.unlock(t1, M, 0x501);
            b.lock(t2, M, 0x600);
            b.unlock(t2, M, 0x601);
        }
    });
    b.write_to(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let err = analyze_trace(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: at byte ", path.display())),
        "{err}"
    );
    std::fs::write(&path, b"not a trace at all").unwrap();
    assert!(analyze_trace(&path)
        .unwrap_err()
        .to_string()
        .contains("bad magic"));
}

#[test]
fn decoding_inline_or_on_its_own_thread_gives_the_same_analysis() {
    // Several chunks, nested locks, watched accesses: every detector path runs.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.ordo");
    ordo_analysis::synthetic::write_benchmark_trace(&path, 300_000, 4).unwrap();
    let inline = ordo_analysis::analyze_trace_with(&path, ordo_analysis::Decoding::Inline)
        .unwrap_or_else(|e| panic!("{e}"));
    let threaded = ordo_analysis::analyze_trace_with(&path, ordo_analysis::Decoding::OwnThread)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!inline.findings.is_empty());
    assert_eq!(inline.stats.pass, threaded.stats.pass);
    let json = |a: &Analysis| {
        let mut v = a.to_json();
        v["stats"] = serde_json::Value::Null; // timings and memory differ
        v
    };
    assert_eq!(json(&inline), json(&threaded));
}
