//! The streaming pass: happens-before with vector clocks over events in a global
//! order, and every detector fed from it.
//!
//! Events must arrive in an order consistent with happens-before (each thread's
//! program order, each object's `seq` order, create before start, exit before join),
//! which is what [`ordo_trace::OrderMerger`] produces. Memory is bounded by *live*
//! threads × objects: per live thread a vector clock, a fork/join clock and the held
//! locks; per object its synchronization clocks and a constant-size summary (the
//! last two critical sections of a lock, a condvar's current waiters, a variable's
//! last write and reads); plus the lock-order graph and the deduplicated candidates,
//! which grow with the program's structure, not with the trace's length. Clocks are
//! indexed by clock slots that exited threads hand on (see [`crate::clock`]), and a
//! thread's clocks, held locks and naming state go when it exits; what stays per
//! thread ever created is a few dozen bytes.
//!
//! Happens-before edges: program order; mutex release → next acquire; rwlock write
//! release → later acquires, read releases → later write acquires; signal/broadcast →
//! return of a wait that was in progress (joining only signals issued after the wait
//! began); sem post → later successful waits; barrier arrivals of a generation → its
//! returns; create → child start; child exit → join; futex wake that woke someone →
//! later successful futex waits on the same word; an atomic write or read-modify-write
//! of a watched variable → later atomic reads and read-modify-writes of it by other
//! threads (release/acquire, as ThreadSanitizer models C++ and C11 atomics; x86 code
//! does not say which memory order was asked for, so every atomic access counts as
//! acquire-release). Clocks advance only at releases (FastTrack), so an event's epoch
//! is one number.
//!
//! This file is the driver: the pass over events, the clocks and per-object state,
//! and the calls into the candidate shapes, which live in the submodules below, one
//! per family, each adding methods to [`Engine`]. They are submodules so that they
//! read the pass's state directly while it stays private to the engine.

use std::rc::Rc;

use ordo_trace::{Event, Kind, ThreadTable, Via};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::clock::{Epoch, VectorClock};
use crate::deadlock::{HeldLock, LockGraph, NO_NODE};
use crate::findings::{Candidate, DedupKey, FindingSet};
use crate::interleave::{Interleavings, SharedLocation};
use crate::model::{
    kind_slot, EventId, Family, FindingKind, Mode, ObjId, Rank, RawFinding, FAMILIES, NO_OBJECT,
};

// The candidate shapes (lock-order deadlocks are `crate::deadlock`, shapes over
// discovered plain accesses `crate::interleave`).
mod after_release;
mod condvar;
mod failed_try;
mod first_of_many;
mod joins;
mod overtake;
mod race;
mod sections;

use condvar::{CondState, Wake};
use first_of_many::first_of_many;
use overtake::{RecentRelease, NO_RELEASES, RECENT_RELEASES};
use race::VarState;

/// Entries of the object interning cache.
const INTERN_CACHE: usize = 256;
/// Entries of the call-site cache.
const SITE_CACHE: usize = 1024;

/// Per-thread naming state of one object, for the schedule language, stored by
/// clock slot and tagged with the thread that owns it (a slot's next owner starts
/// afresh).
#[derive(Clone, Copy, Debug)]
pub struct Naming {
    owner: u32,
    /// The object is the thread's `nth` distinct object of its family (0: never used).
    pub nth: u32,
    counts: [u32; 4],
}

impl Default for Naming {
    fn default() -> Naming {
        Naming {
            owner: u32::MAX,
            nth: 0,
            counts: [0; 4],
        }
    }
}

/// An object seen in the trace.
pub struct Object {
    /// Its address in the recorded run.
    pub addr: u64,
    /// Its family.
    pub family: Family,
    /// Naming state per clock slot.
    pub naming: Vec<Naming>,
    state: State,
}

enum State {
    None,
    Lock(Box<LockState>),
    Cond(Box<CondState>),
    Acc(VectorClock),
    Barrier(Box<BarrierState>),
    Var(Box<VarState>),
}

#[derive(Default)]
struct LockState {
    release: VectorClock,
    read_release: VectorClock,
    /// The lock-order context of taking this lock with nothing else held, per
    /// mode, +1 (0: not asked yet): most acquisitions are outermost, and this
    /// spares them the context table's hash lookup.
    outermost: [u32; 3],
    /// The last [`WINDOW`] critical sections, a ring: the newest at `head - 1`
    /// (moving an index instead of shifting saves copying records per acquire).
    recent: [Option<CsRec>; WINDOW],
    /// For each of `recent`: when it is the reacquire inside a woken cond wait, how
    /// it was woken (kept apart and boxed: rarely set, and inline it would be moved
    /// on every acquisition).
    woken: [Option<Box<Wake>>; WINDOW],
    head: usize,
    /// Per clock slot, the epoch of its thread's first critical section on this lock
    /// (0: none), and how many threads had one: for [`FindingKind::FirstOfMany`].
    firsts: VectorClock,
    first_threads: u32,
    /// The first thread's first section on this lock (shown with `*` candidates).
    first_example: Option<EventId>,
    /// Acquisitions left to skip before the window shapes are looked for again,
    /// and the current skip length: after [`WINDOW_MISSES_BEFORE_BACKOFF`] looks in
    /// a row found nothing new it doubles (up to [`MAX_WINDOW_BACKOFF`]) with each
    /// further empty look, and resets when one finds something — repeats of known
    /// candidates in long traces then cost a countdown, not a window scan.
    window_skip: u16,
    window_backoff: u16,
    window_misses: u16,
    /// The last explicit outermost release of this exclusive lock (a cond wait's
    /// release is none).
    last_release: Option<EventId>,
    /// While a section that could have run entirely between the previous holder's
    /// release and that thread's next statement is held: (that release, the
    /// section's acquisition). Offered as [`FindingKind::AfterRelease`] at the
    /// section's release.
    after_window: Option<(EventId, EventId)>,
    /// The first marked program point (`at`) the thread of `last_release` reached
    /// after it: a window bounded by a mark is offered naming it.
    mark_after_release: Option<EventId>,
    /// The thread of `last_release` made a synchronization call next.
    release_then_sync: bool,
}

