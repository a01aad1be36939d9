//! Issue 15's programs (needs root: recording uses eBPF, access gates perf
//! breakpoints): bugs whose window lies after a synchronization call, before a
//! plain statement, or between two plain accesses, in C and C++, each also built
//! with `-fsanitize=address` (gcc: libasan loads dynamically). For each buggy
//! program and build: a recording (with `--watch` where the window is between
//! plain accesses, `--mark` where it ends at a plain statement; none for the
//! `after(…)` windows), `ordo analyze`'s top
//! candidate, and 20 replays of it, of which at least 19 reproduce the failure with
//! the expected evidence (the signal, or the sanitizer's report); where the window
//! opens later than a call's return, the recording marks its end (`--mark`) and the
//! top candidate names that point. The ASan build
//! replayed with an empty schedule passes. A correct reference-counted object using
//! `std::atomic`: no race finding, and no candidate ever reproduces anything.

use crate::common;

use std::path::{Path, PathBuf};

use common::{
    build_program, build_program_variant, debug_registers, findings, have_root, record_watching,
    replay_json, scratch,
};

/// The plain build and the gcc ASan build of `tests/programs/NAME.{c,cpp}`.
fn builds(name: &str) -> [(&'static str, PathBuf); 2] {
    [
        ("plain", build_program(name)),
        (
            "asan",
            build_program_variant(name, "gcc-asan", "gcc", &["-fsanitize=address"]),
        ),
    ]
}

/// What a failing replay of a buggy program must show.
struct Failure {
    /// The finding kind of the analyzer's top candidate.
    kind: &'static str,
    /// The signal that kills the plain build.
    signal: &'static str,
    /// The ASan report's kind (`heap-use-after-free`, …).
    asan: &'static str,
}

/// Records `name` (each build) with `watch`, replays the top candidate 20 times,
/// checks ≥ 19 reproductions with `failure`'s evidence; then the ASan build under an
/// empty schedule passes. Returns the plain build's top schedule.
fn top_candidate_reproduces(name: &str, watch: &[&str], failure: Failure) -> String {
    if !have_root(name) {
        return String::new();
    }
    let dir = scratch(&format!("replay_real_{name}"));
    let mut plain_top = String::new();
    for (build, program) in builds(name) {
        let trace = dir.join(format!("{build}.ordo"));
        record_watching(&trace, &program, watch);
        let found = findings(&trace);
        let (kind, top) = found
            .first()
            .cloned()
            .unwrap_or_else(|| panic!("{name} ({build}): no candidate"));
        assert_eq!(kind, failure.kind, "{name} ({build}): {found:?}");
        let file = dir.join(format!("{build}.sched"));
        std::fs::write(&file, &top).unwrap();
        let mut shown = 0;
        let mut verdicts = Vec::new();
        for _ in 0..20 {
            let (_, json) = replay_json(&[], &file, &program);
            if json["verdict"] == "reproduced" {
                shown += 1;
                if build == "plain" {
                    assert_eq!(json["signal_name"], failure.signal, "{name}: {json}");
                } else {
                    assert_eq!(json["sanitizer"]["kind"], failure.asan, "{name}: {json}");
                    assert_eq!(json["sanitizer"]["tool"], "AddressSanitizer", "{json}");
                    let frame = json["sanitizer"]["top_frame"].as_str().unwrap_or("");
                    assert!(frame.contains(name), "{name}: the user's frame: {json}");
                }
            } else {
                verdicts.push(json["verdict"].to_string());
            }
        }
        eprintln!("{name} ({build}): reproduced in {shown} of 20 replays:\n{top}");
        assert!(
            shown >= 19,
            "{name} ({build}): reproduced in {shown} of 20 replays ({verdicts:?}):\n{top}"
        );
        if build == "plain" {
            plain_top = top;
        } else {
            // Replayed with an empty schedule, the ASan build runs as it would alone.
            let empty = dir.join("empty.sched");
            std::fs::write(&empty, "# nothing\n").unwrap();
            let (code, json) = replay_json(&[], &empty, &program);
            assert_eq!(json["verdict"], "passed", "{name}: {json}");
            assert_eq!(code, 0, "{name}: {json}");
        }
    }
    plain_top
}

/// The line of `tests/programs/FILE` with `needle`, as `FILE:LINE`.
fn spec_of(file: &str, needle: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/programs")
            .join(file),
    )
    .unwrap();
    let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    format!("{file}:{line}")
}

