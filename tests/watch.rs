//! End-to-end tests of variable watches (`ordo record --watch/--watch-hw`) on the
//! real kernel: exact counts and values of reads and writes, fields, atomics, Rust
//! statics by source name, and the race detector on watched variables.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn record_with(
    trace: &Path,
    watch: &[&str],
    program: &Path,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = Command::new(ordo());
    cmd.arg("record").arg("-o").arg(trace);
    for w in watch {
        cmd.arg(w);
    }
    cmd.arg("--").arg(program).args(args);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "ordo record failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn accesses<'a>(events: &'a [Value], kind: &str, addr: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == kind && e["addr"] == addr)
        .collect()
}

fn per_thread(events: &[&Value]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in events {
        *m.entry(e["thread"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    m
}

#[test]
fn watched_global_reads_and_writes_with_values() {
    if !have_root("watched_global_reads_and_writes_with_values") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_plain");
    let program = build_program("record_watch");
    for (mechanism, flag) in [("uprobe", "--watch=hits"), ("hardware", "--watch-hw=hits")] {
        let trace = dir.join(format!("{mechanism}.ordo"));
        let out = record_with(&trace, &[flag], &program, &["plain", "3", "500"]);
        assert_eq!(printed(&out.stdout, "hits"), "1500");
        let addr = printed(&out.stdout, "hits_addr");
        let events = dump_json(&trace);
        let writes = accesses(&events, "write", &addr);
        let each: BTreeMap<String, usize> = ["1", "2", "3"]
            .iter()
            .map(|t| (t.to_string(), 500))
            .collect();
        assert_eq!(per_thread(&writes), each, "{mechanism}: writes per thread");
        // Written values are 1..=1500, each once, in the order the lock imposed.
        let mut values: Vec<u64> = writes
            .iter()
            .map(|e| e["value"].as_u64().unwrap())
            .collect();
        assert_eq!(
            values,
            (1..=1500).collect::<Vec<_>>(),
            "{mechanism}: values in dump order"
        );
        values.sort();
        assert!(writes
            .iter()
            .all(|e| e["size"] == 8 && e["object"] == "hits"));
        if mechanism == "uprobe" {
            let reads = accesses(&events, "read", &addr);
            // Each thread reads 500 times; main reads once more to print.
            assert_eq!(per_thread(&reads)["1"], 500);
            assert_eq!(per_thread(&reads)["2"], 500);
            assert_eq!(per_thread(&reads)["3"], 500);
            assert_eq!(per_thread(&reads).get("0"), Some(&1));
            // A write's value is its thread's previous read plus one.
            let mut last_read: BTreeMap<String, u64> = BTreeMap::new();
            for e in events.iter().filter(|e| e["addr"] == addr.as_str()) {
                let t = e["thread"].as_str().unwrap().to_string();
                let v = e["value"].as_u64().unwrap();
                match e["kind"].as_str().unwrap() {
                    "read" => {
                        last_read.insert(t, v);
                    }
                    "write" => assert_eq!(Some(v), last_read.get(&t).map(|r| r + 1)),
                    _ => {}
                }
            }
            // Sites name the source line of the access.
            assert!(
                writes[0]["site"]
                    .as_str()
                    .unwrap()
                    .contains("record_watch.c"),
                "{}",
                writes[0]["site"]
            );
        }
    }
}

#[test]
fn watched_field_and_atomic_counter() {
    if !have_root("watched_field_and_atomic_counter") {
        return;
    }
    let dir = scratch("watch_field");
    let program = build_program("record_watch");
    let trace = dir.join("field.ordo");
    let out = record_with(
        &trace,
        &["--watch=cfg+4:4"],
        &program,
        &["field", "2", "300"],
    );
    let cfg = printed(&out.stdout, "cfg_addr");
    let field = format!(
        "{:#x}",
        u64::from_str_radix(cfg.trim_start_matches("0x"), 16).unwrap() + 4
    );
    let events = dump_json(&trace);
    // Only field b (offset 4) is watched: writes of a do not appear.
    let writes: Vec<&Value> = events.iter().filter(|e| e["kind"] == "write").collect();
    assert_eq!(writes.len(), 600);
    assert!(writes
        .iter()
        .all(|e| e["addr"] == field.as_str() && e["size"] == 4 && e["atomic"] == false));
    let mut per: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &writes {
        per.entry(e["thread"].as_str().unwrap().to_string())
            .or_default()
            .push(e["value"].as_u64().unwrap());
    }
    for values in per.values() {
        assert_eq!(values, &(1000..1300).collect::<Vec<_>>());
    }

    let trace = dir.join("atomic.ordo");
    let out = record_with(
        &trace,
        &["--watch=total"],
        &program,
        &["atomic", "3", "200"],
    );
    assert_eq!(printed(&out.stdout, "total"), "600");
    let total = printed(&out.stdout, "total_addr");
    let events = dump_json(&trace);
    let rmw = accesses(&events, "rmw", &total);
    let each: BTreeMap<String, usize> = ["1", "2", "3"]
        .iter()
        .map(|t| (t.to_string(), 200))
        .collect();
    assert_eq!(per_thread(&rmw), each);
    // `lock add` is atomic: marked so, and atomic increments never race.
    assert!(rmw.iter().all(|e| e["atomic"] == true), "{:?}", rmw.first());
    let analysis = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(analysis.status.success());
    let doc: Value = serde_json::from_slice(&analysis.stdout).unwrap();
    assert_eq!(doc["stats"]["findings"]["race"], 0, "{doc}");
}

#[test]
fn rust_static_by_source_name() {
    if !have_root("rust_static_by_source_name") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_rust");
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("recorder/src/watch/testdata/watch_rust.rs");
    let program = dir.join("watch_rust");
    let status = Command::new("rustc")
        .args(["-O", "-g", "--edition", "2021", "-o"])
        .arg(&program)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    let trace = dir.join("t.ordo");
    let out = record_with(
        &trace,
        &["--watch=COUNTER", "--watch=stats::HITS"],
        &program,
        &["2", "50"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "counter 100 hits 100"
    );
    let events = dump_json(&trace);
    let counter: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["kind"] == "rmw" && e["object"].as_str().is_some_and(|o| o.contains("COUNTER"))
        })
        .collect();
    assert_eq!(
        per_thread(&counter),
        [("1".to_string(), 50), ("2".to_string(), 50)]
            .into_iter()
            .collect()
    );
    // `hit` increments HITS through a reference argument, which static decoding
    // cannot follow (that is what --watch-hw is for); main's final load is direct.
    let hits_reads = events
        .iter()
        .filter(|e| e["kind"] == "read" && e["object"].as_str().is_some_and(|o| o.contains("HITS")))
        .count();
    assert!(hits_reads >= 1);
}

#[test]
fn bad_watch_specs_fail_before_the_program_starts() {
    if !have_root("bad_watch_specs_fail_before_the_program_starts") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_bad");
    let program = build_program("record_watch");
    for (flags, expect) in [
        (vec!["--watch=no_such_variable"], "no_such_variable"),
        (vec!["--watch=hits+0:9"], "size"),
        (vec!["--watch=hits+4:8"], "hits"),
        (vec!["--watch=hits:"], "hits:"),
        (
            vec![
                "--watch-hw=hits",
                "--watch-hw=total",
                "--watch-hw=racy_count",
                "--watch-hw=cfg",
                "--watch-hw=cfg+4:4",
            ],
            "4",
        ),
    ] {
        let mut cmd = Command::new(ordo());
        cmd.arg("record")
            .arg("-o")
            .arg(dir.join("t.ordo"))
            .args(&flags)
            .arg("--")
            .arg(&program)
            .args(["plain", "1", "1"]);
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(
            err.to_lowercase().contains(&expect.to_lowercase()) && err.trim().lines().count() == 1,
            "{flags:?}: {err}"
        );
        // The error came before the program started: it printed nothing.
        assert!(out.stdout.is_empty(), "{flags:?}: the program ran");
    }
}

#[test]
fn racy_watched_variable_is_reported_and_the_locked_one_is_not() {
    if !have_root("racy_watched_variable_is_reported_and_the_locked_one_is_not") {
        return;
    }
    let dir = scratch("watch_race");
    let program = build_program("record_watch");
    let races = |mode: &str| -> usize {
        let trace = dir.join(format!("{mode}.ordo"));
        record_with(
            &trace,
            &["--watch=racy_count"],
            &program,
            &[mode, "2", "200"],
        );
        let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["kind"] == "race"
                    && f["objects"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|o| o["name"] == "racy_count")
            })
            .count()
    };
    assert!(
        races("racy") > 0,
        "unlocked increments must be reported as a race"
    );
    assert_eq!(
        races("locked"),
        0,
        "increments under one lock are not a race"
    );
}

