//! Discovery of shared memory with no hints (issue 25): `ordo record --discover`
//! runs the program unchanged while its memory-access instructions trap, `ordo
//! analyze` lists the shared locations with their sites and locks and proposes
//! orders of plain accesses that replay as written, and `ordo hunt` finds and pins
//! plain-access bugs of the evaluation suite with no `--watch` or `--mark`, and
//! nothing on their controls. Needs root (every run is recorded).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{build_eval_program, build_program, have_root, ordo, run_ordo, scratch};

/// `ordo record --discover --force -o TRACE -- PROGRAM`; panics without a trace.
pub fn record_discovering(trace: &Path, program: &Path) -> std::process::Output {
    let out = Command::new(ordo())
        .args(["record", "--discover", "--force", "-o"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .output()
        .expect("run ordo record");
    assert!(
        trace.exists(),
        "no trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn analyze_json(trace: &Path) -> serde_json::Value {
    let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("analyze --json")
}

#[test]
fn every_instruction_runs_out_of_line_unchanged() {
    if !have_root("every_instruction_runs_out_of_line_unchanged") {
        return;
    }
    let program = build_program("discover_forms");
    let plain = Command::new(&program).output().unwrap();
    assert!(plain.status.success());
    let dir = scratch("discover_forms");
    let trace = dir.join("forms.ordo");
    let recorded = record_discovering(&trace, &program);
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    // Every form (RIP-relative, indexed, through pointers, bytes, SSE, locked)
    // computed what it computes natively, past its breakpoint's removal too.
    assert_eq!(
        String::from_utf8_lossy(&recorded.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    let stats = common::dump_stats(&trace);
    let count = |kind: &str| stats["by_kind"][kind].as_u64().unwrap_or(0);
    assert!(count("read") > 1000 && count("write") > 1000, "{stats}");
    assert_eq!(stats["lost"], 0, "{stats}");
}

#[test]
fn discovery_lists_the_shared_pointer_and_proposes_a_stale_use_that_replays() {
    if !have_root("discovery_lists_the_shared_pointer_and_proposes_a_stale_use_that_replays") {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    let program = build_eval_program("plain_unlock_free");
    let dir = scratch("discover_unlock_free");
    let trace = dir.join("run.ordo");
    // A recording in the program's usual order: the reader's section first (on a
    // loaded machine the swapper sometimes gets there first, and then the reader
    // only ever saw the new buffer).
    let mut doc = serde_json::Value::Null;
    for _ in 0..5 {
        record_discovering(&trace, &program);
        doc = analyze_json(&trace);
        if doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "stale_use")
        {
            break;
        }
    }
    let shared = doc["shared_locations"]
        .as_array()
        .expect("shared_locations");
    let current = shared
        .iter()
        .find(|l| l["location"] == "current")
        .unwrap_or_else(|| panic!("`current` not found among {shared:?}"));
    assert!(
        current["threads"].as_array().unwrap().len() >= 3,
        "{current}"
    );
    assert!(current["writes"].as_u64().unwrap() >= 2, "{current}");
    let sites = current["sites"].as_array().unwrap();
    // The swapper's store is under the lock, main's initializing one is not: no
    // lock protects every access.
    assert!(
        sites.iter().any(|s| s["kind"] == "write"
            && s["locks_held"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l == "lock")),
        "{current}"
    );
    assert_eq!(
        current["common_locks"].as_array().unwrap().len(),
        0,
        "{current}"
    );
    // The window between the reader's load of the pointer and its use, held until
    // the swapper (which frees the old buffer) has exited.
    let findings = doc["findings"].as_array().unwrap();
    let stale = findings
        .iter()
        .find(|f| {
            f["kind"] == "stale_use" && f["schedule"].as_str().unwrap().contains("thread_exit")
        })
        .unwrap_or_else(|| panic!("no stale_use held until an exit: {findings:?}"));
    let schedule = dir.join("stale.sched");
    std::fs::write(&schedule, stale["schedule"].as_str().unwrap()).unwrap();
    assert!(
        stale["schedule"].as_str().unwrap().contains(":at("),
        "{stale}"
    );
    let reproduced = common::reproductions(&schedule, &program, &[], 5);
    assert_eq!(reproduced, 5, "{}", stale["schedule"]);
}

#[test]
fn a_held_thread_whose_predecessor_polls_with_usleep_ends_infeasible_in_seconds() {
    if !have_root("a_held_thread_whose_predecessor_polls_with_usleep_ends_infeasible_in_seconds") {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    let program = build_eval_program("plain_poll_usleep");
    let dir = scratch("discover_poll_infeasible");
    // The producer (thread 2) held before it announces the item until the
    // consumer (thread 1, polling `ready` with usleep) has checked it: impossible.
    let schedule = dir.join("never.sched");
    std::fs::write(
        &schedule,
        "1:at(plain_poll_usleep.c:25)#1 -> 2:at(plain_poll_usleep.c:17)#1\n",
    )
    .unwrap();
    let started = Instant::now();
    let (_, outcome) = common::replay_json(&["--timeout", "60"], &schedule, &program);
    assert_eq!(outcome["verdict"], "infeasible", "{outcome}");
    assert!(
        started.elapsed().as_secs_f64() < 15.0,
        "took {:?}: the poller kept it from being called infeasible",
        started.elapsed()
    );
}

/// `ordo hunt --json --budget 30 -o DIR -- PROGRAM`: the outcome.
fn hunt(program: &Path, dir: &Path) -> serde_json::Value {
    let out = Command::new(ordo())
        .args(["hunt", "--json", "--budget", "30", "-o"])
        .arg(dir)
        .arg("--")
        .arg(program)
        .output()
        .expect("run ordo hunt");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON outcome ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn hunt_with_no_hints_finds_and_pins_plain_access_bugs() {
    if !have_root("hunt_with_no_hints_finds_and_pins_plain_access_bugs") {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    for name in ["plain_check_use", "plain_unlock_free", "plain_publish2"] {
        let program = build_eval_program(name);
        let dir = scratch(&format!("discover_hunt_{name}"));
        let json = hunt(&program, &dir);
        assert_eq!(json["reproduced"], true, "{name}: {json}");
        let confirmed = json["confirm"]["reproduced"].as_u64().unwrap();
        assert!(
            confirmed >= 19,
            "{name}: pinned only {confirmed}/20: {json}"
        );
        assert_eq!(json["pinned"], true, "{name}: {json}");
        let shared = json["discovery"]["shared_locations"].as_array().unwrap();
        assert!(
            !shared.is_empty(),
            "{name}: discovery found nothing: {json}"
        );
        eprintln!(
            "{name}: reproduced in run {} of {}, confirmed {confirmed}/20 ({})",
            json["run"], json["runs"], json["finding"]["kind"]
        );
    }
}

#[test]
fn hold_exit_records_what_a_worker_cut_short_by_main_would_have_done() {
    if !have_root("hold_exit_records_what_a_worker_cut_short_by_main_would_have_done") {
        return;
    }
    // main returns right after creating its worker: without the hold the worker
    // has nearly never run (its store is missing from the recording).
    let program = build_program("hunt_cut_short");
    let dir = scratch("discover_hold_exit");
    for round in 0..5 {
        let trace = dir.join(format!("held-{round}.ordo"));
        let out = Command::new(ordo())
            .args(["record", "--discover", "--hold-exit", "--force", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&program)
            .output()
            .unwrap();
        assert!(trace.exists(), "{}", String::from_utf8_lossy(&out.stderr));
        let dump = String::from_utf8(run_ordo(&["dump", trace.to_str().unwrap()]).stdout).unwrap();
        let read = dump
            .lines()
            .position(|l| l.contains("[    0] read") && l.contains("done"));
        let write = dump
            .lines()
            .position(|l| l.contains("[    1] write") && l.contains("done"));
        assert!(read.is_some() && write.is_some(), "round {round}:\n{dump}");
    }
    // The hold is the agent's: eBPF alone cannot do it, and says so.
    let out = Command::new(ordo())
        .args(["record", "--hold-exit", "--probes", "ebpf", "--force", "-o"])
        .arg(dir.join("ebpf.ordo"))
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("--hold-exit") && err.lines().count() <= 2,
        "{err}"
    );
}

#[test]
fn a_first_recording_that_ended_before_its_worker_acted_is_made_again_holding_the_exit() {
    if !have_root(
        "a_first_recording_that_ended_before_its_worker_acted_is_made_again_holding_the_exit",
    ) {
        return;
    }
    let _registers = common::debug_registers();
    // main reads the worker's flag right after creating it and returns: the worker
    // has nearly never run, so a plain recording has nothing of it to order.
    let program = build_program("hunt_cut_short");
    let dir = scratch("discover_hunt_cut_short");
    let json = hunt(&program, &dir);
    assert_eq!(json["reproduced"], true, "{json}");
    let confirmed = json["confirm"]["reproduced"].as_u64().unwrap();
    assert!(confirmed >= 19, "pinned only {confirmed}/20: {json}");
    let schedule = std::fs::read_to_string(json["schedule"].as_str().unwrap()).unwrap();
    // main's read of the flag, then the worker's store.
    assert!(
        schedule
            .lines()
            .any(|l| l.starts_with("0:at(main+") && l.contains("-> 1:at(worker")),
        "{schedule}"
    );
    let log = std::fs::read_to_string(dir.join("runs.log")).unwrap();
    if json["source"] == "recorded" && json["run"] != 0 {
        // Pinned from a recording made again: that one held the exit.
        assert!(log.contains("exit held"), "{log}");
    }
    eprintln!("{log}");
}

#[test]
fn hunt_reports_nothing_on_the_controls_of_plain_access_bugs() {
    if !have_root("hunt_reports_nothing_on_the_controls_of_plain_access_bugs") {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    for name in ["ctl_plain_check_use", "ctl_plain_unlock_free"] {
        let program = build_eval_program(name);
        let dir = scratch(&format!("discover_hunt_{name}"));
        let json = hunt(&program, &dir);
        assert_eq!(json["reproduced"], false, "{name}: {json}");
    }
}

/// One against many (issue 25): main's store of a stop flag must come before each
/// of 8 workers' check for the bug; the analyzer proposes it as one candidate that
/// orders all 8, which replays the failure every time, and a hunt pins it.
#[test]
fn one_store_before_every_other_threads_check_is_proposed_and_pinned() {
    if !have_root("one_store_before_every_other_threads_check_is_proposed_and_pinned") {
        return;
    }
    let _registers = common::debug_registers();
    let program = build_program("hunt_one_against_many");
    let dir = scratch("discover_one_against_many");
    let trace = dir.join("run.ordo");
    // A recording in the usual order: every worker checks before main's store.
    let mut found = None;
    for _ in 0..5 {
        let out = record_discovering(&trace, &program);
        if !out.status.success() {
            continue;
        }
        let doc = analyze_json(&trace);
        found = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "first_of_many")
            .cloned();
        if found.is_some() {
            break;
        }
    }
    let finding = found.expect("no first_of_many candidate in 5 recordings");
    let text = finding["schedule"].as_str().unwrap();
    let workers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("0:at(main+") && l.contains(":at(worker)#1"))
        .collect();
    assert_eq!(workers.len(), 8, "{text}");
    let schedule = dir.join("many.sched");
    std::fs::write(&schedule, text).unwrap();
    assert_eq!(
        common::reproductions(&schedule, &program, &[], 5),
        5,
        "{text}"
    );

    let json = hunt(&program, &dir.join("hunt"));
    assert_eq!(json["reproduced"], true, "{json}");
    let confirmed = json["confirm"]["reproduced"].as_u64().unwrap();
    assert!(confirmed >= 19, "pinned only {confirmed}/20: {json}");
}

#[test]
fn a_thread_with_more_points_than_debug_registers_is_gated_by_software_breakpoints() {
    if !have_root("a_thread_with_more_points_than_debug_registers_is_gated_by_software_breakpoints")
    {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    let program = build_program("many_points");
    let dir = scratch("discover_many_points");
    // Each of the reader's six loads before the writer's store to that variable,
    // the stores one by one after them: six points in each thread (x86 has 4 debug
    // registers), and the reader sees none of the stores.
    let mut text = String::new();
    for k in 0..6 {
        let (read, write) = (27 + k, 15 + k);
        text.push_str(&format!(
            "2:at(many_points.c:{read})#1 -> 1:at(many_points.c:{write})#1\n"
        ));
        if k < 5 {
            text.push_str(&format!(
                "1:at(many_points.c:{write})#1 -> 2:at(many_points.c:{})#1\n",
                read + 1
            ));
        }
    }
    let schedule = dir.join("alternate.sched");
    std::fs::write(&schedule, &text).unwrap();
    for args in [
        &["--expect-exit", "6"][..],
        &["--expect-exit", "6", "--record"],
    ] {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if args.last().is_some_and(|a| a == "--record") {
            args.push(dir.join("run.ordo").display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, outcome) = common::replay_json(&args, &schedule, &program);
        assert_eq!(outcome["verdict"], "reproduced", "{outcome}\n{text}");
        assert_eq!(outcome["exit_code"], 0, "the reader saw a store: {outcome}");
        assert_eq!(outcome["schedule_held"], true, "{outcome}");
    }
}

/// `ordo record -v --discover` of `program` with the plan cache in `cache`
/// (`""`: off): its stderr and the names its accesses were given in `dump`.
fn record_with_cache(
    program: &Path,
    trace: &Path,
    cache: &std::ffi::OsStr,
) -> (String, std::collections::BTreeSet<String>) {
    let out = Command::new(ordo())
        .args(["record", "-v", "--discover", "--force", "-o"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .env("ORDO_CACHE_DIR", cache)
        .output()
        .expect("run ordo record");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(trace.exists(), "no trace: {stderr}");
    let dump = Command::new(ordo())
        .arg("dump")
        .arg(trace)
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| ["read", "write", "rmw"].contains(w))?;
            let name = words.get(at + 1)?;
            name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                .then(|| name.to_string())
        })
        .collect();
    (stderr, names)
}

/// The plans, variable types and part names kept on disk between recordings of
/// one binary (recorder/src/plan_cache.rs) are exactly what planning afresh gives:
/// the same Rust lock sites and discovery sites (`-v`) and the same names of the
/// accesses (`dump`), with the cache off, empty, and full; a warm recording
/// rewrites no plan; a damaged entry is planned again, not trusted.
#[test]
fn plans_kept_between_recordings_are_those_planned_afresh() {
    if !have_root("plans_kept_between_recordings_are_those_planned_afresh") {
        return;
    }
    let dir = scratch("discover_plan_cache");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let planned = |stderr: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|l| {
                l.starts_with("ordo: --discover:") || l.starts_with("ordo: Rust std::sync:")
            })
            .map(str::to_string)
            .collect()
    };
    for (program, expected) in [
        (common::build_program("field_race"), "conn.buf"),
        (
            common::build_rust_program("rust_lost_update"),
            "rust_lost_update::BALANCE",
        ),
    ] {
        let trace = dir.join("cached.ordo");
        let (afresh, afresh_names) = record_with_cache(&program, &trace, "".as_ref());
        assert!(
            afresh_names.iter().any(|n| n.starts_with(expected)),
            "{expected} not among {afresh_names:?}"
        );
        let cold = record_with_cache(&program, &trace, cache.as_os_str());
        let entries = |kind: &str| -> Vec<(PathBuf, std::time::SystemTime)> {
            std::fs::read_dir(&cache)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(kind))
                .map(|p| (p.clone(), p.metadata().unwrap().modified().unwrap()))
                .collect()
        };
        let kept = entries("discovery-");
        assert!(
            !kept.is_empty(),
            "no discovery plan kept in {}",
            cache.display()
        );
        assert!(!entries("part-names-").is_empty());
        let warm = record_with_cache(&program, &trace, cache.as_os_str());
        assert_eq!(
            entries("discovery-"),
            kept,
            "a warm recording planned again"
        );
        for (run, (stderr, names)) in [("cold", &cold), ("warm", &warm)] {
            assert_eq!(planned(stderr), planned(&afresh), "{run}: {stderr}");
            assert!(!planned(stderr).is_empty(), "{stderr}");
            assert_eq!(names, &afresh_names, "{run} cache: names differ");
        }
        // A damaged plan is not used: planned again, and kept whole again.
        for (path, _) in &kept {
            let mut bytes = std::fs::read(path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
            std::fs::write(path, &bytes).unwrap();
        }
        let (repaired, names) = record_with_cache(&program, &trace, cache.as_os_str());
        assert_eq!(planned(&repaired), planned(&afresh), "{repaired}");
        assert_eq!(names, afresh_names);
        assert_ne!(
            entries("discovery-"),
            kept,
            "the damaged plan was not replanned"
        );
    }
}
