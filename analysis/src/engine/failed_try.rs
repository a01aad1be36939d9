//! Failed trylocks (`failed_try`): a trylock that succeeded right after another
//! thread's conflicting section could have come inside it and failed.
//!
//! A program's fallback for a busy lock runs only when the try fails, which a
//! recorded run where every try succeeded never exercises, and moving whole
//! sections cannot make a try fail either; so the candidate names the failure
//! itself: `held.lock -> T:mutex_lock_failed(L)#n -> held.unlock`.

use ordo_trace::Kind;

use super::Engine;
use crate::model::{kind_slot, EventId, FindingKind};

impl Engine<'_> {
    /// A successful try (`cur`, a trylock) right after another thread's section
    /// (`held`): the try could have come while that section held the lock, and
    /// failed — `held.lock -> T:mutex_lock_failed(L)#n -> held.unlock`, n being
    /// the thread's next failed try on the lock. A program whose fallback for a
    /// busy lock is wrong fails only then.
    #[inline(never)]
    pub(super) fn failed_try_candidate(&mut self, held: EventId, cur: EventId) {
        let (failed_kind, unlock_kind) = match cur.kind {
            Kind::MutexLock => (Kind::MutexLockFailed, Kind::MutexUnlock),
            _ => (Kind::RwlockLockFailed, Kind::RwlockUnlock),
        };
        let th_slot = self.states[self.slot_of[cur.thread as usize] as usize].slot as usize;
        let failed_before = self.objects[cur.obj as usize]
            .naming
            .get(th_slot)
            .filter(|n| n.owner == cur.thread)
            .map_or(0, |n| n.counts[kind_slot(failed_kind)]);
        let failed = EventId {
            kind: failed_kind,
            occurrence: failed_before + 1,
            ..cur
        };
        // The section's own release: the k-th lock's unlock is the k-th unlock.
        let unlock = EventId {
            kind: unlock_kind,
            ..held
        };
        self.offer(
            FindingKind::FailedTry,
            &[held, failed, unlock],
            &[(&[held], failed), (&[failed], unlock)],
            "",
        );
    }
}
