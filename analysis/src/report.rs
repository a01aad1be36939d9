//! Findings made readable: symbolized sites and objects, the candidate schedule as
//! text, the rank, and a one-line message; printed as a text report grouped by kind
//! or as one JSON document.

use std::fmt::Write as _;
use std::path::PathBuf;

use ordo_schedule::{EventRef, ObjectRef, Ordering, Schedule, ThreadRef};
use ordo_trace::Kind;
use serde_json::{json, Value};

use crate::engine::PassStats;
use crate::model::{EventId, Family, FindingKind, Rank, RawFinding, EVERY_OTHER_THREAD, FAMILIES};
use crate::naming::Namer;

/// An object a finding involves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectDesc {
    /// Address in the recorded run.
    pub addr: u64,
    /// Global or static variable name, when it is one.
    pub name: Option<String>,
    /// Object family (`mutex`, `condvar`, …).
    pub family: &'static str,
}

/// One finding, ready to print.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What it is.
    pub kind: FindingKind,
    /// Logical ids of the threads involved.
    pub threads: Vec<String>,
    /// Objects involved.
    pub objects: Vec<ObjectDesc>,
    /// Symbolized call sites of the events involved, in the order the details list them.
    pub sites: Vec<String>,
    /// The candidate schedule, in the schedule language (empty when a thread could
    /// not be named).
    pub schedule: String,
    /// (v, t, distance).
    pub rank: Rank,
    /// One-line description.
    pub message: String,
    /// One line per event involved: thread, what, object, site.
    pub details: Vec<String>,
    /// Whether an event of the finding lies at or after the first lost event.
    pub possibly_affected_by_drops: bool,
    /// Where the schedule holds a thread right after an event (`after(…)`): the
    /// first statement after it (`file.c:LINE`, from DWARF line info), for
    /// `ordo record --mark` when a program point should be named instead.
    pub mark: Option<String>,
    /// The recorded events the finding involves (those its message refers to and
    /// those its schedule orders), as the trace has them: for an export that
    /// picks the finding out (`ordo export --perfetto --finding`).
    pub events: Vec<FindingEvent>,
    /// The events the message refers to, as the details list them, with their
    /// thread: a SARIF thread flow per thread (`crate::sarif`).
    pub steps: Vec<FindingStep>,
}

/// One event of a finding's interleaving, ready to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindingStep {
    /// The thread's logical id.
    pub thread: String,
    /// Its symbolized site (`function (file.c:LINE)`).
    pub site: String,
    /// What happens there (the detail line).
    pub detail: String,
    /// When it happened in the recorded run.
    pub ts: u64,
    /// Its source file as the debug info names it (usually a full path) and line.
    pub source: Option<(String, u32)>,
}

/// A recorded event a finding involves, as the trace has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FindingEvent {
    /// The thread's kernel id in the recorded run.
    pub tid: u32,
    /// What happened.
    pub kind: Kind,
    /// The object's address (0: none).
    pub addr: u64,
    /// When, as recorded.
    pub ts: u64,
}

/// Events lost to a full ring buffer between two chunks of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Index of the first chunk that may miss events (0-based).
    pub first_chunk: u64,
    /// Index of the chunk whose drop counter rose (the loss is before its end).
    pub last_chunk: u64,
    /// Byte offset of `first_chunk` in the file.
    pub offset: u64,
    /// Events lost.
    pub events: u64,
    /// Timestamp of the first event of `first_chunk`: later events may be affected.
    pub from_ts: u64,
}

/// Counters about the trace and the analysis.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Counters from the happens-before pass.
    pub pass: PassStats,
    /// Threads in the trace's thread table.
    pub threads: u64,
    /// Chunks read.
    pub chunks: u64,
    /// Events lost in the kernel (total).
    pub dropped: u64,
    /// Why the trace ends early, if it does.
    pub cut_short: Option<String>,
    /// Peak resident memory of this process (kB), when known.
    pub peak_rss_kb: Option<u64>,
    /// Wall time of the analysis in seconds.
    pub seconds: f64,
    /// Of which the streaming pass (reading, ordering, happens-before, detectors).
    pub pass_seconds: f64,
}

