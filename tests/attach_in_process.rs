//! `ordo record --pid` in process (issue 27): the agent loaded into a running
//! program, its GOT slots of the pthread functions redirected while recording and
//! restored byte for byte after — by the recorder when it detaches, by its
//! guardian when it is killed — with the program's threads (one blocked in
//! `pthread_cond_wait`, one holding a lock) carrying on as if nothing happened.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    build_program_variant, changed_regions as changed, have_root, ordo, read_only_memory, scratch,
    stats,
};

/// The target, built with `-z now` so its GOT lies in memory made read-only
/// after relocation (the slots a real server's hardened build has).
fn target() -> (Child, BufReader<ChildStdout>) {
    let program = build_program_variant("attach_target", "now", "gcc", &["-Wl,-z,now"]);
    let mut child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    (child, out)
}

/// Tells the target `command` (a line on its stdin).
fn tell(child: &mut Child, command: &str) {
    writeln!(child.stdin.as_mut().unwrap(), "{command}").unwrap();
}

/// Ends the target and checks it ran to its end: every thread joined, the
/// waiter woken out of its `pthread_cond_wait`, exit code 0.
fn end(mut child: Child, mut out: BufReader<ChildStdout>) -> u64 {
    tell(&mut child, "end");
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    line.trim()
        .strip_prefix("counter ")
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap()
}

#[test]
fn attaching_in_process_records_the_running_program_and_restores_its_got() {
    if !have_root("attaching_in_process_records_the_running_program_and_restores_its_got") {
        return;
    }
    let dir = scratch("attach_in_process");
    let (mut child, out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    let trace = dir.join("t.ordo");
    let mut rec = Command::new(ordo())
        .args([
            "record",
            "-v",
            "--pid",
            &pid.to_string(),
            "--duration",
            "2",
            "-o",
        ])
        .arg(&trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once recording (it says so when attached): the lock held since before the
    // attach is released.
    let mut said = BufReader::new(rec.stderr.take().unwrap());
    let mut stderr = String::new();
    while !stderr.contains("Ctrl-C to stop") {
        assert!(said.read_line(&mut stderr).unwrap() > 0, "{stderr}");
    }
    tell(&mut child, "release");
    std::io::Read::read_to_string(&mut said, &mut stderr).unwrap();
    let status = rec.wait().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("recording in process"), "{stderr}");
    assert!(stderr.contains("GOT slots restored"), "{stderr}");
    assert!(!stderr.contains("eBPF uprobes"), "{stderr}");
    let after = read_only_memory(pid);
    assert_eq!(changed(&before, &after), Vec::<String>::new());
    let s = stats(&trace);
    let locks = s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0);
    let unlocks = s["by_kind"]["mutex_unlock"].as_u64().unwrap_or(0);
    assert!(locks > 100, "{s}");
    // Unpaired at the edges only: releases of locks taken before the attach (the
    // holder's, the one its wait, begun before, took back), acquisitions whose
    // release came after the detach.
    assert!(unlocks + 4 >= locks && unlocks <= locks + 8, "{s}");
    assert!(
        s["by_kind"]["cond_signal"].as_u64().unwrap_or(0) >= 1,
        "{s}"
    );
    assert_eq!(s["lost"].as_u64().unwrap_or(0), 0, "{s}");
    let counter = end(child, out);
    assert!(counter > locks / 2, "{counter} {s}");
}

