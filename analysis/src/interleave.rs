//! Shapes over discovered memory accesses (`ordo record --discover`): the
//! interleavings of plain loads and stores that no synchronization call bounds, and
//! the shared locations they are about.
//!
//! Discovery records a bounded number of accesses per instruction, so the pass keeps
//! them all (up to [`MAX_ACCESSES`]) with the clock of their thread, and looks for
//! the shapes once the trace is read:
//!
//! - **Unserializable interleavings of one location** (AVIO, Lu et al., ASPLOS 2006;
//!   CTrigger, ASPLOS 2009): two consecutive accesses `a1`, `a2` of a thread to a
//!   location, and another thread's access `b` to it, such that `a1 b a2` gives a
//!   result no serial order of the two threads gives: R–W–R (a check, then a use of
//!   what changed), W–R–W (a reader sees an intermediate state), R–W–W (a lost
//!   update) and W–W–R (a thread reads back what it did not write). Schedule
//!   `A:a1 -> B:b`, `B:b -> A:a2` (all named by their instructions, `at(…)#N`).
//! - **Two locations**: a thread's consecutive accesses `a1` (location x) and `a2`
//!   (location y), and another thread's accesses `b1` of x then `b2` of y, both
//!   conflicting: `b1` and `b2` can fall between `a1` and `a2` (a reader that sees
//!   the first of a publisher's two stores but not the second; a writer whose two
//!   updates a reader sees half of). Schedule `A:a1 -> B:b1`, `B:b2 -> A:a2`.
//! - **A stale use**: a thread reads a location (`a1`: a pointer, a flag, a count)
//!   and goes on to its next access `a2` (anywhere: through the pointer it read),
//!   while another thread writes the location (`b`) — and then does more (frees
//!   what the pointer pointed to, tears down what the flag guarded) before its next
//!   synchronization call or its exit. Schedules hold the reader before `a2` until
//!   the writer has written (`b`), has reached its next synchronization call after
//!   it, or has exited: `A:a1 -> B:b`, `X -> A:a2` for X each of those.
//!
//! - **One against many**: a thread's first access to a location placed before the
//!   first conflicting access of every other thread, when at least
//!   [`MANY_THREADS`] of those came earlier in the run — a stop flag every worker must see set, a
//!   pointer every reader must find cleared. One ordering against one thread at a
//!   time is not the bug when all of them must fall into the window. Schedule
//!   `A:x -> B:b1`, `A:x -> C:c1`, … (kind `first_of_many`, as the locks' shape).
//!
//! Locations one lock protects at every recorded access get none of these: their
//! accesses interleave only as the lock's critical sections do, which the lock
//! shapes of the engine propose already.
//!
//! Each is proposed only when the recorded happens-before leaves it open
//! (Roşu–Sen causality: an ordering `p -> q` needs `q` not to happen before `p`).
//! Accesses by atomic instructions to a location only atomics touch never count.
//!
//! The same accesses give the **shared locations**: every address two or more
//! threads accessed, at least one writing, with the instructions and the locks held
//! at each access — the list `ordo analyze` and `ordo hunt -v` print, ranked by
//! lockset disagreement (no lock common to every access first).

use std::rc::Rc;

use ordo_trace::Kind;
use rustc_hash::FxHashMap;

use crate::clock::{Epoch, VectorClock};
use crate::model::{EventId, FindingKind, ObjId};

/// Discovered accesses kept for the shapes; past it the rest are counted only.
pub const MAX_ACCESSES: usize = 400_000;
/// Locks remembered per access (the innermost ones).
const HELD: usize = 4;
/// Other-thread accesses considered around each pair of one thread's accesses.
const NEIGHBOURS: usize = 3;
/// Candidates proposed per location.
const PER_LOCATION: usize = 48;
/// Other threads' first accesses one access must be placed before for a
/// one-against-many candidate (fewer are pairs the other shapes propose).
pub const MANY_THREADS: usize = 3;
/// Most threads one such candidate orders (a replay plan names at most 64).
const MANY_MAX: usize = 59;

/// One discovered access.
#[derive(Clone)]
struct Access {
    ev: EventId,
    atomic: bool,
    epoch: Epoch,
    /// The thread's clock at the access (shared between consecutive accesses with
    /// the same clock).
    vc: Rc<VectorClock>,
    /// The acquisitions of the locks held (innermost first).
    held: [Option<EventId>; HELD],
    n_held: u8,
    /// The thread's next synchronization event after the access, once seen.
    next_sync: Option<EventId>,
}