/// The result of analyzing a trace.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// The trace file.
    pub trace: PathBuf,
    /// Findings, best rank first.
    pub findings: Vec<Finding>,
    /// Where events were lost.
    pub losses: Vec<Loss>,
    /// Counters.
    pub stats: Stats,
    /// Memory two or more threads accessed, one writing (from a recording made
    /// with `--discover`), most promising first.
    pub shared: Vec<SharedDesc>,
}

/// A shared location found by discovery, ready to print.
#[derive(Clone, Debug)]
pub struct SharedDesc {
    /// Its name (`global`, `global+8`) or address.
    pub location: String,
    /// Its address in the recorded run.
    pub addr: u64,
    /// Threads that accessed it.
    pub threads: Vec<String>,
    /// Reads.
    pub reads: u32,
    /// Writes and read-modify-writes.
    pub writes: u32,
    /// Only atomic instructions touched it (synchronization, not a race).
    pub atomic_only: bool,
    /// Each instruction that touched it: (site, kind, locks held there).
    pub sites: Vec<(String, &'static str, Vec<String>)>,
    /// Locks held at every access (empty: nothing protects it consistently).
    pub common_locks: Vec<String>,
    /// Candidates proposed on it.
    pub candidates: u32,
}

impl SharedDesc {
    /// Symbolizes a pass's shared location.
    pub fn resolve(l: &crate::interleave::SharedLocation, namer: &Namer<'_>) -> SharedDesc {
        SharedDesc {
            location: namer.object_text(l.obj),
            addr: namer.addr(l.obj),
            threads: l.threads.iter().map(|&t| namer.thread_text(t)).collect(),
            reads: l.reads,
            writes: l.writes,
            atomic_only: l.atomic_only,
            sites: l
                .sites
                .iter()
                .map(|(e, locks)| {
                    (
                        namer.site(e),
                        e.kind.name(),
                        locks.iter().map(|&o| namer.object_text(o)).collect(),
                    )
                })
                .collect(),
            common_locks: l
                .common_locks
                .iter()
                .map(|&o| namer.object_text(o))
                .collect(),
            candidates: l.candidates,
        }
    }

    /// As `--json` prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "location": self.location,
            "addr": format!("{:#x}", self.addr),
            "threads": self.threads,
            "reads": self.reads,
            "writes": self.writes,
            "atomic_only": self.atomic_only,
            "sites": self.sites.iter().map(|(site, kind, locks)| json!({
                "site": site, "kind": kind, "locks_held": locks,
            })).collect::<Vec<_>>(),
            "common_locks": self.common_locks,
            "candidates": self.candidates,
        })
    }

    /// One line: where, who, how, and what protects it.
    pub fn summary(&self) -> String {
        format!(
            "{}: threads {}, {} reads, {} writes{}, {}; {} candidates",
            self.location,
            self.threads.join(", "),
            self.reads,
            self.writes,
            if self.atomic_only {
                " (atomic only)"
            } else {
                ""
            },
            if self.common_locks.is_empty() {
                "no lock held at every access".to_string()
            } else {
                format!("always under {}", self.common_locks.join(", "))
            },
            self.candidates
        )
    }
}

/// Symbolizes raw findings.
pub fn resolve(
    raw: Vec<(Rank, RawFinding)>,
    namer: &Namer<'_>,
    first_loss_ts: Option<u64>,
) -> Vec<Finding> {
    raw.into_iter()
        .map(|(rank, f)| resolve_one(rank, &f, namer, first_loss_ts))
        .collect()
}

