//! End-to-end tests of `ordo record` and `ordo dump` on the real kernel: C, C++ and
//! Rust programs are recorded with eBPF and their traces checked against what the
//! programs did and logged themselves.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use serde_json::Value;

on_every_path!(
    contention_order_matches_the_programs_own_log,
    objects_made_anew_at_one_address_keep_one_exact_order,
    create_and_join_edges_and_logical_ids,
    condvar_ping_pong,
    rwlock_readers_and_writers,
    trylock_timedlock_recursive_semaphores,
    barrier_rounds,
    cxx_std_mutex_is_seen_through_pthread,
    rust_std_mutex_contention_shows_as_futex_events,
    rust_std_condvar_waits_and_notifies_are_condvar_events,
    interrupted_recordings_are_readable,
);
on_both_paths!(
    exit_status_passes_through_and_bad_commands_fail_clearly,
    signals_to_a_launched_recording_reach_the_program_and_finish_the_trace,
    a_second_signal_ends_the_recording_at_once
);

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A `record_sync` run's lock address and the acquisition order it logged (the
/// run must have succeeded).
fn lock_and_logged_order(out: &std::process::Output) -> (String, Vec<String>) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let logged = printed(&out.stdout, "order")
        .split(' ')
        .map(str::to_string)
        .collect();
    (printed(&out.stdout, "lock"), logged)
}

/// The dump's global order of acquisitions of `lock` is the order the program logged.
fn assert_acquisitions_in_logged_order(events: &[Value], lock: &str, logged: &[String]) {
    let traced: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "mutex_lock" && e["addr"] == lock)
        .map(|e| e["thread"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        traced, logged,
        "acquisition order differs from the program's log"
    );
}

/// Locks and unlocks of one mutex strictly alternate, each unlock by the holder.
fn assert_one_holder_at_a_time<'a>(events: impl Iterator<Item = &'a Value>) {
    let mut holder: Option<String> = None;
    for e in events {
        let t = e["thread"].as_str().unwrap().to_string();
        match e["kind"].as_str().unwrap() {
            "mutex_lock" => assert!(holder.replace(t).is_none(), "two holders at once"),
            "mutex_unlock" => assert_eq!(holder.take(), Some(t), "unlock by a non-holder"),
            other => panic!("unexpected {other}"),
        }
    }
}

fn contention_order_matches_the_programs_own_log(probes: &str) {
    if !have_root(&format!(
        "contention_order_matches_the_programs_own_log ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("contention-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["contention", "4", "10000"]);
    let (lock, logged) = lock_and_logged_order(&out);
    assert_eq!(logged.len(), 40_000);

    let events = dump_json(&trace);
    let each = counts(&[("1", 10_000), ("2", 10_000), ("3", 10_000), ("4", 10_000)]);
    assert_eq!(count_by_thread(&events, "mutex_lock", &lock), each);
    assert_eq!(count_by_thread(&events, "mutex_unlock", &lock), each);

    // The dump's global order of acquisitions is the order the program logged.
    assert_acquisitions_in_logged_order(&events, &lock, &logged);
    // Threads that found the lock taken blocked in the lock-wait routine: recorded,
    // at the caller's line, without a sequence number (they order nothing). Only the
    // eBPF path sees inside glibc.
    let blocks: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "mutex_block" && e["addr"] == lock.as_str())
        .collect();
    assert!(
        !blocks.is_empty() || probes != "ebpf",
        "4 threads on 2 CPUs never blocked"
    );
    assert!(blocks
        .iter()
        .all(|e| e.get("seq").is_none() && e["site"].as_str().unwrap().contains("record_sync.c")));
    let on_lock = || {
        events
            .iter()
            .filter(|e| e["addr"] == lock.as_str() && e["kind"] != "mutex_block")
    };
    // Sequence numbers on the lock are exact: 0, 1, 2, … in dump order, no gaps or repeats.
    let seqs: Vec<u64> = on_lock().map(|e| e["seq"].as_u64().unwrap()).collect();
    let first = seqs[0];
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == first + i as u64),
        "sequence numbers are not consecutive"
    );
    // And lock/unlock strictly alternate on the lock, by the same thread.
    assert_one_holder_at_a_time(on_lock());
    // With exact times, the times follow that order: a release is stamped before
    // it takes effect and an acquisition after, so no acquisition shows as earlier
    // than the release it followed. (The agent once stamped releases after the
    // call: a thread preempted on its way out of `pthread_mutex_unlock` — by the
    // waiter it woke, 4 threads on 2 CPUs — gave hundreds of inversions a run, up
    // to a millisecond, in 4 of 5 runs on a 2-vCPU VM.) Slack for the CPUs'
    // clocks: 1 µs (the same VM's worst since was 86 ns, in 10 runs).
    if probes != "inproc-sparse" {
        let stamps: Vec<u64> = on_lock().map(|e| e["ts_ns"].as_u64().unwrap()).collect();
        let inverted: Vec<u64> = (stamps.windows(2))
            .filter(|w| w[1] + 1_000 < w[0])
            .map(|w| w[0] - w[1])
            .collect();
        assert!(
            inverted.is_empty(),
            "{} of {} events on the lock are stamped before the one they follow (by up to {} ns)",
            inverted.len(),
            stamps.len(),
            inverted.iter().max().unwrap_or(&0)
        );
    }

    // What the kernel records of a thread (its start, its exit) falls in place
    // among what the agent records of it: each created thread's events begin with
    // its start and every thread's end with its exit. (With --sparse-times this
    // holds only if the stamps taken without reading the clock are never later
    // than the events.)
    let mut by_thread: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for e in &events {
        by_thread
            .entry(e["thread"].as_str().unwrap().to_string())
            .or_default()
            .push(e["kind"].as_str().unwrap());
    }
    for (t, kinds) in &by_thread {
        assert_eq!(kinds.last(), Some(&"thread_exit"), "thread {t}: {kinds:?}");
        if t != "0" {
            assert_eq!(kinds.first(), Some(&"thread_start"), "thread {t}");
        }
    }

    let s = stats(&trace);
    assert_eq!(s["lost"], 0, "drops at the default buffer size");
    assert_eq!(s["threads"], 5);
    assert_eq!(s["by_kind"]["thread_create"], 4);
    assert_eq!(s["by_kind"]["thread_start"], 4);
    assert_eq!(s["by_kind"]["thread_join"], 4);
    assert_eq!(s["by_kind"]["thread_exit"], 5);
}