#[test]
fn attaching_again_reuses_the_loaded_agent() {
    if !have_root("attaching_again_reuses_the_loaded_agent") {
        return;
    }
    let dir = scratch("attach_in_process_again");
    let (child, out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    for i in 0..5 {
        let trace = dir.join(format!("{i}.ordo"));
        // The last time, asking for the trace on disk to keep up.
        let keep_current = i == 4;
        let output = Command::new(ordo())
            .env("ORDO_PHASES", "1")
            .args(["record", "--pid", &pid.to_string(), "--duration", "0.3"])
            .args(keep_current.then_some("--keep-trace-current"))
            .arg("-o")
            .arg(&trace)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        // The server outlives the recording: its conversion does not wait for
        // the recording's end (where it would compete with the serving).
        let conversion = if keep_current {
            "conversion: live, at normal priority"
        } else {
            "conversion: on a spare CPU"
        };
        assert!(stderr.contains(conversion), "{stderr}");
        let s = stats(&trace);
        assert!(
            s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0) > 10,
            "{i}: {s}"
        );
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let agents: std::collections::BTreeSet<&str> = maps
        .lines()
        .filter(|l| l.contains("libordo_attach"))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert_eq!(
        changed(&before, &read_only_memory(pid)),
        Vec::<String>::new()
    );
    end(child, out);
}

/// `--sparse-times` with `--pid` in process, twice on the same target: each
/// recording is in process, says how its times were taken, loses nothing, has
/// every time within its own half second (not one carried over from the first
/// attachment's last stamps), and leaves the GOT as it was.
#[test]
fn attaching_in_process_with_sparse_times_stamps_each_attachment_afresh() {
    if !have_root("attaching_in_process_with_sparse_times_stamps_each_attachment_afresh") {
        return;
    }
    let dir = scratch("attach_in_process_sparse");
    let (child, out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    for i in 0..2 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(1500));
        }
        let trace = dir.join(format!("{i}.ordo"));
        let output = Command::new(ordo())
            .args(["record", "-v", "--sparse-times", "--pid", &pid.to_string()])
            .args(["--duration", "0.5", "-o"])
            .arg(&trace)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(stderr.contains("recording in process"), "{stderr}");
        assert!(!stderr.contains("every event is stamped"), "{stderr}");
        let s = stats(&trace);
        assert!(
            s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0) > 10,
            "{i}: {s}"
        );
        assert_eq!(s["lost"].as_u64(), Some(0), "{i}: {s}");
        let span = s["span_ns"].as_u64().unwrap();
        assert!(span < 1_200_000_000, "{i}: times span {span} ns: {s}");
        let dump = crate::common::run_ordo(&["dump", trace.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&dump.stdout);
        let first = text.lines().next().unwrap_or("");
        assert!(first.contains("--sparse-times"), "{i}: {first}");
    }
    assert_eq!(
        changed(&before, &read_only_memory(pid)),
        Vec::<String>::new()
    );
    end(child, out);
}