/// Records `program args` into `trace` with a hardware watchpoint on `variable`
/// (the recording must succeed); returns the `counter` line the program printed.
fn record_watching_hw(
    variable: &str,
    trace: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
) -> String {
    record_watching_all_hw(&[variable], trace, program, args)
}

/// As [`record_watching_hw`], with a hardware watchpoint on each of `variables`.
fn record_watching_all_hw(
    variables: &[&str],
    trace: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
) -> String {
    let out = Command::new(common::ordo())
        .args(["record", "--force"])
        .args(variables.iter().flat_map(|v| ["--watch-hw", v]))
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::printed(&out.stdout, "counter")
}

/// A recorded replay of `program` with an empty schedule (the breakpoint path of
/// the Rust sites), which must pass; returns its trace.
fn replayed_with_no_ordering(dir: &Path, program: &Path) -> std::path::PathBuf {
    let schedule = dir.join("none.sched");
    std::fs::write(&schedule, "# no ordering\n").unwrap();
    let trace = dir.join("replayed.ordo");
    let (_, outcome) =
        common::replay_json(&["--record", trace.to_str().unwrap()], &schedule, program);
    assert_eq!(outcome["verdict"], "passed", "{outcome}");
    trace
}

/// A recorded replay of `program` enforcing `ordering`, which must pass with the
/// schedule held; returns its events.
fn replayed_holding(dir: &Path, program: &Path, ordering: &str) -> Vec<Value> {
    replayed_running_holding(dir, program, &[], ordering)
}