/// `wait_site` of an atomicity offer keyed by its splitter's site as well.
const SPLITTER_KEYED: u64 = u64::MAX;

/// Empty window looks in a row on a lock before they start being skipped.
const WINDOW_MISSES_BEFORE_BACKOFF: u16 = 64;
/// Longest run of acquisitions of one lock the window shapes skip.
const MAX_WINDOW_BACKOFF: u16 = 255;

/// Critical sections per lock the candidate shapes look back over: a section can
/// be moved past up to three others.
const WINDOW: usize = 4;

/// A critical section, as the candidate generators need it.
#[derive(Clone, Copy, Debug)]
struct CsRec {
    acq: EventId,
    /// The acquiring thread's clock slot and own clock then.
    slot: u32,
    epoch: u32,
    mode: Mode,
    /// Whether it could have taken the lock before the previous holder's critical
    /// section without breaking any other happens-before edge.
    swappable_with_prev: bool,
    /// Bit `j`: the section `j + 1` places before it on the lock was of another
    /// thread, in a conflicting mode, and not known to this thread before it joined
    /// the lock's release — it could have taken the lock before that one.
    unknown: u8,
    /// Whether it is the reacquire inside a cond wait.
    in_wait: bool,
}

/// A mutex release: the mutex's address and the releasing thread's epoch at it.
type Release = (u64, Epoch);

#[derive(Default)]
struct BarrierState {
    gens: Vec<Generation>,
    next_id: u64,
}

struct Generation {
    id: u64,
    vc: VectorClock,
    fj: VectorClock,
    closed: bool,
}

/// Held locks beyond which membership is asked of a set rather than the stack.
const HELD_SCAN: usize = 8;

struct ThreadState {
    /// Clock slot.
    slot: u32,
    vc: VectorClock,
    /// Fork/join clock: only thread creation, join and barrier edges. Its own
    /// component is not maintained; snapshots set it from `vc`.
    fj: Rc<VectorClock>,
    held: Vec<HeldLock>,
    /// The held locks as a set, while more than [`HELD_SCAN`] are held (a thread
    /// holding thousands must not scan them at every acquisition).
    held_set: Option<FxHashSet<ObjId>>,
    distinct: [u32; FAMILIES],
    lifecycle: [u32; 2],
    /// Epoch of the mutex release inside a cond wait that has not met its
    /// `cond_wait_begin` yet (keyed by the condvar's address).
    condwait_release: Option<(u64, u32)>,
    /// The thread's last mutex release outside a cond wait: (address, epoch).
    last_release: Option<Release>,
    /// That release as an event with a name (for late-join candidates).
    last_unlock: Option<EventId>,
    /// The lock of the thread's last explicit release ([`NO_OBJECT`]: none): a
    /// marked point the thread reaches next bounds that lock's window.
    released_lock: ObjId,
    /// After a cond wait returned: (mutex address, how it was woken, the
    /// `cond_wait` event), for the reacquire that follows. Schedules name the
    /// reacquire by the `cond_wait` event (`ordo_schedule::namer`).
    woken: Option<(u64, Option<Wake>, EventId)>,
    /// After a cond wait returned, until the thread releases a mutex: (condvar, wait
    /// site). A new wait at the same site meanwhile means the wait is in a loop.
    after_wake: Option<(ObjId, u64)>,
    barrier: Option<(ObjId, u64)>,
    /// The thread's start and its own clock then (for delayed-start candidates).
    start: Option<(EventId, u32)>,
    /// Whether it took a lock yet (its first critical section is remembered).
    had_section: bool,
    /// Own clock at its latest event other than its exit: the epoch of everything
    /// of the thread that detectors may still compare (see [`FreeSlot`]).
    last_event: u32,
    /// Whether it took a lock while holding another (left lock-order edges).
    nested: bool,
    /// Its entry in `first_sections`, if it has one.
    first_section: Option<usize>,
}

/// First critical sections of threads remembered for early-exit candidates.
const MAX_FIRST_SECTIONS: usize = 4096;

impl ThreadState {
    fn new() -> ThreadState {
        ThreadState {
            slot: NO_SLOT,
            vc: VectorClock::default(),
            fj: Rc::new(VectorClock::default()),
            held: Vec::new(),
            held_set: None,
            distinct: [0; FAMILIES],
            lifecycle: [0; 2],
            condwait_release: None,
            last_release: None,
            last_unlock: None,
            released_lock: NO_OBJECT,
            woken: None,
            after_wake: None,
            barrier: None,
            start: None,
            had_section: false,
            last_event: 0,
            nested: false,
            first_section: None,
        }
    }

    /// The fork/join clock with the thread's own component filled in.
    fn fj_snapshot(&self) -> VectorClock {
        let mut fj = (*self.fj).clone();
        fj.set(self.slot, self.vc.get(self.slot));
        fj
    }

    /// The thread's current epoch.
    #[inline]
    fn epoch(&self) -> Epoch {
        Epoch {
            thread: self.slot,
            clock: self.vc.get(self.slot),
        }
    }

    /// Where `obj` is in the held stack, if held.
    #[inline]
    fn held_position(&self, obj: ObjId) -> Option<usize> {
        if let Some(set) = &self.held_set {
            if !set.contains(&obj) {
                return None;
            }
        }
        self.held.iter().rposition(|h| h.obj == obj)
    }

    /// Pushes a held lock, filled in place: building the record on the stack and
    /// moving it in makes the move's wide loads wait for the narrow stores that
    /// built it.
    #[inline(always)]
    fn push_held(&mut self, obj: ObjId, mode: Mode, acq: EventId, node: u32) {
        crate::deadlock::push_held(&mut self.held, obj, mode, &acq, self.fj.clone(), node);
        if let Some(set) = &mut self.held_set {
            set.insert(obj);
        } else if self.held.len() > HELD_SCAN {
            self.held_set = Some(self.held.iter().map(|h| h.obj).collect());
        }
    }

