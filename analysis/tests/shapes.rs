//! The candidate shapes beyond swapping neighbouring critical sections (issue 10):
//! sections moved past several others, chains, thread lifetimes, other objects
//! against locks, one thread before many, and the harmful-first ranking. Each on a
//! hand-made trace through the file format and the whole streaming pipeline, with
//! the schedule it must produce, and a variant where happens-before makes the
//! shape infeasible and it must not be offered.

use ordo_analysis::engine::Engine;
use ordo_analysis::merge::Merger;
use ordo_analysis::model::{FindingKind as RawKind, RawFinding, EVERY_OTHER_THREAD};
use ordo_analysis::synthetic::{TraceBuilder, MAIN_TID};
use ordo_analysis::{analyze_trace, Analysis, Finding, FindingKind};
use ordo_trace::{Kind, ReadMode, TraceReader};

const M: u64 = 0x1000;
const B: u64 = 0x1040;
const S: u64 = 0x2000;
const BAR: u64 = 0x2100;

fn write(b: &TraceBuilder) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ordo");
    b.write_to(&path).unwrap();
    (dir, path)
}

fn analyze(b: &TraceBuilder) -> Analysis {
    let (_dir, path) = write(b);
    let a = analyze_trace(&path).unwrap_or_else(|e| panic!("{e}"));
    for f in &a.findings {
        let parsed = ordo_schedule::Schedule::parse(&f.schedule)
            .unwrap_or_else(|e| panic!("{e}: {}", f.schedule));
        assert_eq!(parsed.to_string(), f.schedule);
    }
    a
}

/// The raw findings of a pass (before symbolization), for shapes whose schedule
/// needs a symbol the built traces do not have.
fn raw(b: &TraceBuilder) -> Vec<RawFinding> {
    let (_dir, path) = write(b);
    let mut reader = TraceReader::open(&path, ReadMode::Strict).unwrap();
    let threads = reader.threads.clone();
    let mut engine = Engine::new(&threads);
    let mut merger = Merger::new();
    let mut events = Vec::new();
    while reader.next_chunk_into(&mut events).unwrap() {
        merger.push_batch(&events, |e| {
            engine.process(e);
        });
    }
    merger.finish();
    while let Some(e) = merger.pop() {
        engine.process(&e);
    }
    engine
        .finish()
        .findings
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

fn of(a: &Analysis, kind: FindingKind) -> Vec<&Finding> {
    a.findings.iter().filter(|f| f.kind == kind).collect()
}

fn schedules(a: &Analysis, kind: FindingKind) -> Vec<&str> {
    of(a, kind).iter().map(|f| f.schedule.as_str()).collect()
}

/// Main creates `n` threads (handles 0x9000 + 8 i); returns their tids.
fn threads(b: &mut TraceBuilder, n: usize) -> Vec<u32> {
    let ts: Vec<u32> = (0..n).map(|_| b.spawn(MAIN_TID)).collect();
    for (i, &t) in ts.iter().enumerate() {
        b.create(MAIN_TID, t, 0x9000 + 8 * i as u64, 0x400010);
    }
    ts
}

fn section(b: &mut TraceBuilder, t: u32, lock: u64, site: u64) {
    b.lock(t, lock, site);
    b.unlock(t, lock, site + 4);
}

/// Thread 1 checks then uses (two sites); thread 3 posts a semaphore and takes the
/// lock twice; thread 2 waits for the post and then mutates — never adjacent to
/// thread 1's sections.
fn check_then_act_far_apart(mutator_knows_the_use: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 3);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[0], M, 0x510);
    if mutator_knows_the_use {
        b.push(t[0], Kind::SemPost, S, 0x520);
    }
    b.push(t[2], Kind::SemPost, S, 0x610);
    section(&mut b, t[2], M, 0x600);
    section(&mut b, t[2], M, 0x600);
    b.push(t[1], Kind::SemWait, S, 0x700);
    if mutator_knows_the_use {
        b.push(t[1], Kind::SemWait, S, 0x700);
    }
    section(&mut b, t[1], M, 0x710);
    b
}

