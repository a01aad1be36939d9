//! A global order of a trace's events consistent with happens-before, built
//! incrementally while the trace streams in.
//!
//! The ring buffer delivers each thread's events in program order, but events of
//! different threads interleave by CPU, and timestamps from different CPUs can be too
//! close to order. [`OrderMerger`] merges the per-thread streams so that every
//! object's sequenced events come out in `seq` order, a thread's start comes after
//! its creation and a join after the joined thread's exit (a handle's joins match its
//! creations in order); among the events that are ready it takes the earliest
//! timestamp. Events lost to a full ring buffer leave gaps in `seq`: when nothing is
//! ready and no more input can come (or too much is buffered), the earliest head goes
//! anyway, so a gap costs precision, never progress. An object's sequence expectation
//! is seeded from the smallest `seq` pushed for it before its first pop.
//!
//! A read that returned a value the variable's last access did not leave there read
//! from a write that is not out yet. A hardware watchpoint records a write only after
//! it took effect (the trap follows the store), so another thread's load can see the
//! value and be recorded first, with the smaller `seq`. Such a read waits for a
//! write of that value, which may then go ahead of it out of `seq` order; if none
//! comes within [`READ_LAG_NS`] of later input (the value came from an access
//! nobody watched), the read goes as recorded.
//!
//! It is on the analysis' hot path, so queues are indexed by the dense thread
//! index, hashing is FxHash, the head with the earliest timestamp is tried first
//! (a pop usually costs one scan of a small array), and sequence slots sit behind a
//! direct-mapped cache.

use std::collections::VecDeque;

use crate::event::{Event, Kind};
use rustc_hash::{FxHashMap, FxHashSet};

/// Buffered events beyond which a stalled merge stops waiting for a missing event.
const MAX_BUFFERED: usize = 1 << 20;

/// How many entries ahead of a queue's head to prefetch when popping.
const PREFETCH_AHEAD: usize = 6;

/// Entries of the sequence-slot cache.
const SEQ_CACHE: usize = 256;

/// No sequence slot (the event is not sequenced).
const NO_SEQ: u32 = u32::MAX;

/// How long (in timestamps of the input) a read that saw a value not yet written
/// waits for the write that wrote it. A hardware breakpoint's trap is recorded
/// within microseconds of the store.
pub const READ_LAG_NS: u64 = 1_000_000;

#[derive(Clone, Copy)]
struct SeqState {
    next: u64,
    emitted: bool,
    /// What the last access that went out left in the variable, when known.
    left: Option<Observed>,
}

/// A value seen at an exact byte address and width.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Observed {
    addr: u64,
    size: u8,
    value: u64,
}

impl SeqState {
    fn new(next: u64) -> SeqState {
        SeqState {
            next,
            emitted: false,
            left: None,
        }
    }

    /// Whether `e` is a read of a value the last access did not leave: it read
    /// from a write not out yet.
    #[inline(always)]
    fn read_ahead(&self, e: &Event) -> bool {
        e.kind == Kind::Read
            && self
                .left
                .is_some_and(|o| o.addr == e.addr2 && o.size == e.size && o.value != e.value)
    }

    /// Takes note of what an access that went out left in the variable.
    #[inline(always)]
    fn went_out(&mut self, e: &Event) {
        self.emitted = true;
        self.next = self.next.max(e.seq + 1);
        self.left = match e.kind {
            Kind::Read | Kind::Write => Some(Observed {
                addr: e.addr2,
                size: e.size,
                value: e.value,
            }),
            // A read-modify-write's recorded value is the one before it (uprobes) or
            // after it (hardware traps): what it left is not known.
            Kind::Rmw => None,
            _ => self.left,
        };
    }
}