impl Access {
    fn writes(&self) -> bool {
        self.ev.kind != Kind::Read
    }

    fn held(&self) -> Vec<ObjId> {
        self.held[..self.n_held as usize]
            .iter()
            .flatten()
            .map(|a| a.obj)
            .collect()
    }

    /// The acquisition of `lock` this access was made under.
    fn acquisition_of(&self, lock: ObjId) -> Option<EventId> {
        self.held[..self.n_held as usize]
            .iter()
            .flatten()
            .find(|a| a.obj == lock)
            .copied()
    }
}

/// Whether `p` happens before `q` by the recorded synchronization.
fn happens_before(p: &Access, q: &Access) -> bool {
    p.epoch.happens_before(&q.vc)
}

/// Whether `p -> q` can be enforced: `q` does not happen before `p`.
fn can_precede(p: &Access, q: &Access) -> bool {
    !happens_before(q, p)
}

/// A shared location: two or more threads, at least one write.
#[derive(Clone, Debug)]
pub struct SharedLocation {
    /// The location (a variable object of the pass).
    pub obj: ObjId,
    /// Threads that accessed it (dense indices).
    pub threads: Vec<u32>,
    /// Reads, writes (read-modify-writes count as writes).
    pub reads: u32,
    /// See `reads`.
    pub writes: u32,
    /// Whether every access was atomic.
    pub atomic_only: bool,
    /// One access per instruction that touched it (its first), with the locks held
    /// there.
    pub sites: Vec<(EventId, Vec<ObjId>)>,
    /// Locks held at every access (empty: nothing protects it consistently).
    pub common_locks: Vec<ObjId>,
    /// Candidates the shapes proposed on it.
    pub candidates: u32,
}

/// A candidate the shapes propose: its kind, events (report order) and orderings.
pub struct Proposal {
    /// The finding's kind.
    pub kind: FindingKind,
    /// The events, in the report's order.
    pub events: Vec<EventId>,
    /// (predecessors, successor).
    pub orderings: Vec<(Vec<EventId>, EventId)>,
}

/// The discovered accesses of a pass.
#[derive(Default)]
pub struct Interleavings {
    accesses: Vec<Access>,
    /// Per dense thread: indices of its accesses awaiting their next sync event.
    awaiting: FxHashMap<u32, Vec<usize>>,
    /// Per dense thread: its exit.
    exits: FxHashMap<u32, EventId>,
    /// Per dense thread: its last clock snapshot.
    last_vc: FxHashMap<u32, Rc<VectorClock>>,
    /// Accesses past [`MAX_ACCESSES`], not kept.
    pub dropped: u64,
}

impl Interleavings {
    /// Notes a discovered access (`ev.point`), with the thread's clock and held locks.
    pub fn access(
        &mut self,
        ev: EventId,
        atomic: bool,
        epoch: Epoch,
        vc: &VectorClock,
        held: impl Iterator<Item = EventId>,
    ) {
        if self.accesses.len() >= MAX_ACCESSES {
            self.dropped += 1;
            return;
        }
        let shared = self.last_vc.entry(ev.thread).or_default();
        if **shared != *vc {
            *shared = Rc::new(vc.clone());
        }
        let mut locks = [None; HELD];
        let mut n = 0;
        for l in held {
            if n < HELD {
                locks[n] = Some(l);
                n += 1;
            }
        }
        self.awaiting
            .entry(ev.thread)
            .or_default()
            .push(self.accesses.len());
        self.accesses.push(Access {
            ev,
            atomic,
            epoch,
            vc: shared.clone(),
            held: locks,
            n_held: n as u8,
            next_sync: None,
        });
    }

    /// Notes a named synchronization event of thread `t` (its exit included): the
    /// next one after each of the thread's accesses that wait for it.
    pub fn sync_event(&mut self, t: u32, id: EventId) {
        // A trace without discovered accesses (most) pays one test per event.
        if self.accesses.is_empty() {
            return;
        }
        if id.kind == Kind::ThreadExit {
            self.exits.insert(t, id);
        }
        if let Some(list) = self.awaiting.get_mut(&t) {
            for i in list.drain(..) {
                self.accesses[i].next_sync = Some(id);
            }
        }
    }