#[test]
fn non_adjacent_mutation_splits_check_then_act() {
    let a = analyze(&check_then_act_far_apart(false));
    let split =
        "1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#1\n2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n";
    assert!(
        schedules(&a, FindingKind::Atomicity).contains(&split),
        "{:#?}",
        a.findings
    );
}

#[test]
fn non_adjacent_mutation_ordered_after_the_use_is_not_offered() {
    let a = analyze(&check_then_act_far_apart(true));
    assert!(
        schedules(&a, FindingKind::Atomicity)
            .iter()
            .all(|s| !s.contains("2:mutex_lock")),
        "{:#?}",
        a.findings
    );
}

#[test]
fn section_moves_past_several_others() {
    // Thread 3's section depends on nothing: it can go before thread 1's, past
    // thread 2's, although it was adjacent only to thread 2's.
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 3);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[1], M, 0x600);
    section(&mut b, t[2], M, 0x700);
    let a = analyze(&b);
    assert!(
        schedules(&a, FindingKind::Reorder).contains(&"3:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1\n"),
        "{:#?}",
        a.findings
    );
}

#[test]
fn producer_consumer_chain() {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 2);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[1], M, 0x600);
    section(&mut b, t[1], M, 0x600);
    let a = analyze(&b);
    let chains = schedules(&a, FindingKind::Chain);
    assert!(
        chains.contains(
            &"2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1\n\
              1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#2\n\
              2:mutex_lock(@1)#2 -> 1:mutex_lock(@1)#2\n"
        ),
        "{chains:#?}"
    );
    assert!(
        chains.contains(
            &"1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#1\n\
              2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n\
              1:mutex_lock(@1)#2 -> 2:mutex_lock(@1)#2\n"
        ),
        "{chains:#?}"
    );
    assert!(of(&a, FindingKind::Chain)
        .iter()
        .all(|f| (f.rank.v, f.rank.t) == (1, 2)));
}

#[test]
fn no_chain_when_the_consumer_waited_for_the_producer() {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 2);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[0], M, 0x500);
    b.push(t[0], Kind::SemPost, S, 0x510);
    b.push(t[1], Kind::SemWait, S, 0x600);
    section(&mut b, t[1], M, 0x610);
    section(&mut b, t[1], M, 0x610);
    let a = analyze(&b);
    assert!(of(&a, FindingKind::Chain).is_empty(), "{:#?}", a.findings);
}

/// Main creates two workers; the second's section happens first; main joins the
/// first (and the second when `join_both`), then ends.
fn wrong_join(join_both: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 2);
    section(&mut b, t[1], M, 0x500);
    section(&mut b, t[0], M, 0x500);
    b.exit_join(MAIN_TID, t[0], 0x9000, 0x400030);
    b.push(t[1], Kind::ThreadExit, 0, 0);
    if join_both {
        b.push(MAIN_TID, Kind::ThreadJoin, 0x9008, 0x400030);
    }
    b.push(MAIN_TID, Kind::ThreadExit, 0, 0);
    b
}

#[test]
fn main_can_end_before_an_unjoined_threads_section() {
    let a = analyze(&wrong_join(false));
    assert_eq!(
        schedules(&a, FindingKind::EarlyExit),
        ["0:thread_exit()#1 -> 2:mutex_lock(@1)#1\n"],
        "{:#?}",
        a.findings
    );
    let a = analyze(&wrong_join(true));
    assert!(
        of(&a, FindingKind::EarlyExit).is_empty(),
        "{:#?}",
        a.findings
    );
}

/// A reporter (thread 1) that skips the workers' barrier; workers 2 and 3 publish
/// under the lock and arrive; the reporter's section comes last.
fn missing_barrier(reporter_waits: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 3);
    for &w in &t[1..] {
        section(&mut b, w, M, 0x600);
        b.push(w, Kind::BarrierArrive, BAR, 0x610);
    }
    if reporter_waits {
        b.push(t[0], Kind::BarrierArrive, BAR, 0x510);
    }
    for &w in &t[1..] {
        b.push(w, Kind::BarrierWait, BAR, 0x610);
    }
    if reporter_waits {
        b.push(t[0], Kind::BarrierWait, BAR, 0x510);
    }
    section(&mut b, t[0], M, 0x500);
    b
}

