//! `ordo replay` makes each bundled concurrency bug show: every program hides a bug a
//! plain run almost never hits, and its hand-written schedule (next to the program,
//! `tests/programs/replay_NAME.sched`) must make it show in at least 19 of 20 replays.
//! Replays need no privileges (the agent is preloaded; nothing is loaded into the kernel).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{build_program, replay_json};

fn schedule(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(format!("{name}.sched"))
}

fn reproduces(name: &str, expect_reason: &str) {
    let program = build_program(name);
    let sched = schedule(name);
    let mut shown = 0;
    let mut last = serde_json::Value::Null;
    for _ in 0..20 {
        let (code, json) = replay_json(&["--timeout", "20"], &sched, &program);
        if json["verdict"] == "reproduced" {
            assert_eq!(code, 1, "ordo replay exits 1 when the bug showed: {json}");
            assert!(
                json["reason"].as_str().unwrap().contains(expect_reason),
                "{json}"
            );
            // The gates held the order: nothing the schedule named happened out of order.
            assert_eq!(json["schedule_held"], true, "{json}");
            assert!(json["violated"].as_array().unwrap().is_empty(), "{json}");
            shown += 1;
        }
        last = json;
    }
    assert!(
        shown >= 19,
        "{name}: the bug showed in {shown} of 20 replays; last outcome: {last}"
    );
}

#[test]
fn order_violation_reproduces() {
    reproduces("replay_order", "SIGABRT");
}

#[test]
fn atomicity_violation_reproduces() {
    reproduces("replay_atomicity", "exit code 1");
}

#[test]
fn ab_ba_deadlock_reproduces() {
    reproduces("replay_deadlock", "deadlock");
}

#[test]
fn lost_wakeup_reproduces() {
    reproduces("replay_lost_wakeup", "exit code 1");
}

#[test]
fn use_after_free_reproduces() {
    reproduces("replay_use_after_free", "SIGABRT");
}

/// How often each bug shows without a schedule. Timing-dependent (machine load), so
/// not part of the normal run: `cargo test --test end_to_end replay_bugs:: -- --ignored`.
#[test]
#[ignore]
fn plain_runs_rarely_show_the_bugs() {
    for name in [
        "replay_order",
        "replay_atomicity",
        "replay_deadlock",
        "replay_lost_wakeup",
        "replay_use_after_free",
    ] {
        let program = build_program(name);
        let runs = 100;
        let mut failed = 0;
        for _ in 0..runs {
            let status = Command::new("timeout")
                .arg("5")
                .arg(&program)
                .output()
                .expect("run")
                .status;
            if !status.success() {
                failed += 1;
            }
        }
        eprintln!("{name}: bug showed in {failed} of {runs} plain runs");
        assert!(
            failed * 20 < runs,
            "{name}: {failed} of {runs} plain runs failed (must be under 5 %)"
        );
    }
}
