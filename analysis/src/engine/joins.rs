//! Thread-lifetime shapes: early exits (`early_exit`) and late joins
//! (`late_join`).
//!
//! Both are a join in the wrong place. A missing join, or a join of the wrong
//! thread, lets the main thread's checks and exit run before a worker's work; a
//! join placed too late lets the joiner destroy or reuse what a worker's section
//! still needs. The work to be ordered is each thread's first outermost critical
//! section, which the driver keeps (`Engine::first_sections`). Only fork/join
//! edges count as ordering it: that a section's lock was handed to a thread joined
//! earlier is this run's order, which a schedule can change.

use super::{Engine, NO_SLOT};
use crate::clock::VectorClock;
use crate::model::{EventId, FindingKind};

/// Early-exit candidates offered at the main thread's exit, at most.
const MAX_EARLY_EXITS: usize = 64;

/// Late-join candidates offered at one join, at most.
const MAX_LATE_JOINS: usize = 16;

impl Engine<'_> {
    /// At the main thread's exit: every other thread's first critical section that
    /// the exit is not ordered after by fork/join (no join of that thread, directly
    /// or through others) could come after the exit — a missing join, or a join of
    /// the wrong thread. The exit, after the main thread's checks, goes first.
    #[inline(never)]
    pub(super) fn early_exit_candidates(&mut self, exit: EventId) {
        let th = &self.states[self.slot_of[exit.thread as usize] as usize];
        let fj = th.fj_snapshot();
        let mut offered = 0;
        let sections = std::mem::take(&mut self.first_sections);
        for &(acq, slot, epoch) in &sections {
            // NO_SLOT: the thread's slot was taken over (FreeSlot): not known.
            if acq.thread == exit.thread || (slot != NO_SLOT && fj.get(slot) >= epoch) {
                continue;
            }
            self.offer(FindingKind::EarlyExit, &[exit, acq], &[(&[exit], acq)], "");
            offered += 1;
            if offered == MAX_EARLY_EXITS {
                break;
            }
        }
        self.first_sections = sections;
    }

    /// At a join by thread `t`, whose last critical section ended with `unlock`:
    /// every first critical section that `t` learns of only by this join (the
    /// joined thread's, or ones it knew) could have come after that section — `t`
    /// did its work, e.g. destroyed or reused what the section needs, before the
    /// join that should have preceded it (a join placed too late).
    #[inline(never)]
    pub(super) fn late_join_candidates(&mut self, t: u32, unlock: EventId, joined: &VectorClock) {
        // By fork/join only, as for early exits: that the section's lock was handed
        // to a thread joined earlier is this run's order, which a schedule can change.
        let fj = self.states[self.slot_of[t as usize] as usize].fj_snapshot();
        let mut offers = Vec::new();
        for &(acq, slot, epoch) in &self.first_sections {
            if acq.thread == t || fj.get(slot) >= epoch || joined.get(slot) < epoch {
                continue;
            }
            offers.push(acq);
            if offers.len() == MAX_LATE_JOINS {
                break;
            }
        }
        for acq in offers {
            self.offer(
                FindingKind::LateJoin,
                &[unlock, acq],
                &[(&[unlock], acq)],
                "",
            );
        }
    }
}