/// As [`replayed_holding`], the program run with `args`.
fn replayed_running_holding(
    dir: &Path,
    program: &Path,
    args: &[&str],
    ordering: &str,
) -> Vec<Value> {
    let schedule = dir.join("late.sched");
    std::fs::write(&schedule, format!("{ordering}\n")).unwrap();
    let trace = dir.join("replayed.ordo");
    let (_, outcome) = common::replay_json_running(
        &["--record", trace.to_str().unwrap()],
        &schedule,
        program,
        args,
    );
    assert_eq!(outcome["verdict"], "passed", "{outcome}");
    assert_eq!(outcome["schedule_held"], true, "{outcome}");
    common::dump_json(&trace)
}

/// The count and the failed tries of a try-lock program's `counter N after F
/// failed tries`.
fn counted_after_failures(counter: &str) -> (u64, usize) {
    counter
        .split_once(" after ")
        .and_then(|(n, rest)| Some((n, rest.strip_suffix(" failed tries")?)))
        .and_then(|(n, f)| Some((n.parse().ok()?, f.parse().ok()?)))
        .unwrap_or_else(|| panic!("the program printed `counter {counter}`"))
}

/// The events of `kind` via `via` on `object` among `events`.
fn count_on(events: &[Value], object: &str, kind: &str, via: &str) -> usize {
    events
        .iter()
        .filter(|e| e["object"] == object && e["kind"] == kind && e["via"] == via)
        .count()
}

/// Where in `events` (trace order) `thread`'s `nth` event of `kind` on `object` is.
fn position_of(events: &[Value], object: &str, thread: &str, kind: &str, nth: usize) -> usize {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["object"] == object && e["thread"] == thread && e["kind"] == kind)
        .nth(nth - 1)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("thread {thread}'s {kind} #{nth} on {object}"))
}

/// The race findings `ordo analyze` gives on `trace`.
fn races(trace: &Path) -> usize {
    common::findings(trace)
        .iter()
        .filter(|(kind, _)| kind == "race")
        .count()
}

/// Issue 26: a `static mut` counter 4 threads update only under a
/// `std::sync::Mutex` gives no race finding — the inlined lock and unlock are
/// recorded in process — and the same program with one thread updating it
/// outside the lock does.
#[test]
fn a_correctly_locked_rust_counter_gives_no_race() {
    if !common::have_root("a_correctly_locked_rust_counter_gives_no_race") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_locked_counter");
    let dir = common::scratch("watch_rust_locked_counter");
    for (args, racy) in [(&[][..], false), (&["racy"][..], true)] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let counter = record_watching_hw("rust_locked_counter::COUNTER", &trace, &program, args);
        if racy {
            // The unlocked updates can lose some (the race is real).
            let n: u64 = counter.parse().unwrap();
            assert!((1500..=2000).contains(&n), "{counter}");
        } else {
            assert_eq!(counter, "2000");
        }
        let events = common::dump_json(&trace);
        let locks = events
            .iter()
            .filter(|e| e["kind"] == "mutex_lock" && e["object"] == "rust_locked_counter::LOCK")
            .count();
        // Every acquisition: 500 per locking thread, and main's.
        assert_eq!(locks, if racy { 1501 } else { 2001 });
        let races = races(&trace);
        if racy {
            assert!(races > 0, "the unlocked updates race");
        } else {
            assert_eq!(races, 0, "a correctly locked counter");
        }
    }
}

