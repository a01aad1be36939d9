//! SARIF 2.1.0 output (`ordo analyze --format sarif`, `ordo hunt --sarif FILE`):
//! where CI systems and editors (GitHub code scanning, GitLab, the VS Code SARIF
//! viewer) read findings.
//!
//! One `run`: the tool with one rule per finding kind (its help text says what
//! the shape is and what to do with it), one `result` per finding. A result's
//! level says how sure ordo is: an order worth trying is a `note`, a predicted bug
//! a `warning`, a failure a hunt reproduced an `error`. Its location is the first
//! event's site (`file:line`, the function as a logical location; the file
//! relative to the directory ordo runs in, `%SRCROOT%`, when it lies there, as a
//! CI job's checkout does); its `codeFlow`
//! has one `threadFlow` per thread with that thread's events of the interleaving
//! in the order they happened (`executionOrder` across threads), each with its
//! detail as the message. The schedule and the replay command are in the result's
//! properties. `partialFingerprints` hash the kind and the events' threads,
//! functions and lines — nothing that changes from run to run (addresses, times)
//! — so CI does not reopen a known finding.

use serde_json::{json, Map, Value};

use crate::model::FindingKind;
use crate::report::{Analysis, Finding, FindingStep};

/// The `$schema` SARIF files name.
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// What a finding kind is, for its rule's help text.
fn help(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::Deadlock => "A cycle in the lock-order graph: threads that take the same locks in different orders can each hold one and wait for the other forever.",
        FindingKind::LostWakeup => "A condition variable signalled while no thread waits yet, with a wait that does not re-check a predicate: the signal is lost and the waiter sleeps forever.",
        FindingKind::Barging => "A thread can take the mutex between a signal and the woken waiter's reacquisition, and change what the waiter was woken for.",
        FindingKind::Race => "Conflicting accesses to the same memory, one a write, that happens-before leaves unordered: they can run in the other order.",
        FindingKind::Unserializable => "Another thread's access can fall between two accesses of one thread and give a result no serial order gives (read-write-read, write-read-write, a half-seen publication).",
        FindingKind::StaleUse => "A thread reads a location and acts on it while another thread can write it and go on (free, tear down) in between: the reader uses a stale value.",
        FindingKind::Atomicity => "Another thread's critical section can fall between two critical sections of one thread on the same lock: a check in the first is stale when the second acts on it.",
        FindingKind::MultiSplit => "Several critical sections of other threads, in one order, can fall between two of a thread's: the state it checked changes and may come back (ABA).",
        FindingKind::AfterRelease => "Another thread's whole critical section can fall between a thread's release of a lock and its next statement, which acts on what the lock protected.",
        FindingKind::Chain => "Two threads' sections on one lock can interleave as a chain of orderings (a, b, a, b): a producer/consumer hand-off taken out of step.",
        FindingKind::EarlyExit => "The main thread can end before another thread's critical section: nothing joins that thread first (a missing join, or a join of the wrong thread).",
        FindingKind::LateJoin => "A thread's critical section can come after the joining thread's last section before the join: the joiner overtakes a thread it joins only later.",
        FindingKind::FailedTry => "A trylock that succeeded could have come inside another thread's section and failed: the fallback for a busy lock runs.",
        FindingKind::DelayedStart => "A critical section can run before another thread even starts.",
        FindingKind::Overtake => "A critical section can overtake another thread's barrier arrival, semaphore post or condition signal it does not depend on.",
        FindingKind::FirstOfMany => "One thread's action can come before every other thread's first one: a window all the others must fall into.",
        FindingKind::Reorder => "Two critical sections of different threads can run in the other order.",
    }
}

/// SARIF's level for a finding of `kind`; `reproduced` when a replay made it fail.
fn level(kind: FindingKind, reproduced: bool) -> &'static str {
    if reproduced {
        "error"
    } else if kind.is_predicted_bug() {
        "warning"
    } else {
        "note"
    }
}

/// The rules, one per finding kind, in [`FindingKind::ALL`]'s order.
fn rules() -> Vec<Value> {
    FindingKind::ALL
        .iter()
        .map(|&kind| {
            let text = help(kind);
            json!({
                "id": kind.name(),
                "name": kind.name(),
                "shortDescription": { "text": text },
                "fullDescription": { "text": text },
                "help": {
                    "text": format!(
                        "{text} {}",
                        if kind.is_predicted_bug() {
                            "Predicted to be a bug: `ordo replay` of its schedule shows it."
                        } else {
                            "An order worth trying: a bug only if `ordo replay` of its schedule fails."
                        }
                    )
                },
                "defaultConfiguration": { "level": level(kind, false) },
                "properties": { "class": kind.class() },
            })
        })
        .collect()
}

/// The base the relative source paths of a log are relative to: the directory
/// ordo ran in (a CI job's checkout), as `originalUriBaseIds` names it.
const SRCROOT: &str = "SRCROOT";

/// A source file as SARIF names it: relative to the directory ordo runs in
/// (`SRCROOT`) when it lies there — where code scanning finds it in the
/// repository — else its absolute path as a `file:` URI, else the name as given.
fn artifact(file: &str) -> Value {
    let path = std::path::Path::new(file);
    if let Ok(cwd) = std::env::current_dir() {
        if let Ok(relative) = path.strip_prefix(&cwd) {
            if let Some(text) = relative.to_str() {
                return json!({ "uri": text, "uriBaseId": SRCROOT });
            }
        }
    }
    if path.is_absolute() {
        return json!({ "uri": format!("file://{file}") });
    }
    json!({ "uri": file })
}

