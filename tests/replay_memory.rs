//! Memory-access gates (needs root: recording uses eBPF, gating uses perf
//! breakpoints): a data race `ordo analyze` finds on a watched variable becomes a
//! failing replay. For each bug program in `tests/programs/memgate_*.c`: a plain
//! recording with `--watch` reports the race, and the analyzer's top candidate — a
//! schedule of `read`/`write` events — reproduces the failure in at least 19 of 20
//! replays; the same program with the accesses made safe (`*_safe.c`, `SAFE`
//! defined) has no race and no candidate makes it fail. Also: a variable reached
//! only through a pointer, gated at the sites a `--watch-hw` recording saw; the
//! recorded replay's check of access orderings; the four-debug-register limit as an
//! error before the run.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{
    build_program, debug_registers, findings, have_root, ordo, record_watching, replay_json,
    reproductions, scratch, top_race,
};

/// Records `name` watching `var`, checks there is a race on `var` and
/// that its schedule reproduces the failure in ≥ 19 of 20 replays; then the safe
/// variant: no race, and no candidate fails it. Returns the top schedule.
fn race_replays(name: &str, var: &str, replay_args: &[&str]) -> String {
    if !have_root(name) {
        return String::new();
    }
    let program = build_program(name);
    let dir = scratch(&format!("replay_memory_{name}"));
    let trace = dir.join("plain.ordo");
    record_watching(&trace, &program, &["--watch", var]);
    let found = findings(&trace);
    let top = top_race(&found).unwrap_or_else(|| panic!("{name}: no race found: {found:?}"));
    assert!(
        top.contains(&format!("({var})#")),
        "{name}: the race schedule names {var}: {top}"
    );
    let file = dir.join("top.sched");
    std::fs::write(&file, &top).unwrap();
    let shown = reproductions(&file, &program, replay_args, 20);
    eprintln!("{name}: the top race candidate reproduced in {shown} of 20 replays:\n{top}");
    assert!(
        shown >= 19,
        "{name}: the top race candidate reproduced in {shown} of 20 replays:\n{top}"
    );

    let safe_name = format!("{name}_safe");
    let safe = build_program(&safe_name);
    let safe_trace = dir.join("safe.ordo");
    record_watching(&safe_trace, &safe, &["--watch", var]);
    let safe_found = findings(&safe_trace);
    assert!(
        safe_found.iter().all(|(kind, _)| kind != "race"),
        "{safe_name}: a race on a correctly synchronized variable: {safe_found:?}"
    );
    // Every candidate either runs to its end without the bug, or cannot be
    // followed at all (infeasible: e.g. a signal ordered after a lock the
    // signaller itself holds); never a failure. The first one (reordering the
    // critical sections) must run.
    for (i, (_, schedule)) in safe_found.iter().enumerate() {
        let file = dir.join(format!("safe{i}.sched"));
        std::fs::write(&file, schedule).unwrap();
        for _ in 0..3 {
            let (_, json) = replay_json(&[], &file, &safe);
            let verdict = json["verdict"].as_str().unwrap_or_default();
            let allowed: &[&str] = if i == 0 {
                &["passed"]
            } else {
                &["passed", "infeasible"]
            };
            assert!(
                allowed.contains(&verdict),
                "{safe_name} under candidate {i}:\n{schedule}\n{json}"
            );
        }
    }
    top
}

#[test]
fn flag_checked_before_it_is_set() {
    let _registers = debug_registers();
    race_replays("memgate_flag", "ready", &[]);
}

#[test]
fn use_after_free_across_threads() {
    let _registers = debug_registers();
    race_replays("memgate_use_after_free", "current", &[]);
}

#[test]
fn double_checked_initialization() {
    let _registers = debug_registers();
    race_replays("memgate_double_checked", "config", &[]);
}

