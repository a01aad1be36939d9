//! Pinning a failing run that no candidate schedule describes (a PCT or random-walk
//! run, or a recording that failed by itself): the order its synchronization events
//! took on each object, as a schedule `ordo replay` can enforce.
//!
//! For every object, each event that follows another thread's event on it becomes
//! `previous -> next`: the hand-overs of each lock, semaphore, condvar and futex word
//! between threads, as the run had them. Events inside a thread keep their program
//! order anyway. When the run had more hand-overs than a plan can name, the last
//! ones are kept: those nearest the failure.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use ordo_schedule::{EventNamer, EventRef, Family, Ordering, Schedule, ThreadRef};
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{global_order, read_trace, Event, Kind, ReadMode, Via};

/// Most distinct events a pinned schedule names (the replay plan holds 512).
pub const MAX_PINNED_EVENTS: usize = 400;
/// Most distinct threads a pinned schedule names (the replay plan holds 64).
pub const MAX_PINNED_THREADS: usize = 60;

/// The schedule of hand-overs between threads in the recorded run `trace`.
pub fn schedule_of_run(trace: &Path) -> Result<Schedule> {
    let (reader, events) = read_trace(trace, ReadMode::Salvage)
        .with_context(|| format!("read the failing run's trace {}", trace.display()))?;
    let symbolizer = Symbolizer::new(&reader.modules);
    let mut namer = EventNamer::new(&reader.threads, &symbolizer);
    let mut last_on: HashMap<(usize, u64), EventRef> = HashMap::new();
    let mut orderings = Vec::new();
    for e in global_order(events) {
        if !pinnable(&e) {
            continue;
        }
        let Some(name) = namer.name(&e) else { continue };
        let family = Family::of(e.kind);
        if family == Family::NoObject {
            continue;
        }
        if let Some(prev) = last_on.insert((family.index(), e.addr), name.clone()) {
            if prev.thread != name.thread && gated_before(&e) {
                orderings.push(Ordering {
                    before: vec![prev],
                    after: name,
                    line: 0,
                });
            }
        }
    }
    Ok(Schedule {
        orderings: keep_last_fitting(orderings),
    })
}

/// Events a schedule can name and a replay can see (not variable accesses, not a
/// thread's creation, which is gated by occurrence only).
fn pinnable(e: &Event) -> bool {
    !e.kind.is_access() && !matches!(e.kind, Kind::MutexBlock | Kind::ThreadCreate)
}

/// Whether the agent holds the thread *before* the event takes effect; the wake-up
/// side of a condvar wait or a barrier is gated only after it returned, which would
/// pin it too late to mean anything.
fn gated_before(e: &Event) -> bool {
    !(matches!(e.kind, Kind::CondWait | Kind::BarrierWait)
        || (e.kind == Kind::MutexLock && e.via == Via::CondWait))
}

/// The longest suffix of `orderings` that fits a replay plan.
fn keep_last_fitting(orderings: Vec<Ordering>) -> Vec<Ordering> {
    let mut events: Vec<&EventRef> = Vec::new();
    let mut threads: Vec<&ThreadRef> = Vec::new();
    let mut first_kept = orderings.len();
    for (i, o) in orderings.iter().enumerate().rev() {
        for e in o.before.iter().chain(std::iter::once(&o.after)) {
            if !events.contains(&e) {
                events.push(e);
            }
            if !threads.contains(&&e.thread) {
                threads.push(&e.thread);
            }
        }
        if events.len() > MAX_PINNED_EVENTS || threads.len() > MAX_PINNED_THREADS {
            break;
        }
        first_kept = i;
    }
    orderings.into_iter().skip(first_kept).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_keep_the_hand_overs_nearest_the_end() {
        let text: String = (1..=300)
            .map(|i| format!("1:mutex_unlock(m)#{i} -> 2:mutex_lock(m)#{i}\n"))
            .collect();
        let schedule = Schedule::parse(&text).unwrap();
        let kept = keep_last_fitting(schedule.orderings.clone());
        assert_eq!(kept.len(), MAX_PINNED_EVENTS / 2);
        assert_eq!(kept.last(), schedule.orderings.last());
    }
}
