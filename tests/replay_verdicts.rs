//! `ordo replay`'s verdicts and oracle on real programs: sanitizer builds (ASan,
//! TSan, UBSan from gcc and clang) replay and record with their runtime first, a
//! sanitizer report is the verdict's evidence, `--expect-exit` and every
//! `--fail-on` kind decide the verdict, a schedule whose orderings never happened
//! is `not_exercised`, and a run that never reached `main` is an error.

use crate::common;

use std::path::{Path, PathBuf};

use common::{build_program, build_program_variant, dump_json, record_probes, scratch};

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

fn schedule(name: &str) -> PathBuf {
    programs_dir().join(format!("{name}.sched"))
}

/// A schedule file with `text`, in the test's scratch directory.
fn schedule_text(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

use common::replay_output as replay;

/// [`replay`] with `--json`: exit status, the outcome, ordo's stderr.
fn replay_json(
    args: &[&str],
    schedule: &Path,
    command: &[&str],
    env: &[(&str, &str)],
) -> (i32, serde_json::Value, String) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = replay(&all, schedule, command, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no JSON outcome; stderr:\n{stderr}"));
    let json = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nstderr:\n{stderr}"));
    (out.status.code().unwrap_or(-1), json, stderr)
}

/// The line number of the first line of `tests/programs/FILE` containing `needle`.
fn line_of(file: &str, needle: &str) -> usize {
    let text = std::fs::read_to_string(programs_dir().join(file)).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The ASan builds of the use-after-free program: gcc links libasan.so.8
/// dynamically (the runtime must come first in LD_PRELOAD), clang links its runtime
/// into the executable.
fn asan_builds() -> Vec<(&'static str, PathBuf)> {
    ["gcc", "clang"]
        .into_iter()
        .map(|cc| {
            let bin = build_program_variant(
                "replay_use_after_free",
                &format!("{cc}-asan"),
                cc,
                &["-fsanitize=address"],
            );
            (cc, bin)
        })
        .collect()
}

#[test]
fn asan_use_after_free_reproduces_with_the_report_as_evidence() {
    let line = line_of("replay_use_after_free.c", "c->magic != ALIVE");
    for (cc, bin) in asan_builds() {
        for _ in 0..3 {
            let (code, json, stderr) = replay_json(
                &[],
                &schedule("replay_use_after_free"),
                &[path_str(&bin)],
                &[],
            );
            assert_eq!(json["verdict"], "reproduced", "{cc}: {json}\n{stderr}");
            assert_eq!(code, 1, "{cc}: {json}");
            assert_eq!(json["exit_code"], 1, "{cc}: {json}");
            let report = &json["sanitizer"];
            assert_eq!(report["tool"], "AddressSanitizer", "{cc}: {json}");
            assert_eq!(report["kind"], "heap-use-after-free", "{cc}: {json}");
            assert!(
                report["first_line"]
                    .as_str()
                    .unwrap()
                    .starts_with("ERROR: AddressSanitizer: heap-use-after-free on address"),
                "{cc}: {json}"
            );
            assert_eq!(
                report["top_frame"],
                format!("reader at replay_use_after_free.c:{line}"),
                "{cc}: {json}"
            );
            // The report still reaches the user's terminal (the stderr is teed).
            assert!(
                stderr.contains("ERROR: AddressSanitizer: heap-use-after-free"),
                "{cc}: {stderr}"
            );
        }
        // People read the same evidence.
        let out = replay(
            &[],
            &schedule("replay_use_after_free"),
            &[path_str(&bin)],
            &[],
        );
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains(&format!(
                "evidence: exit code 1; AddressSanitizer: heap-use-after-free in reader at replay_use_after_free.c:{line}"
            )),
            "{cc}: {text}"
        );
    }
}

#[test]
fn asan_build_with_an_empty_schedule_passes() {
    let dir = scratch("verdicts_asan_empty");
    let empty = schedule_text(&dir, "empty.sched", "# nothing to enforce\n");
    for (cc, bin) in asan_builds() {
        for _ in 0..3 {
            let (code, json, stderr) = replay_json(&[], &empty, &[path_str(&bin)], &[]);
            assert_eq!(json["verdict"], "passed", "{cc}: {json}\n{stderr}");
            assert_eq!(code, 0);
            assert!(json["sanitizer"].is_null(), "{cc}: {json}");
            assert!(!stderr.contains("does not come first"), "{cc}: {stderr}");
        }
    }
    // The user's own LD_PRELOAD naming the runtime (what people try when ASan
    // complains) is kept, and changes nothing.
    let (_, gcc_asan) = &asan_builds()[0];
    let (code, json, stderr) = replay_json(
        &[],
        &schedule("replay_use_after_free"),
        &[path_str(gcc_asan)],
        &[("LD_PRELOAD", "libasan.so.8")],
    );
    assert_eq!(
        (code, &json["verdict"]),
        (1, &"reproduced".into()),
        "{json}\n{stderr}"
    );
    assert_eq!(json["sanitizer"]["kind"], "heap-use-after-free", "{json}");
}

/// A sanitizer's background thread is told apart by its mask (every signal
/// blocked); a program thread with the same mask that the agent knows (here a
/// worker computing while main joins it) is not left out, so the run is not taken
/// for "every thread blocked".
#[test]
fn a_program_thread_with_every_signal_blocked_is_not_a_sanitizer_thread() {
    let dir = scratch("verdicts_masked_worker");
    let empty = schedule_text(&dir, "empty.sched", "# nothing to enforce\n");
    for cc in ["gcc", "clang"] {
        let bin = build_program_variant(
            "replay_masked_worker",
            &format!("{cc}-asan"),
            cc,
            &["-fsanitize=address"],
        );
        let (code, json, stderr) = replay_json(&[], &empty, &[path_str(&bin)], &[]);
        assert_eq!(json["verdict"], "passed", "{cc}: {json}\n{stderr}");
        assert_eq!(code, 0, "{cc}: {json}");
    }
}

#[test]
fn asan_build_records_on_both_paths() {
    if !common::have_root("asan_build_records_on_both_paths") {
        return;
    }
    let dir = scratch("verdicts_asan_record");
    for (cc, bin) in asan_builds() {
        for probes in ["inproc", "ebpf"] {
            let trace = dir.join(format!("{cc}-{probes}.trace"));
            let out = record_probes(probes, &trace, &bin, &[]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{cc} {probes}: {stderr}");
            assert!(
                !stderr.contains("does not come first"),
                "{cc} {probes}: {stderr}"
            );
            assert!(!stderr.contains("never started"), "{cc} {probes}: {stderr}");
            let events = dump_json(&trace);
            // The program's own table lock, by both worker threads.
            for thread in ["1", "2"] {
                assert!(
                    events.iter().any(|e| e["kind"] == "mutex_lock"
                        && e["thread"] == thread
                        && e["object"]
                            .as_str()
                            .is_some_and(|o| o.contains("table_lock"))),
                    "{cc} {probes}: no mutex_lock(table_lock) by thread {thread}"
                );
            }
        }
    }
}

/// The program's threads are numbered after ThreadSanitizer's background thread,
/// which its runtime starts (through pthread_create) at the program's first
/// pthread_create: record and replay agree on that, so schedules from a recording
/// of the TSan build apply to it.
#[test]
fn tsan_build_is_gated_and_recorded() {
    if !common::have_root("tsan_build_is_gated_and_recorded") {
        return;
    }
    let dir = scratch("verdicts_tsan");
    // replay_queue_consumer_first.sched, with the program's threads one further.
    let consumer_first = schedule_text(
        &dir,
        "consumer_first.sched",
        "3:cond_wait_begin(not_empty)#1 -> 2:mutex_lock(queue_lock)#1\n\
         2.1:mutex_unlock(queue_lock)#1 -> 3:thread_start()#1\n",
    );
    let cycle = schedule_text(
        &dir,
        "cycle.sched",
        "3:mutex_unlock(queue_lock)#1 -> 2:mutex_lock(queue_lock)#1\n\
         2:mutex_unlock(queue_lock)#1 -> 3:mutex_lock(queue_lock)#1\n",
    );
    for cc in ["gcc", "clang"] {
        let bin = build_program_variant(
            "replay_queue",
            &format!("{cc}-tsan"),
            cc,
            &["-fsanitize=thread"],
        );
        let trace = dir.join(format!("{cc}.trace"));
        let out = record_probes("inproc", &trace, &bin, &[]);
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events = dump_json(&trace);
        for thread in ["2", "2.1", "3"] {
            assert!(
                events
                    .iter()
                    .any(|e| e["thread"] == thread && e["kind"] == "mutex_lock"),
                "{cc}: thread {thread} has no mutex_lock in the recording"
            );
        }
        // gcc's runtime (libtsan.so) interposes the pthread calls before the agent:
        // the sites are still the program's, found above the interceptor's frame.
        // (clang links its runtime into the program; its interceptors stay.)
        if cc == "gcc" {
            for e in events.iter().filter(|e| e["kind"] == "mutex_lock") {
                let site = e["site"].as_str().unwrap_or("");
                assert!(site.contains("replay_queue.c:"), "{cc}: {e}");
            }
        }
        for _ in 0..3 {
            let replayed = dir.join(format!("{cc}-replay.trace"));
            let (code, json, stderr) = replay_json(
                &["--record", path_str(&replayed)],
                &consumer_first,
                &[path_str(&bin)],
                &[],
            );
            assert_eq!(json["verdict"], "passed", "{cc}: {json}\n{stderr}");
            assert_eq!(code, 0);
            assert_eq!(json["verified_by"], "recording", "{cc}: {json}");
            assert_eq!(json["schedule_held"], true, "{cc}: {json}");
            assert!(
                json["pending"].as_array().unwrap().is_empty(),
                "{cc}: {json}"
            );
        }
        // The runtime's background thread does not hide a stuck run.
        let start = std::time::Instant::now();
        let (code, json, _) = replay_json(&[], &cycle, &[path_str(&bin)], &[]);
        assert_eq!(json["verdict"], "infeasible", "{cc}: {json}");
        assert_eq!(code, 3);
        assert!(
            start.elapsed().as_secs_f64() < 2.0,
            "{cc}: {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn ubsan_report_is_a_reproduction_even_with_exit_status_0() {
    let dir = scratch("verdicts_ubsan");
    let empty = schedule_text(&dir, "empty.sched", "# nothing\n");
    let line = line_of("sanitize_overflow.c", "capacity = c * 2");
    for cc in ["gcc", "clang"] {
        let bin = build_program_variant(
            "sanitize_overflow",
            &format!("{cc}-ubsan"),
            cc,
            &["-fsanitize=undefined"],
        );
        let (code, json, stderr) =
            replay_json(&[], &schedule("sanitize_overflow"), &[path_str(&bin)], &[]);
        assert_eq!(json["verdict"], "reproduced", "{cc}: {json}\n{stderr}");
        assert_eq!(code, 1);
        assert_eq!(json["exit_code"], 0, "{cc}: {json}");
        assert_eq!(
            json["sanitizer"]["tool"], "UndefinedBehaviorSanitizer",
            "{cc}: {json}"
        );
        assert_eq!(
            json["sanitizer"]["kind"], "signed integer overflow",
            "{cc}: {json}"
        );
        assert_eq!(
            json["sanitizer"]["top_frame"],
            format!("sanitize_overflow.c:{line}"),
            "{cc}: {json}"
        );
        // Not a failure when the oracle only looks at the exit status.
        let (code, json, _) = replay_json(
            &["--fail-on", "exit"],
            &schedule("sanitize_overflow"),
            &[path_str(&bin)],
            &[],
        );
        assert_eq!(
            (code, &json["verdict"]),
            (0, &"passed".into()),
            "{cc}: {json}"
        );
        assert_eq!(
            json["sanitizer"]["kind"], "signed integer overflow",
            "{cc}: {json}"
        );
        // The natural order has no overflow.
        let (code, json, _) = replay_json(&[], &empty, &[path_str(&bin)], &[]);
        assert_eq!(
            (code, &json["verdict"]),
            (0, &"passed".into()),
            "{cc}: {json}"
        );
    }
}

#[test]
fn orderings_that_never_happened_are_not_a_pass() {
    let program = build_program("replay_queue");
    let dir = scratch("verdicts_not_exercised");
    // Thread 2 takes the queue lock a few times, never 999 times: the program
    // exits first, and the ordering is left pending.
    let sched = schedule_text(
        &dir,
        "never.sched",
        "1:mutex_lock(queue_lock)#1 -> 2:mutex_lock(queue_lock)#999\n",
    );
    for _ in 0..3 {
        let (code, json, _) = replay_json(&[], &sched, &[path_str(&program)], &[]);
        assert_eq!(json["verdict"], "not_exercised", "{json}");
        assert_eq!(code, 4, "{json}");
        assert_eq!(json["exit_code"], 0);
        assert_eq!(json["pending"].as_array().unwrap().len(), 1, "{json}");
    }
}

#[test]
fn expect_exit_and_each_fail_on_kind_decide_the_verdict() {
    let bin = build_program("verdict_outcomes");
    let p = path_str(&bin);
    let dir = scratch("verdicts_oracle");
    let empty = schedule_text(&dir, "empty.sched", "# nothing\n");
    let verdict = |args: &[&str], command: &[&str]| {
        let (code, json, stderr) = replay_json(args, &empty, command, &[]);
        (
            code,
            json["verdict"].as_str().unwrap().to_string(),
            json,
            stderr,
        )
    };
    // exit: a status other than the expected one.
    let (code, v, json, _) = verdict(&[], &[p, "exit", "3"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("exit code 3 (expected 0)"),
        "{json}"
    );
    let (code, v, json, _) = verdict(&["--expect-exit", "3"], &[p, "exit", "3"]);
    assert_eq!((code, v.as_str()), (0, "passed"), "{json}");
    let (code, v, json, _) = verdict(&["--expect-exit", "3"], &[p, "exit", "0"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    let (code, v, json, _) = verdict(&["--fail-on", "signal"], &[p, "exit", "3"]);
    assert_eq!((code, v.as_str()), (0, "passed"), "{json}");
    // signal: by name in the evidence.
    let (code, v, json, _) = verdict(&[], &[p, "signal", "11"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    assert_eq!(json["signal_name"], "SIGSEGV", "{json}");
    let (code, v, json, _) = verdict(&["--fail-on", "exit"], &[p, "signal", "11"]);
    assert_eq!((code, v.as_str()), (0, "passed"), "{json}");
    assert_eq!(json["signal_name"], "SIGSEGV", "{json}");
    // hang: a deadlock.
    let (code, v, json, _) = verdict(&["--fail-on", "hang"], &[p, "deadlock"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    assert!(
        json["reason"].as_str().unwrap().starts_with("deadlock"),
        "{json}"
    );
    let (code, v, json, _) = verdict(&["--fail-on", "hang"], &[p, "exit", "1"]);
    assert_eq!((code, v.as_str()), (0, "passed"), "{json}");
    // stderr:REGEX, with the output still passed through.
    let args = ["--fail-on", "stderr:checksum (mismatch|error)"];
    let (code, v, json, stderr) = verdict(&args, &[p, "stderr", "block 7: checksum mismatch"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    assert_eq!(json["stderr_match"], "block 7: checksum mismatch", "{json}");
    assert!(stderr.contains("block 7: checksum mismatch"), "{stderr}");
    let (code, v, json, _) = verdict(&args, &[p, "stderr", "all blocks fine"]);
    assert_eq!((code, v.as_str()), (0, "passed"), "{json}");
    // Repeated kinds combine.
    let both = ["--fail-on", "stderr:mismatch", "--fail-on", "exit"];
    let (code, v, json, _) = verdict(&both, &[p, "exit", "2"]);
    assert_eq!((code, v.as_str()), (1, "reproduced"), "{json}");
    // Bad values: one line naming the option, exit 2.
    for (args, option) in [
        (&["--fail-on", "stderr:(unclosed"][..], "--fail-on"),
        (&["--fail-on", "crash"], "--fail-on"),
        (&["--expect-exit", "300"], "--expect-exit"),
        (&["--expect-exit", "-1"], "--expect-exit"),
    ] {
        let out = replay(args, &empty, &[p], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(option), "{args:?}: {stderr}");
    }
}

#[test]
fn a_run_that_never_reached_main_is_an_error() {
    let dir = scratch("verdicts_error");
    let empty = schedule_text(&dir, "empty.sched", "# nothing\n");
    // The program dies in a constructor, after the agent started, before main.
    let bin = build_program("verdict_outcomes");
    let (code, json, _) = replay_json(
        &[],
        &empty,
        &[path_str(&bin)],
        &[("VERDICT_OUTCOMES_CTOR_ABORT", "1")],
    );
    assert_eq!(json["verdict"], "error", "{json}");
    assert_eq!(code, 2);
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .starts_with("the program ended before reaching main"),
        "{json}"
    );
    assert_eq!(json["signal_name"], "SIGABRT", "{json}");
    // The sanitizer runtime refuses to start (a bad option) before anything of the
    // agent ran: never a reproduction, and the runtime's own words are the reason.
    for (cc, asan) in asan_builds() {
        let (code, json, _) = replay_json(
            &[],
            &schedule("replay_use_after_free"),
            &[path_str(&asan)],
            &[("ASAN_OPTIONS", "detect_leaks=maybe")],
        );
        assert_eq!(json["verdict"], "error", "{cc}: {json}");
        assert_eq!(code, 2, "{cc}: {json}");
        let reason = json["reason"].as_str().unwrap();
        assert!(
            reason.contains("never started") || reason.contains("before reaching main"),
            "{cc}: {json}"
        );
        assert!(
            reason.contains("Invalid value for bool option"),
            "{cc}: {json}"
        );
        // Human output: one line on what went wrong.
        let out = replay(
            &[],
            &schedule("replay_use_after_free"),
            &[path_str(&asan)],
            &[("ASAN_OPTIONS", "detect_leaks=maybe")],
        );
        assert_eq!(out.status.code(), Some(2));
        let text = String::from_utf8_lossy(&out.stderr);
        let last = text.trim_end().lines().last().unwrap_or("");
        assert!(last.starts_with("ordo replay: error (the "), "{cc}: {text}");
        assert!(!text.contains("schedule held"), "{cc}: {text}");
    }
}

#[test]
fn cxx_sanitizer_builds_replay_with_their_reports() {
    let dir = scratch("verdicts_cxx");
    let empty = schedule_text(&dir, "empty.sched", "# nothing\n");
    let use_line = line_of("sanitize_cxx_cache.cpp", "e->hits++");
    let lock_line = line_of("sanitize_cxx_cache.cpp", "lock_guard<std::mutex> g(e->m)");
    let delete_line = line_of("sanitize_cxx_cache.cpp", "delete e;");
    // Under TSan the program's threads come after the runtime's background thread.
    let tsan_schedule = schedule_text(
        &dir,
        "tsan.sched",
        "2:mutex_unlock(cache_mutex)#1 -> 3:mutex_lock(cache_mutex)#1\n\
         3:thread_exit()#1 -> 2:mutex_lock(@2)#1\n",
    );
    for cc in ["gcc", "clang"] {
        // clang names C++ functions with their parameters.
        let reader = if cc == "clang" { "reader()" } else { "reader" };
        let evictor = if cc == "clang" {
            "evictor()"
        } else {
            "evictor"
        };
        let asan = build_program_variant(
            "sanitize_cxx_cache",
            &format!("{cc}-asan"),
            cc,
            &["-fsanitize=address"],
        );
        let (code, json, stderr) = replay_json(
            &[],
            &schedule("sanitize_cxx_cache"),
            &[path_str(&asan)],
            &[],
        );
        assert_eq!(
            (code, &json["verdict"]),
            (1, &"reproduced".into()),
            "{cc}: {json}\n{stderr}"
        );
        assert_eq!(
            json["sanitizer"]["kind"], "heap-use-after-free",
            "{cc}: {json}"
        );
        assert_eq!(
            json["sanitizer"]["top_frame"],
            format!("{reader} at sanitize_cxx_cache.cpp:{use_line}"),
            "{cc}: {json}"
        );
        let (code, json, _) = replay_json(&[], &empty, &[path_str(&asan)], &[]);
        assert_eq!(
            (code, &json["verdict"]),
            (0, &"passed".into()),
            "{cc}: {json}"
        );

        let tsan = build_program_variant(
            "sanitize_cxx_cache",
            &format!("{cc}-tsan"),
            cc,
            &["-fsanitize=thread"],
        );
        let (code, json, stderr) = replay_json(&[], &tsan_schedule, &[path_str(&tsan)], &[]);
        assert_eq!(
            (code, &json["verdict"]),
            (1, &"reproduced".into()),
            "{cc}: {json}\n{stderr}"
        );
        assert_eq!(json["exit_code"], 66, "{cc}: {json}");
        assert_eq!(json["sanitizer"]["tool"], "ThreadSanitizer", "{cc}: {json}");
        assert_eq!(
            json["sanitizer"]["kind"], "heap-use-after-free",
            "{cc}: {json}"
        );
        assert_eq!(
            json["sanitizer"]["top_frame"],
            format!("{reader} at sanitize_cxx_cache.cpp:{lock_line}"),
            "{cc}: {json}"
        );
        // Unforced, TSan still sees the missing synchronization, as a data race.
        let (_, json, _) = replay_json(&[], &empty, &[path_str(&tsan)], &[]);
        assert_eq!(json["sanitizer"]["kind"], "data race", "{cc}: {json}");
        assert_eq!(
            json["sanitizer"]["top_frame"],
            format!("{evictor} at sanitize_cxx_cache.cpp:{delete_line}"),
            "{cc}: {json}"
        );
    }
}