#[test]
fn section_overtakes_a_barrier_arrival_and_a_thread_start() {
    let a = analyze(&missing_barrier(false));
    let overtakes = schedules(&a, FindingKind::Overtake);
    assert!(
        overtakes.contains(&"1:mutex_lock(@1)#1 -> 3:barrier_arrive(@1)#1\n"),
        "{:#?}",
        a.findings
    );
    assert!(
        schedules(&a, FindingKind::DelayedStart)
            .iter()
            .any(|s| s.starts_with("1:mutex_lock(@1)#1 -> ") && s.contains(":thread_start()#1")),
        "{:#?}",
        a.findings
    );
    // With the reporter at the barrier, its section knows both arrivals (worker
    // 3's section can still overtake worker 2's arrival).
    let a = analyze(&missing_barrier(true));
    for kind in [FindingKind::Overtake, FindingKind::DelayedStart] {
        assert!(
            schedules(&a, kind).iter().all(|s| !s.starts_with("1:")),
            "{:#?}",
            a.findings
        );
    }
}

/// `workers` threads take the lock once each; then a closer (created last) takes it.
fn closer_after_workers(workers: usize, closer_knows_one: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, workers + 1);
    for &w in &t[..workers] {
        section(&mut b, w, M, 0x600);
    }
    if closer_knows_one {
        b.push(t[0], Kind::SemPost, S, 0x610);
        b.push(t[workers], Kind::SemWait, S, 0x700);
    }
    section(&mut b, t[workers], M, 0x710);
    b
}

#[test]
fn one_section_before_every_other_threads_first() {
    let found = raw(&closer_after_workers(99, false));
    let star: Vec<&RawFinding> = found
        .iter()
        .filter(|f| f.kind == RawKind::FirstOfMany && f.events[0].site == 0x710)
        .collect();
    assert_eq!(star.len(), 1, "{found:#?}");
    let f = star[0];
    assert_eq!(f.orderings.len(), 1);
    assert_eq!(f.orderings[0].before, [f.events[0]]);
    assert_eq!(f.orderings[0].after.thread, EVERY_OTHER_THREAD);
    assert_eq!(f.orderings[0].after.kind, Kind::MutexLock);
    assert_eq!(f.orderings[0].after.occurrence, 1);
    assert_eq!(f.rank().t, 2, "the * thread is not counted among the named");
    let found = raw(&closer_after_workers(99, true));
    assert!(
        !found
            .iter()
            .any(|f| f.kind == RawKind::FirstOfMany && f.events[0].site == 0x710),
        "the closer waited for a worker: {found:#?}"
    );
}

#[test]
fn harmful_shapes_rank_first_among_equal_v_and_t() {
    // A check-then-act split (atomicity, harmful) and a plain reorder on the same
    // lock, both (v, t) = (1, 2); the reorder is the smaller change.
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 2);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[0], M, 0x510);
    section(&mut b, t[1], M, 0x600);
    let a = analyze(&b);
    let first_12 = a
        .findings
        .iter()
        .find(|f| (f.rank.v, f.rank.t) == (1, 2))
        .unwrap();
    assert_eq!(first_12.kind, FindingKind::Atomicity, "{:#?}", a.findings);
    assert!(of(&a, FindingKind::Reorder)
        .iter()
        .any(|f| f.rank.distance < first_12.rank.distance));
}

#[test]
fn candidates_asking_for_the_same_order_are_one() {
    let b = check_then_act_far_apart(false);
    let a = analyze(&b);
    let mut seen = std::collections::HashSet::new();
    for f in &a.findings {
        let mut lines: Vec<&str> = f.schedule.lines().collect();
        lines.sort();
        assert!(seen.insert(lines), "asked twice: {f:#?}");
    }
}

