//! Whether a run satisfied a schedule.
//!
//! An ordering `A && B -> C` holds in a run when C did not happen, or when A and B
//! both happened before C (IMUnit's semantics). It is *violated* when C happened
//! without all of them before it, and *pending* when C has not happened (yet).

use std::collections::HashMap;

use ordo_trace::Event;

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
    next: u64,
}

impl<'s> Checker<'s> {
    /// A checker for `schedule`.
    pub fn new(schedule: &'s Schedule) -> Checker<'s> {
        Checker {
            schedule,
            happened: HashMap::new(),
            next: 0,
        }
    }

    /// Records that `event` happened now (after everything observed before). Events the
    /// schedule does not name are ignored. Returns whether the schedule names it.
    pub fn observe(&mut self, event: &EventRef) -> bool {
        let pos = self.next;
        self.next += 1;
        for o in &self.schedule.orderings {
            for e in o.before.iter().chain(std::iter::once(&o.after)) {
                if e == event {
                    self.happened.entry(e).or_insert(pos);
                    return true;
                }
            }
        }
        false
    }

    /// Whether a named event has been observed.
    pub fn has_happened(&self, event: &EventRef) -> bool {
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
            match self.happened.get(&o.after) {
                Some(&at) => {
                    let late: Vec<EventRef> = o
                        .before
                        .iter()
                        .filter(|b| self.happened.get(b).is_none_or(|&pos| pos > at))
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
            .filter(|e| !self.happened.contains_key(e))
            .cloned()
            .collect();
        report
    }
}

/// Checks a run: `events` in a global order consistent with happens-before (e.g. from
/// [`ordo_trace::global_order`]), named by `namer`.
pub fn check<'e>(
    schedule: &Schedule,
    events: impl IntoIterator<Item = &'e Event>,
    namer: &mut EventNamer<'_>,
) -> CheckReport {
    let mut checker = Checker::new(schedule);
    for e in events {
        if let Some(name) = namer.name(e) {
            checker.observe(&name);
        }
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
