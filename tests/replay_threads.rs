//! `ordo replay` with many threads and thread lifetimes: a `*` successor orders one
//! thread before 1023 others, explicit names work for 1024 threads, a child's
//! `thread_start` is held in the child (its parent goes on), a failed trylock is
//! not held at the gate of the thread's next acquisition, and a held `cond_wait`
//! gives its mutex back so another thread can barge in; `mutex_lock#N` names the
//! same acquisition whether or not a condvar wait came first; `@K` names any of a
//! thread's objects, far past the first 32.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{build_program, have_root, ordo, replay_json, scratch};

fn schedule(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.sched"))
}

fn write_schedule(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn assert_followed(json: &serde_json::Value) {
    assert_eq!(json["schedule_held"], true, "{json}");
    assert!(json["pending"].as_array().unwrap().is_empty(), "{json}");
    assert!(
        json["held_threads"].as_array().unwrap().is_empty(),
        "{json}"
    );
}

#[test]
fn star_orders_the_last_of_1024_threads_before_all_others() {
    let program = build_program("replay_many");
    let started = Instant::now();
    let (code, json) = replay_json(&[], &schedule("replay_many"), &program);
    // The program exits 1 exactly when thread 1024 took the lock first.
    assert_eq!(json["verdict"], "reproduced", "{json}");
    assert_eq!((code, json["exit_code"].as_i64()), (1, Some(1)), "{json}");
    assert_followed(&json);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());

    // Passive mode checks the `*` per thread: a free run lets the threads created
    // before thread 1024 lock first (each is a violation, named by its thread).
    let (code, json) = replay_json(&["--check"], &schedule("replay_many"), &program);
    assert_eq!(
        (code, json["verdict"].as_str()),
        (0, Some("passed")),
        "{json}"
    );
    assert_eq!(json["schedule_held"], false, "{json}");
    let violated = json["violated"].as_array().unwrap();
    assert!(
        violated[0].as_str().unwrap().contains(
            ":mutex_lock(line_lock)#1 (from `1024:mutex_unlock(line_lock)#1 -> *:mutex_lock(line_lock)#1`)"
        ),
        "{json}"
    );

    // The same for the first thread: it is excluded from its own `*`.
    let dir = scratch("star_first_thread");
    let first = write_schedule(
        &dir,
        "first.sched",
        "1:mutex_unlock(line_lock)#1 -> *:mutex_lock(line_lock)#1\n",
    );
    for _ in 0..3 {
        let (code, json) = replay_json(&[], &first, &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (0, Some("passed")),
            "{json}"
        );
        assert_followed(&json);
    }
}

#[test]
fn explicit_names_for_1024_threads() {
    let program = build_program("replay_many");
    let dir = scratch("explicit_1024");
    let text: String = (1..1024)
        .map(|t| format!("1024:mutex_unlock(line_lock)#1 -> {t}:mutex_lock(line_lock)#1\n"))
        .collect();
    let path = write_schedule(&dir, "explicit.sched", &text);
    let started = Instant::now();
    let (code, json) = replay_json(&[], &path, &program);
    assert_eq!(
        (code, json["verdict"].as_str()),
        (1, Some("reproduced")),
        "{}",
        json["reason"]
    );
    assert_followed(&json);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
}

#[test]
fn thread_start_is_held_in_the_child_while_its_parent_goes_on() {
    let program = build_program("replay_start");
    // The worker starts only after main's later critical section: gating it in
    // main (before pthread_create) would make this schedule infeasible.
    for _ in 0..5 {
        let (code, json) = replay_json(&[], &schedule("replay_start"), &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (1, Some("reproduced")),
            "{json}"
        );
        assert_followed(&json);
    }
    // The same through `*`: every thread but main starts after main's unlock.
    let dir = scratch("thread_start_child");
    let star = write_schedule(
        &dir,
        "star.sched",
        "0:mutex_unlock(setting_lock)#1 -> *:thread_start()#1\n",
    );
    for _ in 0..3 {
        let (code, json) = replay_json(&[], &star, &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (1, Some("reproduced")),
            "{json}"
        );
        assert_followed(&json);
    }
    // And the other order, for contrast: the worker reads before main publishes.
    let before = write_schedule(
        &dir,
        "before.sched",
        "1:mutex_unlock(setting_lock)#1 -> 0:mutex_lock(setting_lock)#1\n",
    );
    for _ in 0..5 {
        let (code, json) = replay_json(&[], &before, &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (0, Some("passed")),
            "{json}"
        );
        assert_followed(&json);
    }
}

#[test]
fn a_failed_trylock_is_not_held_for_the_next_acquisition() {
    let program = build_program("replay_trylock");
    // Thread 1 tries the mutex it holds (EBUSY) while its next mutex_lock is gated
    // on thread 2, which needs that mutex: holding the failed try was infeasible.
    // Its second acquisition is a trylock loop whose early successes back out.
    for _ in 0..5 {
        let (code, json) = replay_json(&[], &schedule("replay_trylock"), &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (0, Some("passed")),
            "{json}"
        );
        assert_followed(&json);
    }
}

#[test]
fn a_held_cond_wait_gives_its_mutex_back() {
    let program = build_program("replay_barging");
    // The consumer's reacquisition is held until the late third thread has taken
    // the mutex: holding it with the mutex reacquired made this infeasible.
    for _ in 0..5 {
        let (code, json) = replay_json(&[], &schedule("replay_barging"), &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (1, Some("reproduced")),
            "{json}"
        );
        assert_followed(&json);
    }
}

#[test]
fn occurrence_numbers_do_not_depend_on_condvar_waits() {
    let program = build_program("replay_wait_numbering");
    let dir = scratch("wait_numbering");
    // "wait": the consumer waits before its second lock; "nowait": it does not.
    // Counting the wait's reacquisition as a mutex_lock made `1:mutex_lock(m)#2`
    // that reacquisition in the first case (held with the mutex: infeasible).
    for mode in ["wait", "nowait"] {
        for run in 0..3 {
            let trace = dir.join(format!("{mode}{run}.ordo"));
            let mut args = vec!["replay", "--json", "--timeout", "20"];
            if have_root("occurrence_numbers_do_not_depend_on_condvar_waits") {
                args.extend(["--record", trace.to_str().unwrap()]);
            }
            let out = std::process::Command::new(ordo())
                .args(&args)
                .arg("--schedule")
                .arg(schedule("replay_wait_numbering"))
                .arg("--")
                .arg(&program)
                .arg(mode)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let json: serde_json::Value =
                serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
            assert_eq!(json["verdict"], "reproduced", "{mode}: {json}");
            assert_followed(&json);
        }
    }
}

#[test]
fn at_k_names_a_threads_three_hundredth_mutex() {
    let program = build_program("replay_many_mutexes");
    let dir = scratch("at_k_300");
    // Thread 2's section on its 300th mutex first: the program exits 1.
    let second_first = write_schedule(
        &dir,
        "second.sched",
        "2:mutex_unlock(@300)#1 -> 1:mutex_lock(@300)#1\n",
    );
    // And the other way round, the run passes with the order held.
    let first_first = write_schedule(
        &dir,
        "first.sched",
        "1:mutex_unlock(@300)#1 -> 2:mutex_lock(@300)#1\n",
    );
    for _ in 0..3 {
        let (code, json) = replay_json(&[], &second_first, &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (1, Some("reproduced")),
            "{json}"
        );
        assert_followed(&json);
        let (code, json) = replay_json(&[], &first_first, &program);
        assert_eq!(
            (code, json["verdict"].as_str()),
            (0, Some("passed")),
            "{json}"
        );
        assert_followed(&json);
    }
}
