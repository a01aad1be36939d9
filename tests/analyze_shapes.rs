//! End to end, one small C program per candidate shape of issue 10: record a run in
//! which the bug did not show, analyze it, and replay the candidate of that shape:
//! the bug must show. Each program's plain runs pass (the bug needs an order the
//! run did not take); `tests/programs/shape_*.c` say which.

use crate::common;

use std::path::PathBuf;

use serde_json::Value;

/// Replays per candidate, and how many must reproduce the bug.
const REPLAYS: usize = 10;
const MUST_REPRODUCE: usize = 9;

struct Recorded {
    binary: PathBuf,
    dir: PathBuf,
    doc: Value,
}

/// Records `program` (whose plain run must pass) and analyzes the trace.
fn record_and_analyze(program: &str) -> Option<Recorded> {
    if !common::have_root(program) {
        return None;
    }
    let binary = common::build_program(program);
    let dir = common::scratch(&format!("shapes_{program}"));
    let trace = dir.join("run.ordo");
    let rec = common::record(&trace, &binary, &[]);
    assert!(
        rec.status.success(),
        "the recorded run of {program} must pass (the bug needs another order): {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let out = common::run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "ordo analyze: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(Recorded { binary, dir, doc })
}

/// The schedule of the finding of `kind` whose schedule is `schedule`; panics with
/// the findings of that kind when there is none.
fn candidate<'a>(doc: &'a Value, kind: &str, schedule: &str) -> &'a Value {
    let of_kind: Vec<&Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect();
    of_kind
        .iter()
        .find(|f| f["schedule"] == schedule)
        .copied()
        .unwrap_or_else(|| {
            let have: Vec<&str> = of_kind
                .iter()
                .map(|f| f["schedule"].as_str().unwrap())
                .collect();
            panic!("no {kind} candidate\n{schedule}among {have:#?}")
        })
}

/// Replays `schedule` [`REPLAYS`] times; returns how many reproduced the bug, and
/// the outcomes.
fn replay(r: &Recorded, name: &str, schedule: &str) -> (usize, Vec<Value>) {
    let file = r.dir.join(format!("{name}.sched"));
    std::fs::write(&file, schedule).unwrap();
    let mut shown = 0;
    let mut outcomes = Vec::new();
    for _ in 0..REPLAYS {
        let (_, json) = common::replay_json(&["--timeout", "20"], &file, &r.binary);
        if json["verdict"] == "reproduced" {
            shown += 1;
        }
        outcomes.push(json);
    }
    eprintln!("{name}: reproduced {shown}/{REPLAYS}");
    (shown, outcomes)
}

fn assert_reproduces(r: &Recorded, name: &str, schedule: &str) {
    let (shown, outcomes) = replay(r, name, schedule);
    assert!(
        shown >= MUST_REPRODUCE,
        "{name}: {shown}/{REPLAYS} replays reproduced the bug; schedule:\n{schedule}outcomes: {outcomes:#?}"
    );
}

fn ordo_schedule_parses(schedule: &str) {
    ordo_analysis::schedule::Schedule::parse(schedule)
        .unwrap_or_else(|e| panic!("{e}: {schedule}"));
}

#[test]
fn mutation_moved_between_check_and_use_past_other_sections() {
    let Some(r) = record_and_analyze("shape_nonadjacent") else {
        return;
    };
    // Thread 1 checks and uses, thread 2 clears (never adjacent to thread 1's
    // sections in the recording: thread 3's bookkeeping came between).
    let schedule = "1:mutex_lock(lock)#1 -> 2:mutex_lock(lock)#1\n\
                    2:mutex_lock(lock)#1 -> 1:mutex_lock(lock)#2\n";
    let f = candidate(&r.doc, "atomicity", schedule);
    assert_eq!(
        (&f["rank"]["v"], &f["rank"]["t"]),
        (&Value::from(1), &Value::from(2))
    );
    assert_reproduces(&r, "nonadjacent", schedule);
}

#[test]
fn consumer_producer_chain_on_a_ring() {
    let Some(r) = record_and_analyze("shape_chain") else {
        return;
    };
    let schedule = "2:mutex_lock(ring_lock)#1 -> 1:mutex_lock(ring_lock)#1\n\
                    1:mutex_lock(ring_lock)#1 -> 2:mutex_lock(ring_lock)#2\n\
                    2:mutex_lock(ring_lock)#2 -> 1:mutex_lock(ring_lock)#2\n";
    candidate(&r.doc, "chain", schedule);
    assert_reproduces(&r, "chain", schedule);
}

#[test]
fn main_ends_before_the_unjoined_workers_section() {
    let Some(r) = record_and_analyze("shape_missing_join") else {
        return;
    };
    let schedule = "0:thread_exit()#1 -> 2:mutex_lock(total_lock)#1\n";
    candidate(&r.doc, "early_exit", schedule);
    assert_reproduces(&r, "missing_join", schedule);
}

