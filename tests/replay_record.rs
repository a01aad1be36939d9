//! Replay with recording (needs root for eBPF): the analyzer's candidates from a
//! recorded plain run reproduce each bug, and `--record` proves on the recorded replay
//! that the schedule held — a replay cannot claim an order the run did not follow.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    build_program, build_rust_program, dump_json, have_root, ordo, record, replay_json, scratch,
};

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// The schedules of `ordo analyze --json TRACE`, best first.
fn candidates(trace: &Path) -> Vec<String> {
    let out = Command::new(ordo())
        .args(["analyze", "--json"])
        .arg(trace)
        .output()
        .expect("run ordo analyze");
    assert!(
        out.status.success(),
        "ordo analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("analyze JSON");
    report["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|f| f["schedule"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Records a plain run, asks the analyzer for candidates and replays them best
/// first; the first that reproduces must do so in at least 19 of 20 replays. Returns
/// its rank (0 = the analyzer's top candidate).
fn analyzer_candidate_reproduces(name: &str) -> usize {
    let program = build_program(name);
    let dir = scratch(&format!("replay_record_{name}"));
    let trace = dir.join("plain.ordo");
    record(&trace, &program, &[]);
    let schedules = candidates(&trace);
    assert!(
        !schedules.is_empty(),
        "{name}: the analyzer found no candidate"
    );
    for (rank, text) in schedules.iter().enumerate().take(3) {
        let file = dir.join(format!("candidate{rank}.sched"));
        std::fs::write(&file, text).unwrap();
        let (_, first) = replay_json(&["--timeout", "20"], &file, &program);
        if first["verdict"] != "reproduced" {
            eprintln!(
                "{name}: candidate {rank} did not reproduce ({}):\n{text}",
                first["reason"]
            );
            continue;
        }
        let mut shown = 1;
        for _ in 1..20 {
            let (_, json) = replay_json(&["--timeout", "20"], &file, &program);
            if json["verdict"] == "reproduced" {
                shown += 1;
            }
        }
        assert!(
            shown >= 19,
            "{name}: candidate {rank} reproduced in {shown} of 20 replays:\n{text}"
        );
        eprintln!("{name}: the analyzer's candidate {rank} reproduced in {shown} of 20 replays");
        return rank;
    }
    panic!("{name}: none of the analyzer's top candidates reproduced: {schedules:?}");
}

#[test]
fn analyzer_candidates_reproduce_the_bugs() {
    if !have_root("analyzer_candidates_reproduce_the_bugs") {
        return;
    }
    for name in ["replay_atomicity", "replay_lost_wakeup"] {
        assert_eq!(
            analyzer_candidate_reproduces(name),
            0,
            "{name}: the top candidate must reproduce"
        );
    }
    // The lock-order cycle involves two locks (v = 2): in a recording where the
    // two threads' sections on one lock came close together, a reordering of
    // those (v = 1) ranks before it (seen under CI load), and the deadlock comes
    // second.
    assert!(
        analyzer_candidate_reproduces("replay_deadlock") <= 1,
        "replay_deadlock: one of the top two candidates must reproduce"
    );
    // An order violation between two threads' only sections: the worker's section
    // could also fall right after the init thread's unlock (`after_release`, which
    // ranks before plain reorderings: it is the shape of unlock-then-free bugs),
    // so the reordering that shows this bug comes second.
    assert!(
        analyzer_candidate_reproduces("replay_order") <= 1,
        "replay_order: one of the top two candidates must reproduce"
    );
    // The analyzer ranks the use-after-free's table-lock reordering first; its
    // connection-lock candidate is the one that shows the bug.
    analyzer_candidate_reproduces("replay_use_after_free");
}

/// Replays with `--record` and checks the schedule on the recording.
fn held_on_recording(name: &str, schedule: &str, expect: &str) {
    let program = build_program(name);
    let dir = scratch(&format!("replay_verify_{schedule}"));
    let trace = dir.join("replay.ordo");
    let (code, json) = replay_json(
        &["--timeout", "20", "--record", trace.to_str().unwrap()],
        &programs_dir().join(format!("{schedule}.sched")),
        &program,
    );
    assert_eq!(json["verdict"], expect, "{schedule}: {json}");
    assert_eq!(code, if expect == "passed" { 0 } else { 1 });
    assert_eq!(json["verified_by"], "recording", "{json}");
    assert_eq!(
        json["schedule_held"], true,
        "{schedule}: the recorded replay violates the schedule: {json}"
    );
    assert!(json["violated"].as_array().unwrap().is_empty(), "{json}");
    assert!(trace.exists());
}

#[test]
fn recorded_replays_follow_their_schedules() {
    if !have_root("recorded_replays_follow_their_schedules") {
        return;
    }
    for name in [
        "replay_order",
        "replay_atomicity",
        "replay_deadlock",
        "replay_lost_wakeup",
        "replay_use_after_free",
    ] {
        held_on_recording(name, name, "reproduced");
    }
    held_on_recording("replay_queue", "replay_queue_consumer_first", "passed");
    held_on_recording("replay_queue", "replay_queue_interleaved", "passed");
}

#[test]
fn recording_check_fails_when_the_order_did_not_happen() {
    if !have_root("recording_check_fails_when_the_order_did_not_happen") {
        return;
    }
    // Passive mode does not enforce the bug's order, and the recording shows it.
    let program = build_program("replay_order");
    let dir = scratch("replay_verify_negative");
    let trace = dir.join("check.ordo");
    let (code, json) = replay_json(
        &[
            "--timeout",
            "20",
            "--check",
            "--record",
            trace.to_str().unwrap(),
        ],
        &programs_dir().join("replay_order.sched"),
        &program,
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["verified_by"], "recording");
    assert_eq!(json["schedule_held"], false, "{json}");
    assert!(
        json["violated"][0]
            .as_str()
            .unwrap()
            .contains("2:mutex_lock(cfg_lock)#1"),
        "{json}"
    );
}

#[test]
fn a_recorded_replay_shows_the_program_and_not_the_agent() {
    if !have_root("a_recorded_replay_shows_the_program_and_not_the_agent") {
        return;
    }
    let program = build_program("replay_atomicity");
    let dir = scratch("replay_record_sites");
    // Both of thread 2's sections between thread 1's: the recording then shows
    // thread 1's section as one that could split thread 2's two (an atomicity
    // candidate, which needs two different program sites of one thread).
    let schedule = dir.join("both.sched");
    std::fs::write(
        &schedule,
        "1:mutex_unlock(account_lock)#1 -> 2:mutex_lock(account_lock)#1\n\
         2:mutex_unlock(account_lock)#2 -> 1:mutex_lock(account_lock)#2\n",
    )
    .unwrap();
    for run in 0..3 {
        let trace = dir.join(format!("replay{run}.ordo"));
        let (_, json) = replay_json(
            &["--timeout", "20", "--record", trace.to_str().unwrap()],
            &schedule,
            &program,
        );
        assert_eq!(json["verdict"], "reproduced", "{json}");
        assert_eq!(json["schedule_held"], true, "{json}");
        let events = dump_json(&trace);
        let mut mutexes = std::collections::BTreeSet::new();
        for e in &events {
            let kind = e["kind"].as_str().unwrap();
            let site = e["site"].as_str().unwrap_or("");
            // Symbolized, in the program: never the agent, never a bare address.
            assert!(
                !site.contains("ordo") && !site.contains("+0x"),
                "run {run}: an event in the agent or unsymbolized: {e}"
            );
            if kind.starts_with("mutex_") {
                assert!(site.contains("replay_atomicity.c"), "run {run}: {e}");
                mutexes.insert(e["addr"].as_str().unwrap().to_string());
            }
        }
        // Only the program's lock: no loader lock taken by the agent (dlsym,
        // dl_iterate_phdr) shows up as the program's.
        assert_eq!(mutexes.len(), 1, "run {run}: {mutexes:?}");
        // The atomicity finding needs two different program sites of one thread.
        let out = Command::new(ordo())
            .args(["analyze", "--json"])
            .arg(&trace)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let atomicity: Vec<&serde_json::Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "atomicity")
            .collect();
        assert!(!atomicity.is_empty(), "run {run}: {report}");
        let sites: std::collections::BTreeSet<&str> = atomicity[0]["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(sites.len(), 2, "run {run}: {sites:?}");
        assert!(sites.iter().all(|s| s.contains("replay_atomicity.c")));
    }
}

#[test]
fn recording_a_replay_does_not_change_its_verdict() {
    if !have_root("recording_a_replay_does_not_change_its_verdict") {
        return;
    }
    let dir = scratch("replay_record_same_verdict");
    let cases = [
        ("replay_queue", "replay_queue_consumer_first"),
        ("replay_queue", "replay_queue_interleaved"),
        ("replay_queue", "replay_queue_infeasible"),
        ("replay_lost_wakeup", "replay_lost_wakeup"),
        ("replay_trylock", "replay_trylock"),
        ("replay_start", "replay_start"),
        ("replay_barging", "replay_barging"),
    ];
    for (name, schedule) in cases {
        let program = build_program(name);
        let file = programs_dir().join(format!("{schedule}.sched"));
        for run in 0..3 {
            let (_, plain) = replay_json(&["--timeout", "20"], &file, &program);
            let trace = dir.join(format!("{schedule}{run}.ordo"));
            let (_, recorded) = replay_json(
                &["--timeout", "20", "--record", trace.to_str().unwrap()],
                &file,
                &program,
            );
            assert_eq!(
                plain["verdict"], recorded["verdict"],
                "{schedule} run {run}: without --record {plain}\nwith --record {recorded}"
            );
            assert_eq!(
                plain["pending"], recorded["pending"],
                "{schedule} run {run}: without --record {plain}\nwith --record {recorded}"
            );
            assert_eq!(recorded["schedule_held"], true, "{recorded}");
        }
    }
}

/// A recorded replay that deadlocks shows each thread's blocked lock call as a
/// `blocked` event (its last), naming the mutex it waited for; the analysis sees
/// the deadlock the run really had as a lock-order cycle through those attempts.
#[test]
fn a_deadlocked_recording_shows_the_blocked_lock_calls() {
    if !have_root("a_deadlocked_recording_shows_the_blocked_lock_calls") {
        return;
    }
    let program = build_program("replay_deadlock");
    let dir = scratch("replay_record_blocked");
    let trace = dir.join("deadlock.ordo");
    let (_, outcome) = replay_json(
        &["--record", trace.to_str().unwrap()],
        &programs_dir().join("replay_deadlock.sched"),
        &program,
    );
    assert_eq!(outcome["verdict"], "reproduced", "{outcome}");
    let events = dump_json(&trace);
    let blocked: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["kind"] == "blocked").collect();
    let waits_on = |thread: &str| {
        blocked
            .iter()
            .find(|e| e["thread"] == thread && e["waiting_in"] == "mutex_lock")
            .and_then(|e| e["object"].as_str())
            .unwrap_or_else(|| panic!("no blocked mutex_lock of thread {thread}: {blocked:?}"))
            .to_string()
    };
    // The transfer holds lock_a and waits for lock_b; the audit the other way round.
    assert!(waits_on("1").starts_with("lock_b"), "{blocked:?}");
    assert!(waits_on("2").starts_with("lock_a"), "{blocked:?}");
    let report = Command::new(ordo())
        .args(["analyze", "--json"])
        .arg(&trace)
        .output()
        .expect("run ordo analyze");
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("analyze JSON");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "deadlock"),
        "no deadlock finding: {report}"
    );
}

