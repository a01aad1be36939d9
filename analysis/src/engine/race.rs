//! Data races (`race`) on watched variables, and the happens-before edges of
//! atomic accesses.
//!
//! Two conflicting accesses that happens-before leaves unordered can run in the
//! other order. As in FastTrack, a variable keeps its last write and each
//! thread's last read with their epochs, so testing an access is one comparison
//! per kept access, whatever the trace's length. A thread that reads several
//! times while one write races with it (a struct read field by field) is offered
//! once, with its last racing read: holding the write until after that read shows
//! the reader the whole old state, while one candidate per read would each leave
//! the other reads racing.
//!
//! Atomic accesses never race with each other, but they order threads
//! (release/acquire, as ThreadSanitizer models C11 atomics); that edge is made
//! here because an atomic read must acquire before it is compared.

use ordo_trace::Kind;

use super::{Engine, State};
use crate::clock::{Epoch, VectorClock};
use crate::model::{EventId, FindingKind};

#[derive(Default)]
pub(super) struct VarState {
    write: Option<Access>,
    reads: Vec<Access>,
    /// Read-after-write races not offered yet, one per reading thread: (the write,
    /// the thread's latest read racing with it). A thread that reads the variable
    /// several times while the write is unordered with it (a two-field struct read
    /// field by field) is offered once, with its last such read: holding the write
    /// until after that read shows the reader the whole old state, while holding it
    /// only until the first read leaves the rest of the reads racing with it.
    pub(super) read_races: Vec<(EventId, EventId)>,
    /// What atomic writes and read-modify-writes released (absent until the first):
    /// atomic reads and read-modify-writes acquire it. Plain accesses never touch it.
    released: Option<Box<VectorClock>>,
}

#[derive(Clone, Copy)]
struct Access {
    epoch: Epoch,
    ev: EventId,
    /// By an atomic instruction: two atomic accesses never race.
    atomic: bool,
}

impl Engine<'_> {
    pub(super) fn access(&mut self, t: u32, id: EventId, atomic: bool) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Var(var) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let writes = id.kind != Kind::Read;
        if atomic && id.kind != Kind::Write {
            // Acquire: the access and its acquire are one step, so what the earlier
            // release covered happens before this access.
            if let Some(released) = &var.released {
                th.vc.join(released);
            }
        }
        let mut races: Vec<EventId> = Vec::new();
        let mut offers: Vec<(EventId, EventId)> = Vec::new();
        if let Some(w) = var.write {
            if w.ev.thread != t && !(w.atomic && atomic) && !w.epoch.happens_before(&th.vc) {
                if writes {
                    races.push(w.ev);
                } else {
                    match var.read_races.iter_mut().find(|(_, r)| r.thread == t) {
                        Some(pending) if pending.0 == w.ev => pending.1 = id,
                        Some(pending) => offers.push(std::mem::replace(pending, (w.ev, id))),
                        None => var.read_races.push((w.ev, id)),
                    }
                }
            }
        }
        if writes {
            // A new write: the reads racing with the previous one are complete.
            offers.append(&mut var.read_races);
        }
        let me = Access {
            epoch: th.epoch(),
            ev: id,
            atomic,
        };
        if id.point {
            self.interleavings.access(
                id,
                atomic,
                me.epoch,
                &th.vc,
                th.held.iter().rev().map(|h| h.acq),
            );
        }
        if writes {
            for r in &var.reads {
                if r.ev.thread != t && !(r.atomic && atomic) && !r.epoch.happens_before(&th.vc) {
                    races.push(r.ev);
                }
            }
            var.reads.clear();
            var.write = Some(me);
        } else {
            match var.reads.iter_mut().find(|r| r.ev.thread == t) {
                Some(r) => *r = me,
                None => var.reads.push(me),
            }
        }
        if atomic && writes {
            // Release: later acquirers see everything up to here; the thread's clock
            // advances so its later events are not covered.
            var.released.get_or_insert_with(Box::default).join(&th.vc);
            th.vc.tick(th.slot);
        }
        for (write, read) in offers {
            self.offer_race(write, read);
        }
        for earlier in races {
            self.offer_race(earlier, id);
        }
    }

    /// Offers a race between an earlier access and a later one, flipped: the later
    /// one (by its occurrence number) before the earlier.
    pub(super) fn offer_race(&mut self, earlier: EventId, later: EventId) {
        self.offer(
            FindingKind::Race,
            &[earlier, later],
            &[(&[later], earlier)],
            "",
        );
    }
}