/// A site as a SARIF location with `message`: the source file and line when the
/// debug info gave them (`source`), else those of the site's text (`function
/// (file.c:LINE)`); a site without a line is a logical location only.
fn location(site: &str, source: Option<&(String, u32)>, message: Option<&str>) -> Value {
    let mut loc = Map::new();
    let (function, place) = match site.rsplit_once(" (") {
        Some((f, rest)) => (f, rest.strip_suffix(')').unwrap_or(rest)),
        None => (site, ""),
    };
    let from_text = place
        .rsplit_once(':')
        .and_then(|(file, line)| Some((file.to_string(), line.parse::<u32>().ok()?)));
    if let Some((file, line)) = source.cloned().or(from_text) {
        if line > 0 && !file.is_empty() {
            loc.insert(
                "physicalLocation".into(),
                json!({
                    "artifactLocation": artifact(&file),
                    "region": { "startLine": line },
                }),
            );
        }
    }
    if !function.is_empty() {
        loc.insert(
            "logicalLocations".into(),
            json!([{ "fullyQualifiedName": function, "kind": "function" }]),
        );
    }
    if let Some(m) = message {
        loc.insert("message".into(), json!({ "text": m }));
    }
    Value::Object(loc)
}

/// One thread flow per thread, in first-appearance order; each location's
/// `executionOrder` is its place in the interleaving (by recorded time).
fn code_flow(steps: &[FindingStep]) -> Value {
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| (steps[i].ts, i));
    let mut rank = vec![0usize; steps.len()];
    for (k, &i) in order.iter().enumerate() {
        rank[i] = k + 1;
    }
    let mut threads: Vec<&str> = Vec::new();
    for s in steps {
        if !threads.contains(&s.thread.as_str()) {
            threads.push(&s.thread);
        }
    }
    let flows: Vec<Value> = threads
        .iter()
        .map(|&t| {
            let mut mine: Vec<usize> = (0..steps.len()).filter(|&i| steps[i].thread == t).collect();
            mine.sort_by_key(|&i| rank[i]);
            json!({
                "id": format!("thread {t}"),
                "message": { "text": format!("thread {t}") },
                "locations": mine.iter().map(|&i| json!({
                    "location": location(
                        &steps[i].site,
                        steps[i].source.as_ref(),
                        Some(&steps[i].detail),
                    ),
                    "executionOrder": rank[i],
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!([{ "threadFlows": flows }])
}

/// A fingerprint of what stays the same from run to run of one program: the
/// kind and each event's thread and site (function, file, line), FNV-1a.
fn fingerprint(f: &Finding) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |text: &str| {
        for b in text.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(f.kind.name());
    for s in &f.steps {
        eat(&s.thread);
        eat(&s.site);
    }
    format!("{h:016x}")
}

/// A finding as a SARIF result; `reproduced` when a replay made it fail,
/// `replay` the command that replays its schedule.
pub fn result(f: &Finding, reproduced: bool, replay: Option<&str>) -> Value {
    let rule_index = FindingKind::ALL
        .iter()
        .position(|&k| k == f.kind)
        .unwrap_or(0);
    let first = f.steps.first();
    let first_location = location(
        first.map(|s| s.site.as_str()).unwrap_or(""),
        first.and_then(|s| s.source.as_ref()),
        None,
    );
    let mut properties = json!({
        "schedule": f.schedule,
        "rank": { "v": f.rank.v, "t": f.rank.t, "distance": f.rank.distance },
        "threads": f.threads,
    });
    if let Some(r) = replay {
        properties["replayCommand"] = json!(r);
    }
    let mut result = json!({
        "ruleId": f.kind.name(),
        "ruleIndex": rule_index,
        "level": level(f.kind, reproduced),
        "message": { "text": f.message },
        "locations": [first_location],
        "partialFingerprints": { "ordoFinding/v1": fingerprint(f) },
        "properties": properties,
    });
    if !f.steps.is_empty() {
        result["codeFlows"] = code_flow(&f.steps);
    }
    result
}

/// A SARIF log with one run of ordo holding `results`, its rules the finding
/// kinds' and `extra_rules`.
pub fn log(results: Vec<Value>, extra_rules: Vec<Value>) -> Value {
    let mut all = rules();
    all.extend(extra_rules);
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "ordo",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": all,
                }
            },
            "originalUriBaseIds": {
                SRCROOT: { "uri": srcroot_uri() },
            },
            "results": results,
        }]
    })
}

/// The directory ordo runs in, as a `file:` URI ending in `/`.
fn srcroot_uri() -> String {
    let dir = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| ".".into());
    let dir = dir.trim_end_matches('/');
    format!("file://{dir}/")
}

impl Analysis {
    /// The analysis as a SARIF 2.1.0 log: every finding a result (notes and
    /// warnings: nothing was replayed).
    pub fn to_sarif(&self) -> Value {
        log(
            self.findings
                .iter()
                .map(|f| result(f, false, None))
                .collect(),
            Vec::new(),
        )
    }
}
