//! Pinning a failing run that no candidate schedule describes (a PCT or random-walk
//! run, or a recording that failed by itself): the order its synchronization events
//! took on each object, as a schedule `ordo replay` can enforce.
//!
//! For every object, each event that follows another thread's event on it becomes
//! `previous -> next`: the hand-overs of each lock, semaphore, condvar and futex word
//! between threads, as the run had them. Events inside a thread keep their program
//! order anyway. Two orderings are no hand-over (see [`LockSections`]): a thread
//! still blocked in a lock when the run ended (the recorder's `blocked` events)
//! comes after the acquisitions of the threads holding it, which pins a deadlock's
//! whole cycle; a failed try goes inside the other thread's section it failed
//! against. When the run had more hand-overs than a plan can name, the last ones
//! are kept: those nearest the failure.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use ordo_schedule::namer::is_cond_wait_mutex_event;
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
    let symbolizer = Symbolizer::of_trace(&reader);
    let mut namer = EventNamer::new(&reader.threads, &symbolizer);
    let mut last_on: HashMap<(usize, u64), EventRef> = HashMap::new();
    let mut locks = LockSections::default();
    let mut cond_sides = CondWaitSides::default();
    let mut orderings = Vec::new();
    // Stamped like the thread's last event before it blocked, but blocked until the
    // end: placed once every lock taken meanwhile is known.
    let mut blocked = Vec::new();
    let mut timeline = Vec::new();
    for e in global_order(events) {
        if e.kind == Kind::Blocked {
            blocked.push(e);
            continue;
        }
        if !pinnable(&e) {
            continue;
        }
        let Some(name) = cond_sides.name(&mut namer, &e) else {
            continue;
        };
        let family = Family::of(e.kind);
        if family == Family::NoObject {
            continue;
        }
        // The events of each thread, in global order, for the frontier. A wait's
        // return stands there at its reacquisition of the mutex, which the mutex's
        // order places after the sections it waited for; the condvar's record of
        // it is stamped by the clock, which may put it before them.
        if e.kind != Kind::CondWait {
            timeline.push((name.thread.clone(), name.clone(), gated_before(&e)));
        }
        if is_failed_try(e.kind) && e.via == Via::Try {
            // No hand-over: it failed because another thread held the object.
            locks.failed.push((name, e.addr, e.ts_ns));
            continue;
        }
        locks.note(&e, &name);
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
    for e in &blocked {
        locks.blocked(e, &mut namer, &mut orderings);
    }
    locks.place_failed_tries(&mut orderings);
    let frontier = frontier(&timeline);
    orderings.extend(acyclic_additions(&orderings, frontier, &timeline));
    Ok(Schedule {
        orderings: keep_last_fitting(orderings),
    })
}

/// Program points (instructions) a thread can be held at in a replay: x86's debug
/// registers, one per point.
pub const MAX_POINTS_PER_THREAD: usize = 4;

