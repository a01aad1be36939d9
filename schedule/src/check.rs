//! Whether a run satisfied a schedule.
//!
//! An ordering `A && B -> C` holds in a run when C did not happen, or when A and B
//! both happened before C (IMUnit's semantics). It is *violated* when C happened
//! without all of them before it, and *pending* when C has not happened (yet).
//!
//! A `*` successor (`A -> *:KIND(OBJ)#N`) is checked for each thread (other than
//! the left-hand events' threads) that did KIND(OBJ)#N: violated for each that did
//! it without A before it; pending while no such thread did it.

use std::collections::HashMap;

use ordo_trace::{Event, Kind, LogicalId};

use crate::{EventNamer, EventRef, Ordering, Schedule};

/// One ordering that is not (yet) met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmet {
    /// Index into [`Schedule::orderings`].
    pub ordering: usize,
    /// Line of the ordering in the schedule text.
    pub line: usize,
    /// The ordering as text.
    pub text: String,
    /// The `before` events that had not happened before the `after` event (or, for a
    /// pending ordering, that had not happened at all).
    pub missing: Vec<EventRef>,
}

impl std::fmt::Display for Unmet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.text)?;
        if !self.missing.is_empty() {
            let missing: Vec<String> = self.missing.iter().map(|e| e.to_string()).collect();
            write!(f, " (waiting for {})", missing.join(", "))?;
        }
        Ok(())
    }
}

/// The result of checking a run against a schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// No ordering was violated.
    pub held: bool,
    /// Orderings whose `after` event happened too early.
    pub violated: Vec<Unmet>,
    /// Orderings whose `after` event did not happen.
    pub pending: Vec<Unmet>,
    /// Every event the schedule names that did not happen in the run.
    pub never_happened: Vec<EventRef>,
}

impl CheckReport {
    /// Held, and every ordering's `after` event happened: the run followed the whole
    /// schedule.
    pub fn complete(&self) -> bool {
        self.held && self.pending.is_empty()
    }
}

/// Incremental checker: tell it which named events happened, in order.
pub struct Checker<'s> {
    schedule: &'s Schedule,
    /// Position of each named event in the run, once it happened.
    happened: HashMap<&'s EventRef, u64>,
    /// For `after(…)` points: the earliest position the point can have been
    /// passed at (right after its event), used where it is a predecessor; its
    /// `happened` position is the latest (right before the thread's next event).
    earliest: HashMap<&'s EventRef, u64>,
    /// Per ordering with a `*` successor: each thread's instance of it and when.
    instances: HashMap<usize, Vec<(LogicalId, u64)>>,
    /// Every event the schedule names directly.
    named: std::collections::HashSet<&'s EventRef>,
    /// The orderings with a `*` successor: index, and the threads it leaves out.
    wild: Vec<(usize, Vec<&'s LogicalId>)>,
    next: u64,
}