fn resolve_one(
    rank: Rank,
    f: &RawFinding,
    namer: &Namer<'_>,
    first_loss_ts: Option<u64>,
) -> Finding {
    let threads = f
        .threads()
        .into_iter()
        .map(|t| namer.thread_text(t))
        .collect();
    let objects = f
        .objects()
        .into_iter()
        .map(|o| ObjectDesc {
            addr: namer.addr(o),
            name: namer.symbol(o),
            family: family_of_obj(f, o).map(Family::name).unwrap_or("object"),
        })
        .collect();
    let sites = f.events.iter().map(|e| namer.site(e)).collect();
    let schedule = schedule_text(f, namer).unwrap_or_default();
    let details = f.events.iter().map(|e| describe_event(e, namer)).collect();
    let possibly_affected_by_drops =
        first_loss_ts.is_some_and(|ts| f.events.iter().any(|e| e.ts >= ts));
    let mark = f
        .orderings
        .iter()
        .find(|o| o.after.after_point)
        .and_then(|o| namer.statement_after(&o.after))
        .map(|(file, line)| format!("{file}:{line}"));
    let mut events: Vec<FindingEvent> = Vec::new();
    for e in f.all_events() {
        let event = FindingEvent {
            tid: namer.tid(e.thread),
            kind: e.kind,
            addr: namer.addr(e.obj),
            ts: e.ts,
        };
        if !events.contains(&event) {
            events.push(event);
        }
    }
    let steps = f
        .events
        .iter()
        .map(|e| FindingStep {
            thread: namer.thread_text(e.thread),
            site: namer.site(e),
            detail: describe_event(e, namer),
            ts: e.ts,
            source: namer.site_source(e),
        })
        .collect();
    Finding {
        kind: f.kind,
        threads,
        objects,
        sites,
        schedule,
        rank,
        message: message(f, namer, rank),
        details,
        possibly_affected_by_drops,
        mark,
        events,
        steps,
    }
}

fn family_of_obj(f: &RawFinding, obj: u32) -> Option<Family> {
    f.events
        .iter()
        .find(|e| e.obj == obj)
        .and_then(|e| Family::of(e.kind))
}

/// The candidate's schedule as text, one ordering per line; `None` if an event
/// cannot be named.
pub fn schedule_text(f: &RawFinding, namer: &Namer<'_>) -> Option<String> {
    schedule(f, namer).map(|s| s.to_string())
}

/// The candidate as a schedule; `None` if an event cannot be named. An ordering
/// whose gated event is of every other thread ([`EVERY_OTHER_THREAD`]) is written
/// with the `*` thread, `A -> *:KIND(OBJECT)#N`; its object must then be a global
/// or static (`@K` differs from thread to thread).
pub fn schedule(f: &RawFinding, namer: &Namer<'_>) -> Option<Schedule> {
    let mut orderings = Vec::with_capacity(f.orderings.len());
    for o in &f.orderings {
        let before = o
            .before
            .iter()
            .map(|e| namer.event_ref(e))
            .collect::<Option<Vec<_>>>()?;
        let after = if o.after.thread == EVERY_OTHER_THREAD {
            EventRef {
                thread: ThreadRef::Others,
                kind: o.after.kind,
                object: ObjectRef::Symbol(namer.symbol(o.after.obj)?),
                occurrence: o.after.occurrence,
                after: false,
            }
        } else {
            namer.event_ref(&o.after)?
        };
        orderings.push(Ordering {
            before,
            after,
            line: 0,
        });
    }
    Some(Schedule { orderings })
}

fn verb(kind: Kind) -> &'static str {
    match kind {
        Kind::MutexLock => "locks",
        Kind::MutexUnlock | Kind::RwlockUnlock => "unlocks",
        Kind::RwlockRdlock => "read-locks",
        Kind::RwlockWrlock => "write-locks",
        Kind::CondSignal => "signals",
        Kind::CondBroadcast => "broadcasts",
        Kind::CondWaitBegin => "starts waiting on",
        Kind::CondWait => "returns from waiting on",
        Kind::Read => "reads",
        Kind::Write => "writes",
        Kind::Rmw => "updates",
        other => other.name(),
    }
}

/// AVIO's name of an unserializable interleaving `a1 b a2`.
fn avio_name(a1: Kind, b: Kind, a2: Kind) -> &'static str {
    match (a1 != Kind::Read, b != Kind::Read, a2 != Kind::Read) {
        (false, true, false) => "read, write, read: a check, then a use of what changed",
        (true, false, true) => "write, read, write: the reader sees an intermediate state",
        (false, true, true) => "read, write, write: an update lost",
        _ => "write, write, read: the thread reads back what it did not write",
    }
}