    #[inline]
    fn remove_held(&mut self, i: usize) {
        let obj = self.held[i].obj;
        if i + 1 == self.held.len() {
            self.held.truncate(i);
        } else {
            self.held.remove(i);
            crate::deadlock::invalidate_instances(&mut self.held, i);
        }
        if let Some(set) = &mut self.held_set {
            set.remove(&obj);
            if self.held.len() <= HELD_SCAN {
                self.held_set = None;
            }
        }
    }
}

/// No clock slot yet.
const NO_SLOT: u32 = u32::MAX;

/// The clock slot of an exited thread, until a later thread takes it over.
///
/// A thread B created by C may continue slot `s` of an exited thread A (B's own
/// clock starting at `last_own + 1`) exactly when C's clock at the creation knows
/// every event of A that left an epoch anywhere: `vc_C[s] >= last_event`. Then
/// any point whose clock reaches B's values knows B's start, so C's creation, so
/// all of A, and comparing A's recorded epochs with it stays exact; points that
/// know only part of A hold values `<= last_own`, below all of B's. C learns A by
/// a join (the fork/join case) or by any chain of synchronization: a detached
/// thread that posts a semaphore, unlocks a mutex or signals as its last act
/// before exiting hands its slot on once the creator has acquired that. A thread
/// whose last events nobody acquired keeps its slot: its epochs are still
/// concurrent with everything after, and reusing the slot would order them.
///
/// Fork/join clocks (lock-order edges, early exits) compare epochs too, and only
/// a join makes C fork/join-know A. So a takeover C learned of by other
/// synchronization is allowed only when A left no lock-order edge (it never took
/// a lock while holding one), and A's first critical section, kept for the
/// early-exit and late-join candidates, loses its slot: it is taken as not known
/// to the main thread's exit (the early exit is offered, as for a thread never
/// joined) and offers no late join (which join taught it is unknown).
#[derive(Clone, Copy, Debug)]
struct FreeSlot {
    slot: u32,
    /// The exited thread's own clock at its exit.
    last_own: u32,
    /// Its own clock at its last event before the exit.
    last_event: u32,
    /// Whether it left lock-order edges.
    nested: bool,
    /// Its entry in `first_sections`, if it has one.
    first_section: Option<usize>,
}
/// Freed slots examined for reuse when a thread starts.
const SLOT_CANDIDATES: usize = 16;

/// Counters describing a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Events processed.
    pub events: u64,
    /// Threads that had events.
    pub threads_seen: u32,
    /// Distinct objects per family.
    pub objects: [u64; FAMILIES],
    /// Critical sections (outermost lock acquisitions).
    pub critical_sections: u64,
    /// The lock-order graph's counters (contexts, search work).
    pub lock_order: crate::deadlock::GraphStats,
    /// Vector clock slots ever used: the widest a clock can get. Follows the live
    /// threads, not the threads ever created.
    pub clock_slots: u32,
    /// Threads that exited.
    pub threads_exited: u32,
    /// Candidates offered before deduplication.
    pub candidates_offered: u64,
    /// Events of threads missing from the trace's thread table.
    pub unknown_thread_events: u64,
}

/// What a finished pass hands to reporting.
pub struct PassResult {
    /// Deduplicated findings, best rank first.
    pub findings: Vec<(Rank, RawFinding)>,
    /// The object table, indexed by [`ObjId`].
    pub objects: Vec<Object>,
    /// Kernel tid of each dense thread index (indices past the thread table are
    /// threads the table did not know).
    pub tids: Vec<u32>,
    /// Counters.
    pub stats: PassStats,
    /// Locations two or more threads accessed (one writing), from discovered
    /// accesses, most promising first.
    pub shared: Vec<SharedLocation>,
    /// Discovered accesses past what the shapes keep (counted, not looked at).
    pub accesses_not_kept: u64,
}

/// The streaming analysis state.
pub struct Engine<'a> {
    /// Whether a call site lies inside glibc (its own pthread calls): such events
    /// take part in happens-before but get no schedule name, as in
    /// `ordo_schedule::EventNamer`.
    is_internal_site: Box<dyn FnMut(u64) -> bool + 'a>,
    internal_sites: FxHashMap<u64, bool>,
    table_len: usize,
    /// Live threads' state, by clock slot (a slot's next thread reuses it).
    states: Vec<ThreadState>,
    /// Per dense thread index: kernel tid, and clock slot while live ([`NO_SLOT`]
    /// before the first event and after exit). All that is kept per thread ever.
    tids: Vec<u32>,
    slot_of: Vec<u32>,
    seen: Vec<bool>,
    extra: FxHashMap<u32, u32>,
    objects: Vec<Object>,
    intern: FxHashMap<(Family, u64), ObjId>,
    /// Direct-mapped cache in front of `intern`: (address, family, id).
    intern_cache: Box<[(u64, Option<Family>, ObjId); INTERN_CACHE]>,
    /// Direct-mapped cache in front of `internal_sites`: (site, internal); site 0
    /// marks an empty entry (site 0 is never asked about).
    site_cache: Box<[(u64, bool); SITE_CACHE]>,
    index: u64,
    creates: FxHashMap<u32, (VectorClock, VectorClock)>,
    handles: FxHashMap<u64, u32>,
    exits: FxHashMap<u32, (VectorClock, VectorClock)>,
    /// Slots of exited threads.
    free_slots: Vec<FreeSlot>,
    graph: LockGraph,
    found: FindingSet,
    looped_wait_sites: FxHashSet<u64>,
    /// The last non-lock releases, a ring with its next position.
    recent_releases: [Option<RecentRelease>; RECENT_RELEASES],
    release_head: usize,
    /// Each thread's first outermost critical section, with its slot and epoch.
    first_sections: Vec<(EventId, u32, u32)>,
    /// Dense index of the main thread, when the table has it.
    main_thread: Option<u32>,
    /// Discovered accesses, for the shapes over plain loads and stores.
    interleavings: Interleavings,
    stats: PassStats,
}