/// Issue 26: values written inside a `Once::call_once`, a `OnceLock::get_or_init`
/// and a `LazyLock`'s initializer and read by every thread after it give no race:
/// each completion is an atomic write of the `Once`'s state word (recorded before
/// the completion guard's store in std's `Once::call`), and each thread's first
/// inlined completion check that finds it complete (or its return from
/// `Once::call`) an atomic read of it — recorded through jump patches, and
/// through breakpoints in a recorded replay. A thread that reads the values
/// before going through the `Once`s races.
#[test]
fn values_initialized_through_rust_once_oncelock_and_lazylock_give_no_race() {
    if !common::have_root("values_initialized_through_rust_once_oncelock_and_lazylock_give_no_race")
    {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_once_init");
    let dir = common::scratch("watch_rust_once_init");
    let watched = [
        "rust_once_init::ONCE_DATA",
        "rust_once_init::CELL_DATA",
        "rust_once_init::LAZY_DATA",
    ];
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        assert_eq!(
            record_watching_all_hw(&watched, &trace, &program, args),
            "6"
        );
        let events = common::dump_json(&trace);
        for once in [
            "rust_once_init::INIT",
            "rust_once_init::CELL+",
            "rust_once_init::LAZY+",
        ] {
            let on = |kind: &str| {
                events
                    .iter()
                    .filter(|e| e["atomic"] == true && e["kind"] == kind)
                    .filter(|e| e["object"].as_str().is_some_and(|o| o.starts_with(once)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(on("write").len(), 1, "{once}: one completion");
            for worker in ["1", "2", "3", "4"] {
                assert!(
                    on("read").iter().any(|e| e["thread"] == worker),
                    "{once}: thread {worker} saw it complete"
                );
            }
        }
        if racy {
            assert!(races(&trace) > 0, "values read before their Once race");
        } else {
            assert_eq!(races(&trace), 0, "values read after their Once completed");
        }
    }
    // Replays reach the same sites through breakpoints.
    let trace = replayed_with_no_ordering(&dir, &program);
    let completions = common::dump_json(&trace)
        .iter()
        .filter(|e| e["atomic"] == true && e["kind"] == "write")
        .filter(|e| {
            e["object"]
                .as_str()
                .is_some_and(|o| o.starts_with("rust_once_init::"))
        })
        .count();
    assert_eq!(completions, 3);
}

/// Issue 26: a value handed over by `Thread::unpark` and the `thread::park` it
/// ends gives no race even when the park takes the token at once (no futex wait
/// the kernel would see): the unpark's inlined `xchg` is an atomic
/// read-modify-write of the parker's state word (a release, jump-patched), the
/// park's return another (an acquire). Reading the value before parking races.
/// A recorded replay (breakpoints) sees the same two.
#[test]
fn a_value_handed_over_by_unpark_and_park_gives_no_race() {
    if !common::have_root("a_value_handed_over_by_unpark_and_park_gives_no_race") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_park_handoff");
    let dir = common::scratch("watch_rust_park_handoff");
    let parker_events = |trace: &Path| -> Vec<(String, String)> {
        common::dump_json(trace)
            .iter()
            .filter(|e| e["atomic"] == true && e["kind"] == "rmw")
            .map(|e| (e["thread"].to_string(), e["addr"].to_string()))
            .collect()
    };
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        let value = record_watching_hw("rust_park_handoff::VALUE", &trace, &program, args);
        assert_eq!(value, "7");
        let events = parker_events(&trace);
        assert_eq!(events.len(), 2, "the unpark and the park: {events:?}");
        assert_ne!(events[0].0, events[1].0, "two threads: {events:?}");
        assert_eq!(events[0].1, events[1].1, "one parker word: {events:?}");
        let races = races(&trace);
        if racy {
            assert!(races > 0, "the read before parking races");
        } else {
            assert_eq!(races, 0, "the read after the park the unpark ended");
        }
    }
    let trace = replayed_with_no_ordering(&dir, &program);
    assert_eq!(parker_events(&trace).len(), 2);
}

/// Issue 26: values handed over through std's channels give no race: each
/// `send` (out of line, one instance per flavor and message type) is an atomic
/// read-modify-write of its channel before the message is published, each
/// `recv`'s return an atomic read of it, so a send happens before the receive
/// that takes it. The program meets every flavor (unbounded, bounded,
/// rendezvous) and both registers std passes the channel in (a large message's
/// `send` and most `recv`s return their result through memory). Reading a value
/// before receiving its message races. A recorded replay (breakpoints) sees the
/// same.
#[test]
fn values_sent_through_rust_channels_give_no_race() {
    if !common::have_root("values_sent_through_rust_channels_give_no_race") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_channel_handoff");
    let dir = common::scratch("watch_rust_channel_handoff");
    let watched = [
        "rust_channel_handoff::SMALL",
        "rust_channel_handoff::BOUNDED",
        "rust_channel_handoff::BIG",
        "rust_channel_handoff::RENDEZVOUS",
    ];
    // (thread, kind, channel) of the channels' events, in trace order.
    let channel_events = |trace: &Path| -> Vec<(String, String, String)> {
        common::dump_json(trace)
            .iter()
            .filter(|e| e["atomic"] == true)
            .filter(|e| {
                e["site"].as_str().is_some_and(|s| {
                    s.contains("std::sync::mpmc::") || s.contains("rust_channel_handoff::main (")
                })
            })
            .map(|e| {
                (
                    e["thread"].to_string(),
                    e["kind"].to_string(),
                    e["addr"].to_string(),
                )
            })
            .collect()
    };
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        assert_eq!(
            record_watching_all_hw(&watched, &trace, &program, args),
            "89"
        );
        let events = channel_events(&trace);
        let sends: Vec<_> = events.iter().filter(|e| e.1 == "\"rmw\"").collect();
        let receives: Vec<_> = events.iter().filter(|e| e.1 == "\"read\"").collect();
        assert_eq!((sends.len(), receives.len()), (4, 4), "{events:?}");
        let mut channels: Vec<&String> = sends.iter().map(|e| &e.2).collect();
        channels.sort();
        channels.dedup();
        assert_eq!(channels.len(), 4, "four channels: {events:?}");
        for r in &receives {
            assert!(
                sends.iter().any(|s| s.2 == r.2 && s.0 != r.0),
                "each receive reads a channel the other thread sent on: {events:?}"
            );
        }
        if racy {
            assert!(races(&trace) > 0, "the read before its message races");
        } else {
            assert_eq!(races(&trace), 0, "every value read after its message");
        }
    }
    let trace = replayed_with_no_ordering(&dir, &program);
    assert_eq!(channel_events(&trace).len(), 8);
}

/// Issue 26: `Mutex::try_lock`, inlined, is recorded as `pthread_mutex_trylock`
/// is — a success a `mutex_lock` via `try`, a failure a `mutex_lock_failed` —
/// so a counter updated only under a lock `try_lock` got gives no race (the
/// build before this reported one), every try counted exactly; updating it
/// without the lock races. A replay holds a try that succeeded too early for its
/// schedule (given back, held, tried again): worker 1's first success after
/// worker 2's hundredth release, against their natural order.
#[test]
fn rust_try_lock_successes_and_failures_are_recorded_and_gated() {
    if !common::have_root("rust_try_lock_successes_and_failures_are_recorded_and_gated") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_try_locked_counter");
    let dir = common::scratch("watch_rust_try_locked_counter");
    const LOCK: &str = "rust_try_locked_counter::LOCK";
    let on_lock = |events: &[Value], kind: &str, via: &str| count_on(events, LOCK, kind, via);
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        let counter =
            record_watching_hw("rust_try_locked_counter::COUNTER", &trace, &program, args);
        // "300 after N failed tries": each worker's try while `main` held the lock
        // failed, and those that found another worker in its section. The racy
        // worker's unlocked updates can lose some (the race is real).
        let (counted, failed) = counted_after_failures(&counter);
        assert!(
            counted == 300 || (racy && (250..300).contains(&counted)),
            "{counter}"
        );
        assert!(failed >= 3, "{counter}");
        let events = common::dump_json(&trace);
        // 100 successful tries a worker (the racy worker's updates take no lock).
        let tried = if racy { 200 } else { 300 };
        assert_eq!(on_lock(&events, "mutex_lock_failed", "trylock"), failed);
        assert_eq!(on_lock(&events, "mutex_lock", "trylock"), tried);
        assert_eq!(on_lock(&events, "mutex_unlock", "lock"), tried + 1);
        if racy {
            assert!(races(&trace) > 0, "the unlocked updates race");
        } else {
            assert_eq!(races(&trace), 0, "updates under try_lock's lock");
        }
    }
    let events = replayed_holding(
        &dir,
        &program,
        &format!("2:mutex_unlock({LOCK})#100 -> 1:mutex_lock({LOCK})#1"),
    );
    assert_eq!(on_lock(&events, "mutex_lock", "trylock"), 300);
    assert!(on_lock(&events, "mutex_lock_failed", "trylock") >= 3);
}

