//! The analysis' internal vocabulary: object families, the compact identity of an
//! event (enough to name it in a schedule later), and raw findings before they are
//! symbolized.

use ordo_trace::Kind;

/// Object families, as the schedule language numbers `@K` objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Family {
    /// `mutex_*`.
    Mutex,
    /// `cond_*`.
    Cond,
    /// `rwlock_*`.
    Rwlock,
    /// `sem_*`.
    Sem,
    /// `barrier_*`.
    Barrier,
    /// `futex_*`.
    Futex,
    /// `read`, `write`, `rmw`.
    Var,
    /// `thread_create`, `thread_join` (the object is the `pthread_t` handle).
    Thread,
    /// `at`: a marked program point (`ordo record --mark`); the object is the
    /// instruction's address.
    Mark,
}

/// Number of families.
pub const FAMILIES: usize = 9;

impl Family {
    /// The family of a kind's object; `None` for `thread_start`/`thread_exit`. The
    /// mapping is `ordo_probe_common::family::of`, shared with schedules and the agent.
    pub fn of(kind: Kind) -> Option<Family> {
        use ordo_probe_common::family as f;
        Some(match f::of(kind as u16) {
            f::MUTEX => Family::Mutex,
            f::COND => Family::Cond,
            f::RWLOCK => Family::Rwlock,
            f::SEM => Family::Sem,
            f::BARRIER => Family::Barrier,
            f::FUTEX => Family::Futex,
            f::VAR => Family::Var,
            f::THREAD => Family::Thread,
            f::MARK => Family::Mark,
            _ => return None,
        })
    }

    /// Lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Mutex => "mutex",
            Family::Cond => "condvar",
            Family::Rwlock => "rwlock",
            Family::Sem => "semaphore",
            Family::Barrier => "barrier",
            Family::Futex => "futex",
            Family::Var => "variable",
            Family::Thread => "thread handle",
            Family::Mark => "program point",
        }
    }
}

/// Position of a kind among its family's kinds, for per-object occurrence counters.
pub fn kind_slot(kind: Kind) -> usize {
    match kind {
        Kind::MutexLock
        | Kind::CondWaitBegin
        | Kind::RwlockRdlock
        | Kind::SemWait
        | Kind::BarrierArrive => 0,
        Kind::FutexWait | Kind::Read | Kind::ThreadCreate | Kind::ThreadStart | Kind::At => 0,
        Kind::MutexLockFailed | Kind::CondWait | Kind::RwlockWrlock | Kind::SemWaitFailed => 1,
        Kind::BarrierWait | Kind::FutexWake | Kind::Write | Kind::ThreadJoin | Kind::ThreadExit => {
            1
        }
        Kind::MutexUnlock
        | Kind::CondSignal
        | Kind::RwlockLockFailed
        | Kind::SemPost
        | Kind::Rmw => 2,
        Kind::CondBroadcast | Kind::RwlockUnlock | Kind::MutexBlock => 3,
        // Never named as itself: the engine names it as the call it waited in.
        Kind::Blocked => 3,
    }
}

/// Index of an object in the analysis' object table.
pub type ObjId = u32;

/// `ObjId` of events without an object (`thread_start`, `thread_exit`).
pub const NO_OBJECT: ObjId = u32::MAX;

/// The thread of an ordering's gated event that means "every thread other than the
/// ordering's first": the schedule language's `*` (`A -> *:KIND(OBJ)#N`).
pub const EVERY_OTHER_THREAD: u32 = u32::MAX;

/// One event, as much as a finding needs: who, what, on which object, which
/// occurrence (for the schedule language), where in the code and in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventId {
    /// Dense thread index.
    pub thread: u32,
    /// What happened.
    pub kind: Kind,
    /// The object ([`NO_OBJECT`] for thread start/exit).
    pub obj: ObjId,
    /// 1-based occurrence of `kind` on `obj` in `thread`.
    pub occurrence: u32,
    /// `obj` is the thread's `nth` distinct object of its family (the schedule
    /// language's `@K`; 0 when unnamed). Kept here so per-thread naming state can
    /// go when the thread exits.
    pub nth: u32,
    /// Call site.
    pub site: u64,
    /// Timestamp.
    pub ts: u64,
    /// Position in the global (happens-before consistent) order, from 0.
    pub index: u64,
    /// In a candidate's ordering: the point right after this event returned (the
    /// schedule language's `T:after(KIND(OBJ)#N)`), not the event itself.
    pub after_point: bool,
    /// A discovered access (`ordo record --discover`): `obj` is the location, but
    /// schedules name it by its instruction, `T:at(function+OFFSET)#N`, with
    /// `occurrence` the thread's arrivals there.
    pub point: bool,
}