/// `base` strengthened by the order the discovered shared accesses took in the
/// recorded run `trace` (`ordo record --discover`): for each location, each read
/// after another thread's last write, and each write after every other thread's
/// read since the last write (or after that write), becomes `previous -> next`,
/// named by instruction (`T:at(function+OFFSET)#N`) — so a store every reader
/// saw, or a store no reader saw, is pinned against all of them, not only the
/// nearest one. Taken
/// from the end of the run backwards (nearest the failure first) while every
/// thread stays within [`MAX_POINTS_PER_THREAD`] program points, those `base`
/// already names included. What a candidate's orderings leave free — which value a
/// pointer had when it was loaded, whether a flag was set yet — is what these pin.
pub fn with_access_handovers(base: &Schedule, trace: &Path) -> Result<Schedule> {
    let (reader, events) = read_trace(trace, ReadMode::Salvage)
        .with_context(|| format!("read the failing run's trace {}", trace.display()))?;
    let symbolizer = Symbolizer::of_trace(&reader);
    let mut namer = EventNamer::new(&reader.threads, &symbolizer);
    // Per address: the last write, and the reads since it (each: name, thread,
    // the locks its thread held — lock address and acquisition — and its index).
    type Held = Vec<(u64, EventRef)>;
    type Seen = (EventRef, u32, Held, usize);
    #[derive(Default)]
    struct Location {
        last_write: Option<Seen>,
        reads: Vec<Seen>,
    }
    let mut locations: HashMap<u64, Location> = HashMap::new();
    let mut held: HashMap<u32, Held> = HashMap::new();
    let mut cond_sides = CondWaitSides::default();
    let mut handovers: Vec<Ordering> = Vec::new();
    // When each thread was created (its creator's `thread_create`, else its first
    // event): an access made before that is ordered before all of the thread by its
    // creation, and pinning it would only spend a point. (Not the thread's own first
    // event: a thread created before an access may start after it.)
    let mut created: HashMap<u32, usize> = HashMap::new();
    for (index, e) in global_order(events).into_iter().enumerate() {
        if let Some(child) = e.child_tid() {
            created.entry(child).or_insert(index);
        }
        created.entry(e.tid).or_insert(index);
        if !(e.kind.is_access() && e.via.is_point()) {
            // Named all the same, so occurrence counts stay right.
            let name = cond_sides.name(&mut namer, &e);
            let stack = held.entry(e.tid).or_default();
            match (e.kind, name) {
                (Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock, Some(n)) => {
                    stack.push((e.addr, n))
                }
                (Kind::MutexUnlock | Kind::RwlockUnlock, _) => {
                    if let Some(i) = stack.iter().rposition(|(a, _)| *a == e.addr) {
                        stack.remove(i);
                    }
                }
                _ => {}
            }
            continue;
        }
        let Some(name) = namer.name(&e) else { continue };
        let mine = held.get(&e.tid).cloned().unwrap_or_default();
        let location = locations.entry(e.addr).or_default();
        // What this access follows: a read, the last write; a write, every read
        // since the last write (all of them must come first), else that write.
        let previous: Vec<&Seen> = if e.kind == Kind::Read {
            location.last_write.iter().collect()
        } else if location.reads.iter().any(|r| r.1 != e.tid) {
            location.reads.iter().collect()
        } else {
            location.last_write.iter().collect()
        };
        for (prev, prev_tid, prev_held, prev_index) in previous {
            let created_after = created.get(&e.tid).is_some_and(|&f| *prev_index < f);
            if *prev_tid == e.tid || created_after {
                continue;
            }
            // Both under one lock: the lock's hand-over orders them (held inside
            // its section, the later thread would keep the earlier one out).
            let common = prev_held
                .iter()
                .find_map(|(a, acq)| Some((acq, &mine.iter().find(|(b, _)| b == a)?.1)));
            let (before, after) = match common {
                Some((first, second)) => (first.clone(), second.clone()),
                None => (prev.clone(), name.clone()),
            };
            handovers.push(Ordering {
                before: vec![before],
                after,
                line: 0,
            });
        }
        let seen = (name, e.tid, mine, index);
        if e.kind == Kind::Read {
            location.reads.push(seen);
        } else {
            location.last_write = Some(seen);
            location.reads.clear();
        }
    }
    let mut points: HashMap<ThreadRef, Vec<String>> = HashMap::new();
    let note = |e: &EventRef, points: &mut HashMap<ThreadRef, Vec<String>>| -> bool {
        if e.kind != Kind::At {
            return true;
        }
        let list = points.entry(e.thread.clone()).or_default();
        let object = e.object.to_string();
        if list.contains(&object) {
            return true;
        }
        if list.len() >= MAX_POINTS_PER_THREAD {
            return false;
        }
        list.push(object);
        true
    };
    for o in &base.orderings {
        for e in o.before.iter().chain(std::iter::once(&o.after)) {
            note(e, &mut points);
        }
    }
    let mut out = base.clone();
    let known: std::collections::HashSet<String> =
        base.orderings.iter().map(|o| o.to_string()).collect();
    for h in handovers.into_iter().rev() {
        if known.contains(&h.to_string()) {
            continue;
        }
        let mut trial = points.clone();
        if note(&h.before[0], &mut trial) && note(&h.after, &mut trial) {
            points = trial;
            out.orderings.push(h);
        }
    }
    Ok(out)
}

/// Threads whose last event the frontier orders (those that acted last).
const FRONTIER_THREADS: usize = 2;

/// Where the threads stood when the run failed, across objects: the last event of
/// each of the [`FRONTIER_THREADS`] threads that acted last waits for the latest
/// event each other thread had before it. A failure often depends on how far one
/// thread got while another acted on a different object (a lock destroyed, then
/// the shutdown logged under another lock, before a late thread's lock), which no
/// hand-over on one object says. `timeline`: (thread, event, gated before it takes
/// effect) in the run's global order.
fn frontier(timeline: &[(ThreadRef, EventRef, bool)]) -> Vec<Ordering> {
    let mut last_of: Vec<(&ThreadRef, usize)> = Vec::new();
    for (i, (thread, ..)) in timeline.iter().enumerate() {
        match last_of.iter_mut().find(|(t, _)| *t == thread) {
            Some(entry) => entry.1 = i,
            None => last_of.push((thread, i)),
        }
    }
    if last_of.len() < 2 || last_of.len() > MAX_PINNED_THREADS {
        return Vec::new();
    }
    last_of.sort_by_key(|&(_, i)| i);
    let mut out = Vec::new();
    for &(thread, at) in last_of.iter().rev().take(FRONTIER_THREADS) {
        let (_, last, gated) = &timeline[at];
        if !gated {
            continue;
        }
        for &(other, _) in &last_of {
            if other == thread {
                continue;
            }
            if let Some((_, before, _)) = timeline[..at].iter().rev().find(|(t, ..)| t == other) {
                out.push(Ordering {
                    before: vec![before.clone()],
                    after: last.clone(),
                    line: 0,
                });
            }
        }
    }
    out
}

