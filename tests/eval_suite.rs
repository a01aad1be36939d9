//! The evaluation suite of issue 10 (`tests/eval/`, listed in `tests/eval/suite.json`)
//! stays usable: every program builds without warnings, the correctly synchronized
//! controls pass plain runs, each bug's reference schedule reproduces it under
//! `ordo replay`, and `cargo xtask eval --help` works. The evaluation itself
//! (`cargo xtask eval`, every hunt strategy on every program over 10 seeds) is a long
//! task like the benchmarks, not part of the tests.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn eval_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eval")
}

fn programs() -> Vec<Value> {
    let text = std::fs::read_to_string(eval_dir().join("suite.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).expect("tests/eval/suite.json is JSON");
    doc["programs"]
        .as_array()
        .expect("a `programs` array")
        .clone()
}

/// The suite's binaries, compiled once per test process (tests run in parallel).
fn build(program: &Value) -> PathBuf {
    static BUILT: std::sync::OnceLock<Vec<(String, PathBuf)>> = std::sync::OnceLock::new();
    let name = program["name"].as_str().unwrap();
    let built = BUILT.get_or_init(|| {
        programs()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_string(), compile(p)))
            .collect()
    });
    built.iter().find(|(n, _)| n == name).unwrap().1.clone()
}

/// Compiles one suite program the way `cargo xtask eval` does (warnings are errors).
fn compile(program: &Value) -> PathBuf {
    let name = program["name"].as_str().unwrap();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("eval");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(name);
    let tmp = out_dir.join(format!(".{name}.{}", std::process::id()));
    let src = eval_dir().join(program["source"].as_str().unwrap());
    let result = if src.extension().is_some_and(|e| e == "rs") {
        Command::new("rustc")
            .args(["-O", "-g", "--edition", "2021", "-D", "warnings", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .expect("run rustc")
    } else {
        Command::new("cc")
            .args(["-O1", "-g", "-pthread", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .expect("run the C compiler")
    };
    assert!(
        result.status.success(),
        "{} does not build:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&tmp, &out).unwrap();
    out
}

#[test]
fn suite_has_the_programs_issue_10_asks_for() {
    let programs = programs();
    let bugs = programs.iter().filter(|p| p["control"] != true).count();
    let controls = programs.iter().filter(|p| p["control"] == true).count();
    assert!(bugs >= 20, "only {bugs} bug programs");
    assert!(controls >= 5, "only {controls} controls");
    for p in &programs {
        let name = p["name"].as_str().unwrap();
        for key in ["source", "shape", "needs", "fails"] {
            assert!(p[key].is_string(), "{name}: no `{key}`");
        }
        if p["control"] != true {
            let schedule = p["schedule"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no reference schedule"));
            assert!(
                eval_dir().join(schedule).exists(),
                "{name}: {schedule} is missing"
            );
        }
    }
}

#[test]
fn every_program_builds_and_controls_pass_plain_runs() {
    for p in programs() {
        let binary = build(&p);
        if p["control"] != true {
            continue;
        }
        let expect = p["expect_exit"].as_i64().unwrap_or(0) as i32;
        for run in 0..10 {
            let started = Instant::now();
            let mut child = Command::new(&binary)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    panic!("control {} hung on run {run}", p["name"]);
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            assert_eq!(
                status.code(),
                Some(expect),
                "control {} failed a plain run ({status})",
                p["name"]
            );
        }
    }
}

/// The bugs are reachable by ordering alone — synchronization calls, or for the
/// `plain_*` programs (issue 25) plain memory accesses named by their instruction:
/// each reference schedule makes its program fail the way the manifest says (an
/// abort, a fault, an exit status, or a deadlock the replayer detects). This is
/// what a hunt has to find on its own.
#[test]
fn reference_schedules_reproduce_every_bug() {
    // The `plain_*` schedules gate at program points with debug registers.
    let _registers = common::debug_registers();
    for p in programs().iter().filter(|p| p["control"] != true) {
        let name = p["name"].as_str().unwrap();
        let binary = build(p);
        let schedule = eval_dir().join(p["schedule"].as_str().unwrap());
        let expect = p["expect_exit"].as_i64().unwrap_or(0).to_string();
        let (_, outcome) = common::replay_json(&["--expect-exit", &expect], &schedule, &binary);
        assert_eq!(outcome["verdict"], "reproduced", "{name}: {outcome}");
        match p["fails"].as_str().unwrap() {
            "abort" => assert_eq!(outcome["signal"], 6, "{name} did not abort: {outcome}"),
            "segv" => assert_eq!(outcome["signal"], 11, "{name} did not fault: {outcome}"),
            exit if exit.starts_with("exit ") => assert_eq!(
                outcome["exit_code"].to_string(),
                exit["exit ".len()..],
                "{name} did not exit as expected: {outcome}"
            ),
            "deadlock" => assert!(
                outcome["reason"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("deadlock"),
                "{name} did not deadlock: {outcome}"
            ),
            other => panic!("{name}: unknown failure kind `{other}`"),
        }
    }
}

#[test]
fn xtask_eval_help_works() {
    // A target directory of its own: the outer `cargo test` may hold the
    // workspace's build lock while tests run.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xtask-target");
    let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args([
            "run",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "eval",
            "--help",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo xtask eval --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for option in [
        "--programs",
        "--strategies",
        "--seeds",
        "--budget",
        "--time",
        "--natural",
    ] {
        assert!(
            help.contains(option),
            "--help does not mention {option}:\n{help}"
        );
    }
}