/// One address is, round after round, a mutex made anew every way a program makes
/// one (`pthread_mutex_init` with and without a destroy before, zeroed memory, a
/// robust mutex), a condvar and a semaphore: the order must still be the
/// program's, and the address's numbers consecutive across all its objects — what
/// any numbering kept anywhere but in a per-address counter (such as one inside the
/// mutex, tried: docs/ARCHITECTURE.md) must get right.
fn objects_made_anew_at_one_address_keep_one_exact_order(probes: &str) {
    if !have_root(&format!(
        "objects_made_anew_at_one_address_keep_one_exact_order ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("reuse-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let (rounds, threads, each) = (24, 3, 2000);
    let args = [
        "reuse".to_string(),
        rounds.to_string(),
        threads.to_string(),
        each.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = record_probes(probes, &trace, &program, &args);
    let (slot, logged) = lock_and_logged_order(&out);
    // 16 of the 24 rounds are a mutex.
    assert_eq!(logged.len(), 16 * threads * each);

    let events = dump_json(&trace);
    assert_acquisitions_in_logged_order(&events, &slot, &logged);
    let numbered: Vec<&Value> = events
        .iter()
        .filter(|e| e["addr"] == slot.as_str() && e.get("seq").is_some())
        .collect();
    let kinds = |k: &str| numbered.iter().filter(|e| e["kind"] == k).count();
    assert_eq!(kinds("cond_signal"), 4 * 5);
    assert_eq!(kinds("sem_post"), 4 * 3);
    assert_eq!(kinds("mutex_unlock"), logged.len());
    let seqs: Vec<u64> = numbered
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "the address's sequence numbers are not consecutive: {:?}",
        seqs.windows(2).find(|w| w[1] != w[0] + 1)
    );
    assert_one_holder_at_a_time(
        numbered
            .iter()
            .copied()
            .filter(|e| e["kind"].as_str().unwrap().starts_with("mutex")),
    );
    assert_eq!(stats(&trace)["lost"], 0);
}

fn create_and_join_edges_and_logical_ids(probes: &str) {
    if !have_root(&format!("create_and_join_edges_and_logical_ids ({probes})")) {
        return;
    }
    let dir = scratch(&format!("tree-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["tree", "2"]);
    assert!(out.status.success());
    let events = dump_json(&trace);
    let mut ids: Vec<String> = events
        .iter()
        .map(|e| e["thread"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, ["0", "1", "1.1", "1.2", "2", "2.1", "2.2"]);
    // Every child starts after its creation and is joined after its exit, in dump order.
    let pos = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).expect("event present");
    for child in ["1", "2", "1.1", "1.2", "2.1", "2.2"] {
        let parent = child.rsplit_once('.').map(|(p, _)| p).unwrap_or("0");
        let created = pos(&|e| e["kind"] == "thread_create" && e["child"] == child);
        let started = pos(&|e| e["kind"] == "thread_start" && e["thread"] == child);
        let exited = pos(&|e| e["kind"] == "thread_exit" && e["thread"] == child);
        let joined = pos(&|e| e["kind"] == "thread_join" && e["joined"] == child);
        assert_eq!(events[created]["thread"], parent);
        assert_eq!(events[joined]["thread"], parent);
        assert!(
            created < started && started < exited && exited < joined,
            "{child}: {created} {started} {exited} {joined}"
        );
    }
    // Logical ids do not depend on tids or timing: a second run gives the same tree.
    let trace2 = dir.join("t2.ordo");
    record_probes(probes, &trace2, &program, &["tree", "2"]);
    let creates = |evs: &[Value]| -> Vec<(String, String)> {
        let mut v: Vec<_> = evs
            .iter()
            .filter(|e| e["kind"] == "thread_create")
            .map(|e| {
                (
                    e["thread"].as_str().unwrap().to_string(),
                    e["child"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(creates(&events), creates(&dump_json(&trace2)));
}

fn condvar_ping_pong(probes: &str) {
    if !have_root(&format!("condvar_ping_pong ({probes})")) {
        return;
    }
    let dir = scratch(&format!("pingpong-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["pingpong", "200"]);
    assert!(out.status.success());
    let (lock, cond) = (printed(&out.stdout, "lock"), printed(&out.stdout, "cond"));
    let events = dump_json(&trace);
    assert_eq!(
        count_by_thread(&events, "cond_signal", &cond),
        counts(&[("1", 200), ("2", 200)])
    );
    let begins = count_by_thread(&events, "cond_wait_begin", &cond);
    let waits = count_by_thread(&events, "cond_wait", &cond);
    assert_eq!(begins, waits, "every wait that began returned");
    for t in ["1", "2"] {
        let w = waits.get(t).copied().unwrap_or(0);
        assert_eq!(
            count_by_thread(&events, "mutex_lock", &lock)[t],
            200 + w,
            "lock + reacquires"
        );
        assert_eq!(
            count_by_thread(&events, "mutex_unlock", &lock)[t],
            200 + w,
            "unlock + releases"
        );
    }
    // Wait returns carry the mutex; the reacquire is a mutex_lock via cond_wait.
    let reacquires = events
        .iter()
        .filter(|e| e["kind"] == "mutex_lock" && e["via"] == "cond_wait")
        .count();
    assert_eq!(reacquires, waits.values().sum::<usize>());
    assert!(events
        .iter()
        .filter(|e| e["kind"] == "cond_wait")
        .all(|e| e["mutex"] == lock.as_str()));
}

fn rwlock_readers_and_writers(probes: &str) {
    if !have_root(&format!("rwlock_readers_and_writers ({probes})")) {
        return;
    }
    let dir = scratch(&format!("rwlock-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["rwlock", "3", "2", "500"]);
    assert!(out.status.success());
    let rw = printed(&out.stdout, "rwlock");
    let events = dump_json(&trace);
    assert_eq!(
        count_by_thread(&events, "rwlock_rdlock", &rw),
        counts(&[("1", 500), ("2", 500), ("3", 500)])
    );
    assert_eq!(
        count_by_thread(&events, "rwlock_wrlock", &rw),
        counts(&[("4", 500), ("5", 500)])
    );
    assert_eq!(
        count_by_thread(&events, "rwlock_unlock", &rw),
        counts(&[("1", 500), ("2", 500), ("3", 500), ("4", 500), ("5", 500)])
    );
    // A writer is alone: between a wrlock and its unlock no other thread acquires.
    let mut writer: Option<String> = None;
    let mut readers = 0i64;
    for e in events.iter().filter(|e| e["addr"] == rw.as_str()) {
        let t = e["thread"].as_str().unwrap().to_string();
        match e["kind"].as_str().unwrap() {
            "rwlock_wrlock" => {
                assert!(writer.is_none() && readers == 0, "writer overlaps");
                writer = Some(t);
            }
            "rwlock_rdlock" => {
                assert!(writer.is_none(), "reader inside a write section");
                readers += 1;
            }
            "rwlock_unlock" => {
                if writer.as_deref() == Some(t.as_str()) {
                    writer = None;
                } else {
                    readers -= 1;
                }
            }
            _ => {}
        }
    }
}

fn trylock_timedlock_recursive_semaphores(probes: &str) {
    if !have_root(&format!(
        "trylock_timedlock_recursive_semaphores ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("trylock-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["trylock"]);
    assert!(out.status.success());
    assert_eq!(printed(&out.stdout, "results"), "16 110 0");
    let lock = printed(&out.stdout, "lock");
    let events = dump_json(&trace);
    let failed: Vec<(String, i64)> = events
        .iter()
        .filter(|e| e["kind"] == "mutex_lock_failed" && e["addr"] == lock.as_str())
        .map(|e| {
            (
                e["via"].as_str().unwrap().to_string(),
                e["result"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        [("trylock".to_string(), 16), ("timedlock".to_string(), 110)]
    );
    let acquired: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["kind"] == "mutex_lock" && e["addr"] == lock.as_str())
        .map(|e| {
            (
                e["thread"].as_str().unwrap().to_string(),
                e["via"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        acquired,
        [
            ("0".to_string(), "lock".to_string()),
            ("1".to_string(), "trylock".to_string())
        ]
    );
    for sem in ["sem_a", "sem_b"] {
        let addr = printed(&out.stdout, sem);
        assert_eq!(
            events
                .iter()
                .filter(|e| e["kind"] == "sem_post" && e["addr"] == addr.as_str())
                .count(),
            1
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| e["kind"] == "sem_wait" && e["addr"] == addr.as_str())
                .count(),
            1
        );
    }
    // The post happens before the wait it satisfied, in dump order.
    let a = printed(&out.stdout, "sem_a");
    let post = events
        .iter()
        .position(|e| e["kind"] == "sem_post" && e["addr"] == a.as_str())
        .unwrap();
    let wait = events
        .iter()
        .position(|e| e["kind"] == "sem_wait" && e["addr"] == a.as_str())
        .unwrap();
    assert!(post < wait);

    let trace = dir.join("rec.ordo");
    let out = record_probes(probes, &trace, &program, &["recursive"]);
    let lock = printed(&out.stdout, "lock");
    let events = dump_json(&trace);
    assert_eq!(
        count_by_thread(&events, "mutex_lock", &lock),
        counts(&[("0", 6)])
    );
    assert_eq!(
        count_by_thread(&events, "mutex_unlock", &lock),
        counts(&[("0", 6)])
    );
}

fn barrier_rounds(probes: &str) {
    if !have_root(&format!("barrier_rounds ({probes})")) {
        return;
    }
    let dir = scratch(&format!("barrier-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["barrier", "3"]);
    assert!(out.status.success());
    let b = printed(&out.stdout, "barrier");
    let events = dump_json(&trace);
    let each = counts(&[("0", 3), ("1", 3), ("2", 3), ("3", 3)]);
    assert_eq!(count_by_thread(&events, "barrier_wait", &b), each);
    assert_eq!(count_by_thread(&events, "barrier_arrive", &b), each);
    // One serial thread per round (PTHREAD_BARRIER_SERIAL_THREAD = -1).
    let serial = events
        .iter()
        .filter(|e| e["kind"] == "barrier_wait" && e["result"] == -1)
        .count();
    assert_eq!(serial, 3);
}

fn cxx_std_mutex_is_seen_through_pthread(probes: &str) {
    if !have_root(&format!("cxx_std_mutex_is_seen_through_pthread ({probes})")) {
        return;
    }
    let dir = scratch(&format!("cxx-{probes}"));
    let program = build_program("record_cxx_mutex");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &[]);
    assert!(out.status.success());
    let m = printed(&out.stdout, "mutex");
    let events = dump_json(&trace);
    let each = counts(&[("1", 2000), ("2", 2000), ("3", 2000), ("4", 2000)]);
    assert_eq!(count_by_thread(&events, "mutex_lock", &m), each);
    assert_eq!(count_by_thread(&events, "mutex_unlock", &m), each);
    // std::mutex::lock inlines libstdc++'s __gthread_mutex_lock into the caller:
    // the site is the program's own line, the JSON keeps the inline chain.
    let lock = events
        .iter()
        .find(|e| e["kind"] == "mutex_lock" && e["addr"] == m.as_str())
        .unwrap();
    let site = lock["site"].as_str().unwrap();
    assert!(site.contains("(record_cxx_mutex.cpp:"), "{lock}");
    let chain: Vec<&str> = lock["site_chain"]
        .as_array()
        .unwrap_or_else(|| panic!("no site_chain: {lock}"))
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(chain[0].contains("gthr-default.h"), "{chain:?}");
    assert!(
        chain.iter().any(|f| f.contains("record_cxx_mutex.cpp:")),
        "{chain:?}"
    );
}

/// Rust's `std::sync::Mutex` inlines its uncontended path (no pthread call): in
/// process, the agent records every acquisition and release at the inlined
/// instructions (issue 26) — exactly the program's 80 000 + 1, in an order where
/// each lock is followed by its holder's unlock — and the futex calls of its slow
/// paths are the lock's own, not events; with eBPF alone only the contended
/// operations show, as futex waits and wakes on the mutex's address.
fn rust_std_mutex_contention_shows_as_futex_events(probes: &str) {
    if !have_root(&format!(
        "rust_std_mutex_contention_shows_as_futex_events ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("rust-{probes}"));
    let program = build_rust_program("record_rust_mutex");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &[]);
    assert!(out.status.success());
    let m = printed(&out.stdout, "mutex");
    let events = dump_json(&trace);
    // std's Mutex<u64> starts with its futex word.
    let waits = events
        .iter()
        .filter(|e| e["kind"] == "futex_wait" && e["addr"] == m.as_str())
        .count();
    let wakes = events
        .iter()
        .filter(|e| e["kind"] == "futex_wake" && e["addr"] == m.as_str())
        .count();
    if probes == "ebpf" {
        assert!(wakes > 0, "no futex_wake on the contended mutex");
        assert!(waits > 0, "no futex_wait on the contended mutex");
    } else {
        assert_eq!(
            (waits, wakes),
            (0, 0),
            "the lock's own futex calls are events"
        );
    }
    let mut on_m: Vec<&Value> = events
        .iter()
        .filter(|e| {
            matches!(e["kind"].as_str(), Some("mutex_lock" | "mutex_unlock"))
                && e["addr"] == m.as_str()
        })
        .collect();
    if probes == "ebpf" {
        // The inlined paths call nothing a uprobe sees.
        assert_eq!(on_m.len(), 0);
    } else {
        // Every contended acquisition noted itself pending while it waited, and
        // every one returned: none is left as `blocked`.
        let blocked: Vec<&Value> = events.iter().filter(|e| e["kind"] == "blocked").collect();
        assert!(
            blocked.is_empty(),
            "a run that ended blocked nowhere: {blocked:?}"
        );
        // 4 workers × 20 000, and main's final read.
        let locks = on_m.iter().filter(|e| e["kind"] == "mutex_lock").count();
        let unlocks = on_m.len() - locks;
        assert_eq!((locks, unlocks), (80_001, 80_001));
        // In the mutex's own order, each acquisition is followed by its holder's
        // release.
        on_m.sort_by_key(|e| e["seq"].as_u64().unwrap());
        for pair in on_m.chunks(2) {
            assert_eq!(pair[0]["kind"], "mutex_lock", "{}", pair[0]);
            assert_eq!(pair[1]["kind"], "mutex_unlock", "{}", pair[1]);
            assert_eq!(
                pair[0]["thread"], pair[1]["thread"],
                "{} {}",
                pair[0], pair[1]
            );
        }
        // Named at the program's own line, through the inlined frames.
        assert!(
            on_m[0]["site"]
                .as_str()
                .unwrap()
                .contains("record_rust_mutex.rs:"),
            "{}",
            on_m[0]
        );
    }
    let threads: std::collections::BTreeSet<_> = events
        .iter()
        .map(|e| e["thread"].as_str().unwrap())
        .collect();
    assert!(threads.contains("1") && threads.contains("4"));
}

/// Rust's `std::sync::Condvar` (futex-based, no pthread call): in process, every
/// `wait` is a `cond_wait_begin` and a `cond_wait` naming its mutex, with the
/// mutex's release and reacquisition inside it recorded as a `pthread_cond_wait`'s
/// (via `cond_wait`), every `notify_one`/`notify_all` a `cond_signal`/
/// `cond_broadcast` — exactly as many as the program made — and the mutex's
/// events, those included, give one holder at a time in its own order. With eBPF
/// alone none of it shows.
fn rust_std_condvar_waits_and_notifies_are_condvar_events(probes: &str) {
    if !have_root(&format!(
        "rust_std_condvar_waits_and_notifies_are_condvar_events ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("rust-condvar-{probes}"));
    let program = build_rust_program("record_rust_condvar");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waits: usize = printed(&out.stdout, "waits").parse().unwrap();
    let events = dump_json(&trace);
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["kind"] == kind).collect() };
    if probes == "ebpf" {
        for kind in [
            "cond_wait_begin",
            "cond_wait",
            "cond_signal",
            "cond_broadcast",
        ] {
            assert_eq!(of(kind).len(), 0, "{kind}");
        }
        return;
    }
    let (signals, broadcasts) = (of("cond_signal"), of("cond_broadcast"));
    assert_eq!((signals.len(), broadcasts.len()), (2000, 1));
    // Each wait noted itself pending and each returned: nothing is left `blocked`.
    assert_eq!(
        of("blocked"),
        Vec::<&Value>::new(),
        "a run that ended blocked nowhere"
    );
    let cv = signals[0]["addr"].clone();
    assert!(signals.iter().chain(&broadcasts).all(|e| e["addr"] == cv));
    let (begins, ends) = (of("cond_wait_begin"), of("cond_wait"));
    assert_eq!((begins.len(), ends.len()), (waits, waits));
    assert!(waits > 0, "the consumers never waited");
    // Each wait names the condvar and its mutex, and each thread's waits end in
    // the order they began.
    let m = begins[0]["mutex"].clone();
    assert!(m.is_string(), "{}", begins[0]);
    assert!(begins
        .iter()
        .chain(&ends)
        .all(|e| e["addr"] == cv && e["mutex"] == m));
    for t in ["1", "2"] {
        let mine: Vec<&str> = events
            .iter()
            .filter(|e| e["thread"] == t)
            .filter_map(|e| match e["kind"].as_str() {
                Some(k @ ("cond_wait_begin" | "cond_wait")) => Some(k),
                _ => None,
            })
            .collect();
        assert!(
            mine.chunks(2)
                .all(|p| p == ["cond_wait_begin", "cond_wait"]),
            "thread {t}: {mine:?}"
        );
    }
    let mut on_m: Vec<&Value> = events
        .iter()
        .filter(|e| {
            matches!(e["kind"].as_str(), Some("mutex_lock" | "mutex_unlock")) && e["addr"] == m
        })
        .collect();
    let in_waits = on_m.iter().filter(|e| e["via"] == "cond_wait").count();
    assert_eq!(in_waits, 2 * waits);
    on_m.sort_by_key(|e| e["seq"].as_u64().unwrap());
    let mut holder: Option<&Value> = None;
    for e in on_m {
        if e["kind"] == "mutex_lock" {
            assert!(holder.replace(&e["thread"]).is_none(), "two holders at {e}");
        } else {
            assert_eq!(
                holder.take(),
                Some(&e["thread"]),
                "unlock by a non-holder: {e}"
            );
        }
    }
    // Named at the program's own lines.
    assert!(
        begins[0]["site"]
            .as_str()
            .unwrap()
            .contains("record_rust_condvar.rs:"),
        "{}",
        begins[0]
    );
}

/// Recording Rust locks through jump patches changes nothing the program
/// computes: the registers it keeps across inlined lock operations (floating
/// point in `xmm`, integers in general registers) come back as they were, and a
/// recorded run prints what a native run prints, with every operation recorded.
#[test]
fn rust_lock_trampolines_preserve_the_programs_registers() {
    if !have_root("rust_lock_trampolines_preserve_the_programs_registers") {
        return;
    }
    let dir = scratch("rust-lock-registers");
    let program = build_rust_program("rust_lock_registers");
    let native = Command::new(&program).output().unwrap();
    assert!(native.status.success());
    let trace = dir.join("t.ordo");
    let out = record_probes("inproc", &trace, &program, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&native.stdout)
    );
    let locks = dump_json(&trace)
        .iter()
        .filter(|e| e["kind"] == "mutex_lock" && e["object"] == "rust_lock_registers::SHARED")
        .count();
    assert_eq!(locks, 60_001);
}

/// Where the per-syscall tracepoints cannot be attached, the raw `sys_enter`/
/// `sys_exit` ones see the same futex calls and thread starts (and say so).
/// On this kernel (multi-uprobe links since 6.6) the eBPF path attaches its
/// uprobes as one link per program and file, never site by site (the fallback
/// whose detach takes ~90 ms a site): the probes loaded ahead of the target
/// still relocate the multi-link programs against every map, the ring buffer
/// included, which is mapped before the uprobes are attached.
#[test]
fn the_ebpf_path_attaches_uprobes_as_multi_links() {
    if !have_root("the_ebpf_path_attaches_uprobes_as_multi_links") {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if (major, minor) < (6, 6) {
        eprintln!("skipping: kernel {release} has no multi-uprobe links");
        return;
    }
    let dir = scratch("multi-uprobe");
    let trace = dir.join("t.ordo");
    let out = Command::new(ordo())
        .args(["record", "-v", "--probes", "ebpf", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(build_program("record_short"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("multi-uprobe links unavailable"),
        "{stderr}"
    );
    let events = dump_json(&trace);
    assert!(events.iter().any(|e| e["kind"] == "mutex_lock"), "{stderr}");
}

#[test]
fn raw_syscall_tracepoints_are_a_working_fallback() {
    if !have_root("raw_syscall_tracepoints_are_a_working_fallback") {
        return;
    }
    let dir = scratch("rust-raw-syscalls");
    let program = build_rust_program("record_rust_mutex");
    let trace = dir.join("t.ordo");
    let out = Command::new(ordo())
        .env("ORDO_SYSCALL_PROBES", "raw")
        // The kernel side records the futex calls (in process, the agent does).
        .args([
            "record",
            "--probes",
            "ebpf",
            "-o",
            trace.to_str().unwrap(),
            "--",
        ])
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("per-syscall tracepoints unavailable"),
        "{stderr}"
    );
    let events = dump_json(&trace);
    let count = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
    assert!(count("futex_wait") > 0 && count("futex_wake") > 0);
    assert_eq!(count("thread_start"), count("thread_create"));
    assert!(count("thread_start") >= 3);
}

fn exit_status_passes_through_and_bad_commands_fail_clearly(probes: &str) {
    if !have_root(&format!(
        "exit_status_passes_through_and_bad_commands_fail_clearly ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("exit-{probes}"));
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    let out = record_probes(probes, &trace, &program, &["exit", "7"]);
    assert_eq!(out.status.code(), Some(7));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&trace).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let out = run_ordo(&[
        "record",
        "-o",
        dir.join("x.ordo").to_str().unwrap(),
        "--",
        "/nonexistent/prog",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/prog") && err.lines().count() == 1,
        "{err}"
    );

    let not_exec = dir.join("plain.txt");
    std::fs::write(&not_exec, "hello").unwrap();
    let out = run_ordo(&["record", "--", not_exec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not executable"));

    let out = run_ordo(&["record", "--buffer-size", "1000", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("power of two"));
}

#[test]
fn tiny_buffer_counts_drops_instead_of_losing_them_silently() {
    if !have_root("tiny_buffer_counts_drops_instead_of_losing_them_silently") {
        return;
    }
    let dir = scratch("drops");
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    // The eBPF ring buffer is what overflows: the pthread calls must go through it.
    let rec = Command::new(ordo())
        .args(["record", "--probes", "ebpf", "--buffer-size", "4K", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .args(["contention", "4", "20000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The drain keeps up even with 4 KiB most of the time; stopping the recorder
    // (not the program) for a while guarantees the buffer overflows.
    wait_for_child(rec.id(), "record_sync");
    // SAFETY: signalling the recorder we started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: as above.
    unsafe { libc::kill(rec.id() as i32, libc::SIGCONT) };
    let out = rec.wait_with_output().unwrap();
    assert!(out.status.success());
    let s = stats(&trace);
    let lost = s["lost"].as_u64().unwrap();
    let events = s["events"].as_u64().unwrap();
    // Every event is either in the trace or counted as lost.
    assert!(lost > 0, "a 4 KiB buffer should overflow under this load");
    assert!(events + lost >= 160_000, "events {events} + lost {lost}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{lost} dropped")));
}

#[test]
fn attach_to_a_running_process() {
    if !have_root("attach_to_a_running_process") {
        return;
    }
    let dir = scratch("attach");
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    // Short: in process, two threads contending record millions of events a second.
    record_running_process(&program, &["timed", "2", "60000"], "0.2", &trace);
    let s = stats(&trace);
    assert!(
        s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0) > 100,
        "{s}"
    );
    assert!(s["threads"].as_u64().unwrap() >= 2);
}

fn interrupted_recordings_are_readable(probes: &str) {
    if !have_root("interrupted_recordings_are_readable") {
        return;
    }
    let dir = scratch(&format!("interrupt-{probes}"));
    let program = build_program("record_sync");
    // SIGINT to ordo (not the program): the recording still ends with a footer.
    let trace = dir.join("int.ordo");
    let mut rec = start_long_recording(&trace, &program, probes);
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    std::thread::sleep(std::time::Duration::from_millis(100));
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let _ = rec.wait();
    let out = run_ordo(&["dump", "--stats", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("cut short"),
        "a finished trace has a footer"
    );

    // SIGKILL of the recorder: the trace reads back up to its last complete chunk.
    let trace = dir.join("kill.ordo");
    let mut rec = spawn_long_recording(&trace, &program, probes);
    // Its own program only (the other path's test may run the same command).
    let target = wait_for_child(rec.id(), "record_sync");
    wait_for_events(&trace);
    let _ = rec.kill();
    let _ = rec.wait();
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: killing the program this test started (orphaned by the SIGKILL).
    unsafe { libc::kill(target as i32, libc::SIGKILL) };
    let mut out = run_ordo(&["dump", "--stats", "--json", trace.to_str().unwrap()]);
    if !out.status.success() {
        // Killed in the middle of writing a chunk: strict reading names the offset,
        // salvage reads the complete chunks.
        assert!(String::from_utf8_lossy(&out.stderr).contains("at byte"));
        out = run_ordo(&[
            "dump",
            "--stats",
            "--json",
            "--salvage",
            trace.to_str().unwrap(),
        ]);
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cut short")
            || String::from_utf8_lossy(&out.stderr).contains("at byte")
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The pthread calls recorded before the kill, not only the kernel's thread
    // events: in process, what `--keep-trace-current` is for.
    assert!(s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0) > 0, "{s}");
}

#[test]
fn bad_traces_get_one_line_errors_with_offsets() {
    let dir = scratch("badtrace");
    let missing = dir.join("missing.ordo");
    let out = run_ordo(&["dump", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing.ordo") && err.contains("at byte 0") && err.lines().count() == 1,
        "{err}"
    );

    let garbage = dir.join("garbage.ordo");
    std::fs::write(&garbage, b"this is not a trace at all").unwrap();
    let out = run_ordo(&["dump", "--json", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad magic"));

    // A real trace, cut in the middle of a record.
    use ordo_trace_for_tests::*;
    let good = dir.join("good.ordo");
    write_small_trace(&good);
    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.join("cut.ordo");
    std::fs::write(&cut, &bytes[..bytes.len() - 30]).unwrap();
    let out = run_ordo(&["dump", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.ordo: at byte") && err.contains("truncated"),
        "{err}"
    );
    // Corrupt a byte inside the chunk.
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x5a;
    let corrupt = dir.join("corrupt.ordo");
    std::fs::write(&corrupt, &bad).unwrap();
    let out = run_ordo(&["dump", corrupt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at byte"));
}

/// Writes a small valid trace with the trace library, for the bad-input tests.
mod ordo_trace_for_tests {
    use ordo_trace::schema::{Footer, Header, ThreadRecord};
    use ordo_trace::{Event, Kind, TraceWriter, Via};
    use std::path::Path;

    pub fn write_small_trace(path: &Path) {
        let events: Vec<Event> = (0..2000u64)
            .map(|i| Event {
                ts_ns: 1000 + i,
                tid: 10 + (i % 2) as u32,
                thread: 0,
                kind: if i % 2 == 0 {
                    Kind::MutexLock
                } else {
                    Kind::MutexUnlock
                },
                via: Via::Plain,
                addr: 0x1000,
                addr2: 0,
                site: 0,
                seq: i,
                result: 0,
                value: 0,
                size: 0,
            })
            .collect();
        let threads = [
            ThreadRecord {
                tid: 10,
                logical: vec![],
                name: "main".into(),
                parent_tid: 0,
            },
            ThreadRecord {
                tid: 11,
                logical: vec![1],
                name: "w".into(),
                parent_tid: 10,
            },
        ];
        let mut w = TraceWriter::create(path, &Header::default()).unwrap();
        w.write_chunk(&events[..1000], &threads, &[], 0).unwrap();
        w.write_chunk(&events[1000..], &[], &[], 0).unwrap();
        w.finish(Footer::default()).unwrap();
    }
}

#[test]
fn without_privileges_the_error_says_which_are_needed() {
    if !have_root("without_privileges_the_error_says_which_are_needed") {
        return;
    }
    // Drop to an unprivileged user with no capabilities.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(ordo())
        .args(["record", "-o", "/tmp/ordo-unprivileged.ordo", "--", "true"])
        .output()
        .expect("run setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("root") && err.contains("CAP_BPF") && err.contains("CAP_PERFMON"),
        "{err}"
    );
}

/// Waits until a recording in progress has written event chunks. Attaching can take
/// seconds when other recordings' probes are being detached (the kernel serializes
/// uprobe registration changes), so a fixed delay is not enough.
fn wait_for_events(trace: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(trace).map(|m| m.len()).unwrap_or(0) < 4096 {
        assert!(
            std::time::Instant::now() < deadline,
            "no events written to {} in 60 s",
            trace.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
}

/// Starts `ordo record` of a long contention run and returns once it has written
/// event chunks.
fn start_long_recording(
    trace: &std::path::Path,
    program: &std::path::Path,
    probes: &str,
) -> std::process::Child {
    let rec = spawn_long_recording(trace, program, probes);
    wait_for_events(trace);
    rec
}

/// Starts recording a condvar ping-pong that goes on until it is killed, without
/// waiting for anything. The recording must still be going when the test signals
/// it: a run that could end by itself (300 000 contended iterations) raced the
/// test on a loaded machine, where the idle-priority converter may write the
/// trace's first chunk only once the program has ended. Ping-pong rather than an
/// uncontended loop: a loop makes ~8 M events a second in process, which the debug
/// build's converter then takes ~10 s to finish.
fn spawn_long_recording(
    trace: &std::path::Path,
    program: &std::path::Path,
    probes: &str,
) -> std::process::Child {
    // In process, by default the converter waits for the program's end and so
    // writes nothing until then; converting alongside, at idle priority, it may
    // still write nothing for a minute on a loaded machine (CI once waited past
    // 60 s). These tests interrupt and kill a recording whose trace has chunks
    // already, which `--keep-trace-current` (converting live, at normal
    // priority) promises whatever the load. (With eBPF it changes nothing.)
    Command::new(ordo())
        .args(["record", "--keep-trace-current"])
        .args(probe_args(probes))
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(["pingpong", "100000000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `parent` has a child process running `comm` (the launched program
/// has exec'd, so its probes are attached and it was released).
fn untraced(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.split_whitespace().eq(["TracerPid:", "0"]))
    })
}

fn wait_for_child(parent: u32, comm: &str) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
            else {
                continue;
            };
            let ppid: u32 = rest
                .split(' ')
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            // The launcher holds a new program at its entry point (traced) while it
            // reads its modules: wait until it runs on its own.
            if ppid == parent && name == comm && untraced(pid) {
                return pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{parent} started no {comm} in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn attaching_is_atomic_no_release_before_the_first_acquire() {
    if !have_root("attaching_is_atomic_no_release_before_the_first_acquire") {
        return;
    }
    let dir = scratch("atomic_attach");
    let program = build_program("record_sync");
    let trace = dir.join("t.ordo");
    // Four threads lock and unlock one mutex as fast as they can. The kernel
    // path's switch (in process, the target is stopped while the slots are
    // redirected: tests/attach_in_process.rs).
    record_running_process_with(&program, &["timed", "4", "60000"], "1", &trace, "ebpf");
    let dump = run_ordo(&["dump", "--json", trace.to_str().unwrap()]);
    assert!(dump.status.success());
    // Per thread and mutex: a thread may be inside its critical section when
    // recording starts (one unlock before its first lock), never more. With unlock
    // probes live before lock probes, every thread showed thousands.
    let mut unlocks_before_lock: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut locked: std::collections::HashSet<(String, String)> = Default::default();
    let mut locks = 0;
    for line in String::from_utf8_lossy(&dump.stdout).lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let key = (
            e["thread"].as_str().unwrap().to_string(),
            e["addr"].as_str().unwrap_or("").to_string(),
        );
        match e["kind"].as_str().unwrap() {
            "mutex_lock" => {
                locks += 1;
                locked.insert(key);
            }
            "mutex_unlock" if !locked.contains(&key) => {
                *unlocks_before_lock.entry(key).or_default() += 1
            }
            _ => {}
        }
    }
    assert!(locks > 100, "only {locks} locks recorded");
    for (key, n) in &unlocks_before_lock {
        assert!(
            *n <= 1,
            "{key:?}: {n} unlocks before the thread's first lock"
        );
    }
}

fn signals_to_a_launched_recording_reach_the_program_and_finish_the_trace(probes: &str) {
    if !have_root("signals_to_a_launched_recording_reach_the_program_and_finish_the_trace") {
        return;
    }
    let dir = scratch(&format!("signals_launch-{probes}"));
    // In process (the default) and with eBPF uprobes.
    for (sig, name, probes) in [
        (libc::SIGTERM, "SIGTERM", "auto"),
        (libc::SIGINT, "SIGINT", "ebpf"),
        (libc::SIGHUP, "SIGHUP", "auto"),
    ] {
        let trace = dir.join(format!("{name}.ordo"));
        let rec = Command::new(ordo())
            .arg("record")
            .args(probe_args(probes))
            .arg("-o")
            .arg(&trace)
            .args(["--", "sleep", "30"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_child(rec.id(), "sleep");
        // SAFETY: signalling the recorder we started.
        unsafe { libc::kill(rec.id() as i32, sig) };
        let out = rec.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("killed by signal {sig} ({name})")),
            "{name}: {stderr}"
        );
        let s = stats(&trace);
        assert!(s["events"].as_u64().unwrap() > 0, "{name}: {s}");
    }
}

fn a_second_signal_ends_the_recording_at_once(probes: &str) {
    if !have_root("a_second_signal_ends_the_recording_at_once") {
        return;
    }
    let dir = scratch(&format!("signals_twice-{probes}"));
    let trace = dir.join("t.ordo");
    // A program that ignores SIGTERM: the forwarded signal does not end it.
    let rec = Command::new(ordo())
        .arg("record")
        .args(probe_args(probes))
        .arg("-o")
        .arg(&trace)
        .args([
            "--",
            "sh",
            "-c",
            "trap '' TERM; while :; do sleep 0.1; done",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sh = wait_for_child(rec.id(), "sh");
    // Only once the shell has run its `trap` (the process may still be starting:
    // loading, the in-process agent's start-up) does it ignore SIGTERM.
    let ignores_term = || {
        std::fs::read_to_string(format!("/proc/{sh}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigIgn:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ignores_term() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signalling the recorder we started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        std::path::Path::new(&format!("/proc/{sh}")).exists(),
        "the program ignores SIGTERM and is still recorded"
    );
    // SAFETY: as above.
    unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
    let out = rec.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL), "{stderr}");
    assert!(stderr.contains("killed by signal 9 (SIGKILL)"), "{stderr}");
    let s = stats(&trace);
    assert!(s["events"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn a_signal_to_an_attached_recording_detaches_and_leaves_the_target_running() {
    if !have_root("a_signal_to_an_attached_recording_detaches_and_leaves_the_target_running") {
        return;
    }
    let dir = scratch("signals_attach");
    let program = build_program("attach_target");
    // In process (the default) and with eBPF uprobes.
    for (sig, name, probes) in [
        (libc::SIGTERM, "SIGTERM", "auto"),
        (libc::SIGINT, "SIGINT", "ebpf"),
        (libc::SIGHUP, "SIGHUP", "auto"),
    ] {
        // Runs until its stdin closes (when the test kills it): two workers
        // taking a lock every ~50 µs, a thread in pthread_cond_wait.
        let mut target = Command::new(&program)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let trace = dir.join(format!("{name}.ordo"));
        let mut rec = Command::new(ordo())
            .args([
                "record",
                "--probes",
                probes,
                "--pid",
                &target.id().to_string(),
                "-o",
            ])
            .arg(&trace)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Recording once it says so (not once the trace grows: on a busy machine
        // an in-process recording converts only when the program ends or a CPU is
        // spare), then long enough for the workers' locks to be recorded.
        let mut said = std::io::BufReader::new(rec.stderr.take().unwrap());
        let mut stderr = String::new();
        while !stderr.contains("Ctrl-C to stop") {
            let n = std::io::BufRead::read_line(&mut said, &mut stderr).unwrap();
            assert!(n > 0, "{name}: {stderr}");
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: signalling the recorder we started.
        unsafe { libc::kill(rec.id() as i32, sig) };
        std::io::Read::read_to_string(&mut said, &mut stderr).unwrap();
        let status = rec.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{name}: {stderr}");
        assert!(
            target.try_wait().unwrap().is_none(),
            "{name}: the target keeps running"
        );
        let _ = target.kill();
        let _ = target.wait();
        let s = stats(&trace);
        assert!(
            s["by_kind"]["mutex_lock"].as_u64().unwrap_or(0) > 0,
            "{name}: {s}"
        );
    }
}

/// The acquisition paths the probe placement records from inside glibc (last
/// conditional jump before each return, tail-call fallbacks for robust and PI
/// mutexes): every call recorded exactly once, with its result and its call site.
#[test]
fn every_mutex_type_and_try_variant_is_recorded_once_at_its_call_site() {
    if !have_root("every_mutex_type_and_try_variant_is_recorded_once_at_its_call_site") {
        return;
    }
    let dir = scratch("placement-types");
    let program = build_program("record_placement");
    let trace = dir.join("t.ordo");
    let out = record(&trace, &program, &["types"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        printed(&out.stdout, "results"),
        "0 35 16 0 0 0 0 0 0 16 35 0 0 -1 0"
    );
    let objects: Vec<String> = [
        "errorcheck",
        "recursive",
        "adaptive",
        "robust",
        "pi",
        "rwlock",
        "sem",
    ]
    .iter()
    .map(|k| printed(&out.stdout, k))
    .collect();
    let events: Vec<Value> = dump_json(&trace)
        .into_iter()
        .filter(|e| objects.iter().any(|o| e["addr"] == o.as_str()))
        .collect();
    let seen: Vec<String> = events
        .iter()
        .map(|e| {
            let object = objects
                .iter()
                .position(|o| e["addr"] == o.as_str())
                .unwrap();
            let mut s = format!(
                "{} {}",
                [
                    "errorcheck",
                    "recursive",
                    "adaptive",
                    "robust",
                    "pi",
                    "rwlock",
                    "sem"
                ][object],
                e["kind"].as_str().unwrap()
            );
            if let Some(via) = e.get("via") {
                s += &format!(" {}", via.as_str().unwrap());
            }
            if let Some(r) = e.get("result") {
                s += &format!(" {r}");
            }
            s
        })
        .collect();
    let expected = [
        "errorcheck mutex_lock lock",
        "errorcheck mutex_lock_failed lock 35",
        "errorcheck mutex_lock_failed trylock 16",
        "errorcheck mutex_unlock lock",
        "recursive mutex_lock lock",
        "recursive mutex_lock trylock",
        "recursive mutex_unlock lock",
        "recursive mutex_unlock lock",
        "adaptive mutex_lock lock",
        "adaptive mutex_unlock lock",
        "robust mutex_lock lock",
        "robust mutex_unlock lock",
        "pi mutex_lock lock",
        "pi mutex_unlock lock",
        "rwlock rwlock_wrlock lock",
        "rwlock rwlock_lock_failed trylock 16",
        "rwlock rwlock_lock_failed lock 35",
        "rwlock rwlock_unlock",
        "rwlock rwlock_wrlock trylock",
        "rwlock rwlock_unlock",
        "sem sem_wait",
        "sem sem_wait_failed -1",
        "sem sem_post",
        "sem sem_wait",
    ];
    assert_eq!(seen, expected);
    // Each call is attributed to its own line of mode_types, in program order.
    let sites: Vec<&str> = events.iter().map(|e| e["site"].as_str().unwrap()).collect();
    let offsets: Vec<u64> = sites
        .iter()
        .map(|s| {
            // "mode_types (record_placement.c:LINE)"
            let line = s
                .strip_prefix("mode_types (record_placement.c:")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("site {s} is not a line of mode_types"));
            line.parse::<u64>().unwrap()
        })
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "call sites out of program order: {sites:?}"
    );
}

/// A real deadlock: both threads hold one lock and block on the other's. The blocked
/// acquisitions never return, yet `mutex_block` events show who waits for what.
#[test]
fn a_real_deadlock_shows_who_blocks_on_what() {
    if !have_root("a_real_deadlock_shows_who_blocks_on_what") {
        return;
    }
    let dir = scratch("placement-deadlock");
    let program = build_program("record_placement");
    let trace = dir.join("t.ordo");
    // mutex_block comes from the probes inside glibc: the eBPF path.
    let rec = Command::new(ordo())
        .args(["record", "--probes", "ebpf", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .arg("deadlock")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let blocks = |trace: &std::path::Path| -> Vec<Value> {
        let out = run_ordo(&["dump", "--json", "--salvage", trace.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["kind"] == "mutex_block")
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while blocks(&trace).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no two mutex_block events in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Ctrl-C twice: the recorder kills the deadlocked program and finishes the trace.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    std::thread::sleep(std::time::Duration::from_millis(100));
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    let (a, b) = (printed(&out.stdout, "a"), printed(&out.stdout, "b"));
    let events = dump_json(&trace);
    let of = |kind: &str, addr: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == kind && e["addr"] == addr)
            .map(|e| e["thread"].as_str().unwrap().to_string())
            .collect()
    };
    // Thread 1 holds a and blocks on b; thread 2 holds b and blocks on a.
    assert_eq!(of("mutex_lock", &a), ["1"]);
    assert_eq!(of("mutex_lock", &b), ["2"]);
    assert_eq!(of("mutex_block", &b), ["1"]);
    assert_eq!(of("mutex_block", &a), ["2"]);
    for e in events.iter().filter(|e| e["kind"] == "mutex_block") {
        // The `pthread_mutex_lock` that never returns (record_placement.c:74).
        assert_eq!(e["site"], "take (record_placement.c:74)", "{e}");
        assert!(e.get("seq").is_none());
    }
}

/// Starts `program args` (a run long enough to outlast a slow attach; killed after),
/// records it with `ordo record --pid … --duration duration` into `trace`, and
/// checks the recording succeeded.
fn record_running_process(
    program: &std::path::Path,
    args: &[&str],
    duration: &str,
    trace: &std::path::Path,
) {
    record_running_process_with(program, args, duration, trace, "auto");
}

/// As [`record_running_process`], recording with `--probes probes`.
fn record_running_process_with(
    program: &std::path::Path,
    args: &[&str],
    duration: &str,
    trace: &std::path::Path,
    probes: &str,
) {
    let mut target = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let out = run_ordo(&[
        "record",
        "--probes",
        probes,
        "--pid",
        &target.id().to_string(),
        "--duration",
        duration,
        "-o",
        trace.to_str().unwrap(),
    ]);
    let _ = target.kill();
    let _ = target.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_trace_is_never_written_over_the_recorded_program() {
    if !have_root("the_trace_is_never_written_over_the_recorded_program") {
        return;
    }
    let dir = scratch("output_over_program");
    let program = dir.join("prog");
    std::fs::copy("/bin/true", &program).unwrap();
    let before = std::fs::read(&program).unwrap();
    let out = run_ordo(&[
        "record",
        "-o",
        program.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("refusing to overwrite"), "{err}");
    assert_eq!(std::fs::read(&program).unwrap(), before);
}

#[test]
fn an_existing_trace_is_replaced_only_with_force() {
    if !have_root("an_existing_trace_is_replaced_only_with_force") {
        return;
    }
    let dir = scratch("output_exists");
    let trace = dir.join("old.ordo");
    std::fs::write(&trace, b"the only copy of a rare run").unwrap();
    let args = |force: bool| {
        let mut a = vec!["record"];
        if force {
            a.push("--force");
        }
        a.extend(["-o", trace.to_str().unwrap(), "--", "/bin/true"]);
        run_ordo(&a)
    };
    let out = args(false);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("exists (use --force to replace it)"), "{err}");
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        b"the only copy of a rare run"
    );
    // A symlink is refused the same way, and its target is left alone.
    let link = dir.join("link.ordo");
    std::os::unix::fs::symlink(&trace, &link).unwrap();
    let out = run_ordo(&["record", "-o", link.to_str().unwrap(), "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a symlink"));
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        b"the only copy of a rare run"
    );
    let out = args(true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dump_json(&trace).iter().any(|e| e["kind"] == "thread_exit"));
}

/// CAP_BPF and CAP_PERFMON are enough to record (README): a non-root user holding
/// only those two, as ambient capabilities, records a symbolized trace on both
/// paths; without them the error says exactly what is missing.
#[test]
fn cap_bpf_and_cap_perfmon_are_enough_to_record() {
    if !have_root("cap_bpf_and_cap_perfmon_are_enough_to_record") {
        return;
    }
    // `nobody` runs the program and writes its traces in a directory it can reach
    // whatever the checkout's parents allow (a clone under `mktemp -d` is 0700).
    let dir = std::env::temp_dir().join(format!("ordo-test-unprivileged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let program = dir.join("record_short");
    std::fs::copy(build_program("record_short"), &program).unwrap();
    let as_nobody = |caps: &str, probes: &str, trace: &std::path::Path| {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"))
            .arg(ordo())
            .arg("record")
            .args(probe_args(probes))
            .arg("-o")
            .arg(trace)
            .arg("--")
            .arg(&program)
            .output()
            .expect("run setpriv (util-linux)")
    };
    for probes in ["ebpf", "inproc"] {
        let trace = dir.join(format!("{probes}.ordo"));
        let out = as_nobody("+bpf,+perfmon", probes, &trace);
        assert!(
            out.status.success(),
            "{probes}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events = dump_json(&trace);
        let locks = events
            .iter()
            .filter(|e| e["kind"] == "mutex_lock" && e["object"] == "short_lock")
            .count();
        assert_eq!(locks, 2, "{probes}");
    }
    let out = as_nobody("-all", "auto", &dir.join("none.ordo"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("CAP_BPF and CAP_PERFMON"), "{err}");
    // A program behind a directory the user cannot search: said as such, not as
    // a missing file.
    let private = dir.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::copy(&program, private.join("record_short")).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["--inh-caps=+bpf,+perfmon", "--ambient-caps=+bpf,+perfmon"])
        .arg(ordo())
        .args(["record", "-o"])
        .arg(dir.join("private.ordo"))
        .arg("--")
        .arg(private.join("record_short"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("permission denied") && err.contains("private/record_short"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The kernel side numbers each object's events from an LRU table of 262 144
/// counters: a program using more objects evicts counters, and an evicted object
/// used again numbers its events from 0 anew. That must not pass silently: the
/// summary says so, and only then.
#[test]
fn more_objects_than_the_kernels_sequence_table_holds_are_reported() {
    if !have_root("more_objects_than_the_kernels_sequence_table_holds_are_reported") {
        return;
    }
    let program = build_program("record_many_objects");
    let dir = scratch("many_objects");
    let warning = "more than their sequence table holds (262144)";
    for (objects, warned) in [("1000", false), ("300000", true)] {
        let trace = dir.join(format!("{objects}.ordo"));
        let out = record_probes("ebpf", &trace, &program, &[objects]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{objects} objects: {stderr}");
        assert_eq!(
            stderr.contains(warning),
            warned,
            "{objects} objects: {stderr}"
        );
        let n: u64 = objects.parse().unwrap();
        let locks = dump_stats(&trace)["by_kind"]["mutex_lock"]
            .as_u64()
            .unwrap_or(0);
        // The program's n + 1, and on this path glibc's own (stdio's lock).
        assert!(locks > n, "{objects} objects: {locks} mutex_lock events");
    }
}

/// The tracepoints, raw or not, that the BPF links of process `pid` attach
/// programs to, by the kernel's own account: each link descriptor's
/// `/proc/PID/fdinfo` entry names its `tp_name`.
fn bpf_tracepoints_of(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return names;
    };
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let tracepoint = match field("link_type") {
            Some("raw_tracepoint") => true,
            Some("perf") => field("event_type") == Some("tracepoint"),
            _ => false,
        };
        if let (true, Some(name)) = (tracepoint, field("tp_name")) {
            names.push(name.to_string());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Recording in process attaches no syscall tracepoint: any one of them sends
/// every syscall of every task on the machine through the kernel's tracing path
/// (memcached and its load generator paid ~15 % of their throughput for it).
/// Thread creation, execs and exits come from `task_newtask` and the scheduler's
/// raw tracepoints; the eBPF path adds only the futex syscall's two. Checked in
/// the kernel's own account of what the recorder's programs are attached to,
/// while it records.
#[test]
fn recording_in_process_attaches_no_syscall_tracepoint() {
    if !have_root("recording_in_process_attaches_no_syscall_tracepoint") {
        return;
    }
    let dir = scratch("no-syscall-tracepoints");
    for (probes, syscalls) in [
        ("inproc", vec![]),
        ("ebpf", vec!["sys_enter_futex", "sys_exit_futex"]),
    ] {
        let trace = dir.join(format!("{probes}.ordo"));
        // `cat` waits for its input while the recording runs.
        let mut recording = Command::new(ordo())
            .args(["record", "--probes", probes, "--force", "-o"])
            .arg(&trace)
            .args(["--", "cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        // `sched_process_exec` is attached last, once the others are.
        let mut attached = bpf_tracepoints_of(recording.id());
        while !attached.iter().any(|n| n == "sched_process_exec")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
            attached = bpf_tracepoints_of(recording.id());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        attached = bpf_tracepoints_of(recording.id());
        drop(recording.stdin.take());
        let out = recording.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{probes}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for wanted in ["sched_process_exit", "sched_process_exec", "task_newtask"] {
            assert!(
                attached.iter().any(|n| n == wanted),
                "{probes}: {wanted} is not attached: {attached:?}"
            );
        }
        let traced: Vec<&str> = attached
            .iter()
            .map(String::as_str)
            .filter(|n| n.starts_with("sys_"))
            .collect();
        assert_eq!(traced, syscalls, "{probes}: {attached:?}");
    }
}