/// Those of `extra` that close no cycle with `base` and each thread's program
/// order (`timeline`), kept in turn. The frontier's orderings come from the
/// clock's order across objects, which can disagree with an object's own order
/// by the time between an event and its record: such an ordering would make the
/// schedule infeasible.
fn acyclic_additions(
    base: &[Ordering],
    extra: Vec<Ordering>,
    timeline: &[(ThreadRef, EventRef, bool)],
) -> Vec<Ordering> {
    let mut next: HashMap<&EventRef, Vec<&EventRef>> = HashMap::new();
    let mut last_of: HashMap<&ThreadRef, &EventRef> = HashMap::new();
    for (thread, event, _) in timeline {
        if let Some(previous) = last_of.insert(thread, event) {
            if previous != event {
                next.entry(previous).or_default().push(event);
            }
        }
    }
    for o in base {
        for b in &o.before {
            next.entry(b).or_default().push(&o.after);
        }
    }
    let reaches = |next: &HashMap<&EventRef, Vec<&EventRef>>, from: &EventRef, to: &EventRef| {
        let mut stack = vec![from];
        let mut seen = std::collections::HashSet::new();
        while let Some(e) = stack.pop() {
            if e == to {
                return true;
            }
            if seen.insert(e) {
                stack.extend(next.get(e).into_iter().flatten().copied());
            }
        }
        false
    };
    let mut kept = Vec::new();
    for o in &extra {
        if o.before.iter().any(|b| reaches(&next, &o.after, b)) {
            continue;
        }
        for b in &o.before {
            next.entry(b).or_default().push(&o.after);
        }
        kept.push(o);
    }
    kept.into_iter().cloned().collect()
}

fn is_failed_try(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::MutexLockFailed | Kind::RwlockLockFailed | Kind::SemWaitFailed
    )
}

/// One thread's critical section on a lock, as named events and time stamps.
struct Section {
    lock: EventRef,
    lock_ts: u64,
    unlock: Option<(EventRef, u64)>,
}

/// The lock and unlock events of the run, for the orderings that are no hand-over
/// between consecutive events on an object:
///
/// - a thread still blocked in a lock when the run ended (a deadlock, a hang)
///   waited for the threads holding it: their acquisitions come before its attempt
///   (named as the occurrence it would have been). A deadlock's cycle is then
///   pinned whole: each thread's held lock before the other's blocked attempt.
/// - a failed try (trylock, trywait) happened while another thread held the
///   object: it goes inside that section (after its lock, before its unlock). Its
///   time stamp, not its place among the object's sequenced events, says which
///   section (a failed try takes no sequence number): the section of another
///   thread nearest to it in time.
#[derive(Default)]
struct LockSections {
    /// Per lock: every section so far, in order.
    sections: HashMap<u64, Vec<Section>>,
    /// Failed tries: their name, object and time.
    failed: Vec<(EventRef, u64, u64)>,
}

impl LockSections {
    fn note(&mut self, e: &Event, name: &EventRef) {
        match e.kind {
            Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock => {
                self.sections.entry(e.addr).or_default().push(Section {
                    lock: name.clone(),
                    lock_ts: e.ts_ns,
                    unlock: None,
                })
            }
            Kind::MutexUnlock | Kind::RwlockUnlock => {
                if let Some(s) = self.sections.get_mut(&e.addr).and_then(|v| {
                    v.iter_mut()
                        .rev()
                        .find(|s| s.lock.thread == name.thread && s.unlock.is_none())
                }) {
                    s.unlock = Some((name.clone(), e.ts_ns));
                }
            }
            _ => {}
        }
    }

    /// A thread blocked in a lock at the end of the run: ordered after the
    /// acquisitions of the threads that still held it.
    fn blocked(&mut self, e: &Event, namer: &mut EventNamer, orderings: &mut Vec<Ordering>) {
        let Some(attempted @ (Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock)) =
            Kind::from_code(e.value as u16)
        else {
            return;
        };
        let attempt = Event {
            kind: attempted,
            via: Via::Plain,
            ..*e
        };
        let Some(name) = namer.name(&attempt) else {
            return;
        };
        for s in self.sections.get(&e.addr).into_iter().flatten() {
            if s.unlock.is_none() && s.lock.thread != name.thread {
                orderings.push(Ordering {
                    before: vec![s.lock.clone()],
                    after: name.clone(),
                    line: 0,
                });
            }
        }
    }