fn describe_event(e: &EventId, namer: &Namer<'_>) -> String {
    let object = if e.obj == crate::model::NO_OBJECT {
        String::new()
    } else {
        format!(" {}", namer.object_text(e.obj))
    };
    format!(
        "thread {} {}{} at {}",
        namer.thread_text(e.thread),
        verb(e.kind),
        object,
        namer.site(e)
    )
}

fn message(f: &RawFinding, n: &Namer<'_>, rank: Rank) -> String {
    let t = |e: &EventId| n.thread_text(e.thread);
    let o = |e: &EventId| n.object_text(e.obj);
    let s = |e: &EventId| n.site(e);
    let ev = &f.events;
    let mut m = match f.kind {
        FindingKind::Deadlock => {
            let locks: Vec<String> = ev.iter().step_by(2).map(o).collect();
            let threads: Vec<String> = ev.iter().step_by(2).map(t).collect();
            format!(
                "lock-order cycle {} → {}: threads {} take these locks in opposite orders with no common gate lock; \
                 they can deadlock",
                locks.join(" → "),
                locks[0],
                threads.join(", ")
            )
        }
        FindingKind::LostWakeup => format!(
            "thread {} {} {} ({}) when thread {} is not waiting yet ({}); nothing orders the wait after it, so the \
             wakeup can be lost",
            t(&ev[1]),
            verb(ev[1].kind),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[0]),
            s(&ev[0])
        ),
        FindingKind::Barging => {
            let (signal, waiter, barger) = (&ev[0], &ev[1], &ev[2]);
            // A barger that is itself a woken waiter reacquires the mutex in its wait.
            let takes = if barger.kind == Kind::CondWait {
                format!("return from waiting on {}", o(barger))
            } else {
                format!("take {}", o(barger))
            };
            format!(
                "thread {} can {} ({}) after thread {} {} {} and before woken thread {} reacquires it ({}); \
                 a waiter that does not re-check its condition in a loop then acts on a stale state",
                t(barger),
                takes,
                s(barger),
                t(signal),
                verb(signal.kind),
                o(signal),
                t(waiter),
                s(waiter)
            )
        }
        FindingKind::Race => format!(
            "data race on {}: thread {} {} it at {} and thread {} {} it at {}, unordered by happens-before",
            o(&ev[0]),
            t(&ev[0]),
            verb(ev[0].kind),
            s(&ev[0]),
            t(&ev[1]),
            verb(ev[1].kind),
            s(&ev[1])
        ),
        FindingKind::Atomicity => format!(
            "thread {}'s critical sections on {} at {} and at {} can be split by thread {}'s at {} \
             (check-then-act)",
            t(&ev[0]),
            o(&ev[0]),
            s(&ev[0]),
            s(&ev[1]),
            t(&ev[2]),
            s(&ev[2])
        ),
        FindingKind::MultiSplit => {
            let splitters: Vec<String> = ev[2..]
                .iter()
                .map(|e| format!("thread {} at {}", t(e), s(e)))
                .collect();
            format!(
                "thread {}'s critical sections on {} at {} and at {} can be split by {} sections of other \
                 threads in this order: {} (check-then-act where the state changes and comes back)",
                t(&ev[0]),
                o(&ev[0]),
                s(&ev[0]),
                s(&ev[1]),
                ev.len() - 2,
                splitters.join(", ")
            )
        }
        FindingKind::Chain => format!(
            "threads {} and {} can interleave their critical sections on {} as a chain: {} at {}, {} at {}, \
             {} at {}, {} at {} (a hand-off order the run did not take)",
            t(&ev[0]),
            t(&ev[1]),
            o(&ev[0]),
            t(&ev[0]),
            s(&ev[0]),
            t(&ev[1]),
            s(&ev[1]),
            t(&ev[2]),
            s(&ev[2]),
            t(&ev[3]),
            s(&ev[3])
        ),
        FindingKind::EarlyExit => format!(
            "thread {} can end before thread {}'s critical section on {} ({}): nothing joins thread {} \
             first (a missing join, or a join of the wrong thread), so checks made before the end miss its work",
            t(&ev[0]),
            t(&ev[1]),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[1])
        ),
        FindingKind::LateJoin => format!(
            "thread {}'s critical section on {} ({}) can come after thread {}'s on {} ({}), which precedes \
             its join of thread {}: the join comes too late to protect what the section uses",
            t(&ev[1]),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[0]),
            o(&ev[0]),
            s(&ev[0]),
            t(&ev[1])
        ),
        FindingKind::FailedTry => format!(
            "thread {}'s trylock of {} ({}) succeeded, but could have come inside thread {}'s critical \
             section ({}) and failed: what the program does when the lock is busy is never run",
            t(&ev[1]),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[0]),
            s(&ev[0])
        ),
        FindingKind::DelayedStart => format!(
            "thread {}'s critical section on {} ({}) can run before thread {} starts: it knows nothing of \
             thread {} (e.g. of its {} {} at {})",
            t(&ev[0]),
            o(&ev[0]),
            s(&ev[0]),
            t(&ev[1]),
            t(&ev[1]),
            ev[2].kind.name(),
            o(&ev[2]),
            s(&ev[2])
        ),
        FindingKind::Overtake => format!(
            "thread {}'s critical section on {} ({}) can overtake thread {}'s {} {} ({}): nothing orders \
             it after (a missing barrier, post or signal)",
            t(&ev[1]),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[0]),
            ev[0].kind.name(),
            o(&ev[0]),
            s(&ev[0])
        ),
        FindingKind::FirstOfMany if ev[0].point => format!(
            "thread {}'s {} of {} ({}) can come before the first access of each of the {} other threads \
             that access it, most of which came earlier in this run (thread {} at {} was first): a window \
             all of them must fall into",
            t(&ev[0]),
            ev[0].kind.name(),
            o(&ev[0]),
            s(&ev[0]),
            ev.len() - 1,
            t(&ev[1]),
            s(&ev[1])
        ),
        FindingKind::FirstOfMany => format!(
            "thread {}'s first critical section on {} ({}) can come before the first one of each of the \
             {} other threads that took it earlier in this run (thread {} at {} was first)",
            t(&ev[0]),
            o(&ev[0]),
            s(&ev[0]),
            rank.t.saturating_sub(1),
            t(&ev[1]),
            s(&ev[1])
        ),
        FindingKind::AfterRelease => format!(
            "thread {}'s whole critical section on {} (at {}) can fall between thread {}'s release of it at {} \
             and {}: code that runs after the unlock on what the lock protected \
             (a free, a clearing store, a copy) acts on a changed state",
            t(&ev[1]),
            o(&ev[0]),
            s(&ev[1]),
            t(&ev[0]),
            s(&ev[0]),
            match ev.get(3) {
                Some(mark) => format!("its arrival at the marked point {}", s(mark)),
                None => format!("thread {}'s next statement", t(&ev[0])),
            }
        ),
        FindingKind::Unserializable if ev.len() == 4 => format!(
            "thread {} {} {} ({}) and then {} {} ({}); thread {}'s {} of {} ({}) and {} of {} ({}) can both \
             fall between them, so it sees one change and not the other",
            t(&ev[0]),
            verb(ev[0].kind),
            o(&ev[0]),
            s(&ev[0]),
            verb(ev[2].kind),
            o(&ev[2]),
            s(&ev[2]),
            t(&ev[1]),
            ev[1].kind.name(),
            o(&ev[1]),
            s(&ev[1]),
            ev[3].kind.name(),
            o(&ev[3]),
            s(&ev[3])
        ),
        FindingKind::Unserializable => format!(
            "thread {}'s {} of {} at {} can fall between thread {}'s {} at {} and {} at {}: {} \
             (no serial order of the two threads gives it)",
            t(&ev[1]),
            ev[1].kind.name(),
            o(&ev[1]),
            s(&ev[1]),
            t(&ev[0]),
            ev[0].kind.name(),
            s(&ev[0]),
            ev[2].kind.name(),
            s(&ev[2]),
            avio_name(ev[0].kind, ev[1].kind, ev[2].kind)
        ),
        FindingKind::StaleUse => format!(
            "thread {} {} {} at {} and goes on at {}; thread {} can write it at {}{} in between, so \
             thread {} acts on a stale value (a pointer checked, then used after it was cleared or freed)",
            t(&ev[0]),
            verb(ev[0].kind),
            o(&ev[0]),
            s(&ev[0]),
            s(&ev[2]),
            t(&ev[1]),
            s(&ev[1]),
            match ev.get(3) {
                Some(hold) if hold.kind == Kind::ThreadExit => " and run until it exits".to_string(),
                Some(hold) => format!(" and go on to its {} at {}", hold.kind.name(), s(hold)),
                None => String::new(),
            },
            t(&ev[0])
        ),
        FindingKind::Reorder => format!(
            "thread {}'s critical section on {} at {} and thread {}'s at {} can run in the other order",
            t(&ev[0]),
            o(&ev[0]),
            s(&ev[0]),
            t(&ev[1]),
            s(&ev[1])
        ),
    };
    if !f.note.is_empty() {
        let _ = write!(m, " ({})", f.note);
    }
    m
}