#[test]
fn deadlock_candidates_pin_every_lock_of_the_cycle() {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 3);
    for (&th, (first, second)) in t.iter().zip([(M, B), (B, S), (S, M)]) {
        b.lock(th, first, 0x500 + first);
        b.lock(th, second, 0x501 + first);
        b.unlock(th, second, 0x502 + first);
        b.unlock(th, first, 0x503 + first);
    }
    let a = analyze(&b);
    let d = of(&a, FindingKind::Deadlock);
    assert_eq!(d.len(), 1, "{:#?}", a.findings);
    // Every thread's second acquisition waits for every thread's first.
    let schedule = ordo_schedule::Schedule::parse(&d[0].schedule).unwrap();
    assert_eq!(schedule.orderings.len(), 3);
    for o in &schedule.orderings {
        assert_eq!(o.before.len(), 3, "{}", d[0].schedule);
        assert_eq!(o.before.iter().filter(|e| e.occurrence == 1).count(), 3);
    }
}

/// Thread 1 checks (one site) and acts (another); then thread 2 takes a node and
/// puts it back, and thread 3 takes one: the ABA needs 2's take, 3's take and 2's
/// put back, in that order, between thread 1's two sections.
fn aba(third_knows_the_act: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 3);
    section(&mut b, t[0], M, 0x500);
    section(&mut b, t[0], M, 0x510);
    if third_knows_the_act {
        b.push(t[0], Kind::SemPost, S, 0x520);
    }
    section(&mut b, t[1], M, 0x600);
    section(&mut b, t[1], M, 0x610);
    if third_knows_the_act {
        b.push(t[2], Kind::SemWait, S, 0x6f0);
    }
    section(&mut b, t[2], M, 0x700);
    b
}

#[test]
fn several_sections_in_each_order_between_two_of_a_thread() {
    let a = analyze(&aba(false));
    let splits = schedules(&a, FindingKind::MultiSplit);
    // In the order the ABA needs (3's take between 2's take and put back) …
    assert!(
        splits.contains(
            &"1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#1\n\
              2:mutex_lock(@1)#1 -> 3:mutex_lock(@1)#1\n\
              3:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#2\n\
              2:mutex_lock(@1)#2 -> 1:mutex_lock(@1)#2\n"
        ),
        "{splits:#?}"
    );
    // … and as recorded, and with 3 first; 2's pair alone between 1's; and the
    // mirror, 1's pair (before them) between 2's. A thread's own order is kept.
    assert!(
        splits.contains(
            &"2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1\n\
              1:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n\
              1:mutex_lock(@1)#2 -> 2:mutex_lock(@1)#2\n"
        ),
        "{splits:#?}"
    );
    assert_eq!(splits.len(), 3 + 1 + 1, "{splits:#?}");
    assert!(splits
        .iter()
        .all(|s| s.find("2:mutex_lock(@1)#1") < s.find("2:mutex_lock(@1)#2")));
    assert!(of(&a, FindingKind::MultiSplit)
        .iter()
        .all(|f| f.rank.v == 1 && f.kind.is_harmful()));
}

#[test]
fn no_multi_split_by_a_section_that_knows_the_act() {
    // Thread 3 waited for a post thread 1 made after its act: it cannot come
    // between thread 1's sections, alone or with others.
    let a = analyze(&aba(true));
    assert!(
        of(&a, FindingKind::MultiSplit)
            .iter()
            .all(|f| !f.schedule.contains("3:mutex_lock")),
        "{:#?}",
        a.findings
    );
}

#[test]
fn a_section_overtakes_a_signal_made_under_its_lock_by_overtaking_that_section() {
    // Held at the broadcast itself, thread 2 would wait for the lock thread 1
    // holds there: the schedule orders it before thread 1's section instead.
    let mut b = TraceBuilder::new();
    let t = threads(&mut b, 2);
    b.lock(t[0], M, 0x500);
    b.push(t[0], Kind::CondBroadcast, S, 0x504);
    b.unlock(t[0], M, 0x508);
    section(&mut b, t[1], M, 0x600);
    // (That is the plain reorder of the two sections, which it is kept as.)
    let a = analyze(&b);
    assert!(
        a.findings
            .iter()
            .all(|f| !f.schedule.contains("-> 1:cond_broadcast")),
        "{:#?}",
        a.findings
    );
    assert!(
        a.findings
            .iter()
            .any(|f| f.schedule == "2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1\n"),
        "{:#?}",
        a.findings
    );
}