/// Issue 26: `parking_lot::Mutex` (a crate, built with cargo): its inlined lock
/// and unlock (a `lock cmpxchg` on the lock's byte, `lock_slow`/`unlock_slow` out
/// of line) are recorded as std's are — every acquisition and release, the
/// contended ones' futex calls inside parking_lot not counted as events — so a
/// counter updated only under the lock gives no race, and one thread updating it
/// outside the lock does. A replay holds worker 1's first acquisition until
/// worker 2's hundredth release.
#[test]
fn a_parking_lot_locked_counter_gives_no_race() {
    if !common::have_root("a_parking_lot_locked_counter_gives_no_race") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_cargo_program("parking_lot_counter");
    let dir = common::scratch("watch_parking_lot_counter");
    const LOCK: &str = "parking_lot_counter::LOCK";
    let on_lock = |events: &[Value], kind: &str| count_on(events, LOCK, kind, "lock");
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        let counter = record_watching_hw("parking_lot_counter::COUNTER", &trace, &program, args);
        let n: u64 = counter.parse().unwrap();
        assert!(
            n == 2000 || (racy && (1500..2000).contains(&n)),
            "{counter}"
        );
        let events = common::dump_json(&trace);
        // 500 sections a locking worker, and main's.
        let sections = if racy { 1501 } else { 2001 };
        assert_eq!(on_lock(&events, "mutex_lock"), sections);
        assert_eq!(on_lock(&events, "mutex_unlock"), sections);
        assert!(
            !events
                .iter()
                .any(|e| e["kind"] == "futex_wait" || e["kind"] == "futex_wake"),
            "parking_lot's own futex calls are not events"
        );
        if racy {
            assert!(races(&trace) > 0, "the unlocked updates race");
        } else {
            assert_eq!(races(&trace), 0, "updates under the lock");
        }
    }
    let events = replayed_holding(
        &dir,
        &program,
        &format!("2:mutex_unlock({LOCK})#100 -> 1:mutex_lock({LOCK})#1"),
    );
    let position =
        |thread: &str, kind: &str, nth: usize| position_of(&events, LOCK, thread, kind, nth);
    assert!(position("1", "mutex_lock", 1) > position("2", "mutex_unlock", 100));
}

