//! After-release windows (`after_release`): another thread's whole critical
//! section run between a thread's release of a lock and that thread's next
//! statement, `T:after(mutex_unlock(m)#k)`.
//!
//! Unlock-then-act (free what the lock protected, clear it, use a copy taken
//! inside) is wrong exactly when something else takes the lock in between, and a
//! reorder of two whole sections cannot say "between the unlock and the next
//! statement". Whether a section could have run there is decided at its
//! acquisition (the driver keeps it in `LockState::after_window`); the window it
//! fills ends at the holder's next event, watched here: a marked point (`--mark`)
//! bounds it more precisely, and a synchronization call there already lets a gate
//! at that call express the window, so no `after(…)` point is proposed for it.

use ordo_trace::Kind;

use super::{Engine, State};
use crate::model::{EventId, FindingKind, NO_OBJECT};

impl Engine<'_> {
    /// The thread's first event after its last release of a lock (while that is
    /// still the lock's last release): a marked program point bounds the window
    /// after the release; a synchronization call there means a gate at that call
    /// expresses the window (other shapes), so no `after(…)` point is proposed.
    /// Watched accesses are looked past.
    #[inline(never)]
    pub(super) fn next_after_release(&mut self, t: u32, id: EventId) {
        if id.kind.is_access() {
            return;
        }
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let lock_obj = std::mem::replace(&mut th.released_lock, NO_OBJECT);
        let State::Lock(lock) = &mut self.objects[lock_obj as usize].state else {
            return;
        };
        if lock.last_release.is_none_or(|r| r.thread != t) {
            return;
        }
        match id.kind {
            Kind::At => {
                lock.mark_after_release.get_or_insert(id);
            }
            Kind::ThreadExit => {}
            _ => lock.release_then_sync = true,
        }
    }

    /// The section `acq` that fitted after the previous holder's release `rel`
    /// ended with `id`; `mark` is the first marked point the holder reached after
    /// `rel`, and `then_sync` whether it made a synchronization call next.
    pub(super) fn after_release_candidates(
        &mut self,
        (rel, acq): (EventId, EventId),
        id: EventId,
        mark: Option<EventId>,
        then_sync: bool,
    ) {
        // The holder reached a marked point after its release: the window
        // bounded by the mark first (whoever marked it meant that statement).
        if let Some(m) = mark.filter(|m| m.thread == rel.thread) {
            self.offer(
                FindingKind::AfterRelease,
                &[rel, acq, id, m],
                &[(&[rel], acq), (&[id], m)],
                "",
            );
        }
        // The holder waits right after its release until this section is over
        // (unless it made a synchronization call next: a gate there says it).
        if !then_sync {
            self.offer(
                FindingKind::AfterRelease,
                &[rel, acq, id],
                &[(&[rel], acq), (&[id], rel.after_point())],
                "",
            );
        }
    }
}