    /// The shared locations and the candidates over them.
    pub fn finish(self) -> (Vec<SharedLocation>, Vec<Proposal>) {
        let mut by_location: FxHashMap<ObjId, Vec<usize>> = FxHashMap::default();
        let mut by_thread: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
        for (i, a) in self.accesses.iter().enumerate() {
            by_location.entry(a.ev.obj).or_default().push(i);
            by_thread.entry(a.ev.thread).or_default().push(i);
        }
        // Each access's position in its thread's list, for "the next access".
        let mut next_in_thread = vec![usize::MAX; self.accesses.len()];
        for list in by_thread.values() {
            for w in list.windows(2) {
                next_in_thread[w[0]] = w[1];
            }
        }
        let mut locations = Vec::new();
        let mut proposals = Vec::new();
        let mut objs: Vec<&ObjId> = by_location.keys().collect();
        objs.sort();
        for &obj in objs {
            let list = &by_location[&obj];
            let Some(location) = self.location(obj, list) else {
                continue;
            };
            if location.atomic_only || !location.common_locks.is_empty() {
                // Only atomics, or one lock held at every access: its accesses
                // interleave only as the lock's sections do, which the lock's own
                // shapes (reorders, atomicity splits, sections after a release)
                // propose already.
                locations.push(location);
                continue;
            }
            let before = proposals.len();
            self.one_location(list, &next_in_thread, &mut proposals);
            self.one_against_many(list, &mut proposals);
            let mut location = location;
            location.candidates = (proposals.len() - before) as u32;
            locations.push(location);
        }
        let shared: rustc_hash::FxHashSet<ObjId> = locations
            .iter()
            .filter(|l| !l.atomic_only && l.common_locks.is_empty())
            .map(|l| l.obj)
            .collect();
        self.two_locations(&by_thread, &next_in_thread, &shared, &mut proposals);
        let index: FxHashMap<(u32, u64, u32), usize> = self
            .accesses
            .iter()
            .enumerate()
            .map(|(i, a)| ((a.ev.thread, a.ev.site, a.ev.occurrence), i))
            .collect();
        for p in &mut proposals {
            self.order_sections(p, &index);
        }
        locations.sort_by_key(|l| (!l.common_locks.is_empty(), std::cmp::Reverse(l.candidates)));
        (locations, proposals)
    }

    /// An ordering `p -> q` between accesses made under the same lock by two
    /// threads can only hold if `p`'s critical section comes first: held at `q`
    /// inside its section, `q`'s thread would keep `p`'s out of the lock. The
    /// acquisitions are ordered too (`p`'s section's lock before `q`'s).
    fn order_sections(&self, p: &mut Proposal, index: &FxHashMap<(u32, u64, u32), usize>) {
        let by_ev = |e: &EventId| {
            index
                .get(&(e.thread, e.site, e.occurrence))
                .map(|&i| &self.accesses[i])
        };
        let mut extra = Vec::new();
        for (before, after) in &p.orderings {
            let (Some(a), Some(b)) = (before.first().and_then(by_ev), by_ev(after)) else {
                continue;
            };
            for lock in a.held() {
                if let (Some(x), Some(y)) = (a.acquisition_of(lock), b.acquisition_of(lock)) {
                    if x.thread != y.thread && x.occurrence > 0 && y.occurrence > 0 {
                        extra.push((vec![x], y));
                    }
                }
            }
        }
        // Sections first: they are what the accesses' order needs to be possible.
        extra.append(&mut p.orderings);
        p.orderings = extra;
    }

    /// The summary of one location, if it is shared.
    fn location(&self, obj: ObjId, list: &[usize]) -> Option<SharedLocation> {
        let mut threads: Vec<u32> = list.iter().map(|&i| self.accesses[i].ev.thread).collect();
        threads.sort_unstable();
        threads.dedup();
        let writes = list.iter().filter(|&&i| self.accesses[i].writes()).count() as u32;
        if threads.len() < 2 || writes == 0 {
            return None;
        }
        let mut sites: Vec<(EventId, Vec<ObjId>)> = Vec::new();
        let mut common: Option<Vec<ObjId>> = None;
        for &i in list {
            let a = &self.accesses[i];
            if !sites.iter().any(|(e, _)| e.site == a.ev.site) {
                sites.push((a.ev, a.held()));
            }
            let held = a.held();
            common = Some(match common {
                None => held,
                Some(c) => c.into_iter().filter(|l| held.contains(l)).collect(),
            });
        }
        Some(SharedLocation {
            obj,
            threads,
            reads: list.len() as u32 - writes,
            writes,
            atomic_only: list.iter().all(|&i| self.accesses[i].atomic),
            sites,
            common_locks: common.unwrap_or_default(),
            candidates: 0,
        })
    }