/// The same for a Rust program, whose std locks and condvar are inlined (no pthread
/// call to wrap): a lock acquisition that went the slow way and a condvar wait are
/// noted pending while they wait, so a recorded replay that deadlocks shows each
/// thread's `blocked` attempt, and `ordo hunt` can pin a deadlock's whole cycle from
/// its recording (`pin::schedule_of_run`).
#[test]
fn a_deadlocked_rust_recording_shows_the_blocked_lock_and_condvar_calls() {
    if !have_root("a_deadlocked_rust_recording_shows_the_blocked_lock_and_condvar_calls") {
        return;
    }
    let dir = scratch("replay_record_rust_blocked");
    let eval = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eval");
    let blocked_of = |name: &str| -> Vec<serde_json::Value> {
        let trace = dir.join(format!("{name}.ordo"));
        let (_, outcome) = replay_json(
            &["--record", trace.to_str().unwrap()],
            &eval.join(format!("{name}.sched")),
            &build_rust_program(name),
        );
        assert_eq!(outcome["verdict"], "reproduced", "{name}: {outcome}");
        dump_json(&trace)
            .into_iter()
            .filter(|e| e["kind"] == "blocked")
            .collect()
    };
    let waits = |blocked: &[serde_json::Value], thread: &str, call: &str| -> (String, String) {
        let e = blocked
            .iter()
            .find(|e| e["thread"] == thread && e["waiting_in"] == call)
            .unwrap_or_else(|| panic!("no blocked {call} of thread {thread}: {blocked:?}"));
        (
            e["object"].as_str().unwrap_or("").to_string(),
            e["site"].as_str().unwrap_or("").to_string(),
        )
    };
    // Each transfer holds its first lock and waits for its second, at line 16.
    let blocked = blocked_of("rust_deadlock");
    let (object, site) = waits(&blocked, "1", "mutex_lock");
    assert!(object.starts_with("rust_deadlock::SAVINGS"), "{blocked:?}");
    assert!(site.contains("rust_deadlock.rs:16"), "{blocked:?}");
    let (object, _) = waits(&blocked, "2", "mutex_lock");
    assert!(object.starts_with("rust_deadlock::CHECKING"), "{blocked:?}");
    // The waiter missed the notify and waits for good on the condvar.
    let blocked = blocked_of("rust_lost_wakeup");
    let (object, _) = waits(&blocked, "1", "cond_wait");
    assert!(object.starts_with("rust_lost_wakeup::START"), "{blocked:?}");
}
