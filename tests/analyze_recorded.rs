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

/// The bundled demo (demo/bank.c), built in `dir`.
fn demo_program(dir: &std::path::Path) -> std::path::PathBuf {
    let demo = dir.join("bank");
    let status = std::process::Command::new("cc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&demo)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("demo/bank.c"))
        .status()
        .unwrap();
    assert!(status.success());
    demo
}

/// `ordo export --perfetto --force EXTRA TRACE -o OUT` (it must succeed), decoded.
fn export_perfetto(
    trace: &std::path::Path,
    out_file: &std::path::Path,
    extra: &[&str],
) -> ordo_analysis::perfetto::Trace {
    let mut args = vec!["export", "--perfetto", "--force"];
    args.extend_from_slice(extra);
    args.extend([trace.to_str().unwrap(), "-o", out_file.to_str().unwrap()]);
    let out = common::run_ordo(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ordo_analysis::perfetto::Trace::from_bytes(&std::fs::read(out_file).unwrap()).unwrap()
}

/// The flow ids a Perfetto export starts that no event terminates (arrows to
/// nowhere).
fn dangling_flows(pftrace: &std::path::Path) -> usize {
    let decoded =
        ordo_analysis::perfetto::Trace::from_bytes(&std::fs::read(pftrace).unwrap()).unwrap();
    let events: Vec<_> = decoded
        .packet
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .collect();
    let ended: std::collections::HashSet<u64> = events
        .iter()
        .flat_map(|e| e.terminating_flow_ids.iter().copied())
        .collect();
    events
        .iter()
        .flat_map(|e| e.flow_ids.iter())
        .filter(|f| !ended.contains(f))
        .count()
}

/// Issue 28: every flow of a Perfetto export ends — on the bundled demo and on a
/// lock-heavy recording (a thread pool) — and the flows are there.
#[test]
fn perfetto_flows_of_recorded_runs_all_terminate() {
    if !common::have_root("perfetto_flows_of_recorded_runs_all_terminate") {
        return;
    }
    let dir = common::scratch("perfetto_flows");
    let demo = demo_program(&dir);
    for (name, program) in [
        ("bank", demo),
        ("pool", common::build_program("correct_thread_pool")),
    ] {
        let trace = dir.join(format!("{name}.ordo"));
        common::record(&trace, &program, &[]);
        let out_file = dir.join(format!("{name}.pftrace"));
        let decoded = export_perfetto(&trace, &out_file, &[]);
        assert_eq!(dangling_flows(&out_file), 0, "{name}");
        let flows: usize = decoded
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .map(|e| e.terminating_flow_ids.len())
            .sum();
        assert!(flows >= 4, "{name}: {flows} flows");
    }
}

/// Issue 28: marked points and watched accesses are instants on their threads'
/// tracks; `ordo export --perfetto --finding` writes one finding's interleaving:
/// the tracks of its threads only, their events from its first to its last, its
/// own events marked `★`, every arrow ending; a finding that does not exist is a
/// one-line error naming the option.
#[test]
fn perfetto_export_of_one_finding() {
    if !common::have_root("perfetto_export_of_one_finding") {
        return;
    }
    let dir = common::scratch("perfetto_finding");
    let trace = dir.join("lost.ordo");
    let program = common::build_program("hunt_pct_lost_update");
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/hunt_pct_lost_update.c");
    let line = std::fs::read_to_string(&source)
        .unwrap()
        .lines()
        .position(|l| l.contains("long seen = counter;"))
        .unwrap()
        + 1;
    // A watched variable and a marked line: instants on their threads' tracks.
    let out = std::process::Command::new(common::ordo())
        .args(["record", "--force", "--watch", "counter", "--mark"])
        .arg(format!("hunt_pct_lost_update.c:{line}"))
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded = export_perfetto(&trace, &dir.join("whole.pftrace"), &[]);
    let instants: Vec<&str> = decoded
        .packet
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .filter(|e| e.r#type == Some(ordo_analysis::perfetto::TYPE_INSTANT))
        .filter_map(|e| e.name.as_deref())
        .collect();
    let named = |prefix: &str| instants.iter().filter(|n| n.starts_with(prefix)).count();
    assert_eq!(named("at "), 2, "{instants:?}");
    assert!(named("read counter") >= 2, "{instants:?}");
    assert!(named("write counter") >= 2, "{instants:?}");
    let analysis = ordo_analysis::analyze_trace(&trace).unwrap();
    assert!(!analysis.findings.is_empty(), "no finding to export");
    let kind = analysis.findings[0].kind.name();
    for spec in ["1".to_string(), format!("{kind}:1")] {
        let out_file = dir.join("one.pftrace");
        let decoded = export_perfetto(&trace, &out_file, &["--finding", &spec]);
        let finding = &analysis.findings[0];
        let threads: std::collections::HashSet<i32> = decoded
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.thread.as_ref()?.tid)
            .collect();
        let wanted: std::collections::HashSet<i32> =
            finding.events.iter().map(|e| e.tid as i32).collect();
        assert_eq!(threads, wanted, "{spec}");
        let (lo, hi) = (
            finding.events.iter().map(|e| e.ts).min().unwrap(),
            finding.events.iter().map(|e| e.ts).max().unwrap(),
        );
        let stamped: Vec<(u64, &str)> = decoded
            .packet
            .iter()
            .filter_map(|p| {
                let e = p.track_event.as_ref()?;
                Some((p.timestamp?, e.name.as_deref().unwrap_or("")))
            })
            .collect();
        assert!(
            stamped.iter().all(|(ts, _)| *ts >= lo && *ts <= hi),
            "{spec}"
        );
        let marked = stamped.iter().filter(|(_, n)| n.starts_with('★')).count();
        assert!(marked >= 2, "{spec}: {marked} marked events");
        assert_eq!(dangling_flows(&out_file), 0, "{spec}");
    }
    for (spec, says) in [
        ("0", "is not a number from 1"),
        ("999", "finding(s)"),
        ("nosuchkind:1", "no finding kind"),
    ] {
        let out = common::run_ordo(&[
            "export",
            "--perfetto",
            "--force",
            "--finding",
            spec,
            trace.to_str().unwrap(),
            "-o",
            dir.join("bad.pftrace").to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}");
        assert!(
            stderr.contains(&format!("--finding {spec}")) && stderr.contains(says),
            "{spec}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{spec}: {stderr}");
    }
}

/// The SARIF 2.1.0 schema, from the serde-sarif crate that carries it (found
/// through `cargo metadata`), compiled for validation. Only this platform's
/// dependencies: a registry filled by building has no Windows-only crates, and
/// offline `cargo metadata` of every platform fails for want of them.
fn sarif_schema() -> (boon::Schemas, boon::SchemaIndex) {
    let host = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "serde-sarif")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("serde-sarif in the dependency graph");
    let path = std::path::Path::new(manifest)
        .parent()
        .unwrap()
        .join("src/schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        schema["title"],
        "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    );
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    let url = "https://example.org/sarif-schema-2.1.0.json";
    compiler.add_resource(url, schema).unwrap();
    let index = compiler.compile(url, &mut schemas).unwrap();
    (schemas, index)
}

/// Issue 28: `ordo analyze --format sarif` writes a SARIF 2.1.0 log the official
/// schema accepts — one rule per finding kind, one result per finding with its
/// level, a location at file:line, a code flow with a thread flow per thread in
/// the interleaving's order, the schedule in its properties — on the bundled demo
/// and on a recording with a predicted race; the fingerprints of a finding are the
/// same in another recording of the same program.
#[test]
fn sarif_output_validates_against_the_schema() {
    if !common::have_root("sarif_output_validates_against_the_schema") {
        return;
    }
    let (schemas, index) = sarif_schema();
    let dir = common::scratch("sarif");
    let demo = demo_program(&dir);
    let sarif_of = |trace: &std::path::Path| -> serde_json::Value {
        let out = common::run_ordo(&["analyze", "--format", "sarif", trace.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let mut fingerprints: Vec<std::collections::BTreeMap<String, String>> = Vec::new();
    for round in 0..2 {
        let trace = dir.join(format!("bank-{round}.ordo"));
        common::record(&trace, &demo, &[]);
        let log = sarif_of(&trace);
        if let Err(e) = schemas.validate(&log, index) {
            panic!("{e:#}\n{log:#}");
        }
        let run = &log["runs"][0];
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 17);
        let results = run["results"].as_array().unwrap();
        assert!(!results.is_empty(), "the demo has findings");
        let mut prints = std::collections::BTreeMap::new();
        for r in results {
            assert_eq!(
                rules[r["ruleIndex"].as_u64().unwrap() as usize]["id"],
                r["ruleId"]
            );
            assert!(
                matches!(r["level"].as_str(), Some("note" | "warning")),
                "{r}"
            );
            let loc = &r["locations"][0]["physicalLocation"];
            // Relative to the directory ordo ran in (the checkout), where the
            // demo's source lies.
            assert_eq!(loc["artifactLocation"]["uri"], "demo/bank.c", "{r}");
            assert_eq!(loc["artifactLocation"]["uriBaseId"], "SRCROOT", "{r}");
            assert!(loc["region"]["startLine"].as_u64().unwrap() > 0);
            let flows = r["codeFlows"][0]["threadFlows"].as_array().unwrap();
            assert!(flows.len() >= 2, "{r}");
            let mut order: Vec<u64> = flows
                .iter()
                .flat_map(|f| f["locations"].as_array().unwrap())
                .map(|l| l["executionOrder"].as_u64().unwrap())
                .collect();
            order.sort_unstable();
            assert_eq!(order, (1..=order.len() as u64).collect::<Vec<_>>());
            assert!(!r["properties"]["schedule"].as_str().unwrap().is_empty());
            prints.insert(
                r["partialFingerprints"]["ordoFinding/v1"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["message"]["text"].as_str().unwrap().to_string(),
            );
        }
        fingerprints.push(prints);
    }
    // The same finding in another run keeps its fingerprint.
    let shared = fingerprints[0]
        .keys()
        .filter(|k| fingerprints[1].contains_key(*k))
        .count();
    assert!(shared > 0, "{fingerprints:#?}");
    // A predicted bug is a warning.
    let trace = dir.join("race.ordo");
    let out = std::process::Command::new(common::ordo())
        .args([
            "record",
            "--force",
            "--watch-hw",
            "rust_locked_counter::COUNTER",
            "-o",
        ])
        .arg(&trace)
        .arg("--")
        .arg(common::build_rust_program("rust_locked_counter"))
        .arg("racy")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = sarif_of(&trace);
    if let Err(e) = schemas.validate(&log, index) {
        panic!("{e:#}\n{log:#}");
    }
    let races: Vec<&serde_json::Value> = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ruleId"] == "race")
        .collect();
    assert!(!races.is_empty());
    assert!(races.iter().all(|r| r["level"] == "warning"));
}

/// Issue 28: `ordo hunt --sarif FILE` writes the hunt's outcome as a SARIF log
/// the schema accepts: a reproduced bug is one `error` result leading with its
/// confirmation, with the analyzer's interleaving as a code flow and the schedule
/// and replay command in its properties; a hunt that found nothing writes a log
/// with no result.
#[test]
fn hunt_writes_sarif() {
    if !common::have_root("hunt_writes_sarif") {
        return;
    }
    let (schemas, index) = sarif_schema();
    let dir = common::scratch("hunt_sarif");
    for (program, found) in [("replay_deadlock", true), ("correct_nested_locks", false)] {
        let sarif = dir.join(format!("{program}.sarif"));
        let out = common::run_ordo(&[
            "hunt",
            "--budget",
            "20",
            "--json",
            "--sarif",
            sarif.to_str().unwrap(),
            "-o",
            dir.join(program).to_str().unwrap(),
            "--",
            common::build_program(program).to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(i32::from(found)), "{program}");
        let log: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
        if let Err(e) = schemas.validate(&log, index) {
            panic!("{e:#}\n{log:#}");
        }
        let results = log["runs"][0]["results"].as_array().unwrap();
        if !found {
            assert!(results.is_empty(), "{log:#}");
            continue;
        }
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(r["level"], "error");
        assert!(
            r["message"]["text"]
                .as_str()
                .unwrap()
                .starts_with("reproduced "),
            "{r}"
        );
        assert!(!r["properties"]["schedule"].as_str().unwrap().is_empty());
        assert!(r["properties"]["replayCommand"]
            .as_str()
            .unwrap()
            .starts_with("ordo replay --schedule "));
        if r["ruleId"] != "failure" {
            assert!(
                r["codeFlows"][0]["threadFlows"].as_array().unwrap().len() >= 2,
                "{r}"
            );
        }
    }
}
