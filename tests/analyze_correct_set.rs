//! Correctly synchronized programs produce no finding predicted to be a bug
//! (issue 12, "No false alarms"): a thread pool, a producer/consumer that signals
//! after unlocking, nested locks in one order, striped locks with an all-stripes
//! resize, rwlock readers, and a C++ `condition_variable::wait(lock, pred)`
//! handoff. Each is recorded three times on each recording path; orders worth
//! trying (`order_to_try`) may be proposed, but never a `predicted_bug`.

use crate::common;

use common::{build_program, have_root, record_probes, run_ordo, scratch};

const PROGRAMS: [&str; 6] = [
    "correct_thread_pool",
    "correct_signal_after_unlock",
    "correct_nested_locks",
    "correct_striped",
    "correct_rwlock_readers",
    "correct_cv_predicate",
];

fn correct_programs_have_no_predicted_bug(probes: &str) {
    let test = format!("correct_programs_have_no_predicted_bug::{probes}");
    if !have_root(&test) {
        return;
    }
    let dir = scratch(&format!("correct_set_{probes}"));
    let mut alarms = Vec::new();
    for name in PROGRAMS {
        let program = build_program(name);
        for run in 1..=3 {
            let trace = dir.join(format!("{name}-{run}.ordo"));
            let out = record_probes(probes, &trace, &program, &[]);
            assert!(
                out.status.success(),
                "{name}: the program or its recording failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let out = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{name}: analyze failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for finding in report["findings"].as_array().unwrap() {
                assert!(
                    finding["class"] == "predicted_bug" || finding["class"] == "order_to_try",
                    "{name}: finding without a class: {finding}"
                );
                if finding["class"] == "predicted_bug" {
                    alarms.push(format!("{name} run {run}: {}", finding["message"]));
                }
            }
        }
    }
    assert!(alarms.is_empty(), "false alarms:\n{}", alarms.join("\n"));
}

on_both_paths!(correct_programs_have_no_predicted_bug);