impl<'a> Engine<'a> {
    /// A fresh pass over a trace with these threads, where every call site is the
    /// program's own.
    pub fn new(table: &ThreadTable) -> Engine<'a> {
        Engine::with_internal_sites(table, |_| false)
    }

    /// A fresh pass where `is_internal_site(site)` tells whether a call site lies
    /// inside glibc (asked once per distinct site).
    pub fn with_internal_sites(
        table: &ThreadTable,
        is_internal_site: impl FnMut(u64) -> bool + 'a,
    ) -> Engine<'a> {
        let n = table.len();
        let tids: Vec<u32> = table.iter().map(|t| t.tid).collect();
        Engine {
            is_internal_site: Box::new(is_internal_site),
            internal_sites: FxHashMap::default(),
            table_len: n,
            states: Vec::new(),
            slot_of: vec![NO_SLOT; n],
            tids,
            seen: vec![false; n],
            extra: FxHashMap::default(),
            objects: Vec::new(),
            intern: FxHashMap::default(),
            intern_cache: Box::new([(0, None, NO_OBJECT); INTERN_CACHE]),
            site_cache: Box::new([(0, false); SITE_CACHE]),
            index: 0,
            creates: FxHashMap::default(),
            handles: FxHashMap::default(),
            exits: FxHashMap::default(),
            free_slots: Vec::new(),
            graph: LockGraph::default(),
            found: FindingSet::default(),
            looped_wait_sites: FxHashSet::default(),
            recent_releases: [None; RECENT_RELEASES],
            release_head: NO_RELEASES,
            first_sections: Vec::new(),
            main_thread: table
                .iter()
                .next()
                .filter(|t| t.logical.0.is_empty())
                .map(|_| 0),
            interleavings: Interleavings::default(),
            stats: PassStats::default(),
        }
    }

    fn thread_index(&mut self, e: &Event) -> u32 {
        let t = if (e.thread as usize) < self.table_len && self.tids[e.thread as usize] == e.tid {
            e.thread
        } else {
            self.stats.unknown_thread_events += 1;
            match self.extra.get(&e.tid) {
                Some(&t) => t,
                None => {
                    let t = self.tids.len() as u32;
                    self.tids.push(e.tid);
                    self.slot_of.push(NO_SLOT);
                    self.seen.push(false);
                    self.extra.insert(e.tid, t);
                    t
                }
            }
        };
        if !self.seen[t as usize] {
            self.seen[t as usize] = true;
            self.stats.threads_seen += 1;
        }
        if self.slot_of[t as usize] == NO_SLOT {
            self.give_slot(t, e);
        }
        t
    }

    /// Gives a thread at its first event (or its first after it exited) a clock
    /// slot: a freed one whose last owner the creator knew entirely ([`FreeSlot`]),
    /// continuing its counter, else a fresh one.
    fn give_slot(&mut self, t: u32, e: &Event) {
        let created = if e.kind == Kind::ThreadStart {
            self.creates.get(&e.tid).map(|(vc, fj)| (vc, fj))
        } else {
            None
        };
        let reuse = created.and_then(|(vc, fj)| {
            let from = self.free_slots.len().saturating_sub(SLOT_CANDIDATES);
            (from..self.free_slots.len()).rev().find_map(|i| {
                let free = self.free_slots[i];
                let joined = fj.get(free.slot) >= free.last_own;
                (joined || (!free.nested && vc.get(free.slot) >= free.last_event))
                    .then_some((i, joined))
            })
        });
        let (slot, own) = match reuse {
            Some((i, joined)) => {
                let free = self.free_slots.swap_remove(i);
                if let Some(entry) = free.first_section.filter(|_| !joined) {
                    // No fork/join clock can say whether that section is known now.
                    if let Some(f) = self.first_sections.get_mut(entry) {
                        f.1 = NO_SLOT;
                    }
                }
                (free.slot, free.last_own + 1)
            }
            None => {
                self.stats.clock_slots += 1;
                (self.stats.clock_slots - 1, 1)
            }
        };
        let mut state = ThreadState::new();
        state.slot = slot;
        state.vc = VectorClock::for_slot(slot, own);
        if slot as usize == self.states.len() {
            self.states.push(state);
        } else {
            self.states[slot as usize] = state;
        }
        self.slot_of[t as usize] = slot;
    }

    #[inline(always)]
    fn intern(&mut self, family: Family, addr: u64) -> ObjId {
        let slot = ((addr >> 3) ^ (addr >> 13) ^ family as u64) as usize % INTERN_CACHE;
        let c = self.intern_cache[slot];
        if c.0 == addr && c.1 == Some(family) {
            return c.2;
        }
        let id = self.intern_slow(family, addr);
        self.intern_cache[slot] = (addr, Some(family), id);
        id
    }

    fn intern_slow(&mut self, family: Family, addr: u64) -> ObjId {
        if let Some(&id) = self.intern.get(&(family, addr)) {
            return id;
        }
        let id = self.objects.len() as ObjId;
        let state = match family {
            Family::Mutex | Family::Rwlock => State::Lock(Box::default()),
            Family::Cond => State::Cond(Box::default()),
            Family::Sem | Family::Futex => State::Acc(VectorClock::default()),
            Family::Barrier => State::Barrier(Box::default()),
            Family::Var => State::Var(Box::default()),
            Family::Thread | Family::Mark => State::None,
        };
        self.objects.push(Object {
            addr,
            family,
            naming: Vec::new(),
            state,
        });
        self.intern.insert((family, addr), id);
        self.stats.objects[family as usize] += 1;
        id
    }

    fn internal(&mut self, e: &Event) -> bool {
        if e.site == 0 || e.kind.is_access() {
            return false;
        }
        let slot = ((e.site >> 2) ^ (e.site >> 12)) as usize % SITE_CACHE;
        let c = self.site_cache[slot];
        if c.0 == e.site {
            return c.1;
        }
        let f = &mut self.is_internal_site;
        let internal = *self
            .internal_sites
            .entry(e.site)
            .or_insert_with(|| f(e.site));
        self.site_cache[slot] = (e.site, internal);
        internal
    }

    /// Names the event (object, occurrence) and advances the per-thread counters.
    /// Events of glibc-internal sites, of threads the table does not know, and the
    /// mutex side of a condvar wait (named through the condvar's events, see
    /// `ordo_schedule::namer`) get occurrence 0: no schedule can name them, and they
    /// do not count.
    fn name(&mut self, t: u32, e: &Event) -> EventId {
        let slot = kind_slot(e.kind);
        let mut nth = 0;
        let cond_wait_mutex = e.via == Via::CondWait && Family::of(e.kind) == Some(Family::Mutex);
        if t as usize >= self.table_len || cond_wait_mutex || self.internal(e) {
            let obj = Family::of(e.kind)
                .map(|f| self.intern(f, e.addr))
                .unwrap_or(NO_OBJECT);
            return EventId {
                thread: t,
                kind: e.kind,
                obj,
                occurrence: 0,
                nth: 0,
                site: e.site,
                ts: e.ts_ns,
                index: self.index,
                after_point: false,
                point: false,
            };
        }
        let (obj, occurrence) = match Family::of(e.kind) {
            None => {
                let th = &mut self.states[self.slot_of[t as usize] as usize];
                th.lifecycle[slot] += 1;
                (NO_OBJECT, th.lifecycle[slot])
            }
            Some(family) => {
                let obj = self.intern(family, e.addr);
                let th_slot = self.states[self.slot_of[t as usize] as usize].slot as usize;
                let naming = &mut self.objects[obj as usize].naming;
                if naming.len() <= th_slot {
                    naming.resize(th_slot + 1, Naming::default());
                }
                let n = &mut naming[th_slot];
                if n.owner != t {
                    *n = Naming {
                        owner: t,
                        ..Naming::default()
                    };
                }
                if n.nth == 0 {
                    let d = &mut self.states[self.slot_of[t as usize] as usize].distinct
                        [family as usize];
                    *d += 1;
                    n.nth = *d;
                }
                n.counts[slot] += 1;
                nth = n.nth;
                (obj, n.counts[slot])
            }
        };
        // A discovered access is named by its instruction: the thread's arrivals
        // there, which the agent counted (`result`).
        let point = e.via.is_point() && e.kind.is_access();
        EventId {
            thread: t,
            kind: e.kind,
            obj,
            occurrence: if point {
                e.result.clamp(0, u32::MAX as i64) as u32
            } else {
                occurrence
            },
            nth,
            site: e.site,
            ts: e.ts_ns,
            index: self.index,
            after_point: false,
            point,
        }
    }

    /// Processes the next event in global order; returns its identity.
    pub fn process(&mut self, e: &Event) -> EventId {
        let t = self.thread_index(e);
        if e.kind != Kind::ThreadExit {
            let th = &mut self.states[self.slot_of[t as usize] as usize];
            th.last_event = th.vc.get(th.slot);
        }
        if e.kind == Kind::Blocked {
            return self.blocked(t, e);
        }
        let id = self.name(t, e);
        self.index += 1;
        self.stats.events += 1;
        if !e.kind.is_access() && e.kind != Kind::At && id.occurrence > 0 {
            self.interleavings.sync_event(t, id);
        }
        if let Some(slot) = self.slot_of.get(t as usize) {
            if let Some(th) = self.states.get(*slot as usize) {
                if th.released_lock != NO_OBJECT {
                    self.next_after_release(t, id);
                }
            }
        }
        match e.kind {
            Kind::MutexLock => self.acquire(t, id, Mode::Exclusive, e.via),
            Kind::RwlockRdlock => self.acquire(t, id, Mode::Read, e.via),
            Kind::RwlockWrlock => self.acquire(t, id, Mode::Write, e.via),
            Kind::MutexUnlock | Kind::RwlockUnlock => self.release(t, e, id),
            Kind::MutexLockFailed | Kind::RwlockLockFailed | Kind::SemWaitFailed => {}
            // Filtered out before the pass (lib.rs): blocking orders nothing.
            Kind::MutexBlock => {}
            // Handled above (`blocked`).
            Kind::Blocked => {}
            // A marked program point (`--mark`) orders nothing; it can bound the
            // window after the thread's last release (`next_after_release`).
            Kind::At => {}
            Kind::CondWaitBegin => self.wait_begin(t, e, id),
            Kind::CondWait => self.wait_return(t, e, id),
            Kind::CondSignal | Kind::CondBroadcast => {
                self.note_release(t, id);
                self.signal(t, id)
            }
            Kind::SemPost => {
                self.note_release(t, id);
                self.publish(t, id.obj)
            }
            Kind::SemWait => self.consume(t, id.obj),
            Kind::FutexWake if e.result > 0 => self.publish(t, id.obj),
            Kind::FutexWait if e.result == 0 => self.consume(t, id.obj),
            Kind::FutexWake | Kind::FutexWait => {}
            Kind::BarrierArrive => {
                self.note_release(t, id);
                self.barrier_arrive(t, id.obj)
            }
            Kind::BarrierWait => self.barrier_return(t, id.obj),
            Kind::ThreadCreate => {
                if let Some(child) = e.child_tid() {
                    let th = &mut self.states[self.slot_of[t as usize] as usize];
                    self.creates
                        .insert(child, (th.vc.clone(), th.fj_snapshot()));
                    // A handle names one thread at a time: pthread_t values are
                    // reused only once the thread was joined or was detached and
                    // exited, so a thread whose handle is reused is never joined
                    // and its exit clocks go.
                    if let Some(old) = self.handles.insert(e.addr, child) {
                        if old != child {
                            self.exits.remove(&old);
                        }
                    }
                    th.vc.tick(th.slot);
                }
            }
            Kind::ThreadStart => {
                let th = &mut self.states[self.slot_of[t as usize] as usize];
                if let Some((vc, fj)) = self.creates.remove(&e.tid) {
                    th.vc.join(&vc);
                    Rc::make_mut(&mut th.fj).join(&fj);
                }
                th.start = Some((id, th.vc.get(th.slot)));
            }
            Kind::ThreadExit => {
                if Some(t) == self.main_thread && id.occurrence > 0 {
                    self.early_exit_candidates(id);
                }
                let th = &mut self.states[self.slot_of[t as usize] as usize];
                let fj = th.fj_snapshot();
                let free = FreeSlot {
                    slot: th.slot,
                    last_own: th.vc.get(th.slot),
                    last_event: th.last_event,
                    nested: th.nested,
                    first_section: th.first_section,
                };
                self.exits.insert(e.tid, (std::mem::take(&mut th.vc), fj));
                // Nothing of the thread is needed any more: its clocks wait for a
                // joiner, and its slot goes to a later thread.
                self.free_slots.push(free);
                th.fj = Rc::new(VectorClock::default());
                th.held = Vec::new();
                th.held_set = None;
                self.slot_of[t as usize] = NO_SLOT;
                self.stats.threads_exited += 1;
            }
            Kind::ThreadJoin => {
                if let Some((vc, fj)) = self
                    .handles
                    .get(&e.addr)
                    .and_then(|child| self.exits.remove(child))
                {
                    let th = &self.states[self.slot_of[t as usize] as usize];
                    if let Some(unlock) = th.last_unlock {
                        self.late_join_candidates(t, unlock, &vc);
                    }
                    let th = &mut self.states[self.slot_of[t as usize] as usize];
                    th.vc.join(&vc);
                    Rc::make_mut(&mut th.fj).join(&fj);
                }
            }
            Kind::Read | Kind::Write | Kind::Rmw => self.access(t, id, e.via.is_atomic()),
        }
        id
    }

    /// A thread still inside a blocking call when the recording ended (its last
    /// event). A lock it waited for is an attempted acquisition: named as the
    /// occurrence it would have been, it adds the lock-order edges from the locks
    /// the thread holds, without being held, so a deadlock the run really had is
    /// the cycle of its held locks and blocked attempts.
    fn blocked(&mut self, t: u32, e: &Event) -> EventId {
        let attempted = Kind::from_code(e.value as u16);
        let mode = match attempted {
            Some(Kind::MutexLock) => Mode::Exclusive,
            Some(Kind::RwlockRdlock) => Mode::Read,
            Some(Kind::RwlockWrlock) => Mode::Write,
            _ => {
                let id = EventId {
                    thread: t,
                    kind: e.kind,
                    obj: NO_OBJECT,
                    occurrence: 0,
                    nth: 0,
                    site: e.site,
                    ts: e.ts_ns,
                    index: self.index,
                    after_point: false,
                    point: false,
                };
                self.index += 1;
                self.stats.events += 1;
                return id;
            }
        };
        let attempt = Event {
            kind: attempted.unwrap(),
            via: Via::Plain,
            ..*e
        };
        let id = self.name(t, &attempt);
        self.index += 1;
        self.stats.events += 1;
        if id.obj == NO_OBJECT || id.occurrence == 0 {
            return id;
        }
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        if th.held_position(id.obj).is_some() {
            return id;
        }
        let node = match th.held.last() {
            Some(h) if h.node != NO_NODE => self.graph.context(h.node, id.obj, mode),
            _ => return id,
        };
        let (slot, epoch) = (th.slot, th.vc.get(th.slot));
        self.graph.acquired(&mut th.held, node, slot, id, epoch);
        id
    }

    fn acquire(&mut self, t: u32, id: EventId, mode: Mode, via: Via) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Lock(lock) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        if let Some(i) = th.held_position(id.obj) {
            // A recursive acquisition: same critical section.
            th.held[i].count += 1;
            th.vc.join(&lock.release);
            return;
        }
        let slot = th.slot;
        let epoch = th.vc.get(slot);
        let node = match th.held.last() {
            Some(h) if h.node == NO_NODE => NO_NODE, // the stack's context was not kept
            Some(h) => self.graph.context(h.node, id.obj, mode),
            None => {
                let cached = &mut lock.outermost[mode as usize];
                if *cached == 0 {
                    *cached = self.graph.context(NO_NODE, id.obj, mode).wrapping_add(1);
                }
                cached.wrapping_sub(1)
            }
        };
        if via != Via::Try {
            th.nested |= !th.held.is_empty();
            self.graph.acquired(&mut th.held, node, slot, id, epoch);
        }
        let (woken_by, named_as) = match th.woken.take() {
            Some((mutex, wake, wait))
                if via == Via::CondWait && mutex == self.objects[id.obj as usize].addr =>
            {
                (wake, wait)
            }
            _ => (None, id),
        };
        let State::Lock(lock) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let h = lock.head;
        let prev2 = lock.recent[(h + WINDOW - 2) % WINDOW];
        let prev1 = lock.recent[(h + WINDOW - 1) % WINDOW];
        let prev1_woken = lock.woken[(h + WINDOW - 1) % WINDOW].as_deref().copied();
        let window = if lock.window_skip > 0 {
            lock.window_skip -= 1;
            false
        } else {
            true
        };
        let mut unknown = 0u8;
        for j in 0..if window { WINDOW } else { 1 } {
            if let Some(p) = &lock.recent[(h + WINDOW - 1 - j) % WINDOW] {
                if p.acq.thread != t && p.mode.conflicts(mode) && th.vc.get(p.slot) < p.epoch {
                    unknown |= 1 << j;
                }
            }
        }
        let swappable = unknown & 1 != 0;
        // Could this section (an outermost one) have run whole between the
        // previous holder's release and that thread's next statement? Only if this
        // thread, before joining the lock, knows nothing the holder did after
        // releasing it.
        lock.after_window = match (prev1, lock.last_release) {
            (Some(p1), Some(rel))
                if rel.thread == p1.acq.thread
                    && rel.thread != t
                    && via != Via::CondWait
                    && th.held.is_empty()
                    && p1.mode.conflicts(mode)
                    && th.vc.get(p1.slot) <= lock.release.get(p1.slot) =>
            {
                Some((rel, id))
            }
            _ => None,
        };
        // Other objects' releases (arrivals, posts, signals) this thread does not
        // know of: its section could overtake them.
        let (mut unknown_releases, mut unknown_starts) = (0u8, 0u8);
        let releases = if self.release_head == NO_RELEASES {
            &[][..]
        } else {
            &self.recent_releases[..]
        };
        for (j, r) in releases.iter().enumerate() {
            if let Some(r) = r {
                if r.ev.thread != t && th.vc.get(r.slot) < r.epoch {
                    unknown_releases |= 1 << j;
                    if r.start.is_some_and(|(_, e)| th.vc.get(r.slot) < e) {
                        unknown_starts |= 1 << j;
                    }
                }
            }
        }
        if th.held.is_empty() && !th.had_section && via != Via::CondWait {
            th.had_section = true;
            if self.first_sections.len() < MAX_FIRST_SECTIONS {
                th.first_section = Some(self.first_sections.len());
                self.first_sections.push((id, slot, epoch));
            }
        }
        let first_of_many = if id.occurrence == 1 && via != Via::CondWait {
            first_of_many(lock, &th.vc, slot, epoch, id)
        } else {
            None
        };
        th.vc.join(&lock.release);
        if mode != Mode::Read {
            th.vc.join(&lock.read_release);
        }
        let cur = CsRec {
            acq: named_as,
            slot,
            epoch,
            mode,
            swappable_with_prev: swappable,
            unknown,
            in_wait: via == Via::CondWait,
        };
        // The two oldest of the window, for the shapes that look past the neighbour.
        let older = if window && prev1.is_some() {
            Some([lock.recent[(h + 1) % WINDOW], lock.recent[h]])
        } else {
            None
        };
        lock.recent[h] = Some(cur);
        lock.woken[h] = woken_by.map(Box::new);
        lock.head = (h + 1) % WINDOW;
        // Filled in place: building the record on the stack and moving it in makes
        // the move's wide loads wait for the narrow stores that built it.
        th.push_held(id.obj, mode, id, node);
        self.stats.critical_sections += 1;
        if via == Via::Try {
            if let Some(p1) = prev1.filter(|p| p.acq.thread != t && p.mode.conflicts(mode)) {
                self.failed_try_candidate(p1.acq, id);
            }
        }
        if let Some(p1) = prev1 {
            self.critical_section_candidates(prev2, (p1, prev1_woken), (cur, woken_by));
            if let Some([p3, p4]) = older {
                let found = self.window_candidates([Some(p1), prev2, p3, p4], cur);
                if let State::Lock(lock) = &mut self.objects[id.obj as usize].state {
                    if found {
                        lock.window_backoff = 0;
                        lock.window_misses = 0;
                    } else if lock.window_misses < WINDOW_MISSES_BEFORE_BACKOFF {
                        lock.window_misses += 1;
                    } else {
                        lock.window_backoff = (lock.window_backoff * 2 + 1).min(MAX_WINDOW_BACKOFF);
                        lock.window_skip = lock.window_backoff;
                    }
                }
            }
        }
        if let Some((others, example)) = first_of_many {
            self.offer_first_of_many(cur.acq, example, others);
        }
        if unknown_releases != 0 {
            self.overtake_candidates(cur.acq, unknown_releases, unknown_starts);
        }
    }

    fn release(&mut self, t: u32, e: &Event, id: EventId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Lock(lock) = &mut self.objects[id.obj as usize].state else {
            return;
        };
        let mode = match th.held_position(id.obj) {
            Some(i) => {
                let h = &mut th.held[i];
                h.count = if e.via == Via::CondWait {
                    0
                } else {
                    h.count - 1
                };
                if h.count > 0 {
                    return;
                }
                let mode = h.mode;
                let below = if i == 0 { NO_NODE } else { th.held[i - 1].node };
                th.remove_held(i);
                // The locks above it now sit on a shorter stack: their contexts
                // change (without an example: they were not taken there).
                let mut parent = below;
                for j in i..th.held.len() {
                    let h = &th.held[j];
                    parent = if parent == NO_NODE && j > 0 {
                        NO_NODE
                    } else {
                        self.graph.context(parent, h.obj, h.mode)
                    };
                    th.held[j].node = parent;
                }
                Some(mode)
            }
            None => None,
        };
        match mode {
            Some(Mode::Read) => lock.read_release.join(&th.vc),
            Some(_) => lock.release.assign(&th.vc),
            // Not known to be held (recording started inside it, or events were
            // lost): publish without forgetting earlier releases.
            None => lock.release.join(&th.vc),
        }
        // A section that fitted after the previous holder's release ends here.
        let after_release = lock
            .after_window
            .take()
            .filter(|(_, acq)| acq.thread == t && e.via != Via::CondWait);
        // Only a release that leaves the thread holding nothing: held there, it
        // must not keep another lock the other section needs.
        lock.last_release = match mode {
            Some(Mode::Exclusive | Mode::Write) if e.via != Via::CondWait && th.held.is_empty() => {
                Some(id)
            }
            _ => None,
        };
        let mark = lock.mark_after_release.take();
        let then_sync = std::mem::take(&mut lock.release_then_sync);
        th.released_lock = if lock.last_release.is_some() {
            id.obj
        } else {
            NO_OBJECT
        };
        if e.via == Via::CondWait {
            th.condwait_release = Some((e.addr2, th.vc.get(th.slot)));
        } else {
            th.after_wake = None;
            th.last_release = Some((e.addr, th.epoch()));
            if mode.is_some() && id.occurrence > 0 {
                th.last_unlock = Some(id);
            }
        }
        th.vc.tick(th.slot);
        if let Some(window) = after_release {
            self.after_release_candidates(window, id, mark, then_sync);
        }
    }

    fn publish(&mut self, t: u32, obj: ObjId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        if let State::Acc(acc) = &mut self.objects[obj as usize].state {
            acc.join(&th.vc);
        }
        th.vc.tick(th.slot);
    }

    fn consume(&mut self, t: u32, obj: ObjId) {
        if let State::Acc(acc) = &self.objects[obj as usize].state {
            self.states[self.slot_of[t as usize] as usize].vc.join(acc);
        }
    }

    fn barrier_arrive(&mut self, t: u32, obj: ObjId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Barrier(b) = &mut self.objects[obj as usize].state else {
            return;
        };
        if b.gens.last().is_none_or(|g| g.closed) {
            b.gens.push(Generation {
                id: b.next_id,
                vc: VectorClock::default(),
                fj: VectorClock::default(),
                closed: false,
            });
            b.next_id += 1;
            if b.gens.len() > 3 {
                b.gens.remove(0);
            }
        }
        let g = b.gens.last_mut().unwrap();
        g.vc.join(&th.vc);
        g.fj.join(&th.fj);
        g.fj.set(th.slot, g.fj.get(th.slot).max(th.vc.get(th.slot)));
        th.barrier = Some((obj, g.id));
        th.vc.tick(th.slot);
    }

    fn barrier_return(&mut self, t: u32, obj: ObjId) {
        let th = &mut self.states[self.slot_of[t as usize] as usize];
        let State::Barrier(b) = &mut self.objects[obj as usize].state else {
            return;
        };
        let Some((o, id)) = th.barrier.take() else {
            return;
        };
        if o != obj {
            return;
        }
        if let Some(g) = b.gens.iter_mut().find(|g| g.id == id) {
            g.closed = true;
            th.vc.join(&g.vc);
            Rc::make_mut(&mut th.fj).join(&g.fj);
        }
    }

    /// Offers a candidate: `events` in report order, `orderings` as (before, after).
    fn offer(
        &mut self,
        kind: FindingKind,
        events: &[EventId],
        orderings: &[(&[EventId], EventId)],
        note: &'static str,
    ) -> bool {
        self.offer_at(kind, events, orderings, note, 0)
    }

    fn offer_at(
        &mut self,
        kind: FindingKind,
        events: &[EventId],
        orderings: &[(&[EventId], EventId)],
        note: &'static str,
        wait_site: u64,
    ) -> bool {
        if events.iter().any(|e| e.occurrence == 0) {
            return false; // an event no schedule can name: nothing to enforce
        }
        self.stats.candidates_offered += 1;
        // A neighbour-only atomicity candidate is about the split thread's pair of
        // sections: which neighbour splits them does not make it another one. The
        // window shapes key it by the splitter too (`Engine::window_candidates`):
        // a harmless section that happened to be adjacent must not hide a mutation
        // further away.
        let keyed = if kind == FindingKind::Atomicity && wait_site != SPLITTER_KEYED {
            &events[..2]
        } else {
            events
        };
        let key = DedupKey::new(kind, keyed);
        let wait_site = if wait_site == SPLITTER_KEYED {
            0
        } else {
            wait_site
        };
        let rank = quick_rank(events);
        self.found.offer(
            key,
            rank,
            &Candidate {
                kind,
                events,
                orderings,
                note,
                wait_site,
            },
        )
    }

    /// Ends the pass: closes the lock-order graph into deadlock findings and drops
    /// barging candidates whose wait is seen re-checking its predicate in a loop.
    pub fn finish(mut self) -> PassResult {
        let mut pending = Vec::new();
        for o in &mut self.objects {
            if let State::Var(var) = &mut o.state {
                pending.append(&mut var.read_races);
            }
        }
        for (write, read) in pending {
            self.offer_race(write, read);
        }
        let interleavings = std::mem::take(&mut self.interleavings);
        let accesses_not_kept = interleavings.dropped;
        let (shared, proposals) = interleavings.finish();
        for p in &proposals {
            let orderings: Vec<(&[EventId], EventId)> = p
                .orderings
                .iter()
                .map(|(before, after)| (before.as_slice(), *after))
                .collect();
            self.offer(p.kind, &p.events, &orderings, "");
        }
        let cycles = self.graph.cycles();
        for f in cycles {
            self.stats.candidates_offered += 1;
            self.found.offer_finding(f);
        }
        self.stats.lock_order = self.graph.stats();
        let looped = &self.looped_wait_sites;
        let findings = self
            .found
            .into_sorted()
            .into_iter()
            .filter(|(_, f)| f.kind != FindingKind::Barging || !looped.contains(&f.wait_site))
            .collect();
        PassResult {
            findings,
            objects: self.objects,
            tids: self.tids,
            stats: self.stats,
            shared,
            accesses_not_kept,
        }
    }
}

/// The rank of a candidate whose events are exactly `events`.
fn quick_rank(events: &[EventId]) -> Rank {
    let mut threads = [u32::MAX; 8];
    let mut objects = [NO_OBJECT; 8];
    let (mut nt, mut no) = (0usize, 0usize);
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for e in events {
        if nt < 8 && !threads[..nt].contains(&e.thread) {
            threads[nt] = e.thread;
            nt += 1;
        }
        // A marked program point is a place in the code, not a shared object.
        if no < 8 && e.obj != NO_OBJECT && e.kind != Kind::At && !objects[..no].contains(&e.obj) {
            objects[no] = e.obj;
            no += 1;
        }
        lo = lo.min(e.index);
        hi = hi.max(e.index);
    }
    Rank {
        v: no as u32,
        t: nt as u32,
        distance: hi.saturating_sub(lo),
    }
}
