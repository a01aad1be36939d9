//! Condition-variable shapes: lost wakeups (`lost_wakeup`) and barging
//! (`barging`), with the condvar events they are read from.
//!
//! A signal is lost when it can come before the wait it was meant for begins —
//! unless the signaller published the predicate under the wait's mutex first,
//! which a wait in a predicate loop cannot miss in any order. Barging is a third
//! thread taking the mutex between the signal and the woken waiter's reacquire, so
//! the waiter acts on a state the signal did not announce; the section shapes
//! (`sections.rs`) find the barger, and the schedule is built here because it must
//! also pin what made the wait a real one (it began before the signaller's
//! section), or the replayed waiter never waits at all.
//!
//! The condvar's happens-before edges (a signal reaches the return of every wait
//! in progress) are kept here rather than in the driver: the waiter records they
//! join are the ones the lost-wakeup test reads, in the same step.

use ordo_trace::Event;

use super::{Engine, Release, State};
use crate::clock::{Epoch, VectorClock};
use crate::model::{EventId, FindingKind};

/// `ETIMEDOUT` on Linux: a timed wait that was not woken.
const ETIMEDOUT: i64 = 110;

#[derive(Default)]
pub(super) struct CondState {
    waiters: Vec<Waiter>,
    /// The last signal or broadcast that found no waiter, with its epoch and the
    /// signaller's last mutex release before it (see [`Engine::signal`]).
    lonely: Option<(EventId, Epoch, Option<Release>)>,
}

/// How a cond wait that returned was woken: what barging candidates pin.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wake {
    /// The signal or broadcast that woke it.
    pub(super) signal: EventId,
    /// The wait's site.
    wait_site: u64,
    /// The wait's beginning (`cond_wait_begin`).
    begin: EventId,
    /// The signaller's acquisition of the wait's mutex, when it signalled holding it.
    signal_section: Option<EventId>,
}

struct Waiter {
    thread: u32,
    slot: u32,
    /// The mutex the wait released (and reacquires).
    mutex: u64,
    begin: EventId,
    epoch: u32,
    signals: VectorClock,
    woken_by: Option<EventId>,
    /// The signaller's acquisition of `mutex`, when it held it at `woken_by`.
    woken_in: Option<EventId>,
}