impl EventId {
    /// The point right after this event returned (`T:after(…)`).
    pub fn after_point(self) -> EventId {
        EventId {
            after_point: true,
            ..self
        }
    }
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A mutex.
    Exclusive,
    /// An rwlock held for reading.
    Read,
    /// An rwlock held for writing.
    Write,
}

impl Mode {
    /// Whether two holds of the same lock exclude each other.
    pub fn conflicts(self, other: Mode) -> bool {
        !(self == Mode::Read && other == Mode::Read)
    }
}

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingKind {
    /// A cycle in the lock-order graph.
    Deadlock,
    /// A signal that can be lost because no thread waits yet.
    LostWakeup,
    /// A thread that can take a mutex between a signal and the woken waiter's reacquire.
    Barging,
    /// Conflicting accesses not ordered by happens-before.
    Race,
    /// Another thread's critical section can fall between two of a thread's.
    Atomicity,
    /// Several critical sections of other threads, in one order, can fall between
    /// two of a thread's (an ABA: one takes what the check saw, another changes
    /// more, the first puts it back, and the act sees "the same" state).
    MultiSplit,
    /// Two threads' sections on one lock can interleave as a chain of three
    /// orderings (a, b, a, b): producer/consumer hand-offs.
    Chain,
    /// The main thread can end (its checks done) before another thread's critical
    /// section: nothing joins that thread first (a missing join, or a join of the
    /// wrong thread).
    EarlyExit,
    /// A thread's critical section can come after the joining thread's last
    /// critical section before the join: the joiner's work (destroying, reusing
    /// or checking what the section touches) overtakes a thread it joins only later.
    LateJoin,
    /// A trylock that succeeded could have come inside another thread's section
    /// and failed (a wrong fallback for a busy lock).
    FailedTry,
    /// A critical section can run before another thread even starts.
    DelayedStart,
    /// A critical section can overtake another thread's barrier arrival, semaphore
    /// post or condvar signal it does not depend on.
    Overtake,
    /// One thread's critical section can come before every other thread's first
    /// one on the lock (written with the schedule language's `*` thread).
    FirstOfMany,
    /// Two critical sections of different threads can run in the other order (the
    /// later one moved before the earlier, possibly past several others).
    Reorder,
    /// Another thread's whole critical section can fall between a thread's release
    /// of a lock and its next statement (`T:after(mutex_unlock(m)#k)`): unlock, then
    /// act on what the lock protected (free it, clear it, use a copy of it).
    AfterRelease,
    /// Another thread's access (or two of them, to two locations) can fall between
    /// two accesses of one thread, giving a result no serial order gives: R–W–R,
    /// W–R–W, R–W–W, W–W–R (AVIO), or a reader seeing half of two stores.
    Unserializable,
    /// A thread reads a location and goes on to its next access while another
    /// thread writes the location and then does more (frees, tears down) before its
    /// next synchronization call or its exit: the reader acts on a stale value.
    StaleUse,
}

impl FindingKind {
    /// Every kind, in report order.
    pub const ALL: [FindingKind; 17] = [
        FindingKind::Deadlock,
        FindingKind::LostWakeup,
        FindingKind::Barging,
        FindingKind::Race,
        FindingKind::Unserializable,
        FindingKind::StaleUse,
        FindingKind::Atomicity,
        FindingKind::MultiSplit,
        FindingKind::AfterRelease,
        FindingKind::Chain,
        FindingKind::EarlyExit,
        FindingKind::LateJoin,
        FindingKind::FailedTry,
        FindingKind::DelayedStart,
        FindingKind::Overtake,
        FindingKind::FirstOfMany,
        FindingKind::Reorder,
    ];

    /// Whether the kind names a harmful shape (a deadlock, a lost wakeup, a race, a
    /// split check-then-act, barging): among candidates of equal (v, t) these are
    /// tried before plain reorderings, whose order is only *different*.
    pub fn is_harmful(self) -> bool {
        matches!(
            self,
            FindingKind::Deadlock
                | FindingKind::LostWakeup
                | FindingKind::Race
                | FindingKind::Atomicity
                | FindingKind::MultiSplit
                | FindingKind::Barging
                | FindingKind::Unserializable
                | FindingKind::StaleUse
        )
    }

    /// Where the kind goes among candidates of equal (v, t), before distance:
    /// 0 the harmful shapes ([`FindingKind::is_harmful`]), 1 a section after a
    /// release ([`FindingKind::AfterRelease`]: the harmful shape of code after an
    /// unlock, but proposed for every pair of neighbouring sections, so it must not
    /// push a split check-then-act back), 2 the plain reorderings.
    pub fn tier(self) -> u8 {
        if self.is_harmful() {
            0
        } else if self == FindingKind::AfterRelease {
            1
        } else {
            2
        }
    }