/// Issue 26: `parking_lot::RwLock` and `Condvar` (the crate's program in its
/// `rw` and `condvar` modes). The `RwLock`'s inlined operations — a `lock
/// cmpxchg` on its word for a write lock, a write unlock and a read lock (whose
/// check may go to `lock_shared_slow` without trying it), a `lock xadd` for a
/// read unlock — and the `Condvar`'s wait (out of line; the mutex released
/// inside it, retaken by a `cmpxchg` or handed over) and its inlined notifies
/// (a load and test of its state; a notify with no waiters never leaves the
/// caller) are each recorded exactly once, none of parking_lot's own futex
/// calls an event: a counter written under the write lock and read under read
/// locks, or bumped by turns handed over through the condvar, gives no race; a
/// reader bumping it under its read lock, or a thread bumping it out of turn,
/// does. Replays hold a writer's first write lock until a reader's fiftieth
/// release, and the second thread's first lock of the turn's mutex until the
/// first thread's first `notify_one` (gated at its inlined check).
#[test]
fn parking_lot_rwlock_and_condvar_are_recorded_and_gated() {
    if !common::have_root("parking_lot_rwlock_and_condvar_are_recorded_and_gated") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_cargo_program("parking_lot_counter");
    let dir = common::scratch("watch_parking_lot_rw_condvar");
    const RW: &str = "parking_lot_counter::RW";
    const TURN: &str = "parking_lot_counter::TURN";
    const TURNED: &str = "parking_lot_counter::TURNED";
    let kinds = |events: &[Value], object: &str, kind: &str| {
        events
            .iter()
            .filter(|e| e["object"] == object && e["kind"] == kind)
            .count()
    };
    let no_futex_events = |events: &[Value]| {
        !events
            .iter()
            .any(|e| e["kind"] == "futex_wait" || e["kind"] == "futex_wake")
    };
    for racy in [false, true] {
        let mode = if racy { "rw-racy" } else { "rw" };
        let trace = dir.join(format!("{mode}.ordo"));
        let counter = record_watching_hw("parking_lot_counter::COUNTER", &trace, &program, &[mode]);
        let n: u64 = counter.trim_start_matches("counter ").parse().unwrap();
        assert!(
            n == 1000 || (racy && (1000..=1500).contains(&n)),
            "{counter}"
        );
        let events = common::dump_json(&trace);
        assert_eq!(kinds(&events, RW, "rwlock_wrlock"), 1000);
        assert_eq!(kinds(&events, RW, "rwlock_rdlock"), 1000);
        assert_eq!(kinds(&events, RW, "rwlock_unlock"), 2000);
        assert!(
            no_futex_events(&events),
            "parking_lot's own futex calls are not events"
        );
        if racy {
            assert!(races(&trace) > 0, "a write under a read lock races");
        } else {
            assert_eq!(races(&trace), 0, "writes under the write lock");
        }
    }
    for racy in [false, true] {
        let mode = if racy { "condvar-racy" } else { "condvar" };
        let trace = dir.join(format!("{mode}.ordo"));
        let counter = record_watching_hw("parking_lot_counter::COUNTER", &trace, &program, &[mode]);
        let n: u64 = counter.trim_start_matches("counter ").parse().unwrap();
        assert!(n == 400 || (racy && (400..=600).contains(&n)), "{counter}");
        let events = common::dump_json(&trace);
        assert_eq!(kinds(&events, TURNED, "cond_signal"), 200);
        assert_eq!(kinds(&events, TURNED, "cond_broadcast"), 200);
        let waits = kinds(&events, TURNED, "cond_wait");
        assert_eq!(kinds(&events, TURNED, "cond_wait_begin"), waits);
        assert_eq!(count_on(&events, TURN, "mutex_lock", "lock"), 800);
        assert_eq!(count_on(&events, TURN, "mutex_unlock", "lock"), 800);
        assert_eq!(count_on(&events, TURN, "mutex_lock", "cond_wait"), waits);
        assert!(
            no_futex_events(&events),
            "parking_lot's own futex calls are not events"
        );
        if racy {
            assert!(races(&trace) > 0, "a bump out of turn races");
        } else {
            assert_eq!(races(&trace), 0, "bumps by turns");
        }
    }
    let rw = dir.join("rw");
    std::fs::create_dir_all(&rw).unwrap();
    let events = replayed_running_holding(
        &rw,
        &program,
        &["rw"],
        &format!("3:rwlock_unlock({RW})#50 -> 1:rwlock_wrlock({RW})#1"),
    );
    assert!(
        position_of(&events, RW, "1", "rwlock_wrlock", 1)
            > position_of(&events, RW, "3", "rwlock_unlock", 50)
    );
    let condvar = dir.join("condvar");
    std::fs::create_dir_all(&condvar).unwrap();
    let events = replayed_running_holding(
        &condvar,
        &program,
        &["condvar"],
        &format!("1:cond_signal({TURNED})#1 -> 2:mutex_lock({TURN})#1"),
    );
    assert!(
        position_of(&events, TURN, "2", "mutex_lock", 1)
            > position_of(&events, TURNED, "1", "cond_signal", 1)
    );
}