/// Incremental merge: push events in arrival order, pop them in global order.
#[derive(Default)]
pub struct OrderMerger {
    /// Per slot: buffered events with their sequence slot (or [`NO_SEQ`]).
    queues: Vec<VecDeque<(Event, u32)>>,
    /// Per slot: the timestamp of the queue's head (`u64::MAX` when empty), so the
    /// earliest head is a scan of one small array.
    head_ts: Vec<u64>,
    tids: Vec<u32>,
    slot_of_tid: FxHashMap<u32, usize>,
    /// Slot by the event's dense thread index, when its tid matches (skips the map).
    slot_of_thread: Vec<(u32, usize)>,
    /// Sequence slot by object address; states indexed by slot.
    seq_slot: FxHashMap<u64, u32>,
    seqs: Vec<SeqState>,
    /// Direct-mapped cache in front of `seq_slot`: (address, slot).
    seq_cache: Vec<(u64, u32)>,
    /// Per slot: the dense thread index it was last looked up by (to clear
    /// `slot_of_thread` when the slot is freed).
    thread_of_slot: Vec<u32>,
    /// Per slot: its thread exited; the slot is freed once its queue drains.
    closing: Vec<bool>,
    /// Freed slots, reused before new ones: the merge's per-event work and memory
    /// follow the live threads, not every thread ever created.
    free_slots: Vec<usize>,
    created: FxHashSet<u32>,
    creates_pending: FxHashSet<u32>,
    exited: FxHashSet<u32>,
    /// Per `pthread_t` handle, the children created with it and not joined yet, in
    /// creation order.
    handles: FxHashMap<u64, VecDeque<u32>>,
    buffered: usize,
    /// The latest timestamp pushed (bounds how long a read waits for its write).
    /// Events that pass straight through need not raise it: they pass only while
    /// nothing is buffered, so no read waits, and each is earlier than the batch's
    /// events that are pushed.
    latest_ts: u64,
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
            self.creates_pending.insert(child);
            self.handles.entry(event.addr).or_default().push_back(child);
        }
        let seq = if event.kind.is_sequenced() {
            let slot = match self.known_seq_slot(event.addr) {
                Some(slot) => slot,
                None => {
                    let slot = self.seqs.len() as u32;
                    self.seqs.push(SeqState::new(event.seq));
                    self.seq_slot.insert(event.addr, slot);
                    slot
                }
            };
            let s = &mut self.seqs[slot as usize];
            if !s.emitted && event.seq < s.next {
                s.next = event.seq;
            }
            slot
        } else {
            NO_SEQ
        };
        self.latest_ts = self.latest_ts.max(event.ts_ns);
        let slot = self.slot(&event);
        let q = &mut self.queues[slot];
        if q.is_empty() {
            self.head_ts[slot] = event.ts_ns;
        }
        q.push_back((event, seq));
        self.buffered += 1;
    }

    /// The sequence slot of an object that has one, through the direct-mapped cache.
    #[inline(always)]
    fn known_seq_slot(&mut self, addr: u64) -> Option<u32> {
        let cached = (addr >> 3) as usize % SEQ_CACHE;
        if let Some(&(a, slot)) = self.seq_cache.get(cached) {
            if a == addr && slot != NO_SEQ {
                return Some(slot);
            }
        }
        let slot = *self.seq_slot.get(&addr)?;
        if self.seq_cache.is_empty() {
            self.seq_cache = vec![(0, NO_SEQ); SEQ_CACHE];
        }
        self.seq_cache[cached] = (addr, slot);
        Some(slot)
    }

    /// Takes a batch of events in arrival order and hands to `emit`, in global order,
    /// every event that can go now; the rest stay buffered for later batches.
    ///
    /// The same as pushing the batch's events one by one and then popping until
    /// `None`, but cheaper: while nothing is buffered, the batch's leading events
    /// that are already in global order (each earlier than every later event of the
    /// batch, and ready) are handed over in place, without being copied into the
    /// queues. Recorded chunks are almost always in timestamp order, so the queues
    /// are only needed around the rare inversions, gaps and thread starts.
    pub fn push_batch(&mut self, batch: &[Event], mut emit: impl FnMut(&Event)) {
        let mut start = 0;
        let mut seeds: Option<FxHashMap<u64, u64>> = None;
        if self.buffered == 0 {
            // A thread's start can reach the ring buffer before its creator's
            // create event: the batch's creations are known before anything of it
            // passes, so such a start waits for its create, as when queued whole.
            for e in batch {
                if let Some(child) = e.child_tid() {
                    self.creates_pending.insert(child);
                }
            }
            let in_order = in_order_prefix(batch);
            while start < in_order && self.buffered == 0 {
                let e = &batch[start];
                if self.pass(e) {
                    emit(e);
                } else if e.kind.is_lifecycle() {
                    // Earlier than everything else: queued alone, it comes out
                    // first if ready (else it stays, and the rest of the batch is
                    // queued behind it below). Queueing the whole rest of the batch
                    // instead would keep every thread of the batch live at once.
                    self.push(*e);
                    while let Some(e) = self.pop() {
                        emit(&e);
                    }
                } else if e.kind.is_sequenced() && self.known_seq_slot(e.addr).is_none() {
                    // An object's first event: its sequence is seeded from the
                    // smallest `seq` of the rest of the batch, as queueing the rest
                    // would seed it; then it may pass like any other.
                    let seeds = seeds.get_or_insert_with(|| smallest_seqs(&batch[start..]));
                    let slot = self.seqs.len() as u32;
                    self.seqs
                        .push(SeqState::new(seeds.get(&e.addr).copied().unwrap_or(e.seq)));
                    self.seq_slot.insert(e.addr, slot);
                    continue;
                } else {
                    break;
                }
                start += 1;
            }
        }
        if start == batch.len() {
            return;
        }
        for e in &batch[start..] {
            self.push(*e);
        }
        while let Some(e) = self.pop() {
            emit(&e);
        }
    }

    /// Passes an event that is earlier than every other buffered or pending one
    /// straight through, if [`OrderMerger::pop`] would return it now: updates the
    /// state as a push and a pop would and returns true. Returns false, changing
    /// nothing, when the event needs the queues: a lifecycle event, the first event
    /// of an object (its sequence is seeded from the whole batch), one that is not
    /// ready, or a read of a value not written yet.
    #[inline(always)]
    fn pass(&mut self, e: &Event) -> bool {
        if !e.kind.is_sequenced() {
            if e.kind.is_lifecycle() {
                return false;
            }
        } else {
            let Some(slot) = self.known_seq_slot(e.addr) else {
                return false;
            };
            let s = &mut self.seqs[slot as usize];
            // With nothing buffered, every known object has emitted an event.
            if e.seq > s.next || s.read_ahead(e) {
                return false;
            }
            s.went_out(e);
        }
        // Queue slots are numbered by first appearance, as pushes would number them
        // (ties between heads go to the lower slot).
        self.slot(e);
        true
    }

    #[inline]
    fn slot(&mut self, event: &Event) -> usize {
        if let Some(&(tid, s)) = self.slot_of_thread.get(event.thread as usize) {
            if tid == event.tid {
                return s;
            }
        }
        let s = match self.slot_of_tid.get(&event.tid) {
            Some(&s) => s,
            None => {
                let s = match self.free_slots.pop() {
                    Some(s) => {
                        self.tids[s] = event.tid;
                        self.closing[s] = false;
                        s
                    }
                    None => {
                        self.queues.push(VecDeque::new());
                        self.head_ts.push(u64::MAX);
                        self.tids.push(event.tid);
                        self.thread_of_slot.push(u32::MAX);
                        self.closing.push(false);
                        self.queues.len() - 1
                    }
                };
                self.slot_of_tid.insert(event.tid, s);
                s
            }
        };
        let i = event.thread as usize;
        self.thread_of_slot[s] = event.thread;
        if i < 1 << 16 {
            if self.slot_of_thread.len() <= i {
                self.slot_of_thread.resize(i + 1, (u32::MAX, 0));
            }
            if self.slot_of_thread[i].0 == u32::MAX {
                self.slot_of_thread[i] = (event.tid, s);
            }
        }
        s
    }

    /// Declares that no more events will be pushed: gaps are then skipped.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Events pushed and not yet popped.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    #[inline(always)]
    fn ready(&self, e: &Event, seq: u32) -> bool {
        if seq != NO_SEQ {
            let s = &self.seqs[seq as usize];
            if e.seq > s.next {
                return e.kind == Kind::Write && self.read_from_by_a_waiting_read(e, s);
            }
            return !s.read_ahead(e)
                || ((self.finished || self.latest_ts >= e.ts_ns.saturating_add(READ_LAG_NS))
                    && !self.heads().any(|w| w.seq > e.seq && reads_from(e, w)));
        }
        match e.kind {
            Kind::ThreadStart => {
                !self.creates_pending.contains(&e.tid) || self.created.contains(&e.tid)
            }
            Kind::ThreadJoin => match self.join_target(e) {
                Some(child) => self.exited.contains(&child),
                None => true,
            },
            _ => true,
        }
    }

    /// Whether the event the sequence of `w`'s variable waits for is another
    /// thread's read, at the head of its queue, of the value `w` writes: then `w`
    /// took effect before that read although it was recorded after it.
    #[cold]
    fn read_from_by_a_waiting_read(&self, w: &Event, s: &SeqState) -> bool {
        self.heads()
            .any(|r| r.seq == s.next && s.read_ahead(r) && reads_from(r, w))
    }

    /// The events at the heads of the queues.
    fn heads(&self) -> impl Iterator<Item = &Event> {
        self.queues.iter().filter_map(|q| q.front().map(|(e, _)| e))
    }

    /// The thread a join waits for. glibc reuses a joined thread's descriptor (the
    /// pthread_t) for later threads, so a handle's joins match its creations in order.
    fn join_target(&self, e: &Event) -> Option<u32> {
        self.handles.get(&e.addr)?.front().copied()
    }

    /// Frees a drained slot whose thread exited.
    fn free_slot(&mut self, s: usize) {
        let tid = self.tids[s];
        if self.slot_of_tid.get(&tid) == Some(&s) {
            self.slot_of_tid.remove(&tid);
        }
        if let Some(entry) = self.slot_of_thread.get_mut(self.thread_of_slot[s] as usize) {
            if entry.1 == s {
                *entry = (u32::MAX, 0);
            }
        }
        self.closing[s] = false;
        self.head_ts[s] = u64::MAX;
        self.free_slots.push(s);
    }

    #[inline(always)]
    fn head_ready(&self, i: usize) -> bool {
        let (e, seq) = self.queues[i].front().unwrap();
        self.ready(e, *seq)
    }

    /// The next event in global order, or `None` when more input is needed (or, after
    /// [`OrderMerger::finish`], when every event was returned).
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        // The earliest head (lowest slot on ties); empty queues hold `u64::MAX`.
        let mut first = usize::MAX;
        let mut earliest = u64::MAX;
        for (i, &ts) in self.head_ts.iter().enumerate() {
            if ts < earliest {
                earliest = ts;
                first = i;
            }
        }
        if first == usize::MAX {
            // Every head is at `u64::MAX`: either all queues are empty or some
            // events carry that timestamp.
            first = self.queues.iter().position(|q| !q.is_empty())?;
        }
        let pick = if self.head_ready(first) {
            first
        } else {
            let mut best: Option<(u64, usize)> = None;
            for (i, q) in self.queues.iter().enumerate() {
                if let Some((head, seq)) = q.front() {
                    if best.is_none_or(|(ts, _)| head.ts_ns < ts) && self.ready(head, *seq) {
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
        let q = &mut self.queues[pick];
        let (event, seq) = q.pop_front()?;
        self.head_ts[pick] = q.front().map_or(u64::MAX, |(e, _)| e.ts_ns);
        // A queue is read front to back, long after it was written: fetch ahead.
        #[cfg(target_arch = "x86_64")]
        if let Some(ahead) = q.get(PREFETCH_AHEAD) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is only a hint.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((ahead as *const (Event, u32)).cast()) };
        }
        self.buffered -= 1;
        if event.kind == Kind::ThreadExit {
            self.closing[pick] = true;
        }
        if self.closing[pick] && self.queues[pick].is_empty() {
            self.free_slot(pick);
        }
        self.emitted(&event, seq);
        Some(event)
    }

    #[inline]
    fn emitted(&mut self, e: &Event, seq: u32) {
        if seq != NO_SEQ {
            self.seqs[seq as usize].went_out(e);
            return;
        }
        match e.kind {
            Kind::ThreadCreate => {
                if let Some(child) = e.child_tid() {
                    self.created.insert(child);
                }
            }
            // Started: neither set is asked about this tid again (until a creation
            // reuses it).
            Kind::ThreadStart if self.created.remove(&e.tid) => {
                self.creates_pending.remove(&e.tid);
            }
            Kind::ThreadExit => {
                self.exited.insert(e.tid);
            }
            Kind::ThreadJoin if e.result == 0 => {
                if let Some(children) = self.handles.get_mut(&e.addr) {
                    if let Some(child) = children.pop_front() {
                        self.exited.remove(&child);
                    }
                    if children.is_empty() {
                        self.handles.remove(&e.addr);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether read `r` may have read what write `w` stored: another thread's write of
/// the same bytes with the value `r` returned.
fn reads_from(r: &Event, w: &Event) -> bool {
    w.kind == Kind::Write
        && w.addr == r.addr
        && w.tid != r.tid
        && w.addr2 == r.addr2
        && w.size == r.size
        && w.value == r.value
}

/// The smallest `seq` of each sequenced object in `events`.
fn smallest_seqs(events: &[Event]) -> FxHashMap<u64, u64> {
    let mut out: FxHashMap<u64, u64> = FxHashMap::default();
    for e in events.iter().filter(|e| e.kind.is_sequenced()) {
        out.entry(e.addr)
            .and_modify(|s| *s = (*s).min(e.seq))
            .or_insert(e.seq);
    }
    out
}

/// How many of the batch's leading events are each earlier than every later event of
/// the batch: the longest strictly increasing run, cut where an event after it is
/// earlier.
fn in_order_prefix(batch: &[Event]) -> usize {
    let run = 1 + batch
        .windows(2)
        .position(|w| w[0].ts_ns >= w[1].ts_ns)
        .unwrap_or(batch.len().saturating_sub(1));
    let run = run.min(batch.len());
    let Some(rest_min) = batch[run..].iter().map(|e| e.ts_ns).min() else {
        return run;
    };
    batch[..run].partition_point(|e| e.ts_ns < rest_min)
}

/// Orders a whole trace (see the module docs).
pub fn global_order(events: Vec<Event>) -> Vec<Event> {
    let mut merger = OrderMerger::new();
    let mut out = Vec::with_capacity(events.len());
    merger.push_batch(&events, |e| out.push(*e));
    drop(events);
    merger.finish();
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

    fn merge(events: Vec<Event>) -> Vec<Event> {
        let mut m = OrderMerger::new();
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
    fn a_batch_whose_start_precedes_its_create_still_starts_after_it() {
        let mut create = ev(1, 50, Kind::ThreadCreate, 0x77, 0);
        create.value = 2;
        let batch = vec![
            ev(2, 10, Kind::ThreadStart, 0, 0),
            ev(1, 20, Kind::MutexLock, 0xa, 0),
            create,
            ev(2, 70, Kind::ThreadExit, 0, 0),
        ];
        let mut m = OrderMerger::new();
        let mut kinds = Vec::new();
        m.push_batch(&batch, |e| kinds.push(e.kind));
        m.finish();
        kinds.extend(std::iter::from_fn(|| m.pop()).map(|e| e.kind));
        let position = |k: Kind| kinds.iter().position(|&x| x == k).unwrap();
        assert!(
            position(Kind::ThreadCreate) < position(Kind::ThreadStart),
            "{kinds:?}"
        );
        assert_eq!(kinds.len(), 4);
    }

    #[test]
    fn waits_for_input_until_finished_and_skips_gaps_then() {
        let mut m = OrderMerger::new();
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

    fn access(tid: u32, ts: u64, kind: Kind, seq: u64, value: u64) -> Event {
        let mut e = ev(tid, ts, kind, 0xf1a9, seq);
        e.addr2 = 0xf1a9;
        e.size = 1;
        e.value = value;
        e
    }

    #[test]
    fn a_read_recorded_before_the_write_it_saw_goes_after_it() {
        // A flag set by thread 1 and polled by thread 2 under hardware watchpoints:
        // the store's trap is recorded after the load that saw it.
        let events = vec![
            access(1, 10, Kind::Write, 0, 0),
            access(2, 20, Kind::Read, 1, 0),
            access(2, 30, Kind::Read, 2, 1),
            access(1, 40, Kind::Write, 3, 1),
            ev(2, 50, Kind::MutexLock, 0xb, 0),
        ];
        let order: Vec<_> = merge(events.clone())
            .iter()
            .map(|e| (e.tid, e.seq))
            .collect();
        let expected = vec![(1, 0), (2, 1), (1, 3), (2, 2), (2, 0)];
        assert_eq!(order, expected);
        // The same when the read and the write arrive in different batches.
        let batched = merge_by_push_pop(&[events[..3].to_vec(), events[3..].to_vec()]);
        let order: Vec<_> = batched.iter().map(|e| (e.tid, e.seq)).collect();
        assert_eq!(order, expected);
        let mut m = OrderMerger::new();
        let mut out = Vec::new();
        m.push_batch(&events[..3], |e| out.push((e.tid, e.seq)));
        m.push_batch(&events[3..], |e| out.push((e.tid, e.seq)));
        m.finish();
        out.extend(std::iter::from_fn(|| m.pop()).map(|e| (e.tid, e.seq)));
        assert_eq!(out, expected);
    }

    #[test]
    fn a_read_of_a_value_nobody_recorded_writing_waits_only_a_while() {
        let mut m = OrderMerger::new();
        m.push(access(1, 10, Kind::Write, 0, 0));
        m.push(access(2, 20, Kind::Read, 1, 5));
        m.push(ev(3, 30, Kind::MutexLock, 0xb, 0));
        assert_eq!(m.pop().map(|e| e.tid), Some(1));
        // The read waits for a write of 5; other threads go on meanwhile.
        assert_eq!(m.pop().map(|e| e.tid), Some(3));
        assert!(m.pop().is_none());
        // Input from well after it: no such write is coming.
        m.push(ev(3, 20 + READ_LAG_NS, Kind::MutexUnlock, 0xb, 1));
        assert_eq!(m.pop().map(|e| (e.tid, e.value)), Some((2, 5)));
        assert_eq!(m.pop().map(|e| e.tid), Some(3));
        // A different byte or width is another value, not a conflict.
        let mut m = OrderMerger::new();
        m.push(access(1, 10, Kind::Write, 0, 0));
        let mut other_byte = access(2, 20, Kind::Read, 1, 5);
        other_byte.addr2 += 1;
        m.push(other_byte);
        assert_eq!(m.pop().map(|e| e.tid), Some(1));
        assert_eq!(m.pop().map(|e| e.tid), Some(2));
    }

    #[test]
    fn joins_follow_handle_reuse_in_order() {
        // Thread 2 is created with handle 0x77, joined, then thread 3 reuses 0x77.
        let mut c2 = ev(1, 10, Kind::ThreadCreate, 0x77, 0);
        c2.value = 2;
        let mut c3 = ev(1, 40, Kind::ThreadCreate, 0x77, 0);
        c3.value = 3;
        let events = vec![
            c2,
            ev(1, 30, Kind::ThreadJoin, 0x77, 0),
            c3,
            ev(1, 60, Kind::ThreadJoin, 0x77, 0),
            ev(2, 20, Kind::ThreadExit, 0, 0),
            ev(3, 50, Kind::ThreadExit, 0, 0),
        ];
        let order: Vec<_> = merge(events).iter().map(|e| (e.tid, e.ts_ns)).collect();
        assert_eq!(
            order,
            vec![(1, 10), (2, 20), (1, 30), (1, 40), (3, 50), (1, 60)]
        );
    }

    /// Pushing then popping everything, batch by batch: what `push_batch` must equal.
    fn merge_by_push_pop(batches: &[Vec<Event>]) -> Vec<Event> {
        let mut m = OrderMerger::new();
        let mut out = Vec::new();
        for b in batches {
            for e in b {
                m.push(*e);
            }
            out.extend(std::iter::from_fn(|| m.pop()));
        }
        m.finish();
        out.extend(std::iter::from_fn(|| m.pop()));
        out
    }

    #[test]
    fn batches_pass_through_exactly_as_push_and_pop_would_order_them() {
        // Threads take turns on a few locks; arrival order has occasional
        // timestamp inversions, lost events (seq gaps) and late thread starts.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..40 {
            let mut seqs = [0u64; 3];
            let mut events = Vec::new();
            let mut create = ev(1, 5, Kind::ThreadCreate, 0x77, 0);
            create.value = 4;
            events.push(create);
            let mut ts = 10;
            for i in 0..400 {
                let r = next();
                let tid = 1 + (r % 4) as u32;
                let lock = (r >> 8) % 3;
                ts += 1 + (r >> 16) % 3;
                let mut e = ev(
                    tid,
                    ts,
                    Kind::MutexLock,
                    0xa0 + lock * 8,
                    seqs[lock as usize],
                );
                seqs[lock as usize] += 1;
                if round % 3 == 0 && (r >> 24) % 50 == 0 {
                    continue; // lost
                }
                if (r >> 32) % 20 == 0 {
                    e.kind = Kind::MutexLockFailed;
                }
                if i == 200 {
                    events.push(ev(4, ts - 1, Kind::ThreadStart, 0, 0));
                }
                events.push(e);
            }
            // Inversions: swap a few neighbours (arrival order ≠ timestamp order).
            for _ in 0..(round % 5) {
                let i = (next() % (events.len() as u64 - 1)) as usize;
                events.swap(i, i + 1);
            }
            let cut = (next() % events.len() as u64) as usize;
            let batches = vec![events[..cut].to_vec(), events[cut..].to_vec()];
            let mut m = OrderMerger::new();
            let mut out = Vec::new();
            for b in &batches {
                m.push_batch(b, |e| out.push(*e));
            }
            m.finish();
            out.extend(std::iter::from_fn(|| m.pop()));
            assert_eq!(out, merge_by_push_pop(&batches), "round {round}");
        }
    }

    #[test]
    fn global_order_skips_gaps_at_the_end() {
        let events = vec![
            ev(1, 100, Kind::MutexLock, 0xa, 0),
            ev(2, 90, Kind::MutexLock, 0xa, 5),
        ];
        assert_eq!(global_order(events).len(), 2);
    }
}
