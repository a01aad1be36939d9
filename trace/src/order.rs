//! A global order of a trace's events consistent with happens-before.
//!
//! The ring buffer delivers each thread's events in program order, but events of
//! different threads interleave by CPU, and timestamps from different CPUs can be too
//! close to order. [`OrderMerger`] merges the per-thread streams so that every
//! object's sequenced events come out in `seq` order, a thread's start comes after
//! its creation and a join after the joined thread's exit; among the events that are
//! ready it takes the earliest timestamp. Events lost to a full ring buffer leave
//! gaps in `seq`: when nothing is ready the earliest head is taken anyway, so a gap
//! costs precision, never progress.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::event::{Event, Kind};

/// Buffered events beyond which a stalled merge gives up waiting for a missing event.
const MAX_BUFFERED: usize = 1 << 20;

/// Incremental merge: push events in arrival order, pop them in global order.
#[derive(Default)]
pub struct OrderMerger {
    queues: HashMap<u32, VecDeque<Event>>,
    tids: Vec<u32>,
    next_seq: HashMap<u64, u64>,
    created: HashSet<u32>,
    creates_pending: HashMap<u32, u32>,
    exited: HashSet<u32>,
    handles: HashMap<u64, Vec<u32>>,
    joins: HashMap<u64, usize>,
    buffered: usize,
    finished: bool,
}

impl OrderMerger {
    /// An empty merger.
    pub fn new() -> OrderMerger {
        OrderMerger::default()
    }

    /// Adds the next event in arrival order.
    pub fn push(&mut self, event: Event) {
        if let Some(child) = event.child_tid() {
            *self.creates_pending.entry(child).or_insert(0) += 1;
            self.handles.entry(event.addr).or_default().push(child);
        }
        let queue = self.queues.entry(event.tid).or_insert_with(|| {
            self.tids.push(event.tid);
            VecDeque::new()
        });
        queue.push_back(event);
        self.buffered += 1;
    }

    /// Declares that no more events will be pushed: gaps are then skipped.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    fn ready(&self, e: &Event) -> bool {
        match e.kind {
            Kind::ThreadStart => {
                !self.creates_pending.contains_key(&e.tid) || self.created.contains(&e.tid)
            }
            Kind::ThreadJoin => match self.join_target(e) {
                Some(child) => self.exited.contains(&child),
                None => true,
            },
            k if k.is_sequenced() => match self.next_seq.get(&e.addr) {
                Some(&next) => e.seq <= next,
                None => true,
            },
            _ => true,
        }
    }

    /// The thread a join waits for. glibc reuses a joined thread's descriptor (the
    /// pthread_t) for later threads, so a handle's joins match its creations in order.
    fn join_target(&self, e: &Event) -> Option<u32> {
        let children = self.handles.get(&e.addr)?;
        children
            .get(self.joins.get(&e.addr).copied().unwrap_or(0))
            .copied()
    }

    /// The next event in global order, or `None` when more input is needed (or, after
    /// [`OrderMerger::finish`], when all events were returned).
    pub fn pop(&mut self) -> Option<Event> {
        let mut best: Option<(u64, usize)> = None;
        let mut earliest: Option<(u64, usize)> = None;
        for (i, tid) in self.tids.iter().enumerate() {
            let Some(head) = self.queues.get(tid).and_then(|q| q.front()) else {
                continue;
            };
            if earliest.is_none_or(|(ts, _)| head.ts_ns < ts) {
                earliest = Some((head.ts_ns, i));
            }
            if self.ready(head) && best.is_none_or(|(ts, _)| head.ts_ns < ts) {
                best = Some((head.ts_ns, i));
            }
        }
        let pick = match best {
            Some((_, i)) => i,
            None if self.finished || self.buffered > MAX_BUFFERED => earliest?.1,
            None => return None,
        };
        if best.is_none() && !self.finished {
            // A thread's head waits on an event that will not come (lost to a full
            // ring buffer); only force progress when no later input can unblock it.
        }
        let tid = self.tids[pick];
        let event = self.queues.get_mut(&tid)?.pop_front()?;
        self.buffered -= 1;
        self.emitted(&event);
        Some(event)
    }

    fn emitted(&mut self, e: &Event) {
        if e.kind.is_sequenced() {
            let next = self.next_seq.entry(e.addr).or_insert(e.seq);
            *next = (*next).max(e.seq + 1);
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
            Kind::ThreadJoin if e.result == 0 => {
                *self.joins.entry(e.addr).or_insert(0) += 1;
            }
            _ => {}
        }
    }

    /// Events pushed and not yet popped.
    pub fn buffered(&self) -> usize {
        self.buffered
    }
}

/// Orders a whole trace (see the module docs).
pub fn global_order(events: Vec<Event>) -> Vec<Event> {
    // Sequence numbers of an object start wherever the recording started, so seed each
    // object's expectation with the smallest one seen.
    let mut merger = OrderMerger::new();
    for e in &events {
        if e.kind.is_sequenced() {
            let next = merger.next_seq.entry(e.addr).or_insert(e.seq);
            *next = (*next).min(e.seq);
        }
    }
    let n = events.len();
    for e in events {
        merger.push(e);
    }
    merger.finish();
    let mut out = Vec::with_capacity(n);
    while let Some(e) = merger.pop() {
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Via;

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

    #[test]
    fn seq_beats_skewed_timestamps() {
        // Thread 2's lock has an earlier timestamp (clock skew) but a later seq.
        let events = vec![
            ev(1, 100, Kind::MutexLock, 0xa, 0),
            ev(1, 110, Kind::MutexUnlock, 0xa, 1),
            ev(2, 105, Kind::MutexLock, 0xa, 2),
            ev(2, 120, Kind::MutexUnlock, 0xa, 3),
        ];
        let order: Vec<_> = global_order(events)
            .iter()
            .map(|e| (e.tid, e.seq))
            .collect();
        assert_eq!(order, vec![(1, 0), (1, 1), (2, 2), (2, 3)]);
    }

    #[test]
    fn start_after_create_and_join_after_exit() {
        let mut create = ev(1, 50, Kind::ThreadCreate, 0x77, 0);
        create.value = 2;
        let mut join = ev(1, 60, Kind::ThreadJoin, 0x77, 0);
        join.result = 0;
        let events = vec![
            ev(2, 10, Kind::ThreadStart, 0, 0),
            ev(2, 70, Kind::ThreadExit, 0, 0),
            create,
            join,
        ];
        let kinds: Vec<_> = global_order(events).iter().map(|e| e.kind).collect();
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
    fn gaps_do_not_stall() {
        let events = vec![
            ev(1, 100, Kind::MutexLock, 0xa, 0),
            ev(2, 90, Kind::MutexLock, 0xa, 5),
        ];
        assert_eq!(global_order(events).len(), 2);
    }
}