#[test]
fn lost_update_on_a_plain_counter() {
    let _registers = debug_registers();
    let top = race_replays("memgate_lost_update", "total", &[]);
    if top.is_empty() {
        return;
    }
    // The recorded replay proves the gated order: both accesses happened, the
    // read before the write.
    let program = build_program("memgate_lost_update");
    let dir = scratch("replay_memory_lost_update_record");
    let file = dir.join("top.sched");
    std::fs::write(&file, &top).unwrap();
    let out = dir.join("replay.ordo");
    let (_, json) = replay_json(&["--record", out.to_str().unwrap()], &file, &program);
    assert_eq!(json["verdict"], "reproduced", "{json}");
    assert_eq!(json["verified_by"], "recording", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    assert_eq!(json["pending"], serde_json::json!([]), "{json}");
    // A passive check of the same schedule on a normal run: the first worker wrote
    // long before the second read, so the recording shows the ordering violated.
    let plain = dir.join("check.ordo");
    let (_, json) = replay_json(
        &["--check", "--record", plain.to_str().unwrap()],
        &file,
        &program,
    );
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["verified_by"], "recording", "{json}");
    assert_eq!(json["schedule_held"], false, "{json}");
    assert_eq!(json["violated"].as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn torn_read_of_a_two_field_struct() {
    let _registers = debug_registers();
    let top = race_replays("memgate_torn_read", "range", &[]);
    if top.is_empty() {
        return;
    }
    // The reader's second field read is the one the write must follow.
    assert!(top.contains(":read(range)#2 -> "), "{top}");
    // Occurrence numbers are stable: another recording of the same program names
    // the same race the same way.
    let program = build_program("memgate_torn_read");
    let dir = scratch("replay_memory_torn_again");
    let trace = dir.join("again.ordo");
    record_watching(&trace, &program, &["--watch", "range"]);
    assert_eq!(top_race(&findings(&trace)).as_deref(), Some(top.as_str()));
}

/// A variable reached only through a pointer: `--watch` finds no instruction, a
/// hardware watchpoint records the writes, and the replay gates them at the
/// instruction the recording saw (`--watch-hw` with `--sites-from`).
#[test]
fn pointer_reached_variable_gated_at_recorded_sites() {
    let _registers = debug_registers();
    if !have_root("pointer_reached_variable_gated_at_recorded_sites") {
        return;
    }
    let program = build_program("memgate_pointer_update");
    let dir = scratch("replay_memory_pointer");
    let trace = dir.join("plain.ordo");
    record_watching(&trace, &program, &["--watch-hw", "total"]);
    let found = findings(&trace);
    let top = top_race(&found).unwrap_or_else(|| panic!("no race found: {found:?}"));
    let file = dir.join("top.sched");
    std::fs::write(&file, &top).unwrap();
    // Without the recording's sites there is nothing to arm: a clear error.
    let out = Command::new(ordo())
        .args(["replay", "--schedule"])
        .arg(&file)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--sites-from"), "{stderr}");
    let args = [
        "--watch-hw",
        "total",
        "--sites-from",
        trace.to_str().unwrap(),
    ];
    let shown = reproductions(&file, &program, &args, 20);
    eprintln!("pointer update: reproduced in {shown} of 20 replays:\n{top}");
    assert!(shown >= 19, "reproduced in {shown} of 20 replays:\n{top}");
    // The safe variant under the same schedule (its accesses are the same
    // instructions, now under a lock): never the lost update.
    let safe = build_program("memgate_pointer_update_safe");
    let safe_trace = dir.join("safe.ordo");
    record_watching(&safe_trace, &safe, &["--watch-hw", "total"]);
    for (i, (kind, schedule)) in findings(&safe_trace).iter().enumerate() {
        assert_ne!(kind, "race", "{schedule}");
        let file = dir.join(format!("safe{i}.sched"));
        std::fs::write(&file, schedule).unwrap();
        let (_, json) = replay_json(&[], &file, &safe);
        assert_eq!(json["verdict"], "passed", "{schedule}\n{json}");
    }
}

/// More sites than debug registers in one thread that software breakpoints cannot
/// take (not memory accesses), `@K` for a variable, an unknown variable: one-line
/// errors before the program runs (exit status 2).
#[test]
fn access_gates_refuse_what_they_cannot_arm() {
    let _registers = debug_registers();
    let program = build_program("memgate_many_sites");
    let dir = scratch("replay_memory_errors");
    // Five points at `call` instructions: not memory accesses, so no software
    // breakpoint can stand in for the fifth debug register.
    let calls = "0:write(level)#1 -> 1:at(reader+7)#1\n0:write(level)#1 -> 1:at(reader+20)#1\n\
                 0:write(level)#1 -> 1:at(reader+33)#1\n0:write(level)#1 -> 1:at(reader+46)#1\n\
                 0:write(level)#1 -> 1:at(reader+59)#1";
    for (schedule, needle) in [
        (calls, "x86 has 4 debug registers per thread"),
        ("1:read(@1)#1 -> 0:write(level)#1", "name the variable"),
        (
            "1:read(nosuch)#1 -> 0:write(level)#1",
            "no global or static variable named `nosuch`",
        ),
    ] {
        let file = dir.join("bad.sched");
        std::fs::write(&file, schedule).unwrap();
        let out = Command::new(ordo())
            .args(["replay", "--schedule"])
            .arg(&file)
            .arg("--")
            .arg(&program)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schedule}: {stderr}");
        assert!(stderr.contains(needle), "{schedule}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{schedule}: {stderr}");
        assert!(
            String::from_utf8_lossy(&out.stdout).is_empty(),
            "{schedule}: the program ran"
        );
    }
}

/// With a recording (`--sites-from`), a thread arms only the instructions its own
/// accesses up to the named one were made at: the reader's first read needs one
/// debug register instead of six, its fifth read five (software breakpoints take
/// what the registers cannot).
#[test]
fn recorded_sites_narrow_what_a_thread_arms() {
    let _registers = debug_registers();
    if !have_root("recorded_sites_narrow_what_a_thread_arms") {
        return;
    }
    let program = build_program("memgate_many_sites");
    let dir = scratch("replay_memory_narrow");
    let trace = dir.join("plain.ordo");
    record_watching(&trace, &program, &["--watch", "level"]);
    let first = dir.join("first.sched");
    std::fs::write(&first, "0:write(level)#1 -> 1:read(level)#1\n").unwrap();
    let (code, json) = replay_json(&["--sites-from", trace.to_str().unwrap()], &first, &program);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    // The fifth read needs five sites, one more than the debug registers: the
    // agent's software breakpoints gate them (they are memory accesses).
    let fifth = dir.join("fifth.sched");
    std::fs::write(&fifth, "0:write(level)#1 -> 1:read(level)#5\n").unwrap();
    let (code, json) = replay_json(&["--sites-from", trace.to_str().unwrap()], &fifth, &program);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
}

/// Six reads of one variable in one thread, all gated before a write of another:
/// more sites than debug registers, served by software breakpoints, and the
/// recording of the replay shows every read after the write.
#[test]
fn more_access_sites_than_debug_registers_are_gated_in_software() {
    let _registers = debug_registers();
    if !have_root("more_access_sites_than_debug_registers_are_gated_in_software") {
        return;
    }
    let program = build_program("memgate_many_sites");
    let dir = scratch("replay_memory_software_gates");
    let schedule = dir.join("all.sched");
    std::fs::write(&schedule, "0:write(level)#1 -> 1:read(level)#1\n").unwrap();
    let trace = dir.join("replay.ordo");
    let (code, json) = replay_json(&["--record", trace.to_str().unwrap()], &schedule, &program);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    assert_eq!(json["verified_by"], "recording", "{json}");
    // Against the program's own order: main's write (a hardware gate) waits for the
    // reader's fifth read (a software one), recorded. Until 2026-12-03 the
    // recording's uprobes on the reads took their `int3` first, the software gates
    // never ran, and the write waited for ever (the first schedule held 99 times
    // in 100, by timing).
    std::fs::write(&schedule, "1:read(level)#5 -> 0:write(level)#1\n").unwrap();
    let (code, json) = replay_json(&["--record", trace.to_str().unwrap()], &schedule, &program);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    assert_eq!(json["verified_by"], "recording", "{json}");
    // The recording names the gated accesses as the variable's: five reads of the
    // reader's, before main's write.
    let events = common::dump_json(&trace);
    let level: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["object"] == "level")
        .map(|e| (e["thread"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        level,
        [
            ("1", "read"),
            ("1", "read"),
            ("1", "read"),
            ("1", "read"),
            ("1", "read"),
            ("0", "write"),
            ("0", "read")
        ],
        "{events:?}"
    );
}

/// The cost model: a counted access is one trap, an access after the thread's last
/// named one none (its breakpoints are closed), and a gate that can never open is
/// reported as infeasible like any other. `bench/programs/gate_bench.c`: main
/// writes `level` once, a worker reads it in a loop.
#[test]
fn accesses_trap_only_until_the_last_named_one() {
    let _registers = debug_registers();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/programs/gate_bench.c");
    let dir = scratch("replay_memory_traps");
    let program = dir.join("gate_bench");
    let status = Command::new("cc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&program)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success());
    let run = |schedule: &str| {
        let file = dir.join("s.sched");
        std::fs::write(&file, schedule).unwrap();
        let out = Command::new(ordo())
            .args(["replay", "--json", "--schedule"])
            .arg(&file)
            .arg("--")
            .arg(&program)
            .arg("2000")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let json: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        json
    };
    // Gating the first read: one trap in the reader (then 1999 free reads), one at
    // main's write.
    let json = run("0:write(level)#1 -> 1:read(level)#1\n");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["access_traps"], 2, "{json}");
    // Naming the last read: every read before it is counted, one trap each.
    let json = run("0:write(level)#1 -> 1:read(level)#2000\n");
    assert_eq!(json["verdict"], "passed", "{json}");
    assert_eq!(json["access_traps"], 2001, "{json}");
    // The write waits for a read of a thread it has not created yet.
    let json = run("1:read(level)#1 -> 0:write(level)#1\n");
    assert_eq!(json["verdict"], "infeasible", "{json}");
    assert!(
        json["held_threads"][0]
            .as_str()
            .unwrap_or("")
            .contains("before 0:write(level)#1"),
        "{json}"
    );
}

/// Program points (issue 15): the owner's clearing store right after its unlock has
/// no synchronization call in front of it; `ordo record --mark FILE:LINE` records it
/// as an `at` event, and `T:at(FILE:LINE)#1` holds the owner there, on the same
/// gates, until the cleaner's critical section is over: a double free every time.
/// Without the mark the same orderings cannot hold the owner, and the run passes.
#[test]
fn a_mark_holds_a_thread_between_an_unlock_and_the_next_statement() {
    let _registers = debug_registers();
    if !have_root("a_mark_holds_a_thread_between_an_unlock_and_the_next_statement") {
        return;
    }
    let name = "mark_unlock_then_free";
    let program = build_program(name);
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c")),
    )
    .unwrap();
    let line = source
        .lines()
        .position(|l| l.contains("// MARK"))
        .expect("the marked line")
        + 1;
    let spec = format!("{name}.c:{line}");
    let dir = scratch("replay_memory_mark");
    let trace = dir.join("plain.ordo");
    record_watching(&trace, &program, &["--mark", &spec]);
    let events = common::dump_json(&trace);
    let marks: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "at").collect();
    assert_eq!(marks.len(), 1, "one `at` event for the owner: {marks:?}");
    let sync = "1:mutex_unlock(slot_lock)#1 -> 2:mutex_lock(slot_lock)#1\n";
    let held = dir.join("held.sched");
    std::fs::write(
        &held,
        format!("{sync}2:mutex_unlock(slot_lock)#1 -> 1:at({spec})#1\n"),
    )
    .unwrap();
    let shown = reproductions(&held, &program, &[], 20);
    eprintln!("{name}: reproduced in {shown} of 20 replays with the mark");
    assert!(shown >= 19, "reproduced in {shown} of 20 replays");
    let free = dir.join("free.sched");
    std::fs::write(&free, sync).unwrap();
    let without = reproductions(&free, &program, &[], 5);
    assert!(without <= 1, "without the mark: {without} of 5");
    // The recorded replay shows the owner's `at` after the cleaner's unlock.
    let out = dir.join("replay.ordo");
    let (_, json) = replay_json(&["--record", out.to_str().unwrap()], &held, &program);
    assert_eq!(json["verified_by"], "recording", "{json}");
    assert_eq!(json["schedule_held"], true, "{json}");
    assert_eq!(json["pending"], serde_json::json!([]), "{json}");
}
