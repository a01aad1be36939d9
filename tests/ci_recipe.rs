//! The shell step docs/CI.md gives for running `ordo hunt` in CI, run as written:
//! on a buggy and a correct program it fails the step, keeps the schedule, the
//! failing run and the JSON outcomes as artifacts, and says which program did
//! what.

use crate::common;

use std::path::Path;
use std::process::Command;

/// The block between `<!-- ci-recipe -->` and `<!-- /ci-recipe -->` in
/// docs/CI.md, without its code fence.
fn recipe() -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CI.md")).unwrap();
    let start = doc
        .find("<!-- ci-recipe -->")
        .expect("docs/CI.md marks its recipe");
    let end = doc
        .find("<!-- /ci-recipe -->")
        .expect("docs/CI.md ends its recipe");
    doc[start..end]
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_ci_recipe_fails_on_a_bug_and_keeps_what_reproduces_it() {
    if !common::have_root("the_ci_recipe_fails_on_a_bug_and_keeps_what_reproduces_it") {
        return;
    }
    let dir = common::scratch("ci_recipe");
    let _ = std::fs::remove_dir_all(dir.join("ordo-artifacts"));
    let buggy = common::build_program("replay_deadlock");
    let correct = common::build_program("correct_nested_locks");
    let bin_dir = common::ordo().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(recipe())
        .current_dir(&dir)
        .env("PATH", path)
        .env(
            "ORDO_TEST_BINARIES",
            format!("{} {}", buggy.display(), correct.display()),
        )
        .env("ORDO_HUNT_SECONDS", "30")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let artifacts = dir.join("ordo-artifacts");
    assert!(
        stdout.contains("ordo: replay_deadlock: reproduced; schedule ordo-artifacts/replay_deadlock/reproduce.sched"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ordo: correct_nested_locks: nothing found"),
        "{stdout}"
    );
    assert!(artifacts.join("replay_deadlock/reproduce.sched").is_file());
    for name in ["replay_deadlock", "correct_nested_locks"] {
        assert!(artifacts.join(format!("{name}.sarif")).is_file(), "{name}");
    }
    let outcome = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(artifacts.join(format!("{name}.json"))).unwrap();
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    };
    let found = outcome("replay_deadlock");
    assert_eq!(found["reproduced"], true, "{found}");
    assert!(found["replay_command"]
        .as_str()
        .unwrap()
        .starts_with("ordo replay --schedule "));
    assert_eq!(outcome("correct_nested_locks")["reproduced"], false);
    // The failing run's recording is kept for dump/analyze/export.
    let runs: Vec<_> = std::fs::read_dir(artifacts.join("replay_deadlock/runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "ordo"))
        .collect();
    assert!(!runs.is_empty());
}
