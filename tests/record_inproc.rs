//! The in-process recording path against the eBPF one, on real programs: the same
//! findings from `ordo analyze`, and what only the in-process path has to get right —
//! a SIGKILLed program's events survive (the recorder owns the rings), a forked child
//! is reported as not followed, and an exec ends the in-process part cleanly.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// The findings of `ordo analyze --json`, without anything that depends on timing:
/// kind, objects by name, threads, schedule.
fn findings(trace: &Path) -> Vec<(String, Vec<String>, Value, String)> {
    let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "ordo analyze: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut v: Vec<_> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["objects"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o["name"].as_str().unwrap_or("").to_string())
                    .collect(),
                f["threads"].clone(),
                f["schedule"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort_by(|a, b| (&a.0, &a.3).cmp(&(&b.0, &b.3)));
    v
}

fn record_ok(probes: &str, trace: &Path, program: &Path) {
    let out = record_probes(probes, trace, program, &[]);
    assert!(
        out.status.success(),
        "ordo record --probes {probes}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn analysis_findings_are_the_same_on_both_paths() {
    if !have_root("analysis_findings_are_the_same_on_both_paths") {
        return;
    }
    let dir = scratch("inproc-findings");
    // Programs whose runs are deterministic (sleeps keep the threads apart).
    for name in [
        "analyze_deadlock",
        "analyze_lost_wakeup",
        "analyze_atomicity",
    ] {
        let program = build_program(name);
        let (ebpf, inproc) = (
            dir.join(format!("{name}-ebpf.ordo")),
            dir.join(format!("{name}-inproc.ordo")),
        );
        let sparse = dir.join(format!("{name}-inproc-sparse.ordo"));
        record_ok("ebpf", &ebpf, &program);
        record_ok("inproc", &inproc, &program);
        record_ok("inproc-sparse", &sparse, &program);
        let (a, b) = (findings(&ebpf), findings(&inproc));
        assert!(!a.is_empty(), "{name}: no findings");
        assert_eq!(a, b, "{name}: the two paths' findings differ");
        assert_eq!(
            a,
            findings(&sparse),
            "{name}: --sparse-times changed the findings"
        );
        // The trace says how its times were taken.
        for (trace, sparse_times) in [(&inproc, false), (&sparse, true)] {
            let out = run_ordo(&["dump", trace.to_str().unwrap()]);
            let text = String::from_utf8_lossy(&out.stdout);
            let first = text.lines().next().unwrap_or("");
            assert_eq!(first.contains("--sparse-times"), sparse_times, "{first}");
        }
    }
    // Watched accesses are ordered by exact time stamps: refused in one line.
    let program = build_program("record_watch");
    let trace = dir.join("sparse-watch.ordo");
    let out = run_ordo(&[
        "record",
        "--sparse-times",
        "--watch=hits",
        "-o",
        trace.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
        "plain",
        "1",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--sparse-times cannot be used with --watch"),
        "{stderr}"
    );
    // A correct program: no finding predicted to be a bug on either path (its
    // orders worth trying depend on how the run interleaved, so only the predicted
    // bugs are compared).
    let program = build_program("analyze_correct");
    for probes in ["ebpf", "inproc"] {
        let trace = dir.join(format!("correct-{probes}.ordo"));
        record_ok(probes, &trace, &program);
        let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let bugs: Vec<_> = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["class"] != "order_to_try")
            .collect();
        assert!(bugs.is_empty(), "{probes}: {bugs:?}");
    }
}

/// Records `program` in process with the rings' encoding `units` (`short`,
/// `unfolded` or `wide`, `ORDO_RING_UNITS`), and returns how many events and
/// ring units the recording read (from `ORDO_PHASES`): the units the drain
/// read from the rings, and those its copy kept (fewer where it folded pairs).
fn record_units(units: &str, extra: &[&str], trace: &Path, program: &Path) -> (u64, u64, u64) {
    let (_, stderr) = record_phases(("ORDO_RING_UNITS", units), extra, trace, program, &[]);
    // "ring units: N events in M units of 16 bytes, R read from the rings"
    let words = phase_words(&stderr, "ring units: ");
    (
        words[0].parse().unwrap(),
        words[8].parse().unwrap(),
        words[3].parse().unwrap(),
    )
}

/// Records `program args` in process with the environment variable `var` set and
/// `ORDO_PHASES` on, `extra` options to `ordo record`; returns the program's
/// stdout and ordo's stderr.
fn record_phases(
    var: (&str, &str),
    extra: &[&str],
    trace: &Path,
    program: &Path,
    args: &[&str],
) -> (String, String) {
    let out = Command::new(ordo())
        .env(var.0, var.1)
        .env("ORDO_PHASES", "1")
        .args(["record", "--probes", "inproc"])
        .args(extra)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}={}: {stderr}", var.0, var.1);
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The words after `prefix` on the phase line that has it.
fn phase_words(stderr: &str, prefix: &str) -> Vec<String> {
    stderr
        .lines()
        .find_map(|l| l.split(prefix).nth(1))
        .unwrap_or_else(|| panic!("no `{prefix}` line: {stderr}"))
        .split(' ')
        .map(str::to_string)
        .collect()
}

/// A trace's events as `ordo dump --json` gives them, thread by thread (how
/// threads interleave may differ between two runs; each thread's events and
/// their sequence numbers may not), without what differs from run to run of the
/// same program: times, kernel tids, and addresses (ASLR), which become the
/// order in which they first appear.
fn comparable_events(trace: &Path) -> Vec<String> {
    let mut addresses = std::collections::HashMap::new();
    let mut events = dump_json(trace);
    events.sort_by_key(|e| {
        e["thread"]
            .as_str()
            .unwrap_or("")
            .parse::<u32>()
            .unwrap_or(0)
    });
    events
        .into_iter()
        .map(|mut e| {
            let object = e.as_object_mut().unwrap();
            for key in ["ts_ns", "tid", "child_tid"] {
                object.remove(key);
            }
            for value in object.values_mut() {
                if let Some(text) = value.as_str().filter(|t| t.starts_with("0x")) {
                    let n = addresses.len();
                    let n = *addresses.entry(text.to_string()).or_insert(n);
                    *value = Value::String(format!("object {n}"));
                }
            }
            serde_json::to_string(&e).unwrap()
        })
        .collect()
}

/// Short ring units (an event that repeats a call site its ring knows takes 16
/// bytes, not 32) and the drain's folding of a lock and its release into one
/// change what the agent stores and the drain copies, not what is recorded: the
/// same program recorded all three ways gives the same events in the same order
/// with the same sequence numbers, objects, sites and results, the same findings
/// and the same schedules.
#[test]
fn short_ring_units_record_what_wide_ones_do() {
    if !have_root("short_ring_units_record_what_wide_ones_do") {
        return;
    }
    let dir = scratch("inproc-units");
    let program = build_program("record_units");
    for extra in [&[][..], &["--sparse-times"][..]] {
        let tag = if extra.is_empty() { "exact" } else { "sparse" };
        let (short, unfolded, wide) = (
            dir.join(format!("units-{tag}-short.ordo")),
            dir.join(format!("units-{tag}-unfolded.ordo")),
            dir.join(format!("units-{tag}-wide.ordo")),
        );
        let (short_events, short_read, short_units) =
            record_units("short", extra, &short, &program);
        let (unfolded_events, unfolded_units, _) =
            record_units("unfolded", extra, &unfolded, &program);
        let (wide_events, wide_units, _) = record_units("wide", extra, &wide, &program);
        assert_eq!(short_events, wide_events, "{tag}");
        assert_eq!(unfolded_events, wide_events, "{tag}");
        // 5 threads × ~12 000 pair events; each of the 300 sites' first use per
        // ring and the cache's collisions take two units, the results and
        // condvar waits more.
        assert!(short_events > 60_000, "{tag}: {short_events} events");
        assert!(wide_units >= 2 * wide_events, "{tag}: {wide_units}");
        assert!(
            unfolded_units * 10 < wide_units * 7,
            "{tag}: short units did not shrink the rings ({unfolded_units} against {wide_units})"
        );
        // Most of the program's events are a lock and its unlock.
        assert!(
            short_units * 10 < unfolded_units * 7,
            "{tag}: folding did not shrink the copy ({short_units} against {unfolded_units})"
        );
        // The agent writes them apart; the drain's copy folds them.
        assert!(
            short_read * 10 > unfolded_units * 9,
            "{tag}: fewer units in the rings ({short_read} read against {unfolded_units})"
        );
        let wide_seen = comparable_events(&wide);
        for (name, trace) in [("short", &short), ("unfolded", &unfolded)] {
            let seen = comparable_events(trace);
            assert_eq!(seen.len(), wide_seen.len(), "{tag} {name}");
            for (i, (x, y)) in seen.iter().zip(&wide_seen).enumerate() {
                assert_eq!(x, y, "{tag} {name}: event {i} differs");
            }
            assert_eq!(findings(trace), findings(&wide), "{tag} {name}");
        }
    }
    for name in [
        "analyze_deadlock",
        "analyze_lost_wakeup",
        "analyze_atomicity",
    ] {
        let program = build_program(name);
        let (short, wide) = (
            dir.join(format!("{name}-short.ordo")),
            dir.join(format!("{name}-wide.ordo")),
        );
        record_units("short", &[], &short, &program);
        record_units("wide", &[], &wide, &program);
        let found = findings(&short);
        assert!(!found.is_empty(), "{name}: no findings");
        assert_eq!(
            found,
            findings(&wide),
            "{name}: findings or schedules differ"
        );
        assert_eq!(
            comparable_events(&short),
            comparable_events(&wide),
            "{name}"
        );
    }
    refused_in_one_line(
        ("ORDO_RING_UNITS", "narrow"),
        "expected `short`, `unfolded` or `wide`",
        &dir,
        &program,
    );
}

/// Recording with the environment variable `var` set to a wrong value fails
/// before anything runs, with one line naming the variable, the value and `what`
/// was expected.
fn refused_in_one_line(var: (&str, &str), what: &str, dir: &Path, program: &Path) {
    let out = Command::new(ordo())
        .env(var.0, var.1)
        .args(["record", "--probes", "inproc", "-o"])
        .arg(dir.join("refused.ordo"))
        .arg("--")
        .arg(program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("{}={}: {what}", var.0, var.1)),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!dir.join("refused.ordo").exists());
}

/// Records with `ORDO_CONVERT` set to `mode`, returning the program's stdout, the
/// phase line's "deferred N times … M passes held at most" and the passes the
/// drain spilled ("spill: N passes").
fn record_converting(
    mode: &str,
    trace: &Path,
    program: &Path,
    args: &[&str],
) -> (String, u64, u64, u64) {
    let (stdout, stderr) = record_phases(("ORDO_CONVERT", mode), &[], trace, program, args);
    let how = match mode {
        "auto" => "at the program's end, every pass spilled",
        "spare" => "on a spare CPU",
        "alongside" => "alongside, at idle priority",
        "live" => "live, at normal priority",
        "end" => "at the program's end",
        other => panic!("no conversion mode {other}"),
    };
    assert!(
        stderr.contains(&format!("conversion: {how}\n")),
        "{mode}: {stderr}"
    );
    // "conversion: deferred N times while the program ran, M passes held at most"
    let words = phase_words(&stderr, "conversion: deferred ");
    let spilled = phase_words(&stderr, "spill: ")[0].parse().unwrap();
    (
        stdout,
        words[0].parse().unwrap(),
        words[6].parse().unwrap(),
        spilled,
    )
}

/// By default (`auto`) the drain spills every pass and the converter waits for
/// the program's end; with `spare`, while every CPU is busy, it leaves the
/// passes in the backlog until the program ends, and `end` always does; with
/// `alongside` or `live` it never defers. Either way the trace holds every
/// event, and the same ones.
#[test]
fn conversion_deferred_while_no_cpu_is_spare_records_the_same_trace() {
    if !have_root("conversion_deferred_while_no_cpu_is_spare_records_the_same_trace") {
        return;
    }
    let dir = scratch("inproc-deferred");
    // One thread more than there are CPUs, computing between lock/unlock pairs
    // for 1.5 s: no CPU is spare after the first window of 200 ms.
    let busy = build_program("record_sync");
    for mode in ["auto", "spare", "alongside", "live", "end"] {
        let trace = dir.join(format!("busy-{mode}.ordo"));
        let (stdout, deferrals, most_held, spilled) =
            record_converting(mode, &trace, &busy, &["busy", "1500"]);
        if mode == "alongside" || mode == "live" {
            assert_eq!((deferrals, most_held), (0, 0), "{mode}");
        } else {
            assert!(
                deferrals > 0 && most_held >= 10,
                "{mode}: deferred {deferrals} times, {most_held} passes held"
            );
        }
        // The default's passes wait in the spill file (the scratch directory
        // takes one; a pass with no ring unit, only kernel events, is held
        // without being spilled).
        if mode == "auto" {
            assert!(
                spilled >= 10,
                "{mode}: {spilled} passes spilled, {most_held} held"
            );
        }
        let pairs: u64 = printed(stdout.as_bytes(), "pairs").parse().unwrap();
        let stats = dump_stats(&trace);
        assert_eq!(stats["lost"], 0, "{mode}");
        assert_eq!(stats["by_kind"]["mutex_lock"], pairs, "{mode}");
        assert_eq!(stats["by_kind"]["mutex_unlock"], pairs, "{mode}");
    }
    // The same program recorded every way gives the same events, thread by
    // thread, and the same findings with the same schedules.
    let program = build_program("record_units");
    let traces: Vec<_> = ["auto", "spare", "alongside", "live", "end"]
        .into_iter()
        .map(|mode| {
            let trace = dir.join(format!("units-{mode}.ordo"));
            record_converting(mode, &trace, &program, &[]);
            trace
        })
        .collect();
    for other in &traces[1..] {
        assert_eq!(
            comparable_events(&traces[0]),
            comparable_events(other),
            "{other:?}"
        );
        assert_eq!(findings(&traces[0]), findings(other), "{other:?}");
    }
    refused_in_one_line(
        ("ORDO_CONVERT", "later"),
        "expected `auto`, `spare`, `alongside`, `live` or `end`",
        &dir,
        &program,
    );
}

/// Records `program` with `ORDO_SPILL` set to `mode`; the passes the drain
/// spilled to its file (the phase line's "spill: N passes, M bytes").
fn record_spilling(mode: &str, trace: &Path, program: &Path, args: &[&str]) -> u64 {
    let (_, stderr) = record_phases(("ORDO_SPILL", mode), &[], trace, program, args);
    phase_words(&stderr, "spill: ")[0].parse().unwrap()
}

/// Passes the drain spills to a file (`ORDO_SPILL`; by default while the
/// converter is behind) come back as they went: programs recorded with every
/// pass spilled and with none give the same events thread by thread, and the
/// same findings with the same schedules.
#[test]
fn spilled_passes_record_the_same_trace() {
    if !have_root("spilled_passes_record_the_same_trace") {
        return;
    }
    let dir = scratch("inproc-spill");
    for name in ["record_units", "analyze_lost_wakeup", "analyze_deadlock"] {
        let program = build_program(name);
        let (always, never) = (
            dir.join(format!("{name}-always.ordo")),
            dir.join(format!("{name}-never.ordo")),
        );
        assert!(
            record_spilling("always", &always, &program, &[]) > 0,
            "{name}"
        );
        assert_eq!(record_spilling("never", &never, &program, &[]), 0, "{name}");
        let (a, b) = (comparable_events(&always), comparable_events(&never));
        assert!(a.len() > 10, "{name}: {} events", a.len());
        assert_eq!(a, b, "{name}");
        let found = findings(&always);
        if name != "record_units" {
            assert!(!found.is_empty(), "{name}: no findings");
        }
        assert_eq!(
            found,
            findings(&never),
            "{name}: findings or schedules differ"
        );
    }
    refused_in_one_line(
        ("ORDO_SPILL", "sometimes"),
        "expected `auto`, `always` or `never`",
        &dir,
        &build_program("record_units"),
    );
}

/// With `--sparse-times` an unlock takes its thread's previous stamp plus a tick
/// without reading the clock; the converter raises it to when the drain last found
/// it not yet written, so a lock held through a second of computation shows as
/// held for nearly that long (the drain passes every 5–20 ms; the bound leaves
/// room for a drain held up by a loaded machine), not for a tick.
#[test]
fn sparse_times_are_early_by_at_most_a_drain_interval() {
    if !have_root("sparse_times_are_early_by_at_most_a_drain_interval") {
        return;
    }
    let dir = scratch("inproc-sparse-hold");
    let program = build_program("record_sync");
    // Exact: 1000 ms, less the few nanoseconds the TSC's calibration may be off.
    for (probes, at_least_ms) in [("inproc", 999), ("inproc-sparse", 500)] {
        let trace = dir.join(format!("{probes}.ordo"));
        let out = record_probes(probes, &trace, &program, &["hold", "1000"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lock = printed(&out.stdout, "lock");
        let events = dump_json(&trace);
        let at = |kind: &str| {
            events
                .iter()
                .find(|e| e["kind"] == kind && e["addr"] == lock.as_str())
                .unwrap_or_else(|| panic!("{probes}: no {kind}"))["ts_ns"]
                .as_u64()
                .unwrap()
        };
        let held_ms = (at("mutex_unlock") - at("mutex_lock")) / 1_000_000;
        assert!(
            (at_least_ms..2_000).contains(&held_ms),
            "{probes}: the lock shows as held {held_ms} ms"
        );
    }
}

/// Locks in a library `dlopen`ed after the recording started are symbolized even
/// though conversion waits for the program's end (the default): the drain notes
/// the call sites ring units carry in full as it copies them, finds the library's
/// in no module it read at the start, and reads the modules again while the
/// library is still loaded.
#[test]
fn locks_in_a_library_loaded_later_are_symbolized() {
    if !have_root("locks_in_a_library_loaded_later_are_symbolized") {
        return;
    }
    let dir = scratch("inproc-dlopen");
    let library = build_program_variant("record_plugin", "so", "gcc", &["-shared", "-fPIC"]);
    let program = build_program("record_dlopen");
    let trace = dir.join("t.ordo");
    let (_, deferrals, _, _) =
        record_converting("auto", &trace, &program, &[library.to_str().unwrap()]);
    assert!(
        deferrals > 0,
        "conversion was not deferred: the test shows nothing"
    );
    let events = dump_json(&trace);
    let plugin: Vec<&str> = (events.iter())
        .filter(|e| e["object"] == "plugin_lock" && e["kind"] == "mutex_lock")
        .map(|e| e["site"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        plugin.len(),
        1000,
        "the library's locks: {:?}",
        &plugin[..plugin.len().min(3)]
    );
    let named = plugin
        .iter()
        .filter(|s| s.starts_with("plugin_work (record_plugin.c"))
        .count();
    assert_eq!(named, 1000, "sites not symbolized: {:?}", &plugin[..3]);
}

#[test]
fn a_sigkilled_program_leaves_its_events_readable() {
    if !have_root("a_sigkilled_program_leaves_its_events_readable") {
        return;
    }
    let dir = scratch("inproc-kill");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["kill", "5000"]);
    // The program died of SIGKILL; ordo passes that on as 128 + 9.
    assert_eq!(
        out.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lock = printed(&out.stdout, "lock");
    let events = dump_json(&trace);
    // Every lock the program made before it was killed: 5000 in its thread, 5000 in main.
    assert_eq!(
        count_by_thread(&events, "mutex_lock", &lock),
        [("0".to_string(), 5000), ("1".to_string(), 5000)]
            .into_iter()
            .collect()
    );
    assert_eq!(
        count_by_thread(&events, "mutex_unlock", &lock),
        [("0".to_string(), 5000), ("1".to_string(), 5000)]
            .into_iter()
            .collect()
    );
}

/// `n` events for each of `threads`, as [`count_by_thread`] counts them.
fn each(threads: &[&str], n: usize) -> std::collections::BTreeMap<String, usize> {
    threads.iter().map(|t| (t.to_string(), n)).collect()
}

/// The counts of the held-lock tests (`record_lifecycle`): `n` locks and `n`
/// unlocks of `lock` by each of `threads`, and `n + 1` locks of `kept` but `n`
/// unlocks, all by `holder` (the last lock is still held).
fn assert_held_lock_counts(
    events: &[serde_json::Value],
    (lock, threads): (&str, &[&str]),
    (kept, holder): (&str, &str),
    n: usize,
) {
    assert_eq!(
        count_by_thread(events, "mutex_lock", lock),
        each(threads, n)
    );
    assert_eq!(
        count_by_thread(events, "mutex_unlock", lock),
        each(threads, n)
    );
    assert_eq!(
        count_by_thread(events, "mutex_lock", kept),
        each(&[holder], n + 1)
    );
    assert_eq!(
        count_by_thread(events, "mutex_unlock", kept),
        each(&[holder], n)
    );
}

/// A lock held when the program is SIGKILLed is in the trace, taken at a call
/// site the ring knows (a short unit, the kind a lock and its release fold
/// from): whatever folds pairs, in the drain or (tried, docs/ARCHITECTURE.md
/// §2b) in the agent, must not lose a lock whose release never comes.
#[test]
fn a_lock_held_when_the_program_is_killed_is_recorded() {
    if !have_root("a_lock_held_when_the_program_is_killed_is_recorded") {
        return;
    }
    let dir = scratch("inproc-kill-holding");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["kill-holding", "3000"]);
    assert_eq!(
        out.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (lock, kept) = (printed(&out.stdout, "lock"), printed(&out.stdout, "kept"));
    let events = dump_json(&trace);
    assert_held_lock_counts(&events, (&lock, &["0", "1"]), (&kept, "0"), 3000);
}

/// A thread that exits holding a lock (taken at a call site its ring knows)
/// has that lock in the trace, before its exit, and a thread started later,
/// which may take over the ring, records its own events only: an agent that
/// held the lock back for its release to fold into gave it to that thread
/// (docs/ARCHITECTURE.md §2b, "Folding in the agent").
#[test]
fn a_lock_held_by_a_thread_that_exits_is_recorded_before_its_exit() {
    if !have_root("a_lock_held_by_a_thread_that_exits_is_recorded_before_its_exit") {
        return;
    }
    let dir = scratch("inproc-exit-holding");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["exit-holding", "3000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (lock, kept) = (printed(&out.stdout, "lock"), printed(&out.stdout, "kept"));
    let events = dump_json(&trace);
    assert_held_lock_counts(&events, (&lock, &["0", "1", "2"]), (&kept, "1"), 3000);
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e["thread"] == "1")
        .map(|e| e["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["mutex_lock", "thread_exit"],
        "thread 1's last events: {:?}",
        &kinds[kinds.len().saturating_sub(4)..]
    );
}

/// The wrappers leave `errno` as the program set it: recording makes system
/// calls on its rare paths only (a thread's first event claims a ring, a full
/// ring waits for the drain), and those give errno back; the common path makes
/// none and no longer saves it. 4 threads × 100 000 rounds of lock, unlock,
/// trylock, unlock, each checking errno, fill their rings many times over.
#[test]
fn the_wrappers_leave_errno_as_the_program_set_it() {
    if !have_root("the_wrappers_leave_errno_as_the_program_set_it") {
        return;
    }
    let dir = scratch("inproc-errno");
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["errno", "4", "100000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno kept");
    let stats = dump_stats(&trace);
    assert_eq!(stats["lost"], 0, "{stats}");
    assert!(
        stats["by_kind"]["mutex_lock"].as_u64().unwrap() >= 400_000,
        "{stats}"
    );
}

#[test]
fn a_forked_child_is_reported_as_not_followed() {
    if !have_root("a_forked_child_is_reported_as_not_followed") {
        return;
    }
    let dir = scratch("inproc-fork");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["fork"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 forked child process not followed"),
        "{stderr}"
    );
    let lock = printed(&out.stdout, "lock");
    let events = dump_json(&trace);
    // Only the parent's locks: the child's ten are not in the trace.
    assert_eq!(
        count_by_thread(&events, "mutex_lock", &lock),
        [("0".to_string(), 5)].into_iter().collect()
    );
}

#[test]
fn exec_ends_the_in_process_part_cleanly() {
    if !have_root("exec_ends_the_in_process_part_cleanly") {
        return;
    }
    let dir = scratch("inproc-exec");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &["exec"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The new image has neither the descriptor's variable nor our LD_PRELOAD, and
    // the agent said nothing.
    assert_eq!(printed(&out.stdout, "after-exec"), "fd=- preload=-");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ordo agent"), "{stderr}");
    // The summary says so, in one line.
    assert!(
        stderr.contains("1 exec by the program: after it only thread events were recorded"),
        "{stderr}"
    );
    // The three locks before the exec are recorded; the trace is complete.
    let lock = printed(&out.stdout, "lock");
    let events = dump_json(&trace);
    assert_eq!(
        count_by_thread(&events, "mutex_lock", &lock),
        [("0".to_string(), 3)].into_iter().collect()
    );
}

/// The kernel path reports an exec too (its probes stay on libc in the new image).
#[test]
fn an_exec_is_reported_on_the_kernel_path() {
    if !have_root("an_exec_is_reported_on_the_kernel_path") {
        return;
    }
    let dir = scratch("ebpf-exec");
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = record_probes("ebpf", &trace, &program, &["exec"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 exec by the program: the new image was recorded as the same process"),
        "{stderr}"
    );
}

#[test]
fn the_users_ld_preload_is_kept_after_the_agent() {
    if !have_root("the_users_ld_preload_is_kept_after_the_agent") {
        return;
    }
    let dir = scratch("inproc-preload");
    // A preloaded library of the user's that says it was loaded.
    let src = dir.join("hello.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n__attribute__((constructor)) static void hello(void) { fprintf(stderr, \"user preload loaded\\n\"); }\n",
    )
    .unwrap();
    let lib: PathBuf = dir.join("libhello.so");
    assert!(Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let program = build_program("record_lifecycle");
    let trace = dir.join("t.ordo");
    let out = Command::new(ordo())
        .args(["record", "--probes", "inproc", "-o"])
        .arg(&trace)
        .arg("--env")
        .arg(format!("LD_PRELOAD={}", lib.display()))
        .arg("--")
        .arg(&program)
        .arg("exec")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Loaded in the program and again in the exec'd image (its LD_PRELOAD restored).
    assert_eq!(stderr.matches("user preload loaded").count(), 2, "{stderr}");
    assert_eq!(
        printed(&out.stdout, "after-exec"),
        format!("fd=- preload={}", lib.display())
    );
    let lock = printed(&out.stdout, "lock");
    assert_eq!(
        count_by_thread(&dump_json(&trace), "mutex_lock", &lock),
        [("0".to_string(), 3)].into_iter().collect()
    );
}

#[test]
fn a_full_ring_waits_for_the_drain_and_loses_nothing() {
    if !have_root("a_full_ring_waits_for_the_drain_and_loses_nothing") {
        return;
    }
    let dir = scratch("inproc-full");
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    // 2 threads × 300 000 lock/unlock: 600 000 events a thread, more than a ring holds
    // (ordo_probe_common::inproc::RING_UNITS, an event taking at least one), so
    // threads wait for the drain.
    let out = record_probes("inproc", &trace, &program, &["contention", "2", "300000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    const { assert!(600_000 > ordo_probe_common::inproc::RING_UNITS) };
    let s = dump_stats(&trace);
    assert_eq!(s["lost"], 0, "{s}");
    assert_eq!(s["by_kind"]["mutex_lock"], 600_000, "{s}");
    assert_eq!(s["by_kind"]["mutex_unlock"], 600_000, "{s}");
}

/// Cargo's own build of the agent (`target/PROFILE/libordo_preload.so`, built as a
/// workspace member for clippy and the unit tests), built here if it is missing.
fn cargo_built_agent() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    build
        .args(["build", "-q", "-p", "ordo-preload", "--target-dir"])
        .arg(profile_dir.parent().unwrap());
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(
        build.status().unwrap().success(),
        "cargo build -p ordo-preload"
    );
    profile_dir.join("libordo_preload.so")
}

/// Code built without frame pointers calls pthread with anything in `rbp` (memcached's
/// logger thread: 0). The agent `ordo` embeds has its own frame and reads the call
/// site through it; cargo's build of the same source has no frame pointers, and
/// preloaded by hand it once faulted in `pthread_cond_wait` reading through the
/// caller's `rbp`. Both run the program now.
#[test]
fn both_builds_of_the_agent_run_code_without_frame_pointers() {
    let program = build_program("agent_no_frame");
    let agent = cargo_built_agent();
    let out = Command::new(&program)
        .env("LD_PRELOAD", &agent)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("calls 3"),
        "{} preloaded into {}: {:?}, {}",
        agent.display(),
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    if !have_root("both_builds_of_the_agent_run_code_without_frame_pointers (recorded)") {
        return;
    }
    let trace = scratch("inproc-no-frame").join("t.ordo");
    record_ok("inproc", &trace, &program);
    let locks = &dump_stats(&trace)["by_kind"]["mutex_lock"];
    assert_eq!(
        locks,
        3,
        "mutex_lock events recorded in {}",
        trace.display()
    );
}