    /// Whether a finding of this kind is *predicted to be a bug* (a lock-order
    /// cycle, a race, a wakeup a wait can miss), as opposed to an *order worth
    /// trying* (an atomicity split, barging, a reorder): those are bugs only if a
    /// replay of their schedule fails (`ordo replay` confirms or discards them).
    pub fn is_predicted_bug(self) -> bool {
        matches!(
            self,
            FindingKind::Deadlock | FindingKind::LostWakeup | FindingKind::Race
        )
    }

    /// The JSON name of the finding's class: `predicted_bug` or `order_to_try`.
    pub fn class(self) -> &'static str {
        if self.is_predicted_bug() {
            "predicted_bug"
        } else {
            "order_to_try"
        }
    }

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Deadlock => "deadlock",
            FindingKind::LostWakeup => "lost_wakeup",
            FindingKind::Barging => "barging",
            FindingKind::Race => "race",
            FindingKind::Atomicity => "atomicity",
            FindingKind::MultiSplit => "multi_split",
            FindingKind::Chain => "chain",
            FindingKind::EarlyExit => "early_exit",
            FindingKind::LateJoin => "late_join",
            FindingKind::FailedTry => "failed_try",
            FindingKind::DelayedStart => "delayed_start",
            FindingKind::Overtake => "overtake",
            FindingKind::FirstOfMany => "first_of_many",
            FindingKind::Reorder => "reorder",
            FindingKind::AfterRelease => "after_release",
            FindingKind::Unserializable => "unserializable",
            FindingKind::StaleUse => "stale_use",
        }
    }

    /// The kind with this JSON name.
    pub fn from_name(name: &str) -> Option<FindingKind> {
        FindingKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One ordering of a candidate schedule: `after` may not take effect before all of
/// `before` have happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawOrdering {
    /// Events that must happen first.
    pub before: Vec<EventId>,
    /// The gated event.
    pub after: EventId,
}

/// A finding before symbolization: the events involved and the schedule exposing it.
#[derive(Clone, Debug)]
pub struct RawFinding {
    /// What it is.
    pub kind: FindingKind,
    /// The events the report shows, in the order the message refers to them.
    pub events: Vec<EventId>,
    /// The candidate schedule.
    pub orderings: Vec<RawOrdering>,
    /// A detail for the message (e.g. "happened in this run").
    pub note: &'static str,
    /// For barging: the call site of the woken wait (0 otherwise).
    pub wait_site: u64,
}

impl RawFinding {
    /// Distinct objects named by the schedule and events, in first-mention order.
    pub fn objects(&self) -> Vec<ObjId> {
        let mut out = Vec::new();
        for e in self.all_events() {
            if e.obj != NO_OBJECT && !out.contains(&e.obj) {
                out.push(e.obj);
            }
        }
        out
    }

    /// Distinct threads, in first-mention order (`*` is not one).
    pub fn threads(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for e in self.all_events() {
            if e.thread != EVERY_OTHER_THREAD && !out.contains(&e.thread) {
                out.push(e.thread);
            }
        }
        out
    }

    /// Every event the finding names: those its message refers to, then those its
    /// schedule orders.
    pub fn all_events(&self) -> impl Iterator<Item = &EventId> {
        self.events.iter().chain(
            self.orderings
                .iter()
                .flat_map(|o| o.before.iter().chain(std::iter::once(&o.after))),
        )
    }

    /// (v, t, distance): distinct objects, distinct threads, and how many recorded
    /// events lie between the first and the last event the schedule names.
    pub fn rank(&self) -> Rank {
        let (mut lo, mut hi) = (u64::MAX, 0);
        for e in self
            .orderings
            .iter()
            .flat_map(|o| o.before.iter().chain(std::iter::once(&o.after)))
        {
            lo = lo.min(e.index);
            hi = hi.max(e.index);
        }
        // A marked program point is a place in the code, not a shared object.
        let mut objects = Vec::new();
        for e in self.all_events() {
            if e.obj != NO_OBJECT && e.kind != Kind::At && !objects.contains(&e.obj) {
                objects.push(e.obj);
            }
        }
        Rank {
            v: objects.len() as u32,
            t: self.threads().len() as u32,
            distance: hi.saturating_sub(lo),
        }
    }
}

/// A candidate's rank: smaller is simpler and likelier (variable and thread bounding,
/// then the smallest change from the recorded order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank {
    /// Distinct objects involved.
    pub v: u32,
    /// Distinct threads involved.
    pub t: u32,
    /// Recorded events between the first and last event of the schedule.
    pub distance: u64,
}