#[test]
fn a_killed_recorder_leaves_the_target_restored_and_running() {
    if !have_root("a_killed_recorder_leaves_the_target_restored_and_running") {
        return;
    }
    let dir = scratch("attach_in_process_killed");
    let (child, out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    let trace = dir.join("t.ordo");
    let mut rec = Command::new(ordo())
        .args(["record", "--pid", &pid.to_string(), "-o"])
        .arg(&trace)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Redirected: some read-only memory (the GOT) differs.
    let started = Instant::now();
    while changed(&before, &read_only_memory(pid)).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never attached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    rec.kill().unwrap();
    rec.wait().unwrap();
    let killed = Instant::now();
    while !changed(&before, &read_only_memory(pid)).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "not restored: {:?}",
            changed(&before, &read_only_memory(pid))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    end(child, out);
    assert!(Path::new(&trace).exists());
}

/// `ordo record --pid` SIGKILLed at 30 moments spread over its attach, its
/// recording and (every other run records for 30 ms only) its detach, from the
/// first milliseconds to 145 ms: the target keeps running, its code and GOT as
/// they were once the guardian has restored them, and ends normally.
#[test]
fn a_recorder_killed_at_any_moment_leaves_the_target_as_it_was() {
    if !have_root("a_recorder_killed_at_any_moment_leaves_the_target_as_it_was") {
        return;
    }
    let dir = scratch("attach_in_process_kill_any_time");
    let (child, out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    let trace = dir.join("t.ordo");
    for i in 0..30u64 {
        let duration: &[&str] = if i % 2 == 1 {
            &["--duration", "0.03"]
        } else {
            &[]
        };
        let mut rec = Command::new(ordo())
            .args(["record", "--force", "--pid", &pid.to_string(), "-o"])
            .arg(&trace)
            .args(duration)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // 0 to 145 ms, in a scrambled order.
        std::thread::sleep(Duration::from_millis((i * 7 % 30) * 5));
        // It may have ended already (a short recording).
        let _ = rec.kill();
        rec.wait().unwrap();
        let killed = Instant::now();
        while !changed(&before, &read_only_memory(pid)).is_empty() {
            assert!(
                killed.elapsed() < Duration::from_secs(5),
                "kill {i}: not restored: {:?}",
                changed(&before, &read_only_memory(pid))
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "kill {i}: the target died"
        );
    }
    end(child, out);
}

/// Starts `ordo record --pid PID --duration SECONDS -o TRACE` and returns once
/// it has redirected the target's GOT (some read-only memory differs from
/// `before`).
fn attach_for(pid: u32, seconds: &str, trace: &Path, before: &[(String, Vec<u8>)]) -> Child {
    let rec = Command::new(ordo())
        .args([
            "record",
            "--pid",
            &pid.to_string(),
            "--duration",
            seconds,
            "-o",
        ])
        .arg(trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while changed(before, &read_only_memory(pid)).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never attached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    rec
}

/// A lock the target holds when a recording ends, taken at a call site its
/// ring knows, is in the trace as the thread's last event.
#[test]
fn a_lock_held_at_detach_is_recorded() {
    if !have_root("a_lock_held_at_detach_is_recorded") {
        return;
    }
    let dir = scratch("attach_in_process_held_at_detach");
    let (mut child, mut out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    let trace = dir.join("t.ordo");
    let rec = attach_for(pid, "1", &trace, &before);
    let keeper = started(&mut child, &mut out, "keep", "keeper");
    finished(rec);
    let events = crate::common::dump_json(&trace);
    let count = |kind: &str| {
        events
            .iter()
            .filter(|e| {
                e["tid"].as_u64() == Some(keeper) && e["kind"] == kind && e["object"] == "keep_lock"
            })
            .count()
    };
    assert_eq!((count("mutex_lock"), count("mutex_unlock")), (101, 100));
    end(child, out);
}

/// Tells the target `command` once a recording has attached, and returns the
/// tid of the thread it starts (its line `NAME TID`).
fn started(child: &mut Child, out: &mut BufReader<ChildStdout>, command: &str, name: &str) -> u64 {
    std::thread::sleep(Duration::from_millis(100));
    tell(child, command);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix(&format!("{name} "))
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap()
}

/// Waits for the recorder `rec` and checks that it succeeded.
fn finished(rec: Child) {
    let output = rec.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A thread that had recorded in one attachment, then entered
/// `pthread_mutex_lock` and got the mutex only in the next attachment: the
/// first recording shows it blocked on the mutex, the second its acquisition —
/// as its own thread's, numbered after the holder's release and stamped within
/// that recording. (The wrapper looks the thread's ring up before the real
/// call; after it, the ring of that number in the new mapping may be another
/// thread's or no one's.)
#[test]
fn a_lock_waited_for_across_two_attachments_is_recorded_in_the_second() {
    if !have_root("a_lock_waited_for_across_two_attachments_is_recorded_in_the_second") {
        return;
    }
    let dir = scratch("attach_in_process_across");
    let (mut child, mut out) = target();
    let pid = child.id();
    let before = read_only_memory(pid);
    let first = dir.join("first.ordo");
    let second = dir.join("second.ordo");

    let rec = attach_for(pid, "1", &first, &before);
    let blocker = started(&mut child, &mut out, "block", "blocker");
    finished(rec);
    let events = crate::common::dump_json(&first);
    let of_blocker = |events: &[serde_json::Value], kind: &str, object: &str| {
        events
            .iter()
            .filter(|e| {
                e["tid"].as_u64() == Some(blocker) && e["kind"] == kind && e["object"] == object
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of_blocker(&events, "mutex_lock", "own_lock").len(), 1);
    assert_eq!(
        of_blocker(&events, "blocked", "held_lock").len(),
        1,
        "{:?}",
        events
            .iter()
            .filter(|e| e["tid"].as_u64() == Some(blocker))
            .collect::<Vec<_>>()
    );

    let rec = attach_for(pid, "1", &second, &before);
    std::thread::sleep(Duration::from_millis(100));
    tell(&mut child, "release");
    let output = rec.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let s = stats(&second);
    assert_eq!(s["lost"].as_u64(), Some(0), "{s}");
    let events = crate::common::dump_json(&second);
    let on_held: Vec<_> = events
        .iter()
        .filter(|e| e["object"] == "held_lock")
        .collect();
    let locks = of_blocker(&events, "mutex_lock", "held_lock");
    assert_eq!(locks.len(), 1, "{on_held:?}");
    let release = on_held
        .iter()
        .find(|e| e["kind"] == "mutex_unlock" && e["tid"].as_u64() != Some(blocker))
        .unwrap_or_else(|| panic!("the holder's release: {on_held:?}"));
    let lock = &locks[0];
    assert!(
        lock["seq"].as_u64() > release["seq"].as_u64(),
        "{lock} {release}"
    );
    let first_ts = events
        .iter()
        .filter_map(|e| e["ts_ns"].as_u64())
        .min()
        .unwrap();
    let lock_ts = lock["ts_ns"].as_u64().unwrap();
    assert!(
        lock_ts >= release["ts_ns"].as_u64().unwrap() && lock_ts >= first_ts,
        "{lock} {release} first {first_ts}"
    );
    assert_eq!(of_blocker(&events, "mutex_unlock", "held_lock").len(), 1);
    assert_eq!(
        changed(&before, &read_only_memory(pid)),
        Vec::<String>::new()
    );
    end(child, out);
}