impl<'s> Checker<'s> {
    /// A checker for `schedule`.
    pub fn new(schedule: &'s Schedule) -> Checker<'s> {
        let named = schedule
            .orderings
            .iter()
            .flat_map(|o| o.before.iter().chain(std::iter::once(&o.after)))
            .filter(|e| !e.thread.is_others())
            .collect();
        let wild = schedule
            .orderings
            .iter()
            .enumerate()
            .filter(|(_, o)| o.after.thread.is_others())
            .map(|(i, o)| (i, o.before_threads()))
            .collect();
        Checker {
            schedule,
            happened: HashMap::new(),
            earliest: HashMap::new(),
            instances: HashMap::new(),
            named,
            wild,
            next: 0,
        }
    }

    /// Records that `event` (an event of one thread) happened now, after everything
    /// observed before. Events the schedule does not name are ignored. Returns
    /// whether the schedule names it (directly or through a `*` successor).
    pub fn observe(&mut self, event: &EventRef) -> bool {
        self.observe_spellings(std::slice::from_ref(event))
    }

    /// Like [`Checker::observe`] for one event with several spellings (a named
    /// object's symbol and its `@K`): all at the same moment.
    pub fn observe_spellings(&mut self, spellings: &[EventRef]) -> bool {
        let pos = self.next;
        self.next += 1;
        let mut named = false;
        for event in spellings {
            let Some(thread) = event.thread.id() else {
                continue;
            };
            if let Some(e) = self.named.get(event) {
                self.happened.entry(e).or_insert(pos);
                named = true;
            }
            for (i, excluded) in &self.wild {
                if self.schedule.orderings[*i]
                    .after
                    .matches_others(event, excluded)
                {
                    let list = self.instances.entry(*i).or_default();
                    if !list.iter().any(|(t, _)| t == thread) {
                        list.push((thread.clone(), pos));
                    }
                    named = true;
                }
            }
        }
        named
    }

    /// Records that the `after(…)` points among `spellings` may have been passed
    /// from now on; [`Checker::observe_spellings`] records when they surely were.
    /// Where such a point is a predecessor, the earlier moment counts: a recording
    /// cannot tell when in between the thread went on, and only what it shows
    /// violates an ordering.
    pub fn observe_earliest(&mut self, spellings: &[EventRef]) {
        let pos = self.next;
        self.next += 1;
        for event in spellings {
            if let Some(e) = self.named.get(event) {
                self.earliest.entry(e).or_insert(pos);
            }
        }
    }

    /// Where a predecessor happened, for the orderings it is in.
    fn predecessor_at(&self, e: &EventRef) -> Option<u64> {
        self.earliest
            .get(e)
            .or_else(|| self.happened.get(e))
            .copied()
    }

    /// Whether a named event has been observed (for a `*` pattern: in some thread).
    pub fn has_happened(&self, event: &EventRef) -> bool {
        if event.thread.is_others() {
            return self.schedule.orderings.iter().enumerate().any(|(i, o)| {
                &o.after == event && self.instances.get(&i).is_some_and(|l| !l.is_empty())
            });
        }
        self.happened.contains_key(event)
    }

    fn unmet(&self, index: usize, o: &Ordering, missing: Vec<EventRef>) -> Unmet {
        Unmet {
            ordering: index,
            line: o.line,
            text: o.to_string(),
            missing,
        }
    }

    /// The verdict over everything observed so far.
    pub fn report(&self) -> CheckReport {
        let mut report = CheckReport {
            held: true,
            ..Default::default()
        };
        for (i, o) in self.schedule.orderings.iter().enumerate() {
            if o.after.thread.is_others() {
                let instances = self.instances.get(&i).map(Vec::as_slice).unwrap_or(&[]);
                for (thread, at) in instances {
                    let late: Vec<EventRef> = o
                        .before
                        .iter()
                        .filter(|b| self.predecessor_at(b).is_none_or(|pos| pos > *at))
                        .cloned()
                        .collect();
                    if !late.is_empty() {
                        report.held = false;
                        let instance = Ordering {
                            after: o.after.in_thread(thread.clone()),
                            ..o.clone()
                        };
                        report.violated.push(Unmet {
                            ordering: i,
                            line: o.line,
                            text: format!("{instance} (from `{o}`)"),
                            missing: late,
                        });
                    }
                }
                if instances.is_empty() {
                    let missing = o
                        .before
                        .iter()
                        .filter(|b| !self.happened.contains_key(b))
                        .cloned()
                        .collect();
                    report.pending.push(self.unmet(i, o, missing));
                }
                continue;
            }
            match self.happened.get(&o.after) {
                Some(&at) => {
                    let late: Vec<EventRef> = o
                        .before
                        .iter()
                        .filter(|b| self.predecessor_at(b).is_none_or(|pos| pos > at))
                        .cloned()
                        .collect();
                    if !late.is_empty() {
                        report.held = false;
                        report.violated.push(self.unmet(i, o, late));
                    }
                }
                None => {
                    let missing = o
                        .before
                        .iter()
                        .filter(|b| !self.happened.contains_key(b))
                        .cloned()
                        .collect();
                    report.pending.push(self.unmet(i, o, missing));
                }
            }
        }
        report.never_happened = self
            .schedule
            .events()
            .into_iter()
            .filter(|e| !self.has_happened(e))
            .cloned()
            .collect();
        report
    }
}

/// Checks a run: `events` in a global order consistent with happens-before (e.g. from
/// [`ordo_trace::global_order`]), named by `namer`.
///
/// A named object's events match both its symbol and its `@K` spelling. A
/// `thread_start` counts as happening right before the thread's next recorded event
/// (or at the end): it stands for the start of the thread's start routine, which a
/// recording does not see (its `thread_start` is the kernel's, which the replayer
/// cannot delay). So does `T:after(E)`, the thread passing the point right after E
/// returned, where it waits for predecessors: nothing the trace records happens in
/// T between the two. Where `T:after(E)` is itself a predecessor, it counts right
/// after E (the thread may have gone on at once; a recording cannot tell), so an
/// ordering is violated only when the recording shows it.
pub fn check<'e>(
    schedule: &Schedule,
    events: impl IntoIterator<Item = &'e Event>,
    namer: &mut EventNamer<'_>,
) -> CheckReport {
    let mut checker = Checker::new(schedule);
    let wants_after = schedule.events().iter().any(|e| e.after);
    // Per thread: names that count right before the thread's next recorded event.
    let mut deferred: HashMap<u32, Vec<EventRef>> = HashMap::new();
    for e in events {
        if let Some(names) = deferred.remove(&e.tid) {
            checker.observe_spellings(&names);
        }
        let names = namer.name_all(e);
        if names.is_empty() {
            continue;
        }
        if e.kind == Kind::ThreadStart {
            deferred.insert(e.tid, names);
        } else {
            checker.observe_spellings(&names);
            if wants_after {
                let after: Vec<EventRef> = names.iter().map(EventRef::after_point).collect();
                checker.observe_earliest(&after);
                deferred.insert(e.tid, after);
            }
        }
    }
    let mut rest: Vec<(u32, Vec<EventRef>)> = deferred.into_iter().collect();
    rest.sort_by_key(|(tid, _)| *tid);
    for (_, start) in rest {
        checker.observe_spellings(&start);
    }
    checker.report()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namer::tests::{ev, table};
    use ordo_trace::symbolize::Symbolizer;
    use ordo_trace::Kind;

    #[test]
    fn held_violated_and_pending() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        // Thread 1 locks and unlocks mutex 0x10, then thread 1.1 locks it.
        let run = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(102, Kind::MutexLock, 0x10),
            ev(102, Kind::MutexUnlock, 0x10),
        ];
        let held = Schedule::parse("1:mutex_unlock(@1)#1 -> 1.1:mutex_lock(@1)#1").unwrap();
        let r = check(&held, &run, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");

        let violated = Schedule::parse("1.1:mutex_unlock(@1)#1 -> 1:mutex_lock(@1)#1").unwrap();
        let r = check(&violated, &run, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held);
        assert_eq!(r.violated.len(), 1);
        assert_eq!(
            r.violated[0].missing[0].to_string(),
            "1.1:mutex_unlock(@1)#1"
        );
        assert_eq!(r.violated[0].to_string(), "line 1: 1.1:mutex_unlock(@1)#1 -> 1:mutex_lock(@1)#1 (waiting for 1.1:mutex_unlock(@1)#1)");

        // The after event never happened: vacuously held, but pending.
        let pending = Schedule::parse("1:mutex_lock(@1)#1 -> 1.1:mutex_lock(@1)#2").unwrap();
        let r = check(&pending, &run, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && !r.complete());
        assert_eq!(r.pending.len(), 1);
        assert!(r.pending[0].missing.is_empty());
        assert_eq!(r.never_happened.len(), 1);

        // A before event that never happened violates the ordering if the after did.
        let missing = Schedule::parse("2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#1").unwrap();
        let r = check(&missing, &run, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held);
    }

    #[test]
    fn star_successor_is_checked_per_thread() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        let s = Schedule::parse("1:mutex_unlock(@1)#1 -> *:mutex_lock(@1)#1").unwrap();
        // Thread 1 unlocks, then 1.1 and 0 lock: held, and thread 1's own lock is excluded.
        let held = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(102, Kind::MutexLock, 0x10),
            ev(100, Kind::MutexLock, 0x10),
        ];
        let r = check(&s, &held, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");
        assert!(r.never_happened.is_empty());
        // 0 locks before thread 1's unlock: violated for 0 only, named concretely.
        let early = [
            ev(101, Kind::MutexLock, 0x10),
            ev(100, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(102, Kind::MutexLock, 0x10),
        ];
        let r = check(&s, &early, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held);
        assert_eq!(r.violated.len(), 1);
        assert_eq!(
            r.violated[0].to_string(),
            "line 1: 1:mutex_unlock(@1)#1 -> 0:mutex_lock(@1)#1 (from `1:mutex_unlock(@1)#1 -> *:mutex_lock(@1)#1`) (waiting for 1:mutex_unlock(@1)#1)"
        );
        // No other thread locked: pending.
        let alone = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
        ];
        let r = check(&s, &alone, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && !r.complete());
        assert_eq!(r.pending.len(), 1);
        assert_eq!(r.never_happened.len(), 1);
        // With `&&`, both left-hand threads are excluded.
        let s2 =
            Schedule::parse("1:mutex_unlock(@1)#1 && 1.1:mutex_lock(@1)#1 -> *:mutex_lock(@1)#1")
                .unwrap();
        let r = check(&s2, &held, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");
    }

    #[test]
    fn thread_start_counts_at_the_threads_first_event() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        // The kernel starts 1.1 before 0's unlock; its first event comes after it.
        let run = [
            ev(100, Kind::MutexLock, 0x10),
            ev(102, Kind::ThreadStart, 0),
            ev(100, Kind::MutexUnlock, 0x10),
            ev(102, Kind::MutexLock, 0x10),
        ];
        let s = Schedule::parse("0:mutex_unlock(@1)#1 -> 1.1:thread_start()#1").unwrap();
        let r = check(&s, &run, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");
        let s = Schedule::parse("1.1:thread_start()#1 -> 0:mutex_unlock(@1)#1").unwrap();
        let r = check(&s, &run, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held);
    }

    #[test]
    fn after_point_counts_at_the_threads_next_event() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        // Thread 1 unlocks; 1.1's whole section comes before 1's next event.
        let run = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(102, Kind::MutexLock, 0x10),
            ev(102, Kind::MutexUnlock, 0x10),
            ev(101, Kind::ThreadExit, 0),
        ];
        let s = Schedule::parse(
            "1:mutex_unlock(@1)#1 -> 1.1:mutex_lock(@1)#1\n\
             1.1:mutex_unlock(@1)#1 -> 1:after(mutex_unlock(@1)#1)\n",
        )
        .unwrap();
        let r = check(&s, &run, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");
        // As a predecessor it counts right after the unlock: a recording cannot
        // tell when thread 1 went on, so nothing here violates it.
        let s = Schedule::parse("1:after(mutex_unlock(@1)#1) -> 1.1:mutex_lock(@1)#1").unwrap();
        let r = check(&s, &run, &mut EventNamer::new(&threads, &sym));
        assert!(r.held && r.complete(), "{r:?}");
        // 1.1 locked before thread 1's unlock: violated.
        let before = [
            ev(101, Kind::MutexLock, 0x10),
            ev(102, Kind::MutexLock, 0x20),
            ev(102, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
        ];
        let s = Schedule::parse("1:after(mutex_unlock(@1)#1) -> 1.1:mutex_lock(@2)#1").unwrap();
        let r = check(&s, &before, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held, "{r:?}");
        // Thread 1 ran on before 1.1's section: the hold was not there.
        let early = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(101, Kind::ThreadExit, 0),
            ev(102, Kind::MutexLock, 0x10),
            ev(102, Kind::MutexUnlock, 0x10),
        ];
        let s = Schedule::parse("1.1:mutex_unlock(@1)#1 -> 1:after(mutex_unlock(@1)#1)").unwrap();
        let r = check(&s, &early, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held, "{r:?}");
    }

    #[test]
    fn conjunction_needs_all_before() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        let run = [
            ev(101, Kind::SemPost, 0x30),
            ev(100, Kind::SemWait, 0x30),
            ev(102, Kind::SemPost, 0x30),
        ];
        let s =
            Schedule::parse("1:sem_post(@1)#1 && 1.1:sem_post(@1)#1 -> 0:sem_wait(@1)#1").unwrap();
        let r = check(&s, &run, &mut EventNamer::new(&threads, &sym));
        assert!(!r.held);
        assert_eq!(r.violated[0].missing.len(), 1);
    }
}