/// Issue 26: `parking_lot`'s tries, inlined with no slow path of their own
/// (`Mutex::try_lock`: a loop testing the byte's LOCKED bit, then `lock
/// cmpxchg`; `RwLock::try_write`: one `lock cmpxchg` of 0; `try_read`: a check,
/// `cmpxchg`, and `try_lock_shared_slow` out of line), are recorded as
/// `pthread_mutex_trylock`'s and `pthread_rwlock_try*lock`'s are, and a timed
/// `try_lock_for` (the fast path's `cmpxchg`, then `lock_slow` with a deadline,
/// which returns whether it took the lock) as `pthread_mutex_timedlock`: every
/// success and every failure counted exactly — the failures against the
/// program's own count — so a counter under `try_lock`/`try_lock_for` and a word
/// written under `try_write` and read under `try_read` give no race.
#[test]
fn parking_lot_tries_are_recorded_exactly() {
    if !common::have_root("parking_lot_tries_are_recorded_exactly") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_cargo_program("parking_lot_counter");
    let dir = common::scratch("watch_parking_lot_tries");
    let trace = dir.join("try.ordo");
    let printed = record_watching_all_hw(
        &[
            "parking_lot_counter::COUNTER",
            "parking_lot_counter::SHARED",
        ],
        &trace,
        &program,
        &["try"],
    );
    let (counted, failed) = counted_after_failures(&printed);
    assert_eq!(counted, 420, "{printed}");
    // Each worker's first tries found `main` holding the locks.
    assert!(failed >= 4, "{printed}");
    let events = common::dump_json(&trace);
    const LOCK: &str = "parking_lot_counter::LOCK";
    const RW: &str = "parking_lot_counter::RW";
    assert_eq!(count_on(&events, LOCK, "mutex_lock", "trylock"), 400);
    assert_eq!(count_on(&events, RW, "rwlock_wrlock", "trylock"), 200);
    assert_eq!(count_on(&events, RW, "rwlock_rdlock", "trylock"), 200);
    // `try_lock_for`: 20 acquisitions (and main's one), timeouts via `timedlock`.
    assert_eq!(count_on(&events, LOCK, "mutex_lock", "lock"), 21);
    assert_eq!(
        count_on(&events, LOCK, "mutex_lock_failed", "trylock")
            + count_on(&events, LOCK, "mutex_lock_failed", "timedlock")
            + count_on(&events, RW, "rwlock_lock_failed", "trylock"),
        failed
    );
    assert_eq!(races(&trace), 0, "every access under its lock");
}

/// Issue 26: `RwLock::try_read` and `try_write`, inlined (a loop of a check and a
/// `lock cmpxchg`, no slow path), are recorded as `pthread_rwlock_tryrdlock` and
/// `tryrwlock` are — a success an `rwlock_rdlock`/`rwlock_wrlock` via `try`, a
/// failure (the check's exit) an `rwlock_lock_failed` — every try counted
/// exactly, so a counter updated under the write lock and read under read locks
/// gives no race (the build before saw none of these: the program calls no
/// blocking `read()`); updating it without the lock races. A replay holds a
/// writer's first successful try until a reader's fiftieth release.
#[test]
fn rust_try_read_and_try_write_are_recorded_and_gated() {
    if !common::have_root("rust_try_read_and_try_write_are_recorded_and_gated") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_try_rwlock");
    let dir = common::scratch("watch_rust_try_rwlock");
    const LOCK: &str = "rust_try_rwlock::LOCK";
    let on_lock = |events: &[Value], kind: &str, via: &str| count_on(events, LOCK, kind, via);
    for racy in [false, true] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let args: &[&str] = if racy { &["racy"] } else { &[] };
        let counter = record_watching_hw("rust_try_rwlock::COUNTER", &trace, &program, args);
        let (counted, failed) = counted_after_failures(&counter);
        assert!(racy || counted == 200, "{counter}");
        // Each worker's try while `main` held the lock failed.
        assert!(failed >= 4, "{counter}");
        let events = common::dump_json(&trace);
        let writes = if racy { 100 } else { 200 };
        assert_eq!(on_lock(&events, "rwlock_lock_failed", "trylock"), failed);
        assert_eq!(on_lock(&events, "rwlock_wrlock", "trylock"), writes);
        assert_eq!(on_lock(&events, "rwlock_rdlock", "trylock"), 200);
        let unlocks = events
            .iter()
            .filter(|e| e["object"] == LOCK && e["kind"] == "rwlock_unlock")
            .count();
        assert_eq!(unlocks, writes + 200 + 1, "main's write lock too");
        if racy {
            assert!(races(&trace) > 0, "the unlocked updates race");
        } else {
            assert_eq!(races(&trace), 0, "updates under try_write's lock");
        }
    }
    let events = replayed_holding(
        &dir,
        &program,
        &format!("3:rwlock_unlock({LOCK})#50 -> 1:rwlock_wrlock({LOCK})#1"),
    );
    assert_eq!(on_lock(&events, "rwlock_wrlock", "trylock"), 200);
    assert_eq!(on_lock(&events, "rwlock_rdlock", "trylock"), 200);
    let position =
        |thread: &str, kind: &str, nth: usize| position_of(&events, LOCK, thread, kind, nth);
    assert!(
        position("1", "rwlock_wrlock", 1) > position("3", "rwlock_unlock", 50),
        "the writer's first success held until the reader's fiftieth release"
    );
}