impl Finding {
    /// One finding as `ordo analyze --json` (and `ordo hunt --json`) print it.
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind.name(),
            "class": self.kind.class(),
            "harmful": self.kind.is_harmful(),
            "threads": self.threads,
            "objects": self.objects.iter().map(|o| json!({
                "addr": format!("{:#x}", o.addr),
                "name": o.name,
                "family": o.family,
            })).collect::<Vec<_>>(),
            "sites": self.sites,
            "schedule": self.schedule,
            "rank": {"v": self.rank.v, "t": self.rank.t, "distance": self.rank.distance},
            "message": self.message,
            "details": self.details,
            "possibly_affected_by_drops": self.possibly_affected_by_drops,
            "mark": self.mark,
        })
    }
}

impl Analysis {
    /// The JSON document of `ordo analyze --json`.
    pub fn to_json(&self) -> Value {
        let findings: Vec<Value> = self.findings.iter().map(Finding::to_json).collect();
        let p = &self.stats.pass;
        let mut objects = serde_json::Map::new();
        for (i, name) in [
            "mutex",
            "condvar",
            "rwlock",
            "semaphore",
            "barrier",
            "futex",
            "variable",
            "thread_handle",
            "mark",
        ]
        .iter()
        .enumerate()
        .take(FAMILIES)
        {
            objects.insert(name.to_string(), json!(p.objects[i]));
        }
        let mut by_kind = serde_json::Map::new();
        for k in FindingKind::ALL {
            by_kind.insert(
                k.name().to_string(),
                json!(self.findings.iter().filter(|f| f.kind == k).count()),
            );
        }
        json!({
            "findings": findings,
            "shared_locations": self.shared.iter().map(SharedDesc::to_json).collect::<Vec<_>>(),
            "stats": {
                "trace": self.trace.display().to_string(),
                "events": p.events,
                "threads": self.stats.threads,
                "threads_seen": p.threads_seen,
                "chunks": self.stats.chunks,
                "dropped": self.stats.dropped,
                "losses": self.losses.iter().map(|l| json!({
                    "first_chunk": l.first_chunk,
                    "last_chunk": l.last_chunk,
                    "offset": l.offset,
                    "events": l.events,
                    "from_ts": l.from_ts,
                })).collect::<Vec<_>>(),
                "cut_short": self.stats.cut_short,
                "objects": objects,
                "critical_sections": p.critical_sections,
                "lock_order": {
                    "contexts": p.lock_order.contexts,
                    "contexts_dropped": p.lock_order.contexts_dropped,
                    "locks_in_cycles": p.lock_order.locks_in_cycles,
                    "search_steps": p.lock_order.search_steps,
                    "search_truncated": p.lock_order.search_truncated,
                },
                "clock_slots": p.clock_slots,
                "threads_exited": p.threads_exited,
                "candidates_offered": p.candidates_offered,
                "unknown_thread_events": p.unknown_thread_events,
                "findings": by_kind,
                "predicted_bugs": self.findings.iter().filter(|f| f.kind.is_predicted_bug()).count(),
                "orders_to_try": self.findings.iter().filter(|f| !f.kind.is_predicted_bug()).count(),
                "seconds": self.stats.seconds,
                "pass_seconds": self.stats.pass_seconds,
                "peak_rss_kb": self.stats.peak_rss_kb,
            }
        })
    }