impl Engine<'_> {
    pub(super) fn wait_begin(&mut self, t: u32, e: &Event, id: EventId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        // The wait began when its mutex was released, whichever of the two events
        // the probes delivered first.
        let epoch = match th.condwait_release.take() {
            Some((cond, epoch)) if cond == e.addr => epoch,
            _ => th.vc.get(th.slot),
        };
        if th.after_wake.take() == Some((id.obj, e.site)) {
            self.looped_wait_sites.insert(e.site);
        }
        let State::Cond(cond) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let lonely = cond.lonely.filter(|(s, epoch, published)| {
            s.thread != t
                && !epoch.happens_before(&th.vc)
                && !predicate_published(*published, e.addr2, &th.vc)
        });
        cond.waiters.retain(|w| w.thread != t);
        cond.waiters.push(Waiter {
            thread: t,
            slot: th.slot,
            mutex: e.addr2,
            begin: id,
            epoch,
            signals: VectorClock::default(),
            woken_by: None,
            woken_in: None,
        });
        if let Some((signal, _, _)) = lonely {
            self.offer(
                FindingKind::LostWakeup,
                &[id, signal],
                &[(&[signal], id)],
                "the signal found no waiter in this run",
            );
        }
    }

    pub(super) fn wait_return(&mut self, t: u32, e: &Event, id: EventId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Cond(cond) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let Some(i) = cond.waiters.iter().position(|w| w.thread == t) else {
            th.woken = Some((e.addr2, None, id));
            return;
        };
        let w = cond.waiters.swap_remove(i);
        if e.result != ETIMEDOUT {
            th.vc.join(&w.signals);
        }
        let wake = w.woken_by.filter(|_| e.result == 0).map(|signal| Wake {
            signal,
            wait_site: w.begin.site,
            begin: w.begin,
            signal_section: w.woken_in,
        });
        th.woken = Some((e.addr2, wake, id));
        th.after_wake = Some((id.obj, w.begin.site));
    }

    /// A signal or broadcast. It could be lost when nothing orders it after a
    /// wait's beginning — unless the signaller's last mutex release before it, of
    /// the wait's mutex, happens before the wait began: the signal-after-unlock
    /// idiom (`lock; ready = 1; unlock; signal`). Then the waiter took the mutex
    /// after the predicate changed, so a wait in a predicate loop (`while
    /// (!ready) wait`, C++ `wait(lk, pred)`) cannot miss it, in any order.
    pub(super) fn signal(&mut self, t: u32, id: EventId) {
        let th = &self.states[self.slot_of[t as usize] as usize];
        let epoch = th.epoch();
        let published = th.last_release;
        // The innermost mutexes the signaller holds, by address (a waiter's is one
        // of them when it signals inside its section): barging candidates pin the
        // section. On the stack: signals are frequent.
        let mut held = [(0u64, id); 4];
        let mut n = 0;
        for h in th.held.iter().rev().take(held.len()) {
            held[n] = (self.objects[h.obj as usize].addr, h.acq);
            n += 1;
        }
        let held = &held[..n];
        let State::Cond(cond) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let mut lost: Vec<EventId> = Vec::new();
        if cond.waiters.is_empty() {
            cond.lonely = Some((id, epoch, published));
        }
        for w in &mut cond.waiters {
            w.signals.join(&th.vc);
            if w.woken_by.is_none() {
                w.woken_by = Some(id);
                w.woken_in = held
                    .iter()
                    .find(|(m, _)| *m == w.mutex)
                    .map(|&(_, acq)| acq);
            }
            // The waiter is blocked: its clock is still the one it waited with.
            let waiter = self.slot_of.get(w.thread as usize);
            let waiter = waiter.and_then(|&s| self.states.get(s as usize));
            if th.vc.get(w.slot) < w.epoch
                && !waiter
                    .is_some_and(|w_state| predicate_published(published, w.mutex, &w_state.vc))
            {
                // Nothing orders the signal after the wait began: it could come first.
                lost.push(w.begin);
            }
        }
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        th.vc.tick(th.slot);
        for begin in lost {
            self.offer(FindingKind::LostWakeup, &[begin, id], &[(&[id], begin)], "");
        }
    }

    /// Barging: `barger`'s section between the signal that woke a wait and the
    /// waiter's reacquire (`reacquire`, named by its `cond_wait` event). The schedule
    /// also keeps what made the run a barging one: the wait began before the
    /// signaller's section (else the waiter does not wait at all, and the ordering
    /// on its reacquire never happens) — so did the barger's, when it is a woken
    /// waiter too (`barger.1`) — and a `refill` section that came between the
    /// signal and the reacquire goes after it.
    pub(super) fn offer_barging(
        &mut self,
        wake: Wake,
        (barger, barger_wake): (EventId, Option<Wake>),
        reacquire: EventId,
        refill: Option<EventId>,
        note: &'static str,
    ) {
        let pin = |w: &Wake| {
            w.signal_section
                .filter(|s| s.occurrence != 0 && w.begin.occurrence != 0)
        };
        let begins = [wake.begin, barger_wake.map_or(wake.begin, |w| w.begin)];
        let barger_section = barger_wake.as_ref().and_then(pin);
        // Both waits began before one section: one ordering with `&&`.
        let together = barger_section.is_some() && barger_section == pin(&wake);
        let reacquired: &[EventId] = &[reacquire];
        let mut orderings: Vec<(&[EventId], EventId)> = Vec::with_capacity(5);
        if let Some(section) = pin(&wake) {
            orderings.push((if together { &begins } else { &begins[..1] }, section));
        }
        if let Some(section) = barger_section.filter(|_| !together) {
            orderings.push((&begins[1..], section));
        }
        let signal: &[EventId] = &[wake.signal];
        let barged: &[EventId] = &[barger];
        orderings.push((signal, barger));
        orderings.push((barged, reacquire));
        if let Some(refill) = refill {
            orderings.push((reacquired, refill));
        }
        self.offer_at(
            FindingKind::Barging,
            &[wake.signal, reacquire, barger],
            &orderings,
            note,
            wake.wait_site,
        );
    }
}

/// Whether a signaller's last mutex release (`published`) was of `mutex` and is
/// known to a clock `vc` (the waiter's at its wait).
fn predicate_published(published: Option<Release>, mutex: u64, vc: &VectorClock) -> bool {
    published.is_some_and(|(m, release)| m == mutex && release.happens_before(vc))
}
