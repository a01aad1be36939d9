//! End-to-end tests of names as people write them (`nm -C` spellings, Rust paths,
//! fields, `ptr->field`) and of atomics as synchronization, on the real kernel,
//! with both watch mechanisms (uprobes at instruction sites, hardware watchpoints).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn record_watching(trace: &Path, watch: &[&str], program: &Path, args: &[&str]) -> Output {
    let out = Command::new(ordo())
        .arg("record")
        .arg("-o")
        .arg(trace)
        .args(watch)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ordo record {watch:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Accesses in a trace: (object name, kind, atomic) → count.
fn access_counts(events: &[Value]) -> BTreeMap<(String, String, bool), usize> {
    let mut counts = BTreeMap::new();
    for e in events {
        let kind = e["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "read" | "write" | "rmw") {
            continue;
        }
        let key = (
            e["object"].as_str().unwrap_or_default().to_string(),
            kind.to_string(),
            e["atomic"].as_bool().unwrap_or(false),
        );
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

fn count(
    counts: &BTreeMap<(String, String, bool), usize>,
    object: &str,
    kind: &str,
    atomic: bool,
) -> usize {
    counts
        .get(&(object.to_string(), kind.to_string(), atomic))
        .copied()
        .unwrap_or(0)
}

fn races(trace: &Path) -> u64 {
    let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["stats"]["findings"]["race"].as_u64().unwrap_or(0)
}

#[test]
fn cxx_names_fields_and_pointer_fields() {
    if !have_root("cxx_names_fields_and_pointer_fields") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_names_cxx");
    let program = build_program("watch_names");
    let trace = dir.join("uprobe.ordo");
    let out = record_watching(
        &trace,
        &[
            "--watch=(anonymous namespace)::hits",
            "--watch=ns::holder<int, 3>::value",
            "--watch=ns::operator+(ns::V, ns::V)::calls",
            "--watch=tally<int>()::count",
            "--watch=cfg.inner.count",
            "--watch=cfg.slots[2]",
            "--watch=current->users",
        ],
        &program,
        &["2", "100"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hits 200 value 200 count 200 slot 200"),
        "{stdout}"
    );
    let users: Vec<usize> = printed(&out.stdout, "hits")
        .rsplit("users ")
        .next()
        .unwrap()
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    let counts = access_counts(&dump_json(&trace));
    // Every watched increment: one read and one write per round and thread.
    for object in [
        "(anonymous namespace)::hits",
        "ns::holder<int, 3>::value",
        "ns::operator+(ns::V, ns::V)::calls",
        "tally<int>()::count",
    ] {
        assert_eq!(
            count(&counts, object, "write", false),
            200,
            "{object}: {counts:?}"
        );
        assert!(
            count(&counts, object, "read", false) >= 200,
            "{object}: {counts:?}"
        );
    }
    // Fields are named as the spec wrote them (the bytes at their DWARF offsets:
    // inner.count at 16, slots[2] at 32); through a pointer, by the object reached.
    assert_eq!(
        count(&counts, "cfg.inner.count", "write", false),
        200,
        "{counts:?}"
    );
    assert_eq!(
        count(&counts, "cfg.slots[2]", "write", false),
        200,
        "{counts:?}"
    );
    // `current->users` follows the pointer: halfway through it moves from
    // first_node to second_node, and each node's accesses are recorded there.
    assert_eq!(
        count(&counts, "first_node+8", "write", false),
        users[0],
        "{counts:?}"
    );
    assert_eq!(
        count(&counts, "second_node+8", "write", false),
        users[1],
        "{counts:?}"
    );
    assert_eq!(users[0] + users[1], 200);
    assert!(users[0] > 0 && users[1] > 0, "{users:?}");
    // Everything happens under one mutex.
    assert_eq!(races(&trace), 0);

    // Hardware watchpoints take the same names, and record reads as well as writes.
    let trace = dir.join("hw.ordo");
    record_watching(
        &trace,
        &[
            "--watch-hw=(anonymous namespace)::hits",
            "--watch-hw=cfg.slots[2]",
        ],
        &program,
        &["2", "100"],
    );
    let counts = access_counts(&dump_json(&trace));
    for object in ["(anonymous namespace)::hits", "cfg.slots[2]"] {
        assert_eq!(
            count(&counts, object, "write", false),
            200,
            "{object}: {counts:?}"
        );
        // The workers' 200 reads and main's one to print.
        assert_eq!(
            count(&counts, object, "read", false),
            201,
            "{object}: {counts:?}"
        );
    }
    assert_eq!(races(&trace), 0);

    // A field through a pointer cannot be a hardware watch (armed before the
    // pointer is set): a one-line error that says what to do instead.
    let out = Command::new(ordo())
        .args(["record", "-o"])
        .arg(dir.join("bad.ordo"))
        .arg("--watch-hw=current->users")
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("through a pointer") && err.contains("--watch"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn atomics_are_synchronization_not_races() {
    if !have_root("atomics_are_synchronization_not_races") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_names_atomics");
    let program = build_program("watch_refcount");
    for (mechanism, flag) in [("uprobe", "--watch"), ("hardware", "--watch-hw")] {
        // A correct reference count: the last release's write of the payload is
        // ordered after every other thread's read by the count's release/acquire.
        let trace = dir.join(format!("refcount-{mechanism}.ordo"));
        let refs = format!("{flag}=object.refs");
        let payload = format!("{flag}=object.payload");
        let out = record_watching(&trace, &[&refs, &payload], &program, &["refcount", "3"]);
        assert_eq!(printed(&out.stdout, "refs"), "0 payload -1");
        let counts = access_counts(&dump_json(&trace));
        // std::atomic<int>: every access is atomic, the decrements are rmw.
        assert_eq!(
            count(&counts, "object.refs", "rmw", true),
            4,
            "{mechanism}: {counts:?}"
        );
        assert_eq!(
            count(&counts, "object.refs", "rmw", false),
            0,
            "{mechanism}"
        );
        assert_eq!(
            count(&counts, "object.payload", "read", false),
            4,
            "{mechanism}: {counts:?}"
        );
        assert_eq!(
            count(&counts, "object.payload", "write", false),
            2,
            "{mechanism}: {counts:?}"
        );
        assert_eq!(races(&trace), 0, "{mechanism}: refcount");

        // Atomic read-modify-writes of one counter by several threads.
        let trace = dir.join(format!("counter-{mechanism}.ordo"));
        let counter = format!("{flag}=counter");
        record_watching(&trace, &[&counter], &program, &["counter", "3", "200"]);
        let counts = access_counts(&dump_json(&trace));
        assert_eq!(
            count(&counts, "counter", "rmw", true),
            600,
            "{mechanism}: {counts:?}"
        );
        assert_eq!(count(&counts, "counter", "write", false), 0, "{mechanism}");
        assert_eq!(races(&trace), 0, "{mechanism}: counter");

        // An atomic increment and a plain store of the same variable do race.
        let trace = dir.join(format!("mixed-{mechanism}.ordo"));
        let mixed = format!("{flag}=mixed_total");
        record_watching(&trace, &[&mixed], &program, &["mixed", "2", "200"]);
        let counts = access_counts(&dump_json(&trace));
        assert_eq!(
            count(&counts, "mixed_total", "rmw", true),
            200,
            "{mechanism}: {counts:?}"
        );
        assert_eq!(
            count(&counts, "mixed_total", "write", false),
            200,
            "{mechanism}: {counts:?}"
        );
        assert!(races(&trace) >= 1, "{mechanism}: mixed");

        // A message published with a release store of a std::atomic<bool> flag (a
        // plain `mov`) and read after an acquire load (a plain `mov` too) that saw it.
        let trace = dir.join(format!("publish-{mechanism}.ordo"));
        let ready = format!("{flag}=ready");
        let message = format!("{flag}=message");
        let out = record_watching(&trace, &[&ready, &message], &program, &["publish"]);
        assert_eq!(printed(&out.stdout, "message"), "7");
        let events = dump_json(&trace);
        let last_read = events
            .iter()
            .rfind(|e| e["kind"] == "read" && e["object"] == "ready")
            .expect("the flag's reads");
        // The load that saw the flag set is ordered after the store, with its value.
        assert_eq!(last_read["value"], 1, "{mechanism}: {last_read}");
        assert_eq!(last_read["atomic"], true);
        assert_eq!(races(&trace), 0, "{mechanism}: publish");
    }
}

#[test]
fn rust_paths_and_rust_atomics() {
    if !have_root("rust_paths_and_rust_atomics") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_names_rust");
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
    // `crate::stats::HITS` is bumped through a reference argument: only a hardware
    // watchpoint sees those accesses. Its type, AtomicU32, makes them atomic.
    let out = record_watching(
        &trace,
        &[
            "--watch=watch_rust::COUNTER",
            "--watch-hw=crate::stats::HITS",
        ],
        &program,
        &["2", "50"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "counter 100 hits 100"
    );
    let counts = access_counts(&dump_json(&trace));
    let named = |part: &str, kind: &str| -> usize {
        counts
            .iter()
            .filter(|((o, k, atomic), _)| o.contains(part) && k == kind && *atomic)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(named("COUNTER", "rmw"), 100, "{counts:?}");
    assert_eq!(named("HITS", "rmw"), 100, "{counts:?}");
    assert!(
        counts.keys().all(|(_, _, atomic)| *atomic),
        "every access to a Rust atomic is atomic: {counts:?}"
    );
    assert_eq!(races(&trace), 0);
}

/// Issue 25: a field recorded is a field named everywhere. The analyzer's race
/// schedules on the fields of a 48-byte struct name them as the watch spec did
/// (`conn.buf`, `conn.id`) and replay without edits, and so does the field spelled
/// as bytes (`conn+8:8`). Found with no hints (`--discover`), the fields are named
/// from DWARF in the trace, `dump` and `analyze`: `conn.id`, `conn.buf`.
#[test]
fn schedules_on_struct_fields_replay_as_the_analyzer_prints_them() {
    if !common::have_root("schedules_on_struct_fields_replay_as_the_analyzer_prints_them") {
        return;
    }
    // Replays gate at program points with debug registers: take a turn.
    let _registers = common::debug_registers();
    let program = common::build_program("field_race");
    let dir = common::scratch("watch_names_fields");
    for spec in [["--watch", "conn.buf"], ["--watch-hw", "conn.id"]] {
        let trace = dir.join(format!("fields{}.ordo", spec[0]));
        common::record_watching(&trace, &program, &spec);
        let found = common::findings(&trace);
        let race =
            common::top_race(&found).unwrap_or_else(|| panic!("{spec:?}: no race in {found:?}"));
        assert!(
            race.contains(&format!("({})#", spec[1])),
            "{spec:?}: {race}"
        );
        let schedule = dir.join("race.sched");
        std::fs::write(&schedule, &race).unwrap();
        let args = if spec[0] == "--watch-hw" {
            vec![
                "--watch-hw",
                spec[1],
                "--sites-from",
                trace.to_str().unwrap(),
            ]
        } else {
            vec![]
        };
        let (code, json) = common::replay_json(&args, &schedule, &program);
        assert_ne!(json["verdict"], "error", "{spec:?} {race}: {json}");
        assert!(code == 0 || code == 1, "{spec:?} {race}: refused: {json}");
        assert_eq!(json["schedule_held"], true, "{spec:?} {race}: {json}");
    }
    let trace = dir.join("discovered.ordo");
    crate::discover::record_discovering(&trace, &program);
    let dump = String::from_utf8(
        Command::new(ordo())
            .arg("dump")
            .arg(&trace)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for field in ["conn.id", "conn.buf"] {
        assert!(
            dump.lines()
                .any(|l| l.contains("read") && l.contains(field)),
            "{field}:\n{dump}"
        );
    }
    let analysis = Command::new(ordo())
        .args(["analyze", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&analysis.stdout).unwrap();
    let named: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "race")
        .flat_map(|f| f["objects"].as_array().unwrap())
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert!(
        named.contains(&"conn.id") && named.contains(&"conn.buf"),
        "{named:?}"
    );
    for object in ["conn.buf", "conn+8:8"] {
        let schedule = dir.join("spelled.sched");
        std::fs::write(
            &schedule,
            format!("2:read({object})#1 -> 1:write({object})#1\n"),
        )
        .unwrap();
        let (code, json) = common::replay_json(&[], &schedule, &program);
        assert_eq!(code, 0, "{object}: {json}");
        assert_eq!(json["verdict"], "passed", "{object}: {json}");
        assert_eq!(json["schedule_held"], true, "{object}: {json}");
    }
}

/// Issue 25: the race schedules `ordo analyze` prints on variables watched in each
/// name form `nm -C` and the field syntax give replay as printed: an anonymous
/// namespace, a template's static member, a static in an operator, a static in a
/// template function, a nested field, an array element.
#[test]
fn race_schedules_on_every_watch_form_replay_as_printed() {
    if !have_root("race_schedules_on_every_watch_form_replay_as_printed") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch_names_every_form");
    let program = build_program("watch_names");
    let trace = dir.join("unlocked.ordo");
    let forms = [
        "(anonymous namespace)::hits",
        "ns::holder<int, 3>::value",
        "ns::operator+(ns::V, ns::V)::calls",
        "tally<int>()::count",
        "cfg.inner.count",
        "cfg.slots[2]",
    ];
    let watches: Vec<String> = forms.iter().map(|f| format!("--watch={f}")).collect();
    let watches: Vec<&str> = watches.iter().map(String::as_str).collect();
    let args = ["2", "20", "unlocked"];
    record_watching(&trace, &watches, &program, &args);
    let found = findings(&trace);
    for form in forms {
        let (_, schedule) = found
            .iter()
            .find(|(kind, s)| kind == "race" && s.contains(&format!("({form})#")))
            .unwrap_or_else(|| panic!("no race schedule names `{form}`: {found:?}"));
        let file = dir.join("race.sched");
        std::fs::write(&file, schedule).unwrap();
        let out = Command::new(ordo())
            .args(["replay", "--json", "--schedule"])
            .arg(&file)
            .arg("--")
            .arg(&program)
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let json: Value =
            serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
                panic!(
                    "{form}: no JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{form}: refused: {json}\n{schedule}"
        );
        assert_eq!(json["schedule_held"], true, "{form}: {json}\n{schedule}");
    }
}