/// Unlock, then `slot = NULL; free(buf)` outside the lock: a cleaner's whole
/// section in between frees the buffer first, a double free. No mark is needed:
/// the top candidate holds the owner at `after(mutex_unlock(slot_lock)#1)`, and
/// `ordo analyze` names the statement there for `--mark`.
#[test]
fn unlock_then_free_is_a_double_free() {
    let top = top_candidate_reproduces(
        "mark_unlock_then_free",
        &[],
        Failure {
            kind: "after_release",
            signal: "SIGABRT",
            asan: "attempting double-free",
        },
    );
    if top.is_empty() {
        return;
    }
    assert!(
        top.contains("-> 1:after(mutex_unlock(slot_lock)#1)"),
        "{top}"
    );
    // The analyzer's --mark suggestion is the clearing store after the unlock.
    let program = build_program("mark_unlock_then_free");
    let dir = scratch("replay_real_mark_suggestion");
    let trace = dir.join("plain.ordo");
    record_watching(&trace, &program, &[]);
    let out = std::process::Command::new(common::ordo())
        .args(["analyze", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["findings"][0]["mark"],
        spec_of("mark_unlock_then_free.c", "// MARK"),
        "{report}"
    );
}

/// Unlock, then a NULL store through the stale pointer: a use after free (the
/// reaper's new session reuses the memory; main calls its cleared handler).
#[test]
fn unlock_then_null_store_is_a_use_after_free() {
    top_candidate_reproduces(
        "real_unlock_then_null_store",
        &[],
        Failure {
            kind: "after_release",
            signal: "SIGSEGV",
            asan: "heap-use-after-free",
        },
    );
}

/// Unlock, free, then the NULL store: the window opens after the free, so the
/// point right after the unlock is too early (the session is alive there). Recorded
/// with `--mark` at the NULL store, the top candidate names that point
/// (`at(closer+OFFSET)`) and holds the closer there.
#[test]
fn free_then_null_store_is_bounded_by_a_mark() {
    let _registers = debug_registers();
    let spec = spec_of("real_free_then_null_store.c", "// MARK");
    let top = top_candidate_reproduces(
        "real_free_then_null_store",
        &["--mark", &spec],
        Failure {
            kind: "after_release",
            signal: "SIGSEGV",
            asan: "heap-use-after-free",
        },
    );
    if !top.is_empty() {
        assert!(top.contains("-> 1:at(closer+"), "{top}");
    }
}

/// A singleton published through `std::atomic`, used after `get()` unlocked: a
/// reset in between deletes it (C++, `std::mutex` through libstdc++).
#[test]
fn atomic_singleton_is_used_after_free() {
    top_candidate_reproduces(
        "real_singleton_atomic",
        &[],
        Failure {
            kind: "after_release",
            signal: "SIGSEGV",
            asan: "heap-use-after-free",
        },
    );
}

/// A NULL check, then a dereference, no lock: the race on the watched pointer,
/// flipped (the closer's store before the second read).
#[test]
fn null_check_then_dereference() {
    let _registers = debug_registers();
    let top = top_candidate_reproduces(
        "real_null_check",
        &["--watch", "shared"],
        Failure {
            kind: "race",
            signal: "SIGSEGV",
            asan: "SEGV",
        },
    );
    if !top.is_empty() {
        assert_eq!(top, "2:write(shared)#1 -> 1:read(shared)#2\n");
    }
}

/// A correct reference-counted object using `std::atomic`: no race on the watched
/// count holder or the visit counter, and none of the candidates (after_release,
/// reorder) makes either build fail.
#[test]
fn atomic_refcount_is_never_reproduced() {
    if !have_root("atomic_refcount_is_never_reproduced") {
        return;
    }
    let name = "real_refcount_atomic";
    let dir = scratch("replay_real_refcount");
    for (build, program) in builds(name) {
        let trace = dir.join(format!("{build}.ordo"));
        record_watching(
            &trace,
            &program,
            &["--watch", "visits", "--watch", "object"],
        );
        let found = findings(&trace);
        assert!(
            found.iter().all(|(kind, _)| kind != "race"),
            "{name} ({build}): {found:?}"
        );
        assert!(!found.is_empty(), "{name} ({build}): no candidate to try");
        for (i, (_, schedule)) in found.iter().enumerate() {
            let file = dir.join(format!("{build}{i}.sched"));
            std::fs::write(&file, schedule).unwrap();
            for _ in 0..3 {
                let (_, json) = replay_json(&[], &file, &program);
                let verdict = json["verdict"].as_str().unwrap_or_default();
                assert!(
                    verdict == "passed" || verdict == "infeasible",
                    "{name} ({build}) under\n{schedule}{json}"
                );
            }
        }
        let empty = dir.join("empty.sched");
        std::fs::write(&empty, "").unwrap();
        let (code, json) = replay_json(&[], &empty, &program);
        assert_eq!((code, &json["verdict"]), (0, &"passed".into()), "{json}");
    }
}

/// `after(…)` composes with `->` both ways: held after its unlock until the
/// cleaner's unlock (a successor), and the cleaner's exit held until the owner
/// passed that point (a predecessor); a recorded replay checks both. A cycle
/// through an after point is infeasible, with the held thread named at it.
#[test]
fn after_points_order_both_ways() {
    if !have_root("after_points_order_both_ways") {
        return;
    }
    let program = build_program("mark_unlock_then_free");
    let dir = scratch("replay_real_after_both_ways");
    let both = dir.join("both.sched");
    std::fs::write(
        &both,
        "1:mutex_unlock(slot_lock)#1 -> 2:mutex_lock(slot_lock)#1\n\
         2:mutex_unlock(slot_lock)#1 -> 1:after(mutex_unlock(slot_lock)#1)\n\
         after(1:mutex_unlock(slot_lock)#1) -> 2:thread_exit()#1\n",
    )
    .unwrap();
    let trace = dir.join("replay.ordo");
    let (_, json) = replay_json(&["--record", trace.to_str().unwrap()], &both, &program);
    assert_eq!(json["verdict"], "reproduced", "{json}");
    assert_eq!(json["signal_name"], "SIGABRT", "{json}");
    assert_eq!(json["verified_by"], "recording", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    assert_eq!(json["pending"], serde_json::json!([]), "{json}");
    // Only as a predecessor: the cleaner's section waits until the owner passed
    // the point after its unlock; by then the slot is cleared: no double free.
    let first = dir.join("first.sched");
    std::fs::write(
        &first,
        "1:after(mutex_unlock(slot_lock)#1) -> 2:mutex_lock(slot_lock)#1\n",
    )
    .unwrap();
    let trace = dir.join("first.ordo");
    let (code, json) = replay_json(&["--record", trace.to_str().unwrap()], &first, &program);
    assert_eq!((code, &json["verdict"]), (0, &"passed".into()), "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    let cycle = dir.join("cycle.sched");
    std::fs::write(
        &cycle,
        "2:thread_exit()#1 -> 1:after(mutex_unlock(slot_lock)#1)\n\
         1:after(mutex_unlock(slot_lock)#1) -> 2:mutex_lock(slot_lock)#1\n",
    )
    .unwrap();
    let (_, json) = replay_json(&[], &cycle, &program);
    assert_eq!(json["verdict"], "infeasible", "{json}");
    let held = json["held_threads"].to_string();
    assert!(
        held.contains("thread 1 before 1:after(mutex_unlock(slot_lock)#1)"),
        "{json}"
    );
}