/// Issue 26: the same with a `std::sync::RwLock` — writers increment under its
/// write lock, readers read under its read lock: every inlined acquisition and
/// release is recorded (exactly 1 000 write and 1 001 read locks, each release by
/// a holder, writers alone, readers only together), no race is found; a reader
/// that skips the lock races.
#[test]
fn a_correctly_rwlocked_rust_counter_gives_no_race() {
    if !common::have_root("a_correctly_rwlocked_rust_counter_gives_no_race") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_rwlocked_counter");
    let dir = common::scratch("watch_rust_rwlocked_counter");
    for (args, racy) in [(&[][..], false), (&["racy"][..], true)] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        let counter = record_watching_hw("rust_rwlocked_counter::COUNTER", &trace, &program, args);
        assert_eq!(counter, "1000");
        let events = common::dump_json(&trace);
        let mut on_lock: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["object"] == "rust_rwlocked_counter::LOCK")
            .filter(|e| e["kind"].as_str().unwrap().starts_with("rwlock_"))
            .collect();
        let count = |kind: &str| on_lock.iter().filter(|e| e["kind"] == kind).count();
        let reads = if racy { 501 } else { 1001 };
        assert_eq!(
            (
                count("rwlock_wrlock"),
                count("rwlock_rdlock"),
                count("rwlock_unlock")
            ),
            (1000, reads, 1000 + reads)
        );
        // In the lock's own order: a writer alone, readers only with readers, and
        // each release by a holder.
        on_lock.sort_by_key(|e| e["seq"].as_u64().unwrap());
        let (mut writer, mut readers): (Option<&serde_json::Value>, Vec<&serde_json::Value>) =
            (None, Vec::new());
        for e in on_lock {
            let t = &e["thread"];
            match e["kind"].as_str().unwrap() {
                "rwlock_wrlock" => {
                    assert!(writer.is_none() && readers.is_empty(), "not alone: {e}");
                    writer = Some(t);
                }
                "rwlock_rdlock" => {
                    assert!(writer.is_none(), "read while written: {e}");
                    readers.push(t);
                }
                _ => {
                    if writer == Some(t) {
                        writer = None;
                    } else {
                        let i = readers.iter().position(|r| *r == t);
                        readers.remove(i.unwrap_or_else(|| panic!("not a holder: {e}")));
                    }
                }
            }
        }
        let races = races(&trace);
        if racy {
            assert!(races > 0, "the unlocked reads race");
        } else {
            assert_eq!(races, 0, "a correctly locked counter");
        }
    }
}

/// Issue 26: std's `Barrier` (a Mutex and a Condvar inside std) orders a write
/// before it with a read after it: no race; the write moved after the barrier
/// races.
#[test]
fn a_rust_barrier_orders_a_write_before_a_read() {
    if !common::have_root("a_rust_barrier_orders_a_write_before_a_read") {
        return;
    }
    let _registers = common::debug_registers();
    let program = common::build_rust_program("rust_barrier_handoff");
    let dir = common::scratch("watch_rust_barrier");
    for (args, racy) in [(&[][..], false), (&["racy"][..], true)] {
        let trace = dir.join(format!("racy-{racy}.ordo"));
        record_watching_hw("rust_barrier_handoff::DATA", &trace, &program, args);
        let events = common::dump_json(&trace);
        // Both threads arrive, then both leave, one of them the leader; std's
        // mutex and condvar inside the barrier are not events of their own.
        let kinds = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
        assert_eq!((kinds("barrier_arrive"), kinds("barrier_wait")), (2, 2));
        let leaders = events
            .iter()
            .filter(|e| e["kind"] == "barrier_wait" && e["result"] == -1)
            .count();
        assert_eq!(leaders, 1);
        assert_eq!(kinds("mutex_lock") + kinds("cond_wait_begin"), 0);
        let races = races(&trace);
        assert_eq!(races > 0, racy, "racy: {racy}");
    }
}
