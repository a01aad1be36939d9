//! End to end: record small C programs with real bugs (and a correct one) with
//! `ordo record`, then `ordo analyze --json` must find each bug — in runs where it
//! did not happen — name the objects and sites, and stay silent on correct code.

use crate::common;

use std::path::PathBuf;

use serde_json::Value;

fn record_and_analyze(program: &str) -> Option<Value> {
    if !common::have_root(program) {
        return None;
    }
    let binary = common::build_program(program);
    let dir = common::scratch(program);
    let trace: PathBuf = dir.join("run.ordo");
    let rec = common::record(&trace, &binary, &[]);
    assert!(
        rec.status.success(),
        "ordo record: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let out = common::run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "ordo analyze: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in doc["findings"].as_array().unwrap() {
        let schedule = f["schedule"].as_str().unwrap();
        ordo_analysis::schedule::Schedule::parse(schedule)
            .unwrap_or_else(|e| panic!("{e}: {schedule}"));
    }
    Some(doc)
}

fn first<'a>(doc: &'a Value, kind: &str) -> &'a Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} finding in {doc:#}"))
}

#[test]
fn predicts_the_ab_ba_deadlock_of_a_run_that_did_not_deadlock() {
    let Some(doc) = record_and_analyze("analyze_deadlock") else {
        return;
    };
    let d = first(&doc, "deadlock");
    assert_eq!(d["threads"], serde_json::json!(["1", "2"]));
    let names: Vec<_> = d["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lock_a", "lock_b"]);
    assert_eq!(
        d["schedule"],
        "1:mutex_lock(lock_a)#1 && 2:mutex_lock(lock_b)#1 -> 1:mutex_lock(lock_b)#1\n\
         1:mutex_lock(lock_a)#1 && 2:mutex_lock(lock_b)#1 -> 2:mutex_lock(lock_a)#1\n"
    );
    let sites: Vec<_> = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        sites[0].starts_with("transfer_a_to_b (analyze_deadlock.c:"),
        "{sites:?}"
    );
    assert!(
        sites[2].starts_with("transfer_b_to_a (analyze_deadlock.c:"),
        "{sites:?}"
    );
}

#[test]
fn predicts_the_lost_wakeup_of_an_unlocked_signal() {
    let Some(doc) = record_and_analyze("analyze_lost_wakeup") else {
        return;
    };
    let l = first(&doc, "lost_wakeup");
    assert_eq!(
        l["schedule"],
        "2:cond_signal(ready_cond)#1 -> 1:cond_wait_begin(ready_cond)#1\n"
    );
    assert_eq!(l["objects"][0]["name"], "ready_cond");
}

#[test]
fn finds_the_check_then_act_split() {
    let Some(doc) = record_and_analyze("analyze_atomicity") else {
        return;
    };
    let a = first(&doc, "atomicity");
    assert_eq!(
        a["schedule"],
        "1:mutex_lock(account_lock)#1 -> 2:mutex_lock(account_lock)#1\n\
         2:mutex_lock(account_lock)#1 -> 1:mutex_lock(account_lock)#2\n"
    );
    let sites: Vec<_> = a["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        sites[0].starts_with("can_withdraw (") && sites[1].starts_with("debit ("),
        "{sites:?}"
    );
}

#[test]
fn correct_producer_consumer_has_no_bug_findings() {
    let Some(doc) = record_and_analyze("analyze_correct") else {
        return;
    };
    // Orders worth trying (reorders, chains, overtakes…) depend on the run's
    // interleaving; nothing may be predicted to be a bug.
    let bugs: Vec<_> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["class"] != "order_to_try")
        .collect();
    assert!(bugs.is_empty(), "{doc:#}");
    assert!(doc["stats"]["critical_sections"].as_u64().unwrap() >= 400);
}