    /// Each failed try inside the nearest (in time) complete section of another
    /// thread on its object.
    fn place_failed_tries(&self, orderings: &mut Vec<Ordering>) {
        for (name, addr, ts) in &self.failed {
            let nearest = self
                .sections
                .get(addr)
                .into_iter()
                .flatten()
                .filter(|s| s.lock.thread != name.thread)
                .filter_map(|s| {
                    let (unlock, unlock_ts) = s.unlock.as_ref()?;
                    let distance = if *ts < s.lock_ts {
                        s.lock_ts - ts
                    } else {
                        ts.saturating_sub(*unlock_ts)
                    };
                    Some((distance, &s.lock, unlock))
                })
                .min_by_key(|(distance, ..)| *distance);
            if let Some((_, lock, unlock)) = nearest {
                orderings.push(Ordering {
                    before: vec![lock.clone()],
                    after: name.clone(),
                    line: 0,
                });
                orderings.push(Ordering {
                    before: vec![name.clone()],
                    after: unlock.clone(),
                    line: 0,
                });
            }
        }
    }
}

/// Events a schedule can name and a replay can see (not variable accesses, not a
/// thread's creation, which is gated by occurrence only).
fn pinnable(e: &Event) -> bool {
    !e.kind.is_access()
        && !matches!(
            e.kind,
            Kind::MutexBlock | Kind::Blocked | Kind::ThreadCreate
        )
}

/// Whether the agent holds the thread *before* the event takes effect. A condvar
/// wait's return is: a waiter woken before its turn gives the mutex back, waits at
/// the gate and takes the mutex again (`agent::interpose::cond_wait`), so
/// `X -> T:cond_wait(cv)#k` holds T's reacquisition after X. A barrier's release is
/// gated only after it returned, which would pin it too late to mean anything.
fn gated_before(e: &Event) -> bool {
    e.kind != Kind::BarrierWait
}

/// Names for the mutex side of condvar waits, which the namer leaves unnamed
/// (`ordo_schedule::namer`): the release inside a wait is the thread's
/// `cond_wait_begin(cv)#k`, the reacquisition its `cond_wait(cv)#k` — the events
/// the agent gates before the mutex changes hands. Without them a waiter woken
/// early was free to take the mutex before the sections the failing run had
/// between its wake-up and its reacquisition (a producer refilling a ring slot
/// before the consumer's second section, or not: `ring_chain`).
#[derive(Default)]
struct CondWaitSides {
    /// Per thread: the name of its last `cond_wait_begin` and `cond_wait`.
    last: HashMap<u32, (Option<EventRef>, Option<EventRef>)>,
}

impl CondWaitSides {
    /// The event's schedule name ([`EventNamer::name`]), or for the mutex side of a
    /// condvar wait, the wait's event's. Call it once per event in each thread's
    /// program order, as the namer.
    fn name(&mut self, namer: &mut EventNamer, e: &Event) -> Option<EventRef> {
        if is_cond_wait_mutex_event(e) {
            let (begin, wait) = self.last.get(&e.tid)?;
            return match e.kind {
                Kind::MutexUnlock => begin.clone(),
                Kind::MutexLock => wait.clone(),
                _ => None,
            };
        }
        let name = namer.name(e)?;
        match e.kind {
            Kind::CondWaitBegin => self.last.entry(e.tid).or_default().0 = Some(name.clone()),
            Kind::CondWait => self.last.entry(e.tid).or_default().1 = Some(name.clone()),
            _ => {}
        }
        Some(name)
    }
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

    /// The clock's order across objects put a woken waiter's return before the
    /// unlock it waited for (`cond_if`'s natural failure): the frontier's ordering
    /// of the two would close a cycle with the mutex's hand-over, and is dropped;
    /// one that closes none is kept.
    #[test]
    fn frontier_orderings_that_close_a_cycle_are_dropped() {
        let parse = |text: &str| Schedule::parse(text).unwrap().orderings;
        let base = parse("3:mutex_unlock(m)#1 -> 2:cond_wait(cv)#1\n");
        let extra = parse(
            "2:cond_wait(cv)#1 -> 3:thread_exit()#1\n\
             1:mutex_unlock(m)#1 -> 2:cond_wait(cv)#1\n",
        );
        let cyclic = parse("2:cond_wait(cv)#1 -> 3:mutex_unlock(m)#1\n");
        let event = |o: &Ordering| o.after.clone();
        // Thread 3's program order: its unlock, then its exit.
        let timeline = vec![
            (cyclic[0].after.thread.clone(), event(&cyclic[0]), true),
            (extra[0].after.thread.clone(), event(&extra[0]), true),
        ];
        let all: Vec<Ordering> = cyclic.iter().chain(&extra).cloned().collect();
        let kept = acyclic_additions(&base, all, &timeline);
        assert_eq!(kept, extra, "{kept:?}");
    }

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