    /// AVIO's unserializable triples on one location, and stale uses after a read.
    fn one_location(&self, list: &[usize], next_in_thread: &[usize], out: &mut Vec<Proposal>) {
        let start = out.len();
        let acc = &self.accesses;
        // Each thread's consecutive pairs on this location.
        let mut last_of: FxHashMap<u32, usize> = FxHashMap::default();
        for (pos, &i2) in list.iter().enumerate() {
            if out.len() - start >= PER_LOCATION {
                return;
            }
            let a2 = &acc[i2];
            let Some(i1) = last_of.insert(a2.ev.thread, i2) else {
                continue;
            };
            let a1 = &acc[i1];
            // Other threads' accesses near the pair: the last few before a2 (between
            // the two or before a1) and the first few after it.
            let others = list[..pos]
                .iter()
                .rev()
                .filter(|&&b| acc[b].ev.thread != a2.ev.thread)
                .take(NEIGHBOURS)
                .chain(
                    list[pos + 1..]
                        .iter()
                        .filter(|&&b| acc[b].ev.thread != a2.ev.thread)
                        .take(NEIGHBOURS),
                );
            for &ib in others {
                let b = &acc[ib];
                if (b.atomic && (a1.atomic || a2.atomic)) || !unserializable(a1, b, a2) {
                    continue;
                }
                // Already between them in this run: that order passed.
                if ib > i1 && ib < i2 {
                    continue;
                }
                let forced = happens_before(a1, b) && happens_before(b, a2);
                if !forced && can_precede(a1, b) && can_precede(b, a2) {
                    out.push(Proposal {
                        kind: FindingKind::Unserializable,
                        events: vec![a1.ev, b.ev, a2.ev],
                        orderings: vec![(vec![a1.ev], b.ev), (vec![b.ev], a2.ev)],
                    });
                }
            }
        }
        // Stale uses: a read, another thread's write, the reader's next access.
        for (pos, &i1) in list.iter().enumerate() {
            if out.len() - start >= PER_LOCATION {
                return;
            }
            let a1 = &acc[i1];
            if a1.writes() || a1.atomic && a1.ev.kind != Kind::Read {
                continue;
            }
            let Some(&i2) = next_in_thread.get(i1).filter(|&&n| n != usize::MAX) else {
                continue;
            };
            let a2 = &acc[i2];
            let writers = list[pos + 1..]
                .iter()
                .filter(|&&b| acc[b].ev.thread != a1.ev.thread && acc[b].writes())
                .take(1)
                .chain(
                    list[..pos]
                        .iter()
                        .rev()
                        .filter(|&&b| acc[b].ev.thread != a1.ev.thread && acc[b].writes())
                        .take(1),
                );
            for &ib in writers {
                let b = &acc[ib];
                if !can_precede(a1, b) || !can_precede(b, a2) {
                    continue;
                }
                let mut holds: Vec<EventId> = Vec::new();
                if !(ib > i1 && ib < i2) {
                    holds.push(b.ev);
                }
                if let Some(next) = b.next_sync {
                    holds.push(next);
                }
                if let Some(&exit) = self.exits.get(&b.ev.thread) {
                    if Some(exit) != b.next_sync {
                        holds.push(exit);
                    }
                }
                for hold in holds {
                    let mut orderings = vec![(vec![a1.ev], b.ev)];
                    let mut events = vec![a1.ev, b.ev, a2.ev];
                    if hold == b.ev {
                        orderings.push((vec![b.ev], a2.ev));
                    } else {
                        orderings.push((vec![hold], a2.ev));
                        events.push(hold);
                    }
                    out.push(Proposal {
                        kind: FindingKind::StaleUse,
                        events,
                        orderings,
                    });
                }
            }
        }
    }

