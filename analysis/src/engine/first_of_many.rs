//! One before many (`first_of_many`): one thread's first critical section on a
//! lock placed before every other thread's first one, written with the schedule
//! language's `*` thread.
//!
//! A closer that must follow the workers misbehaves only when it comes before all
//! of them: a reorder against one worker at a time gives one candidate per worker,
//! none of which is the bug. So per lock the pass keeps when each clock slot first
//! took it, and a first section that knew none of at least `MANY_THREADS` earlier
//! first sections gives one `*` candidate, ranked by every thread it involves
//! (last, unless nothing smaller exists).

use super::{Engine, LockState};
use crate::clock::VectorClock;
use crate::findings::{Candidate, DedupKey};
use crate::model::{EventId, FindingKind, Rank, EVERY_OTHER_THREAD};

/// Other threads' first sections a section must come before for a `*` candidate.
const MANY_THREADS: u32 = 3;

impl Engine<'_> {
    /// One thread's first section on a lock, before every other thread's first
    /// one: `cur -> *:KIND(OBJ)#1`.
    #[inline(never)]
    pub(super) fn offer_first_of_many(&mut self, cur: EventId, example: EventId, others: u32) {
        let every = EventId {
            thread: EVERY_OTHER_THREAD,
            site: 0,
            ts: 0,
            index: example.index,
            nth: 0,
            ..cur
        };
        let events = [cur, example];
        self.stats.candidates_offered += 1;
        let key = DedupKey::new(FindingKind::FirstOfMany, &events);
        let rank = Rank {
            v: 1,
            t: others + 1,
            distance: cur.index.saturating_sub(example.index),
        };
        self.found.offer(
            key,
            rank,
            &Candidate {
                kind: FindingKind::FirstOfMany,
                events: &events,
                orderings: &[(&[cur], every)],
                note: "",
                wait_site: 0,
            },
        );
    }
}

/// A thread's first section on `lock` (slot `slot`, own clock `epoch`): records it,
/// and when at least [`MANY_THREADS`] other threads had their first section before
/// and the thread knew of none of them (before joining the lock's release), returns
/// how many, with the first of them.
#[inline(never)]
pub(super) fn first_of_many(
    lock: &mut LockState,
    vc: &VectorClock,
    slot: u32,
    epoch: u32,
    id: EventId,
) -> Option<(u32, EventId)> {
    let others = lock.first_threads;
    lock.first_threads += 1;
    if lock.first_example.is_none() {
        lock.first_example = Some(id);
    }
    let result = if others >= MANY_THREADS {
        let knows_one = (0..lock.firsts.len() as u32).any(|s| {
            let first = lock.firsts.get(s);
            s != slot && first > 0 && vc.get(s) >= first
        });
        if knows_one {
            None
        } else {
            lock.first_example.map(|e| (others, e))
        }
    } else {
        None
    };
    lock.firsts.set(slot, epoch);
    result
}