    /// The text report: a summary, then findings grouped by kind, each group best
    /// rank first. At most `per_kind` findings of a kind are printed in full.
    pub fn to_text(&self, per_kind: usize) -> String {
        let mut out = String::new();
        let s = &self.stats;
        let bugs = self
            .findings
            .iter()
            .filter(|f| f.kind.is_predicted_bug())
            .count();
        let _ = writeln!(
            out,
            "{}: {} events, {} threads, {} critical sections, {} findings: {bugs} predicted bugs, {} orders worth trying",
            self.trace.display(),
            s.pass.events,
            s.threads,
            s.pass.critical_sections,
            self.findings.len(),
            self.findings.len() - bugs
        );
        if s.dropped > 0 || !self.losses.is_empty() {
            let _ = writeln!(
                out,
                "warning: {} events were lost in the kernel while recording",
                s.dropped
            );
            for l in &self.losses {
                let _ = writeln!(
                    out,
                    "  {} lost between chunk {} (byte {}) and the end of chunk {}",
                    l.events, l.first_chunk, l.offset, l.last_chunk
                );
            }
            let affected = self
                .findings
                .iter()
                .filter(|f| f.possibly_affected_by_drops)
                .count();
            let _ = writeln!(
                out,
                "  {affected} findings involve events at or after the first loss (marked [drops])"
            );
        }
        if let Some(c) = &s.cut_short {
            let _ = writeln!(out, "warning: {c}");
        }
        // Predicted bugs first, then the orders worth trying.
        let kinds = FindingKind::ALL
            .into_iter()
            .filter(|k| k.is_predicted_bug())
            .chain(
                FindingKind::ALL
                    .into_iter()
                    .filter(|k| !k.is_predicted_bug()),
            );
        for kind in kinds {
            let group: Vec<&Finding> = self.findings.iter().filter(|f| f.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            let class = if kind.is_predicted_bug() {
                "predicted to be a bug"
            } else {
                "orders worth trying, bugs only if `ordo replay` of the schedule fails"
            };
            let _ = writeln!(out, "\n{} ({}): {class}", kind.name(), group.len());
            for (i, f) in group.iter().take(per_kind).enumerate() {
                let _ = writeln!(
                    out,
                    "  [{}] rank v={} t={} distance={}{}",
                    i + 1,
                    f.rank.v,
                    f.rank.t,
                    f.rank.distance,
                    if f.possibly_affected_by_drops {
                        " [drops]"
                    } else {
                        ""
                    }
                );
                let _ = writeln!(out, "      {}", f.message);
                for d in &f.details {
                    let _ = writeln!(out, "      - {d}");
                }
                if !f.schedule.is_empty() {
                    let _ = writeln!(out, "      schedule:");
                    for line in f.schedule.lines() {
                        let _ = writeln!(out, "        {line}");
                    }
                }
                if let Some(mark) = &f.mark {
                    let _ = writeln!(
                        out,
                        "      the `after(…)` point is the statement at {mark}: to name it instead, \
                         record with `--mark {mark}` and write `at({mark})#N`"
                    );
                }
            }
            if group.len() > per_kind {
                let _ = writeln!(
                    out,
                    "  … {} more {} findings (all are in --json)",
                    group.len() - per_kind,
                    kind.name()
                );
            }
        }
        if !self.shared.is_empty() {
            let _ = writeln!(
                out,
                "\nshared memory found by --discover ({} locations, most promising first):",
                self.shared.len()
            );
            for l in self.shared.iter().take(per_kind) {
                let _ = writeln!(out, "  {}", l.summary());
                for (site, kind, locks) in &l.sites {
                    let _ = writeln!(
                        out,
                        "      - {kind} at {site}{}",
                        if locks.is_empty() {
                            String::new()
                        } else {
                            format!(" holding {}", locks.join(", "))
                        }
                    );
                }
            }
            if self.shared.len() > per_kind {
                let _ = writeln!(
                    out,
                    "  … {} more locations (all are in --json)",
                    self.shared.len() - per_kind
                );
            }
        }
        if self.findings.is_empty() {
            let _ = writeln!(out, "\nno findings");
        }
        out
    }
}
