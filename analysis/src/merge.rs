//! A global order of the trace's events, consistent with happens-before, built
//! incrementally while the trace streams in.
//!
//! Same rules as [`ordo_trace::OrderMerger`]: each thread's events stay in program
//! order; an object's sequenced events come out in `seq` order; a thread's start
//! comes after its creation and a join after the joined thread's exit; among the
//! events that are ready, the earliest timestamp goes first; when nothing is ready
//! and no more input can come (or too much is buffered), the earliest head goes
//! anyway, so a gap left by lost events costs precision, never progress.
//!
//! It is a separate implementation because merging dominated the analysis' time
//! with the general one (hash maps keyed by tid, a SipHash lookup per queue per
//! pop): here queues are indexed by the dense thread index, hashing is FxHash, and
//! the head with the earliest timestamp is tried first, so a pop usually costs one
//! scan of the queue heads and one map lookup. Sequence expectations are also seeded
//! from the smallest `seq` pushed for an object before its first pop, as
//! [`ordo_trace::global_order`] does for whole traces.

use std::collections::VecDeque;

use ordo_trace::{Event, Kind};
use rustc_hash::{FxHashMap, FxHashSet};

/// Buffered events beyond which a stalled merge stops waiting for a missing event.
const MAX_BUFFERED: usize = 1 << 20;

#[derive(Clone, Copy)]
struct SeqState {
    next: u64,
    emitted: bool,
}

/// Incremental merge: push events in arrival order, pop them in global order.
#[derive(Default)]
pub struct Merger {
    queues: Vec<VecDeque<Event>>,
    tids: Vec<u32>,
    slot_of_tid: FxHashMap<u32, usize>,
    next_seq: FxHashMap<u64, SeqState>,
    created: FxHashSet<u32>,
    creates_pending: FxHashSet<u32>,
    exited: FxHashSet<u32>,
    handles: FxHashMap<u64, Vec<u32>>,
    buffered: usize,
    finished: bool,
}

impl Merger {
    /// An empty merger.
    pub fn new() -> Merger {
        Merger::default()
    }

    /// Adds the next event in arrival order.
    pub fn push(&mut self, event: Event) {
        if let Some(child) = event.child_tid() {
            self.creates_pending.insert(child);
            self.handles.entry(event.addr).or_default().push(child);
        }
        if event.kind.is_sequenced() {
            let s = self.next_seq.entry(event.addr).or_insert(SeqState {
                next: event.seq,
                emitted: false,
            });
            if !s.emitted && event.seq < s.next {
                s.next = event.seq;
            }
        }
        let slot = match self.slot_of_tid.get(&event.tid) {
            Some(&s) => s,
            None => {
                let s = self.queues.len();
                self.queues.push(VecDeque::new());
                self.tids.push(event.tid);
                self.slot_of_tid.insert(event.tid, s);
                s
            }
        };
        self.queues[slot].push_back(event);
        self.buffered += 1;
    }