    /// One thread's first read or first write of a location before the first
    /// conflicting access of every other thread, when at least [`MANY_THREADS`] of
    /// those preceded it in the run and happens-before lets each come after: one
    /// candidate per location (the earliest such access).
    fn one_against_many(&self, list: &[usize], out: &mut Vec<Proposal>) {
        let acc = &self.accesses;
        // Each thread's first access, and its first read and first write.
        let mut first_of: FxHashMap<u32, usize> = FxHashMap::default();
        let mut firsts: Vec<usize> = Vec::new();
        let mut candidates: Vec<usize> = Vec::new();
        let mut kinds_seen: rustc_hash::FxHashSet<(u32, bool)> = Default::default();
        for &i in list {
            let a = &acc[i];
            if first_of.insert(a.ev.thread, i).is_none() {
                firsts.push(i);
            }
            if kinds_seen.insert((a.ev.thread, a.writes())) {
                candidates.push(i);
            }
        }
        if first_of.len() <= MANY_THREADS {
            return;
        }
        for ix in candidates {
            let x = &acc[ix];
            let others: Vec<(usize, &Access)> = firsts
                .iter()
                .map(|&i| (i, &acc[i]))
                .filter(|(_, s)| s.ev.thread != x.ev.thread && conflict(x, s) && can_precede(x, s))
                .take(MANY_MAX)
                .collect();
            // Those that came after it in the run are ordered too: in a replay
            // they could come first.
            if others.iter().filter(|(i, _)| *i < ix).count() < MANY_THREADS {
                continue;
            }
            out.push(Proposal {
                kind: FindingKind::FirstOfMany,
                events: std::iter::once(x.ev)
                    .chain(others.iter().map(|(_, s)| s.ev))
                    .collect(),
                orderings: others.iter().map(|(_, s)| (vec![x.ev], s.ev)).collect(),
            });
            return;
        }
    }

    /// A thread's two consecutive accesses to two shared locations with another
    /// thread's conflicting accesses of both placed between them.
    fn two_locations(
        &self,
        by_thread: &FxHashMap<u32, Vec<usize>>,
        next_in_thread: &[usize],
        shared: &rustc_hash::FxHashSet<ObjId>,
        out: &mut Vec<Proposal>,
    ) {
        let acc = &self.accesses;
        let mut threads: Vec<&u32> = by_thread.keys().collect();
        threads.sort();
        let mut seen_pairs = rustc_hash::FxHashSet::default();
        for &ta in &threads {
            for &i1 in &by_thread[ta] {
                let i2 = next_in_thread[i1];
                if i2 == usize::MAX {
                    continue;
                }
                let (a1, a2) = (&acc[i1], &acc[i2]);
                if a1.ev.obj == a2.ev.obj
                    || !shared.contains(&a1.ev.obj)
                    || !shared.contains(&a2.ev.obj)
                    || !seen_pairs.insert((a1.ev.site, a2.ev.site))
                {
                    continue;
                }
                for &tb in &threads {
                    if tb == ta {
                        continue;
                    }
                    // B's first access of x conflicting with a1, then its next
                    // access of y conflicting with a2.
                    let list = &by_thread[tb];
                    let Some(j1) = list
                        .iter()
                        .position(|&b| acc[b].ev.obj == a1.ev.obj && conflict(a1, &acc[b]))
                    else {
                        continue;
                    };
                    let Some(&ib2) = list[j1 + 1..]
                        .iter()
                        .find(|&&b| acc[b].ev.obj == a2.ev.obj && conflict(a2, &acc[b]))
                    else {
                        continue;
                    };
                    let (b1, b2) = (&acc[list[j1]], &acc[ib2]);
                    // Both between a1 and a2 already (or forced there by
                    // synchronization): the run had this order.
                    let had = list[j1] > i1 && ib2 < i2;
                    let forced = happens_before(a1, b1) && happens_before(b2, a2);
                    if !had && !forced && can_precede(a1, b1) && can_precede(b2, a2) {
                        out.push(Proposal {
                            kind: FindingKind::Unserializable,
                            events: vec![a1.ev, b1.ev, a2.ev, b2.ev],
                            orderings: vec![(vec![a1.ev], b1.ev), (vec![b2.ev], a2.ev)],
                        });
                    }
                }
            }
        }
    }
}

/// Whether two accesses of different threads conflict (one writes, not both atomic).
fn conflict(a: &Access, b: &Access) -> bool {
    (a.writes() || b.writes()) && !(a.atomic && b.atomic)
}