#[test]
fn the_flusher_runs_after_mains_last_section_before_its_late_join() {
    let Some(r) = record_and_analyze("shape_late_join") else {
        return;
    };
    let schedule = "0:mutex_unlock(log_lock)#1 -> 1:mutex_lock(cache_lock)#1\n";
    candidate(&r.doc, "late_join", schedule);
    assert_reproduces(&r, "late_join", schedule);
}

#[test]
fn a_successful_trylock_fails_inside_the_other_section() {
    let Some(r) = record_and_analyze("shape_failed_try") else {
        return;
    };
    let schedule = "1:mutex_lock(total_lock)#1 -> 2:mutex_lock_failed(total_lock)#1\n\
                    2:mutex_lock_failed(total_lock)#1 -> 1:mutex_unlock(total_lock)#1\n";
    candidate(&r.doc, "failed_try", schedule);
    assert_reproduces(&r, "failed_try", schedule);
}

#[test]
fn reporter_overtakes_a_barrier_arrival_or_a_workers_start() {
    let Some(r) = record_and_analyze("shape_missing_barrier") else {
        return;
    };
    // Thread 1 is the reporter; workers 2 and 3 arrive at the barrier.
    for (kind, gated) in [
        ("overtake", ":barrier_arrive(phase_done)#1\n"),
        ("delayed_start", ":thread_start()#1\n"),
    ] {
        let found: Vec<&str> = r.doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == kind)
            .map(|f| f["schedule"].as_str().unwrap())
            .filter(|s| s.starts_with("1:mutex_lock(results_lock)#1 -> "))
            .collect();
        assert!(!found.is_empty(), "no {kind}: {:#}", r.doc["findings"]);
        for (i, s) in found.iter().enumerate() {
            assert!(s.ends_with(gated), "{s}");
            assert_reproduces(&r, &format!("{kind}_{i}"), s);
        }
    }
}

#[test]
fn closer_before_every_one_of_99_workers() {
    let Some(r) = record_and_analyze("shape_first_of_many") else {
        return;
    };
    // The closer is thread 100: its first section before each other thread's first.
    let schedule = "100:mutex_lock(work_lock)#1 -> *:mutex_lock(work_lock)#1\n";
    let f = candidate(&r.doc, "first_of_many", schedule);
    assert_eq!(f["rank"]["v"], 1);
    assert!(f["rank"]["t"].as_u64().unwrap() >= 4, "{f:#}");
    ordo_schedule_parses(schedule);
    assert_reproduces(&r, "first_of_many", schedule);
}

#[test]
fn three_thread_deadlock_pins_every_lock() {
    let Some(r) = record_and_analyze("shape_deadlock3") else {
        return;
    };
    let d = r.doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "deadlock")
        .unwrap_or_else(|| panic!("no deadlock: {:#}", r.doc["findings"]));
    let schedule = d["schedule"].as_str().unwrap();
    ordo_schedule_parses(schedule);
    assert_eq!(schedule.lines().count(), 3, "{schedule}");
    for line in schedule.lines() {
        let before = line.split(" -> ").next().unwrap();
        assert_eq!(before.split(" && ").count(), 3, "{schedule}");
    }
    let (shown, outcomes) = replay(&r, "deadlock3", schedule);
    assert_eq!(
        shown, REPLAYS,
        "deadlock reproduced {shown}/{REPLAYS}: {outcomes:#?}"
    );
    assert!(outcomes
        .iter()
        .all(|o| o["reason"].as_str().unwrap_or("").contains("deadlock")));
}

#[test]
fn borrow_take_and_return_between_the_allocators_check_and_pop() {
    let Some(r) = record_and_analyze("shape_aba") else {
        return;
    };
    // Recorded: the allocator's two sections, then the borrower's two, then the
    // taker's. The ABA needs all three clients' sections between the allocator's,
    // the taker's between the borrower's.
    let schedule = "1:mutex_lock(free_lock)#1 -> 2:mutex_lock(free_lock)#1\n\
                    2:mutex_lock(free_lock)#1 -> 3:mutex_lock(free_lock)#1\n\
                    3:mutex_lock(free_lock)#1 -> 2:mutex_lock(free_lock)#2\n\
                    2:mutex_lock(free_lock)#2 -> 1:mutex_lock(free_lock)#2\n";
    let f = candidate(&r.doc, "multi_split", schedule);
    assert_eq!(
        (&f["rank"]["v"], &f["rank"]["t"]),
        (&Value::from(1), &Value::from(3))
    );
    assert_reproduces(&r, "aba", schedule);
    // In the recorded order of the clients it is harmless: the taker's section
    // after the return finds the list whole again.
    let harmless = "1:mutex_lock(free_lock)#1 -> 2:mutex_lock(free_lock)#1\n\
                    2:mutex_lock(free_lock)#1 -> 2:mutex_lock(free_lock)#2\n\
                    2:mutex_lock(free_lock)#2 -> 3:mutex_lock(free_lock)#1\n\
                    3:mutex_lock(free_lock)#1 -> 1:mutex_lock(free_lock)#2\n";
    candidate(&r.doc, "multi_split", harmless);
    let (shown, _) = replay(&r, "aba_recorded_order", harmless);
    assert_eq!(shown, 0, "the recorded order of the clients must not fail");
}