    /// Declares that no more events will be pushed: gaps are then skipped.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Events pushed and not yet popped.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    fn ready(&self, e: &Event) -> bool {
        match e.kind {
            Kind::ThreadStart => {
                !self.creates_pending.contains(&e.tid) || self.created.contains(&e.tid)
            }
            Kind::ThreadJoin => match self.join_target(e) {
                Some(child) => self.exited.contains(&child),
                None => true,
            },
            k if k.is_sequenced() => match self.next_seq.get(&e.addr) {
                Some(s) => e.seq <= s.next,
                None => true,
            },
            _ => true,
        }
    }

    fn join_target(&self, e: &Event) -> Option<u32> {
        let children = self.handles.get(&e.addr)?;
        children
            .iter()
            .copied()
            .find(|c| !self.exited.contains(c))
            .or(children.last().copied())
    }

    /// The next event in global order, or `None` when more input is needed (or, after
    /// [`Merger::finish`], when every event was returned).
    pub fn pop(&mut self) -> Option<Event> {
        let mut earliest: Option<(u64, usize)> = None;
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(head) = q.front() {
                if earliest.is_none_or(|(ts, _)| head.ts_ns < ts) {
                    earliest = Some((head.ts_ns, i));
                }
            }
        }
        let (_, first) = earliest?;
        let pick = if self.ready(self.queues[first].front().unwrap()) {
            first
        } else {
            let mut best: Option<(u64, usize)> = None;
            for (i, q) in self.queues.iter().enumerate() {
                if let Some(head) = q.front() {
                    if best.is_none_or(|(ts, _)| head.ts_ns < ts) && self.ready(head) {
                        best = Some((head.ts_ns, i));
                    }
                }
            }
            match best {
                Some((_, i)) => i,
                None if self.finished || self.buffered > MAX_BUFFERED => first,
                None => return None,
            }
        };
        let event = self.queues[pick].pop_front()?;
        self.buffered -= 1;
        self.emitted(&event);
        Some(event)
    }

    fn emitted(&mut self, e: &Event) {
        if e.kind.is_sequenced() {
            let s = self.next_seq.entry(e.addr).or_insert(SeqState {
                next: e.seq,
                emitted: true,
            });
            s.emitted = true;
            s.next = s.next.max(e.seq + 1);
        }
        match e.kind {
            Kind::ThreadCreate => {
                if let Some(child) = e.child_tid() {
                    self.created.insert(child);
                }
            }
            Kind::ThreadExit => {
                self.exited.insert(e.tid);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_trace::Via;

    fn ev(tid: u32, ts: u64, kind: Kind, addr: u64, seq: u64) -> Event {
        Event {
            ts_ns: ts,
            tid,
            thread: 0,
            kind,
            via: Via::Plain,
            addr,
            addr2: 0,
            site: 0,
            seq,
            result: 0,
            value: 0,
            size: 0,
        }
    }

    fn merge(events: Vec<Event>) -> Vec<Event> {
        let mut m = Merger::new();
        for e in events {
            m.push(e);
        }
        m.finish();
        std::iter::from_fn(|| m.pop()).collect()
    }

    #[test]
    fn seq_beats_skewed_timestamps_even_for_an_objects_first_events() {
        // Thread 2's lock has the earliest timestamp (clock skew) but a later seq.
        let events = vec![
            ev(2, 90, Kind::MutexLock, 0xa, 2),
            ev(1, 100, Kind::MutexLock, 0xa, 0),
            ev(1, 110, Kind::MutexUnlock, 0xa, 1),
            ev(2, 120, Kind::MutexUnlock, 0xa, 3),
        ];
        let order: Vec<_> = merge(events).iter().map(|e| (e.tid, e.seq)).collect();
        assert_eq!(order, vec![(1, 0), (1, 1), (2, 2), (2, 3)]);
    }

    #[test]
    fn start_after_create_and_join_after_exit() {
        let mut create = ev(1, 50, Kind::ThreadCreate, 0x77, 0);
        create.value = 2;
        let join = ev(1, 60, Kind::ThreadJoin, 0x77, 0);
        let events = vec![
            ev(2, 10, Kind::ThreadStart, 0, 0),
            ev(2, 70, Kind::ThreadExit, 0, 0),
            create,
            join,
        ];
        let kinds: Vec<_> = merge(events).iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                Kind::ThreadCreate,
                Kind::ThreadStart,
                Kind::ThreadExit,
                Kind::ThreadJoin
            ]
        );
    }

    #[test]
    fn waits_for_input_until_finished_and_skips_gaps_then() {
        let mut m = Merger::new();
        m.push(ev(1, 100, Kind::MutexLock, 0xa, 0));
        m.push(ev(1, 110, Kind::MutexUnlock, 0xa, 1));
        m.push(ev(2, 90, Kind::MutexLock, 0xa, 5));
        assert_eq!(m.pop().map(|e| e.seq), Some(0));
        assert_eq!(m.pop().map(|e| e.seq), Some(1));
        // seq 2..4 are missing: wait for more input…
        assert!(m.pop().is_none());
        assert_eq!(m.buffered(), 1);
        // …until no more can come.
        m.finish();
        assert_eq!(m.pop().map(|e| e.seq), Some(5));
        assert!(m.pop().is_none());
    }

    #[test]
    fn agrees_with_the_trace_crates_merger() {
        // A generated run in arrival order: both mergers give the same order.
        let mut b = crate::synthetic::TraceBuilder::new();
        let t1 = b.spawn(crate::synthetic::MAIN_TID);
        let t2 = b.spawn(crate::synthetic::MAIN_TID);
        b.create(crate::synthetic::MAIN_TID, t1, 0x10, 1);
        b.create(crate::synthetic::MAIN_TID, t2, 0x18, 1);
        for i in 0..50u64 {
            let t = if i % 3 == 0 { t1 } else { t2 };
            b.lock(t, 0xa0 + (i % 2) * 8, 2);
            b.unlock(t, 0xa0 + (i % 2) * 8, 3);
        }
        b.exit_join(crate::synthetic::MAIN_TID, t1, 0x10, 4);
        b.exit_join(crate::synthetic::MAIN_TID, t2, 0x18, 4);
        let ours: Vec<_> = merge(b.events().to_vec())
            .iter()
            .map(|e| (e.tid, e.ts_ns))
            .collect();
        let theirs: Vec<_> = ordo_trace::global_order(b.events().to_vec())
            .iter()
            .map(|e| (e.tid, e.ts_ns))
            .collect();
        assert_eq!(ours, theirs);
    }
}
