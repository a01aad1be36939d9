//! Other objects against locks: a critical section that overtakes a barrier
//! arrival, semaphore post or condvar signal (`overtake`), or a whole thread's
//! start (`delayed_start`).
//!
//! A missing barrier, or a post a thread should have waited for, shows only as a
//! section running before a release it does not depend on; the lock's own history
//! says nothing about it. So the last few non-lock releases are kept globally (a
//! ring a lock-only program never looks at), and each outermost acquisition whose
//! thread did not know one of them (the driver tests that with the acquiring
//! thread's clock) offers to run before it.

use super::Engine;
use crate::model::{EventId, FindingKind, ObjId};

/// A recent release on an object other than a lock (barrier arrival, semaphore
/// post, condvar signal): a later critical section of another thread that does not
/// know of it could overtake it.
#[derive(Clone, Copy)]
pub(super) struct RecentRelease {
    pub(super) ev: EventId,
    pub(super) slot: u32,
    pub(super) epoch: u32,
    /// The releasing thread's start and own clock then.
    pub(super) start: Option<(EventId, u32)>,
    /// The outermost lock the releasing thread held then, with its acquisition: a
    /// section on that lock overtakes the release by overtaking that section (held
    /// at the release itself, it would wait for a lock the releaser holds).
    inside: Option<(ObjId, EventId)>,
}

/// Recent non-lock releases remembered (a ring).
pub(super) const RECENT_RELEASES: usize = 4;

/// `release_head` before the first non-lock release (lock-only programs then skip
/// the ring at every acquisition).
pub(super) const NO_RELEASES: usize = usize::MAX;

impl Engine<'_> {
    /// Remembers a release on a non-lock object (barrier arrival, post, signal).
    #[inline(never)]
    pub(super) fn note_release(&mut self, t: u32, id: EventId) {
        if id.occurrence == 0 {
            return;
        }
        let th = &self.states[self.slot_of[t as usize] as usize];
        if self.release_head == NO_RELEASES {
            self.release_head = 0;
        }
        self.recent_releases[self.release_head] = Some(RecentRelease {
            ev: id,
            slot: th.slot,
            epoch: th.vc.get(th.slot),
            start: th.start,
            inside: th.held.first().map(|h| (h.obj, h.acq)),
        });
        self.release_head = (self.release_head + 1) % RECENT_RELEASES;
    }

    /// A critical section `cur` whose thread knew nothing of the recent releases in
    /// `unknown` (bits of `recent_releases`) could overtake them; of those in
    /// `unknown_starts` it did not even know the releasing thread's start, so the
    /// whole thread could start after it.
    #[inline(never)]
    pub(super) fn overtake_candidates(&mut self, cur: EventId, unknown: u8, unknown_starts: u8) {
        for j in 0..RECENT_RELEASES {
            if unknown & (1 << j) == 0 {
                continue;
            }
            let Some(r) = self.recent_releases[j] else {
                continue;
            };
            if r.ev.index >= cur.index {
                continue;
            }
            let target = match r.inside {
                Some((obj, acq)) if obj == cur.obj => acq,
                _ => r.ev,
            };
            if target.occurrence == 0 {
                continue;
            }
            self.offer(FindingKind::Overtake, &[r.ev, cur], &[(&[cur], target)], "");
            if unknown_starts & (1 << j) != 0 {
                if let Some((start, _)) = r.start {
                    if start.occurrence > 0 {
                        self.offer(
                            FindingKind::DelayedStart,
                            &[cur, start, r.ev],
                            &[(&[cur], start)],
                            "",
                        );
                    }
                }
            }
        }
    }
}