/// AVIO's four unserializable interleavings `a1 b a2` (a1, a2 one thread's).
fn unserializable(a1: &Access, b: &Access, a2: &Access) -> bool {
    matches!(
        (a1.writes(), b.writes(), a2.writes()),
        (false, true, false) | (true, false, true) | (false, true, true) | (true, true, false)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A discovered access of thread `t` (its own clock `own`, knowing nothing of
    /// the others) to location `obj` at instruction `site`, `index` in the run.
    fn access(set: &mut Interleavings, t: u32, kind: Kind, obj: ObjId, site: u64, index: u64) {
        access_holding(set, t, kind, obj, site, index, None);
    }

    /// [`access`] made while holding the lock whose acquisition is `held`.
    fn access_holding(
        set: &mut Interleavings,
        t: u32,
        kind: Kind,
        obj: ObjId,
        site: u64,
        index: u64,
        held: Option<EventId>,
    ) {
        let ev = EventId {
            thread: t,
            kind,
            obj,
            occurrence: 1,
            nth: 0,
            site,
            ts: index,
            index,
            after_point: false,
            point: true,
        };
        let own = index as u32 + 1;
        let vc = VectorClock::for_slot(t, own);
        let epoch = Epoch {
            thread: t,
            clock: own,
        };
        set.access(ev, false, epoch, &vc, held.into_iter());
    }

    #[test]
    fn one_store_before_every_readers_check() {
        // Four workers check a flag (site 0x10), then main stores it (0x20).
        let mut set = Interleavings::default();
        for w in 1..=4 {
            access(&mut set, w, Kind::Read, 7, 0x10, w as u64);
        }
        access(&mut set, 0, Kind::Write, 7, 0x20, 5);
        let (locations, proposals) = set.finish();
        assert_eq!(locations.len(), 1);
        let many: Vec<&Proposal> = proposals
            .iter()
            .filter(|p| p.kind == FindingKind::FirstOfMany)
            .collect();
        assert_eq!(many.len(), 1);
        let orderings = &many[0].orderings;
        assert_eq!(orderings.len(), 4);
        assert!(orderings
            .iter()
            .all(|(before, after)| before[0].thread == 0 && after.site == 0x10));
    }

    #[test]
    fn fewer_than_many_earlier_threads_give_no_one_against_many() {
        let mut set = Interleavings::default();
        access(&mut set, 1, Kind::Read, 7, 0x10, 1);
        access(&mut set, 2, Kind::Read, 7, 0x10, 2);
        access(&mut set, 0, Kind::Write, 7, 0x20, 3);
        access(&mut set, 3, Kind::Read, 7, 0x10, 4);
        let (_, proposals) = set.finish();
        assert!(proposals.iter().all(|p| p.kind != FindingKind::FirstOfMany));
    }

    #[test]
    fn a_location_one_lock_always_protects_gets_no_access_shapes() {
        let lock = EventId {
            thread: 1,
            kind: Kind::MutexLock,
            obj: 99,
            occurrence: 1,
            nth: 0,
            site: 0x100,
            ts: 0,
            index: 0,
            after_point: false,
            point: false,
        };
        let mut set = Interleavings::default();
        for (t, kind, site, index) in [
            (1, Kind::Read, 0x10, 1),
            (1, Kind::Read, 0x18, 2),
            (2, Kind::Write, 0x20, 3),
        ] {
            let held = EventId { thread: t, ..lock };
            access_holding(&mut set, t, kind, 7, site, index, Some(held));
        }
        let (locations, proposals) = set.finish();
        assert_eq!(locations[0].common_locks, vec![99]);
        assert!(proposals.is_empty());
    }

    #[test]
    fn a_check_then_use_gets_the_writer_between() {
        // Thread 1 reads the flag twice (check, use); thread 2 writes it later.
        let mut set = Interleavings::default();
        access(&mut set, 1, Kind::Read, 7, 0x10, 1);
        access(&mut set, 1, Kind::Read, 7, 0x18, 2);
        access(&mut set, 2, Kind::Write, 7, 0x20, 3);
        let (_, proposals) = set.finish();
        let avio = proposals
            .iter()
            .find(|p| p.kind == FindingKind::Unserializable)
            .expect("R–W–R");
        assert_eq!(avio.orderings[0].1.thread, 2);
        assert_eq!(avio.orderings[1].1.site, 0x18);
    }
}
