//! Every trace is symbolized, however short the program: the modules are read
//! before the program can exit (issue 15.6 saw about 1 trace in 45 of a short
//! program come out with raw addresses only). Records a short program many times on
//! each recording path and checks that every trace names its mutex and its sites.

use crate::common;

use common::{build_program, dump_json, have_root, record_probes, scratch};
use std::path::PathBuf;

/// Recordings per path; four run at a time, which also loads the machine the way
/// a parallel test run does.
const RUNS: usize = 200;
const WORKERS: usize = 4;

fn every_short_trace_is_symbolized(probes: &str) {
    let test = format!("every_short_trace_is_symbolized::{probes}");
    if !have_root(&test) {
        return;
    }
    let program = build_program("record_short");
    let dir = scratch(&format!("record_symbols_{probes}"));
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|worker| {
                let (program, dir) = (program.clone(), dir.clone());
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for run in (worker..RUNS).step_by(WORKERS) {
                        let trace: PathBuf = dir.join(format!("short-{run}.ordo"));
                        let out = record_probes(probes, &trace, &program, &[]);
                        assert!(
                            out.status.success(),
                            "run {run}: ordo record failed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        if let Some(why) = unsymbolized(&dump_json(&trace)) {
                            failures.push(format!("run {run} ({}): {why}", trace.display()));
                        } else {
                            let _ = std::fs::remove_file(&trace);
                        }
                    }
                    failures
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {RUNS} traces not symbolized:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Why the trace of `record_short` is not fully symbolized, if it is not.
fn unsymbolized(events: &[serde_json::Value]) -> Option<String> {
    // The dynamic loader takes its own locks (recorded on the eBPF path, with
    // sites in ld.so or libc); the program's four are the rest.
    let in_glibc = |e: &&serde_json::Value| {
        let site = e["site"].as_str().unwrap_or("");
        site.contains("(ld-linux")
            || site.contains("(libc.so")
            || site.contains("ld-linux-x86-64.so.2+")
    };
    let mutex: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "mutex_lock" || e["kind"] == "mutex_unlock")
        .filter(|e| !in_glibc(e))
        .collect();
    if mutex.len() != 4 {
        let sites: Vec<_> = mutex.iter().map(|e| e["site"].to_string()).collect();
        return Some(format!(
            "{} mutex events, expected 4: {}",
            mutex.len(),
            sites.join(", ")
        ));
    }
    for e in mutex {
        if e["object"] != "short_lock" {
            return Some(format!("mutex named {} instead of short_lock", e["object"]));
        }
        let site = e["site"].as_str().unwrap_or("");
        if !site.starts_with("bump (record_short.c:") {
            return Some(format!("site `{site}` is not bump (record_short.c:…)"));
        }
    }
    let create = events.iter().find(|e| e["kind"] == "thread_create");
    match create.and_then(|e| e["site"].as_str()) {
        Some(site) if site.starts_with("main (record_short.c:") => None,
        other => Some(format!("thread_create site {other:?}")),
    }
}

on_both_paths!(every_short_trace_is_symbolized);
